//! The `subprocess` sandbox against an agent that tries to get out.
//!
//! Each test plays one attack from the containment issue through the real `agentgate`
//! binary, with bubblewrap, seccomp and cgroups for real, and checks from the host
//! that it failed. CI runs as root, which is the harder case: root outside is exactly
//! what the sandbox must not hand over. The last test runs agentgate itself as an
//! unprivileged user.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::support;
use crate::support::unprivileged::{agentgate_for_everyone, DelegatedCgroup, NOBODY};
use crate::support::{
    assert_mount_tables_hide, assert_probe_refused_what_it_must, eventually, local_subprocess,
    place_syscall_probe, processes_with_arg, shell_agent, stderr, task_spec, Home,
};

/// A `local` workspace in a `subprocess` sandbox with extra `sandbox` lines.
fn sandboxed(workspace: &Path, sandbox_extra: &str, agent: &str) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n{}{agent}",
        workspace.display(),
        support::indent(sandbox_extra, 2)
    )
}

/// Every file under `root` with its contents, sorted by path.
fn files_of_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.display().to_string(),
                    std::fs::read(&path).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// The agent saved bubblewrap's command line (`tr '\0' ' ' < /proc/1/cmdline >
/// bwrap-cmdline.txt`): bubblewrap, pid 1 of the sandbox, shows its command but neither
/// the workspace nor agentgate's home. The agent's own script, which names the home it
/// attacks, follows `-- sh -c`.
fn assert_no_host_path_on_bwraps_command_line(workspace: &Path, home: &str) {
    let cmdline = std::fs::read_to_string(workspace.join("bwrap-cmdline.txt")).unwrap();
    let (bwrap, _agent) = cmdline
        .split_once(" -- sh -c ")
        .expect("the agent's command");
    assert!(bwrap.contains("bwrap --args "), "{bwrap}");
    for host_path in [home, &workspace.display().to_string()] {
        assert!(!bwrap.contains(host_path), "{host_path} in {bwrap}");
    }
}

/// The agent saved its mount tables ([`support::MOUNT_TABLES_SCRIPT`]) in `workspace`
/// (outside `home`): no line names `home`, not even by its folder's name (a home on a
/// file system of its own shows relative to that file system's root). The kernel shows
/// a bind mount's root as its path on the host, so the private HOME shows as a folder
/// of the temporary folder with a random name (removed once the run is over), and the
/// workspace as its own host path.
fn assert_mount_tables_show_no_home(workspace: &Path, home: &Path) {
    let home_name = home.file_name().unwrap().to_str().unwrap();
    assert_mount_tables_hide(workspace, &[&home.display().to_string(), home_name]);
    let tables = std::fs::read_to_string(workspace.join("mount-tables.txt")).unwrap();
    // mountinfo: id, parent, device, root, mount point, ...
    let root_of = |mount_point: &str| {
        let line = tables
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(mount_point))
            .unwrap_or_else(|| panic!("no {mount_point} in:\n{tables}"));
        line.split(' ').nth(3).unwrap().to_string()
    };
    let state = root_of("/home/agent");
    let state_name = Path::new(&state).file_name().unwrap().to_str().unwrap();
    assert!(state_name.starts_with("agentgate-state-"), "{state}");
    assert!(
        !std::env::temp_dir().join(state_name).exists(),
        "the sandbox's HOME {state_name} outlived the run"
    );
    let workspace_name = workspace.file_name().unwrap().to_str().unwrap();
    assert!(
        root_of("/workspace").ends_with(&format!("/{workspace_name}")),
        "{tables}"
    );
}

#[test]
fn the_agent_cannot_see_or_touch_agentgates_home_or_other_homes() {
    let home = Home::new();
    // Give the home a compile cache (of plugin files: the built-ins' code is in the
    // binary), grants and an earlier run to attack.
    let fixtures = support::fixture_plugins();
    let listed = home.agentgate(&[
        "plugins",
        "list",
        "--plugin-dir",
        fixtures.to_str().unwrap(),
    ]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    std::fs::write(home.dir.path().join("grants.yaml"), "plugins: {}\n").unwrap();
    let before = files_of_tree(home.dir.path());
    assert!(
        before.iter().any(|(p, _)| p.ends_with(".cwasm")),
        "no cache to attack: {before:?}"
    );

    let workspace = tempfile::tempdir().unwrap();
    let target = home.dir.path().display().to_string();
    let agent = shell_agent(&format!(
        "ls -la {target} || true\n\
         echo pwned >> {target}/grants.yaml || true\n\
         for f in $(find / -name '*.cwasm' 2>/dev/null); do echo \"found $f\"; echo x > \"$f\"; done\n\
         ls /root /home /run 2>&1 || true\n\
         tr '\\0' ' ' < /proc/1/cmdline > bwrap-cmdline.txt\n\
         {}\n\
         echo done",
        support::MOUNT_TABLES_SCRIPT
    ));
    let output = home.run_spec(&task_spec(
        "home",
        "attack the host",
        &sandboxed(workspace.path(), "", &agent),
    ));
    assert!(output.status.success(), "{}", stderr(&output));

    let stdout = home.log("stdout.log");
    assert!(stdout.contains("done"), "{stdout}");
    assert!(
        !stdout.contains("found "),
        "the cache was visible: {stdout}"
    );
    // Every file the home had is as it was (the run itself adds its folder and task).
    let after = files_of_tree(home.dir.path());
    for (path, contents) in &before {
        let now = after.iter().find(|(p, _)| p == path).map(|(_, c)| c);
        assert_eq!(now, Some(contents), "{path} changed");
    }
    let stderr_log = home.log("stderr.log");
    assert!(
        stderr_log.contains(&target),
        "the attack did not run: {stderr_log}"
    );
    assert_no_host_path_on_bwraps_command_line(workspace.path(), &target);
    assert_mount_tables_show_no_home(workspace.path(), home.dir.path());
    // /root and /run are absent; /home holds only the sandbox's own HOME, and the
    // Landlock fence refuses even to list it.
    assert!(stdout.contains("cannot access '/root'"), "{stdout}");
    assert!(stdout.contains("cannot access '/run'"), "{stdout}");
    assert!(
        stdout.contains("cannot open directory '/home': Permission denied"),
        "{stdout}"
    );
}

#[test]
fn setsid_and_job_control_descendants_die_at_timeout_and_at_sigterm() {
    // At the timeout.
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent(
        "setsid sleep 301.201 &\n\
         (setsid sh -c 'sleep 301.202 & exit' &)\n\
         set -m\n\
         sleep 301.203 &\n\
         touch started\n\
         sleep 301.204",
    );
    let output = home.run_spec(&task_spec(
        "escape-timeout",
        "outlive the run",
        &sandboxed(workspace.path(), "resources:\n  timeout: 3s\n", &agent),
    ));
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(workspace.path().join("started").exists());
    for marker in ["301.201", "301.202", "301.203", "301.204"] {
        assert!(
            eventually(5, || processes_with_arg(marker).is_empty()),
            "sleep {marker} survived the timeout"
        );
    }

    // At SIGTERM.
    let home = Home::new();
    let agent = shell_agent(
        "setsid sleep 301.211 &\n\
         (setsid sh -c 'sleep 301.212 & exit' &)\n\
         set -m\n\
         sleep 301.213 &\n\
         sleep 301.214",
    );
    let mut child = home.spawn_run(&task_spec(
        "escape-term",
        "x",
        &local_subprocess(workspace.path(), false, "10m", &agent),
    ));
    assert!(eventually(180, || !processes_with_arg("301.214").is_empty()));
    assert!(eventually(10, || processes_with_arg("301.212").len() == 1));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    for marker in ["301.211", "301.212", "301.213", "301.214"] {
        assert!(
            eventually(5, || processes_with_arg(marker).is_empty()),
            "sleep {marker} survived SIGTERM"
        );
    }
}

#[test]
fn a_descendant_holding_stdout_does_not_hold_the_run() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent("sleep 301.301 &\necho finished");
    let output = home.run_spec(&task_spec(
        "stdout-holder",
        "finish while a child holds stdout",
        &sandboxed(workspace.path(), "resources:\n  timeout: 2m\n", &agent),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let result = home.result();
    assert_eq!(result["status"], "succeeded");
    assert!(home.log("stdout.log").contains("finished"));
    assert!(processes_with_arg("301.301").is_empty());
}

#[test]
fn a_root_agent_cannot_unmount_remount_nsenter_or_read_the_host_through_proc() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("file.txt"), "original\n").unwrap();
    let agent = shell_agent(
        "id -u\n\
         grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n\
         umount -l /workspace && echo UMOUNT-WORKED\n\
         mount -o remount,rw /workspace && echo REMOUNT-WORKED\n\
         mount -t tmpfs none /mnt && echo MOUNT-WORKED\n\
         nsenter --net=/proc/1/ns/net true && echo NSENTER-WORKED\n\
         unshare -U true && echo UNSHARE-WORKED\n\
         echo changed > /workspace/file.txt && echo WRITE-WORKED\n\
         cat /proc/$PPID/environ | tr '\\0' '\\n'\n\
         cat /proc/1/environ | tr '\\0' '\\n'\n\
         echo processes: $(ls /proc | grep -c '^[0-9]')\n\
         exit 0",
    );
    let spec = format!(
        "workspace:\n  source: local\n  path: {}\n  readonly: true\nsandbox:\n  provider: subprocess\n  network: none\n{agent}",
        workspace.path().display()
    );
    let output = home.run_spec(&task_spec("root-attacks", "escape", &spec));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");

    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("CapPrm:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    assert!(stdout.contains("Seccomp:\t2"), "{stdout}");
    for worked in [
        "UMOUNT-WORKED",
        "REMOUNT-WORKED",
        "MOUNT-WORKED",
        "NSENTER-WORKED",
        "UNSHARE-WORKED",
        "WRITE-WORKED",
    ] {
        assert!(!stdout.contains(worked), "{worked}: {stdout}");
    }
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("file.txt")).unwrap(),
        "original\n"
    );
    // The host's environment (the test sets HOST_ONLY_SECRET) is nowhere in reach.
    assert!(!stdout.contains("must-not-leak"), "{stdout}");
    let count: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("processes: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(count < 10, "the agent sees {count} processes: {stdout}");
}

#[test]
fn host_sockets_are_out_of_reach() {
    let dir = Path::new("/run/agentgate-test");
    std::fs::create_dir_all(dir).unwrap();
    let socket_path = dir.join("engine.sock");
    let _ = std::fs::remove_file(&socket_path);
    let listener = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();

    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent(&format!(
        "test -e {0} && echo SOCKET-VISIBLE\n\
         ls /run 2>&1\n\
         ls /var/run/docker.sock 2>&1\n\
         echo done",
        socket_path.display()
    ));
    let output = home.run_spec(&task_spec(
        "sockets",
        "reach the engine",
        &sandboxed(workspace.path(), "", &agent),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");
    assert!(stdout.contains("done"), "{stdout}");
    assert!(!stdout.contains("SOCKET-VISIBLE"), "{stdout}");
    // Nobody connected.
    assert!(listener.accept().is_err());
    let _ = std::fs::remove_file(&socket_path);
}

#[test]
fn a_memory_hog_is_oom_killed_and_the_run_says_so() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent("echo start\nexec tail /dev/zero");
    let output = home.run_spec(&task_spec(
        "oom",
        "eat memory",
        &sandboxed(
            workspace.path(),
            "resources:\n  memory: 64Mi\n  timeout: 2m\n",
            &agent,
        ),
    ));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let result = home.result();
    assert_eq!(result["status"], "failed");
    let error = result["error"].as_str().unwrap();
    assert!(error.contains("OOMKilled"), "{error}");
    let usage = &result["sandbox"]["resourceUsage"];
    assert_eq!(usage["oomKilled"], true, "{usage}");
    assert!(usage["peakMemoryMB"].as_f64().unwrap() > 32.0, "{usage}");
    assert!(usage["peakMemoryMB"].as_f64().unwrap() <= 64.5, "{usage}");
    assert!(home.log("events.ndjson").contains("OOMKilled"));
}

#[test]
fn a_fork_bomb_stops_at_the_pids_limit() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    // The loop's shell dies when fork fails; the survivors are counted with builtins
    // only, since nothing can fork any more.
    let agent = shell_agent(
        "(i=0; while [ $i -lt 500 ]; do sleep 301.401 & i=$((i+1)); done) 2>/dev/null\n\
         n=0; for p in /proc/[0-9]*; do n=$((n+1)); done\n\
         echo forked $n\n\
         exit 0",
    );
    let output = home.run_spec(&task_spec(
        "fork-bomb",
        "fork forever",
        &sandboxed(
            workspace.path(),
            "resources:\n  timeout: 2m\noptions:\n  pids: 40\n",
            &agent,
        ),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");
    let forked: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .unwrap_or_else(|| panic!("{stdout}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        (30..=40).contains(&forked),
        "{forked} processes with a limit of 40"
    );
    assert!(eventually(5, || processes_with_arg("301.401").is_empty()));
}

#[test]
fn a_cpu_busy_agent_reports_its_usage_and_nothing_is_left_behind() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent(
        "end=$(($(date +%s) + 2))\nwhile [ $(date +%s) -lt $end ]; do :; done\necho busy-done",
    );
    let output = home.run_spec(&task_spec(
        "cpu",
        "spin",
        &sandboxed(
            workspace.path(),
            "resources:\n  cpu: 1\n  timeout: 2m\n",
            &agent,
        ),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let result = home.result();
    let usage = &result["sandbox"]["resourceUsage"];
    assert!(usage["cpuPercent"].as_f64().unwrap() > 0.0, "{usage}");
    assert_eq!(usage["oomKilled"], false);

    // No cgroup, mount or process of the run is left.
    let run_id = result["runId"].as_str().unwrap().to_string();
    for root in [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup",
    ] {
        let mut stack = vec![std::path::PathBuf::from(root).join("agentgate")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                assert!(
                    !name.contains(&run_id),
                    "cgroup {} left behind",
                    entry.path().display()
                );
                if entry.path().is_dir() {
                    stack.push(entry.path());
                }
            }
        }
    }
    // Only mounts naming this run's paths count: the machine's mount table also changes
    // with other tests and the test Kubernetes cluster's containerd. The sandbox state
    // path also covers its `-egress` sibling.
    let run_paths = [
        home.dir.path().display().to_string(),
        workspace.path().display().to_string(),
        home.tracked_run(&run_id)["sandboxState"]
            .as_str()
            .expect("the registry recorded the sandbox state folder")
            .to_string(),
        run_id,
    ];
    let mounts_after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let left: Vec<&str> = mounts_after
        .lines()
        .filter(|line| run_paths.iter().any(|path| line.contains(path.as_str())))
        .collect();
    assert!(left.is_empty(), "mounts of the run left behind: {left:#?}");
}

#[test]
fn network_none_is_empty_and_bridge_reaches_out_but_not_the_host_loopback() {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let address = support::egress_net::host_address();
    let probe = |target: &str| {
        format!("bash -c 'echo hi > /dev/tcp/{target}/{port}' 2>/dev/null && echo REACHED-{target} || echo BLOCKED-{target}\n")
    };

    // network: none — only loopback, nothing reachable.
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let script = format!(
        "cat /proc/net/dev\n{}{}",
        probe(&address.to_string()),
        probe("10.0.2.2")
    );
    let output = home.run_spec(&task_spec(
        "net-none",
        "reach out",
        &sandboxed(workspace.path(), "network: none\n", &shell_agent(&script)),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");
    let interfaces: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(':') && !l.contains('|'))
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"], "{stdout}");
    assert!(stdout.contains(&format!("BLOCKED-{address}")), "{stdout}");

    // network: bridge — outbound to the host's address works, its loopback does not.
    let home = Home::new();
    let output = home.run_spec(&task_spec(
        "net-bridge",
        "reach out",
        &sandboxed(workspace.path(), "network: bridge\n", &shell_agent(&script)),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");
    assert!(stdout.contains("tap0"), "{stdout}");
    assert!(stdout.contains(&format!("REACHED-{address}")), "{stdout}");
    assert!(stdout.contains("BLOCKED-10.0.2.2"), "{stdout}");
    let mut connections = 0;
    while let Ok((mut stream, _)) = listener.accept() {
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        connections += 1;
    }
    assert_eq!(connections, 1, "only the bridge run reached the host");
}

#[test]
fn sockets_of_other_families_and_io_uring_are_refused_and_inet_needs_a_network() {
    // The probe tries AF_VSOCK (and a connect to the hypervisor, CID 2), io_uring,
    // AF_PACKET, AF_INET/AF_INET6, AF_UNIX, netlink protocols, AF_ALG, AF_KEY, AF_XDP,
    // and 32-bit entries into the kernel, as root.
    for (network, has_network) in [("none", false), ("bridge", true)] {
        let home = Home::new();
        let workspace = tempfile::tempdir().unwrap();
        place_syscall_probe(workspace.path());
        let output = home.run_spec(&task_spec(
            "sockets",
            "open sockets",
            &sandboxed(
                workspace.path(),
                &format!("network: {network}\n"),
                &shell_agent("./syscall-probe"),
            ),
        ));
        assert!(output.status.success(), "{}", stderr(&output));
        let stdout = home.log("stdout.log");
        assert!(stdout.contains("probe-uid=0\n"), "{network}: {stdout}");
        assert_probe_refused_what_it_must(&stdout, has_network);
    }
}

#[test]
fn extra_mounts_are_bound_read_only_when_asked_and_checked_before_the_run() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("data.txt"), "shared\n").unwrap();
    let agent = shell_agent(
        "cat /data/data.txt\necho x > /data/new.txt && echo WROTE-RO\necho y > /scratch/out.txt && echo WROTE-RW",
    );
    let extra = format!(
        "mounts:\n  - source: {0}\n    target: /data\n    readonly: true\n  - source: {1}\n    target: /scratch\n",
        shared.path().display(),
        workspace.path().display()
    );
    let output = home.run_spec(&task_spec(
        "mounts",
        "use mounts",
        &sandboxed(workspace.path(), &extra, &agent),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = home.log("stdout.log");
    assert!(stdout.contains("shared"), "{stdout}");
    assert!(!stdout.contains("WROTE-RO"), "{stdout}");
    assert!(stdout.contains("WROTE-RW"), "{stdout}");
    assert!(!shared.path().join("new.txt").exists());

    // A source that does not exist stops the run before the agent starts.
    let home = Home::new();
    let missing = "mounts:\n  - source: /no/such/agentgate/dir\n    target: /data\n";
    let output = home.run_spec(&task_spec(
        "mounts-missing",
        "x",
        &sandboxed(workspace.path(), missing, &shell_agent("touch ran")),
    ));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("sandbox.mounts[0].source") && message.contains("/no/such/agentgate/dir"),
        "{message}"
    );
    assert!(!workspace.path().join("ran").exists());
    assert!(!home.dir.path().join("runs").exists());
}

#[test]
fn a_disk_limit_is_refused_not_ignored() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let output = home.run_spec(&task_spec(
        "disk",
        "x",
        &sandboxed(
            workspace.path(),
            "resources:\n  disk: 1Gi\n",
            &shell_agent("touch ran"),
        ),
    ));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let error = home.result()["error"].as_str().unwrap().to_string();
    assert!(error.contains("resources.disk"), "{error}");
    assert!(!workspace.path().join("ran").exists());
}

/// A run of `agentgate` as [`NOBODY`], set up the way an operator gives a user agentgate:
/// a copy of the binary, a home, a workspace and a TaskSpec all that user can reach.
struct Unprivileged {
    home: Home,
    workspace: tempfile::TempDir,
    _bin_dir: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl Unprivileged {
    fn new() -> Unprivileged {
        let home = Home::new();
        let workspace = tempfile::tempdir().unwrap();
        for dir in [home.dir.path(), workspace.path()] {
            std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let (bin_dir, bin) = agentgate_for_everyone();
        Unprivileged {
            home,
            workspace,
            _bin_dir: bin_dir,
            bin,
        }
    }

    /// Runs `agent` in a subprocess sandbox as [`NOBODY`]; `enter` is shell that runs
    /// first as root (to move the process into a cgroup), then `setpriv` drops to the user.
    fn run(&self, enter: &str, agent: &str) -> std::process::Output {
        let spec_path = self.home.dir.path().join("task.yaml");
        std::fs::write(
            &spec_path,
            task_spec(
                "unprivileged",
                "x",
                // The bridge network needs /dev/net/tun, which not every machine opens
                // to users; the namespaces and the fence are what is tested here.
                &sandboxed(
                    self.workspace.path(),
                    "network: none\n",
                    &shell_agent(agent),
                ),
            ),
        )
        .unwrap();
        let script = format!(
            "{enter}\nexec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- \"$0\" run \"$1\""
        );
        Command::new("sh")
            .args(["-c", &script])
            .arg(&self.bin)
            .arg(&spec_path)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("AGENTGATE_HOME", self.home.dir.path())
            .env("HOST_ONLY_SECRET", "must-not-leak-unprivileged")
            .output()
            .unwrap()
    }
}

#[test]
fn an_unprivileged_user_without_a_delegated_cgroup_is_refused_and_told_how_to_get_one() {
    // agentgate as uid 65534 in the test's own (root-owned) cgroup: it cannot give the
    // sandbox a cgroup, so it must refuse, say why and how to fix it, and run nothing.
    let run = Unprivileged::new();
    let output = run.run("", "id -u > uid.txt");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let error = run.home.result()["error"].as_str().unwrap().to_string();
    assert!(error.contains("cgroup"), "{error}");
    assert!(error.contains("delegated cgroup"), "{error}");
    assert!(
        !run.workspace.path().join("uid.txt").exists(),
        "ran unsealed"
    );
}

#[test]
fn an_unprivileged_user_in_a_delegated_cgroup_gets_the_whole_sandbox() {
    // agentgate as uid 65534 in a cgroup delegated to it, and an agent that tries the
    // attacks of the root tests again. It must be sealed exactly as it is for root.
    let run = Unprivileged::new();
    let cgroup = DelegatedCgroup::new();
    let home = run.home.dir.path().display().to_string();
    let agent = format!(
        "id -u > uid.txt\n\
         grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status\n\
         ls {home} && echo HOME-VISIBLE\n\
         echo pwned >> {home}/grants.yaml && echo GRANTS-WRITTEN\n\
         unshare -U true && echo UNSHARE-WORKED\n\
         nsenter --net=/proc/1/ns/net true && echo NSENTER-WORKED\n\
         cat /proc/$PPID/environ /proc/1/environ | tr '\\0' '\\n'\n\
         tr '\\0' ' ' < /proc/1/cmdline > bwrap-cmdline.txt\n\
         {}\n\
         ./syscall-probe\n\
         setsid sleep 301.401 &\n\
         echo done",
        support::MOUNT_TABLES_SCRIPT
    );
    place_syscall_probe(run.workspace.path());
    let output = run.run(&cgroup.enter(), &agent);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = run.home.log("stdout.log");
    assert!(stdout.contains("done"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(run.workspace.path().join("uid.txt"))
            .unwrap()
            .trim(),
        NOBODY.to_string(),
        "the agent runs as the invoking user"
    );
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    assert!(stdout.contains("Seccomp:\t2"), "{stdout}");
    for worked in [
        "HOME-VISIBLE",
        "GRANTS-WRITTEN",
        "UNSHARE-WORKED",
        "NSENTER-WORKED",
        "must-not-leak",
    ] {
        assert!(!stdout.contains(worked), "{worked}: {stdout}");
    }
    assert!(!run.home.dir.path().join("grants.yaml").exists());
    assert_no_host_path_on_bwraps_command_line(run.workspace.path(), &home);
    assert_mount_tables_show_no_home(run.workspace.path(), run.home.dir.path());
    assert!(stdout.contains("probe-uid=65534\n"), "{stdout}");
    assert_probe_refused_what_it_must(&stdout, false);
    assert!(
        eventually(5, || processes_with_arg("301.401").is_empty()),
        "a setsid descendant outlived the run"
    );
    // The sandbox's cgroup was made in the delegated one, and removed at the end.
    let result = run.home.result();
    assert!(
        result["sandbox"]["resourceUsage"]["memoryMB"]
            .as_f64()
            .is_some(),
        "{result}"
    );
    // What may stay: the shared folder, and on cgroup v2 the leaf the host moved into.
    let left: Vec<_> = cgroup
        .descendants()
        .into_iter()
        .filter(|d| {
            d.file_name()
                .is_some_and(|n| n != "agentgate" && n != "agentgate-host")
        })
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}

/// Runs a `local` workspace with `provider` from a third-party copy of the built-in
/// `crate_name`, the operator's `grants`; returns the home and what the run said.
fn run_third_party_provider(
    crate_name: &str,
    provider: &str,
    grants: &str,
    workspace: &Path,
) -> (Home, String) {
    let plugins = support::third_party_copy(crate_name);
    let home = Home::new();
    std::fs::write(home.dir.path().join("grants.yaml"), grants).unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: {provider}\n{}",
        workspace.display(),
        shell_agent("echo AGENT-RAN; touch ran-here")
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("scoped", "x", &execution)).unwrap();
    let output = home.agentgate(&[
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
        "run",
        path.to_str().unwrap(),
    ]);
    let said = format!("{}\n{}", stderr(&output), home.result());
    (home, said)
}

/// A third-party provider granted `process` may start only sealed processes: one that
/// runs the agent unsealed on the host (a copy of `sandbox-none`) is refused before
/// anything starts, with the line that would allow it; `programs` narrows the unsealed
/// spawns to the files listed. A sealed one (a copy of `sandbox-subprocess`) runs.
#[test]
fn a_third_party_provider_starts_unsealed_processes_only_when_the_operator_says_so() {
    let workspace = tempfile::tempdir().unwrap();
    let granted = "plugins:\n  sandbox-none:\n    capabilities: [events, process]\n";
    let (home, said) = run_third_party_provider("sandbox_none", "none", granted, workspace.path());
    assert_ne!(home.result()["status"], "succeeded", "{said}");
    assert!(
        said.contains("process.spawn by plugin sandbox-none: unsealed program")
            && said.contains("plugins: {sandbox-none: {process: {unsealed: true}}}"),
        "{said}"
    );
    let denied = support::denied_events(&home);
    assert_eq!(denied[0]["source"], "sandbox-none", "{denied:?}");
    assert_eq!(denied[0]["call"], "process.spawn");
    assert!(!workspace.path().join("ran-here").exists());
    assert!(!home.log("stdout.log").contains("AGENT-RAN"));

    // Unsealed spawns allowed, but only of python3: `sh` is still refused.
    let python =
        format!("{granted}    process: {{unsealed: true, programs: [/usr/bin/python3]}}\n");
    let (home, said) = run_third_party_provider("sandbox_none", "none", &python, workspace.path());
    assert!(
        said.contains("process.programs: /usr/bin/python3")
            && said.contains("{sandbox-none: {process: {unsealed: true, programs: [")
            && said.contains("/usr/bin/sh"),
        "{said}"
    );
    assert!(!workspace.path().join("ran-here").exists());
    assert!(!home.log("stdout.log").contains("AGENT-RAN"));

    let unsealed = format!("{granted}    process: {{unsealed: true}}\n");
    let (home, said) =
        run_third_party_provider("sandbox_none", "none", &unsealed, workspace.path());
    assert_eq!(home.result()["status"], "succeeded", "{said}");
    assert!(workspace.path().join("ran-here").exists());

    // A sealed provider needs no more than `process`.
    let workspace = tempfile::tempdir().unwrap();
    let sealed = "plugins:\n  sandbox-subprocess:\n    capabilities: [events, process]\n";
    let (home, said) =
        run_third_party_provider("sandbox_subprocess", "subprocess", sealed, workspace.path());
    assert_eq!(home.result()["status"], "succeeded", "{said}");
    assert!(home.log("stdout.log").contains("AGENT-RAN"), "{said}");
    assert!(support::denied_events(&home).is_empty());
}
