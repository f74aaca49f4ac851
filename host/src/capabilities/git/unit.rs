//! `git` as a host capability: repositories on the host. Its scope is
//! [`super::scope`]; its per-run state is where each of the run's repositories was
//! cloned from ([`super::Origins`]), so a push goes back there.

use std::any::Any;
use std::sync::Arc;

use serde_yaml::Value;
use wasmtime::component::Linker;

use crate::capabilities::scope::ScopeShape;
use crate::capabilities::HostCapability;
use crate::capabilities::{HasPluginView, PluginStore};

pub struct Git;

impl HostCapability for Git {
    fn name(&self) -> &'static str {
        "git"
    }
    fn summary(&self) -> &'static str {
        "clone and change repositories on the host"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/git"]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::git::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    fn run_state(&self, _section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::new(super::Origins::default()))
    }
}
