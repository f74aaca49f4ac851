//! The `result.json` of a run whose `agentgate` died before writing one.
//!
//! `agentgate gc` writes it once it has cleaned up after the run, so every run folder
//! ends with a result, and a consumer polling for it learns the run is over. The
//! result says where the run's workspace is: gc keeps it, with what the agent did.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::result::{RunResult, RunStatus, SandboxInfo, WorkspaceRecord, RESULT_VERSION};

/// What the registry knew of the run.
pub struct CrashedRun<'a> {
    /// The run's id, the name of its folder under `runs/`.
    pub run_id: &'a str,
    /// The TaskSpec's `metadata.name`.
    pub name: &'a str,
    /// The run's folder, where `result.json` is written.
    pub folder: &'a Path,
    /// The `agentgate` process that ran it, as the registry names it
    /// (`pid=…,start=…,boot=…,pidns=…`); the error names it.
    pub owner: &'a str,
    /// When the run started: the result's `startedAt`.
    pub started: SystemTime,
    /// The owner's last heartbeat in the registry; the error names it.
    pub last_heartbeat: SystemTime,
    /// The sandbox provider, once the run began creating a sandbox; without one the result has
    /// no `sandbox`.
    pub provider: Option<&'a str>,
    /// The provider's id for the sandbox, once it was created.
    pub sandbox_id: Option<&'a str>,
    /// The container the sandbox is, as the run recorded it (see
    /// `RunContext::host_object`).
    pub container_id: Option<&'a str>,
    /// What gc reaped from the provider.
    pub reaped: &'a [String],
    /// The workspace as the run recorded it, once it was prepared.
    pub workspace: Option<WorkspaceRecord>,
    /// Where the workspace is kept: its root, or the folder a source was still
    /// filling (a clone) when the run died.
    pub kept_workspace: Option<&'a Path>,
    /// Its source meant the workspace to be removed at the end of the run.
    pub temporary_workspace: bool,
}

/// Writes `result.json` with status `crashed` into the run folder, unless the run
/// wrote its own (then it returns `None`: the run finished after all).
pub fn write_crashed_result(run: &CrashedRun<'_>) -> std::io::Result<Option<PathBuf>> {
    let path = run.folder.join("result.json");
    if path.exists() {
        return Ok(None);
    }
    if !run.folder.is_dir() {
        // The folder is gone (removed by its user): there is nowhere to write.
        return Ok(None);
    }
    let now = SystemTime::now();
    let result = RunResult {
        version: RESULT_VERSION,
        run_id: run.run_id.to_string(),
        name: run.name.to_string(),
        status: RunStatus::Crashed,
        exit_code: None,
        error: Some(format!(
            "the agentgate process that ran it ({}) died before the run ended; last heartbeat \
             at {}; agentgate gc cleaned up what it left{}{}",
            run.owner,
            humantime::format_rfc3339_seconds(run.last_heartbeat),
            if run.reaped.is_empty() {
                String::new()
            } else {
                format!(" ({})", run.reaped.join(", "))
            },
            kept(run)
        )),
        started_at: humantime::format_rfc3339_millis(run.started).to_string(),
        finished_at: humantime::format_rfc3339_millis(now).to_string(),
        duration_ms: now
            .duration_since(run.started)
            .unwrap_or_default()
            .as_millis() as u64,
        phases: Default::default(),
        plugins: Default::default(),
        workspace: run.workspace.clone(),
        sandbox: run.provider.map(|provider| SandboxInfo {
            provider: provider.to_string(),
            container_id: run.container_id.map(str::to_string),
            id: run.sandbox_id.unwrap_or_default().to_string(),
            isolation: String::new(),
            resource_usage: None,
            duration_ms: 0,
        }),
        agent: None,
        modified_files: Vec::new(),
        ignored_files: Vec::new(),
        // Nothing was compared: the run died before collecting its changes.
        changes_from: "none".into(),
        patch: None,
        logs: None,
        egress: None,
        left_out: Vec::new(),
    };
    // Written aside and renamed, so a reader never sees half a result.
    let partial = run.folder.join("result.json.partial");
    std::fs::write(
        &partial,
        serde_json::to_string_pretty(&result).expect("results serialize") + "\n",
    )?;
    std::fs::rename(&partial, &path)?;
    Ok(Some(path))
}

/// What the error says of the workspace gc kept.
fn kept(run: &CrashedRun<'_>) -> String {
    let Some(path) = run.kept_workspace else {
        return String::new();
    };
    let path = crate::escape::text(&path.display().to_string()).into_owned();
    match (&run.workspace, run.temporary_workspace) {
        (None, _) => format!(
            "; the workspace was not ready when it died: what its source had put in {path} \
             is kept"
        ),
        (Some(_), false) => format!("; its workspace {path} is kept, with the agent's work"),
        (Some(_), true) => format!(
            "; its workspace {path} is kept, with the agent's work (its source meant it to be \
             temporary: remove it when you are done with it)"
        ),
    }
}
