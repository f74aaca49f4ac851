//! `docker` as a host capability: the local Docker engine. Its scope and host-wide
//! section are [`super::scope`]; its per-run state is the operator's host-wide
//! [`DockerGrant`]; the containers it made for a run are the host objects it names.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use serde_yaml::Value;
use wasmtime::component::{HasSelf, Linker};

use super::container::Container;
use super::scope::{DockerGrant, HOST_SECTION_FIELDS};
use crate::capabilities::scope::ScopeShape;
use crate::capabilities::{HostCapability, RunContext};
use crate::runtime::PluginState;

pub struct Docker;

/// Why the engine's socket is guarded.
pub(super) const ENGINE_SOCKET: &str =
    "the Docker engine's socket, which gives the host to whoever holds it";

impl HostCapability for Docker {
    fn name(&self) -> &'static str {
        "docker"
    }
    fn summary(&self) -> &'static str {
        "the local Docker engine"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:plugin/docker"]
    }
    fn add_to_linker(&self, linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
        crate::runtime::bindings::docker::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    fn host_section_fields(&self) -> Option<&'static [&'static str]> {
        Some(HOST_SECTION_FIELDS)
    }
    fn read_host_section(
        &self,
        section: &Value,
    ) -> Result<Option<(Vec<String>, String)>, crate::capabilities::scope::EntryError> {
        let grant = DockerGrant::read(section)?;
        if grant.mounts.is_empty() {
            return Ok(None);
        }
        let warning = format!(
            "`docker: mounts:` is read as the top-level `mounts:`, which now holds for \
             every sandbox provider; move the list there (e.g. `mounts: [{}]`)",
            grant.mounts.join(", ")
        );
        Ok(Some((grant.mounts, warning)))
    }
    fn run_state(&self, section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        // Read when the grants were: a section that does not read allows nothing more.
        let grant = section
            .and_then(|s| DockerGrant::read(s).ok())
            .unwrap_or_default();
        Some(Arc::new(grant))
    }
    fn guarded_paths(&self) -> Vec<(PathBuf, &'static str)> {
        super::local_socket()
            .map(|socket| (socket, ENGINE_SOCKET))
            .into_iter()
            .collect()
    }
    fn host_object(&self, run: &RunContext, id: &str) -> Option<&'static str> {
        Container::of_run(&run.run_id, id).ok().map(|_| "container")
    }
}
