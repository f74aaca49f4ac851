//! `agentgate-sandbox-init [--read P]... [--write P]... [--seccomp HEX]... [--reap] --
//! COMMAND...`: raises the Landlock fence, loads the seccomp programs, then replaces
//! itself with the command, or with `--reap` starts it and stays as its parent. See the
//! library for why.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use agentgate_sandbox_init::{load_seccomp, Fence, INIT_FAILED};

fn main() {
    let fence = Fence::parse(std::env::args_os().skip(1)).unwrap_or_else(|e| fail(&e));
    if let Err(e) = fence.raise() {
        fail(&format!("cannot raise the Landlock fence: {e}"));
    }
    if let Err(e) = load_seccomp(&fence.seccomp) {
        fail(&format!("cannot load the seccomp filter: {e}"));
    }
    if let Some(egress) = &fence.egress {
        start_relays(egress);
    }
    if fence.reap {
        // SAFETY: the child only execs (or exits); the parent keeps running alone.
        match unsafe { libc::fork() } {
            0 => {}
            -1 => fail(&format!("fork: {}", std::io::Error::last_os_error())),
            child => reap(child),
        }
    }
    let argv: Vec<CString> = fence
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|_| fail("an argument of the command contains NUL"));
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: NUL-terminated strings and a null-terminated array that outlive the call.
    unsafe { libc::execvp(argv[0].as_ptr(), pointers.as_ptr()) };
    let error = std::io::Error::last_os_error();
    eprintln!(
        "agentgate sandbox: cannot run {:?}: {error}",
        fence.command[0].to_string_lossy()
    );
    std::process::exit(if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        INIT_FAILED
    })
}

/// Binds the relays to the egress proxy, then serves them in a child of their own,
/// fenced like the command (it forks after the fence and the filter are in place).
fn start_relays(egress: &agentgate_sandbox_init::relay::Egress) {
    let relays = agentgate_sandbox_init::relay::Relays::bind(egress)
        .unwrap_or_else(|e| fail(&format!("cannot listen for the egress proxy: {e}")));
    // SAFETY: single-threaded so far; the child only serves the relays.
    match unsafe { libc::fork() } {
        0 => {
            detach_stdio();
            relays.serve()
        }
        -1 => fail(&format!("fork: {}", std::io::Error::last_os_error())),
        _ => drop(relays),
    }
}

/// The relays print nothing; they must not hold the command's output pipes open.
fn detach_stdio() {
    // SAFETY: open/dup2/close on descriptors this process owns.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

/// The command's pid, for the signal handler.
static COMMAND: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    // SAFETY: kill is async-signal-safe.
    unsafe { libc::kill(COMMAND.load(Ordering::Relaxed), signal) };
}

/// As the container's first process: passes the signals a stop sends on to the
/// command, reaps every orphan, and exits as the command did.
fn reap(command: libc::pid_t) -> ! {
    COMMAND.store(command, Ordering::Relaxed);
    for signal in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: the handler only calls kill.
        unsafe {
            libc::signal(
                signal,
                forward as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status only.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command {
            if libc::WIFEXITED(status) {
                std::process::exit(libc::WEXITSTATUS(status));
            }
            std::process::exit(128 + libc::WTERMSIG(status));
        }
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            std::process::exit(INIT_FAILED);
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("agentgate sandbox: {message}");
    std::process::exit(INIT_FAILED)
}
