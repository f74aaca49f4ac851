//! End to end through the `agentgate` binary: real processes, real files, real
//! namespaces. Each test gets its own AGENTGATE_HOME.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{
    eventually, fixture_plugins, local_subprocess, processes_with_arg, repo_root, shell_agent,
    stderr, task_spec, Home,
};

#[test]
fn quickstart_runs_end_to_end() {
    let home = Home::new();
    let output = home.agentgate(&["run", "examples/quickstart.yaml"]);
    assert!(output.status.success(), "{}", stderr(&output));

    let result = home.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["exitCode"], 0);
    assert!(result["durationMs"].as_u64().is_some());
    assert_eq!(result["sandbox"]["provider"], "subprocess");
    let changed: Vec<_> = result["modifiedFiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(changed, ["src/hello_agentgate/greeting.py"]);
    assert_eq!(result["modifiedFiles"][0]["change"], "added");

    // The scaffold is real and the agent's file landed in it.
    let root = PathBuf::from(result["workspace"]["root"].as_str().unwrap());
    assert!(root.join("pyproject.toml").is_file());
    assert!(
        std::fs::read_to_string(root.join("src/hello_agentgate/greeting.py"))
            .unwrap()
            .contains("def greet")
    );

    assert!(
        home.log("stdout.log")
            .contains("task: Add a greeting module"),
        "{}",
        home.log("stdout.log")
    );
    let events = home.log("events.ndjson");
    for phase in ["workspace", "sandbox", "agent", "cleanup"] {
        assert!(
            events.contains(&format!("\"phase\":\"{phase}\",\"status\":\"finished\"")),
            "{phase} missing in {events}"
        );
    }
    assert!(events.contains("\"type\":\"output\""));
    // The sandbox's private state is gone; the fresh workspace is kept.
    assert!(!home.run_folder().join("sandbox").exists());
    assert!(home.run_folder().join("workspace").is_dir());
}

#[test]
fn a_readonly_local_workspace_cannot_be_changed_by_the_agent() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("file.txt"), "original\n").unwrap();
    let agent = shell_agent("echo changed > file.txt\necho new > new.txt\nrm -f file.txt");
    let output = home.run_spec(&task_spec(
        "ro",
        "try to write",
        &local_subprocess(workspace.path(), true, "1m", &agent),
    ));

    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("file.txt")).unwrap(),
        "original\n"
    );
    assert!(!workspace.path().join("new.txt").exists());
    let result = home.result();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["modifiedFiles"].as_array().unwrap().len(), 0);
    assert!(
        home.log("stderr.log").contains("Read-only file system"),
        "{}",
        home.log("stderr.log")
    );
}

#[test]
fn a_readonly_workspace_without_an_enforcing_sandbox_is_refused() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\n  readonly: true\n{}",
        workspace.path().display(),
        shell_agent("echo changed > file.txt")
    );
    let output = home.run_spec(&task_spec("ro-none", "x", &execution));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let result = home.result();
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("sandbox-none") && error.contains("read-only"),
        "{error}"
    );
    assert!(!workspace.path().join("file.txt").exists());
}

#[test]
fn a_timeout_kills_a_background_grandchild() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    // A unique argument finds the grandchild on the host: inside the sandbox it has a
    // pid of its own namespace.
    let agent = shell_agent("sleep 300.101 &\ntouch started\nwait");
    let output = home.run_spec(&task_spec(
        "timeout",
        "wait forever",
        &local_subprocess(workspace.path(), false, "2s", &agent),
    ));

    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert_eq!(home.result()["status"], "timedOut");
    assert!(workspace.path().join("started").exists());
    assert!(
        eventually(5, || processes_with_arg("300.101").is_empty()),
        "the grandchild survived the timeout: {:?}",
        processes_with_arg("300.101")
    );
}

#[test]
fn a_subprocess_sees_exactly_the_environment_the_spec_gives() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent("env | sort");
    let output = home.run_spec(&task_spec(
        "env",
        "show env",
        &local_subprocess(workspace.path(), false, "1m", &agent),
    ));
    assert!(output.status.success(), "{}", stderr(&output));

    let stdout = home.log("stdout.log");
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(
        names.contains(&"FROM_SPEC") && names.contains(&"AGENTGATE_PROMPT"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("must-not-leak"),
        "host environment leaked: {stdout}"
    );
    let allowed = [
        "PATH",
        "HOME",
        "TMPDIR",
        "PWD",
        "SHLVL",
        "_",
        "FROM_SPEC",
        "AGENTGATE_PROMPT",
        "AGENTGATE_RUN_ID",
    ];
    for name in names {
        assert!(
            allowed.contains(&name),
            "unexpected variable {name} in {stdout}"
        );
    }
}

#[test]
fn a_plugin_importing_an_ungranted_interface_is_refused_at_load() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nagent:\n  driver: sneaky\n",
        workspace.path().display()
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("sneaky", "x", &execution)).unwrap();
    let plugin_dir = fixture_plugins();
    let args = [
        "--plugin-dir",
        plugin_dir.to_str().unwrap(),
        "run",
        path.to_str().unwrap(),
    ];

    let output = home.agentgate(&args);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("sneaky-docker") && message.contains("agentgate:plugin/docker"),
        "{message}"
    );

    let listing = home.agentgate(&[
        "--plugin-dir",
        plugin_dir.to_str().unwrap(),
        "plugins",
        "list",
    ]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("sneaky-docker") && l.contains("REFUSED")),
        "{listing}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let unknown_driver = format!(
        "workspace:\n  source: local\n  path: {}\nagent:\n  driver: cluade\n",
        workspace.path().display()
    );
    let output = home.run_spec(&task_spec("bad", "x", &unknown_driver));
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("agent.driver") && message.contains("command"),
        "{message}"
    );

    let bad_options = format!(
        "workspace:\n  source: local\n  path: {}\nagent:\n  driver: command\n  options:\n    command: echo\n",
        workspace.path().display()
    );
    let output = home.run_spec(&task_spec("bad", "x", &bad_options));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("spec.execution.agent.options.command"),
        "{}",
        stderr(&output)
    );

    let path = home.dir.path().join("typo.yaml");
    std::fs::write(
        &path,
        task_spec("typo", "x", "workspace:\n  source: local\n  pth: /tmp\n"),
    )
    .unwrap();
    let output = home.agentgate(&["validate", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("did you mean") && message.contains("line"),
        "{message}"
    );
    assert!(
        !home.dir.path().join("runs").exists(),
        "nothing runs for invalid input"
    );

    // validate checks options against the installed plugin's schema, too.
    std::fs::write(&path, task_spec("opts", "x", &bad_options)).unwrap();
    let output = home.agentgate(&["validate", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("spec.execution.agent.options.command"),
        "{message}"
    );
}

#[test]
fn every_seed_example_validates_and_the_schema_is_json() {
    let home = Home::new();
    let dir = repo_root().join("tests/fixtures/taskspecs");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let output = home.agentgate(&args);
    assert!(output.status.success(), "{}", stderr(&output));

    let schema = home.agentgate(&["schema"]);
    let schema: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    assert!(schema["properties"]["spec"].is_object() || schema["$defs"].is_object());
}

#[test]
fn a_fresh_workspace_lands_at_dest_path_and_a_used_dest_path_is_refused() {
    let home = Home::new();
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("my-service");
    let execution = format!(
        "workspace:\n  source: fresh\n  destPath: {}\n  template: node-typescript\n  projectName: My Service\nsandbox:\n  provider: none\n{}",
        dest.display(),
        shell_agent("read line\necho \"stdin: $line\"\ntest -f package.json")
    );
    let output = home.run_spec(&task_spec("fresh", "build it", &execution));
    assert!(output.status.success(), "{}", stderr(&output));
    let package = std::fs::read_to_string(dest.join("package.json")).unwrap();
    assert!(package.contains("\"name\": \"my-service\""), "{package}");
    assert!(dest.join("tsconfig.json").is_file() && dest.join("src/index.ts").is_file());
    // The prompt arrived on stdin; the workspace is kept after the run.
    assert!(
        home.log("stdout.log").contains("stdin: build it"),
        "{}",
        home.log("stdout.log")
    );

    let again = Home::new();
    let output = again.run_spec(&task_spec("fresh", "build it", &execution));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let error = again.result()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("not empty") && error.contains("destPath"),
        "{error}"
    );
}

#[test]
fn secrets_are_masked_in_events_logs_and_results() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = "agent:\n  driver: command\n  options:\n    command: [sh, -c, 'echo \"key=$MODEL_API_KEY\"; echo \"token=${GIT_TOKEN}\"; exit 3']\n";
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\n{agent}",
        workspace.path().display()
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("secrets", "x", &execution)).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args([
            "run",
            path.to_str().unwrap(),
            "--secret-env",
            "MODEL_API_KEY",
        ])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("MODEL_API_KEY", "sk-live-0123456789")
        .env("GIT_TOKEN", "ghp_abcdefghijkl")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let everything = format!(
        "{}{}{}{}",
        home.log("events.ndjson"),
        home.log("stdout.log"),
        home.log("result.json"),
        stderr(&output)
    );
    assert!(everything.contains("key=***"), "{everything}");
    assert!(!everything.contains("sk-live-0123456789"), "{everything}");
    assert!(!everything.contains("ghp_abcdefghijkl"), "{everything}");
}

#[test]
fn an_interrupted_run_cleans_up_and_exits_130() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent("touch started\nsleep 300.102");
    let mut child = home.spawn_run(&task_spec(
        "cancel",
        "x",
        &local_subprocess(workspace.path(), false, "10m", &agent),
    ));
    // A fresh home describes every built-in plugin first: slow on a loaded machine.
    assert!(eventually(180, || !processes_with_arg("300.102").is_empty()));

    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(home.result()["status"], "cancelled");
    assert!(
        eventually(5, || processes_with_arg("300.102").is_empty()),
        "the agent survived the cancel"
    );
}

#[test]
fn plugins_are_found_on_the_plugin_path_and_can_be_inspected() {
    let home = Home::new();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["plugins", "inspect", "hostile-driver"])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("AGENTGATE_PLUGIN_PATH", fixture_plugins())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(info["serves"][0], "hostile");
    assert!(info["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(info["imports"].as_array().unwrap().len(), 0);

    let builtin = home.agentgate(&["plugins", "inspect", "sandbox-subprocess"]);
    let info: serde_json::Value = serde_json::from_slice(&builtin.stdout).unwrap();
    assert_eq!(info["origin"], "built-in");
    assert!(info["imports"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("process")));
    assert!(!info["imports"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("docker")));
}

/// An `agentgate` child that is killed if the test ends before it exits.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Lines the flooding agent prints before it sleeps.
const FLOOD_LINES: usize = 20_000;

/// Runs an agent that floods its output and then sleeps past a 10 s timeout, with
/// agentgate's stderr (or, with `--json`, its stdout) on a pipe the test does not read
/// until the run is over. The deadline must still kill the agent and the result must
/// be written; then, once the pipe is drained, agentgate exits. Returns what it printed
/// on that pipe.
fn flood_with_an_unread_pipe(json: bool, marker: &str) -> String {
    use std::io::Read;
    use std::process::Stdio;

    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent(&format!(
        "sleep {marker} &\ntouch started\n\
         seq -f 'flood line %g' 1 {FLOOD_LINES}\ntouch flooded\nwait"
    ));
    let path = home.dir.path().join("task.yaml");
    std::fs::write(
        &path,
        task_spec(
            "flood",
            "x",
            &local_subprocess(workspace.path(), false, "10s", &agent),
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .args(["run", path.to_str().unwrap()])
        .args(json.then_some("--json"))
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .stdin(Stdio::null());
    if json {
        command.stdout(Stdio::piped()).stderr(Stdio::null());
    } else {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
    }
    let mut child = Reaped(command.spawn().unwrap());
    // Held open and unread: once its buffer is full, every write to it blocks.
    let mut pipe: Box<dyn Read + Send> = match json {
        true => Box::new(child.0.stdout.take().unwrap()),
        false => Box::new(child.0.stderr.take().unwrap()),
    };

    let started = workspace.path().join("started");
    assert!(
        eventually(180, || started.exists()),
        "the agent never started"
    );
    // The deadline is 10 s after the run began; 40 s more is generous on a loaded
    // machine, and far short of the 5-minute sleep.
    let result_file = || home.run_folder().join("result.json");
    let ended = eventually(50, || {
        processes_with_arg(marker).is_empty()
            && std::fs::read_to_string(result_file())
                .is_ok_and(|text| text.contains("\"status\": \"timedOut\""))
    });
    assert!(
        ended,
        "the run outlived its deadline while its output was not read: agent {:?}, \
         result.json present: {}",
        processes_with_arg(marker),
        result_file().exists()
    );

    // Now the reader reads: agentgate writes what it held and exits.
    let drained = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = pipe.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    assert!(
        eventually(60, || matches!(child.0.try_wait(), Ok(Some(_)))),
        "agentgate did not exit once its output was read"
    );
    assert_eq!(child.0.wait().unwrap().code(), Some(4));
    let printed = drained.join().unwrap();

    // The run folder lost nothing: every line the agent printed is in stdout.log.
    assert!(
        workspace.path().join("flooded").exists(),
        "the agent did not finish printing before its deadline"
    );
    let log = home.log("stdout.log");
    let expected: String = (1..=FLOOD_LINES)
        .map(|i| format!("flood line {i}\n"))
        .collect();
    assert!(
        log == expected,
        "stdout.log has {} of {FLOOD_LINES} lines",
        log.lines().count()
    );
    printed
}

#[test]
fn the_deadline_holds_while_stderr_is_not_read() {
    let printed = flood_with_an_unread_pipe(false, "303.401");
    // What found the display's queue full was counted and said so, not waited for.
    assert!(
        printed.contains("were not shown: agentgate's stderr was not being read"),
        "{}",
        &printed[printed.len().saturating_sub(2000)..]
    );
    assert!(printed.contains("timed out"), "{printed}");
}

#[test]
fn the_deadline_holds_while_json_on_stdout_is_not_read() {
    let printed = flood_with_an_unread_pipe(true, "303.402");
    let lines: Vec<serde_json::Value> = printed
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines.iter().any(|event| event["type"] == "log"
            && event["level"] == "warn"
            && event["message"]
                .as_str()
                .unwrap()
                .contains("were not printed: agentgate's stdout was not being read")),
        "no notice of the events left out"
    );
    // The last line is still the result.
    assert_eq!(lines.last().unwrap()["status"], "timedOut");
}

#[test]
fn a_taskspec_path_that_is_not_a_regular_file_is_refused_at_once() {
    let home = Home::new();
    // A FIFO nobody writes to: opening it for reading the usual way waits forever.
    let fifo = home.dir.path().join("task.yaml");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    for command in ["validate", "run"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args([command, fifo.to_str().unwrap()])
            .env("AGENTGATE_HOME", home.dir.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let exited = eventually(120, || matches!(child.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = child.kill();
        }
        let output = child.wait_with_output().unwrap();
        assert!(exited, "agentgate {command} hangs on a FIFO");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("is a FIFO (named pipe), not a TaskSpec file"),
            "{command}: {}",
            stderr(&output)
        );
    }
    assert!(!home.dir.path().join("runs").exists());
}
