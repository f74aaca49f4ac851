//! Kernel confinement for spawned processes: a private mount namespace with read-only
//! bind remounts, and an empty network namespace.
//!
//! As root the namespaces are created directly; otherwise inside a new user namespace
//! that maps the caller's own uid and gid. If the kernel refuses, the spawn fails with
//! `unavailable`: isolation is never silently dropped. Resource limits need cgroups,
//! which this host does not manage yet, so asking for them fails closed too.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::runtime::bindings::process::Isolation as IsolationRequest;
use crate::runtime::bindings::types::{Error, NetworkMode};

/// Confinement to apply to one spawn, prepared before `fork` so the child does no
/// allocation.
#[derive(Debug, Default)]
pub struct Isolation {
    readonly_paths: Vec<CString>,
    new_network: bool,
}

impl Isolation {
    pub fn from_request(request: IsolationRequest) -> Result<Isolation, Error> {
        if let Some(limits) = request.limits {
            let asked: Vec<&str> = [
                (limits.cpu_millicores.is_some(), "cpu"),
                (limits.memory_bytes.is_some(), "memory"),
                (limits.pids.is_some(), "pids"),
                (limits.disk_bytes.is_some(), "disk"),
            ]
            .into_iter()
            .filter_map(|(set, name)| set.then_some(name))
            .collect();
            if !asked.is_empty() {
                return Err(Error::Unavailable(format!(
                    "this host cannot enforce {} limits on processes yet (cgroup support is not built); \
                     remove sandbox.resources.{{{}}} rather than run without them",
                    asked.join(", "),
                    asked.join(",")
                )));
            }
        }
        let mut readonly_paths = Vec::new();
        for path in request.readonly_paths {
            if !Path::new(&path).is_absolute() {
                return Err(Error::Failed(format!(
                    "read-only path {path:?} is not absolute"
                )));
            }
            readonly_paths.push(
                CString::new(Path::new(&path).as_os_str().as_bytes())
                    .map_err(|_| Error::Failed(format!("read-only path {path:?} contains NUL")))?,
            );
        }
        let new_network = match request.network {
            None | Some(NetworkMode::Host) => false,
            Some(NetworkMode::None) => true,
            Some(NetworkMode::Bridge) => {
                return Err(Error::Unavailable(
                    "bridge networking needs a container runtime; a process can have the host's network or none".into(),
                ))
            }
        };
        Ok(Isolation {
            readonly_paths,
            new_network,
        })
    }

    fn is_active(&self) -> bool {
        !self.readonly_paths.is_empty() || self.new_network
    }

    /// Arranges for the child to enter its namespaces between `fork` and `exec`.
    /// `cwd` is entered again afterwards: the child changed into it before the
    /// remounts, through the writable mount underneath.
    pub fn configure(
        &self,
        command: &mut tokio::process::Command,
        cwd: &Path,
    ) -> Result<(), Error> {
        if !self.is_active() {
            return Ok(());
        }
        // SAFETY: geteuid/getegid have no preconditions.
        let (uid, gid, root) = unsafe { (libc::geteuid(), libc::getegid(), libc::geteuid() == 0) };
        let plan = ChildPlan {
            readonly_paths: self.readonly_paths.clone(),
            new_network: self.new_network,
            user_namespace: !root,
            uid_map: CString::new(format!("{uid} {uid} 1")).expect("no NUL"),
            gid_map: CString::new(format!("{gid} {gid} 1")).expect("no NUL"),
            cwd: CString::new(cwd.as_os_str().as_bytes())
                .map_err(|_| Error::Failed(format!("working directory {cwd:?} contains NUL")))?,
        };
        // SAFETY: `enter` only makes async-signal-safe system calls on data prepared
        // above; it allocates nothing.
        unsafe {
            command.pre_exec(move || plan.enter());
        }
        Ok(())
    }

    /// Turns a spawn failure into a message that says whether isolation was the cause.
    pub fn explain_spawn_error(&self, program: &str, error: std::io::Error) -> Error {
        if error.kind() == std::io::ErrorKind::NotFound {
            return Error::Failed(format!("cannot start {program:?}: no such program"));
        }
        if self.is_active() && error.raw_os_error() == Some(libc::EPERM) {
            return Error::Unavailable(format!(
                "cannot confine {program:?} (read-only workspace or no network): the kernel refused \
                 to create namespaces ({error}); run as root or enable unprivileged user namespaces"
            ));
        }
        Error::Failed(format!("cannot start {program:?}: {error}"))
    }
}

struct ChildPlan {
    readonly_paths: Vec<CString>,
    new_network: bool,
    user_namespace: bool,
    uid_map: CString,
    gid_map: CString,
    cwd: CString,
}

impl ChildPlan {
    /// Runs in the forked child.
    fn enter(&self) -> std::io::Result<()> {
        let mut flags = 0;
        if !self.readonly_paths.is_empty() {
            flags |= libc::CLONE_NEWNS;
        }
        if self.new_network {
            flags |= libc::CLONE_NEWNET;
        }
        if self.user_namespace {
            flags |= libc::CLONE_NEWUSER;
        }
        // SAFETY: plain system calls on valid, NUL-terminated buffers.
        unsafe {
            check(libc::unshare(flags))?;
            if self.user_namespace {
                write_file(c"/proc/self/setgroups", c"deny")?;
                write_file(c"/proc/self/uid_map", &self.uid_map)?;
                write_file(c"/proc/self/gid_map", &self.gid_map)?;
            }
            if !self.readonly_paths.is_empty() {
                // Keep our remounts from propagating back to the host.
                check(libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                for path in &self.readonly_paths {
                    remount_readonly(path)?;
                }
                check(libc::chdir(self.cwd.as_ptr()))?;
            }
            if self.new_network {
                // Loopback is harmless and many tools expect it; failure is not fatal.
                let _ = loopback_up();
            }
        }
        Ok(())
    }
}

unsafe fn remount_readonly(path: &CString) -> std::io::Result<()> {
    check(libc::mount(
        path.as_ptr(),
        path.as_ptr(),
        std::ptr::null(),
        libc::MS_BIND | libc::MS_REC,
        std::ptr::null(),
    ))?;
    // A remount must keep the flags the kernel locked on the original mount.
    let mut stat: libc::statvfs = std::mem::zeroed();
    check(libc::statvfs(path.as_ptr(), &mut stat))?;
    let mut keep = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag & st != 0 {
            keep |= ms;
        }
    }
    check(libc::mount(
        std::ptr::null(),
        path.as_ptr(),
        std::ptr::null(),
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
        std::ptr::null(),
    ))
}

unsafe fn write_file(path: &std::ffi::CStr, contents: &std::ffi::CStr) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    check(fd)?;
    let bytes = contents.to_bytes();
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    libc::close(fd);
    if written < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

unsafe fn loopback_up() -> std::io::Result<()> {
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    check(fd)?;
    let mut req: libc::ifreq = std::mem::zeroed();
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    let mut result = check(libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req));
    if result.is_ok() {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        result = check(libc::ioctl(fd, libc::SIOCSIFFLAGS, &req));
    }
    libc::close(fd);
    result
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
