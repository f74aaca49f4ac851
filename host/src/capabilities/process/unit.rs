//! `process` as a host capability: sealed (and, when the scope allows, unsealed)
//! processes on the host. Its scope is [`super::scope`]; what a dead run left is its
//! cgroups, which `gc` has it kill and remove.

use wasmtime::component::Linker;

use super::cgroup::{Cgroup, CgroupError};
use crate::capabilities::scope::ScopeShape;
use crate::capabilities::{HasPluginView, PluginStore, StoreSetup, StoreState};
use crate::capabilities::{HostCapability, ReclaimError, Reclaimed};

pub struct Process;

impl HostCapability for Process {
    fn name(&self) -> &'static str {
        "process"
    }
    fn summary(&self) -> &'static str {
        "start confined processes on the host"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/process"]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::process::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    /// The process groups the store started, killed with it.
    fn store_state(&self, _store: &StoreSetup<'_>) -> Option<Box<dyn StoreState>> {
        Some(Box::new(super::ProcessGroups::default()))
    }
    /// Kills and removes the run's sandbox cgroups (named after the run's id).
    fn reap_run(&self, run_id: &str, dry_run: bool) -> Option<Result<Reclaimed, ReclaimError>> {
        let prefix = format!("{run_id}-");
        let names = if dry_run {
            Ok(vec![format!("{prefix}*")])
        } else {
            match Cgroup::reclaim(&prefix) {
                Ok(names) => Ok(names),
                // No cgroups on this machine: the run could not have made any.
                Err(CgroupError::Unavailable { .. }) => Ok(Vec::new()),
                Err(e) => Err(ReclaimError::Removing {
                    kind: "cgroups",
                    source: Box::new(e),
                }),
            }
        };
        Some(names.map(|names| Reclaimed {
            kind: "cgroups",
            names,
        }))
    }
}
