//! `result.json`: the versioned record of one run.
//!
//! The `sandbox` object keeps the reference system's `SandboxInfo` shape (`provider`,
//! `containerId`, `resourceUsage.cpuPercent`, `resourceUsage.memoryMB`, `durationMs`)
//! so existing consumers can read it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::changes::FileChange;

/// Bumped when a field changes meaning or disappears.
pub const RESULT_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    /// The agent finished and reported success.
    Succeeded,
    /// The agent finished and reported failure (or exited non-zero).
    Failed,
    /// The run's deadline passed.
    TimedOut,
    /// The run was interrupted (Ctrl-C, SIGTERM).
    Cancelled,
    /// The TaskSpec was rejected by a plugin.
    Invalid,
    /// A plugin or the host failed.
    Error,
}

impl RunStatus {
    /// The documented process exit code for this outcome.
    pub fn exit_code(self) -> u8 {
        match self {
            RunStatus::Succeeded => 0,
            RunStatus::Failed => 1,
            RunStatus::Invalid => 2,
            RunStatus::Error => 3,
            RunStatus::TimedOut => 4,
            RunStatus::Cancelled => 130,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    pub version: u32,
    pub run_id: String,
    pub name: String,
    pub status: RunStatus,
    /// The agent's exit code, when it ran to an end.
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub started_at: String,
    pub finished_at: String,
    pub duration_ms: u64,
    /// Milliseconds spent in each phase, in the order they ran.
    pub phases: BTreeMap<String, u64>,
    pub plugins: BTreeMap<String, PluginRecord>,
    pub workspace: Option<WorkspaceRecord>,
    pub sandbox: Option<SandboxInfo>,
    pub agent: Option<AgentRecord>,
    /// Every entry (file, directory, symlink, other) the run added, modified or
    /// deleted in the workspace, or could not read, by escaped path; see
    /// [`FileChange`]. Sorted by the raw bytes of the path.
    pub modified_files: Vec<FileChange>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub origin: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRecord {
    pub source: String,
    pub root: String,
    pub readonly: bool,
    pub description: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    pub provider: String,
    /// Set by container providers.
    pub container_id: Option<String>,
    pub id: String,
    pub isolation: String,
    pub resource_usage: Option<ResourceUsage>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    pub cpu_percent: f64,
    #[serde(rename = "memoryMB")]
    pub memory_mb: f64,
    #[serde(rename = "peakMemoryMB")]
    pub peak_memory_mb: f64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    pub driver: String,
    pub success: bool,
    pub session_id: Option<String>,
    pub turns: Option<u32>,
    pub usage: Option<serde_json::Value>,
    pub summary: Option<String>,
}
