//! Sandbox provider `docker`: the agent runs in a container on the Docker engine.
//!
//! This plugin only translates the TaskSpec's `sandbox` section into a container spec
//! (image, limits, network, mounts, environment, workdir, labels). Everything that
//! keeps the agent in (dropped capabilities, no-new-privileges, the pids limit, which
//! networks and mounts are allowed, the labels that find leftovers) is the host's
//! `docker` capability's job, so a plugin cannot weaken it. The container's main
//! process idles; every command is an exec in it.

use agentgate_plugin_sdk::host::docker::{self, ContainerSpec};
use agentgate_plugin_sdk::host::execution::Execution;
use agentgate_plugin_sdk::host::types::{ExecRequest, Mount, NetworkMode, ResourceUsage};
use agentgate_plugin_sdk::sandbox_provider::provider::{
    self, Guest as Provider, GuestSandbox, Leftover, SandboxRequest, SandboxSummary,
};
use agentgate_plugin_sdk::sandbox_provider::Guest;
use agentgate_plugin_sdk::{
    env_var, error, events, options, EnvVar, Error, PluginInfo, PluginKind,
};

/// Where the sandbox's private state dir appears, and the commands' `HOME`.
const HOME: &str = "/home/agent";

/// The container's main process when the options name none.
const IDLE: [&str; 2] = ["sleep", "infinity"];

/// A leftover id that names a volume rather than a container.
const VOLUME_PREFIX: &str = "volume:";

const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "command": {
      "description": "The container's main process (default [\"sleep\", \"infinity\"]); it must keep running, work happens through exec.",
      "type": "array", "items": {"type": "string"}, "minItems": 1
    },
    "pids": {
      "description": "Most processes and threads the container may hold at once (default 4096).",
      "type": "integer", "minimum": 8, "maximum": 4194304
    },
    "user": {
      "description": "`uid[:gid]` to run as (default: the invoking user's, so the workspace stays theirs).",
      "type": "string", "pattern": "^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$"
    }
  }
}"#;

/// `sandbox.options`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DockerOptions {
    command: Option<Vec<String>>,
    pids: Option<u32>,
    user: Option<String>,
}

/// The container for `request`. Pure, so it is tested natively.
fn container_spec(
    request: &SandboxRequest,
    options: &DockerOptions,
) -> Result<ContainerSpec, Error> {
    let image = request
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| {
            error::invalid_spec(
                "image",
                "sandbox provider `docker` needs an image, e.g. `image: node:20`",
            )
        })?;
    if !request.workdir.starts_with('/') {
        return Err(error::invalid_spec(
            "workdir",
            format!("`{}` must be an absolute path", request.workdir),
        ));
    }
    let mut mounts = vec![
        Mount {
            source: request.workspace.host_path.clone(),
            target: request.workdir.clone(),
            readonly: request.workspace.readonly,
        },
        Mount {
            source: request.state_dir.clone(),
            target: HOME.into(),
            readonly: false,
        },
    ];
    mounts.extend(request.mounts.iter().cloned());
    let mut resources = request.resources;
    // The run's timeout is the host's to enforce; the pids option wins over the spec.
    resources.timeout_ms = None;
    resources.pids = options.pids.or(resources.pids);
    Ok(ContainerSpec {
        image,
        name: None,
        command: options
            .command
            .clone()
            .unwrap_or_else(|| IDLE.map(String::from).to_vec()),
        env: environment(&request.env),
        workdir: request.workdir.clone(),
        mounts,
        network: request.network,
        resources,
        labels: request.labels.clone(),
        user: options.user.clone(),
    })
}

/// `HOME`, then the sandbox's `environment` (later names win). Pure.
fn environment(sandbox_env: &[EnvVar]) -> Vec<EnvVar> {
    let mut env = vec![env_var("HOME", HOME)];
    for var in sandbox_env {
        match env.iter_mut().find(|e| e.name == var.name) {
            Some(existing) => existing.value = var.value.clone(),
            None => env.push(var.clone()),
        }
    }
    env
}

/// Human description of the container, for the run's result. Pure.
fn describe(spec: &ContainerSpec, readonly_workspace: bool) -> String {
    let mut parts = vec![format!(
        "docker: image {} (all capabilities dropped, no-new-privileges, {} workspace at {})",
        spec.image,
        if readonly_workspace {
            "read-only"
        } else {
            "writable"
        },
        spec.workdir
    )];
    parts.push(
        match spec.network {
            NetworkMode::None => "no network",
            NetworkMode::Bridge => "bridge network",
            NetworkMode::Host => "host network",
        }
        .into(),
    );
    let r = &spec.resources;
    let mut limits = vec![format!("pids {}", r.pids.unwrap_or(4096))];
    if let Some(cpu) = r.cpu_millicores {
        limits.push(format!("cpu {cpu}m"));
    }
    if let Some(memory) = r.memory_bytes {
        limits.push(format!("memory {} MiB", memory >> 20));
    }
    if let Some(disk) = r.disk_bytes {
        limits.push(format!("disk {} MiB", disk >> 20));
    }
    parts.push(format!("limits ({})", limits.join(", ")));
    parts.join(", ")
}

struct Container {
    id: String,
    workdir: String,
    isolation: String,
}

impl GuestSandbox for Container {
    fn summary(&self) -> SandboxSummary {
        SandboxSummary {
            id: self.id.clone(),
            workdir: self.workdir.clone(),
            isolation: self.isolation.clone(),
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        docker::exec(&self.id, &request)
    }

    fn stats(&self) -> Result<ResourceUsage, Error> {
        docker::stats(&self.id)
    }

    fn destroy(&self) -> Result<(), Error> {
        // Teardown: nothing in the sandbox is owed a graceful stop.
        docker::remove_container(&self.id, 0)
    }
}

struct DockerProvider;

impl Guest for DockerProvider {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "sandbox-docker".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::SandboxProvider,
            serves: vec!["docker".into()],
            summary: "Containers on the local Docker engine, hardened and labelled by the host"
                .into(),
            options_schema: Some(OPTIONS_SCHEMA.into()),
        }
    }
}

impl Provider for DockerProvider {
    type Sandbox = Container;

    fn create(request: SandboxRequest) -> Result<provider::Sandbox, Error> {
        let options: DockerOptions = options::parse("options", &request.options)?;
        let spec = container_spec(&request, &options)?;
        if docker::inspect_image(&spec.image)?.is_none() {
            events::progress("pull", format!("pulling {}", spec.image));
            docker::pull_image(&spec.image)?;
        }
        let isolation = describe(&spec, request.workspace.readonly);
        let id = docker::run_container(&spec)?;
        Ok(provider::Sandbox::new(Container {
            id,
            workdir: spec.workdir,
            isolation,
        }))
    }

    fn list_leftovers() -> Result<Vec<Leftover>, Error> {
        let mut leftovers: Vec<Leftover> = docker::list_containers(&[])?
            .into_iter()
            .map(|c| Leftover {
                id: c.id,
                labels: c.labels,
                created_at_ms: c.created_at_ms,
            })
            .collect();
        leftovers.extend(docker::list_volumes(&[])?.into_iter().map(|name| Leftover {
            id: format!("{VOLUME_PREFIX}{name}"),
            labels: vec![],
            created_at_ms: 0,
        }));
        Ok(leftovers)
    }

    fn reap(id: String) -> Result<(), Error> {
        match id.strip_prefix(VOLUME_PREFIX) {
            Some(volume) => docker::remove_volume(volume),
            None => docker::remove_container(&id, 0),
        }
    }
}

agentgate_plugin_sdk::sandbox_provider::export_sandbox_provider!(DockerProvider);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::host::types::{Label, Resources};
    use agentgate_plugin_sdk::sandbox_provider::provider::WorkspaceMount;

    fn request() -> SandboxRequest {
        SandboxRequest {
            run_id: "r1".into(),
            provider: "docker".into(),
            image: Some("node:20".into()),
            resources: Resources {
                cpu_millicores: Some(2000),
                memory_bytes: Some(1 << 30),
                disk_bytes: None,
                pids: None,
                timeout_ms: Some(60_000),
            },
            network: NetworkMode::Bridge,
            workspace: WorkspaceMount {
                host_path: "/src/app".into(),
                readonly: true,
            },
            state_dir: "/tmp/state".into(),
            workdir: "/workspace".into(),
            mounts: vec![Mount {
                source: "/home/me/.npm".into(),
                target: "/cache".into(),
                readonly: true,
            }],
            env: vec![env_var("A", "1"), env_var("HOME", "/h")],
            labels: vec![Label {
                key: "io.agentgate.run-id".into(),
                value: "r1".into(),
            }],
            options: "{}".into(),
        }
    }

    #[test]
    fn the_spec_follows_the_request() {
        let spec = container_spec(&request(), &DockerOptions::default()).unwrap();
        assert_eq!(spec.image, "node:20");
        assert_eq!(spec.command, ["sleep", "infinity"]);
        assert_eq!(spec.workdir, "/workspace");
        assert_eq!(spec.network, NetworkMode::Bridge);
        assert_eq!(spec.resources.cpu_millicores, Some(2000));
        assert_eq!(spec.resources.timeout_ms, None);
        assert_eq!(spec.user, None, "the host runs it as the invoking user");
        assert_eq!(
            spec.mounts[0],
            Mount {
                source: "/src/app".into(),
                target: "/workspace".into(),
                readonly: true
            }
        );
        assert_eq!(spec.mounts[1].target, HOME);
        assert_eq!(spec.mounts[2].target, "/cache");
        assert_eq!(spec.env, [env_var("HOME", "/h"), env_var("A", "1")]);
        assert_eq!(spec.labels, request().labels);
        let text = describe(&spec, true);
        assert!(text.contains("read-only workspace at /workspace"), "{text}");
        assert!(
            text.contains("pids 4096") && text.contains("memory 1024 MiB"),
            "{text}"
        );
    }

    #[test]
    fn options_override_the_defaults() {
        let options: DockerOptions = options::parse(
            "options",
            r#"{"command": ["tail", "-f", "/dev/null"], "pids": 64, "user": "0:0"}"#,
        )
        .unwrap();
        let spec = container_spec(&request(), &options).unwrap();
        assert_eq!(spec.command, ["tail", "-f", "/dev/null"]);
        assert_eq!(spec.resources.pids, Some(64));
        assert_eq!(spec.user.as_deref(), Some("0:0"));
        assert!(options::parse::<DockerOptions>("options", r#"{"privileged": true}"#).is_err());
    }

    #[test]
    fn an_image_is_required() {
        let mut r = request();
        r.image = None;
        assert!(matches!(
            container_spec(&r, &DockerOptions::default()),
            Err(Error::InvalidSpec(f)) if f.path == "image"
        ));
    }
}
