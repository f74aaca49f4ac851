//! Walking a tree beneath its root handle: iterative, a fixed number of descriptors
//! at any depth, each directory entered checked to be the one listed, and the climb
//! back through `..` checked to land where it came from.

use std::os::fd::OwnedFd;
use std::time::Instant;

use cap_std::fs::Dir;
use rustix::fs::{FileType, Mode};

use super::open::{identity, Identity, OpenError, DIR_FLAGS};

/// What one entry costs a walk's bound beyond its path: what a caller keeps for it.
const ENTRY_COST: u64 = 128;

/// Why a whole walk could not be done. A caller words it for its own tree (the change
/// set's `WalkError` says "the workspace").
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("reading the root: {0}")]
    Root(std::io::Error),
    /// A directory on the way back up is not the one the walk came from.
    #[error("{} was moved while the tree was being read", path.escape_ascii())]
    Moved { path: Vec<u8> },
    #[error("the tree holds more entries than {limit} bytes of paths and records allow")]
    TooLarge { limit: u64 },
    #[error("the tree was not read to the end within {secs} s")]
    OutOfTime { secs: u64 },
}

/// What a [`walk`] does with each entry.
pub trait Visitor {
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
    fn unreadable(&mut self, path: &[u8], error: OpenError);
}

/// The bounds of one walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkBounds {
    /// Bytes of paths, plus a fixed cost per entry, the walk may visit: what its
    /// caller keeps stays bounded however many entries the workspace holds.
    pub path_bytes: u64,
    /// When the walk gives up (after the agent ran; `None` before).
    pub deadline: Option<(Instant, u64)>,
}

/// Visits every entry under `root`, through that handle only.
pub fn walk(root: &Dir, bounds: WalkBounds, visitor: &mut impl Visitor) -> Result<(), WalkError> {
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
                .map_err(OpenError::from)
                .and_then(|fd| {
                    let opened = identity(&rustix::fs::fstat(&fd)?);
                    if opened != id {
                        return Err(OpenError::Replaced);
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
                Err(Listing::Io(e)) => visitor.unreadable(&path, e.into()),
                Err(Listing::Bound(e)) => return Err(e),
            }
            continue;
        }
        let done = stack.pop().expect("the loop saw a frame");
        current = match stack.last() {
            None => break,
            Some(_) if stack.len() == 1 => open_root().map_err(|e| WalkError::Root(e.into()))?,
            Some(parent) => {
                climb(&current, parent.id).ok_or(WalkError::Moved { path: done.path })?
            }
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

/// `prefix/name`, or `name` at the root.
fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
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
    use cap_std::ambient_authority;

    use super::*;

    struct Count(usize);

    impl Visitor for Count {
        fn skip(&self, _: &[u8], _: &[u8]) -> bool {
            false
        }
        fn visit(&mut self, _: &OwnedFd, _: &[u8], _: &[u8], _: FileType) -> Option<Identity> {
            self.0 += 1;
            None
        }
        fn unreadable(&mut self, _: &[u8], _: OpenError) {}
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

    /// Enters every directory and records what could not be listed.
    #[derive(Default)]
    struct Enter {
        seen: Vec<Vec<u8>>,
        unreadable: Vec<(Vec<u8>, String)>,
        swap: Option<Box<dyn FnMut()>>,
    }

    impl Visitor for Enter {
        fn skip(&self, _: &[u8], _: &[u8]) -> bool {
            false
        }
        fn visit(
            &mut self,
            dir: &OwnedFd,
            name: &[u8],
            path: &[u8],
            _: FileType,
        ) -> Option<Identity> {
            self.seen.push(path.to_vec());
            let stat = super::super::stat_entry(dir, name).ok()?;
            if let Some(mut swap) = self.swap.take() {
                swap();
            }
            (FileType::from_raw_mode(stat.st_mode as _) == FileType::Directory)
                .then(|| identity(&stat))
        }
        fn unreadable(&mut self, path: &[u8], error: OpenError) {
            self.unreadable.push((path.to_vec(), error.to_string()));
        }
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_it_was_listed_is_not_entered() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).unwrap();
        let (d, to) = (root.path().join("d"), outside.path().to_path_buf());
        let mut visitor = Enter {
            swap: Some(Box::new(move || {
                std::fs::remove_dir(&d).unwrap();
                std::os::unix::fs::symlink(&to, &d).unwrap();
            })),
            ..Enter::default()
        };
        let bounds = WalkBounds {
            path_bytes: 1 << 20,
            deadline: None,
        };
        walk(&dir, bounds, &mut visitor).unwrap();
        assert_eq!(visitor.seen, [b"d".to_vec()]);
        assert_eq!(visitor.unreadable.len(), 1, "{:?}", visitor.unreadable);
        assert_eq!(visitor.unreadable[0].0, b"d");
    }
}
