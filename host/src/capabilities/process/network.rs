//! `network: bridge` for sealed processes: an isolated network namespace with outbound
//! access through slirp4netns, a user-mode network stack (as rootless Podman uses it).
//!
//! The sandbox gets its own namespace from bubblewrap and waits (`--block-fd`) until
//! the stack is attached: bubblewrap reports the sandbox's pid (`--info-fd`),
//! slirp4netns joins that namespace, adds `tap0` with a default route and DNS at
//! 10.0.2.3, and says when it is ready. `--disable-host-loopback` keeps the host's own
//! `127.0.0.1` (where agentgate's and other local services listen) out of reach.
//! slirp4netns runs with its own seccomp filter and mount sandbox, and lives exactly as
//! long as the command.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use crate::wit::types::Error;

/// How long the stack may take to come up before the spawn fails.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The pipes between the host and one bubblewrap for attaching the network.
pub struct BridgePipes {
    info_read: OwnedFd,
    /// Given to bubblewrap as `--info-fd`.
    pub info_write: OwnedFd,
    /// Given to bubblewrap as `--block-fd`.
    pub block_read: OwnedFd,
    block_write: OwnedFd,
}

/// A running slirp4netns; killed when dropped.
pub struct Bridge {
    stack: tokio::process::Child,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.stack.start_kill();
    }
}

/// How to get slirp4netns.
pub const SLIRP4NETNS_FIX: &str =
    "install it (Debian/Ubuntu: apt-get install slirp4netns) or use `network: none`";

/// The `slirp4netns` executable, or `unavailable` with how to install it.
pub fn slirp4netns() -> Result<std::path::PathBuf, Error> {
    super::which("slirp4netns").map(Into::into).ok_or_else(|| {
        crate::capabilities::lacking(format!(
            "`network: bridge` in a sealed sandbox needs slirp4netns for outbound access, and it \
             is not on PATH; {SLIRP4NETNS_FIX}"
        ))
    })
}

impl BridgePipes {
    pub fn new() -> Result<BridgePipes, Error> {
        let (info_read, info_write) = pipe()?;
        let (block_read, block_write) = pipe()?;
        Ok(BridgePipes {
            info_read,
            info_write,
            block_read,
            block_write,
        })
    }

    /// After bubblewrap started: attaches the stack to its namespace, then lets the
    /// command run. Drops the host's copies of bubblewrap's ends first, so a failed
    /// bubblewrap is seen as end-of-file rather than a hang.
    pub async fn attach(self) -> Result<Bridge, Error> {
        let BridgePipes {
            info_read,
            info_write,
            block_read,
            block_write,
        } = self;
        drop((info_write, block_read));
        let pid = tokio::task::spawn_blocking(move || sandbox_pid(info_read))
            .await
            .map_err(|e| Error::Failed(format!("waiting for the sandbox: {e}")))??;

        wait_for_loopback(pid).await?;
        let (ready_read, ready_write) = pipe()?;
        let ready_fd = ready_write.as_raw_fd();
        let owner = owning_user_namespace(pid)?;
        let owner_fd = owner.as_raw_fd();
        let mut command = tokio::process::Command::new(slirp4netns()?);
        command
            .args(["--configure", "--mtu=65520", "--disable-host-loopback"])
            .args(["--enable-sandbox", "--enable-seccomp"])
            .arg(format!("--ready-fd={ready_fd}"))
            // Configuring the namespace takes the user namespace that owns it (the
            // sandbox's outer one: bubblewrap nests another to disable new ones).
            .arg(format!("--userns-path=/proc/self/fd/{owner_fd}"))
            .arg("--netns-type=path")
            .arg(format!("/proc/{pid}/ns/net"))
            .arg("tap0")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        super::inherit_fd(&mut command, ready_fd);
        super::inherit_fd(&mut command, owner_fd);
        let mut stack = command
            .spawn()
            .map_err(|e| Error::Unavailable(format!("starting slirp4netns: {e}")))?;
        drop((ready_write, owner));
        let ready = tokio::time::timeout(
            READY_TIMEOUT,
            tokio::task::spawn_blocking(move || {
                let mut byte = [0u8; 1];
                std::fs::File::from(ready_read).read(&mut byte)
            }),
        )
        .await;
        if !matches!(ready, Ok(Ok(Ok(1)))) {
            let _ = stack.start_kill();
            let mut stderr = String::new();
            if let Some(mut pipe) = stack.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), pipe.read_to_string(&mut stderr))
                        .await;
            }
            let message = format!(
                "slirp4netns could not attach the bridge network: {}",
                stderr.trim()
            );
            return Err(match tun_hint(&stderr) {
                Some(hint) => crate::capabilities::lacking(format!("{message}; {hint}")),
                None => Error::Unavailable(message),
            });
        }
        std::fs::File::from(block_write)
            .write_all(b"1")
            .map_err(|e| Error::Failed(format!("releasing the sandbox: {e}")))?;
        Ok(Bridge { stack })
    }
}

impl BridgePipes {
    /// After bubblewrap started a sandbox of a run with an egress allowlist: lets
    /// unprivileged processes of its (empty) network namespace listen on ports below
    /// 1024, so the relay for an allowed `name:443` can listen where the client
    /// connects, then lets the command run. The setting is the namespace's own
    /// (`net.ipv4.ip_unprivileged_port_start`); only loopback exists there.
    pub async fn open_low_ports(self) -> Result<(), Error> {
        let BridgePipes {
            info_read,
            info_write,
            block_read,
            block_write,
        } = self;
        drop((info_write, block_read));
        let pid = tokio::task::spawn_blocking(move || sandbox_pid(info_read))
            .await
            .map_err(|e| Error::Failed(format!("waiting for the sandbox: {e}")))??;
        let owner = owning_user_namespace(pid)?;
        let net = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| Error::Failed(format!("finding the sandbox's network namespace: {e}")))?;
        tokio::task::spawn_blocking(move || set_unprivileged_port_start(&owner, &net))
            .await
            .map_err(|e| Error::Failed(format!("configuring the sandbox's network: {e}")))??;
        std::fs::File::from(block_write)
            .write_all(b"1")
            .map_err(|e| Error::Failed(format!("releasing the sandbox: {e}")))
    }
}

/// Writes 0 to `net.ipv4.ip_unprivileged_port_start` of the network namespace `net`,
/// from a child that joins the user namespace owning it (this user's, made by
/// bubblewrap) and then `net`: joining a user namespace needs a single thread.
fn set_unprivileged_port_start(owner: &OwnedFd, net: &std::fs::File) -> Result<(), Error> {
    let path = c"/proc/sys/net/ipv4/ip_unprivileged_port_start";
    let (owner, net) = (owner.as_raw_fd(), net.as_raw_fd());
    // SAFETY: the child makes only async-signal-safe calls (setns, open, write, _exit).
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(Error::Failed(format!(
            "configuring the sandbox's network: {}",
            std::io::Error::last_os_error()
        )));
    }
    if child == 0 {
        // SAFETY: in the forked child; every call is async-signal-safe.
        unsafe {
            let code = if libc::setns(owner, libc::CLONE_NEWUSER) != 0 {
                1
            } else if libc::setns(net, libc::CLONE_NEWNET) != 0 {
                2
            } else {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0\n".as_ptr().cast(), 2) != 2 {
                    3
                } else {
                    0
                }
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    while unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Ok(()),
        code => Err(Error::Unavailable(format!(
            "could not let the egress relays listen on ports below 1024 in the sandbox's \
             network namespace (step {code:?}: join its user namespace, its network \
             namespace, write ip_unprivileged_port_start)"
        ))),
    }
}

/// What to do when slirp4netns could not open the TUN device, as happens to users other
/// than root where `/dev/net/tun` is not world read-writable.
fn tun_hint(stderr: &str) -> Option<&'static str> {
    stderr.contains("/dev/net/tun").then_some(TUN_FIX)
}

/// How to give slirp4netns the TUN device.
pub const TUN_FIX: &str = "the bridge network needs read-write access to /dev/net/tun (mode \
    0666, the default of most distributions: `chmod 0666 /dev/net/tun`, and `modprobe tun` \
    where it is missing), or use `network: none`";

/// Whether this process may open `/dev/net/tun` read-write, as slirp4netns (started by
/// this process, as this user) must to attach the bridge network.
pub fn open_tun() -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map(drop)
}

/// Reads bubblewrap's `{"child-pid": N, ...}` from the info pipe.
fn sandbox_pid(info: OwnedFd) -> Result<u32, Error> {
    let mut text = String::new();
    let mut file = std::fs::File::from(info);
    let mut buf = [0u8; 256];
    // bubblewrap keeps the pipe open while the sandbox runs: read up to the first `}`.
    while !text.contains('}') {
        match file.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    let value: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|_| Error::Failed(format!("bubblewrap did not start the sandbox ({text:?})")))?;
    value["child-pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .ok_or_else(|| Error::Failed(format!("bubblewrap reported no sandbox pid ({text:?})")))
}

/// Waits until bubblewrap has brought up the sandbox's loopback: slirp4netns brings it
/// up too, and the two must not race (bubblewrap fails when its address already
/// exists). Loopback routes appear in the namespace's FIB only once it is up.
async fn wait_for_loopback(pid: u32) -> Result<(), Error> {
    let fib = format!("/proc/{pid}/net/fib_trie");
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        match std::fs::read_to_string(&fib) {
            Ok(text) if text.contains("127.0.0.1") => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Failed(format!(
                    "the sandbox exited before its network was attached ({e})"
                )))
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Unavailable(
                "the sandbox's loopback did not come up; cannot attach the bridge network".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The user namespace that owns the sandbox's network namespace (`NS_GET_USERNS`).
fn owning_user_namespace(pid: u32) -> Result<OwnedFd, Error> {
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    let failed =
        |e: std::io::Error| Error::Failed(format!("finding the sandbox's network namespace: {e}"));
    let net = std::fs::File::open(format!("/proc/{pid}/ns/net")).map_err(failed)?;
    // SAFETY: the ioctl takes no argument and returns a new descriptor we then own.
    let fd = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: fd is fresh and owned by nobody else; mark it close-on-exec like the rest.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Error> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fresh descriptors that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(Error::Failed(format!(
            "creating a pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}
