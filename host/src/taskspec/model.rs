//! The typed, normalized TaskSpec the rest of the host works with.
//!
//! Parsing fills in every default (sandbox provider, network, workdir, timeout, agent driver,
//! token budget) and converts every quantity (millicores, bytes, `Duration`, USD), so no other
//! code reads raw strings. Each struct serializes back to camelCase JSON (`agentgate validate
//! --json` prints it) and derives `JsonSchema` for the document's schema.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

use super::convergence::Convergence;
use super::delivery::Delivery;
use super::workspace::WorkspaceSpec;
use super::{fields, schema, units};

/// A plugin's `options`: free-form here, checked later against the plugin's own schema.
pub type Options = serde_json::Map<String, serde_json::Value>;

/// A whole TaskSpec, whichever of the accepted shapes it was written in.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Always `agentgate.io/v1`.
    pub api_version: String,
    /// Always `TaskSpec`.
    pub kind: String,
    /// The task's name and bookkeeping.
    pub metadata: Metadata,
    /// What to do (goal, limits) and where to do it (execution).
    pub spec: Spec,
}

/// `metadata`: the task's name (in `result.json` and `agentgate runs`) and its labels.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// 1 to 128 characters; defaults to the file's stem for a document without metadata.
    #[serde(deserialize_with = "fields::name")]
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// 1 to 64 characters; accepted and kept, not acted on by the execution host.
    #[serde(default, deserialize_with = "fields::namespace")]
    #[schemars(length(min = 1, max = 64))]
    pub namespace: Option<String>,
    /// Free-form names to strings; accepted and kept, not acted on by the execution host.
    #[serde(default, deserialize_with = "fields::string_map")]
    pub labels: BTreeMap<String, String>,
    /// Free-form names to strings; accepted and kept, not acted on by the execution host.
    #[serde(default, deserialize_with = "fields::string_map")]
    pub annotations: BTreeMap<String, String>,
}

/// `spec`: the goal, how to converge on it, where to run, and how to deliver the work.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// None when the document is only an execution block; the CLI's `--prompt` supplies it.
    #[serde(default)]
    pub goal: Option<Goal>,
    /// The strategy, the gates and the run's limits; none when the document sets none.
    /// Only `limits` is honoured yet ([`super::check_supported`]).
    #[serde(default)]
    pub convergence: Option<Convergence>,
    /// The workspace, sandbox and agent the task runs with.
    pub execution: Execution,
    /// How the work is shipped; loaded and checked, and refused by
    /// [`super::check_supported`] until delivery is built.
    #[serde(default)]
    pub delivery: Option<Delivery>,
}

/// `goal`: what the agent is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Goal {
    /// Non-empty.
    #[serde(deserialize_with = "fields::prompt")]
    #[schemars(length(min = 1))]
    pub prompt: String,
    /// Background for the agent, given after the prompt; none when absent.
    #[serde(default)]
    pub context: Option<String>,
    /// When the task counts as done; none when absent.
    #[serde(default)]
    pub desired_state: Option<DesiredState>,
}

/// `goal.desiredState`: when the task counts as done.
///
/// The reference documents it only by example, always `desiredState: {allGatesPassed:
/// true}`, so that one key is what loads: a typed mapping, other keys refused, nothing kept
/// verbatim or passed to the agent. It is honoured as it stands: a run of this version has
/// no gates ([`super::check_supported`] refuses them), so "every gate passed" holds when
/// the agent succeeds, whichever value is written. What `false` means once gates run, the
/// reference does not say; that is decided when gates are built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DesiredState {
    /// The task is done only when every gate passed; true unless set.
    #[serde(default = "enabled")]
    pub all_gates_passed: bool,
}

/// `execution`: where the task runs and which agent runs it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// Where the agent's working tree comes from: its source and the source's settings.
    pub workspace: WorkspaceSpec,
    /// Provider `none` when the document has no sandbox block.
    #[serde(default = "SandboxSpec::absent")]
    pub sandbox: SandboxSpec,
    /// The agent driver and its settings; all defaults when absent.
    #[serde(default)]
    pub agent: AgentSpec,
}

/// `sandbox`: the provider that isolates the agent, and what it gives the agent.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// `docker`, `subprocess`, `none` or a plugin's name; `docker` when the block is present.
    #[serde(default = "SandboxSpec::default_provider")]
    pub provider: String,
    /// The container image (`docker`, `kubernetes`); `subprocess` and `none` ignore it.
    #[serde(default)]
    pub image: Option<String>,
    /// Limits on what the sandbox may use, and the run's timeout.
    #[serde(default)]
    pub resources: Resources,
    /// The sandbox's network: `none`, `bridge` (the default) or `host`.
    #[serde(default)]
    pub network: Network,
    /// Host folders bound into the sandbox; only folders the operator lists (`grants.yaml`).
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Environment variables set for every command in the sandbox.
    #[serde(default, deserialize_with = "fields::string_map")]
    pub environment: BTreeMap<String, String>,
    /// Absolute path inside the sandbox.
    #[serde(
        default = "SandboxSpec::default_workdir",
        deserialize_with = "fields::absolute_path"
    )]
    pub workdir: String,
    /// Options for the provider plugin, checked against its own schema (`pids`, `user`, …).
    #[serde(default)]
    pub options: Options,
    /// Where the sandbox may connect; absent, the `network` mode alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
}

/// `sandbox.egress`: the sandbox gets no network but loopback, and reaches exactly
/// these destinations through the host's egress proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Egress {
    /// `host:port` entries (`api.example.com:443`, `*.example.com:443`, `192.0.2.7:80`).
    #[serde(default)]
    pub allow: Vec<String>,
}

/// The provider of a `sandbox` block that names none.
pub const DEFAULT_PROVIDER: &str = "docker";

impl SandboxSpec {
    fn default_provider() -> String {
        DEFAULT_PROVIDER.into()
    }

    fn default_workdir() -> String {
        "/workspace".into()
    }

    /// The sandbox of a document without a sandbox block.
    fn absent() -> Self {
        Self {
            provider: "none".into(),
            image: None,
            resources: Resources::default(),
            network: Network::default(),
            mounts: Vec::new(),
            environment: BTreeMap::new(),
            workdir: Self::default_workdir(),
            options: Options::new(),
            egress: None,
        }
    }
}

/// `sandbox.resources`: a limit left unset is not imposed by agentgate.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// `cpu: 0.5` in the document (0.1 to 64 cores).
    #[serde(rename(deserialize = "cpu"), default, deserialize_with = "fields::cpu")]
    #[schemars(schema_with = "schema::cpu")]
    pub cpu_millicores: Option<u32>,
    /// `memory: "4Gi"` in the document.
    #[serde(
        rename(deserialize = "memory"),
        default,
        deserialize_with = "fields::bytes"
    )]
    #[schemars(schema_with = "schema::bytes")]
    pub memory_bytes: Option<u64>,
    /// `disk: "20Gi"` in the document.
    #[serde(
        rename(deserialize = "disk"),
        default,
        deserialize_with = "fields::bytes"
    )]
    #[schemars(schema_with = "schema::bytes")]
    pub disk_bytes: Option<u64>,
    /// One hour unless set.
    #[serde(
        default = "Resources::default_timeout",
        deserialize_with = "fields::duration",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Duration,
}

impl Resources {
    fn default_timeout() -> Duration {
        Duration::from_secs(3600)
    }
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            cpu_millicores: None,
            memory_bytes: None,
            disk_bytes: None,
            timeout: Self::default_timeout(),
        }
    }
}

/// The sandbox's network. `bridge` by default, as in the reference system; `none` is safer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No network.
    None,
    /// Outbound access through the provider's network (Docker's bridge; slirp4netns).
    #[default]
    Bridge,
    /// The host's network; Docker refuses it without the operator's grant.
    Host,
}

/// One entry of `sandbox.mounts`: a host folder bound into the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Host path; a leading `~` is expanded to `$HOME` while parsing.
    pub source: String,
    /// Absolute path inside the sandbox.
    #[serde(deserialize_with = "fields::absolute_path")]
    pub target: String,
    /// Whether the sandbox may only read it; false unless set.
    #[serde(default)]
    pub readonly: bool,
}

/// `agent`: which agent driver runs the agent, and what it tells the agent.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The agent driver: `claude-code-subscription` (the default), `claude-code-api`,
    /// `openai-codex`, `claude-agent-sdk`, `command` or a plugin's driver.
    #[serde(default = "AgentSpec::default_driver")]
    pub driver: String,
    /// The model the driver asks for; unset leaves the agent's own default.
    #[serde(default)]
    pub model: Option<String>,
    /// The most tokens one answer of the model may have; 200000 unless set.
    #[serde(
        default = "AgentSpec::default_max_tokens",
        deserialize_with = "fields::tokens"
    )]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub max_tokens: u64,
    /// 0 to 2.
    #[serde(default, deserialize_with = "fields::temperature")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Instructions added to the agent's system prompt (Claude Code appends them).
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Tools allowed or forbidden by the agent's own names (Claude Code's `Bash`, `Read`, …).
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// Which kinds of action the agent may take.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// MCP servers the agent may start, by name.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Options for the driver plugin, checked against its schema (`command`, `maxRetries`, …).
    #[serde(default)]
    pub options: Options,
}

impl AgentSpec {
    fn default_driver() -> String {
        "claude-code-subscription".into()
    }

    fn default_max_tokens() -> u64 {
        200_000
    }
}

impl Default for AgentSpec {
    fn default() -> Self {
        Self {
            driver: Self::default_driver(),
            model: None,
            max_tokens: Self::default_max_tokens(),
            temperature: None,
            system_prompt: None,
            tools: Vec::new(),
            capabilities: Capabilities::default(),
            mcp_servers: BTreeMap::new(),
            options: Options::new(),
        }
    }
}

/// One entry of `agent.tools`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// The agent's name for the tool (Claude Code: `Bash`, `Read`, `WebFetch`, …).
    pub name: String,
    /// False forbids the tool; true unless set.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// The tool's settings, handed to the driver as JSON.
    #[serde(default)]
    pub config: Options,
}

fn enabled() -> bool {
    true
}

/// What the agent may do; unset means the driver's default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Reading and writing files; allowed when unset.
    #[serde(default)]
    pub file_system: Option<bool>,
    /// Network tools (fetching, searching the web); allowed when unset.
    #[serde(default)]
    pub network: Option<bool>,
    /// Running shell commands; allowed when unset.
    #[serde(default)]
    pub shell: Option<bool>,
    /// A browser; not allowed when unset.
    #[serde(default)]
    pub browser: Option<bool>,
}

/// One entry of `agent.mcpServers`: an MCP server the agent starts over stdio.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServer {
    /// The program that runs the server, in the sandbox.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables for the server's process.
    #[serde(default, deserialize_with = "fields::string_map")]
    pub env: BTreeMap<String, String>,
}

/// Durations print back the way they are written (`"2h"`).
pub(super) fn serialize_duration<S: Serializer>(
    duration: &Duration,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&units::format_duration(*duration))
}

pub(super) fn serialize_duration_opt<S: Serializer>(
    duration: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    duration.map(units::format_duration).serialize(s)
}
