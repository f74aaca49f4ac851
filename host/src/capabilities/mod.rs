//! The host side of each WIT host interface, and nothing else.
//!
//! Each module implements one capability (`process`, `execution`, `events`, `sandbox`,
//! `docker`, `git`, `github`) for [`PluginState`](crate::runtime::PluginState). A
//! plugin can only reach a module whose interface it imports and was granted; the
//! runtime checks that at load. What all of them act on is the plugin's [`RunContext`];
//! what they report goes into the run record ([`crate::record`]).

pub mod docker;
pub mod events;
pub mod execution;
pub mod git;
pub mod github;
pub mod process;
pub mod sandbox;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::record::EventSink;
use crate::runtime::grants::DockerGrant;
use crate::runtime::host_paths::BindScope;

pub use sandbox::SandboxBroker;

/// The run a plugin store works for.
pub struct RunContext {
    pub run_id: String,
    pub events: Arc<EventSink>,
    /// The operator's allowances for containers, from `grants.yaml`.
    pub docker: DockerGrant,
    /// What a sandbox may bind: the folders the host gave this run's sandbox
    /// (workspace, state) and what the operator allows for mounts. Unset, nothing.
    bind_scope: OnceLock<BindScope>,
    broker: OnceLock<Arc<SandboxBroker>>,
    /// False while a plugin is only being described: no host interface may act then.
    active: bool,
    exec_ids: AtomicU64,
    /// Directories the `git` capability may act under (see [`RunContext::allow_repo_root`]).
    repo_roots: std::sync::Mutex<Vec<std::path::PathBuf>>,
    /// The URL each repository of this run was cloned from, recorded at the clone.
    git_origins: git::Origins,
}

impl RunContext {
    pub fn new(run_id: String, events: Arc<EventSink>, docker: DockerGrant) -> Arc<RunContext> {
        Arc::new(RunContext {
            run_id,
            events,
            docker,
            bind_scope: OnceLock::new(),
            broker: OnceLock::new(),
            active: true,
            exec_ids: AtomicU64::new(0),
            repo_roots: Default::default(),
            git_origins: Default::default(),
        })
    }

    /// A context for `describe()`: every host interface traps.
    pub fn describe_only() -> Arc<RunContext> {
        Arc::new(RunContext {
            run_id: String::new(),
            events: Arc::new(EventSink::discard()),
            docker: DockerGrant::default(),
            bind_scope: OnceLock::new(),
            broker: OnceLock::new(),
            active: false,
            exec_ids: AtomicU64::new(0),
            repo_roots: Default::default(),
            git_origins: Default::default(),
        })
    }

    /// Traps the calling plugin when host interfaces are not available.
    pub(crate) fn ensure_active(&self) -> wasmtime::Result<()> {
        if self.active {
            Ok(())
        } else {
            Err(wasmtime::Error::msg(
                "host interfaces cannot be called from describe(); describe() must only return the plugin's info",
            ))
        }
    }

    pub(crate) fn next_exec_id(&self) -> String {
        format!("exec-{}", self.exec_ids.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Makes the run's sandbox reachable through the `sandbox` interface.
    pub fn set_broker(&self, broker: Arc<SandboxBroker>) {
        let _ = self.broker.set(broker);
    }

    pub(crate) fn broker(&self) -> Option<&Arc<SandboxBroker>> {
        self.broker.get()
    }

    /// Sets what the run's sandbox may bind, once the host prepared its folders.
    pub fn set_bind_scope(&self, scope: BindScope) {
        let _ = self.bind_scope.set(scope);
    }

    /// What a sandbox capability may bind now: nothing before [`Self::set_bind_scope`].
    pub(crate) fn bind_scope(&self) -> BindScope {
        self.bind_scope.get().cloned().unwrap_or_default()
    }

    /// Lets the `git` capability clone into or open repositories under `dir` (the
    /// workspace request's scratch dir, the prepared workspace). Nothing else.
    pub fn allow_repo_root(&self, dir: &std::path::Path) {
        if let Ok(dir) = dir.canonicalize() {
            self.repo_roots.lock().unwrap().push(dir);
        }
    }

    pub(crate) fn repo_roots(&self) -> Vec<std::path::PathBuf> {
        self.repo_roots.lock().unwrap().clone()
    }

    pub(crate) fn git_origins(&self) -> &git::Origins {
        &self.git_origins
    }
}

impl crate::runtime::bindings::types::Host for crate::runtime::PluginState {}

/// The words that end every `unavailable` error saying that this machine lacks
/// something a run needs, so a user learns every missing prerequisite at once rather
/// than one failed run at a time.
pub const DOCTOR_HINT: &str = "run `agentgate doctor` for every check";

/// The contract's `unavailable` error for a prerequisite this machine lacks: `message`
/// says what and how to get it; [`DOCTOR_HINT`] follows.
pub(crate) fn lacking(message: impl std::fmt::Display) -> crate::runtime::bindings::types::Error {
    crate::runtime::bindings::types::Error::Unavailable(format!("{message}; {DOCTOR_HINT}"))
}

/// `message` without the [`DOCTOR_HINT`] that [`lacking`] added, for `agentgate
/// doctor` itself.
pub fn without_doctor_hint(message: &str) -> &str {
    message
        .strip_suffix(DOCTOR_HINT)
        .map_or(message, |rest| rest.trim_end_matches("; "))
}

/// The contract's `invalid-spec` error for `path` (relative to the request).
pub(crate) fn invalid_spec(
    path: &str,
    message: impl Into<String>,
) -> crate::runtime::bindings::types::Error {
    crate::runtime::bindings::types::Error::InvalidSpec(
        crate::runtime::bindings::types::FieldError {
            path: path.to_string(),
            message: message.into(),
        },
    )
}
