//! Hostile TaskSpecs through the real `agentgate` binary: each is refused by `validate` and by
//! `run` with exit 2 and a message that names what is wrong and the limit, and `run` leaves no
//! run folder behind. The limits themselves are unit-tested in `host/src/taskspec/limits.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support;
use crate::support::peak_rss;
use crate::support::{repo_root, shell_agent, stderr, task_spec};

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
        command
            .args(args)
            .env("AGENTGATE_HOME", self.dir.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .current_dir(repo_root());
        command
    }

    fn write(&self, text: &str) -> PathBuf {
        let path = self.dir.path().join("task.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn validate(&self, path: &Path) -> Output {
        self.command(&["validate", path.to_str().unwrap()])
            .output()
            .unwrap()
    }

    fn run(&self, path: &Path) -> Output {
        self.command(&["run", path.to_str().unwrap()])
            .output()
            .unwrap()
    }

    /// The peak resident memory of `agentgate args`, in bytes (its own, see
    /// [`peak_rss`]).
    fn peak_memory(&self, args: &[&str]) -> usize {
        let (mut command, report) = peak_rss::measured(&self.command(args));
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        report.wait(child).peak_rss as usize
    }

    /// Whether any run folder was created.
    fn has_runs(&self) -> bool {
        std::fs::read_dir(self.dir.path().join("runs")).is_ok_and(|mut runs| runs.next().is_some())
    }
}

/// A runnable spec (local workspace, subprocess sandbox) with `extra` added to its sandbox block.
fn spec_with_sandbox(workspace: &Path, sandbox_extra: &str) -> String {
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n{}{}",
        workspace.display(),
        support::indent(sandbox_extra, 2),
        shell_agent("echo ran > ran.txt"),
    );
    task_spec("limits", "x", &execution)
}

/// Asserts that both `validate` and `run` refuse `path` with exit 2, that each message contains
/// every one of `needles`, and that `run` neither ran the agent nor created a run folder.
fn refused_by_validate_and_run(home: &Home, path: &Path, workspace: &Path, needles: &[&str]) {
    for (what, output) in [("validate", home.validate(path)), ("run", home.run(path))] {
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{what}: {message}");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{what}: {needle:?} not in {message}"
            );
        }
    }
    assert!(!home.has_runs(), "run left a run folder behind");
    assert!(!workspace.join("ran.txt").exists(), "the agent ran");
}

#[test]
fn a_huge_timeout_is_refused_with_the_field_and_the_range() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let path = home.write(&spec_with_sandbox(
        workspace.path(),
        "resources:\n  timeout: 9223372036854775807s\n",
    ));
    refused_by_validate_and_run(
        &home,
        &path,
        workspace.path(),
        &["spec.execution.sandbox.resources.timeout", "1s to 30d"],
    );
}

#[test]
fn deeply_nested_brackets_are_refused_with_their_position() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let mut text = spec_with_sandbox(workspace.path(), "");
    let line = text.lines().count() + 1;
    text.push_str(&format!("deep: {}\n", "[".repeat(200_000)));
    let path = home.write(&text);
    refused_by_validate_and_run(
        &home,
        &path,
        workspace.path(),
        &[
            &format!("line {line}, column"),
            "nested more than 64 levels",
        ],
    );
}

#[test]
fn an_oversized_file_is_refused_without_being_read_whole() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    // A 50 MB environment map: the parser used to spend 427 MB of memory on it.
    let mut text = spec_with_sandbox(workspace.path(), "environment:\n");
    let entry = format!("    V: \"{}\"\n", "x".repeat(1000));
    while text.len() < 50 << 20 {
        text.push_str(&entry.replacen('V', &format!("V{}", text.len()), 1));
    }
    let path = home.write(&text);
    refused_by_validate_and_run(
        &home,
        &path,
        workspace.path(),
        &["larger than 1048576 bytes (1 MiB)"],
    );

    // Refusing it costs about what validating a small spec costs, not the file's size.
    let big = home.peak_memory(&["validate", path.to_str().unwrap()]);
    let small_path = home.dir.path().join("small.yaml");
    std::fs::write(&small_path, spec_with_sandbox(workspace.path(), "")).unwrap();
    let small = home.peak_memory(&["validate", small_path.to_str().unwrap()]);
    assert!(
        big < small + (16 << 20),
        "validate peaked at {} MiB for the 50 MB file, {} MiB for a small one",
        big >> 20,
        small >> 20
    );
}

#[test]
fn an_oversized_environment_value_is_refused_with_the_variable_and_the_cap() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let path = home.write(&spec_with_sandbox(
        workspace.path(),
        "environment:\n  FROM_HOST: ${HUGE_VALUE}\n",
    ));
    let huge = "v".repeat(100 << 10);
    for (what, mut command) in [
        (
            "validate",
            home.command(&["validate", path.to_str().unwrap()]),
        ),
        ("run", home.command(&["run", path.to_str().unwrap()])),
    ] {
        let output = command.env("HUGE_VALUE", &huge).output().unwrap();
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{what}: {message}");
        for needle in [
            "spec.execution.sandbox.environment.FROM_HOST",
            "\"HUGE_VALUE\"",
            "65536 bytes",
        ] {
            assert!(
                message.contains(needle),
                "{what}: {needle:?} not in {message}"
            );
        }
        assert!(!message.contains(&huge), "{what} echoed the value");
    }
    assert!(!home.has_runs(), "run left a run folder behind");
}
