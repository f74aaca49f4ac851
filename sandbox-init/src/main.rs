//! `agentgate-sandbox-init --read P... --write P... -- COMMAND...`: raises the Landlock
//! fence, then replaces itself with the command. See the library for why.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use agentgate_sandbox_init::{Fence, INIT_FAILED};

fn main() {
    let fence = Fence::parse(std::env::args_os().skip(1)).unwrap_or_else(|e| fail(&e));
    if let Err(e) = fence.raise() {
        fail(&format!("cannot raise the Landlock fence: {e}"));
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

fn fail(message: &str) -> ! {
    eprintln!("agentgate sandbox: {message}");
    std::process::exit(INIT_FAILED)
}
