//! The change set as the run record carries it: the entries of `modifiedFiles` and
//! `ignoredFiles` in `result.json`, and the files `changes.patch` leaves out.
//!
//! Only the types live here, so that what reads a record (the registry, `history`,
//! reports) does not depend on how a change set is found; finding it is
//! [`crate::changeset`]'s work.

use serde::{Deserialize, Serialize};

/// How an entry changed during the run: `change` in `modifiedFiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    /// The entry did not exist before the run.
    Added,
    /// Its kind, content, mode, owner or link target differs from before the run.
    Modified,
    /// The entry existed before the run and is gone.
    Deleted,
    /// Moved from `from` (git workspaces: found by content similarity, as `git diff -M`).
    Renamed,
    /// The entry exists before and after, but one of the two could not be read, so
    /// whether it changed is unknown. `error` says why.
    Unreadable,
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Renamed => "renamed",
            ChangeKind::Unreadable => "unreadable",
        })
    }
}

/// What an entry is: `kind` in `modifiedFiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (its target is compared, never followed).
    Symlink,
    /// A FIFO, socket or device node.
    Other,
    /// It vanished before its kind could be read.
    Unknown,
}

/// One entry of `modifiedFiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileChange {
    /// `/`-separated, relative to the workspace root, escaped by
    /// [`crate::escape::name`]: lossless, printable, one line.
    pub path: String,
    /// How it changed.
    pub change: ChangeKind,
    /// What it is (after the run; before it, for `deleted`).
    pub kind: EntryKind,
    /// Why the entry could not be read (for `unreadable`, and `added` entries whose
    /// content could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `renamed`: the old path, escaped like `path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Git workspaces: whether the content is binary (a NUL byte in its first 8000
    /// bytes, git's own test); the new content, or the old one for `deleted`. Absent
    /// when that content was not read (a deleted file git held unchanged, or the
    /// collection's time ran out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<bool>,
}

/// A file of `modifiedFiles` that `changes.patch` leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OmittedFile {
    /// Escaped like `modifiedFiles`' paths.
    pub path: String,
    /// Why the patch leaves it out (too large, not a file, content before the run not kept, not
    /// comparable).
    pub reason: String,
}
