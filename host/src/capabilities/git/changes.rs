//! What changed in a working tree: the file list (`status`) and the patch (`diff`).
//!
//! Both compare the working tree (index included) with a commit, untracked files
//! included, renames detected, so that a file the agent created shows as added and one
//! it moved shows once, as renamed. Both read the host's own copy of the repository
//! ([`HostRepo`]), never the workspace's `.git/config`.

use std::path::Path;

use git2::{Delta, DiffFindOptions, DiffOptions, Repository};

use super::error::GitError;
use super::host_repo::{HostRepo, Parts};
use crate::changeset::patch_bytes;
use crate::wit::git::{ChangeKind, FileChange};

fn tree_diff<'r>(
    repo: &'r Repository,
    path: &Path,
    base: Option<&str>,
) -> Result<git2::Diff<'r>, GitError> {
    let base = base.unwrap_or("HEAD");
    let tree = match repo.revparse_single(base).and_then(|o| o.peel_to_tree()) {
        Ok(tree) => Some(tree),
        // A repository without commits: everything is new.
        Err(_) if base == "HEAD" && repo.head().is_err() => None,
        Err(e) => return Err(GitError::repo(path, format!("base {base:?}: {e}"))),
    };
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true);
    let mut diff = repo
        .diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut options))
        .map_err(|e| GitError::repo(path, e))?;
    diff.find_similar(Some(
        DiffFindOptions::new().renames(true).for_untracked(true),
    ))
    .map_err(|e| GitError::repo(path, e))?;
    Ok(diff)
}

/// Files changed against HEAD, untracked ones included, sorted by path.
pub fn status(path: &Path) -> Result<Vec<FileChange>, GitError> {
    let host = HostRepo::open(path, Parts::WorkTree)?;
    let diff = tree_diff(&host.repo, path, None)?;
    // Loading the stats reads the contents, which sets the binary flags.
    diff.stats().map_err(|e| GitError::repo(path, e))?;
    let name = |file: git2::DiffFile| {
        file.path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut changes: Vec<FileChange> = diff
        .deltas()
        .filter_map(|delta| {
            let kind = match delta.status() {
                Delta::Added | Delta::Untracked | Delta::Copied => ChangeKind::Added,
                Delta::Modified => ChangeKind::Modified,
                Delta::Deleted => ChangeKind::Deleted,
                Delta::Renamed => ChangeKind::Renamed,
                Delta::Typechange => ChangeKind::TypeChanged,
                _ => return None,
            };
            Some(FileChange {
                path: name(delta.new_file()),
                old_path: (kind == ChangeKind::Renamed).then(|| name(delta.old_file())),
                kind,
                binary: delta.flags().is_binary(),
            })
        })
        .collect();
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(changes)
}

/// The unified diff of the working tree against `base` (default HEAD).
pub fn diff(path: &Path, base: Option<&str>) -> Result<String, GitError> {
    let host = HostRepo::open(path, Parts::WorkTree)?;
    let diff = tree_diff(&host.repo, path, base)?;
    let patch = patch_bytes(&diff).map_err(|e| GitError::repo(path, e))?;
    Ok(String::from_utf8_lossy(&patch).into_owned())
}
