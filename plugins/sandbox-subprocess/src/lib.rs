//! Sandbox provider `subprocess`: run commands as confined processes on the host.
//!
//! Lighter than Docker, stricter than `none`. Every command gets a clean environment
//! (only the TaskSpec's `environment`, a fixed `PATH`, and `HOME`/`TMPDIR` in the
//! sandbox's private state directory — no host variables, so no leaked tokens) and the
//! confinement the TaskSpec asks for, which the host's `process` capability enforces or
//! refuses: a read-only workspace (read-only bind in a private mount namespace),
//! `network: none` (an empty network namespace), and cpu/memory/pids limits (cgroups,
//! which the host refuses with `unavailable` until it can enforce them).
//! What it cannot enforce at all, a disk quota or extra mounts, fails closed at `create`.
//! Commands still see the host's filesystem at its real paths, so the workdir reported
//! to drivers is the workspace's host path; `/workspace/...` paths are mapped onto it.

use agentgate_plugin_sdk::host::execution::Execution;
use agentgate_plugin_sdk::host::process::{self, Isolation, SpawnRequest};
use agentgate_plugin_sdk::host::types::{ExecRequest, NetworkMode, ResourceUsage, Resources};
use agentgate_plugin_sdk::sandbox_provider::provider::{
    self, Guest as Provider, GuestSandbox, Leftover, SandboxRequest, SandboxSummary,
};
use agentgate_plugin_sdk::sandbox_provider::Guest;
use agentgate_plugin_sdk::{env_var, error, events, paths, EnvVar, Error, PluginInfo, PluginKind};

/// The `PATH` every command gets, unless the TaskSpec's `environment` sets one.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Refuses what this provider cannot enforce. Pure, so it is tested natively.
fn check_request(request: &SandboxRequest) -> Result<(), Error> {
    if request.resources.disk_bytes.is_some() {
        return Err(error::unavailable(
            "sandbox provider `subprocess` cannot enforce `resources.disk`: disk limits need \
             `provider: docker` with a quota-capable storage driver",
        ));
    }
    if !request.mounts.is_empty() {
        return Err(error::unavailable(
            "sandbox provider `subprocess` does not support `mounts` yet; use `provider: docker`",
        ));
    }
    Ok(())
}

/// The confinement applied to every command of the sandbox. Pure.
fn isolation(request: &SandboxRequest) -> Isolation {
    let r = &request.resources;
    let limited = r.cpu_millicores.is_some() || r.memory_bytes.is_some() || r.pids.is_some();
    Isolation {
        readonly_paths: if request.workspace.readonly {
            vec![request.workspace.host_path.clone()]
        } else {
            vec![]
        },
        // Timeouts are enforced per spawn and by the host; disk was refused above.
        limits: limited.then_some(Resources {
            cpu_millicores: r.cpu_millicores,
            memory_bytes: r.memory_bytes,
            disk_bytes: None,
            pids: r.pids,
            timeout_ms: None,
        }),
        network: match request.network {
            NetworkMode::None => Some(NetworkMode::None),
            NetworkMode::Bridge | NetworkMode::Host => None,
        },
    }
}

/// Human description of `isolation`, for the run's result. Pure.
fn describe_isolation(isolation: &Isolation) -> String {
    let mut parts = vec!["subprocess: clean environment".to_string()];
    parts.push(if isolation.readonly_paths.is_empty() {
        "writable workspace".into()
    } else {
        "read-only workspace".into()
    });
    parts.push(match isolation.network {
        Some(NetworkMode::None) => "no network".into(),
        _ => "host network".into(),
    });
    if let Some(limits) = &isolation.limits {
        let mut l = Vec::new();
        if let Some(cpu) = limits.cpu_millicores {
            l.push(format!("cpu {cpu}m"));
        }
        if let Some(memory) = limits.memory_bytes {
            l.push(format!("memory {} MiB", memory / (1024 * 1024)));
        }
        if let Some(pids) = limits.pids {
            l.push(format!("pids {pids}"));
        }
        parts.push(format!("cgroup limits ({})", l.join(", ")));
    } else {
        parts.push("no resource limits".into());
    }
    parts.push("host filesystem otherwise visible".into());
    parts.join(", ")
}

/// The whole environment of a command: fixed `PATH`, `HOME` and `TMPDIR`, then the
/// sandbox's `environment`, then the exec's, later names replacing earlier ones. Pure.
fn environment(state_dir: &str, sandbox_env: &[EnvVar], exec_env: &[EnvVar]) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = Vec::new();
    let defaults = [
        env_var("PATH", PATH),
        env_var("HOME", state_dir),
        env_var("TMPDIR", state_dir),
    ];
    for var in defaults.iter().chain(sandbox_env).chain(exec_env) {
        match env.iter_mut().find(|e| e.name == var.name) {
            Some(existing) => existing.value = var.value.clone(),
            None => env.push(var.clone()),
        }
    }
    env
}

/// What the sandbox keeps from the request.
#[derive(Debug, Clone)]
struct Subprocess {
    id: String,
    host_path: String,
    workdir: String,
    state_dir: String,
    env: Vec<EnvVar>,
    isolation: Isolation,
}

impl Subprocess {
    fn new(request: SandboxRequest) -> Self {
        let isolation = isolation(&request);
        Subprocess {
            id: format!("subprocess-{}", request.run_id),
            host_path: request.workspace.host_path,
            workdir: request.workdir,
            state_dir: request.state_dir,
            env: request.env,
            isolation,
        }
    }

    /// The spawn request for an exec. Pure, so it is tested natively.
    fn spawn_request(&self, request: ExecRequest) -> Result<SpawnRequest, Error> {
        if request.argv.is_empty() {
            return Err(error::invalid_spec("argv", "the command is empty"));
        }
        let cwd = paths::host_cwd(&self.host_path, &self.workdir, request.cwd.as_deref())?;
        Ok(SpawnRequest {
            argv: request.argv,
            cwd,
            env: environment(&self.state_dir, &self.env, &request.env),
            inherit_env: false,
            stdin: request.stdin,
            keep_stdin_open: request.keep_stdin_open,
            timeout_ms: request.timeout_ms,
            isolation: self.isolation.clone(),
        })
    }
}

impl GuestSandbox for Subprocess {
    fn summary(&self) -> SandboxSummary {
        SandboxSummary {
            id: self.id.clone(),
            workdir: self.host_path.clone(),
            isolation: describe_isolation(&self.isolation),
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        process::spawn(&self.spawn_request(request)?)
    }

    fn stats(&self) -> Result<ResourceUsage, Error> {
        Err(error::unavailable(
            "sandbox provider `subprocess` measures resource use per command, not per sandbox",
        ))
    }

    fn destroy(&self) -> Result<(), Error> {
        process::kill_all();
        Ok(())
    }
}

struct SubprocessProvider;

impl Guest for SubprocessProvider {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "sandbox-subprocess".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::SandboxProvider,
            serves: vec!["subprocess".into()],
            summary: "Confined host processes: clean env, read-only workspace, no network".into(),
            options_schema: None,
        }
    }
}

impl Provider for SubprocessProvider {
    type Sandbox = Subprocess;

    fn create(request: SandboxRequest) -> Result<provider::Sandbox, Error> {
        check_request(&request)?;
        if let Some(image) = &request.image {
            events::warn(format!(
                "sandbox provider `subprocess` ignores `image` ({image}): commands run on the host's filesystem"
            ));
        }
        if request.network == NetworkMode::Bridge {
            events::warn(
                "sandbox provider `subprocess` has no bridge network: commands use the host's \
                 network (set `network: none` to cut it off)",
            );
        }
        Ok(provider::Sandbox::new(Subprocess::new(request)))
    }

    fn list_leftovers() -> Result<Vec<Leftover>, Error> {
        // Nothing outlives a run: the host tracks and kills every process group, and
        // removes the state directory at cleanup.
        Ok(vec![])
    }

    fn reap(_id: String) -> Result<(), Error> {
        Ok(())
    }
}

agentgate_plugin_sdk::sandbox_provider::export_sandbox_provider!(SubprocessProvider);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::host::types::Mount;
    use agentgate_plugin_sdk::sandbox_provider::provider::WorkspaceMount;

    fn request() -> SandboxRequest {
        SandboxRequest {
            run_id: "r1".into(),
            provider: "subprocess".into(),
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

    fn exec(cwd: Option<&str>, env: Vec<EnvVar>) -> ExecRequest {
        ExecRequest {
            argv: vec!["make".into(), "test".into()],
            env,
            cwd: cwd.map(Into::into),
            stdin: None,
            keep_stdin_open: false,
            timeout_ms: None,
        }
    }

    #[test]
    fn environment_is_exactly_the_spec_plus_defaults() {
        let env = environment("/tmp/state", &[env_var("A", "1")], &[env_var("B", "2")]);
        assert_eq!(
            env,
            [
                env_var("PATH", PATH),
                env_var("HOME", "/tmp/state"),
                env_var("TMPDIR", "/tmp/state"),
                env_var("A", "1"),
                env_var("B", "2"),
            ]
        );
    }

    #[test]
    fn later_environment_wins() {
        let env = environment(
            "/s",
            &[env_var("PATH", "/opt/bin"), env_var("A", "1")],
            &[env_var("A", "2"), env_var("HOME", "/h")],
        );
        assert_eq!(
            env,
            [
                env_var("PATH", "/opt/bin"),
                env_var("HOME", "/h"),
                env_var("TMPDIR", "/s"),
                env_var("A", "2")
            ]
        );
    }

    #[test]
    fn default_request_is_unconfined_but_clean() {
        let r = request();
        assert!(check_request(&r).is_ok());
        let iso = isolation(&r);
        assert_eq!(
            iso,
            Isolation {
                readonly_paths: vec![],
                limits: None,
                network: None
            }
        );
        let s = Subprocess::new(r);
        let spawn = s.spawn_request(exec(None, vec![])).unwrap();
        assert!(!spawn.inherit_env);
        assert_eq!(spawn.cwd, "/src/app");
        assert_eq!(spawn.env.len(), 4);
        assert_eq!(s.summary().isolation, describe_isolation(&iso));
    }

    #[test]
    fn confinement_follows_the_request() {
        let mut r = request();
        r.workspace.readonly = true;
        r.network = NetworkMode::None;
        r.resources.cpu_millicores = Some(1500);
        r.resources.memory_bytes = Some(512 * 1024 * 1024);
        r.resources.pids = Some(128);
        let iso = isolation(&r);
        assert_eq!(iso.readonly_paths, ["/src/app"]);
        assert_eq!(iso.network, Some(NetworkMode::None));
        let limits = iso.limits.unwrap();
        assert_eq!(limits.cpu_millicores, Some(1500));
        assert_eq!(limits.memory_bytes, Some(512 * 1024 * 1024));
        assert_eq!(limits.pids, Some(128));
        assert_eq!(limits.timeout_ms, None);
        let text = describe_isolation(&iso);
        assert!(text.contains("read-only workspace"), "{text}");
        assert!(text.contains("no network"), "{text}");
        assert!(
            text.contains("cpu 1500m, memory 512 MiB, pids 128"),
            "{text}"
        );

        let s = Subprocess::new(r);
        assert_eq!(s.id, "subprocess-r1");
        assert_eq!(s.spawn_request(exec(None, vec![])).unwrap().isolation, iso);
    }

    #[test]
    fn host_network_is_not_a_namespace() {
        let mut r = request();
        r.network = NetworkMode::Host;
        assert_eq!(isolation(&r).network, None);
    }

    #[test]
    fn fails_closed_on_disk_and_mounts() {
        let mut r = request();
        r.resources.disk_bytes = Some(1 << 30);
        assert!(
            matches!(check_request(&r), Err(Error::Unavailable(m)) if m.contains("resources.disk"))
        );
        let mut r = request();
        r.mounts.push(Mount {
            source: "/a".into(),
            target: "/b".into(),
            readonly: false,
        });
        assert!(matches!(check_request(&r), Err(Error::Unavailable(m)) if m.contains("mounts")));
    }

    #[test]
    fn exec_maps_cwd_and_refuses_escapes() {
        let s = Subprocess::new(request());
        let at = |cwd| s.spawn_request(exec(Some(cwd), vec![]));
        assert_eq!(at("lib").unwrap().cwd, "/src/app/lib");
        assert_eq!(at("/workspace/lib").unwrap().cwd, "/src/app/lib");
        assert!(matches!(at("/root"), Err(Error::InvalidSpec(_))));
        assert!(matches!(at("../x"), Err(Error::InvalidSpec(_))));
    }
}
