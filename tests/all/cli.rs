//! End to end through the `agentgate` binary: real processes, real files, real
//! namespaces. Each test gets its own AGENTGATE_HOME.

use std::path::PathBuf;
use std::process::Command;

use crate::support;
use crate::support::{
    eventually, fixture_plugins, local_subprocess, processes_with_arg, repo_root, shell_agent,
    stderr, stdout, task_spec, Home,
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
fn an_agent_ending_on_a_line_of_megabytes_succeeds_and_its_summary_is_cut() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    // 3 MiB without a newline: more than a plugin may hold as one line and more than
    // the host keeps as a summary. The run must still succeed, with a short summary.
    let agent = shell_agent("head -c 3145728 /dev/zero | tr '\\0' x");
    let output = home.run_spec(&task_spec(
        "long-line",
        "print a long line",
        &local_subprocess(workspace.path(), false, "2m", &agent),
    ));

    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = home.result();
    assert_eq!(result["status"], "succeeded", "{result}");
    let summary = result["agent"]["summary"].as_str().unwrap();
    assert!(summary.starts_with("xxxx"), "{summary:.80}");
    assert!(summary.chars().count() <= 4097, "{} chars", summary.len());
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
fn validate_and_run_refuse_gates_and_delivery_they_do_not_do_yet() {
    let home = Home::new();
    let reference = repo_root()
        .join("tests/fixtures/taskspecs-not-yet/every-convergence-and-delivery-field.yaml");
    let reference = reference.to_str().unwrap();
    let validate = home.agentgate(&["validate", reference]);
    assert_eq!(validate.status.code(), Some(2), "{}", stderr(&validate));
    let message = stderr(&validate);
    for path in [
        "spec.convergence.strategy",
        "spec.convergence.config",
        "spec.convergence.gates",
        "spec.delivery.git",
        "spec.delivery.pr",
        "spec.delivery.notifications",
    ] {
        assert!(
            message.contains(&format!(
                "{reference}: {path}: this version of agentgate does not yet "
            )) && message.contains(&format!("; remove `{path}`")),
            "{path}: {message}"
        );
    }
    assert!(!stdout(&validate).contains("ok"), "{}", stdout(&validate));

    // A short one: gates and a pull request, as a user would write them.
    let workspace = tempfile::tempdir().unwrap();
    let spec = format!(
        "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {{name: pr}}\nspec:\n  \
         goal: {{prompt: fix it}}\n  convergence:\n    gates:\n      - name: tests\n        \
         check: {{type: custom, command: make test}}\n  execution:\n    workspace: \
         {{source: local, path: {}}}\n    agent: {{driver: command}}\n  delivery:\n    \
         git: {{mode: github-pr}}\n",
        workspace.path().display()
    );
    let path = home.dir.path().join("gated.yaml");
    std::fs::write(&path, &spec).unwrap();
    let validate = home.agentgate(&["validate", path.to_str().unwrap()]);
    assert_eq!(validate.status.code(), Some(2));
    let message = stderr(&validate);
    assert!(
        message.contains(
            "spec.convergence.gates: this version of agentgate does not yet run gates; \
             remove `spec.convergence.gates`"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "spec.delivery.git.mode: this version of agentgate does not yet open \
                          pull requests; remove `spec.delivery.git.mode`"
        ),
        "{message}"
    );

    let run = home.run_spec(&spec);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    let message = stderr(&run);
    assert!(
        message.contains("remove `spec.convergence.gates`"),
        "{message}"
    );
    assert!(message.contains("remove `spec.delivery.git`"), "{message}");
    assert!(
        !home.dir.path().join("runs").exists(),
        "nothing runs for a TaskSpec that asks for what is not built"
    );

    // A bad value in the new sections is an error at its path and line, as elsewhere.
    std::fs::write(&path, spec.replace("type: custom", "type: lint")).unwrap();
    let validate = home.agentgate(&["validate", path.to_str().unwrap()]);
    assert_eq!(validate.status.code(), Some(2));
    let message = stderr(&validate);
    assert!(
        message
            .contains("spec.convergence.gates[0].check.type (line 9): unknown check type \"lint\""),
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
    // The sections this version loads and refuses are described too.
    for section in [
        "Convergence",
        "Gate",
        "Check",
        "Delivery",
        "Notification",
        "DesiredState",
    ] {
        assert!(schema["$defs"][section].is_object(), "{section}");
    }
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

#[test]
fn plugins_inspect_shows_the_effective_scope_of_each_capability() {
    let home = Home::new();
    let inspect = |args: &[&str]| -> serde_json::Value {
        let output = home.agentgate(args);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    // A built-in keeps today's reach...
    let info = inspect(&["plugins", "inspect", "sandbox-docker"]);
    assert_eq!(info["scopes"]["docker"]["images"], "any", "{info:#}");
    assert_eq!(info["scopes"]["process"]["unsealed"], true, "{info:#}");
    // ...until the operator narrows it.
    std::fs::write(
        home.dir.path().join("grants.yaml"),
        "plugins:\n  sandbox-docker:\n    docker: {images: [\"node:20\"], hostNetwork: false}\n",
    )
    .unwrap();
    let info = inspect(&["plugins", "inspect", "sandbox-docker"]);
    assert_eq!(
        info["scopes"]["docker"],
        serde_json::json!({"images": ["node:20"], "hostNetwork": false, "mounts": "any the top-level mounts: allows"}),
        "{info:#}"
    );
    // A plugin that is not built in reaches only what its grant lists.
    let info = inspect(&[
        "--grant",
        "sneaky-docker=docker",
        "--plugin-dir",
        fixture_plugins().to_str().unwrap(),
        "plugins",
        "inspect",
        "sneaky-docker",
    ]);
    assert_eq!(
        info["scopes"]["docker"],
        serde_json::json!({"images": [], "hostNetwork": false, "mounts": []}),
        "{info:#}"
    );
    assert!(info["scopes"].get("process").is_none(), "{info:#}");
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

// ---- The run history: `runs`, `show`, `report` ----

/// The API key the Claude Code stand-ins are given; it must never show.
const HISTORY_API_KEY: &str = "sk-ant-api03-history-key-must-not-leak-42";

/// A git repository holding `fake-claude`, a stand-in for the Claude Code CLI that
/// prints `stream` (its stream-json, as the real CLI documents it) after running `work`.
fn claude_workspace(work: &str, stream: &[serde_json::Value]) -> tempfile::TempDir {
    let workspace = tempfile::tempdir().unwrap();
    let mut script = format!("#!/bin/sh\ncat >/dev/null\n{work}\n");
    for message in stream {
        let line = message.to_string().replace('\'', "'\\''");
        script.push_str(&format!("printf '%s\\n' '{line}'\n"));
    }
    let path = workspace.path().join("fake-claude");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(workspace.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@e",
        "commit",
        "-qm",
        "start",
    ]);
    workspace
}

/// The `execution` section running `fake-claude` as the `claude-code-api` driver in a
/// subprocess sandbox.
fn claude_execution(workspace: &std::path::Path) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: 1m\nagent:\n  driver: claude-code-api\n  model: claude-sonnet-4-5\n  options:\n    command: [/workspace/fake-claude]\n",
        workspace.display()
    )
}

/// Runs a TaskSpec with the API key passed as a secret.
fn run_with_api_key(home: &Home, yaml: &str) -> std::process::Output {
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, yaml).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap()])
        .args(["--secret-env", "ANTHROPIC_API_KEY"])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("ANTHROPIC_API_KEY", HISTORY_API_KEY)
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .output()
        .expect("running agentgate")
}

fn claude_init() -> serde_json::Value {
    serde_json::json!({"type": "system", "subtype": "init", "session_id": "s-history",
        "model": "claude-sonnet-4-5", "claude_code_version": "2.1.197", "permissionMode": "default"})
}

fn claude_result(summary: &str) -> serde_json::Value {
    serde_json::json!({"type": "result", "subtype": "success", "is_error": false,
        "num_turns": 2, "result": summary, "session_id": "s-history", "total_cost_usd": 0.0123,
        "usage": {"input_tokens": 12, "output_tokens": 34}})
}

/// The run ids of `home`, newest first, as `runs --json` lists them.
fn history(home: &Home, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["runs", "--json"];
    all.extend(args);
    let output = home.agentgate(&all);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_str::<serde_json::Value>(&support::stdout(&output))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn runs_lists_the_history_newest_first_and_show_prints_the_end_of_run_summary() {
    let home = Home::new();
    assert_eq!(
        support::stdout(&home.agentgate(&["runs"])).lines().count(),
        1,
        "a new home has no runs"
    );

    let workspace = claude_workspace(
        "echo hello > hello.txt",
        &[claude_init(), claude_result("Added hello.txt.")],
    );
    let succeeded = run_with_api_key(
        &home,
        &task_spec("hist-ok", "say hello", &claude_execution(workspace.path())),
    );
    assert!(succeeded.status.success(), "{}", stderr(&succeeded));
    let scratch = tempfile::tempdir().unwrap();
    let failed = home.run_spec(&task_spec(
        "hist-fail",
        "fail",
        &local_subprocess(scratch.path(), false, "1m", &shell_agent("exit 3")),
    ));
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    let timed_out = home.run_spec(&task_spec(
        "hist-timeout",
        "wait",
        &local_subprocess(scratch.path(), false, "2s", &shell_agent("sleep 30")),
    ));
    assert_eq!(timed_out.status.code(), Some(4), "{}", stderr(&timed_out));

    // --json: newest first, every field.
    let runs = history(&home, &[]);
    let names: Vec<&str> = runs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hist-timeout", "hist-fail", "hist-ok"]);
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["timedOut", "failed", "succeeded"]);
    let mut keys: Vec<&str> = runs[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "costUsd",
            "driver",
            "durationMs",
            "filesChanged",
            "folder",
            "inputTokens",
            "name",
            "outputTokens",
            "provider",
            "runId",
            "startedAt",
            "status"
        ]
    );
    let ok = &runs[2];
    assert_eq!(ok["provider"], "subprocess");
    assert_eq!(ok["driver"], "claude-code-api");
    assert_eq!(ok["filesChanged"], 1);
    assert_eq!(
        (ok["inputTokens"].as_u64(), ok["outputTokens"].as_u64()),
        (Some(12), Some(34))
    );
    assert_eq!(ok["costUsd"], 0.0123);
    // The command driver reports no usage; a run that timed out has no agent result.
    assert!(runs[1]["inputTokens"].is_null() && runs[1]["costUsd"].is_null());
    assert_eq!(runs[1]["driver"], "command");
    assert_eq!(runs[0]["driver"], "command");
    assert_eq!(runs[0]["filesChanged"], 0);
    for run in &runs {
        let folder = std::path::Path::new(run["folder"].as_str().unwrap());
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("result.json")).unwrap())
                .unwrap();
        assert_eq!(run["runId"], result["runId"]);
        assert_eq!(run["startedAt"], result["startedAt"]);
        assert_eq!(run["durationMs"], result["durationMs"]);
    }
    let ids: Vec<&str> = runs.iter().map(|r| r["runId"].as_str().unwrap()).collect();
    assert_eq!(
        history(&home, &["--limit", "2"])
            .iter()
            .map(|r| r["runId"].as_str().unwrap().to_string())
            .collect::<Vec<_>>(),
        ids[..2]
    );

    // The table: a header and one row per run, in the same order.
    let table = support::stdout(&home.agentgate(&["runs", "--limit", "2"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for column in [
        "RUN ID", "NAME", "STATUS", "STARTED", "DURATION", "PROVIDER", "DRIVER", "FILES", "TOKENS",
        "COST",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    assert!(
        lines[1].starts_with(ids[0]) && lines[1].contains("timedOut"),
        "{table}"
    );
    assert!(
        lines[2].starts_with(ids[1]) && lines[2].contains("failed"),
        "{table}"
    );
    let table = support::stdout(&home.agentgate(&["runs"]));
    let last = table.lines().nth(3).unwrap();
    for cell in [
        ids[2],
        "hist-ok",
        "succeeded",
        "subprocess",
        "claude-code-api",
        "12 in / 34 out",
        "$0.0123",
    ] {
        assert!(last.contains(cell), "{cell} missing in {last}");
    }

    // `show` (by a prefix of the id) prints what `run` printed at its end.
    let show = home.agentgate(&["show", &ids[2][..20]]);
    assert!(show.status.success(), "{}", stderr(&show));
    let summary = support::stdout(&show);
    assert!(
        summary.starts_with(&format!("run {} succeeded in ", ids[2])),
        "{summary}"
    );
    assert!(summary.contains("added      hello.txt"), "{summary}");
    assert!(
        stderr(&succeeded).ends_with(&summary),
        "{}\n---\n{summary}",
        stderr(&succeeded)
    );
    let show = home.agentgate(&["show", ids[0]]);
    assert!(
        stderr(&timed_out).ends_with(&support::stdout(&show)),
        "{}",
        support::stdout(&show)
    );
    let json = home.agentgate(&["show", "--json", ids[1]]);
    let shown: serde_json::Value = serde_json::from_str(&support::stdout(&json)).unwrap();
    assert_eq!(
        shown,
        serde_json::from_str::<serde_json::Value>(
            &std::fs::read_to_string(
                std::path::Path::new(runs[1]["folder"].as_str().unwrap()).join("result.json")
            )
            .unwrap()
        )
        .unwrap()
    );

    for (wanted, why) in [("ffffffff", "no run"), ("", "no run")] {
        let output = home.agentgate(&["show", wanted]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(why), "{}", stderr(&output));
    }
}

#[test]
fn runs_tells_a_running_run_an_orphaned_one_and_a_crashed_one() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let mut child = home.spawn_run(&task_spec(
        "hist-crash",
        "wait",
        &local_subprocess(
            workspace.path(),
            false,
            "5m",
            &shell_agent("touch started\nsleep 300.707"),
        ),
    ));
    let status = || {
        history(&home, &[])
            .first()
            .map(|r| r["status"].as_str().unwrap().to_string())
    };
    assert!(
        eventually(120, || workspace.path().join("started").exists()),
        "the agent never started"
    );
    assert_eq!(status().as_deref(), Some("running"));
    let id = history(&home, &[])[0]["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let show = support::stdout(&home.agentgate(&["show", &id]));
    assert!(show.contains("has no result yet: it is running"), "{show}");

    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status().as_deref(), Some("orphaned"));
    let gc = home.agentgate(&["gc"]);
    assert!(gc.status.success(), "{}", stderr(&gc));
    assert_eq!(status().as_deref(), Some("crashed"));
    let runs = history(&home, &[]);
    assert_eq!(runs[0]["name"], "hist-crash");
    assert_eq!(runs[0]["provider"], "subprocess");
    assert_eq!(runs[0]["driver"], "command");
    assert!(
        runs[0]["filesChanged"].is_null(),
        "a crashed run compared nothing"
    );
    assert!(
        eventually(10, || processes_with_arg("300.707").is_empty()),
        "gc left the agent running"
    );
}

/// Debian's Chromium, or `None` (after a loud message) outside CI when it is missing.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        let why = "chromium is not installed (apt-get install chromium)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and the report cannot be checked in a browser: {why}");
        }
        eprintln!("\n!!! SKIPPING the browser check of agentgate report: {why}\n");
    }
    found
}

/// The DOM of `page` after Chromium loaded it (and ran whatever script it would run).
fn dom_in_chromium(browser: &std::path::Path, page: &std::path::Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting chromium");
    let reader = {
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut out, &mut text).map(|_| text)
        })
    };
    // A browser that hangs must not hang the suite.
    if !eventually(120, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        panic!("chromium did not finish loading the report in 120 s");
    }
    reader.join().unwrap().expect("reading chromium's output")
}

/// The start tags of a serialized DOM, `<name attr="…">`. Serialization escapes `<`
/// in text as `&lt;`, so every raw `<` outside an attribute value opens a tag.
fn start_tags(dom: &str) -> Vec<String> {
    let mut tags = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find('<') {
        let tag = &rest[at..];
        let mut quote = None;
        let mut end = tag.len();
        for (i, c) in tag.char_indices().skip(1) {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        if tag[1..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            tags.push(tag[..end].to_string());
        }
        rest = &tag[end..];
    }
    tags
}

#[test]
fn report_shows_the_run_in_a_browser_and_runs_none_of_the_agents_markup() {
    let Some(browser) = chromium() else {
        return;
    };
    let home = Home::new();
    let file_name = "<img id=injected-file src=x onerror=document.title=66>.txt";
    let tool_input = serde_json::json!({"command": "cat '</pre><script id=\"injected-input\">document.title=\"pwned\"</script>'"});
    let stream = [
        claude_init(),
        serde_json::json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "<script>document.title='pwned'</script>Working on <b id=\"injected-message\">it</b>"},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": tool_input}]}, "session_id": "s-history"}),
        serde_json::json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": false,
             "content": "</details></pre><img id=\"injected-output\" src=x onerror=\"document.title='pwned'\">\n<!-- an open comment"}]},
            "session_id": "s-history"}),
        claude_result(
            "<iframe id=\"injected-summary\" src=\"https://example.invalid/\"></iframe>Done.",
        ),
    ];
    // The agent writes a file named with HTML holding a script, prints a raw line with
    // a script and the API key, and keeps a core busy so the chart has something.
    let work = format!(
        "printf '%s\\n' \"<script>document.title='pwned-diff'</script>\" > '{file_name}'\n\
         echo \"<script id=injected-raw>document.title='pwned'</script> key=$ANTHROPIC_API_KEY\"\n\
         i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done\nsleep 2"
    );
    let workspace = claude_workspace(&work, &stream);
    let name = "report-markup";
    let output = run_with_api_key(
        &home,
        &task_spec(
            name,
            "<script>alert('prompt')</script>",
            &claude_execution(workspace.path()),
        ),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(workspace.path().join(file_name).is_file(), "the agent ran");
    let run_id = home.result()["runId"].as_str().unwrap().to_string();

    let report = home.agentgate(&["report", &run_id[..16]]);
    assert!(report.status.success(), "{}", stderr(&report));
    let page_path = PathBuf::from(support::stdout(&report).trim());
    assert_eq!(page_path, home.run_folder().join("report.html"));
    let page = std::fs::read_to_string(&page_path).unwrap();
    let elsewhere = home.dir.path().join("elsewhere.html");
    let again = home.agentgate(&["report", &run_id, "-o", elsewhere.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), page);
    assert_eq!(
        support::stdout(&home.agentgate(&["report", &run_id, "-o", "-"])),
        page
    );

    // Masked as everywhere, and the page itself has no script and loads nothing.
    assert!(!page.contains(HISTORY_API_KEY) && !page.contains("history-key"));
    assert!(page.contains("key=***"), "the masked line is missing");
    let page_tags = start_tags(&page);
    for tag in &page_tags {
        assert!(
            !tag.starts_with("<script") && !tag.contains(" src=") && !tag.starts_with("<link"),
            "{tag}"
        );
    }

    let dom = dom_in_chromium(&browser, &page_path);
    assert!(dom.contains("</html>"), "chromium returned no page: {dom}");
    let title = dom
        .split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map(|(title, _)| title)
        .unwrap();
    assert_eq!(title, "agentgate run report-markup: succeeded");
    for tag in start_tags(&dom) {
        let lower = tag.to_ascii_lowercase();
        assert!(
            !lower.contains("injected"),
            "agent markup became an element: {tag}"
        );
        for element in ["<script", "<img", "<iframe", "<b "] {
            assert!(!lower.starts_with(element), "{tag}");
        }
    }
    // Everything the agent wrote is there, as text.
    for text in [
        "&lt;script&gt;document.title='pwned'&lt;/script&gt;Working on &lt;b id=\"injected-message\"&gt;it&lt;/b&gt;",
        "&lt;/details&gt;&lt;/pre&gt;&lt;img id=\"injected-output\"",
        "&lt;!-- an open comment",
        "\"command\": \"cat '&lt;/pre&gt;&lt;script id=\\\"injected-input\\\"",
        "&lt;script id=injected-raw&gt;document.title='pwned'&lt;/script&gt; key=***",
        "&lt;iframe id=\"injected-summary\"",
        "&lt;img id=injected-file src=x onerror=document.title=66&gt;.txt",
        "+&lt;script&gt;document.title='pwned-diff'&lt;/script&gt;",
        "&lt;script&gt;alert(",
        "12 in / 34 out",
        "$0.0123",
        &run_id,
    ] {
        assert!(dom.contains(text), "{text} missing from the page:\n{dom}");
    }
    // The story in order: the message, then the tool call with its result folded in.
    let message = dom.find("Working on").unwrap();
    let tool = dom
        .find("<span class=\"head\">Bash</span>")
        .expect("the tool call");
    let result = dom.find("injected-output").unwrap();
    assert!(message < tool && tool < result);
    for phase in ["plugins", "workspace", "sandbox", "agent", "cleanup"] {
        assert!(
            dom.contains(&format!("<th>{phase}</th>")),
            "{phase} not on the timeline"
        );
    }
    // Resource samples, one a second while the sandbox lived, drawn as charts.
    let samples = home
        .log("events.ndjson")
        .lines()
        .filter(|l| l.contains("\"type\":\"resources\""))
        .count();
    assert!(samples >= 2, "{samples} resource samples");
    assert!(dom.contains(&format!("{samples} samples")), "{dom}");
    assert_eq!(dom.matches("<polyline points=").count(), 2);
    assert!(!dom.contains(HISTORY_API_KEY));
}

#[test]
fn the_recorded_taskspec_is_masked_and_has_the_prompt_the_run_was_given() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let token = "ghp_recorded-taskspec-token-0123456789";
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n  environment:\n    DEPLOY_TOKEN: ${{REPORT_DEPLOY_TOKEN}}\n{}",
        workspace.path().display(),
        shell_agent("echo ok")
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("recorded", "from the file", &execution)).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap(), "--prompt", "from the flag"])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("REPORT_DEPLOY_TOKEN", token)
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let recorded = home.log("taskspec.json");
    let spec: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(spec["spec"]["goal"]["prompt"], "from the flag");
    assert_eq!(
        spec["spec"]["execution"]["sandbox"]["environment"]["DEPLOY_TOKEN"],
        "***"
    );
    assert!(!recorded.contains(token));
    let run_id = home.result()["runId"].as_str().unwrap().to_string();
    let page = support::stdout(&home.agentgate(&["report", &run_id, "-o", "-"]));
    // The page shows the TaskSpec as YAML, where `***` is quoted.
    assert!(page.contains("DEPLOY_TOKEN: &#39;***&#39;"), "{page}");
    assert!(page.contains("from the flag") && !page.contains(token));
}

#[test]
fn a_credential_written_in_the_task_spec_is_masked_everywhere_and_validate_says_where_it_belongs() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let key = "sk-ant-literal-in-the-taskspec-0123456789";
    // The agent prints the key, base64 aside, and writes it into a file it leaves.
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n  environment:\n    NODE_ENV: production\n    ANTHROPIC_API_KEY: \"{key}\"\n{}",
        workspace.path().display(),
        shell_agent("echo \"key=$ANTHROPIC_API_KEY\"; echo \"$ANTHROPIC_API_KEY\" > leaked.txt")
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("literal-key", "x", &execution)).unwrap();

    let validate = home.agentgate(&["validate", path.to_str().unwrap()]);
    let said = stderr(&validate);
    assert!(validate.status.success(), "{said}");
    assert!(
        said.contains("warning: spec.execution.sandbox.environment.ANTHROPIC_API_KEY (line ")
            && said.contains("--secret-env ANTHROPIC_API_KEY")
            && !said.contains(key)
            && !said.contains("NODE_ENV"),
        "{said}"
    );

    let output = home.agentgate(&["run", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("warning: spec.execution.sandbox.environment.ANTHROPIC_API_KEY")
    );
    // The agent had the key (the file it wrote holds it)...
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("leaked.txt"))
            .unwrap()
            .trim(),
        key
    );
    // ...and nothing agentgate recorded or printed does.
    let run_id = home.result()["runId"].as_str().unwrap().to_string();
    let report = home.agentgate(&["report", &run_id]);
    assert!(report.status.success(), "{}", stderr(&report));
    let spec: serde_json::Value = serde_json::from_str(&home.log("taskspec.json")).unwrap();
    assert_eq!(
        spec["spec"]["execution"]["sandbox"]["environment"]["ANTHROPIC_API_KEY"],
        "***"
    );
    assert_eq!(
        spec["spec"]["execution"]["sandbox"]["environment"]["NODE_ENV"],
        "production"
    );
    assert!(home.log("stdout.log").contains("key=***"));
    for entry in std::fs::read_dir(home.run_folder()).unwrap() {
        let file = entry.unwrap().path();
        if file.is_file() {
            let bytes = std::fs::read(&file).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(key),
                "the key is in {}",
                file.display()
            );
        }
    }
    assert!(!support::stdout(&output).contains(key) && !stderr(&output).contains(key));
}

#[test]
fn report_neither_hangs_on_a_fifo_nor_writes_through_a_planted_link() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
        workspace.path().display(),
        shell_agent("echo ok")
    );
    let output = home.run_spec(&task_spec("planted", "x", &execution));
    assert!(output.status.success(), "{}", stderr(&output));
    let run_id = home.result()["runId"].as_str().unwrap().to_string();
    let folder = home.run_folder();
    // Whoever could write the run folder puts a FIFO where the patch is read and a
    // link to a file of the user's where the page is written.
    let victim = home.dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let fifo = folder.join("changes.patch");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink(&victim, folder.join("report.html")).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["report", &run_id])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = support::eventually(20, || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
    }
    let report = child.wait_with_output().unwrap();
    assert!(ended, "agentgate report blocked on the FIFO");
    assert!(report.status.success(), "{}", stderr(&report));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let page = folder.join("report.html");
    assert!(std::fs::symlink_metadata(&page)
        .unwrap()
        .file_type()
        .is_file());
    assert!(std::fs::read_to_string(&page).unwrap().contains("planted"));
}
