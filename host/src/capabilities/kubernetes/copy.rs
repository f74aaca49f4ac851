//! Files into and out of a pod: tar over `pods/exec`, as `kubectl cp` does, with the
//! archive written and read on the host by [`super::transfer`] (links copied as links,
//! never followed; the pod's archive treated as hostile and bounded). The exec streams
//! are async and the tar code is blocking: it runs on a blocking thread behind a
//! [`SyncIoBridge`].

use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt;
use tokio_util::io::SyncIoBridge;

use super::exec::Target;
use super::transfer::{self, Bounds, Moved};
use crate::capabilities::invalid_spec;
use crate::runtime::bindings::kubernetes_v0_1_0::cluster::Transfer;
use crate::runtime::bindings::types::Error;

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

fn as_transfer(m: Moved) -> Transfer {
    Transfer {
        files: m.files,
        bytes: m.bytes,
        skipped: m.skipped,
    }
}

/// Runs a tar exec in the pod while `local` moves the archive on a blocking thread;
/// fails with the exec's stderr when tar did.
async fn with_tar<F>(
    target: &Target,
    script: &str,
    pod_dir: &str,
    writes_stdin: bool,
    local: F,
) -> Result<Transfer, TarFailure>
where
    F: FnOnce(
        &mut kube::api::AttachedProcess,
    ) -> Result<tokio::task::JoinHandle<Result<Moved, String>>, Error>,
{
    let argv = ["/bin/sh", "-c", script, "agentgate-copy", pod_dir]
        .map(String::from)
        .to_vec();
    let mut attached = target.attach(argv, writes_stdin).await?;
    let status = attached.take_status();
    let stderr = attached.stderr();
    let worker = local(&mut attached)?;
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
    let result = worker
        .await
        .map_err(|e| Error::Failed(format!("the copy's worker failed: {e}")));
    let moved = match result.and_then(|r| r.map_err(Error::Failed)) {
        Ok(m) => m,
        Err(e) => {
            // Stops the exec, and tar with it.
            attached.abort();
            said.abort();
            return Err(e.into());
        }
    };
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    let code = status.as_ref().and_then(super::exec::exit_code);
    let said = said.await.unwrap_or_default();
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
        return Err(match status {
            None => TarFailure::StreamLost(error),
            Some(_) => TarFailure::Failed(error),
        });
    }
    Ok(as_transfer(moved))
}

/// How a tar exec failed: the exec's stream ended without the status the API server
/// sends last (a connection between API server and kubelet lost under load), or tar
/// itself failed.
enum TarFailure {
    StreamLost(Error),
    Failed(Error),
}

impl From<Error> for TarFailure {
    fn from(error: Error) -> Self {
        TarFailure::Failed(error)
    }
}

/// Runs a copy, and once more when its stream was lost before tar's status: both
/// copies make their destination equal to their source, so a second attempt is safe.
async fn retried<Fut>(mut attempt: impl FnMut() -> Fut) -> Result<Transfer, Error>
where
    Fut: std::future::Future<Output = Result<Transfer, TarFailure>>,
{
    match attempt().await {
        Err(TarFailure::StreamLost(_)) => match attempt().await {
            Ok(done) => Ok(done),
            Err(TarFailure::StreamLost(e) | TarFailure::Failed(e)) => Err(e),
        },
        Ok(done) => Ok(done),
        Err(TarFailure::Failed(e)) => Err(e),
    }
}

/// Copies the workspace `host_dir` into `pod_dir`.
pub async fn copy_in(
    target: &Target,
    host_dir: PathBuf,
    pod_dir: &str,
    bounds: Bounds,
) -> Result<Transfer, Error> {
    pod_path("pod-dir", pod_dir)?;
    retried(|| {
        let host_dir = host_dir.clone();
        with_tar(target, EXTRACT, pod_dir, true, move |attached| {
            let stdin = attached
                .stdin()
                .ok_or_else(|| Error::Failed("the copy's exec has no stdin".into()))?;
            let mut bridge = SyncIoBridge::new(stdin);
            Ok(tokio::task::spawn_blocking(move || {
                let packed =
                    transfer::pack(&host_dir, &mut bridge, &bounds).map_err(|e| e.to_string());
                // The end of the archive is the end of tar's stdin.
                let _ = bridge.shutdown();
                packed
            }))
        })
    })
    .await
}

/// Makes the workspace `host_dir` equal to `pod_dir`.
pub async fn copy_out(
    target: &Target,
    pod_dir: &str,
    host_dir: PathBuf,
    bounds: Bounds,
) -> Result<Transfer, Error> {
    pod_path("pod-dir", pod_dir)?;
    retried(|| {
        let host_dir = host_dir.clone();
        with_tar(target, CREATE, pod_dir, false, move |attached| {
            let stdout = attached
                .stdout()
                .ok_or_else(|| Error::Failed("the copy's exec has no stdout".into()))?;
            let bridge = SyncIoBridge::new(stdout);
            Ok(tokio::task::spawn_blocking(move || {
                transfer::unpack(bridge, &host_dir, &bounds).map_err(|e| e.to_string())
            }))
        })
    })
    .await
}
