//! Capabilities and grants.
//!
//! A plugin's capabilities are exactly the host interfaces its component imports, read
//! from the component's type, never from what the plugin claims. Built-in plugins get
//! fixed grants; any other plugin gets only what the operator granted, by name and
//! optionally pinned to a digest. A plugin importing more than it was granted is
//! refused at load.
//!
//! WASI interfaces are always linked, because every toolchain imports some of them,
//! but they grant nothing: no preopened directories, no environment, no sockets.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A host interface a plugin can be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    Events,
    Process,
    Docker,
    Git,
    Github,
    Sandbox,
    /// `wasi:http/outgoing-handler`, for drivers that call a model API themselves.
    Http,
}

impl Capability {
    pub const ALL: [Capability; 7] = [
        Capability::Events,
        Capability::Process,
        Capability::Docker,
        Capability::Git,
        Capability::Github,
        Capability::Sandbox,
        Capability::Http,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Capability::Events => "events",
            Capability::Process => "process",
            Capability::Docker => "docker",
            Capability::Git => "git",
            Capability::Github => "github",
            Capability::Sandbox => "sandbox",
            Capability::Http => "http",
        }
    }

    /// The WIT interface behind the capability, for messages.
    pub fn interface(self) -> &'static str {
        match self {
            Capability::Http => "wasi:http/outgoing-handler",
            Capability::Events => "agentgate:plugin/events",
            Capability::Process => "agentgate:plugin/process",
            Capability::Docker => "agentgate:plugin/docker",
            Capability::Git => "agentgate:plugin/git",
            Capability::Github => "agentgate:plugin/github",
            Capability::Sandbox => "agentgate:plugin/sandbox",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Capability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Capability::ALL.iter().map(|c| c.name()).collect();
                format!(
                    "unknown capability {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What a component's imports say about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportedCapabilities {
    pub capabilities: BTreeSet<Capability>,
    /// Imports the host does not provide at all.
    pub unknown: Vec<String>,
}

/// Classifies a component's import names (e.g. `agentgate:plugin/process@0.1.0`).
pub fn classify_imports<'a>(names: impl IntoIterator<Item = &'a str>) -> ImportedCapabilities {
    let mut out = ImportedCapabilities::default();
    for name in names {
        let unversioned = name.split('@').next().unwrap_or(name);
        match unversioned {
            "agentgate:plugin/types" | "agentgate:plugin/execution" => {}
            "agentgate:plugin/events" => _ = out.capabilities.insert(Capability::Events),
            "agentgate:plugin/process" => _ = out.capabilities.insert(Capability::Process),
            "agentgate:plugin/docker" => _ = out.capabilities.insert(Capability::Docker),
            "agentgate:plugin/git" => _ = out.capabilities.insert(Capability::Git),
            "agentgate:plugin/github" => _ = out.capabilities.insert(Capability::Github),
            "agentgate:plugin/sandbox" => _ = out.capabilities.insert(Capability::Sandbox),
            n if n.starts_with("wasi:http/") => _ = out.capabilities.insert(Capability::Http),
            n if n.starts_with("wasi:") => {}
            _ => out.unknown.push(name.to_string()),
        }
    }
    out
}

/// One plugin's grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub capabilities: BTreeSet<Capability>,
    /// The plugin version `describe()` must report. When set, the grant holds only
    /// for that version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the component file. When set, the grant holds only for
    /// exactly that build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// What the operator granted to plugins that are not built in, by plugin name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    #[serde(default)]
    pub plugins: BTreeMap<String, Grant>,
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
         digest: \"sha256:HEX\"    # optional"
    )]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error(
        "--grant {0:?}: expected NAME=CAPABILITY[,CAPABILITY...], e.g. my-driver=events,sandbox"
    )]
    BadFlag(String),
    #[error("--grant {flag:?}: {message}")]
    BadCapability { flag: String, message: String },
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
        serde_yaml::from_str(&text).map_err(|source| GrantsError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    /// Adds a `NAME=cap,cap` flag from the command line.
    pub fn add_flag(&mut self, flag: &str) -> Result<(), GrantsError> {
        let (name, caps) = flag
            .split_once('=')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| GrantsError::BadFlag(flag.to_string()))?;
        let entry = self.plugins.entry(name.to_string()).or_default();
        for cap in caps.split(',').filter(|c| !c.is_empty()) {
            let cap = cap.parse().map_err(|message| GrantsError::BadCapability {
                flag: flag.to_string(),
                message,
            })?;
            entry.capabilities.insert(cap);
        }
        Ok(())
    }

    /// The capabilities granted to plugin `name` at `version` with component digest
    /// `digest`. A grant pinned to another version or digest grants nothing.
    pub fn granted(&self, name: &str, version: &str, digest: &str) -> BTreeSet<Capability> {
        match self.plugins.get(name) {
            Some(grant)
                if grant.version.as_deref().is_none_or(|v| v == version)
                    && grant.digest.as_deref().is_none_or(|d| d == digest) =>
            {
                grant.capabilities.clone()
            }
            _ => BTreeSet::new(),
        }
    }
}

/// The fixed grant of a built-in plugin, by its kind.
pub fn builtin_grant(kind: crate::runtime::bindings::types::PluginKind) -> BTreeSet<Capability> {
    use crate::runtime::bindings::types::PluginKind;
    match kind {
        PluginKind::WorkspaceSource => {
            [Capability::Events, Capability::Git, Capability::Github].into()
        }
        PluginKind::SandboxProvider => {
            [Capability::Events, Capability::Process, Capability::Docker].into()
        }
        PluginKind::AgentDriver => [Capability::Events, Capability::Sandbox].into(),
    }
}

/// Why a plugin was refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it imports {} which {} not granted; grant with --grant {plugin}={} or in grants.yaml", list(.missing), if .missing.len() == 1 { "was" } else { "were" }, names(.missing))]
    NotGranted {
        plugin: String,
        missing: Vec<Capability>,
    },
    #[error("it imports {} which this host does not provide", .0.join(", "))]
    UnknownImports(Vec<String>),
}

fn list(caps: &[Capability]) -> String {
    caps.iter()
        .map(|c| format!("{} ({})", c.interface(), c.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn names(caps: &[Capability]) -> String {
    caps.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
}

/// Checks imports against a grant.
pub fn check(
    plugin: &str,
    imports: &ImportedCapabilities,
    granted: &BTreeSet<Capability>,
) -> Result<(), Refusal> {
    if !imports.unknown.is_empty() {
        return Err(Refusal::UnknownImports(imports.unknown.clone()));
    }
    let missing: Vec<_> = imports.capabilities.difference(granted).copied().collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Refusal::NotGranted {
            plugin: plugin.to_string(),
            missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_imports() {
        let caps = classify_imports([
            "agentgate:plugin/types@0.1.0",
            "agentgate:plugin/execution@0.1.0",
            "agentgate:plugin/process@0.1.0",
            "wasi:cli/environment@0.2.6",
            "wasi:http/outgoing-handler@0.2.0",
            "evil:x/y",
        ]);
        assert_eq!(
            caps.capabilities,
            [Capability::Process, Capability::Http].into()
        );
        assert_eq!(caps.unknown, ["evil:x/y"]);
    }

    #[test]
    fn refusal_names_the_interface() {
        let imports = classify_imports([
            "agentgate:plugin/docker@0.1.0",
            "agentgate:plugin/events@0.1.0",
        ]);
        let err = check("p", &imports, &[Capability::Events].into()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("agentgate:plugin/docker"), "{text}");
        assert!(text.contains("--grant p=docker"), "{text}");
    }

    #[test]
    fn a_grants_file_that_does_not_parse_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        std::fs::write(
            &path,
            "plugins:\n  p:\n    capabilities: [events]\n  q:\n    capabilities: [root]\n",
        )
        .unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("line 5"), "{text}");
        assert!(text.contains("unknown variant `root`"), "{text}");
        assert!(text.contains("capabilities: [events, sandbox]"), "{text}");

        // An appended line that is not YAML at all.
        std::fs::write(&path, "plugins: {}\n}}} not yaml\n").unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(text.contains("line 2"), "{text}");
    }

    #[test]
    fn an_empty_or_missing_grants_file_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        assert_eq!(Grants::from_file(&path).unwrap(), Grants::default());
        std::fs::write(&path, "# nothing granted yet\n").unwrap();
        assert_eq!(Grants::from_file(&path).unwrap(), Grants::default());
    }

    #[test]
    fn version_and_digest_pin_a_grant() {
        let mut grants = Grants::default();
        grants.add_flag("p=events,sandbox").unwrap();
        assert_eq!(grants.granted("p", "1.0.0", "sha256:aa").len(), 2);
        grants.plugins.get_mut("p").unwrap().version = Some("1.0.0".into());
        assert_eq!(grants.granted("p", "1.0.0", "sha256:aa").len(), 2);
        assert!(grants.granted("p", "1.1.0", "sha256:aa").is_empty());
        grants.plugins.get_mut("p").unwrap().digest = Some("sha256:bb".into());
        assert!(grants.granted("p", "1.0.0", "sha256:aa").is_empty());
        assert!(grants.add_flag("p=root").is_err());
        assert!(grants.add_flag("=events").is_err());
    }
}
