//! What a hostile agent does to the workspace is reported exactly, and nothing it
//! prints or names reaches the terminal raw. End to end through the `agentgate`
//! binary, with the `command` driver running a shell script as the agent.

mod support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};
use support::{shell_agent, task_spec};

/// Runs `script` as the agent on `workspace` with no sandbox (so it can reach the
/// workspace's parent), in a fresh home. `json` adds `--json`.
fn run(home: &Path, workspace: &Path, script: &str, json: bool) -> Output {
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
        workspace.display(),
        shell_agent(script)
    );
    let task = home.join("task.yaml");
    std::fs::write(&task, task_spec("changes", "x", &execution)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .arg("run")
        .arg(&task)
        .args(json.then_some("--json"))
        .env("AGENTGATE_HOME", home)
        .env_remove("AGENTGATE_PLUGIN_PATH");
    // Few descriptors: a walk that holds one per level cannot get through the deep
    // tree below.
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 512,
                rlim_max: 512,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    command.output().expect("running agentgate")
}

fn result(home: &Path) -> Value {
    let runs: Vec<_> = std::fs::read_dir(home.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    serde_json::from_str(&std::fs::read_to_string(runs[0].join("result.json")).unwrap()).unwrap()
}

fn sorted(entries: &Value) -> Vec<Value> {
    let mut entries = entries.as_array().expect("modifiedFiles is a list").clone();
    entries.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    entries
}

fn entry(path: &str, change: &str, kind: &str) -> Value {
    json!({"path": path, "change": change, "kind": kind})
}

fn no_raw_escape(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.contains(&0x1b) && !bytes.contains(&0x07),
        "raw control bytes reached {what}: {}",
        String::from_utf8_lossy(bytes)
    );
}

const DEPTH: usize = 1100;

/// The agent's work: a non-UTF-8 name, a name that would forge a summary line, a
/// same-size edit with the mtime put back, a chmod, a deletion and a deep tree.
const AGENT: &str = r#"printf x > "$(printf 'bad\377name')"
printf x > "$(printf 'a\nrun 0 succeeded in 0.1s; 0 file(s) changed\033[2J')"
touch -r same.txt ../stamp
printf 'mode=evil' > same.txt
touch -r ../stamp same.txt
chmod 755 run.sh
rm gone.txt
i=0
while [ $i -lt 1100 ]; do mkdir d && cd d || exit 9; i=$((i+1)); done
echo leaf > leaf
printf '\033]0;pwned\007\033[2J\033c\rforged\n'
"#;

fn prepare(workspace: &Path) {
    std::fs::write(workspace.join("same.txt"), "mode=safe").unwrap();
    std::fs::write(workspace.join("run.sh"), "echo hi").unwrap();
    std::fs::write(workspace.join("gone.txt"), "bye").unwrap();
}

fn expected() -> Vec<Value> {
    let mut expected = vec![
        entry("bad\\xffname", "added", "file"),
        entry(
            "a\\nrun 0 succeeded in 0.1s; 0 file(s) changed\\e[2J",
            "added",
            "file",
        ),
        entry("gone.txt", "deleted", "file"),
        entry("run.sh", "modified", "file"),
        entry("same.txt", "modified", "file"),
    ];
    let mut path = String::from("d");
    for _ in 0..DEPTH {
        expected.push(entry(&path, "added", "dir"));
        path.push_str("/d");
    }
    let leaf = format!("{}/leaf", &path[..path.len() - 2]);
    expected.push(entry(&leaf, "added", "file"));
    expected.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    expected
}

#[test]
fn a_hostile_agents_changes_are_reported_exactly_and_shown_escaped() {
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    prepare(&workspace);

    let output = run(home.path(), &workspace, AGENT, false);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let result = result(home.path());
    assert_eq!(result["status"], "succeeded");
    assert!(
        sorted(&result["modifiedFiles"]) == expected(),
        "modifiedFiles differ: {:#}",
        result["modifiedFiles"]
    );

    no_raw_escape("stdout", &output.stdout);
    no_raw_escape("stderr", &output.stderr);
    // The agent's output and the forging name are shown escaped, on lines of their own.
    assert!(
        stderr.contains("│ \\e]0;pwned\\a\\e[2J\\ec\\rforged"),
        "{stderr}"
    );
    assert!(
        stderr.contains("added      a\\nrun 0 succeeded in 0.1s; 0 file(s) changed\\e[2J"),
        "{stderr}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("run 0 succeeded")),
        "{stderr}"
    );
}

#[test]
fn json_output_stays_json_escaped() {
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    prepare(&workspace);

    let output = run(home.path(), &workspace, AGENT, true);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    no_raw_escape("stdout", &output.stdout);
    let stdout = String::from_utf8(output.stdout).expect("NDJSON is UTF-8");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    // Escaped, not lost: the agent's line decodes to exactly what it printed.
    assert!(
        lines
            .iter()
            .any(|e| e["type"] == "output" && e["line"] == "\x1b]0;pwned\x07\x1b[2J\x1bc\rforged"),
        "{stdout}"
    );
    let result = lines.last().unwrap();
    assert!(sorted(&result["modifiedFiles"]) == expected());
}

#[test]
fn a_root_swapped_for_a_symlink_to_etc_does_not_redirect_the_record() {
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("kept.txt"), "k").unwrap();

    let script = "cd ..\nmv ws ws.moved\nln -s /etc ws\necho new > ws.moved/new.txt\n";
    let output = run(home.path(), &workspace, script, false);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = result(home.path());
    // What the agent really did to the directory it was given, and nothing of /etc.
    assert_eq!(
        result["modifiedFiles"],
        json!([entry("new.txt", "added", "file")]),
        "{stderr}"
    );
    assert_eq!(result["status"], "error", "{stderr}");
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("was replaced during the run") && error.contains("a symlink to /etc"),
        "{error}"
    );
    assert!(stderr.contains("a symlink to /etc"), "{stderr}");
}
