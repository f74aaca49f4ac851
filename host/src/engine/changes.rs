//! What the agent changed in the workspace: the baseline taken once the workspace is
//! prepared, and the comparison with it after the sandbox is gone.
//!
//! A repository is compared with git's objects, anything else (or a repository git
//! cannot read) with a full snapshot. Both read through the handle opened when the
//! workspace was prepared, never through its path. What makes the record incomplete
//! is a [`Shortfall::Changes`], not a failure of the run.

use std::sync::Arc;
use std::time::Duration;

use super::phase::RunEnv;
use super::shortfall::{Shortfall, Shortfalls};
use super::workspace::Workspace;
use crate::changeset::{
    GitBaseline, GitChanges, GitChangesError, Snapshot, WalkError, COLLECT_SECS, PATCH_FILE_BYTES,
    PATCH_TOTAL_BYTES,
};
use crate::record::{FileChange, PatchRecord, Redactor};

/// The workspace as it was before the agent ran.
pub(super) enum Baseline {
    Git(GitBaseline),
    Snapshot(Snapshot),
}

impl Baseline {
    /// Takes the baseline of a prepared workspace.
    pub fn take(workspace: &Workspace, env: &RunEnv) -> Result<Baseline, WalkError> {
        match GitBaseline::take(&workspace.dir) {
            Ok(Some(baseline)) => return Ok(Baseline::Git(baseline)),
            Ok(None) => {}
            Err(e) => env.events.host_log(
                "info",
                format!("comparing the workspace by snapshot, not git: {e}"),
            ),
        }
        Snapshot::take(&workspace.dir).map(Baseline::Snapshot)
    }
}

/// What the run changed in its workspace, and how that was found.
pub(super) struct Changes {
    pub files: Vec<FileChange>,
    pub ignored: Vec<FileChange>,
    pub from: &'static str,
    pub patch: Option<PatchRecord>,
}

impl Default for Changes {
    fn default() -> Changes {
        Changes {
            files: Vec::new(),
            ignored: Vec::new(),
            from: "snapshot",
            patch: None,
        }
    }
}

/// What the agent changed, read through the handle opened before it ran; what makes
/// that record incomplete is a shortfall.
pub(super) fn collect(
    workspace: &Workspace,
    baseline: Baseline,
    env: &RunEnv,
    shortfalls: &mut Shortfalls,
) -> Changes {
    let mut changes = Changes::default();
    let mut problems = Vec::new();
    if let Err(e) = workspace.check_root() {
        problems.push(e.to_string());
    }
    match baseline {
        Baseline::Git(git) => {
            changes.from = "git";
            match collect_git(git, workspace.dir.clone(), env.redactor.clone()) {
                Ok(found) => {
                    changes.files = found.files;
                    changes.ignored = found.ignored;
                    changes.patch = Some(PatchRecord {
                        max_file_bytes: PATCH_FILE_BYTES,
                        max_total_bytes: PATCH_TOTAL_BYTES,
                        omitted: found.omitted,
                    });
                    if let Err(e) = env.folder.write_patch(&found.patch) {
                        problems.push(format!("writing changes.patch: {e}"));
                    }
                }
                Err(e) => problems.push(format!("the workspace's changes could not be read: {e}")),
            }
        }
        Baseline::Snapshot(before) => match Snapshot::take_after(&workspace.dir, &before) {
            Ok(after) => changes.files = before.changes(&after),
            Err(e) => problems.push(format!("the workspace's changes could not be read: {e}")),
        },
    }
    for problem in problems {
        env.events.host_log("error", problem.clone());
        shortfalls.add(Shortfall::Changes(problem));
    }
    changes
}

/// Why a git workspace's changes could not be collected.
#[derive(Debug, thiserror::Error)]
pub(super) enum CollectError {
    #[error(transparent)]
    Git(#[from] GitChangesError),
    #[error("starting the collection: {0}")]
    Start(#[source] std::io::Error),
    #[error("the collection did not end within {} s", .0.as_secs())]
    Overdue(Duration),
}

/// Collects a git workspace's changes on a thread of their own, waited for a bounded
/// time: the collection bounds its own reading of the workspace, and this bounds what
/// it cannot (libgit2 opening an object file the agent swapped for a FIFO).
fn collect_git(
    git: GitBaseline,
    root: Arc<cap_std::fs::Dir>,
    redactor: Arc<Redactor>,
) -> Result<GitChanges, CollectError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("collect-changes".into())
        .spawn(move || {
            let _ = sender.send(git.changes(&root, &redactor));
        })
        .map_err(CollectError::Start)?;
    let limit = Duration::from_secs(COLLECT_SECS + 30);
    match receiver.recv_timeout(limit) {
        Ok(found) => Ok(found?),
        Err(_) => Err(CollectError::Overdue(limit)),
    }
}
