//! The operator scope of `docker`, per plugin: `docker: {images: [GLOB], hostNetwork:
//! BOOL, mounts: [FOLDER]}`; and its host-wide section, the top-level `docker:
//! {hostNetwork: BOOL}` that holds whichever plugin creates a container.
//!
//! A plugin that is not built in may run no image, use no host network and bind no
//! host folder but the run's own (workspace, state); a built-in may run any image, and
//! its host network and binds are what the host-wide `docker:` and the top-level
//! `mounts:` say. A per-plugin `hostNetwork: true` never goes beyond the host-wide
//! one, nor a per-plugin `mounts:` beyond the top-level `mounts:`
//! ([`crate::host_paths`]): both must allow it.
//!
//! Images are compared in Docker's normal form, so `node:20`, `library/node:20` and
//! `docker.io/library/node:20` are one image, and a pattern is normalised the same way
//! (`node:20` allows exactly `docker.io/library/node:20`; a pattern without a tag
//! means `:latest` unless its last part holds a wildcard). Checked calls:
//! `docker.pull-image` and `docker.run-container` (the image, before anything is
//! pulled or created; `network: host` needs `hostNetwork`; each bind). `--grant`
//! items: `docker:image=GLOB`, `docker:hostNetwork`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use crate::capabilities::scope::{
    set, typed_entry, Base, Compared, EntryError, FlagItem, Patterns, Scope, ScopeDenial,
    ScopeError, ScopeShape,
};
use crate::home_path::absolute_host_path;

/// `docker:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DockerEntry {
    #[serde(default)]
    images: Option<Vec<String>>,
    #[serde(default)]
    host_network: Option<bool>,
    #[serde(default)]
    mounts: Option<Vec<String>>,
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

impl Scope for DockerScope {
    fn shown(&self) -> serde_json::Value {
        serde_json::json!({
            "images": self.images.shown(),
            "hostNetwork": self.host_network,
            "mounts": match &self.mounts {
                None => serde_json::json!("any the top-level mounts: allows"),
                Some(folders) => folders.iter().map(|f| f.display().to_string()).collect(),
            },
        })
    }
    crate::scope_any!();
}

const IMAGE: Compared = Compared {
    normalize: normalize_image_pattern,
    ..Compared::AS_WRITTEN
};

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["images", "hostNetwork", "mounts"]
    }

    fn base(&self, base: Base) -> Arc<dyn Scope> {
        Arc::new(match base {
            Base::Widest => DockerScope {
                images: Patterns::Any,
                host_network: true,
                mounts: None,
            },
            Base::Narrowest => DockerScope {
                images: Patterns::none(),
                host_network: false,
                mounts: Some(Vec::new()),
            },
        })
    }

    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: DockerEntry = typed_entry("docker", entry)?;
        let mut scope = downcast(scope);
        set(&mut scope.host_network, e.host_network);
        if let Some(p) = &e.images {
            scope.images = Patterns::parse("docker.images", IMAGE, p)?;
        }
        if let Some(folders) = &e.mounts {
            scope.mounts = Some(absolute_folders("docker.mounts", folders)?);
        }
        Ok(Arc::new(scope))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &["docker:image=GLOB", "docker:hostNetwork"]
    }

    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError> {
        let item = FlagItem::parse("docker", rest);
        match item.key {
            "image" => item.push(entry, "images"),
            "hostNetwork" => item.set_bool(entry, "hostNetwork"),
            _ => Err(item.unknown()),
        }
    }
}

/// The scope of a plugin that was not granted `docker` at all.
pub(super) fn narrowest() -> DockerScope {
    downcast(Shape.base(Base::Narrowest).as_ref())
}

fn downcast(scope: &dyn Scope) -> DockerScope {
    crate::capabilities::scope::concrete(scope)
}

/// `folders` as absolute paths, `~` expanded.
fn absolute_folders(key: &str, folders: &[String]) -> Result<Vec<PathBuf>, ScopeError> {
    let env = |name: &str| std::env::var(name).ok();
    folders
        .iter()
        .map(|folder| {
            absolute_host_path(folder, &env).map_err(|message| ScopeError {
                key: key.to_string(),
                message: format!("{folder:?} {message}"),
            })
        })
        .collect()
}

/// The top-level `docker:` of grants.yaml: what containers may ask of the Docker
/// engine beyond the host's defaults, whichever plugin creates them. The default keeps
/// the agent off the host's network; which host folders containers may bind is the
/// top-level `mounts:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DockerGrant {
    /// `network: host` is allowed.
    #[serde(default)]
    pub host_network: bool,
    /// The former place of the top-level `mounts:`, still read into it (with a
    /// warning): it now holds for every provider.
    #[serde(default)]
    pub mounts: Vec<String>,
}

pub(super) const HOST_SECTION_FIELDS: &[&str] = &["hostNetwork", "mounts"];

impl DockerGrant {
    pub(super) fn read(section: &Value) -> Result<DockerGrant, serde_yaml::Error> {
        serde_yaml::from_value(section.clone())
    }
}

impl DockerScope {
    /// An image for `call` (`docker.pull-image`, `docker.run-container`).
    pub fn check_image(
        &self,
        plugin: &str,
        call: &'static str,
        image: &str,
    ) -> Result<(), ScopeDenial> {
        let normal = normalize_image(image);
        if self.images.allows(&normal) {
            return Ok(());
        }
        Err(ScopeDenial::new(
            plugin,
            "docker",
            call,
            format!("image {image:?} ({normal})"),
            format!("docker.images: {}", self.images.text()),
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
        let Some(folders) = &self.mounts else {
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
            "docker",
            "docker.run-container",
            format!("mount source {source:?} ({})", resolved.display()),
            format!("docker.mounts: {listed}"),
            format!("mounts: [{:?}]", resolved.display().to_string()),
        ))
    }

    pub fn check_host_network(&self, plugin: &str) -> Result<(), ScopeDenial> {
        if self.host_network {
            return Ok(());
        }
        Err(ScopeDenial::new(
            plugin,
            "docker",
            "docker.run-container",
            "network \"host\"".into(),
            "docker.hostNetwork: false".into(),
            "hostNetwork: true".into(),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(images: &[&str]) -> DockerScope {
        let entry = serde_yaml::to_value(serde_json::json!({ "images": images })).unwrap();
        let scope = Shape
            .narrowed(Shape.base(Base::Narrowest).as_ref(), &entry)
            .unwrap();
        downcast(scope.as_ref())
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
        let denial = narrowest()
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
    fn a_third_party_plugin_starts_with_no_image_and_no_host_network() {
        assert!(narrowest().check_host_network("p").is_err());
        assert!(narrowest().check_image("p", "x", "node:20").is_err());
        let widest = downcast(Shape.base(Base::Widest).as_ref());
        assert!(widest.check_image("p", "x", "anything:1").is_ok());
        assert!(widest.check_host_network("p").is_ok());
    }
}
