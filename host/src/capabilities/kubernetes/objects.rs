//! The objects the host sends to a cluster for one pod, built from the plugin's
//! `pod-request` without touching the cluster (pure, so every rule is unit-tested).
//!
//! What makes the pod safe is written here, not negotiated: the locked-down security
//! context, no service-account token, no host namespace, the environment in a Secret
//! read with `envFrom`, requests equal to limits, `activeDeadlineSeconds` from the
//! timeout, and the host's labels on every object, which a plugin cannot set or forge
//! (`io.agentgate.*` is refused). Every object but the owner ConfigMap is owned by it
//! (ownerReferences), so deleting the owner removes the rest even after a crash.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, EmptyDirVolumeSource, EnvFromSource, Pod,
    PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, Secret, SecretEnvSource,
    SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;

use crate::capabilities::invalid_spec;
use crate::wit::kubernetes_v0_1_0::cluster::PodRequest;
use crate::wit::types::{Error, Label, NetworkMode};

use crate::capabilities::labels::{
    digest, LABEL_CREATED, LABEL_HOME, LABEL_OWNER, LABEL_PREFIX, LABEL_RUN_ID,
};
/// The objects made for one pod (owner, Secret, NetworkPolicy, pod) share this value.
pub const LABEL_SET: &str = "io.agentgate.set";
/// `owner` on the per-run ConfigMap that owns the rest.
pub const LABEL_ROLE: &str = "io.agentgate.role";
pub const ROLE_OWNER: &str = "owner";

/// The main container's name.
pub const CONTAINER: &str = "main";
/// The workspace volume's name.
const WORKSPACE_VOLUME: &str = "workspace";
/// The uid a pod runs as when the request names none: nobody.
pub const DEFAULT_UID: u32 = 65534;
/// Added to the timeout for `activeDeadlineSeconds`: the host's own cleanup (copying
/// the changes out) runs after the agent's time is up.
pub const DEADLINE_GRACE_SECONDS: i64 = 300;
/// `activeDeadlineSeconds` when the request has no timeout: a pod whose host died is
/// ended by the cluster within a day whatever the request said.
pub const DEFAULT_DEADLINE_SECONDS: i64 = 24 * 3600;

/// The main container's command: it waits, ends on TERM, and does nothing else;
/// every command of the run comes through `pods/exec`.
const IDLE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// Who made the objects, written by the host on every one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMarks {
    /// The run's id (32 lowercase hex digits).
    pub run_id: String,
    /// This agentgate process (the run identity's `owner`), in full; its label is a
    /// digest, since a label value cannot hold it.
    pub owner: String,
    /// Seconds since the epoch.
    pub created_unix: u64,
    /// The digest of this agentgate home ([`crate::capabilities::labels::home_label`]).
    pub home: String,
}

/// The names of one pod's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Shared by all four (they are of different kinds), and the [`LABEL_SET`] value.
    pub base: String,
}

impl Names {
    /// `ag-<run id's first 12>-<suffix>`: short enough for a pod's hostname and a label.
    pub fn new(run_id: &str, suffix: &str) -> Names {
        let run: String = run_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(12)
            .collect::<String>()
            .to_ascii_lowercase();
        Names {
            base: format!("ag-{run}-{suffix}"),
        }
    }
}

/// A label value the API server accepts: 63 characters at most, alphanumerics and
/// `-_.` inside, alphanumeric at both ends (empty is allowed).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric)
}

/// The host's labels of `names`'s objects.
pub fn host_labels(marks: &RunMarks, names: &Names) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_RUN_ID.to_string(), marks.run_id.clone()),
        (LABEL_OWNER.to_string(), digest(&marks.owner)),
        (LABEL_CREATED.to_string(), marks.created_unix.to_string()),
        (LABEL_HOME.to_string(), marks.home.clone()),
        (LABEL_SET.to_string(), names.base.clone()),
    ])
}

/// The full values the labels are digests of, for a person reading the objects.
fn host_annotations(marks: &RunMarks) -> BTreeMap<String, String> {
    let created = std::time::UNIX_EPOCH + std::time::Duration::from_secs(marks.created_unix);
    BTreeMap::from([
        (LABEL_OWNER.to_string(), marks.owner.clone()),
        (
            LABEL_CREATED.to_string(),
            humantime::format_rfc3339_seconds(created).to_string(),
        ),
    ])
}

/// The plugin's labels with the host's: a plugin label under [`LABEL_PREFIX`] is
/// refused (it would forge what `gc` trusts), as is one the API server would refuse.
pub fn labels(
    marks: &RunMarks,
    names: &Names,
    plugin: &[Label],
) -> Result<BTreeMap<String, String>, Error> {
    let mut labels = BTreeMap::new();
    for (i, label) in plugin.iter().enumerate() {
        if label.key.starts_with(LABEL_PREFIX) {
            return Err(invalid_spec(
                &format!("labels[{i}].key"),
                format!(
                    "{:?}: keys under {LABEL_PREFIX} are the host's; choose another prefix",
                    label.key
                ),
            ));
        }
        let name = label.key.rsplit('/').next().unwrap_or_default();
        if name.is_empty() || !is_label_value(name) || label.key.len() > 253 + 1 + 63 {
            return Err(invalid_spec(
                &format!("labels[{i}].key"),
                format!(
                    "{:?} is not a label key ([prefix/]name, name: 63 alphanumerics, -, _ or .)",
                    label.key
                ),
            ));
        }
        if !is_label_value(&label.value) {
            return Err(invalid_spec(
                &format!("labels[{i}].value"),
                format!(
                    "{:?} is not a label value (63 characters at most: alphanumerics, -, _ or ., alphanumeric at both ends)",
                    label.value
                ),
            ));
        }
        labels.insert(label.key.clone(), label.value.clone());
    }
    labels.extend(host_labels(marks, names));
    Ok(labels)
}

fn meta(
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    marks: &RunMarks,
    owner: Option<&OwnerReference>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels.clone()),
        annotations: Some(host_annotations(marks)),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

/// The per-run ConfigMap every other object is owned by.
pub fn owner_config_map(
    names: &Names,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    marks: &RunMarks,
) -> ConfigMap {
    let mut labels = labels.clone();
    labels.insert(LABEL_ROLE.into(), ROLE_OWNER.into());
    ConfigMap {
        metadata: meta(&names.base, namespace, &labels, marks, None),
        data: Some(BTreeMap::from([(
            "purpose".to_string(),
            "Owns the objects of one agentgate run; deleting it deletes them.".to_string(),
        )])),
        ..Default::default()
    }
}

/// How the other objects point at the owner ConfigMap (`uid` from its creation).
pub fn owner_reference(owner: &ConfigMap) -> Result<OwnerReference, Error> {
    let uid = owner.metadata.uid.clone().ok_or_else(|| {
        Error::Failed("the API server returned the owner ConfigMap without a uid".into())
    })?;
    Ok(OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap_or_default(),
        uid,
        block_owner_deletion: Some(true),
        controller: Some(true),
    })
}

/// The sandbox's environment, as a Secret the pod reads with `envFrom`.
pub fn secret(
    names: &Names,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    marks: &RunMarks,
    owner: &OwnerReference,
    request: &PodRequest,
) -> Result<Secret, Error> {
    let mut data = BTreeMap::new();
    for (i, var) in request.env.iter().enumerate() {
        crate::env_name::check(&var.name, crate::env_name::Rule::Kubernetes)
            .map_err(|invalid| invalid_spec(&format!("env[{i}].name"), invalid.to_string()))?;
        data.insert(var.name.clone(), ByteString(var.value.clone().into_bytes()));
    }
    Ok(Secret {
        metadata: meta(&names.base, namespace, labels, marks, Some(owner)),
        type_: Some("Opaque".into()),
        data: Some(data),
        immutable: Some(true),
        ..Default::default()
    })
}

/// `network: none`: a policy that selects the pod and allows no ingress and no egress.
pub fn network_policy(
    names: &Names,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    marks: &RunMarks,
    owner: &OwnerReference,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(&names.base, namespace, labels, marks, Some(owner)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (LABEL_RUN_ID.to_string(), marks.run_id.clone()),
                    (LABEL_SET.to_string(), names.base.clone()),
                ])),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(Vec::new()),
            egress: Some(Vec::new()),
        }),
    }
}

/// `activeDeadlineSeconds` for a timeout: rounded up, plus [`DEADLINE_GRACE_SECONDS`].
pub fn active_deadline(timeout_ms: Option<u64>) -> i64 {
    match timeout_ms {
        Some(ms) => i64::try_from(ms.div_ceil(1000))
            .unwrap_or(i64::MAX / 2)
            .saturating_add(DEADLINE_GRACE_SECONDS),
        None => DEFAULT_DEADLINE_SECONDS,
    }
}

/// The pod, with `uid` already checked against the operator's scope.
pub fn pod(
    names: &Names,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    marks: &RunMarks,
    owner: &OwnerReference,
    request: &PodRequest,
    uid: u32,
) -> Result<Pod, Error> {
    if request.image.trim().is_empty() {
        return Err(invalid_spec("image", "no image named"));
    }
    if !request.workdir.starts_with('/') || request.workdir.split('/').any(|c| c == "..") {
        return Err(invalid_spec(
            "workdir",
            format!(
                "`{}` must be an absolute path without `..`",
                request.workdir
            ),
        ));
    }
    if matches!(request.network, NetworkMode::Host) {
        return Err(Error::Denied(
            "network \"host\" is never allowed on Kubernetes: a pod on the node's network \
             reaches everything the node does; use `none` or `bridge`"
                .into(),
        ));
    }
    let r = &request.resources;
    if r.pids.is_some() {
        return Err(invalid_spec(
            "resources.pids",
            "Kubernetes limits processes per node (the kubelet's podPidsLimit), not per pod; \
             remove `pids` for this provider",
        ));
    }
    let mut limits = BTreeMap::new();
    if let Some(m) = r.cpu_millicores {
        if m == 0 {
            return Err(invalid_spec(
                "resources.cpu-millicores",
                "must be more than 0",
            ));
        }
        limits.insert("cpu".to_string(), Quantity(format!("{m}m")));
    }
    if let Some(bytes) = r.memory_bytes {
        limits.insert("memory".to_string(), Quantity(bytes.to_string()));
    }
    if let Some(bytes) = r.disk_bytes {
        limits.insert("ephemeral-storage".to_string(), Quantity(bytes.to_string()));
    }
    let tolerations = request
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect::<Vec<_>>();
    let node_selector: BTreeMap<String, String> = request
        .node_selector
        .iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect();
    let uid = i64::from(uid);
    let seccomp = || SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(request.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), IDLE.into()]),
        working_dir: Some(request.workdir.clone()),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: names.base.clone(),
                optional: Some(false),
            }),
            ..Default::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: (!limits.is_empty()).then(|| limits.clone()),
            limits: (!limits.is_empty()).then_some(limits),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            run_as_non_root: Some(uid != 0),
            run_as_user: Some(uid),
            run_as_group: Some(uid),
            seccomp_profile: Some(seccomp()),
            proc_mount: Some("Default".into()),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: WORKSPACE_VOLUME.into(),
            mount_path: request.workdir.clone(),
            ..Default::default()
        }]),
        stdin: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    Ok(Pod {
        metadata: meta(&names.base, namespace, labels, marks, Some(owner)),
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".into()),
            active_deadline_seconds: Some(active_deadline(r.timeout_ms)),
            automount_service_account_token: Some(false),
            service_account_name: request.service_account.clone(),
            runtime_class_name: request.runtime_class_name.clone(),
            node_selector: (!node_selector.is_empty()).then_some(node_selector),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            host_users: None,
            share_process_namespace: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(0),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(uid != 0),
                run_as_user: Some(uid),
                run_as_group: Some(uid),
                fs_group: Some(uid),
                seccomp_profile: Some(seccomp()),
                ..Default::default()
            }),
            volumes: Some(vec![Volume {
                name: WORKSPACE_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: None,
                    size_limit: r.disk_bytes.map(|b| Quantity(b.to_string())),
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::kubernetes_v0_1_0::cluster::{Target, Toleration as WitToleration};
    use crate::wit::types::{EnvVar, Resources};

    fn marks() -> RunMarks {
        RunMarks {
            run_id: "0192abcd0123456789abcdef01234567".into(),
            owner: "pid=42,start=7,boot=b,pidns=1".into(),
            created_unix: 1_800_000_000,
            home: digest("/home/u/.agentgate"),
        }
    }

    fn request() -> PodRequest {
        PodRequest {
            target: Target {
                kubeconfig: None,
                context: None,
                namespace: Some("agentgate-1".into()),
            },
            image: "agentgate.test/busybox:1".into(),
            env: vec![EnvVar {
                name: "API_TOKEN".into(),
                value: "s3cr3t-value".into(),
            }],
            workdir: "/workspace".into(),
            resources: Resources {
                cpu_millicores: Some(500),
                memory_bytes: Some(64 << 20),
                disk_bytes: Some(1 << 30),
                pids: None,
                timeout_ms: Some(90_500),
            },
            network: NetworkMode::None,
            service_account: None,
            runtime_class_name: None,
            node_selector: vec![],
            tolerations: vec![WitToleration {
                key: Some("dedicated".into()),
                operator: Some("Equal".into()),
                value: Some("agents".into()),
                effect: Some("NoSchedule".into()),
                toleration_seconds: None,
            }],
            run_as_user: None,
            labels: vec![Label {
                key: "team".into(),
                value: "a".into(),
            }],
        }
    }

    fn owner_ref() -> OwnerReference {
        let names = Names::new(&marks().run_id, "x1");
        let mut cm = owner_config_map(&names, "ns", &BTreeMap::new(), &marks());
        cm.metadata.uid = Some("uid-1".into());
        owner_reference(&cm).unwrap()
    }

    fn built(request: &PodRequest) -> Result<Pod, Error> {
        let names = Names::new(&marks().run_id, "x1");
        let labels = labels(&marks(), &names, &request.labels)?;
        pod(
            &names,
            "agentgate-1",
            &labels,
            &marks(),
            &owner_ref(),
            request,
            DEFAULT_UID,
        )
    }

    #[test]
    fn the_pod_is_locked_down_whatever_the_request() {
        let pod = built(&request()).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.host_network, Some(false));
        assert_eq!(spec.host_pid, Some(false));
        assert_eq!(spec.host_ipc, Some(false));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let psc = spec.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(65534));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &spec.containers[0];
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.privileged, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        // No host path volume, only the workspace's emptyDir, sized by the disk.
        let volumes = spec.volumes.unwrap();
        assert_eq!(volumes.len(), 1);
        assert!(volumes[0].host_path.is_none());
        assert_eq!(
            volumes[0].empty_dir.as_ref().unwrap().size_limit,
            Some(Quantity((1u64 << 30).to_string()))
        );
        assert_eq!(c.working_dir.as_deref(), Some("/workspace"));
        assert_eq!(
            spec.tolerations.unwrap()[0].key.as_deref(),
            Some("dedicated")
        );
    }

    #[test]
    fn the_environment_is_in_the_secret_never_in_the_pod_spec() {
        let request = request();
        let pod = built(&request).unwrap();
        let text = serde_json::to_string(&pod).unwrap();
        assert!(!text.contains("s3cr3t-value"), "{text}");
        assert!(!text.contains("API_TOKEN"), "{text}");
        let c = &pod.spec.unwrap().containers[0];
        assert!(c.env.is_none());
        let names = Names::new(&marks().run_id, "x1");
        assert_eq!(
            c.env_from.as_ref().unwrap()[0]
                .secret_ref
                .as_ref()
                .unwrap()
                .name,
            names.base
        );
        let secret = secret(
            &names,
            "ns",
            &BTreeMap::new(),
            &marks(),
            &owner_ref(),
            &request,
        )
        .unwrap();
        assert_eq!(
            secret.data.unwrap()["API_TOKEN"],
            ByteString(b"s3cr3t-value".to_vec())
        );
        assert_eq!(secret.metadata.owner_references.unwrap()[0].uid, "uid-1");
        let mut bad = request.clone();
        bad.env[0].name = "1BAD=".into();
        assert!(matches!(
            super::secret(&names, "ns", &BTreeMap::new(), &marks(), &owner_ref(), &bad),
            Err(Error::InvalidSpec(f)) if f.path == "env[0].name"
        ));
    }

    #[test]
    fn requests_equal_limits_and_the_deadline_comes_from_the_timeout() {
        let spec = built(&request()).unwrap().spec.unwrap();
        let resources = spec.containers[0].resources.clone().unwrap();
        assert_eq!(resources.requests, resources.limits);
        let limits = resources.limits.unwrap();
        assert_eq!(limits["cpu"], Quantity("500m".into()));
        assert_eq!(limits["memory"], Quantity((64u64 << 20).to_string()));
        assert_eq!(
            limits["ephemeral-storage"],
            Quantity((1u64 << 30).to_string())
        );
        // 90.5 s rounds up to 91, plus the grace for cleanup.
        assert_eq!(
            spec.active_deadline_seconds,
            Some(91 + DEADLINE_GRACE_SECONDS)
        );
        assert_eq!(active_deadline(None), DEFAULT_DEADLINE_SECONDS);
        let mut pids = request();
        pids.resources.pids = Some(10);
        assert!(matches!(built(&pids), Err(Error::InvalidSpec(f)) if f.path == "resources.pids"));
        let mut host = request();
        host.network = NetworkMode::Host;
        assert!(matches!(built(&host), Err(Error::Denied(_))));
        let mut rel = request();
        rel.workdir = "/workspace/../etc".into();
        assert!(matches!(built(&rel), Err(Error::InvalidSpec(f)) if f.path == "workdir"));
    }

    #[test]
    fn the_host_labels_every_object_and_a_plugin_cannot_forge_them() {
        let names = Names::new(&marks().run_id, "x1");
        let l = labels(&marks(), &names, &request().labels).unwrap();
        assert_eq!(l[LABEL_RUN_ID], marks().run_id);
        assert_eq!(l[LABEL_HOME], marks().home);
        assert_eq!(l[LABEL_CREATED], "1800000000");
        assert_eq!(l["team"], "a");
        assert!(l.values().all(|v| is_label_value(v)), "{l:?}");
        for forged in [LABEL_RUN_ID, LABEL_HOME, "io.agentgate.anything"] {
            let mut r = request();
            r.labels.push(Label {
                key: forged.into(),
                value: "x".into(),
            });
            assert!(
                matches!(labels(&marks(), &names, &r.labels), Err(Error::InvalidSpec(f)) if f.path == "labels[1].key"),
                "{forged}"
            );
        }
        let mut bad = request();
        bad.labels[0].value = "a b".into();
        assert!(labels(&marks(), &names, &bad.labels).is_err());
        let pod = built(&request()).unwrap();
        let owner = pod.metadata.owner_references.unwrap();
        assert_eq!(owner[0].kind, "ConfigMap");
        assert_eq!(owner[0].name, names.base);
        let cm = owner_config_map(&names, "ns", &l, &marks());
        assert_eq!(cm.metadata.labels.unwrap()[LABEL_ROLE], ROLE_OWNER);
        assert!(cm.metadata.owner_references.is_none());
        assert_eq!(
            cm.metadata.annotations.unwrap()[LABEL_OWNER],
            "pid=42,start=7,boot=b,pidns=1"
        );
    }

    #[test]
    fn the_network_policy_denies_all_traffic_of_the_pod() {
        let names = Names::new(&marks().run_id, "x1");
        let policy = network_policy(&names, "ns", &BTreeMap::new(), &marks(), &owner_ref());
        let spec = policy.spec.unwrap();
        assert_eq!(spec.policy_types.unwrap(), ["Ingress", "Egress"]);
        assert_eq!(spec.ingress.unwrap().len(), 0);
        assert_eq!(spec.egress.unwrap().len(), 0);
        let selector = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(selector[LABEL_SET], names.base);
        assert!(names.base.len() <= 63 && is_label_value(&names.base));
    }
}
