//! `kubernetes` as a host capability: pods on the clusters the operator lists. Its
//! host-wide section is the list of clusters ([`super::scope`]), read into the run's
//! state; the per-plugin scope narrows it; the kubeconfig files the operator lists are
//! guarded (no TaskSpec may mount them); the pods a run made are the host objects it
//! names. What a dead run left is found by the provider's `list-leftovers`, which
//! `gc` calls.

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

use serde_yaml::Value;
use wasmtime::component::{HasSelf, Linker};

use super::scope::{KubernetesGrant, HOST_SECTION_FIELDS};
use super::KubernetesRun;
use crate::capabilities::scope::ScopeShape;
use crate::capabilities::{HostCapability, RunContext};
use crate::runtime::PluginState;

pub struct Kubernetes;

/// Why a listed kubeconfig is guarded.
const KUBECONFIG: &str =
    "a kubeconfig the operator listed under `kubernetes: clusters:`, whose credentials reach a cluster";

impl HostCapability for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }
    fn summary(&self) -> &'static str {
        "pods on the Kubernetes clusters the operator lists"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["agentgate:kubernetes/cluster"]
    }
    fn add_to_linker(&self, linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
        crate::runtime::bindings::kubernetes_v0_1_0::cluster::add_to_linker::<_, HasSelf<_>>(
            linker,
            |s| s,
        )
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    fn host_section_fields(&self) -> Option<&'static [&'static str]> {
        Some(HOST_SECTION_FIELDS)
    }
    fn read_host_section(&self, section: &Value) -> Result<Option<(Vec<String>, String)>, String> {
        let grant = KubernetesGrant::read(section)?;
        remember_kubeconfigs(&grant);
        Ok(None)
    }
    fn run_state(&self, section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        // Read when the grants were: a section that does not read allows nothing.
        let grant = section
            .and_then(|s| KubernetesGrant::read(s).ok())
            .unwrap_or_default();
        Some(Arc::new(KubernetesRun::new(grant)))
    }
    fn guarded_paths(&self) -> Vec<(PathBuf, &'static str)> {
        listed_kubeconfigs()
            .into_iter()
            .map(|path| (path, KUBECONFIG))
            .collect()
    }
    fn host_object(&self, run: &RunContext, id: &str) -> Option<&'static str> {
        let run = run.state::<KubernetesRun>()?;
        run.pods.lock().unwrap().contains(id).then_some("pod")
    }
}

/// The kubeconfig files of every `kubernetes:` section this process read. The guard
/// list is made without the grants at hand (`HostFolders::of_this_process`); the
/// grants are read before any TaskSpec is checked, so it is complete by then.
static LISTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn remember_kubeconfigs(grant: &KubernetesGrant) {
    let mut listed = LISTED.lock().unwrap();
    for path in grant.kubeconfigs() {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if !listed.contains(&path) {
            listed.push(path);
        }
    }
}

fn listed_kubeconfigs() -> Vec<PathBuf> {
    LISTED.lock().unwrap().clone()
}
