//! `git` as a host capability: repositories on the host. Its scope is
//! [`super::scope`]; its per-run state is where each of the run's repositories was
//! cloned from ([`super::Origins`]), so a push goes back there.

use std::any::Any;
use std::sync::Arc;

use serde_yaml::Value;
use wasmtime::component::{HasSelf, Linker};

use crate::capabilities::scope::ScopeShape;
use crate::capabilities::HostCapability;
use crate::runtime::PluginState;

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
    fn add_to_linker(&self, linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
        crate::wit::git::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    fn run_state(&self, _section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::new(super::Origins::default()))
    }
}
