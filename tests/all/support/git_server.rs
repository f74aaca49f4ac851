//! Real git servers on 127.0.0.1 for the workspace tests.
//!
//! - [`HttpGit`]: git's smart HTTP protocol, served by `git http-backend` (the CGI
//!   program that ships with git and that real forges front the same way) behind a
//!   small front that asks for HTTP Basic auth when a token is set, like GitHub does
//!   for private repositories (any username, the token as the password). It stands in
//!   for an HTTPS git host; TLS is the only part left out.
//! - [`Daemon`]: `git daemon`, the anonymous `git://` protocol.
//!
//! Repositories are bare repositories under one root, made with the real `git` CLI.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

/// Runs `git` with `args` in `dir`; panics with its stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("running git (is it installed?)");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Whether the `git` CLI (and with it `git http-backend` and `git daemon`) is here.
/// Under `CI=true` its absence fails the test; elsewhere the test is skipped loudly.
pub fn git_available() -> bool {
    let found = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "git is not installed; CI must install it (.ci/run)"
        );
        eprintln!("SKIPPED: git is not installed; install git to run this test");
    }
    found
}

/// A repository made for the tests: its commits by name, served from `root/name.git`.
pub struct Repo {
    pub bare: PathBuf,
    /// SHAs of the commits in order: `first`, `second`, `third`.
    pub commits: Vec<String>,
}

/// Makes `root/<name>.git` with three commits on `main` (`README.md` changing each
/// time), a tag `v1.0` on the first, a branch `feature` at the second and an annotated
/// tag `v2.0` on the third.
pub fn make_repo(root: &Path, name: &str) -> Repo {
    let work = root.join(format!("{name}-work"));
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let mut commits = Vec::new();
    for (i, word) in ["first", "second", "third"].iter().enumerate() {
        std::fs::write(work.join("README.md"), format!("{word}\n")).unwrap();
        std::fs::write(work.join(format!("file{i}.txt")), format!("{word}\n")).unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", word]);
        commits.push(git(&work, &["rev-parse", "HEAD"]));
        match i {
            0 => {
                git(&work, &["tag", "v1.0"]);
            }
            1 => {
                git(&work, &["branch", "feature"]);
            }
            _ => {
                git(&work, &["tag", "-a", "v2.0", "-m", "two"]);
            }
        }
    }
    let bare = root.join(format!("{name}.git"));
    git(
        root,
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    // Lets `git http-backend` serve it without `git-daemon-export-ok`.
    git(&bare, &["config", "http.receivepack", "true"]);
    Repo { bare, commits }
}

/// `git http-backend` on 127.0.0.1, behind Basic auth when `token` is set.
pub struct HttpGit {
    pub port: u16,
    server: Arc<tiny_http::Server>,
    /// Every `Authorization` header seen, to check what the client sent.
    pub auth_seen: Arc<Mutex<Vec<String>>>,
}

impl HttpGit {
    pub fn start(root: &Path, token: Option<&str>) -> HttpGit {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let auth_seen = Arc::new(Mutex::new(Vec::new()));
        let (srv, root_owned, token, seen) = (
            server.clone(),
            root.to_path_buf(),
            token.map(str::to_string),
            auth_seen.clone(),
        );
        std::thread::spawn(move || {
            for request in srv.incoming_requests() {
                let (root, token, seen) = (root_owned.clone(), token.clone(), seen.clone());
                std::thread::spawn(move || serve(request, &root, token.as_deref(), &seen));
            }
        });
        HttpGit {
            port,
            server,
            auth_seen,
        }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}.git", self.port)
    }
}

impl Drop for HttpGit {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// Whether the request carries `Authorization: Basic` with `token` as the password.
fn authorized(request: &tiny_http::Request, token: &str, seen: &Mutex<Vec<String>>) -> bool {
    let Some(header) = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
    else {
        return false;
    };
    let value = header.value.as_str().to_string();
    seen.lock().unwrap().push(value.clone());
    let Some(encoded) = value.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
        return false;
    };
    String::from_utf8_lossy(&decoded)
        .split_once(':')
        .is_some_and(|(_, password)| password == token)
}

fn serve(
    mut request: tiny_http::Request,
    root: &Path,
    token: Option<&str>,
    seen: &Mutex<Vec<String>>,
) {
    if let Some(token) = token {
        if !authorized(&request, token, seen) {
            let response = tiny_http::Response::from_string("authentication required\n")
                .with_status_code(401)
                .with_header(
                    "WWW-Authenticate: Basic realm=\"test git\""
                        .parse::<tiny_http::Header>()
                        .unwrap(),
                );
            let _ = request.respond(response);
            return;
        }
    }
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let header = |name: &str| {
        request
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_string())
            .unwrap_or_default()
    };
    let content_type = header("Content-Type");
    let protocol = header("Git-Protocol");
    let mut body = Vec::new();
    request.as_reader().read_to_end(&mut body).unwrap();
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("REQUEST_METHOD", request.method().as_str())
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", protocol)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting git http-backend");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    // CGI output: headers, a blank line, the body.
    let raw = output.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, skip)) = split else {
        let _ = request.respond(tiny_http::Response::empty(500));
        return;
    };
    let mut status = 200;
    let mut headers = Vec::new();
    for line in String::from_utf8_lossy(&raw[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.eq_ignore_ascii_case("Status") {
            status = value
                .trim()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap_or(500);
        } else if let Ok(h) = tiny_http::Header::from_bytes(name.trim(), value.trim()) {
            headers.push(h);
        }
    }
    let content = raw[end + skip..].to_vec();
    let length = content.len();
    let response = tiny_http::Response::new(
        tiny_http::StatusCode(status),
        headers,
        std::io::Cursor::new(content),
        Some(length),
        None,
    );
    let _ = request.respond(response);
}

/// `git daemon` serving `root` anonymously on 127.0.0.1.
pub struct Daemon {
    pub port: u16,
    child: Child,
}

impl Daemon {
    pub fn start(root: &Path) -> Daemon {
        // A free port: bind, read it, release it for the daemon.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", root.display()),
                root.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting git daemon");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "git daemon did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Daemon { port, child }
    }

    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}.git", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An attacker's HTTP server on 127.0.0.1: it records every request (method, path and
/// `Authorization` header) and answers `401` asking for Basic credentials, so a client
/// that came here would hand over what it holds.
pub struct Recorder {
    pub port: u16,
    server: Arc<tiny_http::Server>,
    /// `METHOD PATH authorization=VALUE` for each request seen.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (srv, seen) = (server.clone(), requests.clone());
        std::thread::spawn(move || {
            for request in srv.incoming_requests() {
                let authorization = request
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .map(|h| h.value.as_str().to_string())
                    .unwrap_or_default();
                seen.lock().unwrap().push(format!(
                    "{} {} authorization={authorization}",
                    request.method(),
                    request.url()
                ));
                let response = tiny_http::Response::from_string("authentication required\n")
                    .with_status_code(401)
                    .with_header(
                        "WWW-Authenticate: Basic realm=\"attacker\""
                            .parse::<tiny_http::Header>()
                            .unwrap(),
                    );
                let _ = request.respond(response);
            }
        });
        Recorder {
            port,
            server,
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn seen(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.server.unblock();
    }
}
