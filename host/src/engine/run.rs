//! One run, phase by phase.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::plugins::Plugins;
use super::requests::{self, SandboxInputs};
use super::sampler::ResourceSampler;
use super::shortfall::{Shortfall, Shortfalls};
use super::workspace::{materialize, Workspace};
use crate::capabilities::labels::RunIdentity;
use crate::capabilities::{Capability, RunContext, SandboxBroker};
use crate::changeset::{
    GitBaseline, GitChanges, Snapshot, COLLECT_SECS, PATCH_FILE_BYTES, PATCH_TOTAL_BYTES,
};
use crate::gc::{GcOptions, Providers, Scope};
use crate::host_paths::{self, BindScope, HostPaths, PathUse};
use crate::record::{
    AgentRecord, EventSink, FileChange, LogsRecord, Observer, OutputLogs, PatchRecord, PhaseStatus,
    PluginRecord, Redactor, ResourceUsage, RunFolder, RunResult, RunStatus, SandboxInfo,
    SandboxState, WorkspaceRecord, RESULT_VERSION, WORKSPACE_SCRATCH,
};
use crate::registry::Tracker;
use crate::runtime::instance::SourceInstance;
use crate::runtime::{LoadedPlugin, PluginError, Runtime};
use crate::taskspec::{self, TaskSpec};
use crate::wit::agent_driver::exports::agentgate::plugin::driver::AgentOutcome;
use crate::wit::workspace_source::exports::agentgate::plugin::source::PreparedWorkspace;

/// How long one capability may take to delete what it holds of a run whose provider's
/// `destroy` failed ([`crate::capabilities::HostCapability::delete_left`]).
const DELETE_LEFT_LIMIT: Duration = Duration::from_secs(120);

/// Everything a run needs besides the runtime.
pub struct RunRequest {
    pub spec: TaskSpec,
    /// Replaces (or supplies) `goal.prompt`.
    pub prompt: Option<String>,
    /// `AGENTGATE_HOME`: runs are written under `home/runs/`.
    pub home: PathBuf,
    /// Host environment variables passed to the agent driver as secrets.
    pub secrets: Vec<(String, String)>,
    /// Further values to mask in events, logs and the result (secrets that reached the
    /// TaskSpec through `${VAR}`). The values of `secrets` are always masked.
    pub redact: Vec<String>,
    /// Sees every event as it happens.
    pub observer: Option<Observer>,
    /// Resolves when the run should be cancelled.
    pub cancel: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// When the run began, for `durationMs` and the `plugins` phase: the CLI sets it
    /// before it finds the plugins, so finding and describing them is counted too.
    pub started: Instant,
}

impl RunRequest {
    pub fn new(spec: TaskSpec, home: PathBuf) -> RunRequest {
        RunRequest {
            spec,
            prompt: None,
            home,
            secrets: Vec::new(),
            redact: Vec::new(),
            observer: None,
            cancel: Box::pin(std::future::pending()),
            started: Instant::now(),
        }
    }
}

pub struct RunReport {
    pub result: RunResult,
    pub folder: PathBuf,
}

/// Why a run could not start. Once it has started, every outcome is a [`RunResult`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Host(#[from] anyhow::Error),
}

/// How the phases ended.
enum Outcome {
    Agent(AgentOutcome),
    Failed { status: RunStatus, message: String },
}

impl Outcome {
    fn plugin(error: PluginError) -> Outcome {
        let status = match &error {
            // Calls made during the run share its deadline.
            PluginError::Deadline { .. } => RunStatus::TimedOut,
            e if e.is_invalid_spec() => RunStatus::Invalid,
            _ => RunStatus::Error,
        };
        Outcome::Failed {
            status,
            message: error.to_string(),
        }
    }

    fn host(message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            status: RunStatus::Error,
            message: message.into(),
        }
    }
}

/// Runs a TaskSpec to the end and writes its folder.
pub async fn run(runtime: &Runtime, mut request: RunRequest) -> Result<RunReport, RunError> {
    // A credential written in the TaskSpec's environment is masked like one passed in.
    let environment = &request.spec.spec.execution.sandbox.environment;
    let redactor = Arc::new(Redactor::new(
        request
            .secrets
            .iter()
            .map(|(_, value)| value.clone())
            .chain(request.redact.iter().cloned())
            .chain(
                environment
                    .iter()
                    .filter(|(name, _)| crate::record::is_secret_name(name))
                    .map(|(_, value)| value.clone()),
            ),
    ));
    // An error message may quote the TaskSpec, and so a secret interpolated into it.
    start(runtime, &mut request, redactor.clone())
        .await
        .map_err(|error| match error {
            RunError::Invalid(message) => RunError::Invalid(redactor.apply(message)),
            RunError::Host(e) => RunError::Host(anyhow::anyhow!(redactor.apply(format!("{e:#}")))),
        })
}

async fn start(
    runtime: &Runtime,
    request: &mut RunRequest,
    redactor: Arc<Redactor>,
) -> Result<RunReport, RunError> {
    let prompt = request
        .prompt
        .clone()
        .or_else(|| request.spec.spec.goal.as_ref().map(|g| g.prompt.clone()))
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            RunError::Invalid(
                "spec.goal.prompt: missing; add goal.prompt to the TaskSpec or pass --prompt"
                    .into(),
            )
        })?;
    let plugins = super::plugins::resolve(runtime, &request.spec).map_err(|problems| {
        RunError::Invalid(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;

    // Every host path the TaskSpec names, before anything starts (nothing walks `/`).
    let host_paths = Arc::new(HostPaths::of_this_host(
        runtime.path_grants(),
        &request.home,
        crate::capabilities::guarded_paths(),
    ));
    check_host_paths(&host_paths, &request.spec)?;
    check_egress_cap(runtime, &request.spec)?;

    // The built-ins load while the run is recorded and its folder made: on two cores
    // that takes their loading off the run's path.
    let run_plugins = plugins.all();
    let preload = runtime.preload_builtins(&run_plugins);
    let set_up = async {
        let run_id = uuid::Uuid::now_v7().simple().to_string();
        // The registry first: a run it cannot record could not be cleaned up after a
        // crash, so it is refused before anything is made for it, its folder included.
        let tracker = Tracker::start(
            &request.home,
            &run_id,
            &request.spec.metadata.name,
            &RunFolder::location(&request.home, &run_id),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let opened = RunFolder::create(&request.home, &run_id, redactor.clone())
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot create the run folder under {}: {e}",
                    request.home.display()
                )
            })
            .and_then(|folder| {
                let events = EventSink::new(
                    &run_id,
                    &folder.events(),
                    request.observer.take(),
                    redactor.clone(),
                )
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", folder.events().display()))?;
                Ok((folder, Arc::new(events)))
            });
        let (folder, events) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // Nothing was started: the row must not wait for gc as an orphan.
                let _ = tracker.finished("error");
                return Err(e.into());
            }
        };
        // The TaskSpec as the run understood it, for `agentgate report`: masked like
        // everything in the folder, since `${VAR}`s were interpolated into it.
        if let Err(e) =
            folder.write_taskspec(&recorded_taskspec(&request.spec, request.prompt.as_deref()))
        {
            events.host_log("error", format!("writing taskspec.json: {e}"));
        }
        reap_orphans(runtime, &request.home, &events).await;
        Ok::<_, RunError>((run_id, tracker, folder, events))
    };
    let ((), set_up) = tokio::join!(preload, set_up);
    let (run_id, tracker, folder, events) = set_up?;
    let mut run = Run {
        runtime,
        spec: &request.spec,
        plugins,
        ctx: runtime.run_context(
            RunIdentity::new(run_id, tracker.owner().to_string(), &request.home),
            events.clone(),
        ),
        host_paths,
        events,
        redactor,
        folder,
        tracker,
        started: SystemTime::now() - request.started.elapsed(),
        clock: request.started,
        phases: BTreeMap::new(),
        source: None,
        workspace: None,
        before: None,
        git: None,
        broker: None,
        destroy_failed: None,
        logs: None,
        log_sizes: None,
        sandbox: None,
        sandbox_started: None,
        sandbox_state: None,
        sampler: None,
        egress: None,
        egress_report: None,
    };

    let limits = request.spec.spec.convergence.as_ref().map(|c| &c.limits);
    let timeout = limits.and_then(|l| l.max_wall_clock).map_or(
        request.spec.spec.execution.sandbox.resources.timeout,
        |wall| wall.min(request.spec.spec.execution.sandbox.resources.timeout),
    );
    // `parse` bounds every timeout; the clamp keeps a TaskSpec built in code from overflowing.
    let deadline = Instant::now() + timeout.min(taskspec::MAX_DURATION);
    let outcome = tokio::select! {
        outcome = tokio::time::timeout_at(deadline, run.phases(&prompt, &request.secrets, deadline)) => {
            outcome.unwrap_or_else(|_| Outcome::Failed {
                status: RunStatus::TimedOut,
                message: format!("the run exceeded its timeout of {}; everything it started was killed", taskspec::format_duration(timeout)),
            })
        }
        _ = &mut request.cancel => Outcome::Failed {
            status: RunStatus::Cancelled,
            message: "the run was cancelled".into(),
        },
    };
    let result = run.finish(outcome).await;
    Ok(RunReport {
        folder: run.folder.path().to_path_buf(),
        result,
    })
}

/// Refuses a TaskSpec whose `sandbox.egress.allow` asks for more than the operator's
/// `egress:` in grants.yaml permits, before anything is made for the run.
fn check_egress_cap(runtime: &Runtime, spec: &TaskSpec) -> Result<(), RunError> {
    let Some(egress) = &spec.spec.execution.sandbox.egress else {
        return Ok(());
    };
    let field = "spec.execution.sandbox.egress.allow";
    let allow = crate::egress::Allowlist::parse(&egress.allow)
        .map_err(|e| RunError::Invalid(format!("{field}{e}")))?;
    runtime.egress_grants().cap.check(&allow).map_err(|e| {
        RunError::Invalid(format!(
            "{field}{e}; ask the operator, or remove that entry"
        ))
    })
}

struct Run<'a> {
    runtime: &'a Runtime,
    spec: &'a TaskSpec,
    plugins: Plugins<'a>,
    ctx: Arc<RunContext>,
    /// Which host folders the TaskSpec and the sandbox may reach.
    host_paths: Arc<HostPaths>,
    events: Arc<EventSink>,
    redactor: Arc<Redactor>,
    folder: RunFolder,
    tracker: Tracker,
    started: SystemTime,
    clock: Instant,
    phases: BTreeMap<String, u64>,
    source: Option<(SourceInstance, PreparedWorkspace)>,
    workspace: Option<Workspace>,
    before: Option<Snapshot>,
    /// Set instead of `before` when the workspace is a git repository.
    git: Option<GitBaseline>,
    broker: Option<Arc<SandboxBroker>>,
    /// Why the provider's `destroy` failed, when it was called before cleanup (the
    /// sandbox could not describe itself): cleanup reaps what it left.
    destroy_failed: Option<String>,
    /// `stdout.log` and `stderr.log`, ended at cleanup.
    logs: Option<Arc<OutputLogs>>,
    /// What the output logs kept and dropped, once they ended.
    log_sizes: Option<LogsRecord>,
    sandbox: Option<SandboxInfo>,
    sandbox_started: Option<Instant>,
    /// The sandbox's private state folder, once made; removed at cleanup.
    sandbox_state: Option<SandboxState>,
    /// Records the sandbox's resource use every second until cleanup.
    sampler: Option<ResourceSampler>,
    /// The run's egress proxy (TaskSpec `sandbox.egress`), until cleanup.
    egress: Option<RunEgress>,
    /// What the proxy saw, once stopped, for `result.json`.
    egress_report: Option<crate::egress::EgressReport>,
}

/// A run's egress proxy and the folder of its socket, removed at cleanup.
struct RunEgress {
    proxy: crate::egress::Proxy,
    socket_dir: std::path::PathBuf,
}

impl Run<'_> {
    fn begin(&self, phase: &str) -> Instant {
        self.events.phase(phase, PhaseStatus::Started, None);
        Instant::now()
    }

    fn end(&mut self, phase: &str, since: Instant, failure: Option<&Outcome>) {
        self.phases
            .insert(phase.to_string(), since.elapsed().as_millis() as u64);
        let (status, message) = match failure {
            Some(Outcome::Failed { message, .. }) => (PhaseStatus::Failed, Some(message.clone())),
            _ => (PhaseStatus::Finished, None),
        };
        self.events.phase(phase, status, message);
    }

    /// Plugins, workspace, sandbox, agent. Dropped at the deadline or on cancel;
    /// whatever it set up is recorded on `self` for `finish` to tear down.
    async fn phases(
        &mut self,
        prompt: &str,
        secrets: &[(String, String)],
        deadline: Instant,
    ) -> Outcome {
        // The `plugins` phase counts from the run's start: finding the plugins and
        // resolving the TaskSpec came before the events could be recorded.
        self.begin("plugins");
        let result = self.load_plugins().await;
        self.end("plugins", self.clock, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.begin("workspace");
        let result = self.prepare_workspace(deadline).await;
        self.end("workspace", since, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.begin("sandbox");
        let result = self.create_sandbox(deadline).await;
        self.end("sandbox", since, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.begin("agent");
        let outcome = self.run_agent(prompt, secrets, deadline).await;
        let failure = matches!(outcome, Outcome::Failed { .. }).then_some(&outcome);
        self.end("agent", since, failure);
        outcome
    }

    /// Compiles the run's three plugins, or reads them from the compile cache, side by
    /// side (each on a blocking thread).
    async fn load_plugins(&mut self) -> Result<(), Outcome> {
        let loads = self.plugins.all().map(|plugin| self.runtime.load(plugin));
        futures_util::future::try_join_all(loads)
            .await
            .map_err(Outcome::plugin)?;
        Ok(())
    }

    async fn prepare_workspace(&mut self, deadline: Instant) -> Result<(), Outcome> {
        let mut source = self
            .runtime
            .workspace_source(self.plugins.source, self.ctx.clone())
            .await
            .map_err(Outcome::plugin)?;
        let scratch = self
            .folder
            .scratch(WORKSPACE_SCRATCH)
            .map_err(|e| Outcome::host(format!("creating the scratch workspace: {e}")))?;
        self.ctx.allow_repo_root(&scratch);
        let request = requests::workspace_request(self.spec, &self.ctx.run_id, &scratch);
        let prepared = source
            .prepare(&request, deadline)
            .await
            .map_err(Outcome::plugin)?;
        // Any source plugin may name any root: one outside the run's folder is held to
        // the policy before it is created or read, and again once resolved.
        self.check_workspace_root(&prepared.root, false)?;
        let workspace = materialize(&prepared).map_err(|e| Outcome::host(e.to_string()))?;
        self.check_workspace_root(&workspace.root.display().to_string(), true)?;
        self.ctx.allow_repo_root(&workspace.root);
        self.events
            .host_log("info", format!("workspace: {}", prepared.description));
        // Masked like result.json: the registry keeps it for a crashed run's result.
        let record = self.redactor.apply(
            serde_json::to_string(&workspace_record(self.spec, &workspace))
                .expect("records serialize"),
        );
        if let Err(e) =
            self.tracker
                .workspace_prepared(&workspace.root, workspace.remove_at_cleanup, &record)
        {
            self.events
                .host_log("error", format!("sandbox registry: {e}"));
        }
        // A repository is compared with git's objects; anything else (or a
        // repository git cannot read) by a full snapshot.
        match GitBaseline::take(&workspace.dir) {
            Ok(Some(baseline)) => self.git = Some(baseline),
            Ok(None) => {}
            Err(e) => self.events.host_log(
                "info",
                format!("comparing the workspace by snapshot, not git: {e}"),
            ),
        }
        if self.git.is_none() {
            self.before = Some(
                Snapshot::take(&workspace.dir)
                    .map_err(|e| Outcome::host(format!("reading the workspace: {e}")))?,
            );
        }
        self.workspace = Some(workspace);
        self.source = Some((source, prepared));
        Ok(())
    }

    /// Refuses a workspace root outside the run's folder that the host path policy
    /// refuses (a `local` path or `fresh` destPath, or a plugin's own choice).
    fn check_workspace_root(&self, root: &str, must_exist: bool) -> Result<(), Outcome> {
        let run_folder = self.folder.path().canonicalize().unwrap_or_default();
        let inside_run = host_paths::resolve(root, false)
            .is_ok_and(|(resolved, _)| resolved.starts_with(&run_folder));
        if inside_run {
            return Ok(());
        }
        self.host_paths
            .check(PathUse::Workspace, root, must_exist)
            .map(|_| ())
            .map_err(|refusal| Outcome::Failed {
                status: RunStatus::Invalid,
                message: format!("the workspace root: {refusal}"),
            })
    }

    async fn create_sandbox(&mut self, deadline: Instant) -> Result<(), Outcome> {
        let workspace = self.workspace.clone().expect("prepared before the sandbox");
        let spec = &self.spec.spec.execution.sandbox;
        let provider = self
            .runtime
            .sandbox_provider(self.plugins.provider, self.ctx.clone())
            .await
            .map_err(Outcome::plugin)?;
        // Recorded before it is made, like the sandbox itself: gc removes it after a
        // crash at any point.
        let state = SandboxState::choose()
            .map_err(|e| Outcome::host(format!("choosing the sandbox state dir: {e}")))?;
        self.tracker
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
        self.sandbox_state = Some(state);
        self.ctx.set_bind_scope(BindScope::new(
            &[workspace.root.clone(), state_dir.clone()],
            self.host_paths.clone(),
        ));
        self.start_egress(egress_dir).await?;
        let identity = self
            .ctx
            .identity()
            .map_err(|e| Outcome::host(format!("identifying this process: {e}")))?;
        let request = requests::sandbox_request(
            self.spec,
            &SandboxInputs {
                run_id: &self.ctx.run_id,
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
        self.tracker
            .sandbox_creating(
                &spec.provider,
                &workspace.root,
                requests::recorded_mounts(&request),
            )
            .map_err(|e| Outcome::host(format!("recording the sandbox: {e}")))?;
        self.sandbox_started = Some(Instant::now());
        let mut sandbox = match provider.create(&request, deadline).await {
            Ok(sandbox) => sandbox,
            Err((provider, error)) => {
                self.folder
                    .append_plugin_log(self.plugins.provider.name(), &provider.plugin_stdio());
                return Err(Outcome::plugin(error));
            }
        };
        let summary = match sandbox.summary(deadline).await {
            Ok(summary) => summary,
            Err(error) => {
                let deadline = Instant::now() + crate::runtime::instance::DESTROY_LIMIT;
                if let Err(e) = sandbox.destroy(deadline).await {
                    self.destroy_failed = Some(e.to_string());
                }
                return Err(Outcome::plugin(error));
            }
        };
        // The seed's SandboxInfo names the container a sandbox is: the id is one when
        // the capability that made it for this run says so.
        let container_id =
            (self.ctx.host_object(&summary.id) == Some("container")).then(|| summary.id.clone());
        if let Err(e) = self
            .tracker
            .sandbox_created(&summary.id, container_id.as_deref())
        {
            self.events
                .host_log("error", format!("sandbox registry: {e}"));
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
        self.sandbox = Some(SandboxInfo {
            provider: spec.provider.clone(),
            // The seed's SandboxInfo names the container of a docker sandbox.
            container_id,
            id: summary.id.clone(),
            isolation: isolation.clone(),
            resource_usage: None,
            duration_ms: 0,
        });
        self.events.host_log(
            "info",
            format!("sandbox {} ({}): {isolation}", spec.provider, summary.id),
        );
        let details = requests::sandbox_details(self.spec, summary, workspace.readonly);
        let logs = Arc::new(
            self.folder
                .output_logs()
                .map_err(|e| Outcome::host(format!("creating the output logs: {e}")))?,
        );
        self.logs = Some(logs.clone());
        let broker = match SandboxBroker::new(sandbox, details, &workspace.root, logs) {
            Ok(broker) => Arc::new(broker),
            Err(e) => {
                return Err(Outcome::host(format!(
                    "opening the workspace {}: {e}",
                    workspace.root.display()
                )))
            }
        };
        self.ctx.set_broker(broker.clone());
        self.sampler = Some(ResourceSampler::start(
            broker.clone(),
            self.events.clone(),
            self.sandbox_started.unwrap_or_else(Instant::now),
        ));
        self.broker = Some(broker);
        Ok(())
    }

    /// Starts the run's egress proxy when the TaskSpec has `sandbox.egress`, before the
    /// provider makes anything: from then on every sandbox process and container of
    /// the run is confined to it (see [`crate::capabilities::EgressGate`]). Its socket
    /// is in a 0700 folder next to the sandbox's state, not in anything a sandbox can
    /// write, so no sandbox can swap it for another path.
    async fn start_egress(&mut self, socket_dir: std::path::PathBuf) -> Result<(), Outcome> {
        let Some(egress) = &self.spec.spec.execution.sandbox.egress else {
            return Ok(());
        };
        let allow =
            crate::egress::Allowlist::parse(&egress.allow).map_err(|e| Outcome::Failed {
                status: RunStatus::Invalid,
                message: format!("spec.execution.sandbox.egress.allow: {e}"),
            })?;
        let grants = self.runtime.egress_grants();
        let cap = grants.cap.clone();
        let resolver = match grants.nameserver {
            Some(nameserver) => crate::egress::Resolver::nameserver(nameserver),
            None => crate::egress::Resolver::system(),
        }
        .map_err(|e| Outcome::host(format!("the egress proxy's resolver: {e}")))?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&socket_dir)
            .map_err(|e| {
                Outcome::host(format!(
                    "creating the egress proxy's folder {}: {e}",
                    socket_dir.display()
                ))
            })?;
        // The name files containers bind (sealed processes get them as memfds).
        let hosts = crate::capabilities::process::landlock::hosts_file(&egress.allow);
        for (name, text) in [
            (crate::capabilities::EGRESS_HOSTS_NAME, hosts.as_str()),
            (
                crate::capabilities::EGRESS_RESOLV_CONF_NAME,
                crate::capabilities::EGRESS_RESOLV_CONF,
            ),
        ] {
            if let Err(e) = std::fs::write(socket_dir.join(name), text) {
                let _ = std::fs::remove_dir_all(&socket_dir);
                return Err(Outcome::host(format!("writing the sandbox's {name}: {e}")));
            }
        }
        let policy = crate::egress::Policy {
            allow,
            cap,
            resolver,
        };
        let socket = socket_dir.join(crate::capabilities::EGRESS_SOCKET_NAME);
        let proxy = match crate::egress::Proxy::start(policy, &socket, self.events.clone()).await {
            Ok(proxy) => proxy,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&socket_dir);
                return Err(Outcome::host(format!("starting the egress proxy: {e}")));
            }
        };
        self.ctx.set_egress(crate::capabilities::EgressGate {
            socket_dir: socket_dir.clone(),
            allow: egress.allow.clone(),
        });
        self.events.host_log(
            "info",
            format!(
                "egress: only through the proxy, to {}",
                egress.allow.join(", ")
            ),
        );
        self.egress = Some(RunEgress { proxy, socket_dir });
        Ok(())
    }

    async fn run_agent(
        &mut self,
        prompt: &str,
        secrets: &[(String, String)],
        deadline: Instant,
    ) -> Outcome {
        let mut driver = match self
            .runtime
            .agent_driver(self.plugins.driver, self.ctx.clone())
            .await
        {
            Ok(driver) => driver,
            Err(e) => return Outcome::plugin(e),
        };
        let task = requests::agent_task(
            self.spec,
            &self.ctx.run_id,
            prompt,
            secrets,
            deadline.saturating_duration_since(Instant::now()),
        );
        let result = driver.run(&task, deadline).await;
        self.folder
            .append_plugin_log(self.plugins.driver.name(), &driver.plugin_stdio());
        match result {
            Ok(outcome) => Outcome::Agent(outcome),
            Err(e) => Outcome::plugin(e),
        }
    }

    /// Tears everything down, collects changes and writes `result.json`. Every promise
    /// of the run it finds broken is a [`Shortfall`]; [`Shortfalls::settle`] decides
    /// what they do to the status.
    async fn finish(&mut self, outcome: Outcome) -> RunResult {
        let since = self.begin("cleanup");
        let mut shortfalls = Shortfalls::default();
        let outcome = self.record_resource_usage(outcome).await;
        let mut destroy_failed = self.destroy_failed.take();
        if let Some(broker) = self.broker.take() {
            let destroyed = broker.destroy().await;
            // Kept whatever the outcome: a provider's warnings matter on success too.
            // Bounded: a sandbox that stayed busy through `destroy` may stay so.
            let stdio = tokio::time::timeout(Duration::from_secs(5), broker.plugin_stdio())
                .await
                .unwrap_or_default();
            self.folder
                .append_plugin_log(self.plugins.provider.name(), &stdio);
            match destroyed {
                Ok(()) => {
                    if let Err(e) = self.tracker.sandbox_destroyed() {
                        self.events
                            .host_log("error", format!("sandbox registry: {e}"));
                    }
                }
                Err(e) => destroy_failed = Some(format!("{e:#}")),
            }
        }
        if let Some(error) = destroy_failed {
            self.reap_after_failed_destroy(error, &mut shortfalls).await;
        }
        // The sandbox is gone: nothing can use the proxy any more.
        if let Some(egress) = self.egress.take() {
            self.egress_report = Some(egress.proxy.stop().await);
            if let Err(e) = std::fs::remove_dir_all(&egress.socket_dir) {
                shortfalls.leftover(format!(
                    "removing the egress proxy's folder {}: {e}",
                    egress.socket_dir.display()
                ));
            }
        }
        // Nothing prints any more: write what the output logs held back.
        if let Some(logs) = self.logs.take() {
            logs.finish();
            let (stdout, stderr) = logs.sizes();
            self.log_sizes = Some(LogsRecord { stdout, stderr });
        }
        // The sandbox's private state (a throwaway HOME) goes with it.
        if let Some(state) = self.sandbox_state.take() {
            if let Err(e) = state.remove() {
                shortfalls.leftover(format!(
                    "removing the sandbox state {}: {e}",
                    state.path().display()
                ));
            }
        }
        if let (Some(info), Some(started)) = (self.sandbox.as_mut(), self.sandbox_started) {
            info.duration_ms = started.elapsed().as_millis() as u64;
        }
        // A run whose changes are unknown, or were made to a root it then moved away,
        // or whose files a copy back left out, has an incomplete record.
        let changes = self.collect_changes(&mut shortfalls);
        shortfalls.add(Shortfall::LeftOut(self.ctx.left_out()));
        // A source releases what the run made (a push, a pull request): when that fails
        // the work was not delivered.
        if let Some((mut source, prepared)) = self.source.take() {
            let deadline = Instant::now() + Duration::from_secs(30);
            if let Err(e) = source.release(&prepared, deadline).await {
                shortfalls.add(Shortfall::Release(format!("releasing the workspace: {e}")));
            }
            self.folder
                .append_plugin_log(self.plugins.source.name(), &source.plugin_stdio());
        }
        if let Some(workspace) = self.workspace.as_ref().filter(|w| w.remove_at_cleanup) {
            if let Err(e) = std::fs::remove_dir_all(&workspace.root) {
                // gc never removes a workspace: this one is the user's to remove.
                shortfalls.cleanup(format!(
                    "removing the temporary workspace {}: {e}",
                    workspace.root.display()
                ));
            }
        }
        self.folder.prune_scratch(WORKSPACE_SCRATCH);
        for error in shortfalls.cleanup_messages() {
            self.events.host_log("error", format!("cleanup: {error}"));
        }
        self.end("cleanup", since, None);

        let left_something = shortfalls.left_something();
        let mut result = self.result(outcome, changes);
        shortfalls.settle(&mut result);
        // Free text and file names in the result may quote what an agent printed.
        result.mask(&self.redactor);
        if let Err(e) = self.folder.write_result(&result) {
            self.events
                .host_log("error", format!("writing result.json: {e}"));
        }
        let status = serde_json::to_value(result.status).expect("statuses serialize");
        let status = status.as_str().unwrap_or_default();
        let recorded = if left_something {
            self.tracker.cleanup_failed(status)
        } else {
            self.tracker.finished(status)
        };
        if let Err(e) = recorded {
            self.events
                .host_log("error", format!("sandbox registry: {e}"));
        }
        result
    }

    /// The provider's `destroy` failed, timed out or trapped (`error`): reaps the run's
    /// objects through a fresh instance of the provider plugin, and what capabilities
    /// keep of the run (its cgroups), the way `gc` does. The failed `destroy` is a
    /// shortfall whatever the reaping finds (a provider may copy the workspace back
    /// there); what is still there after it is a leftover that `gc` retries.
    async fn reap_after_failed_destroy(&mut self, error: String, shortfalls: &mut Shortfalls) {
        let provider = &self.spec.spec.execution.sandbox.provider;
        // First what capabilities still hold for this run (pods), without the plugin.
        let mut held = BTreeMap::<&str, Vec<String>>::new();
        let mut held_errors = Vec::new();
        for capability in Capability::all() {
            let Some(deletion) = capability.unit().delete_left(&self.ctx) else {
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
        let home = self
            .ctx
            .identity()
            .map_or_else(|_| String::new(), |i| i.home.clone());
        let mut reaped = crate::gc::reap_run(
            self.runtime,
            &mut Providers::new(home),
            &self.ctx.run_id,
            Some(provider),
            false,
        )
        .await;
        reaped.errors.splice(0..0, held_errors);
        for (kind, names) in held {
            reaped.reclaimed.entry(kind).or_default().extend(names);
        }
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
            if let Err(e) = self.tracker.sandbox_reaped() {
                self.events
                    .host_log("error", format!("sandbox registry: {e}"));
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
    async fn record_resource_usage(&mut self, outcome: Outcome) -> Outcome {
        let mut sampler = self.sampler.take();
        if let Some(sampler) = sampler.as_mut() {
            sampler.stop().await;
        }
        let (Some(broker), Some(info)) = (self.broker.as_ref(), self.sandbox.as_mut()) else {
            return outcome;
        };
        let usage = match broker.stats().await {
            Ok(usage) => usage,
            Err(e) => {
                self.events
                    .host_log("info", format!("no resource usage for the sandbox: {e}"));
                return outcome;
            }
        };
        if let Some(sampler) = sampler {
            sampler.finish(&usage, &self.events);
        }
        const MIB: f64 = 1024.0 * 1024.0;
        info.resource_usage = Some(ResourceUsage {
            cpu_percent: (usage.cpu_percent * 10.0).round() / 10.0,
            memory_mb: (usage.memory_bytes as f64 / MIB * 10.0).round() / 10.0,
            peak_memory_mb: (usage.peak_memory_bytes as f64 / MIB * 10.0).round() / 10.0,
            oom_killed: usage.oom_killed,
        });
        if !usage.oom_killed {
            return outcome;
        }
        let limit = self.spec.spec.execution.sandbox.resources.memory_bytes;
        let message = format!(
            "OOMKilled: the sandbox ran out of memory{} and the kernel killed the agent; \
             raise sandbox.resources.memory or make the task use less",
            limit.map_or(String::new(), |l| format!(" (limit {} MiB)", l >> 20))
        );
        self.events.host_log("error", message.clone());
        match outcome {
            Outcome::Agent(agent) if !agent.success => Outcome::Failed {
                status: RunStatus::Failed,
                message,
            },
            other => other,
        }
    }

    /// What the agent changed, read through the handle opened before it ran; what
    /// makes that record incomplete is a shortfall.
    fn collect_changes(&mut self, shortfalls: &mut Shortfalls) -> Changes {
        let mut changes = Changes::default();
        let Some(workspace) = self.workspace.as_ref() else {
            return changes;
        };
        let mut problems = Vec::new();
        if let Err(e) = workspace.check_root() {
            problems.push(e.to_string());
        }
        if let Some(git) = self.git.take() {
            changes.from = "git";
            match collect_git(git, workspace.dir.clone(), self.redactor.clone()) {
                Ok(found) => {
                    changes.files = found.files;
                    changes.ignored = found.ignored;
                    changes.patch = Some(PatchRecord {
                        max_file_bytes: PATCH_FILE_BYTES,
                        max_total_bytes: PATCH_TOTAL_BYTES,
                        omitted: found.omitted,
                    });
                    if let Err(e) = self.folder.write_patch(&found.patch) {
                        problems.push(format!("writing changes.patch: {e}"));
                    }
                }
                Err(e) => problems.push(format!("the workspace's changes could not be read: {e}")),
            }
        } else if let Some(before) = self.before.as_ref() {
            match Snapshot::take_after(&workspace.dir, before) {
                Ok(after) => changes.files = before.changes(&after),
                Err(e) => problems.push(format!("the workspace's changes could not be read: {e}")),
            }
        }
        for problem in problems {
            self.events.host_log("error", problem.clone());
            shortfalls.add(Shortfall::Changes(problem));
        }
        changes
    }

    fn result(&self, outcome: Outcome, changes: Changes) -> RunResult {
        let (status, exit_code, error, agent) = match outcome {
            Outcome::Agent(outcome) => {
                let status = if outcome.success {
                    RunStatus::Succeeded
                } else {
                    RunStatus::Failed
                };
                let error = (!outcome.success)
                    .then(|| format!("the agent failed (exit code {})", outcome.exit_code));
                let agent = AgentRecord {
                    driver: self.spec.spec.execution.agent.driver.clone(),
                    success: outcome.success,
                    session_id: outcome.session_id,
                    turns: outcome.turns,
                    usage: outcome.usage.map(|u| {
                        serde_json::json!({
                            "inputTokens": u.input_tokens,
                            "outputTokens": u.output_tokens,
                            "cacheReadTokens": u.cache_read_tokens,
                            "cacheWriteTokens": u.cache_write_tokens,
                            "costUsd": u.cost_usd,
                        })
                    }),
                    summary: outcome.summary,
                };
                (status, Some(outcome.exit_code), error, Some(agent))
            }
            Outcome::Failed { status, message } => (status, None, Some(message), None),
        };
        let plugin_record = |plugin: &LoadedPlugin| PluginRecord {
            name: plugin.name().to_string(),
            version: plugin.info().version.clone(),
            digest: plugin.digest().to_string(),
            origin: plugin.origin().to_string(),
        };
        RunResult {
            version: RESULT_VERSION,
            run_id: self.ctx.run_id.clone(),
            name: self.spec.metadata.name.clone(),
            status,
            exit_code,
            error,
            started_at: humantime::format_rfc3339_millis(self.started).to_string(),
            finished_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            duration_ms: self.clock.elapsed().as_millis() as u64,
            phases: self.phases.clone(),
            plugins: BTreeMap::from([
                ("workspace".to_string(), plugin_record(self.plugins.source)),
                ("sandbox".to_string(), plugin_record(self.plugins.provider)),
                ("agent".to_string(), plugin_record(self.plugins.driver)),
            ]),
            workspace: self
                .workspace
                .as_ref()
                .map(|w| workspace_record(self.spec, w)),
            sandbox: self.sandbox.clone(),
            agent,
            modified_files: changes.files,
            ignored_files: changes.ignored,
            changes_from: changes.from.to_string(),
            patch: changes.patch,
            logs: self.log_sizes.clone(),
            egress: self.egress_report.clone(),
            left_out: Vec::new(),
        }
    }
}

/// How `result.json` describes the run's workspace.
fn workspace_record(spec: &TaskSpec, workspace: &Workspace) -> WorkspaceRecord {
    WorkspaceRecord {
        source: spec.spec.execution.workspace.source.clone(),
        root: workspace.root.display().to_string(),
        readonly: workspace.readonly,
        description: workspace.description.clone(),
        commit: workspace.commit.clone(),
    }
}

/// What the run changed in its workspace, and how that was found.
struct Changes {
    files: Vec<FileChange>,
    ignored: Vec<FileChange>,
    from: &'static str,
    patch: Option<PatchRecord>,
}

/// Collects a git workspace's changes on a thread of their own, waited for a bounded
/// time: the collection bounds its own reading of the workspace, and this bounds what
/// it cannot (libgit2 opening an object file the agent swapped for a FIFO).
fn collect_git(
    git: GitBaseline,
    root: Arc<cap_std::fs::Dir>,
    redactor: Arc<Redactor>,
) -> Result<GitChanges, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("collect-changes".into())
        .spawn(move || {
            let _ = sender.send(git.changes(&root, &redactor).map_err(|e| e.to_string()));
        })
        .map_err(|e| format!("starting the collection: {e}"))?;
    let limit = Duration::from_secs(COLLECT_SECS + 30);
    receiver.recv_timeout(limit).unwrap_or_else(|_| {
        Err(format!(
            "the collection did not end within {} s",
            limit.as_secs()
        ))
    })
}

impl Default for Changes {
    fn default() -> Changes {
        Changes {
            files: Vec::new(),
            ignored: Vec::new(),
            from: "snapshot",
            patch: None,
        }
    }
}

/// Cleans up after this home's runs whose `agentgate` died, before starting another.
/// A failure is reported, not fatal: the orphans stay recorded for the next gc.
async fn reap_orphans(runtime: &Runtime, home: &std::path::Path, events: &EventSink) {
    let options = GcOptions {
        dry_run: false,
        older_than: Duration::ZERO,
        scope: Scope::Registry,
    };
    match crate::gc::collect(runtime, home, &options).await {
        Ok(report) => {
            for orphan in &report.orphans {
                events.host_log(
                    "info",
                    format!(
                        "gc: cleaned up after crashed run {}{}",
                        orphan.run_id,
                        orphan
                            .workspace
                            .as_ref()
                            .map_or(String::new(), |w| format!("; kept its workspace {w}"))
                    ),
                );
            }
            for run in report.cleanup_failed.iter().filter(|run| run.complete) {
                events.host_log(
                    "info",
                    format!("gc: removed what the cleanup of run {} left", run.run_id),
                );
            }
            for error in report.errors {
                events.host_log("error", format!("gc: {error}"));
            }
        }
        Err(e) => events.host_log("error", format!("gc: {e}")),
    }
}

/// The normalized TaskSpec (as `agentgate validate --json` prints it) with the goal
/// the run was given: `--prompt` replaces `goal.prompt`.
fn recorded_taskspec(spec: &TaskSpec, prompt: Option<&str>) -> serde_json::Value {
    let mut value = serde_json::to_value(spec).expect("TaskSpecs serialize");
    if let Some(prompt) = prompt {
        value["spec"]["goal"]["prompt"] = prompt.into();
    }
    value
}

/// Every host path of the TaskSpec (workspace, `sandbox.mounts` sources) must exist and
/// be allowed before anything starts: a typo found after the workspace was cloned wastes
/// the run, a sandbox must never create host paths, and a refused folder (`/`) must not
/// be walked.
fn check_host_paths(paths: &HostPaths, spec: &TaskSpec) -> Result<(), RunError> {
    let problems = paths.check_spec(spec);
    if problems.is_empty() {
        return Ok(());
    }
    Err(RunError::Invalid(
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    ))
}
