//! The host side of `agentgate:kubernetes/cluster`: sandboxes as pods on a cluster the
//! operator allows.
//!
//! The plugin (normally `sandbox-kubernetes`) says what pod it wants; the host decides
//! whether it may have it ([`scope`]: the operator's clusters, namespaces and images,
//! then the plugin's own narrowing), writes every object itself ([`objects`]), reaches
//! the cluster only after every check passed and only once it answers ([`client`]),
//! creates and deletes the objects in order ([`pod`]), runs commands ([`exec`]), moves
//! files ([`copy`], over [`transfer`]), reads usage ([`stats`]) and lists and reaps
//! what dead runs of this home left ([`leftovers`], by this home's label, see
//! [`crate::capabilities::labels`]).

mod client;
mod copy;
mod exec;
mod leftovers;
#[cfg(test)]
mod live_tests;
mod objects;
mod pod;
mod scope;
mod stats;
pub mod transfer;
pub mod unit;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use wasmtime::component::Resource;

use super::execution::Execution;
use crate::runtime::bindings::kubernetes_v0_1_0::cluster::{
    Host, HostPod, Leftover, PodRequest, PodStatus, Target, Transfer,
};
use crate::runtime::bindings::types::{Error, ExecRequest, NetworkMode, ResourceUsage};
use crate::runtime::PluginState;
use objects::{Names, RunMarks, DEFAULT_UID};
use pod::Placement;
use scope::{AllowedCluster, KubernetesGrant, KubernetesScope};

/// A pod of this run, as the plugin holds it. Dropping it leaves the pod: `delete`
/// removes it, and `gc` after a crash.
#[derive(Clone)]
pub struct Pod {
    place: Placement,
    target: exec::Target,
    /// This home's label value, which every deletion selects on.
    home: String,
    disk_bytes: Option<u64>,
    cpu: Arc<stats::CpuClock>,
}

/// What the capability keeps for one run: the operator's section, and the pods it
/// made (the run's record names them).
pub struct KubernetesRun {
    grant: KubernetesGrant,
    pods: Mutex<BTreeSet<String>>,
}

impl KubernetesRun {
    fn new(grant: KubernetesGrant) -> KubernetesRun {
        KubernetesRun {
            grant,
            pods: Mutex::default(),
        }
    }
}

const CREATE_POD: &str = "kubernetes.create-pod";
const REAP: &str = "kubernetes.reap";

impl PluginState {
    /// The plugin's `kubernetes` scope; a store never granted it reaches nothing.
    fn kubernetes_scope(&self) -> KubernetesScope {
        (self.scopes.of::<KubernetesScope>().cloned()).unwrap_or_else(scope::narrowest)
    }

    /// The operator's host-wide section; none allows no cluster.
    fn kubernetes_grant(&self) -> KubernetesGrant {
        self.run
            .state::<KubernetesRun>()
            .map(|r| r.grant.clone())
            .unwrap_or_default()
    }

    /// The allowed cluster `target` names, and its configuration read (the cluster not
    /// contacted yet).
    async fn allowed_cluster(
        &mut self,
        call: &'static str,
        target: &Target,
    ) -> Result<(AllowedCluster, client::Loaded), Error> {
        let grant = self.kubernetes_grant();
        let candidates = grant
            .with_kubeconfig(&self.plugin, call, target.kubeconfig.as_deref())
            .map_err(|d| self.scope_denied(d))?;
        let context = match &target.context {
            Some(context) => context.clone(),
            None => {
                // The current context of the named (listed) file, else of the usual lookup.
                let file = target
                    .kubeconfig
                    .as_ref()
                    .and_then(|_| candidates.first().and_then(|c| c.kubeconfig.clone()));
                client::current_context(file.as_deref())?
            }
        };
        let allowed = candidates
            .into_iter()
            .find(|c| c.context == context)
            .cloned()
            .ok_or_else(|| {
                self.scope_denied(grant.no_cluster(
                    &self.plugin,
                    call,
                    format!("context {context:?}"),
                    &context,
                ))
            })?;
        let loaded = client::load(allowed.kubeconfig.as_deref(), &allowed.context).await?;
        Ok((allowed, loaded))
    }

    async fn create_pod_checked(&mut self, request: PodRequest) -> Result<Pod, Error> {
        let (allowed, loaded) = self.allowed_cluster(CREATE_POD, &request.target).await?;
        let namespace = request
            .target
            .namespace
            .clone()
            .unwrap_or_else(|| loaded.default_namespace().to_string());
        let plugin = self.plugin.clone();
        let uid = request.run_as_user.unwrap_or(DEFAULT_UID);
        let checks = allowed
            .check_namespace(&plugin, CREATE_POD, &namespace)
            .and_then(|()| allowed.check_image(&plugin, CREATE_POD, &request.image))
            .and_then(|()| allowed.check_user(&plugin, CREATE_POD, uid))
            .and_then(|()| match request.network {
                NetworkMode::None => allowed.check_network_none(&plugin, CREATE_POD),
                _ => Ok(()),
            })
            .and_then(|()| {
                self.kubernetes_scope().check(
                    &plugin,
                    CREATE_POD,
                    &allowed.context,
                    &namespace,
                    Some(&request.image),
                )
            });
        checks.map_err(|d| self.scope_denied(d))?;
        if self.run.egress().is_some() {
            return Err(Error::Unavailable(
                "`sandbox.egress` (the egress allowlist) is not kept on Kubernetes by this \
                 build: a pod's traffic does not pass the host's proxy; remove `egress` or use \
                 the docker or process provider"
                    .into(),
            ));
        }
        let home = crate::capabilities::labels::home_label()?;
        let marks = RunMarks {
            run_id: self.run.run_id.clone(),
            owner: crate::registry::Owner::current()
                .map_or_else(|_| format!("pid:{}", std::process::id()), |o| o.to_string()),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            home: home.clone(),
        };
        if !objects::is_label_value(&marks.run_id) {
            return Err(Error::Failed(format!(
                "the run id {:?} cannot be a label value",
                marks.run_id
            )));
        }
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
        let names = Names::new(&marks.run_id, suffix);
        // Only now is the cluster contacted: an unreachable one is `unavailable` here,
        // before anything exists.
        let cluster = loaded.reach().await?;
        let place = Placement {
            cluster,
            namespace,
            names,
        };
        pod::create(&place, &marks, &request, uid, &self.run.events, &plugin).await?;
        if let Some(run) = self.run.state::<KubernetesRun>() {
            run.pods.lock().unwrap().insert(place.id());
        }
        Ok(Pod {
            target: exec::Target {
                api: place.pods(),
                name: place.names.base.clone(),
                workdir: request.workdir.clone(),
            },
            place,
            home,
            disk_bytes: request.resources.disk_bytes,
            cpu: Arc::default(),
        })
    }

    /// Every allowed cluster of this plugin, connected; one that cannot be reached
    /// fails the listing (gc reports it and keeps the run's record).
    async fn leftovers_checked(&mut self) -> Result<Vec<Leftover>, Error> {
        let home = crate::capabilities::labels::home_label()?;
        let scope = self.kubernetes_scope();
        let mut found = Vec::new();
        for allowed in &self.kubernetes_grant().clusters {
            if !scope.contexts.allows(&allowed.context) {
                continue;
            }
            let cluster = client::load(allowed.kubeconfig.as_deref(), &allowed.context)
                .await?
                .reach()
                .await?;
            found.extend(leftovers::list(&cluster, allowed, &scope, &home).await?);
        }
        Ok(found)
    }

    async fn reap_checked(&mut self, id: &str) -> Result<(), Error> {
        let id = leftovers::LeftoverId::decode(id)?;
        let home = crate::capabilities::labels::home_label()?;
        let grant = self.kubernetes_grant();
        let plugin = self.plugin.clone();
        let allowed = grant.clusters.iter().find(|c| id.is_of(c)).ok_or_else(|| {
            self.scope_denied(grant.no_cluster(
                &plugin,
                REAP,
                format!("context {:?}", id.context),
                &id.context,
            ))
        })?;
        allowed
            .check_namespace(&plugin, REAP, &id.namespace)
            .and_then(|()| {
                self.kubernetes_scope()
                    .check(&plugin, REAP, &allowed.context, &id.namespace, None)
            })
            .map_err(|d| self.scope_denied(d))?;
        let cluster = client::load(allowed.kubeconfig.as_deref(), &allowed.context)
            .await?
            .reach()
            .await?;
        leftovers::reap(&cluster, &id, &home).await
    }

    /// The run's workspace, the only host folder a pod's files move to and from.
    fn workspace(&self) -> Option<PathBuf> {
        self.run.bind_scope().run_folders().first().cloned()
    }
}

impl Host for PluginState {
    async fn list_leftovers(&mut self) -> wasmtime::Result<Result<Vec<Leftover>, Error>> {
        self.run.ensure_active()?;
        Ok(self.leftovers_checked().await)
    }

    async fn reap(&mut self, id: String) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        Ok(self.reap_checked(&id).await)
    }

    async fn create_pod(
        &mut self,
        request: PodRequest,
    ) -> wasmtime::Result<Result<Resource<Pod>, Error>> {
        self.run.ensure_active()?;
        match self.create_pod_checked(request).await {
            Ok(pod) => Ok(Ok(self.table.push(pod)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl HostPod for PluginState {
    async fn id(&mut self, this: Resource<Pod>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.place.id())
    }

    async fn exec(
        &mut self,
        this: Resource<Pod>,
        request: ExecRequest,
    ) -> wasmtime::Result<Result<Resource<Execution>, Error>> {
        self.run.ensure_active()?;
        let target = self.table.get(&this)?.target.clone();
        let id = self.run.next_exec_id();
        match exec::start(&target, request, id).await {
            Ok(execution) => Ok(Ok(self.table.push(execution)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn copy_in(
        &mut self,
        this: Resource<Pod>,
        host_dir: String,
        pod_dir: String,
    ) -> wasmtime::Result<Result<Transfer, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get(&this)?.clone();
        let workspace = self.workspace();
        let result = async {
            let host = copy::workspace_only("host-dir", &host_dir, workspace.as_deref())?;
            copy::copy_in(&pod.target, host, &pod_dir, copy::bounds(pod.disk_bytes)).await
        };
        Ok(result.await)
    }

    async fn copy_out(
        &mut self,
        this: Resource<Pod>,
        pod_dir: String,
        host_dir: String,
    ) -> wasmtime::Result<Result<Transfer, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get(&this)?.clone();
        let workspace = self.workspace();
        let result = async {
            let host = copy::workspace_only("host-dir", &host_dir, workspace.as_deref())?;
            copy::copy_out(&pod.target, &pod_dir, host, copy::bounds(pod.disk_bytes)).await
        };
        Ok(result.await)
    }

    async fn stats(
        &mut self,
        this: Resource<Pod>,
    ) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get(&this)?.clone();
        let result = async {
            let status = pod::status(&pod.place).await?;
            let oom = status.reason.as_deref() == Some("OOMKilled");
            match stats::read(&pod.target, &pod.cpu, oom).await {
                Ok(usage) => Ok(usage),
                // A pod whose container ended has no cgroup to read; what it ended of is
                // still worth reporting.
                Err(_) if status.phase != "Running" => Ok(ResourceUsage {
                    cpu_percent: 0.0,
                    memory_bytes: 0,
                    peak_memory_bytes: 0,
                    pids: 0,
                    oom_killed: oom,
                }),
                Err(e) => Err(e),
            }
        };
        Ok(result.await)
    }

    async fn status(&mut self, this: Resource<Pod>) -> wasmtime::Result<Result<PodStatus, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get(&this)?.clone();
        Ok(pod::status(&pod.place).await)
    }

    async fn delete(&mut self, this: Resource<Pod>) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get(&this)?.clone();
        let result = pod::delete(&pod.place, &pod.home).await;
        if result.is_ok() {
            if let Some(run) = self.run.state::<KubernetesRun>() {
                run.pods.lock().unwrap().remove(&pod.place.id());
            }
        }
        Ok(result)
    }

    async fn drop(&mut self, this: Resource<Pod>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
