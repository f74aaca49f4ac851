//! Which entries the agent added, modified or deleted in the workspace, from a
//! before/after snapshot.
//!
//! Both snapshots read through the one handle opened on the workspace root before the
//! agent ran (the engine's `Workspace::dir`), so an agent that renames the root
//! away and puts a symlink in its place cannot point the second snapshot elsewhere.
//! The walk ([`super::tree_walk`]) names one component at a time relative to an open
//! directory, never follows a symlink and never blocks on a FIFO.
//!
//! Entries are compared by kind, mode, owner and content: a BLAKE3 hash of a file's
//! bytes, a symlink's target, a device's number. Times are not compared, so an edit
//! that puts the old mtime back is still seen. After the run a file is read only if
//! it may still be the one from before: one whose inode, size, mtime and ctime are all
//! as they were keeps its hash (the agent cannot set a ctime), and a new file or one
//! whose size changed is a change without being read. What is read after the run is
//! read within [`COLLECT_SECS`]; a file not compared by then is `unreadable`, with
//! the reason. Names are kept as bytes and written
//! escaped ([`crate::escape::name`]). An entry that cannot be read is recorded with the
//! reason and reported, never taken as unchanged. `.git` at the root is skipped: it
//! is the repository's state, not the agent's work.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use cap_std::fs::Dir;
use rustix::fs::{FileType, Stat};

use super::tree_walk::{
    self, identity, kind_of, Budget, Identity, OpenError, StatKey, Visitor, WalkBounds, WalkError,
};
use super::COLLECT_SECS;
use crate::record::{ChangeKind, EntryKind, FileChange};

/// Path bytes one snapshot may hold: a hostile tree of long names nested deep
/// would otherwise cost the host its memory.
const MAX_PATH_BYTES: u64 = 256 << 20;
/// File content one snapshot hashes; files past it are reported unreadable, so a
/// huge sparse file cannot keep the host reading for hours.
const MAX_CONTENT_BYTES: u64 = 64 << 30;

/// The state of every entry under a root, by `/`-separated relative path in bytes.
#[derive(Debug, Default)]
pub struct Snapshot(BTreeMap<Vec<u8>, Entry>);

#[derive(Debug, Clone)]
struct Entry {
    kind: EntryKind,
    /// Not compared: it tells whether the file must be read again.
    key: Option<StatKey>,
    state: Result<Stamp, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    /// Type and permission bits.
    mode: u32,
    uid: u32,
    gid: u32,
    content: Content,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Content {
    File(blake3::Hash),
    /// A file read after the run that cannot be the one from before (there was none,
    /// or its size differs): not hashed, and never equal to a hash.
    NewFile,
    Symlink(Vec<u8>),
    /// A directory's entries are entries of their own.
    Dir,
    Other {
        rdev: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    path_bytes: u64,
    content_bytes: u64,
}

impl Snapshot {
    /// Reads every entry under `root`, through that handle only.
    pub fn take(root: &Dir) -> Result<Snapshot, WalkError> {
        Snapshot::take_within(
            root,
            Limits {
                path_bytes: MAX_PATH_BYTES,
                content_bytes: MAX_CONTENT_BYTES,
            },
            None,
            None,
        )
    }

    /// Reads every entry under `root` after the agent ran, within
    /// [`COLLECT_SECS`]: a file whose stat is as it was in `before` keeps its hash
    /// from then, and is not read again.
    pub fn take_after(root: &Dir, before: &Snapshot) -> Result<Snapshot, WalkError> {
        let deadline = (
            Instant::now() + Duration::from_secs(COLLECT_SECS),
            COLLECT_SECS,
        );
        Snapshot::take_within(
            root,
            Limits {
                path_bytes: MAX_PATH_BYTES,
                content_bytes: MAX_CONTENT_BYTES,
            },
            Some(before),
            Some(deadline),
        )
    }

    fn take_within(
        root: &Dir,
        limits: Limits,
        before: Option<&Snapshot>,
        deadline: Option<(Instant, u64)>,
    ) -> Result<Snapshot, WalkError> {
        let mut walk = Walk {
            entries: BTreeMap::new(),
            before,
            budget: Budget {
                bytes: limits.content_bytes,
                deadline,
            },
        };
        let bounds = WalkBounds {
            path_bytes: limits.path_bytes,
            deadline,
        };
        tree_walk::walk(root, bounds, &mut walk)?;
        Ok(Snapshot(walk.entries))
    }

    /// What changed from `self` to `after`, sorted by path.
    pub fn changes(&self, after: &Snapshot) -> Vec<FileChange> {
        // What lies under a directory that could not be listed is unknown on that
        // side; the directory's own `unreadable` entry stands for it.
        let blind: Vec<&[u8]> = self
            .0
            .iter()
            .chain(&after.0)
            .filter(|(_, e)| e.kind == EntryKind::Dir && e.state.is_err())
            .map(|(path, _)| path.as_slice())
            .collect();
        let hidden = |path: &[u8]| {
            blind.iter().any(|dir| {
                path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
            })
        };
        let paths: BTreeSet<&Vec<u8>> = self.0.keys().chain(after.0.keys()).collect();
        let mut changes = Vec::new();
        for path in paths.into_iter().filter(|p| !hidden(p)) {
            let (change, kind, error) = match (self.0.get(path), after.0.get(path)) {
                (None, Some(now)) => (ChangeKind::Added, now.kind, now.state.as_ref().err()),
                (Some(was), None) => (ChangeKind::Deleted, was.kind, None),
                (Some(was), Some(now)) => match (&was.state, &now.state) {
                    (Ok(a), Ok(b)) if a == b => continue,
                    (Ok(_), Ok(_)) => (ChangeKind::Modified, now.kind, None),
                    (_, Err(e)) | (Err(e), _) => (ChangeKind::Unreadable, now.kind, Some(e)),
                },
                (None, None) => unreachable!("the path came from one of the snapshots"),
            };
            changes.push(FileChange {
                path: crate::escape::name(path),
                change,
                kind,
                error: error.cloned(),
                from: None,
                binary: None,
            });
        }
        changes
    }
}

struct Walk<'a> {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The snapshot from before the run, whose hashes stand for files not touched.
    before: Option<&'a Snapshot>,
    /// What is left of the content limit, and the deadline.
    budget: Budget,
}

impl Visitor for Walk<'_> {
    fn skip(&self, parent: &[u8], name: &[u8]) -> bool {
        parent.is_empty() && name == b".git"
    }

    fn visit(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        listed: FileType,
    ) -> Option<Identity> {
        let (entry, id) = self.read(dir, name, path, listed);
        let enter = matches!((entry.kind, &entry.state), (EntryKind::Dir, Ok(_)));
        self.entries.insert(path.to_vec(), entry);
        enter.then_some(id)
    }

    fn unreadable(&mut self, path: &[u8], error: OpenError) {
        if let Some(entry) = self.entries.get_mut(path) {
            entry.state = Err(error.to_string());
        }
    }
}

impl Walk<'_> {
    // The widths of the stat fields differ between targets.
    #[allow(clippy::unnecessary_cast)]
    fn read(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        listed: FileType,
    ) -> (Entry, Identity) {
        let stat = match tree_walk::stat_entry(dir, name) {
            Ok(stat) => stat,
            Err(e) => {
                let entry = Entry {
                    kind: kind_of(listed),
                    key: None,
                    state: Err(e.to_string()),
                };
                return (entry, (0, 0));
            }
        };
        let kind = kind_of(FileType::from_raw_mode(stat.st_mode as _));
        let key = StatKey::of(&stat);
        let content = match kind {
            EntryKind::File => self
                .hash(dir, name, path, &stat, key)
                .map_err(|e| e.to_string()),
            EntryKind::Symlink => tree_walk::read_link(dir, name)
                .map(Content::Symlink)
                .map_err(|e| e.to_string()),
            EntryKind::Dir => Ok(Content::Dir),
            EntryKind::Other | EntryKind::Unknown => Ok(Content::Other {
                rdev: stat.st_rdev as u64,
            }),
        };
        let state = content.map(|content| Stamp {
            mode: stat.st_mode as u32,
            uid: stat.st_uid,
            gid: stat.st_gid,
            content,
        });
        let entry = Entry {
            kind,
            key: Some(key),
            state,
        };
        (entry, identity(&stat))
    }

    fn hash(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        stat: &Stat,
        key: StatKey,
    ) -> Result<Content, tree_walk::Unread> {
        if let Some(before) = self.before {
            let was = before.0.get(path);
            let same_size = was
                .and_then(|was| was.key)
                .is_some_and(|was| was.size() == key.size());
            if !same_size {
                return Ok(Content::NewFile);
            }
            let unchanged = was
                .filter(|was| was.key == Some(key))
                .and_then(|was| was.state.as_ref().ok());
            if let Some(Stamp {
                content: content @ Content::File(_),
                ..
            }) = unchanged
            {
                return Ok(content.clone());
            }
        }
        let mut file = tree_walk::open_file(dir, name, stat)?;
        let mut hasher = blake3::Hasher::new();
        self.budget
            .read(&mut file, stat.st_size.max(0) as u64, |chunk| {
                hasher.update(chunk);
            })?;
        Ok(Content::File(hasher.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    use cap_std::ambient_authority;
    use rustix::fs::{Mode, OFlags};

    use super::tree_walk::DIR_FLAGS;
    use super::*;

    fn open(root: &Path) -> Dir {
        Dir::open_ambient_dir(root, ambient_authority()).unwrap()
    }

    fn summary(changes: &[FileChange]) -> Vec<(&str, ChangeKind, EntryKind)> {
        changes
            .iter()
            .map(|c| (c.path.as_str(), c.change, c.kind))
            .collect()
    }

    /// Takes a snapshot, lets `agent` act on the root, and returns what changed.
    fn around(root: &Path, agent: impl FnOnce(&Path)) -> Vec<FileChange> {
        let dir = open(root);
        let before = Snapshot::take(&dir).unwrap();
        agent(root);
        before.changes(&Snapshot::take_after(&dir, &before).unwrap())
    }

    #[test]
    fn finds_added_modified_deleted_and_skips_git() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("keep.txt"), "same").unwrap();
        std::fs::write(root.join("src/edit.rs"), "old").unwrap();
        std::fs::write(root.join("gone.txt"), "x").unwrap();
        let changes = around(root, |root| {
            std::fs::write(root.join("src/edit.rs"), "newer").unwrap();
            std::fs::remove_file(root.join("gone.txt")).unwrap();
            std::fs::write(root.join("src/new.rs"), "n").unwrap();
            std::fs::create_dir(root.join("empty")).unwrap();
            std::fs::write(root.join(".git/index"), "ignored").unwrap();
        });
        assert_eq!(
            summary(&changes),
            [
                ("empty", ChangeKind::Added, EntryKind::Dir),
                ("gone.txt", ChangeKind::Deleted, EntryKind::File),
                ("src/edit.rs", ChangeKind::Modified, EntryKind::File),
                ("src/new.rs", ChangeKind::Added, EntryKind::File),
            ]
        );
        assert!(changes.iter().all(|c| c.error.is_none()));
    }

    #[test]
    fn a_same_size_edit_with_the_mtime_put_back_is_modified() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("config.txt");
        std::fs::write(&file, "mode=safe").unwrap();
        let changes = around(root.path(), |_| {
            let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
            std::fs::write(&file, "mode=evil").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(mtime)
                .unwrap();
            assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), mtime);
        });
        assert_eq!(
            summary(&changes),
            [("config.txt", ChangeKind::Modified, EntryKind::File)]
        );
    }

    #[test]
    fn a_chmod_alone_is_modified_and_a_touch_alone_is_not() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("run.sh"), "echo hi").unwrap();
        std::fs::write(root.path().join("touched"), "same").unwrap();
        std::fs::create_dir(root.path().join("private")).unwrap();
        let changes = around(root.path(), |root| {
            let mode = |m| std::fs::Permissions::from_mode(m);
            std::fs::set_permissions(root.join("run.sh"), mode(0o4755)).unwrap();
            std::fs::set_permissions(root.join("private"), mode(0o777)).unwrap();
            std::fs::File::options()
                .write(true)
                .open(root.join("touched"))
                .unwrap()
                .set_modified(std::time::SystemTime::UNIX_EPOCH)
                .unwrap();
        });
        assert_eq!(
            summary(&changes),
            [
                ("private", ChangeKind::Modified, EntryKind::Dir),
                ("run.sh", ChangeKind::Modified, EntryKind::File),
            ]
        );
    }

    #[test]
    fn symlinks_are_compared_by_target_and_never_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink("aaaa", root.path().join("link")).unwrap();
        symlink(outside.path(), root.path().join("out")).unwrap();
        let changes = around(root.path(), |root| {
            // Same length, other target.
            std::fs::remove_file(root.join("link")).unwrap();
            symlink("bbbb", root.join("link")).unwrap();
            // Changes behind a symlink are outside the workspace.
            std::fs::write(outside.path().join("secret"), "changed").unwrap();
        });
        assert_eq!(
            summary(&changes),
            [("link", ChangeKind::Modified, EntryKind::Symlink)]
        );
    }

    #[test]
    fn names_that_are_not_utf8_are_kept_and_escaped() {
        let root = tempfile::tempdir().unwrap();
        let name = |bytes: &[u8]| root.path().join(std::ffi::OsStr::from_bytes(bytes));
        std::fs::create_dir(name(b"dir\xff")).unwrap();
        std::fs::write(name(b"dir\xff/old\xfe"), "x").unwrap();
        let changes = around(root.path(), |_| {
            std::fs::write(name(b"dir\xff/old\xfe"), "y").unwrap();
            std::fs::write(name(b"bad\xffname"), "x").unwrap();
            std::fs::write(name(b"bad\xfename"), "x").unwrap();
            std::fs::write(name(b"line\nok 1 file(s) changed\x1b[2J"), "x").unwrap();
            std::fs::write(name(b"back\\slash"), "x").unwrap();
        });
        assert_eq!(
            summary(&changes),
            [
                ("back\\\\slash", ChangeKind::Added, EntryKind::File),
                ("bad\\xfename", ChangeKind::Added, EntryKind::File),
                ("bad\\xffname", ChangeKind::Added, EntryKind::File),
                ("dir\\xff/old\\xfe", ChangeKind::Modified, EntryKind::File),
                (
                    "line\\nok 1 file(s) changed\\e[2J",
                    ChangeKind::Added,
                    EntryKind::File
                ),
            ]
        );
    }

    /// Descriptors of this process open on `root` or below it. Counting only those
    /// keeps the check exact while other tests open and close descriptors.
    fn fds_into(root: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| target.starts_with(root))
            .count()
    }

    #[test]
    fn a_tree_3000_folders_deep_is_walked_exactly() {
        let root = tempfile::tempdir().unwrap();
        let dir = open(root.path());
        let before = Snapshot::take(&dir).unwrap();
        // Built through descriptors: the path is longer than PATH_MAX.
        let mut current = rustix::fs::openat(&dir, ".", DIR_FLAGS, Mode::empty()).unwrap();
        let mut expected = Vec::new();
        let mut path = String::new();
        for _ in 0..3000 {
            rustix::fs::mkdirat(&current, "d", Mode::from_raw_mode(0o755)).unwrap();
            current = rustix::fs::openat(&current, "d", OFlags::DIRECTORY, Mode::empty()).unwrap();
            path.push_str(if path.is_empty() { "d" } else { "/d" });
            expected.push((path.clone(), ChangeKind::Added, EntryKind::Dir));
        }
        let leaf = rustix::fs::openat(
            &current,
            "leaf",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop((leaf, current));
        expected.push((format!("{path}/leaf"), ChangeKind::Added, EntryKind::File));
        expected.sort_by(|a, b| a.0.cmp(&b.0));

        let fds = fds_into(root.path());
        let after = Snapshot::take(&dir).unwrap();
        assert_eq!(fds_into(root.path()), fds, "the walk left descriptors open");
        let changes = before.changes(&after);
        let got: Vec<_> = changes
            .iter()
            .map(|c| (c.path.clone(), c.change, c.kind))
            .collect();
        assert_eq!(got.len(), 3001);
        assert!(got == expected, "the deep tree was not reported exactly");
    }

    #[test]
    fn a_swapped_root_cannot_redirect_the_walk() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let changes = around(&root, |root| {
            std::fs::write(root.join("b.txt"), "b").unwrap();
            std::fs::rename(root, base.path().join("moved")).unwrap();
            symlink("/etc", root).unwrap();
        });
        assert_eq!(
            summary(&changes),
            [("b.txt", ChangeKind::Added, EntryKind::File)]
        );

        // A root removed outright: everything in it is deleted.
        let root = base.path().join("ws2");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let changes = around(&root, |root| {
            std::fs::remove_dir_all(root).unwrap();
            symlink("/etc", root).unwrap();
        });
        assert_eq!(
            summary(&changes),
            [("a.txt", ChangeKind::Deleted, EntryKind::File)]
        );
    }

    #[test]
    fn a_fifo_is_recorded_without_being_opened() {
        let root = tempfile::tempdir().unwrap();
        let changes = around(root.path(), |root| {
            let path = std::ffi::CString::new(root.join("pipe").as_os_str().as_bytes()).unwrap();
            // SAFETY: a valid C string.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
        });
        assert_eq!(
            summary(&changes),
            [("pipe", ChangeKind::Added, EntryKind::Other)]
        );
    }

    #[test]
    fn unreadable_entries_are_reported_not_dropped() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().to_path_buf();
        std::fs::write(root.join("locked.txt"), "x").unwrap();
        std::fs::create_dir(root.join("vault")).unwrap();
        std::fs::write(root.join("vault/inside.txt"), "x").unwrap();
        let before = Snapshot::take(&open(&root)).unwrap();
        for path in ["locked.txt", "vault"] {
            std::fs::set_permissions(root.join(path), std::fs::Permissions::from_mode(0o000))
                .unwrap();
        }
        // Root reads everything; capabilities are per thread, so this thread reads
        // as an ordinary user would.
        let after = std::thread::spawn({
            let root = root.clone();
            move || {
                for cap in [
                    caps::Capability::CAP_DAC_OVERRIDE,
                    caps::Capability::CAP_DAC_READ_SEARCH,
                ] {
                    caps::drop(None, caps::CapSet::Effective, cap).unwrap();
                }
                Snapshot::take(&open(&root)).unwrap()
            }
        })
        .join()
        .unwrap();
        let changes = before.changes(&after);
        assert_eq!(
            summary(&changes),
            [
                ("locked.txt", ChangeKind::Unreadable, EntryKind::File),
                ("vault", ChangeKind::Unreadable, EntryKind::Dir),
            ]
        );
        for change in &changes {
            let error = change.error.as_deref().unwrap_or_default();
            assert!(error.contains("Permission denied"), "{error}");
        }
        std::fs::set_permissions(root.join("vault"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }

    #[test]
    fn files_that_cannot_be_the_ones_from_before_are_not_read_after_the_run() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("grown"), "x").unwrap();
        let changes = around(root.path(), |root| {
            // Hashing these would take minutes: a new file, and one whose size
            // changed, are changes whatever they hold.
            for name in ["sparse", "grown"] {
                std::fs::File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(root.join(name))
                    .unwrap()
                    .set_len(1 << 40)
                    .unwrap();
            }
        });
        assert_eq!(
            summary(&changes),
            [
                ("grown", ChangeKind::Modified, EntryKind::File),
                ("sparse", ChangeKind::Added, EntryKind::File),
            ]
        );
        assert!(changes.iter().all(|c| c.error.is_none()), "{changes:?}");
    }

    #[test]
    fn a_hostile_size_is_refused_or_reported_not_read_forever() {
        let root = tempfile::tempdir().unwrap();
        let dir = open(root.path());
        std::fs::write(root.path().join("small"), "x").unwrap();
        std::fs::File::create(root.path().join("sparse"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let snapshot = Snapshot::take_within(
            &dir,
            Limits {
                path_bytes: 1 << 20,
                content_bytes: 1 << 20,
            },
            None,
            None,
        )
        .unwrap();
        let changes = Snapshot::default().changes(&snapshot);
        assert_eq!(changes[0].path, "small");
        assert_eq!(changes[0].error, None);
        assert_eq!(changes[1].path, "sparse");
        assert!(changes[1]
            .error
            .as_deref()
            .unwrap()
            .contains("not compared"));

        std::fs::create_dir(root.path().join("x".repeat(200))).unwrap();
        let err = Snapshot::take_within(
            &dir,
            Limits {
                path_bytes: 100,
                content_bytes: 1 << 20,
            },
            None,
            None,
        )
        .unwrap_err();
        assert!(matches!(err, WalkError::TooLarge { limit: 100 }), "{err}");
    }
}
