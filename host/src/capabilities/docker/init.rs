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
//! The sandbox init loads them: it is bound read-only at [`PATH_IN_CONTAINER`] from its
//! host file ([`crate::capabilities::process::init_file`]), a
//! mount point that cannot be renamed, removed or written, so the agent cannot put
//! another program in its place. It is the container's first process (`--reap`, in
//! place of the engine's tini: it forwards the stop signal and reaps orphans), so the
//! main process runs filtered, and every exec starts through it.

use crate::capabilities::process::{landlock, seccomp};
use crate::wit::types::{Error, NetworkMode};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
