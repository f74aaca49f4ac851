//! A pod's life on the cluster: its objects created in order (owner ConfigMap, Secret,
//! NetworkPolicy, pod), the wait until its container runs with progress events, and
//! their deletion, which also serves `gc`.
//!
//! Order matters: the NetworkPolicy exists before the pod, so `network: none` holds
//! from the pod's first instant; everything is owned by the ConfigMap made first, so
//! whatever step fails, deleting it (and the labelled objects directly, without
//! waiting for the garbage collector) leaves nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod as K8sPod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use tokio::time::Instant;

use super::client::{self, Cluster};
use super::objects::{self, Names, RunMarks};
use crate::record::{EventBody, EventSink};
use crate::runtime::bindings::kubernetes_v0_1_0::cluster::{PodRequest, PodStatus};
use crate::runtime::bindings::types::{Error, NetworkMode};

/// How long a pod may take to run its container (scheduling, image, start).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How often the pod's state is read while waiting.
const POLL: Duration = Duration::from_millis(500);
/// How long deleting may wait for the pod to be gone.
const GONE_TIMEOUT: Duration = Duration::from_secs(90);

/// Reasons a container waits for that do not pass by themselves.
const CANNOT_START: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// Where one pod's objects are.
#[derive(Clone)]
pub struct Placement {
    pub cluster: Cluster,
    pub namespace: String,
    pub names: Names,
}

impl Placement {
    pub fn pods(&self) -> Api<K8sPod> {
        Api::namespaced(self.cluster.client.clone(), &self.namespace)
    }

    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.names.base)
    }
}

/// Creates the objects of `request` and waits until its container runs. On any
/// failure what was created is deleted and the cluster's reason reported.
pub async fn create(
    place: &Placement,
    marks: &RunMarks,
    request: &PodRequest,
    uid: u32,
    events: &Arc<EventSink>,
    plugin: &str,
) -> Result<(), Error> {
    let labels = objects::labels(marks, &place.names, &request.labels)?;
    let made = make(place, marks, request, uid, &labels, events, plugin).await;
    if let Err(e) = made {
        if let Err(cleanup) = delete(place, &marks.home).await {
            return Err(Error::Failed(format!(
                "{}; deleting what was created also failed: {}",
                describe(&e),
                describe(&cleanup)
            )));
        }
        return Err(e);
    }
    Ok(())
}

fn describe(error: &Error) -> String {
    match error {
        Error::InvalidSpec(f) => format!("{}: {}", f.path, f.message),
        Error::Unavailable(m) | Error::Denied(m) | Error::Failed(m) | Error::TimedOut(m) => {
            m.clone()
        }
    }
}

async fn make(
    place: &Placement,
    marks: &RunMarks,
    request: &PodRequest,
    uid: u32,
    labels: &BTreeMap<String, String>,
    events: &Arc<EventSink>,
    plugin: &str,
) -> Result<(), Error> {
    let client = &place.cluster.client;
    let ns = &place.namespace;
    let names = &place.names;
    // Every object is checked before the first is created.
    let owner = objects::owner_config_map(names, ns, labels, marks);
    let placeholder = objects::owner_reference(&ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some(String::new()),
            ..owner.metadata.clone()
        },
        ..Default::default()
    })?;
    objects::secret(names, ns, labels, marks, &placeholder, request)?;
    objects::pod(names, ns, labels, marks, &placeholder, request, uid)?;

    let post = PostParams::default();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let owner = client::checked(
        "creating the run's owner ConfigMap",
        configmaps.create(&post, &owner),
    )
    .await?;
    let owner = objects::owner_reference(&owner)?;
    let secret = objects::secret(names, ns, labels, marks, &owner, request)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    client::checked(
        "creating the environment's Secret",
        secrets.create(&post, &secret),
    )
    .await?;
    if matches!(request.network, NetworkMode::None) {
        let policy = objects::network_policy(names, ns, labels, marks, &owner);
        let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
        client::checked(
            "creating the NetworkPolicy of `network: none`",
            policies.create(&post, &policy),
        )
        .await?;
    }
    let pod = objects::pod(names, ns, labels, marks, &owner, request, uid)?;
    client::checked("creating the pod", place.pods().create(&post, &pod)).await?;
    progress(events, plugin, format!("pod {} created", place.id()));
    wait_running(place, events, plugin).await
}

fn progress(events: &EventSink, plugin: &str, message: String) {
    events.emit(
        plugin,
        EventBody::Progress {
            phase: "pod".into(),
            message,
            current: None,
            total: None,
        },
    );
}

/// Waits until the container runs, reporting each change; a pod that cannot start is
/// an error with the cluster's reason.
async fn wait_running(place: &Placement, events: &EventSink, plugin: &str) -> Result<(), Error> {
    let deadline = Instant::now() + START_TIMEOUT;
    let pods = place.pods();
    let mut last = String::new();
    loop {
        let pod = client::checked("reading the pod", pods.get(&place.names.base)).await?;
        let state = Starting::of(&pod);
        let shown = state.to_string();
        if shown != last {
            progress(events, plugin, format!("pod {}: {shown}", place.id()));
            last = shown;
        }
        match state {
            Starting::Running => return Ok(()),
            Starting::Failed(why) => {
                return Err(Error::Unavailable(format!(
                    "pod {} cannot start: {why}; it was deleted",
                    place.id()
                )))
            }
            Starting::Waiting(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(Error::TimedOut(format!(
                "pod {} did not start within {}s (last: {last}); it was deleted",
                place.id(),
                START_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Where a starting pod is.
#[derive(Debug, PartialEq, Eq)]
enum Starting {
    Running,
    Waiting(String),
    Failed(String),
}

impl std::fmt::Display for Starting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Starting::Running => f.write_str("started"),
            Starting::Waiting(s) | Starting::Failed(s) => f.write_str(s),
        }
    }
}

impl Starting {
    fn of(pod: &K8sPod) -> Starting {
        let Some(status) = &pod.status else {
            return Starting::Waiting("accepted".into());
        };
        let phase = status.phase.as_deref().unwrap_or("Pending");
        if matches!(phase, "Failed" | "Succeeded") {
            return Starting::Failed(format!(
                "it ended ({phase}{})",
                reason_text(status.reason.as_deref(), status.message.as_deref())
            ));
        }
        let scheduled = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled");
        if let Some(c) = scheduled.filter(|c| c.status == "False") {
            if c.reason.as_deref() == Some("Unschedulable") {
                return Starting::Failed(format!(
                    "Unschedulable{}",
                    reason_text(None, c.message.as_deref())
                ));
            }
        }
        let container = status
            .container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == objects::CONTAINER);
        let Some(container) = container else {
            return Starting::Waiting(match scheduled.filter(|c| c.status == "True") {
                Some(_) => format!(
                    "scheduled on {}",
                    pod.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .unwrap_or("a node")
                ),
                None => "waiting to be scheduled".into(),
            });
        };
        let state = container.state.as_ref();
        if state.and_then(|s| s.running.as_ref()).is_some() {
            return Starting::Running;
        }
        if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            return Starting::Failed(format!(
                "its container ended{}",
                reason_text(t.reason.as_deref(), t.message.as_deref())
            ));
        }
        match state.and_then(|s| s.waiting.as_ref()) {
            Some(w) => {
                let reason = w.reason.as_deref().unwrap_or("waiting");
                let text = format!("{reason}{}", reason_text(None, w.message.as_deref()));
                if CANNOT_START.contains(&reason) {
                    Starting::Failed(format!("image {}: {text}", container.image))
                } else {
                    Starting::Waiting(text)
                }
            }
            None => Starting::Waiting("starting".into()),
        }
    }
}

fn reason_text(reason: Option<&str>, message: Option<&str>) -> String {
    match (reason, message) {
        (Some(r), Some(m)) => format!(": {r}: {m}"),
        (Some(r), None) => format!(": {r}"),
        (None, Some(m)) => format!(": {m}"),
        (None, None) => String::new(),
    }
}

/// The pod's state as the cluster reports it; `OOMKilled` from its container.
pub async fn status(place: &Placement) -> Result<PodStatus, Error> {
    let pod = client::checked("reading the pod", place.pods().get(&place.names.base)).await?;
    Ok(status_of(&pod))
}

pub fn status_of(pod: &K8sPod) -> PodStatus {
    let status = pod.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == objects::CONTAINER);
    let ended = container.and_then(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.clone()))
    });
    PodStatus {
        phase: status.phase.unwrap_or_else(|| "Pending".into()),
        reason: status
            .reason
            .or_else(|| ended.as_ref().and_then(|t| t.reason.clone())),
        message: status
            .message
            .or_else(|| ended.as_ref().and_then(|t| t.message.clone())),
    }
}

/// Deletes every object of `place`'s set made by this home (`home`), and waits until
/// the pod is gone. Nothing left is success.
pub async fn delete(place: &Placement, home: &str) -> Result<(), Error> {
    let selector = format!(
        "{}={},{}={}",
        objects::LABEL_SET,
        place.names.base,
        crate::capabilities::labels::LABEL_HOME,
        home
    );
    delete_labelled(&place.cluster, &place.namespace, &selector).await
}

/// Deletes every object matching `selector` in `namespace`: the pods first (at once,
/// no grace), the rest directly rather than through the garbage collector, the owner
/// last; then waits until no pod is left.
pub async fn delete_labelled(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
) -> Result<(), Error> {
    let client = &cluster.client;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..Default::default()
    };
    let list = ListParams::default().labels(selector);
    let pods: Api<K8sPod> = Api::namespaced(client.clone(), namespace);
    gone(
        client::call("deleting the pods", pods.delete_collection(&now, &list)).await?,
        "deleting the pods",
    )?;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    gone(
        client::call(
            "deleting the NetworkPolicies",
            policies.delete_collection(&now, &list),
        )
        .await?,
        "deleting the NetworkPolicies",
    )?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    gone(
        client::call(
            "deleting the Secrets",
            secrets.delete_collection(&now, &list),
        )
        .await?,
        "deleting the Secrets",
    )?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    gone(
        client::call(
            "deleting the owner ConfigMaps",
            configmaps.delete_collection(&now, &list),
        )
        .await?,
        "deleting the owner ConfigMaps",
    )?;
    let deadline = Instant::now() + GONE_TIMEOUT;
    loop {
        let left = client::checked("listing the pods left", pods.list(&list)).await?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let names: Vec<_> = left
                .items
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            return Err(Error::TimedOut(format!(
                "pods {} in namespace {namespace} were still there {}s after their deletion",
                names.join(", "),
                GONE_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A deletion's answer: a 404 (nothing there) is what was wanted.
fn gone<T>(answer: Result<T, kube::Error>, what: &str) -> Result<(), Error> {
    match answer {
        Ok(_) => Ok(()),
        Err(e) if client::status(&e) == Some(404) => Ok(()),
        Err(e) => Err(client::failed(what, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> K8sPod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_pod_that_cannot_start_says_why() {
        let never = pod(serde_json::json!({
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "main", "image": "agentgate.test/absent:1", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}
            }]}
        }));
        let Starting::Failed(why) = Starting::of(&never) else {
            panic!("{:?}", Starting::of(&never))
        };
        assert!(
            why.contains("ErrImageNeverPull") && why.contains("agentgate.test/absent:1"),
            "{why}"
        );
        let unschedulable = pod(serde_json::json!({
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient memory."
            }]}
        }));
        assert!(
            matches!(Starting::of(&unschedulable), Starting::Failed(w) if w.contains("Insufficient memory"))
        );
        let creating = pod(serde_json::json!({
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}
            }]}
        }));
        assert_eq!(
            Starting::of(&creating),
            Starting::Waiting("ContainerCreating".into())
        );
    }

    #[test]
    fn an_oom_killed_container_is_reported() {
        let oom = pod(serde_json::json!({
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }));
        let status = status_of(&oom);
        assert_eq!(status.phase, "Failed");
        assert_eq!(status.reason.as_deref(), Some("OOMKilled"));
        let deadline = pod(serde_json::json!({
            "status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"}
        }));
        assert_eq!(
            status_of(&deadline).reason.as_deref(),
            Some("DeadlineExceeded")
        );
    }
}
