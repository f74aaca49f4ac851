//! Finding the change set: what the agent added, modified, deleted or renamed in the
//! workspace, read by the host after the agent ran.
//!
//! The agent owns the workspace by then, so this is attacker-facing code of its own,
//! apart from the run's lifecycle ([`crate::engine`] calls it) and from the record
//! ([`crate::record`] holds the types it produces, so readers of a record need not
//! know how it was found). Two ways of finding it, both reading the tree only through
//! [`tree_walk`] (beneath the root handle opened before the run, never through a
//! symlink): a before/after [`Snapshot`] for any workspace, and a [`GitBaseline`] for
//! git repositories, which also writes `changes.patch`.

mod git;
mod snapshot;
mod tree_walk;

pub(crate) use git::patch_bytes;
pub use git::{GitBaseline, GitChanges, GitChangesError, PATCH_FILE_BYTES, PATCH_TOTAL_BYTES};
pub use snapshot::Snapshot;
pub use tree_walk::WalkError;

/// How long reading the workspace after the agent ran may take, whatever it holds;
/// files not compared by then are reported `unreadable`.
pub const COLLECT_SECS: u64 = 60;
