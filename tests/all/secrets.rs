//! Secrets stay out of the run record, whatever shape the agent prints them in.
//!
//! Each test hands the agent a secret through `--secret-env`, lets it print the value
//! in a way that defeats naive masking (in two writes, line by line, after a line long
//! enough to be truncated, as a file name), then reads every byte of the run folder
//! and of the CLI's output, in the live mode and with `--json`, looking for the secret
//! and for pieces of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{shell_agent, task_spec};

/// 32 characters, none of which the agent's scripts or the host print on their own.
const SECRET: &str = "sk-live-Zq8w3RtY9uVb2NcX7mKp4LsJ";

const PEM: &str = "-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n\
MIIBCgKCAQEAwhvMcS4ZXB4hqjTDgo5kRuFb9aSCCxRrW3tsvfq8uYDwQn1lkm0O\n\
-----END PRIVATE KEY-----\n";

/// One run of `agentgate run` in its own home, against a workspace outside it.
struct Run {
    home: tempfile::TempDir,
    _workspace: tempfile::TempDir,
    output: Output,
}

impl Run {
    fn new(secret: &str, script: &str, json: bool) -> Run {
        let home = tempfile::tempdir().unwrap();
        // Not inside the home: agentgate's own folder is never a workspace.
        let workspace = tempfile::tempdir().unwrap();
        let execution = format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
            workspace.path().display(),
            shell_agent(script)
        );
        let task = home.path().join("task.yaml");
        std::fs::write(&task, task_spec("secrets", "print the key", &execution)).unwrap();
        let mut args = vec![
            "run",
            task.to_str().unwrap(),
            "--secret-env",
            "MODEL_API_KEY",
        ];
        if json {
            args.push("--json");
        }
        let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args(&args)
            .env("AGENTGATE_HOME", home.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .env("MODEL_API_KEY", secret)
            .output()
            .expect("running agentgate");
        Run {
            home,
            _workspace: workspace,
            output,
        }
    }

    fn folder(&self) -> PathBuf {
        let runs: Vec<_> = std::fs::read_dir(self.home.path().join("runs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(runs.len(), 1, "{runs:?}");
        runs[0].clone()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.folder().join(name)).unwrap_or_default()
    }

    fn result(&self) -> serde_json::Value {
        serde_json::from_str(&self.read("result.json")).unwrap()
    }

    /// The CLI's stdout and stderr.
    fn terminal(&self) -> Vec<u8> {
        [self.output.stdout.as_slice(), &self.output.stderr].concat()
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.output.status.code(),
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    /// Asserts that no fragment is in any file of the run folder (names included) or
    /// in what the CLI printed.
    fn assert_clean(&self, fragments: &[String]) {
        assert_eq!(self.output.status.code(), Some(0), "{}", self.describe());
        let mut places = vec![("the terminal".to_string(), self.terminal())];
        for file in files_under(&self.folder()) {
            let name = file.display().to_string();
            places.push((format!("the name {name}"), name.clone().into_bytes()));
            places.push((name, std::fs::read(&file).unwrap()));
        }
        assert!(
            places.len() > 5,
            "the run folder is nearly empty: {places:?}"
        );
        for (place, bytes) in &places {
            for fragment in fragments {
                assert!(
                    !contains(bytes, fragment.as_bytes()),
                    "{fragment:?} leaked into {place}:\n{}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }
}

/// Every file under `dir`, recursively, without following symlinks.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The secret, its halves, and the 8-byte pieces on both sides of each cut.
fn fragments(secret: &str, cuts: &[usize]) -> Vec<String> {
    let half = secret.len() / 2;
    let mut out = vec![
        secret.to_string(),
        secret[..half].to_string(),
        secret[half..].to_string(),
    ];
    for &cut in cuts {
        out.push(secret[cut.saturating_sub(8)..cut].to_string());
        out.push(secret[cut..(cut + 8).min(secret.len())].to_string());
    }
    out.retain(|f| f.len() >= 8);
    out
}

/// Runs `script` in the live mode and with `--json`, and checks both.
fn both_modes(secret: &str, script: &str, check: impl Fn(&Run)) {
    for json in [false, true] {
        check(&Run::new(secret, script, json));
    }
}

#[test]
fn a_secret_printed_in_two_writes_is_masked() {
    let script = "K=$MODEL_API_KEY\nprintf 'key=%s' \"$(printf %s \"$K\" | cut -c1-10)\"\nsleep .3\nprintf '%s\\n' \"$(printf %s \"$K\" | cut -c11-)\"";
    both_modes(SECRET, script, |run| {
        run.assert_clean(&fragments(SECRET, &[10]));
        assert!(
            run.read("stdout.log").contains("key=***"),
            "{}",
            run.read("stdout.log")
        );
        assert!(run.read("events.ndjson").contains("key=***"));
    });
}

#[test]
fn a_secret_in_a_file_name_is_masked_in_the_result_and_the_summary() {
    both_modes(SECRET, "touch \"leak-$MODEL_API_KEY.txt\"", |run| {
        run.assert_clean(&fragments(SECRET, &[]));
        let result = run.result();
        assert_eq!(
            result["modifiedFiles"][0]["path"], "leak-***.txt",
            "{result}"
        );
        assert!(
            contains(&run.terminal(), b"leak-***.txt"),
            "{}",
            run.describe()
        );
    });
}

#[test]
fn a_multi_line_secret_is_masked_whole_and_line_by_line() {
    let script = "printf 'whole: %s\\n' \"$MODEL_API_KEY\"\nprintf '%s\\n' \"$MODEL_API_KEY\" | while IFS= read -r line; do echo \"line: $line\"; sleep .1; done\necho \"$MODEL_API_KEY\" >&2";
    both_modes(PEM, script, |run| {
        let mut pieces = Vec::new();
        for line in PEM.lines() {
            pieces.extend(fragments(line, &[]));
        }
        run.assert_clean(&pieces);
        let stdout = run.read("stdout.log");
        assert!(stdout.contains("line: ***\n"), "{stdout}");
        assert!(run.read("stderr.log").contains("***"));
    });
}

#[test]
fn a_long_line_before_a_secret_does_not_expose_its_start() {
    let script = "printf '%s' \"$(head -c 16364 /dev/zero | tr '\\0' x)\"\nprintf '%s\\n' \"$MODEL_API_KEY\"";
    both_modes(SECRET, script, |run| {
        run.assert_clean(&fragments(SECRET, &[8, 20]));
        // The line reached the record, masked, and was cut only after masking.
        let events = run.read("events.ndjson");
        assert!(events.contains("xxx***"), "the masked line is missing");
        assert!(run.read("stdout.log").ends_with("x***\n"));
    });
}

#[test]
fn a_secret_interpolated_into_the_task_spec_is_masked_in_its_error() {
    let home = tempfile::tempdir().unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n  resources:\n    timeout: ${{DEPLOY_TOKEN}}\n{}",
        home.path().display(),
        shell_agent("true")
    );
    let task = home.path().join("task.yaml");
    std::fs::write(&task, task_spec("secrets", "x", &execution)).unwrap();
    for json in [false, true] {
        let mut args = vec!["run", task.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args(&args)
            .env("AGENTGATE_HOME", home.path())
            .env("DEPLOY_TOKEN", SECRET)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        // The error still says where and what, without the value.
        assert!(
            stderr.contains("timeout") && stderr.contains("***"),
            "{stderr}"
        );
        for fragment in fragments(SECRET, &[]) {
            assert!(!contains(&output.stdout, fragment.as_bytes()));
            assert!(!stderr.contains(&fragment), "{stderr}");
        }
    }
}
