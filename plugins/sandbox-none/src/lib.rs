//! Sandbox provider `none`: run commands directly on the host, with no isolation.
//!
//! Commands start in the workspace's host directory with the host's environment (plus
//! the TaskSpec's `environment`), through the `process` capability, so the host still
//! tracks every process group and kills what is left at the end of the run. Because
//! nothing is confined, `create` fails closed when the TaskSpec asks for anything this
//! provider cannot enforce (a read-only workspace, resource limits, `network: none`,
//! mounts) instead of running the agent with less protection than was written down.
//! Only `resources.timeout` is accepted: the host enforces it for every provider.

use agentgate_plugin_sdk::host::execution::Execution;
use agentgate_plugin_sdk::host::process::{self, Isolation, SpawnRequest};
use agentgate_plugin_sdk::host::types::{ExecRequest, NetworkMode, ResourceUsage};
use agentgate_plugin_sdk::sandbox_provider::provider::{
    self, Guest as Provider, GuestSandbox, Leftover, SandboxRequest, SandboxSummary,
};
use agentgate_plugin_sdk::sandbox_provider::Guest;
use agentgate_plugin_sdk::{error, events, paths, EnvVar, Error, PluginInfo, PluginKind};

const ALTERNATIVE: &str = "use `provider: subprocess` or `provider: docker` to enforce it";

/// Refuses requests asking for protection this provider cannot give. Pure, so it is
/// tested natively. Field paths are relative to the `sandbox` section.
fn check_request(request: &SandboxRequest) -> Result<(), Error> {
    let refuse = |field: &str, what: &str| {
        Err(error::unavailable(format!(
            "sandbox provider `none` cannot enforce `{field}` ({what}); {ALTERNATIVE}"
        )))
    };
    if request.workspace.readonly {
        return refuse("workspace.readonly", "a read-only workspace");
    }
    let r = &request.resources;
    if r.cpu_millicores.is_some() {
        return refuse("resources.cpu", "a CPU limit");
    }
    if r.memory_bytes.is_some() {
        return refuse("resources.memory", "a memory limit");
    }
    if r.disk_bytes.is_some() {
        return refuse("resources.disk", "a disk limit");
    }
    if r.pids.is_some() {
        return refuse("resources.pids", "a process limit");
    }
    if request.network == NetworkMode::None {
        return refuse("network", "`none` needs a separate network namespace");
    }
    if !request.mounts.is_empty() {
        return refuse("mounts", "there is no sandbox filesystem to mount into");
    }
    Ok(())
}

/// What the sandbox keeps from the request.
#[derive(Debug, Clone)]
struct HostSandbox {
    host_path: String,
    workdir: String,
    env: Vec<EnvVar>,
}

impl HostSandbox {
    /// The spawn request for an exec. Pure, so it is tested natively.
    fn spawn_request(&self, request: ExecRequest) -> Result<SpawnRequest, Error> {
        if request.argv.is_empty() {
            return Err(error::invalid_spec("argv", "the command is empty"));
        }
        let cwd = paths::host_cwd(&self.host_path, &self.workdir, request.cwd.as_deref())?;
        let mut env = self.env.clone();
        env.extend(request.env);
        Ok(SpawnRequest {
            argv: request.argv,
            cwd,
            env,
            inherit_env: true,
            stdin: request.stdin,
            keep_stdin_open: request.keep_stdin_open,
            timeout_ms: request.timeout_ms,
            isolation: Isolation {
                sealed: None,
                limits: None,
                network: None,
            },
        })
    }
}

impl GuestSandbox for HostSandbox {
    fn summary(&self) -> SandboxSummary {
        SandboxSummary {
            id: "host".into(),
            workdir: self.host_path.clone(),
            isolation: "none: commands run directly on the host as the invoking user, \
                        with the host's environment, filesystem and network"
                .into(),
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        process::spawn(&self.spawn_request(request)?)
    }

    fn stats(&self) -> Result<ResourceUsage, Error> {
        Err(error::unavailable(
            "sandbox provider `none` does not measure resource use",
        ))
    }

    fn destroy(&self) -> Result<(), Error> {
        process::kill_all();
        Ok(())
    }
}

struct NoSandbox;

impl Guest for NoSandbox {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "sandbox-none".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::SandboxProvider,
            serves: vec!["none".into()],
            summary:
                "No isolation: commands run directly on the host (refuses limits it cannot enforce)"
                    .into(),
            options_schema: None,
        }
    }
}

impl Provider for NoSandbox {
    type Sandbox = HostSandbox;

    fn create(request: SandboxRequest) -> Result<provider::Sandbox, Error> {
        check_request(&request)?;
        if let Some(image) = &request.image {
            events::warn(format!(
                "sandbox provider `none` ignores `image` ({image}): commands run on the host"
            ));
        }
        Ok(provider::Sandbox::new(HostSandbox {
            host_path: request.workspace.host_path,
            workdir: request.workdir,
            env: request.env,
        }))
    }

    fn list_leftovers() -> Result<Vec<Leftover>, Error> {
        // Nothing outlives a run: the host kills the process groups it tracked.
        Ok(vec![])
    }

    fn reap(_id: String) -> Result<(), Error> {
        Ok(())
    }
}

agentgate_plugin_sdk::sandbox_provider::export_sandbox_provider!(NoSandbox);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::env_var;
    use agentgate_plugin_sdk::host::types::{Mount, Resources};
    use agentgate_plugin_sdk::sandbox_provider::provider::WorkspaceMount;

    fn request() -> SandboxRequest {
        SandboxRequest {
            run_id: "r1".into(),
            provider: "none".into(),
            image: None,
            resources: Resources {
                cpu_millicores: None,
                memory_bytes: None,
                disk_bytes: None,
                pids: None,
                timeout_ms: Some(60_000),
            },
            network: NetworkMode::Bridge,
            workspace: WorkspaceMount {
                host_path: "/src/app".into(),
                readonly: false,
            },
            state_dir: "/tmp/state".into(),
            workdir: "/workspace".into(),
            mounts: vec![],
            env: vec![env_var("A", "1")],
            labels: vec![],
            options: "{}".into(),
        }
    }

    fn refusal(request: &SandboxRequest) -> String {
        match check_request(request).unwrap_err() {
            Error::Unavailable(message) => message,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn exec(argv: &[&str], cwd: Option<&str>) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![env_var("B", "2")],
            cwd: cwd.map(Into::into),
            stdin: Some(b"hi".to_vec()),
            keep_stdin_open: true,
            timeout_ms: Some(5),
        }
    }

    fn sandbox() -> HostSandbox {
        let r = request();
        HostSandbox {
            host_path: r.workspace.host_path,
            workdir: r.workdir,
            env: r.env,
        }
    }

    #[test]
    fn accepts_timeout_bridge_and_host_network() {
        assert!(check_request(&request()).is_ok());
        let mut r = request();
        r.network = NetworkMode::Host;
        r.image = Some("node:20".into());
        assert!(check_request(&r).is_ok());
    }

    #[test]
    fn fails_closed_on_what_it_cannot_enforce() {
        let mut r = request();
        r.workspace.readonly = true;
        assert!(refusal(&r).contains("workspace.readonly"));

        for (field, set) in [
            (
                "resources.cpu",
                (|r: &mut Resources| r.cpu_millicores = Some(500)) as fn(&mut Resources),
            ),
            ("resources.memory", |r| r.memory_bytes = Some(1 << 30)),
            ("resources.disk", |r| r.disk_bytes = Some(1 << 30)),
            ("resources.pids", |r| r.pids = Some(64)),
        ] {
            let mut r = request();
            set(&mut r.resources);
            let message = refusal(&r);
            assert!(message.contains(field), "{message}");
            assert!(message.contains("provider: subprocess"), "{message}");
        }

        let mut r = request();
        r.network = NetworkMode::None;
        assert!(refusal(&r).contains("`network`"));

        let mut r = request();
        r.mounts.push(Mount {
            source: "/a".into(),
            target: "/b".into(),
            readonly: true,
        });
        assert!(refusal(&r).contains("mounts"));
    }

    #[test]
    fn exec_runs_in_the_workspace_with_layered_env() {
        let spawn = sandbox().spawn_request(exec(&["ls", "-l"], None)).unwrap();
        assert_eq!(spawn.argv, ["ls", "-l"]);
        assert_eq!(spawn.cwd, "/src/app");
        assert!(spawn.inherit_env);
        assert_eq!(spawn.env, [env_var("A", "1"), env_var("B", "2")]);
        assert_eq!(spawn.stdin.as_deref(), Some(&b"hi"[..]));
        assert!(spawn.keep_stdin_open);
        assert_eq!(spawn.timeout_ms, Some(5));
        assert_eq!(
            spawn.isolation,
            Isolation {
                sealed: None,
                limits: None,
                network: None
            }
        );
    }

    #[test]
    fn exec_maps_cwd_onto_the_workspace() {
        let s = sandbox();
        assert_eq!(
            s.spawn_request(exec(&["ls"], Some("sub"))).unwrap().cwd,
            "/src/app/sub"
        );
        assert_eq!(
            s.spawn_request(exec(&["ls"], Some("/workspace/sub")))
                .unwrap()
                .cwd,
            "/src/app/sub"
        );
        assert!(matches!(
            s.spawn_request(exec(&["ls"], Some("/etc"))),
            Err(Error::InvalidSpec(_))
        ));
        assert!(matches!(
            s.spawn_request(exec(&[], None)),
            Err(Error::InvalidSpec(_))
        ));
    }
}
