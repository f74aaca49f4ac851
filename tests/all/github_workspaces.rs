//! `workspace.source: github` (with `fork`) and `github-new`, end to end.
//!
//! GitHub is not reachable here: `support/github_api.rs` stands in for its REST API
//! (documented response shapes, rate-limit headers, asynchronous forks) and hands out
//! clone URLs of a real `git http-backend` on 127.0.0.1 that asks for the token like a
//! private GitHub repository does. The host finds the API through `GITHUB_API_URL`, as
//! it would a GitHub Enterprise server.

use std::process::{Command, Output};
use std::sync::Arc;

use crate::support;
use crate::support::git_server::{git, git_available, make_repo, HttpGit};
use crate::support::github_api::{GithubApi, ORG, OTHER_USER, USER};
use crate::support::{shell_agent, stderr, task_spec, Home};
use serde_json::json;

const TOKEN: &str = "ghp_test0000secret0000token";

/// The API stand-in and the git server behind it, with `upstream/app` (public) and
/// `upstream/template` (a template) already there.
struct Github {
    api: Arc<GithubApi>,
    _git: HttpGit,
    _root: tempfile::TempDir,
}

fn github() -> Github {
    let root = tempfile::tempdir().unwrap();
    let owner = root.path().join("upstream");
    std::fs::create_dir_all(&owner).unwrap();
    make_repo(&owner, "app");
    make_repo(&owner, "template");
    let git = HttpGit::start(root.path(), Some(TOKEN));
    let api = GithubApi::start(TOKEN, root.path(), git.port);
    api.add_repo("upstream", "app", false);
    api.add_repo("upstream", "template", false);
    Github {
        api,
        _git: git,
        _root: root,
    }
}

/// Runs a spec whose workspace is `workspace` (YAML under `workspace:`) with the API at
/// `api` and `token` as `GITHUB_TOKEN`.
fn run(home: &Home, api: &GithubApi, workspace: &str, token: Option<&str>) -> Output {
    run_args(home, api, workspace, token, &[])
}

/// [`run`] with more arguments of `agentgate` (`--plugin-dir`, `--grant`).
fn run_args(
    home: &Home,
    api: &GithubApi,
    workspace: &str,
    token: Option<&str>,
    args: &[&str],
) -> Output {
    let execution = format!(
        "workspace:\n{}sandbox:\n  provider: none\n{}",
        support::indent(workspace, 2),
        shell_agent("cat README.md")
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("gh", "work", &execution)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command
        .args(args)
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env("GITHUB_API_URL", api.url());
    match token {
        Some(token) => command.env("GITHUB_TOKEN", token),
        None => command.env_remove("GITHUB_TOKEN"),
    };
    command.output().expect("running agentgate")
}

/// The token appears in no file of the home (run folder, clone, logs, events, result).
fn assert_token_nowhere(home: &Home, output: &Output) {
    let mut stack = vec![home.dir.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                assert!(
                    !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
                    "the token is in {}",
                    path.display()
                );
            }
        }
    }
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(output)
    );
    assert!(!out.contains(TOKEN));
}

#[test]
fn a_repository_is_cloned_at_a_ref_with_the_hosts_token() {
    if !git_available() {
        return;
    }
    let gh = github();
    let home = Home::new();
    let output = run(
        &home,
        &gh.api,
        "source: github\nowner: upstream\nrepo: app\nref: feature\n",
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let clone = home.run_folder().join("workspace");
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "second\n"
    );
    let result = home.result();
    assert_eq!(result["workspace"]["source"], "github");
    assert_eq!(
        result["workspace"]["commit"],
        git(&clone, &["rev-parse", "HEAD"])
    );
    assert!(result["workspace"]["description"]
        .as_str()
        .unwrap()
        .contains("upstream/app at feature"));
    assert_token_nowhere(&home, &output);
}

#[test]
fn a_fork_is_waited_for_then_cloned() {
    if !git_available() {
        return;
    }
    let gh = github();
    let home = Home::new();
    let output = run(
        &home,
        &gh.api,
        "source: github\nowner: upstream\nrepo: app\nfork: true\n",
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(gh.api.has_repo(&format!("{USER}/app")));
    let requests = gh.api.requests();
    assert!(
        requests
            .iter()
            .any(|(r, _)| r == "POST /repos/upstream/app/forks"),
        "{requests:?}"
    );
    // The stand-in answers 404 for the fork's branch twice, as GitHub does while copying.
    let polls = requests
        .iter()
        .filter(|(r, _)| r == &format!("GET /repos/{USER}/app/branches/main"))
        .count();
    assert_eq!(polls, 3, "{requests:?}");
    let clone = home.run_folder().join("workspace");
    assert!(git(&clone, &["remote", "get-url", "origin"]).ends_with(&format!("/{USER}/app.git")));
    let events = home.log("events.ndjson");
    assert!(events.contains("waiting for GitHub to copy"), "{events}");
    assert!(home.result()["workspace"]["description"]
        .as_str()
        .unwrap()
        .contains("fork of upstream/app"));
    assert_token_nowhere(&home, &output);
}

#[test]
fn new_repositories_for_the_user_an_org_and_from_a_template() {
    if !git_available() {
        return;
    }
    let gh = github();

    let home = Home::new();
    let output = run(
        &home,
        &gh.api,
        "source: github-new\nrepoName: mine\ndescription: made by a test\n",
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let (route, body) = gh
        .api
        .requests()
        .into_iter()
        .find(|(r, _)| r.starts_with("POST"))
        .unwrap();
    assert_eq!(route, "POST /user/repos");
    assert_eq!(
        body["private"], true,
        "private unless said otherwise: {body}"
    );
    assert_eq!(body["description"], "made by a test");
    assert_eq!(
        std::fs::read_to_string(home.run_folder().join("workspace/README.md")).unwrap(),
        "# mine\n"
    );

    let home = Home::new();
    let output = run(
        &home,
        &gh.api,
        &format!("source: github-new\nowner: {ORG}\nrepoName: team\nprivate: false\n"),
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let (route, body) = gh
        .api
        .requests()
        .into_iter()
        .rfind(|(r, _)| r.starts_with("POST"))
        .unwrap();
    assert_eq!(route, format!("POST /orgs/{ORG}/repos"));
    assert_eq!(body["private"], false);
    assert!(gh.api.has_repo(&format!("{ORG}/team")));

    let home = Home::new();
    let output = run(
        &home,
        &gh.api,
        &format!(
            "source: github-new\nowner: {ORG}\nrepoName: from-tpl\ntemplate: upstream/template\n"
        ),
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let (route, body) = gh
        .api
        .requests()
        .into_iter()
        .rfind(|(r, _)| r.starts_with("POST"))
        .unwrap();
    assert_eq!(route, "POST /repos/upstream/template/generate");
    assert_eq!(body["owner"], ORG);
    assert_eq!(body["name"], "from-tpl");
    let clone = home.run_folder().join("workspace");
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "third\n"
    );
    assert_eq!(git(&clone, &["rev-list", "--count", "HEAD"]), "1");
    assert_token_nowhere(&home, &output);

    // Another user's account is refused, naming the field.
    let output = run(
        &Home::new(),
        &gh.api,
        &format!("source: github-new\nowner: {OTHER_USER}\nrepoName: x\n"),
        Some(TOKEN),
    );
    let err = stderr(&output);
    assert!(
        !output.status.success() && err.contains(OTHER_USER) && err.contains("owner"),
        "{err}"
    );
}

#[test]
fn api_failures_name_the_repository_and_the_fix() {
    if !git_available() {
        return;
    }
    let gh = github();
    let github = "source: github\nowner: upstream\nrepo: app\n";

    // 401: a token GitHub does not know.
    let output = run(&Home::new(), &gh.api, github, Some("ghp_wrong"));
    let err = stderr(&output);
    assert!(
        err.contains("upstream/app") && err.contains("401") && err.contains("GITHUB_TOKEN"),
        "{err}"
    );
    assert!(!err.contains("ghp_wrong"), "{err}");

    // No token at all, for something that needs one.
    let output = run(
        &Home::new(),
        &gh.api,
        "source: github-new\nrepoName: x\n",
        None,
    );
    let err = stderr(&output);
    assert!(err.contains("GITHUB_TOKEN is not set"), "{err}");

    // 403 without a spent rate limit: a missing permission.
    gh.api.force_next(
        403,
        &[],
        json!({"message": "Resource not accessible by integration"}),
    );
    let err = stderr(&run(&Home::new(), &gh.api, github, Some(TOKEN)));
    assert!(
        err.contains("upstream/app")
            && err.contains("forbids")
            && err.contains("Resource not accessible"),
        "{err}"
    );

    // 403 with the rate limit spent: the reset time, as a date.
    gh.api.force_next(
        403,
        &[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1893456000"),
        ],
        json!({"message": "API rate limit exceeded for 127.0.0.1."}),
    );
    let err = stderr(&run(&Home::new(), &gh.api, github, Some(TOKEN)));
    assert!(
        err.contains("rate limit") && err.contains("2030-01-01T00:00:00Z"),
        "{err}"
    );

    // 429 with retry-after is a rate limit too.
    gh.api.force_next(
        429,
        &[("retry-after", "60")],
        json!({"message": "secondary rate limit"}),
    );
    let err = stderr(&run(&Home::new(), &gh.api, github, Some(TOKEN)));
    assert!(err.contains("rate limit is spent until"), "{err}");

    // 404: a repository that does not exist.
    let err = stderr(&run(
        &Home::new(),
        &gh.api,
        "source: github\nowner: upstream\nrepo: missing\n",
        Some(TOKEN),
    ));
    assert!(
        err.contains("upstream/missing") && err.contains("not found"),
        "{err}"
    );

    // 422: the name is taken.
    let output = run(
        &Home::new(),
        &gh.api,
        "source: github-new\nrepoName: taken\n",
        Some(TOKEN),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&run(
        &Home::new(),
        &gh.api,
        "source: github-new\nrepoName: taken\n",
        Some(TOKEN),
    ));
    assert!(err.contains("taken") && err.contains("repoName"), "{err}");

    // An API nobody answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = Home::new();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
    let path = home.dir.path().join("task.yaml");
    std::fs::write(
        &path,
        task_spec(
            "gh",
            "x",
            &format!(
                "workspace:\n{}sandbox:\n  provider: none\n{}",
                support::indent(github, 2),
                shell_agent("true")
            ),
        ),
    )
    .unwrap();
    let output = command
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env("GITHUB_API_URL", format!("http://127.0.0.1:{closed}"))
        .env("GITHUB_TOKEN", TOKEN)
        .output()
        .unwrap();
    let err = stderr(&output);
    assert!(
        err.contains("cannot be reached") && err.contains("GITHUB_API_URL"),
        "{err}"
    );
}

/// A third-party copy of `workspace-github-new`, granted `github` without a scope,
/// cannot create a repository: the call is refused with the line that would allow it
/// and nothing reaches the API's create endpoint. Listed and allowed, it creates.
#[test]
fn a_third_party_plugin_creates_repositories_only_within_its_github_scope() {
    if !git_available() {
        return;
    }
    let gh = github();
    let plugins = support::third_party_copy("workspace_github_new");
    let dir = plugins.path().to_str().unwrap();
    let workspace = "source: github-new\nrepoName: mine\n";

    let home = Home::new();
    let grant = "workspace-github-new=events,git,github";
    let output = run_args(
        &home,
        &gh.api,
        workspace,
        Some(TOKEN),
        &["--plugin-dir", dir, "--grant", grant],
    );
    let said = stderr(&output);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("github.create-repository by plugin workspace-github-new")
            && said.contains(&format!("repository \"{USER}/mine\""))
            && said.contains("{workspace-github-new: {github: {repos: ["),
        "{said}"
    );
    let denied = support::denied_events(&home);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["call"], "github.create-repository");
    assert!(
        !gh.api.requests().iter().any(|(r, _)| r.starts_with("POST")),
        "{:?}",
        gh.api.requests()
    );
    assert!(!gh.api.has_repo(&format!("{USER}/mine")));

    let home = Home::new();
    let grant = format!(
        "workspace-github-new=events,github:repo={USER}/mine,github:create,git:remote=http://127.0.0.1:*/**"
    );
    let output = run_args(
        &home,
        &gh.api,
        workspace,
        Some(TOKEN),
        &["--plugin-dir", dir, "--grant", &grant],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(gh.api.has_repo(&format!("{USER}/mine")));
}

/// A third-party copy of `workspace-github` may fork only with `fork: true`, and only
/// from and to repositories its scope lists: no fork request reaches the API before.
#[test]
fn a_third_party_plugin_forks_only_within_its_github_scope() {
    if !git_available() {
        return;
    }
    let gh = github();
    let plugins = support::third_party_copy("workspace_github");
    let dir = plugins.path().to_str().unwrap();
    let workspace = "source: github\nowner: upstream\nrepo: app\nfork: true\n";
    let run_granted = |home: &Home, grant: &str| {
        run_args(
            home,
            &gh.api,
            workspace,
            Some(TOKEN),
            &["--plugin-dir", dir, "--grant", grant],
        )
    };
    let forked = || {
        gh.api
            .requests()
            .iter()
            .any(|(r, _)| r == "POST /repos/upstream/app/forks")
    };

    // The source listed, `fork` not.
    let home = Home::new();
    let output = run_granted(
        &home,
        "workspace-github=events,git,github:repo=upstream/app",
    );
    let said = stderr(&output);
    assert!(
        said.contains("github.fork-repository by plugin workspace-github")
            && said.contains("{workspace-github: {github: {fork: true}}}"),
        "{said}"
    );
    assert!(!forked());

    // `fork` allowed, but the fork would land in the user's account, not listed.
    let home = Home::new();
    let output = run_granted(
        &home,
        "workspace-github=events,git,github:repo=upstream/app,github:fork",
    );
    let said = stderr(&output);
    assert!(
        said.contains(&format!("repository \"{USER}/app\"")),
        "{said}"
    );
    assert!(!forked());

    let home = Home::new();
    let grant = format!(
        "workspace-github=events,github:repo=upstream/app,github:repo={USER}/app,github:fork,\
         git:remote=http://127.0.0.1:*/**"
    );
    let output = run_granted(&home, &grant);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(forked());
}
