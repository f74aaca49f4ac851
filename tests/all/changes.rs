//! What a hostile agent does to the workspace is reported exactly, and nothing it
//! prints or names reaches the terminal raw. End to end through the `agentgate`
//! binary, with the `command` driver running a shell script as the agent. In git
//! workspaces, symlinks swapped in, sparse files and secrets in binary files neither
//! leak the host into the change set nor break its bounds.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use crate::support::git_server::git;
use crate::support::peak_rss;
use crate::support::{shell_agent, task_spec};
use serde_json::{json, Value};

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

// A git workspace after a hostile agent: what the host reads to build the change set
// (`modifiedFiles`, `ignoredFiles`, `changes.patch`) stays inside the workspace and
// within bounds of memory and time.

/// A repository at `dir` with `files` committed, and a pristine clone of it beside it
/// (`<dir>.pristine`) to apply `changes.patch` to.
fn repository(dir: &Path, files: &[(&str, &[u8])]) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    let pristine = dir.with_extension("pristine");
    git(
        dir.parent().unwrap(),
        &[
            "clone",
            "-q",
            dir.to_str().unwrap(),
            pristine.to_str().unwrap(),
        ],
    );
    pristine
}

/// What a run of `agentgate` left, and the peak memory it took.
struct Measured {
    code: Option<i32>,
    stderr: String,
    /// Peak resident set size of the `agentgate` process, in bytes.
    peak_rss: u64,
}

/// Runs `agentgate run` on a TaskSpec with `execution` in `home`, with `env` added to
/// its environment, and measures its peak memory (its own, see [`peak_rss`]).
fn run_measured(home: &Path, execution: &str, args: &[&str], env: &[(&str, &str)]) -> Measured {
    let task = home.join("task.yaml");
    std::fs::write(&task, task_spec("changes", "x", execution)).unwrap();
    let stderr_path = home.join("stderr.txt");
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .arg("run")
        .arg(&task)
        .args(args)
        .env("AGENTGATE_HOME", home)
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .envs(env.iter().copied());
    let (mut command, report) = peak_rss::measured(&command);
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("starting agentgate");
    let ended = report.wait(child);
    Measured {
        code: ended.code,
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
        peak_rss: ended.peak_rss,
    }
}

/// Every regular file under `dir` (symlinks not followed, `.git` skipped), with
/// its content.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if entry.file_name() == ".git" {
                continue;
            }
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                found.push((entry.path(), std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    found
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Applies the run's `changes.patch` to the pristine clone, which decodes binary
/// hunks as `git apply` does, and returns every file it then holds.
fn applied(home: &Path, pristine: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let patch = result_folder(home).join("changes.patch");
    git(pristine, &["apply", "--binary", patch.to_str().unwrap()]);
    files_under(pristine)
}

fn result_folder(home: &Path) -> std::path::PathBuf {
    std::fs::read_dir(home.join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

fn kinds(result: &Value) -> Vec<(String, String, String)> {
    ["modifiedFiles", "ignoredFiles"]
        .iter()
        .flat_map(|list| result[list].as_array().unwrap().clone())
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["change"].as_str().unwrap().to_string(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The agent, in the real `subprocess` sandbox, swaps tracked folders for symlinks to
/// a host folder holding a secret file and to `/proc/self` (agentgate's own
/// environment, `GIT_TOKEN` included, once the host follows it), and lists them in
/// `.gitignore`. Nothing of either reaches the run folder, not even as a binary
/// patch; the symlinks are reported as symlinks.
#[test]
fn symlinks_to_host_folders_and_proc_self_put_nothing_of_the_host_in_the_change_set() {
    const FILE_MARKER: &str = "HOST-FILE-MARKER-5f0c1e";
    const ENV_MARKER: &str = "ENV-MARKER-GIT-TOKEN-77ad3b";
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let host_folder = base.path().join("host-folder");
    std::fs::create_dir(&host_folder).unwrap();
    std::fs::write(host_folder.join("shadow"), format!("{FILE_MARKER}\n")).unwrap();
    let workspace = base.path().join("ws");
    let pristine = repository(
        &workspace,
        &[
            ("x/shadow", b"tracked\n"),
            ("p/environ", b"tracked\n"),
            ("etc/passwd", b"tracked\n"),
            ("keep.txt", b"k\n"),
        ],
    );
    let script = format!(
        "echo ran > ran.marker\nrm -rf x p etc\nln -s {} x\nln -s /proc/self p\nln -s /etc etc\nprintf 'x\\np\\netc\\n' > .gitignore\n",
        host_folder.display()
    );
    let execution = support::local_subprocess(&workspace, false, "5m", &shell_agent(&script));
    let run = run_measured(home.path(), &execution, &[], &[("GIT_TOKEN", ENV_MARKER)]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(workspace.join("ran.marker")).unwrap(),
        "ran\n",
        "the agent did not run"
    );

    let folder = result_folder(home.path());
    for (path, content) in files_under(&folder) {
        for marker in [FILE_MARKER, ENV_MARKER] {
            assert!(
                !contains(&content, marker),
                "{marker} in {}",
                path.display()
            );
        }
    }
    // Binary hunks decoded: still nothing of the host.
    for (path, content) in applied(home.path(), &pristine) {
        for marker in [FILE_MARKER, ENV_MARKER] {
            assert!(
                !contains(&content, marker),
                "{marker} in {}",
                path.display()
            );
        }
    }
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("result.json")).unwrap())
            .unwrap();
    let kinds = kinds(&result);
    for link in ["x", "p", "etc"] {
        assert!(
            kinds.contains(&(link.into(), "added".into(), "symlink".into())),
            "{link}: {kinds:?}"
        );
    }
    for gone in ["x/shadow", "p/environ", "etc/passwd"] {
        assert!(
            kinds.contains(&(gone.into(), "deleted".into(), "file".into())),
            "{gone}: {kinds:?}"
        );
    }
    assert!(kinds.contains(&("ran.marker".into(), "added".into(), "file".into())));
}

/// Sparse files of 1 TiB and 2 GiB (one over a tracked file): the run ends, writes
/// its result, reports them (left out of the patch, with why), and `agentgate`'s
/// memory stays bounded.
#[test]
fn sparse_files_of_a_tebibyte_are_reported_in_bounded_memory() {
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    repository(
        &workspace,
        &[("data.bin", b"small\n"), ("keep.txt", b"k\n")],
    );
    let script = "echo ran > ran.marker\ntruncate -s 1T big.bin\ntruncate -s 2G mid.bin\ntruncate -s 2G data.bin\n";
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
        workspace.display(),
        shell_agent(script)
    );
    let run = run_measured(home.path(), &execution, &[], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        workspace.join("ran.marker").exists(),
        "the agent did not run"
    );
    let folder = result_folder(home.path());
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let kinds = kinds(&result);
    for (path, change) in [
        ("big.bin", "added"),
        ("mid.bin", "added"),
        ("data.bin", "modified"),
        ("ran.marker", "added"),
    ] {
        assert!(
            kinds.contains(&(path.into(), change.into(), "file".into())),
            "{path}: {kinds:?}"
        );
    }
    let omitted = result["patch"]["omitted"].as_array().unwrap();
    for path in ["big.bin", "mid.bin", "data.bin"] {
        let entry = omitted
            .iter()
            .find(|o| o["path"] == path)
            .unwrap_or_else(|| panic!("{path} not in patch.omitted: {omitted:?}"));
        assert!(
            entry["reason"].as_str().unwrap().contains("more than"),
            "{entry}"
        );
    }
    assert_eq!(result["patch"]["maxFileBytes"], 8 << 20);
    assert_eq!(result["patch"]["maxTotalBytes"], 64 << 20);
    let patch = std::fs::read_to_string(folder.join("changes.patch")).unwrap();
    assert!(patch.contains("+ran"), "{patch}");
    eprintln!("agentgate's peak RSS: {} MiB", run.peak_rss >> 20);
    assert!(
        run.peak_rss < 512 << 20,
        "agentgate peaked at {} MiB",
        run.peak_rss >> 20
    );
}

/// A secret the run knows, written by the agent in plain text inside a binary file,
/// cannot be recovered from `changes.patch`, even by applying it.
#[test]
fn a_secret_inside_a_binary_file_cannot_be_recovered_from_the_patch() {
    const SECRET: &str = "sk-live-Bn7rQ2xW9pLk4TzM";
    let home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("ws");
    let pristine = repository(&workspace, &[("keep.txt", b"k\n")]);
    let script =
        "echo ran > ran.marker\nprintf '\\000\\001bin:%s:end' \"$MODEL_API_KEY\" > blob.bin\n";
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
        workspace.display(),
        shell_agent(script)
    );
    let run = run_measured(
        home.path(),
        &execution,
        &["--secret-env", "MODEL_API_KEY"],
        &[("MODEL_API_KEY", SECRET)],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // The agent did write the secret.
    let written = std::fs::read(workspace.join("blob.bin")).unwrap();
    assert!(contains(&written, SECRET));
    let result = result(home.path());
    let blob = result["modifiedFiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "blob.bin")
        .expect("blob.bin is reported");
    assert_eq!(blob["binary"], true);
    let files = applied(home.path(), &pristine);
    let (_, content) = files
        .iter()
        .find(|(path, _)| path.ends_with("blob.bin"))
        .expect("the patch holds blob.bin");
    assert_eq!(content, b"\x00\x01bin:***:end");
    for (path, content) in files_under(&result_folder(home.path())) {
        assert!(!contains(&content, SECRET), "{}", path.display());
    }
}
