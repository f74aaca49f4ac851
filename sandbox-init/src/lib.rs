//! The sandbox init: the first program that runs inside a sealed sandbox.
//!
//! Landlock must be raised by the sandboxed process itself, after bubblewrap has built
//! the mount tree (a Landlocked process may not mount). So bubblewrap runs this small
//! program first: it restricts itself to exactly the view, then execs the command.
//!
//! In a Docker container it adds the host's seccomp programs on top of the engine's own
//! profile (filters stack; the engine's default stays in force): every command the host
//! runs there starts through it, and as the container's first process it stays to reap
//! and forward signals (`--reap`), so no process of the container runs without them.
//! It is linked statically, so it runs in any image.
//!
//! It is a crate of its own so that what runs inside every sandbox is a few hundred
//! kilobytes that start in well under a millisecond, not the whole host binary. The
//! host builds it (see `host/build.rs`), embeds it, and hands it to bubblewrap; this
//! library is the one place that defines its arguments, for both sides.

pub mod relay;

use std::ffi::OsString;
use std::path::PathBuf;

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    ABI,
};

/// Where the init is placed inside the view.
pub const PATH_IN_SANDBOX: &str = "/.agentgate/init";

/// Exit code of the init when it cannot raise the fence or start the command.
pub const INIT_FAILED: i32 = 126;

/// What the init is asked to do: allow reading beneath `readable`, everything beneath
/// `writable`, nothing else (no Landlock fence when both are empty), load the `seccomp`
/// programs, then run `command`; with `reap`, stay as its parent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fence {
    pub readable: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    /// Each a `struct sock_filter` array, loaded in order.
    pub seccomp: Vec<Vec<u8>>,
    pub reap: bool,
    /// Relays to the host's egress proxy, started before the command (see [`relay`]).
    pub egress: Option<relay::Egress>,
    pub command: Vec<OsString>,
}

impl Fence {
    /// The init's whole argv, program path first.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from(PATH_IN_SANDBOX)];
        for (flag, paths) in [("--read", &self.readable), ("--write", &self.writable)] {
            for path in paths {
                args.push(flag.into());
                args.push(path.into());
            }
        }
        for program in &self.seccomp {
            args.push("--seccomp".into());
            args.push(hex::encode(program).into());
        }
        if self.reap {
            args.push("--reap".into());
        }
        if let Some(egress) = &self.egress {
            args.push("--egress-socket".into());
            args.push(egress.socket.clone().into());
            for entry in &egress.allow {
                args.push("--egress-allow".into());
                args.push(entry.into());
            }
        }
        args.push("--".into());
        args.extend(self.command.iter().cloned());
        args
    }

    /// Parses the arguments after the program path.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Fence, String> {
        let mut fence = Fence::default();
        let mut rest = args.into_iter();
        loop {
            let flag = rest.next();
            match flag.as_ref().and_then(|a| a.to_str()) {
                Some("--read") => fence.readable.push(path_after(&mut rest, "--read")?),
                Some("--write") => fence.writable.push(path_after(&mut rest, "--write")?),
                Some("--seccomp") => {
                    let program = rest.next().ok_or("--seccomp needs a program")?;
                    let program = program
                        .to_str()
                        .and_then(|text| hex::decode(text).ok())
                        .filter(|bytes| !bytes.is_empty() && bytes.len() % 8 == 0)
                        .ok_or("--seccomp needs a program in hexadecimal")?;
                    fence.seccomp.push(program);
                }
                Some("--reap") => fence.reap = true,
                Some("--egress-socket") => {
                    let socket = path_after(&mut rest, "--egress-socket")?;
                    fence.egress.get_or_insert_with(Default::default).socket = socket;
                }
                Some("--egress-allow") => {
                    let entry = rest
                        .next()
                        .and_then(|e| e.into_string().ok())
                        .ok_or("--egress-allow needs host:port")?;
                    fence
                        .egress
                        .get_or_insert_with(Default::default)
                        .allow
                        .push(entry);
                }
                Some("--") => break,
                other => return Err(format!("unexpected init argument {other:?}")),
            }
        }
        fence.command = rest.collect();
        if fence.command.is_empty() {
            return Err("no command to run".into());
        }
        if fence
            .egress
            .as_ref()
            .is_some_and(|e| e.socket.as_os_str().is_empty())
        {
            return Err("--egress-allow needs --egress-socket".into());
        }
        Ok(fence)
    }

    /// Restricts the calling thread (and what it execs) to the fence. Best effort
    /// across ABIs: a kernel without Landlock is left as it is, and says so. No paths,
    /// no fence.
    pub fn raise(&self) -> Result<RulesetStatus, String> {
        if self.readable.is_empty() && self.writable.is_empty() {
            return Ok(RulesetStatus::NotEnforced);
        }
        let abi = ABI::V5;
        let status = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(&self.readable, AccessFs::from_read(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(&self.writable, AccessFs::from_all(abi))))
            .and_then(|r| r.restrict_self())
            .map_err(|e| e.to_string())?;
        Ok(status.ruleset)
    }
}

/// Loads every program of the fence into the calling thread (and what it execs and
/// forks), after setting `no_new_privs` as the kernel requires.
pub fn load_seccomp(programs: &[Vec<u8>]) -> Result<(), String> {
    if programs.is_empty() {
        return Ok(());
    }
    // SAFETY: prctl takes no pointers here.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
    }
    for program in programs {
        let len = u16::try_from(program.len() / 8).map_err(|_| "a program is too long")?;
        // The bytes are `struct sock_filter`s; copied into them for alignment.
        let filter: Vec<libc::sock_filter> = program
            .chunks_exact(8)
            .map(|i| libc::sock_filter {
                code: u16::from_ne_bytes([i[0], i[1]]),
                jt: i[2],
                jf: i[3],
                k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
            })
            .collect();
        let fprog = libc::sock_fprog {
            len,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fprog points at `filter`, alive for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(format!("seccomp: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn path_after(rest: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<PathBuf, String> {
    rest.next()
        .map(PathBuf::from)
        .ok_or_else(|| format!("{flag} needs a path"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let fence = Fence {
            readable: vec!["/usr".into(), "/data".into()],
            writable: vec!["/workspace".into()],
            seccomp: vec![vec![6, 0, 0, 0, 0, 0, 0xff, 0x7f]],
            reap: true,
            egress: Some(relay::Egress {
                socket: "/.agentgate/egress/proxy.sock".into(),
                allow: vec!["a.test:443".into()],
            }),
            command: vec!["sh".into(), "-c".into(), "--read x".into()],
        };
        let args = fence.to_args();
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            text,
            [
                PATH_IN_SANDBOX,
                "--read",
                "/usr",
                "--read",
                "/data",
                "--write",
                "/workspace",
                "--seccomp",
                "060000000000ff7f",
                "--reap",
                "--egress-socket",
                "/.agentgate/egress/proxy.sock",
                "--egress-allow",
                "a.test:443",
                "--",
                "sh",
                "-c",
                "--read x"
            ]
        );
        assert_eq!(Fence::parse(args.into_iter().skip(1)).unwrap(), fence);
    }

    #[test]
    fn malformed_arguments_are_refused() {
        let parse = |args: &[&str]| Fence::parse(args.iter().map(OsString::from));
        assert!(parse(&["--read"])
            .unwrap_err()
            .contains("--read needs a path"));
        assert!(parse(&["--read", "/usr", "--"])
            .unwrap_err()
            .contains("no command"));
        assert!(parse(&["--frobnicate", "--", "true"]).is_err());
        assert!(parse(&["true"]).is_err());
        assert!(parse(&["--seccomp", "zz", "--", "true"]).is_err());
        assert!(parse(&["--seccomp", "0600", "--", "true"]).is_err());
    }
}
