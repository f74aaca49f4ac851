//! The sandbox init as a file on the host, which sandboxes bind rather than copy.
//!
//! Every sealed process and every container starts through the init
//! ([`super::landlock`]). Copying its 1.7 MB into each sandbox (bubblewrap's
//! `--ro-bind-data` writes it to the sandbox's tmpfs) cost more than the rest of the
//! view; a read-only bind of one host file costs a mount. The file is in the system's
//! temporary folder (a path under `AGENTGATE_HOME` would show in the sandbox's mount
//! table), named by its contents and the user, written once, mode 0555. An existing
//! file is used only when it is a regular file of this user's, writable by nobody,
//! with exactly the init's bytes; anything else there is refused, never used.
//!
//! The check reads the file through the descriptor that is then bound
//! (`--ro-bind-fd`), so a file swapped in at that path after the check is not what
//! a sandbox gets. The descriptor is kept for the process's life; each later use
//! checks that its inode changed in nothing since (`ctime` moves with any write or
//! `chmod`), which costs one `fstat` instead of reading the file again.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::wit::types::Error;

/// The checked init file, and the descriptor it was checked through.
#[derive(Debug)]
pub struct InitFile {
    pub path: PathBuf,
    file: std::fs::File,
    /// `(ctime seconds, ctime nanoseconds)` when the contents were checked.
    checked_at: (i64, i64),
}

impl InitFile {
    /// A descriptor of the file whose contents were checked, for `--ro-bind-fd`.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The init file, checked; once per process, then with an `fstat` per call.
pub fn init_file() -> Result<std::sync::Arc<InitFile>, Error> {
    static CHECKED: Mutex<Option<std::sync::Arc<InitFile>>> = Mutex::new(None);
    let mut checked = CHECKED.lock().unwrap();
    if let Some(file) = checked.as_ref() {
        if unchanged(file) {
            return Ok(file.clone());
        }
    }
    let file = std::sync::Arc::new(place(super::landlock::init_binary())?);
    *checked = Some(file.clone());
    Ok(file)
}

/// Whether the checked file's inode is as it was when its contents were checked.
fn unchanged(file: &InitFile) -> bool {
    file.file.metadata().is_ok_and(|meta| {
        (meta.ctime(), meta.ctime_nsec()) == file.checked_at && meta.mode() & 0o222 == 0
    })
}

/// What the file is named by: a key of the embedded init's contents, computed at build
/// time (see `host/build.rs`).
const INIT_KEY: &str = env!("AGENTGATE_SANDBOX_INIT_KEY");

/// Writes the init when it is missing, then checks what is there.
fn place(binary: &[u8]) -> Result<InitFile, Error> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let path = std::env::temp_dir().join(format!("agentgate-sandbox-init-{uid}-{INIT_KEY}"));
    if !path.exists() {
        write_new(&path, binary).map_err(|e| unusable(&path, &e))?;
    }
    open_checked(&path, binary, uid).map_err(|why| unusable(&path, &why))
}

/// Writes `bytes` beside `path` and links it there, so no reader sees half of it and
/// a file another run linked first is kept.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let partial = path.with_extension(format!("{}.partial", uuid::Uuid::now_v7().simple()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o555)
        .open(&partial)
        .and_then(|mut file| file.write_all(bytes));
    let linked = written.and_then(|()| match std::fs::hard_link(&partial, path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&partial);
    linked
}

/// Why the file at the init's path is not used.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is not a regular file")]
    NotRegular,
    #[error(
        "it belongs to uid {owner} with mode {mode:o}; expected uid {uid}, writable by nobody"
    )]
    Exposed { owner: u32, mode: u32, uid: u32 },
    #[error("its contents are not agentgate's sandbox init")]
    NotTheInit,
}

/// Opens `path` (never through a symlink) and checks the file it opened: regular,
/// `uid`'s, writable by nobody, holding exactly `expected`.
fn open_checked(path: &Path, expected: &[u8], uid: u32) -> Result<InitFile, Unusable> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(Unusable::NotRegular);
    }
    if meta.uid() != uid || meta.mode() & 0o222 != 0 {
        return Err(Unusable::Exposed {
            owner: meta.uid(),
            mode: meta.mode() & 0o7777,
            uid,
        });
    }
    if !holds_exactly(&mut file, expected)? {
        return Err(Unusable::NotTheInit);
    }
    Ok(InitFile {
        path: path.to_path_buf(),
        file,
        checked_at: (meta.ctime(), meta.ctime_nsec()),
    })
}

/// Whether `file` (read from its start) holds exactly `expected`. Compared a chunk at a
/// time: reading the whole file into one buffer first faults in 1.7 MB of fresh
/// memory on every start.
fn holds_exactly(file: &mut std::fs::File, expected: &[u8]) -> std::io::Result<bool> {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut rest = expected;
    loop {
        let read = file.read(&mut chunk)?;
        if read == 0 {
            return Ok(rest.is_empty());
        }
        if read > rest.len() || chunk[..read] != rest[..read] {
            return Ok(false);
        }
        rest = &rest[read..];
    }
}

/// The contract's error (text across the plugin boundary) for an init not placed.
fn unusable(path: &Path, why: &dyn std::fmt::Display) -> Error {
    Error::Unavailable(format!(
        "cannot place the sandbox init at {} for the sandbox to run: {why}; remove that \
         file or set TMPDIR to a folder of your own",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_host_copy_is_the_init_and_a_tampered_one_is_refused() {
        let file = init_file().unwrap();
        assert_eq!(
            std::fs::read(&file.path).unwrap(),
            super::super::landlock::init_binary()
        );
        assert_eq!(init_file().unwrap().path, file.path, "written once");
        let meta = std::fs::metadata(&file.path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o555);
        // The descriptor is the checked file's.
        let via_fd = std::fs::metadata(format!("/proc/self/fd/{}", file.fd())).unwrap();
        assert_eq!((via_fd.dev(), via_fd.ino()), (meta.dev(), meta.ino()));

        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("init");
        std::fs::write(&other, b"not the init").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o555)).unwrap();
        let uid = unsafe { libc::geteuid() };
        let init = super::super::landlock::init_binary();
        assert!(open_checked(&other, init, uid)
            .unwrap_err()
            .to_string()
            .contains("contents"));
        let checked = open_checked(&other, b"not the init", uid).unwrap();
        assert!(unchanged(&checked));
        // A change of mode (and so a chance to write) since the check is seen.
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!unchanged(&checked));
        assert!(open_checked(&other, b"not the init", uid)
            .unwrap_err()
            .to_string()
            .contains("writable"));
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o555)).unwrap();
        assert!(open_checked(&other, b"not the init", uid + 1).is_err());
        // A copy cut short, or with anything after the init, is not the init.
        for (name, bytes) in [
            ("short", &init[..init.len() - 1]),
            ("long", &[init, b"x"].concat()[..]),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)).unwrap();
            assert!(
                open_checked(&path, init, uid)
                    .unwrap_err()
                    .to_string()
                    .contains("contents"),
                "{name}"
            );
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert!(open_checked(&link, b"not the init", uid).is_err());
    }
}
