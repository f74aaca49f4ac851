//! Agent drivers `claude-code-subscription` and `claude-code-api`: the Claude Code CLI,
//! headless, in the run's sandbox.
//!
//! Runs `claude -p --output-format stream-json --verbose` through the `sandbox`
//! capability with the prompt on stdin, turns every stream-json line into an event
//! (init, assistant text, tool calls and results, retries, the final result; unknown
//! lines raw), and reports the session, turns, usage, cost and final answer. The two
//! driver names differ only in credentials (see [`command::environment`]). MCP servers
//! go into a config file in the sandbox's private `HOME`, never the workspace.

mod command;
mod stream;

use agentgate_plugin_sdk::agent_driver::driver::{AgentOutcome, AgentTask, Guest as Driver};
use agentgate_plugin_sdk::agent_driver::Guest;
use agentgate_plugin_sdk::host::events::LogLevel;
use agentgate_plugin_sdk::host::types::{ExitStatus, OutputPipe, Usage};
use agentgate_plugin_sdk::output::exit_code;
use agentgate_plugin_sdk::{cli, events, home, options, Error, PluginInfo, PluginKind};

use command::Options;
use stream::{Final, Message};

/// How to get the CLI, for the error when the sandbox has none.
const INSTALL_HINT: &str = "install Claude Code in the sandbox (`npm install -g \
    @anthropic-ai/claude-code`, in the image for docker), or mount it and set \
    agent.options.command to its path in the sandbox";

/// The MCP config file, relative to the sandbox's private HOME.
const MCP_CONFIG: &str = ".agentgate/claude-mcp.json";

/// What the run has reported so far; becomes the outcome.
#[derive(Default)]
struct Session {
    session_id: Option<String>,
    last_text: Option<String>,
    final_: Option<Final>,
}

impl Session {
    /// Remembers what the outcome needs from one message.
    fn absorb(&mut self, message: &Message) {
        match message {
            Message::Init { session_id, .. } => self.session_id = session_id.clone(),
            Message::Text(text) => self.last_text = Some(text.clone()),
            Message::Final(f) => {
                if f.session_id.is_some() {
                    self.session_id = f.session_id.clone();
                }
                self.final_ = Some(f.clone());
            }
            _ => {}
        }
    }

    fn outcome(self, status: &ExitStatus) -> AgentOutcome {
        let exit_code = exit_code(status);
        let Some(f) = self.final_ else {
            let how = if status.timed_out {
                "was stopped at its deadline".to_string()
            } else if let Some(signal) = status.signal {
                format!("was killed by signal {signal}")
            } else {
                format!("exited with code {exit_code}")
            };
            return AgentOutcome {
                exit_code,
                success: false,
                session_id: self.session_id,
                turns: None,
                usage: None,
                summary: Some(format!(
                    "Claude Code {how} before its final result{}",
                    self.last_text
                        .map(|t| format!("; its last message: {t}"))
                        .unwrap_or_default()
                )),
            };
        };
        AgentOutcome {
            exit_code,
            success: exit_code == 0 && f.succeeded(),
            session_id: self.session_id,
            turns: f.num_turns,
            usage: Some(usage(&f)),
            summary: f.summary(),
        }
    }
}

/// Emits the event for one message.
fn emit(message: Message) {
    match message {
        Message::Init {
            session_id,
            model,
            version,
            permission_mode,
        } => events::progress(
            "agent",
            format!(
                "Claude Code {} started session {} (model {}, permissions {})",
                version.as_deref().unwrap_or("?"),
                session_id.as_deref().unwrap_or("?"),
                model.as_deref().unwrap_or("?"),
                permission_mode.as_deref().unwrap_or("?"),
            ),
        ),
        Message::Retry(text) => events::warn(text),
        Message::Text(text) => events::agent_message(text),
        Message::ToolUse { id, name, input } => events::tool_call(id, name, input),
        Message::ToolResult {
            id,
            output,
            is_error,
        } => events::tool_result(id, output, is_error),
        Message::Final(f) => {
            events::usage(usage(&f));
            if let Some(status) = f.api_error_status {
                events::log(
                    LogLevel::Error,
                    format!("model API error: HTTP {status} (api_error_status={status})"),
                );
            }
        }
        Message::Raw(line) => events::output_line(OutputPipe::Stdout, line),
    }
}

fn usage(f: &Final) -> Usage {
    Usage {
        input_tokens: f.input_tokens,
        output_tokens: f.output_tokens,
        cache_read_tokens: f.cache_read_tokens,
        cache_write_tokens: f.cache_write_tokens,
        cost_usd: f.total_cost_usd,
    }
}

struct ClaudeCode;

impl Guest for ClaudeCode {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "agent-claude-code".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::AgentDriver,
            serves: vec![command::SUBSCRIPTION.into(), command::API.into()],
            summary: "Claude Code CLI, headless (stream-json), in the run's sandbox; \
                      subscription (OAuth token) or API key"
                .into(),
            options_schema: Some(command::OPTIONS_SCHEMA.into()),
        }
    }
}

impl Driver for ClaudeCode {
    fn run(task: AgentTask) -> Result<AgentOutcome, Error> {
        let opts: Options = options::parse("options", &task.options)?;
        let env = command::environment(&task, &opts)?;
        let mcp_path = command::mcp_config(&task)
            .map(|config| home::write_file(MCP_CONFIG, config.as_bytes()))
            .transpose()?;
        let argv = command::argv(&task, &opts, mcp_path.as_deref());
        events::progress(
            "agent",
            format!("running {} ({})", opts.command().join(" "), task.driver),
        );
        let mut session = Session::default();
        let prompt = command::prompt(&task);
        let status = cli::run_lines(argv, env, prompt, INSTALL_HINT, |line| {
            for message in stream::parse_line(&line) {
                session.absorb(&message);
                emit(message);
            }
        })?;
        Ok(session.outcome(&status))
    }
}

agentgate_plugin_sdk::agent_driver::export_agent_driver!(ClaudeCode);

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Option<i32>, signal: Option<i32>, timed_out: bool) -> ExitStatus {
        ExitStatus {
            code,
            signal,
            timed_out,
        }
    }

    fn session(lines: &[&str]) -> Session {
        let mut s = Session::default();
        for line in lines {
            for m in stream::parse_line(line) {
                s.absorb(&m);
            }
        }
        s
    }

    const INIT: &str = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;

    #[test]
    fn final_result_gives_turns_usage_cost_session_summary() {
        let s = session(&[
            INIT,
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":4,"result":"Done.","session_id":"s-1","total_cost_usd":0.5,"usage":{"input_tokens":400,"output_tokens":80}}"#,
        ]);
        let o = s.outcome(&status(Some(0), None, false));
        assert!(o.success);
        assert_eq!(o.turns, Some(4));
        assert_eq!(o.session_id.as_deref(), Some("s-1"));
        let u = o.usage.unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cost_usd),
            (400, 80, Some(0.5))
        );
        assert_eq!(o.summary.as_deref(), Some("Done."));
    }

    #[test]
    fn api_error_is_a_failed_outcome_naming_the_status() {
        let s = session(&[
            INIT,
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"num_turns":1,"result":"Invalid API key","session_id":"s-1","total_cost_usd":0}"#,
        ]);
        let o = s.outcome(&status(Some(1), None, false));
        assert!(!o.success);
        assert_eq!(o.exit_code, 1);
        let summary = o.summary.unwrap();
        assert!(
            summary.contains("HTTP 401") && summary.contains("Invalid API key"),
            "{summary}"
        );
    }

    #[test]
    fn killed_mid_stream_keeps_session_and_last_message() {
        let s = session(&[
            INIT,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Working on it"}]}}"#,
        ]);
        let o = s.outcome(&status(None, Some(9), false));
        assert!(!o.success);
        assert_eq!(o.exit_code, 137);
        assert_eq!(o.session_id.as_deref(), Some("s-1"));
        let summary = o.summary.unwrap();
        assert!(
            summary.contains("signal 9") && summary.contains("Working on it"),
            "{summary}"
        );
        let o = session(&[INIT]).outcome(&status(None, Some(9), true));
        assert!(o.summary.unwrap().contains("deadline"));
    }
}
