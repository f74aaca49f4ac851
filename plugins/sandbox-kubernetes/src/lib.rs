//! Sandbox provider `kubernetes`: the agent runs in a pod on a Kubernetes cluster.
//!
//! This plugin only translates the TaskSpec's `sandbox` section into a pod request
//! (target, image, limits, network, environment, workdir, scheduling) for the host's
//! `kubernetes` capability (`agentgate:kubernetes/cluster`). What keeps the agent in
//! (the pod's security context, no service-account token, the NetworkPolicy, the
//! Secret that carries the environment, the labels and owner that find leftovers, the
//! operator's scope of clusters, namespaces and images) is the host's, so a plugin
//! cannot weaken it. A pod has no view of the host's folders: the workspace is copied
//! in before the sandbox is handed out and copied back (through the host's hostile
//! archive check) when it is destroyed. The copy back is bounded in time by the host
//! and leaves out (and the host records) what it refuses; deleting the pod comes after
//! it whatever it did, and runs nothing in the pod, so an agent that broke its pod
//! cannot keep it, its Secret or its ConfigMap.

use std::cell::Cell;
use std::collections::BTreeMap;

use agentgate_plugin_sdk::host::execution::Execution;
use agentgate_plugin_sdk::host::types::{ExecRequest, Label, NetworkMode, ResourceUsage};
use agentgate_plugin_sdk::sandbox_provider::provider::{
    self, Guest as Provider, GuestSandbox, Leftover, SandboxRequest, SandboxSummary,
};
use agentgate_plugin_sdk::sandbox_provider::Guest;
use agentgate_plugin_sdk::{error, events, options, Error, PluginInfo, PluginKind};

/// Bindings of the `cluster` interface (`wit/kubernetes`), over the SDK's types.
#[allow(clippy::all)]
mod bindings {
    agentgate_plugin_sdk::wit_bindgen::generate!({
        world: "host",
        path: "../../wit/kubernetes",
        runtime_path: "::agentgate_plugin_sdk::wit_bindgen::rt",
        type_section_suffix: "agentgate-kubernetes",
        with: {
            "agentgate:plugin/types@0.1.0": agentgate_plugin_sdk::host::types,
            "agentgate:plugin/execution@0.1.0": agentgate_plugin_sdk::host::execution,
        },
    });
}

use bindings::agentgate::kubernetes::cluster::{self, Pod, PodRequest, Target, Toleration};

/// Labels the host sets itself; a plugin may not (the capability refuses them).
const HOST_LABEL_PREFIX: &str = "io.agentgate.";

/// The uid a pod runs as when the options name none (the capability's default too).
const NOBODY: u32 = 65534;

const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "namespace": {
      "description": "Namespace of the pod (default: the context's, else `default`); the operator's grants must allow it.",
      "type": "string", "minLength": 1
    },
    "context": {
      "description": "Context of the kubeconfig (default: its current context); the operator's grants must allow it.",
      "type": "string", "minLength": 1
    },
    "kubeconfig": {
      "description": "Kubeconfig file on the host (default: $KUBECONFIG, then ~/.kube/config); the operator's grants must allow it.",
      "type": "string", "minLength": 1
    },
    "serviceAccount": {
      "description": "Service account of the pod; its token is never mounted.",
      "type": "string", "minLength": 1
    },
    "runtimeClassName": {
      "description": "RuntimeClass of the pod, e.g. `gvisor` or `kata`.",
      "type": "string", "minLength": 1
    },
    "nodeSelector": {
      "description": "Node labels the pod must be scheduled on.",
      "type": "object", "additionalProperties": {"type": "string"}
    },
    "tolerations": {
      "description": "Taints the pod tolerates, as in the Kubernetes API.",
      "type": "array",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "properties": {
          "key": {"type": "string"},
          "operator": {"enum": ["Exists", "Equal"]},
          "value": {"type": "string"},
          "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
          "tolerationSeconds": {"type": "integer"}
        }
      }
    },
    "runAsUser": {
      "description": "The uid the pod runs as (default 65534); 0 only where the operator allows root.",
      "type": "integer", "minimum": 0, "maximum": 4294967295
    }
  }
}"#;

/// `sandbox.options`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KubernetesOptions {
    namespace: Option<String>,
    context: Option<String>,
    kubeconfig: Option<String>,
    service_account: Option<String>,
    runtime_class_name: Option<String>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<TolerationOption>,
    run_as_user: Option<u32>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TolerationOption {
    key: Option<String>,
    operator: Option<String>,
    value: Option<String>,
    effect: Option<String>,
    toleration_seconds: Option<i64>,
}

/// The pod for `request`. Pure, so it is tested natively.
fn pod_request(request: &SandboxRequest, options: &KubernetesOptions) -> Result<PodRequest, Error> {
    let image = request
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| {
            error::invalid_spec(
                "image",
                "sandbox provider `kubernetes` needs an image the cluster can pull, e.g. `image: node:20` \
                 (it must have /bin/sh and tar: the workspace is copied with them)",
            )
        })?;
    if !request.workdir.starts_with('/') {
        return Err(error::invalid_spec(
            "workdir",
            format!("`{}` must be an absolute path", request.workdir),
        ));
    }
    if let Some(mount) = request.mounts.first() {
        return Err(error::invalid_spec(
            "mounts",
            format!(
                "a pod cannot see this machine's folders (`{}`): remove `sandbox.mounts`, or use \
                 the `docker` or `subprocess` provider",
                mount.source
            ),
        ));
    }
    if request.resources.pids.is_some() {
        return Err(error::invalid_spec(
            "resources.pids",
            "Kubernetes sets the pids limit per node (the kubelet's podPidsLimit), not per pod: \
             remove `resources.pids`",
        ));
    }
    if request.network == NetworkMode::Host {
        return Err(error::invalid_spec(
            "network",
            "`host` is never allowed on Kubernetes: use `bridge` (the pod network) or `none`",
        ));
    }
    Ok(PodRequest {
        target: Target {
            kubeconfig: options.kubeconfig.clone(),
            context: options.context.clone(),
            namespace: options.namespace.clone(),
        },
        image,
        env: request.env.clone(),
        workdir: request.workdir.clone(),
        resources: request.resources,
        network: request.network,
        service_account: options.service_account.clone(),
        runtime_class_name: options.runtime_class_name.clone(),
        node_selector: options
            .node_selector
            .iter()
            .map(|(key, value)| Label {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        tolerations: options
            .tolerations
            .iter()
            .map(|t| Toleration {
                key: t.key.clone(),
                operator: t.operator.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect(),
        run_as_user: options.run_as_user,
        // The host adds its own `io.agentgate.*` labels to every object.
        labels: request
            .labels
            .iter()
            .filter(|l| !l.key.starts_with(HOST_LABEL_PREFIX))
            .cloned()
            .collect(),
    })
}

/// Human description of what holds the pod, for the run's result. Pure.
fn describe(pod: &PodRequest, id: &str, readonly_workspace: bool) -> String {
    let uid = pod.run_as_user.unwrap_or(NOBODY);
    let user = if uid == 0 {
        "root (allowed by the operator)".to_owned()
    } else {
        format!("non-root uid {uid}")
    };
    let mut parts = vec![format!(
        "kubernetes: pod {id}, image {} ({user}, all capabilities dropped, no privilege escalation, \
         seccomp RuntimeDefault, no service-account token{})",
        pod.image,
        pod.runtime_class_name
            .as_ref()
            .map(|class| format!(", runtime class {class}"))
            .unwrap_or_default()
    )];
    parts.push(
        match pod.network {
            NetworkMode::None => "a NetworkPolicy denying all ingress and egress",
            NetworkMode::Bridge => "the pod network (outbound open)",
            NetworkMode::Host => "host network",
        }
        .into(),
    );
    let r = &pod.resources;
    let mut limits = Vec::new();
    if let Some(cpu) = r.cpu_millicores {
        limits.push(format!("cpu {cpu}m"));
    }
    if let Some(memory) = r.memory_bytes {
        limits.push(format!("memory {} MiB", memory >> 20));
    }
    if let Some(disk) = r.disk_bytes {
        limits.push(format!(
            "workspace volume and ephemeral storage {} MiB",
            disk >> 20
        ));
    }
    if let Some(timeout) = r.timeout_ms {
        limits.push(format!(
            "activeDeadlineSeconds from the {}s timeout",
            timeout.div_ceil(1000)
        ));
    }
    if limits.is_empty() {
        parts.push("no limits (requests = limits when set)".into());
    } else {
        parts.push(format!("limits = requests ({})", limits.join(", ")));
    }
    parts.push(format!(
        "workspace copied in at {}{}",
        pod.workdir,
        if readonly_workspace {
            ", not copied back (read-only)"
        } else {
            " and copied back at the end"
        }
    ));
    parts.join(", ")
}

/// A pod of this run, with what `destroy` needs to bring the workspace back.
struct PodSandbox {
    pod: Pod,
    id: String,
    workdir: String,
    isolation: String,
    /// The workspace on the host, or `None` when it is read-only (nothing comes back).
    copy_back_to: Option<String>,
    copied_back: Cell<bool>,
    deleted: Cell<bool>,
}

impl GuestSandbox for PodSandbox {
    fn summary(&self) -> SandboxSummary {
        SandboxSummary {
            id: self.id.clone(),
            workdir: self.workdir.clone(),
            isolation: self.isolation.clone(),
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        self.pod.exec(&request)
    }

    fn stats(&self) -> Result<ResourceUsage, Error> {
        self.pod.stats()
    }

    /// Copies the workspace back, then deletes the pod's objects, which runs even when
    /// the copy failed or was cut (a pod that does not answer); the copy's failure is
    /// what is returned. Both are bounded by the host. Idempotent.
    fn destroy(&self) -> Result<(), Error> {
        let copied = match &self.copy_back_to {
            Some(host_dir) if !self.copied_back.get() && !self.deleted.get() => {
                self.copied_back.set(true);
                copy_out(&self.pod, &self.workdir, host_dir)
            }
            _ => Ok(()),
        };
        let deleted = if self.deleted.get() {
            Ok(())
        } else {
            let deleted = self.pod.delete();
            self.deleted.set(deleted.is_ok());
            deleted
        };
        match (copied, deleted) {
            (Err(copy), Err(delete)) => Err(error::failed(format!(
                "copying the workspace back from pod {} failed: {}; deleting the pod failed too: {}",
                self.id,
                message(&copy),
                message(&delete)
            ))),
            (Err(copy), Ok(())) => Err(copy),
            (Ok(()), deleted) => deleted,
        }
    }
}

fn copy_out(pod: &Pod, workdir: &str, host_dir: &str) -> Result<(), Error> {
    let moved = pod.copy_out(workdir, host_dir)?;
    events::progress(
        "copy-out",
        format!(
            "workspace copied back: {} files, {} bytes",
            moved.files, moved.bytes
        ),
    );
    for skipped in &moved.skipped {
        events::warn(format!("not copied back: {skipped}"));
    }
    Ok(())
}

/// The text of an error, for one that reports two.
fn message(error: &Error) -> String {
    match error {
        Error::InvalidSpec(field) => format!("{}: {}", field.path, field.message),
        Error::Unavailable(m) | Error::Denied(m) | Error::Failed(m) | Error::TimedOut(m) => {
            m.clone()
        }
    }
}

struct KubernetesProvider;

impl Guest for KubernetesProvider {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "sandbox-kubernetes".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::SandboxProvider,
            serves: vec!["kubernetes".into()],
            summary: "Pods on a Kubernetes cluster, locked down and labelled by the host; the workspace is copied in and back"
                .into(),
            options_schema: Some(OPTIONS_SCHEMA.into()),
        }
    }
}

impl Provider for KubernetesProvider {
    type Sandbox = PodSandbox;

    fn create(request: SandboxRequest) -> Result<provider::Sandbox, Error> {
        let options: KubernetesOptions = options::parse("options", &request.options)?;
        let spec = pod_request(&request, &options)?;
        let pod = cluster::create_pod(&spec)?;
        let id = pod.id();
        let sandbox = PodSandbox {
            isolation: describe(&spec, &id, request.workspace.readonly),
            pod,
            id,
            workdir: spec.workdir.clone(),
            copy_back_to: (!request.workspace.readonly)
                .then(|| request.workspace.host_path.clone()),
            copied_back: Cell::new(false),
            deleted: Cell::new(false),
        };
        match sandbox
            .pod
            .copy_in(&request.workspace.host_path, &spec.workdir)
        {
            Ok(moved) => {
                events::progress(
                    "copy-in",
                    format!(
                        "workspace copied into pod {}: {} files, {} bytes",
                        sandbox.id, moved.files, moved.bytes
                    ),
                );
                for skipped in &moved.skipped {
                    events::warn(format!("not copied in: {skipped}"));
                }
                Ok(provider::Sandbox::new(sandbox))
            }
            Err(copy) => {
                // Nothing of the run came back yet: only the pod goes.
                sandbox.copied_back.set(true);
                if let Err(delete) = sandbox.destroy() {
                    events::warn(format!(
                        "deleting pod {} after the failed copy: {}",
                        sandbox.id,
                        message(&delete)
                    ));
                }
                Err(copy)
            }
        }
    }

    fn list_leftovers() -> Result<Vec<Leftover>, Error> {
        Ok(cluster::list_leftovers()?
            .into_iter()
            .map(|l| Leftover {
                id: l.id,
                labels: l.labels,
                created_at_ms: l.created_at_ms,
            })
            .collect())
    }

    fn reap(id: String) -> Result<(), Error> {
        cluster::reap(&id)
    }
}

agentgate_plugin_sdk::sandbox_provider::export_sandbox_provider!(KubernetesProvider);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::env_var;
    use agentgate_plugin_sdk::host::types::{Mount, Resources};
    use agentgate_plugin_sdk::sandbox_provider::provider::WorkspaceMount;

    fn request() -> SandboxRequest {
        SandboxRequest {
            run_id: "r1".into(),
            provider: "kubernetes".into(),
            image: Some("busybox:1".into()),
            resources: Resources {
                cpu_millicores: Some(500),
                memory_bytes: Some(256 << 20),
                disk_bytes: Some(1 << 30),
                pids: None,
                timeout_ms: Some(60_500),
            },
            network: NetworkMode::None,
            workspace: WorkspaceMount {
                host_path: "/runs/r1/workspace".into(),
                readonly: false,
            },
            state_dir: "/tmp/state".into(),
            workdir: "/workspace".into(),
            mounts: vec![],
            env: vec![env_var("TOKEN", "s3cret")],
            labels: vec![
                Label {
                    key: "io.agentgate.run-id".into(),
                    value: "r1".into(),
                },
                Label {
                    key: "team".into(),
                    value: "blue".into(),
                },
            ],
            options: "{}".into(),
        }
    }

    fn parse(json: &str) -> Result<KubernetesOptions, Error> {
        options::parse("options", json)
    }

    #[test]
    fn the_pod_follows_the_request_and_the_options() {
        let options = parse(
            r#"{"namespace": "agents", "context": "ci", "kubeconfig": "/etc/k.yaml",
                "serviceAccount": "runner", "runtimeClassName": "gvisor",
                "nodeSelector": {"pool": "agents"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "agents",
                                 "effect": "NoSchedule", "tolerationSeconds": 30}],
                "runAsUser": 1000}"#,
        )
        .unwrap();
        let pod = pod_request(&request(), &options).unwrap();
        assert_eq!(pod.target.namespace.as_deref(), Some("agents"));
        assert_eq!(pod.target.context.as_deref(), Some("ci"));
        assert_eq!(pod.target.kubeconfig.as_deref(), Some("/etc/k.yaml"));
        assert_eq!(pod.image, "busybox:1");
        assert_eq!(pod.workdir, "/workspace");
        assert_eq!(pod.env, [env_var("TOKEN", "s3cret")]);
        assert_eq!(pod.resources, request().resources);
        assert_eq!(pod.network, NetworkMode::None);
        assert_eq!(pod.service_account.as_deref(), Some("runner"));
        assert_eq!(pod.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(
            pod.node_selector,
            [Label {
                key: "pool".into(),
                value: "agents".into()
            }]
        );
        assert_eq!(pod.tolerations.len(), 1);
        assert_eq!(pod.tolerations[0].toleration_seconds, Some(30));
        assert_eq!(pod.run_as_user, Some(1000));
        assert_eq!(
            pod.labels,
            [Label {
                key: "team".into(),
                value: "blue".into()
            }],
            "host labels are the host's"
        );
        let text = describe(&pod, "agents/p", false);
        for part in [
            "pod agents/p",
            "non-root uid 1000",
            "all capabilities dropped",
            "seccomp RuntimeDefault",
            "no service-account token",
            "runtime class gvisor",
            "NetworkPolicy denying all",
            "cpu 500m",
            "memory 256 MiB",
            "activeDeadlineSeconds from the 61s timeout",
            "copied back at the end",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
    }

    #[test]
    fn defaults_leave_the_target_and_the_user_to_the_host() {
        let pod = pod_request(&request(), &KubernetesOptions::default()).unwrap();
        assert_eq!(
            (
                pod.target.kubeconfig,
                pod.target.context,
                pod.target.namespace
            ),
            (None, None, None)
        );
        assert_eq!(pod.run_as_user, None);
        let mut bridge = request();
        bridge.network = NetworkMode::Bridge;
        bridge.workspace.readonly = true;
        let pod = pod_request(&bridge, &KubernetesOptions::default()).unwrap();
        let text = describe(&pod, "default/p", true);
        assert!(
            text.contains("non-root uid 65534") && text.contains("the pod network"),
            "{text}"
        );
        assert!(text.contains("not copied back (read-only)"), "{text}");
    }

    #[test]
    fn unknown_options_are_refused() {
        for json in [
            r#"{"privileged": true}"#,
            r#"{"hostNetwork": true}"#,
            r#"{"tolerations": [{"key": "a", "operatorr": "Exists"}]}"#,
            r#"{"runAsUser": -1}"#,
        ] {
            assert!(
                matches!(parse(json), Err(Error::InvalidSpec(f)) if f.path == "options"),
                "{json}"
            );
        }
        let schema: serde_json::Value = serde_json::from_str(OPTIONS_SCHEMA).unwrap();
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn what_a_pod_cannot_do_is_a_clear_error_naming_the_field() {
        let field = |r: SandboxRequest| match pod_request(&r, &KubernetesOptions::default()) {
            Err(Error::InvalidSpec(f)) => f.path,
            other => panic!("expected invalid-spec, got {other:?}"),
        };
        let mut r = request();
        r.image = None;
        assert_eq!(field(r), "image");
        let mut r = request();
        r.image = Some("  ".into());
        assert_eq!(field(r), "image");
        let mut r = request();
        r.mounts = vec![Mount {
            source: "/home/me".into(),
            target: "/m".into(),
            readonly: true,
        }];
        assert_eq!(field(r), "mounts");
        let mut r = request();
        r.resources.pids = Some(64);
        assert_eq!(field(r), "resources.pids");
        let mut r = request();
        r.network = NetworkMode::Host;
        assert_eq!(field(r), "network");
        let mut r = request();
        r.workdir = "workspace".into();
        assert_eq!(field(r), "workdir");
    }
}
