//! `result.json`: the versioned record of one run.
//!
//! The `sandbox` object keeps the reference system's `SandboxInfo` shape (`provider`,
//! `containerId`, `resourceUsage.cpuPercent`, `resourceUsage.memoryMB`, `durationMs`)
//! so existing consumers can read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::changes::{FileChange, OmittedFile};
use super::egress::EgressReport;
use super::logs::LogSize;
use super::redact::Redactor;

/// Bumped when a field changes meaning or disappears, or one is added.
/// 2: `patch` (the caps of `changes.patch` and the files it leaves out).
/// 3: `leftOut` (what a copy back left out), and `status` is `error` for a run that
/// fell short of anything it promised (see [`RunStatus::Succeeded`]).
pub const RESULT_VERSION: u32 = 3;

/// The JSON Schema of `result.json` (`agentgate schema --result`).
pub fn result_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(RunResult).to_value();
    schema["$id"] = format!("https://agentgate.dev/schemas/result-v{RESULT_VERSION}.json").into();
    schema
}

/// How a run ended: `status` in `result.json`; each status has its exit code of
/// `agentgate run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    /// The agent finished and reported success, and everything the run promised
    /// happened: its changes were recorded in full, every file a copy back was to
    /// bring came back, the source released the work, and cleanup left nothing (the
    /// provider's `destroy` completed, every folder the run made is gone). A run that
    /// falls short of any of these is `error` instead, with the shortfall named.
    Succeeded,
    /// The agent finished and reported failure (or exited non-zero).
    Failed,
    /// The run's deadline passed.
    TimedOut,
    /// The run was interrupted (Ctrl-C, SIGTERM).
    Cancelled,
    /// The TaskSpec was rejected by a plugin.
    Invalid,
    /// A plugin or the host failed, or the run fell short of a promise (see
    /// [`RunStatus::Succeeded`]).
    Error,
    /// The `agentgate` process running it died before the end (e.g. `kill -9`);
    /// written by `agentgate gc`, which cleaned up after it.
    Crashed,
}

impl RunStatus {
    /// The documented process exit code for this outcome.
    pub fn exit_code(self) -> u8 {
        match self {
            RunStatus::Succeeded => 0,
            RunStatus::Failed => 1,
            RunStatus::Invalid => 2,
            RunStatus::Error | RunStatus::Crashed => 3,
            RunStatus::TimedOut => 4,
            RunStatus::Cancelled => 130,
        }
    }
}

/// `result.json`: what one run did and how it ended, written once at its end; for a run that
/// crashed, by `agentgate gc`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// The format's version: bumped when a field changes meaning or disappears, or one is added.
    pub version: u32,
    /// The run's id, also the name of its folder under `runs/`.
    pub run_id: String,
    /// The TaskSpec's `metadata.name`.
    pub name: String,
    /// How the run ended.
    pub status: RunStatus,
    /// The agent's exit code, when it ran to an end.
    pub exit_code: Option<i32>,
    /// Why the run did not succeed, naming every shortfall; absent when it succeeded.
    pub error: Option<String>,
    /// When the run began: for `agentgate run`, when it began finding the plugins.
    pub started_at: String,
    /// When the result was made: RFC 3339 with milliseconds, like `startedAt`.
    pub finished_at: String,
    /// The whole run as its caller waited for it, from `startedAt` to the result:
    /// plugin loading included.
    pub duration_ms: u64,
    /// Milliseconds spent in each phase: `plugins` (finding, describing and compiling
    /// or loading from the cache the plugins the run uses, from `startedAt`),
    /// `workspace`, `sandbox`, `agent`, `cleanup`.
    pub phases: BTreeMap<String, u64>,
    /// The run's plugins by role (`workspace`, `sandbox`, `agent`); empty for a crashed run.
    pub plugins: BTreeMap<String, PluginRecord>,
    /// Where the agent worked; absent when the run ended before its workspace was ready.
    pub workspace: Option<WorkspaceRecord>,
    /// The sandbox the agent ran in; absent when none was created.
    pub sandbox: Option<SandboxInfo>,
    /// What the agent driver reported; absent unless the agent ran to an end.
    pub agent: Option<AgentRecord>,
    /// Every entry (file, directory, symlink, other) the run added, modified or
    /// deleted in the workspace, or could not read, by escaped path; see
    /// [`FileChange`]. Sorted by the raw bytes of the path.
    pub modified_files: Vec<FileChange>,
    /// Git workspaces: files in ignored folders (`node_modules/`, `target/`) the run
    /// added, modified or deleted, kept apart from `modifiedFiles`; empty otherwise.
    pub ignored_files: Vec<FileChange>,
    /// How `modifiedFiles` was found: `git` (the workspace is a repository; renames
    /// and binary files are told, `changes.patch` holds the change set) or `snapshot`
    /// (every entry compared by content before and after).
    pub changes_from: String,
    /// Git workspaces: what `changes.patch` holds and leaves out. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<PatchRecord>,
    /// `stdout.log` and `stderr.log`: what they kept and what they dropped past their
    /// bound. Absent when no sandbox was created.
    pub logs: Option<LogsRecord>,
    /// Runs whose TaskSpec has `sandbox.egress`: what the egress proxy let through
    /// (connections and bytes per destination) and what it refused, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressReport>,
    /// Entries the agent changed that a copy back from the sandbox to the host left
    /// out, each with the reason. Absent when none was; a run with any is not
    /// `succeeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOutFile>,
}

/// `changes.patch`: its caps, and the files of `modifiedFiles` it leaves out.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchRecord {
    /// Content of one file (before or after the run) past which the file is left out.
    pub max_file_bytes: u64,
    /// Content of all files past which further files are left out.
    pub max_total_bytes: u64,
    /// Files of `modifiedFiles` not in the patch (too large, not a file, content
    /// before the run not kept, not comparable), each with the reason. Content that
    /// holds a secret is not left out: it is in the patch masked, binary or not.
    pub omitted: Vec<OmittedFile>,
}

/// `logs` in `result.json`: what `stdout.log` and `stderr.log` kept.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogsRecord {
    /// `stdout.log`: the agent's standard output.
    pub stdout: LogSize,
    /// `stderr.log`: the agent's standard error.
    pub stderr: LogSize,
}

impl RunResult {
    /// Masks the run's secrets in every text field. File names are included: an
    /// agent can name a file after a secret.
    pub fn mask(&mut self, redactor: &Redactor) {
        let mut texts: Vec<&mut String> = vec![&mut self.name];
        texts.extend(self.error.as_mut());
        texts.extend(
            self.modified_files
                .iter_mut()
                .chain(&mut self.ignored_files)
                .flat_map(|change| std::iter::once(&mut change.path).chain(change.from.as_mut())),
        );
        if let Some(patch) = &mut self.patch {
            texts.extend(patch.omitted.iter_mut().map(|o| &mut o.path));
        }
        texts.extend(
            self.left_out
                .iter_mut()
                .flat_map(|l| [&mut l.path, &mut l.reason]),
        );
        if let Some(workspace) = &mut self.workspace {
            texts.extend([&mut workspace.root, &mut workspace.description]);
        }
        if let Some(sandbox) = &mut self.sandbox {
            texts.extend([&mut sandbox.id, &mut sandbox.isolation]);
            texts.extend(sandbox.container_id.as_mut());
        }
        if let Some(agent) = &mut self.agent {
            texts.extend(agent.session_id.as_mut());
            texts.extend(agent.summary.as_mut());
        }
        // The agent chooses the host names it asks the proxy for.
        if let Some(egress) = &mut self.egress {
            texts.extend(egress.destinations.iter_mut().map(|d| &mut d.host));
            texts.extend(
                egress
                    .refused
                    .iter_mut()
                    .flat_map(|r| [&mut r.host, &mut r.reason]),
            );
        }
        for text in texts {
            *text = redactor.apply(std::mem::take(text));
        }
    }
}

/// One of the run's three plugins, as loaded for it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginRecord {
    /// The plugin's name, e.g. `sandbox-docker`.
    pub name: String,
    /// The version the plugin declares.
    pub version: String,
    /// `sha256:<hex>` of the component file.
    pub digest: String,
    /// `built-in`, or the path of the component file it was loaded from.
    pub origin: String,
}

/// Also kept in the sandbox registry (as JSON), so that `agentgate gc` can name the
/// workspace of a run that crashed.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRecord {
    /// The TaskSpec's `workspace.source` (`fresh`, `local`, `git`, …).
    pub source: String,
    /// The workspace's root folder on the host.
    pub root: String,
    /// Whether the sandbox got the workspace read-only.
    pub readonly: bool,
    /// The source's one line about the workspace, e.g. `local /src/app (read-only)`.
    pub description: String,
    /// The commit the workspace was at when it was prepared (git repositories only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// `sandbox` in `result.json`, in the reference system's `SandboxInfo` shape.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// The TaskSpec's `sandbox.provider`.
    pub provider: String,
    /// Set by container providers.
    pub container_id: Option<String>,
    /// The provider's id for the sandbox (a container id, a process group, …).
    pub id: String,
    /// The isolation in force, in the provider's words, with the egress proxy's added when the
    /// run had one; empty for a crashed run.
    pub isolation: String,
    /// Measured when the agent was done; absent when the sandbox could not report it.
    pub resource_usage: Option<ResourceUsage>,
    /// From the sandbox's creation to its removal, in milliseconds; 0 for a crashed run.
    pub duration_ms: u64,
}

/// The sandbox's resource use when the agent was done.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// Average CPU use over the sandbox's life; 100 is one core busy all the time.
    pub cpu_percent: f64,
    /// Memory in use at the end, in MiB (to a tenth).
    #[serde(rename = "memoryMB")]
    pub memory_mb: f64,
    /// The most memory in use at once, in MiB (to a tenth).
    #[serde(rename = "peakMemoryMB")]
    pub peak_memory_mb: f64,
    /// The kernel killed a process of the sandbox for lack of memory.
    #[serde(rename = "oomKilled")]
    pub oom_killed: bool,
}

/// `agent` in `result.json`: what the agent driver reported when the agent was done.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    /// The TaskSpec's `agent.driver`.
    pub driver: String,
    /// Whether the agent reports that it completed the task.
    pub success: bool,
    /// The agent's session id, when it has one (Claude Code, Codex).
    pub session_id: Option<String>,
    /// The agent's turns, when the driver counts them.
    pub turns: Option<u32>,
    /// `{inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens, costUsd}` for the whole
    /// session, when the driver reports it; `costUsd` is null when the agent gives no cost.
    pub usage: Option<serde_json::Value>,
    /// The agent's final message, or its error; absent when it gave none.
    pub summary: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_covers_every_text_field() {
        let secret = "sk-live-0123456789";
        let text = || format!("before {secret} after");
        let mut result = RunResult {
            version: RESULT_VERSION,
            run_id: "r1".into(),
            name: text(),
            status: RunStatus::Failed,
            exit_code: Some(1),
            error: Some(text()),
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            phases: BTreeMap::new(),
            plugins: BTreeMap::new(),
            workspace: Some(WorkspaceRecord {
                source: "local".into(),
                root: text(),
                readonly: false,
                description: text(),
                commit: None,
            }),
            sandbox: Some(SandboxInfo {
                provider: "none".into(),
                container_id: Some(text()),
                id: text(),
                isolation: text(),
                resource_usage: None,
                duration_ms: 0,
            }),
            agent: Some(AgentRecord {
                driver: "command".into(),
                success: false,
                session_id: Some(text()),
                turns: None,
                usage: None,
                summary: Some(text()),
            }),
            modified_files: Vec::new(),
            ignored_files: Vec::new(),
            changes_from: "git".into(),
            patch: Some(PatchRecord {
                max_file_bytes: 1,
                max_total_bytes: 1,
                omitted: vec![OmittedFile {
                    path: text(),
                    reason: "too large".into(),
                }],
            }),
            logs: None,
            egress: None,
            left_out: vec![LeftOutFile {
                path: text(),
                reason: text(),
            }],
        };
        result.mask(&Redactor::new([secret.to_string()]));
        let json = serde_json::to_string(&result).unwrap();
        assert!(!json.contains(secret), "{json}");
        assert_eq!(json.matches("before *** after").count(), 12, "{json}");
    }
}

/// A file or folder of the sandbox that a copy back to the host left out, and why
/// (a link, a device, a file over a cap, a copy cut short). A run that left out anything
/// it changed is not a success: `status` is `error` and `leftOut` names each entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeftOutFile {
    /// The path below the workspace, escaped like `modifiedFiles` paths.
    pub path: String,
    /// Why it was left out, e.g. a symlink in the sandbox, a file over a cap.
    pub reason: String,
}
