//! Writing beneath a handle: a file is written to a fresh name and renamed over its
//! own, so whatever was at the name (a link, a hard link to a host file, a FIFO) is
//! replaced, never written through; directories are made and removed one component
//! at a time, no link followed.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::open::{list, open_dir};

/// A file being written under a fresh name in a directory, to be renamed over its
/// own name by [`NewFile::place`]; dropped unplaced, it is removed.
pub struct NewFile<'d> {
    dir: BorrowedFd<'d>,
    temporary: Vec<u8>,
    file: Option<File>,
}

impl<'d> NewFile<'d> {
    /// Creates the fresh file (`O_EXCL | O_NOFOLLOW`: never an existing name, never
    /// through a link) with `mode`.
    pub fn create(dir: BorrowedFd<'d>, mode: Mode) -> io::Result<NewFile<'d>> {
        let temporary = temporary_name();
        let fd = rustix::fs::openat(
            dir,
            temporary.as_slice(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )?;
        Ok(NewFile {
            dir,
            temporary,
            file: Some(File::from(fd)),
        })
    }

    /// Replaces `name` with `contents`, written to a new file with `mode` first.
    pub fn write(
        dir: &impl AsFd,
        name: impl rustix::path::Arg,
        contents: &[u8],
        mode: Mode,
    ) -> io::Result<()> {
        let mut new = NewFile::create(dir.as_fd(), mode)?;
        new.file().write_all(contents)?;
        Ok(new.place(name)?)
    }

    /// The file, open for writing.
    pub fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("a NewFile holds its file until placed")
    }

    /// Closes the file and renames it over `name` in its directory.
    pub fn place(mut self, name: impl rustix::path::Arg) -> Result<(), Errno> {
        drop(self.file.take());
        rustix::fs::renameat(self.dir, self.temporary.as_slice(), self.dir, name)?;
        self.temporary.clear();
        Ok(())
    }
}

impl Drop for NewFile<'_> {
    fn drop(&mut self) {
        if !self.temporary.is_empty() {
            let _ = rustix::fs::unlinkat(self.dir, self.temporary.as_slice(), AtFlags::empty());
        }
    }
}

/// A name nothing else takes before it is renamed away (each write renames right
/// after it wrote; an archive's entries are checked one at a time).
pub fn temporary_name() -> Vec<u8> {
    format!(".agentgate-{}.tmp", uuid::Uuid::new_v4().simple()).into_bytes()
}

/// The directory `name` under `parent`, made (with `mode`) when absent; a link or a
/// file there is refused, never followed.
pub fn make_dir(
    parent: impl AsFd,
    name: impl rustix::path::Arg + Copy,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    match rustix::fs::mkdirat(&parent, name, mode) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(e),
    }
    open_dir(parent, name)
}

/// Removes `name` from `parent`, and everything under it when it is a directory,
/// without following a link.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &[u8]) -> Result<(), Errno> {
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        Err(Errno::ISDIR | Errno::PERM) => {}
        other => return other,
    }
    let dir = open_dir(parent, name)?;
    for (child, _) in list(&dir).map_err(|_| Errno::IO)? {
        remove_tree(dir.as_fd(), &child)?;
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}

#[cfg(test)]
pub(super) mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    pub(in crate::beneath) fn mkfifo(path: &std::path::Path) {
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn a_write_replaces_a_link_or_hard_link_and_leaves_no_temporary_behind() {
        let root = tempfile::tempdir().unwrap();
        let dir_path = root.path().join("dir");
        std::fs::create_dir(&dir_path).unwrap();
        let outside = root.path().join("outside");
        std::fs::write(&outside, "host").unwrap();
        std::os::unix::fs::symlink(&outside, dir_path.join("soft")).unwrap();
        std::fs::hard_link(&outside, dir_path.join("hard")).unwrap();
        let dir = open_dir(rustix::fs::CWD, dir_path.as_path()).unwrap();
        for name in ["soft", "hard"] {
            NewFile::write(&dir, name, b"mine", Mode::from_raw_mode(0o600)).unwrap();
            assert_eq!(std::fs::read(dir_path.join(name)).unwrap(), b"mine");
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "host");
        // One dropped unplaced is removed.
        drop(NewFile::create(dir.as_fd(), Mode::from_raw_mode(0o600)).unwrap());
        let mut names: Vec<_> = list(&dir).unwrap().into_iter().map(|(n, _)| n).collect();
        names.sort();
        assert_eq!(names, [b"hard".to_vec(), b"soft".to_vec()]);
        // A directory under a link is neither made through it nor removed through it.
        std::os::unix::fs::symlink(root.path(), dir_path.join("up")).unwrap();
        assert!(make_dir(&dir, "up", Mode::from_raw_mode(0o755)).is_err());
        remove_tree(dir.as_fd(), b"up").unwrap();
        assert!(outside.exists());
    }
}
