//! Grants: which capabilities each plugin may import, and how far each reaches.
//!
//! Built-in plugins get fixed grants ([`builtin`], from the data in
//! `plugins/grants.yaml`); any other plugin gets only what the operator granted in
//! `$AGENTGATE_HOME/grants.yaml` or with `--grant`, by name and optionally pinned to a
//! version or digest. A plugin importing more than it was granted is refused at load
//! ([`refusal`]); what each import is, is [`imports`].
//!
//! WASI interfaces are always linked, because every toolchain imports some of them,
//! but they grant nothing: no preopened directories, no environment, no sockets.
//!
//! Every capability with a scope is scoped by the key named as it beside
//! `capabilities` in the plugin's entry (`docker: {images: [...]}`) or by `--grant
//! NAME=CAP:KEY[=VALUE]` items: a plugin that is not built in reaches nothing its entry
//! does not list; a built-in keeps today's reach unless the operator narrows it. What
//! the keys are and mean is each capability's (`capabilities::*::scope`); this module
//! reads the file, keeps each entry as written and resolves it through the capability
//! ([`crate::capabilities::scope`]). A capability may also have a host-wide section,
//! the top-level key named as it (`docker: {hostNetwork: true}`).
//!
//! The file also says which host folders a TaskSpec may reach (`workspaces:`,
//! `mounts:`); the policy that applies them is [`crate::host_paths`].

mod builtin;
mod imports;
mod market;
mod read;
mod refusal;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_yaml::Value;

use crate::capabilities::scope::{Base, EntryError, ScopeError, Scopes};
use crate::capabilities::{Capability, HostSections};
use crate::home_path::{absolute_host_path, HomePathError};
use crate::host_paths::PathGrants;

pub use builtin::{base_url_variables, builtin_granted};
pub use imports::{classify_imports, ImportKind, Imports};
pub use market::MarketSettings;
pub use refusal::{check, Refusal};

/// One plugin's grant: a `plugins:` entry of grants.yaml, or what `--grant` items
/// said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    pub capabilities: BTreeSet<Capability>,
    /// The plugin version `describe()` must report. When set, the grant holds only
    /// for that version.
    pub version: Option<String>,
    /// `sha256:<hex>` of the component file. When set, the grant holds only for
    /// exactly that build.
    pub digest: Option<String>,
    /// Each capability's scope entry as written (its keys checked), by capability.
    pub scopes: BTreeMap<Capability, Value>,
    /// Older keys written (`hosts:`) and the capability they scope, which they need.
    legacy: Vec<(String, Capability)>,
}

impl Grant {
    /// The scope of each granted capability that has one: `base` narrowed by this
    /// entry.
    fn scopes(&self, base: Base) -> Result<Scopes, ScopeError> {
        let mut scopes = Scopes::default();
        for capability in &self.capabilities {
            let Some(shape) = capability.unit().scope() else {
                continue;
            };
            let scope = shape.base(base);
            let scope = match self.scopes.get(capability) {
                Some(entry) => shape.narrowed(scope.as_ref(), entry)?,
                None => scope,
            };
            scopes.insert(capability.name(), scope);
        }
        Ok(scopes)
    }

    /// Every entry resolves, whether or not its capability is granted (yet).
    fn check_scopes(&self) -> Result<(), ScopeError> {
        for (capability, entry) in &self.scopes {
            if let Some(shape) = capability.unit().scope() {
                shape.narrowed(shape.base(Base::Narrowest).as_ref(), entry)?;
            }
        }
        Ok(())
    }
}

/// The file's `egress: {deny: [...], only: [...], nameserver: "IP:PORT"}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressGrants {
    /// What a TaskSpec's `sandbox.egress.allow` may never name, and (when set) the
    /// only destinations it may name.
    pub cap: crate::egress::OperatorCap,
    /// The one nameserver the proxy resolves allowed names with; the host's resolver
    /// configuration when unset.
    pub nameserver: Option<std::net::SocketAddr>,
}

/// What the operator granted to plugins that are not built in, by plugin name, and
/// the host-wide allowances of the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grants {
    /// Each plugin's grant, by plugin name.
    pub plugins: BTreeMap<String, Grant>,
    /// The capabilities' host-wide sections (top-level keys named as a capability),
    /// which hold whichever plugin calls them; each capability reads its own.
    pub sections: HostSections,
    /// Host folders a TaskSpec's workspace (`local` path, `fresh` destPath) may be in,
    /// with what is below them (absolute, or starting with `~/`); replaces the default
    /// (below the user's home and the temporary folder). See [`crate::host_paths`].
    pub workspaces: Option<Vec<String>>,
    /// Host folders a TaskSpec's `sandbox.mounts` may bind, for every provider; as
    /// `workspaces`.
    pub mounts: Option<Vec<String>>,
    /// `workspaces` and `mounts` as paths, `~` expanded (older spellings in a host-wide
    /// section read into `mounts`): set by [`Grants::from_file`].
    pub paths: PathGrants,
    /// `egress:`: the operator's cap on TaskSpecs' egress allowlists, and the
    /// nameserver the egress proxy asks.
    pub egress: EgressGrants,
    /// `marketplace:`: bounds on what registries may make `plugins` commands do, and
    /// how fresh revocation lists must be.
    pub marketplace: MarketSettings,
    /// The scope entry each operator base URL stands for, by its variable (see
    /// [`Grants::set_base_url`]). Not read from the grants file.
    base_urls: BTreeMap<String, Value>,
    /// What the operator should change in the file, though it still works.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    #[error("cannot read the grants file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the grants file {path} is invalid: {source}\n  \
         fix that line, or move the file away to grant nothing to plugins that are not \
         built in; the format is\n    \
         plugins:\n      \
         NAME:\n        \
         capabilities: [events, sandbox]\n        \
         version: \"1.2.0\"        # optional\n        \
         digest: \"sha256:HEX\"    # optional\n        \
         docker: {{images: [\"node:20\"]}}  # optional scopes: {scoped}",
         scoped = scoped_names()
    )]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error(
        "--grant {0:?}: expected NAME=CAPABILITY[,CAPABILITY...], e.g. my-driver=events,sandbox or my-provider=events,docker:image=node:20"
    )]
    BadFlag(String),
    #[error("--grant {flag:?}: {message}")]
    BadCapability { flag: String, message: String },
    #[error("--grant {flag:?}: {source}")]
    BadFlagItem {
        flag: String,
        #[source]
        source: EntryError,
    },
    #[error("the grants file {path}: plugins.{plugin}.{key} lists {key} but capability {capability} is not granted; add {capability} to its capabilities or remove {key}")]
    ScopeWithoutCapability {
        path: String,
        plugin: String,
        key: String,
        capability: Capability,
    },
    #[error("the grants file {path}: plugins.{plugin}.{source}")]
    BadScope {
        path: String,
        plugin: String,
        source: ScopeError,
    },
    #[error("--grant {flag:?}: {source}")]
    BadFlagScope { flag: String, source: ScopeError },
    #[error("plugin {plugin} is granted both in the grants file and in {origin}; remove its grants.yaml entry (an installed plugin's grant is the one consented to at install) or `agentgate plugins remove {plugin}`")]
    GrantedTwice { plugin: String, origin: String },
    #[error("{variable}: no built-in plugin takes this variable")]
    NoBaseUrlTaker { variable: String },
    #[error("{variable}: {source}")]
    BadBaseUrl {
        variable: String,
        #[source]
        source: EntryError,
    },
    #[error("the grants file {path}: {key}: {entry:?} {problem}")]
    BadFolder {
        path: String,
        key: String,
        entry: String,
        #[source]
        problem: HomePathError,
    },
}

/// The capabilities with a scope, for the format in messages.
fn scoped_names() -> String {
    Capability::all()
        .filter(|c| c.unit().scope().is_some())
        .map(Capability::name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Grants {
    /// Reads a grants file (YAML: `plugins: {NAME: {capabilities: [...], digest: ...}}`).
    /// A missing file grants nothing.
    pub fn from_file(path: &Path) -> Result<Grants, GrantsError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Grants::default()),
            Err(source) => {
                return Err(GrantsError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        // An empty file (or only comments) is no document: it grants nothing.
        let mut grants = serde_yaml::from_str::<Option<Grants>>(&text)
            .map_err(|source| GrantsError::Parse {
                path: path.display().to_string(),
                source,
            })?
            .unwrap_or_default();
        grants.read_folders(path)?;
        for (plugin, grant) in &grants.plugins {
            check_entry(&path.display().to_string(), plugin, grant)?;
        }
        Ok(grants)
    }

    /// Adds the grant of plugin `name` from elsewhere than the grants file (the
    /// marketplace's plugins.lock, named by `origin`), read and checked by the same
    /// code as the file's entries. A plugin granted in two places is refused: which
    /// grant holds would be a guess.
    pub fn add_entry(
        &mut self,
        name: &str,
        entry: serde_yaml::Value,
        origin: &str,
    ) -> Result<(), GrantsError> {
        if self.plugins.contains_key(name) {
            return Err(GrantsError::GrantedTwice {
                plugin: name.to_string(),
                origin: origin.to_string(),
            });
        }
        let grant: Grant = serde_yaml::from_value(entry).map_err(|source| GrantsError::Parse {
            path: origin.to_string(),
            source,
        })?;
        check_entry(origin, name, &grant)?;
        self.plugins.insert(name.to_string(), grant);
        Ok(())
    }

    /// Expands `workspaces:` and `mounts:` into [`Grants::paths`]; folders a host-wide
    /// section still names in an older place (`docker: mounts:`) are read into
    /// `mounts` with a warning, so an operator's file keeps working (and still allows
    /// no more than it named).
    fn read_folders(&mut self, path: &Path) -> Result<(), GrantsError> {
        let env = |name: &str| std::env::var(name).ok();
        let expand = |key: &str, entries: &[String]| {
            entries
                .iter()
                .map(|entry| {
                    absolute_host_path(entry, &env).map_err(|problem| GrantsError::BadFolder {
                        path: path.display().to_string(),
                        key: key.to_string(),
                        entry: entry.clone(),
                        problem,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let workspaces = self
            .workspaces
            .as_deref()
            .map(|w| expand("workspaces", w))
            .transpose()?;
        let mut mounts = self
            .mounts
            .as_deref()
            .map(|m| expand("mounts", m))
            .transpose()?;
        for (capability, section) in &self.sections {
            // Read when parsed: a section that got here reads.
            if let Ok(Some((folders, warning))) = capability.unit().read_host_section(section) {
                let old = expand(&format!("{capability}.mounts"), &folders)?;
                mounts.get_or_insert_with(Vec::new).extend(old);
                self.warnings.push(format!("{}: {warning}", path.display()));
            }
        }
        self.paths = PathGrants { workspaces, mounts };
        Ok(())
    }

    /// The URL of the operator's environment variable `variable` (one of
    /// [`base_url_variables`], e.g. `ANTHROPIC_BASE_URL`) becomes the scope of the
    /// built-in that takes it: for the Agent SDK driver, the only host it may reach.
    pub fn set_base_url(&mut self, variable: &str, url: &str) -> Result<(), GrantsError> {
        let entry = builtin::base_url_capability(variable)
            .and_then(|c| c.unit().scope())
            .and_then(|shape| shape.entry_of_url(url))
            .ok_or_else(|| GrantsError::NoBaseUrlTaker {
                variable: variable.to_string(),
            })?
            .map_err(|source| GrantsError::BadBaseUrl {
                variable: variable.to_string(),
                source,
            })?;
        self.base_urls.insert(variable.to_string(), entry);
        Ok(())
    }

    /// Adds a `NAME=cap,cap` flag from the command line; `CAP:KEY[=VALUE]` grants `CAP`
    /// and widens its scope (`http:HOST` allows `HOST`; see
    /// [`crate::capabilities::scope`]).
    pub fn add_flag(&mut self, flag: &str) -> Result<(), GrantsError> {
        let (name, caps) = flag
            .split_once('=')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| GrantsError::BadFlag(flag.to_string()))?;
        let entry = self.plugins.entry(name.to_string()).or_default();
        let bad = |message: String| GrantsError::BadCapability {
            flag: flag.to_string(),
            message,
        };
        for item in caps.split(',').filter(|c| !c.is_empty()) {
            let scoped = item.split_once(':').and_then(|(cap, rest)| {
                let capability = Capability::named(cap)?;
                Some((capability, capability.unit().scope()?, rest))
            });
            let Some((capability, shape, rest)) = scoped else {
                entry.capabilities.insert(
                    item.parse()
                        .map_err(|e: crate::capabilities::UnknownCapability| bad(e.to_string()))?,
                );
                continue;
            };
            let scope = entry.scopes.entry(capability).or_insert(Value::Null);
            shape
                .add_flag_item(rest, scope)
                .map_err(|source| GrantsError::BadFlagItem {
                    flag: flag.to_string(),
                    source,
                })?;
            entry.capabilities.insert(capability);
            entry
                .check_scopes()
                .map_err(|source| GrantsError::BadFlagScope {
                    flag: flag.to_string(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The capabilities granted to plugin `name` at `version` with component digest
    /// `digest`, with their scopes. A grant pinned to another version or digest grants
    /// nothing, and says which pin differs.
    pub fn granted(&self, name: &str, version: &str, digest: &str) -> Granted {
        let Some(grant) = self.plugins.get(name) else {
            return Granted::default();
        };
        let pin = match (&grant.version, &grant.digest) {
            (Some(pinned), _) if pinned != version => Some(PinMismatch::Version {
                pinned: pinned.clone(),
                actual: version.to_string(),
            }),
            (_, Some(pinned)) if pinned != digest => Some(PinMismatch::Digest {
                pinned: pinned.clone(),
                actual: digest.to_string(),
            }),
            _ => None,
        };
        match pin {
            None => Granted {
                capabilities: grant.capabilities.clone(),
                mismatch: None,
                // Checked when read; an entry that does not resolve allows nothing.
                scopes: grant.scopes(Base::Narrowest).unwrap_or_else(|_| {
                    Grant {
                        scopes: BTreeMap::new(),
                        ..grant.clone()
                    }
                    .scopes(Base::Narrowest)
                    .unwrap_or_default()
                }),
            },
            Some(pin) => Granted {
                capabilities: BTreeSet::new(),
                mismatch: Some(pin),
                scopes: Scopes::default(),
            },
        }
    }
}

/// Checks one plugin entry of the file at `origin` (its scopes resolve; an older key
/// is not written without its capability).
fn check_entry(origin: &str, plugin: &str, grant: &Grant) -> Result<(), GrantsError> {
    grant
        .check_scopes()
        .map_err(|source| GrantsError::BadScope {
            path: origin.to_string(),
            plugin: plugin.to_string(),
            source,
        })?;
    if let Some((key, capability)) = grant
        .legacy
        .iter()
        .find(|(_, c)| !grant.capabilities.contains(c))
    {
        return Err(GrantsError::ScopeWithoutCapability {
            path: origin.to_string(),
            plugin: plugin.to_string(),
            key: key.clone(),
            capability: *capability,
        });
    }
    Ok(())
}

/// What a grant gives one component.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Granted {
    pub capabilities: BTreeSet<Capability>,
    /// Set when a grant for the plugin's name exists but is pinned to another build.
    pub mismatch: Option<PinMismatch>,
    /// How far each granted capability with a scope reaches.
    pub scopes: Scopes,
}

/// A grant pinned to a version or digest other than the component's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinMismatch {
    #[error("the grant for it is pinned to version {pinned:?} but the plugin reports version {actual:?}; change the pin to {actual:?} or remove it")]
    Version { pinned: String, actual: String },
    #[error("the grant for it is pinned to digest {pinned} but this component's digest is {actual}; change the pin to {actual} or remove it")]
    Digest { pinned: String, actual: String },
}
