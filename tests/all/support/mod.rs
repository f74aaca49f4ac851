//! Shared helpers for the integration tests: temporary homes, TaskSpec text, and the
//! fixture plugins built by `host/build.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding the fixture plugins (`hostile-driver`, `sneaky-docker`).
pub fn fixture_plugins() -> PathBuf {
    PathBuf::from(env!("AGENTGATE_FIXTURE_PLUGIN_DIR"))
}

/// The component of the built-in plugin crate `crate_name` (e.g. `sandbox_docker`) as
/// `host/build.rs` built it. Copied into a plugin folder, it loads as a plugin that is
/// not built in, with only what the operator grants.
pub fn builtin_component(crate_name: &str) -> PathBuf {
    fixture_plugins()
        .parent()
        .unwrap()
        .join("wasm32-wasip2/release")
        .join(format!("{crate_name}.wasm"))
}

/// The committed driver built against the oldest line the host supports, in the
/// version `version` (`1.0.0` or `1.1.0`): see `tests/fixtures/wit-lines`.
pub fn oldest_line_driver(version: &str) -> PathBuf {
    let oldest = agentgate::wit::SUPPORTED_LINES[0].version;
    repo_root()
        .join("tests/fixtures/wit-lines")
        .join(oldest)
        .join(format!("driver-{version}.wasm"))
}

/// A plugin folder holding a copy of the built-in `crate_name`: see
/// [`builtin_component`].
pub fn third_party_copy(crate_name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        builtin_component(crate_name),
        dir.path().join(format!("{crate_name}.wasm")),
    )
    .unwrap();
    dir
}

/// The run's `denied` events (calls outside a plugin's scope).
pub fn denied_events(home: &Home) -> Vec<serde_json::Value> {
    home.log("events.ndjson")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "denied")
        .collect()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Indents `text` so it can sit under a YAML key.
pub fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A full TaskSpec with the given `execution` body (YAML, unindented).
pub fn task_spec(name: &str, prompt: &str, execution: &str) -> String {
    format!(
        "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata:\n  name: {name}\nspec:\n  goal:\n    prompt: {prompt:?}\n  execution:\n{}",
        indent(execution, 4)
    )
}

/// An `agent` section for the `command` driver running `sh -c script`.
pub fn shell_agent(script: &str) -> String {
    format!(
        "agent:\n  driver: command\n  options:\n    command:\n      - sh\n      - -c\n      - |\n{}",
        indent(script, 8)
    )
}

/// Polls `check` for up to `secs` seconds. Used for things the kernel finishes
/// asynchronously (reaping), never to time the code under test.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// An AGENTGATE_HOME of its own for one test, and the `agentgate` binary run in it.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn agentgate(&self, args: &[&str]) -> Output {
        self.agentgate_with_env(args, &[])
    }

    /// [`Home::agentgate`] with more variables for agentgate itself (not the sandbox).
    pub fn agentgate_with_env(&self, args: &[&str], env: &[(&str, String)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args(args)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .env("AGENTGATE_HOME", self.dir.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .env("HOST_ONLY_SECRET", "must-not-leak")
            // The seed examples reference these.
            .env("GIT_TOKEN", "t")
            .env("DATABASE_URL", "postgres://db")
            .env("API_KEY", "k")
            .current_dir(repo_root())
            .output()
            .expect("running agentgate")
    }

    /// Writes a TaskSpec and runs it.
    pub fn run_spec(&self, yaml: &str) -> Output {
        let path = self.dir.path().join("task.yaml");
        std::fs::write(&path, yaml).unwrap();
        self.agentgate(&["run", path.to_str().unwrap()])
    }

    /// Writes a TaskSpec and starts `agentgate run` on it without waiting, its output
    /// discarded, so a test can signal it.
    pub fn spawn_run(&self, yaml: &str) -> std::process::Child {
        let path = self.dir.path().join("task.yaml");
        std::fs::write(&path, yaml).unwrap();
        Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args(["run", path.to_str().unwrap()])
            .env("AGENTGATE_HOME", self.dir.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting agentgate")
    }

    /// The only run folder.
    pub fn run_folder(&self) -> PathBuf {
        let runs: Vec<_> = std::fs::read_dir(self.dir.path().join("runs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(runs.len(), 1, "{runs:?}");
        runs[0].clone()
    }

    pub fn result(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.run_folder().join("result.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.run_folder().join(name)).unwrap_or_default()
    }

    /// Every run the registry of this home tracks (`agentgate sandboxes --all --json`).
    pub fn tracked_runs(&self) -> Vec<serde_json::Value> {
        let output = self.agentgate(&["sandboxes", "--all", "--json"]);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// The registry's row for the run `run_id` of this home.
    pub fn tracked_run(&self, run_id: &str) -> serde_json::Value {
        let rows = self.tracked_runs();
        rows.into_iter()
            .find(|row| row["runId"] == run_id)
            .unwrap_or_else(|| panic!("the registry does not track run {run_id}"))
    }
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Kills our own child `child` and reaps it.
pub fn sigkill(child: &mut std::process::Child) {
    // SAFETY: signalling our own child, which has not been waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

/// The run folders under the agentgate home `home` (none while it has no `runs`).
pub fn run_folders(home: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(home.join("runs"))
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Every file under `dir`, as text (lossy): where a test looks for a secret that must
/// not be anywhere.
pub fn all_text(dir: &Path) -> String {
    let mut text = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                text.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
    text
}

/// A port of the same address other than `port`.
pub fn another_port(port: u16) -> u16 {
    if port == u16::MAX {
        port - 1
    } else {
        port + 1
    }
}

/// The compiled-component cache the in-process runtimes of the tests share.
pub fn shared_component_cache() -> PathBuf {
    std::env::temp_dir().join("agentgate-test-component-cache")
}

/// An in-process runtime with the fixture plugins, `grants` and `limits`, its compiled
/// components in [`shared_component_cache`].
pub async fn fixture_runtime(
    grants: agentgate::runtime::Grants,
    limits: agentgate::runtime::PluginLimits,
) -> std::sync::Arc<agentgate::runtime::Runtime> {
    agentgate::runtime::Runtime::new(agentgate::runtime::RuntimeConfig {
        cache_dir: Some(shared_component_cache()),
        plugin_dirs: vec![fixture_plugins()],
        grants,
        limits,
        ..agentgate::runtime::RuntimeConfig::default()
    })
    .await
    .expect("runtime loads")
}

/// A `local` workspace at `workspace` in a `subprocess` sandbox.
pub fn local_subprocess(workspace: &Path, readonly: bool, timeout: &str, agent: &str) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\n  readonly: {readonly}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: {timeout}\n  environment:\n    FROM_SPEC: yes-please\n{agent}",
        workspace.display()
    )
}

/// Host pids of live processes whose command line has `arg` as one argument. Processes
/// in a sandbox have other pids inside it, so tests find them by a unique argument.
pub fn processes_with_arg(arg: &str) -> Vec<i32> {
    let has_arg = |pid: i32| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes())
    };
    agentgate::procfs::pids()
        .expect("/proc is readable")
        .filter(|&pid| has_arg(pid) && !agentgate::procfs::is_dead(pid))
        .collect()
}

/// Whether the engine answers and [`DOCKER_TEST_IMAGE`] exists; builds it the first
/// time. Under `CI=true` an unusable engine fails the test; elsewhere it says loudly
/// that the test is skipped.
pub fn docker_ready() -> bool {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let ready = READY.get_or_init(|| {
        let info = Command::new("docker")
            .args(["info", "--format", "{{.ServerVersion}}"])
            .output();
        match info {
            Ok(out) if out.status.success() => {}
            Ok(out) => return Err(format!("`docker info` failed: {}", stderr(&out))),
            Err(e) => return Err(format!("cannot run `docker`: {e}")),
        }
        docker_test_image()
    });
    match ready {
        Ok(()) => true,
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and the Docker engine is not usable: {why}")
        }
        Err(why) => {
            eprintln!(
                "\n!!!!! SKIPPED: this test needs a running Docker engine ({why}); \
                 start dockerd and rerun !!!!!\n"
            );
            false
        }
    }
}

/// The busybox-only image the Docker tests run (no registry is reachable here).
pub const DOCKER_TEST_IMAGE: &str = "agentgate-test/busybox:1";

/// Builds [`DOCKER_TEST_IMAGE`] `FROM scratch` with Debian's `busybox-static` unless
/// the engine already has it.
pub fn docker_test_image() -> Result<(), String> {
    let present = Command::new("docker")
        .args(["image", "inspect", DOCKER_TEST_IMAGE])
        .output()
        .map_err(|e| e.to_string())?;
    if present.status.success() {
        return Ok(());
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or("busybox is not installed (apt-get install busybox-static)")?;
    let context = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::copy(busybox, context.path().join("busybox")).map_err(|e| e.to_string())?;
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
    )
    .map_err(|e| e.to_string())?;
    let out = Command::new("docker")
        .args(["build", "-q", "-t", DOCKER_TEST_IMAGE])
        .arg(context.path())
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "building {DOCKER_TEST_IMAGE} failed: {}",
            stderr(&out)
        ))
    }
}

/// `tests/fixtures/probes/syscall-probe.c` built static (gcc), once per test binary:
/// it tries sockets of every family, io_uring and 32-bit calls, one `NAME=RESULT` line
/// each. Static, so it runs in any sandbox, the busybox image included.
pub fn syscall_probe() -> &'static Path {
    static PROBE: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    let (_, path) = PROBE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("syscall-probe");
        let source = repo_root().join("tests/fixtures/probes/syscall-probe.c");
        let out = Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-Werror", "-o"])
            .arg(&path)
            .arg(&source)
            .output()
            .expect("gcc builds the syscall probe (apt-get install gcc libc6-dev)");
        assert!(out.status.success(), "building the probe: {}", stderr(&out));
        (dir, path)
    });
    path
}

/// Puts the probe in `workspace` as `./syscall-probe`, runnable by every user.
pub fn place_syscall_probe(workspace: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let placed = workspace.join("syscall-probe");
    std::fs::copy(syscall_probe(), &placed).unwrap();
    std::fs::set_permissions(&placed, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Checks what the probe printed in a sandbox with (`network`) or without a network:
/// it ran to the end, `AF_UNIX` and routing netlink worked, `AF_INET`/`AF_INET6` only
/// with a network, every other family and io_uring were refused, and a 32-bit call
/// killed the process that made it.
pub fn assert_probe_refused_what_it_must(stdout: &str, network: bool) {
    let result = |name: &str| -> &str {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("the probe printed no {name}: {stdout}"))
    };
    assert!(
        stdout.contains("probe-done"),
        "the probe did not finish: {stdout}"
    );
    let inet = if network { "ok" } else { "EAFNOSUPPORT" };
    let expected = [
        ("vsock-socket", "EAFNOSUPPORT"),
        ("io_uring_setup", "ENOSYS"),
        ("io_uring_enter", "ENOSYS"),
        ("io_uring_register", "ENOSYS"),
        ("packet", "EAFNOSUPPORT"),
        ("inet", inet),
        ("inet6", inet),
        ("unix", "ok"),
        ("unix-socketpair", "ok"),
        ("inet-socketpair", "EAFNOSUPPORT"),
        ("netlink-route", "ok"),
        ("netlink-uevent", "EAFNOSUPPORT"),
        ("netlink-sockdiag", "EAFNOSUPPORT"),
        ("alg", "EAFNOSUPPORT"),
        ("key", "EAFNOSUPPORT"),
        ("xdp", "EAFNOSUPPORT"),
        ("bluetooth", "EAFNOSUPPORT"),
        ("tipc", "EAFNOSUPPORT"),
    ];
    for (name, want) in expected {
        assert_eq!(result(name), want, "{name}: {stdout}");
    }
    assert!(
        !stdout.contains("vsock-connect-cid2"),
        "a vsock socket was made: {stdout}"
    );
    if cfg!(target_arch = "x86_64") {
        for name in ["compat-socketcall-vsock", "compat-socket-vsock"] {
            assert_eq!(result(name), "killed-by-signal-31", "{name}: {stdout}");
        }
    }
}

/// The mount tables a process in a sandbox can read, printed by `MOUNT_TABLES_SCRIPT`.
pub const MOUNT_TABLES_SCRIPT: &str = "for f in /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo /proc/self/mountstats; do echo \"== $f\"; cat $f; done > mount-tables.txt";

/// Reads what [`MOUNT_TABLES_SCRIPT`] wrote in `workspace`, and checks that it shows
/// every table and none of `host_paths`.
pub fn assert_mount_tables_hide(workspace: &Path, host_paths: &[&str]) {
    let tables = std::fs::read_to_string(workspace.join("mount-tables.txt"))
        .expect("the agent wrote its mount tables");
    for table in ["mountinfo", "mounts", "mountstats"] {
        assert!(
            tables.contains(&format!("/proc/self/{table}\n")),
            "{tables}"
        );
    }
    assert!(tables.contains(" / "), "a table was empty: {tables}");
    for host_path in host_paths {
        assert!(
            !tables.contains(host_path),
            "{host_path} shows in the sandbox:\n{tables}"
        );
    }
}

pub mod agent_clis;
pub mod anthropic;
pub mod dns;
pub mod egress_net;
pub mod git_server;
pub mod github_api;
pub mod http;
pub mod kubernetes;
pub mod oci_registry;
pub mod openai_responses;
pub mod package_registries;
pub mod peak_rss;
pub mod polyglot;
pub mod unprivileged;
pub mod upstream;
