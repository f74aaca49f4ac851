//! Starting a process inside a cgroup v2 instead of moving it there.
//!
//! Moving a process into a v2 cgroup (writing `cgroup.procs`) takes the kernel's global
//! threadgroup lock for writing, which waits out an RCU grace period: a median of 8 ms,
//! and up to 26 ms, per sealed spawn on our machines, more than the whole rest of the
//! sandbox costs. v1 avoids it by moving the one thread (`tasks`); v2 has no such file
//! for domain cgroups. `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7) creates a process
//! in the cgroup instead, which takes no such lock.
//!
//! It is used between `fork` and `exec`, where the forked child (the *waiter*) can no
//! longer be created elsewhere: the waiter clones the real child into the cgroup, and
//! that child returns to go on to `exec`. The waiter closes every descriptor it holds
//! (so pipes see their ends as if it were gone), waits for the child and then ends the
//! way the child ended, so whoever waits for the waiter sees the child's exit. It stays
//! in the host's cgroup and runs nothing of the agent's.

use std::io;
use std::os::fd::RawFd;

/// `CLONE_INTO_CGROUP` from `<linux/sched.h>`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Continues the calling process as a new child created in the cgroup `cgroup_dir` (an
/// open descriptor of its directory); the caller becomes that child's waiter and never
/// returns. Returns `Err` with nothing done when the kernel cannot clone into a cgroup
/// (before 5.7: `ENOSYS`, `E2BIG` or `EINVAL`), so the caller can move itself instead.
///
/// Async-signal-safe (raw system calls only, no allocation), for a `pre_exec` closure.
pub(super) fn continue_in(cgroup_dir: RawFd) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let waiter = unsafe { libc::getpid() };
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup_dir as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM is a fork; `args` outlives the call and its size
    // is passed with it.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The death signal is not inherited: the child dies with its waiter, as the
        // waiter dies with the host. A waiter gone already means the host is gone.
        // SAFETY: prctl and getppid have no memory-safety preconditions.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != waiter {
                libc::_exit(libc::EXIT_FAILURE);
            }
        }
        return Ok(());
    }
    wait_and_end_like(pid as libc::pid_t)
}

/// The waiter's whole life after the clone: hold nothing, wait, end as `child` ended.
fn wait_and_end_like(child: libc::pid_t) -> ! {
    // SAFETY: only async-signal-safe calls on this process's own descriptors, signals
    // and child.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) < 0 {
            // Before Linux 5.9: close each possible descriptor.
            let mut limit = std::mem::zeroed::<libc::rlimit>();
            let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            for fd in 0..highest {
                libc::close(fd);
            }
        }
        let mut status = 0;
        while libc::waitpid(child, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(libc::EXIT_FAILURE);
            }
        }
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            let mut unblocked = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut unblocked);
            libc::sigaddset(&mut unblocked, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &unblocked, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// Whether `error` from [`continue_in`] means only that this kernel cannot clone into
/// a cgroup, so moving the process is the way left.
pub(super) fn unsupported(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)
    )
}
