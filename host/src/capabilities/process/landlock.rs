//! Landlock: a second fence on the filesystem, raised inside the sealed view.
//!
//! The view already holds only what the sandbox may see; Landlock makes the kernel
//! check every access against the same list again, so a mistake in the view (or a
//! bubblewrap bug) is not enough to reach more. It must be applied by the sandboxed
//! process itself after bubblewrap has built the mount tree (a Landlocked process may
//! not mount), so the agentgate executable is bound read-only into the view and runs
//! first as a tiny init ([`run_init`]): it restricts itself, then execs the command.
//!
//! Kernels without Landlock (before 5.13, or with it disabled) still get the sealed
//! view; the host reports the ABI it found (or its absence) with each sandbox.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    ABI,
};

/// The first argument that turns the agentgate executable into the sandbox init.
pub const INIT_ARG: &str = "__agentgate-sandbox-init";

/// Where the init is bound inside the view.
pub const INIT_PATH: &str = "/.agentgate/init";

/// Exit code of the init when it cannot raise the fence or start the command.
const INIT_FAILED: i32 = 126;

static INIT_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Registers the executable that serves as the sandbox init (the `agentgate` binary
/// calls this at start). Embedders that never register one get no Landlock fence, and
/// each sandbox says so in its description.
pub fn register_init(program: PathBuf) {
    let _ = INIT_PROGRAM.set(program);
}

pub fn init_program() -> Option<&'static Path> {
    INIT_PROGRAM.get().map(PathBuf::as_path)
}

/// The Landlock ABI version this kernel offers, if any.
pub fn kernel_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: the version query takes no pointers.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).ok().filter(|&v| v > 0)
}

/// The init's arguments: the paths it may read and those it may write, then the
/// command.
pub fn init_args(readable: &[PathBuf], writable: &[PathBuf], argv: &[String]) -> Vec<OsString> {
    let mut args = vec![OsString::from(INIT_PATH), OsString::from(INIT_ARG)];
    for (flag, paths) in [("--read", readable), ("--write", writable)] {
        for path in paths {
            args.push(flag.into());
            args.push(path.into());
        }
    }
    args.push("--".into());
    args.extend(argv.iter().map(OsString::from));
    args
}

/// Runs as the sandbox's init: raises the fence, then replaces itself with the
/// command. Never returns.
pub fn run_init(args: Vec<OsString>) -> ! {
    let mut readable = Vec::new();
    let mut writable = Vec::new();
    let mut rest = args.into_iter();
    let command: Vec<OsString> = loop {
        match rest.next().as_ref().and_then(|a| a.to_str()) {
            Some("--read") => readable.extend(rest.next().map(PathBuf::from)),
            Some("--write") => writable.extend(rest.next().map(PathBuf::from)),
            Some("--") => break rest.collect(),
            other => fail(format!("unexpected init argument {other:?}")),
        }
    };
    if command.is_empty() {
        fail("no command to run".into());
    }
    if let Err(e) = restrict(&readable, &writable) {
        fail(format!("cannot raise the Landlock fence: {e}"));
    }
    let program = CString::new(command[0].as_bytes())
        .unwrap_or_else(|_| fail("the program name contains NUL".into()));
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.clone().into_vec()).unwrap_or_default())
        .collect();
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: NUL-terminated strings and a null-terminated array that outlive the call.
    unsafe { libc::execvp(program.as_ptr(), pointers.as_ptr()) };
    let error = std::io::Error::last_os_error();
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        INIT_FAILED
    };
    eprintln!(
        "agentgate sandbox: cannot run {:?}: {error}",
        command[0].to_string_lossy()
    );
    std::process::exit(code)
}

fn fail(message: String) -> ! {
    eprintln!("agentgate sandbox: {message}");
    std::process::exit(INIT_FAILED)
}

/// Allows reading (and executing) beneath `readable`, everything beneath `writable`,
/// and nothing else. Best effort across ABIs: a kernel without Landlock is left as is.
fn restrict(readable: &[PathBuf], writable: &[PathBuf]) -> Result<RulesetStatus, String> {
    let abi = ABI::V5;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(readable, AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(status.ruleset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_arguments_round_trip() {
        let args = init_args(
            &[PathBuf::from("/usr"), PathBuf::from("/data")],
            &[PathBuf::from("/workspace")],
            &["sh".into(), "-c".into(), "--read x".into()],
        );
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            text,
            [
                INIT_PATH,
                INIT_ARG,
                "--read",
                "/usr",
                "--read",
                "/data",
                "--write",
                "/workspace",
                "--",
                "sh",
                "-c",
                "--read x"
            ]
        );
    }

    #[test]
    fn this_kernel_has_landlock() {
        // The machines we test on run kernels with Landlock enabled (6.x).
        let abi = kernel_abi().expect("this kernel should offer Landlock");
        assert!(abi >= 1);
    }
}
