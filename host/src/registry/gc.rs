//! Orphan cleanup: what runs whose `agentgate` died left behind.
//!
//! A run is an orphan when its owner is dead ([`Liveness::Dead`]), or when the owner
//! cannot be seen from here (another pid namespace) and its heartbeat is stale. A
//! live owner's run is never touched, whoever owns it. For each orphan gc asks the
//! run's sandbox provider for its leftovers (`list-leftovers`) and reaps those that
//! carry the run's id (`reap`), kills and removes the run's cgroups, removes the
//! sandbox's private state (its HOME, in the folder the run recorded, see
//! [`SandboxState`]), writes
//! the `result.json` the run never wrote (status `crashed`, naming the workspace) and
//! marks the row.
//!
//! gc never removes a workspace, whatever its source (`fresh` or a clone in the run
//! folder, a `destPath`, a `local` folder, even one its source meant to be temporary):
//! the run died before collecting what its agent did, and the workspace is the only
//! place that still has it. Nor does it touch what the run recorded (`events.ndjson`,
//! the logs, `changes.patch`). With
//! [`Scope::Everything`] it also reaps provider objects whose run the registry does not
//! know, when their owner label names a dead process (the registry was lost or
//! belongs to another home).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::time::Instant;

use super::owner::{Liveness, Owner};
use super::store::{now_ms, Registry, RegistryError, RunRow, RunState};
use crate::capabilities::labels::{LABEL_OWNER, LABEL_RUN_ID};
use crate::capabilities::Capability;
use crate::record::{
    write_crashed_result, CrashedRun, EventSink, SandboxState, WorkspaceRecord, WORKSPACE_SCRATCH,
};
use crate::runtime::bindings::types::PluginKind;
use crate::runtime::Runtime;

/// How long a heartbeat may be silent before a run whose owner cannot be seen is
/// taken for dead. Runs beat every [`HEARTBEAT_INTERVAL`].
pub const STALE_AFTER: Duration = Duration::from_secs(60);
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);

/// How long one provider call of gc may take.
const CALL_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The runs this home's registry knows (what `run` does at start-up).
    Registry,
    /// Those, and provider objects of unknown runs whose owner is dead (`agentgate gc`).
    Everything,
}

#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Say what would be reaped, and reap nothing.
    pub dry_run: bool,
    /// Only orphans whose last heartbeat (or creation) is at least this old.
    pub older_than: Duration,
    pub scope: Scope,
}

/// What gc found and did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    pub orphans: Vec<ReapedRun>,
    /// Provider objects of runs the registry does not know.
    pub unknown: Vec<ReapedObject>,
    /// Live runs left alone.
    pub live: Vec<String>,
    /// What could not be done; the rows stay, so the next gc tries again.
    pub errors: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapedRun {
    pub run_id: String,
    pub provider: Option<String>,
    /// Provider leftovers (containers, volumes) reaped, by id.
    pub leftovers: Vec<String>,
    /// What capabilities reclaimed themselves, by kind (`cgroups`: the run's
    /// sandbox cgroups, which the `process` capability kills and removes).
    #[serde(flatten)]
    pub reclaimed: BTreeMap<&'static str, Vec<String>>,
    /// Folders removed: the sandbox's private state.
    pub folders: Vec<String>,
    /// The run's workspace, kept.
    pub workspace: Option<String>,
    /// The `result.json` written with status `crashed`.
    pub result: Option<String>,
    pub complete: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapedObject {
    pub provider: String,
    pub id: String,
    pub run_id: String,
}

/// Whether a `running` row is an orphan now, with `older_than` applied.
pub fn is_orphan(row: &RunRow, older_than: Duration) -> bool {
    let silent = Duration::from_millis(now_ms().saturating_sub(row.heartbeat_ms));
    match row.owner.parse::<Owner>().map(|o| o.liveness()) {
        Ok(Liveness::Alive) => false,
        Ok(Liveness::Dead) => silent >= older_than,
        Ok(Liveness::Unknown) | Err(_) => silent >= older_than.max(STALE_AFTER),
    }
}

/// The state to show for a row: `running` rows whose owner is gone are `orphaned`.
pub fn effective_state(row: &RunRow) -> RunState {
    if row.state == RunState::Running && is_orphan(row, Duration::ZERO) {
        RunState::Orphaned
    } else {
        row.state
    }
}

/// Finds the orphans of `home` and reaps them (or, with `dry_run`, lists them).
pub async fn collect(
    runtime: &Runtime,
    home: &Path,
    options: &GcOptions,
) -> Result<GcReport, RegistryError> {
    let registry = Registry::open(home)?;
    let mut report = GcReport::default();
    let mut orphans = Vec::new();
    for row in registry.runs(false)? {
        if is_orphan(&row, options.older_than) {
            orphans.push(row);
        } else {
            report.live.push(row.run_id);
        }
    }
    // An owner marks its run finished before it exits. Read the rows again now that
    // their owners were seen dead: a run that ended between the first read and the
    // liveness check is finished, not an orphan, and nothing of it may be reaped.
    let still_running: BTreeSet<String> = registry
        .runs(false)?
        .into_iter()
        .map(|row| row.run_id)
        .collect();
    orphans.retain(|row| still_running.contains(&row.run_id));

    // One store per provider, for every orphan that used it.
    let mut providers: BTreeMap<String, Provider> = BTreeMap::new();
    for row in &orphans {
        let mut reaped = ReapedRun {
            run_id: row.run_id.clone(),
            provider: row.sandbox.as_ref().map(|s| s.provider.clone()),
            leftovers: Vec::new(),
            reclaimed: BTreeMap::new(),
            folders: Vec::new(),
            workspace: None,
            result: None,
            complete: true,
        };
        let mut fail = |reaped: &mut ReapedRun, message: String| {
            reaped.complete = false;
            report.errors.push(format!("run {}: {message}", row.run_id));
        };

        if let Some(sandbox) = &row.sandbox {
            let mut opened = Ok(());
            if !providers.contains_key(&sandbox.provider) {
                match Provider::open(runtime, &sandbox.provider).await {
                    Ok(provider) => {
                        providers.insert(sandbox.provider.clone(), provider);
                    }
                    Err(e) => opened = Err(e),
                }
            }
            match opened.map(|()| providers.get_mut(&sandbox.provider).expect("opened above")) {
                Ok(provider) => {
                    for id in provider.of_run(&row.run_id) {
                        if !options.dry_run {
                            if let Err(e) = provider.reap(&id).await {
                                fail(&mut reaped, e);
                                continue;
                            }
                        }
                        reaped.leftovers.push(id);
                    }
                    if let Some(e) = &provider.list_error {
                        fail(&mut reaped, e.clone());
                    }
                }
                Err(e) => fail(&mut reaped, e),
            }
        }

        for capability in Capability::all() {
            match capability.unit().reap_run(&row.run_id, options.dry_run) {
                None => {}
                Some(Ok(reclaimed)) => {
                    reaped
                        .reclaimed
                        .entry(reclaimed.kind)
                        .or_default()
                        .extend(reclaimed.names);
                }
                Some(Err(e)) => fail(&mut reaped, e),
            }
        }

        let folder = PathBuf::from(&row.folder);
        let kept_workspace = kept_workspace(row, &folder);
        // The sandbox's private state was never the user's; the run removes it too.
        // Only a folder of this user's, and never one that holds the workspace.
        let state = SandboxState::recorded(row.sandbox_state.as_deref(), &folder);
        let holds_workspace = kept_workspace
            .as_deref()
            .is_some_and(|w| w.starts_with(state.path()));
        if holds_workspace {
            fail(
                &mut reaped,
                format!(
                    "the recorded sandbox state {} holds the workspace; left alone",
                    state.path().display()
                ),
            );
        } else if state.is_ours() {
            let removed = if options.dry_run {
                Ok(())
            } else {
                state.remove()
            };
            let path = state.path().display();
            match removed {
                Ok(()) => reaped.folders.push(path.to_string()),
                Err(e) => fail(&mut reaped, format!("removing {path}: {e}")),
            }
        }
        reaped.workspace = kept_workspace.as_ref().map(|p| p.display().to_string());

        if !options.dry_run && reaped.complete {
            let crashed = CrashedRun {
                run_id: &row.run_id,
                name: &row.name,
                folder: &folder,
                owner: &row.owner,
                started: UNIX_EPOCH + Duration::from_millis(row.started_ms),
                last_heartbeat: UNIX_EPOCH + Duration::from_millis(row.heartbeat_ms),
                provider: row.sandbox.as_ref().map(|s| s.provider.as_str()),
                sandbox_id: row.sandbox.as_ref().and_then(|s| s.sandbox_id.as_deref()),
                container_id: row.sandbox.as_ref().and_then(|s| s.container_id.as_deref()),
                reaped: &reaped.leftovers,
                workspace: row
                    .workspace_record
                    .as_deref()
                    .and_then(|json| serde_json::from_str::<WorkspaceRecord>(json).ok()),
                kept_workspace: kept_workspace.as_deref(),
                temporary_workspace: row.temporary_workspace,
            };
            match write_crashed_result(&crashed) {
                Ok(Some(path)) => reaped.result = Some(path.display().to_string()),
                // The run wrote its own result before it died: it finished.
                Ok(None) => {}
                Err(e) => fail(&mut reaped, format!("writing its result.json: {e}")),
            }
        }
        if !options.dry_run && reaped.complete {
            let finished = reaped.result.is_none();
            let (state, status) = if finished {
                (RunState::Finished, "unknown")
            } else {
                (RunState::Crashed, "crashed")
            };
            if row.sandbox.is_some() {
                registry.sandbox_ended(&row.run_id, "reaped")?;
            }
            registry.run_ended(&row.run_id, state, status)?;
        }
        report.orphans.push(reaped);
    }

    if options.scope == Scope::Everything {
        reap_unknown(runtime, &registry, options, &mut providers, &mut report).await?;
    }
    Ok(report)
}

/// Where the run's workspace is: the root it recorded once prepared, or else the
/// scratch folder its source was filling (a clone cut short), when there is one.
fn kept_workspace(row: &RunRow, folder: &Path) -> Option<PathBuf> {
    row.workspace.as_ref().map(PathBuf::from).or_else(|| {
        let scratch = folder.join(WORKSPACE_SCRATCH);
        std::fs::symlink_metadata(&scratch)
            .is_ok()
            .then_some(scratch)
    })
}

/// Provider objects whose run this registry does not know, owned by a dead process.
async fn reap_unknown(
    runtime: &Runtime,
    registry: &Registry,
    options: &GcOptions,
    providers: &mut BTreeMap<String, Provider>,
    report: &mut GcReport,
) -> Result<(), RegistryError> {
    let names: BTreeSet<String> = runtime
        .catalog()
        .served(PluginKind::SandboxProvider)
        .into_iter()
        .collect();
    let cutoff = SystemTime::now()
        .checked_sub(options.older_than)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    for name in names {
        if !providers.contains_key(&name) {
            match Provider::open(runtime, &name).await {
                Ok(provider) => {
                    providers.insert(name.clone(), provider);
                }
                Err(e) => {
                    report.errors.push(e);
                    continue;
                }
            }
        }
        let provider = providers.get_mut(&name).expect("inserted above");
        let candidates: Vec<(String, String)> = provider
            .leftovers
            .iter()
            .filter(|l| l.created_at_ms <= cutoff)
            .filter_map(|l| {
                let label = |key: &str| {
                    l.labels
                        .iter()
                        .find(|label| label.key == key)
                        .map(|label| label.value.clone())
                };
                let run_id = label(LABEL_RUN_ID)?;
                // Only an owner known to be dead: an unreadable or old-style label could
                // be a live run's.
                let owner: Owner = label(LABEL_OWNER)?.parse().ok()?;
                (owner.liveness() == Liveness::Dead).then_some((l.id.clone(), run_id))
            })
            .collect();
        for (id, run_id) in candidates {
            if registry.knows(&run_id)? {
                continue;
            }
            if !options.dry_run {
                if let Err(e) = provider.reap(&id).await {
                    report.errors.push(e);
                    continue;
                }
            }
            report.unknown.push(ReapedObject {
                provider: name.clone(),
                id,
                run_id,
            });
        }
        if let Some(e) = provider.list_error.take() {
            // Nothing in the registry needed this provider: say so, but it is not
            // a failure of this gc (e.g. Docker not installed on this machine).
            report
                .errors
                .push(format!("{e} (objects of unknown runs were not looked for)"));
        }
    }
    Ok(())
}

/// A provider plugin in a store of its own, with what it listed.
struct Provider {
    instance: crate::runtime::instance::ProviderInstance,
    name: String,
    leftovers: Vec<
        crate::runtime::bindings::sandbox_provider::exports::agentgate::plugin::provider::Leftover,
    >,
    list_error: Option<String>,
}

impl Provider {
    async fn open(runtime: &Runtime, name: &str) -> Result<Provider, String> {
        let plugin = runtime
            .catalog()
            .resolve(PluginKind::SandboxProvider, name)
            .map_err(|e| format!("sandbox provider {name:?}: {e}"))?;
        let context = runtime.run_context(
            format!("gc-{}", uuid::Uuid::now_v7().simple()),
            Arc::new(EventSink::discard()),
        );
        let mut instance = runtime
            .sandbox_provider(plugin, context)
            .await
            .map_err(|e| e.to_string())?;
        let (leftovers, list_error) =
            match instance.list_leftovers(Instant::now() + CALL_LIMIT).await {
                Ok(leftovers) => (leftovers, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
        Ok(Provider {
            instance,
            name: name.to_string(),
            leftovers,
            list_error,
        })
    }

    /// The ids of the leftovers labelled with `run_id`.
    fn of_run(&self, run_id: &str) -> Vec<String> {
        self.leftovers
            .iter()
            .filter(|l| {
                l.labels
                    .iter()
                    .any(|label| label.key == LABEL_RUN_ID && label.value == run_id)
            })
            .map(|l| l.id.clone())
            .collect()
    }

    async fn reap(&mut self, id: &str) -> Result<(), String> {
        self.instance
            .reap(id, Instant::now() + CALL_LIMIT)
            .await
            .map_err(|e| format!("{}: reaping {id}: {e}", self.name))
    }
}
