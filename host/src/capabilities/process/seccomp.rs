//! The seccomp programs every sealed process runs under.
//!
//! A deny list, not an allow list: agents run compilers, package managers and test
//! suites, so anything ordinary must work. What is refused is what an agent never
//! needs and what container escapes are made of: changing the mount tree, entering or
//! creating namespaces (new user namespaces above all), kernel keyrings, eBPF, perf,
//! module loading, kexec, reboot, swap, handle-based file opening and the kernel log.
//! Denied calls fail with `EPERM`, so a program sees an ordinary error.
//!
//! Sockets are the exception, an allow list by family: `AF_UNIX` always, routing
//! netlink always (read-only without capabilities; `getifaddrs`, `ip`, and the
//! interface lists of libuv, Go and Java use it), `AF_INET`/`AF_INET6` only when the
//! sandbox has a network. Everything else (`AF_VSOCK`, which reaches the hypervisor
//! whatever the network namespace; `AF_PACKET`, `AF_ALG`, `AF_KEY`, `AF_XDP`,
//! Bluetooth, other netlink protocols, ...) fails with `EAFNOSUPPORT`, as on a kernel
//! built without that family, so programs take their usual fallback.
//!
//! `clone3` passes its flags in memory, where a filter cannot read them, so it fails
//! with `ENOSYS` instead: the C library then falls back to `clone`, whose flags the
//! filter checks. io_uring fails with `ENOSYS` too, as on a kernel without it (its
//! ring would run socket and file operations where this filter never sees them), and
//! runtimes fall back to ordinary calls. One program has one action, so each errno has
//! a program of its own.
//!
//! The filter judges calls of the native ABI only: seccompiler's programs kill a
//! process that enters the kernel through another one (the i386 `int 0x80` entry and
//! its `socketcall`, whose arguments a filter cannot read), and on x86_64 a last
//! program kills x32 calls, whose numbers are the native ones with bit 30 set.
//!
//! The programs are compiled with `seccompiler` (Firecracker's) and handed to
//! bubblewrap as sealed memfds; bubblewrap loads them after it has set up the view.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::memfd;
use crate::wit::types::{Error, NetworkMode};

/// Calls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_setns,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_syslog,
    libc::SYS_userfaultfd,
    libc::SYS_quotactl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// Calls refused only when their first argument (the flags) asks for a new user
/// namespace.
const DENIED_WITH_NEW_USER_NAMESPACE: &[libc::c_long] = &[libc::SYS_unshare, libc::SYS_clone];

/// Calls that fail as if this kernel did not have them.
const ABSENT: &[libc::c_long] = &[
    libc::SYS_clone3,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// The routing netlink protocol, the only one a sandbox may open.
const NETLINK_ROUTE: u64 = 0;

/// What the filter lets a sandbox do with sockets, from its network mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sockets {
    /// `AF_UNIX` and routing netlink: `network: none`.
    Local,
    /// Also `AF_INET` and `AF_INET6`: `bridge` and `host`.
    Network,
}

impl Sockets {
    pub fn for_network(network: NetworkMode) -> Sockets {
        match network {
            NetworkMode::None => Sockets::Local,
            NetworkMode::Bridge | NetworkMode::Host => Sockets::Network,
        }
    }

    fn families(self) -> &'static [libc::c_int] {
        match self {
            Sockets::Local => &[libc::AF_UNIX, libc::AF_NETLINK],
            Sockets::Network => &[
                libc::AF_UNIX,
                libc::AF_NETLINK,
                libc::AF_INET,
                libc::AF_INET6,
            ],
        }
    }
}

/// The compiled programs, each in a sealed memfd ready to pass to bubblewrap.
pub struct SeccompPrograms {
    pub fds: Vec<OwnedFd>,
}

impl SeccompPrograms {
    pub fn build(sockets: Sockets) -> Result<SeccompPrograms, Error> {
        let fds = programs(sockets)?
            .iter()
            .map(|program| memfd::sealed(c"agentgate-seccomp", program))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::Unavailable(format!("preparing the seccomp filter: {e}")))?;
        Ok(SeccompPrograms { fds })
    }
}

/// Every program, each as the kernel's `struct sock_filter` array. They depend only
/// on `sockets`, so each set is compiled once per process and reused by every spawn.
pub fn programs(sockets: Sockets) -> Result<Vec<Vec<u8>>, Error> {
    static LOCAL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    static NETWORK: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let cache = match sockets {
        Sockets::Local => &LOCAL,
        Sockets::Network => &NETWORK,
    };
    if let Some(programs) = cache.get() {
        return Ok(programs.clone());
    }
    let compiled = compile_programs(sockets)?;
    Ok(cache.get_or_init(|| compiled).clone())
}

fn compile_programs(sockets: Sockets) -> Result<Vec<Vec<u8>>, Error> {
    let arch = target_arch()?;
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let new_user = libc::CLONE_NEWUSER as u64;
    for &nr in DENIED_WITH_NEW_USER_NAMESPACE {
        let flags = SeccompCmpOp::MaskedEq(new_user);
        let asks_new_user = SeccompCondition::new(0, SeccompCmpArgLen::Qword, flags, new_user)
            .map_err(compile_error)?;
        deny.insert(nr, vec![rule(vec![asks_new_user])?]);
    }
    let absent = ABSENT.iter().map(|&nr| (nr, Vec::new())).collect();
    let programs = [
        compile(deny, libc::EPERM, arch)?,
        compile(absent, libc::ENOSYS, arch)?,
        compile(socket_rules(sockets)?, libc::EAFNOSUPPORT, arch)?,
        #[cfg(target_arch = "x86_64")]
        x32_guard(),
    ];
    Ok(programs.iter().map(bytes).collect())
}

/// `socket` of a family not in `sockets` or of a netlink protocol other than routing,
/// and `socketpair` of anything but `AF_UNIX`.
fn socket_rules(sockets: Sockets) -> Result<BTreeMap<i64, Vec<SeccompRule>>, Error> {
    let family_not = |family: libc::c_int| condition(0, SeccompCmpOp::Ne, family as u64);
    let other_family = sockets
        .families()
        .iter()
        .map(|&family| family_not(family))
        .collect::<Result<Vec<_>, _>>()?;
    let other_netlink = vec![
        condition(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
        condition(2, SeccompCmpOp::Ne, NETLINK_ROUTE)?,
    ];
    Ok(BTreeMap::from([
        (
            libc::SYS_socket,
            vec![rule(other_family)?, rule(other_netlink)?],
        ),
        (
            libc::SYS_socketpair,
            vec![rule(vec![family_not(libc::AF_UNIX)?])?],
        ),
    ]))
}

/// Kills x32 calls (`AUDIT_ARCH_X86_64` with bit 30 of the number set), which the
/// programs above, matching exact numbers, would let through on kernels built with
/// x32 support. Six instructions: seccompiler has no rule on the number itself.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // Offsets in `struct seccomp_data`.
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    let load = |offset| sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    let ret = |action| sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: action,
    };
    vec![
        load(ARCH),
        // Another architecture: the other programs kill it.
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 3,
            k: AUDIT_ARCH_X86_64,
        },
        load(NR),
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        ret(libc::SECCOMP_RET_KILL_PROCESS),
        ret(libc::SECCOMP_RET_ALLOW),
    ]
}

/// A condition on a C `int` argument (a socket's family or protocol): the kernel reads
/// only its low 32 bits, so the filter compares only those.
fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, Error> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(compile_error)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, Error> {
    SeccompRule::new(conditions).map_err(compile_error)
}

fn target_arch() -> Result<TargetArch, Error> {
    std::env::consts::ARCH.try_into().map_err(|_| {
        crate::capabilities::lacking(format!(
            "no seccomp filter is built for {}; sealed sandboxes need x86_64, aarch64 or riscv64",
            std::env::consts::ARCH
        ))
    })
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, Error> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(compile_error)?;
    filter.try_into().map_err(compile_error)
}

fn compile_error(error: impl std::fmt::Display) -> Error {
    Error::Failed(format!("compiling the seccomp filter: {error}"))
}

/// The program as the kernel's `struct sock_filter` array.
fn bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        out.extend_from_slice(&instruction.code.to_ne_bytes());
        out.push(instruction.jt);
        out.push(instruction.jf);
        out.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_compile_for_this_machine() {
        let programs = SeccompPrograms::build(Sockets::Local).unwrap();
        let expected = if cfg!(target_arch = "x86_64") { 4 } else { 3 };
        assert_eq!(programs.fds.len(), expected);
        for fd in &programs.fds {
            let len = std::fs::File::from(fd.try_clone().unwrap())
                .metadata()
                .unwrap()
                .len();
            assert!(len > 0 && len % 8 == 0, "{len}");
        }
    }

    /// What the kernel answered to one call made under the programs.
    #[derive(Debug, PartialEq)]
    enum Answer {
        Ok,
        Errno(i32),
    }

    /// Forks a child that loads `programs` as bubblewrap would and makes each call;
    /// returns the answers, or the signal that killed the child.
    fn under_filter(
        programs: &[Vec<u8>],
        calls: &[&(dyn Fn() -> libc::c_long + Sync)],
    ) -> Result<Vec<Answer>, i32> {
        let mut pipe = [0; 2];
        // SAFETY: pipe fills two fresh descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        let filters: Vec<libc::sock_fprog> = programs
            .iter()
            .map(|p| libc::sock_fprog {
                len: (p.len() / 8) as u16,
                filter: p.as_ptr() as *mut libc::sock_filter,
            })
            .collect();
        // SAFETY: the child makes raw system calls only, then _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: prctl, seccomp, the calls and write take no Rust-owned state.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for filter in &filters {
                    let rc = libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        filter as *const libc::sock_fprog,
                    );
                    if rc != 0 {
                        libc::_exit(100);
                    }
                }
                for call in calls {
                    let rc = call();
                    let answer: i32 = if rc < 0 { *libc::__errno_location() } else { 0 };
                    libc::write(pipe[1], (&answer as *const i32).cast(), 4);
                    if rc >= 0 {
                        libc::close(rc as i32);
                    }
                }
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copy of the write end, reading the child's answers.
        unsafe { libc::close(pipe[1]) };
        let mut file = std::fs::File::from(unsafe {
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pipe[0])
        });
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut raw).unwrap();
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        if libc::WIFSIGNALED(status) {
            return Err(libc::WTERMSIG(status));
        }
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child could not load the programs"
        );
        Ok(raw
            .chunks(4)
            .map(|c| match i32::from_ne_bytes(c.try_into().unwrap()) {
                0 => Answer::Ok,
                errno => Answer::Errno(errno),
            })
            .collect())
    }

    fn socket(family: libc::c_int, kind: libc::c_int, protocol: libc::c_int) -> libc::c_long {
        // SAFETY: socket takes no pointers.
        unsafe { libc::socket(family, kind, protocol) as libc::c_long }
    }

    #[test]
    fn the_kernel_refuses_foreign_socket_families_and_io_uring() {
        const AF_VSOCK: libc::c_int = 40;
        let vsock = || socket(AF_VSOCK, libc::SOCK_STREAM, 0);
        // The test runs as root: only the filter can refuse a packet socket.
        let packet = || socket(libc::AF_PACKET, libc::SOCK_DGRAM, 0);
        let uevent = || socket(libc::AF_NETLINK, libc::SOCK_RAW, 15);
        let route = || socket(libc::AF_NETLINK, libc::SOCK_RAW, 0);
        let unix = || socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        let inet = || socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        let inet6 = || socket(libc::AF_INET6, libc::SOCK_DGRAM, 0);
        // The family in the upper half of the register: the kernel reads an int.
        let unix_high = || unsafe {
            libc::syscall(libc::SYS_socket, (1u64 << 32) | libc::AF_UNIX as u64, 1, 0)
        };
        let pair = || {
            let mut fds = [0; 2];
            // SAFETY: socketpair fills two descriptors; closed at once.
            let rc =
                unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
            if rc == 0 {
                unsafe { libc::close(fds[0]) };
                unsafe { libc::close(fds[1]) };
            }
            rc as libc::c_long
        };
        let uring = || {
            let mut params = [0u8; 120];
            // SAFETY: io_uring_setup reads and writes `params` only.
            unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) }
        };
        let uring_enter = || unsafe { libc::syscall(libc::SYS_io_uring_enter, -1, 0, 0, 0, 0, 0) };
        let uring_register = || unsafe { libc::syscall(libc::SYS_io_uring_register, -1, 0, 0, 0) };
        let calls: &[&(dyn Fn() -> libc::c_long + Sync)] = &[
            &vsock,
            &packet,
            &uevent,
            &route,
            &unix,
            &unix_high,
            &pair,
            &inet,
            &inet6,
            &uring,
            &uring_enter,
            &uring_register,
        ];
        use Answer::*;
        let local = under_filter(&programs(Sockets::Local).unwrap(), calls).unwrap();
        assert_eq!(
            local,
            [
                Errno(libc::EAFNOSUPPORT),
                Errno(libc::EAFNOSUPPORT),
                Errno(libc::EAFNOSUPPORT),
                Ok,
                Ok,
                Ok,
                Ok,
                Errno(libc::EAFNOSUPPORT),
                Errno(libc::EAFNOSUPPORT),
                Errno(libc::ENOSYS),
                Errno(libc::ENOSYS),
                Errno(libc::ENOSYS),
            ]
        );
        let network = under_filter(&programs(Sockets::Network).unwrap(), calls).unwrap();
        assert_eq!(network[..4], local[..4], "{network:?}");
        assert_eq!(network[7..9], [Ok, Ok], "{network:?}");
        assert_eq!(network[9..], local[9..], "{network:?}");
        // Without the programs the same calls get through: the refusals are the filter's.
        let bare = under_filter(&[], calls).unwrap();
        assert_eq!(bare[0], Ok, "{bare:?}");
        assert_eq!(bare[1], Ok, "{bare:?}");
        assert_eq!(bare[9], Ok, "{bare:?}");
    }

    #[test]
    fn the_older_refusals_still_hold() {
        let mount = || unsafe {
            libc::syscall(
                libc::SYS_mount,
                c"none".as_ptr(),
                c"/".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                0,
            )
        };
        let new_user = || unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) };
        let clone3 = || unsafe { libc::syscall(libc::SYS_clone3, 0, 0) };
        let calls: &[&(dyn Fn() -> libc::c_long + Sync)] = &[&mount, &new_user, &clone3];
        let answers = under_filter(&programs(Sockets::Network).unwrap(), calls).unwrap();
        use Answer::*;
        assert_eq!(
            answers,
            [Errno(libc::EPERM), Errno(libc::EPERM), Errno(libc::ENOSYS)]
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_kill_the_process() {
        const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
        let x32_getpid = || unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) };
        let calls: &[&(dyn Fn() -> libc::c_long + Sync)] = &[&x32_getpid];
        // Without the filter the kernel answers (ENOSYS where x32 is not built in).
        assert!(under_filter(&[], calls).is_ok());
        let killed = under_filter(&programs(Sockets::Network).unwrap(), calls);
        assert_eq!(killed, Err(libc::SIGSYS));
    }
}
