//! The sandbox phase: the provider plugin creates the run's sandbox around the prepared
//! workspace, and the host brokers it to the agent driver.
//!
//! Its value, [`Sandbox`], holds what the phase made, in the order it was made: the
//! sandbox's private state folder, the run's egress gate, and once the provider created
//! it, the sandbox itself with its output logs, its broker and its resource sampler.
//! The run keeps the value from the moment its state folder exists, so a run that ends
//! half way through the phase (a failure, the deadline, a cancel) still tears down what
//! was made. [`Sandbox::teardown`] consumes it and undoes it in reverse: the last
//! resource reading, `destroy` (bounded, with a reap through a fresh provider instance
//! when it fails), the proxy, the logs, the state folder.
//!
//! The plugin calls the phase makes are behind [`Provider`], [`NewSandbox`] and
//! [`LiveSandbox`], and the reaping after a failed `destroy` behind [`Reaper`], so the
//! phase can be tested with fakes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::phase::{Outcome, RunEnv};
use super::requests::{self, SandboxInputs};
use super::sampler::ResourceSampler;
use super::shortfall::Shortfalls;
use super::workspace::Workspace;
use crate::capabilities::sandbox::{DestroyError, ProviderFailure};
use crate::capabilities::{Capability, EgressGate, RunContext, SandboxBroker};
use crate::egress::{EgressReport, GateError, GateGrants, RunGate};
use crate::gc::Providers;
use crate::host_paths::BindScope;
use crate::record::{LogsRecord, OutputLogs, RunStatus, SandboxInfo, SandboxState};
use crate::runtime::instance::{ActiveSandbox, ProviderInstance, DESTROY_LIMIT};
use crate::runtime::{PluginError, Runtime};
use crate::wit::sandbox::SandboxDetails;
use crate::wit::sandbox_provider::exports::agentgate::plugin::provider::{
    SandboxRequest, SandboxSummary,
};
use crate::wit::types::ResourceUsage;

/// How long one capability may take to delete what it holds of a run whose provider's
/// `destroy` failed ([`crate::capabilities::HostCapability::delete_left`]).
const DELETE_LEFT_LIMIT: Duration = Duration::from_secs(120);

/// How long the provider's output is waited for after `destroy`: a sandbox that stayed
/// busy through `destroy` may stay so.
const STDIO_LIMIT: Duration = Duration::from_secs(5);

/// What the engine asks of a sandbox provider plugin.
pub(super) trait Provider: Send {
    /// Creates the sandbox.
    fn create<'a>(self: Box<Self>, request: &'a SandboxRequest, deadline: Instant) -> Creation<'a>;
}

/// A provider's `create` under way.
pub(super) type Creation<'a> = BoxFuture<'a, Result<Box<dyn NewSandbox>, CreateFailed>>;

/// Why a provider did not create the sandbox, and what it printed meanwhile.
pub(super) struct CreateFailed {
    pub stdio: Vec<u8>,
    pub error: PluginError,
}

/// A sandbox the provider created, not yet handed to the driver.
pub(super) trait NewSandbox: Send {
    fn summary(&mut self, deadline: Instant) -> BoxFuture<'_, Result<SandboxSummary, PluginError>>;
    fn destroy(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), PluginError>>;
    /// Puts the sandbox behind the host's broker, which the run's driver reaches
    /// through `ctx`.
    fn into_live(
        self: Box<Self>,
        details: SandboxDetails,
        workspace_root: &Path,
        logs: Arc<OutputLogs>,
        ctx: &RunContext,
    ) -> std::io::Result<Arc<dyn LiveSandbox>>;
}

/// A sandbox the run's driver uses, as the engine sees it.
pub(super) trait LiveSandbox: Send + Sync {
    /// Resource use so far (cumulative).
    fn stats(&self) -> BoxFuture<'_, Result<ResourceUsage, ProviderFailure>>;
    /// Destroys the sandbox, bounded by [`DESTROY_LIMIT`] in all.
    fn destroy(&self) -> BoxFuture<'_, Result<(), DestroyError>>;
    /// What the provider plugin printed, for `plugins.log`.
    fn plugin_stdio(&self) -> BoxFuture<'_, Vec<u8>>;
}

/// What removes a run's sandbox after its provider's `destroy` failed.
pub(super) trait Reaper: Send + Sync {
    fn reap<'a>(&'a self, ctx: &'a RunContext, provider: &'a str) -> BoxFuture<'a, Reaped>;
}

/// What a [`Reaper`] removed of the run, and what it could not.
#[derive(Debug, Default)]
pub(super) struct Reaped {
    /// Provider objects removed, by id.
    pub reaped: Vec<String>,
    /// What capabilities reclaimed, by kind (`cgroups`, `pods`).
    pub reclaimed: BTreeMap<&'static str, Vec<String>>,
    /// What could not be removed or looked for: something of the run may be left.
    pub errors: Vec<String>,
}

impl Provider for ProviderInstance {
    fn create<'a>(self: Box<Self>, request: &'a SandboxRequest, deadline: Instant) -> Creation<'a> {
        Box::pin(async move {
            match ProviderInstance::create(*self, request, deadline).await {
                Ok(sandbox) => Ok(Box::new(sandbox) as Box<dyn NewSandbox>),
                Err((provider, error)) => Err(CreateFailed {
                    stdio: provider.plugin_stdio(),
                    error,
                }),
            }
        })
    }
}

impl NewSandbox for ActiveSandbox {
    fn summary(&mut self, deadline: Instant) -> BoxFuture<'_, Result<SandboxSummary, PluginError>> {
        Box::pin(ActiveSandbox::summary(self, deadline))
    }

    fn destroy(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), PluginError>> {
        Box::pin(ActiveSandbox::destroy(self, deadline))
    }

    fn into_live(
        self: Box<Self>,
        details: SandboxDetails,
        workspace_root: &Path,
        logs: Arc<OutputLogs>,
        ctx: &RunContext,
    ) -> std::io::Result<Arc<dyn LiveSandbox>> {
        let broker = Arc::new(SandboxBroker::new(*self, details, workspace_root, logs)?);
        ctx.set_broker(broker.clone());
        Ok(broker)
    }
}

impl LiveSandbox for SandboxBroker {
    fn stats(&self) -> BoxFuture<'_, Result<ResourceUsage, ProviderFailure>> {
        Box::pin(SandboxBroker::stats(self))
    }

    fn destroy(&self) -> BoxFuture<'_, Result<(), DestroyError>> {
        Box::pin(SandboxBroker::destroy(self))
    }

    fn plugin_stdio(&self) -> BoxFuture<'_, Vec<u8>> {
        Box::pin(SandboxBroker::plugin_stdio(self))
    }
}

/// Reaps the way `agentgate gc` does: what capabilities hold of the run, then the
/// provider's objects through a fresh instance of its plugin.
pub(super) struct GcReaper<'a>(pub &'a Runtime);

impl Reaper for GcReaper<'_> {
    fn reap<'a>(&'a self, ctx: &'a RunContext, provider: &'a str) -> BoxFuture<'a, Reaped> {
        Box::pin(async move {
            // First what capabilities still hold for this run (pods), without the plugin.
            let mut held = BTreeMap::<&str, Vec<String>>::new();
            let mut held_errors = Vec::new();
            for capability in Capability::all() {
                let Some(deletion) = capability.unit().delete_left(ctx) else {
                    continue;
                };
                match tokio::time::timeout(DELETE_LEFT_LIMIT, deletion).await {
                    Ok(Ok(reclaimed)) => held
                        .entry(reclaimed.kind)
                        .or_default()
                        .extend(reclaimed.names),
                    Ok(Err(e)) => held_errors.push(format!("{}: {e}", capability.name())),
                    Err(_) => held_errors.push(format!(
                        "{}: deleting what it holds of the run took longer than {} s",
                        capability.name(),
                        DELETE_LEFT_LIMIT.as_secs()
                    )),
                }
            }
            let home = ctx
                .identity()
                .map_or_else(|_| String::new(), |identity| identity.home.clone());
            let left = crate::gc::reap_run(
                self.0,
                &mut Providers::new(home),
                &ctx.run_id,
                Some(provider),
                false,
            )
            .await;
            let mut reaped = Reaped {
                reaped: left.reaped,
                reclaimed: left.reclaimed,
                errors: held_errors,
            };
            reaped.errors.extend(left.errors);
            for (kind, names) in held {
                reaped.reclaimed.entry(kind).or_default().extend(names);
            }
            reaped
        })
    }
}

/// What the sandbox phase made, until its teardown.
pub(super) struct Sandbox {
    /// The sandbox's private state folder (a throwaway HOME), removed last.
    state: SandboxState,
    /// The run's egress proxy (TaskSpec `sandbox.egress`).
    gate: Option<RunGate>,
    /// The sandbox, once the provider created it and described it.
    created: Option<Created>,
    /// Why the provider's `destroy` failed, when it was called before teardown (the
    /// sandbox could not describe itself): teardown reaps what it left.
    destroy_failed: Option<DestroyFailure>,
}

/// Why the provider's `destroy` failed.
#[derive(Debug, thiserror::Error)]
enum DestroyFailure {
    /// Before the sandbox was handed to the driver.
    #[error(transparent)]
    Early(PluginError),
    /// At teardown, through the broker (the call failed, or the sandbox stayed busy).
    #[error(transparent)]
    Teardown(DestroyError),
}

/// A sandbox the provider created and described.
struct Created {
    /// When the provider was asked to create it.
    started: Instant,
    info: SandboxInfo,
    /// `stdout.log` and `stderr.log`.
    logs: Option<Arc<OutputLogs>>,
    /// The sandbox behind its broker, and its sampler.
    live: Option<(Arc<dyn LiveSandbox>, ResourceSampler)>,
}

/// What the sandbox phase leaves for `result.json`.
#[derive(Default)]
pub(super) struct SandboxRecord {
    pub info: Option<SandboxInfo>,
    pub logs: Option<LogsRecord>,
    pub egress: Option<EgressReport>,
}

/// Creates the run's sandbox through `provider` around `workspace`, recording what it
/// makes in `slot` as it goes.
pub(super) async fn create(
    slot: &mut Option<Sandbox>,
    provider: Box<dyn Provider>,
    provider_plugin: &str,
    workspace: &Workspace,
    env: &RunEnv<'_>,
    grants: GateGrants,
    deadline: Instant,
) -> Result<(), Outcome> {
    let spec = &env.spec.spec.execution.sandbox;
    // Recorded before it is made, like the sandbox itself: gc removes it after a
    // crash at any point.
    let state = SandboxState::choose()
        .map_err(|e| Outcome::host(format!("choosing the sandbox state dir: {e}")))?;
    env.tracker
        .sandbox_state_chosen(state.path())
        .map_err(|e| Outcome::host(format!("recording the sandbox state dir: {e}")))?;
    state.create().map_err(|e| {
        Outcome::host(format!(
            "creating the sandbox state dir {}: {e}",
            state.path().display()
        ))
    })?;
    let state_dir = state.path().to_path_buf();
    let egress_dir = state.egress_dir();
    let sandbox = slot.insert(Sandbox {
        state,
        gate: None,
        created: None,
        destroy_failed: None,
    });
    env.ctx.set_bind_scope(BindScope::new(
        &[workspace.root.clone(), state_dir.clone()],
        env.host_paths.clone(),
    ));
    sandbox.gate = start_gate(env, grants, egress_dir).await?;
    let identity = env
        .ctx
        .identity()
        .map_err(|e| Outcome::host(format!("identifying this process: {e}")))?;
    let request = requests::sandbox_request(
        env.spec,
        &SandboxInputs {
            run_id: &env.ctx.run_id,
            workspace_root: &workspace.root,
            workspace_readonly: workspace.readonly,
            state_dir: &state_dir,
            owner: &identity.owner,
            created: identity.created,
            time_left: deadline.saturating_duration_since(Instant::now()),
        },
    );
    // Recorded before the provider acts, so what a crash during creation leaves
    // behind is still found.
    env.tracker
        .sandbox_creating(
            &spec.provider,
            &workspace.root,
            requests::recorded_mounts(&request),
        )
        .map_err(|e| Outcome::host(format!("recording the sandbox: {e}")))?;
    let started = Instant::now();
    let mut created = match provider.create(&request, deadline).await {
        Ok(created) => created,
        Err(failed) => {
            env.folder.append_plugin_log(provider_plugin, &failed.stdio);
            return Err(Outcome::plugin(failed.error));
        }
    };
    let summary = match created.summary(deadline).await {
        Ok(summary) => summary,
        Err(error) => {
            let deadline = Instant::now() + DESTROY_LIMIT;
            if let Err(e) = created.destroy(deadline).await {
                sandbox.destroy_failed = Some(DestroyFailure::Early(e));
            }
            return Err(Outcome::plugin(error));
        }
    };
    // The seed's SandboxInfo names the container a sandbox is: the id is one when
    // the capability that made it for this run says so.
    let container_id =
        (env.ctx.host_object(&summary.id) == Some("container")).then(|| summary.id.clone());
    if let Err(e) = env
        .tracker
        .sandbox_created(&summary.id, container_id.as_deref())
    {
        env.registry_error(e);
    }
    // The provider describes the network it asked for; the host replaced it.
    let isolation = match &spec.egress {
        Some(egress) => format!(
            "{}; enforced by the host: loopback only, egress through its proxy to {}",
            summary.isolation,
            egress.allow.join(", ")
        ),
        None => summary.isolation.clone(),
    };
    env.events.host_log(
        "info",
        format!("sandbox {} ({}): {isolation}", spec.provider, summary.id),
    );
    let info = SandboxInfo {
        provider: spec.provider.clone(),
        // The seed's SandboxInfo names the container of a docker sandbox.
        container_id,
        id: summary.id.clone(),
        isolation,
        resource_usage: None,
        duration_ms: 0,
    };
    let details = requests::sandbox_details(env.spec, summary, workspace.readonly);
    let created_sandbox = sandbox.created.insert(Created {
        started,
        info,
        logs: None,
        live: None,
    });
    let logs = match env.folder.output_logs() {
        Ok(logs) => Arc::new(logs),
        Err(e) => {
            // Nothing uses the sandbox yet: it goes now, its failure reaped at teardown.
            if let Err(e) = created.destroy(Instant::now() + DESTROY_LIMIT).await {
                sandbox.destroy_failed = Some(DestroyFailure::Early(e));
            }
            return Err(Outcome::host(format!("creating the output logs: {e}")));
        }
    };
    created_sandbox.logs = Some(logs.clone());
    let live = created
        .into_live(details, &workspace.root, logs, &env.ctx)
        .map_err(|e| {
            Outcome::host(format!(
                "opening the workspace {}: {e}",
                workspace.root.display()
            ))
        })?;
    let sampler = ResourceSampler::start(live.clone(), env.events.clone(), started);
    created_sandbox.live = Some((live, sampler));
    Ok(())
}

/// Starts the run's egress gate when the TaskSpec has `sandbox.egress`, before the
/// provider makes anything: from then on every sandbox process and container of the
/// run is confined to it (see [`EgressGate`]).
async fn start_gate(
    env: &RunEnv<'_>,
    grants: GateGrants,
    folder: std::path::PathBuf,
) -> Result<Option<RunGate>, Outcome> {
    let Some(egress) = &env.spec.spec.execution.sandbox.egress else {
        return Ok(None);
    };
    let gate = RunGate::start(&egress.allow, grants, folder, env.events.clone())
        .await
        .map_err(|e| match e {
            GateError::Destination(_) => Outcome::invalid(e.to_string()),
            e => Outcome::host(e.to_string()),
        })?;
    env.ctx.set_egress(EgressGate {
        socket_dir: gate.folder().to_path_buf(),
        allow: egress.allow.clone(),
    });
    env.events.host_log(
        "info",
        format!(
            "egress: only through the proxy, to {}",
            egress.allow.join(", ")
        ),
    );
    Ok(Some(gate))
}

impl Sandbox {
    /// Undoes the phase, last made first. `outcome` may become a failure that names
    /// an out-of-memory kill; what teardown could not undo is a shortfall.
    pub async fn teardown(
        self,
        outcome: Outcome,
        env: &RunEnv<'_>,
        provider_plugin: &str,
        reaper: &dyn Reaper,
        shortfalls: &mut Shortfalls,
    ) -> (Outcome, SandboxRecord) {
        let Sandbox {
            state,
            gate,
            created,
            mut destroy_failed,
        } = self;
        let mut record = SandboxRecord::default();
        let mut outcome = outcome;
        let mut logs = None;
        let mut started = None;
        if let Some(created) = created {
            let Created {
                started: since,
                mut info,
                logs: output,
                live,
            } = created;
            started = Some(since);
            logs = output;
            if let Some((live, sampler)) = live {
                outcome = record_resource_usage(outcome, &*live, sampler, &mut info, env).await;
                if let Err(e) = destroy(&*live, env, provider_plugin).await {
                    destroy_failed = Some(e);
                }
            }
            record.info = Some(info);
        }
        if let Some(error) = destroy_failed {
            reap_after_failed_destroy(error, env, reaper, shortfalls).await;
        }
        // The sandbox is gone: nothing can use the proxy any more.
        if let Some(gate) = gate {
            let stopped = gate.stop().await;
            record.egress = Some(stopped.report);
            if let Some((folder, e)) = stopped.left {
                shortfalls.leftover(format!(
                    "removing the egress proxy's folder {}: {e}",
                    folder.display()
                ));
            }
        }
        // Nothing prints any more: write what the output logs held back.
        if let Some(logs) = logs {
            logs.finish();
            let (stdout, stderr) = logs.sizes();
            record.logs = Some(LogsRecord { stdout, stderr });
        }
        // The sandbox's private state (a throwaway HOME) goes with it.
        if let Err(e) = state.remove() {
            shortfalls.leftover(format!(
                "removing the sandbox state {}: {e}",
                state.path().display()
            ));
        }
        if let (Some(info), Some(started)) = (record.info.as_mut(), started) {
            info.duration_ms = started.elapsed().as_millis() as u64;
        }
        (outcome, record)
    }
}

/// Destroys the sandbox, recording its provider's output whatever the result.
async fn destroy(
    live: &dyn LiveSandbox,
    env: &RunEnv<'_>,
    provider_plugin: &str,
) -> Result<(), DestroyFailure> {
    let destroyed = live.destroy().await;
    // Kept whatever the outcome: a provider's warnings matter on success too.
    let stdio = tokio::time::timeout(STDIO_LIMIT, live.plugin_stdio())
        .await
        .unwrap_or_default();
    env.folder.append_plugin_log(provider_plugin, &stdio);
    match destroyed {
        Ok(()) => {
            if let Err(e) = env.tracker.sandbox_destroyed() {
                env.registry_error(e);
            }
            Ok(())
        }
        Err(e) => Err(DestroyFailure::Teardown(e)),
    }
}

/// The provider's `destroy` failed, timed out or trapped (`error`): reaps the run's
/// objects the way `gc` does. The failed `destroy` is a shortfall whatever the reaping
/// finds (a provider may copy the workspace back there); what is still there after it
/// is a leftover that `gc` retries.
async fn reap_after_failed_destroy(
    error: DestroyFailure,
    env: &RunEnv<'_>,
    reaper: &dyn Reaper,
    shortfalls: &mut Shortfalls,
) {
    let provider = &env.spec.spec.execution.sandbox.provider;
    let reaped = reaper.reap(&env.ctx, provider).await;
    let mut what: Vec<String> = reaped.reaped;
    what.extend(reaped.reclaimed.iter().flat_map(|(kind, names)| {
        let one = kind.strip_suffix('s').unwrap_or(kind);
        names.iter().map(move |name| format!("{one} {name}"))
    }));
    if reaped.errors.is_empty() {
        let removed = if what.is_empty() {
            "it found nothing of the run to remove".to_string()
        } else {
            format!("it removed {}", what.join(", "))
        };
        shortfalls.cleanup(format!(
            "destroying the sandbox: {error}; reaped through a fresh instance of \
             provider {provider}: {removed}, nothing of the run is left"
        ));
        if let Err(e) = env.tracker.sandbox_reaped() {
            env.registry_error(e);
        }
    } else {
        let removed = if what.is_empty() {
            String::new()
        } else {
            format!(" (it removed {})", what.join(", "))
        };
        shortfalls.leftover(format!(
            "destroying the sandbox: {error}; reaping through a fresh instance of \
             provider {provider} failed{removed}, so something of the run is left for \
             `agentgate gc`: {}",
            reaped.errors.join("; ")
        ));
    }
}

/// Reads the sandbox's resource use before it is destroyed: the counters are
/// cumulative (CPU time, peak memory), so reading them once at the end gives the
/// whole run. A sandbox that ran out of memory turns a failed agent into a failure
/// that says so.
async fn record_resource_usage(
    outcome: Outcome,
    live: &dyn LiveSandbox,
    mut sampler: ResourceSampler,
    info: &mut SandboxInfo,
    env: &RunEnv<'_>,
) -> Outcome {
    sampler.stop().await;
    let usage = match live.stats().await {
        Ok(usage) => usage,
        Err(e) => {
            env.events
                .host_log("info", format!("no resource usage for the sandbox: {e}"));
            return outcome;
        }
    };
    sampler.finish(&usage, &env.events);
    const MIB: f64 = 1024.0 * 1024.0;
    info.resource_usage = Some(crate::record::ResourceUsage {
        cpu_percent: (usage.cpu_percent * 10.0).round() / 10.0,
        memory_mb: (usage.memory_bytes as f64 / MIB * 10.0).round() / 10.0,
        peak_memory_mb: (usage.peak_memory_bytes as f64 / MIB * 10.0).round() / 10.0,
        oom_killed: usage.oom_killed,
    });
    if !usage.oom_killed {
        return outcome;
    }
    let limit = env.spec.spec.execution.sandbox.resources.memory_bytes;
    let message = format!(
        "OOMKilled: the sandbox ran out of memory{} and the kernel killed the agent; \
         raise sandbox.resources.memory or make the task use less",
        limit.map_or(String::new(), |l| format!(" (limit {} MiB)", l >> 20))
    );
    env.events.host_log("error", message.clone());
    match outcome {
        Outcome::Agent(agent) if !agent.success => Outcome::Failed {
            status: RunStatus::Failed,
            message,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
