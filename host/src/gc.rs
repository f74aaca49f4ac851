//! Orphan cleanup: what runs whose `agentgate` died left behind, and what runs whose
//! own cleanup failed left behind.
//!
//! The registry ([`crate::registry`]) is the record of what every run started and
//! says which runs are orphans ([`is_orphan`]); gc acts on it, through the sandbox
//! providers and the capabilities, so it sits above the runtime while the registry
//! stays a store every layer may read.
//!
//! A run is an orphan when its owner is dead, or when the owner cannot be seen from
//! here (another pid namespace) and its heartbeat is stale. A live owner's run is
//! never touched, whoever owns it. For each orphan gc asks the
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
//!
//! A run whose cleanup left something (its provider's `destroy` failed and a fresh
//! instance could not reap everything, a cgroup or the sandbox's state folder could not
//! be removed) finished all the same, with status `error`, and its row says
//! `cleanup-failed`. gc reaps such a run on every pass, owner alive or not (the owner is
//! done with it), the same way as an orphan ([`reap_run`], which the run itself used
//! when its `destroy` failed), and once nothing is left marks the row `finished`,
//! keeping the `result.json` the run wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::time::Instant;

use crate::capabilities::labels::{home_label, RunIdentity, LABEL_OWNER, LABEL_RUN_ID};
use crate::capabilities::Capability;
use crate::record::{
    write_crashed_result, CrashedRun, EventSink, SandboxState, WorkspaceRecord, WORKSPACE_SCRATCH,
};
use crate::registry::{is_orphan, Liveness, Owner, Registry, RegistryError, RunRow, RunState};
use crate::runtime::{PluginError, Runtime};
use crate::wit::types::PluginKind;

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
    /// Runs whose own cleanup failed (`cleanup-failed`), retried.
    pub cleanup_failed: Vec<ReapedRun>,
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

impl ReapedRun {
    fn of(row: &RunRow) -> ReapedRun {
        ReapedRun {
            run_id: row.run_id.clone(),
            provider: row.sandbox.as_ref().map(|s| s.provider.clone()),
            leftovers: Vec::new(),
            reclaimed: BTreeMap::new(),
            folders: Vec::new(),
            workspace: None,
            result: None,
            complete: true,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapedObject {
    pub provider: String,
    pub id: String,
    pub run_id: String,
}

/// Finds the orphans of `home` and the runs whose cleanup failed, and reaps them
/// (or, with `dry_run`, lists them).
pub async fn collect(
    runtime: &Runtime,
    home: &Path,
    options: &GcOptions,
) -> Result<GcReport, RegistryError> {
    let registry = Registry::open(home)?;
    let mut report = GcReport::default();
    let mut providers = Providers::new(home_label(home));
    let mut orphans = Vec::new();
    let mut cleanup_failed = Vec::new();
    for row in registry.runs(false)? {
        if row.state == RunState::CleanupFailed {
            cleanup_failed.push(row);
        } else if is_orphan(&row, options.older_than) {
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
        .filter(|row| row.state == RunState::Running)
        .map(|row| row.run_id)
        .collect();
    orphans.retain(|row| still_running.contains(&row.run_id));

    // One store per provider, for every run that used it (`providers`).
    for row in &orphans {
        let folder = PathBuf::from(&row.folder);
        let (mut reaped, kept_workspace) = reap_row(
            runtime,
            &mut providers,
            row,
            options.dry_run,
            &mut report.errors,
        )
        .await;
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
                Err(e) => {
                    reaped.complete = false;
                    report
                        .errors
                        .push(format!("run {}: writing its result.json: {e}", row.run_id));
                }
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

    // Runs that finished with leftovers: the same reaping, and the result the run wrote
    // stays as it is.
    for row in &cleanup_failed {
        let (reaped, _) = reap_row(
            runtime,
            &mut providers,
            row,
            options.dry_run,
            &mut report.errors,
        )
        .await;
        if !options.dry_run && reaped.complete {
            if row.sandbox.is_some() {
                registry.sandbox_ended(&row.run_id, "reaped")?;
            }
            registry.cleanup_done(&row.run_id)?;
        }
        report.cleanup_failed.push(reaped);
    }

    if options.scope == Scope::Everything {
        reap_unknown(runtime, &registry, options, &mut providers, &mut report).await?;
    }
    Ok(report)
}

/// Reaps what the run of `row` left: its provider objects and capabilities' objects
/// ([`reap_run`]) and the sandbox's private state folder. Failures go to `errors` and
/// make the returned record incomplete; the run's workspace, which is kept, comes
/// with it.
async fn reap_row(
    runtime: &Runtime,
    providers: &mut Providers,
    row: &RunRow,
    dry_run: bool,
    errors: &mut Vec<String>,
) -> (ReapedRun, Option<PathBuf>) {
    let mut reaped = ReapedRun::of(row);
    let folder = PathBuf::from(&row.folder);
    let kept_workspace = kept_workspace(row, &folder);
    let mut fail = |reaped: &mut ReapedRun, message: String| {
        reaped.complete = false;
        errors.push(format!("run {}: {message}", row.run_id));
    };
    let provider = row.sandbox.as_ref().map(|s| s.provider.as_str());
    let leftovers = reap_run(runtime, providers, &row.run_id, provider, dry_run).await;
    reaped.leftovers.extend(leftovers.reaped);
    for (kind, names) in leftovers.reclaimed {
        reaped.reclaimed.entry(kind).or_default().extend(names);
    }
    for error in leftovers.errors {
        fail(&mut reaped, error);
    }

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
        let removed = if dry_run { Ok(()) } else { state.remove() };
        let path = state.path().display();
        match removed {
            Ok(()) => reaped.folders.push(path.to_string()),
            Err(e) => fail(&mut reaped, format!("removing {path}: {e}")),
        }
    }
    (reaped, kept_workspace)
}

/// What reaping one run's objects did.
#[derive(Debug, Default)]
pub struct RunLeftovers {
    /// Provider objects removed (or, dry, to remove), by id.
    pub reaped: Vec<String>,
    /// What capabilities reclaimed, by kind (`cgroups`).
    pub reclaimed: BTreeMap<&'static str, Vec<String>>,
    /// What could not be removed or looked for: something of the run may be left.
    pub errors: Vec<String>,
}

/// Removes what run `run_id` left: the objects its provider `provider` labelled with
/// the run's id, through a fresh instance of the provider plugin (whatever state the
/// run's own instance was left in), and what each capability keeps of a run (its
/// cgroups). gc uses it for orphans and for runs whose cleanup failed; a run uses it
/// itself when its provider's `destroy` failed, timed out or trapped.
pub async fn reap_run(
    runtime: &Runtime,
    providers: &mut Providers,
    run_id: &str,
    provider: Option<&str>,
    dry_run: bool,
) -> RunLeftovers {
    let mut done = RunLeftovers::default();
    if let Some(name) = provider {
        match providers.open(runtime, name).await {
            Ok(provider) => {
                for id in provider.of_run(run_id) {
                    if !dry_run {
                        if let Err(e) = provider.reap(&id).await {
                            done.errors.push(e.to_string());
                            continue;
                        }
                    }
                    done.reaped.push(id);
                }
                // A reap that answered success is checked: the objects must be gone.
                if !dry_run && !done.reaped.is_empty() {
                    provider.list().await;
                    for id in provider.of_run(run_id) {
                        if let Some(at) = done.reaped.iter().position(|r| *r == id) {
                            done.reaped.remove(at);
                            done.errors
                                .push(format!("{name}: {id} is still there after it was reaped"));
                        }
                    }
                }
                if let Some(e) = &provider.list_error {
                    done.errors.push(e.to_string());
                }
            }
            Err(e) => done.errors.push(e.to_string()),
        }
    }
    for capability in Capability::all() {
        match capability.unit().reap_run(run_id, dry_run) {
            None => {}
            Some(Ok(reclaimed)) => {
                done.reclaimed
                    .entry(reclaimed.kind)
                    .or_default()
                    .extend(reclaimed.names);
            }
            Some(Err(e)) => done.errors.push(e.to_string()),
        }
    }
    done
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
    providers: &mut Providers,
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
        let provider = match providers.open(runtime, &name).await {
            Ok(provider) => provider,
            Err(e) => {
                report.errors.push(e.to_string());
                continue;
            }
        };
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
                    report.errors.push(e.to_string());
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

/// The provider plugins opened for reaping, one fresh instance each (in a store of
/// its own, outside any run, acting for the home labelled `home`), kept for every run
/// that used it.
pub struct Providers {
    home: String,
    opened: BTreeMap<String, Provider>,
}

impl Providers {
    /// No provider opened yet; those opened will act for the agentgate home whose
    /// label is `home` ([`home_label`]): they list and reap only its objects.
    pub fn new(home: String) -> Providers {
        Providers {
            home,
            opened: BTreeMap::new(),
        }
    }

    /// The instance of provider `name`, opened (and its leftovers listed) on first use.
    async fn open(
        &mut self,
        runtime: &Runtime,
        name: &str,
    ) -> Result<&mut Provider, ProviderError> {
        if !self.opened.contains_key(name) {
            let provider = Provider::open(runtime, name, &self.home).await?;
            self.opened.insert(name.to_string(), provider);
        }
        Ok(self.opened.get_mut(name).expect("inserted above"))
    }
}

/// Why gc could not open a sandbox provider, or reap one of its objects.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("sandbox provider {name:?}: {source}")]
    Unknown {
        name: String,
        source: crate::runtime::catalog::ResolveError,
    },
    #[error("identifying this process: {0}")]
    Owner(std::io::Error),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("{provider}: reaping {id}: {source}")]
    Reap {
        provider: String,
        id: String,
        source: PluginError,
    },
}

/// A provider plugin in a store of its own, with what it listed.
struct Provider {
    instance: crate::runtime::instance::ProviderInstance,
    name: String,
    leftovers: Vec<crate::wit::sandbox_provider::exports::agentgate::plugin::provider::Leftover>,
    list_error: Option<PluginError>,
}

impl Provider {
    /// A fresh instance of provider `name`, acting as a run of its own of this process
    /// in the home labelled `home`.
    async fn open(runtime: &Runtime, name: &str, home: &str) -> Result<Provider, ProviderError> {
        let plugin = runtime
            .catalog()
            .resolve(PluginKind::SandboxProvider, name)
            .map_err(|source| ProviderError::Unknown {
                name: name.to_string(),
                source,
            })?;
        let identity = RunIdentity {
            run_id: format!("gc-{}", uuid::Uuid::now_v7().simple()),
            owner: Owner::current().map_err(ProviderError::Owner)?.to_string(),
            created: SystemTime::now(),
            home: home.to_string(),
        };
        let context = runtime.run_context(identity, Arc::new(EventSink::discard()));
        let instance = runtime.sandbox_provider(plugin, context).await?;
        let mut provider = Provider {
            instance,
            name: name.to_string(),
            leftovers: Vec::new(),
            list_error: None,
        };
        provider.list().await;
        Ok(provider)
    }

    /// Lists what the provider created that still exists.
    async fn list(&mut self) {
        (self.leftovers, self.list_error) = match self
            .instance
            .list_leftovers(Instant::now() + CALL_LIMIT)
            .await
        {
            Ok(leftovers) => (leftovers, None),
            Err(e) => (Vec::new(), Some(e)),
        };
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

    async fn reap(&mut self, id: &str) -> Result<(), ProviderError> {
        self.instance
            .reap(id, Instant::now() + CALL_LIMIT)
            .await
            .map_err(|source| ProviderError::Reap {
                provider: self.name.clone(),
                id: id.to_string(),
                source,
            })
    }
}
