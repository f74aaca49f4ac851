//! The hostile-plugin suite: plugins in Rust and in Python that reach beyond the scope
//! their operator granted, or attack the host's resources, run by the real `agentgate`
//! binary against real parts (Docker, git and GitHub stand-ins on 127.0.0.1, local
//! HTTP servers, real processes and files).
//!
//! Each attack is played next to an honest run started at the same moment, which must
//! succeed, and the hostile run's `agentgate` process is measured: its own peak RSS
//! (`support::peak_rss`) must stay under [`HOST_MEMORY_BOUND`] while the plugin asks for 4 GiB or
//! hands the host hundreds of MiB.
//!
//! - A scope attack must be refused with an error naming the plugin, the call, the
//!   argument and the grants.yaml line that would allow it, and a `denied` event; the
//!   plugin's own `attempt: CALL` event (emitted right before the call) proves that it
//!   really made the call, and the side effect is checked absent on the host.
//! - A resource attack must be stopped with an error naming the limit that stopped it.
//!
//! The Rust plugins are the fixtures `overreaching-driver`, `hostile-driver` and
//! `pushing-workspace` (tests/fixtures/plugins). The Python one, `hostile-py`
//! (tests/fixtures/polyglot/hostile-py), is built once per test binary with the
//! componentize-py that `examples/plugins/build.sh` installs under target/.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::support;
use crate::support::git_server::{git_available, make_repo, HttpGit, Recorder};
use crate::support::github_api;
use crate::support::peak_rss;
use crate::support::{
    docker_ready, fixture_plugins, local_subprocess, shell_agent, task_spec, Home,
};
use serde_json::Value;

/// The most memory the hostile run's `agentgate` may use at its peak.
///
/// A plugin's linear memory is capped at 256 MiB (`PluginLimits::memory_bytes`); the
/// host may hold that, one copy of the largest value it lifted out of it (< 256 MiB),
/// and its own working set (wasmtime, a compiled Python component, tokio: ~200 MiB).
/// The attacks ask for 4 GiB or return 192 MiB, so a host that copied what it was
/// handed again, or let the plugin grow, would cross this line.
const HOST_MEMORY_BOUND: u64 = 1 << 30;

/// A token distinctive enough to grep for.
const TOKEN: &str = "tok-hostile-5d1e-never-written";

const DRIVER: &str = "overreaching-driver";
/// Every capability `overreaching-driver` imports, each with its narrowest scope.
const DRIVER_CAPS: &str = "events,sandbox,process,docker,github,http";

/// How a hostile run ended, and the most memory its `agentgate` used.
struct Finished {
    /// Exit code of `agentgate`.
    code: i32,
    /// stderr of `agentgate` and the run's result.json.
    said: String,
    peak_rss: u64,
}

/// `agentgate` with `args` in `home`, and `env` on top of the test environment.
fn agentgate(home: &Home, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .args(args)
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env_remove("GITHUB_TOKEN")
        .current_dir(support::repo_root());
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// `agentgate run` of `spec` in `home`, with a plugin directory and grant flags.
fn run_command(
    home: &Home,
    spec: &str,
    plugin_dir: &Path,
    grants: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let task = home.dir.path().join("task.yaml");
    std::fs::write(&task, spec).unwrap();
    let mut args = vec!["run", "--plugin-dir", plugin_dir.to_str().unwrap()];
    for grant in grants {
        args.extend(["--grant", grant]);
    }
    args.push(task.to_str().unwrap());
    agentgate(home, &args, env)
}

/// Runs `hostile` (in `home`) while an honest run of its own starts beside it, checks
/// that the honest run succeeded, and returns how the hostile one ended with its peak
/// RSS (its own, see [`peak_rss`]), printed.
fn beside_an_honest_run(home: &Home, hostile: Command) -> Finished {
    let honest_home = Home::new();
    let honest_workspace = tempfile::tempdir().unwrap();
    let honest_spec = task_spec(
        "honest",
        "work beside a hostile plugin",
        &local_subprocess(
            honest_workspace.path(),
            false,
            "120s",
            &shell_agent("echo HONEST > honest.txt"),
        ),
    );
    let honest_task = honest_home.dir.path().join("task.yaml");
    std::fs::write(&honest_task, honest_spec).unwrap();
    let mut honest = agentgate(&honest_home, &["run", honest_task.to_str().unwrap()], &[]);
    honest.stdout(Stdio::null()).stderr(Stdio::piped());
    let honest = std::thread::spawn(move || honest.output().expect("running the honest run"));

    let stderr_path = home.dir.path().join("agentgate.stderr");
    let (mut hostile, report) = peak_rss::measured(&hostile);
    let child = hostile
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("starting the hostile run");
    let ended = report.wait(child);
    let code = ended.code.unwrap_or_else(|| 128 + ended.signal.unwrap());
    let peak_rss = ended.peak_rss;
    let said = format!(
        "{}\n{}",
        std::fs::read_to_string(&stderr_path).unwrap(),
        result_text(home)
    );
    let error = serde_json::from_str::<Value>(&result_text(home))
        .ok()
        .and_then(|r| r["error"].as_str().map(str::to_string))
        .unwrap_or_default();
    eprintln!(
        "hostile run: exit {code}, peak RSS of its agentgate {} MiB (bound {} MiB): {}",
        peak_rss >> 20,
        HOST_MEMORY_BOUND >> 20,
        &error[..error.floor_char_boundary(400)]
    );
    assert!(
        peak_rss < HOST_MEMORY_BOUND,
        "the hostile run's agentgate peaked at {} MiB: {said}",
        peak_rss >> 20
    );

    let honest = honest.join().unwrap();
    let honest_said = format!(
        "{}\n{}",
        support::stderr(&honest),
        result_text(&honest_home)
    );
    assert!(
        honest.status.success(),
        "the honest run failed: {honest_said}"
    );
    assert_eq!(
        std::fs::read_to_string(honest_workspace.path().join("honest.txt")).unwrap(),
        "HONEST\n",
        "{honest_said}"
    );
    Finished {
        code,
        said,
        peak_rss,
    }
}

fn result_text(home: &Home) -> String {
    std::fs::read_dir(home.dir.path().join("runs"))
        .ok()
        .and_then(|mut runs| runs.next())
        .and_then(|run| std::fs::read_to_string(run.ok()?.path().join("result.json")).ok())
        .unwrap_or_default()
}

fn events(home: &Home) -> Vec<Value> {
    home.log("events.ndjson")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Checks that `plugin` announced `call` (its `attempt:` event, emitted right before
/// the call), so a refusal below is a refusal of a call that was really made.
fn assert_attempted(home: &Home, plugin: &str, call: &str) {
    let prefix = format!("attempt: {call}");
    assert!(
        events(home).iter().any(|e| e["type"] == "log"
            && e["source"] == plugin
            && e["message"].as_str().unwrap_or("").starts_with(&prefix)),
        "{plugin} never attempted {call}: {}",
        home.log("events.ndjson")
    );
}

/// Checks the refusal of `call` by `plugin`: the run failed with a message naming the
/// plugin, the call, `argument` and the grants.yaml line `allow`, and a `denied` event
/// of the run says the same. Returns the denied events of `call`.
fn assert_denied(
    home: &Home,
    finished: &Finished,
    plugin: &str,
    call: &str,
    argument: &str,
    allow: &str,
) -> Vec<Value> {
    let said = &finished.said;
    assert!(!said.contains("ESCAPED"), "the attack got through: {said}");
    assert!(
        said.contains(&format!("{call} by plugin {plugin}"))
            && said.contains(argument)
            && said.contains(allow),
        "the error must name {plugin}, {call}, {argument} and {allow}: {said}"
    );
    let denied: Vec<Value> = support::denied_events(home)
        .into_iter()
        .filter(|e| e["call"] == call)
        .collect();
    assert!(!denied.is_empty(), "no denied event for {call}: {said}");
    for event in &denied {
        assert_eq!(event["source"], plugin, "{event}");
        assert!(
            event["argument"].as_str().unwrap().contains(argument),
            "{event}"
        );
        assert_eq!(event["allow"], allow, "{event}");
    }
    denied
}

/// A spec running agent driver `driver` with `options` (YAML under `options:`) in a
/// `none` sandbox on `workspace`.
fn driver_spec(driver: &str, options: &str, workspace: &Path, timeout: &str) -> String {
    task_spec(
        "hostile",
        "attack the host",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: none\n  resources:\n    timeout: {timeout}\nagent:\n  driver: {driver}\n  options:\n{}",
            workspace.display(),
            support::indent(options, 4)
        ),
    )
}

/// Runs `overreaching-driver` with `options`, granted `grants` (flags), beside an
/// honest run.
fn overreach(home: &Home, options: &str, grants: &[&str], env: &[(&str, &str)]) -> Finished {
    let workspace = tempfile::tempdir().unwrap();
    let spec = driver_spec("overreach", options, workspace.path(), "60s");
    beside_an_honest_run(
        home,
        run_command(home, &spec, &fixture_plugins(), grants, env),
    )
}

fn driver_grant(extra: &str) -> String {
    format!("{DRIVER}={DRIVER_CAPS}{extra}")
}

/// A folder on the host with `marker` not yet in it.
fn host_folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    (dir, marker)
}

// ---- scope attacks both languages play ------------------------------------------

/// A hostile driver that plays the attacks of both languages: its name, and how to run
/// it with `options` on `workspace`, granted `extra` grant items on top of its
/// narrowest scopes, beside an honest run.
struct Attacker<'a> {
    plugin: &'static str,
    #[allow(clippy::type_complexity)]
    run: Box<dyn Fn(&str, &Path, &str) -> (Home, Finished) + 'a>,
}

impl Attacker<'_> {
    /// Runs the attack in `options` on a workspace of its own; checks that the run
    /// failed and that the plugin made `call`.
    fn attack(&self, options: &str, extra: &str, call: &str) -> (Home, Finished) {
        let workspace = tempfile::tempdir().unwrap();
        self.attack_on(options, workspace.path(), extra, call)
    }

    fn attack_on(
        &self,
        options: &str,
        workspace: &Path,
        extra: &str,
        call: &str,
    ) -> (Home, Finished) {
        let (home, finished) = (self.run)(options, workspace, extra);
        assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
        assert_attempted(&home, self.plugin, call);
        (home, finished)
    }
}

fn rust_attacker() -> Attacker<'static> {
    Attacker {
        plugin: DRIVER,
        run: Box::new(|options, workspace, extra| {
            let home = Home::new();
            let spec = driver_spec("overreach", options, workspace, "60s");
            let grant = driver_grant(extra);
            let command = run_command(&home, &spec, &fixture_plugins(), &[&grant], &[]);
            let finished = beside_an_honest_run(&home, command);
            (home, finished)
        }),
    }
}

/// `process.spawn` unsealed, without `unsealed`: a marker the process would write on
/// the host is absent.
fn play_unsealed_spawn(attacker: &Attacker) {
    let plugin = attacker.plugin;
    let (_dir, marker) = host_folder();
    let options = format!("attack: unsealed-spawn\ntarget: {}\n", marker.display());
    let (home, finished) = attacker.attack(&options, "", "process.spawn");
    assert_denied(
        &home,
        &finished,
        plugin,
        "process.spawn",
        "/bin/sh",
        &format!("plugins: {{{plugin}: {{process: {{unsealed: true}}}}}}"),
    );
    assert!(!marker.exists(), "the unsealed process ran on the host");
}

/// `process.spawn` of `/bin/touch` with `unsealed` but `programs: [/usr/bin/true]`.
fn play_program_off_list(attacker: &Attacker) {
    let plugin = attacker.plugin;
    let (_dir, marker) = host_folder();
    let options = format!("attack: program-off-list\ntarget: {}\n", marker.display());
    let extra = ",process:unsealed,process:program=/usr/bin/true";
    let (home, finished) = attacker.attack(&options, extra, "process.spawn");
    let denied = assert_denied(
        &home,
        &finished,
        plugin,
        "process.spawn",
        "/bin/touch",
        &format!(
            "plugins: {{{plugin}: {{process: {{unsealed: true, programs: [\"/bin/touch\"]}}}}}}"
        ),
    );
    assert!(finished.said.contains("/usr/bin/true"), "{}", finished.said);
    assert_eq!(denied.len(), 1);
    assert!(!marker.exists(), "the program off the list ran on the host");
}

/// An HTTP request to a local server off the allowlist (another is on it): the server
/// sees nothing.
fn play_http_off_list(attacker: &Attacker) {
    let plugin = attacker.plugin;
    let server = untouchable_server();
    let allowed = untouchable_server();
    let authority = format!("127.0.0.1:{}", server.port());
    let options = format!("attack: http-off-list\ntarget: {authority}\n");
    let extra = format!(",http:127.0.0.1:{}", allowed.port());
    let (home, finished) = attacker.attack(&options, &extra, "http.request");
    assert_denied(
        &home,
        &finished,
        plugin,
        "http.request",
        &authority,
        &format!("plugins: {{{plugin}: {{http: {{hosts: [\"{authority}\"]}}}}}}"),
    );
    assert!(server.requests().is_empty(), "the server was reached");
    assert!(allowed.requests().is_empty());
}

/// `sandbox.read-file` and `write-file` on host paths: absolute, `..`, through a
/// symlink in the workspace.
fn play_sandbox_paths(attacker: &Attacker) {
    let trap = PathTrap::new();
    let (home, finished) = attacker.attack_on(
        &trap.options(),
        trap.workspace.path(),
        "",
        "sandbox.write-file",
    );
    assert!(!finished.said.contains("ESCAPED"), "{}", finished.said);
    assert!(
        finished.said.contains(attacker.plugin) && finished.said.contains("/etc/shadow"),
        "{}",
        finished.said
    );
    trap.assert_untouched(&home, attacker.plugin, &finished.said);
}

// ---- scope attacks, Rust -------------------------------------------------------

#[test]
fn an_unsealed_spawn_without_unsealed_is_refused() {
    play_unsealed_spawn(&rust_attacker());
}

#[test]
fn a_program_off_the_list_is_refused() {
    play_program_off_list(&rust_attacker());
}

#[test]
fn a_host_off_the_http_allowlist_sees_no_request() {
    play_http_off_list(&rust_attacker());
}

#[test]
fn host_paths_through_sandbox_file_calls_are_refused() {
    play_sandbox_paths(&rust_attacker());
}

#[test]
fn an_image_off_the_list_is_neither_pulled_nor_run() {
    if !docker_ready() {
        return;
    }
    let home = Home::new();
    let image = "agentgate-hostile/off-the-list:1";
    let options = format!("attack: image-off-list\ntarget: {image}\n");
    let grant = driver_grant(",docker:image=agentgate-test/allowed:*");
    let finished = overreach(&home, &options, &[&grant], &[]);
    assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
    assert_attempted(&home, DRIVER, "docker.pull-image");
    assert_attempted(&home, DRIVER, "docker.run-container");
    let allow = format!("plugins: {{{DRIVER}: {{docker: {{images: [\"{image}\"]}}}}}}");
    for call in ["docker.pull-image", "docker.run-container"] {
        assert_denied(&home, &finished, DRIVER, call, image, &allow);
    }
    assert!(finished.said.contains("agentgate-test/allowed:*"));
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        assert!(out.status.success(), "{}", support::stderr(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(docker(&["images", "-q", image]), "", "the image was pulled");
    assert_eq!(
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.agentgate.hostile={image}")
        ]),
        "",
        "a container was created"
    );
}

#[test]
fn a_repository_creation_without_create_is_refused() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let owner = root.path().join("octo-user");
    std::fs::create_dir_all(&owner).unwrap();
    make_repo(&owner, "app");
    let git = HttpGit::start(root.path(), Some(TOKEN));
    let api = github_api::GithubApi::start(TOKEN, root.path(), git.port);
    api.add_repo(github_api::USER, "app", false);
    let evil = format!("{}/evil", github_api::USER);

    let home = Home::new();
    let options = format!("attack: github-create\ntarget: {evil}\n");
    let grant = driver_grant(&format!(",github:repo={}/*", github_api::USER));
    let api_url = api.url();
    let finished = overreach(
        &home,
        &options,
        &[&grant],
        &[("GITHUB_API_URL", &api_url), ("GITHUB_TOKEN", TOKEN)],
    );
    assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
    assert_attempted(&home, DRIVER, "github.create-repository");
    assert_denied(
        &home,
        &finished,
        DRIVER,
        "github.create-repository",
        &evil,
        &format!("plugins: {{{DRIVER}: {{github: {{create: true}}}}}}"),
    );
    assert!(
        !api.requests().iter().any(|(r, _)| r.starts_with("POST")),
        "{:?}",
        api.requests()
    );
    assert!(!api.has_repo(&evil));
}

/// A server that records requests and must see none.
fn untouchable_server() -> support::http::Server {
    support::http::Server::start(|_| support::http::full(200, "text/plain", "reached"))
}

/// A workspace holding `escape`, a symlink to a host folder with a secret, the way an
/// agent would leave one for a driver to follow; and the paths a hostile driver tries.
struct PathTrap {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl PathTrap {
    fn new() -> PathTrap {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "host secret\n").unwrap();
        let workspace = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), workspace.path().join("escape")).unwrap();
        PathTrap { workspace, outside }
    }

    /// `/etc/shadow`, the secret by absolute path, by `..`, and through the symlink,
    /// and a new file in the host folder by each way.
    fn paths(&self) -> Vec<String> {
        let outside = self.outside.path();
        let name = outside.file_name().unwrap().to_str().unwrap();
        vec![
            "/etc/shadow".into(),
            outside.join("secret.txt").display().to_string(),
            format!("../{name}/secret.txt"),
            "escape/secret.txt".into(),
            format!("sub/../../{name}/planted.txt"),
            "escape/planted.txt".into(),
            outside.join("planted.txt").display().to_string(),
        ]
    }

    fn options(&self) -> String {
        let mut options = String::from("attack: sandbox-paths\npaths:\n");
        for path in self.paths() {
            options.push_str(&format!("  - {path:?}\n"));
        }
        options
    }

    /// Nothing was written outside, nor left in the workspace, and the secret is intact.
    fn assert_untouched(&self, home: &Home, plugin: &str, said: &str) {
        assert!(!said.contains("host secret"), "{said}");
        let outside: Vec<_> = std::fs::read_dir(self.outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, ["secret.txt"], "{said}");
        assert_eq!(
            std::fs::read_to_string(self.outside.path().join("secret.txt")).unwrap(),
            "host secret\n"
        );
        let denied = support::denied_events(home);
        for path in self.paths() {
            for call in ["sandbox.read-file", "sandbox.write-file"] {
                assert!(
                    denied.iter().any(|e| e["source"] == plugin
                        && e["call"] == call
                        && e["argument"].as_str().unwrap().contains(&path)),
                    "no denied event for {call} {path}: {denied:?}"
                );
            }
        }
        // A symlink swapped in for the workspace root's own files is not followed
        // either: the workspace still holds only the link.
        let inside: Vec<_> = std::fs::read_dir(self.workspace.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(inside, ["escape"], "{said}");
    }
}

// ---- scope attacks through git, Rust (`pushing-workspace`) --------------------------

/// Runs `pushing-workspace`, cloning `url` and pushing `agent/work` to `push_url`,
/// granted `grant`, beside an honest run.
fn push_back(home: &Home, url: &str, push_url: Option<&str>, grant: &str) -> Finished {
    let push = push_url
        .map(|u| format!("    pushUrl: {u}\n"))
        .unwrap_or_default();
    let execution = format!(
        "workspace:\n  source: push-back\n  options:\n    url: {url}\n    branch: agent/work\n    tokenEnv: PUSH_TOKEN\n{push}sandbox:\n  provider: subprocess\n  resources:\n    timeout: 60s\n{}",
        shell_agent("echo AGENT-RAN\necho work > WORK.md\n")
    );
    let spec = task_spec("push-back", "work on it", &execution);
    beside_an_honest_run(
        home,
        run_command(
            home,
            &spec,
            &fixture_plugins(),
            &[grant],
            &[("PUSH_TOKEN", TOKEN)],
        ),
    )
}

/// The agent ran (the clone went through), then the push to `remote` at `release` (as
/// the workspace is handed back) was refused: the run's recorded error, though the
/// agent's work itself succeeded, and a `denied` event.
fn assert_push_refused(home: &Home, finished: &Finished, remote: &str, allow: &str) {
    assert!(
        home.log("stdout.log").contains("AGENT-RAN"),
        "{}",
        finished.said
    );
    let result = home.result();
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("release failed") && e.contains("git.push")),
        "{result}"
    );
    // The work was not delivered: the run did not succeed, and its exit code says so.
    assert_eq!(result["status"], "error", "{result}");
    assert_ne!(finished.code, 0, "{}", finished.said);
    assert_denied(
        home,
        finished,
        "pushing-workspace",
        "git.push",
        remote,
        allow,
    );
}

fn has_branch(bare: &Path, branch: &str) -> bool {
    Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn a_push_without_push_is_refused() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "app");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let url = server.url("app");
    let home = Home::new();
    let grant = format!("pushing-workspace=events,git:remote={url}");
    let finished = push_back(&home, &url, None, &grant);
    assert_push_refused(
        &home,
        &finished,
        &url,
        "plugins: {pushing-workspace: {git: {push: true}}}",
    );
    assert!(!has_branch(&root.path().join("app.git"), "agent/work"));
}

#[test]
fn a_push_or_clone_to_a_remote_off_the_list_reaches_nothing() {
    if !git_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "app");
    let server = HttpGit::start(root.path(), Some(TOKEN));
    let url = server.url("app");
    let attacker = Recorder::start();
    let attacker_url = format!("{}app.git", attacker.url());

    // Push allowed, but only to the listed remote: the push to another is refused.
    let home = Home::new();
    let grant = format!("pushing-workspace=events,git:remote={url},git:push");
    let finished = push_back(&home, &url, Some(&attacker_url), &grant);
    let allow =
        format!("plugins: {{pushing-workspace: {{git: {{remotes: [\"{attacker_url}\"]}}}}}}");
    assert_push_refused(&home, &finished, &attacker_url, &allow);

    // A clone from a remote off the list.
    let home = Home::new();
    let finished = push_back(&home, &attacker_url, None, &grant);
    assert!(
        !home.log("stdout.log").contains("AGENT-RAN"),
        "{}",
        finished.said
    );
    assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
    assert_denied(
        &home,
        &finished,
        "pushing-workspace",
        "git.clone",
        &attacker_url,
        &allow,
    );
    assert_eq!(
        attacker.seen(),
        Vec::<String>::new(),
        "the remote was reached"
    );
    assert!(!has_branch(&root.path().join("app.git"), "agent/work"));
}

// ---- resource attacks, Rust ---------------------------------------------------------

/// Runs `hostile-driver` with `behavior` (and `extra` options) beside an honest run.
fn misbehave(home: &Home, behavior: &str, extra: &str, timeout: &str) -> Finished {
    let workspace = tempfile::tempdir().unwrap();
    let options = format!("behavior: {behavior}\n{extra}");
    let spec = driver_spec("hostile", &options, workspace.path(), timeout);
    beside_an_honest_run(home, run_command(home, &spec, &fixture_plugins(), &[], &[]))
}

#[test]
fn a_busy_loop_is_stopped_by_the_cpu_slice() {
    let home = Home::new();
    let finished = misbehave(&home, "loop", "", "10m");
    assert_ne!(finished.code, 0);
    assert!(
        finished.said.contains(
            "plugin hostile-driver trapped in run: computed for more than 10s without returning to the host"
        ),
        "{}",
        finished.said
    );
}

#[test]
fn growing_to_4_gib_is_stopped_by_the_memory_cap() {
    let home = Home::new();
    let finished = misbehave(&home, "oom", "", "10m");
    assert_ne!(finished.code, 0);
    assert!(
        !finished.said.contains("nothing stopped it"),
        "{}",
        finished.said
    );
    assert!(
        finished
            .said
            .contains("plugin hostile-driver trapped in run: memory limit reached"),
        "{}",
        finished.said
    );
}

#[test]
fn unbounded_recursion_is_stopped_by_the_stack_limit() {
    let home = Home::new();
    let finished = misbehave(&home, "recurse", "", "10m");
    assert_ne!(finished.code, 0);
    assert!(
        finished
            .said
            .contains("plugin hostile-driver trapped in run")
            && finished.said.contains("call stack exhausted"),
        "{}",
        finished.said
    );
}

/// `text` for a failure message: its lines cut to 300 bytes, and not more than 100 of
/// them (a flood's output can be large).
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(100)..]
        .iter()
        .map(|l| &l[..l.floor_char_boundary(300)])
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_giant_outcome_is_refused_without_blowing_host_memory() {
    // 192 MiB: more than wasmtime lets a call copy out of a guest at once.
    let home = Home::new();
    let finished = misbehave(&home, "giant", "giantMiB: 192\n", "10m");
    assert_ne!(finished.code, 0, "a 192 MiB summary was accepted");
    assert!(
        finished
            .said
            .contains("plugin hostile-driver trapped in run")
            && finished.said.contains("too much data is being copied"),
        "{}",
        tail(&finished.said)
    );
    let result_size = std::fs::metadata(home.run_folder().join("result.json"))
        .unwrap()
        .len();
    eprintln!(
        "192 MiB outcome: result.json {result_size} bytes, peak RSS {} MiB",
        finished.peak_rss >> 20
    );
    assert!(result_size < 1 << 20, "result.json is {result_size} bytes");

    // 8 MiB: copied, then refused by the host's own bound on a plugin's text.
    let home = Home::new();
    let finished = misbehave(&home, "giant", "giantMiB: 8\n", "10m");
    assert_ne!(finished.code, 0, "an 8 MiB summary was accepted");
    assert!(
        finished.said.contains(&format!(
            "plugin hostile-driver returned a summary of {} bytes from run",
            8 << 20
        )),
        "{}",
        tail(&finished.said)
    );
    let result_size = std::fs::metadata(home.run_folder().join("result.json"))
        .unwrap()
        .len();
    eprintln!(
        "8 MiB outcome: result.json {result_size} bytes, peak RSS {} MiB",
        finished.peak_rss >> 20
    );
    assert!(result_size < 1 << 20, "result.json is {result_size} bytes");
}

#[test]
fn a_giant_error_message_is_cut() {
    let home = Home::new();
    let finished = misbehave(&home, "giant-error", "giantMiB: 8\n", "10m");
    assert_ne!(finished.code, 0);
    assert!(
        finished
            .said
            .contains("plugin hostile-driver: run failed: GGGG")
            && finished
                .said
                .contains(&format!("…[{} bytes cut]", (8 << 20) - (64 << 10))),
        "{}",
        tail(&finished.said)
    );
    let result_size = std::fs::metadata(home.run_folder().join("result.json"))
        .unwrap()
        .len();
    let stderr_size = std::fs::metadata(home.dir.path().join("agentgate.stderr"))
        .unwrap()
        .len();
    eprintln!(
        "8 MiB error: result.json {result_size} bytes, stderr {stderr_size} bytes, peak RSS {} MiB",
        finished.peak_rss >> 20
    );
    assert!(result_size < 1 << 20, "result.json is {result_size} bytes");
    assert!(stderr_size < 1 << 20, "stderr is {stderr_size} bytes");
}

#[test]
fn an_event_flood_is_bounded_and_stopped_by_the_run_timeout() {
    let home = Home::new();
    let workspace = tempfile::tempdir().unwrap();
    let spec = driver_spec("overreach", "attack: flood\n", workspace.path(), "15s");
    let finished = beside_an_honest_run(
        &home,
        run_command(&home, &spec, &fixture_plugins(), &[&driver_grant("")], &[]),
    );
    assert_ne!(finished.code, 0);
    assert!(
        finished
            .said
            .contains(&format!("plugin {DRIVER} did not finish run within"))
            && home.result()["status"] == "timedOut",
        "{}",
        tail(&finished.said)
    );
    let size = |path: PathBuf| std::fs::metadata(path).unwrap().len();
    let events_size = size(home.run_folder().join("events.ndjson"));
    let stderr_size = size(home.dir.path().join("agentgate.stderr"));
    eprintln!(
        "event flood: events.ndjson {} MiB, agentgate's stderr {} MiB, peak RSS {} MiB",
        events_size >> 20,
        stderr_size >> 20,
        finished.peak_rss >> 20
    );
    // The source's budget (64 MiB of events) and the host's own events.
    assert!(
        events_size < 66 << 20,
        "events.ndjson grew to {events_size} bytes"
    );
    assert!(stderr_size < 66 << 20, "stderr grew to {stderr_size} bytes");
    assert!(
        events(&home).iter().any(|e| e["source"] == "host"
            && e["message"].as_str().is_some_and(
                |m| m.starts_with(&format!("{DRIVER} exceeded")) && m.contains("dropped")
            )),
        "no event says the flood was cut"
    );
}

// ---- the Python plugin ----------------------------------------------------------------

const PY: &str = "hostile-py";
/// What `hostile-py`'s world imports, each with its narrowest scope.
const PY_CAPS: &str = "events,sandbox,process,http";

struct PythonBuilt {
    /// A plugin folder holding only `hostile-py.wasm`.
    dir: PathBuf,
    /// A compile cache holding it, for each test's home to start from.
    cache: PathBuf,
}

/// Builds `hostile-py` with the componentize-py of examples/plugins/build.sh, and
/// warms a compile cache with it; `None` (after a loud message) without Python's venv
/// outside CI.
fn python_built() -> Option<&'static PythonBuilt> {
    static BUILT: OnceLock<Option<PythonBuilt>> = OnceLock::new();
    BUILT.get_or_init(build_python).as_ref()
}

fn build_python() -> Option<PythonBuilt> {
    let root = support::repo_root();
    let have = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have(&["python3", "-m", "venv", "--help"]) || !have(&["npm", "--version"]) {
        let message = "the Python plugin toolchain needs python3-venv, nodejs and npm";
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{message}");
        }
        eprintln!("\n*** SKIPPING the Python hostile plugin: {message} ***\n");
        return None;
    }
    // Installs the pinned componentize-py (and builds the examples, if out of date).
    let status = Command::new("bash")
        .arg(root.join("examples/plugins/build.sh"))
        .arg(root.join("target/polyglot-plugins"))
        .status()
        .expect("running examples/plugins/build.sh");
    assert!(status.success(), "examples/plugins/build.sh failed");
    let tools = std::env::var_os("AGENTGATE_POLYGLOT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/polyglot-tools"));
    let componentize = tools.join("venv/bin/componentize-py");

    // The fixture's world, with wit/ as the package agentgate:plugin and wit/deps flat
    // beside it.
    let source = root.join("tests/fixtures/polyglot/hostile-py");
    let wit = tempfile::tempdir().unwrap();
    let package = wit.path().join("deps/agentgate-plugin");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::copy(source.join("hostile.wit"), wit.path().join("hostile.wit")).unwrap();
    for (from, to) in [
        (root.join("wit"), package),
        (root.join("wit/deps"), wit.path().join("deps")),
    ] {
        for entry in std::fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "wit") {
                std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    let dir = root.join("target/hostile-py");
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = dir.join("hostile-py.wasm");
    let out = Command::new(&componentize)
        .arg("-d")
        .arg(wit.path())
        .args(["-w", "hostile-py", "componentize", "-p"])
        .arg(&source)
        .args(["app", "-o"])
        .arg(&wasm)
        .output()
        .expect("running componentize-py");
    assert!(
        out.status.success(),
        "componentize-py failed: {}",
        support::stderr(&out)
    );

    let warm = root.join("target/hostile-py-home");
    let grant = format!("{PY}={PY_CAPS}");
    let out = Home::new().agentgate(&[
        "plugins",
        "list",
        "--home",
        warm.to_str().unwrap(),
        "--plugin-dir",
        dir.to_str().unwrap(),
        "--grant",
        &grant,
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    Some(PythonBuilt {
        dir,
        cache: warm.join("cache/components"),
    })
}

/// A home whose compile cache already holds `hostile-py`.
fn python_home(built: &PythonBuilt) -> Home {
    let home = Home::new();
    let cache = home.dir.path().join("cache/components");
    std::fs::create_dir_all(&cache).unwrap();
    // The cache refuses a directory others may write to.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in std::fs::read_dir(&built.cache).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), cache.join(entry.file_name())).unwrap();
    }
    home
}

/// Runs `hostile-py` with `options` on `workspace`, granted `extra` on top of its
/// narrowest scopes, beside an honest run.
fn python_attack(
    built: &PythonBuilt,
    home: &Home,
    options: &str,
    workspace: &Path,
    extra: &str,
    timeout: &str,
) -> Finished {
    let spec = driver_spec(PY, options, workspace, timeout);
    let grant = format!("{PY}={PY_CAPS}{extra}");
    beside_an_honest_run(home, run_command(home, &spec, &built.dir, &[&grant], &[]))
}

fn python_attacker(built: &PythonBuilt) -> Attacker<'_> {
    Attacker {
        plugin: PY,
        run: Box::new(move |options, workspace, extra| {
            let home = python_home(built);
            let finished = python_attack(built, &home, options, workspace, extra, "60s");
            (home, finished)
        }),
    }
}

#[test]
fn python_plugin_unsealed_spawn_is_refused() {
    if let Some(built) = python_built() {
        play_unsealed_spawn(&python_attacker(built));
    }
}

#[test]
fn python_plugin_program_off_the_list_is_refused() {
    if let Some(built) = python_built() {
        play_program_off_list(&python_attacker(built));
    }
}

#[test]
fn python_plugin_host_off_the_http_allowlist_sees_no_request() {
    if let Some(built) = python_built() {
        play_http_off_list(&python_attacker(built));
    }
}

#[test]
fn python_plugin_host_paths_through_sandbox_file_calls_are_refused() {
    if let Some(built) = python_built() {
        play_sandbox_paths(&python_attacker(built));
    }
}

#[test]
fn python_plugin_loop_and_memory_attacks_are_stopped() {
    let Some(built) = python_built() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();

    let home = python_home(built);
    let finished = python_attack(built, &home, "attack: loop\n", workspace.path(), "", "10m");
    assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
    assert!(
        finished.said.contains(&format!(
            "plugin {PY} trapped in run: computed for more than 10s without returning to the host"
        )),
        "{}",
        finished.said
    );

    let home = python_home(built);
    let finished = python_attack(
        built,
        &home,
        "attack: memory\n",
        workspace.path(),
        "",
        "10m",
    );
    assert_ne!(finished.code, 0, "the run succeeded: {}", finished.said);
    assert!(!finished.said.contains("ESCAPED"), "{}", finished.said);
    assert!(
        finished
            .said
            .contains(&format!("plugin {PY} trapped in run: memory limit reached")),
        "{}",
        finished.said
    );
}
