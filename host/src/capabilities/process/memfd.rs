//! Sealed memfds: how the host hands bubblewrap data that nobody may change.
//!
//! bubblewrap reads its options, seccomp programs and name files from descriptors. A
//! memfd holds them in memory only, and its seals (no write, grow or shrink, no further
//! seals) mean that what bubblewrap reads is exactly what the host wrote; no file on
//! disk can be swapped in between.

use std::ffi::CStr;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A close-on-exec memfd holding `data`, sealed, positioned at the start.
pub fn sealed(name: &CStr, data: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: memfd_create with a valid C string; the fd is owned at once.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(data)?;
    file.seek(SeekFrom::Start(0))?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a valid descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn it_reads_from_the_start_and_nothing_can_write() {
        let memfd = sealed(c"agentgate-test", b"payload").unwrap();
        let path = format!("/proc/self/fd/{}", memfd.as_raw_fd());
        let mut text = String::new();
        std::fs::File::from(memfd.try_clone().unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "payload");
        let error = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut file| file.write_all(b"changed"))
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
    }
}
