//! Reading and writing beneath a folder whose contents someone else controls: the
//! workspace after an agent had it, a pod's archive coming back, a workspace's `.git`,
//! a run folder that may have been tampered with. Every such access in the host goes
//! through this module, so the rules below are written, and audited, once.
//!
//! The attacks it defeats, and how:
//!
//! - **A symlink swapped in, at any component, at any time** (`rm -rf src; ln -s /etc
//!   src` while the host walks, `ln -s /proc/self p`): nothing here opens a path by
//!   name from the root. Directories are opened one component at a time relative to
//!   their parent's handle with `O_NOFOLLOW | O_DIRECTORY` ([`open_dir`]), and a path
//!   below a root is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS)` ([`open_beneath`]): the kernel refuses any link on the
//!   way, parents included, and `..` out of the root. Where the kernel has no
//!   `openat2` the same path is opened one component at a time without following a
//!   link, which refuses the same paths.
//! - **A directory replaced mid-walk** ([`walk`]): each directory entered is checked
//!   (device and inode, [`Identity`]) to be the one listed, and the walk climbs back
//!   through `..` only to the directory it came from, else it stops.
//! - **FIFOs, sockets and devices in a file's place**: a file is opened non-blocking
//!   and without taking a terminal, then checked on the opened descriptor to be a
//!   regular file, and (when listed before) the very file listed ([`open_regular`]).
//!   A FIFO neither blocks the host nor is read.
//! - **Sparse or huge files**: callers read through bounds (a budget of bytes, a
//!   deadline, [`Folder::read`]'s `max`, the archive's [`archive::Bounds`]) counted on
//!   what is read or written, never on what a header or `st_size` claims.
//! - **Writing through what is at a name** (a link, a hard link to a host file, a
//!   FIFO): a file is written to a fresh name created with `O_EXCL | O_NOFOLLOW` and
//!   renamed over the name ([`NewFile`]), so whatever was there is replaced, never
//!   written through.
//! - **Hostile archives** ([`archive`]): absolute names, `..`, NUL bytes, hard links to
//!   anything not written by the same archive, special files, setuid bits, giant
//!   headers and streams cut short; odd names (newlines, escapes) are written as they
//!   are and shown escaped, so they cannot forge a line of a log.
//!
//! Nothing here knows a pod, a repository or a run: callers say what a refusal means.
//! The walk's messages speak of "the workspace", the tree it reads for the change set.

pub(crate) mod archive;
mod open;
mod walk;
mod write;

#[cfg(test)]
pub use open::DIR_FLAGS;
pub use open::{
    identity, list, open_beneath, open_dir, open_regular, read_link, stat_entry, Folder, Identity,
    OpenError,
};
pub use walk::{walk, Visitor, WalkBounds, WalkError};
pub use write::{make_dir, NewFile};
