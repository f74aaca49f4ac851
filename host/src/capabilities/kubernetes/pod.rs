//! A pod's life on the cluster: its objects created in order (owner ConfigMap, Secret,
//! NetworkPolicy, pod), the wait until its container runs with progress events, and
//! their deletion, which also serves `gc`.
//!
//! Order matters: the NetworkPolicy exists before the pod, so `network: none` holds
//! from the pod's first instant; everything is owned by the ConfigMap made first, so
//! whatever step fails, deleting it (and the labelled objects directly, without
//! waiting for the garbage collector) leaves nothing. Deleting is bounded in time and
//! never runs anything in the pod (see [`delete_labelled`]).

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
use crate::wit::kubernetes_v0_1_0::cluster::{PodRequest, PodStatus};
use crate::wit::types::{Error, NetworkMode};

/// How long a pod may take to run its container (scheduling, image, start).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How often the pod's state is read while waiting.
const POLL: Duration = Duration::from_millis(500);

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
        if let Err(cleanup) = delete(place, &marks.home, DELETE_AT_LEISURE).await {
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

/// An error's text, for a message that reports more than one.
pub fn describe(error: &Error) -> String {
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

/// How long deleting a pod's objects may take inside the plugin's `destroy`: the
/// engine gives `destroy` 30 s, of which the copy back takes up to 15 s and 2 s more
/// to stop ([`super::copy::COPY_OUT`]).
pub const DELETE_IN_DESTROY: Duration = Duration::from_secs(10);
/// How long deleting may take for `reap` (gc gives one provider call 60 s) and after
/// a failed creation.
pub const DELETE_AT_LEISURE: Duration = Duration::from_secs(45);

/// Deletes every object of `place`'s set made by this home (`home`), and waits until
/// none is left, within `within`. Nothing left is success.
pub async fn delete(place: &Placement, home: &str, within: Duration) -> Result<(), Error> {
    let selector = format!(
        "{}={},{}={}",
        objects::LABEL_SET,
        place.names.base,
        crate::capabilities::labels::LABEL_HOME,
        home
    );
    delete_labelled(&place.cluster, &place.namespace, &selector, within).await
}

/// Deletes every object matching `selector` in `namespace`, directly rather than
/// through the garbage collector, and waits until none is left, all within `within`.
/// Nothing here reaches into a pod: a pod whose agent broke it goes like any other.
///
/// The Secret (the run's environment) goes first, then the pods (at once, no grace),
/// then the NetworkPolicies, each tried whatever the one before did; the owner last,
/// so `gc` still finds the run by it while anything of it is left. When a deletion
/// failed, the owner is deleted in the foreground: the cluster's garbage collector then
/// deletes what it owns, and the owner stays listed until they are gone.
pub async fn delete_labelled(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
    within: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + within;
    let client = &cluster.client;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..Default::default()
    };
    let list = ListParams::default().labels(selector);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let pods: Api<K8sPod> = Api::namespaced(client.clone(), namespace);
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut failed = Vec::new();
    for result in [
        delete_all(&secrets, "deleting the Secrets", &now, &list, deadline).await,
        delete_all(&pods, "deleting the pods", &now, &list, deadline).await,
        delete_all(
            &policies,
            "deleting the NetworkPolicies",
            &now,
            &list,
            deadline,
        )
        .await,
    ] {
        if let Err(e) = result {
            failed.push(describe(&e));
        }
    }
    let owner = if failed.is_empty() {
        now.clone()
    } else {
        DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
            ..now.clone()
        }
    };
    if let Err(e) = delete_all(
        &configmaps,
        "deleting the owner ConfigMaps",
        &owner,
        &list,
        deadline,
    )
    .await
    {
        failed.push(describe(&e));
    }
    if !failed.is_empty() {
        return Err(Error::Failed(format!(
            "deleting the objects labelled {selector} in namespace {namespace}: {}",
            failed.join("; ")
        )));
    }
    let mut left = Vec::new();
    loop {
        let listed = async {
            let mut found = names("pod", &pods, &list, deadline).await?;
            found.extend(names("secret", &secrets, &list, deadline).await?);
            found.extend(names("networkpolicy", &policies, &list, deadline).await?);
            found.extend(names("configmap", &configmaps, &list, deadline).await?);
            Ok::<_, Error>(found)
        };
        match listed.await {
            Ok(found) if found.is_empty() => return Ok(()),
            Ok(found) => left = found,
            Err(Error::TimedOut(_)) => {}
            Err(e) => return Err(e),
        }
        if Instant::now() + POLL >= deadline {
            return Err(Error::TimedOut(format!(
                "{} in namespace {namespace} {} still there {}s after their deletion",
                if left.is_empty() {
                    "the objects (which could not be listed)".to_owned()
                } else {
                    left.join(", ")
                },
                if left.len() == 1 { "was" } else { "were" },
                within.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One API call, within [`client::CALL_TIMEOUT`] and before `deadline`.
async fn before<T>(
    deadline: Instant,
    what: &str,
    future: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, Error> {
    tokio::time::timeout_at(deadline, client::call(what, future))
        .await
        .unwrap_or_else(|_| {
            Err(Error::TimedOut(format!(
                "{what}: no answer before the deletion's bound"
            )))
        })
}

/// Deletes every object of `api`'s kind that `list` selects.
async fn delete_all<K>(
    api: &Api<K>,
    what: &str,
    params: &DeleteParams,
    list: &ListParams,
    deadline: Instant,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    gone(
        before(deadline, what, api.delete_collection(params, list)).await?,
        what,
    )
}

/// The objects of `api`'s kind that `list` selects, as `kind/name`.
async fn names<K>(
    kind: &str,
    api: &Api<K>,
    list: &ListParams,
    deadline: Instant,
) -> Result<Vec<String>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("listing the {kind}s left");
    let found = before(deadline, &what, api.list(list))
        .await?
        .map_err(|e| client::failed(&what, e))?;
    Ok(found
        .items
        .iter()
        .map(|o| format!("{kind}/{}", o.meta().name.as_deref().unwrap_or("?")))
        .collect())
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
