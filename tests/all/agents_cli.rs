//! The Claude Code and Codex drivers, end to end, with the **real CLIs** from npm.
//!
//! The CLIs (versions pinned in `tests/agent-clis/package.json` and its lock file) are
//! installed once into `target/agent-clis` and mounted read-only into the sandbox: the
//! subprocess sandbox, and for Claude Code also the Docker sandbox (an image of busybox,
//! bash and the glibc libraries the CLI links, built locally). api.anthropic.com and
//! api.openai.com are unreachable from the test machines, so the model is a local
//! server that speaks the real protocol (Anthropic Messages over SSE,
//! `tests/all/support/anthropic.rs`; OpenAI Responses over SSE,
//! `tests/all/support/openai_responses.rs`) and scripts the model's side of a tool-use
//! session; everything else (the CLI, its tools, the sandbox, the files) is real.
//! Stand-in executables appear only where the real CLI cannot produce the case
//! (malformed output).
//!
//! Without npm (or, for the Docker test, a Docker engine) the tests fail under
//! `CI=true` and are skipped loudly elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support;
use crate::support::agent_clis::{build_glibc_image, clis, CLIS_IN_SANDBOX, GLIBC_IMAGE};
use crate::support::anthropic::{self, AnthropicServer, Reply};
use crate::support::openai_responses::{self as responses, ResponsesServer};
use crate::support::task_spec;
use serde_json::Value;

const API_KEY: &str = "sk-ant-api03-test-key-must-not-leak-0123456789";
const OAUTH_TOKEN: &str = "sk-ant-oat01-test-token-must-not-leak-9876543210";
const OPENAI_KEY: &str = "sk-proj-test-key-must-not-leak-abcdef012345";
macro_rules! require_clis {
    () => {
        match clis() {
            Some(dir) => dir,
            None => return,
        }
    };
}

/// One `agentgate run` with its own AGENTGATE_HOME and workspace.
struct Run {
    home: support::Home,
    workspace: tempfile::TempDir,
}

impl Run {
    fn new() -> Run {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(workspace.path().join("README.md"), "# demo\n").unwrap();
        std::fs::write(workspace.path().join("main.py"), "print('hi')\n").unwrap();
        Run {
            home: support::Home::new(),
            workspace,
        }
    }

    /// The `execution` section: the workspace, a subprocess sandbox on the host network
    /// (the model server listens on the host's loopback) with the CLIs mounted, `agent`.
    /// The CLI folder is outside the home and temporary folders, so the home's operator
    /// allows it in `grants.yaml`, as an operator would.
    fn execution(&self, clis: Option<&Path>, timeout: &str, agent: &str) -> String {
        if let Some(dir) = clis {
            self.allow_mounts_of(dir);
        }
        let mounts = clis
            .map(|dir| {
                format!(
                    "  mounts:\n    - source: {}\n      target: {CLIS_IN_SANDBOX}\n      readonly: true\n  environment:\n    PATH: {CLIS_IN_SANDBOX}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin\n",
                    dir.display()
                )
            })
            .unwrap_or_default();
        format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  network: host\n  resources:\n    timeout: {timeout}\n{mounts}{agent}",
            self.workspace.path().display()
        )
    }

    /// Writes the operator's `grants.yaml`: sandboxes may bind `dir`.
    fn allow_mounts_of(&self, dir: &Path) {
        std::fs::write(
            self.home.dir.path().join("grants.yaml"),
            format!("mounts: [{}]\n", dir.display()),
        )
        .unwrap();
    }

    /// Runs `agentgate run` with `secrets` exported and passed by `--secret-env`.
    fn run(&self, execution: &str, secrets: &[(&str, &str)]) -> Output {
        let spec = self.home.dir.path().join("task.yaml");
        std::fs::write(
            &spec,
            task_spec("cli-agent", "Tidy up this project.", execution),
        )
        .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
        command
            .args(["run", spec.to_str().unwrap()])
            .env("AGENTGATE_HOME", self.home.dir.path())
            .env_remove("AGENTGATE_PLUGIN_PATH")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY");
        for (name, value) in secrets {
            command.args(["--secret-env", name]).env(name, value);
        }
        command.output().expect("running agentgate")
    }

    fn folder(&self) -> PathBuf {
        self.home.run_folder()
    }

    fn result(&self) -> Value {
        self.home.result()
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.folder().join("events.ndjson"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every file under the run folder, as text, with its path.
    fn folder_text(&self) -> Vec<(PathBuf, String)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.folder(), &mut out);
        out
    }

    fn assert_absent_from_folder(&self, secret: &str) {
        let files = self.folder_text();
        assert!(files.len() >= 3, "too few files: {files:?}");
        for (path, text) in files {
            assert!(!text.contains(secret), "{} holds a secret", path.display());
        }
    }
}

/// What a failed assertion shows: exit code, stderr, the agent's logs and the result.
fn describe(output: &Output, run: &Run) -> String {
    let logs: String = run
        .folder_text()
        .into_iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "log"))
        .map(|(path, text)| format!("--- {}\n{text}\n", path.display()))
        .collect();
    format!(
        "exit {:?}\nstderr:\n{}\n{logs}result:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr),
        std::fs::read_to_string(run.folder().join("result.json")).unwrap_or_default()
    )
}

/// Events of one kind (`toolCall`, `agentMessage`, ...) as their bodies.
fn events_of(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.to_string().contains(&format!("\"{kind}\"")))
        .cloned()
        .collect()
}

/// An `agent` section for `driver` with `model` and `options` (YAML, unindented).
fn agent_yaml(driver: &str, model: &str, options: &str) -> String {
    format!(
        "agent:\n  driver: {driver}\n  model: {model}\n  options:\n{}",
        support::indent(options, 4)
    )
}

fn claude_agent(driver: &str, options: &str) -> String {
    agent_yaml(driver, "claude-sonnet-4-5", options)
}

#[test]
fn claude_code_api_completes_a_tool_session_and_reports_cost_turns_session() {
    let clis = require_clis!();
    let server = AnthropicServer::start(vec![
        Reply::bash("ls"),
        Reply::tool(
            "Write",
            serde_json::json!({"file_path": "/workspace/NOTES.md", "content": "written by claude\n"}),
        ),
        Reply::bash("wc -l NOTES.md main.py"),
        Reply::text("Done: added NOTES.md."),
    ]);
    let run = Run::new();
    let output = run.run(
        &run.execution(
            Some(clis),
            "3m",
            &claude_agent("claude-code-api", "maxRetries: 0"),
        ),
        &[
            ("ANTHROPIC_API_KEY", API_KEY),
            ("ANTHROPIC_BASE_URL", &server.url()),
        ],
    );
    assert!(output.status.success(), "{}", describe(&output, &run));

    // The file really changed in the workspace.
    let notes = std::fs::read_to_string(run.workspace.path().join("NOTES.md")).unwrap();
    assert_eq!(notes, "written by claude\n");

    // The real CLI ran the tools and sent their output back to the model.
    let requests = server.message_requests();
    let results: Vec<String> = requests
        .iter()
        .flat_map(anthropic::tool_results)
        .map(|(_, text)| text)
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains("main.py") && r.contains("README.md")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|r| r.contains("1 NOTES.md")),
        "{results:?}"
    );
    assert_eq!(server.scripted_requests(), 4);
    assert_eq!(requests[0].query.as_deref(), Some("beta=true"));
    assert_eq!(requests[0].header("x-api-key"), Some(API_KEY));

    let result = run.result();
    let agent = &result["agent"];
    assert_eq!(agent["driver"], "claude-code-api");
    assert_eq!(agent["success"], true, "{result:#}");
    assert!(agent["turns"].as_u64().unwrap() >= 4, "{agent:#}");
    assert!(!agent["sessionId"].as_str().unwrap().is_empty());
    assert!(
        agent["usage"]["costUsd"].as_f64().unwrap() > 0.0,
        "{agent:#}"
    );
    assert!(agent["usage"]["inputTokens"].as_u64().unwrap() >= 4 * anthropic::INPUT_TOKENS);
    assert_eq!(agent["summary"], "Done: added NOTES.md.");
    let changed = result["modifiedFiles"].to_string();
    assert!(changed.contains("NOTES.md"), "{changed}");

    let events = run.events();
    let calls = events_of(&events, "toolCall").len();
    let results = events_of(&events, "toolResult").len();
    assert!(calls >= 3 && results >= 3, "{events:#?}");
    assert!(!events_of(&events, "agentMessage").is_empty());
    assert!(events
        .iter()
        .any(|e| e.to_string().contains("started session")));

    run.assert_absent_from_folder(API_KEY);
}

#[test]
fn claude_code_subscription_passes_the_token_and_never_the_api_key() {
    let clis = require_clis!();
    let server = AnthropicServer::start(vec![
        Reply::bash("env | sort; cat \"$HOME/.agentgate/claude-mcp.json\""),
        Reply::text("ok"),
    ]);
    let run = Run::new();
    let options = format!("maxRetries: 0\nbaseUrl: {}", server.url());
    // An MCP server that never answers; Claude Code goes on without it. Its config must
    // land in the sandbox's private HOME, not the workspace.
    let agent = format!(
        "{}  mcpServers:\n    probe-server:\n      command: sleep\n      args: [\"1\"]\n",
        claude_agent("claude-code-subscription", &options)
    );
    let output = run.run(
        &run.execution(Some(clis), "3m", &agent),
        &[
            ("ANTHROPIC_API_KEY", API_KEY),
            ("CLAUDE_CODE_OAUTH_TOKEN", OAUTH_TOKEN),
        ],
    );
    let requests = server.message_requests();
    assert!(!requests.is_empty(), "{}", describe(&output, &run));
    // The CLI authenticated with the token, not the key.
    for request in &requests {
        assert_eq!(request.header("x-api-key"), None);
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {OAUTH_TOKEN}").as_str())
        );
    }
    assert!(output.status.success(), "{}", describe(&output, &run));
    // The agent's own environment (its `env` tool call) has no API key at all.
    let env_output: String = requests
        .iter()
        .flat_map(anthropic::tool_results)
        .map(|(_, text)| text)
        .collect();
    assert!(env_output.contains("HOME="), "{env_output}");
    assert!(env_output.contains("\"probe-server\""), "{env_output}");
    assert_eq!(run.result()["modifiedFiles"], serde_json::json!([]));
    assert!(!env_output.contains("ANTHROPIC_API_KEY"), "{env_output}");
    assert!(!env_output.contains(API_KEY));
    run.assert_absent_from_folder(API_KEY);
    run.assert_absent_from_folder(OAUTH_TOKEN);
}

/// Runs Claude Code against `script` with `maxRetries`; returns the run and the server.
fn claude_failure(
    script: Vec<Reply>,
    retries: u32,
    timeout: &str,
) -> (Run, AnthropicServer, Output) {
    let clis = clis().expect("checked by the caller");
    let server = AnthropicServer::start(script);
    let run = Run::new();
    let options = format!("maxRetries: {retries}\nbaseUrl: {}", server.url());
    let output = run.run(
        &run.execution(
            Some(clis),
            timeout,
            &claude_agent("claude-code-api", &options),
        ),
        &[("ANTHROPIC_API_KEY", API_KEY)],
    );
    (run, server, output)
}

#[test]
fn claude_code_401_is_an_error_with_its_status() {
    require_clis!();
    let (run, server, output) = claude_failure(vec![Reply::status(401)], 0, "2m");
    assert!(!output.status.success());
    let result = run.result();
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(result["agent"]["success"], false);
    let summary = result["agent"]["summary"].as_str().unwrap();
    assert!(summary.contains("HTTP 401"), "{summary}");
    let events = run
        .events()
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(events.contains("api_error_status=401"), "{events}");
    assert_eq!(server.scripted_requests(), 1, "no retries were allowed");
    run.assert_absent_from_folder(API_KEY);
}

#[test]
fn claude_code_retries_529_within_its_limit() {
    require_clis!();
    // Two overloads, then an answer: two retries suffice.
    let (run, server, output) = claude_failure(
        vec![
            Reply::status(529),
            Reply::status(529),
            Reply::text("recovered"),
        ],
        2,
        "3m",
    );
    assert!(output.status.success(), "{}", describe(&output, &run));
    assert_eq!(server.scripted_requests(), 3);
    assert_eq!(run.result()["agent"]["summary"], "recovered");

    // Always overloaded, one retry allowed: two requests, then a clear failure.
    let (run, server, output) = claude_failure(vec![Reply::status(529)], 1, "3m");
    assert!(!output.status.success());
    assert_eq!(server.scripted_requests(), 2);
    let summary = run.result()["agent"]["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(summary.contains("529"), "{summary}");
}

#[test]
fn claude_code_500_and_in_stream_errors_fail_clearly() {
    require_clis!();
    let (run, _server, output) = claude_failure(vec![Reply::status(500)], 0, "2m");
    assert!(!output.status.success());
    let summary = run.result()["agent"]["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(summary.contains("500"), "{summary}");

    let (run, _server, output) = claude_failure(
        vec![Reply::bash("ls"), Reply::StreamError("api_error".into())],
        0,
        "2m",
    );
    assert!(!output.status.success(), "{}", describe(&output, &run));
    let result = run.result();
    assert_eq!(result["agent"]["success"], false, "{result:#}");
    let summary = result["agent"]["summary"].as_str().unwrap();
    assert!(summary.contains("error"), "{summary}");
    // The turn before the error is kept.
    assert!(!events_of(&run.events(), "toolCall").is_empty());
}

#[test]
fn claude_code_timeout_keeps_the_partial_events() {
    require_clis!();
    let (run, _server, output) = claude_failure(vec![Reply::bash("ls"), Reply::Stall], 0, "20s");
    assert!(!output.status.success());
    let result = run.result();
    assert_eq!(result["status"], "timedOut", "{result:#}");
    let events = run.events();
    assert!(!events_of(&events, "toolCall").is_empty(), "{events:#?}");
    assert!(!events_of(&events, "toolResult").is_empty(), "{events:#?}");
}

#[test]
fn claude_code_killed_mid_stream_fails_and_keeps_its_events() {
    let clis = require_clis!();
    let server = AnthropicServer::start(vec![Reply::bash("ls"), Reply::Stall]);
    let run = Run::new();
    // A unique system prompt finds the CLI's process among the test's others.
    let marker = format!("kill-marker-{}", std::process::id());
    let agent = format!(
        "agent:\n  driver: claude-code-api\n  systemPrompt: {marker}\n  options:\n    maxRetries: 0\n    baseUrl: {}\n",
        server.url()
    );
    let spec = run.execution(Some(clis), "3m", &agent);
    let killer = std::thread::spawn({
        let marker = marker.clone();
        move || {
            let found = support::eventually(120, || {
                server.scripted_requests() >= 2 && !support::processes_with_arg(&marker).is_empty()
            });
            assert!(found, "Claude Code never reached the stalled request");
            for pid in support::processes_with_arg(&marker) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            server
        }
    });
    let output = run.run(&spec, &[("ANTHROPIC_API_KEY", API_KEY)]);
    let _server = killer.join().unwrap();
    assert!(!output.status.success());
    let result = run.result();
    assert_eq!(result["agent"]["success"], false, "{result:#}");
    let summary = result["agent"]["summary"].as_str().unwrap();
    assert!(summary.contains("signal 9"), "{summary}");
    assert!(result["agent"]["sessionId"].is_string(), "{result:#}");
    assert!(!events_of(&run.events(), "toolCall").is_empty());
}

#[test]
fn claude_code_missing_cli_and_missing_key_are_clear_errors() {
    // No CLIs mounted: `claude` is not on the sandbox's PATH.
    let run = Run::new();
    let output = run.run(
        &run.execution(
            None,
            "1m",
            &claude_agent("claude-code-api", "maxRetries: 0"),
        ),
        &[("ANTHROPIC_API_KEY", API_KEY)],
    );
    assert!(!output.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stderr),
        run.result()
    );
    assert!(
        text.contains("npm install -g @anthropic-ai/claude-code"),
        "{text}"
    );

    let run = Run::new();
    let output = run.run(
        &run.execution(
            None,
            "1m",
            &claude_agent("claude-code-api", "maxRetries: 0"),
        ),
        &[],
    );
    assert!(!output.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stderr),
        run.result()
    );
    assert!(text.contains("--secret-env ANTHROPIC_API_KEY"), "{text}");
}

#[test]
fn malformed_and_unknown_lines_are_raw_events_never_failures() {
    // A stand-in: the real CLI never prints garbage on purpose.
    let run = Run::new();
    let script = r#"#!/bin/sh
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"fake-1","model":"m","claude_code_version":"0"}'
echo 'this is not json'
echo '{"type":"brand_new_type","x":1}'
echo '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"fine","session_id":"fake-1","total_cost_usd":0.001,"usage":{"input_tokens":1,"output_tokens":2}}'
"#;
    let path = run.workspace.path().join("fake-claude");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = run.run(
        &run.execution(
            None,
            "1m",
            &claude_agent("claude-code-api", "command: [/workspace/fake-claude]"),
        ),
        &[("ANTHROPIC_API_KEY", API_KEY)],
    );
    assert!(output.status.success(), "{}", describe(&output, &run));
    let events = run
        .events()
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(events.contains("this is not json"), "{events}");
    assert!(events.contains("brand_new_type"), "{events}");
    assert_eq!(run.result()["agent"]["sessionId"], "fake-1");
}

fn codex_agent(options: &str) -> String {
    agent_yaml("openai-codex", "gpt-5-codex", options)
}

#[test]
fn codex_completes_a_tool_session_through_a_config_toml_provider() {
    let clis = require_clis!();
    let server = ResponsesServer::start(vec![
        responses::Reply::exec("ls"),
        responses::Reply::exec("printf 'written by codex\\n' > NOTES.md"),
        responses::Reply::exec("wc -l NOTES.md"),
        responses::Reply::text("Done: added NOTES.md."),
    ]);
    let run = Run::new();
    let output = run.run(
        &run.execution(Some(clis), "3m", &codex_agent("maxRetries: 0")),
        &[
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("OPENAI_BASE_URL", &server.base_url()),
        ],
    );
    assert!(output.status.success(), "{}", describe(&output, &run));
    let notes = std::fs::read_to_string(run.workspace.path().join("NOTES.md")).unwrap();
    assert_eq!(notes, "written by codex\n");

    let outputs: Vec<String> = server
        .requests()
        .iter()
        .flat_map(responses::function_outputs)
        .map(|(_, out)| out)
        .collect();
    assert!(outputs.iter().any(|o| o.contains("main.py")), "{outputs:?}");
    assert!(
        outputs.iter().any(|o| o.contains("1 NOTES.md")),
        "{outputs:?}"
    );
    assert_eq!(server.scripted_requests(), 4);
    let auth = server.requests()[0]
        .header("authorization")
        .map(str::to_string);
    assert_eq!(auth, Some(format!("Bearer {OPENAI_KEY}")));

    let result = run.result();
    let agent = &result["agent"];
    assert_eq!(agent["driver"], "openai-codex");
    assert_eq!(agent["success"], true, "{result:#}");
    assert!(!agent["sessionId"].as_str().unwrap().is_empty());
    assert!(agent["turns"].as_u64().unwrap() >= 1);
    assert_eq!(
        agent["usage"]["inputTokens"].as_u64().unwrap(),
        4 * responses::INPUT_TOKENS
    );
    assert_eq!(agent["summary"], "Done: added NOTES.md.");
    let events = run.events();
    assert!(events_of(&events, "toolCall").len() >= 3, "{events:#?}");
    // The config lives in the sandbox's private HOME, not the workspace.
    assert!(!run.workspace.path().join(".codex").exists());
    run.assert_absent_from_folder(OPENAI_KEY);
}

#[test]
fn codex_401_fails_clearly() {
    let clis = require_clis!();
    let server = ResponsesServer::start(vec![responses::Reply::Status(401)]);
    let run = Run::new();
    let options = format!("maxRetries: 0\nbaseUrl: {}", server.base_url());
    let output = run.run(
        &run.execution(Some(clis), "2m", &codex_agent(&options)),
        &[("OPENAI_API_KEY", OPENAI_KEY)],
    );
    assert!(!output.status.success());
    assert!(!server.requests().is_empty(), "{}", describe(&output, &run));
    let result = run.result();
    assert_eq!(result["agent"]["success"], false, "{result:#}");
    let summary = result["agent"]["summary"].as_str().unwrap();
    assert!(summary.contains("401"), "{summary}");
    run.assert_absent_from_folder(OPENAI_KEY);
}

/// The Docker test image: busybox, bash and the glibc libraries Claude Code's binary
/// links (`ldd`), copied from this machine; no image registry is reachable here.
/// The gateway from `GATEWAY|SUBNET` as `docker network inspect` prints the bridge's
/// IPAM config. An engine may record only the subnet (Docker 20.10 did on one of our
/// machines); the gateway is then, as Docker documents for its default IPAM driver,
/// the subnet's first address.
fn bridge_gateway(ipam: &str) -> Result<std::net::IpAddr, String> {
    let (gateway, subnet) = ipam.split_once('|').unwrap_or((ipam, ""));
    if !gateway.is_empty() {
        return gateway
            .parse()
            .map_err(|e| format!("bridge gateway {gateway:?}: {e}"));
    }
    let network: std::net::Ipv4Addr = subnet
        .split_once('/')
        .map_or(subnet, |(address, _)| address)
        .parse()
        .map_err(|e| format!("bridge subnet {subnet:?} (and no gateway): {e}"))?;
    Ok(std::net::Ipv4Addr::from(u32::from(network) + 1).into())
}

/// The Docker bridge's gateway address (what containers reach the host by), after
/// building the test image; `None` (after a loud message) without an engine outside CI.
fn docker_gateway() -> Option<std::net::IpAddr> {
    static GATEWAY: OnceLock<Result<std::net::IpAddr, String>> = OnceLock::new();
    let gateway = GATEWAY.get_or_init(|| {
        let inspect = Command::new("docker")
            .args([
                "network",
                "inspect",
                "bridge",
                "--format",
                "{{(index .IPAM.Config 0).Gateway}}|{{(index .IPAM.Config 0).Subnet}}",
            ])
            .output()
            .map_err(|e| format!("cannot run `docker`: {e}"))?;
        if !inspect.status.success() {
            return Err(format!(
                "`docker network inspect bridge` failed: {}",
                String::from_utf8_lossy(&inspect.stderr)
            ));
        }
        let ip = bridge_gateway(String::from_utf8_lossy(&inspect.stdout).trim())?;
        build_glibc_image()?;
        Ok(ip)
    });
    match gateway {
        Ok(ip) => Some(*ip),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and the Docker engine is not usable: {why}")
        }
        Err(why) => {
            eprintln!("\n!!! SKIPPING Docker agent test: {why} (start dockerd)\n");
            None
        }
    }
}

#[test]
fn claude_code_in_docker_completes_a_tool_session() {
    let clis = require_clis!();
    let Some(gateway) = docker_gateway() else {
        return;
    };
    let server = AnthropicServer::start_on(
        gateway,
        vec![
            Reply::bash("ls"),
            Reply::bash("echo 'written in docker' > NOTES.md"),
            Reply::text("Done in docker."),
        ],
    );
    let run = Run::new();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: docker\n  image: {GLIBC_IMAGE}\n  network: bridge\n  resources:\n    timeout: 3m\n  mounts:\n    - source: {}\n      target: {CLIS_IN_SANDBOX}\n      readonly: true\n  environment:\n    PATH: {CLIS_IN_SANDBOX}/node_modules/.bin:/bin\n    SHELL: /bin/bash\n{}",
        run.workspace.path().display(),
        clis.display(),
        claude_agent("claude-code-api", &format!("maxRetries: 0\nbaseUrl: {}", server.url())),
    );
    // The CLI folder is outside the home and temporary folders: sandboxes bind it only
    // by the operator's grant.
    run.allow_mounts_of(clis);
    let output = run.run(&execution, &[("ANTHROPIC_API_KEY", API_KEY)]);
    assert!(output.status.success(), "{}", describe(&output, &run));
    let notes = std::fs::read_to_string(run.workspace.path().join("NOTES.md")).unwrap();
    assert_eq!(notes, "written in docker\n");
    let result = run.result();
    assert_eq!(result["sandbox"]["provider"], "docker");
    assert_eq!(result["agent"]["summary"], "Done in docker.");
    assert!(result["agent"]["usage"]["costUsd"].as_f64().unwrap() > 0.0);
    assert!(result["agent"]["sessionId"].is_string());
    run.assert_absent_from_folder(API_KEY);
}
