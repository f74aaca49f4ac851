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
//!
//! `http` is granted together with the hosts it may reach (`hosts` in the grants file,
//! `--grant NAME=http:HOST`); with none listed it reaches nothing. The built-in
//! `agent-claude-agent-sdk` may reach only the host of `ANTHROPIC_BASE_URL`.
//!
//! Every other capability is scoped too, by keys beside `capabilities` in the plugin's
//! entry (`process:`, `docker:`, `git:`, `github:`, `http:`) or `--grant NAME=CAP:KEY=VALUE`:
//! a plugin that is not built in reaches nothing its entry does not list; a built-in
//! keeps today's reach unless the operator narrows it. See [`super::scopes`].
//!
//! The file also says which host folders a TaskSpec may reach (`workspaces:`,
//! `mounts:`); the policy that applies them is [`super::host_paths`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::host_paths::PathGrants;
use super::scopes::{
    BadPattern, DockerEntry, GitEntry, GithubEntry, HttpEntry, ProcessEntry, Scopes,
};
use super::wasi_http::{BadHost, HostAllowlist};

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

    /// What the capability lets a plugin do.
    pub fn summary(self) -> &'static str {
        match self {
            Capability::Events => "progress, logs and agent events of the run",
            Capability::Process => "start confined processes on the host",
            Capability::Docker => "the local Docker engine",
            Capability::Git => "clone and change repositories on the host",
            Capability::Github => "the GitHub REST API with the host's token",
            Capability::Sandbox => "exec and file access in the run's sandbox",
            Capability::Http => "outbound HTTP(S) requests to the hosts of its grant",
        }
    }

    /// The WIT interface behind the capability (without version).
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

/// What linking one import gives a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportKind {
    /// A capability: the plugin must be granted it.
    Capability(Capability),
    /// Linked for every plugin; what it gives (often nothing) is the text.
    Free(&'static str),
    /// Nothing in this host provides it.
    Unknown,
}

/// One import of a component, by its full name (`wasi:http/types@0.2.3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub kind: ImportKind,
}

impl Import {
    /// What the import grants the plugin, in words.
    pub fn grants(&self) -> String {
        match self.kind {
            ImportKind::Capability(c) => format!("capability {c}: {}", c.summary()),
            ImportKind::Free(what) => what.to_string(),
            ImportKind::Unknown => "not provided by this host: the plugin is refused".into(),
        }
    }
}

/// Every import of a component, classified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imports {
    pub interfaces: Vec<Import>,
}

impl Imports {
    /// The capabilities the component imports.
    pub fn capabilities(&self) -> BTreeSet<Capability> {
        self.interfaces
            .iter()
            .filter_map(|i| match i.kind {
                ImportKind::Capability(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Imports the host does not provide at all.
    pub fn unknown(&self) -> Vec<String> {
        self.of_kind(ImportKind::Unknown)
    }

    /// The imported interfaces behind `capability`, by full name.
    pub fn of_capability(&self, capability: Capability) -> Vec<String> {
        self.of_kind(ImportKind::Capability(capability))
    }

    fn of_kind(&self, kind: ImportKind) -> Vec<String> {
        self.interfaces
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.name.clone())
            .collect()
    }
}

/// The WASI interfaces this host links for every plugin, and what each gives. What a
/// plugin can do through them is set by its store's WASI context, which grants
/// nothing (see `runtime::state`).
const FREE_WASI: &[(&str, &str)] = &[
    ("wasi:io/error", "nothing by itself: errors of streams"),
    (
        "wasi:io/poll",
        "nothing by itself: waiting on other interfaces",
    ),
    (
        "wasi:io/streams",
        "nothing by itself: streams of other interfaces",
    ),
    ("wasi:clocks/wall-clock", "reading the time of day"),
    (
        "wasi:clocks/monotonic-clock",
        "reading a monotonic clock and waiting",
    ),
    ("wasi:random/random", "random bytes"),
    ("wasi:random/insecure", "random bytes"),
    ("wasi:random/insecure-seed", "a random seed"),
    (
        "wasi:cli/environment",
        "nothing: no environment variables, no arguments",
    ),
    ("wasi:cli/exit", "ending the call (reported as a trap)"),
    ("wasi:cli/stdin", "nothing: stdin is empty"),
    ("wasi:cli/stdout", "printing to the run's plugins.log"),
    ("wasi:cli/stderr", "printing to the run's plugins.log"),
    ("wasi:cli/terminal-input", "nothing: there is no terminal"),
    ("wasi:cli/terminal-output", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stdin", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stdout", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stderr", "nothing: there is no terminal"),
    (
        "wasi:filesystem/types",
        "nothing: no directory is preopened",
    ),
    (
        "wasi:filesystem/preopens",
        "nothing: no directory is preopened",
    ),
    ("wasi:sockets/network", "nothing: sockets are denied"),
    (
        "wasi:sockets/instance-network",
        "nothing: sockets are denied",
    ),
    ("wasi:sockets/tcp", "nothing: sockets are denied"),
    (
        "wasi:sockets/tcp-create-socket",
        "nothing: sockets are denied",
    ),
    ("wasi:sockets/udp", "nothing: sockets are denied"),
    (
        "wasi:sockets/udp-create-socket",
        "nothing: sockets are denied",
    ),
    (
        "wasi:sockets/ip-name-lookup",
        "nothing: name lookups are denied",
    ),
    (
        "wasi:http/types",
        "nothing by itself: HTTP request and response types (sending needs capability http)",
    ),
];

/// Classifies one import name (e.g. `agentgate:plugin/process@0.1.0`).
pub fn classify_import(name: &str) -> ImportKind {
    let unversioned = name.split('@').next().unwrap_or(name);
    let capability = Capability::ALL
        .into_iter()
        .find(|c| c.interface() == unversioned);
    if let Some(capability) = capability {
        return ImportKind::Capability(capability);
    }
    match unversioned {
        "agentgate:plugin/types" => ImportKind::Free("nothing: shared types"),
        "agentgate:plugin/execution" => {
            ImportKind::Free("nothing by itself: handles of commands started through a capability")
        }
        n => FREE_WASI
            .iter()
            .find(|(interface, _)| *interface == n)
            .map_or(ImportKind::Unknown, |(_, what)| ImportKind::Free(what)),
    }
}

/// Classifies a component's import names.
pub fn classify_imports<'a>(names: impl IntoIterator<Item = &'a str>) -> Imports {
    Imports {
        interfaces: names
            .into_iter()
            .map(|name| Import {
                name: name.to_string(),
                kind: classify_import(name),
            })
            .collect(),
    }
}

/// One plugin's grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    #[serde(default)]
    pub capabilities: BTreeSet<Capability>,
    /// The plugin version `describe()` must report. When set, the grant holds only
    /// for that version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the component file. When set, the grant holds only for
    /// exactly that build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// With `http`: the hosts (`name` or `name:port`) requests may go to; no others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// `http: {hosts: [...]}`: the same list as `hosts`, in the form of the other
    /// scopes; read into `hosts`.
    #[serde(default, skip_serializing)]
    pub http: Option<HttpEntry>,
    /// The scopes of the other capabilities (see [`super::scopes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubEntry>,
}

impl Grant {
    /// The scopes of this entry laid over `base` (a built-in's or the narrowest).
    fn scopes(&self, base: Scopes) -> Result<Scopes, BadPattern> {
        base.with_entries(
            self.process.as_ref(),
            self.docker.as_ref(),
            self.git.as_ref(),
            self.github.as_ref(),
        )
    }
}

/// What the operator granted to plugins that are not built in, by plugin name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    #[serde(default)]
    pub plugins: BTreeMap<String, Grant>,
    /// The hosts the built-in `agent-claude-agent-sdk` may reach: the host of the
    /// operator's `ANTHROPIC_BASE_URL` (see `set_anthropic_base_url`), or
    /// `api.anthropic.com`. Not read from the grants file.
    #[serde(skip)]
    pub anthropic_hosts: Option<HostAllowlist>,
    /// What containers may ask of the Docker engine beyond the host's defaults, whichever
    /// plugin creates them.
    #[serde(default)]
    pub docker: DockerGrant,
    /// Host folders a TaskSpec's workspace (`local` path, `fresh` destPath) may be in,
    /// with what is below them (absolute, or starting with `~/`); replaces the default
    /// (below the user's home and the temporary folder). See [`super::host_paths`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<Vec<String>>,
    /// Host folders a TaskSpec's `sandbox.mounts` may bind, for every provider; as
    /// `workspaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<String>>,
    /// `workspaces` and `mounts` as paths, `~` expanded (`docker.mounts` read into
    /// `mounts`): set by [`Grants::from_file`].
    #[serde(skip)]
    pub paths: PathGrants,
    /// What the operator should change in the file, though it still works.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Checks one plugin entry as read from `origin`, and reads its `http:` form into
/// `hosts`.
fn check_entry(origin: &str, plugin: &str, grant: &mut Grant) -> Result<(), GrantsError> {
    if let Some(http) = grant.http.take() {
        grant.hosts.extend(http.hosts);
    }
    grant
        .scopes(Scopes::narrowest())
        .map_err(|source| GrantsError::BadScope {
            path: origin.to_string(),
            plugin: plugin.to_string(),
            source,
        })?;
    HostAllowlist::parse(&grant.hosts).map_err(|source| GrantsError::BadHost {
        path: origin.to_string(),
        plugin: plugin.to_string(),
        source,
    })?;
    if !grant.hosts.is_empty() && !grant.capabilities.contains(&Capability::Http) {
        return Err(GrantsError::HostsWithoutHttp {
            path: origin.to_string(),
            plugin: plugin.to_string(),
        });
    }
    Ok(())
}

/// The operator's allowances for containers. The default keeps the agent off the host's
/// network; which host folders containers may bind is the top-level `mounts:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DockerGrant {
    /// `network: host` is allowed.
    #[serde(default)]
    pub host_network: bool,
    /// The former place of the top-level `mounts:`, still read into it (with a
    /// warning): it now holds for every provider.
    #[serde(default, skip_serializing)]
    pub mounts: Vec<String>,
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
         docker: {{images: [\"node:20\"]}}  # optional scopes: process, docker, git, github, http"
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
    #[error("the grants file {path}: plugins.{plugin}.hosts: {source}")]
    BadHost {
        path: String,
        plugin: String,
        source: BadHost,
    },
    #[error("the grants file {path}: plugins.{plugin}.hosts lists hosts but capability http is not granted; add http to its capabilities or remove hosts")]
    HostsWithoutHttp { path: String, plugin: String },
    #[error("the grants file {path}: plugins.{plugin}.{source}")]
    BadScope {
        path: String,
        plugin: String,
        source: BadPattern,
    },
    #[error("--grant {flag:?}: {source}")]
    BadFlagScope { flag: String, source: BadPattern },
    #[error("plugin {plugin} is granted both in the grants file and in {origin}; remove its grants.yaml entry (an installed plugin's grant is the one consented to at install) or `agentgate plugins remove {plugin}`")]
    GrantedTwice { plugin: String, origin: String },
    #[error("ANTHROPIC_BASE_URL: {0}")]
    BadBaseUrl(BadHost),
    #[error("the grants file {path}: {key}: {entry:?} {message}; write an absolute path or one starting with ~/")]
    BadFolder {
        path: String,
        key: String,
        entry: String,
        message: String,
    },
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
        let mut grants: Grants =
            serde_yaml::from_str(&text).map_err(|source| GrantsError::Parse {
                path: path.display().to_string(),
                source,
            })?;
        grants.read_folders(path)?;
        for (plugin, grant) in &mut grants.plugins {
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
        let mut grant: Grant =
            serde_yaml::from_value(entry).map_err(|source| GrantsError::Parse {
                path: origin.to_string(),
                source,
            })?;
        check_entry(origin, name, &mut grant)?;
        self.plugins.insert(name.to_string(), grant);
        Ok(())
    }

    /// Expands `workspaces:` and `mounts:` into [`Grants::paths`]; `docker: mounts:`, the
    /// old place of `mounts:`, is read into it with a warning, so an operator's file
    /// keeps working (and still allows no more than it named).
    fn read_folders(&mut self, path: &Path) -> Result<(), GrantsError> {
        let env = |name: &str| std::env::var(name).ok();
        let expand = |key: &str, entries: &[String]| {
            entries
                .iter()
                .map(|entry| {
                    let bad = |message: String| GrantsError::BadFolder {
                        path: path.display().to_string(),
                        key: key.to_string(),
                        entry: entry.clone(),
                        message,
                    };
                    let expanded = crate::taskspec::expand_home(entry, &env).map_err(bad)?;
                    if expanded.starts_with('/') {
                        Ok(PathBuf::from(expanded))
                    } else {
                        Err(bad("is not an absolute path".into()))
                    }
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
        if !self.docker.mounts.is_empty() {
            let old = expand("docker.mounts", &self.docker.mounts)?;
            mounts.get_or_insert_with(Vec::new).extend(old);
            self.warnings.push(format!(
                "{}: `docker: mounts:` is read as the top-level `mounts:`, which now holds for \
                 every sandbox provider; move the list there (e.g. `mounts: [{}]`)",
                path.display(),
                self.docker.mounts.join(", ")
            ));
        }
        self.paths = PathGrants { workspaces, mounts };
        Ok(())
    }

    /// Lets the built-in `agent-claude-agent-sdk` reach the host of `url` (the
    /// operator's `ANTHROPIC_BASE_URL`) instead of `api.anthropic.com`.
    pub fn set_anthropic_base_url(&mut self, url: &str) -> Result<(), GrantsError> {
        self.anthropic_hosts = Some(HostAllowlist::of_url(url).map_err(GrantsError::BadBaseUrl)?);
        Ok(())
    }

    /// Adds a `NAME=cap,cap` flag from the command line; `http:HOST` grants `http`
    /// and allows `HOST`; `CAP:KEY[=VALUE]` grants `CAP` and widens its scope (see
    /// [`super::scopes`]).
    pub fn add_flag(&mut self, flag: &str) -> Result<(), GrantsError> {
        let (name, caps) = flag
            .split_once('=')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| GrantsError::BadFlag(flag.to_string()))?;
        let entry = self.plugins.entry(name.to_string()).or_default();
        for cap in caps.split(',').filter(|c| !c.is_empty()) {
            let scoped =
                Scopes::flag_item(cap, entry).map_err(|message| GrantsError::BadCapability {
                    flag: flag.to_string(),
                    message,
                })?;
            if let Some(capability) = scoped {
                entry.capabilities.insert(capability);
                entry
                    .scopes(Scopes::narrowest())
                    .map_err(|source| GrantsError::BadFlagScope {
                        flag: flag.to_string(),
                        source,
                    })?;
                continue;
            }
            if let Some(host) = cap.strip_prefix("http:") {
                HostAllowlist::parse(&[host]).map_err(|e| GrantsError::BadCapability {
                    flag: flag.to_string(),
                    message: e.to_string(),
                })?;
                entry.capabilities.insert(Capability::Http);
                entry.hosts.push(host.to_string());
                continue;
            }
            let cap = cap.parse().map_err(|message| GrantsError::BadCapability {
                flag: flag.to_string(),
                message,
            })?;
            entry.capabilities.insert(cap);
        }
        Ok(())
    }

    /// The capabilities granted to plugin `name` at `version` with component digest
    /// `digest`. A grant pinned to another version or digest grants nothing, and says
    /// which pin differs.
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
                // Checked when read; an entry that is not a host or pattern allows nothing.
                http_hosts: HostAllowlist::parse(&grant.hosts).unwrap_or_default(),
                scopes: grant.scopes(Scopes::narrowest()).unwrap_or_default(),
            },
            Some(pin) => Granted {
                capabilities: BTreeSet::new(),
                mismatch: Some(pin),
                http_hosts: HostAllowlist::default(),
                scopes: Scopes::narrowest(),
            },
        }
    }
}

/// What a grant gives one component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    pub capabilities: BTreeSet<Capability>,
    /// Set when a grant for the plugin's name exists but is pinned to another build.
    pub mismatch: Option<PinMismatch>,
    /// With `http`: where requests may go.
    pub http_hosts: HostAllowlist,
    /// How far each other capability reaches.
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

/// The built-in driver that calls the Anthropic Messages API itself.
pub const ANTHROPIC_SDK_PLUGIN: &str = "agent-claude-agent-sdk";

/// The grant of the built-in plugin `name`: its kind's fixed capabilities, and for
/// the Agent SDK driver `http` to the Anthropic API host only; their scopes are
/// today's unless the operator narrowed them in the plugin's entry (an entry whose
/// patterns do not parse, which `Grants::from_file` refuses, narrows to nothing).
pub fn builtin_granted(
    name: &str,
    kind: crate::runtime::bindings::types::PluginKind,
    grants: &Grants,
) -> Granted {
    let mut capabilities = builtin_grant(kind);
    let mut http_hosts = HostAllowlist::default();
    if name == ANTHROPIC_SDK_PLUGIN {
        capabilities.insert(Capability::Http);
        http_hosts = grants
            .anthropic_hosts
            .clone()
            .unwrap_or_else(|| HostAllowlist::parse(&["api.anthropic.com"]).expect("a valid host"));
    }
    let scopes = match grants.plugins.get(name) {
        Some(entry) => entry.scopes(Scopes::builtin()).unwrap_or_default(),
        None => Scopes::builtin(),
    };
    Granted {
        capabilities,
        mismatch: None,
        http_hosts,
        scopes,
    }
}

/// Why a plugin was refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it imports {} which {} not granted; grant with --grant {plugin}={} or in grants.yaml{}", list(.missing), if .missing.len() == 1 { "was" } else { "were" }, names(.missing), pin_text(.pin))]
    NotGranted {
        plugin: String,
        /// Each capability missing, with the interfaces the component imports for it.
        missing: Vec<(Capability, Vec<String>)>,
        /// A grant that exists but is pinned to another build.
        pin: Option<PinMismatch>,
    },
    #[error("it imports {} which this host does not provide", .0.join(", "))]
    UnknownImports(Vec<String>),
}

fn list(missing: &[(Capability, Vec<String>)]) -> String {
    missing
        .iter()
        .map(|(c, interfaces)| format!("{} ({})", interfaces.join(", "), c.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn names(missing: &[(Capability, Vec<String>)]) -> String {
    missing
        .iter()
        .map(|(c, _)| c.name())
        .collect::<Vec<_>>()
        .join(",")
}

fn pin_text(pin: &Option<PinMismatch>) -> String {
    pin.as_ref().map(|p| format!("; {p}")).unwrap_or_default()
}

/// Checks imports against a grant.
pub fn check(plugin: &str, imports: &Imports, granted: &Granted) -> Result<(), Refusal> {
    let unknown = imports.unknown();
    if !unknown.is_empty() {
        return Err(Refusal::UnknownImports(unknown));
    }
    let missing: Vec<_> = imports
        .capabilities()
        .difference(&granted.capabilities)
        .map(|c| (*c, imports.of_capability(*c)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Refusal::NotGranted {
            plugin: plugin.to_string(),
            missing,
            pin: granted.mismatch.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_imports() {
        let imports = classify_imports([
            "agentgate:plugin/types@0.1.0",
            "agentgate:plugin/execution@0.1.0",
            "agentgate:plugin/process@0.1.0",
            "wasi:cli/environment@0.2.6",
            "wasi:http/types@0.2.0",
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:keyvalue/store@0.2.0",
            "evil:x/y",
        ]);
        assert_eq!(
            imports.capabilities(),
            [Capability::Process, Capability::Http].into()
        );
        assert_eq!(imports.unknown(), ["wasi:keyvalue/store@0.2.0", "evil:x/y"]);
        // Every import is listed with what it grants, WASI included.
        assert_eq!(imports.interfaces.len(), 8);
        let environment = &imports.interfaces[3];
        assert!(
            environment.grants().contains("no environment"),
            "{environment:?}"
        );
        assert!(imports.interfaces[4]
            .grants()
            .starts_with("nothing by itself"));
        assert!(imports.interfaces[5]
            .grants()
            .starts_with("capability http"));
    }

    #[test]
    fn refusal_names_the_interface() {
        let imports = classify_imports([
            "agentgate:plugin/docker@0.1.0",
            "agentgate:plugin/events@0.1.0",
        ]);
        let granted = Granted {
            capabilities: [Capability::Events].into(),
            ..Granted::default()
        };
        let err = check("p", &imports, &granted).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("agentgate:plugin/docker@0.1.0 (docker)"),
            "{text}"
        );
        assert!(text.contains("--grant p=docker"), "{text}");
    }

    #[test]
    fn an_http_refusal_names_exactly_the_interface_imported() {
        // `types` alone needs no grant; `outgoing-handler` needs `http`.
        let types_only = classify_imports(["wasi:http/types@0.2.3"]);
        assert!(check("js", &types_only, &Granted::default()).is_ok());
        let both = classify_imports(["wasi:http/types@0.2.3", "wasi:http/outgoing-handler@0.2.3"]);
        let text = check("js", &both, &Granted::default())
            .unwrap_err()
            .to_string();
        assert!(
            text.contains(
                "it imports wasi:http/outgoing-handler@0.2.3 (http) which was not granted"
            ),
            "{text}"
        );
        assert!(!text.contains("wasi:http/types"), "{text}");
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
    fn the_operators_docker_allowances_are_read_and_misspellings_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        std::fs::write(
            &path,
            "docker:\n  hostNetwork: true\n  mounts: [~/data, /srv]\n",
        )
        .unwrap();
        let docker = Grants::from_file(&path).unwrap().docker;
        assert!(docker.host_network);
        assert_eq!(docker.mounts, ["~/data", "/srv"]);

        std::fs::write(&path, "docker:\n  host_network: true\n").unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(text.contains("unknown field `host_network`"), "{text}");
        assert!(text.contains("line 2"), "{text}");
    }

    #[test]
    fn host_folders_are_read_with_home_expanded_and_the_old_docker_list_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        let home = std::env::var("HOME").unwrap();
        std::fs::write(&path, "workspaces: [~/src, /srv/repos]\nmounts: []\n").unwrap();
        let grants = Grants::from_file(&path).unwrap();
        assert_eq!(
            grants.paths.workspaces,
            Some(vec![
                PathBuf::from(format!("{home}/src")),
                "/srv/repos".into()
            ])
        );
        assert_eq!(
            grants.paths.mounts,
            Some(vec![]),
            "an empty list allows nothing"
        );
        assert!(grants.warnings.is_empty());

        // Where the operator said nothing, the default holds.
        std::fs::write(&path, "plugins: {}\n").unwrap();
        assert_eq!(
            Grants::from_file(&path).unwrap().paths,
            PathGrants::default()
        );

        // `docker: mounts:` still allows what it names, now for every provider, and says so.
        std::fs::write(&path, "docker:\n  mounts: [~/data]\nmounts: [/srv/x]\n").unwrap();
        let grants = Grants::from_file(&path).unwrap();
        assert_eq!(
            grants.paths.mounts,
            Some(vec!["/srv/x".into(), PathBuf::from(format!("{home}/data"))])
        );
        assert!(
            grants.warnings[0].contains("`docker: mounts:` is read as the top-level `mounts:`"),
            "{:?}",
            grants.warnings
        );

        std::fs::write(&path, "workspaces: [src]\n").unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(
            text.contains("workspaces: \"src\" is not an absolute path"),
            "{text}"
        );
        std::fs::write(&path, "workspaces: /srv\n").unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(text.contains("line 1"), "{text}");
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
        let caps = |g: &Grants, v: &str, d: &str| g.granted("p", v, d).capabilities.len();
        assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 2);
        grants.plugins.get_mut("p").unwrap().version = Some("1.0.0".into());
        assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 2);
        assert_eq!(caps(&grants, "1.1.0", "sha256:aa"), 0);
        grants.plugins.get_mut("p").unwrap().digest = Some("sha256:bb".into());
        assert_eq!(caps(&grants, "1.0.0", "sha256:aa"), 0);
        assert!(grants.add_flag("p=root").is_err());
        assert!(grants.add_flag("=events").is_err());
    }

    #[test]
    fn a_pin_to_another_build_says_which_pin_differs_and_shows_both() {
        let mut grants = Grants::default();
        grants.add_flag("p=events").unwrap();
        let imports = classify_imports(["agentgate:plugin/events@0.1.0"]);
        let grant = grants.plugins.get_mut("p").unwrap();
        grant.digest = Some("sha256:bb".into());
        let text = check("p", &imports, &grants.granted("p", "1.0.0", "sha256:aa"))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("pinned to digest sha256:bb but this component's digest is sha256:aa"),
            "{text}"
        );

        grants.plugins.get_mut("p").unwrap().version = Some("2.0.0".into());
        let text = check("p", &imports, &grants.granted("p", "1.0.0", "sha256:aa"))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("pinned to version \"2.0.0\" but the plugin reports version \"1.0.0\""),
            "{text}"
        );
        // A plugin that needs nothing is not refused because of a stale pin.
        let nothing = classify_imports(["agentgate:plugin/types@0.1.0"]);
        assert!(check("p", &nothing, &grants.granted("p", "1.0.0", "sha256:aa")).is_ok());
    }

    #[test]
    fn an_http_grant_carries_its_hosts() {
        let mut grants = Grants::default();
        grants
            .add_flag("d=events,http:api.example.com,http:127.0.0.1:8080")
            .unwrap();
        let granted = grants.granted("d", "1.0.0", "sha256:aa");
        assert_eq!(
            granted.capabilities,
            [Capability::Events, Capability::Http].into()
        );
        assert_eq!(
            granted.http_hosts.entries(),
            ["api.example.com", "127.0.0.1:8080"]
        );
        let text = grants
            .add_flag("d=http:https://x.com/")
            .unwrap_err()
            .to_string();
        assert!(text.contains("a host, not a URL"), "{text}");
        // `http` alone allows no host at all.
        grants.add_flag("e=http").unwrap();
        assert!(grants
            .granted("e", "1", "sha256:aa")
            .http_hosts
            .entries()
            .is_empty());
    }

    #[test]
    fn grants_file_hosts_are_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        std::fs::write(
            &path,
            "plugins:\n  d:\n    capabilities: [http]\n    hosts: [api.example.com, \"localhost:9000\"]\n",
        )
        .unwrap();
        let grants = Grants::from_file(&path).unwrap();
        assert_eq!(
            grants.granted("d", "1", "x").http_hosts.entries(),
            ["api.example.com", "localhost:9000"]
        );
        std::fs::write(
            &path,
            "plugins:\n  d:\n    capabilities: [http]\n    hosts: [\"*.example.com\"]\n",
        )
        .unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(
            text.contains("plugins.d.hosts") && text.contains("no wildcards"),
            "{text}"
        );
        std::fs::write(
            &path,
            "plugins:\n  d:\n    capabilities: [events]\n    hosts: [api.example.com]\n",
        )
        .unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(text.contains("capability http is not granted"), "{text}");
    }

    #[test]
    fn the_builtin_sdk_driver_reaches_only_the_anthropic_host() {
        use crate::runtime::bindings::types::PluginKind;
        let mut grants = Grants::default();
        let granted = builtin_granted(ANTHROPIC_SDK_PLUGIN, PluginKind::AgentDriver, &grants);
        assert!(granted.capabilities.contains(&Capability::Http));
        assert_eq!(granted.http_hosts.entries(), ["api.anthropic.com"]);
        grants
            .set_anthropic_base_url("http://127.0.0.1:4000/v1/")
            .unwrap();
        let granted = builtin_granted(ANTHROPIC_SDK_PLUGIN, PluginKind::AgentDriver, &grants);
        assert_eq!(granted.http_hosts.entries(), ["127.0.0.1:4000"]);
        // Other built-in drivers get no http at all.
        let other = builtin_granted("agent-command", PluginKind::AgentDriver, &grants);
        assert!(!other.capabilities.contains(&Capability::Http));
        let text = grants
            .set_anthropic_base_url("api.anthropic.com")
            .unwrap_err()
            .to_string();
        assert!(text.starts_with("ANTHROPIC_BASE_URL:"), "{text}");
    }

    #[test]
    fn scopes_are_read_from_the_plugins_entry_with_todays_files_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.yaml");
        std::fs::write(
            &path,
            r#"plugins:
  my-provider:
    capabilities: [events, process, docker, git, github, http]
    process: {unsealed: false, programs: ["/usr/bin/python3"]}
    docker: {images: ["ghcr.io/acme/*"], hostNetwork: false, mounts: []}
    git: {remotes: ["https://git.example.com/team/*"], push: false}
    github: {repos: ["acme/*"], create: false, fork: false}
    http: {hosts: [api.example.com]}
  sandbox-docker:
    docker: {images: ["node:20", "python:3.12-*"]}
"#,
        )
        .unwrap();
        let grants = Grants::from_file(&path).unwrap();
        let granted = grants.granted("my-provider", "1", "sha256:aa");
        assert_eq!(granted.http_hosts.entries(), ["api.example.com"]);
        let scopes = &granted.scopes;
        assert!(!scopes.process.unsealed);
        assert_eq!(scopes.docker.mounts, Some(vec![]));
        assert!(scopes.check_image("p", "c", "ghcr.io/acme/app:1").is_ok());
        assert!(scopes.check_image("p", "c", "node:20").is_err());
        assert!(scopes
            .check_remote("p", "c", "https://git.example.com/team/x.git", false)
            .is_ok());
        assert!(scopes
            .check_remote("p", "c", "https://git.example.com/team/x.git", true)
            .is_err());
        assert!(scopes.check_repo("p", "c", "acme/x", None).is_ok());
        assert!(scopes
            .check_repo("p", "c", "acme/x", Some("create"))
            .is_err());

        // A built-in keeps today's scope, narrowed only where the operator wrote a key.
        use crate::runtime::bindings::types::PluginKind;
        let docker = builtin_granted("sandbox-docker", PluginKind::SandboxProvider, &grants);
        assert!(docker
            .scopes
            .check_image("p", "c", "python:3.12-slim")
            .is_ok());
        assert!(docker.scopes.check_image("p", "c", "busybox").is_err());
        assert!(docker.scopes.check_unsealed("p", "/bin/sh").is_ok());
        assert!(docker.scopes.docker.host_network);
        let none = builtin_granted("sandbox-none", PluginKind::SandboxProvider, &grants);
        assert_eq!(none.scopes, Scopes::builtin());

        // A third-party plugin granted a capability without a scope reaches nothing.
        std::fs::write(
            &path,
            "plugins:\n  p:\n    capabilities: [events, process, docker]\n    hosts: []\n",
        )
        .unwrap();
        let granted = Grants::from_file(&path).unwrap().granted("p", "1", "x");
        assert_eq!(granted.scopes, Scopes::narrowest());

        // Today's files: `hosts:` beside `capabilities`, the host-wide `docker:` section.
        std::fs::write(
            &path,
            "plugins:\n  d:\n    capabilities: [http]\n    hosts: [api.example.com]\n\
             docker:\n  hostNetwork: true\n  mounts: [/srv]\n",
        )
        .unwrap();
        let grants = Grants::from_file(&path).unwrap();
        assert!(grants.docker.host_network);
        assert_eq!(
            grants.granted("d", "1", "x").http_hosts.entries(),
            ["api.example.com"]
        );

        // A bad pattern or key names the plugin, the key and the line.
        std::fs::write(
            &path,
            "plugins:\n  p:\n    capabilities: [process]\n    process: {programs: [python3]}\n",
        )
        .unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(
            text.contains("plugins.p.process.programs") && text.contains("absolute path"),
            "{text}"
        );
        std::fs::write(
            &path,
            "plugins:\n  p:\n    capabilities: [docker]\n    docker: {image: [node]}\n",
        )
        .unwrap();
        let text = Grants::from_file(&path).unwrap_err().to_string();
        assert!(
            text.contains("unknown field `image`") && text.contains("line 4"),
            "{text}"
        );
    }

    #[test]
    fn grant_flags_carry_scopes() {
        let mut grants = Grants::default();
        grants
            .add_flag(
                "p=events,process:unsealed,process:program=/usr/bin/python3,docker:image=node:20,\
                 docker:image=ghcr.io/acme/*,git:remote=https://git.example.com/team/*,git:push,\
                 github:repo=acme/*,github:create=true,github:fork=false",
            )
            .unwrap();
        let granted = grants.granted("p", "1", "x");
        assert_eq!(
            granted.capabilities,
            [
                Capability::Events,
                Capability::Process,
                Capability::Docker,
                Capability::Git,
                Capability::Github
            ]
            .into()
        );
        let s = &granted.scopes;
        assert!(s.check_unsealed("p", "/usr/bin/python3").is_ok());
        assert!(s.check_image("p", "c", "docker.io/library/node:20").is_ok());
        assert!(s.check_image("p", "c", "ghcr.io/acme/x:1").is_ok());
        assert!(s
            .check_remote("p", "c", "https://git.example.com/team/r", true)
            .is_ok());
        assert!(s.check_repo("p", "c", "acme/r", Some("create")).is_ok());
        assert!(s.check_repo("p", "c", "acme/r", Some("fork")).is_err());
        // `docker` alone grants the capability and no image.
        grants.add_flag("q=docker").unwrap();
        assert!(grants
            .granted("q", "1", "x")
            .scopes
            .check_image("q", "c", "node:20")
            .is_err());
        for bad in [
            "p=docker:images=node",
            "p=git:push=maybe",
            "p=process:program=python3",
            "p=github:repo=",
        ] {
            assert!(grants.add_flag(bad).is_err(), "{bad}");
        }
        let text = grants
            .add_flag("p=docker:images=node")
            .unwrap_err()
            .to_string();
        assert!(text.contains("docker:image=GLOB"), "{text}");
    }

    #[test]
    fn an_entry_from_elsewhere_is_read_like_the_files() {
        let mut grants = Grants::default();
        let entry = serde_yaml::from_str(
            "capabilities: [http]\nhttp: {hosts: [api.example.com]}\ndigest: sha256:ab\n",
        )
        .unwrap();
        grants.add_entry("p", entry, "plugins.lock").unwrap();
        let granted = grants.granted("p", "1", "sha256:ab");
        assert_eq!(granted.capabilities, [Capability::Http].into());
        assert_eq!(granted.http_hosts.entries(), ["api.example.com"]);
        assert!(grants
            .granted("p", "1", "sha256:cd")
            .capabilities
            .is_empty());
        // One plugin, one grant; and the file's checks hold.
        let again = serde_yaml::from_str("capabilities: [events]").unwrap();
        let text = grants
            .add_entry("p", again, "plugins.lock")
            .unwrap_err()
            .to_string();
        assert!(text.contains("granted both"), "{text}");
        let hosts_without_http = serde_yaml::from_str("hosts: [x.example.com]").unwrap();
        assert!(grants
            .add_entry("q", hosts_without_http, "plugins.lock")
            .is_err());
        let unknown_key = serde_yaml::from_str("capabilities: [http]\nnetwork: all").unwrap();
        assert!(grants.add_entry("r", unknown_key, "plugins.lock").is_err());
    }
}
