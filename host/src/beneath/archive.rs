//! A tree as tar, and tar back into a tree: [`pack`] a folder into an archive,
//! [`unpack`] an archive someone else wrote into a folder (the Kubernetes capability
//! copies a workspace to a pod and back with them, `capabilities/kubernetes/copy.rs`).
//!
//! The archive that comes back was written by whoever had the tree (an agent), so
//! [`unpack`] treats it as hostile. Every host path is reached one name at a time from
//! a directory descriptor opened with `O_NOFOLLOW` ([`super::open_dir`]), so no link
//! is ever followed: not one planted by an earlier entry, not a parent directory
//! replaced by a link between entries, not one the workspace held before. Names are
//! checked before use (no absolute names, no `..`, no NUL), files are written to a
//! fresh name and renamed into place ([`super::NewFile`]: never written through an
//! existing file or hard link), hard links may only point at files of the same
//! archive, special files are left out and setuid/setgid/sticky bits dropped. The
//! bounds count what is written (so a sparse or lying archive cannot grow past them)
//! and the raw stream too (so a giant name header cannot either).
//!
//! An entry [`unpack`] refuses (a name it will not write, a hard link to something that
//! is not a file of the archive, a device, fifo or socket, a file larger than what is
//! left of the bound, a name the host cannot write) is left out and the copy goes on:
//! every entry after it still comes back, and [`Moved::skipped`] names each one left
//! out with the reason, for the run's `leftOut`. What the host held at a left-out name
//! is kept, never removed on its account. Only what makes the rest of the stream
//! unreadable or unbounded (a broken or cut stream, one without tar's end marker, too
//! many entries, a stream past the raw bound) stops the copy, as a [`Stopped`] that
//! still says what was left out before it. A symbolic link comes back as a link
//! whatever it points to (inside the tree or out of it, as an agent could leave it in a
//! workspace the docker and process providers bind), and is never followed here; a
//! hard link to a link of the archive comes back as the same link.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::open::{list, open_dir, READ_FLAGS};
use super::write::{remove_tree, temporary_name, NewFile};

/// How much one copy may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes of file content, counted as written.
    pub max_bytes: u64,
    /// Archive entries (files, directories, links, special files).
    pub max_entries: u64,
}

/// What one copy moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Files and links written (directories not counted).
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries left out, in archive order.
    pub skipped: Vec<Skipped>,
}

/// An entry a copy left out, and why. The name is escaped (`\n`, `\x1b`, ...), so
/// it is one line and cannot forge a line of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The entry's name, relative to the root of the copy.
    pub path: String,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl Skipped {
    fn new(path: &[u8], reason: impl Into<String>) -> Skipped {
        Skipped {
            path: if path.is_empty() {
                ".".to_owned()
            } else {
                shown(path)
            },
            reason: reason.into(),
        }
    }
}

/// A copy that stopped before the end of its archive: why, and what it had moved and
/// left out until then (everything after the stop was not brought back).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Stopped {
    pub error: TransferError,
    pub moved: Moved,
}

/// Why a copy stopped. Names are escaped (`\n`, `\x1b`, ...), so a hostile name cannot
/// forge a line of a log.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("the archive is not a readable tar stream: {source}")]
    Archive { source: io::Error },
    #[error("archive entry `{entry}` refused: {reason}")]
    Refused { entry: String, reason: String },
    #[error(
        "the copy stopped at `{entry}`: it moves more than {limit} bytes, the bound of one copy"
    )]
    TooManyBytes { entry: String, limit: u64 },
    #[error("the copy stopped: it has more than {limit} entries, the bound of one copy")]
    TooManyEntries { limit: u64 },
    #[error("the archive has a long name or PAX header of {size} bytes, more than the {MAX_EXTENSION} bytes allowed")]
    Extension { size: u64 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("writing the archive failed: {source}")]
    Write { source: io::Error },
    #[error("the archive ended without tar's end marker: the stream was cut")]
    Truncated,
}

impl TransferError {
    /// Why one entry was left out, when this error concerns that entry only.
    fn entry_reason(&self) -> Option<String> {
        match self {
            TransferError::Refused { reason, .. } => Some(reason.clone()),
            TransferError::TooManyBytes { limit, .. } => Some(format!(
                "a file larger than what was left of the copy's bound of {limit} bytes"
            )),
            TransferError::Io { path, source } => {
                Some(format!("the host could not write `{path}`: {source}"))
            }
            _ => None,
        }
    }
}

/// Room in the raw stream for one entry beyond its content: its header, a long name and
/// a long link name (GNU or PAX, each up to `PATH_MAX`), and padding.
const ENTRY_OVERHEAD: u64 = 16 * 1024;

/// The largest GNU long name or link and PAX header accepted: the `tar` crate holds
/// them in memory whole, so a bigger one is refused before it is read.
const MAX_EXTENSION: u64 = 64 * 1024;

/// Writes `root` and everything under it to `out` as a tar archive, names relative to
/// `root`. Links are stored as links, never followed; sockets, fifos and devices are
/// left out and listed in [`Moved::skipped`].
pub fn pack(root: &Path, out: impl Write, bounds: &Bounds) -> Result<Moved, TransferError> {
    let root_fd = open_root(root)?;
    let mut packer = Packer {
        builder: tar::Builder::new(out),
        bounds,
        entries: 0,
        moved: Moved::default(),
    };
    packer.directory(root_fd.as_fd(), &mut Vec::new())?;
    packer
        .builder
        .into_inner()
        .map_err(|source| TransferError::Write { source })?;
    Ok(packer.moved)
}

struct Packer<'b, W: Write> {
    builder: tar::Builder<W>,
    bounds: &'b Bounds,
    entries: u64,
    moved: Moved,
}

impl<W: Write> Packer<'_, W> {
    /// Appends the entries of the directory `dir`, whose name in the archive is `prefix`
    /// (empty for the root), in name order.
    fn directory(
        &mut self,
        dir: BorrowedFd<'_>,
        prefix: &mut Vec<u8>,
    ) -> Result<(), TransferError> {
        for name in child_names(dir, prefix)? {
            let mark = prefix.len();
            if !prefix.is_empty() {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(&name);
            self.entry(dir, &name, prefix)?;
            prefix.truncate(mark);
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &mut Vec<u8>,
    ) -> Result<(), TransferError> {
        let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_error(path, e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        if !matches!(
            kind,
            FileType::Directory | FileType::RegularFile | FileType::Symlink
        ) {
            self.moved.skipped.push(Skipped::new(path, describe(kind)));
            return Ok(());
        }
        self.entries += 1;
        if self.entries > self.bounds.max_entries {
            return Err(TransferError::TooManyEntries {
                limit: self.bounds.max_entries,
            });
        }
        let mut header = tar::Header::new_gnu();
        header.set_mode(stat.st_mode & 0o777);
        header.set_mtime(stat.st_mtime.max(0) as u64);
        let archive_path = Path::new(OsStr::from_bytes(path));
        match kind {
            FileType::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                self.builder
                    .append_data(&mut header, archive_path, io::empty())
                    .map_err(|source| TransferError::Write { source })?;
                let child = open_dir(dir, name).map_err(|e| io_error(path, e))?;
                self.directory(child.as_fd(), path)
            }
            FileType::Symlink => {
                let target =
                    rustix::fs::readlinkat(dir, name, Vec::new()).map_err(|e| io_error(path, e))?;
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                self.builder
                    .append_link(
                        &mut header,
                        archive_path,
                        OsStr::from_bytes(target.as_bytes()),
                    )
                    .map_err(|source| TransferError::Write { source })?;
                self.moved.files += 1;
                Ok(())
            }
            _ => {
                let fd = rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty())
                    .map_err(|e| io_error(path, e))?;
                // What was opened is what is read: the size comes from the open file.
                let opened = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
                if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
                    self.moved
                        .skipped
                        .push(Skipped::new(path, "changed while copied"));
                    return Ok(());
                }
                let size = opened.st_size.max(0) as u64;
                let total = self.moved.bytes.saturating_add(size);
                if total > self.bounds.max_bytes {
                    return Err(TransferError::TooManyBytes {
                        entry: shown(path),
                        limit: self.bounds.max_bytes,
                    });
                }
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                // Exactly `size` bytes even if the file shrinks or grows meanwhile,
                // so the archive stays well formed.
                let content = File::from(fd).take(size).chain(io::repeat(0)).take(size);
                self.builder
                    .append_data(&mut header, archive_path, content)
                    .map_err(|source| TransferError::Write { source })?;
                self.moved.files += 1;
                self.moved.bytes = total;
                Ok(())
            }
        }
    }
}

/// Makes `root` equal to the archive read from `input`: what it holds is created or
/// replaced, what it does not hold is removed. The archive is treated as hostile (see
/// the module documentation): an entry refused is left out and the copy goes on. When
/// the copy stops, `root` may hold part of the archive (nothing is removed then), but
/// nothing outside `root` was touched.
pub fn unpack(input: impl Read, root: &Path, bounds: &Bounds) -> Result<Moved, Stopped> {
    let root_fd = open_root(root).map_err(|error| Stopped {
        error,
        moved: Moved::default(),
    })?;
    let stopped = Rc::new(Cell::new(None));
    let raw_limit = bounds.max_bytes.saturating_add(
        bounds
            .max_entries
            .saturating_add(2)
            .saturating_mul(ENTRY_OVERHEAD),
    );
    let stream = HeaderGuard::new(
        BoundedReader {
            inner: input,
            left: raw_limit,
            stopped: stopped.clone(),
        },
        stopped.clone(),
    );
    let mut archive = tar::Archive::new(stream);
    let mut unpacker = Unpacker {
        root: root_fd,
        bounds,
        entries: 0,
        moved: Moved::default(),
        present: HashSet::new(),
        files: HashSet::new(),
        links: HashMap::new(),
    };
    let stream_error = |source: io::Error, last: &str| match stopped.get() {
        Some(Stop::TooLarge) => TransferError::TooManyBytes {
            entry: last.to_owned(),
            limit: bounds.max_bytes,
        },
        Some(Stop::Extension(size)) => TransferError::Extension { size },
        Some(Stop::Truncated) => TransferError::Truncated,
        None => TransferError::Archive { source },
    };
    let mut last = String::from("the start of the archive");
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(e) => return Err(unpacker.stopped(stream_error(e, &last))),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return Err(unpacker.stopped(stream_error(e, &last))),
        };
        let raw_name = entry.path_bytes().into_owned();
        last = shown(&raw_name);
        match unpacker.entry(entry) {
            Ok(()) => {}
            Err(TransferError::Io { source, .. }) if stopped.get().is_some() => {
                return Err(unpacker.stopped(stream_error(source, &last)))
            }
            Err(error) => match error.entry_reason() {
                Some(reason) => unpacker.left_out(&raw_name, reason),
                None => return Err(unpacker.stopped(error)),
            },
        }
    }
    if let Err(error) = unpacker.remove_absent(unpacker.root.as_fd(), &mut Vec::new()) {
        return Err(unpacker.stopped(error));
    }
    Ok(unpacker.moved)
}

struct Unpacker<'b> {
    root: OwnedFd,
    bounds: &'b Bounds,
    entries: u64,
    moved: Moved,
    /// Every path the archive holds, with its parents, relative to the root.
    present: HashSet<Vec<u8>>,
    /// The regular files written so far: the only targets a hard link may have.
    files: HashSet<Vec<u8>>,
    /// The symbolic links written so far, with their targets: a hard link to one is
    /// made the same link.
    links: HashMap<Vec<u8>, Vec<u8>>,
}

impl Unpacker<'_> {
    /// Leaves the entry `raw_name` out: listed with `reason`, and whatever the root
    /// holds at its name is kept (not removed as absent from the archive).
    fn left_out(&mut self, raw_name: &[u8], reason: String) {
        // Named as below the root (`./a//b` is `a/b`) when the name is one.
        let mut name = raw_name.to_vec();
        if let Ok(components) = components(raw_name) {
            for end in 1..=components.len() {
                self.present.insert(components[..end].join(&b'/'));
            }
            name = components.join(&b'/');
        }
        self.moved.skipped.push(Skipped::new(&name, reason));
    }

    /// The copy stops here with `error`.
    fn stopped(&mut self, error: TransferError) -> Stopped {
        Stopped {
            error,
            moved: std::mem::take(&mut self.moved),
        }
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), TransferError> {
        self.entries += 1;
        if self.entries > self.bounds.max_entries {
            return Err(TransferError::TooManyEntries {
                limit: self.bounds.max_entries,
            });
        }
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() {
            return Ok(());
        }
        let raw_name = entry.path_bytes().into_owned();
        let entry_name = shown(&raw_name);
        let components = components(&raw_name).map_err(|reason| refused(&entry_name, reason))?;
        let Some((last, parents)) = components.split_last() else {
            return if kind == tar::EntryType::Directory {
                Ok(())
            } else {
                Err(refused(
                    &entry_name,
                    "it would replace the root of the copy",
                ))
            };
        };
        let path = components.join(&b'/');
        let target = match kind {
            tar::EntryType::Directory => Target::Directory,
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                Target::File
            }
            tar::EntryType::Symlink => Target::Symlink,
            tar::EntryType::Link => Target::HardLink,
            other => {
                self.left_out(&raw_name, describe_tar(other).to_owned());
                return Ok(());
            }
        };
        let parent = self.open_parent(parents, &entry_name)?;
        let mode = Mode::from_raw_mode(entry.header().mode().unwrap_or(0o644) & 0o777);
        match target {
            Target::Directory => {
                make_directory(parent.as_fd(), last, mode).map_err(|e| io_error(&path, e))?;
                self.files.remove(&path);
                self.links.remove(&path);
            }
            Target::File => {
                let written = self.write_file(parent.as_fd(), last, &path, mode, &mut entry)?;
                self.moved.files += 1;
                self.moved.bytes += written;
                self.links.remove(&path);
                self.files.insert(path.clone());
            }
            Target::Symlink => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&entry_name, "a symbolic link without a target"))?;
                if link.is_empty() || link.contains(&0) {
                    return Err(refused(
                        &entry_name,
                        "a symbolic link with an empty target or a NUL byte",
                    ));
                }
                let link = link.into_owned();
                symlink(parent.as_fd(), last, &link).map_err(|e| io_error(&path, e))?;
                self.files.remove(&path);
                self.links.insert(path.clone(), link);
                self.moved.files += 1;
            }
            Target::HardLink => {
                self.hard_link(&entry, parent.as_fd(), last, &path, &entry_name)?;
                self.moved.files += 1;
            }
        }
        for end in 1..=components.len() {
            self.present.insert(components[..end].join(&b'/'));
        }
        Ok(())
    }

    /// Opens the directory that holds an entry, one name at a time without following a
    /// link, creating missing directories; a name that is there but not a directory
    /// (a link, a file) refuses the entry.
    fn open_parent(
        &mut self,
        parents: &[&[u8]],
        entry_name: &str,
    ) -> Result<OwnedFd, TransferError> {
        let mut current = rustix::io::dup(&self.root).map_err(|e| io_error(b"", e))?;
        for (depth, name) in parents.iter().enumerate() {
            let child = match open_dir(current.as_fd(), *name) {
                Err(Errno::NOENT) => {
                    rustix::fs::mkdirat(current.as_fd(), *name, Mode::from_raw_mode(0o755))
                        .map_err(|e| io_error(&parents[..=depth].join(&b'/'), e))?;
                    open_dir(current.as_fd(), *name)
                }
                other => other,
            };
            current = match child {
                Ok(fd) => fd,
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    return Err(refused(
                        entry_name,
                        format!("`{}` is not a directory (a link or a file), so nothing is written under it", shown(&parents[..=depth].join(&b'/'))),
                    ))
                }
                Err(e) => return Err(io_error(&parents[..=depth].join(&b'/'), e)),
            };
            self.present.insert(parents[..=depth].join(&b'/'));
        }
        Ok(current)
    }

    /// Writes the entry's content to a new file beside `name`, then renames it over
    /// `name`: what was there before (a file, a link, a hard link to anything) is
    /// replaced, never written through.
    fn write_file(
        &self,
        parent: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        mode: Mode,
        content: &mut impl Read,
    ) -> Result<u64, TransferError> {
        let mut new = NewFile::create(parent, Mode::from_raw_mode(0o600)).map_err(|source| {
            TransferError::Io {
                path: shown(path),
                source,
            }
        })?;
        let room = self.bounds.max_bytes.saturating_sub(self.moved.bytes);
        let written = match copy_at_most(content, new.file(), room) {
            Ok(Some(written)) => written,
            Ok(None) => {
                return Err(TransferError::TooManyBytes {
                    entry: shown(path),
                    limit: self.bounds.max_bytes,
                })
            }
            Err(source) => {
                return Err(TransferError::Io {
                    path: shown(path),
                    source,
                })
            }
        };
        rustix::fs::fchmod(new.file(), mode).map_err(|e| io_error(path, e))?;
        remove_directory_in_the_way(parent, name).map_err(|e| io_error(path, e))?;
        new.place(name).map_err(|e| io_error(path, e))?;
        Ok(written)
    }

    /// A hard link, only to a regular file this archive wrote (so never to anything
    /// outside the root, nor to a host file that was there before).
    fn hard_link<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        parent: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry_name: &str,
    ) -> Result<(), TransferError> {
        let link = entry
            .link_name_bytes()
            .ok_or_else(|| refused(entry_name, "a hard link without a target"))?;
        let target_components = components(&link)
            .map_err(|reason| refused(entry_name, format!("its hard link target {reason}")))?;
        let target = target_components.join(&b'/');
        let Some((target_name, target_parents)) = target_components.split_last() else {
            return Err(refused(entry_name, "a hard link to the root"));
        };
        if let Some(link) = self.links.get(&target).cloned() {
            // `ln link name` links the link itself: the same link, never followed.
            symlink(parent, name, &link).map_err(|e| io_error(path, e))?;
            self.files.remove(path);
            self.links.insert(path.to_vec(), link);
            return Ok(());
        }
        if !self.files.contains(&target) {
            return Err(refused(
                entry_name,
                format!(
                    "a hard link to `{}`, which is not a file of this archive",
                    shown(&target)
                ),
            ));
        }
        let target_parent = self.open_parent(target_parents, entry_name)?;
        let stat = rustix::fs::statat(
            target_parent.as_fd(),
            *target_name,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_error(&target, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(refused(
                entry_name,
                format!(
                    "a hard link to `{}`, which is no longer a file",
                    shown(&target)
                ),
            ));
        }
        let temporary = temporary_name();
        rustix::fs::linkat(
            target_parent.as_fd(),
            *target_name,
            parent,
            &temporary,
            AtFlags::empty(),
        )
        .map_err(|e| io_error(path, e))?;
        place(parent, &temporary, name).map_err(|e| io_error(path, e))?;
        self.links.remove(path);
        self.files.insert(path.to_vec());
        Ok(())
    }

    /// Removes what is under `dir` (named `prefix` from the root) but not in the archive.
    fn remove_absent(
        &self,
        dir: BorrowedFd<'_>,
        prefix: &mut Vec<u8>,
    ) -> Result<(), TransferError> {
        for name in child_names(dir, prefix)? {
            let mark = prefix.len();
            if !prefix.is_empty() {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(&name);
            if !self.present.contains(prefix.as_slice()) {
                remove_tree(dir, &name).map_err(|e| io_error(prefix, e))?;
            } else if let Ok(child) = open_dir(dir, name.as_slice()) {
                self.remove_absent(child.as_fd(), prefix)?;
            }
            prefix.truncate(mark);
        }
        Ok(())
    }
}

enum Target {
    Directory,
    File,
    Symlink,
    HardLink,
}

/// The names of an archive path, or why it is refused. `.` and empty names (`a//b`,
/// a trailing `/`) are dropped.
fn components(name: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if name.starts_with(b"/") {
        return Err("an absolute name");
    }
    if name.contains(&0) {
        return Err("a name with a NUL byte");
    }
    let mut components = Vec::new();
    for component in name.split(|&b| b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return Err("a name with `..`"),
            component => components.push(component),
        }
    }
    Ok(components)
}

/// Makes `name` a directory with `mode` (plus the owner's rwx, so the copy can go on
/// writing into it), replacing whatever non-directory was there.
fn make_directory(parent: BorrowedFd<'_>, name: &[u8], mode: Mode) -> Result<(), Errno> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {}
        Ok(_) => {
            remove_tree(parent, name)?;
            rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700))?;
        }
        Err(Errno::NOENT) => rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700))?,
        Err(e) => return Err(e),
    }
    let dir = open_dir(parent, name)?;
    rustix::fs::fchmod(&dir, mode | Mode::RWXU)
}

/// Makes `name` in `parent` a symbolic link to `target`, replacing what was there.
fn symlink(parent: BorrowedFd<'_>, name: &[u8], target: &[u8]) -> Result<(), Errno> {
    let temporary = temporary_name();
    rustix::fs::symlinkat(target, parent, &temporary)?;
    place(parent, &temporary, name)
}

/// Renames `temporary` over `name` in `parent`; a directory in the way is removed first.
fn place(parent: BorrowedFd<'_>, temporary: &[u8], name: &[u8]) -> Result<(), Errno> {
    remove_directory_in_the_way(parent, name)?;
    rustix::fs::renameat(parent, temporary, parent, name)
}

/// Removes the directory at `name`, if that is what is there: an entry of the archive
/// replaces it.
fn remove_directory_in_the_way(parent: BorrowedFd<'_>, name: &[u8]) -> Result<(), Errno> {
    if let Ok(stat) = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            remove_tree(parent, name)?;
        }
    }
    Ok(())
}

/// Copies at most `room` bytes; `None` when `from` has more.
fn copy_at_most(from: &mut impl Read, to: &mut impl Write, room: u64) -> io::Result<Option<u64>> {
    let written = io::copy(&mut from.take(room), to)?;
    if written == room {
        let mut probe = [0u8; 1];
        if from.read(&mut probe)? > 0 {
            return Ok(None);
        }
    }
    Ok(Some(written))
}

/// The names in a directory, sorted (so archives are reproducible), without `.`/`..`.
fn child_names(dir: BorrowedFd<'_>, path: &[u8]) -> Result<Vec<Vec<u8>>, TransferError> {
    let mut names: Vec<_> = list(dir)
        .map_err(|source| TransferError::Io {
            path: if path.is_empty() {
                ".".to_owned()
            } else {
                shown(path)
            },
            source,
        })?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    Ok(names)
}

fn open_root(root: &Path) -> Result<OwnedFd, TransferError> {
    rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| TransferError::Io {
        path: root.display().to_string(),
        source: e.into(),
    })
}

/// A name as shown to people: ASCII, with newlines, escapes and other bytes escaped.
fn shown(name: &[u8]) -> String {
    name.escape_ascii().to_string()
}

fn refused(entry: &str, reason: impl Into<String>) -> TransferError {
    TransferError::Refused {
        entry: entry.to_owned(),
        reason: reason.into(),
    }
}

fn io_error(path: &[u8], errno: Errno) -> TransferError {
    let path = if path.is_empty() {
        ".".to_owned()
    } else {
        shown(path)
    };
    TransferError::Io {
        path,
        source: errno.into(),
    }
}

fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a fifo, left out",
        FileType::Socket => "a socket, left out",
        FileType::CharacterDevice => "a character device, left out",
        FileType::BlockDevice => "a block device, left out",
        _ => "not a file, directory or link, left out",
    }
}

fn describe_tar(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Fifo => "a fifo, left out",
        tar::EntryType::Char => "a character device, left out",
        tar::EntryType::Block => "a block device, left out",
        _ => "an entry type that is not a file, directory or link, left out",
    }
}

/// Why the raw stream was cut, for the error that reports it.
#[derive(Debug, Clone, Copy)]
enum Stop {
    TooLarge,
    Extension(u64),
    /// The stream ended where a header was due, before tar's end marker.
    Truncated,
}

/// The raw archive stream, cut off past `left` bytes; `stopped` tells the caller the
/// stream was cut rather than broken.
struct BoundedReader<R> {
    inner: R,
    left: u64,
    stopped: Rc<Cell<Option<Stop>>>,
}

impl<R: Read> Read for BoundedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.stopped.set(Some(Stop::TooLarge));
            return Err(io::Error::other(
                "the archive stream is larger than the copy's bounds",
            ));
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = self.inner.read(&mut buf[..want])?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// Follows the archive's 512-byte blocks as they pass to the `tar` crate and cuts the
/// stream at a GNU long name or link or a PAX header larger than [`MAX_EXTENSION`],
/// which the crate would otherwise read into memory whole. It tracks what the crate
/// tracks to stay in step: entry sizes (a PAX `size` overrides the next one) and GNU
/// sparse extension blocks.
struct HeaderGuard<R> {
    inner: R,
    stopped: Rc<Cell<Option<Stop>>>,
    /// The block being handed out (a header or sparse extension), and how much of it
    /// is out.
    block: [u8; 512],
    served: usize,
    next: Next,
    /// The size a PAX header set for the next entry.
    pax_size: Option<u64>,
    /// The content of the PAX header being passed, to read its `size`.
    pax: Option<Vec<u8>>,
    /// An all-zero header block passed: tar's end marker, after which the crate reads
    /// no more. A stream that ends before one was cut (an exec lost or stopped).
    ended: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    Header,
    SparseExtension { then: u64 },
    Data { left: u64 },
}

impl<R: Read> HeaderGuard<R> {
    fn new(inner: R, stopped: Rc<Cell<Option<Stop>>>) -> HeaderGuard<R> {
        HeaderGuard {
            inner,
            stopped,
            block: [0; 512],
            served: 512,
            next: Next::Header,
            pax_size: None,
            pax: None,
            ended: false,
        }
    }

    /// Reads the next whole block; `false` at the end of the stream.
    fn fill_block(&mut self) -> io::Result<bool> {
        let mut filled = 0;
        while filled < 512 {
            let read = self.inner.read(&mut self.block[filled..])?;
            if read == 0 {
                // A short block is passed on as it is: the crate reports it.
                if filled == 0 {
                    return Ok(false);
                }
                self.block[filled..].fill(0);
                break;
            }
            filled += read;
        }
        self.served = 0;
        Ok(true)
    }

    /// Reads what a header block says comes after it.
    fn after_header(&mut self) -> io::Result<()> {
        let header = tar::Header::from_byte_slice(&self.block);
        let kind = header.entry_type();
        let extension = kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions();
        let mut size = header.entry_size().unwrap_or(0);
        if !extension {
            size = self.pax_size.take().unwrap_or(size);
        }
        if extension && size > MAX_EXTENSION {
            self.stopped.set(Some(Stop::Extension(size)));
            return Err(io::Error::other("an archive header extension is too large"));
        }
        self.pax = kind.is_pax_local_extensions().then(Vec::new);
        let data = size.div_ceil(512) * 512;
        let sparse_extended = kind == tar::EntryType::GNUSparse && self.block[482] != 0;
        self.next = if sparse_extended {
            Next::SparseExtension { then: data }
        } else {
            Next::Data { left: data }
        };
        Ok(())
    }

    /// The `size` record of a PAX header (`LEN size=VALUE\n` among others).
    fn pax_size(records: &[u8]) -> Option<u64> {
        let mut rest = records;
        while let Some(space) = rest.iter().position(|&b| b == b' ') {
            let length: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
            let record = rest.get(space + 1..length)?;
            if let Some(value) = record.strip_prefix(b"size=") {
                let value = value.strip_suffix(b"\n").unwrap_or(value);
                return std::str::from_utf8(value).ok()?.parse().ok();
            }
            rest = &rest[length..];
        }
        None
    }
}

impl<R: Read> Read for HeaderGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.served < 512 {
                let n = buf.len().min(512 - self.served);
                buf[..n].copy_from_slice(&self.block[self.served..self.served + n]);
                self.served += n;
                return Ok(n);
            }
            match self.next {
                Next::Header => {
                    if !self.fill_block()? {
                        if self.ended {
                            return Ok(0);
                        }
                        self.stopped.set(Some(Stop::Truncated));
                        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                    }
                    if self.block.iter().any(|&b| b != 0) {
                        self.after_header()?;
                    } else {
                        self.ended = true;
                    }
                }
                Next::SparseExtension { then } => {
                    if !self.fill_block()? {
                        return Ok(0);
                    }
                    if self.block[504] == 0 {
                        self.next = Next::Data { left: then };
                    }
                }
                Next::Data { left: 0 } => {
                    if let Some(records) = self.pax.take() {
                        self.pax_size = Self::pax_size(&records);
                    }
                    self.next = Next::Header;
                }
                Next::Data { left } => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let read = self.inner.read(&mut buf[..want])?;
                    if let Some(records) = &mut self.pax {
                        records.extend_from_slice(&buf[..read]);
                    }
                    self.next = Next::Data {
                        left: left - read as u64,
                    };
                    return Ok(read);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each attack is an archive built by hand, header by header (so names the `tar`
    //! crate's writer would refuse get through), unpacked into `root`; `outside`, a
    //! sibling of `root`, is what the attack aims at, and is checked unchanged.

    use std::collections::BTreeMap;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::PathBuf;

    use super::*;

    const ROOMY: Bounds = Bounds {
        max_bytes: 1 << 20,
        max_entries: 1000,
    };

    struct Scene {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        before: BTreeMap<PathBuf, String>,
    }

    impl Scene {
        /// `root` and `outside` side by side; `outside` holds a file and a folder.
        fn new() -> Scene {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("root");
            let outside = dir.path().join("outside");
            std::fs::create_dir(&root).unwrap();
            std::fs::create_dir_all(outside.join("folder")).unwrap();
            std::fs::write(outside.join("passwd"), "root:x:0:0\n").unwrap();
            std::fs::write(outside.join("folder/kept"), "kept\n").unwrap();
            let before = snapshot(&outside);
            Scene {
                _dir: dir,
                root,
                outside,
                before,
            }
        }

        fn unpack(&self, archive: &[u8], bounds: &Bounds) -> Result<Moved, TransferError> {
            unpack(archive, &self.root, bounds).map_err(|stopped| stopped.error)
        }

        fn assert_outside_untouched(&self) {
            assert_eq!(
                snapshot(&self.outside),
                self.before,
                "something outside the root changed"
            );
        }
    }

    /// Every path under `dir` with its kind, mode, size and content (or link target).
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut seen = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(current) = stack.pop() {
            for entry in std::fs::read_dir(&current).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let what = if meta.file_type().is_symlink() {
                    format!("link {:?}", std::fs::read_link(&path).unwrap())
                } else if meta.is_dir() {
                    stack.push(path.clone());
                    format!("dir {:o}", meta.mode())
                } else {
                    format!(
                        "file {:o} {} {:?}",
                        meta.mode(),
                        meta.nlink(),
                        std::fs::read(&path).unwrap()
                    )
                };
                seen.insert(path.strip_prefix(dir).unwrap().to_path_buf(), what);
            }
        }
        seen
    }

    /// An archive written header by header.
    #[derive(Default)]
    struct Forge(Vec<u8>);

    impl Forge {
        fn entry(
            mut self,
            name: &[u8],
            kind: tar::EntryType,
            link: &[u8],
            mode: u32,
            data: &[u8],
        ) -> Forge {
            let mut header = tar::Header::new_gnu();
            header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
            header.as_gnu_mut().unwrap().linkname[..link.len()].copy_from_slice(link);
            header.set_entry_type(kind);
            header.set_mode(mode);
            header.set_size(data.len() as u64);
            header.set_cksum();
            self.0.extend_from_slice(header.as_bytes());
            self.0.extend_from_slice(data);
            self.0.resize(self.0.len().next_multiple_of(512), 0);
            self
        }
        fn file(self, name: &[u8], data: &[u8]) -> Forge {
            self.entry(name, tar::EntryType::Regular, b"", 0o644, data)
        }
        fn dir(self, name: &[u8]) -> Forge {
            self.entry(name, tar::EntryType::Directory, b"", 0o755, b"")
        }
        fn symlink(self, name: &[u8], target: &[u8]) -> Forge {
            self.entry(name, tar::EntryType::Symlink, target, 0o777, b"")
        }
        fn hard_link(self, name: &[u8], target: &[u8]) -> Forge {
            self.entry(name, tar::EntryType::Link, target, 0o644, b"")
        }
        fn done(mut self) -> Vec<u8> {
            self.0.extend_from_slice(&[0; 1024]);
            self.0
        }
    }

    /// The reason `name` (as shown) was left out; the copy itself must have gone on.
    fn refusal(result: Result<Moved, TransferError>, name: &str) -> String {
        let moved = result.unwrap_or_else(|e| panic!("the copy stopped: {e}"));
        match moved.skipped.iter().find(|s| s.path == name) {
            Some(skipped) => skipped.reason.clone(),
            None => panic!("{name:?} was not left out: {:?}", moved.skipped),
        }
    }

    fn shown_skipped(moved: &Moved) -> Vec<String> {
        moved.skipped.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_packed_tree_unpacks_equal_with_links_kept_as_links_and_special_files_left_out() {
        let source = Scene::new();
        let root = &source.root;
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::write(root.join("src/deep/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(root.join("odd\nname\x1b[31m"), "escape\n").unwrap();
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        std::os::unix::fs::symlink(&source.outside, root.join("to-outside")).unwrap();
        std::os::unix::fs::symlink("src/deep", root.join("relative")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();

        let mut archive = Vec::new();
        let packed = pack(root, &mut archive, &ROOMY).unwrap();
        assert_eq!(packed.files, 5, "{packed:?}");
        assert_eq!(packed.bytes, 13 + 7 + 10);
        assert_eq!(shown_skipped(&packed), ["fifo: a fifo, left out"]);

        let target = Scene::new();
        let unpacked = target.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(
            (unpacked.files, unpacked.bytes),
            (packed.files, packed.bytes)
        );
        std::fs::remove_file(root.join("fifo")).unwrap();
        let mut expected = snapshot(root);
        // The setuid bit is dropped.
        expected.insert(
            "run.sh".into(),
            format!("file 100755 1 {:?}", b"#!/bin/sh\n"),
        );
        assert_eq!(snapshot(&target.root), expected);
        assert_eq!(
            std::fs::read_link(target.root.join("to-outside")).unwrap(),
            source.outside
        );
        target.assert_outside_untouched();
    }

    #[test]
    fn pack_stores_a_link_to_outside_as_a_link_and_never_reads_through_it() {
        let scene = Scene::new();
        std::os::unix::fs::symlink(&scene.outside, scene.root.join("escape")).unwrap();
        std::os::unix::fs::symlink(scene.outside.join("passwd"), scene.root.join("passwd"))
            .unwrap();
        let mut archive = Vec::new();
        let moved = pack(&scene.root, &mut archive, &ROOMY).unwrap();
        assert_eq!((moved.files, moved.bytes), (2, 0));
        let mut entries = tar::Archive::new(archive.as_slice());
        for entry in entries.entries().unwrap() {
            let entry = entry.unwrap();
            assert_eq!(entry.header().entry_type(), tar::EntryType::Symlink);
            assert_eq!(entry.size(), 0);
        }
        assert!(
            !archive.windows(4).any(|w| w == b"root"),
            "the archive holds the content behind a link"
        );
    }

    #[test]
    fn pack_stops_past_its_bounds() {
        let scene = Scene::new();
        std::fs::write(scene.root.join("a"), vec![1; 600]).unwrap();
        std::fs::write(scene.root.join("b"), vec![1; 600]).unwrap();
        let bytes = pack(
            &scene.root,
            io::sink(),
            &Bounds {
                max_bytes: 1000,
                max_entries: 10,
            },
        );
        assert!(
            matches!(bytes, Err(TransferError::TooManyBytes { ref entry, limit: 1000 }) if entry == "b"),
            "{bytes:?}"
        );
        let entries = pack(
            &scene.root,
            io::sink(),
            &Bounds {
                max_bytes: 10_000,
                max_entries: 1,
            },
        );
        assert!(
            matches!(entries, Err(TransferError::TooManyEntries { limit: 1 })),
            "{entries:?}"
        );
    }

    #[test]
    fn unpack_makes_the_root_equal_to_the_archive() {
        let scene = Scene::new();
        std::fs::create_dir_all(scene.root.join("gone/deeper")).unwrap();
        std::fs::write(scene.root.join("gone/deeper/file"), "old").unwrap();
        std::fs::write(scene.root.join("changed"), "old").unwrap();
        std::fs::write(scene.root.join("deleted"), "old").unwrap();
        std::fs::create_dir(scene.root.join("was-a-dir")).unwrap();
        std::fs::write(scene.root.join("was-a-dir/inner"), "old").unwrap();
        // A link the workspace held, to a folder outside: removed, never followed.
        std::os::unix::fs::symlink(scene.outside.join("folder"), scene.root.join("link-out"))
            .unwrap();
        let archive = Forge::default()
            .file(b"changed", b"new")
            .file(b"was-a-dir", b"now a file")
            .file(b"added/nested", b"fresh")
            .done();
        let moved = scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!((moved.files, moved.bytes), (3, 3 + 10 + 5));
        let expected: BTreeMap<PathBuf, String> = [
            ("added", "dir 40755".to_owned()),
            ("added/nested", format!("file 100644 1 {:?}", b"fresh")),
            ("changed", format!("file 100644 1 {:?}", b"new")),
            ("was-a-dir", format!("file 100644 1 {:?}", b"now a file")),
        ]
        .into_iter()
        .map(|(path, what)| (PathBuf::from(path), what))
        .collect();
        assert_eq!(snapshot(&scene.root), expected);
        scene.assert_outside_untouched();
    }

    #[test]
    fn absolute_names_and_dot_dot_are_refused() {
        let scene = Scene::new();
        let absolute = format!("{}/passwd", scene.outside.display());
        let archive = Forge::default()
            .file(absolute.as_bytes(), b"owned")
            .file(b"after", b"kept")
            .done();
        let result = scene.unpack(&archive, &ROOMY);
        assert!(refusal(result, &absolute).contains("an absolute name"));
        // The copy went on past the refused entry.
        assert_eq!(std::fs::read(scene.root.join("after")).unwrap(), b"kept");
        for name in [
            &b"../outside/passwd"[..],
            b"a/../../outside/passwd",
            b"./..",
        ] {
            let archive = Forge::default().file(name, b"owned").done();
            let shown = String::from_utf8(name.to_vec()).unwrap();
            assert!(refusal(scene.unpack(&archive, &ROOMY), &shown).contains("`..`"));
        }
        scene.assert_outside_untouched();
    }

    #[test]
    fn a_link_planted_by_the_archive_is_never_written_through() {
        let scene = Scene::new();
        let outside = scene.outside.as_os_str().as_bytes();
        // A link to a folder outside, then a file under it.
        let archive = Forge::default()
            .symlink(b"evil", outside)
            .file(b"evil/passwd", b"owned")
            .done();
        let message = refusal(scene.unpack(&archive, &ROOMY), "evil/passwd");
        assert!(message.contains("`evil` is not a directory"), "{message}");
        // A link to a file outside, then a file of the same name: the link is replaced.
        let target = scene.outside.join("passwd");
        let archive = Forge::default()
            .symlink(b"passwd", target.as_os_str().as_bytes())
            .file(b"passwd", b"owned")
            .done();
        scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(std::fs::read(scene.root.join("passwd")).unwrap(), b"owned");
        assert!(!std::fs::symlink_metadata(scene.root.join("passwd"))
            .unwrap()
            .is_symlink());
        // A link to a folder outside, then a directory entry of the same name.
        let archive = Forge::default()
            .symlink(b"d", outside)
            .dir(b"d")
            .file(b"d/x", b"inside")
            .done();
        scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(std::fs::read(scene.root.join("d/x")).unwrap(), b"inside");
        scene.assert_outside_untouched();
    }

    #[test]
    fn a_parent_swapped_for_a_link_between_entries_is_not_written_through() {
        let scene = Scene::new();
        let archive = Forge::default()
            .dir(b"d")
            .file(b"d/a", b"first")
            .symlink(b"d", scene.outside.as_os_str().as_bytes())
            .file(b"d/passwd", b"owned")
            .file(b"z", b"last")
            .done();
        let message = refusal(scene.unpack(&archive, &ROOMY), "d/passwd");
        assert!(message.contains("`d` is not a directory"), "{message}");
        assert_eq!(std::fs::read(scene.root.join("z")).unwrap(), b"last");
        scene.assert_outside_untouched();
    }

    #[test]
    fn a_link_the_workspace_held_before_is_not_a_way_out() {
        let scene = Scene::new();
        std::os::unix::fs::symlink(&scene.outside, scene.root.join("d")).unwrap();
        let archive = Forge::default().file(b"d/passwd", b"owned").done();
        assert!(refusal(scene.unpack(&archive, &ROOMY), "d/passwd").contains("not a directory"));
        scene.assert_outside_untouched();
    }

    #[test]
    fn hard_links_reach_only_files_of_the_same_archive() {
        let scene = Scene::new();
        let absolute = scene.outside.join("passwd");
        let archive = Forge::default()
            .hard_link(b"h", absolute.as_os_str().as_bytes())
            .done();
        assert!(refusal(scene.unpack(&archive, &ROOMY), "h").contains("absolute"));
        let archive = Forge::default()
            .hard_link(b"h", b"../outside/passwd")
            .done();
        assert!(refusal(scene.unpack(&archive, &ROOMY), "h").contains("`..`"));
        // Through a link planted first.
        let archive = Forge::default()
            .symlink(b"out", scene.outside.as_os_str().as_bytes())
            .hard_link(b"h", b"out/passwd")
            .done();
        assert!(refusal(scene.unpack(&archive, &ROOMY), "h").contains("not a file of this archive"));
        // To a file the workspace held before but the archive does not.
        std::fs::write(scene.root.join("host-file"), "host").unwrap();
        let archive = Forge::default().hard_link(b"h", b"host-file").done();
        assert!(refusal(scene.unpack(&archive, &ROOMY), "h").contains("not a file of this archive"));
        // Within the archive it works, and writing the link's name later replaces it
        // rather than writing through it.
        let archive = Forge::default()
            .file(b"a", b"original")
            .hard_link(b"b", b"a")
            .file(b"b", b"rewritten")
            .done();
        scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(std::fs::read(scene.root.join("a")).unwrap(), b"original");
        assert_eq!(std::fs::read(scene.root.join("b")).unwrap(), b"rewritten");
        scene.assert_outside_untouched();
    }

    #[test]
    fn devices_and_fifos_are_left_out_and_setuid_bits_dropped() {
        let scene = Scene::new();
        let archive = Forge::default()
            .entry(b"null", tar::EntryType::Char, b"", 0o666, b"")
            .entry(b"disk", tar::EntryType::Block, b"", 0o666, b"")
            .entry(b"pipe", tar::EntryType::Fifo, b"", 0o666, b"")
            .entry(
                b"suid",
                tar::EntryType::Regular,
                b"",
                0o6755,
                b"#!/bin/sh\n",
            )
            .entry(b"sticky", tar::EntryType::Directory, b"", 0o1777, b"")
            .done();
        let moved = scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(
            shown_skipped(&moved),
            [
                "null: a character device, left out",
                "disk: a block device, left out",
                "pipe: a fifo, left out"
            ]
        );
        let names: Vec<_> = snapshot(&scene.root).into_iter().collect();
        assert_eq!(
            names,
            [
                (PathBuf::from("sticky"), "dir 40777".to_owned()),
                (
                    PathBuf::from("suid"),
                    format!("file 100755 1 {:?}", b"#!/bin/sh\n")
                ),
            ]
        );
    }

    #[test]
    fn names_with_newlines_and_escapes_are_written_as_they_are_and_shown_escaped() {
        let scene = Scene::new();
        let archive = Forge::default()
            .file(b"line\nbreak", b"1")
            .file(b"\x1b]0;title\x07", b"2")
            .entry(b"fifo\n[ok] forged", tar::EntryType::Fifo, b"", 0o644, b"")
            .done();
        let moved = scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(std::fs::read(scene.root.join("line\nbreak")).unwrap(), b"1");
        assert_eq!(
            std::fs::read(scene.root.join("\x1b]0;title\x07")).unwrap(),
            b"2"
        );
        assert_eq!(
            shown_skipped(&moved),
            ["fifo\\n[ok] forged: a fifo, left out"]
        );
        let archive = Forge::default().file(b"../\nforged\x1b", b"x").done();
        let moved = scene.unpack(&archive, &ROOMY).unwrap();
        let line = shown_skipped(&moved).concat();
        assert!(line.contains("`..`"), "{line:?}");
        assert!(!line.contains('\n') && !line.contains('\x1b'), "{line:?}");
    }

    #[test]
    fn a_huge_file_is_left_out_whole_and_the_files_after_it_come_back() {
        let scene = Scene::new();
        // What the host held at the huge file's name stays: it is not removed on
        // account of an entry left out.
        std::fs::write(scene.root.join("huge"), "the host's").unwrap();
        let archive = Forge::default()
            .file(b"small", b"12345")
            .file(b"huge", &[7; 5000])
            .file(b"later", b"678")
            .done();
        let result = scene.unpack(
            &archive,
            &Bounds {
                max_bytes: 1000,
                max_entries: 10,
            },
        );
        let reason = refusal(result, "huge");
        assert!(
            reason.contains("larger than") && reason.contains("1000"),
            "{reason}"
        );
        assert_eq!(
            std::fs::read(scene.root.join("huge")).unwrap(),
            b"the host's"
        );
        let left: Vec<_> = snapshot(&scene.root).into_keys().collect();
        assert_eq!(
            left,
            [
                PathBuf::from("huge"),
                PathBuf::from("later"),
                PathBuf::from("small")
            ]
        );
    }

    #[test]
    fn a_sparse_file_is_counted_by_the_bytes_written() {
        let scene = Scene::new();
        // A GNU sparse entry: 512 bytes in the stream, 1 GiB once expanded.
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..6].copy_from_slice(b"sparse");
        header.set_entry_type(tar::EntryType::GNUSparse);
        header.set_mode(0o644);
        header.set_size(512);
        let gnu = header.as_gnu_mut().unwrap();
        let octal = |value: u64| format!("{value:011o}\0").into_bytes();
        gnu.realsize.copy_from_slice(&octal(1 << 30));
        gnu.sparse[0]
            .offset
            .copy_from_slice(&octal((1 << 30) - 512));
        gnu.sparse[0].numbytes.copy_from_slice(&octal(512));
        header.set_cksum();
        let mut archive = header.as_bytes().to_vec();
        archive.extend_from_slice(&[9; 512]);
        archive.extend_from_slice(&[0; 1024]);
        let bounds = Bounds {
            max_bytes: 1 << 20,
            max_entries: 10,
        };
        let result = scene.unpack(&archive, &bounds);
        assert!(refusal(result, "sparse").contains("larger than"));
        assert!(snapshot(&scene.root).is_empty());
    }

    #[test]
    fn too_many_entries_stop_the_copy() {
        let scene = Scene::new();
        let mut forge = Forge::default();
        for n in 0..20 {
            forge = forge.file(format!("f{n}").as_bytes(), b"x");
        }
        let result = scene.unpack(
            &forge.done(),
            &Bounds {
                max_bytes: 1000,
                max_entries: 10,
            },
        );
        assert!(
            matches!(result, Err(TransferError::TooManyEntries { limit: 10 })),
            "{result:?}"
        );
    }

    #[test]
    fn a_giant_long_name_header_is_refused_before_it_is_read() {
        let scene = Scene::new();
        // A GNU long name of 4 MiB: the `tar` crate would hold all of it in memory.
        let archive = Forge::default()
            .entry(
                b"././@LongLink",
                tar::EntryType::GNULongName,
                b"",
                0o644,
                &vec![b'a'; 4 << 20],
            )
            .file(b"x", b"x")
            .done();
        let result = scene.unpack(&archive, &ROOMY);
        assert!(
            matches!(result, Err(TransferError::Extension { size }) if size == 4 << 20),
            "{result:?}"
        );
        assert!(snapshot(&scene.root).is_empty());
    }

    #[test]
    fn long_names_and_pax_sizes_keep_the_guard_in_step() {
        let scene = Scene::new();
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(120));
        std::fs::create_dir(scene.root.join("d".repeat(120))).unwrap();
        std::fs::write(scene.root.join(&long), "long").unwrap();
        let mut packed = Vec::new();
        pack(&scene.root, &mut packed, &ROOMY).unwrap();
        packed.truncate(packed.len() - 1024);
        // A PAX header whose `size` (5) overrides the next header's (0).
        let record = |key_value: &str| {
            let mut length = key_value.len() + 3;
            while format!("{length} {key_value}\n").len() != length {
                length += 1;
            }
            format!("{length} {key_value}\n")
        };
        let pax = record("size=5");
        let mut forged = Forge(packed)
            .entry(b"pax", tar::EntryType::XHeader, b"", 0o644, pax.as_bytes())
            .file(b"p", b"");
        forged.0.extend_from_slice(b"hello");
        forged.0.resize(forged.0.len().next_multiple_of(512), 0);
        let archive = forged.file(b"q", b"world").done();
        let target = Scene::new();
        target.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(std::fs::read(target.root.join(&long)).unwrap(), b"long");
        assert_eq!(std::fs::read(target.root.join("p")).unwrap(), b"hello");
        assert_eq!(std::fs::read(target.root.join("q")).unwrap(), b"world");
    }

    #[test]
    fn entries_refused_early_leave_every_later_file_coming_back() {
        // `ln link hard` in the pod, a fifo, a hard link to the fifo, a name with
        // `..`: each early in the archive, ordinary files after each.
        let scene = Scene::new();
        std::fs::write(scene.root.join("pipe"), "the host's").unwrap();
        std::fs::write(scene.root.join("deleted-in-pod"), "old").unwrap();
        let archive = Forge::default()
            .symlink(b"link", b"/etc/passwd")
            .hard_link(b"hard", b"link")
            .file(b"a.txt", b"a")
            .entry(b"pipe", tar::EntryType::Fifo, b"", 0o644, b"")
            .hard_link(b"pipe-again", b"pipe")
            .file(b"b.txt", b"b")
            .file(b"../escape", b"x")
            .dir(b"sub")
            .file(b"sub/c.txt", b"c")
            .done();
        let moved = scene.unpack(&archive, &ROOMY).unwrap();
        assert_eq!(
            shown_skipped(&moved),
            [
                "pipe: a fifo, left out",
                "pipe-again: a hard link to `pipe`, which is not a file of this archive",
                "../escape: a name with `..`",
            ]
        );
        let expected: BTreeMap<PathBuf, String> = [
            ("a.txt", format!("file 100644 1 {:?}", b"a")),
            ("b.txt", format!("file 100644 1 {:?}", b"b")),
            ("hard", "link \"/etc/passwd\"".to_owned()),
            ("link", "link \"/etc/passwd\"".to_owned()),
            // Kept: the pod's fifo could not replace it.
            ("pipe", format!("file 100644 1 {:?}", b"the host's")),
            ("sub", "dir 40755".to_owned()),
            ("sub/c.txt", format!("file 100644 1 {:?}", b"c")),
        ]
        .into_iter()
        .map(|(path, what)| (PathBuf::from(path), what))
        .collect();
        assert_eq!(snapshot(&scene.root), expected);
        scene.assert_outside_untouched();
    }

    #[test]
    fn a_stream_cut_before_the_end_marker_stops_the_copy_and_removes_nothing() {
        let scene = Scene::new();
        std::fs::write(scene.root.join("not-yet-sent"), "kept").unwrap();
        let mut archive = Forge::default()
            .entry(b"pipe", tar::EntryType::Fifo, b"", 0o644, b"")
            .file(b"a.txt", b"a")
            .done();
        archive.truncate(archive.len() - 1024);
        let Err(stopped) = unpack(archive.as_slice(), &scene.root, &ROOMY) else {
            panic!("a cut stream passed for a whole archive")
        };
        assert!(
            matches!(stopped.error, TransferError::Truncated),
            "{:?}",
            stopped.error
        );
        // What was left out before the stop is still said.
        assert_eq!(shown_skipped(&stopped.moved), ["pipe: a fifo, left out"]);
        assert_eq!(
            std::fs::read(scene.root.join("not-yet-sent")).unwrap(),
            b"kept"
        );
        assert_eq!(std::fs::read(scene.root.join("a.txt")).unwrap(), b"a");
    }

    #[test]
    fn a_stream_that_is_not_tar_is_a_clear_error() {
        let scene = Scene::new();
        std::fs::write(scene.root.join("kept"), "kept").unwrap();
        let result = scene.unpack(&[b'x'; 700], &ROOMY);
        assert!(
            matches!(result, Err(TransferError::Archive { .. })),
            "{result:?}"
        );
        assert_eq!(std::fs::read(scene.root.join("kept")).unwrap(), b"kept");
    }
}
