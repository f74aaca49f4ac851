//! The `http` capability's policy and the `claude-agent-sdk` driver, end to end.
//!
//! The policy: a grant of `http` reaches only the hosts of its allowlist (a request
//! elsewhere is denied, naming the host), under the host's connect, first-byte and
//! between-bytes timeouts and response cap. It is exercised with the real `http-driver`
//! fixture component against real TCP servers on 127.0.0.1 that misbehave on purpose.
//!
//! The driver: the built-in plugin runs its agent loop against a local server that
//! speaks the Anthropic Messages protocol (api.anthropic.com is unreachable here; see
//! `support::anthropic`), streaming SSE, with its tools running in a real subprocess
//! sandbox at `network: none`: the model traffic leaves from the plugin, not the sandbox.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support;
use crate::support::anthropic::{
    tool_results, AnthropicServer, Reply, INPUT_TOKENS, OUTPUT_TOKENS,
};
use crate::support::{fixture_runtime, task_spec};
use agentgate::engine::{self, RunRequest};
use agentgate::record::{RunResult, RunStatus};
use agentgate::runtime::{Grants, HttpLimits, PluginLimits, Runtime};
use serde_json::json;

const API_KEY: &str = "sk-ant-test-0123456789abcdef";

fn spec(agent: &str, workspace: &Path) -> agentgate::taskspec::TaskSpec {
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  network: none\n  resources:\n    timeout: 2m\n{agent}",
        workspace.display()
    );
    let yaml = task_spec("sdk", "make the greeting file", &execution);
    agentgate::taskspec::parse(&yaml, "test.yaml", &|_| None).expect("valid spec")
}

struct Ran {
    result: RunResult,
    events: String,
    /// Every file of the run folder, concatenated.
    folder_text: String,
}

async fn run(runtime: &Runtime, agent: &str, workspace: &Path, secrets: &[(&str, &str)]) -> Ran {
    let home = tempfile::tempdir().unwrap();
    let mut request = RunRequest::new(spec(agent, workspace), home.path().into());
    request.secrets = secrets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let report = engine::run(runtime, request).await.expect("the run starts");
    let events = std::fs::read_to_string(report.folder.join("events.ndjson")).unwrap_or_default();
    Ran {
        result: report.result,
        events,
        folder_text: support::all_text(&report.folder),
    }
}

// ---------------------------------------------------------------------------------
// The http policy, through the http-driver fixture.

fn http_get(authority: &str, read_body: bool) -> String {
    format!(
        "agent:\n  driver: http-get\n  options:\n    authority: \"{authority}\"\n    path: /v1/x\n    readBody: {read_body}\n"
    )
}

/// A listener whose connections the test handles on a thread with `serve`.
fn server(serve: impl FnOnce(TcpStream) + Send + 'static) -> (String, TcpListener) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepting = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        if let Ok((stream, _)) = accepting.accept() {
            serve(stream);
        }
    });
    (address, listener)
}

/// Reads a request's head.
fn read_head(stream: &mut TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
}

fn granted_to(address: &str) -> Grants {
    let mut grants = Grants::default();
    grants
        .add_flag(&format!("http-driver=http:{address}"))
        .unwrap();
    grants
}

fn limits(http: HttpLimits) -> PluginLimits {
    PluginLimits {
        http,
        ..PluginLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_outside_the_allowlist_is_denied_naming_the_host() {
    let contacted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = contacted.clone();
    let (address, _listener) =
        server(move |_| seen.store(true, std::sync::atomic::Ordering::SeqCst));
    // Granted http, but to another host (and to this host on another port).
    let mut grants = granted_to("api.example.com");
    grants.add_flag("http-driver=http:127.0.0.1:1").unwrap();
    let runtime = fixture_runtime(grants, PluginLimits::default()).await;
    let workspace = tempfile::tempdir().unwrap();
    let ran = run(&runtime, &http_get(&address, false), workspace.path(), &[]).await;

    assert_eq!(ran.result.status, RunStatus::Error);
    let error = ran.result.error.unwrap_or_default();
    assert!(
        error.contains("denied") && error.contains("HttpRequestDenied"),
        "{error}"
    );
    assert!(
        error.contains(&address),
        "the denial names the host: {error}"
    );
    // The host's own record (a `denied` event) says which host, what is allowed, and
    // how to allow it.
    let line = ran
        .events
        .lines()
        .find(|l| l.contains("\"type\":\"denied\""))
        .unwrap_or_else(|| panic!("no denial event in {}", ran.events));
    assert!(
        line.contains(&format!(
            "http.request by plugin http-driver: host \\\"{address}\\\""
        )),
        "{line}"
    );
    assert!(
        line.contains("http.hosts: api.example.com, 127.0.0.1:1"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "plugins: {{http-driver: {{http: {{hosts: [\\\"{address}\\\"]}}}}}}"
        )),
        "{line}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !contacted.load(std::sync::atomic::Ordering::SeqCst),
        "the request left the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_hits_the_first_byte_timeout() {
    let (address, _listener) = server(|mut stream| {
        read_head(&mut stream);
        std::thread::sleep(Duration::from_secs(60));
    });
    let http = HttpLimits {
        first_byte: Duration::from_millis(500),
        ..HttpLimits::default()
    };
    let runtime = fixture_runtime(granted_to(&address), limits(http)).await;
    let workspace = tempfile::tempdir().unwrap();
    let ran = run(&runtime, &http_get(&address, false), workspace.path(), &[]).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("timed out: http-driver: request to"),
        "{error}"
    );
    assert!(error.contains("ConnectionReadTimeout"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_hits_the_between_bytes_timeout() {
    let (address, _listener) = server(|mut stream| {
        read_head(&mut stream);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nfirst ten.");
        std::thread::sleep(Duration::from_secs(60));
    });
    let http = HttpLimits {
        between_bytes: Duration::from_millis(500),
        ..HttpLimits::default()
    };
    let runtime = fixture_runtime(granted_to(&address), limits(http)).await;
    let workspace = tempfile::tempdir().unwrap();
    let ran = run(&runtime, &http_get(&address, true), workspace.path(), &[]).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    // The headers arrived (the first-byte timeout is the long default): the stall in
    // the body is what ended it.
    assert!(error.contains("connection read timeout"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_larger_than_the_cap_is_cut_off() {
    let (address, _listener) = server(|mut stream| {
        read_head(&mut stream);
        let body = vec![b'x'; 5000];
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n");
        let _ = stream.write_all(&body);
    });
    let http = HttpLimits {
        max_response_bytes: 1000,
        ..HttpLimits::default()
    };
    let runtime = fixture_runtime(granted_to(&address), limits(http)).await;
    let workspace = tempfile::tempdir().unwrap();
    let ran = run(&runtime, &http_get(&address, true), workspace.path(), &[]).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("body size exceeds limit: 1000 bytes"),
        "{error}"
    );

    // Under the cap the same body is read whole.
    let (address, _listener) = server(|mut stream| {
        read_head(&mut stream);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n");
        let _ = stream.write_all(&[b'x'; 5000]);
    });
    let http = HttpLimits {
        max_response_bytes: 5000,
        ..HttpLimits::default()
    };
    let runtime = fixture_runtime(granted_to(&address), limits(http)).await;
    let ran = run(&runtime, &http_get(&address, true), workspace.path(), &[]).await;
    assert_eq!(
        ran.result.status,
        RunStatus::Succeeded,
        "{:?}",
        ran.result.error
    );
    assert_eq!(
        ran.result.agent.unwrap().summary.as_deref(),
        Some("HTTP 200, 5000 bytes")
    );
}

/// A listener whose accept queue is full, so a new connection is never established:
/// backlog 0 and the queue filled by the test's own connections.
fn unconnectable() -> (String, Vec<TcpStream>, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let owned = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as u16;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        assert_eq!(
            libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len),
            0
        );
        assert_eq!(libc::listen(fd, 0), 0);
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut bound_len = len;
        libc::getsockname(
            fd,
            &mut bound as *mut _ as *mut libc::sockaddr,
            &mut bound_len,
        );
        let address = format!("127.0.0.1:{}", u16::from_be(bound.sin_port));
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(s) =
                TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_millis(300))
            {
                fillers.push(s);
            }
        }
        (address, fillers, owned)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_is_never_established_hits_the_connect_timeout() {
    let (address, _fillers, _listener) = unconnectable();
    let http = HttpLimits {
        connect: Duration::from_millis(500),
        ..HttpLimits::default()
    };
    let runtime = fixture_runtime(granted_to(&address), limits(http)).await;
    let workspace = tempfile::tempdir().unwrap();
    let ran = run(&runtime, &http_get(&address, false), workspace.path(), &[]).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("timed out") && error.contains("ConnectionTimeout"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------
// The claude-agent-sdk driver against the local Messages server.

fn sdk_agent(extra: &str) -> String {
    format!(
        "agent:\n  driver: claude-agent-sdk\n  model: claude-sonnet-4-5\n  options:\n    retryBaseMs: 10\n{extra}"
    )
}

/// A runtime whose built-in SDK driver may reach `server`.
async fn sdk_runtime(base_url: &str) -> Arc<Runtime> {
    let mut grants = Grants::default();
    grants.set_base_url("ANTHROPIC_BASE_URL", base_url).unwrap();
    fixture_runtime(grants, PluginLimits::default()).await
}

fn secrets(base_url: &str) -> [(&'static str, String); 2] {
    [
        ("ANTHROPIC_API_KEY", API_KEY.to_string()),
        ("ANTHROPIC_BASE_URL", base_url.to_string()),
    ]
}

async fn sdk_run(server: &AnthropicServer, agent: &str, workspace: &Path) -> Ran {
    let runtime = sdk_runtime(&server.url()).await;
    let secrets = secrets(&server.url());
    let secrets: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run(&runtime, agent, workspace, &secrets).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_completes_a_tool_session_with_the_sandbox_offline() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("README.md"),
        "# project\nhello world\n",
    )
    .unwrap();
    // A server on the host's loopback, like the Messages server: the plugin reaches
    // that one, the sandbox's tools must reach neither.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let server = AnthropicServer::start(vec![
        Reply::tool("list", json!({})),
        Reply::tool("bash", json!({"command": "ls; cat README.md"})),
        Reply::tool(
            "write_file",
            json!({"path": "greeting.txt", "content": "hello\n"}),
        ),
        Reply::tool(
            "edit_file",
            json!({"path": "README.md", "old_string": "hello world", "new_string": "hello agent"}),
        ),
        // The sandbox has no network: the model's own traffic does not go through it.
        Reply::tool(
            "bash",
            json!({"command": format!("curl -s -m 3 -o /dev/null http://127.0.0.1:{host_port}/; echo curl exit $?")}),
        ),
        Reply::tool("grep", json!({"pattern": "agent", "path": "."})),
        Reply::tool("glob", json!({"pattern": "*.txt"})),
        Reply::text("Done: greeting.txt written."),
    ]);
    let ran = sdk_run(&server, &sdk_agent(""), workspace.path()).await;
    assert_eq!(
        ran.result.status,
        RunStatus::Succeeded,
        "{:?}\n{}",
        ran.result.error,
        ran.events
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("greeting.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("README.md")).unwrap(),
        "# project\nhello agent\n"
    );

    // Each tool result the model got back came from the sandbox.
    let requests = server.message_requests();
    assert_eq!(requests.len(), 8);
    let result = |turn: usize| tool_results(&requests[turn]).first().cloned().unwrap().1;
    assert!(result(1).contains("README.md"), "{}", result(1));
    assert!(
        result(2).contains("exit code 0") && result(2).contains("hello world"),
        "{}",
        result(2)
    );
    assert!(result(3).contains("wrote 6 bytes"), "{}", result(3));
    assert!(result(4).contains("edited README.md"), "{}", result(4));
    let curl = result(5);
    assert!(
        curl.contains("curl exit ") && !curl.contains("not found"),
        "{curl}"
    );
    assert!(
        !curl.contains("curl exit 0"),
        "the sandbox reached the host: {curl}"
    );
    assert!(
        listener.accept().is_err(),
        "the sandbox connected to the host's loopback"
    );
    assert!(
        result(6).contains("README.md:2:hello agent"),
        "{}",
        result(6)
    );
    assert_eq!(result(7), "greeting.txt");

    // The requests carry the key, the API version, the model and the tools.
    let first = &requests[0];
    assert_eq!(first.header("x-api-key"), Some(API_KEY));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    let body = first.json();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["stream"], true);
    let names: Vec<_> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "bash",
            "read_file",
            "write_file",
            "edit_file",
            "list",
            "glob",
            "grep"
        ]
    );

    // The agent record: turns, usage summed over turns, cost, session, summary.
    let agent = ran.result.agent.unwrap();
    assert!(agent.success);
    assert_eq!(agent.turns, Some(8));
    assert_eq!(
        agent.summary.as_deref(),
        Some("Done: greeting.txt written.")
    );
    assert_eq!(
        agent.session_id.as_deref(),
        Some(&*format!("claude-agent-sdk-{}", ran.result.run_id))
    );
    let usage = agent.usage.unwrap();
    assert_eq!(usage["inputTokens"], 8 * INPUT_TOKENS, "{usage}");
    assert_eq!(usage["outputTokens"], 8 * OUTPUT_TOKENS, "{usage}");
    let cost = usage["costUsd"].as_f64().unwrap();
    let expected = 8.0 * (INPUT_TOKENS as f64 * 3.0 + OUTPUT_TOKENS as f64 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
    // Events: tool calls and results as they happened; the key appears nowhere.
    assert!(
        ran.events.contains("\"tool_call\"") || ran.events.contains("toolCall"),
        "{}",
        ran.events
    );
    assert!(!ran.folder_text.is_empty() && !ran.folder_text.contains(API_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_and_rate_limited_answers_are_retried_within_the_limit() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![
        Reply::status(529),
        Reply::status(429),
        Reply::text("done after retries"),
    ]);
    let ran = sdk_run(&server, &sdk_agent(""), workspace.path()).await;
    assert_eq!(
        ran.result.status,
        RunStatus::Succeeded,
        "{:?}",
        ran.result.error
    );
    assert_eq!(server.message_requests().len(), 3);
    assert!(
        ran.events
            .contains("answered HTTP 529 (overloaded_error); retry 1 of 4"),
        "{}",
        ran.events
    );
    assert!(
        ran.events
            .contains("answered HTTP 429 (rate_limit_error); retry 2 of 4"),
        "{}",
        ran.events
    );

    // Always overloaded: maxRetries retries, then a failure that says so.
    let server = AnthropicServer::start(vec![Reply::status(529)]);
    let ran = sdk_run(&server, &sdk_agent("    maxRetries: 2\n"), workspace.path()).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert_eq!(
        server.message_requests().len(),
        3,
        "one request and two retries"
    );
    assert!(
        error.contains("HTTP 529") && error.contains("after 2 retries"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_and_server_errors_fail_clearly() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![Reply::status(401)]);
    let ran = sdk_run(&server, &sdk_agent(""), workspace.path()).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("refused the credentials (HTTP 401, authentication_error"),
        "{error}"
    );
    assert!(error.contains("check ANTHROPIC_API_KEY"), "{error}");
    assert_eq!(server.message_requests().len(), 1, "401 is not retried");
    assert!(!ran.folder_text.contains(API_KEY));

    let server = AnthropicServer::start(vec![Reply::status(500)]);
    let ran = sdk_run(&server, &sdk_agent(""), workspace.path()).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("answered HTTP 500 (api_error: scripted 500)"),
        "{error}"
    );
    assert_eq!(server.message_requests().len(), 1, "500 is not retried");

    // An error event mid-stream fails the run; what came before is kept.
    let server = AnthropicServer::start(vec![
        Reply::tool("write_file", json!({"path": "partial.txt", "content": "x"})),
        Reply::StreamError("overloaded_error".into()),
    ]);
    let ran = sdk_run(&server, &sdk_agent(""), workspace.path()).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    assert!(
        error.contains("error mid-stream") && error.contains("overloaded_error"),
        "{error}"
    );
    assert!(ran.events.contains("partial.txt"), "{}", ran.events);
    assert!(workspace.path().join("partial.txt").exists());
}

/// Runs the SDK driver with `agent` and a `convergence.limits` section.
async fn sdk_run_limited(
    server: &AnthropicServer,
    agent: &str,
    limits: &str,
    workspace: &Path,
) -> RunResult {
    // `convergence` is a sibling of `execution` in the document.
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  network: none\n{agent}",
        workspace.display(),
    );
    let yaml = format!(
        "{}\n  convergence:\n    limits:\n{}",
        task_spec("sdk", "loop", &execution).trim_end(),
        support::indent(limits, 6)
    );
    let spec = agentgate::taskspec::parse(&yaml, "test.yaml", &|_| None).expect("valid spec");
    let runtime = sdk_runtime(&server.url()).await;
    let home = tempfile::tempdir().unwrap();
    let mut request = RunRequest::new(spec, home.path().into());
    request.secrets = secrets(&server.url())
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    engine::run(&runtime, request).await.unwrap().result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_at_the_turn_limit_and_says_so() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![Reply::tool("list", json!({}))]);
    let result = sdk_run_limited(
        &server,
        &sdk_agent(""),
        "maxIterations: 2\n",
        workspace.path(),
    )
    .await;
    // The agent ran and reported that it did not finish: a failure, not an error.
    assert_eq!(result.status, RunStatus::Failed, "{:?}", result.error);
    let agent = result.agent.expect("an agent record");
    assert!(!agent.success);
    assert_eq!(agent.turns, Some(2));
    assert!(agent
        .summary
        .unwrap()
        .contains("turn limit (2, convergence.limits.maxIterations)"));
    assert_eq!(server.message_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_at_the_token_budget_and_answers_stay_within_the_apis_limit() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![Reply::tool("list", json!({}))]);
    // Each scripted turn uses 100 input and 20 output tokens: the second passes 200.
    let result = sdk_run_limited(
        &server,
        &sdk_agent(""),
        "maxTokens: 200\n",
        workspace.path(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Failed, "{:?}", result.error);
    let agent = result.agent.expect("an agent record");
    assert_eq!(agent.turns, Some(2));
    let summary = agent.summary.unwrap();
    assert!(
        summary.contains(
            "token budget was reached (240 tokens used, convergence.limits.maxTokens = 200)"
        ),
        "{summary}"
    );
    let requests = server.message_requests();
    assert_eq!(requests.len(), 2);
    // agent.maxTokens defaults to 200000; one answer asks for no more than the API allows.
    assert_eq!(requests[0].json()["max_tokens"], 32_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_shapes_the_requests_and_the_cost_limit_stops_the_loop() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![
        Reply::tool("write_file", json!({"path": "no.txt", "content": "x"})),
        Reply::tool("list", json!({})),
        Reply::text("never reached"),
    ]);
    let agent = "agent:\n  driver: claude-agent-sdk\n  model: claude-haiku-4-5\n  systemPrompt: You are terse.\n  temperature: 0.2\n  maxTokens: 512\n  capabilities:\n    shell: false\n  tools:\n    - name: Write\n      enabled: false\n  options:\n    retryBaseMs: 10\n    pricing: {inputPerMTok: 30000, outputPerMTok: 150000, cacheWritePerMTok: 0, cacheReadPerMTok: 0}\n";
    // At these prices (which replace the model's list price) each scripted turn of 100
    // input and 20 output tokens costs $6, so the second one passes $10.
    let result = sdk_run_limited(&server, agent, "maxCost: \"$10.00\"\n", workspace.path()).await;
    assert_eq!(result.status, RunStatus::Failed, "{:?}", result.error);
    let agent = result.agent.expect("an agent record");
    assert_eq!(agent.turns, Some(2));
    let summary = agent.summary.unwrap();
    assert!(
        summary.contains("cost limit was reached ($12.0000 spent"),
        "{summary}"
    );
    let cost = agent.usage.unwrap()["costUsd"].as_f64().unwrap();
    assert!((cost - 12.0).abs() < 1e-9, "{cost}");

    let requests = server.message_requests();
    assert_eq!(requests.len(), 2);
    let body = requests[0].json();
    assert_eq!(body["model"], "claude-haiku-4-5");
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tokens"], 512);
    let names: Vec<_> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["read_file", "edit_file", "list", "glob", "grep"],
        "no shell, no Write"
    );
    // The model called a tool it does not have: it is told, and nothing is written.
    let (_, text) = tool_results(&requests[1])
        .into_iter()
        .next()
        .unwrap_or_default();
    assert_eq!(text, "tool \"write_file\" is not available in this run");
    assert!(!workspace.path().join("no.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_driver_reaches_only_the_host_of_its_base_url() {
    let workspace = tempfile::tempdir().unwrap();
    let server = AnthropicServer::start(vec![Reply::text("never")]);
    // The host's ANTHROPIC_BASE_URL names another server than the one the driver is given.
    let runtime = sdk_runtime("http://127.0.0.1:1").await;
    let secrets = secrets(&server.url());
    let secrets: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ran = run(&runtime, &sdk_agent(""), workspace.path(), &secrets).await;
    let error = ran.result.error.unwrap_or_default();
    assert_eq!(ran.result.status, RunStatus::Error, "{error}");
    let authority = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    assert!(
        error.contains(&format!("denied the request to {authority}")),
        "{error}"
    );
    assert!(
        server.message_requests().is_empty(),
        "the request left the host"
    );
    assert!(
        ran.events.contains("http.hosts: 127.0.0.1:1"),
        "{}",
        ran.events
    );
}

#[test]
fn the_cli_allows_the_host_of_the_operators_base_url() {
    let home = support::Home::new();
    let inspect = |base_url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentgate"))
            .args(["plugins", "inspect", "agent-claude-agent-sdk"])
            .env("AGENTGATE_HOME", home.dir.path())
            .env("ANTHROPIC_BASE_URL", base_url)
            .output()
            .expect("running agentgate")
    };
    let output = inspect("http://127.0.0.1:4000/anthropic");
    assert!(output.status.success(), "{}", support::stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["httpHosts"], json!(["127.0.0.1:4000"]));
    assert_eq!(report["granted"], json!(["events", "sandbox", "http"]));
    let output = inspect("");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["httpHosts"], json!(["api.anthropic.com"]));

    let output = inspect("api.anthropic.com");
    assert_eq!(output.status.code(), Some(2));
    let stderr = support::stderr(&output);
    assert!(stderr.contains("ANTHROPIC_BASE_URL: http host \"api.anthropic.com\": the URL must start with https:// or http://"), "{stderr}");
}
