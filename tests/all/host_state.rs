//! The host's own state and its life as a process, through the `agentgate` binary:
//! every ending signal ends a run cleanly, a relative home works, and what the host
//! keeps in `AGENTGATE_HOME` (the compile cache, grants) is checked before it is used.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support;
use crate::support::{eventually, processes_with_arg, shell_agent, stderr, task_spec};

fn agentgate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env_remove("AGENTGATE_HOME");
    command
}

/// A run that scaffolds a fresh workspace in its run folder, with no sandbox, and
/// checks it from the agent.
fn fresh_spec() -> String {
    let execution = format!(
        "workspace:\n  source: fresh\n  template: node-typescript\n  projectName: Home Test\nsandbox:\n  provider: none\n{}",
        shell_agent("test -f package.json")
    );
    task_spec("home", "x", &execution)
}

fn only_result(home: &Path) -> serde_json::Value {
    let runs = support::run_folders(home);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let text = std::fs::read_to_string(runs[0].join("result.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Whether process `pid` catches `signal` (its handler is installed).
fn catches(pid: u32, signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: signalling our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

#[test]
fn sighup_and_sigquit_end_a_run_like_sigterm() {
    for (name, sig, marker) in [
        ("SIGHUP", libc::SIGHUP, "300.601"),
        ("SIGQUIT", libc::SIGQUIT, "300.602"),
    ] {
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let execution = format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: 10m\n{}",
            workspace.path().display(),
            shell_agent(&format!("sleep {marker}"))
        );
        let task = home.path().join("task.yaml");
        std::fs::write(&task, task_spec("signal", "x", &execution)).unwrap();
        let mut child = agentgate()
            .args(["run", task.to_str().unwrap()])
            .env("AGENTGATE_HOME", home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The agent has a pid of its own namespace inside the sandbox: find it on the
        // host by its unique argument.
        assert!(
            eventually(60, || !processes_with_arg(marker).is_empty()),
            "{name}: the agent never started"
        );

        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{name}: {status:?}");
        assert_eq!(only_result(home.path())["status"], "cancelled", "{name}");
        assert!(
            eventually(5, || processes_with_arg(marker).is_empty()),
            "{name}: the agent survived"
        );
    }
}

#[test]
fn a_signal_during_start_up_exits_130() {
    let signals = [
        ("SIGINT", libc::SIGINT),
        ("SIGTERM", libc::SIGTERM),
        ("SIGHUP", libc::SIGHUP),
        ("SIGQUIT", libc::SIGQUIT),
    ];
    for (name, sig) in signals {
        // A fresh home has a cold compile cache: start-up compiles every built-in.
        let home = tempfile::tempdir().unwrap();
        let task = home.path().join("task.yaml");
        std::fs::write(&task, fresh_spec()).unwrap();
        let mut child = agentgate()
            .args(["run", task.to_str().unwrap()])
            .env("AGENTGATE_HOME", home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Signalled as soon as the host can take it, which is while it compiles.
        let mut installed = false;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < end && child.try_wait().unwrap().is_none() {
            if catches(child.id(), sig) {
                installed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(installed, "{name}: agentgate never installed a handler");
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{name}: {status:?}");
        // It landed before the run proper: no run was started.
        assert!(
            support::run_folders(home.path()).is_empty(),
            "{name}: a run started"
        );
    }
}

#[test]
fn a_relative_home_works_from_the_flag_and_from_the_environment() {
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("task.yaml"), fresh_spec()).unwrap();

    let output = agentgate()
        .args(["--home", "flag-home", "run", "task.yaml"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let result = only_result(&cwd.path().join("flag-home"));
    assert_eq!(result["status"], "succeeded", "{result}");

    let output = agentgate()
        .args(["run", "task.yaml"])
        .env("AGENTGATE_HOME", "sub/env-home")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let result = only_result(&cwd.path().join("sub/env-home"));
    assert_eq!(result["status"], "succeeded", "{result}");
}

#[test]
fn a_tampered_compile_cache_entry_is_discarded_and_compiled_again() {
    let home = tempfile::tempdir().unwrap();
    let task = home.path().join("task.yaml");
    // The built-ins run from the code the binary embeds: the compile cache holds
    // plugin files, so the run's agent is one (the fixture driver, behaving).
    let execution = "workspace:\n  source: fresh\n  template: node-typescript\n  projectName: Home Test\nsandbox:\n  provider: none\nagent:\n  driver: hostile\n  options:\n    behavior: ok\n";
    std::fs::write(&task, task_spec("home", "x", execution)).unwrap();
    let run = || {
        let output = agentgate()
            .args(["run", task.to_str().unwrap()])
            .env("AGENTGATE_HOME", home.path())
            .env("AGENTGATE_PLUGIN_PATH", support::fixture_plugins())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    let first = run();
    assert!(!first.contains("warning"), "{first}");

    // An agent flips bytes in the middle of every compiled entry (native code).
    let cache = home.path().join("cache/components");
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert!(
        !entries.is_empty(),
        "nothing was cached in {}",
        cache.display()
    );
    let mut tampered = Vec::new();
    for entry in &entries {
        let mut bytes = std::fs::read(entry).unwrap();
        let middle = bytes.len() / 2;
        for byte in &mut bytes[middle..middle + 16] {
            *byte ^= 0xff;
        }
        std::fs::write(entry, &bytes).unwrap();
        tampered.push(bytes);
    }

    // The run loads only its plugins: the entry of the one from a file is discarded
    // with a warning and written again; entries of plugins it does not use are not read.
    let second = run();
    let mut reloaded = 0;
    for (entry, bytes) in entries.iter().zip(&tampered) {
        let Some(line) = second
            .lines()
            .find(|l| l.contains(&entry.display().to_string()))
        else {
            assert_eq!(&std::fs::read(entry).unwrap(), bytes, "{}", entry.display());
            continue;
        };
        assert!(
            line.starts_with("warning: not loading") && line.contains("changed"),
            "{line}"
        );
        // Discarded and written again from a fresh compile.
        assert_ne!(&std::fs::read(entry).unwrap(), bytes, "{}", entry.display());
        reloaded += 1;
    }
    assert_eq!(reloaded, 1, "{second}");

    let third = run();
    assert!(!third.contains("warning"), "{third}");
}

#[test]
fn a_grants_file_that_does_not_parse_is_an_error_naming_the_file_and_line() {
    let home = tempfile::tempdir().unwrap();
    let grants = home.path().join("grants.yaml");
    // A valid grant, then one appended line that is not.
    std::fs::write(
        &grants,
        "plugins:\n  my-driver:\n    capabilities: [events, sandbox]\n  evil: [\n",
    )
    .unwrap();
    let task = home.path().join("task.yaml");
    std::fs::write(&task, fresh_spec()).unwrap();
    for args in [vec!["run", task.to_str().unwrap()], vec!["plugins", "list"]] {
        let output = agentgate()
            .args(&args)
            .env("AGENTGATE_HOME", home.path())
            .output()
            .unwrap();
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains(&format!("the grants file {} is invalid", grants.display())),
            "{text}"
        );
        assert!(text.contains("line 4") || text.contains("line 5"), "{text}");
        assert!(text.contains("move the file away"), "{text}");
        assert!(
            support::run_folders(home.path()).is_empty(),
            "a run started: {text}"
        );
    }
}
