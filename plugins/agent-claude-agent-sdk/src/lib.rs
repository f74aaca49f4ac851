//! Agent driver `claude-agent-sdk`: the agent loop itself, in the plugin.
//!
//! Unlike the CLI drivers, no agent program runs in the sandbox: this plugin talks to
//! the Anthropic Messages API over `wasi:http` (capability `http`, allowed by the host
//! to reach only the host of `ANTHROPIC_BASE_URL`), streams each answer, and runs the
//! tools the model calls inside the run's sandbox through the `sandbox` capability.
//! The model traffic leaves from the plugin, so the sandbox can run with
//! `network: none`.
//!
//! The loop stops when the model ends its turn, or when a limit is reached (turns from
//! `convergence.limits.maxIterations`, an answer cut off at `agent.maxTokens`, cost from
//! `convergence.limits.maxCost`), and says which. Overloaded and rate-limited
//! answers (529, 429) are retried with bounded exponential backoff.

mod client;
mod messages;
mod pricing;
mod sse;
mod tools;

use agentgate_plugin_sdk::agent_driver::driver::{AgentOutcome, AgentTask, Guest as Driver};
use agentgate_plugin_sdk::agent_driver::Guest;
use agentgate_plugin_sdk::host::types::Usage;
use agentgate_plugin_sdk::{error, events, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;
use serde_json::{json, Value};

use client::{Endpoint, HttpError};
use messages::{Finished, Tokens, Turn};
use pricing::Pricing;
use tools::Tool;

const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "maxRetries": {
      "description": "Retries of a request answered 429 or 529 (default 4).",
      "type": "integer", "minimum": 0, "maximum": 10
    },
    "retryBaseMs": {
      "description": "First retry delay in ms, doubled on each retry, at most 30 s (default 1000).",
      "type": "integer", "minimum": 1, "maximum": 30000
    },
    "commandTimeoutMs": {
      "description": "Longest a bash or grep tool call may run, in ms (default 120000).",
      "type": "integer", "minimum": 1
    },
    "pricing": {
      "description": "USD per million tokens, for a model the driver has no list price for.",
      "type": "object", "additionalProperties": false,
      "required": ["inputPerMTok", "outputPerMTok", "cacheWritePerMTok", "cacheReadPerMTok"],
      "properties": {
        "inputPerMTok": {"type": "number", "minimum": 0},
        "outputPerMTok": {"type": "number", "minimum": 0},
        "cacheWritePerMTok": {"type": "number", "minimum": 0},
        "cacheReadPerMTok": {"type": "number", "minimum": 0}
      }
    }
  }
}"#;

const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";
/// Turns when `convergence.limits.maxIterations` is not given.
const DEFAULT_MAX_TURNS: u32 = 50;
/// The longest wait between retries.
const MAX_RETRY_DELAY_MS: u64 = 30_000;
/// The most one answer may ask for: the Messages API refuses a `max_tokens` above the
/// model's output limit (32k to 64k tokens for current models), and `agent.maxTokens`
/// defaults to 200000.
const MAX_ANSWER_TOKENS: u64 = 32_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SdkOptions {
    #[serde(default = "default_retries")]
    max_retries: u32,
    #[serde(default = "default_retry_base")]
    retry_base_ms: u64,
    #[serde(default = "default_command_timeout")]
    command_timeout_ms: u64,
    #[serde(default)]
    pricing: Option<Pricing>,
}

fn default_retries() -> u32 {
    4
}
fn default_retry_base() -> u64 {
    1_000
}
fn default_command_timeout() -> u64 {
    120_000
}

/// Everything a run needs, checked before the first request.
#[derive(Debug)]
struct Config {
    endpoint: Endpoint,
    /// The credential header: `x-api-key`, or `authorization` for a bearer token.
    auth: (&'static str, String),
    model: String,
    pricing: Option<Pricing>,
    tools: Vec<Tool>,
    max_turns: u32,
    options: SdkOptions,
}

impl Config {
    fn of(task: &AgentTask) -> Result<Config, Error> {
        let options: SdkOptions = options::parse("options", &task.options)?;
        let secret = |name: &str| {
            task.secrets
                .iter()
                .find(|s| s.name == name && !s.value.is_empty())
                .map(|s| s.value.clone())
        };
        let auth = match (secret("ANTHROPIC_API_KEY"), secret("ANTHROPIC_AUTH_TOKEN")) {
            (Some(key), _) => ("x-api-key", key),
            (None, Some(token)) => ("authorization", format!("Bearer {token}")),
            (None, None) => {
                return Err(error::unavailable(
                    "claude-agent-sdk needs an Anthropic API key: set ANTHROPIC_API_KEY and pass it with --secret-env ANTHROPIC_API_KEY",
                ))
            }
        };
        let base_url = secret("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.into());
        let endpoint = Endpoint::parse(&base_url).map_err(error::unavailable)?;
        let model = task.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
        let pricing = options.pricing.or_else(|| pricing::list_price(&model));
        if pricing.is_none() && task.max_cost_usd.is_some() {
            return Err(error::invalid_spec(
                "options.pricing",
                format!(
                    "convergence.limits.maxCost is set but model {model:?} has no known price; give its prices in agent.options.pricing (inputPerMTok, outputPerMTok, cacheWritePerMTok, cacheReadPerMTok)"
                ),
            ));
        }
        Ok(Config {
            endpoint,
            auth,
            model,
            pricing,
            tools: tools::select(&task.capabilities, &task.tools)?,
            max_turns: task.max_iterations.unwrap_or(DEFAULT_MAX_TURNS),
            options,
        })
    }

    /// Delay before retry `attempt` (0-based): `retry-after` when the server sent
    /// one, else exponential; never more than `MAX_RETRY_DELAY_MS`.
    fn retry_delay_ms(&self, attempt: u32, retry_after_secs: Option<u64>) -> u64 {
        let delay = match retry_after_secs {
            Some(secs) => secs.saturating_mul(1_000),
            None => self
                .options
                .retry_base_ms
                .saturating_mul(1u64 << attempt.min(20)),
        };
        delay.min(MAX_RETRY_DELAY_MS)
    }
}

/// Why the loop stopped.
#[derive(Debug, Clone, PartialEq)]
enum Stop {
    EndTurn,
    MaxTurns(u32),
    MaxTokens(u64),
    TokenBudget { used: u64, limit: u64 },
    MaxCost { spent: f64, limit: f64 },
    Refusal,
}

impl Stop {
    fn describe(&self) -> String {
        match self {
            Stop::EndTurn => "the model ended its turn".into(),
            Stop::MaxTurns(n) => format!("stopped: the turn limit ({n}, convergence.limits.maxIterations) was reached"),
            Stop::MaxTokens(n) => format!("stopped: an answer reached the token limit (agent.maxTokens = {n})"),
            Stop::TokenBudget { used, limit } => format!(
                "stopped: the token budget was reached ({used} tokens used, convergence.limits.maxTokens = {limit})"
            ),
            Stop::MaxCost { spent, limit } => format!(
                "stopped: the cost limit was reached (${spent:.4} spent, convergence.limits.maxCost = ${limit})"
            ),
            Stop::Refusal => "stopped: the model refused to continue".into(),
        }
    }
}

/// Text that describes a host error, for tool results and messages.
pub(crate) fn describe_error(e: &Error) -> String {
    match e {
        Error::InvalidSpec(f) => format!("{}: {}", f.path, f.message),
        Error::Unavailable(m) | Error::Denied(m) | Error::Failed(m) | Error::TimedOut(m) => {
            m.clone()
        }
    }
}

fn http_error(e: HttpError) -> Error {
    match e {
        HttpError::Denied(m) => error::denied(m),
        HttpError::TimedOut(m) => error::timed_out(m),
        HttpError::Failed(m) => error::failed(m),
    }
}

/// The failure for a non-2xx answer the loop does not retry (any more).
fn api_failure(status: u16, body: &[u8], retries: u32) -> Error {
    let detail = match messages::error_of_body(body) {
        Some(e) => format!("{}: {}", e.kind, e.message),
        None => String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_string(),
    };
    error::failed(match status {
        401 => format!(
            "the Anthropic API refused the credentials (HTTP 401, {detail}); check ANTHROPIC_API_KEY"
        ),
        403 => format!("the Anthropic API refused access (HTTP 403, {detail}); check the key's permissions"),
        429 | 529 => format!(
            "the Anthropic API answered HTTP {status} ({detail}) and still did after {retries} retries; try again later or raise agent.options.maxRetries"
        ),
        _ => format!("the Anthropic API answered HTTP {status} ({detail})"),
    })
}

fn sleep_ms(ms: u64) {
    #[cfg(target_arch = "wasm32")]
    wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
    #[cfg(not(target_arch = "wasm32"))]
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// One turn: the request (retried on 429/529) and its streamed answer.
fn request_turn(config: &Config, body: &[u8]) -> Result<Turn, Error> {
    let headers = [
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("anthropic-version", API_VERSION),
        (config.auth.0, config.auth.1.as_str()),
    ];
    let mut attempt = 0;
    loop {
        let mut response = client::post(&config.endpoint, &headers, body).map_err(http_error)?;
        match response.status {
            200 => return stream_turn(&mut response),
            429 | 529 if attempt < config.options.max_retries => {
                let delay = config.retry_delay_ms(attempt, response.retry_after_secs);
                let detail = messages::error_of_body(&response.read_to_end(64 * 1024))
                    .map(|e| format!(" ({})", e.kind))
                    .unwrap_or_default();
                attempt += 1;
                events::warn(format!(
                    "the Anthropic API answered HTTP {}{detail}; retry {attempt} of {} in {delay} ms",
                    response.status, config.options.max_retries
                ));
                sleep_ms(delay);
            }
            status => {
                return Err(api_failure(
                    status,
                    &response.read_to_end(64 * 1024),
                    attempt,
                ))
            }
        }
    }
}

/// Reads one streamed answer, reporting text and tool calls as they complete.
fn stream_turn(response: &mut client::Response) -> Result<Turn, Error> {
    let mut turn = Turn::default();
    for event in sse::Events::new(|| response.read_chunk()) {
        let event = event.map_err(|e| error::failed(format!("the API's stream broke off: {e}")))?;
        let name = if event.event.is_empty() {
            "message"
        } else {
            event.event.as_str()
        };
        match turn.apply(name, &event.data) {
            Ok(Some(Finished::Text(text))) if !text.is_empty() => events::agent_message(text),
            Ok(Some(Finished::ToolUse { id, name, input })) => {
                events::tool_call(id, name, input.to_string())
            }
            Ok(_) => {}
            Err(e) => return Err(error::failed(e.to_string())),
        }
        if turn.complete {
            break;
        }
    }
    if !turn.complete {
        return Err(error::failed(
            "the API's stream ended before message_stop: the answer is incomplete",
        ));
    }
    Ok(turn)
}

/// Runs the turn's tool calls; returns the user message with their results.
fn run_tools(config: &Config, turn: &Turn) -> Value {
    let results: Vec<Value> = turn
        .tool_uses()
        .into_iter()
        .map(|(id, name, input)| {
            let result = match config.tools.iter().find(|t| t.name() == name) {
                Some(tool) => tools::run(*tool, &input, config.options.command_timeout_ms),
                None => Err(format!("tool {name:?} is not available in this run")),
            };
            let (text, is_error) = match result {
                Ok(text) => (tools::truncate(text), false),
                Err(text) => (text, true),
            };
            events::tool_result(id.clone(), text.clone(), is_error);
            json!({"type": "tool_result", "tool_use_id": id, "content": text, "is_error": is_error})
        })
        .collect();
    json!({"role": "user", "content": results})
}

fn usage(tokens: &Tokens, cost: Option<f64>) -> Usage {
    Usage {
        input_tokens: tokens.input_tokens,
        output_tokens: tokens.output_tokens,
        cache_read_tokens: tokens.cache_read_input_tokens,
        cache_write_tokens: tokens.cache_creation_input_tokens,
        cost_usd: cost,
    }
}

/// The loop.
fn agent_loop(task: &AgentTask, config: &Config) -> Result<AgentOutcome, Error> {
    let prompt = match &task.context {
        Some(context) if !context.is_empty() => format!("{}\n\nContext:\n{context}", task.prompt),
        _ => task.prompt.clone(),
    };
    let definitions: Vec<Value> = config.tools.iter().map(|t| t.definition()).collect();
    let mut messages = vec![json!({"role": "user", "content": prompt})];
    let mut total = Tokens::default();
    let mut cost = config.pricing.map(|_| 0.0);
    let mut turns = 0;
    let mut summary = None;
    let stop = loop {
        if turns >= config.max_turns {
            break Stop::MaxTurns(config.max_turns);
        }
        turns += 1;
        let body = messages::Request {
            model: &config.model,
            max_tokens: task.max_tokens.min(MAX_ANSWER_TOKENS),
            temperature: task.temperature,
            system: task.system_prompt.as_deref(),
            tools: &definitions,
            messages: &messages,
        }
        .body();
        let turn = request_turn(config, body.to_string().as_bytes())?;
        total.add(&turn.usage);
        let turn_cost = config.pricing.map(|p| p.cost(&turn.usage));
        if let (Some(sum), Some(c)) = (cost.as_mut(), turn_cost) {
            *sum += c;
        }
        events::usage(usage(&turn.usage, turn_cost));
        let text = turn.text();
        if !text.is_empty() {
            summary = Some(text);
        }
        messages.push(turn.message());
        let stop = match turn.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => Some(Stop::EndTurn),
            Some("max_tokens") => Some(Stop::MaxTokens(task.max_tokens.min(MAX_ANSWER_TOKENS))),
            Some("refusal") => Some(Stop::Refusal),
            Some("tool_use") => None,
            other => {
                return Err(error::failed(format!(
                    "the API ended turn {turns} with stop reason {other:?}, which this driver does not know"
                )))
            }
        };
        if let Some(stop) = stop {
            break stop;
        }
        messages.push(run_tools(config, &turn));
        if let (Some(spent), Some(limit)) = (cost, task.max_cost_usd) {
            if spent >= limit {
                break Stop::MaxCost { spent, limit };
            }
        }
        if let Some(limit) = task.max_total_tokens {
            let used = total.total();
            if used >= limit {
                break Stop::TokenBudget { used, limit };
            }
        }
    };
    let success = stop == Stop::EndTurn;
    let said = stop.describe();
    if success {
        events::info(format!("{said} after {turns} turns"));
    } else {
        events::warn(format!("{said} after {turns} turns"));
    }
    Ok(AgentOutcome {
        exit_code: if success { 0 } else { 1 },
        success,
        session_id: Some(format!("claude-agent-sdk-{}", task.run_id)),
        turns: Some(turns),
        usage: Some(usage(&total, cost)),
        summary: if success { summary } else { Some(said) },
    })
}

struct SdkDriver;

impl Guest for SdkDriver {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "agent-claude-agent-sdk".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::AgentDriver,
            serves: vec!["claude-agent-sdk".into()],
            summary: "The agent loop against the Anthropic Messages API (wasi:http); tools run in the sandbox".into(),
            options_schema: Some(OPTIONS_SCHEMA.into()),
        }
    }
}

impl Driver for SdkDriver {
    fn run(task: AgentTask) -> Result<AgentOutcome, Error> {
        let config = Config::of(&task)?;
        events::progress(
            "agent",
            format!(
                "claude-agent-sdk: model {}, tools [{}], at most {} turns, API at {}",
                config.model,
                config
                    .tools
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                config.max_turns,
                config.endpoint.authority
            ),
        );
        agent_loop(&task, &config)
    }
}

agentgate_plugin_sdk::agent_driver::export_agent_driver!(SdkDriver);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::agent_driver::driver::AgentCapabilities;
    use agentgate_plugin_sdk::env_var;

    fn task(options: &str, secrets: &[(&str, &str)]) -> AgentTask {
        AgentTask {
            run_id: "r1".into(),
            driver: "claude-agent-sdk".into(),
            prompt: "fix it".into(),
            context: None,
            system_prompt: None,
            model: None,
            max_tokens: 1000,
            temperature: None,
            tools: vec![],
            capabilities: AgentCapabilities {
                file_system: true,
                network: false,
                shell: true,
                browser: false,
            },
            mcp_servers: vec![],
            max_iterations: Some(3),
            max_cost_usd: None,
            max_total_tokens: None,
            timeout_ms: 1000,
            secrets: secrets.iter().map(|(k, v)| env_var(*k, *v)).collect(),
            options: options.into(),
        }
    }

    #[test]
    fn the_config_comes_from_the_task_and_its_secrets() {
        let t = task(
            "{}",
            &[
                ("ANTHROPIC_API_KEY", "k"),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ],
        );
        let config = Config::of(&t).unwrap();
        assert_eq!(config.auth, ("x-api-key", "k".to_string()));
        assert_eq!(config.endpoint.authority, "127.0.0.1:9");
        assert_eq!(config.model, DEFAULT_MODEL);
        assert_eq!(config.max_turns, 3);
        assert_eq!(config.tools.len(), 7);
        assert!(config.pricing.is_some());

        let t = task("{}", &[("ANTHROPIC_AUTH_TOKEN", "t")]);
        let config = Config::of(&t).unwrap();
        assert_eq!(config.auth, ("authorization", "Bearer t".to_string()));
        assert_eq!(config.endpoint.authority, "api.anthropic.com");
    }

    #[test]
    fn a_missing_key_says_how_to_pass_it() {
        let err = Config::of(&task("{}", &[])).unwrap_err();
        assert!(
            describe_error(&err).contains("--secret-env ANTHROPIC_API_KEY"),
            "{err:?}"
        );
    }

    #[test]
    fn a_cost_limit_needs_a_price() {
        let mut t = task("{}", &[("ANTHROPIC_API_KEY", "k")]);
        t.model = Some("my-own-model".into());
        t.max_cost_usd = Some(1.0);
        let err = Config::of(&t).unwrap_err();
        assert!(
            describe_error(&err).contains("agent.options.pricing"),
            "{err:?}"
        );
        t.options = r#"{"pricing":{"inputPerMTok":1,"outputPerMTok":2,"cacheWritePerMTok":1,"cacheReadPerMTok":0.1}}"#.into();
        assert!(Config::of(&t).unwrap().pricing.is_some());
    }

    #[test]
    fn retries_back_off_exponentially_within_a_bound() {
        let t = task(r#"{"retryBaseMs": 100}"#, &[("ANTHROPIC_API_KEY", "k")]);
        let config = Config::of(&t).unwrap();
        let delays: Vec<_> = (0..4).map(|a| config.retry_delay_ms(a, None)).collect();
        assert_eq!(delays, [100, 200, 400, 800]);
        assert_eq!(config.retry_delay_ms(30, None), MAX_RETRY_DELAY_MS);
        assert_eq!(config.retry_delay_ms(0, Some(2)), 2_000);
        assert_eq!(config.retry_delay_ms(0, Some(3600)), MAX_RETRY_DELAY_MS);
    }

    #[test]
    fn api_failures_say_what_to_do() {
        let body = br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        let text = describe_error(&api_failure(401, body, 0));
        assert!(
            text.contains("HTTP 401")
                && text.contains("invalid x-api-key")
                && text.contains("ANTHROPIC_API_KEY"),
            "{text}"
        );
        let text = describe_error(&api_failure(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            4,
        ));
        assert!(text.contains("after 4 retries"), "{text}");
        let text = describe_error(&api_failure(500, b"upstream exploded", 0));
        assert!(text.contains("HTTP 500 (upstream exploded)"), "{text}");
    }

    #[test]
    fn stops_say_which_limit() {
        assert!(Stop::MaxTurns(3).describe().contains("maxIterations"));
        assert!(Stop::MaxTokens(10)
            .describe()
            .contains("agent.maxTokens = 10"));
        assert!(Stop::MaxCost {
            spent: 1.5,
            limit: 1.0
        }
        .describe()
        .contains("maxCost = $1"));
    }
}
