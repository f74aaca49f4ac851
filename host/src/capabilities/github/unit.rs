//! `github` as a host capability: the GitHub REST API with the host's token. Its
//! scope is [`super::scope`].

use wasmtime::component::Linker;

use crate::capabilities::scope::ScopeShape;
use crate::capabilities::HostCapability;
use crate::capabilities::{HasPluginView, PluginStore};

pub struct Github;

impl HostCapability for Github {
    fn name(&self) -> &'static str {
        "github"
    }
    fn summary(&self) -> &'static str {
        "the GitHub REST API with the host's token"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/github"]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::github::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
}
