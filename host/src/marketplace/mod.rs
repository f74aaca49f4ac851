//! The plugin marketplace: plugins published to OCI registries, signed by their authors,
//! installed with the operator's consent, locked to exact bytes, and withdrawn by
//! signed revocations that reach plugins already installed.
//!
//! Nothing here trusts the registry: a plugin is installed only when a key the
//! operator trusts for its namespace signed a statement naming its bytes, its name
//! and version, and every capability and scope it asks for, so no part can be swapped
//! alone. Once installed, a run loads exactly the locked bytes (checked by sha256 at
//! load) and the lockfile's grant, and refuses a revoked digest.
//!
//! Files under `$AGENTGATE_HOME`: `plugins.lock` ([`lockfile`]), `plugins/<sha256>.wasm`
//! (the installed bytes), `trust.toml` ([`trust`]) and `revocations.json`
//! ([`revocation`]).

pub(crate) mod component;
pub(crate) mod consent;
pub(crate) mod fetch;
pub(crate) mod install;
pub(crate) mod load;
pub(crate) mod lockfile;
pub mod oci;
pub(crate) mod publish;
pub(crate) mod revocation;
pub mod signature;
pub(crate) mod trust;

use std::path::{Path, PathBuf};

/// The operator's bounds on the marketplace: a section of grants.yaml, read with it.
pub use crate::runtime::grants::MarketSettings;
pub use install::{Installer, Outcome};
pub use lockfile::{LockedPlugin, Lockfile};
pub use oci::PluginRef;

/// Why a marketplace command refused or failed. Each refusal has its own variant (and
/// message) so an operator, or a script, can tell a missing plugin from a registry
/// that is down from a bad signature.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// The command's input is not usable: a malformed reference, namespace or key, a
    /// `--scopes` file that does not fit, a plugin installed from another reference.
    /// The text says which and how to fix it.
    #[error("{0}")]
    Input(String),
    /// The registry answered 404, or an OCI `MANIFEST_UNKNOWN`, `NAME_UNKNOWN` or
    /// `BLOB_UNKNOWN` error.
    #[error("{what} was not found in the registry (404): {reference}; check the registry, namespace, name and version tag")]
    NotFound {
        /// What was asked for, e.g. "the plugin" or "the revocation list".
        what: String,
        /// The reference it was asked for at.
        reference: String,
    },
    /// The connection to the registry failed or timed out.
    #[error("cannot reach the registry {registry}: {reason}; is it running and reachable from this host?")]
    RegistryDown {
        /// The registry host (and port).
        registry: String,
        /// The connection error, with its causes.
        reason: String,
    },
    /// The registry answered, but not usefully: an error status, a failed token
    /// exchange, a body that does not parse, a digest that is not sha256, an older
    /// revocation list than one verified already.
    #[error("the registry answered {reference} with an error: {reason}")]
    Registry {
        /// What was asked for: a plugin reference, repository or namespace.
        reference: String,
        /// What was wrong with the answer.
        reason: String,
    },
    /// The plugin has no signature artifact.
    #[error("{reference} is not signed: no signature at tag {tag} (the OCI tag-fallback scheme); ask its author to publish it with `agentgate plugins publish --key`")]
    Unsigned {
        /// The plugin reference.
        reference: String,
        /// The tag a signature would be at: `sha256-<hex>.sig` of the manifest digest.
        tag: String,
    },
    /// The plugin is signed by a key the trust store does not hold.
    #[error("{reference} is signed by key {key_id}, which is not in the trust store; if you trust its author, run `agentgate plugins trust add PUBLIC_KEY --scope {scope}`")]
    ForeignKey {
        /// The plugin reference.
        reference: String,
        /// The id of the key that signed it (16 hex digits).
        key_id: String,
        /// The plugin's namespace, `REGISTRY/NAMESPACE`.
        scope: String,
    },
    /// The signing key is trusted, but for other namespaces than the plugin's.
    #[error("{reference} is signed by key {key_id}, which is trusted for {trusted} but not for {scope}; a key signs only for the namespaces it is trusted for")]
    KeyNotTrustedForScope {
        /// The plugin reference.
        reference: String,
        /// The id of the key that signed it.
        key_id: String,
        /// The namespaces the key is trusted for, comma-separated.
        trusted: String,
        /// The plugin's namespace, `REGISTRY/NAMESPACE`.
        scope: String,
    },
    /// A plugin's signature or a revocation list's does not read or does not verify
    /// with the trusted key.
    #[error("the signature of {reference} by key {key_id} does not verify: {reason}; the signature or what it signs was altered")]
    BadSignature {
        /// The plugin reference, or which revocation list.
        reference: String,
        /// The id of the key, or `(unreadable)` when the signature does not read.
        key_id: String,
        /// A [`signature::SignatureError`], or why a signed revocation list is not the
        /// one asked for.
        #[source]
        reason: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A body the registry sent, or announced, is refused by its size: over its bound,
    /// or not the size its descriptor declares.
    #[error("refused what the registry sent as {what} of {reference}: {reason}")]
    Body {
        /// The plugin reference.
        reference: String,
        /// What was being fetched, e.g. "the component".
        what: String,
        /// Which size was refused, and against which bound.
        reason: String,
    },
    /// A request to the registry did not finish within `marketplace.registryTimeout`,
    /// or the registry went silent mid-body.
    #[error("the registry {registry} took too long to send {what} of {reference}: {reason}")]
    TimedOut {
        /// The registry host (and port).
        registry: String,
        /// What was being fetched.
        what: String,
        /// The plugin reference.
        reference: String,
        /// How long it took and how many bytes had arrived.
        reason: String,
    },
    /// An installed component's bytes no longer have the digest plugins.lock holds.
    #[error("the installed file of {name} was altered on this host: {path} is {actual} but plugins.lock holds {expected}; the registry is not involved. Reinstall it: `agentgate plugins remove {name}` then `agentgate plugins install {reference}`")]
    InstalledAltered {
        /// The plugin's name.
        name: String,
        /// The reference it was installed from.
        reference: String,
        /// The installed file.
        path: String,
        /// The `sha256:<hex>` plugins.lock holds.
        expected: String,
        /// The `sha256:<hex>` of the file now.
        actual: String,
    },
    /// The revocation lists held for a namespace may not be relied on: one is too
    /// old or has no readable signing time, or a trusted key's list is missing while
    /// `marketplace.requireRevocationLists` is set.
    #[error("the revocation lists of {scope} cannot be trusted: {reason}")]
    Revocations {
        /// The namespace, `REGISTRY/NAMESPACE`.
        scope: String,
        /// Which key's list and what is wrong with it.
        reason: String,
    },
    /// Downloaded bytes do not have the digest the manifest or the signed statement
    /// names.
    #[error("the bytes of {reference} do not match: {what} is {expected} but the registry served {actual}; the stored component was altered")]
    BytesMismatch {
        /// The plugin reference.
        reference: String,
        /// Which digest was expected, e.g. "the signed sha256".
        what: String,
        /// The `sha256:<hex>` expected.
        expected: String,
        /// The `sha256:<hex>` of what was served.
        actual: String,
    },
    /// The signed statement is not a plugin statement, or names another repository,
    /// plugin or version than the one fetched.
    #[error("the signed statement of {reference} does not match the component: {reason}")]
    StatementMismatch {
        /// The plugin reference.
        reference: String,
        /// What differs.
        reason: String,
    },
    /// A trusted key for the plugin's namespace revoked its component.
    #[error("{reference} ({digest}) is revoked: {revocation}")]
    Revoked {
        /// The plugin reference.
        reference: String,
        /// The revoked component's `sha256:<hex>`.
        digest: String,
        /// The revocation as a sentence: by which key, when, why, and from which list.
        revocation: String,
    },
    /// The installed plugin's tag now points at another manifest than the locked one.
    #[error("the tag of {reference} moved from {locked} (locked) to {now}; the lock holds until you run `agentgate plugins update {name}`")]
    TagMoved {
        /// The plugin reference.
        reference: String,
        /// The plugin's name.
        name: String,
        /// The manifest digest plugins.lock holds.
        locked: String,
        /// The manifest digest the tag points at now.
        now: String,
    },
    /// The operator did not consent to a grant: answered no, or could not be asked
    /// (no terminal and no `--yes`, or the answer did not read).
    #[error("{0}")]
    NoConsent(String),
    /// A file on this host could not be read, parsed or written: the lockfile, trust
    /// store or revocation cache, or a component file.
    #[error("{path}: {reason}")]
    File {
        /// The file's path.
        path: String,
        /// What went wrong with the file (an I/O or format error, or a message that
        /// says how to fix it).
        #[source]
        reason: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl MarketError {
    /// Invalid input (flags, files) is exit code 2; every other refusal 3.
    pub fn is_input(&self) -> bool {
        matches!(self, MarketError::Input(_) | MarketError::File { .. })
    }

    pub(crate) fn file(
        path: &Path,
        reason: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> MarketError {
        MarketError::File {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}

/// Where the marketplace keeps its files in a home.
#[derive(Debug, Clone)]
pub struct MarketHome {
    root: PathBuf,
}

impl MarketHome {
    /// The marketplace files of the home folder `home` (`$AGENTGATE_HOME`).
    pub fn new(home: &Path) -> MarketHome {
        MarketHome {
            root: home.to_path_buf(),
        }
    }

    /// `plugins.lock`: what is installed.
    pub fn lockfile(&self) -> PathBuf {
        self.root.join("plugins.lock")
    }

    /// `trust.toml`: the keys trusted, each for its namespaces.
    pub fn trust_store(&self) -> PathBuf {
        self.root.join("trust.toml")
    }

    /// `revocations.json`: the revocation lists fetched and verified.
    pub fn revocations(&self) -> PathBuf {
        self.root.join("revocations.json")
    }

    /// The folder of installed components, each named by its sha256.
    pub fn components(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// The installed file of the component with `digest` (`sha256:<hex>`).
    pub fn component(&self, digest: &str) -> PathBuf {
        self.components()
            .join(format!("{}.wasm", digest.trim_start_matches("sha256:")))
    }
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed over it), so
/// a crash never leaves half a lockfile or trust store.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), MarketError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| MarketError::file(dir, e))?;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| MarketError::file(dir, e))?;
    std::io::Write::write_all(&mut file, bytes).map_err(|e| MarketError::file(path, e))?;
    file.as_file()
        .sync_all()
        .map_err(|e| MarketError::file(path, e))?;
    file.persist(path)
        .map_err(|e| MarketError::file(path, e.error))?;
    Ok(())
}
