//! What the agent changed in a workspace that is a git repository, and
//! `changes.patch`.
//!
//! The answer is exact, not "what `git status` says after": every entry of the work
//! tree is compared with its state before the agent ran. An edit to an already-dirty
//! file is seen, an agent that commits its work does not hide it (the comparison is
//! with the work tree, never with the new `HEAD`), and a file put back as it was is
//! not reported. Ignored files are compared too, and reported apart.
//!
//! # Who reads what
//!
//! The agent owns the work tree and everything under `.git` once it ran: it can swap a
//! folder for a symlink to `/etc` or `/proc/self`, put FIFOs and 1 TiB sparse files in
//! place of files, forge the index's stat cache, and write `core.worktree`,
//! `core.excludesFile`, `core.symlinks`, filters and attributes into `.git`. libgit2
//! reading the work tree would honour all of that (it opens paths through parent
//! symlinks and reads whole files), so here it never reads the work tree:
//!
//! - **The work tree is read by the host** ([`super::tree_walk`]): a walk by directory
//!   handles from the root handle opened before the agent ran, never through a
//!   symlink; a file is opened non-blocking and checked on its descriptor. Before the
//!   run the walk records every entry's stat (inode, size, mtime, ctime) and, for each
//!   file git's index does not vouch for, its blob id, hashed streaming (SHA-1 over
//!   `blob <len>\0` and the content, as git does). After the run, a file whose stat is
//!   as recorded is unchanged (the agent cannot set a ctime), one whose size differs
//!   is modified, and only the rest is hashed, within [`COLLECT_SECS`] in all.
//! - **Ignore rules** come from the `.gitignore` files the walk itself reads, and from
//!   `.git/info/exclude` read before the run, applied in memory; `core.excludesFile`
//!   is not read. A tracked path is never ignored. Ignoring only moves an entry from
//!   `modifiedFiles` to `ignoredFiles`: it cannot hide it.
//! - **git (libgit2) serves objects and trees only**: `HEAD`'s tree and the index,
//!   read before the run, say what was committed and which files were clean; after
//!   the run only blobs are read from the object database, each checked against its id
//!   (strict hash verification), so a swapped `.git` can make a blob unreadable but
//!   never give it other content. The patch is the diff of two in-memory trees in a
//!   repository wrapped around the object database alone: no config, no attributes,
//!   no filters, no work tree.
//!
//! # Bounds
//!
//! Memory never grows with a file's size: files are hashed a chunk at a time, and the
//! patch holds at most [`PATCH_FILE_BYTES`] of content per file and
//! [`PATCH_TOTAL_BYTES`] in all. A file left out of the patch (too large, its
//! content before the run not kept, not a file) is listed with the reason
//! ([`OmittedFile`]). A file that could not be compared in time is reported
//! `unreadable`, never taken as unchanged. Content that holds one of the run's secrets
//! goes into the patch masked, binary or not, so a binary patch cannot carry it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use cap_std::fs::Dir;
use git2::{
    DiffFindOptions, DiffFormat, DiffOptions, Index, IndexEntry, IndexTime, Oid, Repository,
};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{FileType, OFlags, Stat};
use sha1::{Digest, Sha1};

use super::tree_walk::{
    self, kind_of, Budget, Identity, OpenError, StatKey, Visitor, WalkBounds, WalkError,
};
use super::COLLECT_SECS;
use crate::record::{ChangeKind, EntryKind, FileChange, OmittedFile, Redactor};

/// Content of one file, before or after, that `changes.patch` may hold.
pub const PATCH_FILE_BYTES: u64 = 8 << 20;
/// Content of all files that `changes.patch` may hold.
pub const PATCH_TOTAL_BYTES: u64 = 64 << 20;
/// Content of files git does not hold (dirty, untracked) kept in memory before the
/// run, so the patch can show what the agent did to them.
const MAX_KEPT_BYTES: u64 = 64 << 20;
/// File content hashed before the run: past it, a file's id is not known, and a
/// change of its stat is reported as a modification.
const MAX_HASHED_BYTES: u64 = 64 << 30;
/// Path bytes one walk may hold.
const MAX_PATH_BYTES: u64 = 256 << 20;
/// `.gitignore` bytes read, per file and in all: past them rules are not read, and
/// files they would ignore are reported in `modifiedFiles`.
const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;
const MAX_IGNORE_BYTES: u64 = 16 << 20;
/// git's binary test: a NUL byte in the first 8000 bytes.
const BINARY_PROBE: usize = 8000;

const MODE_LINK: i32 = 0o120000;
const MODE_EXEC: i32 = 0o100755;
const MODE_FILE: i32 = 0o100644;

/// Why the change set of a git workspace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GitChangesError {
    /// git could not read the repository's objects or index.
    #[error("reading the git repository: {0}")]
    Git(#[from] git2::Error),
    /// The work tree could not be walked.
    #[error(transparent)]
    Walk(#[from] WalkError),
}

/// What changed, from git's objects and the host's reading of the work tree.
pub struct GitChanges {
    /// Tracked and untracked (not ignored) paths, sorted.
    pub files: Vec<FileChange>,
    /// Ignored files, sorted.
    pub ignored: Vec<FileChange>,
    /// The change set as a patch `git apply` takes (binary files included, secrets
    /// masked); ignored files are not in it.
    pub patch: Vec<u8>,
    /// Files of `files` the patch leaves out, sorted.
    pub omitted: Vec<OmittedFile>,
}

/// One entry of the work tree as the walk found it (directories are not kept).
#[derive(Debug, Clone)]
struct Seen {
    kind: EntryKind,
    /// `None` when the entry could not be read; `error` says why.
    stat: Option<Stamp>,
    /// A symlink's target.
    target: Vec<u8>,
    /// A file's blob id, when known: git's index vouched for it or it was hashed.
    oid: Option<Oid>,
    binary: Option<bool>,
    error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    key: StatKey,
    /// Type and permission bits.
    mode: u32,
    rdev: u64,
}

impl Stamp {
    fn size(&self) -> u64 {
        self.key.size().max(0) as u64
    }

    /// The mode git records: link, executable or plain file.
    fn git_mode(&self, kind: EntryKind) -> i32 {
        match kind {
            EntryKind::Symlink => MODE_LINK,
            _ if self.mode & 0o111 != 0 => MODE_EXEC,
            _ => MODE_FILE,
        }
    }
}

/// A walk of the work tree: its entries, `.gitignore` files and unlistable folders.
#[derive(Default)]
struct WorkTree {
    entries: BTreeMap<Vec<u8>, Seen>,
    /// `.gitignore` content by the folder it is in.
    ignore_files: BTreeMap<Vec<u8>, Vec<u8>>,
    ignore_bytes: u64,
    /// Folders that could not be listed, with why.
    blind: BTreeMap<Vec<u8>, String>,
}

impl Visitor for WorkTree {
    fn skip(&self, _parent: &[u8], name: &[u8]) -> bool {
        // The repository's own state, and nested repositories' (git never tracks a
        // path through `.git`).
        name == b".git"
    }

    // The widths of the stat fields differ between targets.
    #[allow(clippy::unnecessary_cast)]
    fn visit(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        listed: FileType,
    ) -> Option<Identity> {
        let stat = match tree_walk::stat_entry(dir, name) {
            Ok(stat) => stat,
            Err(error) => {
                let kind = kind_of(listed);
                self.entries
                    .insert(path.to_vec(), Seen::unreadable(kind, error.to_string()));
                return None;
            }
        };
        let kind = kind_of(FileType::from_raw_mode(stat.st_mode as _));
        if kind == EntryKind::Dir {
            return Some(tree_walk::identity(&stat));
        }
        let mut seen = Seen {
            kind,
            stat: Some(Stamp {
                key: StatKey::of(&stat),
                mode: stat.st_mode as u32,
                rdev: stat.st_rdev as u64,
            }),
            target: Vec::new(),
            oid: None,
            binary: None,
            error: None,
        };
        match kind {
            EntryKind::Symlink => match tree_walk::read_link(dir, name) {
                Ok(target) => {
                    seen.oid = Some(blob_id(&target));
                    seen.target = target;
                }
                Err(error) => seen = Seen::unreadable(kind, error.to_string()),
            },
            EntryKind::File if name == b".gitignore" => {
                self.read_ignore_file(dir, name, path, &stat)
            }
            _ => {}
        }
        self.entries.insert(path.to_vec(), seen);
        None
    }

    fn unreadable(&mut self, path: &[u8], error: OpenError) {
        self.blind.insert(path.to_vec(), error.to_string());
    }
}

impl WorkTree {
    fn walk(root: &Dir, deadline: Option<(Instant, u64)>) -> Result<WorkTree, WalkError> {
        let mut tree = WorkTree::default();
        let bounds = WalkBounds {
            path_bytes: MAX_PATH_BYTES,
            deadline,
        };
        tree_walk::walk(root, bounds, &mut tree)?;
        Ok(tree)
    }

    fn read_ignore_file(&mut self, dir: &OwnedFd, name: &[u8], path: &[u8], stat: &Stat) {
        let size = stat.st_size.max(0) as u64;
        if size > MAX_IGNORE_FILE_BYTES || self.ignore_bytes + size > MAX_IGNORE_BYTES {
            return;
        }
        let mut budget = Budget {
            bytes: size,
            deadline: None,
        };
        let mut content = Vec::new();
        let read = tree_walk::open_file(dir, name, stat)
            .and_then(|mut file| budget.read(&mut file, size, |c| content.extend_from_slice(c)));
        if read.is_ok() {
            self.ignore_bytes += content.len() as u64;
            let folder = &path[..path.len() - name.len()];
            let folder = folder.strip_suffix(b"/").unwrap_or(folder);
            self.ignore_files.insert(folder.to_vec(), content);
        }
    }

    /// The folder that could not be listed above `path`, if any.
    fn blind_above(&self, path: &[u8]) -> Option<&[u8]> {
        self.blind
            .keys()
            .map(Vec::as_slice)
            .find(|dir| path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/')
    }
}

impl Seen {
    fn unreadable(kind: EntryKind, error: String) -> Seen {
        Seen {
            kind,
            stat: None,
            target: Vec::new(),
            oid: None,
            binary: None,
            error: Some(error),
        }
    }

    fn git_mode(&self) -> Option<i32> {
        self.stat.map(|s| s.git_mode(self.kind))
    }
}

/// Ignore rules: each `.gitignore` by the folder it is in, and `.git/info/exclude`.
struct IgnoreRules {
    by_folder: BTreeMap<Vec<u8>, Gitignore>,
    exclude: Option<Gitignore>,
}

impl IgnoreRules {
    fn new(files: &BTreeMap<Vec<u8>, Vec<u8>>, exclude: &[u8]) -> IgnoreRules {
        let build = |folder: &[u8], content: &[u8]| {
            let mut builder = GitignoreBuilder::new(Path::new(OsStr::from_bytes(folder)));
            for line in content.split(|&b| b == b'\n') {
                if let Ok(line) = std::str::from_utf8(line) {
                    // A bad pattern is skipped, as git skips it.
                    let _ = builder.add_line(None, line);
                }
            }
            builder.build().ok()
        };
        IgnoreRules {
            by_folder: files
                .iter()
                .filter_map(|(folder, content)| Some((folder.clone(), build(folder, content)?)))
                .collect(),
            exclude: build(b"", exclude),
        }
    }

    /// Whether git would ignore the untracked file `path`: it, or a folder above it,
    /// matches a rule.
    fn ignores(&self, path: &[u8]) -> bool {
        let folders = path
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'/')
            .map(|(i, _)| (&path[..i], true));
        folders
            .chain([(path, false)])
            .any(|(prefix, is_dir)| self.decides_ignored(prefix, is_dir))
    }

    /// The deepest `.gitignore` that has a say decides; `info/exclude` comes last.
    fn decides_ignored(&self, path: &[u8], is_dir: bool) -> bool {
        let as_path = Path::new(OsStr::from_bytes(path));
        let folders = path
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, &b)| b == b'/')
            .map(|(i, _)| &path[..i])
            .chain([&b""[..]]);
        let rules = folders
            .filter_map(|folder| self.by_folder.get(folder))
            .chain(self.exclude.as_ref());
        for rules in rules {
            let matched = rules.matched(as_path, is_dir);
            if matched.is_ignore() {
                return true;
            }
            if matched.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// The state of the repository before the agent ran.
pub struct GitBaseline {
    /// Opened without a work tree: its objects only.
    repo: Repository,
    /// Paths in `HEAD`'s tree or the index: never ignored.
    tracked: BTreeSet<Vec<u8>>,
    before: WorkTree,
    exclude: Vec<u8>,
}

impl GitBaseline {
    /// The baseline of the workspace open at `root`, or `None` when its root is not
    /// the top of a git repository with its `.git` folder in place (a `.git` file, as
    /// a linked work tree has, is compared by snapshot).
    pub fn take(root: &Dir) -> Result<Option<GitBaseline>, GitChangesError> {
        let Ok(git_dir) = tree_walk::open_beneath(root, b".git", OFlags::DIRECTORY) else {
            return Ok(None);
        };
        // libgit2 resolves the descriptor's path once; objects read through it after
        // the run are checked against their ids.
        git2::opts::strict_hash_verification(true);
        let git_path = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&git_dir)
        ))
        .map_err(|e| git2::Error::from_str(&format!("locating .git: {e}")))?;
        let repo = match Repository::open_ext(
            &git_path,
            git2::RepositoryOpenFlags::NO_SEARCH | git2::RepositoryOpenFlags::BARE,
            std::iter::empty::<&OsStr>(),
        ) {
            Ok(repo) => repo,
            Err(_) => return Ok(None),
        };
        // Blobs written from here on (kept content, masked content) stay in memory.
        repo.odb()?.add_new_mempack_backend(1000)?;

        let mut tracked = BTreeSet::new();
        if let Some(tree) = head_tree(&repo)? {
            tree.walk(git2::TreeWalkMode::PreOrder, |folder, entry| {
                if entry.kind() != Some(git2::ObjectType::Tree) {
                    let mut path = folder.as_bytes().to_vec();
                    path.extend_from_slice(entry.name_bytes());
                    tracked.insert(path);
                }
                git2::TreeWalkResult::Ok
            })?;
        }
        let index = read_index(&git_path);
        if let Some((index, _)) = &index {
            tracked.extend(index.iter().map(|e| e.path));
        }
        let exclude = read_small(root, b".git/info/exclude");
        let mut before = WorkTree::walk(root, None)?;
        let rules = IgnoreRules::new(&before.ignore_files, &exclude);

        let mut budget = Budget {
            bytes: MAX_HASHED_BYTES,
            deadline: None,
        };
        let mut kept = 0u64;
        let paths: Vec<Vec<u8>> = before.entries.keys().cloned().collect();
        for path in paths {
            let seen = &before.entries[&path];
            let (EntryKind::File, Some(stamp)) = (seen.kind, seen.stat) else {
                continue;
            };
            let is_tracked = tracked.contains(&path);
            if let Some(oid) = index
                .as_ref()
                .and_then(|(index, written)| clean_in_index(index, *written, &path, &stamp))
            {
                before.entries.get_mut(&path).expect("listed").oid = Some(oid);
                continue;
            }
            if !is_tracked && rules.ignores(&path) {
                // Ignored files are compared by stat only: `node_modules/` is not
                // read whole before every run.
                continue;
            }
            let keep = stamp.size() <= PATCH_FILE_BYTES && kept + stamp.size() <= MAX_KEPT_BYTES;
            let read = read_file(root, &path, &stamp, &mut budget, keep);
            let seen = before.entries.get_mut(&path).expect("listed");
            match read {
                Ok(file) => {
                    seen.oid = Some(file.oid);
                    seen.binary = Some(file.binary);
                    if let Some(content) = file.content {
                        kept += content.len() as u64;
                        repo.blob(&content)?;
                    }
                }
                Err(error) => seen.error = Some(error.to_string()),
            }
        }
        Ok(Some(GitBaseline {
            repo,
            tracked,
            before,
            exclude,
        }))
    }

    /// What changed since [`GitBaseline::take`], reading the workspace through `root`
    /// (the handle opened before the agent ran) within [`COLLECT_SECS`]; secrets
    /// `redactor` knows are masked in the patch's content.
    pub fn changes(&self, root: &Dir, redactor: &Redactor) -> Result<GitChanges, GitChangesError> {
        let deadline = (
            Instant::now() + Duration::from_secs(COLLECT_SECS),
            COLLECT_SECS,
        );
        let now = WorkTree::walk(root, Some(deadline))?;
        let rules = IgnoreRules::new(&now.ignore_files, &self.exclude);
        let mut budget = Budget {
            bytes: MAX_HASHED_BYTES,
            deadline: Some(deadline),
        };
        let paths: BTreeSet<&Vec<u8>> = self
            .before
            .entries
            .keys()
            .chain(now.entries.keys())
            .collect();
        let mut found = Vec::new();
        for path in paths {
            let was = self.before.entries.get(path);
            let is = now.entries.get(path);
            // Unknown on one side: the folder's own entry stands for it.
            if (was.is_none() && self.before.blind_above(path).is_some())
                || (is.is_none() && now.blind_above(path).is_some())
            {
                continue;
            }
            let Some(mut change) = compare(root, path, was, is, &mut budget) else {
                continue;
            };
            change.ignored = !self.tracked.contains(path) && rules.ignores(path);
            found.push(change);
        }
        for (folder, error) in self.before.blind.iter().chain(&now.blind) {
            found.push(Found {
                path: folder.clone(),
                change: ChangeKind::Unreadable,
                kind: EntryKind::Dir,
                error: Some(error.clone()),
                binary: None,
                ignored: false,
                was: None,
                is: None,
            });
        }
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found.dedup_by(|a, b| a.path == b.path);

        let (patch, renames, omitted) = self.patch(root, &found, redactor)?;
        let (mut files, mut ignored) = (Vec::new(), Vec::new());
        let renamed_from: BTreeSet<&Vec<u8>> = renames.values().collect();
        for change in &found {
            if renamed_from.contains(&change.path) {
                continue;
            }
            let from = renames.get(&change.path);
            let entry = FileChange {
                path: crate::escape::name(&change.path),
                change: if from.is_some() {
                    ChangeKind::Renamed
                } else {
                    change.change
                },
                kind: change.kind,
                error: change.error.clone(),
                from: from.map(|from| crate::escape::name(from)),
                binary: change.binary,
            };
            if change.ignored {
                ignored.push(entry);
            } else {
                files.push(entry);
            }
        }
        Ok(GitChanges {
            files,
            ignored,
            patch,
            omitted,
        })
    }

    /// The patch of the changed files that are not ignored, the renames it found (new
    /// path to old) and the files it leaves out.
    #[allow(clippy::type_complexity)]
    fn patch(
        &self,
        root: &Dir,
        found: &[Found],
        redactor: &Redactor,
    ) -> Result<(Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>, Vec<OmittedFile>), GitChangesError> {
        let odb = self.repo.odb()?;
        let mut before_index = Index::new()?;
        let mut after_index = Index::new()?;
        let mut total = 0u64;
        let mut omitted = Vec::new();
        for change in found.iter().filter(|c| !c.ignored) {
            let mut sides = Vec::new();
            let result = (|| {
                for (seen, after) in [(&change.was, false), (&change.is, true)] {
                    let Some(seen) = seen else { continue };
                    if !matches!(seen.kind, EntryKind::File | EntryKind::Symlink) {
                        return Err(LeftOut::NotFileOrSymlink);
                    }
                    let mode = seen.git_mode().ok_or(LeftOut::Unreadable)?;
                    let content = if seen.kind == EntryKind::Symlink {
                        seen.target.clone()
                    } else if after {
                        read_content(root, &change.path, seen, &mut total)?
                    } else {
                        self.stored_content(&odb, seen, &mut total)?
                    };
                    // Masked before it is stored: a binary patch of it cannot carry
                    // a secret that the text masking of `changes.patch` would miss.
                    let masked = redactor.apply_bytes(&content);
                    let oid = self.repo.blob(&masked)?;
                    sides.push((after, oid, mode));
                }
                Ok::<_, LeftOut>(())
            })();
            match result {
                Ok(()) => {
                    for (after, oid, mode) in sides {
                        let index = if after {
                            &mut after_index
                        } else {
                            &mut before_index
                        };
                        index.add(&index_entry(&change.path, oid, mode))?;
                    }
                }
                Err(reason) => omitted.push(OmittedFile {
                    path: crate::escape::name(&change.path),
                    reason: reason.to_string(),
                }),
            }
        }
        // A repository around the object database alone: no config, attributes or
        // work tree the agent could have written is consulted.
        let objects = Repository::from_odb(odb)?;
        let before_tree = objects.find_tree(before_index.write_tree_to(&objects)?)?;
        let after_tree = objects.find_tree(after_index.write_tree_to(&objects)?)?;
        let mut options = DiffOptions::new();
        options.show_binary(true).include_typechange(true);
        let mut diff =
            objects.diff_tree_to_tree(Some(&before_tree), Some(&after_tree), Some(&mut options))?;
        diff.find_similar(Some(DiffFindOptions::new().renames(true)))?;
        let patch = patch_bytes(&diff)?;
        let mut renames = BTreeMap::new();
        for delta in diff.deltas() {
            if delta.status() == git2::Delta::Renamed {
                if let (Some(old), Some(new)) =
                    (delta.old_file().path_bytes(), delta.new_file().path_bytes())
                {
                    renames.insert(new.to_vec(), old.to_vec());
                }
            }
        }
        Ok((patch, renames, omitted))
    }

    /// A file's content before the run, from the object database (committed, or kept
    /// in memory when the baseline was taken).
    fn stored_content(
        &self,
        odb: &git2::Odb<'_>,
        seen: &Seen,
        total: &mut u64,
    ) -> Result<Vec<u8>, LeftOut> {
        let oid = seen.oid.ok_or(LeftOut::NotRead)?;
        let (size, _) = odb.read_header(oid).map_err(|_| LeftOut::NotKept)?;
        take_share(size as u64, total)?;
        let object = odb.read(oid)?;
        Ok(object.data().to_vec())
    }
}

/// Why a file's content was not read, or is left out of `changes.patch`: kept as the
/// file's reason in the change set (text, in `result.json`).
#[derive(Debug, thiserror::Error)]
enum LeftOut {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Git(#[from] git2::Error),
    /// What the tree walk's reading said.
    #[error(transparent)]
    Walk(#[from] tree_walk::Unread),
    #[error(transparent)]
    Open(#[from] crate::beneath::OpenError),
    #[error("it was replaced while the workspace was being read")]
    Replaced,
    #[error("it changed while it was being read")]
    ChangedWhileRead,
    #[error("it could not be read")]
    Unreadable,
    #[error("it is not a file or a symlink")]
    NotFileOrSymlink,
    #[error("its content before the run was not read (an ignored or too large file)")]
    NotRead,
    #[error("its content before the run was not kept")]
    NotKept,
    #[error(
        "it holds {0} bytes, more than the {PATCH_FILE_BYTES} a file may put in changes.patch"
    )]
    FileTooLarge(u64),
    #[error("changes.patch reached its cap of {PATCH_TOTAL_BYTES} bytes of content")]
    PatchFull,
}

/// One changed entry, before it is sorted into the lists.
struct Found {
    path: Vec<u8>,
    change: ChangeKind,
    kind: EntryKind,
    error: Option<String>,
    binary: Option<bool>,
    ignored: bool,
    was: Option<Seen>,
    is: Option<Seen>,
}

/// How `path` changed from `was` to `is`; `None` when it did not.
fn compare(
    root: &Dir,
    path: &[u8],
    was: Option<&Seen>,
    is: Option<&Seen>,
    budget: &mut Budget,
) -> Option<Found> {
    let found = |change, seen: &Seen, error: Option<String>| Found {
        path: path.to_vec(),
        change,
        kind: seen.kind,
        error,
        binary: seen.binary,
        ignored: false,
        was: was.cloned(),
        is: is.cloned(),
    };
    let (was, is) = match (was, is) {
        (None, None) => return None,
        (None, Some(is)) => {
            let mut is = is.clone();
            probe(root, path, &mut is, budget);
            let error = is.error.clone();
            let mut added = found(ChangeKind::Added, &is, error);
            added.binary = is.binary;
            added.is = Some(is);
            return Some(added);
        }
        (Some(was), None) => return Some(found(ChangeKind::Deleted, was, None)),
        (Some(was), Some(is)) => (was, is),
    };
    let (Some(before), Some(now)) = (was.stat, is.stat) else {
        let error = is.error.clone().or_else(|| was.error.clone());
        return Some(found(ChangeKind::Unreadable, is, error));
    };
    if was.kind != is.kind {
        let mut is = is.clone();
        probe(root, path, &mut is, budget);
        let mut modified = found(ChangeKind::Modified, &is, None);
        modified.is = Some(is);
        return Some(modified);
    }
    match is.kind {
        EntryKind::Symlink => {
            (was.target != is.target).then(|| found(ChangeKind::Modified, is, None))
        }
        EntryKind::File => {
            if before == now {
                return None;
            }
            let mut is = is.clone();
            if before.git_mode(EntryKind::File) != now.git_mode(EntryKind::File)
                || before.size() != now.size()
                || was.oid.is_none()
            {
                // Changed for sure, or its content before was not read: the change
                // of its stat is reported.
                probe(root, path, &mut is, budget);
            } else {
                match read_file(root, path, &now, budget, false) {
                    Ok(file) if Some(file.oid) == was.oid => return None,
                    Ok(file) => {
                        is.oid = Some(file.oid);
                        is.binary = Some(file.binary);
                    }
                    Err(error) => {
                        let mut unreadable =
                            found(ChangeKind::Unreadable, &is, Some(error.to_string()));
                        unreadable.is = Some(is);
                        return Some(unreadable);
                    }
                }
            }
            let mut modified = found(ChangeKind::Modified, &is, None);
            modified.is = Some(is);
            Some(modified)
        }
        // A FIFO, socket or device: its kind, mode and number.
        _ => (before.mode != now.mode || before.rdev != now.rdev)
            .then(|| found(ChangeKind::Modified, is, None)),
    }
}

/// A file read whole or hashed streaming.
struct ReadFile {
    oid: Oid,
    binary: bool,
    /// The content, when asked to keep it.
    content: Option<Vec<u8>>,
}

/// Reads the file at `path` that the walk found with `stamp`, through `root`: its blob
/// id and binary flag, and its content when `keep` (the caller checked the size).
fn read_file(
    root: &Dir,
    path: &[u8],
    stamp: &Stamp,
    budget: &mut Budget,
    keep: bool,
) -> Result<ReadFile, LeftOut> {
    let mut file = open_listed(root, path, stamp)?;
    let size = stamp.size();
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {size}\0").as_bytes());
    let mut content = keep.then(|| Vec::with_capacity(size as usize));
    let mut probe = Vec::new();
    let mut read = 0u64;
    budget.read(&mut file, size, |chunk| {
        hasher.update(chunk);
        read += chunk.len() as u64;
        if probe.len() < BINARY_PROBE {
            let take = (BINARY_PROBE - probe.len()).min(chunk.len());
            probe.extend_from_slice(&chunk[..take]);
        }
        if let Some(content) = content.as_mut() {
            content.extend_from_slice(chunk);
        }
    })?;
    if read != size {
        return Err(LeftOut::ChangedWhileRead);
    }
    let oid = Oid::from_bytes(&hasher.finalize())?;
    Ok(ReadFile {
        oid,
        binary: probe.contains(&0),
        content,
    })
}

/// The content of a file after the run, for the patch.
fn read_content(root: &Dir, path: &[u8], seen: &Seen, total: &mut u64) -> Result<Vec<u8>, LeftOut> {
    let stamp = seen.stat.ok_or(LeftOut::Unreadable)?;
    take_share(stamp.size(), total)?;
    let mut budget = Budget {
        bytes: stamp.size(),
        deadline: None,
    };
    let file = read_file(root, path, &stamp, &mut budget, true)?;
    Ok(file.content.expect("asked to keep it"))
}

/// Counts `size` bytes against the patch's caps, or says which cap leaves it out.
fn take_share(size: u64, total: &mut u64) -> Result<(), LeftOut> {
    if size > PATCH_FILE_BYTES {
        return Err(LeftOut::FileTooLarge(size));
    }
    if *total + size > PATCH_TOTAL_BYTES {
        return Err(LeftOut::PatchFull);
    }
    *total += size;
    Ok(())
}

/// Sets the binary flag of an added or changed file from its first bytes, unless the
/// collection's time is up.
fn probe(root: &Dir, path: &[u8], seen: &mut Seen, budget: &Budget) {
    if budget.out_of_time() {
        return;
    }
    let (EntryKind::File, Some(stamp), None) = (seen.kind, seen.stat, seen.binary) else {
        return;
    };
    let mut first = Vec::with_capacity(BINARY_PROBE);
    let read = open_listed(root, path, &stamp).and_then(|file| {
        file.take(BINARY_PROBE as u64)
            .read_to_end(&mut first)
            .map_err(LeftOut::from)
    });
    if read.is_ok() {
        seen.binary = Some(first.contains(&0));
    }
}

/// Opens the file at `path` if it is still the one the walk found.
fn open_listed(root: &Dir, path: &[u8], stamp: &Stamp) -> Result<std::fs::File, LeftOut> {
    let fd = tree_walk::open_beneath(root, path, OFlags::empty())?;
    let opened = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    if tree_walk::identity(&opened) != stamp.key.id() {
        return Err(LeftOut::Replaced);
    }
    Ok(std::fs::File::from(fd))
}

/// A small file of the workspace (`.git/info/exclude`), read through `root`; empty
/// when absent or larger than a `.gitignore` may be.
fn read_small(root: &Dir, path: &[u8]) -> Vec<u8> {
    let mut content = Vec::new();
    if let Ok(fd) = tree_walk::open_beneath(root, path, OFlags::empty()) {
        let _ = std::fs::File::from(fd)
            .take(MAX_IGNORE_FILE_BYTES)
            .read_to_end(&mut content);
    }
    content
}

fn head_tree(repo: &Repository) -> Result<Option<git2::Tree<'_>>, git2::Error> {
    match repo.head() {
        Ok(head) => Ok(Some(head.peel_to_tree()?)),
        Err(e)
            if matches!(
                e.code(),
                git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The index and when it was written, read before the run; `None` without one.
fn read_index(git_path: &Path) -> Option<(Index, (i64, i64))> {
    let path = git_path.join("index");
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    use std::os::unix::fs::MetadataExt;
    let written = (meta.mtime(), meta.mtime_nsec());
    Some((Index::open(&path).ok()?, written))
}

/// The blob id the index holds for `path`, if its stat cache says the file has not
/// changed since (git's own test, racy entries excluded).
fn clean_in_index(index: &Index, written: (i64, i64), path: &[u8], stamp: &Stamp) -> Option<Oid> {
    let entry = index.get_path(Path::new(OsStr::from_bytes(path)), 0)?;
    let (size, (mtime_s, mtime_ns), (ctime_s, ctime_ns)) =
        (stamp.key.size(), stamp.key.mtime(), stamp.key.ctime());
    let same = entry.mode as i32 == stamp.git_mode(EntryKind::File)
        && entry.file_size == size as u32
        && entry.ino == stamp.key.id().1 as u32
        && (
            entry.mtime.seconds() as i64,
            entry.mtime.nanoseconds() as i64,
        ) == (mtime_s, mtime_ns)
        && (
            entry.ctime.seconds() as i64,
            entry.ctime.nanoseconds() as i64,
        ) == (ctime_s, ctime_ns);
    // An entry written in the same instant as its file may hide a later edit.
    let racy = (mtime_s, mtime_ns) >= written;
    (same && !racy).then_some(entry.id)
}

/// git's blob id of `content`.
fn blob_id(content: &[u8]) -> Oid {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", content.len()).as_bytes());
    hasher.update(content);
    Oid::from_bytes(&hasher.finalize()).expect("a SHA-1 is 20 bytes")
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

/// `diff` as a unified patch: libgit2 hands out a content line's origin (`+`, `-`, ` `)
/// apart from its text, and `git apply` needs them joined.
pub(crate) fn patch_bytes(diff: &git2::Diff<'_>) -> Result<Vec<u8>, git2::Error> {
    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use cap_std::ambient_authority;

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

    fn open(root: &Path) -> Dir {
        Dir::open_ambient_dir(root, ambient_authority()).unwrap()
    }

    fn baseline(dir: &Dir) -> GitBaseline {
        GitBaseline::take(dir).unwrap().expect("a repository")
    }

    fn changes(baseline: &GitBaseline, dir: &Dir) -> GitChanges {
        baseline.changes(dir, &Redactor::default()).unwrap()
    }

    fn changed(changes: &GitChanges) -> Vec<(String, ChangeKind, EntryKind)> {
        changes
            .files
            .iter()
            .map(|c| (c.path.clone(), c.change, c.kind))
            .collect()
    }

    fn file(path: &str, change: ChangeKind) -> (String, ChangeKind, EntryKind) {
        (path.to_string(), change, EntryKind::File)
    }

    #[test]
    fn edits_to_already_dirty_files_are_seen_and_what_was_dirty_before_is_not_reported() {
        let dir = repo();
        let root = dir.path();
        // Dirty before the agent: an edit and an untracked file.
        std::fs::write(root.join("a.txt"), "user edit\n").unwrap();
        std::fs::write(root.join("untracked.txt"), "mine\n").unwrap();
        let handle = open(root);
        let baseline = baseline(&handle);
        assert!(changed(&changes(&baseline, &handle)).is_empty());
        // The agent edits the dirty file again and leaves the untracked one.
        std::fs::write(root.join("a.txt"), "agent edit\n").unwrap();
        let found = changes(&baseline, &handle);
        assert_eq!(changed(&found), [file("a.txt", ChangeKind::Modified)]);
        // The patch goes from the user's edit to the agent's.
        let patch = String::from_utf8(found.patch).unwrap();
        assert!(patch.contains("-user edit\n+agent edit\n"), "{patch}");
        // Putting the file back as it was is no change.
        std::fs::write(root.join("a.txt"), "user edit\n").unwrap();
        assert!(changed(&changes(&baseline, &handle)).is_empty());
    }

    #[test]
    fn an_agent_that_commits_its_work_does_not_hide_it() {
        let dir = repo();
        let root = dir.path();
        let handle = open(root);
        let baseline = baseline(&handle);
        std::fs::write(root.join("b.txt"), "committed\n").unwrap();
        git(root, &["commit", "-q", "-am", "agent"]);
        assert_eq!(
            changed(&changes(&baseline, &handle)),
            [file("b.txt", ChangeKind::Modified)]
        );
    }

    #[test]
    fn renames_added_deleted_and_ignored_files_are_told_apart() {
        let dir = repo();
        let root = dir.path();
        std::fs::write(root.join(".gitignore"), "out/\n*.log\n").unwrap();
        std::fs::write(root.join("long.txt"), "line\n".repeat(50)).unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "more"]);
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::write(root.join("out/kept"), "x").unwrap();
        let handle = open(root);
        let baseline = baseline(&handle);
        std::fs::rename(root.join("long.txt"), root.join("moved.txt")).unwrap();
        std::fs::remove_file(root.join("a.txt")).unwrap();
        std::fs::write(root.join("new.txt"), "new\n").unwrap();
        std::fs::write(root.join("out/kept"), "y").unwrap();
        std::fs::write(root.join("run.log"), "log").unwrap();
        let found = changes(&baseline, &handle);
        assert_eq!(
            changed(&found),
            [
                file("a.txt", ChangeKind::Deleted),
                file("moved.txt", ChangeKind::Renamed),
                file("new.txt", ChangeKind::Added),
            ]
        );
        assert_eq!(found.files[1].from.as_deref(), Some("long.txt"));
        let ignored: Vec<_> = found
            .ignored
            .iter()
            .map(|c| (c.path.as_str(), c.change))
            .collect();
        assert_eq!(
            ignored,
            [
                ("out/kept", ChangeKind::Modified),
                ("run.log", ChangeKind::Added)
            ]
        );
        let patch = String::from_utf8(found.patch).unwrap();
        assert!(patch.contains("rename from long.txt"), "{patch}");
        assert!(!patch.contains("run.log"), "{patch}");
    }

    #[test]
    fn a_tracked_folder_swapped_for_a_symlink_is_reported_not_followed() {
        let dir = repo();
        let root = dir.path();
        std::fs::create_dir(root.join("x")).unwrap();
        std::fs::write(root.join("x/tracked"), "t\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "x"]);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("tracked"), "HOST-SECRET-CONTENT\n").unwrap();
        let handle = open(root);
        let baseline = baseline(&handle);
        std::fs::remove_dir_all(root.join("x")).unwrap();
        symlink(outside.path(), root.join("x")).unwrap();
        symlink("/proc/self", root.join("p")).unwrap();
        std::fs::write(root.join(".gitignore"), "x\np\n").unwrap();
        let found = changes(&baseline, &handle);
        let patch = String::from_utf8_lossy(&found.patch).into_owned();
        assert!(!patch.contains("HOST-SECRET-CONTENT"), "{patch}");
        assert!(!patch.contains("PATH="), "{patch}");
        let all: Vec<_> = found
            .files
            .iter()
            .chain(&found.ignored)
            .map(|c| (c.path.as_str(), c.change, c.kind))
            .collect();
        assert!(
            all.contains(&("x", ChangeKind::Added, EntryKind::Symlink)),
            "{all:?}"
        );
        assert!(
            all.contains(&("p", ChangeKind::Added, EntryKind::Symlink)),
            "{all:?}"
        );
        assert!(
            all.contains(&("x/tracked", ChangeKind::Deleted, EntryKind::File)),
            "{all:?}"
        );
    }

    #[test]
    fn a_secret_in_a_binary_file_goes_into_the_patch_masked() {
        let dir = repo();
        let root = dir.path();
        let handle = open(root);
        let baseline = baseline(&handle);
        let secret = "sk-binary-secret-0123456789";
        let mut content = b"\x00\x01binary".to_vec();
        content.extend_from_slice(secret.as_bytes());
        content.extend_from_slice(&[0xff; 64]);
        std::fs::write(root.join("blob.bin"), &content).unwrap();
        let found = baseline
            .changes(&handle, &Redactor::new([secret.to_string()]))
            .unwrap();
        assert_eq!(found.files[0].binary, Some(true));
        let patch = String::from_utf8(found.patch).unwrap();
        assert!(patch.contains("GIT binary patch"), "{patch}");
        // The binary hunk holds the masked content, whose id is in the index line.
        let masked = Redactor::new([secret.to_string()])
            .apply_bytes(&content)
            .into_owned();
        assert_ne!(masked, content);
        assert!(
            patch.contains(&blob_id(&masked).to_string()[..7]),
            "{patch}"
        );
        assert!(
            !patch.contains(&blob_id(&content).to_string()[..7]),
            "{patch}"
        );
    }

    #[test]
    fn large_files_are_left_out_of_the_patch_and_listed() {
        let dir = repo();
        let root = dir.path();
        let handle = open(root);
        let baseline = baseline(&handle);
        std::fs::File::create(root.join("sparse.bin"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        std::fs::write(root.join("small.txt"), "s\n").unwrap();
        let found = changes(&baseline, &handle);
        assert_eq!(
            changed(&found),
            [
                file("small.txt", ChangeKind::Added),
                file("sparse.bin", ChangeKind::Added),
            ]
        );
        assert_eq!(found.omitted.len(), 1);
        assert_eq!(found.omitted[0].path, "sparse.bin");
        assert!(
            found.omitted[0].reason.contains("more than"),
            "{:?}",
            found.omitted
        );
        let patch = String::from_utf8(found.patch).unwrap();
        assert!(
            patch.contains("+s\n") && !patch.contains("sparse.bin"),
            "{patch}"
        );
    }

    #[test]
    fn a_fifo_in_place_of_a_file_is_reported_without_blocking() {
        let dir = repo();
        let root = dir.path();
        let handle = open(root);
        let baseline = baseline(&handle);
        std::fs::remove_file(root.join("a.txt")).unwrap();
        let path = std::ffi::CString::new(root.join("a.txt").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
        let found = changes(&baseline, &handle);
        assert_eq!(
            changed(&found),
            [("a.txt".to_string(), ChangeKind::Modified, EntryKind::Other)]
        );
        assert_eq!(found.omitted[0].path, "a.txt");
    }

    #[test]
    fn what_the_agent_writes_into_the_repository_is_not_honoured() {
        let dir = repo();
        let root = dir.path();
        let handle = open(root);
        let baseline = baseline(&handle);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("b.txt"), "HOST CONTENT\n").unwrap();
        std::fs::write(outside.path().join("excludes"), "*.txt\n").unwrap();
        // A work tree elsewhere, host excludes, no symlinks, a forged index, and
        // attributes that would turn the edit into a binary blob.
        std::fs::write(
            root.join(".git/config"),
            format!(
                "[core]\n\tworktree = {}\n\texcludesFile = {}\n\tsymlinks = false\n",
                outside.path().display(),
                outside.path().join("excludes").display()
            ),
        )
        .unwrap();
        std::fs::write(root.join(".git/index"), "DIRC forged").unwrap();
        std::fs::write(root.join(".gitattributes"), "* binary\n").unwrap();
        std::fs::write(root.join(".git/info/attributes"), "* binary\n").unwrap();
        std::fs::write(root.join("b.txt"), "agent\n").unwrap();
        let found = changes(&baseline, &handle);
        assert_eq!(
            changed(&found),
            [
                file(".gitattributes", ChangeKind::Added),
                file("b.txt", ChangeKind::Modified),
            ]
        );
        let patch = String::from_utf8(found.patch).unwrap();
        assert!(patch.contains("-b\n+agent\n"), "{patch}");
        assert!(!patch.contains("HOST"), "{patch}");
    }

    #[test]
    fn a_folder_that_is_not_a_repository_root_has_no_git_baseline() {
        let dir = repo();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(GitBaseline::take(&open(&dir.path().join("sub")))
            .unwrap()
            .is_none());
        let plain = tempfile::tempdir().unwrap();
        assert!(GitBaseline::take(&open(plain.path())).unwrap().is_none());
        // Nor one whose `.git` is a symlink.
        let linked = tempfile::tempdir().unwrap();
        symlink(dir.path().join(".git"), linked.path().join(".git")).unwrap();
        assert!(GitBaseline::take(&open(linked.path())).unwrap().is_none());
    }
}
