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
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// 1 to 128 characters; defaults to the file's stem for a document without metadata.
    #[serde(deserialize_with = "fields::name")]
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    #[serde(default, deserialize_with = "fields::namespace")]
    #[schemars(length(min = 1, max = 64))]
    pub namespace: Option<String>,
    #[serde(default, deserialize_with = "fields::string_map")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "fields::string_map")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// None when the document is only an execution block; the CLI's `--prompt` supplies it.
    #[serde(default)]
    pub goal: Option<Goal>,
    #[serde(default)]
    pub convergence: Option<Convergence>,
    pub execution: Execution,
    /// Accepted and kept verbatim; not acted on by the execution host yet.
    #[serde(default)]
    pub delivery: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Goal {
    /// Non-empty.
    #[serde(deserialize_with = "fields::prompt")]
    #[schemars(length(min = 1))]
    pub prompt: String,
    #[serde(default)]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Convergence {
    #[serde(default)]
    pub limits: Limits,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// 1 to 10000.
    #[serde(default, deserialize_with = "fields::max_iterations")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_iterations: Option<u32>,
    #[serde(
        default,
        deserialize_with = "fields::duration_opt",
        serialize_with = "serialize_duration_opt"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub max_wall_clock: Option<Duration>,
    #[serde(default, deserialize_with = "fields::tokens_opt")]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub max_tokens: Option<u64>,
    /// `maxCost: "$5.00"` in the document.
    #[serde(
        rename(deserialize = "maxCost"),
        default,
        deserialize_with = "fields::cost"
    )]
    #[schemars(schema_with = "schema::cost")]
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    pub workspace: WorkspaceSpec,
    /// Provider `none` when the document has no sandbox block.
    #[serde(default = "SandboxSpec::absent")]
    pub sandbox: SandboxSpec,
    #[serde(default)]
    pub agent: AgentSpec,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// `docker`, `subprocess`, `none` or a plugin's name; `docker` when the block is present.
    #[serde(default = "SandboxSpec::default_provider")]
    pub provider: String,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub network: Network,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default, deserialize_with = "fields::string_map")]
    pub environment: BTreeMap<String, String>,
    /// Absolute path inside the sandbox.
    #[serde(
        default = "SandboxSpec::default_workdir",
        deserialize_with = "fields::absolute_path"
    )]
    pub workdir: String,
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
    None,
    #[default]
    Bridge,
    Host,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Host path; a leading `~` is expanded to `$HOME` while parsing.
    pub source: String,
    /// Absolute path inside the sandbox.
    #[serde(deserialize_with = "fields::absolute_path")]
    pub target: String,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    #[serde(default = "AgentSpec::default_driver")]
    pub driver: String,
    #[serde(default)]
    pub model: Option<String>,
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
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServer>,
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    pub name: String,
    #[serde(default = "enabled")]
    pub enabled: bool,
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
    #[serde(default)]
    pub file_system: Option<bool>,
    #[serde(default)]
    pub network: Option<bool>,
    #[serde(default)]
    pub shell: Option<bool>,
    #[serde(default)]
    pub browser: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServer {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "fields::string_map")]
    pub env: BTreeMap<String, String>,
}

/// Durations print back the way they are written (`"2h"`).
fn serialize_duration<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&units::format_duration(*duration))
}

fn serialize_duration_opt<S: Serializer>(
    duration: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    duration.map(units::format_duration).serialize(s)
}
