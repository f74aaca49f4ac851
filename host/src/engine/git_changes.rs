//! What the agent changed in a workspace that is a git repository, from git itself,
//! and `changes.patch`.
//!
//! Git's index keeps a stat cache of every tracked file, so asking git what differs
//! from a tree reads only the files whose stat changed: far cheaper than hashing the
//! whole tree as [`super::changes::Snapshot`] does (which stays for workspaces that are
//! not repositories). The answer is exact, not "what `git status` says after":
//!
//! - before the agent runs, the baseline is `HEAD`'s tree plus the content of every
//!   path that already differed from it (uncommitted edits, untracked files), kept in
//!   memory;
//! - after, every path that differs from `HEAD`'s tree now, or did before, is compared
//!   by content (blob id and mode) with its state before. An edit the agent made to an
//!   already-dirty file is seen, an agent that commits its work does not hide it (the
//!   comparison is with the work tree, not with the new `HEAD`), and a file put back
//!   as it was is not reported;
//! - files in ignored folders (`node_modules/`, `target/`) are compared by content
//!   too, and reported apart: they are rarely the agent's work, but they are changes.
//!
//! libgit2 is used, never the `git` program: the repository's config and attributes
//! are the agent's to write, and `git` would run what they name (fsmonitor, filters).
//! Blobs the patch needs are written to an in-memory object store layered over the
//! repository's, so the repository itself is never written. A repository whose work
//! tree is not the workspace root (`core.worktree`) is not trusted: the caller falls
//! back to the snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use git2::{
    Delta, DiffFindOptions, DiffOptions, FileMode, Index, IndexEntry, IndexTime, Oid, Repository,
    RepositoryOpenFlags, Tree,
};

use super::changes::{ChangeKind, EntryKind, FileChange};

/// Content of already-dirty files the baseline keeps in memory; a workspace with more
/// is compared by snapshot instead.
const MAX_BASELINE_BYTES: u64 = 512 << 20;
/// git's binary test: a NUL byte in the first 8000 bytes.
const BINARY_PROBE: usize = 8000;

#[derive(Debug, thiserror::Error)]
pub enum GitChangesError {
    #[error("reading the git repository: {0}")]
    Git(#[from] git2::Error),
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the files that differ from HEAD before the run hold more than {} MiB",
        MAX_BASELINE_BYTES >> 20
    )]
    TooLarge,
}

/// Paths as git gives them: bytes, `/`-separated.
type Paths = Vec<Vec<u8>>;

/// A path's state: absent, or a blob with a mode.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    Blob { oid: Oid, mode: i32, binary: bool },
}

impl State {
    fn kind(&self) -> EntryKind {
        match self {
            State::Blob { mode, .. } if *mode == i32::from(FileMode::Link) => EntryKind::Symlink,
            State::Blob { .. } => EntryKind::File,
            State::Absent => EntryKind::Unknown,
        }
    }

    fn binary(&self) -> Option<bool> {
        match self {
            State::Blob { binary, .. } => Some(*binary),
            State::Absent => None,
        }
    }
}

/// The state of the repository before the agent ran.
pub struct GitBaseline {
    repo: Repository,
    root: PathBuf,
    base: Option<Oid>,
    /// Paths that differed from `base` before the run, with their state then.
    dirty: BTreeMap<Vec<u8>, State>,
    /// Files in ignored folders, by content id.
    ignored: BTreeMap<Vec<u8>, State>,
}

/// What changed, from git.
pub struct GitChanges {
    /// Tracked and untracked (not ignored) paths, sorted.
    pub files: Vec<FileChange>,
    /// Files in ignored folders, sorted.
    pub ignored: Vec<FileChange>,
    /// The change set as a patch `git apply` takes (binary files included); ignored
    /// files are not in it.
    pub patch: Vec<u8>,
}

impl GitBaseline {
    /// The baseline of `root`, or `None` when `root` is not the work tree of a git
    /// repository.
    pub fn take(root: &Path) -> Result<Option<GitBaseline>, GitChangesError> {
        if !root.join(".git").exists() {
            return Ok(None);
        }
        let repo = match Repository::open_ext(
            root,
            RepositoryOpenFlags::NO_SEARCH,
            std::iter::empty::<&std::ffi::OsStr>(),
        ) {
            Ok(repo) => repo,
            Err(_) => return Ok(None),
        };
        let same_root = repo
            .workdir()
            .and_then(|w| w.canonicalize().ok())
            .zip(root.canonicalize().ok())
            .is_some_and(|(a, b)| a == b);
        if !same_root || repo.is_bare() {
            return Ok(None);
        }
        // Blobs written from here on stay in memory.
        repo.odb()?.add_new_mempack_backend(1000)?;
        let base = match repo.head() {
            Ok(head) => Some(head.peel_to_tree()?.id()),
            Err(e)
                if matches!(
                    e.code(),
                    git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
                ) =>
            {
                None
            }
            Err(e) => return Err(e.into()),
        };
        let mut baseline = GitBaseline {
            root: root.to_path_buf(),
            base,
            dirty: BTreeMap::new(),
            ignored: BTreeMap::new(),
            repo,
        };
        let (dirty, ignored) = baseline.differing()?;
        let mut kept = 0u64;
        for path in dirty {
            let state = baseline.read(&path, true)?;
            if let State::Blob { oid, .. } = &state {
                kept += baseline.repo.find_blob(*oid)?.size() as u64;
                if kept > MAX_BASELINE_BYTES {
                    return Err(GitChangesError::TooLarge);
                }
            }
            baseline.dirty.insert(path, state);
        }
        for path in ignored {
            let state = baseline.read(&path, false)?;
            baseline.ignored.insert(path, state);
        }
        Ok(Some(baseline))
    }

    /// The paths that differ from the base tree now (not ignored), and the files in
    /// ignored folders.
    fn differing(&self) -> Result<(Paths, Paths), GitChangesError> {
        let tree = self.base_tree()?;
        let mut options = DiffOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(true)
            .recurse_ignored_dirs(true)
            .include_typechange(true)
            .ignore_submodules(true);
        let diff = self
            .repo
            .diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut options))?;
        let (mut differing, mut ignored) = (Vec::new(), Vec::new());
        for delta in diff.deltas() {
            let file = match delta.status() {
                Delta::Deleted => delta.old_file(),
                _ => delta.new_file(),
            };
            let Some(path) = file.path_bytes() else {
                continue;
            };
            match delta.status() {
                Delta::Ignored => ignored.push(path.to_vec()),
                Delta::Unmodified => {}
                _ => differing.push(path.to_vec()),
            }
        }
        Ok((differing, ignored))
    }

    fn base_tree(&self) -> Result<Option<Tree<'_>>, git2::Error> {
        self.base.map(|id| self.repo.find_tree(id)).transpose()
    }

    /// A path's state in the work tree now; its content goes to the in-memory store
    /// when `keep` (the patch needs it).
    fn read(&self, path: &[u8], keep: bool) -> Result<State, GitChangesError> {
        let full = self.root.join(std::ffi::OsStr::from_bytes(path));
        let io = |source| GitChangesError::Io {
            path: crate::escape::name(path),
            source,
        };
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::Absent),
            Err(e) => return Err(io(e)),
        };
        let (bytes, mode) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&full).map_err(io)?;
            (target.as_os_str().as_bytes().to_vec(), FileMode::Link)
        } else if meta.is_file() {
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&full)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(io)?;
            let executable = meta.permissions().mode() & 0o111 != 0;
            let mode = if executable {
                FileMode::BlobExecutable
            } else {
                FileMode::Blob
            };
            (bytes, mode)
        } else {
            // A directory (a nested repository) or a special file: git tracks neither.
            return Ok(State::Absent);
        };
        let binary = bytes[..bytes.len().min(BINARY_PROBE)].contains(&0);
        let oid = if keep {
            self.repo.blob(&bytes)?
        } else {
            Oid::hash_object(git2::ObjectType::Blob, &bytes)?
        };
        Ok(State::Blob {
            oid,
            mode: i32::from(mode),
            binary,
        })
    }

    /// The state of `path` in the base tree.
    fn in_base(&self, tree: Option<&Tree<'_>>, path: &[u8]) -> Result<State, GitChangesError> {
        let Some(tree) = tree else {
            return Ok(State::Absent);
        };
        match tree.get_path(Path::new(std::ffi::OsStr::from_bytes(path))) {
            Ok(entry) => {
                let binary = self
                    .repo
                    .find_blob(entry.id())
                    .map(|b| b.content()[..b.size().min(BINARY_PROBE)].contains(&0))
                    .unwrap_or(false);
                Ok(State::Blob {
                    oid: entry.id(),
                    mode: entry.filemode(),
                    binary,
                })
            }
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(State::Absent),
            Err(e) => Err(e.into()),
        }
    }

    /// What changed since [`GitBaseline::take`].
    pub fn changes(&self) -> Result<GitChanges, GitChangesError> {
        let tree = self.base_tree()?;
        let (differing, ignored_now) = self.differing()?;
        let candidates: BTreeSet<Vec<u8>> = differing
            .into_iter()
            .chain(self.dirty.keys().cloned())
            .collect();
        let mut before_index = Index::new()?;
        let mut after_index = Index::new()?;
        let mut states = BTreeMap::new();
        for path in candidates {
            let before = match self.dirty.get(&path) {
                Some(state) => state.clone(),
                None => self.in_base(tree.as_ref(), &path)?,
            };
            let now = self.read(&path, true)?;
            if before == now {
                continue;
            }
            for (index, state) in [(&mut before_index, &before), (&mut after_index, &now)] {
                if let State::Blob { oid, mode, .. } = state {
                    index.add(&index_entry(&path, *oid, *mode))?;
                }
            }
            states.insert(path, (before, now));
        }

        // The two trees hold only the changed paths: their diff is the change set,
        // with renames found among them as `git diff -M` finds them.
        let before_tree = self
            .repo
            .find_tree(before_index.write_tree_to(&self.repo)?)?;
        let after_tree = self
            .repo
            .find_tree(after_index.write_tree_to(&self.repo)?)?;
        let mut options = DiffOptions::new();
        options.show_binary(true).include_typechange(true);
        let mut diff = self.repo.diff_tree_to_tree(
            Some(&before_tree),
            Some(&after_tree),
            Some(&mut options),
        )?;
        diff.find_similar(Some(DiffFindOptions::new().renames(true)))?;
        let patch = crate::capabilities::git::patch_bytes(&diff)?;

        let mut files = Vec::new();
        for delta in diff.deltas() {
            let (Some(old), Some(new)) =
                (delta.old_file().path_bytes(), delta.new_file().path_bytes())
            else {
                continue;
            };
            let (path, change, from) = match delta.status() {
                Delta::Added => (new, ChangeKind::Added, None),
                Delta::Deleted => (old, ChangeKind::Deleted, None),
                Delta::Renamed => (new, ChangeKind::Renamed, Some(crate::escape::name(old))),
                _ => (new, ChangeKind::Modified, None),
            };
            let (before, now) = &states[path];
            let shown = if change == ChangeKind::Deleted {
                before
            } else {
                now
            };
            files.push(FileChange {
                path: crate::escape::name(path),
                change,
                kind: shown.kind(),
                error: None,
                from,
                binary: shown.binary(),
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));

        let mut ignored = Vec::new();
        let ignored_paths: BTreeSet<&Vec<u8>> =
            ignored_now.iter().chain(self.ignored.keys()).collect();
        for path in ignored_paths {
            let before = self.ignored.get(path).cloned().unwrap_or(State::Absent);
            let now = self.read(path, false)?;
            let change = match (&before, &now) {
                (a, b) if a == b => continue,
                (State::Absent, _) => ChangeKind::Added,
                (_, State::Absent) => ChangeKind::Deleted,
                _ => ChangeKind::Modified,
            };
            let shown = if change == ChangeKind::Deleted {
                &before
            } else {
                &now
            };
            ignored.push(FileChange {
                path: crate::escape::name(path),
                change,
                kind: shown.kind(),
                error: None,
                from: None,
                binary: shown.binary(),
            });
        }
        Ok(GitChanges {
            files,
            ignored,
            patch,
        })
    }
}

fn index_entry(path: &[u8], id: Oid, mode: i32) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode: mode as u32,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: path.len().min(0xfff) as u16,
        flags_extended: 0,
        path: path.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b\n").unwrap();
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "base"]);
        dir
    }

    fn changed(changes: &GitChanges) -> Vec<(String, ChangeKind)> {
        changes
            .files
            .iter()
            .map(|c| (c.path.clone(), c.change))
            .collect()
    }

    #[test]
    fn edits_to_already_dirty_files_are_seen_and_what_was_dirty_before_is_not_reported() {
        let dir = repo();
        let root = dir.path();
        // Dirty before the agent: an edit and an untracked file.
        std::fs::write(root.join("a.txt"), "user edit\n").unwrap();
        std::fs::write(root.join("untracked.txt"), "mine\n").unwrap();
        let baseline = GitBaseline::take(root).unwrap().unwrap();
        assert!(changed(&baseline.changes().unwrap()).is_empty());
        // The agent edits the dirty file again and leaves the untracked one.
        std::fs::write(root.join("a.txt"), "agent edit\n").unwrap();
        let changes = baseline.changes().unwrap();
        assert_eq!(
            changed(&changes),
            [("a.txt".to_string(), ChangeKind::Modified)]
        );
        // The patch goes from the user's edit to the agent's.
        let patch = String::from_utf8(changes.patch).unwrap();
        assert!(patch.contains("-user edit\n+agent edit\n"), "{patch}");
        // Putting the file back as it was is no change.
        std::fs::write(root.join("a.txt"), "user edit\n").unwrap();
        assert!(changed(&baseline.changes().unwrap()).is_empty());
    }

    #[test]
    fn an_agent_that_commits_its_work_does_not_hide_it() {
        let dir = repo();
        let root = dir.path();
        let baseline = GitBaseline::take(root).unwrap().unwrap();
        std::fs::write(root.join("b.txt"), "committed\n").unwrap();
        git(root, &["commit", "-q", "-am", "agent"]);
        assert_eq!(
            changed(&baseline.changes().unwrap()),
            [("b.txt".to_string(), ChangeKind::Modified)]
        );
    }

    #[test]
    fn a_folder_that_is_not_a_repository_root_has_no_git_baseline() {
        let dir = repo();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(GitBaseline::take(&dir.path().join("sub"))
            .unwrap()
            .is_none());
        let plain = tempfile::tempdir().unwrap();
        assert!(GitBaseline::take(plain.path()).unwrap().is_none());
    }
}
