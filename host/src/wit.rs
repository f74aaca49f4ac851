//! Host-side bindings for the WIT contract `agentgate:plugin`, one module per supported
//! line, and the list of those lines.
//!
//! A plugin published to a marketplace is compiled against one package version and must
//! keep loading on later hosts. Each released version is frozen in `wit/frozen/<version>`
//! (checked by `tests/all/wit_lines.rs`) and bound here from that folder, never from the
//! development head `wit/`: what the host links for a line cannot drift when the head
//! moves. [`SUPPORTED_LINES`] lists the lines; a component importing or exporting any
//! other version of the package is refused at load by [`line_of`], naming them.
//!
//! Adding a line `0.2.0`: freeze it, bind it in a module `v0_2_0` like [`v0_1_0`], add
//! its entry to [`SUPPORTED_LINES`], and implement its host interfaces, for the older
//! line by adapting to the newer one. Today there is one line, `0.1.0`, and the rest of
//! the host uses its types through the re-export below.
//!
//! A leaf: nothing here names the rest of the host, so the run record can use the
//! contract's types without knowing the runtime. No WIT resource is mapped to a host
//! type (`with:` maps only to other bindings): bindgen makes an empty placeholder for
//! each (`execution::Execution`, `cluster::Pod`), and the capability that hands one
//! out keeps its own type in the store's table (see `capabilities::view`).

use std::fmt;

/// The WIT package every plugin is built against.
pub const PACKAGE: &str = "agentgate:plugin";

/// One released version of [`PACKAGE`] this host links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractLine {
    /// The package version, e.g. `0.1.0`: what a component's imports carry after `@`
    /// and what a marketplace lockfile records as `wit`.
    pub version: &'static str,
    /// The frozen WIT it is bound from, relative to the repository root.
    pub frozen_dir: &'static str,
}

impl fmt::Display for ContractLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PACKAGE}@{}", self.version)
    }
}

/// Every line this host links, oldest first.
pub const SUPPORTED_LINES: &[ContractLine] = &[ContractLine {
    version: "0.1.0",
    frozen_dir: "wit/frozen/0.1.0",
}];

/// A package of its own that builds on a line of [`PACKAGE`] (a capability added after
/// a release, as `agentgate:kubernetes`), with the versions of it this host links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtensionPackage {
    /// The package name without a version, e.g. `agentgate:kubernetes`.
    pub package: &'static str,
    /// Its versions this host links, e.g. `0.1.0`.
    pub versions: &'static [&'static str],
}

/// Every extension package this host links.
pub const EXTENSION_PACKAGES: &[ExtensionPackage] = &[ExtensionPackage {
    package: "agentgate:kubernetes",
    versions: &["0.1.0"],
}];

/// A component built against a version of the contract this host does not link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// It names an interface of [`PACKAGE`] in a version not in [`SUPPORTED_LINES`], or
    /// without a version.
    #[error("it was built against {line} (it uses {interface}), which this host does not link; this host links {}: rebuild the plugin against one of them", supported_text())]
    Unsupported {
        /// The version it names, as `agentgate:plugin@<version>` (or "without a
        /// version").
        line: String,
        /// The import or export name that carries it.
        interface: String,
    },
    /// It names interfaces of two different versions of [`PACKAGE`].
    #[error("it uses two versions of {PACKAGE} ({first} and {second}); a plugin is built against one: rebuild it against one of {}", supported_text())]
    Mixed {
        /// The first interface name seen, of one version.
        first: String,
        /// An interface name of another version.
        second: String,
    },
    /// It names an interface of an [`ExtensionPackage`] in a version this host does not
    /// link, or without a version.
    #[error("it was built against {line} (it uses {interface}), which this host does not link; this host links {supported}: rebuild the plugin against one of them")]
    UnsupportedExtension {
        /// The extension version it names, as `<package>@<version>` (or "without a
        /// version").
        line: String,
        /// The import or export name that carries it.
        interface: String,
        /// The extension's versions this host links, comma-separated.
        supported: String,
    },
}

fn supported_text() -> String {
    SUPPORTED_LINES
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The line a component was built against, from the names of its imports and exports
/// (`agentgate:plugin/events@0.1.0`); `None` when it names no interface of the
/// package. An unversioned name of the package counts as no version at all, which no
/// line is.
pub fn line_of<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Option<&'static ContractLine>, LineError> {
    let mut found: Option<(&'static ContractLine, &str)> = None;
    for name in names {
        check_extension(name)?;
        let Some(rest) = name.strip_prefix(PACKAGE).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let version = rest.split_once('@').map_or("", |(_, v)| v);
        let line = SUPPORTED_LINES
            .iter()
            .find(|line| line.version == version)
            .ok_or_else(|| LineError::Unsupported {
                line: if version.is_empty() {
                    format!("{PACKAGE} without a version")
                } else {
                    format!("{PACKAGE}@{version}")
                },
                interface: name.to_string(),
            })?;
        match found {
            Some((first, first_name)) if first != line => {
                return Err(LineError::Mixed {
                    first: first_name.to_string(),
                    second: name.to_string(),
                })
            }
            Some(_) => {}
            None => found = Some((line, name)),
        }
    }
    Ok(found.map(|(line, _)| line))
}

/// Refuses `name` when it is an interface of an [`ExtensionPackage`] in a version this
/// host does not link. The extension's own version says nothing of the line: that is
/// read from the [`PACKAGE`] interfaces it builds on.
fn check_extension(name: &str) -> Result<(), LineError> {
    let Some((extension, rest)) = EXTENSION_PACKAGES.iter().find_map(|e| {
        let rest = name.strip_prefix(e.package)?.strip_prefix('/')?;
        Some((e, rest))
    }) else {
        return Ok(());
    };
    let version = rest.split_once('@').map_or("", |(_, v)| v);
    if extension.versions.contains(&version) {
        return Ok(());
    }
    Err(LineError::UnsupportedExtension {
        line: if version.is_empty() {
            format!("{} without a version", extension.package)
        } else {
            format!("{}@{version}", extension.package)
        },
        interface: name.to_string(),
        supported: extension
            .versions
            .iter()
            .map(|v| format!("{}@{v}", extension.package))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

pub use v0_1_0::*;

/// `agentgate:kubernetes@0.1.0`, bound from `wit/kubernetes` (whose `deps/` are the
/// frozen `0.1.0` line): its `types` and `execution` are the line's own, so an
/// `execution` it hands out is the same host object `docker` and `process` hand out.
pub mod kubernetes_v0_1_0 {
    // Generated from the WIT files, where each item is documented.
    #[allow(missing_docs)]
    mod generated {
        wasmtime::component::bindgen!({
            world: "agentgate:kubernetes/host",
            path: "../wit/kubernetes",
            imports: { default: async | trappable },
            with: {
                "agentgate:plugin/types": super::super::v0_1_0::types,
                "agentgate:plugin/execution": super::super::v0_1_0::execution,
            },
        });
    }

    pub use generated::agentgate::kubernetes::cluster;
}

/// Line `0.1.0`, bound from `wit/frozen/0.1.0`.
///
/// The `host` world generates every host interface once; the three plugin worlds reuse
/// those types through `with`, so a value (an `execution`, an `error`) means the same
/// Rust type whichever world it crosses.
///
/// One binding per plugin kind is enough: the narrow worlds of `worlds.wit`
/// (`process-sandbox-provider`, `http-agent-driver`, ...) differ only in their imports,
/// which the linker satisfies from each capability's `add_to_linker` (through these
/// modules), `capabilities::add_to_linker` (`types`, `execution`) and WASI, while these bindings only look up the
/// exports (`describe` and the kind's interface), the same in every world of a kind.
/// Which imports a plugin may have is decided by `runtime::grants`.
pub mod v0_1_0 {
    // Generated from the WIT files, where each item is documented.
    #[allow(missing_docs)]
    mod generated {
        wasmtime::component::bindgen!({
            world: "host",
            path: "../wit/frozen/0.1.0",
            imports: { default: async | trappable },
        });
    }

    pub use generated::agentgate::plugin::{
        docker, events, execution, git, github, process, sandbox, types,
    };

    /// Every interface of the `host` world, by its WIT name: a capability added to that
    /// world is here without an edit of this file (`interfaces::kube`).
    pub mod interfaces {
        pub use super::generated::agentgate::plugin::*;
    }

    /// The `workspace-source` world.
    #[allow(missing_docs)] // generated; documented in the WIT files
    pub mod workspace_source {
        wasmtime::component::bindgen!({
            world: "workspace-source",
            path: "../wit/frozen/0.1.0",
            imports: { default: async | trappable },
            exports: { default: async },
            with: {
                "agentgate:plugin/types": super::types,
                "agentgate:plugin/events": super::events,
                "agentgate:plugin/git": super::git,
                "agentgate:plugin/github": super::github,
            },
        });
    }

    /// The `sandbox-provider` world.
    #[allow(missing_docs)] // generated; documented in the WIT files
    pub mod sandbox_provider {
        wasmtime::component::bindgen!({
            world: "sandbox-provider",
            path: "../wit/frozen/0.1.0",
            imports: { default: async | trappable },
            exports: { default: async },
            with: {
                "agentgate:plugin/types": super::types,
                "agentgate:plugin/execution": super::execution,
                "agentgate:plugin/events": super::events,
                "agentgate:plugin/process": super::process,
                "agentgate:plugin/docker": super::docker,
            },
        });
    }

    /// The `agent-driver` world.
    #[allow(missing_docs)] // generated; documented in the WIT files
    pub mod agent_driver {
        wasmtime::component::bindgen!({
            world: "agent-driver",
            path: "../wit/frozen/0.1.0",
            imports: { default: async | trappable },
            exports: { default: async },
            with: {
                "agentgate:plugin/types": super::types,
                "agentgate:plugin/execution": super::execution,
                "agentgate:plugin/events": super::events,
                "agentgate:plugin/sandbox": super::sandbox,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_of_a_supported_line_has_that_line() {
        let line = line_of([
            "wasi:io/streams@0.2.12",
            "agentgate:plugin/events@0.1.0",
            "agentgate:plugin/driver@0.1.0",
        ])
        .unwrap();
        assert_eq!(line, Some(&SUPPORTED_LINES[0]));
        assert_eq!(line_of(["wasi:cli/stdout@0.2.0"]).unwrap(), None);
    }

    #[test]
    fn the_kubernetes_package_is_linked_in_its_own_version_only() {
        let line = line_of([
            "agentgate:kubernetes/cluster@0.1.0",
            "agentgate:plugin/types@0.1.0",
        ])
        .unwrap();
        assert_eq!(line, Some(&SUPPORTED_LINES[0]));
        for (import, named) in [
            (
                "agentgate:kubernetes/cluster@0.2.0",
                "agentgate:kubernetes@0.2.0",
            ),
            (
                "agentgate:kubernetes/cluster",
                "agentgate:kubernetes without a version",
            ),
        ] {
            let text = line_of(["agentgate:plugin/types@0.1.0", import])
                .unwrap_err()
                .to_string();
            assert!(text.contains(named), "{text}");
            assert!(text.contains(import), "{text}");
            assert!(
                text.contains("this host links agentgate:kubernetes@0.1.0"),
                "{text}"
            );
        }
    }

    #[test]
    fn an_unknown_line_is_refused_naming_the_supported_ones() {
        for (import, version) in [
            ("agentgate:plugin/events@0.2.0", "@0.2.0"),
            ("agentgate:plugin/events@0.0.9", "@0.0.9"),
            ("agentgate:plugin/events", " without a version"),
        ] {
            let error = line_of(["wasi:io/poll@0.2.12", import]).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(&format!("agentgate:plugin{version}")),
                "{text}"
            );
            assert!(text.contains(import), "{text}");
            assert!(
                text.contains("this host links agentgate:plugin@0.1.0"),
                "{text}"
            );
        }
    }
}
