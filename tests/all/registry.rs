//! The sandbox registry and `agentgate gc`, against real `agentgate` processes that
//! are killed with SIGKILL in the middle of a run.
//!
//! Each test has its own AGENTGATE_HOME. Agents are shell scripts run by the `command`
//! driver; each sleeps with a unique argument so the test can find its processes by
//! host pid. The docker test needs a running engine: under `CI=true` its absence is a
//! failure, elsewhere the test says loudly that it was skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support;
use crate::support::git_server::{self, git};
use crate::support::{
    eventually, local_subprocess, processes_with_arg, shell_agent, stderr, task_spec, Home,
};

/// Starts `agentgate run` on `yaml` (written to its own file) without waiting.
fn spawn(home: &Home, file: &str, yaml: &str) -> Child {
    let path = home.dir.path().join(file);
    std::fs::write(&path, yaml).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting agentgate")
}

/// `agentgate sandboxes --all --json`, by run id.
fn tracked(home: &Home) -> Vec<serde_json::Value> {
    home.tracked_runs()
}

fn state_of(home: &Home, run_id: &str) -> String {
    tracked(home)
        .iter()
        .find(|row| row["runId"] == run_id)
        .map(|row| row["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("run {run_id} is not tracked"))
}

/// How many of `home`'s runs the registry lists as running.
fn running(home: &Home) -> usize {
    tracked(home)
        .iter()
        .filter(|row| row["state"] == "running" && row["sandbox"]["state"] == "live")
        .count()
}

/// The orphans a `gc --json` of `home` reaped, by run id. Other tests' objects found
/// by label may be reaped too: they are not counted.
fn gc_reaped(home: &Home) -> Vec<String> {
    let output = home.agentgate(&["gc", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    report["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["runId"].as_str().unwrap().to_string())
        .collect()
}

/// The cgroup directories process `pid` is in (one per v1 hierarchy, one in v2), as
/// host paths under /sys/fs/cgroup.
fn cgroup_dirs_of(pid: i32) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut dirs = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if !path.contains("/agentgate/") {
            continue;
        }
        let mount = if controllers.is_empty() {
            "unified".to_string()
        } else {
            controllers.trim_start_matches("name=").to_string()
        };
        for base in [
            format!("/sys/fs/cgroup/{mount}"),
            "/sys/fs/cgroup".to_string(),
        ] {
            let dir = PathBuf::from(format!("{base}{path}"));
            if dir.is_dir() {
                dirs.push(dir);
                break;
            }
        }
    }
    dirs
}

fn result_of(folder: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(folder.join("result.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn gc_after_kill_9_reaps_the_subprocess_tree_its_cgroup_and_folders_and_marks_it_crashed() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let agent = shell_agent(
        "setsid sleep 302.101 &\n\
         (setsid sh -c 'sleep 302.102 & exit' &)\n\
         touch started\n\
         sleep 302.103",
    );
    let mut child = spawn(
        &home,
        "task.yaml",
        &task_spec(
            "crash",
            "x",
            &local_subprocess(workspace.path(), false, "10m", &agent),
        ),
    );
    assert!(
        eventually(180, || running(&home) == 1
            && processes_with_arg("302.103").len() == 1
            && processes_with_arg("302.102").len() == 1
            && processes_with_arg("302.101").len() == 1),
        "the agent never started"
    );
    let cgroups = cgroup_dirs_of(processes_with_arg("302.103")[0]);
    assert!(!cgroups.is_empty(), "the agent is in no sandbox cgroup");
    let folder = home.run_folder();
    let run_id = folder.file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(state_of(&home, &run_id), "running");
    // The sandbox's private state is a folder of its own outside the home.
    let state = sandbox_state_of(&home, &run_id);
    assert!(state.is_dir(), "{}", state.display());
    assert!(!state.starts_with(home.dir.path()), "{}", state.display());

    support::sigkill(&mut child);
    // Nothing has cleaned up yet: the registry says the run lost its owner.
    assert_eq!(state_of(&home, &run_id), "orphaned");
    assert!(!folder.join("result.json").exists());

    let dry = home.agentgate(&["gc", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains(&format!("would reap run {run_id}")),
        "{}",
        String::from_utf8_lossy(&dry.stdout)
    );
    assert_eq!(state_of(&home, &run_id), "orphaned");

    assert_eq!(gc_reaped(&home), std::slice::from_ref(&run_id));
    for marker in ["302.101", "302.102", "302.103"] {
        assert!(
            eventually(5, || processes_with_arg(marker).is_empty()),
            "sleep {marker} survived gc"
        );
    }
    for dir in &cgroups {
        assert!(!dir.exists(), "{} is left", dir.display());
    }
    assert!(!state.exists(), "the sandbox's HOME is left");
    let result = result_of(&folder);
    assert_eq!(result["status"], "crashed", "{result:#}");
    assert_eq!(result["runId"], run_id.as_str());
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("died before the run ended"),
        "{result:#}"
    );
    assert_eq!(state_of(&home, &run_id), "crashed");
    // The local workspace is the user's folder: untouched, with what the agent did.
    assert!(workspace.path().join("started").exists());
    assert_eq!(
        result["workspace"]["root"],
        workspace.path().canonicalize().unwrap().to_str().unwrap()
    );
    // A second gc finds nothing more to do.
    assert!(gc_reaped(&home).is_empty());
}

/// The sandbox's private state folder the registry recorded for `run_id`.
fn sandbox_state_of(home: &Home, run_id: &str) -> PathBuf {
    let row = tracked(home)
        .into_iter()
        .find(|row| row["runId"] == run_id)
        .unwrap_or_else(|| panic!("no run {run_id}"));
    PathBuf::from(
        row["sandboxState"]
            .as_str()
            .expect("a recorded state folder"),
    )
}

/// The run of `home` named `name`: its id and folder.
fn run_named(home: &Home, name: &str) -> (String, PathBuf) {
    let row = tracked(home)
        .into_iter()
        .find(|row| row["name"] == name)
        .unwrap_or_else(|| panic!("no run named {name}"));
    (
        row["runId"].as_str().unwrap().to_string(),
        PathBuf::from(row["folder"].as_str().unwrap()),
    )
}

/// A run killed with SIGKILL while its agent sleeps, after it did its work.
struct Crashed {
    run_id: String,
    folder: PathBuf,
    marker: String,
    cgroups: Vec<PathBuf>,
    /// The sandbox's private state folder.
    state: PathBuf,
}

/// Starts a run named `name` with the `workspace` section (YAML, unindented) in a
/// subprocess sandbox, whose agent writes `work.txt` and then sleeps with `marker`;
/// once it sleeps, kills agentgate with SIGKILL.
fn crash_after_work(home: &Home, name: &str, workspace: &str, marker: &str) -> Crashed {
    let agent = shell_agent(&format!(
        "echo 'precious work' > work.txt\nsleep {marker} &\nsetsid sleep {marker} &\nwait"
    ));
    let execution =
        format!("{workspace}sandbox:\n  provider: subprocess\n  network: none\n{agent}");
    let mut child = spawn(
        home,
        &format!("{name}.yaml"),
        &task_spec(name, "x", &execution),
    );
    assert!(
        eventually(180, || processes_with_arg(marker).len() == 2),
        "the agent of {name} never slept"
    );
    let cgroups = cgroup_dirs_of(processes_with_arg(marker)[0]);
    assert!(!cgroups.is_empty(), "the agent is in no sandbox cgroup");
    let (run_id, folder) = run_named(home, name);
    assert!(folder.join("workspace/work.txt").is_file());
    let state = sandbox_state_of(home, &run_id);
    assert!(state.is_dir(), "{}", state.display());
    support::sigkill(&mut child);
    assert_eq!(state_of(home, &run_id), "orphaned");
    Crashed {
        run_id,
        folder,
        marker: marker.to_string(),
        cgroups,
        state,
    }
}

/// gc (or `run` at start-up) cleaned up after `run`: its processes, cgroups and the
/// sandbox's state are gone; its workspace, with the agent's work, and its records
/// are kept, and its result says it crashed and where the workspace is.
fn assert_reaped_and_work_kept(home: &Home, run: &Crashed, source: &str) -> serde_json::Value {
    assert!(
        eventually(5, || processes_with_arg(&run.marker).is_empty()),
        "the agent outlived gc: {:?}",
        processes_with_arg(&run.marker)
    );
    for dir in &run.cgroups {
        assert!(!dir.exists(), "{} is left", dir.display());
    }
    assert!(!run.state.exists(), "the sandbox's HOME is left");
    let workspace = run.folder.join("workspace");
    assert_eq!(
        std::fs::read_to_string(workspace.join("work.txt")).unwrap(),
        "precious work\n",
        "the agent's work is gone"
    );
    assert!(run.folder.join("events.ndjson").is_file());
    assert!(run.folder.join("stdout.log").is_file());
    let result = result_of(&run.folder);
    assert_eq!(result["status"], "crashed", "{result:#}");
    assert_eq!(result["workspace"]["source"], source, "{result:#}");
    assert_eq!(
        result["workspace"]["root"],
        workspace.canonicalize().unwrap().to_str().unwrap(),
        "{result:#}"
    );
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("is kept, with the agent's work"),
        "{result:#}"
    );
    assert_eq!(state_of(home, &run.run_id), "crashed");
    result
}

/// A `local` workspace at `workspace`, no sandbox, and `script` as the agent.
fn local_unsandboxed(workspace: &Path, script: &str) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
        workspace.display(),
        shell_agent(script)
    )
}

/// A quick run in `home` that does nothing but reap at start-up; what it said.
fn run_something(home: &Home) -> String {
    let workspace = tempfile::tempdir().unwrap();
    let execution = local_unsandboxed(workspace.path(), "true");
    let output = home.run_spec(&task_spec("after-the-crash", "x", &execution));
    assert!(output.status.success(), "{}", stderr(&output));
    stderr(&output)
}

#[test]
fn gc_and_run_keep_a_crashed_runs_fresh_workspace() {
    let home = Home::new();
    let fresh = "workspace:\n  source: fresh\n  template: empty\n";

    let first = crash_after_work(&home, "fresh-gc", fresh, "303.601");
    let output = home.agentgate(&["gc"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("kept its workspace"), "{said}");
    assert_reaped_and_work_kept(&home, &first, "fresh");

    let second = crash_after_work(&home, "fresh-start", fresh, "303.602");
    let said = run_something(&home);
    assert!(
        said.contains(&format!(
            "cleaned up after crashed run {}; kept its workspace",
            second.run_id
        )),
        "{said}"
    );
    assert_reaped_and_work_kept(&home, &second, "fresh");
}

#[test]
fn gc_and_run_keep_a_crashed_runs_git_clone() {
    if !git_server::git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = git_server::make_repo(root.path(), "app");
    let daemon = git_server::Daemon::start(root.path());
    let home = Home::new();
    let clone = format!(
        "workspace:\n  source: git\n  url: {}\n  ref: main\n",
        daemon.url("app")
    );

    for (name, marker, reap) in [("git-gc", "303.611", true), ("git-start", "303.612", false)] {
        let run = crash_after_work(&home, name, &clone, marker);
        if reap {
            assert_eq!(gc_reaped(&home), std::slice::from_ref(&run.run_id));
        } else {
            run_something(&home);
        }
        let result = assert_reaped_and_work_kept(&home, &run, "git");
        assert_eq!(result["workspace"]["commit"], repo.commits[2].as_str());
        // The clone is whole: its history and the agent's uncommitted work.
        let workspace = run.folder.join("workspace");
        assert_eq!(git(&workspace, &["rev-parse", "HEAD"]), repo.commits[2]);
        assert!(git(&workspace, &["status", "--porcelain"]).contains("work.txt"));
    }
}

#[test]
fn runs_refused_for_a_damaged_registry_leave_no_run_folder() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let execution = local_unsandboxed(workspace.path(), "touch ran");
    std::fs::write(
        home.dir.path().join("registry.db"),
        "this registry was overwritten\n".repeat(500),
    )
    .unwrap();
    for _ in 0..3 {
        let output = home.run_spec(&task_spec("refused", "x", &execution));
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("registry.db is damaged") && message.contains("move it aside"),
            "{message}"
        );
    }
    assert!(!workspace.path().join("ran").exists(), "the agent ran");
    let runs = home.dir.path().join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "stray run folders: {left:?}");
    // gc says the same.
    let output = home.agentgate(&["gc"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("move it aside"),
        "{}",
        stderr(&output)
    );

    // Moved aside as told, the next run works.
    std::fs::rename(
        home.dir.path().join("registry.db"),
        home.dir.path().join("registry.db.damaged"),
    )
    .unwrap();
    let output = home.run_spec(&task_spec("accepted", "x", &execution));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(workspace.path().join("ran").exists());
}

#[test]
fn gc_beside_live_runs_leaves_them_alone_and_reaps_only_the_dead_one() {
    let home = Home::new();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let waiting = |marker: &str| {
        shell_agent(&format!(
            "sleep {marker} &\nwhile [ ! -e stop ]; do sleep 0.05; done\necho done"
        ))
    };
    let mut first = spawn(
        &home,
        "a.yaml",
        &task_spec(
            "live-a",
            "x",
            &local_subprocess(a.path(), false, "10m", &waiting("302.201")),
        ),
    );
    let mut second = spawn(
        &home,
        "b.yaml",
        &task_spec(
            "live-b",
            "x",
            &local_subprocess(b.path(), false, "10m", &waiting("302.202")),
        ),
    );
    assert!(eventually(180, || running(&home) == 2
        && processes_with_arg("302.201").len() == 1
        && processes_with_arg("302.202").len() == 1));

    let output = home.agentgate(&["gc", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["live"].as_array().unwrap().len(), 2, "{report:#}");
    assert!(
        report["orphans"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert_eq!(
        processes_with_arg("302.201").len(),
        1,
        "gc killed a live run"
    );
    assert_eq!(
        processes_with_arg("302.202").len(),
        1,
        "gc killed a live run"
    );

    // The first owner dies; gc reaps its run and still not the second.
    support::sigkill(&mut first);
    assert_eq!(gc_reaped(&home).len(), 1);
    assert!(eventually(5, || processes_with_arg("302.201").is_empty()));
    assert_eq!(
        processes_with_arg("302.202").len(),
        1,
        "gc killed a live run"
    );

    std::fs::write(b.path().join("stop"), "").unwrap();
    assert_eq!(second.wait().unwrap().code(), Some(0));
    let mut statuses: Vec<String> = support::run_folders(home.dir.path())
        .iter()
        .map(|folder| result_of(folder)["status"].as_str().unwrap().to_string())
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["crashed", "succeeded"]);
    let mut states: Vec<String> = tracked(&home)
        .iter()
        .map(|row| row["state"].as_str().unwrap().to_string())
        .collect();
    states.sort();
    assert_eq!(states, ["crashed", "finished"]);
}

#[test]
fn sixteen_parallel_runs_each_leave_one_intact_row() {
    let home = Home::new();
    let workspaces: Vec<tempfile::TempDir> =
        (0..16).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<Child> = workspaces
        .iter()
        .enumerate()
        .map(|(i, workspace)| {
            let execution = format!(
                "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{}",
                workspace.path().display(),
                shell_agent(&format!("echo run {i} > out.txt"))
            );
            spawn(
                &home,
                &format!("task{i}.yaml"),
                &task_spec(&format!("parallel-{i}"), "x", &execution),
            )
        })
        .collect();
    for mut child in children {
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
    let rows = tracked(&home);
    assert_eq!(rows.len(), 16, "{rows:#?}");
    let mut names: Vec<String> = rows
        .iter()
        .map(|row| {
            assert_eq!(row["state"], "finished", "{row:#}");
            assert_eq!(row["status"], "succeeded", "{row:#}");
            assert_eq!(row["sandbox"]["provider"], "none", "{row:#}");
            assert_eq!(row["sandbox"]["state"], "destroyed", "{row:#}");
            let folder = PathBuf::from(row["folder"].as_str().unwrap());
            assert_eq!(result_of(&folder)["runId"], row["runId"]);
            row["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..16).map(|i| format!("parallel-{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    // The table lists them too, like `docker ps`.
    let output = home.agentgate(&["sandboxes", "--all"]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.starts_with("RUN ID"), "{table}");
    assert_eq!(table.lines().count(), 17, "{table}");
}

#[test]
fn the_result_schema_is_printed_and_versioned() {
    let home = Home::new();
    let output = home.agentgate(&["schema", "--result"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(schema["$id"].as_str().unwrap().ends_with("result-v3.json"));
    let properties = &schema["properties"];
    for field in [
        "version",
        "runId",
        "status",
        "durationMs",
        "phases",
        "modifiedFiles",
        "sandbox",
        "leftOut",
    ] {
        assert!(
            properties.get(field).is_some(),
            "{field} missing: {schema:#}"
        );
    }
    let text = output.stdout.iter().map(|&b| b as char).collect::<String>();
    assert!(
        text.contains("crashed"),
        "the crashed status is not documented"
    );
}

#[test]
fn gc_after_kill_9_removes_the_docker_container() {
    if !support::docker_ready() {
        return;
    }
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: docker\n  image: {}\n{}",
        workspace.path().display(),
        support::DOCKER_TEST_IMAGE,
        shell_agent("sleep 3021")
    );
    let mut child = spawn(
        &home,
        "task.yaml",
        &task_spec("crash-docker", "x", &execution),
    );
    assert!(
        eventually(180, || running(&home) == 1
            && !processes_with_arg("3021").is_empty()),
        "the agent never started"
    );
    let folder = home.run_folder();
    let run_id = folder.file_name().unwrap().to_str().unwrap().to_string();
    let containers = || {
        let out = Command::new("docker")
            .args(["ps", "-a", "-q", "--filter"])
            .arg(format!("label=io.agentgate.run-id={run_id}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(!containers().is_empty());
    let state = sandbox_state_of(&home, &run_id);
    assert!(state.is_dir(), "{}", state.display());
    support::sigkill(&mut child);
    assert!(!containers().is_empty(), "the container went with its host");

    // The gc of another home on the same engine: its registry does not know the run and
    // the run's owner is dead, but the container is not that home's to remove.
    let other = Home::new();
    let output = other.agentgate(&["gc", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["unknown"], serde_json::json!([]), "{report}");
    assert!(
        !containers().is_empty(),
        "another home's gc removed the container"
    );

    assert_eq!(gc_reaped(&home), std::slice::from_ref(&run_id));
    assert!(containers().is_empty(), "gc left the container");
    assert!(eventually(10, || processes_with_arg("3021").is_empty()));
    assert!(!state.exists(), "the sandbox's state folder is left");
    assert_eq!(result_of(&folder)["status"], "crashed");
    assert_eq!(state_of(&home, &run_id), "crashed");
}

#[test]
fn git_change_sets_are_exact_and_the_patch_applies_to_a_clone() {
    let origin = tempfile::tempdir().unwrap();
    let o = origin.path();
    git(o, &["init", "-q", "-b", "main"]);
    let lines: String = (0..40)
        .map(|i| format!("line {i} of a file that moves\n"))
        .collect();
    std::fs::write(o.join("moves.txt"), &lines).unwrap();
    std::fs::write(o.join("edit.txt"), "old\n").unwrap();
    std::fs::write(o.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(o.join("same.txt"), "unchanged\n").unwrap();
    std::fs::write(o.join(".gitignore"), "build/\n").unwrap();
    std::fs::create_dir(o.join("build")).unwrap();
    git(o, &["add", "-A"]);
    git(o, &["commit", "-q", "-m", "base"]);

    let clones = tempfile::tempdir().unwrap();
    let workspace = clones.path().join("workspace");
    git(
        clones.path(),
        &["clone", "-q", o.to_str().unwrap(), "workspace"],
    );
    std::fs::create_dir(workspace.join("build")).unwrap();
    std::fs::write(workspace.join("build/kept.o"), "object").unwrap();
    std::fs::write(workspace.join("build/stale.o"), "object").unwrap();

    let agent = shell_agent(
        "printf 'new\\n' > edit.txt\n\
         rm gone.txt\n\
         mv moves.txt moved.txt\n\
         printf 'hello\\n' > added.txt\n\
         printf 'bin\\000ary\\001' > blob.bin\n\
         printf 'touched' > same.txt && printf 'unchanged\\n' > same.txt\n\
         printf 'rebuilt' > build/kept.o\n\
         rm build/stale.o\n\
         printf 'fresh' > build/new.o",
    );
    let home = Home::new();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n{agent}",
        workspace.display()
    );
    let output = home.run_spec(&task_spec("git-changes", "x", &execution));
    assert!(output.status.success(), "{}", stderr(&output));
    let result = home.result();
    assert_eq!(result["changesFrom"], "git", "{result:#}");
    let summary = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} {}{}{}",
                    c["change"].as_str().unwrap(),
                    c["path"].as_str().unwrap(),
                    c["from"]
                        .as_str()
                        .map_or(String::new(), |f| format!(" from {f}")),
                    if c["binary"] == true { " binary" } else { "" }
                )
            })
            .collect()
    };
    assert_eq!(
        summary(&result["modifiedFiles"]),
        [
            "added added.txt",
            "added blob.bin binary",
            "modified edit.txt",
            "deleted gone.txt",
            "renamed moved.txt from moves.txt",
        ],
        "{result:#}"
    );
    assert_eq!(
        summary(&result["ignoredFiles"]),
        [
            "modified build/kept.o",
            "added build/new.o",
            "deleted build/stale.o"
        ],
        "{result:#}"
    );

    // The patch takes a fresh clone of the same commit to the workspace's state.
    let patch = home.run_folder().join("changes.patch");
    let fresh = clones.path().join("fresh");
    git(
        clones.path(),
        &["clone", "-q", o.to_str().unwrap(), "fresh"],
    );
    git(&fresh, &["apply", "--check", patch.to_str().unwrap()]);
    git(&fresh, &["apply", patch.to_str().unwrap()]);
    let diff = Command::new("diff")
        .args(["-r", "--exclude=.git", "--exclude=build"])
        .arg(&workspace)
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "the patched clone differs: {}",
        String::from_utf8_lossy(&diff.stdout)
    );
}
