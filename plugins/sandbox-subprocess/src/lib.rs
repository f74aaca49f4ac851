//! Sandbox provider `subprocess`: run commands sealed in a sandbox of their own,
//! without a container engine.
//!
//! The host's `process` capability does the sealing (bubblewrap: user, mount, pid,
//! ipc, uts and network namespaces, no capabilities, seccomp, a cgroup) and refuses to
//! run when the machine cannot; this plugin only decides what goes in. The agent sees
//! the system's programs and `/etc` read-only, the workspace at `workdir` (read-only
//! when asked), its own `HOME` at [`HOME`] backed by the sandbox's private state dir,
//! an empty `/tmp`, and the TaskSpec's `mounts`; nothing else of the host. Every
//! command of the sandbox shares one cgroup with the TaskSpec's cpu, memory and pids
//! limits; `stats` reads it. `network: none` is an empty network namespace, `bridge` an
//! isolated one with outbound access (slirp4netns), `host` the host's network.
//! A disk quota it cannot enforce, so `resources.disk` is refused at `create`.

use agentgate_plugin_sdk::host::execution::Execution;
use agentgate_plugin_sdk::host::process::{self, Isolation, SealedView, SpawnRequest};
use agentgate_plugin_sdk::host::types::{
    ExecRequest, Mount, NetworkMode, ResourceUsage, Resources,
};
use agentgate_plugin_sdk::sandbox_provider::provider::{
    self, Guest as Provider, GuestSandbox, Leftover, SandboxRequest, SandboxSummary,
};
use agentgate_plugin_sdk::sandbox_provider::Guest;
use agentgate_plugin_sdk::{
    env_var, error, events, options, paths, EnvVar, Error, PluginInfo, PluginKind,
};

/// The `PATH` every command gets, unless the TaskSpec's `environment` sets one.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where the sandbox's private state dir appears, and the commands' `HOME`.
const HOME: &str = "/home/agent";

const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "pids": {
      "description": "Most processes and threads the sandbox may hold at once (default 4096).",
      "type": "integer", "minimum": 8, "maximum": 4194304
    }
  }
}"#;

/// `sandbox.options`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SubprocessOptions {
    pids: Option<u32>,
}

/// Refuses what this provider cannot enforce. Pure, so it is tested natively.
fn check_request(request: &SandboxRequest) -> Result<(), Error> {
    if request.resources.disk_bytes.is_some() {
        return Err(error::unavailable(
            "sandbox provider `subprocess` cannot enforce `resources.disk`: the workspace and \
             HOME are host directories without a quota; remove the limit or use \
             `provider: docker` with a quota-capable storage driver",
        ));
    }
    if !request.workdir.starts_with('/') {
        return Err(error::invalid_spec(
            "workdir",
            format!("`{}` must be an absolute path", request.workdir),
        ));
    }
    Ok(())
}

/// The confinement applied to every command of the sandbox. Pure.
fn isolation(request: &SandboxRequest, options: &SubprocessOptions) -> Isolation {
    let r = &request.resources;
    let mut binds = vec![
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
    binds.extend(request.mounts.iter().cloned());
    Isolation {
        sealed: Some(SealedView { binds }),
        // Timeouts are enforced per spawn and by the host; disk was refused above.
        limits: Some(Resources {
            cpu_millicores: r.cpu_millicores,
            memory_bytes: r.memory_bytes,
            disk_bytes: None,
            pids: options.pids.or(r.pids),
            timeout_ms: None,
        }),
        network: Some(request.network),
    }
}

/// Human description of `isolation`, for the run's result. Pure.
fn describe_isolation(isolation: &Isolation) -> String {
    let mut parts = vec![
        "subprocess: sealed by bubblewrap (own user, mount, pid, ipc, uts and network namespaces; \
         no capabilities; seccomp)"
            .to_string(),
    ];
    let binds = isolation.sealed.as_ref().map_or(&[][..], |v| &v.binds[..]);
    if let Some(workspace) = binds.first() {
        parts.push(format!(
            "{} workspace at {}",
            if workspace.readonly {
                "read-only"
            } else {
                "writable"
            },
            workspace.target
        ));
    }
    if binds.len() > 2 {
        parts.push(format!("{} extra mounts", binds.len() - 2));
    }
    parts.push(match isolation.network {
        Some(NetworkMode::None) | None => "no network".into(),
        Some(NetworkMode::Bridge) => {
            "bridge network (slirp4netns, host loopback unreachable)".into()
        }
        Some(NetworkMode::Host) => "host network".into(),
    });
    let mut limits = Vec::new();
    if let Some(l) = &isolation.limits {
        if let Some(cpu) = l.cpu_millicores {
            limits.push(format!("cpu {cpu}m"));
        }
        if let Some(memory) = l.memory_bytes {
            limits.push(format!("memory {} MiB", memory / (1024 * 1024)));
        }
        if let Some(pids) = l.pids {
            limits.push(format!("pids {pids}"));
        }
    }
    parts.push(if limits.is_empty() {
        "cgroup with the default pids limit".into()
    } else {
        format!("cgroup limits ({})", limits.join(", "))
    });
    parts.join(", ")
}

/// The whole environment of a command: fixed `PATH`, `HOME` and `TMPDIR`, then the
/// sandbox's `environment`, then the exec's, later names replacing earlier ones. Pure.
fn environment(sandbox_env: &[EnvVar], exec_env: &[EnvVar]) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = Vec::new();
    let defaults = [
        env_var("PATH", PATH),
        env_var("HOME", HOME),
        env_var("TMPDIR", "/tmp"),
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
    workdir: String,
    env: Vec<EnvVar>,
    isolation: Isolation,
}

impl Subprocess {
    fn new(request: SandboxRequest) -> Result<Self, Error> {
        let options: SubprocessOptions = options::parse("options", &request.options)?;
        let isolation = isolation(&request, &options);
        Ok(Subprocess {
            id: format!("subprocess-{}", request.run_id),
            workdir: request.workdir,
            env: request.env,
            isolation,
        })
    }

    /// The spawn request for an exec. Pure, so it is tested natively.
    fn spawn_request(&self, request: ExecRequest) -> Result<SpawnRequest, Error> {
        if request.argv.is_empty() {
            return Err(error::invalid_spec("argv", "the command is empty"));
        }
        // The workspace is at `workdir` inside the view, so the sandbox's own paths apply.
        let cwd = paths::host_cwd(&self.workdir, &self.workdir, request.cwd.as_deref())?;
        Ok(SpawnRequest {
            argv: request.argv,
            cwd,
            env: environment(&self.env, &request.env),
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
            workdir: self.workdir.clone(),
            isolation: describe_isolation(&self.isolation),
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        process::spawn(&self.spawn_request(request)?)
    }

    fn stats(&self) -> Result<ResourceUsage, Error> {
        process::usage()
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
            summary:
                "Sealed host processes (bubblewrap, seccomp, cgroups): no container engine needed"
                    .into(),
            options_schema: Some(OPTIONS_SCHEMA.into()),
        }
    }
}

impl Provider for SubprocessProvider {
    type Sandbox = Subprocess;

    fn create(request: SandboxRequest) -> Result<provider::Sandbox, Error> {
        check_request(&request)?;
        if let Some(image) = &request.image {
            events::warn(format!(
                "sandbox provider `subprocess` ignores `image` ({image}): commands see the host's system folders"
            ));
        }
        Ok(provider::Sandbox::new(Subprocess::new(request)?))
    }

    fn list_leftovers() -> Result<Vec<Leftover>, Error> {
        // Nothing outlives a run: every process dies with its pid namespace and the
        // cgroup, and the host removes the state directory at cleanup.
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
        let env = environment(&[env_var("A", "1")], &[env_var("B", "2")]);
        assert_eq!(
            env,
            [
                env_var("PATH", PATH),
                env_var("HOME", HOME),
                env_var("TMPDIR", "/tmp"),
                env_var("A", "1"),
                env_var("B", "2"),
            ]
        );
    }

    #[test]
    fn later_environment_wins() {
        let env = environment(
            &[env_var("PATH", "/opt/bin"), env_var("A", "1")],
            &[env_var("A", "2"), env_var("HOME", "/h")],
        );
        assert_eq!(
            env,
            [
                env_var("PATH", "/opt/bin"),
                env_var("HOME", "/h"),
                env_var("TMPDIR", "/tmp"),
                env_var("A", "2")
            ]
        );
    }

    #[test]
    fn every_request_is_sealed_with_the_workspace_and_home_bound_in() {
        let r = request();
        assert!(check_request(&r).is_ok());
        let iso = isolation(&r, &SubprocessOptions::default());
        let view = iso.sealed.as_ref().expect("always sealed");
        assert_eq!(
            view.binds,
            [
                Mount {
                    source: "/src/app".into(),
                    target: "/workspace".into(),
                    readonly: false
                },
                Mount {
                    source: "/tmp/state".into(),
                    target: HOME.into(),
                    readonly: false
                },
            ]
        );
        assert_eq!(iso.network, Some(NetworkMode::Bridge));
        let s = Subprocess::new(r).unwrap();
        let spawn = s.spawn_request(exec(None, vec![])).unwrap();
        assert!(!spawn.inherit_env);
        assert_eq!(spawn.cwd, "/workspace");
        assert_eq!(spawn.env.len(), 4);
        assert_eq!(s.summary().workdir, "/workspace");
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
        r.mounts.push(Mount {
            source: "/home/me/.npm".into(),
            target: "/cache/npm".into(),
            readonly: true,
        });
        let iso = isolation(&r, &SubprocessOptions::default());
        let binds = &iso.sealed.as_ref().unwrap().binds;
        assert!(binds[0].readonly);
        assert_eq!(binds[2].target, "/cache/npm");
        assert!(binds[2].readonly);
        assert_eq!(iso.network, Some(NetworkMode::None));
        let with_pids = isolation(&r, &SubprocessOptions { pids: Some(64) });
        assert_eq!(with_pids.limits.unwrap().pids, Some(64));
        let limits = iso.limits.unwrap();
        assert_eq!(limits.cpu_millicores, Some(1500));
        assert_eq!(limits.memory_bytes, Some(512 * 1024 * 1024));
        assert_eq!(limits.pids, Some(128));
        assert_eq!(limits.timeout_ms, None);
        let text = describe_isolation(&iso);
        assert!(text.contains("read-only workspace at /workspace"), "{text}");
        assert!(text.contains("1 extra mounts"), "{text}");
        assert!(text.contains("no network"), "{text}");
        assert!(
            text.contains("cpu 1500m, memory 512 MiB, pids 128"),
            "{text}"
        );

        let s = Subprocess::new(r).unwrap();
        assert_eq!(s.id, "subprocess-r1");
        assert_eq!(s.spawn_request(exec(None, vec![])).unwrap().isolation, iso);
    }

    #[test]
    fn fails_closed_on_disk() {
        let mut r = request();
        r.resources.disk_bytes = Some(1 << 30);
        assert!(
            matches!(check_request(&r), Err(Error::Unavailable(m)) if m.contains("resources.disk"))
        );
        let mut r = request();
        r.workdir = "rel".into();
        assert!(matches!(check_request(&r), Err(Error::InvalidSpec(f)) if f.path == "workdir"));
    }

    #[test]
    fn exec_maps_cwd_and_refuses_escapes() {
        let s = Subprocess::new(request()).unwrap();
        let at = |cwd| s.spawn_request(exec(Some(cwd), vec![]));
        assert_eq!(at("lib").unwrap().cwd, "/workspace/lib");
        assert_eq!(at("/workspace/lib").unwrap().cwd, "/workspace/lib");
        assert!(matches!(at("/root"), Err(Error::InvalidSpec(_))));
        assert!(matches!(at("../x"), Err(Error::InvalidSpec(_))));
    }
}
