//! Reading the workspace after an agent had it: through the handle opened on its root
//! before the agent ran, one component at a time, never through a symlink, never
//! blocking on a FIFO, within a budget of bytes and time.
//!
//! Both ways of finding what an agent changed ([`super::Snapshot`] and
//! [`super::GitBaseline`]) read the workspace only through this module.
//! An agent can swap any folder for a symlink (`rm -rf src; ln -s /etc src`,
//! `ln -s /proc/self p`) or a file for a FIFO while the host reads; a read by path
//! (`root.join(path)`) would follow it, since `O_NOFOLLOW` covers only the last
//! component. Here:
//!
//! - [`walk`] lists the tree by directory handles: each directory is opened relative
//!   to its parent with `O_NOFOLLOW | O_DIRECTORY` and checked to be the one listed.
//!   It is iterative and holds a fixed number of descriptors at any depth: it climbs
//!   back up through `..` and checks that it lands on the directory it came from.
//! - [`open_beneath`] opens one path under the root with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: the kernel refuses any symlink on
//!   the way, parents included.
//! - [`open_file`] opens a listed file non-blocking and checks, on the opened
//!   descriptor, that it is the regular file that was listed.
//! - [`Budget`] reads a file chunk by chunk, so memory never grows with a file's size
//!   and a 1 TiB sparse file stops at the budget's bytes or deadline.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};

use crate::record::EntryKind;

/// How every directory of the walk is opened: to be listed, never through a symlink.
pub(super) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a file is opened to be read: a FIFO or device put in its place must not block
/// the open, and a terminal must not become ours.
const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// What one entry costs a walk's bound beyond its path: what a caller keeps for it.
const ENTRY_COST: u64 = 128;

/// Device and inode: which directory or file a descriptor is on.
pub(super) type Identity = (u64, u64);

/// Why a whole walk could not be done.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("reading the workspace root: {0}")]
    Root(std::io::Error),
    #[error("{path} was moved while the workspace was being read")]
    Moved { path: String },
    #[error("the workspace holds more entries than {limit} bytes of paths and records allow; it is not read further")]
    TooLarge { limit: u64 },
    #[error("the workspace was not read to the end within {secs} s")]
    OutOfTime { secs: u64 },
}

/// What a [`walk`] does with each entry.
pub(super) trait Visitor {
    /// Whether to leave out the entry `name` of the directory at `parent` (and, for a
    /// directory, all below it).
    fn skip(&self, parent: &[u8], name: &[u8]) -> bool;
    /// Records the entry `name` of the open directory `dir`, at `path`. Returns the
    /// identity of a directory the walk should enter.
    fn visit(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        listed: FileType,
    ) -> Option<Identity>;
    /// The directory at `path`, which `visit` asked to enter, could not be listed.
    fn unreadable(&mut self, path: &[u8], error: String);
}

/// The bounds of one walk.
#[derive(Debug, Clone, Copy)]
pub(super) struct WalkBounds {
    /// Bytes of paths, plus a fixed cost per entry, the walk may visit: what its
    /// caller keeps stays bounded however many entries the workspace holds.
    pub path_bytes: u64,
    /// When the walk gives up (after the agent ran; `None` before).
    pub deadline: Option<(Instant, u64)>,
}

/// Visits every entry under `root`, through that handle only.
pub(super) fn walk(
    root: &Dir,
    bounds: WalkBounds,
    visitor: &mut impl Visitor,
) -> Result<(), WalkError> {
    let mut left = bounds.path_bytes;
    // cap-std may hold the root as an `O_PATH` descriptor, which cannot be listed:
    // open the same directory again for reading.
    let open_root = || rustix::fs::openat(root, ".", DIR_FLAGS, Mode::empty());
    let mut current = open_root().map_err(|e| WalkError::Root(e.into()))?;
    let id = identity(&rustix::fs::fstat(&current).map_err(|e| WalkError::Root(e.into()))?);
    let subdirs = list(&current, &[], visitor, &mut left, bounds).map_err(|e| match e {
        Listing::Io(e) => WalkError::Root(e),
        Listing::Bound(e) => e,
    })?;
    let mut stack = vec![Frame {
        path: Vec::new(),
        id,
        subdirs,
    }];
    while let Some(top) = stack.last_mut() {
        if let Some((name, id)) = top.subdirs.pop() {
            let path = join(&top.path, &name);
            let entered = rustix::fs::openat(&current, name.as_slice(), DIR_FLAGS, Mode::empty())
                .map_err(describe)
                .and_then(|fd| {
                    let opened = identity(&rustix::fs::fstat(&fd).map_err(describe)?);
                    if opened != id {
                        return Err("it was replaced while the workspace was being read".into());
                    }
                    Ok(fd)
                });
            let fd = match entered {
                Ok(fd) => fd,
                Err(error) => {
                    visitor.unreadable(&path, error);
                    continue;
                }
            };
            match list(&fd, &path, visitor, &mut left, bounds) {
                Ok(subdirs) => {
                    stack.push(Frame { path, id, subdirs });
                    current = fd;
                }
                Err(Listing::Io(e)) => visitor.unreadable(&path, e.to_string()),
                Err(Listing::Bound(e)) => return Err(e),
            }
            continue;
        }
        let done = stack.pop().expect("the loop saw a frame");
        current = match stack.last() {
            None => break,
            Some(_) if stack.len() == 1 => open_root().map_err(|e| WalkError::Root(e.into()))?,
            Some(parent) => climb(&current, parent.id).ok_or_else(|| WalkError::Moved {
                path: crate::escape::name(&done.path),
            })?,
        };
    }
    Ok(())
}

/// A directory on the walk's path from the root, with the subdirectories of it that
/// are still to be walked.
struct Frame {
    path: Vec<u8>,
    id: Identity,
    subdirs: Vec<(Vec<u8>, Identity)>,
}

enum Listing {
    /// This directory could not be listed.
    Io(std::io::Error),
    /// The whole walk is over its bounds.
    Bound(WalkError),
}

/// Visits the entries of the directory open at `dir` (at `prefix`) and returns the
/// subdirectories to enter.
fn list(
    dir: &OwnedFd,
    prefix: &[u8],
    visitor: &mut impl Visitor,
    left: &mut u64,
    bounds: WalkBounds,
) -> Result<Vec<(Vec<u8>, Identity)>, Listing> {
    // Names first, so only one descriptor reads the listing and it is closed before
    // any file is opened.
    let mut names = Vec::new();
    let mut listing = rustix::fs::Dir::read_from(dir).map_err(|e| Listing::Io(e.into()))?;
    while let Some(entry) = listing.read() {
        let entry = entry.map_err(|e| Listing::Io(e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || visitor.skip(prefix, name) {
            continue;
        }
        let cost = (prefix.len() + name.len()) as u64 + ENTRY_COST;
        if cost > *left {
            return Err(Listing::Bound(WalkError::TooLarge {
                limit: bounds.path_bytes,
            }));
        }
        *left -= cost;
        names.push((name.to_vec(), entry.file_type()));
    }
    drop(listing);

    let mut subdirs = Vec::new();
    for (name, listed) in names {
        if let Some((deadline, secs)) = bounds.deadline {
            if Instant::now() > deadline {
                return Err(Listing::Bound(WalkError::OutOfTime { secs }));
            }
        }
        let path = join(prefix, &name);
        if let Some(id) = visitor.visit(dir, &name, &path, listed) {
            subdirs.push((name, id));
        }
    }
    Ok(subdirs)
}

/// The parent of `dir`, if it is still the directory `expected`.
fn climb(dir: &OwnedFd, expected: Identity) -> Option<OwnedFd> {
    let parent = rustix::fs::openat(dir, "..", DIR_FLAGS, Mode::empty()).ok()?;
    let id = identity(&rustix::fs::fstat(&parent).ok()?);
    (id == expected).then_some(parent)
}

/// The entry `name` of `dir`, not followed if it is a symlink.
pub(super) fn stat_entry(dir: &OwnedFd, name: &[u8]) -> Result<Stat, String> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(describe)
}

/// The target of the symlink `name` of `dir`.
pub(super) fn read_link(dir: &OwnedFd, name: &[u8]) -> Result<Vec<u8>, String> {
    rustix::fs::readlinkat(dir, name, Vec::new())
        .map(|target| target.into_bytes())
        .map_err(describe)
}

/// Opens the file `name` of `dir` for reading, if it is still the regular file
/// `listed` stats: a FIFO, socket, device or other file swapped in is refused on the
/// opened descriptor, and the open itself never blocks.
pub(super) fn open_file(
    dir: &OwnedFd,
    name: &[u8],
    listed: &Stat,
) -> Result<std::fs::File, String> {
    let file = rustix::fs::openat(dir, name, FILE_FLAGS, Mode::empty()).map_err(describe)?;
    check_regular(file, Some(identity(listed)))
}

/// Opens `path` (`/`-separated, relative) under `root` for reading: the kernel refuses
/// any symlink on the way, `..` out of the root and `/proc` magic links. The opened
/// descriptor must be a regular file (for `OFlags::DIRECTORY` in `extra`, a
/// directory).
pub(super) fn open_beneath(
    root: &impl AsFd,
    path: &[u8],
    extra: OFlags,
) -> std::io::Result<OwnedFd> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let fd = rustix::fs::openat2(root, path, FILE_FLAGS | extra, Mode::empty(), resolve)?;
    if !extra.contains(OFlags::DIRECTORY) {
        return check_regular(fd, None)
            .map(OwnedFd::from)
            .map_err(std::io::Error::other);
    }
    Ok(fd)
}

fn check_regular(fd: OwnedFd, expected: Option<Identity>) -> Result<std::fs::File, String> {
    let opened = rustix::fs::fstat(&fd).map_err(describe)?;
    if FileType::from_raw_mode(opened.st_mode as _) != FileType::RegularFile {
        return Err("it is not a regular file".into());
    }
    if expected.is_some_and(|id| id != identity(&opened)) {
        return Err("it was replaced while the workspace was being read".into());
    }
    // Back to blocking reads: a regular file never blocks, and std expects it.
    let file = std::fs::File::from(fd);
    let flags = rustix::fs::fcntl_getfl(&file).map_err(describe)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(describe)?;
    Ok(file)
}

/// Stat fields that change whenever a file's content may have: a file whose key is
/// the same after the run as before is not read again. `ctime` cannot be set by the
/// agent (`utimensat` sets only atime and mtime), so putting the old mtime back does
/// not make an edit look unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StatKey {
    id: Identity,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl StatKey {
    // The widths of the stat fields differ between targets.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn of(stat: &Stat) -> StatKey {
        StatKey {
            id: identity(stat),
            size: stat.st_size as i64,
            mtime: (stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            ctime: (stat.st_ctime as i64, stat.st_ctime_nsec as i64),
        }
    }

    pub(super) fn id(&self) -> Identity {
        self.id
    }

    pub(super) fn size(&self) -> i64 {
        self.size
    }

    pub(super) fn mtime(&self) -> (i64, i64) {
        self.mtime
    }

    pub(super) fn ctime(&self) -> (i64, i64) {
        self.ctime
    }
}

pub(super) fn kind_of(file_type: FileType) -> EntryKind {
    match file_type {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        FileType::Unknown => EntryKind::Unknown,
        _ => EntryKind::Other,
    }
}

/// Bytes and time that reading file content may still take.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub bytes: u64,
    pub deadline: Option<(Instant, u64)>,
}

/// The size of each read: memory held for one file, whatever its size.
const CHUNK: usize = 1 << 20;

impl Budget {
    /// Whether the deadline passed.
    pub fn out_of_time(&self) -> bool {
        self.deadline
            .is_some_and(|(deadline, _)| Instant::now() > deadline)
    }

    /// Feeds `file` to `sink` a chunk at a time. Fails, saying why, when the file
    /// holds more than the budget's bytes or the deadline passes first.
    pub fn read(
        &mut self,
        file: &mut std::fs::File,
        size: u64,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(), String> {
        if size > self.bytes {
            return Err(format!(
                "not compared: it holds {size} bytes, more than the {} bytes the change set may still read",
                self.bytes
            ));
        }
        let mut buffer = vec![0; CHUNK.min(size as usize + 1).max(1)];
        loop {
            if let (true, Some((_, secs))) = (self.out_of_time(), self.deadline) {
                return Err(format!(
                    "not compared: the change set is read within {secs} s, and the time ran out"
                ));
            }
            let n = file.read(&mut buffer).map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(());
            }
            if n as u64 > self.bytes {
                return Err("not compared: it grew while it was being read".into());
            }
            self.bytes -= n as u64;
            sink(&buffer[..n]);
        }
    }
}

// The widths of `st_dev` and `st_ino` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub(super) fn identity(stat: &Stat) -> Identity {
    (stat.st_dev as u64, stat.st_ino as u64)
}

pub(super) fn describe(errno: rustix::io::Errno) -> String {
    std::io::Error::from(errno).to_string()
}

pub(super) fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return name.to_vec();
    }
    let mut path = Vec::with_capacity(prefix.len() + 1 + name.len());
    path.extend_from_slice(prefix);
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

    use cap_std::ambient_authority;

    use super::*;

    fn mkfifo(path: &std::path::Path) {
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn a_symlinked_parent_folder_is_refused_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host secret").unwrap();
        std::fs::create_dir(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/secret"), "mine").unwrap();
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).unwrap();
        assert!(open_beneath(&dir, b"src/secret", OFlags::empty()).is_ok());
        // The agent swaps the parent folder for a symlink out of the workspace.
        std::fs::remove_dir_all(root.path().join("src")).unwrap();
        symlink(outside.path(), root.path().join("src")).unwrap();
        let err = open_beneath(&dir, b"src/secret", OFlags::empty()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        // Nor a symlink inside the workspace, nor `..`, nor /proc's magic links.
        symlink("src", root.path().join("inner")).unwrap();
        assert!(open_beneath(&dir, b"inner/secret", OFlags::empty()).is_err());
        assert!(open_beneath(&dir, b"../x", OFlags::empty()).is_err());
        symlink("/proc/self", root.path().join("p")).unwrap();
        assert!(open_beneath(&dir, b"p/environ", OFlags::empty()).is_err());
    }

    #[test]
    fn a_fifo_neither_blocks_nor_is_read() {
        let root = tempfile::tempdir().unwrap();
        mkfifo(&root.path().join("pipe"));
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).unwrap();
        // Nobody writes to it: a blocking open would hang here for ever.
        let err = open_beneath(&dir, b"pipe", OFlags::empty()).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        // A file listed, then swapped for a FIFO before it is opened.
        std::fs::write(root.path().join("file"), "x").unwrap();
        let fd = rustix::fs::openat(&dir, ".", DIR_FLAGS, Mode::empty()).unwrap();
        let listed = stat_entry(&fd, b"file").unwrap();
        std::fs::remove_file(root.path().join("file")).unwrap();
        mkfifo(&root.path().join("file"));
        let err = open_file(&fd, b"file", &listed).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
    }

    struct Count(usize);

    impl Visitor for Count {
        fn skip(&self, _: &[u8], _: &[u8]) -> bool {
            false
        }
        fn visit(&mut self, _: &OwnedFd, _: &[u8], _: &[u8], _: FileType) -> Option<Identity> {
            self.0 += 1;
            None
        }
        fn unreadable(&mut self, _: &[u8], _: String) {}
    }

    #[test]
    fn a_walk_past_its_deadline_or_bound_stops_and_says_so() {
        let root = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::write(root.path().join(format!("f{i}")), "x").unwrap();
        }
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).unwrap();
        let mut count = Count(0);
        let bounds = |deadline| WalkBounds {
            path_bytes: 1 << 20,
            deadline,
        };
        walk(&dir, bounds(None), &mut count).unwrap();
        assert_eq!(count.0, 10);
        let past = Some((Instant::now() - std::time::Duration::from_secs(1), 7));
        let err = walk(&dir, bounds(past), &mut Count(0)).unwrap_err();
        assert!(matches!(err, WalkError::OutOfTime { secs: 7 }), "{err}");
        // Each entry costs its path and a record: ten of them do not fit in 1 KiB.
        let tight = WalkBounds {
            path_bytes: 1 << 10,
            deadline: None,
        };
        let err = walk(&dir, tight, &mut Count(0)).unwrap_err();
        assert!(matches!(err, WalkError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn a_budget_stops_a_sparse_file_without_reading_it_whole() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("sparse");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let mut budget = Budget {
            bytes: 1 << 20,
            deadline: None,
        };
        let mut file = std::fs::File::open(&path).unwrap();
        let err = budget.read(&mut file, 1 << 40, |_| {}).unwrap_err();
        assert!(err.contains("not compared"), "{err}");
        // A deadline that passed stops the read at once.
        let mut budget = Budget {
            bytes: u64::MAX,
            deadline: Some((Instant::now(), 1)),
        };
        std::thread::sleep(std::time::Duration::from_millis(5));
        let mut read = 0;
        let err = budget
            .read(&mut file, 1 << 40, |chunk| read += chunk.len())
            .unwrap_err();
        assert!(err.contains("time ran out"), "{err}");
        assert_eq!(read, 0);
    }
}
