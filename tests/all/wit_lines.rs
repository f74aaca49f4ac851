//! The contract stays stable for published plugins: every released line of
//! `agentgate:plugin` is frozen in `wit/frozen/<version>` (its files' digests checked
//! in as `SHA256SUMS`), the host links every line it lists, and a plugin built against
//! the oldest line, committed prebuilt, keeps loading, describing and running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::support::{local_subprocess, oldest_line_driver, repo_root, stderr, task_spec, Home};
use agentgate::wit::SUPPORTED_LINES;

const REMEDY: &str = "a frozen line never changes, because plugins built against it must keep loading: make a new line instead (bump the package version in wit/worlds.wit and freeze it in wit/frozen/<version>, see wit/README.md)";

fn frozen_root() -> PathBuf {
    repo_root().join("wit/frozen")
}

/// Every `.wit` file below `dir`, by its path relative to `dir`, with its sha256.
fn wit_digests(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "wit") {
                let relative = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let digest = hex::encode(Sha256::digest(std::fs::read(&path).unwrap()));
                out.insert(relative, digest);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The frozen lines, by version.
fn frozen_lines() -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_dir(frozen_root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    lines.sort();
    lines
}

#[test]
fn frozen_lines_are_unchanged() {
    let lines = frozen_lines();
    assert!(!lines.is_empty(), "no line is frozen in wit/frozen");
    for line in lines {
        let dir = frozen_root().join(&line);
        let sums = std::fs::read_to_string(dir.join("SHA256SUMS"))
            .unwrap_or_else(|e| panic!("wit/frozen/{line}/SHA256SUMS: {e}"));
        let recorded: BTreeMap<String, String> = sums
            .lines()
            .map(|l| {
                let (digest, file) = l.split_once("  ").expect("sha256sum's format");
                (file.to_string(), digest.to_string())
            })
            .collect();
        let actual = wit_digests(&dir);
        for (file, digest) in &recorded {
            match actual.get(file) {
                None => panic!("wit/frozen/{line}/{file} was removed; {REMEDY}"),
                Some(now) if now != digest => {
                    panic!("wit/frozen/{line}/{file} changed; {REMEDY}")
                }
                Some(_) => {}
            }
        }
        for file in actual.keys() {
            assert!(
                recorded.contains_key(file),
                "wit/frozen/{line}/{file} was added; {REMEDY}"
            );
        }
    }
}

#[test]
fn the_host_links_exactly_the_frozen_lines() {
    let supported: Vec<String> = SUPPORTED_LINES
        .iter()
        .map(|l| l.version.to_string())
        .collect();
    assert_eq!(
        supported,
        frozen_lines(),
        "every frozen line stays supported (published plugins use it), and only frozen lines are"
    );
    for line in SUPPORTED_LINES {
        assert_eq!(line.frozen_dir, format!("wit/frozen/{}", line.version));
    }
}

/// The development head `wit/` may only differ from a frozen line once its package
/// version is a new one.
#[test]
fn the_head_is_not_changed_under_a_frozen_version() {
    let head = repo_root().join("wit");
    let worlds = std::fs::read_to_string(head.join("worlds.wit")).unwrap();
    let version = worlds
        .lines()
        .find_map(|l| l.trim().strip_prefix("package agentgate:plugin@"))
        .and_then(|rest| rest.strip_suffix(';'))
        .expect("wit/worlds.wit declares the package");
    let frozen = frozen_root().join(version);
    if !frozen.exists() {
        // A new line under development: frozen when released.
        return;
    }
    // The head package is the top-level files and `deps/`; every other folder is a
    // frozen line or a package of its own (`kubernetes/`).
    let mut head_files = wit_digests(&head);
    head_files.retain(|file, _| !file.contains('/') || file.starts_with("deps/"));
    assert_eq!(
        head_files,
        wit_digests(&frozen),
        "wit/ declares agentgate:plugin@{version}, which is frozen in wit/frozen/{version}, but its files differ; {REMEDY}"
    );
}

#[test]
fn a_plugin_built_against_the_oldest_line_loads_describes_and_runs() {
    let home = Home::new();
    let plugins = home.dir.path().join("third-party");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        oldest_line_driver("1.0.0"),
        plugins.join("line-0-1-0-driver.wasm"),
    )
    .expect("the committed fixture (tests/fixtures/wit-lines)");
    let dir = plugins.to_str().unwrap();
    let grant = "line-0-1-0-driver=events,sandbox";

    let out = home.agentgate(&[
        "plugins",
        "inspect",
        "line-0-1-0-driver",
        "--plugin-dir",
        dir,
        "--grant",
        grant,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = info.to_string();
    assert!(text.contains("\"1.0.0\""), "describe() ran: {text}");
    assert!(text.contains("agentgate:plugin/sandbox@0.1.0"), "{text}");
    assert!(info["refused"].is_null(), "{}", info["refused"]);

    let workspace = tempfile::tempdir().unwrap();
    let spec = task_spec(
        "oldest-line",
        "left by a 0.1.0 plugin",
        &local_subprocess(
            workspace.path(),
            false,
            "60s",
            "agent:\n  driver: line-0-1-0\n",
        ),
    );
    let task = home.dir.path().join("task.yaml");
    std::fs::write(&task, spec).unwrap();
    let out = home.agentgate(&[
        "run",
        "--plugin-dir",
        dir,
        "--grant",
        grant,
        task.to_str().unwrap(),
    ]);
    let result = home.result();
    assert_eq!(result["status"], "succeeded", "{}", stderr(&out));
    assert_eq!(result["plugins"]["agent"]["name"], "line-0-1-0-driver");
    assert_eq!(result["plugins"]["agent"]["version"], "1.0.0");
    // It ran: the file it wrote through `sandbox.write-file`, and its event.
    let written = std::fs::read_to_string(workspace.path().join("line-0.1.0.txt")).unwrap();
    assert_eq!(written, "1.0.0\nleft by a 0.1.0 plugin\n");
    assert!(
        home.log("events.ndjson")
            .contains("line-0-1-0-driver 1.0.0 ran task"),
        "{}",
        home.log("events.ndjson")
    );
}

/// A component built against a line the host does not link (here `0.2.0`) is refused
/// at load with a message naming the line it was built for and the supported ones,
/// not with a linker error.
#[test]
fn a_plugin_built_against_an_unknown_line_is_refused_naming_the_supported_lines() {
    let home = Home::new();
    let plugins = home.dir.path().join("third-party");
    std::fs::create_dir(&plugins).unwrap();
    let fixture =
        repo_root().join("tests/fixtures/wit-lines/0.1.0/driver-for-unknown-line-0.2.0.wasm");
    std::fs::copy(fixture, plugins.join("line-0-2-0-driver.wasm")).unwrap();
    let out = home.agentgate(&["plugins", "list", "--plugin-dir", plugins.to_str().unwrap()]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        text.contains("it was built against agentgate:plugin@0.2.0"),
        "{text}"
    );
    assert!(
        text.contains("this host links agentgate:plugin@0.1.0"),
        "{text}"
    );
}
