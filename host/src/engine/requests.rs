//! What the TaskSpec asks of each plugin, as the WIT request records the plugins take.
//!
//! Pure translation, apart from the lifecycle in `run`: the run resolves what only it
//! can know (the prepared workspace, the sandbox's state folder, the time left, this
//! process as the owner) and these functions put it together with the TaskSpec. Every
//! value a plugin receives from the TaskSpec passes through here, so what a provider
//! or driver is told can be read, and tested, in one place.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::capabilities::labels::{LABEL_CREATED, LABEL_OWNER, LABEL_RUN_ID};
use crate::taskspec::{self, Network, TaskSpec};
use crate::wit::agent_driver::exports::agentgate::plugin::driver::{
    AgentCapabilities, AgentTask, McpServer, ToolSetting,
};
use crate::wit::sandbox::SandboxDetails;
use crate::wit::sandbox_provider::exports::agentgate::plugin::provider::{
    SandboxRequest, SandboxSummary, WorkspaceMount,
};
use crate::wit::types::{EnvVar, Label, Mount, NetworkMode, Resources};
use crate::wit::workspace_source::exports::agentgate::plugin::source::WorkspaceRequest;

/// The workspace source's request: its `workspace:` section as JSON, and the scratch
/// folder in the run's folder it may fill.
pub fn workspace_request(spec: &TaskSpec, run_id: &str, scratch: &Path) -> WorkspaceRequest {
    WorkspaceRequest {
        run_id: run_id.to_string(),
        section: spec.spec.execution.workspace.section_json().to_string(),
        scratch_dir: scratch.display().to_string(),
    }
}

/// What the run resolved before creating the sandbox.
pub struct SandboxInputs<'a> {
    pub run_id: &'a str,
    /// The prepared workspace's root, bound at `workdir`.
    pub workspace_root: &'a Path,
    pub workspace_readonly: bool,
    /// The sandbox's private state folder (its HOME).
    pub state_dir: &'a Path,
    /// This process, as `registry::Owner` writes it: the `owner` label.
    pub owner: &'a str,
    pub created: SystemTime,
    /// What is left of the run's deadline: the sandbox's own timeout.
    pub time_left: Duration,
}

/// The sandbox provider's request: image, limits, network, the workspace and the
/// TaskSpec's mounts, environment, options and the host's labels.
pub fn sandbox_request(spec: &TaskSpec, inputs: &SandboxInputs<'_>) -> SandboxRequest {
    let sandbox = &spec.spec.execution.sandbox;
    SandboxRequest {
        run_id: inputs.run_id.to_string(),
        provider: sandbox.provider.clone(),
        image: sandbox.image.clone(),
        resources: Resources {
            cpu_millicores: sandbox.resources.cpu_millicores,
            memory_bytes: sandbox.resources.memory_bytes,
            disk_bytes: sandbox.resources.disk_bytes,
            pids: None,
            timeout_ms: Some(inputs.time_left.as_millis() as u64),
        },
        network: network_mode(sandbox.network),
        workspace: WorkspaceMount {
            host_path: inputs.workspace_root.display().to_string(),
            readonly: inputs.workspace_readonly,
        },
        state_dir: inputs.state_dir.display().to_string(),
        workdir: sandbox.workdir.clone(),
        mounts: sandbox
            .mounts
            .iter()
            .map(|m| Mount {
                source: m.source.clone(),
                target: m.target.clone(),
                readonly: m.readonly,
            })
            .collect(),
        env: env_vars(&sandbox.environment),
        labels: vec![
            label(LABEL_RUN_ID, inputs.run_id),
            label(LABEL_OWNER, inputs.owner),
            label(
                LABEL_CREATED,
                &humantime::format_rfc3339_seconds(inputs.created).to_string(),
            ),
        ],
        options: serde_json::Value::Object(sandbox.options.clone()).to_string(),
    }
}

/// The request's mounts as the registry records them (JSON), so `gc` knows what a
/// sandbox bound even when its run died while creating it.
pub fn recorded_mounts(request: &SandboxRequest) -> String {
    let mounts: Vec<_> = request
        .mounts
        .iter()
        .map(|m| {
            serde_json::json!({
                "source": m.source, "target": m.target, "readonly": m.readonly,
            })
        })
        .collect();
    serde_json::to_string(&mounts).expect("mounts serialize")
}

/// What the sandbox's commands and the agent driver are told of the sandbox the
/// provider made.
pub fn sandbox_details(
    spec: &TaskSpec,
    summary: SandboxSummary,
    workspace_readonly: bool,
) -> SandboxDetails {
    let sandbox = &spec.spec.execution.sandbox;
    SandboxDetails {
        provider: sandbox.provider.clone(),
        id: summary.id,
        workdir: summary.workdir,
        network: network_mode(sandbox.network),
        readonly_workspace: workspace_readonly,
    }
}

/// The agent driver's task: the prompt, the agent's settings, the convergence limits,
/// the time left and the secrets it may hand to the agent.
pub fn agent_task(
    spec: &TaskSpec,
    run_id: &str,
    prompt: &str,
    secrets: &[(String, String)],
    time_left: Duration,
) -> AgentTask {
    let agent = &spec.spec.execution.agent;
    let limits = spec.spec.convergence.as_ref().map(|c| &c.limits);
    let json = |map: &taskspec::Options| serde_json::Value::Object(map.clone()).to_string();
    AgentTask {
        run_id: run_id.to_string(),
        driver: agent.driver.clone(),
        prompt: prompt.to_string(),
        context: spec.spec.goal.as_ref().and_then(|g| g.context.clone()),
        system_prompt: agent.system_prompt.clone(),
        model: agent.model.clone(),
        max_tokens: agent.max_tokens,
        temperature: agent.temperature,
        tools: agent
            .tools
            .iter()
            .map(|t| ToolSetting {
                name: t.name.clone(),
                enabled: t.enabled,
                config: json(&t.config),
            })
            .collect(),
        capabilities: AgentCapabilities {
            file_system: agent.capabilities.file_system.unwrap_or(true),
            network: agent.capabilities.network.unwrap_or(true),
            shell: agent.capabilities.shell.unwrap_or(true),
            browser: agent.capabilities.browser.unwrap_or(false),
        },
        mcp_servers: agent
            .mcp_servers
            .iter()
            .map(|(name, server)| McpServer {
                name: name.clone(),
                command: server.command.clone(),
                args: server.args.clone(),
                env: env_vars(&server.env),
            })
            .collect(),
        max_iterations: limits.and_then(|l| l.max_iterations),
        max_cost_usd: limits.and_then(|l| l.max_cost_usd),
        max_total_tokens: limits.and_then(|l| l.max_tokens),
        timeout_ms: time_left.as_millis() as u64,
        secrets: secrets
            .iter()
            .map(|(name, value)| EnvVar {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        options: json(&agent.options),
    }
}

fn env_vars(map: &BTreeMap<String, String>) -> Vec<EnvVar> {
    map.iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

fn label(key: &str, value: &str) -> Label {
    Label {
        key: key.to_string(),
        value: value.to_string(),
    }
}

fn network_mode(network: Network) -> NetworkMode {
    match network {
        Network::None => NetworkMode::None,
        Network::Bridge => NetworkMode::Bridge,
        Network::Host => NetworkMode::Host,
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    /// The fixture that sets every field, with `~` and `${VAR}` resolved from a fixed
    /// environment.
    fn every_field() -> TaskSpec {
        let text = include_str!("../../../tests/fixtures/taskspecs/full-every-field.yaml");
        let env = |name: &str| match name {
            "HOME" => Some("/home/me".to_string()),
            "GIT_TOKEN" => Some("tok-123".to_string()),
            _ => None,
        };
        taskspec::parse(text, "full-every-field.yaml", &env).unwrap_or_else(|e| panic!("{e}"))
    }

    fn inputs() -> SandboxInputs<'static> {
        SandboxInputs {
            run_id: "run-1",
            workspace_root: Path::new("/ws/root"),
            workspace_readonly: true,
            state_dir: Path::new("/tmp/agentgate-state-x"),
            owner: "host:42:1700",
            created: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            time_left: Duration::from_millis(1500),
        }
    }

    #[test]
    fn the_workspace_request_carries_the_section_and_the_scratch_folder() {
        let spec = every_field();
        let request = workspace_request(&spec, "run-1", Path::new("/runs/run-1/workspace"));
        assert_eq!(request.run_id, "run-1");
        assert_eq!(request.scratch_dir, "/runs/run-1/workspace");
        let section: serde_json::Value = serde_json::from_str(&request.section).unwrap();
        assert_eq!(section["source"], "git");
        assert_eq!(section["url"], "https://example.com/myorg/myrepo.git");
    }

    #[test]
    fn the_sandbox_request_carries_limits_network_mounts_env_and_labels() {
        let spec = every_field();
        let request = sandbox_request(&spec, &inputs());
        assert_eq!(request.provider, "docker");
        assert_eq!(request.image.as_deref(), Some("node:20-slim"));
        assert_eq!(request.resources.cpu_millicores, Some(500));
        assert_eq!(request.resources.memory_bytes, Some(512 << 20));
        assert_eq!(request.resources.disk_bytes, Some(20 << 30));
        assert_eq!(request.resources.pids, None);
        assert_eq!(request.resources.timeout_ms, Some(1500));
        assert!(matches!(request.network, NetworkMode::None));
        assert_eq!(request.workspace.host_path, "/ws/root");
        assert!(request.workspace.readonly);
        assert_eq!(request.state_dir, "/tmp/agentgate-state-x");
        assert_eq!(request.workdir, "/src");
        let mounts: Vec<_> = request
            .mounts
            .iter()
            .map(|m| (m.source.as_str(), m.target.as_str(), m.readonly))
            .collect();
        assert_eq!(mounts, [("/home/me/.npm", "/root/.npm", true)]);
        let env: Vec<_> = request
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("CI", "true"),
                ("NODE_ENV", "development"),
                ("RETRIES", "3")
            ]
        );
        let labels: Vec<_> = request
            .labels
            .iter()
            .map(|l| (l.key.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                (LABEL_RUN_ID, "run-1"),
                (LABEL_OWNER, "host:42:1700"),
                (LABEL_CREATED, "2023-11-14T22:13:20Z"),
            ]
        );
        let options: serde_json::Value = serde_json::from_str(&request.options).unwrap();
        assert_eq!(options, serde_json::json!({"pids": 512}));
        let recorded: serde_json::Value = serde_json::from_str(&recorded_mounts(&request)).unwrap();
        assert_eq!(
            recorded,
            serde_json::json!([{"source": "/home/me/.npm", "target": "/root/.npm", "readonly": true}])
        );
    }

    #[test]
    fn the_agent_task_carries_settings_limits_and_secrets() {
        let spec = every_field();
        let secrets = [("ANTHROPIC_API_KEY".to_string(), "sk-1".to_string())];
        let task = agent_task(&spec, "run-1", "Fix it", &secrets, Duration::from_secs(60));
        assert_eq!(task.driver, "claude-code-api");
        assert_eq!(task.prompt, "Fix it");
        assert_eq!(
            task.context.as_deref(),
            Some("The test is in tests/login.spec.ts")
        );
        assert_eq!(task.model.as_deref(), Some("claude-sonnet-4-20250514"));
        assert_eq!(task.max_tokens, 100000);
        assert_eq!(task.max_iterations, Some(10));
        assert_eq!(task.max_total_tokens, Some(200000));
        assert_eq!(task.max_cost_usd, Some(5.0));
        assert_eq!(task.timeout_ms, 60_000);
        assert!(task.capabilities.file_system && task.capabilities.shell);
        assert!(!task.capabilities.network && !task.capabilities.browser);
        let tools: Vec<_> = task
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.enabled))
            .collect();
        assert_eq!(tools, [("bash", true), ("browser", false)]);
        assert_eq!(task.mcp_servers[0].name, "github");
        assert_eq!(task.mcp_servers[0].env[0].value, "tok-123");
        assert_eq!(task.secrets[0].name, "ANTHROPIC_API_KEY");
        assert_eq!(task.secrets[0].value, "sk-1");
    }

    #[test]
    fn capabilities_left_unset_keep_their_defaults() {
        let mut spec = every_field();
        spec.spec.execution.agent.capabilities = Default::default();
        let task = agent_task(&spec, "run-1", "p", &[], Duration::ZERO);
        let caps = task.capabilities;
        assert!(caps.file_system && caps.network && caps.shell && !caps.browser);
    }
}
