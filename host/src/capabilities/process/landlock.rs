//! Landlock: a second fence on the filesystem, raised inside the sealed view.
//!
//! The view already holds only what the sandbox may see; Landlock makes the kernel
//! check every access against the same list again, so a mistake in the view (or a
//! bubblewrap bug) is not enough to reach more. It must be applied by the sandboxed
//! process itself after bubblewrap has built the mount tree (a Landlocked process may
//! not mount), so a small init runs first inside the view (`agentgate-sandbox-init`,
//! built by `build.rs` and embedded here): it restricts itself, then execs the command.
//! bubblewrap binds it into the view read-only from its checked host file
//! ([`super::init_file`]).
//!
//! Kernels without Landlock (before 5.13, or with it disabled) still get the sealed
//! view; the host reports the ABI it found (or its absence) with each sandbox.

pub use agentgate_sandbox_init::relay::{hosts_file, Egress, PROXY_ADDRESS};
pub use agentgate_sandbox_init::{Fence, PATH_IN_SANDBOX as INIT_PATH};

/// The init program, compiled for this host's target.
static INIT_BINARY: &[u8] = include_bytes!(env!("AGENTGATE_SANDBOX_INIT"));

/// The init program's bytes (also bound into Docker containers, see
/// `capabilities::docker::init`).
pub fn init_binary() -> &'static [u8] {
    INIT_BINARY
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_has_landlock() {
        // The machines we test on run kernels with Landlock enabled (6.x).
        let abi = kernel_abi().expect("this kernel should offer Landlock");
        assert!(abi >= 1);
    }

    #[test]
    fn the_embedded_init_is_an_executable_of_this_machine() {
        assert!(INIT_BINARY.starts_with(b"\x7fELF"));
        // Small enough that reading it once per process to check its host copy is cheap.
        assert!(INIT_BINARY.len() < 8 << 20, "{} bytes", INIT_BINARY.len());
    }
}
