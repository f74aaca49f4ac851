//! Shared helpers for the integration tests: temporary homes, TaskSpec text, and the
//! fixture plugins built by `host/build.rs`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The directory holding the fixture plugins (`hostile-driver`, `sneaky-docker`).
pub fn fixture_plugins() -> PathBuf {
    PathBuf::from(env!("AGENTGATE_FIXTURE_PLUGIN_DIR"))
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

/// Whether process `pid` is gone (or a zombie waiting to be reaped, which runs nothing).
pub fn process_is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
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
