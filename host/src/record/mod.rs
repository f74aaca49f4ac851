//! The run record: what a run writes into its folder and shows on the terminal.
//!
//! The engine, the CLI and the capabilities all report into it, and the registry,
//! `gc`, `history` and reports read it, so it belongs to none of them. It owns:
//!
//! - the run's folder under `AGENTGATE_HOME/runs/<run-id>/` ([`RunFolder`]) and the
//!   sandbox's private state kept outside it ([`SandboxState`]);
//! - `result.json` ([`RunResult`], versioned, with its JSON Schema), including the one
//!   `gc` writes for a run whose `agentgate` died ([`write_crashed_result`]);
//! - the change set it carries ([`FileChange`], [`OmittedFile`]); finding it is
//!   [`crate::changeset`]'s work;
//! - the egress proxy's account it carries ([`EgressReport`]); counting it is
//!   [`crate::egress`]'s work;
//! - events ([`EventSink`]), the agent's output logs ([`OutputLogs`]) and
//!   `plugins.log`.
//!
//! Nothing enters the record unmasked: [`Redactor`] masks the run's secrets in events,
//! logs, `plugins.log`, `result.json` and in what the CLI prints.

mod changes;
mod crashed;
mod egress;
mod events;
mod folder;
mod logs;
mod redact;
mod result;

pub use changes::{ChangeKind, EntryKind, FileChange, OmittedFile};
pub use crashed::{write_crashed_result, CrashedRun};
pub use egress::{DestinationTraffic, EgressReport, RefusedAttempt};
pub use events::{EventBody, EventSink, Observer, PhaseStatus, RunEvent};
pub use folder::{OpenedRunFolder, RunFolder, SandboxState, WORKSPACE_SCRATCH};
pub use logs::{append_plugin_log, LogSize, OutputLogs, MAX_LOG_BYTES};
pub use redact::{is_secret_name, MaskStream, Redactor};
pub use result::{
    result_schema, AgentRecord, LeftOutFile, LogsRecord, PatchRecord, PluginRecord, ResourceUsage,
    RunResult, RunStatus, SandboxInfo, WorkspaceRecord, RESULT_VERSION,
};
