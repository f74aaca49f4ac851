//! The host's policy for containers: what a plugin's `container-spec` becomes.
//!
//! The plugin is not trusted to harden its own containers, so everything that keeps an
//! agent in lives here and cannot be asked away: all capabilities dropped,
//! `no-new-privileges`, never privileged, a pids limit always, swap no larger than the
//! memory limit, the host's seccomp filter on top of the engine's profile through the
//! sandbox init (which also reaps zombies, see [`super::init`]), the host's labels on
//! everything. Host
//! networking needs the operator's grant (`docker: hostNetwork` in `grants.yaml`); a bind
//! mount must name an existing host path inside the run's own folders (workspace, sandbox
//! state) or one the operator granted (`docker: mounts`), and never the Docker engine's
//! socket, a folder holding it, or the host's kernel interfaces. Pure apart from the
//! checks on the host's file system, so it is tested natively.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountTypeEnum};

use crate::capabilities::{invalid_spec, RunContext};
use crate::runtime::bindings::docker::ContainerSpec;
use crate::runtime::bindings::types::{Error, NetworkMode};
use crate::taskspec::expand_home;

use super::init;

/// Label keys the host sets on everything it creates; a plugin cannot set them.
pub const LABEL_RUN_ID: &str = "io.agentgate.run-id";
pub const LABEL_OWNER: &str = "io.agentgate.owner";
pub const LABEL_CREATED: &str = "io.agentgate.created";

/// The pids limit when the spec sets none: enough for any build, not for a fork bomb.
pub const DEFAULT_PIDS: u32 = 4096;

/// Host paths a container may never see, nor any folder that holds them.
const FORBIDDEN_SOURCES: &[&str] = &["/proc", "/sys", "/dev", "/boot"];

/// What the host decides on its own, outside the plugin's request.
#[derive(Debug, Clone)]
pub struct Policy {
    pub run_id: String,
    /// This agentgate ([`crate::registry::Owner`]), for `agentgate gc`.
    pub owner: String,
    /// RFC 3339 time of creation.
    pub created: String,
    /// `uid:gid` of the invoking user, for containers whose spec names no user.
    pub invoking_user: String,
    /// The operator allowed `network: host`.
    pub allow_host_network: bool,
    /// Canonical host folders a container may bind, with everything below them.
    pub mount_roots: Vec<PathBuf>,
    /// The engine's socket on this machine, when it is a local one.
    pub engine_socket: Option<PathBuf>,
    /// The sandbox init on the host, bound into every container.
    pub sandbox_init: PathBuf,
    /// The sandbox's private state folder (canonical): a container gets a tmpfs in its
    /// place, see [`container_config`].
    pub private_state: Option<PathBuf>,
}

/// What the image itself runs: its `ENTRYPOINT` and `CMD`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageProcess {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
}

impl Policy {
    pub fn for_run(run: &RunContext) -> Result<Policy, Error> {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let env = |name: &str| std::env::var(name).ok();
        let granted = run
            .docker
            .mounts
            .iter()
            .filter_map(|m| expand_home(m, &env).ok().map(PathBuf::from));
        let mount_roots = run
            .sandbox_folders()
            .iter()
            .cloned()
            .chain(granted)
            // A folder that does not exist holds nothing to mount.
            .filter_map(|folder| std::fs::canonicalize(folder).ok())
            .collect();
        Ok(Policy {
            run_id: run.run_id.clone(),
            owner: crate::registry::Owner::current()
                .map_or_else(|_| format!("pid:{}", std::process::id()), |o| o.to_string()),
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            invoking_user: format!("{uid}:{gid}"),
            allow_host_network: run.docker.host_network,
            mount_roots,
            engine_socket: super::client::local_socket(),
            sandbox_init: init::host_copy()?,
            // The folders are (workspace, state), in that order.
            private_state: run
                .sandbox_folders()
                .get(1)
                .and_then(|state| std::fs::canonicalize(state).ok()),
        })
    }

    /// The labels the host puts on everything it creates.
    pub fn labels(&self) -> [(&'static str, String); 3] {
        [
            (LABEL_RUN_ID, self.run_id.clone()),
            (LABEL_OWNER, self.owner.clone()),
            (LABEL_CREATED, self.created.clone()),
        ]
    }
}

/// The engine's request for `spec` of an image that runs `image` under `policy`: the
/// name to create it with and its configuration.
pub fn container_config(
    spec: &ContainerSpec,
    policy: &Policy,
    image: &ImageProcess,
) -> Result<(Option<String>, ContainerCreateBody), Error> {
    if spec.image.trim().is_empty() {
        return Err(invalid_spec("image", "no image named"));
    }
    if !spec.workdir.starts_with('/') {
        return Err(invalid_spec(
            "workdir",
            format!("`{}` must be an absolute path", spec.workdir),
        ));
    }
    let env = spec
        .env
        .iter()
        .enumerate()
        .map(|(i, var)| {
            if var.name.is_empty() || var.name.contains('=') || var.name.contains('\0') {
                Err(invalid_spec(
                    &format!("env[{i}].name"),
                    format!("{:?} is not a valid variable name", var.name),
                ))
            } else {
                Ok(format!("{}={}", var.name, var.value))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let user = match &spec.user {
        Some(user) => {
            check_user(user)?;
            user.clone()
        }
        None => policy.invoking_user.clone(),
    };
    // The sandbox's private state lives as long as the container, so it needs no host
    // folder: a tmpfs of the container's user takes its place, and the container's mount
    // table shows no path of the run's folder.
    let mut mounts = Vec::new();
    let mut tmpfs = HashMap::new();
    for (i, m) in spec.mounts.iter().enumerate() {
        let bind = bind_mount(i, &m.source, &m.target, m.readonly, policy)?;
        let source = bind.source.as_deref().map(Path::new);
        if !m.readonly && source.is_some() && source == policy.private_state.as_deref() {
            tmpfs.insert(m.target.clone(), private_tmpfs_options(&user));
        } else {
            mounts.push(bind);
        }
    }
    mounts.push(Mount {
        typ: Some(MountTypeEnum::BIND),
        source: Some(policy.sandbox_init.display().to_string()),
        target: Some(init::PATH_IN_CONTAINER.into()),
        read_only: Some(true),
        ..Default::default()
    });
    // The image's own process, started by the init, which stays as the first process.
    let entrypoint = init::wrap(&image.entrypoint, spec.network, true)?;
    let cmd = if spec.command.is_empty() {
        image.cmd.clone()
    } else {
        spec.command.clone()
    };
    let network =
        match spec.network {
            NetworkMode::None => "none",
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host if policy.allow_host_network => "host",
            NetworkMode::Host => return Err(Error::Denied(
                "`network: host` shares the host's network with the agent, so the operator must \
                 allow it with `docker: {hostNetwork: true}` in $AGENTGATE_HOME/grants.yaml; \
                 or use `network: bridge`"
                    .into(),
            )),
        };
    let mut labels: HashMap<String, String> = spec
        .labels
        .iter()
        .filter(|l| !l.key.starts_with("io.agentgate."))
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect();
    labels.extend(policy.labels().map(|(k, v)| (k.to_string(), v)));

    let r = &spec.resources;
    let memory = r.memory_bytes.map(|m| i64::try_from(m).unwrap_or(i64::MAX));
    let host_config = HostConfig {
        nano_cpus: r.cpu_millicores.map(|m| i64::from(m) * 1_000_000),
        memory,
        // Swap no larger than the limit: memory + swap == memory.
        memory_swap: memory,
        pids_limit: Some(i64::from(r.pids.unwrap_or(DEFAULT_PIDS))),
        storage_opt: r
            .disk_bytes
            .map(|d| HashMap::from([("size".to_string(), d.to_string())])),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        privileged: Some(false),
        // The sandbox init is pid 1 and reaps what the agent leaves behind.
        init: Some(false),
        network_mode: Some(network.into()),
        mounts: Some(mounts),
        tmpfs: Some(tmpfs),
        ..Default::default()
    };
    let name = spec
        .name
        .as_ref()
        .map(|n| container_name(&policy.run_id, n));
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: Some(entrypoint),
        cmd: Some(cmd),
        env: Some(env),
        working_dir: Some(spec.workdir.clone()),
        user: Some(user),
        labels: Some(labels),
        network_disabled: Some(spec.network == NetworkMode::None),
        host_config: Some(host_config),
        ..Default::default()
    };
    Ok((name, body))
}

/// A bind mount of an existing host path that does not expose the host.
fn bind_mount(
    index: usize,
    source: &str,
    target: &str,
    readonly: bool,
    policy: &Policy,
) -> Result<Mount, Error> {
    let field = |f: &str| format!("mounts[{index}].{f}");
    if !target.starts_with('/') || target.split('/').any(|c| c == "..") {
        return Err(invalid_spec(
            &field("target"),
            format!("`{target}` must be an absolute path without `..`"),
        ));
    }
    if !source.starts_with('/') {
        return Err(invalid_spec(
            &field("source"),
            format!("`{source}` must be an absolute host path (`~` is expanded by the host)"),
        ));
    }
    let real = std::fs::canonicalize(source).map_err(|e| {
        invalid_spec(
            &field("source"),
            format!("`{source}` cannot be mounted: {e}; create it or fix the path"),
        )
    })?;
    if let Some(reason) = exposes_host(&real, policy.engine_socket.as_deref()) {
        return Err(Error::Denied(format!(
            "mount `{source}` is refused: {reason}"
        )));
    }
    if !policy.mount_roots.iter().any(|root| real.starts_with(root)) {
        return Err(Error::Denied(format!(
            "mount `{source}` is refused: it is outside the run's workspace, and containers \
             bind other host folders only when the operator grants them; add it under \
             `docker: {{mounts: [...]}}` in $AGENTGATE_HOME/grants.yaml"
        )));
    }
    Ok(Mount {
        typ: Some(MountTypeEnum::BIND),
        // The resolved path, so a symlink swapped after this check changes nothing.
        source: Some(real.display().to_string()),
        target: Some(target.to_string()),
        read_only: Some(readonly),
        ..Default::default()
    })
}

/// Why mounting `real` (a canonical path) would hand the host to the agent.
fn exposes_host(real: &Path, socket: Option<&Path>) -> Option<String> {
    if real == Path::new("/") {
        return Some("it is the host's root".into());
    }
    for forbidden in FORBIDDEN_SOURCES {
        let forbidden = Path::new(forbidden);
        if real.starts_with(forbidden) {
            return Some(format!(
                "it is inside {}, the host's kernel interfaces",
                forbidden.display()
            ));
        }
    }
    let socket = socket?;
    let socket = std::fs::canonicalize(socket).unwrap_or_else(|_| socket.to_path_buf());
    socket.starts_with(real).then(|| {
        format!(
            "it holds the Docker engine's socket {}, which would give the agent the host",
            socket.display()
        )
    })
}

/// A private tmpfs for `user` (`uid[:gid]` or a name): theirs alone when the ids are
/// known, else open to the container's users like `/tmp`. Programs installed there
/// must run, so it is not `noexec`.
fn private_tmpfs_options(user: &str) -> String {
    let ids: Vec<&str> = user.split(':').collect();
    let numeric = |id: &&str| id.chars().all(|c| c.is_ascii_digit());
    if ids.iter().all(numeric) {
        let gid = ids.get(1).unwrap_or(&ids[0]);
        format!("rw,exec,nosuid,nodev,mode=0700,uid={},gid={gid}", ids[0])
    } else {
        "rw,exec,nosuid,nodev,mode=1777".into()
    }
}

/// `uid`, `uid:gid`, or a user name known to the image.
fn check_user(user: &str) -> Result<(), Error> {
    let ok = !user.is_empty()
        && user.split(':').count() <= 2
        && user.split(':').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        });
    if ok {
        Ok(())
    } else {
        Err(invalid_spec(
            "user",
            format!("`{user}` is not `uid`, `uid:gid` or a user name"),
        ))
    }
}

/// `agentgate-<run>-<name>`, in the characters Docker allows.
fn container_name(run_id: &str, name: &str) -> String {
    let clean: String = format!("agentgate-{run_id}-{name}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::types::{EnvVar, Label, Mount as SpecMount, Resources};

    fn policy() -> Policy {
        Policy {
            run_id: "run-1".into(),
            owner: "pid:42".into(),
            created: "2026-01-01T00:00:00Z".into(),
            invoking_user: "1000:1000".into(),
            allow_host_network: false,
            mount_roots: vec![std::env::temp_dir().canonicalize().unwrap()],
            engine_socket: Some("/var/run/docker.sock".into()),
            sandbox_init: "/tmp/agentgate-sandbox-init-test".into(),
            private_state: None,
        }
    }

    fn image() -> ImageProcess {
        ImageProcess {
            entrypoint: vec!["docker-entrypoint.sh".into()],
            cmd: vec!["node".into()],
        }
    }

    fn spec() -> ContainerSpec {
        ContainerSpec {
            image: "busybox".into(),
            name: None,
            command: vec!["sleep".into(), "infinity".into()],
            env: vec![EnvVar {
                name: "A".into(),
                value: "1=2".into(),
            }],
            workdir: "/workspace".into(),
            mounts: vec![],
            network: NetworkMode::None,
            resources: Resources {
                cpu_millicores: Some(1500),
                memory_bytes: Some(256 << 20),
                disk_bytes: None,
                pids: None,
                timeout_ms: None,
            },
            labels: vec![Label {
                key: LABEL_RUN_ID.into(),
                value: "forged".into(),
            }],
            user: None,
        }
    }

    #[test]
    fn hardening_is_always_applied() {
        let (_, body) = container_config(&spec(), &policy(), &image()).unwrap();
        let host = body.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.pids_limit, Some(i64::from(DEFAULT_PIDS)));
        assert_eq!(host.nano_cpus, Some(1_500_000_000));
        assert_eq!(host.memory, Some(256 << 20));
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
        assert_eq!(body.env, Some(vec!["A=1=2".to_string()]));
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_RUN_ID], "run-1", "a plugin cannot forge it");
        // Every process runs under the host's filter: the init is the first, and starts
        // the image's entrypoint with the spec's command.
        assert_eq!(host.init, Some(false));
        let entrypoint = body.entrypoint.unwrap();
        assert_eq!(entrypoint[0], init::PATH_IN_CONTAINER);
        assert!(entrypoint.contains(&"--seccomp".to_string()));
        assert!(entrypoint.contains(&"--reap".to_string()));
        assert!(entrypoint.ends_with(&["--".into(), "docker-entrypoint.sh".into()]));
        assert_eq!(body.cmd, Some(vec!["sleep".into(), "infinity".into()]));
        let mounts = host.mounts.unwrap();
        let init_mount = mounts.last().unwrap();
        assert_eq!(init_mount.target.as_deref(), Some(init::PATH_IN_CONTAINER));
        assert_eq!(init_mount.read_only, Some(true));
        assert_eq!(labels[LABEL_OWNER], "pid:42");
        assert!(labels.contains_key(LABEL_CREATED));
    }

    #[test]
    fn the_private_state_folder_becomes_a_tmpfs_of_the_containers_user() {
        let state = tempfile::tempdir().unwrap();
        let mut p = policy();
        p.private_state = Some(state.path().canonicalize().unwrap());
        let mut s = spec();
        s.mounts = vec![SpecMount {
            source: state.path().display().to_string(),
            target: "/home/agent".into(),
            readonly: false,
        }];
        let (_, body) = container_config(&s, &p, &image()).unwrap();
        let host = body.host_config.unwrap();
        let options = &host.tmpfs.unwrap()["/home/agent"];
        assert_eq!(options, "rw,exec,nosuid,nodev,mode=0700,uid=1000,gid=1000");
        let binds = host.mounts.unwrap();
        assert!(
            binds
                .iter()
                .all(|m| m.target.as_deref() != Some("/home/agent")),
            "{binds:?}"
        );
        assert_eq!(
            private_tmpfs_options("0"),
            "rw,exec,nosuid,nodev,mode=0700,uid=0,gid=0"
        );
        assert_eq!(
            private_tmpfs_options("node"),
            "rw,exec,nosuid,nodev,mode=1777"
        );
        // Other folders stay binds.
        s.mounts[0].source = std::env::temp_dir().display().to_string();
        let (_, body) = container_config(&s, &p, &image()).unwrap();
        assert!(body.host_config.unwrap().tmpfs.unwrap().is_empty());
    }

    #[test]
    fn without_a_command_the_image_runs_its_own() {
        let mut s = spec();
        s.command.clear();
        let (_, body) = container_config(&s, &policy(), &image()).unwrap();
        assert_eq!(body.cmd, Some(vec!["node".to_string()]));
    }

    #[test]
    fn host_network_needs_the_operators_grant() {
        let mut s = spec();
        s.network = NetworkMode::Host;
        assert!(matches!(
            container_config(&s, &policy(), &image()),
            Err(Error::Denied(m)) if m.contains("hostNetwork: true") && m.contains("grants.yaml")
        ));
        let mut granted = policy();
        granted.allow_host_network = true;
        let (_, body) = container_config(&s, &granted, &image()).unwrap();
        assert_eq!(
            body.host_config.unwrap().network_mode.as_deref(),
            Some("host")
        );
    }

    #[test]
    fn mounts_outside_the_runs_folders_need_the_operators_grant() {
        let run_folder = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let mut s = spec();
        s.mounts = vec![SpecMount {
            source: elsewhere.path().display().to_string(),
            target: "/data".into(),
            readonly: false,
        }];
        let mut p = policy();
        p.mount_roots = vec![run_folder.path().canonicalize().unwrap()];
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(m)) if m.contains("outside the run's workspace") && m.contains("docker: {mounts")
        ));
        // Through a symlink inside the run's folder, the real path is what counts.
        let link = run_folder.path().join("link");
        std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
        s.mounts[0].source = link.display().to_string();
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(_))
        ));
        p.mount_roots.push(elsewhere.path().canonicalize().unwrap());
        assert!(container_config(&s, &p, &image()).is_ok());
    }

    #[test]
    fn mounts_must_exist_and_must_not_expose_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let mount = |source: &str| SpecMount {
            source: source.into(),
            target: "/data".into(),
            readonly: true,
        };
        let mut s = spec();
        s.mounts = vec![mount(&dir.path().display().to_string())];
        let (_, body) = container_config(&s, &policy(), &image()).unwrap();
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[0].typ, Some(MountTypeEnum::BIND));

        s.mounts = vec![mount(&dir.path().join("absent").display().to_string())];
        assert!(matches!(
            container_config(&s, &policy(), &image()),
            Err(Error::InvalidSpec(f)) if f.path == "mounts[0].source" && f.message.contains("absent")
        ));
        for exposing in ["/", "/proc", "/sys/fs/cgroup"] {
            s.mounts = vec![mount(exposing)];
            assert!(
                matches!(
                    container_config(&s, &policy(), &image()),
                    Err(Error::Denied(_))
                ),
                "{exposing}"
            );
        }
        // A folder holding the engine's socket is the host.
        let socket_dir = tempfile::tempdir().unwrap();
        let socket = socket_dir.path().join("run/docker.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::write(&socket, "").unwrap();
        let mut p = policy();
        p.engine_socket = Some(socket.clone());
        s.mounts = vec![mount(&socket_dir.path().display().to_string())];
        assert!(
            matches!(container_config(&s, &p, &image()), Err(Error::Denied(m)) if m.contains("socket"))
        );
        s.mounts = vec![mount(&socket.display().to_string())];
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(_))
        ));
    }

    #[test]
    fn bad_fields_are_named() {
        let mut s = spec();
        s.workdir = "work".into();
        assert!(
            matches!(container_config(&s, &policy(), &image()), Err(Error::InvalidSpec(f)) if f.path == "workdir")
        );
        let mut s = spec();
        s.env[0].name = "A=B".into();
        assert!(
            matches!(container_config(&s, &policy(), &image()), Err(Error::InvalidSpec(f)) if f.path == "env[0].name")
        );
        let mut s = spec();
        s.user = Some("0:0:0".into());
        assert!(
            matches!(container_config(&s, &policy(), &image()), Err(Error::InvalidSpec(f)) if f.path == "user")
        );
        let mut s = spec();
        s.name = Some("my box!".into());
        assert_eq!(
            container_config(&s, &policy(), &image())
                .unwrap()
                .0
                .as_deref(),
            Some("agentgate-run-1-my-box-")
        );
    }
}
