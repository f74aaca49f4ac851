//! The change set as the run record carries it: the entries of `modifiedFiles` and
//! `ignoredFiles` in `result.json`, and the files `changes.patch` leaves out.
//!
//! Only the types live here, so that what reads a record (the registry, `history`,
//! reports) does not depend on how a change set is found; finding it is
//! [`crate::changeset`]'s work.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Added,
    Modified,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    File,
    Dir,
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
    pub change: ChangeKind,
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
    pub reason: String,
}
