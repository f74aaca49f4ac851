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
    #[error("{0}")]
    Input(String),
    #[error("{what} was not found in the registry (404): {reference}; check the registry, namespace, name and version tag")]
    NotFound { what: String, reference: String },
    #[error("cannot reach the registry {registry}: {reason}; is it running and reachable from this host?")]
    RegistryDown { registry: String, reason: String },
    #[error("the registry answered {reference} with an error: {reason}")]
    Registry { reference: String, reason: String },
    #[error("{reference} is not signed: no signature at tag {tag} (the OCI tag-fallback scheme); ask its author to publish it with `agentgate plugins publish --key`")]
    Unsigned { reference: String, tag: String },
    #[error("{reference} is signed by key {key_id}, which is not in the trust store; if you trust its author, run `agentgate plugins trust add PUBLIC_KEY --scope {scope}`")]
    ForeignKey {
        reference: String,
        key_id: String,
        scope: String,
    },
    #[error("{reference} is signed by key {key_id}, which is trusted for {trusted} but not for {scope}; a key signs only for the namespaces it is trusted for")]
    KeyNotTrustedForScope {
        reference: String,
        key_id: String,
        trusted: String,
        scope: String,
    },
    #[error("the signature of {reference} by key {key_id} does not verify: {reason}; the signature or what it signs was altered")]
    BadSignature {
        reference: String,
        key_id: String,
        /// A [`signature::SignatureError`], or why a signed revocation list is not the
        /// one asked for.
        #[source]
        reason: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("refused what the registry sent as {what} of {reference}: {reason}")]
    Body {
        reference: String,
        what: String,
        reason: String,
    },
    #[error("the registry {registry} took too long to send {what} of {reference}: {reason}")]
    TimedOut {
        registry: String,
        what: String,
        reference: String,
        reason: String,
    },
    #[error("the installed file of {name} was altered on this host: {path} is {actual} but plugins.lock holds {expected}; the registry is not involved. Reinstall it: `agentgate plugins remove {name}` then `agentgate plugins install {reference}`")]
    InstalledAltered {
        name: String,
        reference: String,
        path: String,
        expected: String,
        actual: String,
    },
    #[error("the revocation lists of {scope} cannot be trusted: {reason}")]
    Revocations { scope: String, reason: String },
    #[error("the bytes of {reference} do not match: {what} is {expected} but the registry served {actual}; the stored component was altered")]
    BytesMismatch {
        reference: String,
        what: String,
        expected: String,
        actual: String,
    },
    #[error("the signed statement of {reference} does not match the component: {reason}")]
    StatementMismatch { reference: String, reason: String },
    #[error("{reference} ({digest}) is revoked: {revocation}")]
    Revoked {
        reference: String,
        digest: String,
        revocation: String,
    },
    #[error("the tag of {reference} moved from {locked} (locked) to {now}; the lock holds until you run `agentgate plugins update {name}`")]
    TagMoved {
        reference: String,
        name: String,
        locked: String,
        now: String,
    },
    #[error("{0}")]
    NoConsent(String),
    #[error("{path}: {reason}")]
    File {
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
    pub fn new(home: &Path) -> MarketHome {
        MarketHome {
            root: home.to_path_buf(),
        }
    }

    pub fn lockfile(&self) -> PathBuf {
        self.root.join("plugins.lock")
    }

    pub fn trust_store(&self) -> PathBuf {
        self.root.join("trust.toml")
    }

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
