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
use agentgate_plugin_sdk::host::sandbox;
use agentgate_plugin_sdk::host::types::{ExecRequest, ExitStatus, OutputPipe, Usage};
use agentgate_plugin_sdk::output::{exit_code, Line, Lines};
use agentgate_plugin_sdk::{error, home, options, Error, PluginInfo, PluginKind};

use command::Options;
use events::{Message, TurnUsage};

const INSTALL_HINT: &str = "install Codex in the sandbox (`npm install -g @openai/codex`, in \
    the image for docker), or mount it and set agent.options.executable to its path in the \
    sandbox";

/// What the run has reported so far; becomes the outcome.
#[derive(Default, Debug, PartialEq)]
struct Session {
    thread_id: Option<String>,
    turns: u32,
    usage: TurnUsage,
    last_text: Option<String>,
    failure: Option<String>,
    lines: u64,
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

    fn outcome(self, status: &ExitStatus) -> Result<AgentOutcome, Error> {
        let exit_code = exit_code(status);
        if self.lines == 0 && status.code == Some(127) {
            return Err(error::unavailable(format!(
                "the Codex CLI was not found in the sandbox (exit code 127): {INSTALL_HINT}"
            )));
        }
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
        Ok(AgentOutcome {
            exit_code,
            success,
            usage: (self.turns > 0).then(|| self.usage()),
            session_id: self.thread_id,
            turns: (self.turns > 0).then_some(self.turns),
            summary,
        })
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
            format!("running {} exec", opts.executable()),
        );
        let execution = sandbox::exec(&ExecRequest {
            argv: command::argv(&task, &opts),
            env,
            cwd: None,
            stdin: Some(command::prompt(&task).into_bytes()),
            keep_stdin_open: false,
            timeout_ms: None,
        })
        .map_err(|e| {
            let text = e.to_string().to_lowercase();
            if text.contains("not found") || text.contains("no such file") {
                error::unavailable(format!(
                    "the Codex CLI `{}` was not found in the sandbox ({e}): {INSTALL_HINT}",
                    opts.executable()
                ))
            } else {
                e
            }
        })?;
        let mut session = Session::default();
        for line in Lines::new(&execution) {
            match line {
                Line::Text(OutputPipe::Stdout, text) => {
                    session.lines += 1;
                    for message in events::parse_line(&text) {
                        session.absorb(&message);
                        emit(message);
                    }
                }
                Line::Text(pipe, text) => agentgate_plugin_sdk::events::output_line(pipe, text),
                Line::Exited(status) => return session.outcome(&status),
            }
        }
        Err(error::failed("Codex's output ended without an exit status"))
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
            s.lines += 1;
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
        let o = s.outcome(&status(Some(0), None)).unwrap();
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
        let o = s.outcome(&status(Some(1), None)).unwrap();
        assert!(!o.success);
        assert!(o.summary.unwrap().contains("401"));
    }

    #[test]
    fn killed_mid_stream_keeps_what_it_knew() {
        let s = session(&[r#"{"type":"thread.started","thread_id":"t-9"}"#]);
        let o = s.outcome(&status(None, Some(9))).unwrap();
        assert!(!o.success);
        assert_eq!(o.exit_code, 137);
        assert_eq!(o.session_id.as_deref(), Some("t-9"));
        assert!(o.summary.unwrap().contains("signal 9"));
    }

    #[test]
    fn missing_cli_is_unavailable_with_install_hint() {
        let e = Session::default()
            .outcome(&status(Some(127), None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("npm install -g @openai/codex"), "{e}");
    }
}
