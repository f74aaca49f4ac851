//! `sandbox` as a host capability: a driver reaches the run's sandbox and nothing
//! else, so it needs no scope; its per-run state is the run's [`super::SandboxBroker`],
//! which the engine sets on the run context once the sandbox exists.

use wasmtime::component::Linker;

use crate::capabilities::HostCapability;
use crate::capabilities::{HasPluginView, PluginStore};

pub struct Sandbox;

impl HostCapability for Sandbox {
    fn name(&self) -> &'static str {
        "sandbox"
    }
    fn summary(&self) -> &'static str {
        "exec and file access in the run's sandbox"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/sandbox"]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::sandbox::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)
    }
}
