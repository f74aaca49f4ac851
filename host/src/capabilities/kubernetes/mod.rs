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
//!
//! What the host runs in a pod for itself (copies, the usage reading, a kill) is
//! bounded in time, and deleting a run's objects never runs anything in the pod: an
//! agent that breaks its pod (a root pod's `/bin/sh` replaced) cannot keep the pod or
//! its Secret alive. What a copy back leaves out is recorded on the run
//! ([`crate::capabilities::RunContext::record_left_out`]) whatever the plugin reports.
//! The run keeps the pods it made ([`KubernetesRun`]) until they are deleted, and
//! [`delete_left`] deletes them without the plugin.

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
use crate::beneath::archive as transfer;
pub(crate) mod unit;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use wasmtime::component::Resource;

use crate::capabilities::view::TableAs;
use crate::capabilities::PluginView;
use crate::wit::execution::Execution as WitExecution;
use crate::wit::kubernetes_v0_1_0::cluster::Pod as WitPod;
use crate::wit::kubernetes_v0_1_0::cluster::{
    Host, HostPod, Leftover, PodRequest, PodStatus, Target, Transfer,
};
use crate::wit::types::{Error, ExecRequest, NetworkMode, ResourceUsage};
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
/// made and has not deleted yet, by id (the run's record names them), with what
/// deleting them needs.
pub struct KubernetesRun {
    grant: KubernetesGrant,
    pods: Mutex<BTreeMap<String, (Placement, String)>>,
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

impl PluginView<'_> {
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
        let identity = self.run.identity()?;
        let home = identity.home.clone();
        let marks = RunMarks {
            run_id: identity.run_id.clone(),
            owner: identity.owner.clone(),
            created_unix: identity
                .created
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
            (run.pods.lock().unwrap()).insert(place.id(), (place.clone(), home.clone()));
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
        let home = self.run.identity()?.home.clone();
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
        let home = self.run.identity()?.home.clone();
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

impl Host for PluginView<'_> {
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
    ) -> wasmtime::Result<Result<Resource<WitPod>, Error>> {
        self.run.ensure_active()?;
        match self.create_pod_checked(request).await {
            Ok(pod) => Ok(Ok(self.table.push_as(pod)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl HostPod for PluginView<'_> {
    async fn id(&mut self, this: Resource<WitPod>) -> wasmtime::Result<String> {
        Ok(self.table.get_as::<Pod, _>(&this)?.place.id())
    }

    async fn exec(
        &mut self,
        this: Resource<WitPod>,
        request: ExecRequest,
    ) -> wasmtime::Result<Result<Resource<WitExecution>, Error>> {
        self.run.ensure_active()?;
        let target = self.table.get_as::<Pod, _>(&this)?.target.clone();
        let id = self.run.next_exec_id();
        match exec::start(&target, request, id).await {
            Ok(execution) => Ok(Ok(self.table.push_as(execution)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn copy_in(
        &mut self,
        this: Resource<WitPod>,
        host_dir: String,
        pod_dir: String,
    ) -> wasmtime::Result<Result<Transfer, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get_as::<Pod, _>(&this)?.clone();
        let workspace = self.workspace();
        let result = async {
            let host = copy::workspace_only("host-dir", &host_dir, workspace.as_deref())?;
            copy::copy_in(&pod.target, host, &pod_dir, copy::bounds(pod.disk_bytes))
                .await
                .map(copy::as_transfer)
                .map_err(|failed| failed.error)
        };
        Ok(result.await)
    }

    async fn copy_out(
        &mut self,
        this: Resource<WitPod>,
        pod_dir: String,
        host_dir: String,
    ) -> wasmtime::Result<Result<Transfer, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get_as::<Pod, _>(&this)?.clone();
        let workspace = self.workspace();
        let result = async {
            let host = copy::workspace_only("host-dir", &host_dir, workspace.as_deref())?;
            copy::copy_out(&pod.target, &pod_dir, host, copy::bounds(pod.disk_bytes)).await
        };
        Ok(record_copy_back(&self.run, result.await))
    }

    async fn stats(
        &mut self,
        this: Resource<WitPod>,
    ) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get_as::<Pod, _>(&this)?.clone();
        let reading = async {
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
        let result = tokio::time::timeout(stats::LIMIT, reading)
            .await
            .unwrap_or_else(|_| {
                Err(Error::TimedOut(format!(
                    "reading pod {}'s usage took more than {}s",
                    pod.place.id(),
                    stats::LIMIT.as_secs()
                )))
            });
        Ok(result)
    }

    async fn status(
        &mut self,
        this: Resource<WitPod>,
    ) -> wasmtime::Result<Result<PodStatus, Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get_as::<Pod, _>(&this)?.clone();
        Ok(pod::status(&pod.place).await)
    }

    async fn delete(&mut self, this: Resource<WitPod>) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        let pod = self.table.get_as::<Pod, _>(&this)?.clone();
        let result = pod::delete(&pod.place, &pod.home, pod::DELETE_IN_DESTROY).await;
        if result.is_ok() {
            if let Some(run) = self.run.state::<KubernetesRun>() {
                run.pods.lock().unwrap().remove(&pod.place.id());
            }
        }
        Ok(result)
    }

    async fn drop(&mut self, this: Resource<WitPod>) -> wasmtime::Result<()> {
        self.table.delete_as::<Pod, _>(this)?;
        Ok(())
    }
}

/// Records on `run` what a copy back left out: each entry refused, and the whole copy
/// (`.`) when it did not finish. Returns the plugin's answer.
fn record_copy_back(
    run: &crate::capabilities::RunContext,
    result: Result<transfer::Moved, copy::CopyFailed>,
) -> Result<Transfer, Error> {
    let moved = match &result {
        Ok(moved) => moved,
        Err(failed) => &failed.moved,
    };
    for skipped in &moved.skipped {
        run.record_left_out(&skipped.path, &skipped.reason);
    }
    match result {
        Ok(moved) => Ok(copy::as_transfer(moved)),
        Err(failed) => {
            run.record_left_out(
                ".",
                format!(
                    "the copy back from the pod did not finish, so what it had not reached \
                     was not brought back: {}",
                    pod::describe(&failed.error)
                ),
            );
            Err(failed.error)
        }
    }
}

/// Deletes every pod `run` made and has not deleted yet, with its Secret, ConfigMap
/// and NetworkPolicy, without the plugin (which may have trapped) and without
/// reaching into the pods; within [`pod::DELETE_AT_LEISURE`] each. Says which pods it
/// deleted (`pods`); the error names those left. For the engine when a provider's
/// `destroy` failed (`HostCapability::delete_left`); `gc` finds the same objects
/// through the provider's `list-leftovers`.
pub async fn delete_left(
    run: &crate::capabilities::RunContext,
) -> Result<crate::capabilities::Reclaimed, crate::capabilities::ReclaimError> {
    let mut deleted = crate::capabilities::Reclaimed {
        kind: "pods",
        names: Vec::new(),
    };
    let Some(state) = run.state::<KubernetesRun>() else {
        return Ok(deleted);
    };
    let pods: Vec<(String, (Placement, String))> = state
        .pods
        .lock()
        .unwrap()
        .iter()
        .map(|(id, held)| (id.clone(), held.clone()))
        .collect();
    let mut failed = Vec::new();
    for (id, (place, home)) in pods {
        match pod::delete(&place, &home, pod::DELETE_AT_LEISURE).await {
            Ok(()) => {
                state.pods.lock().unwrap().remove(&id);
                deleted.names.push(id);
            }
            Err(e) => failed.push(format!("pod {id}: {}", pod::describe(&e))),
        }
    }
    if failed.is_empty() {
        Ok(deleted)
    } else {
        Err(crate::capabilities::ReclaimError::NotDeleted { failures: failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::RunContext;
    use crate::record::{EventSink, LeftOutFile};

    fn run() -> Arc<RunContext> {
        RunContext::new(
            crate::capabilities::labels::RunIdentity::new(
                "r".into(),
                "pid=1,start=1,boot=test,pidns=1".into(),
                std::path::Path::new("/"),
            ),
            Arc::new(EventSink::discard()),
            Default::default(),
        )
    }

    #[test]
    fn deleting_what_a_run_holds_is_a_future_the_engine_can_box() {
        fn boxable<'a>(
            f: impl std::future::Future<
                    Output = Result<
                        crate::capabilities::Reclaimed,
                        crate::capabilities::ReclaimError,
                    >,
                > + Send
                + 'a,
        ) -> crate::capabilities::DeleteLeft<'a> {
            Box::pin(f)
        }
        let run = run();
        let nothing = futures_util::FutureExt::now_or_never(boxable(delete_left(&run)));
        assert!(matches!(nothing, Some(Ok(r)) if r.kind == "pods" && r.names.is_empty()));
    }

    fn skipped(path: &str, reason: &str) -> transfer::Skipped {
        transfer::Skipped {
            path: path.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn what_a_copy_back_left_out_is_recorded_on_the_run_whatever_the_plugin_says() {
        let run = run();
        let moved = transfer::Moved {
            files: 3,
            bytes: 10,
            skipped: vec![
                skipped("one/pipe", "a fifo, left out"),
                skipped("one/hard", "a hard link to `one/pipe`, which is not a file"),
            ],
        };
        let transfer = record_copy_back(&run, Ok(moved)).unwrap();
        assert_eq!(
            transfer.skipped,
            [
                "one/pipe: a fifo, left out",
                "one/hard: a hard link to `one/pipe`, which is not a file"
            ]
        );
        assert_eq!(
            run.left_out(),
            [
                LeftOutFile {
                    path: "one/pipe".into(),
                    reason: "a fifo, left out".into()
                },
                LeftOutFile {
                    path: "one/hard".into(),
                    reason: "a hard link to `one/pipe`, which is not a file".into()
                }
            ]
        );

        // A copy cut short: what it left out before, and the whole copy.
        let run = super::tests::run();
        let failed = copy::CopyFailed {
            error: Error::TimedOut("the copy was cut: no byte moved for 10s".into()),
            moved: transfer::Moved {
                skipped: vec![skipped("p", "a fifo, left out")],
                ..Default::default()
            },
        };
        let error = record_copy_back(&run, Err(failed)).unwrap_err();
        assert!(matches!(error, Error::TimedOut(_)), "{error:?}");
        let left = run.left_out();
        assert_eq!(left.len(), 2, "{left:?}");
        assert_eq!(left[0].path, "p");
        assert_eq!(left[1].path, ".");
        assert!(
            left[1].reason.contains("did not finish") && left[1].reason.contains("no byte moved"),
            "{left:?}"
        );
    }
}
