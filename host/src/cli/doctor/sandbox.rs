//! The `subprocess` provider's checks: what the `process` capability needs to seal a
//! command in, each asked of the capability's own code, then a sealed command run for
//! real to prove the pieces work together.

use crate::capabilities::process::cgroup::{self, Cgroup, CgroupLimits, SETUP_HINT};
use crate::capabilities::process::{
    self, landlock, SeccompPrograms, UserNamespaces, BUBBLEWRAP_FIX, MIN_BUBBLEWRAP,
    SLIRP4NETNS_FIX, TUN_FIX,
};
use crate::wit::types::{Error, NetworkMode};

use super::{before_fix, said, Check, NO_PROVIDER, SUBPROCESS};

const GROUP: &str = "subprocess";

pub async fn checks() -> Vec<Check> {
    let bubblewrap = bubblewrap();
    let has_bwrap = bubblewrap.status == super::Status::Ok;
    let mut checks = vec![
        bubblewrap,
        user_namespaces(),
        cgroups(),
        landlock(),
        seccomp(),
    ];
    checks.push(if has_bwrap {
        probe("sealed-sandbox", NetworkMode::None).await
    } else {
        Check::skip("sealed-sandbox", GROUP, SUBPROCESS, "bubblewrap is missing")
    });
    let slirp = slirp4netns();
    let tun = tun();
    let bridge_ready =
        has_bwrap && slirp.status == super::Status::Ok && tun.status == super::Status::Ok;
    checks.push(slirp);
    checks.push(tun);
    checks.push(if bridge_ready {
        probe("bridge-network", NetworkMode::Bridge).await
    } else {
        Check::skip(
            "bridge-network",
            GROUP,
            SUBPROCESS,
            "bubblewrap, slirp4netns or /dev/net/tun is missing",
        )
    });
    checks
}

/// The `bwrap` a run would start, and whether it is new enough.
fn bubblewrap() -> Check {
    let path = match process::bubblewrap() {
        Ok(path) => path,
        Err(_) => {
            let path = std::env::var("PATH").unwrap_or_default();
            return Check::fail(
                "bubblewrap",
                GROUP,
                SUBPROCESS,
                format!("`bwrap` is not on PATH ({path})"),
                BUBBLEWRAP_FIX,
            );
        }
    };
    let output = std::process::Command::new(&path).arg("--version").output();
    let version = match output {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            return Check::fail(
                "bubblewrap",
                GROUP,
                SUBPROCESS,
                format!(
                    "{} --version failed: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                BUBBLEWRAP_FIX,
            )
        }
        Err(e) => {
            return Check::fail(
                "bubblewrap",
                GROUP,
                SUBPROCESS,
                format!("cannot run {}: {e}", path.display()),
                BUBBLEWRAP_FIX,
            )
        }
    };
    let found = format!("{version} at {}", path.display());
    match parse_version(&version) {
        Some(v) if v >= MIN_BUBBLEWRAP => Check::ok("bubblewrap", GROUP, SUBPROCESS, found),
        _ => Check::fail(
            "bubblewrap",
            GROUP,
            SUBPROCESS,
            format!(
                "{found}; agentgate needs bubblewrap {}.{}.{} or newer",
                MIN_BUBBLEWRAP[0], MIN_BUBBLEWRAP[1], MIN_BUBBLEWRAP[2]
            ),
            format!("upgrade it: {BUBBLEWRAP_FIX}"),
        ),
    }
}

/// `bubblewrap 0.8.0` → `[0, 8, 0]`.
fn parse_version(text: &str) -> Option<[u32; 3]> {
    let number = text.split_whitespace().last()?;
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    Some([
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
        parts.next().flatten().unwrap_or(0),
    ])
}

fn user_namespaces() -> Check {
    let kernel = UserNamespaces::of_this_kernel();
    match (kernel.check(), kernel.apparmor_restriction()) {
        (Err(refusal), _) => Check::fail(
            "user-namespaces",
            GROUP,
            SUBPROCESS,
            refusal.reason,
            refusal.fix,
        ),
        // Only a sealed run tells whether a profile lets bubblewrap through.
        (Ok(found), Some(restriction)) => Check::warn(
            "user-namespaces",
            GROUP,
            NO_PROVIDER,
            format!("{found}; {}", restriction.reason),
            restriction.fix,
        ),
        (Ok(found), None) => Check::ok("user-namespaces", GROUP, SUBPROCESS, found),
    }
}

/// Where sandbox cgroups go, and a real one made and removed there with every limit a
/// sandbox may get, as a run makes it.
fn cgroups() -> Check {
    let placement = match cgroup::placement() {
        Ok(placement) => placement,
        Err(e) => {
            return Check::fail(
                "cgroups",
                GROUP,
                SUBPROCESS,
                before_fix(&e.to_string(), SETUP_HINT),
                SETUP_HINT,
            )
        }
    };
    // What every sandbox gets (a pids limit), then the limits a TaskSpec may add.
    let every_sandbox = process::default_limits();
    if let Err(e) = make_and_remove(&every_sandbox) {
        return Check::fail(
            "cgroups",
            GROUP,
            SUBPROCESS,
            format!("{placement}; {}", before_fix(&e.to_string(), SETUP_HINT)),
            SETUP_HINT,
        );
    }
    let limited = CgroupLimits {
        memory_bytes: Some(256 << 20),
        cpu_millicores: Some(1000),
        ..every_sandbox
    };
    match make_and_remove(&limited) {
        Ok(()) => Check::ok(
            "cgroups",
            GROUP,
            SUBPROCESS,
            format!(
                "{placement}; this user created cgroups there with pids, memory and cpu limits"
            ),
        ),
        // Runs without `resources.memory` and `resources.cpu` are not affected.
        Err(e) => Check::warn(
            "cgroups",
            GROUP,
            NO_PROVIDER,
            format!(
                "{placement}; sandboxes get cgroups, but runs that set `resources.memory` or \
                 `resources.cpu` are refused: {}",
                before_fix(&e.to_string(), SETUP_HINT)
            ),
            SETUP_HINT,
        ),
    }
}

/// Creates a sandbox cgroup with `limits` as a run does, and removes it again.
fn make_and_remove(limits: &CgroupLimits) -> Result<(), cgroup::CgroupError> {
    let name = format!(
        "doctor-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    );
    // Dropping it removes it.
    Cgroup::create(&name, limits).map(drop)
}

fn landlock() -> Check {
    match landlock::kernel_abi() {
        Some(abi) => Check::ok(
            "landlock",
            GROUP,
            SUBPROCESS,
            format!("ABI {abi}: the filesystem is fenced a second time inside the view"),
        ),
        None => Check::warn(
            "landlock",
            GROUP,
            NO_PROVIDER,
            "this kernel offers no Landlock: sandboxes get bubblewrap's view without the \
             second fence",
            "boot a kernel with Landlock (Linux 5.13 or newer, CONFIG_SECURITY_LANDLOCK, \
             `landlock` in the lsm= list)",
        ),
    }
}

fn seccomp() -> Check {
    // SAFETY: PR_GET_SECCOMP takes no pointers; it fails (EINVAL) without seccomp.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP) } < 0 {
        return Check::fail(
            "seccomp",
            GROUP,
            SUBPROCESS,
            format!(
                "this kernel has no seccomp: {}",
                std::io::Error::last_os_error()
            ),
            "boot a kernel built with CONFIG_SECCOMP_FILTER (every distribution kernel is)",
        );
    }
    // The stricter of the two programs runs need (`network: none`).
    match SeccompPrograms::build(crate::capabilities::process::seccomp::Sockets::Local) {
        Ok(programs) => Check::ok(
            "seccomp",
            GROUP,
            SUBPROCESS,
            format!(
                "{} filter programs built for {}; the kernel filters system calls",
                programs.fds.len(),
                std::env::consts::ARCH
            ),
        ),
        Err(e) => {
            let text = said(&e);
            Check::fail(
                "seccomp",
                GROUP,
                SUBPROCESS,
                before_fix(&text, crate::capabilities::DOCTOR_HINT),
                "run agentgate on x86_64, aarch64 or riscv64 Linux",
            )
        }
    }
}

fn slirp4netns() -> Check {
    let path = match process::slirp4netns() {
        Ok(path) => path,
        Err(_) => {
            return Check::fail(
                "slirp4netns",
                GROUP,
                SUBPROCESS,
                "`slirp4netns` is not on PATH: `network: bridge` (the default network) cannot \
                 reach out",
                SLIRP4NETNS_FIX,
            )
        }
    };
    let version = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "version unknown".into());
    Check::ok(
        "slirp4netns",
        GROUP,
        SUBPROCESS,
        format!("{version} at {}", path.display()),
    )
}

fn tun() -> Check {
    match process::open_tun() {
        Ok(()) => Check::ok(
            "dev-net-tun",
            GROUP,
            SUBPROCESS,
            "/dev/net/tun opens read-write for this user",
        ),
        Err(e) => Check::fail(
            "dev-net-tun",
            GROUP,
            SUBPROCESS,
            format!("cannot open /dev/net/tun read-write: {e}; `network: bridge` (the default network) cannot start"),
            TUN_FIX,
        ),
    }
}

/// A sealed `/bin/true` through the same spawn a sandbox's commands go through.
async fn probe(id: &'static str, network: NetworkMode) -> Check {
    let what = match network {
        NetworkMode::Bridge => "with `network: bridge` (slirp4netns)",
        _ => "with `network: none`",
    };
    match process::probe_sealed(network).await {
        Ok(()) => Check::ok(
            id,
            GROUP,
            SUBPROCESS,
            format!("a sealed /bin/true {what} ran and exited 0"),
        ),
        Err(e) => {
            let fix = fix_of(&e);
            Check::fail(id, GROUP, SUBPROCESS, before_fix(&said(&e), &fix), fix)
        }
    }
}

/// The fix a failed sealed command calls for: the capability's, when it named one.
fn fix_of(error: &Error) -> String {
    let text = said(error);
    [SETUP_HINT, BUBBLEWRAP_FIX, SLIRP4NETNS_FIX, TUN_FIX]
        .into_iter()
        .find(|fix| text.contains(fix))
        .map_or_else(
            || {
                "mend the checks above that failed; what bubblewrap printed says which part \
                 of the sandbox the machine refused"
                    .to_string()
            },
            str::to_string,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bubblewrap_versions_are_read_from_its_banner() {
        assert_eq!(parse_version("bubblewrap 0.8.0"), Some([0, 8, 0]));
        assert_eq!(parse_version("bubblewrap 0.11"), Some([0, 11, 0]));
        assert!(parse_version("bubblewrap 0.6.1").unwrap() < MIN_BUBBLEWRAP);
        assert_eq!(parse_version(""), None);
    }
}
