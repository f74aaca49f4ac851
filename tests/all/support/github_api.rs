//! A local stand-in for the GitHub REST API endpoints the workspace plugins use.
//!
//! GitHub is not reachable from the tests, so this server answers the same routes with
//! bodies shaped as GitHub documents them (<https://docs.github.com/rest/repos>): a
//! repository object with `owner.login`, `full_name`, `clone_url`, `default_branch`,
//! `private`, `fork`; errors as `{"message", "documentation_url", "errors"}`; rate
//! limits as 403 with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`. Repositories
//! are real bare repositories served by a [`HttpGit`](super::git_server::HttpGit) under
//! `root/<owner>/<name>.git`, so `clone_url` clones for real. Like GitHub, a fork or a
//! generated repository is not ready at once: its default branch answers 404 for the
//! first few polls.
//!
//! Routes: `GET /user`, `GET /users/{login}`, `GET /repos/{o}/{r}`,
//! `GET /repos/{o}/{r}/branches/{b}`, `POST /repos/{o}/{r}/forks`, `POST /user/repos`,
//! `POST /orgs/{org}/repos`, `POST /repos/{o}/{r}/generate`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::git_server::git;

/// The user the test token belongs to.
pub const USER: &str = "octo-user";
/// An organization the user may create repositories in.
pub const ORG: &str = "acme-org";
/// Another user, under whom nothing may be created.
pub const OTHER_USER: &str = "someone-else";

#[derive(Clone)]
struct Repo {
    owner: String,
    name: String,
    private: bool,
    fork: bool,
    description: Option<String>,
    /// Polls of the default branch still to answer 404.
    not_ready_polls: u32,
}

/// A forced answer: status, headers, body.
type Answer = (u16, Vec<(String, String)>, Value);

#[derive(Default)]
struct State {
    repos: BTreeMap<String, Repo>,
    /// An answer forced on the next request: status, headers, body.
    forced: Option<Answer>,
    /// `METHOD /path` and body of each request, in order.
    requests: Vec<(String, Value)>,
}

pub struct GithubApi {
    pub port: u16,
    token: String,
    git_port: u16,
    root: PathBuf,
    state: Arc<Mutex<State>>,
    server: Arc<tiny_http::Server>,
}

impl GithubApi {
    /// Serves the API for `token`; clone URLs point at the git server on `git_port`
    /// that serves `root`.
    pub fn start(token: &str, root: &Path, git_port: u16) -> Arc<GithubApi> {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let api = Arc::new(GithubApi {
            port: server.server_addr().to_ip().unwrap().port(),
            token: token.to_string(),
            git_port,
            root: root.to_path_buf(),
            state: Arc::default(),
            server,
        });
        let serving = api.clone();
        std::thread::spawn(move || {
            for request in serving.server.incoming_requests() {
                serving.answer(request);
            }
        });
        api
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Adds an existing repository `owner/name` (made by `make`) to the API.
    pub fn add_repo(&self, owner: &str, name: &str, private: bool) {
        self.state.lock().unwrap().repos.insert(
            format!("{owner}/{name}"),
            Repo {
                owner: owner.into(),
                name: name.into(),
                private,
                fork: false,
                description: None,
                not_ready_polls: 0,
            },
        );
    }

    /// Answers the next request with `status`, `headers` and `body`.
    pub fn force_next(&self, status: u16, headers: &[(&str, &str)], body: Value) {
        self.state.lock().unwrap().forced = Some((
            status,
            headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body,
        ));
    }

    /// The requests seen, as `METHOD /path` with their JSON bodies.
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn has_repo(&self, full_name: &str) -> bool {
        self.state.lock().unwrap().repos.contains_key(full_name)
    }

    fn bare(&self, owner: &str, name: &str) -> PathBuf {
        self.root.join(owner).join(format!("{name}.git"))
    }

    fn repo_json(&self, repo: &Repo) -> Value {
        let full = format!("{}/{}", repo.owner, repo.name);
        let kind = if repo.owner == ORG {
            "Organization"
        } else {
            "User"
        };
        json!({
            "id": 1296269,
            "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5",
            "name": repo.name,
            "full_name": full,
            "owner": {"login": repo.owner, "id": 1, "type": kind},
            "private": repo.private,
            "html_url": format!("https://github.example/{full}"),
            "description": repo.description,
            "fork": repo.fork,
            "url": format!("{}/repos/{full}", self.url()),
            "clone_url": format!("http://127.0.0.1:{}/{full}.git", self.git_port),
            "default_branch": "main",
            "visibility": if repo.private { "private" } else { "public" },
        })
    }

    fn answer(&self, mut request: tiny_http::Request) {
        let mut body = String::new();
        let _ = request.as_reader().read_to_string(&mut body);
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let method = request.method().as_str().to_string();
        let path = request.url().split('?').next().unwrap().to_string();
        let auth = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Authorization"))
            .map(|h| h.value.as_str().to_string());
        let (status, headers, reply) = {
            let mut state = self.state.lock().unwrap();
            state
                .requests
                .push((format!("{method} {path}"), body.clone()));
            match state.forced.take() {
                Some(forced) => forced,
                None => {
                    let (status, reply) =
                        self.route(&mut state, &method, &path, &body, auth.as_deref());
                    (status, vec![], reply)
                }
            }
        };
        let mut response = tiny_http::Response::from_string(reply.to_string())
            .with_status_code(status)
            .with_header(
                "Content-Type: application/json; charset=utf-8"
                    .parse::<tiny_http::Header>()
                    .unwrap(),
            );
        for (name, value) in headers {
            response.add_header(tiny_http::Header::from_bytes(name, value).unwrap());
        }
        let _ = request.respond(response);
    }

    fn route(
        &self,
        state: &mut State,
        method: &str,
        path: &str,
        body: &Value,
        auth: Option<&str>,
    ) -> (u16, Value) {
        let error = |status: u16, message: &str| {
            (
                status,
                json!({"message": message, "documentation_url": "https://docs.github.com/rest"}),
            )
        };
        let authed = match auth {
            None => false,
            Some(value) => {
                let token = value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("token "));
                if token != Some(self.token.as_str()) {
                    return error(401, "Bad credentials");
                }
                true
            }
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, parts.as_slice()) {
            ("GET", ["user"]) if authed => (200, json!({"login": USER, "id": 1, "type": "User"})),
            ("GET", ["user"]) => error(401, "Requires authentication"),
            ("GET", ["users", login]) => match *login {
                USER | OTHER_USER => (200, json!({"login": login, "type": "User"})),
                ORG => (200, json!({"login": login, "type": "Organization"})),
                _ => error(404, "Not Found"),
            },
            ("GET", ["repos", owner, name]) => match state.repos.get(&format!("{owner}/{name}")) {
                Some(repo) if !repo.private || authed => (200, self.repo_json(repo)),
                _ => error(404, "Not Found"),
            },
            ("GET", ["repos", owner, name, "branches", branch]) => {
                match state.repos.get_mut(&format!("{owner}/{name}")) {
                    Some(repo) if repo.not_ready_polls > 0 => {
                        repo.not_ready_polls -= 1;
                        error(404, "Branch not found")
                    }
                    Some(_) => (
                        200,
                        json!({"name": branch, "commit": {"sha": git(&self.bare(owner, name), &["rev-parse", branch])}}),
                    ),
                    None => error(404, "Not Found"),
                }
            }
            ("POST", _) if !authed => error(401, "Requires authentication"),
            ("POST", ["repos", owner, name, "forks"]) => {
                let Some(source) = state.repos.get(&format!("{owner}/{name}")).cloned() else {
                    return error(404, "Not Found");
                };
                let into = body["organization"].as_str().unwrap_or(USER).to_string();
                let key = format!("{into}/{name}");
                if !state.repos.contains_key(&key) {
                    std::fs::create_dir_all(self.root.join(&into)).unwrap();
                    git(
                        &self.root,
                        &[
                            "clone",
                            "-q",
                            "--bare",
                            self.bare(owner, name).to_str().unwrap(),
                            self.bare(&into, name).to_str().unwrap(),
                        ],
                    );
                    state.repos.insert(
                        key.clone(),
                        Repo {
                            owner: into,
                            fork: true,
                            not_ready_polls: 2,
                            ..source
                        },
                    );
                }
                (202, self.repo_json(&state.repos[&key]))
            }
            ("POST", ["user", "repos"]) => self.create(state, USER, body),
            ("POST", ["orgs", org, "repos"]) if *org == ORG => self.create(state, org, body),
            ("POST", ["orgs", _, "repos"]) => error(404, "Not Found"),
            ("POST", ["repos", owner, name, "generate"]) => {
                if !state.repos.contains_key(&format!("{owner}/{name}")) {
                    return error(404, "Not Found");
                }
                let new_owner = body["owner"].as_str().unwrap_or(USER).to_string();
                let new_name = body["name"].as_str().unwrap_or_default().to_string();
                if let Some(taken) = self.taken(state, &new_owner, &new_name) {
                    return taken;
                }
                // A fresh history with the template's files, as GitHub makes it.
                let work = self.root.join(format!("gen-{new_owner}-{new_name}"));
                git(
                    &self.root,
                    &[
                        "clone",
                        "-q",
                        self.bare(owner, name).to_str().unwrap(),
                        work.to_str().unwrap(),
                    ],
                );
                std::fs::remove_dir_all(work.join(".git")).unwrap();
                self.publish(&work, &new_owner, &new_name, "Initial commit");
                let repo = Repo {
                    owner: new_owner,
                    name: new_name,
                    private: body["private"].as_bool().unwrap_or(false),
                    fork: false,
                    description: body["description"].as_str().map(String::from),
                    not_ready_polls: 1,
                };
                let reply = self.repo_json(&repo);
                state
                    .repos
                    .insert(format!("{}/{}", repo.owner, repo.name), repo);
                (201, reply)
            }
            _ => error(404, "Not Found"),
        }
    }

    /// GitHub's 422 for a name the owner already has.
    fn taken(&self, state: &State, owner: &str, name: &str) -> Option<(u16, Value)> {
        state.repos.contains_key(&format!("{owner}/{name}")).then(|| {
            (422, json!({
                "message": "Repository creation failed.",
                "errors": [{"resource": "Repository", "code": "custom", "field": "name", "message": "name already exists on this account"}],
                "documentation_url": "https://docs.github.com/rest/repos/repos#create-a-repository-for-the-authenticated-user"
            }))
        })
    }

    fn create(&self, state: &mut State, owner: &str, body: &Value) -> (u16, Value) {
        let name = body["name"].as_str().unwrap_or_default().to_string();
        if let Some(taken) = self.taken(state, owner, &name) {
            return taken;
        }
        // `auto_init`: one commit with a README.
        let work = self.root.join(format!("new-{owner}-{name}"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("README.md"), format!("# {name}\n")).unwrap();
        self.publish(&work, owner, &name, "Initial commit");
        let repo = Repo {
            owner: owner.into(),
            name: name.clone(),
            private: body["private"].as_bool().unwrap_or(false),
            fork: false,
            description: body["description"].as_str().map(String::from),
            not_ready_polls: 0,
        };
        let reply = self.repo_json(&repo);
        state.repos.insert(format!("{owner}/{name}"), repo);
        (201, reply)
    }

    /// Commits the files of `work` as the only commit of a new `owner/name` bare repo.
    fn publish(&self, work: &Path, owner: &str, name: &str, message: &str) {
        git(work, &["init", "-q", "-b", "main"]);
        git(work, &["add", "-A"]);
        git(work, &["commit", "-q", "-m", message]);
        std::fs::create_dir_all(self.root.join(owner)).unwrap();
        git(
            &self.root,
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().unwrap(),
                self.bare(owner, name).to_str().unwrap(),
            ],
        );
    }
}
