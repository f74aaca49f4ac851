//! The sandbox registry: what every run of this home started, kept outside the run's
//! process so that a `kill -9` of `agentgate` leaves a record of what to clean up.
//!
//! [`store`] is the SQLite database (one row per run and per sandbox), [`owner`] the
//! identity of the `agentgate` process that owns a run and whether it still lives,
//! [`orphan`] when a run's owner is gone. A run registers itself through a
//! [`Tracker`], which also beats its heartbeat while the run lasts. The registry is
//! only the record: the cleanup that acts on it (orphans of dead owners, runs whose
//! own cleanup left something) drives the sandbox providers, so it lives above them,
//! in `gc`.

pub(crate) mod orphan;
pub(crate) mod owner;
pub(crate) mod store;

use std::path::Path;
use std::sync::{Arc, Mutex};

pub use orphan::{effective_state, is_orphan};
pub use owner::{Liveness, Owner};
pub use store::{now_ms, NewRun, NewSandbox, Registry, RegistryError, RunRow, RunState};

/// A run's handle on the registry: records its phases and beats its heartbeat until
/// dropped.
pub struct Tracker {
    registry: Arc<Mutex<Registry>>,
    run_id: String,
    owner: Owner,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Tracker {
    /// Records the run as started by this process and starts its heartbeat.
    pub fn start(
        home: &Path,
        run_id: &str,
        name: &str,
        folder: &Path,
    ) -> Result<Tracker, TrackError> {
        let owner = Owner::current().map_err(TrackError::Owner)?;
        let registry = Registry::open(home)?;
        registry.run_started(&NewRun {
            run_id,
            name,
            folder,
            owner: &owner,
        })?;
        let registry = Arc::new(Mutex::new(registry));
        let beating = registry.clone();
        let id = run_id.to_string();
        let heartbeat = tokio::spawn(async move {
            let mut interval = tokio::time::interval(orphan::HEARTBEAT_INTERVAL);
            interval.tick().await;
            loop {
                interval.tick().await;
                let registry = beating.clone();
                let id = id.clone();
                // A missed beat only makes the run look stale sooner to a gc that
                // cannot see its owner; it is not worth failing the run over.
                let _ =
                    tokio::task::spawn_blocking(move || registry.lock().unwrap().heartbeat(&id))
                        .await;
            }
        });
        Ok(Tracker {
            registry,
            run_id: run_id.to_string(),
            owner,
            heartbeat,
        })
    }

    /// The process that owns the run, as the registry recorded it.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Registry) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        f(&self.registry.lock().unwrap())
    }

    /// The workspace is ready; `record` is how `result.json` describes it (JSON).
    pub fn workspace_prepared(
        &self,
        workspace: &Path,
        temporary: bool,
        record: &str,
    ) -> Result<(), RegistryError> {
        self.with(|r| r.workspace_prepared(&self.run_id, workspace, temporary, record))
    }

    /// Records where the sandbox's private state folder will be, before it is made.
    pub fn sandbox_state_chosen(&self, state: &Path) -> Result<(), RegistryError> {
        self.with(|r| r.sandbox_state_chosen(&self.run_id, state))
    }

    /// Records the run's sandbox before `provider` is asked to create it: the workspace it
    /// binds and its `mounts` (JSON), so a crash during creation still leaves a row that says
    /// where to look.
    pub fn sandbox_creating(
        &self,
        provider: &str,
        workspace: &Path,
        mounts: String,
    ) -> Result<(), RegistryError> {
        self.with(|r| {
            r.sandbox_creating(&NewSandbox {
                run_id: &self.run_id,
                provider,
                cgroup: &format!("{}-", self.run_id),
                workspace,
                mounts,
            })
        })
    }

    /// The provider created the sandbox `id`; `container_id` when that sandbox is a container.
    pub fn sandbox_created(
        &self,
        id: &str,
        container_id: Option<&str>,
    ) -> Result<(), RegistryError> {
        self.with(|r| r.sandbox_created(&self.run_id, id, container_id))
    }

    /// The run's own cleanup destroyed its sandbox.
    pub fn sandbox_destroyed(&self) -> Result<(), RegistryError> {
        self.with(|r| r.sandbox_ended(&self.run_id, "destroyed"))
    }

    /// The provider's `destroy` failed, and the run's leftovers were reaped through a
    /// fresh instance of the provider instead.
    pub fn sandbox_reaped(&self) -> Result<(), RegistryError> {
        self.with(|r| r.sandbox_ended(&self.run_id, "reaped"))
    }

    /// The run wrote its result: it is finished, with that status.
    pub fn finished(&self, status: &str) -> Result<(), RegistryError> {
        self.ended(RunState::Finished, status)
    }

    /// The run wrote its result, but its cleanup left something: `gc` retries it.
    pub fn cleanup_failed(&self, status: &str) -> Result<(), RegistryError> {
        self.ended(RunState::CleanupFailed, status)
    }

    fn ended(&self, state: RunState, status: &str) -> Result<(), RegistryError> {
        self.heartbeat.abort();
        self.with(|r| r.run_ended(&self.run_id, state, status))
            .map(|_| ())
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Why a run could not be recorded in the registry; the run is then refused.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    /// This process's identity could not be read from `/proc`.
    #[error("cannot tell which process this is (for the sandbox registry): {0}")]
    Owner(std::io::Error),
    /// The registry could not be opened or written.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}
