//! The seccomp programs every sealed process runs under.
//!
//! A deny list, not an allow list: agents run compilers, package managers and test
//! suites, so anything ordinary must work. What is refused is what an agent never
//! needs and what container escapes are made of: changing the mount tree, entering or
//! creating namespaces (new user namespaces above all), kernel keyrings, eBPF, perf,
//! module loading, kexec, reboot, swap, handle-based file opening and the kernel log.
//! Denied calls fail with `EPERM`, so a program sees an ordinary error.
//!
//! `clone3` passes its flags in memory, where a filter cannot read them, so it fails
//! with `ENOSYS` instead: the C library then falls back to `clone`, whose flags the
//! filter checks. That needs a second program, because one program has one action.
//!
//! The programs are compiled with `seccompiler` (Firecracker's) and handed to
//! bubblewrap as sealed memfds; bubblewrap loads them after it has set up the view.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::memfd;
use crate::runtime::bindings::types::Error;

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

/// The compiled programs, each in a sealed memfd ready to pass to bubblewrap.
pub struct SeccompPrograms {
    pub fds: Vec<OwnedFd>,
}

impl SeccompPrograms {
    pub fn build() -> Result<SeccompPrograms, Error> {
        let arch = target_arch()?;
        let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        for &nr in DENIED_WITH_NEW_USER_NAMESPACE {
            let new_user = libc::CLONE_NEWUSER as u64;
            let condition = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(new_user),
                new_user,
            )
            .map_err(compile_error)?;
            deny.insert(
                nr,
                vec![SeccompRule::new(vec![condition]).map_err(compile_error)?],
            );
        }
        let no_clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
        let programs = [
            compile(deny, libc::EPERM, arch)?,
            compile(no_clone3, libc::ENOSYS, arch)?,
        ];
        let fds = programs
            .iter()
            .map(|program| memfd::sealed(c"agentgate-seccomp", &bytes(program)))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::Unavailable(format!("preparing the seccomp filter: {e}")))?;
        Ok(SeccompPrograms { fds })
    }
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
        let programs = SeccompPrograms::build().unwrap();
        assert_eq!(programs.fds.len(), 2);
        for fd in &programs.fds {
            let len = std::fs::File::from(fd.try_clone().unwrap())
                .metadata()
                .unwrap()
                .len();
            assert!(len > 0 && len % 8 == 0, "{len}");
        }
    }
}
