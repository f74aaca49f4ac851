//! The sealed view: what a sandboxed process sees of the machine, built with bubblewrap.
//!
//! bubblewrap (`bwrap`, as Flatpak and Anthropic's sandbox runtime use it) creates the
//! namespaces and the mount tree, drops every capability, sets `no_new_privs` and loads
//! our seccomp programs just before it runs the command. We only decide what goes in:
//! the system's program and library folders and `/etc` read-only (with the files that
//! hold host secrets hidden), a minimal `/dev`, the sandbox's own `/proc`, an empty
//! `/tmp`, and the binds the provider asked for, each checked against the run's bind
//! scope ([`crate::host_paths`]) and handed to bubblewrap as a descriptor of the
//! folder that was checked. Everything else of the host, homes, `/run`, sockets and
//! agentgate's own state included, is simply not there.
//!
//! bubblewrap also runs a reaper as pid 1 of the new pid namespace: when the command
//! exits, the reaper exits and the kernel kills everything left in the namespace, so
//! `setsid` and double forks cannot outlive the command.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::landlock;
use crate::host_paths::{BindScope, Refusal};
use crate::wit::types::{Error, Mount};

/// System folders bound read-only when they are directories, or recreated as the
/// same symlinks (Debian's merged `/usr` makes `/bin` a link to `usr/bin`).
const SYSTEM_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Files under `/etc` that hold host secrets; each is replaced by an empty file.
const HIDDEN_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
];

/// The hostname inside every sandbox, so the host's is not disclosed.
const HOSTNAME: &str = "agentgate";

/// A validated sealed view.
#[derive(Debug, Clone)]
pub struct SealedView {
    binds: Vec<Bind>,
}

#[derive(Debug, Clone)]
struct Bind {
    /// The resolved host path that was checked, opened (`O_PATH`) once checked: bubblewrap binds exactly this folder
    /// (`--bind-fd`), and fails rather than bind another that took its path since.
    fd: Arc<OwnedFd>,
    target: PathBuf,
    readonly: bool,
}

/// File descriptors the host hands to bubblewrap for one spawn.
#[derive(Debug, Default, Clone)]
pub struct BwrapFds {
    /// Compiled seccomp programs, each loaded with `--add-seccomp-fd`.
    pub seccomp: Vec<RawFd>,
    /// `--info-fd`: bubblewrap writes the sandbox's pid there (used to attach a network).
    pub info: Option<RawFd>,
    /// `--block-fd`: the command waits until the host writes to it (network ready).
    pub block: Option<RawFd>,
    /// The sandbox init's host file ([`super::init_file`]), bound read-only into the
    /// view (see [`super::landlock`]). Without it the command runs with no Landlock
    /// fence (used only by tests of the arguments).
    pub init: Option<RawFd>,
    /// Set when the run has an egress allowlist: the proxy's folder and the sandbox's
    /// name files, bound in; the init starts the relays.
    pub egress: Option<SealedEgress>,
}

/// What a sandbox of a run with `sandbox.egress` gets of the proxy.
#[derive(Debug, Clone)]
pub struct SealedEgress {
    /// The host folder (0700) holding the proxy's socket, bound read-only at
    /// [`EGRESS_DIR`].
    pub socket_dir: PathBuf,
    /// The allowed `host:port`s.
    pub allow: Vec<String>,
    /// The sandbox's `/etc/hosts` ([`landlock::hosts_file`]), a sealed memfd.
    pub hosts: RawFd,
    /// The sandbox's `/etc/resolv.conf`: no resolver but loopback, a sealed memfd.
    pub resolv_conf: RawFd,
}

/// Where the proxy's folder appears in a sandbox.
pub const EGRESS_DIR: &str = "/.agentgate/egress";

impl SealedView {
    /// Checks the binds: absolute paths, no NUL, no target that would shadow the system
    /// folders the view depends on, and sources that exist and that `scope` allows (the
    /// run's own folders, or what the host path policy allows for mounts). Each source
    /// is bound as the resolved path that was checked.
    pub fn new(binds: Vec<Mount>, scope: &BindScope) -> Result<SealedView, Error> {
        let mut checked = Vec::with_capacity(binds.len());
        for (index, bind) in binds.into_iter().enumerate() {
            let field = |part: &str| format!("binds[{index}].{part}");
            for (part, path) in [("source", &bind.source), ("target", &bind.target)] {
                if !path.starts_with('/') || path.contains('\0') {
                    return Err(super::invalid_spec(
                        &field(part),
                        format!("{path:?} must be an absolute path"),
                    ));
                }
            }
            let target = lexically_normal(&bind.target);
            if target == Path::new("/")
                || SYSTEM_PATHS.iter().any(|p| target.starts_with(p))
                || target.starts_with("/proc")
                || target.starts_with("/dev")
            {
                return Err(super::invalid_spec(
                    &field("target"),
                    format!(
                        "{} would cover a system folder of the sandbox; mount it somewhere else",
                        bind.target
                    ),
                ));
            }
            let source = scope.check(&bind.source).map_err(|refusal| match refusal {
                Refusal::Missing { .. } | Refusal::NotAbsolute { .. } => {
                    Error::Failed(format!("cannot mount into the sandbox: {refusal}"))
                }
                refusal => Error::Denied(format!("bind {refusal}")),
            })?;
            let fd = open_checked(&source).map_err(|e| {
                Error::Failed(format!(
                    "cannot mount {} into the sandbox: {e}",
                    source.display()
                ))
            })?;
            checked.push(Bind {
                fd: Arc::new(fd),
                target,
                readonly: bind.readonly,
            });
        }
        Ok(SealedView { binds: checked })
    }

    /// The descriptors bubblewrap must inherit to bind the sources.
    pub fn bind_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.binds.iter().map(|b| b.fd.as_raw_fd())
    }

    fn binds_tmp(&self) -> bool {
        self.binds.iter().any(|b| b.target == Path::new("/tmp"))
    }

    /// The bubblewrap arguments that run `argv` in this view, starting in `cwd` (a path
    /// inside the view). `uid`/`gid` are the ids inside: the invoking user's own, so
    /// files written to the workspace belong to them (root inside holds no capability
    /// outside its namespaces). With an init in `fds` (see [`super::landlock`]) the
    /// command runs behind a Landlock fence that allows exactly the view.
    pub fn bwrap_args(
        &self,
        argv: &[String],
        cwd: &str,
        share_network: bool,
        (uid, gid): (u32, u32),
        fds: &BwrapFds,
    ) -> BwrapInvocation {
        let mut args = Args::default();
        args.push(["--unshare-user", "--unshare-ipc", "--unshare-pid"]);
        args.push(["--unshare-uts", "--unshare-cgroup-try"]);
        if !share_network {
            args.push(["--unshare-net"]);
        }
        args.push(["--uid", &uid.to_string(), "--gid", &gid.to_string()]);
        args.push(["--hostname", HOSTNAME]);
        args.push(["--disable-userns", "--die-with-parent", "--new-session"]);
        args.push(["--cap-drop", "ALL"]);
        for path in SYSTEM_PATHS {
            match std::fs::read_link(path) {
                Ok(link) => args.push_os(["--symlink".into(), link.into(), (*path).into()]),
                Err(_) if Path::new(path).is_dir() => args.push(["--ro-bind", path, path]),
                Err(_) => {}
            }
        }
        for file in HIDDEN_FILES {
            if Path::new(file).exists() {
                args.push(["--ro-bind", "/dev/null", file]);
            }
        }
        args.push(["--proc", "/proc", "--dev", "/dev"]);
        if !self.binds_tmp() {
            args.push(["--tmpfs", "/tmp"]);
        }
        for bind in &self.binds {
            let flag = if bind.readonly {
                "--ro-bind-fd"
            } else {
                "--bind-fd"
            };
            args.push_os([
                flag.into(),
                bind.fd.as_raw_fd().to_string().into(),
                bind.target.clone().into(),
            ]);
        }
        for fd in &fds.seccomp {
            args.push(["--add-seccomp-fd", &fd.to_string()]);
        }
        if let Some(fd) = fds.info {
            args.push(["--info-fd", &fd.to_string()]);
        }
        if let Some(fd) = fds.block {
            args.push(["--block-fd", &fd.to_string()]);
        }
        if let Some(fd) = fds.init {
            args.push(["--ro-bind-fd", &fd.to_string(), landlock::INIT_PATH]);
        }
        if let Some(egress) = &fds.egress {
            args.push_os([
                "--ro-bind".into(),
                egress.socket_dir.clone().into(),
                EGRESS_DIR.into(),
            ]);
            for (fd, file) in [
                (egress.hosts, "/etc/hosts"),
                (egress.resolv_conf, "/etc/resolv.conf"),
            ] {
                args.push(["--perms", "0444", "--ro-bind-data", &fd.to_string(), file]);
            }
        }
        args.push(["--chdir", cwd]);
        let argv = argv.iter().map(OsString::from).collect();
        let command = match fds.init {
            Some(_) => {
                let (readable, writable) = self.fence();
                let fence = landlock::Fence {
                    readable,
                    writable,
                    egress: fds.egress.as_ref().map(|egress| landlock::Egress {
                        socket: Path::new(EGRESS_DIR).join(crate::capabilities::EGRESS_SOCKET_NAME),
                        allow: egress.allow.clone(),
                    }),
                    command: argv,
                    ..Default::default()
                };
                fence.to_args()
            }
            None => argv,
        };
        BwrapInvocation {
            options: args.0,
            command,
        }
    }

    /// What the Landlock fence allows: read beneath the system folders, `/proc` and
    /// read-only binds; write beneath `/dev`, `/tmp` and writable binds.
    fn fence(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut readable: Vec<PathBuf> = SYSTEM_PATHS
            .iter()
            .filter(|p| std::fs::read_link(p).is_err() && Path::new(p).is_dir())
            .map(PathBuf::from)
            .collect();
        readable.push("/proc".into());
        readable.push(landlock::INIT_PATH.into());
        let mut writable = vec![PathBuf::from("/dev"), PathBuf::from("/tmp")];
        for bind in &self.binds {
            if bind.readonly {
                readable.push(bind.target.clone());
            } else {
                writable.push(bind.target.clone());
            }
        }
        (readable, writable)
    }
}

/// What bubblewrap is given for one spawn. The options name host paths (the binds'
/// sources: the workspace, the sandbox's state folder), and bubblewrap
/// stays in the sandbox as its pid 1, whose command line the agent can read; so the
/// host hands the options over in a sealed memfd (`--args FD`) and only the command,
/// which bubblewrap takes from its command line alone, is left there.
#[derive(Debug, Clone)]
pub struct BwrapInvocation {
    pub options: Vec<OsString>,
    pub command: Vec<OsString>,
}

impl BwrapInvocation {
    /// The options as `--args` reads them, each ended by a NUL. An option that holds a
    /// NUL would be read as several (a cwd of `/w\0--bind\0/\0/host` would bind the
    /// host's root), so it is refused.
    pub fn options_data(&self) -> Result<Vec<u8>, Error> {
        let mut data = Vec::new();
        for option in &self.options {
            let bytes = option.as_encoded_bytes();
            if bytes.contains(&0) {
                return Err(super::invalid_spec(
                    "cwd",
                    format!("{option:?} contains a NUL byte"),
                ));
            }
            data.extend_from_slice(bytes);
            data.push(0);
        }
        Ok(data)
    }
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<const N: usize>(&mut self, items: [&str; N]) {
        self.0.extend(items.iter().map(OsString::from));
    }
    fn push_os<const N: usize>(&mut self, items: [OsString; N]) {
        self.0.extend(items);
    }
}

/// Opens the checked path `source` (resolved, so no symlink is left in it) and makes
/// sure the descriptor is still at that path: a folder on the way swapped for a symlink
/// since the check would have led the open elsewhere.
fn open_checked(source: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(source, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let now = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    if now != source {
        return Err(std::io::Error::other(format!(
            "it changed while it was checked (it now leads to {})",
            now.display()
        )));
    }
    Ok(fd)
}

/// `path` without `.`, `..` and repeated slashes; `..` never climbs above `/`.
fn lexically_normal(path: &str) -> PathBuf {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    PathBuf::from(format!("/{}", parts.join("/")))
}

/// The oldest bubblewrap that takes every option `SealedView::bwrap_args` passes
/// (`--disable-userns` came in 0.8.0).
pub const MIN_BUBBLEWRAP: [u32; 3] = [0, 8, 0];

/// How to get bubblewrap.
pub const BUBBLEWRAP_FIX: &str = "install it (Debian/Ubuntu: apt-get install bubblewrap, Fedora: \
    dnf install bubblewrap) or use `provider: docker`";

/// The `bwrap` executable (on the host's `PATH`), or `unavailable` with how to install it.
pub fn bubblewrap() -> Result<PathBuf, Error> {
    super::which("bwrap").map(PathBuf::from).ok_or_else(|| {
        crate::capabilities::lacking(format!(
            "sandbox provider `subprocess` needs bubblewrap (`bwrap`) to seal the agent in, and it \
             is not on PATH; {BUBBLEWRAP_FIX}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn mount(source: &str, target: &str, readonly: bool) -> Mount {
        Mount {
            source: source.into(),
            target: target.into(),
            readonly,
        }
    }

    /// The whole invocation as one line, as bubblewrap reads it: options, `--`, command.
    fn text(invocation: &BwrapInvocation) -> String {
        let dashes = [OsString::from("--")];
        let all = invocation
            .options
            .iter()
            .chain(&dashes)
            .chain(&invocation.command);
        all.map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn binds_follow_the_request_and_come_after_the_system() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().to_str().unwrap();
        let view = SealedView::new(
            vec![
                mount(source, "/workspace", true),
                mount(source, "/tmp", false),
            ],
            &BindScope::only(&[dir.path().into()]),
        )
        .unwrap();
        let args = text(&view.bwrap_args(
            &["sh".into(), "-c".into(), "echo hi".into()],
            "/workspace",
            false,
            (0, 0),
            &BwrapFds {
                seccomp: vec![7],
                ..BwrapFds::default()
            },
        ));
        assert!(args.contains("--unshare-net"), "{args}");
        assert!(args.contains("--cap-drop ALL"), "{args}");
        assert!(args.contains("--ro-bind /etc /etc"), "{args}");
        assert!(args.contains("--ro-bind /dev/null /etc/shadow"), "{args}");
        // Each source goes over as the descriptor of the folder that was checked.
        let fds: Vec<RawFd> = view.bind_fds().collect();
        assert!(
            args.contains(&format!("--ro-bind-fd {} /workspace", fds[0])),
            "{args}"
        );
        assert!(
            args.contains(&format!("--bind-fd {} /tmp", fds[1])),
            "{args}"
        );
        assert!(!args.contains(source), "{args}");
        assert!(
            !args.contains("--tmpfs /tmp"),
            "a bound /tmp replaces the empty one"
        );
        assert!(args.contains("--add-seccomp-fd 7"), "{args}");
        assert!(
            args.ends_with("--chdir /workspace -- sh -c echo hi"),
            "{args}"
        );
        assert!(args.find("/etc/shadow") < args.find("/workspace"));
    }

    #[test]
    fn host_network_is_shared_only_when_asked() {
        let view = SealedView::new(vec![], &BindScope::default()).unwrap();
        let args = text(&view.bwrap_args(
            &["true".into()],
            "/",
            true,
            (1000, 1000),
            &BwrapFds::default(),
        ));
        assert!(!args.contains("--unshare-net"), "{args}");
        assert!(args.contains("--uid 1000 --gid 1000"), "{args}");
        assert!(args.contains("--tmpfs /tmp"), "{args}");
    }

    #[test]
    fn with_an_init_the_command_runs_behind_a_fence_of_exactly_the_view() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().to_str().unwrap();
        let view = SealedView::new(
            vec![
                mount(source, "/workspace", false),
                mount(source, "/data", true),
            ],
            &BindScope::only(&[dir.path().into()]),
        )
        .unwrap();
        let args = text(&view.bwrap_args(
            &["make".into()],
            "/workspace",
            false,
            (0, 0),
            &BwrapFds {
                init: Some(9),
                ..BwrapFds::default()
            },
        ));
        let init = format!("--ro-bind-fd 9 {}", landlock::INIT_PATH);
        assert!(args.contains(&init), "{args}");
        assert!(args.find(&init) < args.find("--chdir"), "{args}");
        let command = args.split("--chdir /workspace -- ").nth(1).unwrap();
        assert!(command.starts_with(landlock::INIT_PATH), "{command}");
        assert!(command.contains("--read /usr"), "{command}");
        assert!(command.contains("--read /data"), "{command}");
        assert!(command.contains("--write /workspace"), "{command}");
        assert!(!command.contains("--write /data"), "{command}");
        assert!(command.ends_with("-- make"), "{command}");
    }

    #[test]
    fn host_paths_stay_in_the_options_and_a_nul_cannot_add_one() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().to_str().unwrap();
        let view = SealedView::new(
            vec![mount(source, "/workspace", false)],
            &BindScope::only(&[dir.path().into()]),
        )
        .unwrap();
        let fds = BwrapFds {
            init: Some(9),
            ..BwrapFds::default()
        };
        let invocation = view.bwrap_args(&["make".into()], "/workspace", false, (0, 0), &fds);
        let command = invocation.command.join(OsStr::new(" "));
        assert!(!command.to_string_lossy().contains(source), "{command:?}");
        let data = invocation.options_data().unwrap();
        assert!(data.ends_with(b"--chdir\0/workspace\0"));
        let options: Vec<&[u8]> = data[..data.len() - 1].split(|&b| b == 0).collect();
        assert_eq!(options.len(), invocation.options.len());

        let smuggled = "/workspace\0--bind\0/\0/host";
        let invocation = view.bwrap_args(&["make".into()], smuggled, false, (0, 0), &fds);
        let error = invocation.options_data().unwrap_err();
        assert!(
            matches!(error, Error::InvalidSpec(ref f) if f.path == "cwd"),
            "{error:?}"
        );
    }

    #[test]
    fn binds_that_cover_the_system_or_do_not_exist_are_refused() {
        let none = BindScope::default();
        for target in ["/", "/usr/lib", "/etc", "/proc/1", "/dev", "/x/../etc"] {
            let error = SealedView::new(vec![mount("/tmp", target, false)], &none).unwrap_err();
            assert!(
                matches!(error, Error::InvalidSpec(ref f) if f.path == "binds[0].target"),
                "{target}: {error:?}"
            );
        }
        let error = SealedView::new(vec![mount("relative", "/x", false)], &none).unwrap_err();
        assert!(matches!(error, Error::InvalidSpec(ref f) if f.path == "binds[0].source"));
        let error =
            SealedView::new(vec![mount("/no/such/dir/xyz", "/x", false)], &none).unwrap_err();
        assert!(matches!(error, Error::Failed(ref m) if m.contains("/no/such/dir/xyz")));
    }

    #[test]
    fn a_bind_outside_the_scope_is_denied_and_a_link_binds_where_it_leads() {
        let run = tempfile::tempdir().unwrap();
        let scope = BindScope::only(&[run.path().into()]);
        for source in ["/", "/var/run", "/etc"] {
            let error = SealedView::new(vec![mount(source, "/host", true)], &scope).unwrap_err();
            assert!(matches!(error, Error::Denied(_)), "{source}: {error:?}");
        }
        let inner = run.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        let link = tempfile::tempdir().unwrap();
        let link = link.path().join("link");
        std::os::unix::fs::symlink(&inner, &link).unwrap();
        let view =
            SealedView::new(vec![mount(link.to_str().unwrap(), "/data", true)], &scope).unwrap();
        let fd = view.bind_fds().next().unwrap();
        let bound = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(bound, inner.canonicalize().unwrap());
    }

    #[test]
    fn a_path_that_no_longer_leads_to_what_was_checked_is_not_opened() {
        // As if a folder on the checked path had been swapped for a symlink since.
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(&real, &swapped).unwrap();
        let error = open_checked(&swapped).unwrap_err().to_string();
        assert!(error.contains("changed while it was checked"), "{error}");
        assert!(open_checked(&real.canonicalize().unwrap()).is_ok());
    }
}
