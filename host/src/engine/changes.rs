//! Which files the agent added, modified or deleted, from a before/after snapshot.
//!
//! The walk goes through a `cap_std` handle on the workspace root and never follows
//! symlinks, so nothing in the workspace can point it elsewhere. `.git` is skipped: it
//! is the repository's state, not the agent's work.

use std::collections::BTreeMap;
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    kind: u8,
}

/// The state of every file under a root, by `/`-separated relative path.
#[derive(Debug, Default)]
pub struct Snapshot(BTreeMap<String, Stamp>);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    pub path: String,
    pub change: ChangeKind,
}

impl Snapshot {
    pub fn take(root: &Path) -> std::io::Result<Snapshot> {
        let dir = Dir::open_ambient_dir(root, ambient_authority())?;
        let mut files = BTreeMap::new();
        walk(&dir, "", &mut files)?;
        Ok(Snapshot(files))
    }

    /// What changed from `self` to `after`, sorted by path.
    pub fn changes(&self, after: &Snapshot) -> Vec<FileChange> {
        let mut changes = Vec::new();
        for (path, stamp) in &after.0 {
            match self.0.get(path) {
                None => changes.push(FileChange {
                    path: path.clone(),
                    change: ChangeKind::Added,
                }),
                Some(before) if before != stamp => changes.push(FileChange {
                    path: path.clone(),
                    change: ChangeKind::Modified,
                }),
                Some(_) => {}
            }
        }
        for path in self.0.keys().filter(|p| !after.0.contains_key(*p)) {
            changes.push(FileChange {
                path: path.clone(),
                change: ChangeKind::Deleted,
            });
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes
    }
}

fn walk(dir: &Dir, prefix: &str, files: &mut BTreeMap<String, Stamp>) -> std::io::Result<()> {
    for entry in dir.entries()? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if prefix.is_empty() && name == ".git" {
            continue;
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            walk(&entry.open_dir()?, &path, files)?;
            continue;
        }
        let meta = dir.symlink_metadata(&name)?;
        files.insert(
            path,
            Stamp {
                len: meta.len(),
                modified: meta.modified().ok().map(|t| t.into_std()),
                kind: if file_type.is_symlink() { 1 } else { 0 },
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_added_modified_deleted_and_skips_git() {
        let root = std::env::temp_dir().join(format!("ag-changes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("keep.txt"), "same").unwrap();
        std::fs::write(root.join("src/edit.rs"), "old").unwrap();
        std::fs::write(root.join("gone.txt"), "x").unwrap();
        let before = Snapshot::take(&root).unwrap();

        std::fs::write(root.join("src/edit.rs"), "newer").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::write(root.join("src/new.rs"), "n").unwrap();
        std::fs::write(root.join(".git/index"), "ignored").unwrap();
        let after = Snapshot::take(&root).unwrap();

        let changes = before.changes(&after);
        let summary: Vec<_> = changes
            .iter()
            .map(|c| (c.path.as_str(), c.change))
            .collect();
        assert_eq!(
            summary,
            [
                ("gone.txt", ChangeKind::Deleted),
                ("src/edit.rs", ChangeKind::Modified),
                ("src/new.rs", ChangeKind::Added),
            ]
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
