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
//! state) or one the host path policy allows for mounts ([`crate::host_paths`]:
//! never a system folder, the engine's socket or a folder holding a socket), and the
//! path bound is the resolved one that was checked. Pure apart from the checks on the
//! host's file system, so it is tested natively.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountTypeEnum};

use crate::capabilities::{invalid_spec, RunContext};
use crate::host_paths::{BindScope, Refusal};
use crate::wit::docker::ContainerSpec;
use crate::wit::types::{Error, NetworkMode};

use super::init;

use crate::capabilities::labels::{
    LABEL_CREATED, LABEL_HOME, LABEL_OWNER, LABEL_PREFIX, LABEL_RUN_ID,
};

/// The pids limit when the spec sets none: enough for any build, not for a fork bomb.
pub const DEFAULT_PIDS: u32 = 4096;

/// What the host decides on its own, outside the plugin's request.
#[derive(Debug, Clone)]
pub struct Policy {
    pub run_id: String,
    /// This agentgate process (the run identity's `owner`), for `agentgate gc`.
    pub owner: String,
    /// RFC 3339 time the run started.
    pub created: String,
    /// This agentgate home's label value: gc of another home leaves the objects alone.
    pub home: String,
    /// `uid:gid` of the invoking user, for containers whose spec names no user.
    pub invoking_user: String,
    /// The operator allowed `network: host`.
    pub allow_host_network: bool,
    /// What a container may bind.
    pub binds: BindScope,
    /// The sandbox init on the host, bound into every container.
    pub sandbox_init: PathBuf,
    /// The sandbox's private state folder (canonical): a container gets a tmpfs in its
    /// place, see [`container_config`].
    pub private_state: Option<PathBuf>,
    /// The run's egress proxy: every container gets it instead of any network.
    pub egress: Option<std::sync::Arc<crate::capabilities::EgressGate>>,
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
        let binds = run.bind_scope();
        let identity = run.identity()?;
        Ok(Policy {
            run_id: identity.run_id.clone(),
            owner: identity.owner.clone(),
            created: humantime::format_rfc3339_seconds(identity.created).to_string(),
            home: identity.home.clone(),
            invoking_user: format!("{uid}:{gid}"),
            allow_host_network: run
                .state::<super::DockerGrant>()
                .is_some_and(|grant| grant.host_network),
            sandbox_init: crate::capabilities::process::init_file()?.path.clone(),
            // The run's folders are (workspace, state), in that order.
            private_state: binds.run_folders().get(1).cloned(),
            binds,
            egress: run.egress().cloned(),
        })
    }

    /// The labels the host puts on everything it creates.
    pub fn labels(&self) -> [(&'static str, String); 4] {
        [
            (LABEL_RUN_ID, self.run_id.clone()),
            (LABEL_OWNER, self.owner.clone()),
            (LABEL_CREATED, self.created.clone()),
            (LABEL_HOME, self.home.clone()),
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
    let egress_env = policy
        .egress
        .as_ref()
        .map(|_| crate::capabilities::EgressGate::environment())
        .unwrap_or_default();
    let env = spec
        .env
        .iter()
        .enumerate()
        .filter(|(_, var)| !egress_env.iter().any(|(name, _)| *name == var.name))
        .map(|(i, var)| {
            crate::env_name::check(&var.name, crate::env_name::Rule::Exec)
                .map(|()| format!("{}={}", var.name, var.value))
                .map_err(|invalid| invalid_spec(&format!("env[{i}].name"), invalid.to_string()))
        })
        .chain(
            egress_env
                .iter()
                .map(|(name, value)| Ok(format!("{name}={value}"))),
        )
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
    if let Some(egress) = &policy.egress {
        let file = |name: &str| egress.socket_dir.join(name).display().to_string();
        for (source, target) in [
            (
                file(crate::capabilities::EGRESS_SOCKET_NAME),
                init::EGRESS_SOCKET_IN_CONTAINER,
            ),
            (file(crate::capabilities::EGRESS_HOSTS_NAME), "/etc/hosts"),
            (
                file(crate::capabilities::EGRESS_RESOLV_CONF_NAME),
                "/etc/resolv.conf",
            ),
        ] {
            mounts.push(Mount {
                typ: Some(MountTypeEnum::BIND),
                source: Some(source),
                target: Some(target.into()),
                read_only: Some(true),
                ..Default::default()
            });
        }
    }
    // The image's own process, started by the init, which stays as the first process.
    let entrypoint = match &policy.egress {
        Some(egress) => init::wrap_for_egress(&image.entrypoint, true, Some(&egress.allow))?,
        None => init::wrap(&image.entrypoint, spec.network, true)?,
    };
    let cmd = if spec.command.is_empty() {
        image.cmd.clone()
    } else {
        spec.command.clone()
    };
    // With an egress allowlist the container gets loopback only, whatever was asked.
    let network = if policy.egress.is_some() {
        NetworkMode::None
    } else {
        spec.network
    };
    let network_name =
        match network {
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
        .filter(|l| !l.key.starts_with(LABEL_PREFIX))
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
        network_mode: Some(network_name.into()),
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
        // Disabled networking would take loopback too, where the egress relays listen.
        network_disabled: Some(network == NetworkMode::None && policy.egress.is_none()),
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
    let real = policy
        .binds
        .check(source)
        .map_err(|refusal| match refusal {
            Refusal::NotAbsolute { .. } | Refusal::Missing { .. } => {
                invalid_spec(&field("source"), refusal.to_string())
            }
            refusal => Error::Denied(format!("mount {refusal}")),
        })?;
    Ok(Mount {
        typ: Some(MountTypeEnum::BIND),
        // The resolved path, so a symlink swapped after this check changes nothing.
        source: Some(real.display().to_string()),
        target: Some(target.to_string()),
        read_only: Some(readonly),
        ..Default::default()
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
    use crate::host_paths::{HostFolders, HostPaths, PathGrants};
    use crate::wit::types::{EnvVar, Label, Mount as SpecMount, Resources};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    fn policy() -> Policy {
        Policy {
            run_id: "run-1".into(),
            owner: "pid:42".into(),
            created: "2026-01-01T00:00:00Z".into(),
            home: "home-digest".into(),
            invoking_user: "1000:1000".into(),
            allow_host_network: false,
            binds: scope(&[], PathGrants::default(), None),
            sandbox_init: "/tmp/agentgate-sandbox-init-test".into(),
            private_state: None,
            egress: None,
        }
    }

    fn image() -> ImageProcess {
        ImageProcess {
            entrypoint: vec!["docker-entrypoint.sh".into()],
            cmd: vec!["node".into()],
        }
    }

    /// Binds of `run_folders` and what `grants` allow, on a host whose temporary
    /// folder is this one and whose engine listens on `socket`.
    fn scope(run_folders: &[PathBuf], grants: PathGrants, socket: Option<PathBuf>) -> BindScope {
        let host = HostFolders {
            user_home: None,
            temp: std::env::temp_dir(),
            agentgate_home: "/nonexistent/agentgate-home".into(),
            guarded: vec![(
                socket.unwrap_or_else(|| "/var/run/docker.sock".into()),
                crate::capabilities::docker::unit::ENGINE_SOCKET,
            )],
        };
        BindScope::new(run_folders, Arc::new(HostPaths::new(&grants, &host)))
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
        let other = tempfile::tempdir().unwrap();
        s.mounts[0].source = other.path().display().to_string();
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
    fn mounts_outside_the_runs_folders_need_the_host_path_policy() {
        let run_folder = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let listed = tempfile::tempdir().unwrap();
        let mut s = spec();
        s.mounts = vec![SpecMount {
            source: elsewhere.path().display().to_string(),
            target: "/data".into(),
            readonly: false,
        }];
        // The operator's list replaces the default (below the temporary folder).
        let only_listed = PathGrants {
            workspaces: None,
            mounts: Some(vec![listed.path().to_path_buf()]),
        };
        let mut p = policy();
        p.binds = scope(
            &[run_folder.path().to_path_buf()],
            only_listed.clone(),
            None,
        );
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(m)) if m.contains("is not allowed") && m.contains("`mounts: [")
        ));
        // Through a symlink inside the run's folder, the real path is what counts.
        let link = run_folder.path().join("link");
        std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
        s.mounts[0].source = link.display().to_string();
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(_))
        ));
        // The run's own folder, and what the operator listed, bind as their real path.
        s.mounts[0].source = run_folder.path().display().to_string();
        assert!(container_config(&s, &p, &image()).is_ok());
        let listed_link = run_folder.path().join("listed");
        std::os::unix::fs::symlink(listed.path(), &listed_link).unwrap();
        s.mounts[0].source = listed_link.display().to_string();
        let (_, body) = container_config(&s, &p, &image()).unwrap();
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(
            mounts[0].source.as_deref(),
            Some(listed.path().canonicalize().unwrap().to_str().unwrap()),
            "the checked path is bound, not the link"
        );
        // Before the host set the scope, nothing binds at all.
        p.binds = BindScope::default();
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(_))
        ));
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
        // Whatever the operator lists, the host's folders stay out.
        let mut p = policy();
        let everything = PathGrants {
            workspaces: None,
            mounts: Some(vec!["/".into()]),
        };
        p.binds = scope(&[], everything.clone(), None);
        for exposing in [
            "/",
            "/proc",
            "/sys/fs/cgroup",
            "/var/run",
            "/run/docker",
            "/var/run/docker/containerd",
            "/etc",
        ] {
            if !Path::new(exposing).exists() {
                continue;
            }
            s.mounts = vec![mount(exposing)];
            assert!(
                matches!(container_config(&s, &p, &image()), Err(Error::Denied(_))),
                "{exposing}"
            );
        }
        // A folder holding the engine's socket is the host, and so is any folder
        // holding a socket.
        let socket_dir = tempfile::tempdir().unwrap();
        let socket = socket_dir.path().join("run/docker.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::write(&socket, "").unwrap();
        p.binds = scope(&[], everything, Some(socket.clone()));
        s.mounts = vec![mount(&socket_dir.path().display().to_string())];
        assert!(
            matches!(container_config(&s, &p, &image()), Err(Error::Denied(m)) if m.contains("socket"))
        );
        s.mounts = vec![mount(&socket.display().to_string())];
        assert!(matches!(
            container_config(&s, &p, &image()),
            Err(Error::Denied(_))
        ));
        let agent_dir = tempfile::tempdir().unwrap();
        let _listener =
            std::os::unix::net::UnixListener::bind(agent_dir.path().join("agent.sock")).unwrap();
        s.mounts = vec![mount(&agent_dir.path().display().to_string())];
        assert!(
            matches!(container_config(&s, &policy(), &image()), Err(Error::Denied(m)) if m.contains("socket `agent.sock`"))
        );
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
