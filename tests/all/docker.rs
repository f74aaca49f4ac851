//! The `docker` sandbox on a real Docker engine, against an agent that tries to get out.
//!
//! Each test runs the real `agentgate` binary with `sandbox.provider: docker` and a
//! small image built once per test binary `FROM scratch` with Debian's
//! `busybox-static` (no registry is reachable here). The agent is a shell script run
//! by the `command` driver; it reads its limits from its own cgroup files and attacks
//! what it was given. After every run the test asserts that no container or volume
//! carrying the run's label is left. Tests run in parallel: each run has its own
//! AGENTGATE_HOME and run id, and every check filters on that run id.
//!
//! Under `CI=true` a missing or unreachable engine fails every test; elsewhere each
//! test says loudly that it was skipped.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use crate::support;
use crate::support::{
    assert_mount_tables_hide, assert_probe_refused_what_it_must, docker_ready, eventually,
    place_syscall_probe, processes_with_arg, shell_agent, stderr, task_spec, Home,
    MOUNT_TABLES_SCRIPT,
};

/// The test image: busybox only, built once per test binary.
const IMAGE: &str = support::DOCKER_TEST_IMAGE;

/// A `local` workspace in a `docker` sandbox with extra `sandbox` lines.
fn in_docker(workspace: &Path, readonly: bool, sandbox_extra: &str, agent: &str) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\n  readonly: {readonly}\nsandbox:\n  provider: docker\n  image: {IMAGE}\n{}{agent}",
        workspace.display(),
        support::indent(sandbox_extra, 2)
    )
}

/// Runs `agent` in a docker sandbox; returns the home (for its logs and result).
fn run(workspace: &Path, readonly: bool, sandbox_extra: &str, agent_script: &str) -> Home {
    run_granted("", workspace, readonly, sandbox_extra, agent_script)
}

/// [`run`] in a home whose operator wrote `grants` into `grants.yaml`.
fn run_granted(
    grants: &str,
    workspace: &Path,
    readonly: bool,
    sandbox_extra: &str,
    agent_script: &str,
) -> Home {
    let home = Home::new();
    std::fs::write(home.dir.path().join("grants.yaml"), grants).unwrap();
    let output = home.run_spec(&task_spec(
        "docker",
        "contain me",
        &in_docker(
            workspace,
            readonly,
            sandbox_extra,
            &shell_agent(agent_script),
        ),
    ));
    // Whatever the outcome, the run must leave nothing behind.
    assert_nothing_left(&home);
    let _ = output;
    home
}

/// No container or volume of the home's run is left on the engine.
fn assert_nothing_left(home: &Home) {
    let run_id = home.result()["runId"].as_str().unwrap().to_string();
    let filter = format!("label=io.agentgate.run-id={run_id}");
    for kind in [&["ps", "-a", "-q"][..], &["volume", "ls", "-q"][..]] {
        let out = Command::new("docker")
            .args(kind)
            .args(["--filter", &filter])
            .output()
            .unwrap();
        let left = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(left.trim().is_empty(), "docker {kind:?} left: {left}");
    }
}

#[test]
fn limits_environment_workdir_and_ownership_are_as_specified() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let home = run(
        workspace.path(),
        false,
        "resources:\n  cpu: 0.5\n  memory: 64Mi\nenvironment:\n  FROM_SPEC: yes-please\nworkdir: /work\noptions:\n  pids: 77\n",
        "cg=/sys/fs/cgroup\n\
         if [ -f $cg/memory.max ]; then echo mem=$(cat $cg/memory.max) swap=$(cat $cg/memory.swap.max) pids=$(cat $cg/pids.max) cpu=\"$(cat $cg/cpu.max)\";\n\
         else echo mem=$(cat $cg/memory/memory.limit_in_bytes) swap=$(cat $cg/memory/memory.memsw.limit_in_bytes 2>/dev/null || echo none) pids=$(cat $cg/pids/pids.max) cpu=\"$(cat $cg/cpu/cpu.cfs_quota_us) $(cat $cg/cpu/cpu.cfs_period_us)\"; fi\n\
         echo pwd=$(pwd)\n\
         env | sort | sed 's/^/env:/'\n\
         grep CapEff /proc/self/status\n\
         grep NoNewPrivs /proc/self/status\n\
         echo written > made-by-agent.txt\n\
         echo done",
    );
    let result = home.result();
    let stdout = home.log("stdout.log");
    assert_eq!(result["status"], "succeeded", "{result:#}\n{stdout}");
    assert!(stdout.contains("mem=67108864"), "{stdout}");
    assert!(stdout.contains("pids=77"), "{stdout}");
    assert!(
        stdout.contains("cpu=\"50000 100000\"") || stdout.contains("cpu=50000 100000"),
        "{stdout}"
    );
    // No swap beyond the memory limit (v1 shows memory+swap, v2 the swap alone).
    assert!(
        stdout.contains("swap=67108864")
            || stdout.contains("swap=0")
            || stdout.contains("swap=none"),
        "{stdout}"
    );
    assert!(stdout.contains("pwd=/work"), "{stdout}");
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    let env: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("env:"))
        .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL="))
        .collect();
    assert!(env.contains(&"FROM_SPEC=yes-please"), "{env:?}");
    assert!(env.contains(&"HOME=/home/agent"), "{env:?}");
    assert!(
        !env.iter().any(|l| l.starts_with("HOST_ONLY_SECRET")),
        "the host's environment leaked: {env:?}"
    );
    let made = workspace.path().join("made-by-agent.txt");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "written\n");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(std::fs::metadata(&made).unwrap().uid(), uid);
    let usage = &result["sandbox"]["resourceUsage"];
    assert!(usage["memoryMB"].is_number(), "{result:#}");
    // Also sampled through the run, for the chart of `agentgate report`.
    let samples: Vec<serde_json::Value> = home
        .log("events.ndjson")
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["type"] == "resources")
        .collect();
    assert!(
        !samples.is_empty()
            && samples
                .iter()
                .all(|s| s["cpuPercent"].is_number() && s["memoryMB"].as_f64() > Some(0.0)),
        "{samples:?}"
    );
    assert_eq!(result["sandbox"]["provider"], "docker");
    assert_eq!(
        result["sandbox"]["containerId"], result["sandbox"]["id"],
        "{result:#}"
    );
}

#[test]
fn a_memory_hog_is_oom_killed_and_the_run_says_so() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let home = run(
        workspace.path(),
        false,
        "resources:\n  memory: 32Mi\n",
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a)\necho survived",
    );
    let result = home.result();
    assert_eq!(result["status"], "failed", "{result:#}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(error.contains("OOMKilled"), "{result:#}");
    assert_eq!(
        result["sandbox"]["resourceUsage"]["oomKilled"], true,
        "{result:#}"
    );
    assert!(
        home.log("events.ndjson").contains("OOMKilled"),
        "no OOM event: {}",
        home.log("events.ndjson")
    );
    assert!(!home.log("stdout.log").contains("survived"));
}

#[test]
fn a_timeout_kills_the_sleeping_agent_and_nothing_of_it_is_left() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let marker = "3581";
    let home = run(
        workspace.path(),
        false,
        "resources:\n  timeout: 3s\n",
        &format!("sleep {marker} &\nsleep {marker}"),
    );
    let result = home.result();
    assert_eq!(result["status"], "timedOut", "{result:#}");
    assert!(
        eventually(10, || processes_with_arg(marker).is_empty()),
        "sleepers survived: {:?}",
        processes_with_arg(marker)
    );
}

#[test]
fn a_fork_bomb_stops_at_the_pids_limit() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let home = run(
        workspace.path(),
        false,
        "resources:\n  timeout: 60s\noptions:\n  pids: 40\n",
        // An inner shell forks until it dies of a failed fork; the outer one then
        // uses only builtins, since a fork would fail for it too.
        "sh -c 'i=0; while [ $i -lt 200 ]; do sleep 4242 >/dev/null 2>&1 & i=$((i+1)); done'\n\
         f=/sys/fs/cgroup/pids.current; [ -f $f ] || f=/sys/fs/cgroup/pids/pids.current\n\
         read n < $f; echo running=$n",
    );
    let stdout = home.log("stdout.log");
    let running: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("running="))
        .unwrap_or_else(|| panic!("no count: {stdout}\n{}", home.log("stderr.log")))
        .trim()
        .parse()
        .unwrap();
    assert!(running > 10 && running <= 40, "running={running}");
    assert!(
        home.log("stderr.log").contains("fork") || home.log("stderr.log").contains("Resource"),
        "{}",
        home.log("stderr.log")
    );
}

#[test]
fn network_none_leaves_only_loopback_and_bridge_gives_eth0() {
    if !docker_ready() {
        return;
    }
    for (network, expected) in [("none", vec!["lo"]), ("bridge", vec!["eth0", "lo"])] {
        let workspace = tempfile::tempdir().unwrap();
        let home = run(
            workspace.path(),
            false,
            &format!("network: {network}\n"),
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort",
        );
        let stdout = home.log("stdout.log");
        let interfaces: Vec<&str> = stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(interfaces, expected, "network: {network}");
    }
}

#[test]
fn sockets_of_other_families_and_io_uring_are_refused_in_every_process_of_the_container() {
    if !docker_ready() {
        return;
    }
    // Docker 20.10's default profile lets all of these through (AF_VSOCK reaches the
    // hypervisor); the host's filter, stacked on it, must refuse them, in the agent's
    // exec and in the container's first process alike.
    for (network, has_network) in [("none", false), ("bridge", true)] {
        let workspace = tempfile::tempdir().unwrap();
        place_syscall_probe(workspace.path());
        let home = run(
            workspace.path(),
            false,
            &format!("network: {network}\n"),
            &format!(
                "./syscall-probe\n\
                 grep Seccomp_filters /proc/1/status | sed 's/^/init-/'\n\
                 grep Seccomp_filters /proc/self/status | sed 's/^/exec-/'\n\
                 {MOUNT_TABLES_SCRIPT}"
            ),
        );
        let stdout = home.log("stdout.log");
        assert_eq!(home.result()["status"], "succeeded", "{}", home.result());
        assert!(stdout.contains("probe-uid="), "{network}: {stdout}");
        assert_probe_refused_what_it_must(&stdout, has_network);
        // The engine's filter and the host's programs, in the first process too.
        let filters = |who: &str| -> u32 {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{who}-Seccomp_filters:")))
                .unwrap_or_else(|| panic!("{who}: {stdout}"))
                .trim()
                .parse()
                .unwrap()
        };
        assert!(filters("init") > 1, "{stdout}");
        assert_eq!(filters("init"), filters("exec"), "{stdout}");
        // The sandbox's private HOME is a tmpfs: nothing under AGENTGATE_HOME shows.
        assert_mount_tables_hide(workspace.path(), &[&home.dir.path().display().to_string()]);
    }
}

#[test]
fn host_network_needs_the_operators_grant() {
    if !docker_ready() {
        return;
    }
    const LIST: &str = "ls /sys/class/net | sort";
    let workspace = tempfile::tempdir().unwrap();
    // The TaskSpec's author asks; only the operator's grants.yaml can allow it.
    let home = run(workspace.path(), false, "network: host\n", LIST);
    let result = home.result();
    assert_ne!(result["status"], "succeeded", "{result:#}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("hostNetwork: true") && error.contains("grants.yaml"),
        "{result:#}"
    );
    assert!(home.log("stdout.log").is_empty());

    let home = run_granted(
        "docker:\n  hostNetwork: true\n",
        workspace.path(),
        false,
        "network: host\n",
        LIST,
    );
    assert_eq!(home.result()["status"], "succeeded", "{:#}", home.result());
    // Containers of tests running beside this one add and remove `veth` links on the
    // host meanwhile; every other interface is the host's own.
    let stable = |name: &str| !name.starts_with("veth");
    let mut on_host: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| stable(name))
        .collect();
    on_host.sort();
    let seen: Vec<String> = home
        .log("stdout.log")
        .lines()
        .filter(|name| stable(name))
        .map(String::from)
        .collect();
    assert_eq!(seen, on_host, "the container sees the host's interfaces");
}

#[test]
fn mounts_outside_the_workspace_need_the_operators_list_once_there_is_one() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let listed = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("data.txt"), "outside").unwrap();
    std::fs::write(listed.path().join("data.txt"), "listed").unwrap();
    // The operator lists one folder: the default (below the temporary folder) is gone.
    let grants = format!("mounts: [{}]\n", listed.path().display());
    // A symlink inside the workspace does not smuggle the folder in either.
    std::os::unix::fs::symlink(outside.path(), workspace.path().join("link")).unwrap();
    for source in [outside.path().to_path_buf(), workspace.path().join("link")] {
        let mount = format!(
            "mounts:\n  - source: {}\n    target: /data\n",
            source.display()
        );
        let error = refused_before_start(&grants, workspace.path(), &mount);
        assert!(
            error.contains("spec.execution.sandbox.mounts[0].source")
                && error.contains("lists under `mounts:`"),
            "{error}"
        );
    }
    let mount = format!(
        "mounts:\n  - source: {}\n    target: /data\n",
        listed.path().display()
    );
    let home = run_granted(
        &grants,
        workspace.path(),
        false,
        &mount,
        "cat /data/data.txt",
    );
    assert_eq!(home.log("stdout.log"), "listed");
}

/// Runs a TaskSpec the host must refuse before anything starts; returns its stderr.
fn refused_before_start(grants: &str, workspace: &Path, sandbox_extra: &str) -> String {
    let home = Home::new();
    std::fs::write(home.dir.path().join("grants.yaml"), grants).unwrap();
    let output = home.run_spec(&task_spec(
        "refused",
        "x",
        &in_docker(workspace, false, sandbox_extra, &shell_agent("touch ran")),
    ));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    // No run id was made, so nothing on the engine can carry one of this run.
    assert!(!home.dir.path().join("runs").exists());
    assert!(!workspace.join("ran").exists());
    stderr(&output)
}

#[test]
fn root_in_the_container_cannot_write_readonly_mounts_or_reach_the_engine() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("keep.txt"), "original").unwrap();
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("data.txt"), "data").unwrap();
    let home = run_granted(
        &format!("mounts: [{}]\n", extra.path().display()),
        workspace.path(),
        true,
        &format!(
            "options:\n  user: \"0:0\"\nmounts:\n  - source: {}\n    target: /data\n    readonly: true\n",
            extra.path().display()
        ),
        "id -u\n\
         echo evil > keep.txt 2>/dev/null && echo WROTE-WORKSPACE\n\
         echo evil > /data/data.txt 2>/dev/null && echo WROTE-MOUNT\n\
         mount -o remount,rw /workspace 2>/dev/null && echo REMOUNTED\n\
         mount -o remount,rw /data 2>/dev/null && echo REMOUNTED\n\
         umount /data 2>/dev/null && echo UNMOUNTED\n\
         ls -la /var/run/docker.sock /run/docker.sock 2>/dev/null && echo SOCKET\n\
         echo attack-done",
    );
    let stdout = home.log("stdout.log");
    assert!(stdout.starts_with("0\n"), "not root inside: {stdout}");
    assert!(stdout.contains("attack-done"), "{stdout}");
    for success in [
        "WROTE-WORKSPACE",
        "WROTE-MOUNT",
        "REMOUNTED",
        "UNMOUNTED",
        "SOCKET",
    ] {
        assert!(!stdout.contains(success), "{success}: {stdout}");
    }
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("keep.txt")).unwrap(),
        "original"
    );
    assert_eq!(
        std::fs::read_to_string(extra.path().join("data.txt")).unwrap(),
        "data"
    );
}

#[test]
fn mounting_the_engines_socket_is_refused() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    // Whatever the operator lists: `/var/run` is a system folder.
    let error = refused_before_start(
        "mounts: [/]\n",
        workspace.path(),
        "mounts:\n  - source: /var/run\n    target: /hostrun\n    readonly: true\n",
    );
    assert!(
        error.contains("spec.execution.sandbox.mounts[0].source")
            && error.contains("a system folder")
            && error.contains("no grant allows it"),
        "{error}"
    );
}

#[test]
fn exec_output_is_demultiplexed_byte_for_byte() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    // Large, interleaved writes: frames far bigger than one read, split across reads.
    let home = run(
        workspace.path(),
        false,
        "",
        "i=0; while [ $i -lt 20 ]; do head -c 30000 /dev/zero | tr '\\0' o; head -c 7000 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done",
    );
    let stdout = std::fs::read(home.run_folder().join("stdout.log")).unwrap();
    let stderr_log = std::fs::read(home.run_folder().join("stderr.log")).unwrap();
    assert_eq!(stdout.len(), 600_000, "stdout length");
    assert!(stdout.iter().all(|&b| b == b'o'));
    assert_eq!(stderr_log.len(), 140_000, "stderr length");
    assert!(stderr_log.iter().all(|&b| b == b'e'));
}

#[test]
fn an_absent_image_that_cannot_be_pulled_is_named_in_the_error() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let home = Home::new();
    let spec = task_spec(
        "absent",
        "nothing",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: docker\n  image: agentgate-test/absent:never\n{}",
            workspace.path().display(),
            shell_agent("echo ran")
        ),
    );
    let output = home.run_spec(&spec);
    assert!(!output.status.success());
    let result = home.result();
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("agentgate-test/absent:never") && error.contains("docker load"),
        "{result:#}"
    );
    assert_nothing_left(&home);
}

#[test]
fn sigterm_removes_the_container() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let home = Home::new();
    let mut child = home.spawn_run(&task_spec(
        "term",
        "wait",
        &in_docker(workspace.path(), false, "", &shell_agent("sleep 3582")),
    ));
    assert!(
        eventually(60, || !processes_with_arg("3582").is_empty()),
        "the agent never started"
    );
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(home.result()["status"], "cancelled");
    assert_nothing_left(&home);
    assert!(eventually(10, || processes_with_arg("3582").is_empty()));
}

/// Runs `execution` with `grants.yaml` holding `grants` and, when given, a plugin folder;
/// returns the home and what the run said (stderr and result).
fn run_with_plugins(grants: &str, plugin_dir: Option<&Path>, execution: &str) -> (Home, String) {
    let home = Home::new();
    std::fs::write(home.dir.path().join("grants.yaml"), grants).unwrap();
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("scoped", "x", execution)).unwrap();
    let mut args = Vec::new();
    if let Some(dir) = plugin_dir {
        args.extend(["--plugin-dir", dir.to_str().unwrap()]);
    }
    args.extend(["run", path.to_str().unwrap()]);
    let output = home.agentgate(&args);
    assert_nothing_left(&home);
    let said = format!("{}\n{}", stderr(&output), home.result());
    (home, said)
}

/// Containers the engine created for the home's run, from the engine's own event log:
/// one created and removed again would not show in `docker ps`.
fn containers_created(home: &Home, since: &str) -> String {
    let run_id = home.result()["runId"].as_str().unwrap().to_string();
    let until = humantime_now();
    let out = Command::new("docker")
        .args(["events", "--since", since, "--until", &until])
        .args(["--filter", "type=container", "--filter", "event=create"])
        .args(["--filter", &format!("label=io.agentgate.run-id={run_id}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Seconds since the epoch, as `docker events --since/--until` takes them.
fn humantime_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

#[test]
fn a_third_party_provider_runs_only_the_images_its_scope_lists() {
    if !docker_ready() {
        return;
    }
    // The built-in `sandbox-docker`, loaded from a plugin folder: a third-party plugin.
    let plugins = support::third_party_copy("sandbox_docker");
    let workspace = tempfile::tempdir().unwrap();
    let execution = in_docker(workspace.path(), false, "", &shell_agent("echo AGENT-RAN"));
    let granted = "plugins:\n  sandbox-docker:\n    capabilities: [events, process, docker]\n";

    // Granted `docker` without a scope: no image at all, refused before create.
    let since = humantime_now();
    let (home, said) = run_with_plugins(granted, Some(plugins.path()), &execution);
    assert_ne!(home.result()["status"], "succeeded", "{said}");
    assert!(
        said.contains("docker.run-container by plugin sandbox-docker")
            && said.contains(&format!("image {IMAGE:?} (docker.io/{IMAGE})"))
            && said.contains("docker.images: none"),
        "{said}"
    );
    let denied = support::denied_events(&home);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["source"], "sandbox-docker");
    assert_eq!(denied[0]["call"], "docker.run-container");
    assert_eq!(
        denied[0]["allow"],
        format!("plugins: {{sandbox-docker: {{docker: {{images: [{IMAGE:?}]}}}}}}")
    );
    assert!(!home.log("stdout.log").contains("AGENT-RAN"));
    assert_eq!(
        containers_created(&home, &since),
        "",
        "a container was created"
    );

    // The same plugin with the image in its scope (a glob across the tag) runs.
    let scoped = format!("{granted}    docker: {{images: [\"agentgate-test/busybox:*\"]}}\n");
    let (home, said) = run_with_plugins(&scoped, Some(plugins.path()), &execution);
    assert_eq!(home.result()["status"], "succeeded", "{said}");
    assert_eq!(home.log("stdout.log"), "AGENT-RAN\n");
    assert!(support::denied_events(&home).is_empty());
}

#[test]
fn the_operator_narrows_the_builtin_provider_before_any_pull_or_create() {
    if !docker_ready() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let narrowed =
        "plugins:\n  sandbox-docker:\n    docker: {images: [\"node:20\", \"python:3.12-*\"]}\n";
    // The test image exists locally: refused at create.
    let execution = in_docker(workspace.path(), false, "", &shell_agent("echo AGENT-RAN"));
    let since = humantime_now();
    let (home, said) = run_with_plugins(narrowed, None, &execution);
    assert_ne!(home.result()["status"], "succeeded", "{said}");
    assert!(
        said.contains("docker.run-container by plugin sandbox-docker")
            && said.contains("docker.images: node:20, python:3.12-*"),
        "{said}"
    );
    assert!(!home.log("stdout.log").contains("AGENT-RAN"));
    assert_eq!(
        containers_created(&home, &since),
        "",
        "a container was created"
    );

    // An absent image is refused before the pull (which could not reach a registry
    // here and would fail with another message).
    let absent = execution.replace(IMAGE, "agentgate-test/absent:1");
    let (home, said) = run_with_plugins(narrowed, None, &absent);
    assert!(
        said.contains("docker.pull-image by plugin sandbox-docker")
            && !said.contains("could not be pulled"),
        "{said}"
    );
    let denied = support::denied_events(&home);
    assert_eq!(denied[0]["call"], "docker.pull-image", "{denied:?}");

    // Narrowed to the test image, the built-in runs as before.
    let listed = format!("plugins:\n  sandbox-docker:\n    docker: {{images: [{IMAGE:?}]}}\n");
    let (home, said) = run_with_plugins(&listed, None, &execution);
    assert_eq!(home.result()["status"], "succeeded", "{said}");
}

#[test]
fn a_third_party_provider_binds_only_the_folders_its_scope_lists() {
    if !docker_ready() {
        return;
    }
    let plugins = support::third_party_copy("sandbox_docker");
    let workspace = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("data.txt"), "listed").unwrap();
    let mount = format!(
        "mounts:\n  - source: {}\n    target: /data\n",
        data.path().display()
    );
    let execution = in_docker(
        workspace.path(),
        false,
        &mount,
        &shell_agent("cat /data/data.txt"),
    );
    // The operator allows the folder for every provider; this plugin's scope does not.
    let granted = format!(
        "mounts: [{}]\nplugins:\n  sandbox-docker:\n    capabilities: [events, process, docker]\n    docker:\n      images: [{IMAGE:?}]\n",
        data.path().display()
    );
    let since = humantime_now();
    let (home, said) = run_with_plugins(&granted, Some(plugins.path()), &execution);
    assert_ne!(home.result()["status"], "succeeded", "{said}");
    assert!(
        said.contains("docker.run-container by plugin sandbox-docker: mount source")
            && said.contains("docker.mounts: none"),
        "{said}"
    );
    assert_eq!(
        support::denied_events(&home)[0]["call"],
        "docker.run-container"
    );
    assert_eq!(
        containers_created(&home, &since),
        "",
        "a container was created"
    );

    let listed = format!("{granted}      mounts: [{}]\n", data.path().display());
    let (home, said) = run_with_plugins(&listed, Some(plugins.path()), &execution);
    assert_eq!(home.result()["status"], "succeeded", "{said}");
    assert_eq!(home.log("stdout.log"), "listed");
}
