//! Agent driver `openai-codex`: `codex exec --json` in the run's sandbox.
//!
//! Writes Codex's `config.toml` (a model provider at the TaskSpec's base URL, the MCP
//! servers, the system prompt) into the sandbox's private HOME, runs Codex through the
//! `sandbox` capability with the prompt on stdin, turns its JSONL events into typed
//! events (unknown ones raw) and reports the thread id, turns, token usage and final
//! message. Codex reports no cost, so `costUsd` stays empty.

mod command;
mod events;

use agentgate_plugin_sdk::agent_driver::driver::{AgentOutcome, AgentTask, Guest as Driver};
use agentgate_plugin_sdk::agent_driver::Guest;
use agentgate_plugin_sdk::host::events::LogLevel;
use agentgate_plugin_sdk::host::types::{ExitStatus, OutputPipe, Usage};
use agentgate_plugin_sdk::output::exit_code;
use agentgate_plugin_sdk::{cli, home, options, Error, PluginInfo, PluginKind};

use command::Options;
use events::{Message, TurnUsage};

const INSTALL_HINT: &str = "install Codex in the sandbox (`npm install -g @openai/codex`, in \
    the image for docker), or mount it and set agent.options.command to its path in the \
    sandbox";

/// What the run has reported so far; becomes the outcome.
#[derive(Default, Debug, PartialEq)]
struct Session {
    thread_id: Option<String>,
    turns: u32,
    usage: TurnUsage,
    last_text: Option<String>,
    failure: Option<String>,
}

impl Session {
    /// Remembers what the outcome needs from one message.
    fn absorb(&mut self, message: &Message) {
        match message {
            Message::ThreadStarted(id) => self.thread_id = Some(id.clone()),
            Message::Text(text) => self.last_text = Some(text.clone()),
            Message::TurnCompleted(u) => {
                self.turns += 1;
                self.usage.input_tokens += u.input_tokens;
                self.usage.cached_input_tokens += u.cached_input_tokens;
                self.usage.output_tokens += u.output_tokens;
            }
            Message::Failed(reason) => self.failure = Some(reason.clone()),
            _ => {}
        }
    }

    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cache_read_tokens: self.usage.cached_input_tokens,
            cache_write_tokens: 0,
            cost_usd: None,
        }
    }

    fn outcome(self, status: &ExitStatus) -> AgentOutcome {
        let exit_code = exit_code(status);
        let success = exit_code == 0 && self.turns > 0 && self.failure.is_none();
        let summary = match (&self.failure, success) {
            (Some(reason), _) => Some(format!("Codex failed: {reason}")),
            (None, true) => self.last_text.clone(),
            (None, false) => Some(if status.timed_out {
                "Codex was stopped at its deadline before its turn completed".to_string()
            } else if let Some(signal) = status.signal {
                format!("Codex was killed by signal {signal} before its turn completed")
            } else {
                format!("Codex exited with code {exit_code} before its turn completed")
            }),
        };
        AgentOutcome {
            exit_code,
            success,
            usage: (self.turns > 0).then(|| self.usage()),
            session_id: self.thread_id,
            turns: (self.turns > 0).then_some(self.turns),
            summary,
        }
    }
}

/// Emits the event for one message.
fn emit(message: Message) {
    use agentgate_plugin_sdk::events as ev;
    match message {
        Message::ThreadStarted(id) => ev::progress("agent", format!("Codex started thread {id}")),
        Message::CommandStarted { id, command } => ev::tool_call(
            id,
            "exec_command",
            serde_json::json!({"cmd": command}).to_string(),
        ),
        Message::CommandDone {
            id,
            output,
            exit_code,
        } => ev::tool_result(id, output, exit_code != Some(0)),
        Message::FileChange { id, changes } => {
            ev::tool_call(id.clone(), "file_change", changes);
            ev::tool_result(id, "applied", false);
        }
        Message::Text(text) => ev::agent_message(text),
        Message::Reasoning(text) => ev::log(LogLevel::Debug, format!("reasoning: {text}")),
        Message::ItemError(text) => ev::warn(format!("Codex: {text}")),
        Message::TurnCompleted(u) => ev::usage(Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cached_input_tokens,
            cache_write_tokens: 0,
            cost_usd: None,
        }),
        Message::Failed(reason) => ev::log(LogLevel::Error, format!("Codex failed: {reason}")),
        Message::Raw(line) => ev::output_line(OutputPipe::Stdout, line),
    }
}

struct Codex;

impl Guest for Codex {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "agent-codex".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::AgentDriver,
            serves: vec![command::DRIVER.into()],
            summary: "OpenAI Codex CLI (`codex exec --json`) in the run's sandbox, with a \
                      config.toml provider for the base URL"
                .into(),
            options_schema: Some(command::OPTIONS_SCHEMA.into()),
        }
    }
}

impl Driver for Codex {
    fn run(task: AgentTask) -> Result<AgentOutcome, Error> {
        let opts: Options = options::parse("options", &task.options)?;
        command::check(&task)?;
        let env = command::environment(&task, &opts)?;
        if task.max_iterations.is_some() || task.max_cost_usd.is_some() {
            agentgate_plugin_sdk::events::warn(
                "openai-codex has no turn or cost limit of its own; convergence.limits \
                 maxIterations/maxCostUsd are not enforced inside Codex (the run's timeout is)",
            );
        }
        home::write_file(
            command::CONFIG_FILE,
            command::config_toml(&task, &opts).as_bytes(),
        )?;
        agentgate_plugin_sdk::events::progress(
            "agent",
            format!("running {} exec", opts.command().join(" ")),
        );
        let mut session = Session::default();
        let prompt = command::prompt(&task);
        let status = cli::run_lines(
            command::argv(&task, &opts),
            env,
            prompt,
            INSTALL_HINT,
            |line| {
                for message in events::parse_line(&line) {
                    session.absorb(&message);
                    emit(message);
                }
            },
        )?;
        Ok(session.outcome(&status))
    }
}

agentgate_plugin_sdk::agent_driver::export_agent_driver!(Codex);

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Option<i32>, signal: Option<i32>) -> ExitStatus {
        ExitStatus {
            code,
            signal,
            timed_out: false,
        }
    }

    fn session(lines: &[&str]) -> Session {
        let mut s = Session::default();
        for line in lines {
            for m in events::parse_line(line) {
                s.absorb(&m);
            }
        }
        s
    }

    #[test]
    fn completed_turn_is_success_with_usage_and_thread() {
        let s = session(&[
            r#"{"type":"thread.started","thread_id":"t-1"}"#,
            r#"{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"All done."}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":600,"cached_input_tokens":0,"output_tokens":90}}"#,
        ]);
        let o = s.outcome(&status(Some(0), None));
        assert!(o.success);
        assert_eq!(o.session_id.as_deref(), Some("t-1"));
        assert_eq!(o.turns, Some(1));
        assert_eq!(o.usage.unwrap().input_tokens, 600);
        assert_eq!(o.summary.as_deref(), Some("All done."));
    }

    #[test]
    fn failed_turn_is_a_failure_with_the_reason() {
        let s = session(&[
            r#"{"type":"thread.started","thread_id":"t-1"}"#,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}"#,
        ]);
        let o = s.outcome(&status(Some(1), None));
        assert!(!o.success);
        assert!(o.summary.unwrap().contains("401"));
    }

    #[test]
    fn killed_mid_stream_keeps_what_it_knew() {
        let s = session(&[r#"{"type":"thread.started","thread_id":"t-9"}"#]);
        let o = s.outcome(&status(None, Some(9)));
        assert!(!o.success);
        assert_eq!(o.exit_code, 137);
        assert_eq!(o.session_id.as_deref(), Some("t-9"));
        assert!(o.summary.unwrap().contains("signal 9"));
    }
}
