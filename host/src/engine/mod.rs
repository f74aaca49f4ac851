//! The run lifecycle: TaskSpec in, result folder out.
//!
//! [`run`] resolves the three plugins a TaskSpec names, then prepares the workspace,
//! creates the sandbox, runs the agent under the run's deadline, collects what changed
//! and cleans up. Cleanup runs on success, failure, timeout and cancellation. Nothing
//! falls back to weaker isolation: a sandbox that cannot be created fails the run.

mod changes;
mod crashed;
mod folder;
mod git_changes;
mod plugins;
mod result;
mod run;
mod sampler;
mod tree_walk;
mod workspace;

pub use changes::{ChangeKind, EntryKind, FileChange, Snapshot};
pub use crashed::{write_crashed_result, CrashedRun};
pub use folder::{RunFolder, SandboxState, WORKSPACE_SCRATCH};
pub use git_changes::{GitBaseline, GitChanges, OmittedFile, PATCH_FILE_BYTES, PATCH_TOTAL_BYTES};
pub use plugins::{resolve as resolve_plugins, PluginProblem, Plugins};
pub use result::{result_schema, RunResult, RunStatus, WorkspaceRecord, RESULT_VERSION};
pub use run::{run, RunError, RunReport, RunRequest};
pub use tree_walk::WalkError;
