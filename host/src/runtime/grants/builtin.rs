//! The grants of built-in plugins, read from the data in `plugins/grants.yaml`: each
//! kind's capabilities, and what single built-ins have beyond them (the Agent SDK
//! driver's `http` to the Anthropic API host, or to the host of the operator's
//! `ANTHROPIC_BASE_URL`). No plugin or capability is named here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde::Deserialize;

use super::{Grant, Granted, Grants};
use crate::capabilities::scope::{Base, Scopes};
use crate::capabilities::Capability;
use crate::wit::types::PluginKind;

/// `plugins/grants.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BuiltinGrants {
    kinds: BTreeMap<String, BTreeSet<Capability>>,
    #[serde(default)]
    plugins: BTreeMap<String, BuiltinPlugin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BuiltinPlugin {
    #[serde(default)]
    grant: Grant,
    #[serde(default)]
    base_url: Option<BaseUrl>,
}

/// An environment variable whose URL replaces a capability's scope.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BaseUrl {
    pub(super) variable: String,
    pub(super) capability: Capability,
}

static DATA: LazyLock<BuiltinGrants> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("../../../../plugins/grants.yaml"))
        .expect("plugins/grants.yaml is valid (checked by its test)")
});

fn kind_name(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::WorkspaceSource => "workspace-source",
        PluginKind::SandboxProvider => "sandbox-provider",
        PluginKind::AgentDriver => "agent-driver",
    }
}

/// The fixed capabilities of every built-in plugin of `kind`.
pub fn kind_capabilities(kind: PluginKind) -> BTreeSet<Capability> {
    DATA.kinds.get(kind_name(kind)).cloned().unwrap_or_default()
}

/// The environment variables whose URL a built-in's grant takes (`ANTHROPIC_BASE_URL`).
pub fn base_url_variables() -> impl Iterator<Item = &'static str> {
    DATA.plugins
        .values()
        .filter_map(|p| p.base_url.as_ref())
        .map(|b| b.variable.as_str())
}

/// The capability the URL of `variable` scopes.
pub(super) fn base_url_capability(variable: &str) -> Option<Capability> {
    DATA.plugins
        .values()
        .filter_map(|p| p.base_url.as_ref())
        .find(|b| b.variable == variable)
        .map(|b| b.capability)
}

/// The grant of the built-in plugin `name`: its kind's capabilities and its own, each
/// with its widest scope narrowed by the built-in's data, the operator's base URL and
/// then the operator's entry for it (an entry that does not resolve, which
/// `Grants::from_file` refuses, narrows that capability to nothing).
pub fn builtin_granted(name: &str, kind: PluginKind, grants: &Grants) -> Granted {
    let own = DATA.plugins.get(name);
    let mut capabilities = kind_capabilities(kind);
    if let Some(own) = own {
        capabilities.extend(own.grant.capabilities.iter().copied());
    }
    let mut scopes = Scopes::default();
    for capability in &capabilities {
        let Some(shape) = capability.unit().scope() else {
            continue;
        };
        let base_url = own
            .and_then(|p| p.base_url.as_ref())
            .filter(|b| b.capability == *capability)
            .and_then(|b| grants.base_urls.get(&b.variable));
        let entries = [
            own.and_then(|p| p.grant.scopes.get(capability)).cloned(),
            base_url.cloned(),
            grants
                .plugins
                .get(name)
                .and_then(|g| g.scopes.get(capability))
                .cloned(),
        ];
        let resolved = entries
            .iter()
            .flatten()
            .try_fold(shape.base(Base::Widest), |scope, entry| {
                shape.narrowed(scope.as_ref(), entry)
            })
            .unwrap_or_else(|_| shape.base(Base::Narrowest));
        scopes.insert(capability.name(), resolved);
    }
    Granted {
        capabilities,
        mismatch: None,
        scopes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_reads_and_names_only_capabilities_this_host_has() {
        assert!(!DATA.kinds.is_empty());
        for kind in [
            PluginKind::WorkspaceSource,
            PluginKind::SandboxProvider,
            PluginKind::AgentDriver,
        ] {
            assert!(!kind_capabilities(kind).is_empty(), "{}", kind_name(kind));
        }
        for (name, plugin) in &DATA.plugins {
            for (capability, entry) in &plugin.grant.scopes {
                let shape = capability.unit().scope().expect("a scoped capability");
                shape
                    .narrowed(shape.base(Base::Widest).as_ref(), entry)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}
