//! Reading the workspace after an agent had it: through the handle opened on its root
//! before the agent ran, one component at a time, never through a symlink, never
//! blocking on a FIFO, within a budget of bytes and time.
//!
//! Both ways of finding what an agent changed ([`super::Snapshot`] and
//! [`super::GitBaseline`]) read the workspace only through this module, which is the
//! change set's use of [`crate::beneath`] (where the attacks defeated are listed):
//!
//! - [`walk`] lists the tree by directory handles, each directory checked to be the
//!   one listed, the climb back through `..` checked too.
//! - [`open_beneath`] opens one path under the root with the kernel refusing any
//!   symlink on the way, parents included.
//! - [`open_file`] opens a listed file non-blocking and checks, on the opened
//!   descriptor, that it is the regular file that was listed.
//! - [`Budget`] reads a file chunk by chunk, so memory never grows with a file's size
//!   and a 1 TiB sparse file stops at the budget's bytes or deadline.
//! - [`StatKey`] tells whether a file may have changed, so an unchanged one is not
//!   read again.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::Instant;

use rustix::fs::{FileType, Stat};

use crate::beneath;
#[cfg(test)]
pub(super) use crate::beneath::DIR_FLAGS;
pub(super) use crate::beneath::{
    identity, open_beneath, read_link, stat_entry, Identity, OpenError, Visitor, WalkBounds,
};
use crate::record::EntryKind;

/// Why a whole walk of the workspace could not be done.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The workspace's root could not be opened or read.
    #[error("reading the workspace root: {0}")]
    Root(std::io::Error),
    #[error("{path} was moved while the workspace was being read")]
    /// A directory was replaced while it was read, so the walk cannot vouch for it.
    Moved {
        /// The directory, relative to the workspace.
        path: String,
    },
    #[error("the workspace holds more entries than {limit} bytes of paths and records allow; it is not read further")]
    /// The walk's memory bound was reached.
    TooLarge {
        /// The bound, in bytes.
        limit: u64,
    },
    #[error("the workspace was not read to the end within {secs} s")]
    /// The walk's time bound was reached.
    OutOfTime {
        /// The bound, in seconds.
        secs: u64,
    },
}

impl From<beneath::WalkError> for WalkError {
    fn from(error: beneath::WalkError) -> Self {
        match error {
            beneath::WalkError::Root(e) => WalkError::Root(e),
            beneath::WalkError::Moved { path } => WalkError::Moved {
                path: crate::escape::name(&path),
            },
            beneath::WalkError::TooLarge { limit } => WalkError::TooLarge { limit },
            beneath::WalkError::OutOfTime { secs } => WalkError::OutOfTime { secs },
        }
    }
}

/// Visits every entry under `root`, through that handle only ([`beneath::walk`]).
pub(super) fn walk(
    root: &cap_std::fs::Dir,
    bounds: WalkBounds,
    visitor: &mut impl Visitor,
) -> Result<(), WalkError> {
    Ok(beneath::walk(root, bounds, visitor)?)
}

/// Why a file of the workspace was not compared; the change set records the reason.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unread {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("not compared: it holds {size} bytes, more than the {left} bytes the change set may still read")]
    TooLarge { size: u64, left: u64 },
    #[error("not compared: the change set is read within {secs} s, and the time ran out")]
    OutOfTime { secs: u64 },
    #[error("not compared: it grew while it was being read")]
    Grew,
}

impl From<std::io::Error> for Unread {
    fn from(error: std::io::Error) -> Self {
        Unread::Open(error.into())
    }
}

/// Opens the file `name` of `dir` for reading, if it is still the regular file
/// `listed` stats: a FIFO, socket, device or other file swapped in is refused on the
/// opened descriptor, and the open itself never blocks.
pub(super) fn open_file(
    dir: &OwnedFd,
    name: &[u8],
    listed: &Stat,
) -> Result<std::fs::File, Unread> {
    Ok(crate::beneath::open_regular(
        dir,
        name,
        Some(identity(listed)),
    )?)
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
    ) -> Result<(), Unread> {
        if size > self.bytes {
            return Err(Unread::TooLarge {
                size,
                left: self.bytes,
            });
        }
        let mut buffer = vec![0; CHUNK.min(size as usize + 1).max(1)];
        loop {
            if let (true, Some((_, secs))) = (self.out_of_time(), self.deadline) {
                return Err(Unread::OutOfTime { secs });
            }
            let n = file.read(&mut buffer)?;
            if n == 0 {
                return Ok(());
            }
            if n as u64 > self.bytes {
                return Err(Unread::Grew);
            }
            self.bytes -= n as u64;
            sink(&buffer[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(err.to_string().contains("not compared"), "{err}");
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
        assert!(err.to_string().contains("time ran out"), "{err}");
        assert_eq!(read, 0);
    }
}
