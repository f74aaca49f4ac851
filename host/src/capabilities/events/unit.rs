//! `events` as a host capability: no scope, no per-run state of its own (the run's
//! event sink is the run context's).

use wasmtime::component::Linker;

use crate::capabilities::HostCapability;
use crate::capabilities::{HasPluginView, PluginStore};

pub struct Events;

impl HostCapability for Events {
    fn name(&self) -> &'static str {
        "events"
    }
    fn summary(&self) -> &'static str {
        "progress, logs and agent events of the run"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/events"]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::events::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)
    }
}
