//! `agentgate doctor` through the real binary, on this machine: as root with everything
//! CI installs (every check passes), then with one prerequisite taken away at a time
//! (an engine nobody serves or that never answers, a PATH without bubblewrap), and as
//! an unprivileged user with and without a delegated cgroup, and with one it cannot
//! read. The real Docker engine is never stopped: others use it at the same time.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use crate::support::unprivileged::{agentgate_for_everyone, DelegatedCgroup, NOBODY};
use crate::support::{stderr, Home};
use serde_json::Value;

/// Every check, in the order the report lists them.
const CHECKS: &[&str] = &[
    "bubblewrap",
    "user-namespaces",
    "cgroups",
    "landlock",
    "seccomp",
    "sealed-sandbox",
    "slirp4netns",
    "dev-net-tun",
    "bridge-network",
    "docker-engine",
    "docker-storage",
    "libgit2",
    "git",
    "home",
    "caches",
    "plugin-dirs",
    "plugins",
    "provider-plugin",
];

/// `agentgate doctor ARGS --json` in `home` with `env` changed.
fn doctor(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .arg("doctor")
        .args(args)
        .arg("--json")
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env_remove("DOCKER_HOST");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("running agentgate doctor");
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        )
    });
    (output, report)
}

/// The check `id` of a report.
fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#}"))
}

fn status<'a>(report: &'a Value, id: &str) -> &'a str {
    check(report, id)["status"].as_str().unwrap()
}

fn text<'a>(report: &'a Value, id: &str, field: &str) -> &'a str {
    check(report, id)[field]
        .as_str()
        .unwrap_or_else(|| panic!("check {id} has no {field}: {:#}", check(report, id)))
}

fn am_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn as_root_with_what_ci_installs_every_check_passes_and_the_exit_is_0() {
    assert!(am_root(), "these tests run as root, as CI does");
    let home = Home::new();
    let (output, report) = doctor(&home, &[], &[]);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(report["provider"], "docker");
    assert_eq!(report["ready"], true);

    // The shape is stable: every check, in order, with every key.
    let ids: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, CHECKS);
    for check in report["checks"].as_array().unwrap() {
        let mut keys: Vec<&String> = check.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["fix", "found", "group", "id", "neededBy", "reason", "status"],
            "{check:#}"
        );
        assert!(check["neededBy"].is_array(), "{check:#}");
    }

    // This machine has everything: bubblewrap 0.8, cgroups v1 for root, Landlock,
    // seccomp, slirp4netns, the engine; a new home is created by the first run.
    for id in CHECKS.iter().filter(|id| **id != "docker-storage") {
        assert_eq!(status(&report, id), "ok", "{:#}", check(&report, id));
        assert!(check(&report, id)["fix"].is_null());
    }
    assert!(text(&report, "bubblewrap", "found").starts_with("bubblewrap "));
    assert!(text(&report, "cgroups", "found").contains("pids, memory and cpu limits"));
    assert!(text(&report, "landlock", "found").starts_with("ABI "));
    assert!(text(&report, "sealed-sandbox", "found").contains("exited 0"));
    assert!(text(&report, "bridge-network", "found").contains("bridge"));
    let engine = text(&report, "docker-engine", "found");
    assert!(engine.contains("API 1."), "{engine}");
    assert!(text(&report, "libgit2", "found").contains("https and ssh"));
    assert!(
        text(&report, "provider-plugin", "found").contains("sandbox-docker"),
        "{report:#}"
    );
    // The engine here is overlay2 on ext4: disk limits cannot be enforced, a warning
    // that no run without `resources.disk` cares about.
    let storage = check(&report, "docker-storage");
    assert!(
        storage["status"] == "ok" || storage["status"] == "warn",
        "{storage:#}"
    );
    if storage["status"] == "warn" {
        assert!(
            storage["fix"].as_str().unwrap().contains("xfs"),
            "{storage:#}"
        );
    }

    // The doctor made no cgroup it left behind, and no home either.
    assert!(!home.dir.path().join("runs").exists());

    // The same for the quick start's provider, and the human checklist.
    let (output, report) = doctor(&home, &["--provider", "subprocess"], &[]);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert!(text(&report, "provider-plugin", "found").contains("sandbox-subprocess"));
    let human = home.agentgate(&["doctor"]);
    assert_eq!(human.status.code(), Some(0), "{}", stderr(&human));
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("✓ bubblewrap"), "{human}");
    assert!(human.contains("✓ docker-engine"), "{human}");
    assert!(
        human.contains("runs with `sandbox.provider: docker` can start here (exit 0)"),
        "{human}"
    );
}

#[test]
fn an_engine_nobody_serves_fails_the_docker_checks_and_only_docker_runs() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let address = format!("unix://{}", dir.path().join("nobody.sock").display());
    let (output, report) = doctor(&home, &[], &[("DOCKER_HOST", &address)]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(report["ready"], false);
    assert_eq!(status(&report, "docker-engine"), "fail");
    // The address the user set, never a fallback to the default socket.
    assert!(text(&report, "docker-engine", "found").contains(&address));
    assert!(text(&report, "docker-engine", "fix").contains("systemctl start docker"));
    assert_eq!(status(&report, "docker-storage"), "skip");
    assert!(text(&report, "docker-storage", "reason").contains("unreachable"));
    assert!(check(&report, "docker-storage")["found"].is_null());
    assert_eq!(status(&report, "sealed-sandbox"), "ok", "{report:#}");

    // Runs that do not use docker are not held up by it.
    let (output, report) = doctor(
        &home,
        &["--provider", "subprocess"],
        &[("DOCKER_HOST", &address)],
    );
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(status(&report, "docker-engine"), "fail");

    let human = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .arg("doctor")
        .env("AGENTGATE_HOME", home.dir.path())
        .env("DOCKER_HOST", &address)
        .output()
        .unwrap();
    assert_eq!(human.status.code(), Some(1));
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("✗ docker-engine"), "{human}");
    assert!(human.contains("fix: start it"), "{human}");
    assert!(
        human.contains("cannot start here: fix docker-engine"),
        "{human}"
    );
}

#[test]
fn an_engine_that_never_answers_is_reported_not_waited_for() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("silent.sock");
    // Connections are accepted by the kernel and never answered.
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let address = format!("unix://{}", socket.display());
    let (output, report) = doctor(&home, &[], &[("DOCKER_HOST", &address)]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    let found = text(&report, "docker-engine", "found");
    assert!(found.contains("did not answer within 5s"), "{found}");
    assert!(found.contains(&address), "{found}");
}

#[test]
fn refused_plugins_are_named_and_a_plugin_dir_that_is_not_there_fails() {
    let home = Home::new();
    let fixtures = support::fixture_plugins();
    let fixtures = fixtures.to_str().unwrap();
    let (output, report) = doctor(&home, &["--plugin-dir", fixtures], &[]);
    // The built-in docker provider still serves runs: a refusal is a warning.
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(status(&report, "plugin-dirs"), "ok", "{report:#}");
    assert!(text(&report, "plugin-dirs", "found").contains(fixtures));
    assert_eq!(status(&report, "plugins"), "warn", "{report:#}");
    let plugins = text(&report, "plugins", "found");
    assert!(
        plugins.contains("sneaky-docker") && plugins.contains("is refused"),
        "{plugins}"
    );
    assert!(plugins.contains("agentgate:plugin/docker"), "{plugins}");
    assert!(text(&report, "plugins", "fix").contains("--grant"));

    // A directory that is not there stops every run from loading its plugins.
    let missing = home.dir.path().join("no-such-plugins");
    let missing = missing.to_str().unwrap();
    let (output, report) = doctor(&home, &["--plugin-dir", missing], &[]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    for id in ["plugin-dirs", "plugins"] {
        assert_eq!(status(&report, id), "fail", "{report:#}");
        assert!(text(&report, id, "found").contains(missing), "{report:#}");
    }

    // A provider no plugin serves cannot run.
    let (output, report) = doctor(&home, &["--provider", "firecracker"], &[]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(status(&report, "provider-plugin"), "fail");
    assert!(text(&report, "provider-plugin", "found").contains("no plugin serves"));
}

/// A PATH that has the programs agentgate may look for, except `bwrap`.
fn path_without_bwrap() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for program in ["slirp4netns", "git"] {
        let real = ["/usr/bin", "/bin", "/usr/local/bin"]
            .iter()
            .map(|d| Path::new(d).join(program))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{program} is not installed; CI installs it"));
        std::os::unix::fs::symlink(real, dir.path().join(program)).unwrap();
    }
    dir
}

#[test]
fn a_path_without_bubblewrap_fails_it_with_the_install_command() {
    let home = Home::new();
    let bin = path_without_bwrap();
    let path = bin.path().to_str().unwrap();
    let (output, report) = doctor(&home, &["--provider", "subprocess"], &[("PATH", path)]);
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(status(&report, "bubblewrap"), "fail");
    assert!(text(&report, "bubblewrap", "found").contains("not on PATH"));
    assert!(text(&report, "bubblewrap", "fix").contains("apt-get install bubblewrap"));
    for id in ["sealed-sandbox", "bridge-network"] {
        assert_eq!(status(&report, id), "skip", "{:#}", check(&report, id));
    }
    assert_eq!(status(&report, "slirp4netns"), "ok", "{report:#}");
    assert_eq!(
        check(&report, "bubblewrap")["neededBy"],
        serde_json::json!(["subprocess"])
    );

    // Docker runs do not need bubblewrap.
    let (output, report) = doctor(&home, &[], &[("PATH", path)]);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
}

#[test]
fn a_run_that_lacks_bubblewrap_fails_unavailable_and_points_to_doctor() {
    let home = Home::new();
    let bin = path_without_bwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", "examples/quickstart.yaml"])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("PATH", bin.path())
        .current_dir(support::repo_root())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let error = home.result()["error"].as_str().unwrap().to_string();
    assert!(error.contains("bubblewrap"), "{error}");
    assert!(error.contains("apt-get install bubblewrap"), "{error}");
    assert!(
        error.ends_with("run `agentgate doctor` for every check"),
        "{error}"
    );
}

#[test]
fn a_docker_run_without_an_engine_fails_unavailable_and_points_to_doctor() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let address = format!("unix://{}", dir.path().join("nobody.sock").display());
    let spec = support::task_spec(
        "no-engine",
        "x",
        &format!(
            "workspace:\n  source: fresh\n  template: empty\nsandbox:\n  provider: docker\n  \
             image: busybox\n{}",
            support::shell_agent("true")
        ),
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, spec).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .arg("run")
        .arg(&path)
        .env("AGENTGATE_HOME", home.dir.path())
        .env("DOCKER_HOST", &address)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let error = home.result()["error"].as_str().unwrap().to_string();
    assert!(error.contains(&address), "{error}");
    assert!(
        error.ends_with("run `agentgate doctor` for every check"),
        "{error}"
    );
}

/// `agentgate doctor --provider subprocess --json` as [`NOBODY`] with its own home,
/// after `enter` (shell run as root first, to move into a cgroup).
fn doctor_as_nobody(enter: &str) -> (Output, Value) {
    let home = Home::new();
    std::os::unix::fs::chown(home.dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let (_bin_dir, bin) = agentgate_for_everyone();
    let script = format!(
        "{enter}\nexec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- \"$0\" doctor --provider subprocess --json"
    );
    let output = Command::new("sh")
        .args(["-c", &script])
        .arg(&bin)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("AGENTGATE_HOME", home.dir.path())
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        )
    });
    (output, report)
}

#[test]
fn an_unprivileged_user_without_a_delegated_cgroup_fails_the_cgroup_check_with_the_fix() {
    let (output, report) = doctor_as_nobody("");
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(status(&report, "cgroups"), "fail", "{report:#}");
    let fix = text(&report, "cgroups", "fix");
    assert!(fix.contains("systemd-run --user -p Delegate=yes"), "{fix}");
    assert!(fix.contains("cgroup v1"), "{fix}");
    assert!(
        text(&report, "cgroups", "found").contains("cgroup v"),
        "{report:#}"
    );
    // Its home is its own; the engine's socket is not open to it.
    assert_eq!(status(&report, "home"), "ok", "{report:#}");
    assert_eq!(status(&report, "docker-engine"), "fail", "{report:#}");
    assert!(
        text(&report, "docker-engine", "found").contains("is not open to this user"),
        "{report:#}"
    );
    assert!(text(&report, "docker-engine", "fix").contains("docker` group"));
}

#[test]
fn an_unprivileged_user_in_a_delegated_cgroup_passes_the_cgroup_check_and_seals() {
    let cgroup = DelegatedCgroup::new();
    let (_, report) = doctor_as_nobody(&cgroup.enter());
    assert_eq!(status(&report, "cgroups"), "ok", "{report:#}");
    assert_eq!(status(&report, "user-namespaces"), "ok", "{report:#}");
    assert_eq!(status(&report, "sealed-sandbox"), "ok", "{report:#}");
    // The probe's cgroup is gone again.
    let left: Vec<_> = cgroup
        .descendants()
        .into_iter()
        .filter(|d| {
            d.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("doctor-"))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // /dev/net/tun: whatever this machine allows, the check says what slirp4netns gets.
    let tun_opens = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "sh",
            "-c",
            ": <> /dev/net/tun",
        ])
        .status()
        .unwrap()
        .success();
    let tun = check(&report, "dev-net-tun");
    assert_eq!(tun["status"] == "ok", tun_opens, "{tun:#}");
    if !tun_opens {
        assert!(tun["fix"]
            .as_str()
            .unwrap()
            .contains("chmod 0666 /dev/net/tun"));
        assert_eq!(status(&report, "bridge-network"), "skip");
    }
}

#[test]
fn a_cgroup_the_user_cannot_read_fails_the_cgroup_check() {
    let cgroup = DelegatedCgroup::new();
    // One hierarchy of the delegated cgroup taken back: root's, and closed to others.
    let taken = &cgroup.dirs[0];
    std::os::unix::fs::chown(taken, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(taken, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (output, report) = doctor_as_nobody(&cgroup.enter());
    assert_eq!(output.status.code(), Some(1), "{report:#}");
    assert_eq!(status(&report, "cgroups"), "fail", "{report:#}");
    let found = text(&report, "cgroups", "found");
    assert!(found.contains("Permission denied"), "{found}");
    assert!(text(&report, "cgroups", "fix").contains("Delegate=yes"));
    assert_eq!(status(&report, "sealed-sandbox"), "fail", "{report:#}");
}
