//! A run says `succeeded` only when everything it promised happened: each test breaks one
//! promise with a real `agentgate run` on a real provider (none, subprocess, docker on the
//! real engine), proves the break happened, and checks the status in `result.json`, the
//! process's exit code, the registry row and what `agentgate gc` does afterwards.
//!
//! Removal is made to fail honestly: the test (root on the host, as an operator's
//! backup tool or a stuck mount would be) sets the immutable attribute (`chattr +i`) on a
//! file inside what cleanup must remove (the container's writable layer, the sandbox's
//! state folder), so the Docker engine and the file system themselves refuse; then it
//! lifts it, as an operator would, and `gc` must finish the job. A provider whose
//! `destroy` traps, refuses or hangs is the fixture `unruly-docker`
//! (tests/fixtures/plugins), whose `list-leftovers` and `reap` work.
//!
//! Kubernetes is covered by tests/all/kubernetes.rs through the same engine path.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use crate::support::{
    docker_ready, eventually, fixture_plugins, shell_agent, stderr, task_spec, Home,
};
use serde_json::Value;

const IMAGE: &str = support::DOCKER_TEST_IMAGE;

/// A file made immutable for the test; the attribute is lifted when dropped, so a
/// failing test leaves nothing the next `rm` cannot remove.
struct Pinned(PathBuf);

impl Pinned {
    fn new(path: PathBuf) -> Pinned {
        if !path.exists() {
            std::fs::write(&path, "pinned by the test\n").unwrap();
        }
        chattr("+i", &path);
        // The attribute is really there: the removal below must fail.
        let attrs = Command::new("lsattr").arg(&path).output().unwrap();
        let attrs = String::from_utf8_lossy(&attrs.stdout).to_string();
        assert!(
            attrs.split_whitespace().next().unwrap_or("").contains('i'),
            "{attrs}"
        );
        Pinned(path)
    }

    fn release(&self) {
        chattr("-i", &self.0);
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Whether this process may set the immutable attribute (root, on a file system that
/// has it). Under `CI=true` it must; elsewhere the test says loudly that it is skipped.
fn can_pin() -> bool {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, "").unwrap();
    let set = Command::new("chattr").arg("+i").arg(&probe).output();
    let ok = matches!(&set, Ok(out) if out.status.success());
    let _ = Command::new("chattr").arg("-i").arg(&probe).status();
    if ok {
        return true;
    }
    let why = match set {
        Ok(out) => stderr(&out),
        Err(e) => e.to_string(),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and `chattr +i` does not work here (run as root): {why}");
    }
    eprintln!("\n!!!!! SKIPPED: this test needs `chattr +i` (root): {why} !!!!!\n");
    false
}

fn chattr(flag: &str, path: &Path) {
    let out = Command::new("chattr").arg(flag).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "chattr {flag} {}: {}",
        path.display(),
        stderr(&out)
    );
}

/// The run's containers (any state) on the engine, by the run's label.
fn containers_of(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "-q", "--no-trunc", "--filter"])
        .arg(format!("label=io.agentgate.run-id={run_id}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Waits for the agent to write `name` in the workspace.
fn wait_for(workspace: &Path, name: &str) -> String {
    let path = workspace.join(name);
    assert!(
        eventually(120, || path.is_file()),
        "the agent never wrote {name}"
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    std::fs::read_to_string(&path).unwrap().trim().to_string()
}

/// An agent that writes `started` (with `$1` as its content), then waits until the
/// test writes `pinned` next to it.
fn waiting_agent(before: &str) -> String {
    shell_agent(&format!(
        "{before}\n\
         i=0; while [ ! -f pinned ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n\
         echo agent done"
    ))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    status.code().expect("agentgate exited, not killed")
}

/// `agentgate gc` in `home`; returns its exit code and stdout.
fn gc(home: &Home, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["gc"];
    args.extend(extra);
    let out = home.agentgate(&args);
    (
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}

#[test]
fn docker_a_container_the_engine_cannot_remove_is_an_error_and_gc_removes_it_later() {
    if !docker_ready() || !can_pin() {
        return;
    }
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let spec = task_spec(
        "unremovable",
        "leave a container behind",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: docker\n  image: {IMAGE}\n{}",
            workspace.path().display(),
            waiting_agent("hostname > started.tmp && mv started.tmp started")
        ),
    );
    let mut run = home.spawn_run(&spec);
    let hostname = wait_for(workspace.path(), "started");
    // The container's writable layer gets a file the engine cannot unlink.
    let upper = Command::new("docker")
        .args(["inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", &hostname])
        .output()
        .unwrap();
    assert!(upper.status.success(), "{}", stderr(&upper));
    let upper = PathBuf::from(String::from_utf8_lossy(&upper.stdout).trim());
    let pin = Pinned::new(upper.join("pinned-by-test"));
    std::fs::write(workspace.path().join("pinned"), "").unwrap();
    let code = exit_code(run.wait().unwrap());

    let result = home.result();
    let run_id = result["runId"].as_str().unwrap().to_string();
    let error = result["error"].as_str().unwrap_or_default().to_string();
    println!(
        "docker unremovable container: exit {code}, status {}, error: {error}",
        result["status"]
    );
    // The agent succeeded; cleanup did not.
    assert_eq!(result["agent"]["success"], true, "{result:#}");
    assert_eq!(result["status"], "error", "{result:#}");
    assert_eq!(code, 3);
    // The leftover is real, and named.
    let left = containers_of(&run_id);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(&hostname), "{left:?} vs {hostname}");
    assert!(
        error.contains("destroying the sandbox")
            && error.contains("agentgate gc")
            && error.contains(&left[0][..12]),
        "{error}"
    );
    let row = home.tracked_run(&run_id);
    assert_eq!(row["state"], "cleanup-failed", "{row:#}");
    assert_eq!(row["status"], "error", "{row:#}");
    // `sandboxes` lists it without --all: it needs attention.
    let listed = home.agentgate(&["sandboxes"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(table.contains("cleanup-failed"), "{table}");

    // gc retries it although its owner finished, and fails while it is still pinned.
    let (code, out, err) = gc(&home, &[]);
    println!("gc while pinned: exit {code}: {out}{err}");
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "could not reap all that the cleanup of finished run {run_id} left"
        )),
        "{out}"
    );
    assert_eq!(home.tracked_run(&run_id)["state"], "cleanup-failed");
    assert_eq!(containers_of(&run_id).len(), 1);

    // Once removable, the next gc removes it and marks the run finished.
    pin.release();
    let (code, out, err) = gc(&home, &[]);
    println!("gc once removable: exit {code}: {out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "reaped what the cleanup of finished run {run_id} left"
        )) && out.contains("marked finished"),
        "{out}"
    );
    assert!(containers_of(&run_id).is_empty());
    let row = home.tracked_run(&run_id);
    assert_eq!(row["state"], "finished", "{row:#}");
    assert_eq!(row["status"], "error", "{row:#}");
    // The result the run wrote stays.
    assert_eq!(home.result()["status"], "error");
    assert_eq!(home.result()["error"], result["error"]);
    let (code, out, _) = gc(&home, &[]);
    assert_eq!(code, 0);
    assert!(out.contains("no orphans"), "{out}");
}

/// Runs the `unruly-docker` fixture whose destroy does `how`.
fn unruly_run(how: &str) -> (Home, i32, Value) {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let spec = task_spec(
        "unruly",
        "a provider whose destroy misbehaves",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: unruly-docker\n  image: {IMAGE}\n  options:\n    destroy: {how}\n{}",
            workspace.path().display(),
            shell_agent("echo work > made.txt")
        ),
    );
    let task = home.dir.path().join("task.yaml");
    std::fs::write(&task, spec).unwrap();
    let plugins = fixture_plugins();
    let out = home.agentgate(&[
        "run",
        "--plugin-dir",
        plugins.to_str().unwrap(),
        "--grant",
        &format!("unruly-docker=events,docker,docker:image={IMAGE}"),
        task.to_str().unwrap(),
    ]);
    let code = exit_code(out.status);
    let result = home.result();
    assert!(
        result["sandbox"]["id"].is_string(),
        "no sandbox was made: {}\n{result:#}",
        stderr(&out)
    );
    (home, code, result)
}

#[test]
fn docker_a_destroy_that_traps_refuses_or_hangs_is_reaped_through_a_fresh_instance() {
    if !docker_ready() {
        return;
    }
    for (how, said) in [
        ("trap", "trapped in destroy"),
        ("refuse", "unruly-docker refuses to remove"),
        ("hang", "did not finish destroy within"),
    ] {
        let started = std::time::Instant::now();
        let (home, code, result) = unruly_run(how);
        let run_id = result["runId"].as_str().unwrap();
        let sandbox = result["sandbox"]["id"].as_str().unwrap();
        let error = result["error"].as_str().unwrap_or_default();
        println!(
            "destroy {how}: exit {code}, status {}, {} s, error: {error}",
            result["status"],
            started.elapsed().as_secs()
        );
        assert_eq!(result["agent"]["success"], true, "{result:#}");
        // Bounded: the hanging destroy is given up after 30 s.
        assert!(started.elapsed().as_secs() < 75, "{how}");
        // The destroy really misbehaved, and the fresh instance removed the container
        // the run made.
        assert!(error.contains(said), "{how}: {error}");
        assert!(
            error.contains("reaped through a fresh instance of provider unruly-docker")
                && error.contains(&format!("it removed {sandbox}"))
                && error.contains("nothing of the run is left"),
            "{how}: {error}"
        );
        assert!(containers_of(run_id).is_empty(), "{how}");
        // Nothing is left, but destroy did not complete: not a success.
        assert_eq!(result["status"], "error", "{how}");
        assert_eq!(code, 3, "{how}");
        let row = home.tracked_run(run_id);
        assert_eq!(row["state"], "finished", "{how}: {row:#}");
        assert_eq!(row["sandbox"]["state"], "reaped", "{how}: {row:#}");
        let (code, out, _) = gc(&home, &[]);
        assert_eq!(code, 0);
        assert!(out.contains("no orphans"), "{out}");
    }
}

#[test]
fn subprocess_a_state_folder_that_cannot_be_removed_is_an_error_and_gc_removes_it_later() {
    if !can_pin() {
        return;
    }
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let spec = task_spec(
        "stuck-state",
        "leave a state folder behind",
        &support::local_subprocess(
            workspace.path(),
            false,
            "120s",
            &waiting_agent("echo secret-ish > \"$HOME/pin-me\" && touch started"),
        ),
    );
    let mut run = home.spawn_run(&spec);
    wait_for(workspace.path(), "started");
    let running: Vec<Value> = home.tracked_runs();
    assert_eq!(running.len(), 1);
    let run_id = running[0]["runId"].as_str().unwrap().to_string();
    let state = PathBuf::from(running[0]["sandboxState"].as_str().unwrap());
    let pin = Pinned::new(state.join("pin-me"));
    std::fs::write(workspace.path().join("pinned"), "").unwrap();
    let code = exit_code(run.wait().unwrap());

    let result = home.result();
    let error = result["error"].as_str().unwrap_or_default().to_string();
    println!(
        "subprocess stuck state: exit {code}, status {}, error: {error}",
        result["status"]
    );
    assert_eq!(result["agent"]["success"], true, "{result:#}");
    assert!(
        state.join("pin-me").exists(),
        "the state folder was removed"
    );
    assert!(
        error.contains(&format!("removing the sandbox state {}", state.display())),
        "{error}"
    );
    assert_eq!(result["status"], "error");
    assert_eq!(code, 3);
    assert_eq!(home.tracked_run(&run_id)["state"], "cleanup-failed");

    let (code, out, err) = gc(&home, &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(state.exists());
    pin.release();
    let (code, out, err) = gc(&home, &[]);
    println!("gc once removable: exit {code}: {out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&state.display().to_string()), "{out}");
    assert!(!state.exists(), "gc left {}", state.display());
    let row = home.tracked_run(&run_id);
    assert_eq!(row["state"], "finished", "{row:#}");
    assert_eq!(home.result()["status"], "error");
    let (_, out, _) = gc(&home, &[]);
    assert!(out.contains("no orphans"), "{out}");
}

#[test]
fn none_a_workspace_root_the_agent_replaced_leaves_an_incomplete_record_and_an_error() {
    let home = Home::new();
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("README"), "original\n").unwrap();
    // The agent (it is the user with `none`) moves the workspace away and puts another
    // folder at its name: the changes it made are no longer where the record looks.
    let spec = task_spec(
        "replaced-root",
        "replace the workspace",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
            root.display(),
            shell_agent(
                "echo changed > README && cd .. && mv ws ws.moved && mkdir ws && echo decoy > ws/README"
            )
        ),
    );
    let out = home.run_spec(&spec);
    let code = exit_code(out.status);
    let result = home.result();
    let error = result["error"].as_str().unwrap_or_default();
    println!(
        "none replaced root: exit {code}, status {}, error: {error}",
        result["status"]
    );
    // The attack acted.
    assert_eq!(
        std::fs::read_to_string(parent.path().join("ws.moved/README")).unwrap(),
        "changed\n"
    );
    assert_eq!(result["agent"]["success"], true, "{result:#}");
    assert!(error.contains("another entry now has its name"), "{error}");
    assert_eq!(result["status"], "error");
    assert_eq!(code, 3);
    // Nothing is left to clean up: the row is finished.
    let row = home.tracked_run(result["runId"].as_str().unwrap());
    assert_eq!(row["state"], "finished", "{row:#}");
}
