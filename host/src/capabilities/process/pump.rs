//! Moves a child's output into an execution's channel and reports how it ended.
//!
//! An execution ends when its main process exits. Whatever it left running in its
//! process group is killed then, which also closes the pipes it inherited, so a
//! background grandchild cannot keep the execution open forever.

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::network::Bridge;
use super::ProcessGroup;
use crate::capabilities::execution::{Kill, MAX_CHUNK};
use crate::wit::execution::{Output, OutputChunk};
use crate::wit::types::{ExitStatus, OutputPipe};

/// Chunks buffered between the pump and a plugin that is slow to read.
const BUFFERED_CHUNKS: usize = 16;

/// `bridge`, the command's network stack when it has one, lives as long as the pump.
pub fn start(
    mut child: Child,
    group: Arc<ProcessGroup>,
    timeout: Option<Duration>,
    bridge: Option<Bridge>,
) -> mpsc::Receiver<Output> {
    let (tx, rx) = mpsc::channel(BUFFERED_CHUNKS);
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    tokio::spawn(async move {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut out_buf = vec![0u8; MAX_CHUNK];
        let mut err_buf = vec![0u8; MAX_CHUNK];
        let mut status = None;
        let mut timed_out = false;
        while status.is_none() || stdout.is_some() || stderr.is_some() {
            let chunk = tokio::select! {
                read = read_some(&mut stdout, &mut out_buf), if stdout.is_some() => {
                    take_chunk(read, &mut stdout, OutputPipe::Stdout, &out_buf)
                }
                read = read_some(&mut stderr, &mut err_buf), if stderr.is_some() => {
                    take_chunk(read, &mut stderr, OutputPipe::Stderr, &err_buf)
                }
                exit = child.wait(), if status.is_none() => {
                    status = Some(exit);
                    group.kill();
                    None
                }
                _ = sleep_until(deadline), if status.is_none() && !timed_out => {
                    timed_out = true;
                    group.kill();
                    None
                }
            };
            if let Some(chunk) = chunk {
                if tx.send(Output::Chunk(chunk)).await.is_err() {
                    // Nobody will read: the execution was dropped.
                    group.kill();
                    return;
                }
            }
        }
        let status = status.and_then(Result::ok);
        let exit = ExitStatus {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out,
        };
        drop(bridge);
        let _ = tx.send(Output::Exited(exit)).await;
    });
    rx
}

async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

fn take_chunk<R>(
    read: std::io::Result<usize>,
    pipe: &mut Option<R>,
    which: OutputPipe,
    buf: &[u8],
) -> Option<OutputChunk> {
    match read {
        Ok(n) if n > 0 => Some(OutputChunk {
            pipe: which,
            data: buf[..n].to_vec(),
        }),
        _ => {
            *pipe = None;
            None
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
