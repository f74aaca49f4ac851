//! The host side of `agentgate:plugin/execution`: a running command whose pipes the
//! host reads.
//!
//! Whatever starts the command (a process, later a Docker exec) pumps its output into
//! a bounded channel; the plugin pulls from it with `read`. Backpressure is natural: a
//! plugin that stops reading stalls the pump, not the host. Dropping an `Execution`
//! (the plugin drops its handle, its store dies, or the run is cancelled) kills the
//! command and everything it started.
//!
//! The table holds an [`Execution`]; the plugin's handle is the contract's
//! `execution` (see [`super::view::TableAs`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use wasmtime::component::Resource;

use crate::capabilities::view::TableAs;
use crate::capabilities::PluginView;
use crate::record::OutputLogs;
use crate::wit::execution::{Execution as WitExecution, HostExecution, Output};
use crate::wit::types::{Error, ExitStatus, ResourceUsage};

/// Largest chunk delivered by one `read`.
pub const MAX_CHUNK: usize = 64 * 1024;

/// What the plugin keeps of a command's stdin once the request's initial `data` is
/// written. Kept open (`keep_open`), it gets the stream after `data`. Otherwise `data`
/// is written in the background, so that a command that never reads it cannot block the
/// plugin, and the stream is then shut: the command sees its end.
pub async fn feed_stdin<W>(
    mut input: W,
    data: Option<Vec<u8>>,
    keep_open: bool,
) -> Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>
where
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    if keep_open {
        if let Some(data) = data {
            let _ = input.write_all(&data).await;
        }
        return Some(Box::new(input));
    }
    tokio::spawn(async move {
        if let Some(data) = data {
            let _ = input.write_all(&data).await;
        }
        let _ = input.shutdown().await;
    });
    None
}

/// Stops a command and everything it started.
pub trait Kill: Send + Sync {
    fn kill(&self);
}

pub struct Execution {
    id: String,
    output: mpsc::Receiver<Output>,
    stdin: Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    killer: Arc<dyn Kill>,
    exit: Option<ExitStatus>,
    /// The run's output logs, which get a copy of what the plugin reads.
    logs: Option<Arc<OutputLogs>>,
}

impl Execution {
    pub fn new(
        id: String,
        output: mpsc::Receiver<Output>,
        stdin: Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
        killer: Arc<dyn Kill>,
    ) -> Execution {
        Execution {
            id,
            output,
            stdin,
            killer,
            exit: None,
            logs: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Copies everything read from now on to the run's output logs.
    pub fn set_logs(&mut self, logs: Arc<OutputLogs>) {
        self.logs = Some(logs);
    }

    /// Waits up to `wait` for output. After the command exits, every call returns
    /// the same `exited`.
    pub async fn read(&mut self, wait: Duration) -> Output {
        if let Some(status) = self.exit {
            return Output::Exited(status);
        }
        let next = match tokio::time::timeout(wait, self.output.recv()).await {
            Err(_) => return Output::Idle,
            Ok(next) => next,
        };
        let output = next.unwrap_or(Output::Exited(ExitStatus {
            code: None,
            signal: None,
            timed_out: false,
        }));
        match &output {
            Output::Chunk(chunk) => {
                if let Some(logs) = &self.logs {
                    logs.write(chunk.pipe, &chunk.data);
                }
            }
            Output::Exited(status) => self.exit = Some(*status),
            Output::Idle => {}
        }
        output
    }

    pub async fn write_stdin(&mut self, data: &[u8]) -> Result<(), Error> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::Failed("stdin is closed".into()))?;
        stdin
            .write_all(data)
            .await
            .map_err(|e| Error::Failed(format!("writing stdin: {e}")))
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn kill(&self) {
        self.killer.kill();
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        self.killer.kill();
    }
}

impl crate::wit::execution::Host for PluginView<'_> {}

impl HostExecution for PluginView<'_> {
    async fn id(&mut self, this: Resource<WitExecution>) -> wasmtime::Result<String> {
        Ok(self.table.get_as::<Execution, _>(&this)?.id().to_string())
    }

    async fn read(
        &mut self,
        this: Resource<WitExecution>,
        wait_ms: u32,
    ) -> wasmtime::Result<Output> {
        let wait = Duration::from_millis(u64::from(wait_ms.min(60_000)));
        Ok(self
            .table
            .get_mut_as::<Execution, _>(&this)?
            .read(wait)
            .await)
    }

    async fn write_stdin(
        &mut self,
        this: Resource<WitExecution>,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        Ok(self
            .table
            .get_mut_as::<Execution, _>(&this)?
            .write_stdin(&data)
            .await)
    }

    async fn close_stdin(&mut self, this: Resource<WitExecution>) -> wasmtime::Result<()> {
        self.table.get_mut_as::<Execution, _>(&this)?.close_stdin();
        Ok(())
    }

    async fn usage(
        &mut self,
        _this: Resource<WitExecution>,
    ) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        Ok(Err(Error::Unavailable(
            "per-command resource usage needs cgroup accounting, which this host does not have yet"
                .into(),
        )))
    }

    async fn kill(&mut self, this: Resource<WitExecution>) -> wasmtime::Result<()> {
        self.table.get_as::<Execution, _>(&this)?.kill();
        Ok(())
    }

    async fn drop(&mut self, this: Resource<WitExecution>) -> wasmtime::Result<()> {
        self.table.delete_as::<Execution, _>(this)?;
        Ok(())
    }
}
