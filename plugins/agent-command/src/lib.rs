//! Agent driver `command`: run any program as the agent.
//!
//! `agent.options.command` is the argv. The goal prompt reaches the program twice, in
//! `AGENTGATE_PROMPT` and on stdin, so both shell one-liners and real CLIs can read it.
//! Every line the program prints becomes an `output` event; its exit code is the
//! outcome. Useful for scripted agents, for wrapping a CLI that has no driver yet, and
//! for testing the host end to end.

use agentgate_plugin_sdk::agent_driver::driver::{AgentOutcome, AgentTask, Guest as Driver};
use agentgate_plugin_sdk::agent_driver::Guest;
use agentgate_plugin_sdk::host::{sandbox, types::ExecRequest};
use agentgate_plugin_sdk::output::{Line, Lines};
use agentgate_plugin_sdk::{env_var, events, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;

const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["command"],
  "additionalProperties": false,
  "properties": {
    "command": {
      "description": "Program and arguments to run as the agent.",
      "type": "array", "items": {"type": "string"}, "minItems": 1
    },
    "env": {
      "description": "Extra environment variables for the program.",
      "type": "object", "additionalProperties": {"type": "string"}
    }
  }
}"#;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandOptions {
    command: Vec<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

/// Builds the exec request for a task. Pure, so it is tested natively.
fn exec_request(task: &AgentTask, opts: &CommandOptions) -> ExecRequest {
    let mut env = vec![
        env_var("AGENTGATE_PROMPT", task.prompt.clone()),
        env_var("AGENTGATE_RUN_ID", task.run_id.clone()),
    ];
    if let Some(model) = &task.model {
        env.push(env_var("AGENTGATE_MODEL", model.clone()));
    }
    env.extend(opts.env.iter().map(|(k, v)| env_var(k.clone(), v.clone())));
    env.extend(task.secrets.iter().cloned());
    ExecRequest {
        argv: opts.command.clone(),
        env,
        cwd: None,
        stdin: Some(task.prompt.clone().into_bytes()),
        keep_stdin_open: false,
        timeout_ms: None,
    }
}

struct CommandDriver;

/// The longest summary kept: the last line is a one-line account of the run, and an
/// agent may end on a line of any length.
const MAX_SUMMARY_CHARS: usize = 4096;

/// The last stdout line as the run's summary, cut to [`MAX_SUMMARY_CHARS`].
fn summary_of(line: String) -> String {
    match line.char_indices().nth(MAX_SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

impl Guest for CommandDriver {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "agent-command".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::AgentDriver,
            serves: vec!["command".into()],
            summary:
                "Runs agent.options.command as the agent; prompt in AGENTGATE_PROMPT and on stdin"
                    .into(),
            options_schema: Some(OPTIONS_SCHEMA.into()),
        }
    }
}

impl Driver for CommandDriver {
    fn run(task: AgentTask) -> Result<AgentOutcome, Error> {
        let opts: CommandOptions = options::parse("options", &task.options)?;
        events::progress("agent", format!("running {}", opts.command.join(" ")));
        let execution = sandbox::exec(&exec_request(&task, &opts))?;
        let mut last_stdout_line = None;
        for line in Lines::new(&execution) {
            match line {
                Line::Text(pipe, text) => {
                    if pipe == agentgate_plugin_sdk::host::types::OutputPipe::Stdout {
                        last_stdout_line = Some(text.clone());
                    }
                    events::output_line(pipe, text);
                }
                Line::Exited(status) => {
                    let exit_code = match (status.code, status.signal) {
                        (Some(code), _) => code,
                        (None, Some(signal)) => 128 + signal,
                        (None, None) => -1,
                    };
                    return Ok(AgentOutcome {
                        exit_code,
                        success: exit_code == 0 && !status.timed_out,
                        session_id: None,
                        turns: None,
                        usage: None,
                        summary: last_stdout_line.map(summary_of),
                    });
                }
            }
        }
        Err(agentgate_plugin_sdk::error::failed(
            "the agent's output ended without an exit status",
        ))
    }
}

agentgate_plugin_sdk::agent_driver::export_agent_driver!(CommandDriver);

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::agent_driver::driver::AgentCapabilities;

    fn task(options: &str) -> AgentTask {
        AgentTask {
            run_id: "r1".into(),
            driver: "command".into(),
            prompt: "fix it".into(),
            context: None,
            system_prompt: None,
            model: Some("m".into()),
            max_tokens: 1,
            temperature: None,
            tools: vec![],
            capabilities: AgentCapabilities {
                file_system: true,
                network: false,
                shell: true,
                browser: false,
            },
            mcp_servers: vec![],
            max_iterations: None,
            max_cost_usd: None,
            max_total_tokens: None,
            timeout_ms: 1000,
            secrets: vec![env_var("API_KEY", "s")],
            options: options.into(),
        }
    }

    #[test]
    fn a_summary_is_cut_at_a_character() {
        assert_eq!(summary_of("done".into()), "done");
        let long = "é".repeat(MAX_SUMMARY_CHARS + 10);
        let cut = summary_of(long);
        assert_eq!(cut.chars().count(), MAX_SUMMARY_CHARS + 1);
        assert!(cut.ends_with("é…"));
    }

    #[test]
    fn passes_prompt_in_env_and_stdin() {
        let t = task(r#"{"command":["sh","-c","cat"],"env":{"A":"1"}}"#);
        let opts: CommandOptions = options::parse("options", &t.options).unwrap();
        let req = exec_request(&t, &opts);
        assert_eq!(req.argv, ["sh", "-c", "cat"]);
        assert_eq!(req.stdin.as_deref(), Some(&b"fix it"[..]));
        let names: Vec<_> = req.env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "AGENTGATE_PROMPT",
                "AGENTGATE_RUN_ID",
                "AGENTGATE_MODEL",
                "A",
                "API_KEY"
            ]
        );
    }

    #[test]
    fn rejects_missing_command() {
        let err = options::parse::<CommandOptions>("options", "{}").unwrap_err();
        assert!(err.to_string().contains("command"), "{err}");
    }
}
