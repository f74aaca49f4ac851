//! The host path policy against a TaskSpec's author who aims the sandbox at the host.
//!
//! A TaskSpec names host folders (`local` workspace paths, `fresh` destPaths, `mounts`),
//! and the agent gets whatever they hold: the container runtime's socket under
//! `/run/docker/containerd` is the host's root. Each test runs the real `agentgate`
//! binary and checks that the run is refused before anything starts (exit 2, no run
//! folder, no container, no marker from the agent), or, where the operator allowed the
//! folder, that the agent did run (its marker) and read it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support;
use crate::support::{docker_ready, shell_agent, stderr, task_spec, Home, DOCKER_TEST_IMAGE};

/// The `execution` section: `workspace` and `sandbox` bodies (YAML, unindented), then an
/// agent that leaves a marker in the workspace and prints what `script` prints.
fn execution(workspace: &str, sandbox: &str, script: &str) -> String {
    format!(
        "workspace:\n{}sandbox:\n{}{}",
        support::indent(workspace, 2),
        support::indent(sandbox, 2),
        shell_agent(&format!("touch ran\n{script}"))
    )
}

fn local(path: &Path) -> String {
    format!("source: local\npath: {}\n", path.display())
}

fn provider(name: &str) -> String {
    match name {
        "docker" => format!("provider: docker\nimage: {DOCKER_TEST_IMAGE}\nnetwork: none\n"),
        // `none` has no network of its own to cut, and says so.
        "none" => "provider: none\n".to_string(),
        other => format!("provider: {other}\nnetwork: none\n"),
    }
}

fn mounts(sources: &[&Path]) -> String {
    let mut text = "mounts:\n".to_string();
    for (i, source) in sources.iter().enumerate() {
        text.push_str(&format!(
            "  - source: {}\n    target: /m{i}\n    readonly: true\n",
            source.display()
        ));
    }
    text
}

/// Runs the TaskSpec in `home`, which the host must refuse before anything starts, and
/// returns what it said.
fn refused(home: &Home, execution: &str) -> String {
    let output = home.run_spec(&task_spec("refused", "x", execution));
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    // No run id was ever made: no run folder, nothing on the engine can carry one.
    assert!(
        !home.dir.path().join("runs").exists(),
        "a run started: {text}"
    );
    text
}

/// The bind sources of every container agentgate made that still exists.
fn agentgate_container_mounts() -> String {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            "label=io.agentgate.run-id",
            "--format",
            "{{.Mounts}}",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A temporary folder that holds a listening unix socket, as an ssh-agent's does.
struct SocketFolder {
    dir: tempfile::TempDir,
    _listener: std::os::unix::net::UnixListener,
}

impl SocketFolder {
    fn new() -> SocketFolder {
        let dir = tempfile::tempdir().unwrap();
        let listener =
            std::os::unix::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
        SocketFolder {
            dir,
            _listener: listener,
        }
    }
}

#[test]
fn a_docker_workspace_on_the_container_runtime_is_refused_before_any_container_exists() {
    if !docker_ready() {
        return;
    }
    for path in [
        "/var/run/docker/containerd",
        "/run/containerd",
        "/run/docker",
    ] {
        assert!(
            Path::new(path).exists(),
            "{path} is missing on this machine"
        );
        let home = Home::new();
        let text = refused(
            &home,
            &execution(&local(Path::new(path)), &provider("docker"), ""),
        );
        assert!(
            text.contains(&format!("spec.execution.workspace.path: `{path}`"))
                && text.contains("a system folder")
                && text.contains("no grant allows it"),
            "{path}: {text}"
        );
        assert!(!Path::new(path).join("ran").exists());
        let mounted = agentgate_container_mounts();
        assert!(
            !mounted.contains("containerd") && !mounted.contains("/run/docker"),
            "{mounted}"
        );
    }
}

#[test]
fn a_folder_holding_a_socket_is_refused_as_workspace_and_as_mount_for_docker_and_subprocess() {
    if !docker_ready() {
        return;
    }
    let sockets = SocketFolder::new();
    let workspace = tempfile::tempdir().unwrap();
    for sandbox in ["docker", "subprocess"] {
        let home = Home::new();
        let text = refused(
            &home,
            &execution(&local(sockets.dir.path()), &provider(sandbox), ""),
        );
        assert!(
            text.contains("spec.execution.workspace.path")
                && text.contains("it holds the socket `agent.sock`"),
            "{sandbox}: {text}"
        );
        let sandbox_with_mount = format!("{}{}", provider(sandbox), mounts(&[sockets.dir.path()]));
        let text = refused(
            &home,
            &execution(&local(workspace.path()), &sandbox_with_mount, ""),
        );
        assert!(
            text.contains("spec.execution.sandbox.mounts[0].source")
                && text.contains("it holds the socket `agent.sock`"),
            "{sandbox}: {text}"
        );
        // The socket itself, too.
        let socket = sockets.dir.path().join("agent.sock");
        let sandbox_with_mount = format!("{}{}", provider(sandbox), mounts(&[&socket]));
        let text = refused(
            &home,
            &execution(&local(workspace.path()), &sandbox_with_mount, ""),
        );
        assert!(text.contains("it is a socket"), "{sandbox}: {text}");
        assert!(!workspace.path().join("ran").exists());
    }
}

#[test]
fn subprocess_mounts_of_the_host_root_and_var_run_are_refused() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = format!(
        "{}{}",
        provider("subprocess"),
        mounts(&[Path::new("/"), Path::new("/var/run")])
    );
    let text = refused(
        &home,
        &execution(&local(workspace.path()), &sandbox, "cat /m0/etc/shadow"),
    );
    // Both are named, each with its field.
    assert!(
        text.contains("spec.execution.sandbox.mounts[0].source: `/` is refused"),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.execution.sandbox.mounts[1].source: `/var/run` (resolved: /run) is refused"
        ),
        "{text}"
    );
    assert!(!workspace.path().join("ran").exists());
}

#[test]
fn an_unprivileged_user_is_refused_the_same_mounts() {
    // agentgate as uid 65534, set up the way an operator gives a user agentgate.
    const NOBODY: u32 = 65534;
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    for dir in [home.path(), workspace.path()] {
        std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("agentgate");
    std::fs::copy(env!("CARGO_BIN_EXE_agentgate"), &bin).unwrap();
    let spec = home.path().join("task.yaml");
    let sandbox = format!(
        "{}{}",
        provider("subprocess"),
        mounts(&[Path::new("/"), Path::new("/var/run/docker/containerd")])
    );
    std::fs::write(
        &spec,
        task_spec(
            "nobody",
            "x",
            &execution(&local(workspace.path()), &sandbox, ""),
        ),
    )
    .unwrap();
    let output = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "--",
        ])
        .arg(&bin)
        .arg("run")
        .arg(&spec)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("AGENTGATE_HOME", home.path())
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("mounts[0].source: `/` is refused"), "{text}");
    // Refused for where it lies, even where this user cannot follow the path.
    assert!(
        text.contains(
            "mounts[1].source: `/var/run/docker/containerd` is refused: it lies in /var/run"
        ),
        "{text}"
    );
    assert!(!home.path().join("runs").exists());
    assert!(!workspace.path().join("ran").exists());
}

#[test]
fn a_local_workspace_of_the_host_root_is_refused_at_once() {
    // Refused on its path: nothing is walked, nothing runs.
    for sandbox in ["none", "subprocess"] {
        let home = Home::new();
        let text = refused(
            &home,
            &execution(&local(Path::new("/")), &provider(sandbox), ""),
        );
        assert!(
            text.contains("spec.execution.workspace.path: `/` is refused: it holds"),
            "{text}"
        );
        assert!(!Path::new("/ran").exists());
    }
}

#[test]
fn agentgate_home_and_its_ancestors_are_refused() {
    let base = tempfile::tempdir().unwrap();
    let agentgate_home = base.path().join("agentgate");
    let runs = agentgate_home.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let task = base.path().join("task.yaml");
    let run = |workspace: &Path| {
        std::fs::write(
            &task,
            task_spec(
                "home",
                "x",
                &execution(&local(workspace), &provider("none"), ""),
            ),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .arg("run")
            .arg(&task)
            .env("AGENTGATE_HOME", &agentgate_home)
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .output()
            .unwrap()
    };
    for (workspace, why) in [
        (agentgate_home.clone(), "it lies in"),
        (runs.clone(), "it lies in"),
        (base.path().to_path_buf(), "it holds"),
    ] {
        let output = run(&workspace);
        let text = stderr(&output);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {text}",
            workspace.display()
        );
        assert!(
            text.contains(why) && text.contains("AGENTGATE_HOME"),
            "{text}"
        );
        assert!(!workspace.join("ran").exists());
        assert_eq!(
            std::fs::read_dir(&runs).unwrap().count(),
            0,
            "a run started"
        );
    }
}

#[test]
fn a_symlink_in_an_allowed_folder_that_leads_to_etc_is_refused() {
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("etc");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let workspace = tempfile::tempdir().unwrap();
    for sandbox in ["subprocess", "none"] {
        let home = Home::new();
        let with_mount = format!("{}{}", provider(sandbox), mounts(&[&link]));
        let text = refused(&home, &execution(&local(workspace.path()), &with_mount, ""));
        assert!(
            text.contains("mounts[0].source") && text.contains("(resolved: /etc) is refused"),
            "{text}"
        );
        let text = refused(&home, &execution(&local(&link), &provider(sandbox), ""));
        assert!(
            text.contains("workspace.path") && text.contains("(resolved: /etc) is refused"),
            "{text}"
        );
    }
    assert!(!Path::new("/etc/ran").exists());
}

/// A folder outside the home and the temporary folder, which only an operator's list
/// can allow. Not in the checkout: a clone may itself lie below the home or `/tmp`.
fn outside_the_defaults() -> tempfile::TempDir {
    let defaults: Vec<PathBuf> = [std::env::temp_dir(), home_dir()]
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        // A home of `/` gives no default.
        .filter(|d| d != Path::new("/"))
        .collect();
    for base in ["/var/tmp", "/srv", "/opt", "/mnt"] {
        let Ok(real) = Path::new(base).canonicalize() else {
            continue;
        };
        if defaults.iter().any(|d| real.starts_with(d)) {
            continue;
        }
        if let Ok(dir) = tempfile::Builder::new()
            .prefix("agentgate-host-paths-")
            .tempdir_in(&real)
        {
            return dir;
        }
    }
    panic!(
        "no writable folder outside the home and {}",
        std::env::temp_dir().display()
    );
}

fn home_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into()))
}

#[test]
fn an_operators_list_replaces_the_defaults_and_an_allowed_mount_is_read_by_the_agent() {
    let listed = outside_the_defaults();
    std::fs::write(listed.path().join("data.txt"), "from the listed folder\n").unwrap();
    let in_temp = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let grants = format!("mounts: [{}]\n", listed.path().display());
    let mut providers = vec!["subprocess"];
    if docker_ready() {
        providers.push("docker");
    }
    for sandbox in providers {
        // Without the list, the folder is outside the default.
        let home = Home::new();
        let with_listed = format!("{}{}", provider(sandbox), mounts(&[listed.path()]));
        let text = refused(
            &home,
            &execution(&local(workspace.path()), &with_listed, ""),
        );
        assert!(
            text.contains("must lie strictly below")
                && text.contains(&format!(
                    "`mounts: [{}]`",
                    listed.path().canonicalize().unwrap().display()
                )),
            "{text}"
        );

        // With it, a temporary folder is no longer allowed...
        std::fs::write(home.dir.path().join("grants.yaml"), &grants).unwrap();
        let with_temp = format!("{}{}", provider(sandbox), mounts(&[in_temp.path()]));
        let text = refused(&home, &execution(&local(workspace.path()), &with_temp, ""));
        assert!(text.contains("lists under `mounts:`"), "{text}");

        // ...and the listed one is, and the agent reads it.
        let output = home.run_spec(&task_spec(
            "listed",
            "x",
            &execution(&local(workspace.path()), &with_listed, "cat /m0/data.txt"),
        ));
        assert!(output.status.success(), "{sandbox}: {}", stderr(&output));
        assert!(
            workspace.path().join("ran").exists(),
            "{sandbox}: the agent did not run"
        );
        assert_eq!(
            home.log("stdout.log"),
            "from the listed folder\n",
            "{sandbox}"
        );
        std::fs::remove_file(workspace.path().join("ran")).unwrap();
    }

    // `workspaces:` replaces the default for workspaces alike.
    let home = Home::new();
    let listed_workspace = outside_the_defaults();
    std::fs::write(
        home.dir.path().join("grants.yaml"),
        format!("workspaces: [{}]\n", listed_workspace.path().display()),
    )
    .unwrap();
    let text = refused(
        &home,
        &execution(&local(workspace.path()), &provider("none"), ""),
    );
    assert!(text.contains("lists under `workspaces:`"), "{text}");
    let output = home.run_spec(&task_spec(
        "listed-workspace",
        "x",
        &execution(&local(listed_workspace.path()), &provider("none"), ""),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(listed_workspace.path().join("ran").exists());
}

#[test]
fn a_fresh_dest_path_is_held_to_the_policy_too() {
    let home = Home::new();
    let text = refused(
        &home,
        &execution(
            "source: fresh\ndestPath: /etc/agentgate-fresh-project\n",
            &provider("none"),
            "",
        ),
    );
    assert!(
        text.contains(
            "spec.execution.workspace.destPath: `/etc/agentgate-fresh-project` is refused"
        ),
        "{text}"
    );
    assert!(!Path::new("/etc/agentgate-fresh-project").exists());
}

#[test]
fn validate_reports_each_refused_path_with_its_field_and_exits_2() {
    let home = Home::new();
    let sockets = SocketFolder::new();
    let missing = PathBuf::from("/no/such/agentgate/folder");
    let sandbox = format!(
        "{}{}",
        provider("subprocess"),
        mounts(&[Path::new("/"), sockets.dir.path(), &missing])
    );
    let path = home.dir.path().join("refused.yaml");
    std::fs::write(
        &path,
        task_spec(
            "refused",
            "x",
            &execution(
                &local(Path::new("/var/run/docker/containerd")),
                &sandbox,
                "",
            ),
        ),
    )
    .unwrap();
    let output = home.agentgate(&["validate", path.to_str().unwrap()]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    for needle in [
        "spec.execution.workspace.path: `/var/run/docker/containerd` (resolved: /run/docker/containerd) is refused",
        "spec.execution.sandbox.mounts[0].source: `/` is refused",
        "spec.execution.sandbox.mounts[1].source",
        "it holds the socket `agent.sock`",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // A path that does not exist here is a note: the document may be for another machine.
    assert!(
        text.contains("note: spec.execution.sandbox.mounts[2].source"),
        "{text}"
    );
    assert!(!String::from_utf8_lossy(&output.stdout).contains("ok"));

    // The same document with only the missing path is valid.
    let fine = home.dir.path().join("fine.yaml");
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        &fine,
        task_spec(
            "fine",
            "x",
            &execution(
                &local(workspace.path()),
                &format!("{}{}", provider("subprocess"), mounts(&[&missing])),
                "",
            ),
        ),
    )
    .unwrap();
    let output = home.agentgate(&["validate", fine.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn the_old_docker_mounts_grant_still_allows_what_it_named_and_says_where_it_moved() {
    let listed = outside_the_defaults();
    std::fs::write(listed.path().join("data.txt"), "old grant\n").unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let home = Home::new();
    std::fs::write(
        home.dir.path().join("grants.yaml"),
        format!("docker:\n  mounts: [{}]\n", listed.path().display()),
    )
    .unwrap();
    let with_listed = format!("{}{}", provider("subprocess"), mounts(&[listed.path()]));
    let output: Output = home.run_spec(&task_spec(
        "old-grant",
        "x",
        &execution(&local(workspace.path()), &with_listed, "cat /m0/data.txt"),
    ));
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("warning:")
            && text.contains("`docker: mounts:` is read as the top-level `mounts:`"),
        "{text}"
    );
    assert_eq!(home.log("stdout.log"), "old grant\n");
}
