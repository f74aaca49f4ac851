//! The TaskSpec's `agent` section as a Claude Code command line and environment.
//!
//! Why a module of its own: every mapping (model, system prompt, turns, tools,
//! capabilities, MCP servers, credentials per driver) is policy that must be exact, so
//! it is pure and tested natively. The prompt goes to the CLI on stdin, never through a
//! shell, and credentials only through the environment of the one process that needs
//! them.

use agentgate_plugin_sdk::agent_driver::driver::AgentTask;
use agentgate_plugin_sdk::{env_var, error, EnvVar, Error};
use serde::Deserialize;
use serde_json::json;

/// The TaskSpec `agent.driver` values this plugin serves.
pub const SUBSCRIPTION: &str = "claude-code-subscription";
pub const API: &str = "claude-code-api";

pub const API_KEY: &str = "ANTHROPIC_API_KEY";
pub const OAUTH_TOKEN: &str = "CLAUDE_CODE_OAUTH_TOKEN";
pub const BASE_URL: &str = "ANTHROPIC_BASE_URL";

pub const OPTIONS_SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "command": {
      "description": "The claude program (a name looked up on the sandbox's PATH, or an absolute path in the sandbox) and any leading arguments, e.g. a wrapper; the driver's own flags follow.",
      "type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1
    },
    "permissionMode": {
      "description": "Claude Code's --permission-mode. The sandbox contains the agent, so the default lets it act without asking.",
      "enum": ["bypassPermissions", "acceptEdits", "default", "plan", "dontAsk"]
    },
    "maxRetries": {
      "description": "How often Claude Code retries a failed model request (CLAUDE_CODE_MAX_RETRIES).",
      "type": "integer", "minimum": 0, "maximum": 20
    },
    "baseUrl": {
      "description": "Model API base URL (ANTHROPIC_BASE_URL), when not passed as a secret.",
      "type": "string", "minLength": 1
    },
    "env": {
      "description": "Extra environment variables for Claude Code.",
      "type": "object", "additionalProperties": {"type": "string"}
    }
  }
}"#;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Options {
    pub command: Option<Vec<String>>,
    pub permission_mode: Option<String>,
    pub max_retries: Option<u32>,
    pub base_url: Option<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

impl Options {
    /// The program and its leading arguments.
    pub fn command(&self) -> Vec<String> {
        self.command
            .clone()
            .unwrap_or_else(|| vec!["claude".to_string()])
    }
}

/// Tools Claude Code offers per TaskSpec capability; a capability set to false
/// disallows them all.
const SHELL_TOOLS: &[&str] = &["Bash", "BashOutput", "KillShell"];
const FILE_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
];
const NETWORK_TOOLS: &[&str] = &["WebFetch", "WebSearch"];

/// The argv for a task. `mcp_config` is the path (in the sandbox) of the MCP config
/// file, when the task has MCP servers.
pub fn argv(task: &AgentTask, opts: &Options, mcp_config: Option<&str>) -> Vec<String> {
    let mut argv = opts.command();
    argv.extend(
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            opts.permission_mode
                .as_deref()
                .unwrap_or("bypassPermissions"),
        ]
        .map(String::from),
    );
    let mut push = |flag: &str, value: String| {
        argv.push(flag.into());
        argv.push(value);
    };
    if let Some(model) = &task.model {
        push("--model", model.clone());
    }
    if let Some(system) = &task.system_prompt {
        push("--append-system-prompt", system.clone());
    }
    if let Some(turns) = task.max_iterations {
        push("--max-turns", turns.to_string());
    }
    if let Some(cost) = task.max_cost_usd {
        push("--max-budget-usd", cost.to_string());
    }
    let (allowed, disallowed) = tool_lists(task);
    if !allowed.is_empty() {
        push("--allowedTools", allowed.join(","));
    }
    if !disallowed.is_empty() {
        push("--disallowedTools", disallowed.join(","));
    }
    if let Some(path) = mcp_config {
        push("--mcp-config", path.to_string());
        argv.push("--strict-mcp-config".into());
    }
    argv
}

/// `(allowed, disallowed)` tool names from `agent.tools` and `agent.capabilities`.
/// A disabled capability wins over a tool enabled by name: fail closed.
pub fn tool_lists(task: &AgentTask) -> (Vec<String>, Vec<String>) {
    let mut disallowed: Vec<String> = Vec::new();
    let caps = &task.capabilities;
    for (on, tools) in [
        (caps.shell, SHELL_TOOLS),
        (caps.file_system, FILE_TOOLS),
        (caps.network, NETWORK_TOOLS),
    ] {
        if !on {
            disallowed.extend(tools.iter().map(|t| t.to_string()));
        }
    }
    for tool in task.tools.iter().filter(|t| !t.enabled) {
        if !disallowed.contains(&tool.name) {
            disallowed.push(tool.name.clone());
        }
    }
    let allowed = task
        .tools
        .iter()
        .filter(|t| t.enabled && !disallowed.contains(&t.name))
        .map(|t| t.name.clone())
        .collect();
    (allowed, disallowed)
}

/// The prompt Claude Code reads on stdin: the goal, then its context.
pub fn prompt(task: &AgentTask) -> String {
    match task.context.as_deref().filter(|c| !c.trim().is_empty()) {
        Some(context) => format!("{}\n\nContext:\n{context}", task.prompt),
        None => task.prompt.clone(),
    }
}

/// The environment for the CLI: quiet, offline-friendly settings, then the driver's
/// credentials. The subscription driver never passes `ANTHROPIC_API_KEY` (Claude Code
/// would bill the API key instead of the subscription); the API driver requires it.
pub fn environment(task: &AgentTask, opts: &Options) -> Result<Vec<EnvVar>, Error> {
    let mut env = vec![
        // The run's sandbox is the containment Claude Code asks for before it accepts
        // bypassPermissions as root.
        env_var("IS_SANDBOX", "1"),
        env_var("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        env_var("DISABLE_AUTOUPDATER", "1"),
        env_var("DISABLE_TELEMETRY", "1"),
    ];
    if let Some(retries) = opts.max_retries {
        env.push(env_var("CLAUDE_CODE_MAX_RETRIES", retries.to_string()));
    }
    if let Some(url) = &opts.base_url {
        env.push(env_var(BASE_URL, url.clone()));
    }
    env.extend(opts.env.iter().map(|(k, v)| env_var(k.clone(), v.clone())));
    let has = |name: &str| {
        task.secrets
            .iter()
            .any(|s| s.name == name && !s.value.is_empty())
    };
    match task.driver.as_str() {
        API if !has(API_KEY) => {
            return Err(error::unavailable(format!(
                "driver {API} needs the secret {API_KEY}: export it and run with \
                 `--secret-env {API_KEY}` (or use driver {SUBSCRIPTION} with \
                 {OAUTH_TOKEN})"
            )))
        }
        API => env.extend(task.secrets.iter().cloned()),
        SUBSCRIPTION if !has(OAUTH_TOKEN) => {
            return Err(error::unavailable(format!(
                "driver {SUBSCRIPTION} needs the secret {OAUTH_TOKEN}: create one with \
                 `claude setup-token`, export it and run with `--secret-env {OAUTH_TOKEN}` \
                 (or use driver {API} with {API_KEY})"
            )))
        }
        SUBSCRIPTION => env.extend(task.secrets.iter().filter(|s| s.name != API_KEY).cloned()),
        other => {
            return Err(error::invalid_spec(
                "driver",
                format!("agent-claude-code serves {SUBSCRIPTION} and {API}, not {other:?}"),
            ))
        }
    }
    Ok(env)
}

/// The MCP config file's contents, in Claude Code's `mcpServers` format.
pub fn mcp_config(task: &AgentTask) -> Option<String> {
    if task.mcp_servers.is_empty() {
        return None;
    }
    let servers: serde_json::Map<String, serde_json::Value> = task
        .mcp_servers
        .iter()
        .map(|s| {
            let env: serde_json::Map<String, serde_json::Value> = s
                .env
                .iter()
                .map(|e| (e.name.clone(), json!(e.value)))
                .collect();
            (
                s.name.clone(),
                json!({"type": "stdio", "command": s.command, "args": s.args, "env": env}),
            )
        })
        .collect();
    Some(json!({ "mcpServers": servers }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_plugin_sdk::agent_driver::driver::{AgentCapabilities, McpServer, ToolSetting};

    pub fn task(driver: &str) -> AgentTask {
        AgentTask {
            run_id: "r1".into(),
            driver: driver.into(),
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
            secrets: vec![
                env_var(API_KEY, "sk-ant-api-xyz"),
                env_var(OAUTH_TOKEN, "sk-ant-oat-xyz"),
            ],
            options: "{}".into(),
        }
    }

    fn value_after<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
        argv.iter()
            .position(|a| a == flag)
            .map(|i| argv[i + 1].as_str())
    }

    #[test]
    fn minimal_task_is_headless_stream_json_without_the_prompt_in_argv() {
        let argv = argv(&task(API), &Options::default(), None);
        assert_eq!(
            argv,
            [
                "claude",
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "bypassPermissions"
            ]
        );
        assert!(!argv.iter().any(|a| a.contains("fix the bug")));
    }

    #[test]
    fn maps_model_system_prompt_turns_and_budget() {
        let mut t = task(API);
        t.model = Some("claude-sonnet-4-5".into());
        t.system_prompt = Some("Be terse.".into());
        t.max_iterations = Some(7);
        t.max_cost_usd = Some(1.5);
        let argv = argv(
            &t,
            &Options::default(),
            Some("/home/agent/.agentgate/mcp.json"),
        );
        assert_eq!(value_after(&argv, "--model"), Some("claude-sonnet-4-5"));
        assert_eq!(
            value_after(&argv, "--append-system-prompt"),
            Some("Be terse.")
        );
        assert_eq!(value_after(&argv, "--max-turns"), Some("7"));
        assert_eq!(value_after(&argv, "--max-budget-usd"), Some("1.5"));
        assert_eq!(
            value_after(&argv, "--mcp-config"),
            Some("/home/agent/.agentgate/mcp.json")
        );
        assert!(argv.contains(&"--strict-mcp-config".to_string()));
    }

    #[test]
    fn tools_and_capabilities_become_allowed_and_disallowed_lists() {
        let mut t = task(API);
        let tool = |name: &str, enabled| ToolSetting {
            name: name.into(),
            enabled,
            config: "{}".into(),
        };
        t.tools = vec![
            tool("Read", true),
            tool("WebFetch", false),
            tool("Bash", true),
        ];
        t.capabilities.shell = false;
        let (allowed, disallowed) = tool_lists(&t);
        // Bash is enabled by name but the shell capability is off: it stays disallowed.
        assert_eq!(allowed, ["Read"]);
        assert_eq!(disallowed, ["Bash", "BashOutput", "KillShell", "WebFetch"]);
        let argv = argv(&t, &Options::default(), None);
        assert_eq!(value_after(&argv, "--allowedTools"), Some("Read"));
        assert_eq!(
            value_after(&argv, "--disallowedTools"),
            Some("Bash,BashOutput,KillShell,WebFetch")
        );
    }

    #[test]
    fn no_network_and_no_files_disallow_their_tools() {
        let mut t = task(API);
        t.capabilities.network = false;
        t.capabilities.file_system = false;
        let (_, disallowed) = tool_lists(&t);
        for name in ["WebFetch", "WebSearch", "Write", "Edit", "Read"] {
            assert!(disallowed.iter().any(|d| d == name), "{name}");
        }
    }

    #[test]
    fn prompt_appends_context() {
        let mut t = task(API);
        assert_eq!(prompt(&t), "fix the bug");
        t.context = Some("It is in main.rs".into());
        assert_eq!(prompt(&t), "fix the bug\n\nContext:\nIt is in main.rs");
    }

    #[test]
    fn subscription_strips_the_api_key_and_passes_the_token() {
        let env = environment(&task(SUBSCRIPTION), &Options::default()).unwrap();
        assert!(!env.iter().any(|e| e.name == API_KEY));
        assert!(!env.iter().any(|e| e.value.contains("sk-ant-api")));
        assert!(env.iter().any(|e| e.name == OAUTH_TOKEN));
    }

    #[test]
    fn subscription_without_token_is_a_clear_error() {
        let mut t = task(SUBSCRIPTION);
        t.secrets.retain(|s| s.name != OAUTH_TOKEN);
        let err = environment(&t, &Options::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--secret-env CLAUDE_CODE_OAUTH_TOKEN"),
            "{err}"
        );
    }

    #[test]
    fn api_requires_the_key_and_honours_the_base_url() {
        let mut t = task(API);
        t.secrets = vec![env_var(BASE_URL, "http://127.0.0.1:9")];
        let err = environment(&t, &Options::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--secret-env ANTHROPIC_API_KEY"), "{err}");
        t.secrets.push(env_var(API_KEY, "sk-ant-api-xyz"));
        let env = environment(&t, &Options::default()).unwrap();
        assert!(env
            .iter()
            .any(|e| e.name == BASE_URL && e.value == "http://127.0.0.1:9"));
        assert!(env.iter().any(|e| e.name == API_KEY));
        let opts = Options {
            base_url: Some("http://10.0.0.1".into()),
            max_retries: Some(0),
            ..Options::default()
        };
        let env = environment(&task(API), &opts).unwrap();
        assert!(env
            .iter()
            .any(|e| e.name == BASE_URL && e.value == "http://10.0.0.1"));
        assert!(env
            .iter()
            .any(|e| e.name == "CLAUDE_CODE_MAX_RETRIES" && e.value == "0"));
    }

    #[test]
    fn command_option_replaces_the_program_and_keeps_the_flags() {
        let opts: Options =
            serde_json::from_str(r#"{"command": ["/opt/bin/claude-wrapper", "--quiet"]}"#).unwrap();
        let argv = argv(&task(API), &opts, None);
        assert_eq!(argv[..3], ["/opt/bin/claude-wrapper", "--quiet", "-p"]);
    }

    #[test]
    fn other_driver_names_are_refused() {
        let err = environment(&task("claude"), &Options::default()).unwrap_err();
        assert!(err.to_string().contains("claude-code-api"), "{err}");
    }

    #[test]
    fn mcp_servers_in_claude_format() {
        let mut t = task(API);
        assert_eq!(mcp_config(&t), None);
        t.mcp_servers = vec![McpServer {
            name: "db".into(),
            command: "mcp-db".into(),
            args: vec!["--ro".into()],
            env: vec![env_var("DB", "x")],
        }];
        let config: serde_json::Value = serde_json::from_str(&mcp_config(&t).unwrap()).unwrap();
        assert_eq!(config["mcpServers"]["db"]["command"], "mcp-db");
        assert_eq!(config["mcpServers"]["db"]["args"][0], "--ro");
        assert_eq!(config["mcpServers"]["db"]["env"]["DB"], "x");
    }
}
