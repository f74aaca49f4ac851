//! `kubernetes` as a host capability: pods on the clusters the operator lists. Its
//! host-wide section is the list of clusters ([`super::scope`]), read into the run's
//! state; the per-plugin scope narrows it; the kubeconfig files the operator lists are
//! guarded (no TaskSpec may mount them); the pods a run made are the host objects it
//! names. What a dead run left is found by the provider's `list-leftovers`, which
//! `gc` calls.

use std::any::Any;
use std::path::{Path, PathBuf};
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
const KUBECONFIG: &str = "a kubeconfig the operator listed under `kubernetes: clusters:`, or a \
     certificate, key or token file it names: its credentials reach a cluster";

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
    fn read_host_section(
        &self,
        section: &Value,
    ) -> Result<Option<(Vec<String>, String)>, crate::capabilities::scope::EntryError> {
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
        run.pods.lock().unwrap().contains_key(id).then_some("pod")
    }
    fn delete_left<'a>(&self, run: &'a RunContext) -> Option<crate::capabilities::DeleteLeft<'a>> {
        Some(Box::pin(super::delete_left(run)))
    }
}

/// The kubeconfig files of every `kubernetes:` section this process read. The guard
/// list is made without the grants at hand (`HostFolders::of_this_process`); the
/// grants are read before any TaskSpec is checked, so it is complete by then.
static LISTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn remember_kubeconfigs(grant: &KubernetesGrant) {
    let mut listed = LISTED.lock().unwrap();
    for kubeconfig in grant.kubeconfigs() {
        for path in std::iter::once(kubeconfig.to_path_buf()).chain(credential_files(kubeconfig)) {
            let path = path.canonicalize().unwrap_or(path);
            if !listed.contains(&path) {
                listed.push(path);
            }
        }
    }
}

/// The files a kubeconfig's clusters and users name (CA, client certificate and key,
/// token file; relative ones from the kubeconfig's folder): they are its credentials as
/// much as the file itself. An unreadable kubeconfig names none (the run that uses it
/// fails then).
fn credential_files(kubeconfig: &Path) -> Vec<PathBuf> {
    let Ok(config) = kube::config::Kubeconfig::read_from(kubeconfig) else {
        return Vec::new();
    };
    let folder = kubeconfig.parent().unwrap_or(Path::new("/"));
    let authorities = config
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref()?.certificate_authority.clone());
    let user_files = config
        .auth_infos
        .iter()
        .filter_map(|u| u.auth_info.as_ref())
        .flat_map(|u| {
            [
                u.client_certificate.clone(),
                u.client_key.clone(),
                u.token_file.clone(),
            ]
        })
        .flatten();
    authorities
        .chain(user_files)
        .map(|file| folder.join(file))
        .collect()
}

fn listed_kubeconfigs() -> Vec<PathBuf> {
    LISTED.lock().unwrap().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_kubeconfig_and_the_credential_files_it_names_are_guarded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("keys")).unwrap();
        for file in ["ca.crt", "keys/client.key", "token"] {
            std::fs::write(root.join(file), "secret").unwrap();
        }
        let kubeconfig = root.join("config");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.crt\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\n\
             users:\n- name: u\n  user:\n    client-certificate: /etc/agentgate-test/client.crt\n    \
             client-key: keys/client.key\n    tokenFile: token\n",
        )
        .unwrap();
        let section: Value = serde_yaml::from_str(&format!(
            "clusters:\n  - context: x\n    kubeconfig: {}\n",
            kubeconfig.display()
        ))
        .unwrap();
        Kubernetes.read_host_section(&section).unwrap();

        let guarded: Vec<PathBuf> = Kubernetes
            .guarded_paths()
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        for path in [
            kubeconfig,
            root.join("ca.crt"),
            PathBuf::from("/etc/agentgate-test/client.crt"),
            root.join("keys/client.key"),
            root.join("token"),
        ] {
            assert!(
                guarded.contains(&path),
                "{} is not guarded: {guarded:?}",
                path.display()
            );
        }
    }
}
