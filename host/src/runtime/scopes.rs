//! Scopes: how far each granted capability reaches, per plugin.
//!
//! A grant says which host interfaces a plugin may import; its scope says which
//! arguments each call may carry. A plugin from a marketplace is only as safe as the
//! narrowest grant the operator can give it, so every capability is scoped and a
//! plugin that is not built in starts with the narrowest scope:
//!
//! | capability | scope (grants.yaml, under `plugins: NAME:`)          | not built in       | built in  |
//! |------------|------------------------------------------------------|--------------------|-----------|
//! | `process`  | `process: {unsealed: BOOL, programs: [GLOB]}`         | sealed spawns only (`unsealed: true` alone: any program) | anything  |
//! | `docker`   | `docker: {images: [GLOB], hostNetwork: BOOL, mounts: [FOLDER]}` | no image, no host network, no bind but the run's own folders | any image; host network and binds as the host-wide `docker:` and `mounts:` say |
//! | `git`      | `git: {remotes: [GLOB], push: BOOL}`                  | no remote, no push | any       |
//! | `github`   | `github: {repos: [GLOB], create: BOOL, fork: BOOL}`   | no repository      | any       |
//! | `http`     | `hosts: [HOST]` or `http: {hosts: [HOST]}`            | no host            | see `grants` |
//!
//! A key the operator writes replaces that key's default, for built-ins too, so an
//! operator narrows `sandbox-docker` with `docker: {images: ["node:20"]}` and leaves the
//! rest as it was. A per-plugin `hostNetwork: true` never goes beyond the host-wide
//! `docker: {hostNetwork: ...}`, nor a per-plugin `mounts:` beyond the top-level
//! `mounts:` ([`super::host_paths`]): both must allow it. The run's own folders (its
//! workspace and state) are always bindable; `docker.mounts` is about any other.
//!
//! **Patterns** are globs ([`globset`]) where `*` and `?` never match `/` and `**`
//! matches across it: `ghcr.io/acme/*` allows `ghcr.io/acme/app:1` but not
//! `ghcr.io/acme/team/app:1`; `ghcr.io/acme/**` allows both.
//! - Images are compared in Docker's normal form, so `node:20`,
//!   `library/node:20` and `docker.io/library/node:20` are one image, and a pattern is
//!   normalised the same way (`node:20` allows exactly `docker.io/library/node:20`; a
//!   pattern without a tag means `:latest` unless its last part holds a wildcard).
//! - Remotes are the clone or push URL with any `user:password@` removed.
//! - Repositories are `owner/name`, compared without regard to case as GitHub does.
//! - Programs are absolute paths: an unsealed spawn's program is resolved on the host's
//!   `PATH` (never the one the plugin passes in the environment) and that file is what
//!   runs. `programs` limits unsealed spawns only: a sealed process sees nothing of the
//!   host but the system's program folders read-only and its binds, and any shell in
//!   there can start any other program, so a list would promise nothing.
//!
//! **Calls checked**: `process.spawn` (unsealed needs `unsealed`, and the program in
//! `programs` when listed); `docker.pull-image` and `docker.run-container` (the image,
//! before anything is pulled or created; `network: host` needs `hostNetwork`);
//! `git.clone` (the URL) and `git.push` (the URL, recorded or given, and `push`);
//! `github` calls naming a repository (`owner/name`; a fork needs `fork`, creating or
//! generating one needs `create`, and the new repository must be in `repos` too).
//! A call outside its scope fails with `denied` and a `denied` event naming the plugin,
//! the call, the argument and the grants.yaml line that would allow it
//! ([`ScopeDenial`]).
//!
//! On the command line the same scope is written as `--grant NAME=CAP:KEY=VALUE` items
//! (each also grants the capability): `process:unsealed`, `process:program=/usr/bin/python3`,
//! `docker:image=node:20`, `docker:hostNetwork`, `git:remote=https://git.example.com/team/*`,
//! `git:push`, `github:repo=acme/*`, `github:create`, `github:fork`. A flag item for a
//! list adds to it; a boolean is `KEY` (true) or `KEY=true|false`.

use std::fmt;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use super::grants::{Capability, Grant};

/// `process:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsealed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub programs: Option<Vec<String>>,
}

/// `docker:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DockerEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<String>>,
}

/// `git:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remotes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<bool>,
}

/// `github:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repos: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<bool>,
}

/// `http:` of a plugin's entry: the same list as the older `hosts:` beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpEntry {
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// A scope entry that is not a valid pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {pattern:?} is not a valid pattern: {message}")]
pub struct BadPattern {
    pub key: String,
    pub pattern: String,
    pub message: String,
}

/// What a list-valued scope allows.
#[derive(Debug, Clone)]
pub enum Patterns {
    /// Anything (a built-in plugin the operator did not narrow).
    Any,
    /// Only values matching one of these; none allows nothing.
    Only(Vec<Pattern>),
}

/// One glob, as the operator wrote it and as it is compared.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub written: String,
    matcher: GlobMatcher,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.written == other.written && self.matcher.glob() == other.matcher.glob()
    }
}
impl Eq for Pattern {}

impl PartialEq for Patterns {
    fn eq(&self, other: &Patterns) -> bool {
        match (self, other) {
            (Patterns::Any, Patterns::Any) => true,
            (Patterns::Only(a), Patterns::Only(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Patterns {}

/// How a kind of value is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Image,
    Remote,
    Repo,
    Program,
}

impl Patterns {
    fn parse(key: &str, kind: Kind, written: &[String]) -> Result<Patterns, BadPattern> {
        written
            .iter()
            .map(|w| {
                let compared = match kind {
                    Kind::Image => normalize_image_pattern(w),
                    Kind::Remote => without_userinfo(w),
                    Kind::Repo | Kind::Program => w.clone(),
                };
                let bad = |message: String| BadPattern {
                    key: key.to_string(),
                    pattern: w.clone(),
                    message,
                };
                if kind == Kind::Program && !w.starts_with('/') {
                    return Err(bad("a program is an absolute path".into()));
                }
                if kind == Kind::Repo && w.split('/').count() != 2 {
                    return Err(bad("a repository is OWNER/NAME".into()));
                }
                let glob = GlobBuilder::new(&compared)
                    .literal_separator(true)
                    .case_insensitive(kind == Kind::Repo)
                    .build()
                    .map_err(|e| bad(e.kind().to_string()))?;
                Ok(Pattern {
                    written: w.clone(),
                    matcher: glob.compile_matcher(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Patterns::Only)
    }

    /// Whether `value` (already in its compared form) is allowed.
    pub fn allows(&self, value: &str) -> bool {
        match self {
            Patterns::Any => true,
            Patterns::Only(patterns) => patterns.iter().any(|p| p.matcher.is_match(value)),
        }
    }

    /// The patterns as written, or `any`.
    pub fn shown(&self) -> serde_json::Value {
        match self {
            Patterns::Any => "any".into(),
            Patterns::Only(patterns) => patterns.iter().map(|p| p.written.clone()).collect(),
        }
    }

    fn text(&self) -> String {
        match self {
            Patterns::Any => "any".into(),
            Patterns::Only(p) if p.is_empty() => "none".into(),
            Patterns::Only(p) => p
                .iter()
                .map(|p| p.written.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessScope {
    /// Spawns with `sealed: none` (the host's view, as the invoking user) are allowed.
    pub unsealed: bool,
    /// The programs unsealed spawns may start (any, unless the operator lists them).
    pub programs: Patterns,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerScope {
    pub images: Patterns,
    /// `network: host` is allowed (when the host-wide `docker:` allows it too).
    pub host_network: bool,
    /// Host folders its containers may bind besides the run's own (workspace, state),
    /// within what the top-level `mounts:` allows; `None`: all that allows.
    pub mounts: Option<Vec<PathBuf>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitScope {
    pub remotes: Patterns,
    pub push: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubScope {
    pub repos: Patterns,
    pub create: bool,
    pub fork: bool,
}

/// The effective scope of every capability of one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scopes {
    pub process: ProcessScope,
    pub docker: DockerScope,
    pub git: GitScope,
    pub github: GithubScope,
}

impl Default for Scopes {
    fn default() -> Scopes {
        Scopes::narrowest()
    }
}

impl Scopes {
    /// A built-in plugin's scope before the operator narrows it: today's behaviour.
    pub fn builtin() -> Scopes {
        Scopes {
            process: ProcessScope {
                unsealed: true,
                programs: Patterns::Any,
            },
            docker: DockerScope {
                images: Patterns::Any,
                host_network: true,
                mounts: None,
            },
            git: GitScope {
                remotes: Patterns::Any,
                push: true,
            },
            github: GithubScope {
                repos: Patterns::Any,
                create: true,
                fork: true,
            },
        }
    }

    /// A plugin that is not built in, before the operator lists anything.
    pub fn narrowest() -> Scopes {
        Scopes {
            process: ProcessScope {
                unsealed: false,
                // `unsealed: true` alone allows any program; `programs` narrows it.
                programs: Patterns::Any,
            },
            docker: DockerScope {
                images: Patterns::Only(Vec::new()),
                host_network: false,
                mounts: Some(Vec::new()),
            },
            git: GitScope {
                remotes: Patterns::Only(Vec::new()),
                push: false,
            },
            github: GithubScope {
                repos: Patterns::Only(Vec::new()),
                create: false,
                fork: false,
            },
        }
    }

    /// `self` with every key the operator wrote replacing its default.
    pub fn with_entries(
        mut self,
        process: Option<&ProcessEntry>,
        docker: Option<&DockerEntry>,
        git: Option<&GitEntry>,
        github: Option<&GithubEntry>,
    ) -> Result<Scopes, BadPattern> {
        if let Some(e) = process {
            set(&mut self.process.unsealed, e.unsealed);
            if let Some(p) = &e.programs {
                self.process.programs = Patterns::parse("process.programs", Kind::Program, p)?;
            }
        }
        if let Some(e) = docker {
            set(&mut self.docker.host_network, e.host_network);
            if let Some(p) = &e.images {
                self.docker.images = Patterns::parse("docker.images", Kind::Image, p)?;
            }
            if let Some(folders) = &e.mounts {
                self.docker.mounts = Some(absolute_folders("docker.mounts", folders)?);
            }
        }
        if let Some(e) = git {
            set(&mut self.git.push, e.push);
            if let Some(p) = &e.remotes {
                self.git.remotes = Patterns::parse("git.remotes", Kind::Remote, p)?;
            }
        }
        if let Some(e) = github {
            set(&mut self.github.create, e.create);
            set(&mut self.github.fork, e.fork);
            if let Some(p) = &e.repos {
                self.github.repos = Patterns::parse("github.repos", Kind::Repo, p)?;
            }
        }
        Ok(self)
    }

    /// The scope of `capability` as JSON, for `plugins inspect`.
    pub fn shown(&self, capability: Capability) -> Option<serde_json::Value> {
        Some(match capability {
            Capability::Process => {
                // Programs matter only for unsealed spawns.
                let programs = if self.process.unsealed {
                    self.process.programs.shown()
                } else {
                    serde_json::json!([])
                };
                serde_json::json!({"unsealed": self.process.unsealed, "programs": programs})
            }
            Capability::Docker => serde_json::json!({
                "images": self.docker.images.shown(),
                "hostNetwork": self.docker.host_network,
                "mounts": match &self.docker.mounts {
                    None => serde_json::json!("any the top-level mounts: allows"),
                    Some(folders) => folders.iter().map(|f| f.display().to_string()).collect(),
                },
            }),
            Capability::Git => serde_json::json!({
                "remotes": self.git.remotes.shown(),
                "push": self.git.push,
            }),
            Capability::Github => serde_json::json!({
                "repos": self.github.repos.shown(),
                "create": self.github.create,
                "fork": self.github.fork,
            }),
            _ => return None,
        })
    }

    /// Adds one `--grant` item `CAP:KEY[=VALUE]` (see the module doc) to `entries`;
    /// returns the capability it grants, or `None` when `item` has no scope key.
    pub fn flag_item(item: &str, grant: &mut Grant) -> Result<Option<Capability>, String> {
        let Some((cap, rest)) = item.split_once(':') else {
            return Ok(None);
        };
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (rest, None),
        };
        let flag = |v: Option<&str>| -> Result<bool, String> {
            match v {
                None | Some("true") => Ok(true),
                Some("false") => Ok(false),
                Some(other) => Err(format!("{cap}:{key}={other}: expected true or false")),
            }
        };
        let listed = |v: Option<&str>| -> Result<String, String> {
            v.filter(|v| !v.is_empty())
                .map(String::from)
                .ok_or_else(|| format!("{cap}:{key} needs a value: {cap}:{key}=VALUE"))
        };
        fn push(list: &mut Option<Vec<String>>, value: String) {
            list.get_or_insert_with(Vec::new).push(value)
        }
        let capability = match (cap, key) {
            ("process", "unsealed") => {
                grant.process.get_or_insert_with(Default::default).unsealed = Some(flag(value)?);
                Capability::Process
            }
            ("process", "program") => {
                push(
                    &mut grant.process.get_or_insert_with(Default::default).programs,
                    listed(value)?,
                );
                Capability::Process
            }
            ("docker", "image") => {
                push(
                    &mut grant.docker.get_or_insert_with(Default::default).images,
                    listed(value)?,
                );
                Capability::Docker
            }
            ("docker", "hostNetwork") => {
                grant
                    .docker
                    .get_or_insert_with(Default::default)
                    .host_network = Some(flag(value)?);
                Capability::Docker
            }
            ("git", "remote") => {
                push(
                    &mut grant.git.get_or_insert_with(Default::default).remotes,
                    listed(value)?,
                );
                Capability::Git
            }
            ("git", "push") => {
                grant.git.get_or_insert_with(Default::default).push = Some(flag(value)?);
                Capability::Git
            }
            ("github", "repo") => {
                push(
                    &mut grant.github.get_or_insert_with(Default::default).repos,
                    listed(value)?,
                );
                Capability::Github
            }
            ("github", "create") => {
                grant.github.get_or_insert_with(Default::default).create = Some(flag(value)?);
                Capability::Github
            }
            ("github", "fork") => {
                grant.github.get_or_insert_with(Default::default).fork = Some(flag(value)?);
                Capability::Github
            }
            ("process" | "docker" | "git" | "github", _) => {
                return Err(format!(
                    "{cap}:{key}: unknown scope key; expected one of process:unsealed, \
                     process:program=PATH, docker:image=GLOB, docker:hostNetwork, \
                     git:remote=GLOB, git:push, github:repo=OWNER/NAME, github:create, github:fork"
                ))
            }
            _ => return Ok(None),
        };
        Ok(Some(capability))
    }
}

/// `folders` as absolute paths, `~` expanded.
fn absolute_folders(key: &str, folders: &[String]) -> Result<Vec<PathBuf>, BadPattern> {
    let env = |name: &str| std::env::var(name).ok();
    folders
        .iter()
        .map(|folder| {
            let bad = |message: String| BadPattern {
                key: key.to_string(),
                pattern: folder.clone(),
                message,
            };
            let expanded = crate::taskspec::expand_home(folder, &env).map_err(bad)?;
            if expanded.starts_with('/') {
                Ok(PathBuf::from(expanded))
            } else {
                Err(bad("write an absolute path or one starting with ~/".into()))
            }
        })
        .collect()
}

fn set(field: &mut bool, value: Option<bool>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// `reference` in Docker's normal form: registry, repository path, and a tag
/// (`:latest` when none) or digest. `node:20` is `docker.io/library/node:20`.
pub fn normalize_image(reference: &str) -> String {
    normalize(reference, true)
}

/// A pattern in the same form; `:latest` is added only when its last part has no
/// wildcard (so `ghcr.io/acme/*` stays a pattern of any tag).
fn normalize_image_pattern(pattern: &str) -> String {
    let last = pattern.rsplit('/').next().unwrap_or(pattern);
    normalize(pattern, !last.contains(['*', '?', '[', '{']))
}

fn normalize(reference: &str, add_latest: bool) -> String {
    let (name, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    let first = repo.split('/').next().unwrap_or_default();
    let has_registry = repo.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    let mut out = if has_registry {
        let rest = &repo[first.len()..];
        let registry = match first {
            "index.docker.io" | "registry-1.docker.io" => "docker.io",
            r => r,
        };
        if registry == "docker.io" && !rest[1..].contains('/') {
            format!("docker.io/library{rest}")
        } else {
            format!("{registry}{rest}")
        }
    } else if repo.contains('/') {
        format!("docker.io/{repo}")
    } else {
        format!("docker.io/library/{repo}")
    };
    match (tag, digest) {
        (Some(tag), _) => {
            out.push(':');
            out.push_str(tag);
        }
        (None, None) if add_latest => out.push_str(":latest"),
        _ => {}
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
    out
}

/// `url` without `user:password@`, which is a credential and never part of the scope.
pub fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// A call outside its plugin's scope: what the plugin gets back as `denied`, and the
/// `denied` event of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeDenial {
    pub plugin: String,
    pub capability: Capability,
    /// The call, e.g. `docker.run-container`.
    pub call: &'static str,
    /// The offending argument, e.g. `image "evil:latest" (docker.io/library/evil:latest)`.
    pub argument: String,
    /// What the scope allows, in words (`docker.images: node:20`).
    pub allowed: String,
    /// The grants.yaml line that would allow the call.
    pub allow: String,
}

impl fmt::Display for ScopeDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} by plugin {}: {} is outside its scope ({}); to allow it the operator adds to \
             $AGENTGATE_HOME/grants.yaml: {}",
            self.call, self.plugin, self.argument, self.allowed, self.allow
        )
    }
}

impl ScopeDenial {
    fn new(
        plugin: &str,
        capability: Capability,
        call: &'static str,
        argument: String,
        allowed: String,
        key_value: String,
    ) -> ScopeDenial {
        ScopeDenial {
            plugin: plugin.to_string(),
            capability,
            call,
            argument,
            allowed,
            allow: format!("plugins: {{{plugin}: {{{capability}: {{{key_value}}}}}}}"),
        }
    }
}

/// The checks each capability makes against a [`Scopes`]; `plugin` names the caller.
impl Scopes {
    /// An image for `call` (`docker.pull-image`, `docker.run-container`).
    pub fn check_image(
        &self,
        plugin: &str,
        call: &'static str,
        image: &str,
    ) -> Result<(), ScopeDenial> {
        let normal = normalize_image(image);
        if self.docker.images.allows(&normal) {
            return Ok(());
        }
        Err(ScopeDenial::new(
            plugin,
            Capability::Docker,
            call,
            format!("image {image:?} ({normal})"),
            format!("docker.images: {}", self.docker.images.text()),
            format!("images: [{image:?}]"),
        ))
    }

    /// A bind of the host folder `source` (resolved: `resolved`) that is not one of the
    /// run's own folders.
    pub fn check_mount(
        &self,
        plugin: &str,
        source: &str,
        resolved: &Path,
    ) -> Result<(), ScopeDenial> {
        let Some(folders) = &self.docker.mounts else {
            return Ok(());
        };
        let within = |folder: &PathBuf| {
            let folder = folder.canonicalize().unwrap_or_else(|_| folder.clone());
            resolved.starts_with(folder)
        };
        if folders.iter().any(within) {
            return Ok(());
        }
        let listed = if folders.is_empty() {
            "none".to_string()
        } else {
            folders
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(ScopeDenial::new(
            plugin,
            Capability::Docker,
            "docker.run-container",
            format!("mount source {source:?} ({})", resolved.display()),
            format!("docker.mounts: {listed}"),
            format!("mounts: [{:?}]", resolved.display().to_string()),
        ))
    }

    pub fn check_host_network(&self, plugin: &str) -> Result<(), ScopeDenial> {
        if self.docker.host_network {
            return Ok(());
        }
        Err(ScopeDenial::new(
            plugin,
            Capability::Docker,
            "docker.run-container",
            "network \"host\"".into(),
            "docker.hostNetwork: false".into(),
            "hostNetwork: true".into(),
        ))
    }

    /// An unsealed spawn of `program` (resolved on the host's PATH when it could be).
    pub fn check_unsealed(&self, plugin: &str, program: &str) -> Result<(), ScopeDenial> {
        let denial = |allowed: String, key_value: String| {
            Err(ScopeDenial::new(
                plugin,
                Capability::Process,
                "process.spawn",
                format!("unsealed program {program:?}"),
                allowed,
                key_value,
            ))
        };
        if !self.process.unsealed {
            let programs = match &self.process.programs {
                Patterns::Any => String::new(),
                _ => format!(", programs: [{program:?}]"),
            };
            return denial(
                "process.unsealed: false; only sealed spawns".into(),
                format!("unsealed: true{programs}"),
            );
        }
        if !self.process.programs.allows(program) {
            return denial(
                format!("process.programs: {}", self.process.programs.text()),
                format!("unsealed: true, programs: [{program:?}]"),
            );
        }
        Ok(())
    }

    /// A clone from, or (with `push`) a push to, `url`.
    pub fn check_remote(
        &self,
        plugin: &str,
        call: &'static str,
        url: &str,
        push: bool,
    ) -> Result<(), ScopeDenial> {
        let shown = without_userinfo(url);
        let in_remotes = self.git.remotes.allows(&shown);
        if in_remotes && (!push || self.git.push) {
            return Ok(());
        }
        let remotes = if in_remotes {
            String::new()
        } else {
            format!("remotes: [{shown:?}]")
        };
        let key_value = match (push && !self.git.push, remotes.is_empty()) {
            (true, true) => "push: true".to_string(),
            (true, false) => format!("{remotes}, push: true"),
            (false, _) => remotes,
        };
        Err(ScopeDenial::new(
            plugin,
            Capability::Git,
            call,
            format!("remote {shown:?}"),
            format!(
                "git.remotes: {}; git.push: {}",
                self.git.remotes.text(),
                self.git.push
            ),
            key_value,
        ))
    }

    /// A GitHub call on `owner/name`; `needs` is `create` or `fork` when the call
    /// makes a repository.
    pub fn check_repo(
        &self,
        plugin: &str,
        call: &'static str,
        full_name: &str,
        needs: Option<&'static str>,
    ) -> Result<(), ScopeDenial> {
        let in_repos = self.github.repos.allows(full_name);
        let permitted = match needs {
            Some("create") => self.github.create,
            Some("fork") => self.github.fork,
            _ => true,
        };
        if in_repos && permitted {
            return Ok(());
        }
        let mut key_value = Vec::new();
        if !in_repos {
            key_value.push(format!("repos: [{full_name:?}]"));
        }
        if let (false, Some(needs)) = (permitted, needs) {
            key_value.push(format!("{needs}: true"));
        }
        Err(ScopeDenial::new(
            plugin,
            Capability::Github,
            call,
            format!("repository {full_name:?}"),
            format!(
                "github.repos: {}; github.create: {}; github.fork: {}",
                self.github.repos.text(),
                self.github.create,
                self.github.fork
            ),
            key_value.join(", "),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(images: &[&str]) -> Scopes {
        let entry = DockerEntry {
            images: Some(images.iter().map(|s| s.to_string()).collect()),
            host_network: None,
            mounts: None,
        };
        Scopes::narrowest()
            .with_entries(None, Some(&entry), None, None)
            .unwrap()
    }

    #[test]
    fn images_are_compared_in_dockers_normal_form() {
        assert_eq!(normalize_image("node:20"), "docker.io/library/node:20");
        assert_eq!(normalize_image("node"), "docker.io/library/node:latest");
        assert_eq!(
            normalize_image("library/node:20"),
            "docker.io/library/node:20"
        );
        assert_eq!(
            normalize_image("docker.io/node:20"),
            "docker.io/library/node:20"
        );
        assert_eq!(normalize_image("acme/app"), "docker.io/acme/app:latest");
        assert_eq!(
            normalize_image("localhost:5000/app:1"),
            "localhost:5000/app:1"
        );
        assert_eq!(
            normalize_image("ghcr.io/acme/app@sha256:ab"),
            "ghcr.io/acme/app@sha256:ab"
        );
        let scope = docker(&["node:20", "python:3.12-*", "ghcr.io/acme/*"]);
        for ok in [
            "node:20",
            "docker.io/library/node:20",
            "python:3.12-slim",
            "ghcr.io/acme/app:1",
            "ghcr.io/acme/app",
        ] {
            assert!(
                scope.check_image("p", "docker.pull-image", ok).is_ok(),
                "{ok}"
            );
        }
        for refused in [
            "node:21",
            "node",
            "evil/node:20",
            "python:3.13",
            "ghcr.io/acme/team/app:1",
            "ghcr.io/acmeevil/app:1",
        ] {
            assert!(
                scope
                    .check_image("p", "docker.pull-image", refused)
                    .is_err(),
                "{refused}"
            );
        }
        let wide = docker(&["ghcr.io/acme/**"]);
        assert!(wide
            .check_image("p", "x", "ghcr.io/acme/team/app:1")
            .is_ok());
    }

    #[test]
    fn a_denial_names_plugin_call_argument_and_the_line_that_allows_it() {
        let denial = Scopes::narrowest()
            .check_image("my-provider", "docker.run-container", "evil:latest")
            .unwrap_err();
        assert_eq!(
            denial.allow,
            "plugins: {my-provider: {docker: {images: [\"evil:latest\"]}}}"
        );
        let text = denial.to_string();
        assert!(
            text.starts_with("docker.run-container by plugin my-provider: image \"evil:latest\" (docker.io/library/evil:latest) is outside its scope (docker.images: none)"),
            "{text}"
        );
    }

    #[test]
    fn a_third_party_plugin_starts_narrowest_and_a_builtin_as_today() {
        let none = Scopes::narrowest();
        assert!(none.check_unsealed("p", "/bin/sh").is_err());
        assert!(none
            .check_remote("p", "git.clone", "https://x/y", false)
            .is_err());
        assert!(none
            .check_repo("p", "github.get-repository", "a/b", None)
            .is_err());
        assert!(none.check_host_network("p").is_err());
        let builtin = Scopes::builtin();
        assert!(builtin.check_unsealed("p", "/bin/sh").is_ok());
        assert!(builtin
            .check_remote("p", "git.push", "https://x/y", true)
            .is_ok());
        assert!(builtin
            .check_repo("p", "github.fork-repository", "a/b", Some("fork"))
            .is_ok());
        assert!(builtin.check_image("p", "x", "anything:1").is_ok());
    }

    #[test]
    fn process_git_and_github_scopes() {
        let process = ProcessEntry {
            unsealed: Some(true),
            programs: Some(vec!["/usr/bin/python3".into()]),
        };
        let git = GitEntry {
            remotes: Some(vec!["https://git.example.com/team/*".into()]),
            push: None,
        };
        let github = GithubEntry {
            repos: Some(vec!["Acme/*".into()]),
            create: Some(true),
            fork: None,
        };
        let scope = Scopes::narrowest()
            .with_entries(Some(&process), None, Some(&git), Some(&github))
            .unwrap();
        assert!(scope.check_unsealed("p", "/usr/bin/python3").is_ok());
        let denial = scope.check_unsealed("p", "/bin/sh").unwrap_err();
        assert!(denial.allow.contains("programs: [\"/bin/sh\"]"), "{denial}");

        let clone = |url| scope.check_remote("p", "git.clone", url, false);
        assert!(clone("https://git.example.com/team/repo.git").is_ok());
        assert!(clone("https://user:secret@git.example.com/team/repo.git").is_ok());
        assert!(clone("https://git.example.com/team/sub/repo.git").is_err());
        let push = scope
            .check_remote(
                "p",
                "git.push",
                "https://tok@git.example.com/team/repo.git",
                true,
            )
            .unwrap_err();
        assert_eq!(push.allow, "plugins: {p: {git: {push: true}}}");
        assert!(!push.to_string().contains("tok"), "{push}");

        assert!(scope
            .check_repo("p", "github.get-repository", "acme/app", None)
            .is_ok());
        assert!(scope
            .check_repo("p", "github.create-repository", "acme/new", Some("create"))
            .is_ok());
        let fork = scope
            .check_repo("p", "github.fork-repository", "other/x", Some("fork"))
            .unwrap_err();
        assert_eq!(
            fork.allow,
            "plugins: {p: {github: {repos: [\"other/x\"], fork: true}}}"
        );
    }

    #[test]
    fn bad_patterns_are_refused_with_their_key() {
        let bad = |process: Option<&ProcessEntry>, github: Option<&GithubEntry>| {
            Scopes::narrowest()
                .with_entries(process, None, None, github)
                .unwrap_err()
                .to_string()
        };
        let text = bad(
            Some(&ProcessEntry {
                unsealed: Some(true),
                programs: Some(vec!["python3".into()]),
            }),
            None,
        );
        assert!(
            text.contains("process.programs") && text.contains("absolute"),
            "{text}"
        );
        let text = bad(
            None,
            Some(&GithubEntry {
                repos: Some(vec!["acme".into()]),
                ..GithubEntry::default()
            }),
        );
        assert!(text.contains("OWNER/NAME"), "{text}");
    }
}
