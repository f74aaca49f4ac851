//! The host side of `agentgate:plugin/sandbox`: the broker between an agent driver and
//! the sandbox a provider plugin created.
//!
//! A driver never holds the provider's resources. Its `exec` is forwarded to the
//! provider's sandbox; the host-owned `execution` that comes back is moved from the
//! provider's store into the driver's, with the run's stdout/stderr logs attached.
//! File operations act on the workspace through a `cap_std` directory handle, so no
//! path a driver supplies (`..`, absolute, symlinks) can leave it.

pub(crate) mod unit;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use futures_util::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;
use wasmtime::component::Resource;

use super::execution::Execution;
use crate::capabilities::view::TableAs;
use crate::capabilities::PluginView;
use crate::record::OutputLogs;
use crate::wit::execution::Execution as WitExecution;
use crate::wit::sandbox::{DirEntry, Host, SandboxDetails};
use crate::wit::types::{Error, ExecRequest, ResourceUsage};

/// Largest file a driver may read in one call.
const MAX_READ_BYTES: u64 = 64 << 20;

/// How long a provider's `destroy` call may take.
pub const DESTROY_LIMIT: Duration = Duration::from_secs(30);

/// The provider's live sandbox as the broker drives it. The runtime's provider
/// instance (`runtime::instance::ActiveSandbox`) implements it: the broker sits below
/// the runtime and forwards to whatever sandbox it is handed.
pub trait ProvidedSandbox: Send {
    /// Runs a command; the execution is moved out of the provider's store.
    fn exec(
        &mut self,
        request: ExecRequest,
    ) -> BoxFuture<'_, Result<Result<Execution, Error>, ProviderFailure>>;
    /// The sandbox's resource use so far, as the provider measures it.
    fn stats(&mut self) -> BoxFuture<'_, Result<ResourceUsage, ProviderFailure>>;
    /// What the provider plugin printed on its own stdout/stderr so far.
    fn plugin_stdio(&self) -> Vec<u8>;
    /// Destroys the sandbox and kills everything the provider started, by `deadline`.
    /// Idempotent.
    fn destroy(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), ProviderFailure>>;
}

/// Why the provider plugin did not do what the broker asked (the runtime's
/// `PluginError`, which names the plugin and the call).
pub type ProviderFailure = Box<dyn std::error::Error + Send + Sync>;

/// Why [`SandboxBroker::destroy`] did not destroy the sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DestroyError {
    /// A command still held the sandbox for the whole [`DESTROY_LIMIT`].
    #[error("the sandbox stayed busy for {} s, so it was not destroyed", .0.as_secs())]
    Busy(Duration),
    /// The provider's `destroy` failed, trapped or timed out.
    #[error(transparent)]
    Provider(ProviderFailure),
}

/// The live sandbox of a run as its driver reaches it: forwards `exec` to the provider's
/// sandbox, attaching the run's output logs, and acts on the workspace's files itself.
pub struct SandboxBroker {
    sandbox: Mutex<Box<dyn ProvidedSandbox>>,
    details: SandboxDetails,
    files: WorkspaceFiles,
    logs: Arc<OutputLogs>,
}

/// File access to the workspace on a driver's behalf, confined to its root.
pub struct WorkspaceFiles {
    root: Dir,
    readonly: bool,
}

impl SandboxBroker {
    /// The broker for the provider's `sandbox`, described by `details`, with file
    /// access confined to `workspace_root` (read-only when the details say so).
    pub fn new(
        sandbox: impl ProvidedSandbox + 'static,
        details: SandboxDetails,
        workspace_root: &std::path::Path,
        logs: Arc<OutputLogs>,
    ) -> std::io::Result<SandboxBroker> {
        let files = WorkspaceFiles::open(workspace_root, details.readonly_workspace)?;
        Ok(SandboxBroker {
            sandbox: Mutex::new(Box::new(sandbox)),
            details,
            files,
            logs,
        })
    }

    /// The sandbox as its provider described it.
    pub fn details(&self) -> &SandboxDetails {
        &self.details
    }

    /// Runs a command in the sandbox on behalf of a driver.
    pub async fn exec(&self, request: ExecRequest) -> Result<Execution, Error> {
        if request.argv.is_empty() {
            return Err(super::invalid_spec("argv", "the command is empty"));
        }
        let mut sandbox = self.sandbox.lock().await;
        let mut execution = sandbox
            .exec(request)
            .await
            .map_err(|e| Error::Failed(e.to_string()))??;
        execution.set_logs(self.logs.clone());
        Ok(execution)
    }

    /// The sandbox's resource use so far (cumulative: CPU since it started, peak memory,
    /// whether it ran out of memory).
    pub async fn stats(&self) -> Result<ResourceUsage, ProviderFailure> {
        self.sandbox.lock().await.stats().await
    }

    /// What the provider plugin printed on its own stdout/stderr, for `plugins.log`.
    pub async fn plugin_stdio(&self) -> Vec<u8> {
        self.sandbox.lock().await.plugin_stdio()
    }

    /// Destroys the sandbox. Called once at cleanup, whatever happened before; bounded
    /// by [`DESTROY_LIMIT`] in all, waiting for a command that still holds the sandbox
    /// included.
    pub async fn destroy(&self) -> Result<(), DestroyError> {
        let deadline = Instant::now() + DESTROY_LIMIT;
        let Ok(mut sandbox) = tokio::time::timeout_at(deadline, self.sandbox.lock()).await else {
            return Err(DestroyError::Busy(DESTROY_LIMIT));
        };
        sandbox
            .destroy(deadline)
            .await
            .map_err(DestroyError::Provider)
    }
}

impl WorkspaceFiles {
    pub fn open(root: &std::path::Path, readonly: bool) -> std::io::Result<WorkspaceFiles> {
        Ok(WorkspaceFiles {
            root: Dir::open_ambient_dir(root, ambient_authority())?,
            readonly,
        })
    }

    fn ensure_writable(&self) -> Result<(), Error> {
        if self.readonly {
            Err(Error::Denied("the workspace is read-only".into()))
        } else {
            Ok(())
        }
    }

    pub fn read_file(&self, path: &str) -> Result<Vec<u8>, Error> {
        inside(path)?;
        let file = self.root.open(path).map_err(|e| io_error(path, e))?;
        let size = file.metadata().map_err(|e| io_error(path, e))?.len();
        if size > MAX_READ_BYTES {
            return Err(Error::Failed(format!(
                "{path} is {size} bytes; the limit is {MAX_READ_BYTES}"
            )));
        }
        self.root.read(path).map_err(|e| io_error(path, e))
    }

    pub fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), Error> {
        self.ensure_writable()?;
        inside(path)?;
        // Folders are made only when the file cannot be created without them, so a
        // parent that leads out (a symlink) is refused by `create`, not mistaken for
        // an existing folder.
        let mut file = match self.root.create(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = std::path::Path::new(path)
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                {
                    self.root
                        .create_dir_all(parent)
                        .map_err(|e| io_error(path, e))?;
                }
                self.root.create(path)
            }
            created => created,
        }
        .map_err(|e| io_error(path, e))?;
        file.write_all(contents).map_err(|e| io_error(path, e))
    }

    pub fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, Error> {
        inside(path)?;
        let path = if path.is_empty() { "." } else { path };
        let mut entries = Vec::new();
        for entry in self.root.read_dir(path).map_err(|e| io_error(path, e))? {
            let entry = entry.map_err(|e| io_error(path, e))?;
            let meta = entry.metadata().map_err(|e| io_error(path, e))?;
            entries.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir: meta.is_dir(),
                size: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    pub fn remove_file(&self, path: &str) -> Result<(), Error> {
        self.ensure_writable()?;
        inside(path)?;
        self.root.remove_file(path).map_err(|e| io_error(path, e))
    }
}

/// Refuses a path that leads out of the workspace as written (absolute, or more `..`
/// than folders before them), whether or not what it names exists. Symlinks are
/// `cap_std`'s to refuse as they are met.
fn inside(path: &str) -> Result<(), Error> {
    use std::path::Component;
    let mut depth = 0usize;
    for component in std::path::Path::new(path).components() {
        depth = match component {
            Component::Normal(_) => depth + 1,
            Component::CurDir => depth,
            Component::ParentDir if depth > 0 => depth - 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Error::Denied(format!(
                    "{path}: leads outside the workspace"
                )))
            }
        };
    }
    Ok(())
}

fn io_error(path: &str, error: std::io::Error) -> Error {
    match error.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Denied(format!("{path}: {error}")),
        _ => Error::Failed(format!("{path}: {error}")),
    }
}

impl PluginView<'_> {
    fn broker(&self) -> wasmtime::Result<Arc<SandboxBroker>> {
        self.run.ensure_active()?;
        self.run.broker().cloned().ok_or_else(|| {
            wasmtime::Error::msg("the sandbox interface is only available while an agent runs")
        })
    }
}

impl PluginView<'_> {
    /// Passes on the result of a file `call` on `path`, recording a refusal (a path
    /// leading out of the workspace, a write to a read-only one) as a `denied` event of
    /// the run. No grant widens the workspace, so the event names no line to add.
    fn file_call<T>(
        &self,
        call: &'static str,
        path: &str,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        if let Err(Error::Denied(reason)) = &result {
            self.run.events.emit(
                &self.plugin,
                crate::record::EventBody::Denied {
                    capability: "sandbox",
                    call,
                    argument: format!("path {path:?}"),
                    allow: String::new(),
                    message: format!(
                        "{call} by plugin {}: {reason}; file calls stay inside the workspace",
                        self.plugin
                    ),
                },
            );
        }
        result
    }
}

impl Host for PluginView<'_> {
    async fn details(&mut self) -> wasmtime::Result<SandboxDetails> {
        Ok(self.broker()?.details().clone())
    }

    async fn exec(
        &mut self,
        request: ExecRequest,
    ) -> wasmtime::Result<Result<Resource<WitExecution>, Error>> {
        let broker = self.broker()?;
        match broker.exec(request).await {
            Ok(execution) => Ok(Ok(self.table.push_as(execution)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn read_file(&mut self, path: String) -> wasmtime::Result<Result<Vec<u8>, Error>> {
        let read = self.broker()?.files.read_file(&path);
        Ok(self.file_call("sandbox.read-file", &path, read))
    }

    async fn write_file(
        &mut self,
        path: String,
        contents: Vec<u8>,
    ) -> wasmtime::Result<Result<(), Error>> {
        let written = self.broker()?.files.write_file(&path, &contents);
        Ok(self.file_call("sandbox.write-file", &path, written))
    }

    async fn list_dir(&mut self, path: String) -> wasmtime::Result<Result<Vec<DirEntry>, Error>> {
        let listed = self.broker()?.files.list_dir(&path);
        Ok(self.file_call("sandbox.list-dir", &path, listed))
    }

    async fn remove_file(&mut self, path: String) -> wasmtime::Result<Result<(), Error>> {
        let removed = self.broker()?.files.remove_file(&path);
        Ok(self.file_call("sandbox.remove-file", &path, removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_access_stays_inside_the_workspace() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
        let root = outside.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link")).unwrap();
        let files = WorkspaceFiles::open(&root, false).unwrap();

        files.write_file("src/new.rs", b"fn main() {}").unwrap();
        assert_eq!(files.read_file("src/new.rs").unwrap(), b"fn main() {}");
        assert_eq!(
            files
                .list_dir("")
                .unwrap()
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>(),
            ["link", "src"]
        );
        for escape in [
            "../secret.txt",
            "link",
            "/etc/passwd",
            "src/../../secret.txt",
        ] {
            assert!(
                matches!(files.read_file(escape), Err(Error::Denied(_))),
                "{escape} was not refused"
            );
        }
        for escape in ["../planted.txt", "nothing/../../planted.txt", "link"] {
            assert!(
                matches!(files.write_file(escape, b"x"), Err(Error::Denied(_))),
                "{escape} was not refused"
            );
        }
        assert!(!outside.path().join("planted.txt").exists());

        let readonly = WorkspaceFiles::open(&root, true).unwrap();
        assert!(matches!(
            readonly.write_file("x.txt", b"x"),
            Err(Error::Denied(_))
        ));
        assert!(matches!(
            readonly.remove_file("src/new.rs"),
            Err(Error::Denied(_))
        ));
        assert!(readonly.read_file("src/new.rs").is_ok());
    }
}
