//! Opening beneath a handle: directories without following a link, files only when
//! the opened descriptor is a regular file, paths with the kernel refusing any link.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use super::write::NewFile;

/// How a directory is opened beneath a handle: to be listed or entered, never
/// through a symlink.
pub const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a file is opened to be read: a FIFO or device put in its place must not block
/// the open, a terminal must not become ours, a symlink is not followed.
pub const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Device and inode: which directory or file a descriptor is on.
pub type Identity = (u64, u64);

/// Why a file beneath a handle was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A FIFO, socket, device, directory or link where a file was expected.
    #[error("it is not a regular file")]
    NotRegular { kind: FileType },
    /// The file opened is not the one listed before.
    #[error("it was replaced while the workspace was being read")]
    Replaced,
}

impl From<Errno> for OpenError {
    fn from(errno: Errno) -> Self {
        OpenError::Io(errno.into())
    }
}

// The widths of `st_dev` and `st_ino` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub fn identity(stat: &Stat) -> Identity {
    (stat.st_dev as u64, stat.st_ino as u64)
}

/// The directory `name` of `parent`; a link at that name is refused (`ELOOP` or
/// `ENOTDIR`), never followed.
pub fn open_dir(parent: impl AsFd, name: impl rustix::path::Arg) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty())
}

/// The names in the directory open at `dir` with the type the listing gives, `.` and
/// `..` left out.
pub fn list(dir: impl AsFd) -> io::Result<Vec<(Vec<u8>, FileType)>> {
    let mut names = Vec::new();
    let mut listing = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push((name.to_vec(), entry.file_type()));
        }
    }
    Ok(names)
}

/// The entry `name` of `dir`, not followed if it is a symlink.
pub fn stat_entry(dir: impl AsFd, name: impl rustix::path::Arg) -> io::Result<Stat> {
    Ok(rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

/// The target of the symlink `name` of `dir`.
pub fn read_link(dir: impl AsFd, name: impl rustix::path::Arg) -> io::Result<Vec<u8>> {
    Ok(rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes())
}

/// Opens the file `name` of `dir` for reading, if it is a regular file (and, given
/// `listed`, still the one listed): a FIFO, socket, device or other file swapped in is
/// refused on the opened descriptor, and the open itself never blocks.
pub fn open_regular(
    dir: impl AsFd,
    name: impl rustix::path::Arg,
    listed: Option<Identity>,
) -> Result<File, OpenError> {
    let fd = rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty())?;
    check_regular(fd, listed)
}

/// Opens `path` (`/`-separated, relative) under `root` for reading: the kernel refuses
/// any symlink on the way, `..` out of the root and `/proc` magic links. The opened
/// descriptor must be a regular file (for `OFlags::DIRECTORY` in `extra`, a
/// directory).
pub fn open_beneath(root: impl AsFd, path: &[u8], extra: OFlags) -> Result<OwnedFd, OpenError> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let flags = READ_FLAGS | extra;
    let fd = match rustix::fs::openat2(&root, path, flags, Mode::empty(), resolve) {
        Err(Errno::NOSYS) => open_by_components(root.as_fd(), path, flags)?,
        other => other?,
    };
    if extra.contains(OFlags::DIRECTORY) {
        return Ok(fd);
    }
    check_regular(fd, None).map(OwnedFd::from)
}

/// [`open_beneath`] on a kernel without `openat2` (before 5.6): one component at a
/// time, none followed if it is a link (so neither a magic link), `..` and absolute
/// paths refused as `RESOLVE_BENEATH` refuses them.
fn open_by_components(
    root: std::os::fd::BorrowedFd<'_>,
    path: &[u8],
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    if path.starts_with(b"/") {
        return Err(Errno::XDEV);
    }
    let names: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|name| !name.is_empty() && *name != b".")
        .collect();
    if names.iter().any(|name| *name == b"..") {
        return Err(Errno::XDEV);
    }
    let Some((last, parents)) = names.split_last() else {
        return rustix::fs::openat(root, c".", flags, Mode::empty());
    };
    let mut dir = open_dir(root, c".")?;
    for name in parents {
        dir = open_dir(&dir, *name)?;
    }
    rustix::fs::openat(&dir, *last, flags, Mode::empty())
}

fn check_regular(fd: OwnedFd, listed: Option<Identity>) -> Result<File, OpenError> {
    let opened = rustix::fs::fstat(&fd)?;
    let kind = FileType::from_raw_mode(opened.st_mode as _);
    if kind != FileType::RegularFile {
        return Err(OpenError::NotRegular { kind });
    }
    if listed.is_some_and(|id| id != identity(&opened)) {
        return Err(OpenError::Replaced);
    }
    // Back to blocking reads: a regular file never blocks, and std expects it.
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

/// A folder opened without following a link at its own name, whose files are read
/// only when regular and within a bound, and replaced by a rename.
pub struct Folder {
    dir: OwnedFd,
}

impl Folder {
    /// Opens the folder at `path`; a symlink there is refused (`ELOOP`/`ENOTDIR`).
    pub fn open(path: &Path) -> io::Result<Folder> {
        let dir = rustix::fs::open(path, DIR_FLAGS, Mode::empty())?;
        Ok(Folder { dir })
    }

    /// The regular file `name` of the folder, opened for reading.
    pub fn open_file(&self, name: &str) -> Result<File, OpenError> {
        open_regular(&self.dir, name, None)
    }

    /// At most `max` bytes of the regular file `name`, and whether it held more.
    pub fn read(&self, name: &str, max: u64) -> Result<(Vec<u8>, bool), OpenError> {
        let mut bytes = Vec::new();
        self.open_file(name)?
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)?;
        let cut = bytes.len() as u64 > max;
        bytes.truncate(max as usize);
        Ok((bytes, cut))
    }

    /// Writes `name` as a new file (mode 0600) and renames it into place: whatever was
    /// at the name (a symlink, a FIFO) is replaced, never written through.
    pub fn replace(&self, name: &str, contents: &[u8]) -> io::Result<()> {
        NewFile::write(&self.dir, name, contents, Mode::from_raw_mode(0o600))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use cap_std::ambient_authority;
    use cap_std::fs::Dir;

    use super::super::write::tests::mkfifo;
    use super::*;

    #[test]
    fn a_symlinked_parent_folder_is_refused_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host secret").unwrap();
        std::fs::create_dir(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/secret"), "mine").unwrap();
        let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).unwrap();
        assert!(open_beneath(&dir, b"src/secret", OFlags::empty()).is_ok());
        let fd = open_dir(&dir, c".").unwrap();
        assert!(open_by_components(fd.as_fd(), b"src/secret", READ_FLAGS).is_ok());
        // The agent swaps the parent folder for a symlink out of the workspace.
        std::fs::remove_dir_all(root.path().join("src")).unwrap();
        symlink(outside.path(), root.path().join("src")).unwrap();
        let err = open_beneath(&dir, b"src/secret", OFlags::empty()).unwrap_err();
        assert!(
            matches!(&err, OpenError::Io(e) if e.raw_os_error() == Some(libc::ELOOP)),
            "{err}"
        );
        // Nor a symlink inside the workspace, nor `..`, nor /proc's magic links.
        symlink("src", root.path().join("inner")).unwrap();
        assert!(open_beneath(&dir, b"inner/secret", OFlags::empty()).is_err());
        assert!(open_beneath(&dir, b"../x", OFlags::empty()).is_err());
        symlink("/proc/self", root.path().join("p")).unwrap();
        assert!(open_beneath(&dir, b"p/environ", OFlags::empty()).is_err());
        // The fallback for kernels without openat2 refuses the same paths.
        for path in [
            &b"src/secret"[..],
            b"inner/secret",
            b"../x",
            b"a/../../x",
            b"/etc/passwd",
            b"p/environ",
        ] {
            assert!(
                open_by_components(fd.as_fd(), path, READ_FLAGS).is_err(),
                "{}",
                path.escape_ascii()
            );
        }
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
        let fd = open_dir(&dir, c".").unwrap();
        let listed = stat_entry(&fd, "file").unwrap();
        // Kept alive, so that no file made below can reuse its inode.
        std::fs::hard_link(root.path().join("file"), root.path().join("kept")).unwrap();
        std::fs::remove_file(root.path().join("file")).unwrap();
        mkfifo(&root.path().join("file"));
        let err = open_regular(&fd, "file", Some(identity(&listed))).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        // A file swapped for another file is not the one listed.
        std::fs::remove_file(root.path().join("file")).unwrap();
        std::fs::write(root.path().join("file"), "y").unwrap();
        let err = open_regular(&fd, "file", Some(identity(&listed))).unwrap_err();
        assert!(matches!(err, OpenError::Replaced), "{err}");
    }

    #[test]
    fn a_folder_is_read_within_bounds_and_replaced_without_following_links() {
        let home = tempfile::tempdir().unwrap();
        let folder = home.path().join("folder");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("a"), "0123456789").unwrap();
        let outside = home.path().join("outside");
        std::fs::write(&outside, "secret").unwrap();
        symlink(&outside, folder.join("link")).unwrap();
        mkfifo(&folder.join("fifo"));
        // A sparse file of 1 TiB is read only up to the bound.
        std::fs::File::create(folder.join("sparse"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();

        let opened = Folder::open(&folder).unwrap();
        assert_eq!(opened.read("a", 4).unwrap(), (b"0123".to_vec(), true));
        assert_eq!(opened.read("sparse", 8).unwrap(), (vec![0; 8], true));
        assert!(opened.read("link", 99).is_err());
        assert!(matches!(
            opened.read("fifo", 99),
            Err(OpenError::NotRegular {
                kind: FileType::Fifo
            })
        ));
        opened.replace("link", b"mine").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
        assert_eq!(std::fs::read(folder.join("link")).unwrap(), b"mine");
        let linked = home.path().join("linked");
        symlink(&folder, &linked).unwrap();
        assert!(Folder::open(&linked).is_err());
    }
}
