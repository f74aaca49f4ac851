//! The TaskSpec's `agent` section as a `codex exec` command line, environment and
//! `config.toml`.
//!
//! Why a module of its own: Codex ignores `OPENAI_BASE_URL`; it reaches a model API
//! through a provider in `$CODEX_HOME/config.toml`. The driver writes that file (with
//! the MCP servers and system prompt) into the sandbox's private HOME, and the mapping
//! is pure so it is tested natively. The prompt goes on stdin, never through a shell.

use agentgate_plugin_sdk::agent_driver::driver::AgentTask;
use agentgate_plugin_sdk::{env_var, error, EnvVar, Error};
use serde::Deserialize;

pub const DRIVER: &str = "openai-codex";
pub const API_KEY: &str = "OPENAI_API_KEY";
pub const BASE_URL: &str = "OPENAI_BASE_URL";
/// The provider this driver defines in `config.toml`.
const PROVIDER: &str = "agentgate";
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Where Codex reads its configuration, relative to the sandbox's HOME.
pub const CONFIG_FILE: &str = ".codex/config.toml";

pub const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "command": {
      "description": "The codex program (a name looked up on the sandbox's PATH, or an absolute path in the sandbox) and any leading arguments, e.g. a wrapper; the driver's own flags follow.",
      "type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1
    },
    "baseUrl": {
      "description": "Responses API base URL ending in /v1, when OPENAI_BASE_URL is not passed as a secret.",
      "type": "string", "minLength": 1
    },
    "maxRetries": {
      "description": "How often Codex retries a failed request or a dropped stream.",
      "type": "integer", "minimum": 0, "maximum": 20
    },
    "env": {
      "description": "Extra environment variables for Codex.",
      "type": "object", "additionalProperties": {"type": "string"}
    }
  }
}"#;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Options {
    pub command: Option<Vec<String>>,
    pub base_url: Option<String>,
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

impl Options {
    /// The program and its leading arguments.
    pub fn command(&self) -> Vec<String> {
        self.command
            .clone()
            .unwrap_or_else(|| vec!["codex".to_string()])
    }
}

/// Refuses what Codex cannot honour: it has no per-tool switches and always has its
/// shell and file tools. Running anyway would be silently weaker than the TaskSpec.
pub fn check(task: &AgentTask) -> Result<(), Error> {
    if task.driver != DRIVER {
        return Err(error::invalid_spec(
            "driver",
            format!("agent-codex serves {DRIVER}, not {:?}", task.driver),
        ));
    }
    if !task.capabilities.shell || !task.capabilities.file_system {
        return Err(error::invalid_spec(
            "capabilities",
            "openai-codex always has its shell and file tools: set capabilities.shell and \
             capabilities.fileSystem to true, or use a driver that can switch them off \
             (claude-code-api)",
        ));
    }
    if let Some(tool) = task.tools.first() {
        return Err(error::invalid_spec(
            "tools",
            format!(
                "openai-codex has no per-tool settings (found tool {:?}): remove agent.tools \
                 or use a driver that supports them (claude-code-api)",
                tool.name
            ),
        ));
    }
    Ok(())
}

/// The argv: `codex exec --json`, the prompt read from stdin (`-`).
pub fn argv(task: &AgentTask, opts: &Options) -> Vec<String> {
    let mut argv = opts.command();
    argv.extend(
        [
            "exec",
            "--json",
            "--skip-git-repo-check",
            // The run's sandbox contains Codex; its own sandbox needs privileges it lacks there.
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        .map(String::from),
    );
    if let Some(model) = &task.model {
        argv.extend(["--model".to_string(), model.clone()]);
    }
    argv.push("-".into());
    argv
}

/// The prompt on stdin: the goal, then its context.
pub fn prompt(task: &AgentTask) -> String {
    match task.context.as_deref().filter(|c| !c.trim().is_empty()) {
        Some(context) => format!("{}\n\nContext:\n{context}", task.prompt),
        None => task.prompt.clone(),
    }
}

fn secret<'a>(task: &'a AgentTask, name: &str) -> Option<&'a str> {
    task.secrets
        .iter()
        .find(|s| s.name == name && !s.value.is_empty())
        .map(|s| s.value.as_str())
}

/// The environment: the secrets (the key is required) and the options' `env`.
pub fn environment(task: &AgentTask, opts: &Options) -> Result<Vec<EnvVar>, Error> {
    if secret(task, API_KEY).is_none() {
        return Err(error::unavailable(format!(
            "driver {DRIVER} needs the secret {API_KEY}: export it and run with \
             `--secret-env {API_KEY}`"
        )));
    }
    let mut env: Vec<EnvVar> = opts
        .env
        .iter()
        .map(|(k, v)| env_var(k.clone(), v.clone()))
        .collect();
    env.extend(task.secrets.iter().cloned());
    Ok(env)
}

/// A TOML basic string. JSON's string escapes are all valid in TOML.
fn toml_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// A TOML bare or quoted key.
fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        toml_string(key)
    }
}

/// `config.toml`: the provider at the base URL, the system prompt, the MCP servers.
pub fn config_toml(task: &AgentTask, opts: &Options) -> String {
    let base_url = secret(task, BASE_URL)
        .map(str::to_string)
        .or_else(|| opts.base_url.clone())
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let mut toml = format!("model_provider = {}\n", toml_string(PROVIDER));
    if let Some(system) = &task.system_prompt {
        toml.push_str(&format!(
            "developer_instructions = {}\n",
            toml_string(system)
        ));
    }
    toml.push_str(&format!(
        "\n[model_providers.{PROVIDER}]\nname = {}\nbase_url = {}\nwire_api = \"responses\"\nenv_key = {}\n",
        toml_string(PROVIDER),
        toml_string(&base_url),
        toml_string(API_KEY)
    ));
    if let Some(retries) = opts.max_retries {
        toml.push_str(&format!(
            "request_max_retries = {retries}\nstream_max_retries = {retries}\n"
        ));
    }
    for server in &task.mcp_servers {
        let key = toml_key(&server.name);
        let args: Vec<String> = server.args.iter().map(|a| toml_string(a)).collect();
        toml.push_str(&format!(
            "\n[mcp_servers.{key}]\ncommand = {}\nargs = [{}]\n",
            toml_string(&server.command),
            args.join(", ")
        ));
        if !server.env.is_empty() {
            toml.push_str(&format!("\n[mcp_servers.{key}.env]\n"));
            for var in &server.env {
                toml.push_str(&format!(
                    "{} = {}\n",
                    toml_key(&var.name),
                    toml_string(&var.value)
                ));
            }
        }
    }
    toml
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::agent_driver::driver::{AgentCapabilities, McpServer, ToolSetting};

    fn task() -> AgentTask {
        AgentTask {
            run_id: "r1".into(),
            driver: DRIVER.into(),
            prompt: "fix the bug".into(),
            context: None,
            system_prompt: None,
            model: None,
            max_tokens: 4096,
            temperature: None,
            tools: vec![],
            capabilities: AgentCapabilities {
                file_system: true,
                network: true,
                shell: true,
                browser: false,
            },
            mcp_servers: vec![],
            max_iterations: None,
            max_cost_usd: None,
            max_total_tokens: None,
            timeout_ms: 60_000,
            secrets: vec![env_var(API_KEY, "sk-proj-xyz")],
            options: "{}".into(),
        }
    }

    #[test]
    fn argv_reads_the_prompt_from_stdin() {
        let mut t = task();
        assert_eq!(
            argv(&t, &Options::default()),
            [
                "codex",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "-"
            ]
        );
        t.model = Some("gpt-5-codex".into());
        let argv = argv(&t, &Options::default());
        assert_eq!(argv[5..], ["--model", "gpt-5-codex", "-"]);
        assert!(!argv.iter().any(|a| a.contains("fix the bug")));
    }

    #[test]
    fn key_is_required() {
        let mut t = task();
        t.secrets.clear();
        let err = environment(&t, &Options::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--secret-env OPENAI_API_KEY"), "{err}");
        let env = environment(&task(), &Options::default()).unwrap();
        assert!(env.iter().any(|e| e.name == API_KEY));
    }

    #[test]
    fn config_has_the_provider_at_the_base_url() {
        let mut t = task();
        let toml = config_toml(&t, &Options::default());
        assert!(
            toml.starts_with("model_provider = \"agentgate\"\n"),
            "{toml}"
        );
        assert!(
            toml.contains("base_url = \"https://api.openai.com/v1\""),
            "{toml}"
        );
        assert!(toml.contains("wire_api = \"responses\""), "{toml}");
        assert!(toml.contains("env_key = \"OPENAI_API_KEY\""), "{toml}");
        assert!(
            !toml.contains("sk-proj"),
            "the key stays in the environment"
        );
        t.secrets.push(env_var(BASE_URL, "http://127.0.0.1:5/v1"));
        t.system_prompt = Some("Say \"hi\"\nthen stop".into());
        let opts = Options {
            max_retries: Some(0),
            ..Options::default()
        };
        let toml = config_toml(&t, &opts);
        assert!(
            toml.contains("base_url = \"http://127.0.0.1:5/v1\""),
            "{toml}"
        );
        assert!(
            toml.contains(r#"developer_instructions = "Say \"hi\"\nthen stop""#),
            "{toml}"
        );
        assert!(toml.contains("request_max_retries = 0\nstream_max_retries = 0"));
    }

    #[test]
    fn mcp_servers_become_tables() {
        let mut t = task();
        t.mcp_servers = vec![McpServer {
            name: "my db".into(),
            command: "mcp-db".into(),
            args: vec!["--ro".into(), "x\"y".into()],
            env: vec![env_var("DB_URL", "postgres://h")],
        }];
        let toml = config_toml(&t, &Options::default());
        assert!(
            toml.contains(
                "[mcp_servers.\"my db\"]\ncommand = \"mcp-db\"\nargs = [\"--ro\", \"x\\\"y\"]\n"
            ),
            "{toml}"
        );
        assert!(
            toml.contains("[mcp_servers.\"my db\".env]\nDB_URL = \"postgres://h\"\n"),
            "{toml}"
        );
    }

    #[test]
    fn refuses_what_codex_cannot_honour() {
        let mut t = task();
        t.capabilities.shell = false;
        assert!(check(&t)
            .unwrap_err()
            .to_string()
            .contains("capabilities.shell"));
        let mut t = task();
        t.tools.push(ToolSetting {
            name: "Bash".into(),
            enabled: false,
            config: "{}".into(),
        });
        assert!(check(&t).unwrap_err().to_string().contains("agent.tools"));
        let mut t = task();
        t.driver = "codex".into();
        assert!(check(&t).is_err());
        assert!(check(&task()).is_ok());
    }
}
