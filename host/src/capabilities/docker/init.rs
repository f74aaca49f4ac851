//! The host's seccomp filter inside containers, on top of the engine's own profile.
//!
//! Docker 20.10's default profile lets a container open `AF_VSOCK` sockets (a
//! connection to the hypervisor, CID 2, gets through whatever the network mode),
//! `io_uring`, every netlink protocol, and every 32-bit call, `socketcall` included,
//! whose arguments no filter can read. A profile of our own (`seccomp=<json>`) would
//! replace the engine's default, so it would have to carry a copy of it, frozen at the
//! version copied, weaker than what a newer engine refuses. Seccomp filters stack
//! instead: the container keeps the engine's default, whatever it is, and every process
//! in it also runs under the subprocess sandbox's programs ([`seccomp`]), the socket
//! families of its network mode included.
//!
//! The sandbox init loads them: it is bound read-only at [`PATH_IN_CONTAINER`], a
//! mount point that cannot be renamed, removed or written, so the agent cannot put
//! another program in its place. It is the container's first process (`--reap`, in
//! place of the engine's tini: it forwards the stop signal and reaps orphans), so the
//! main process runs filtered, and every exec starts through it.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::capabilities::process::{landlock, seccomp};
use crate::runtime::bindings::types::{Error, NetworkMode};

/// Where the init appears in every container.
pub const PATH_IN_CONTAINER: &str = "/.agentgate-init";

/// `argv` started through the init with the programs for `network`; with `reap` the
/// init stays as its parent.
pub fn wrap(argv: &[String], network: NetworkMode, reap: bool) -> Result<Vec<String>, Error> {
    wrap_fence(argv, seccomp::Sockets::for_network(network), reap, None)
}

/// Where the egress proxy's socket appears in a container of a run with
/// `sandbox.egress`.
pub const EGRESS_SOCKET_IN_CONTAINER: &str = "/.agentgate-egress.sock";

/// `argv` in a container of a run with `sandbox.egress` (network `none`): IP sockets
/// allowed, since loopback is where the relays listen. With `relays` (the allowlist)
/// the init starts them first; only the container's first process does.
pub fn wrap_for_egress(
    argv: &[String],
    reap: bool,
    relays: Option<&[String]>,
) -> Result<Vec<String>, Error> {
    let egress = relays.map(|allow| landlock::Egress {
        socket: EGRESS_SOCKET_IN_CONTAINER.into(),
        allow: allow.to_vec(),
    });
    wrap_fence(argv, seccomp::Sockets::Network, reap, egress)
}

fn wrap_fence(
    argv: &[String],
    sockets: seccomp::Sockets,
    reap: bool,
    egress: Option<landlock::Egress>,
) -> Result<Vec<String>, Error> {
    let fence = landlock::Fence {
        seccomp: seccomp::programs(sockets)?,
        reap,
        egress,
        command: argv.iter().map(Into::into).collect(),
        ..Default::default()
    };
    let mut args: Vec<String> = fence
        .to_args()
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args[0] = PATH_IN_CONTAINER.into();
    Ok(args)
}

/// The init as a host file the engine can bind: in the system's temporary folder (a
/// path under `AGENTGATE_HOME` would show in the container's mount table), named by
/// its contents and the user, written once, mode 0555. An existing file is used only
/// when it is a regular file of this user's, writable by nobody, with exactly the
/// init's bytes; anything else there is refused, never used.
pub fn host_copy() -> Result<PathBuf, Error> {
    let binary = landlock::init_binary();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let digest = blake3::hash(binary).to_hex();
    let path = std::env::temp_dir().join(format!("agentgate-sandbox-init-{uid}-{}", &digest[..16]));
    if !path.exists() {
        write_new(&path, binary).map_err(|e| unusable(&path, &e.to_string()))?;
    }
    check(&path, binary, uid).map_err(|why| unusable(&path, &why))?;
    Ok(path)
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

fn check(path: &Path, expected: &[u8], uid: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != uid || meta.mode() & 0o222 != 0 {
        return Err(format!(
            "it belongs to uid {} with mode {:o}; expected uid {uid}, writable by nobody",
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    let found = std::fs::read(path).map_err(|e| e.to_string())?;
    if found != expected {
        return Err("its contents are not agentgate's sandbox init".into());
    }
    Ok(())
}

fn unusable(path: &Path, why: &str) -> Error {
    Error::Unavailable(format!(
        "cannot place the sandbox init at {} for the container to run: {why}; remove that \
         file or set TMPDIR to a folder of your own",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn commands_start_through_the_init_with_the_programs_of_their_network() {
        let argv = vec!["sh".to_string(), "-c".to_string(), "make".to_string()];
        let none = wrap(&argv, NetworkMode::None, false).unwrap();
        assert_eq!(none[0], PATH_IN_CONTAINER);
        assert!(none.ends_with(&["--".into(), "sh".into(), "-c".into(), "make".into()]));
        assert!(!none.contains(&"--reap".to_string()));
        assert!(!none.contains(&"--read".to_string()), "no Landlock fence");
        let programs = |args: &[String]| args.iter().filter(|a| *a == "--seccomp").count();
        assert_eq!(
            programs(&none),
            if cfg!(target_arch = "x86_64") { 4 } else { 3 }
        );
        let bridge = wrap(&argv, NetworkMode::Bridge, true).unwrap();
        assert!(bridge.contains(&"--reap".to_string()));
        assert_ne!(
            none,
            bridge[..none.len() + 1]
                .iter()
                .filter(|a| *a != "--reap")
                .cloned()
                .collect::<Vec<_>>()
        );
        let parsed = landlock::Fence::parse(bridge[1..].iter().map(Into::into)).unwrap();
        assert_eq!(parsed.command.len(), 3);
    }

    #[test]
    fn the_host_copy_is_the_init_and_a_tampered_one_is_refused() {
        let path = host_copy().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), landlock::init_binary());
        assert_eq!(host_copy().unwrap(), path, "written once");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o555);

        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("init");
        std::fs::write(&other, b"not the init").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o555)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert!(check(&other, landlock::init_binary(), uid)
            .unwrap_err()
            .contains("contents"));
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check(&other, b"not the init", uid)
            .unwrap_err()
            .contains("writable"));
        assert!(check(&other, b"not the init", uid + 1).is_err());
    }
}
