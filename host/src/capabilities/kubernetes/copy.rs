//! Files into and out of a pod: tar over `pods/exec`, as `kubectl cp` does, with the
//! archive written and read on the host by [`crate::beneath::archive`] (links copied as links,
//! never followed; the pod's archive treated as hostile and bounded). The exec streams
//! are async and the tar code is blocking: it runs on a blocking thread, fed through
//! a channel ([`ArchiveIn`], [`ArchiveOut`]).
//!
//! The pod may be hostile by the time of the copy back (an agent running as root can
//! replace `/bin/sh` or `tar` with `sleep`), so every copy is bounded in time: it is cut
//! when no byte moved for [`Time::idle`], or at [`Time::total`]. A cut copy is an error
//! that says so, with what it had left out by then ([`CopyFailed`]); the exec is
//! dropped, and what it left running ends with the pod.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::exec::Target;
use crate::beneath::archive::{self as transfer, Bounds, Moved, Stopped, TransferError};
use crate::capabilities::invalid_spec;
use crate::wit::kubernetes_v0_1_0::cluster::Transfer;
use crate::wit::types::Error;

/// How long one copy may take.
#[derive(Debug, Clone, Copy)]
pub struct Time {
    /// Without a byte moving either way.
    pub idle: Duration,
    /// In all, from starting tar in the pod to its exit status.
    pub total: Duration,
}

/// Copy-in runs inside `create`, under the run's own deadline: a big workspace fits.
pub const COPY_IN: Time = Time {
    idle: Duration::from_secs(30),
    total: Duration::from_secs(15 * 60),
};

/// Copy-back runs inside `destroy`, which the engine gives 30 s
/// (`runtime::instance::ActiveSandbox::destroy`): the pod's deletion after it
/// ([`super::pod::DELETE_IN_DESTROY`]) must still fit, whatever the pod did to the copy.
pub const COPY_OUT: Time = Time {
    idle: Duration::from_secs(10),
    total: Duration::from_secs(15),
};

/// How often a copy's progress is looked at.
const TICK: Duration = Duration::from_millis(250);
/// How long a cut copy's worker may take to see its stream end.
const AFTER_CUT: Duration = Duration::from_secs(2);
/// The largest chunk between the exec and the blocking side, and how many may wait.
const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 16;

/// Entries one copy may move.
const MAX_ENTRIES: u64 = 1_000_000;
/// Bytes one copy may move when the pod's disk is not limited.
const MAX_BYTES: u64 = 16 << 30;

/// Enters `$1` (made if missing) and unpacks the archive on stdin there.
const EXTRACT: &str = r#"mkdir -p -- "$1" && cd -- "$1" && exec tar -x -f -"#;
/// Packs `$1` onto stdout.
const CREATE: &str = r#"cd -- "$1" && exec tar -c -f - ."#;

/// The bounds of a copy for a pod whose disk is `disk_bytes`.
pub fn bounds(disk_bytes: Option<u64>) -> Bounds {
    Bounds {
        max_bytes: disk_bytes.unwrap_or(MAX_BYTES),
        max_entries: MAX_ENTRIES,
    }
}

/// `pod_dir` checked: absolute, no `..`.
fn pod_path(field: &str, pod_dir: &str) -> Result<(), Error> {
    if !pod_dir.starts_with('/') || pod_dir.split('/').any(|c| c == "..") {
        return Err(invalid_spec(
            field,
            format!("`{pod_dir}` must be an absolute path without `..`"),
        ));
    }
    Ok(())
}

/// `host_dir` when it is the run's workspace (`workspace`), else `denied`: a plugin
/// copies the workspace and nothing else of the host.
pub fn workspace_only(
    field: &str,
    host_dir: &str,
    workspace: Option<&Path>,
) -> Result<PathBuf, Error> {
    let resolved = Path::new(host_dir)
        .canonicalize()
        .map_err(|e| invalid_spec(field, format!("`{host_dir}` cannot be resolved: {e}")))?;
    match workspace.and_then(|w| w.canonicalize().ok()) {
        Some(w) if w == resolved => Ok(resolved),
        _ => Err(Error::Denied(format!(
            "`{host_dir}` is not this run's workspace; a pod's files are copied to and from \
             the workspace only"
        ))),
    }
}

/// The archive moving on a blocking thread (`worker`), and the task that moves its
/// bytes to or from the exec (`pump`).
struct Moving {
    worker: tokio::task::JoinHandle<Result<Moved, Stopped>>,
    pump: tokio::task::JoinHandle<()>,
}

/// A copy that did not finish: why, and what it had moved and left out until then.
#[derive(Debug)]
pub struct CopyFailed {
    pub error: Error,
    pub moved: Moved,
}

impl From<Error> for CopyFailed {
    fn from(error: Error) -> Self {
        CopyFailed {
            error,
            moved: Moved::default(),
        }
    }
}

/// What one copy moved, for the plugin.
pub fn as_transfer(m: Moved) -> Transfer {
    Transfer {
        files: m.files,
        bytes: m.bytes,
        skipped: m.skipped.iter().map(ToString::to_string).collect(),
    }
}

/// Bytes a copy moved across the exec so far.
#[derive(Default)]
struct Progress {
    bytes: AtomicU64,
}

impl Progress {
    fn moved(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::AcqRel);
    }
}

/// The blocking side of the archive's stream. kube's exec streams are halves of a
/// `SimplexStream`, which never end when the exec is aborted (only its normal end shuts
/// them), so the blocking side moves chunks through a channel that a task, the pump,
/// feeds from or drains into the exec's stream. Aborting the pump drops the channel's
/// other end: a cut copy's blocking thread always ends, with an error, never with what
/// looks like the end of the archive.
struct ArchiveIn {
    rx: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    ended: bool,
}

impl Read for ArchiveIn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                // The pump's empty chunk: the exec's stream ended normally.
                Some(chunk) if chunk.is_empty() => self.ended = true,
                Some(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                None => return Err(cut()),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The exec's stdout, into an [`ArchiveIn`], by a pump to abort when the copy stops.
fn pump_out(
    mut stdout: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    progress: Arc<Progress>,
) -> (tokio::task::JoinHandle<()>, ArchiveIn) {
    let (tx, rx) = mpsc::channel(CHUNKS);
    let pump = tokio::spawn(async move {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            match stdout.read(&mut buffer).await {
                Ok(0) => {
                    let _ = tx.send(Vec::new()).await;
                    return;
                }
                Ok(n) => {
                    progress.moved(n);
                    if tx.send(buffer[..n].to_vec()).await.is_err() {
                        return;
                    }
                }
                // Dropping `tx` without the empty chunk: the reader sees the stream cut.
                Err(_) => return,
            }
        }
    });
    let input = ArchiveIn {
        rx,
        chunk: Vec::new(),
        at: 0,
        ended: false,
    };
    (pump, input)
}

/// The blocking side of the exec's stdin (see [`ArchiveIn`]).
struct ArchiveOut {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Write for ArchiveOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CHUNK);
        self.tx
            .blocking_send(buf[..n].to_vec())
            .map_err(|_| cut())?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An [`ArchiveOut`] into the exec's stdin, by a pump to abort when the copy stops; the
/// stdin is shut (tar sees the archive end) once the [`ArchiveOut`] is dropped.
fn pump_in(
    mut stdin: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    progress: Arc<Progress>,
) -> (tokio::task::JoinHandle<()>, ArchiveOut) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(CHUNKS);
    let pump = tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            if stdin.write_all(&chunk).await.is_err() {
                return;
            }
            progress.moved(chunk.len());
        }
        let _ = stdin.shutdown().await;
    });
    (pump, ArchiveOut { tx })
}

fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the copy was cut")
}

/// Why a copy was cut while its worker was still moving the archive.
#[derive(Debug, thiserror::Error)]
enum Cut {
    #[error("the copy did not finish within its bound of {secs}s ({bytes} bytes had moved)")]
    Total { secs: u64, bytes: u64 },
    #[error("no byte moved for {secs}s ({bytes} bytes had moved): tar in the pod does not answer")]
    Idle { secs: u64, bytes: u64 },
}

/// Waits for `worker` while bytes keep moving; `Err` says why the copy is cut.
async fn watch<T>(
    worker: &mut tokio::task::JoinHandle<T>,
    progress: &Progress,
    deadline: Instant,
    time: Time,
) -> Result<Result<T, tokio::task::JoinError>, Cut> {
    let mut seen = 0;
    let mut moved_at = Instant::now();
    loop {
        tokio::select! {
            done = &mut *worker => return Ok(done),
            () = tokio::time::sleep(TICK) => {}
        }
        let now = Instant::now();
        let bytes = progress.bytes.load(Ordering::Acquire);
        if bytes != seen {
            seen = bytes;
            moved_at = now;
        }
        if now >= deadline {
            return Err(Cut::Total {
                secs: time.total.as_secs(),
                bytes,
            });
        }
        if now.duration_since(moved_at) >= time.idle {
            return Err(Cut::Idle {
                secs: time.idle.as_secs(),
                bytes,
            });
        }
    }
}

/// How a tar exec failed: `lost`, its stream ended without the status the API server
/// sends last (a connection between API server and kubelet lost under load), or
/// anything else (tar failed, the archive was refused, the copy was cut).
struct TarFailure {
    lost: bool,
    failed: CopyFailed,
}

impl From<Error> for TarFailure {
    fn from(error: Error) -> Self {
        TarFailure {
            lost: false,
            failed: error.into(),
        }
    }
}

/// Runs a tar exec in the pod while `local` moves the archive on a blocking thread,
/// all before `deadline` and never idle for longer than `time.idle`; fails with the
/// exec's stderr when tar did.
async fn with_tar<F>(
    target: &Target,
    script: &str,
    pod_dir: &str,
    writes_stdin: bool,
    deadline: Instant,
    time: Time,
    local: F,
) -> Result<Moved, TarFailure>
where
    F: FnOnce(&mut kube::api::AttachedProcess, Arc<Progress>) -> Result<Moving, Error>,
{
    let argv = ["/bin/sh", "-c", script, "agentgate-copy", pod_dir]
        .map(String::from)
        .to_vec();
    let mut attached = tokio::time::timeout_at(deadline, target.attach(argv, writes_stdin))
        .await
        .map_err(|_| {
            Error::TimedOut(format!(
                "starting tar in the pod: no answer within the copy's bound of {}s",
                time.total.as_secs()
            ))
        })??;
    let status = attached.take_status();
    let stderr = attached.stderr();
    let progress = Arc::new(Progress::default());
    let Moving { mut worker, pump } = local(&mut attached, progress.clone())?;
    // Read whatever tar says (its first 64 KiB kept) while the archive moves, so a
    // chatty tar never blocks on a full pipe.
    let said = tokio::spawn(async move {
        let mut kept = Vec::new();
        if let Some(mut r) = stderr {
            let mut buffer = [0u8; 8192];
            while let Ok(n @ 1..) = r.read(&mut buffer).await {
                let room = (64 * 1024usize).saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
        kept
    });
    let failure = |error: Error, moved: Moved| TarFailure {
        lost: false,
        failed: CopyFailed { error, moved },
    };
    let moved = match watch(&mut worker, &progress, deadline, time).await {
        Ok(Ok(Ok(moved))) => moved,
        Ok(Ok(Err(stopped))) => {
            // An archive that ended early, on a stream that ended without tar's status,
            // was lost on the way (API server to kubelet): worth another attempt.
            let early = matches!(
                stopped.error,
                TransferError::Truncated | TransferError::Archive { .. }
            );
            let lost = early
                && match status {
                    Some(status) => {
                        matches!(tokio::time::timeout(AFTER_CUT, status).await, Ok(None))
                    }
                    None => true,
                };
            // Stops the exec, and tar with it.
            attached.abort();
            said.abort();
            pump.abort();
            return Err(TarFailure {
                lost,
                failed: CopyFailed {
                    error: Error::Failed(stopped.error.to_string()),
                    moved: stopped.moved,
                },
            });
        }
        Ok(Err(e)) => {
            attached.abort();
            said.abort();
            pump.abort();
            return Err(Error::Failed(format!("the copy's worker failed: {e}")).into());
        }
        Err(why) => {
            // Without its pump the worker's stream fails at once.
            pump.abort();
            attached.abort();
            said.abort();
            let moved = match tokio::time::timeout(AFTER_CUT, worker).await {
                Ok(Ok(Ok(moved))) => moved,
                Ok(Ok(Err(stopped))) => stopped.moved,
                _ => Moved::default(),
            };
            return Err(failure(
                Error::TimedOut(format!("the copy was cut: {why}")),
                moved,
            ));
        }
    };
    let status = match status {
        Some(s) => match tokio::time::timeout_at(deadline, s).await {
            Ok(status) => status,
            Err(_) => {
                attached.abort();
                said.abort();
                return Err(failure(
                    Error::TimedOut(format!(
                        "tar in the pod did not end after its archive, within the copy's bound \
                         of {}s",
                        time.total.as_secs()
                    )),
                    moved,
                ));
            }
        },
        None => None,
    };
    let code = status.as_ref().and_then(super::exec::exit_code);
    let said = match tokio::time::timeout(AFTER_CUT, said).await {
        Ok(Ok(said)) => said,
        _ => Vec::new(),
    };
    if code != Some(0) {
        // Without an exit code the API server's own words are all there is (an exec
        // that could not start, a container that ended under it).
        let why = status
            .as_ref()
            .map(|s| {
                format!(
                    "{} {}",
                    s.reason.as_deref().unwrap_or_default(),
                    s.message.as_deref().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "the exec ended without a status".into());
        let error = Error::Failed(format!(
            "tar in the pod failed (exit {code:?}; {}): {}",
            why.trim(),
            String::from_utf8_lossy(&said).trim()
        ));
        return Err(TarFailure {
            lost: status.is_none(),
            failed: CopyFailed { error, moved },
        });
    }
    Ok(moved)
}

/// Runs a copy, and once more when its stream was lost before tar's status and time is
/// left: both copies make their destination equal to their source, so a second
/// attempt is safe.
async fn retried<Fut>(
    deadline: Instant,
    mut attempt: impl FnMut() -> Fut,
) -> Result<Moved, CopyFailed>
where
    Fut: std::future::Future<Output = Result<Moved, TarFailure>>,
{
    match attempt().await {
        Err(TarFailure { lost: true, .. }) if Instant::now() < deadline => {
            attempt().await.map_err(|f| f.failed)
        }
        other => other.map_err(|f| f.failed),
    }
}

/// Copies the workspace `host_dir` into `pod_dir`.
pub async fn copy_in(
    target: &Target,
    host_dir: PathBuf,
    pod_dir: &str,
    bounds: Bounds,
) -> Result<Moved, CopyFailed> {
    pod_path("pod-dir", pod_dir)?;
    let deadline = Instant::now() + COPY_IN.total;
    retried(deadline, || {
        let host_dir = host_dir.clone();
        with_tar(
            target,
            EXTRACT,
            pod_dir,
            true,
            deadline,
            COPY_IN,
            move |attached, progress| {
                let stdin = attached
                    .stdin()
                    .ok_or_else(|| Error::Failed("the copy's exec has no stdin".into()))?;
                let (pump, out) = pump_in(stdin, progress);
                let worker = tokio::task::spawn_blocking(move || {
                    // Dropping `out` at the end of the archive ends tar's stdin.
                    transfer::pack(&host_dir, out, &bounds).map_err(|error| Stopped {
                        error,
                        moved: Moved::default(),
                    })
                });
                Ok(Moving { worker, pump })
            },
        )
    })
    .await
}

/// Makes the workspace `host_dir` equal to `pod_dir`, leaving out (and listing) what
/// it refuses; bounded by [`COPY_OUT`].
pub async fn copy_out(
    target: &Target,
    pod_dir: &str,
    host_dir: PathBuf,
    bounds: Bounds,
) -> Result<Moved, CopyFailed> {
    pod_path("pod-dir", pod_dir)?;
    let time = COPY_OUT;
    let deadline = Instant::now() + time.total;
    retried(deadline, || {
        let host_dir = host_dir.clone();
        with_tar(
            target,
            CREATE,
            pod_dir,
            false,
            deadline,
            time,
            move |attached, progress| {
                let stdout = attached
                    .stdout()
                    .ok_or_else(|| Error::Failed("the copy's exec has no stdout".into()))?;
                let (pump, input) = pump_out(stdout, progress);
                let worker = tokio::task::spawn_blocking(move || {
                    transfer::unpack(input, &host_dir, &bounds)
                });
                Ok(Moving { worker, pump })
            },
        )
    })
    .await
}
