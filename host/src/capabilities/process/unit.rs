//! `process` as a host capability: sealed (and, when the scope allows, unsealed)
//! processes on the host. Its scope is [`super::scope`]; what a dead run left is its
//! cgroups, which `gc` has it kill and remove.

use wasmtime::component::{HasSelf, Linker};

use super::cgroup::{Cgroup, CgroupError};
use crate::capabilities::scope::ScopeShape;
use crate::capabilities::{HostCapability, Reclaimed};
use crate::runtime::PluginState;

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
    fn add_to_linker(&self, linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
        crate::wit::process::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    /// Kills and removes the run's sandbox cgroups (named after the run's id).
    fn reap_run(&self, run_id: &str, dry_run: bool) -> Option<Result<Reclaimed, String>> {
        let prefix = format!("{run_id}-");
        let names = if dry_run {
            Ok(vec![format!("{prefix}*")])
        } else {
            match Cgroup::reclaim(&prefix) {
                Ok(names) => Ok(names),
                // No cgroups on this machine: the run could not have made any.
                Err(CgroupError::Unavailable { .. }) => Ok(Vec::new()),
                Err(e) => Err(format!("removing its cgroups: {e}")),
            }
        };
        Some(names.map(|names| Reclaimed {
            kind: "cgroups",
            names,
        }))
    }
}
