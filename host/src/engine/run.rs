//! One run, phase by phase: what starts it, the order of its phases, and its cleanup.
//!
//! Each phase is a module that owns what it makes ([`super::workspace`],
//! [`super::sandbox`], [`super::agent`]); this module keeps each phase's value from
//! the moment it exists until the cleanup hands it to its teardown, later phases first,
//! and writes what they left into `result.json` ([`super::result`]).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::changes::Changes;
use super::error::{HostFailure, NotStarted, RunError, StartError};
use super::phase::{Outcome, RunEnv, Timeline};
use super::plugins::Plugins;
use super::result::{self, Facts};
use super::sandbox::{GcReaper, Sandbox, SandboxRecord};
use super::shortfall::{Shortfall, Shortfalls};
use super::workspace::{self, Prepared};
use super::{agent, sandbox};
use crate::capabilities::labels::RunIdentity;
use crate::egress::GateGrants;
use crate::gc::{GcOptions, Scope};
use crate::host_paths::HostPaths;
use crate::record::{EventSink, Observer, Redactor, RunFolder, RunResult, WORKSPACE_SCRATCH};
use crate::registry::Tracker;
use crate::runtime::Runtime;
use crate::taskspec::{self, TaskSpec};

/// Everything a run needs besides the runtime.
pub struct RunRequest {
    /// The task, validated. One that asks for what this version does not do yet
    /// ([`taskspec::check_supported`]) is refused before anything starts.
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
    /// A request for `spec` under `home`, with no secrets, observer or cancellation,
    /// started now.
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

/// How a run that started ended.
pub struct RunReport {
    /// What happened, as written to `result.json`.
    pub result: RunResult,
    /// The run's folder under `home/runs/`.
    pub folder: PathBuf,
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
            NotStarted::Invalid(message) => RunError::Invalid(redactor.apply(message)),
            NotStarted::Host(cause) => {
                RunError::Host(HostFailure::masked(cause, |text| redactor.apply(text)))
            }
        })
}

async fn start(
    runtime: &Runtime,
    request: &mut RunRequest,
    redactor: Arc<Redactor>,
) -> Result<RunReport, NotStarted> {
    // What the TaskSpec asks for and this version does not do (gates, delivery, …) is
    // refused, never run without it.
    taskspec::check_supported(&request.spec)
        .map_err(|unsupported| NotStarted::Invalid(unsupported.to_string()))?;
    let prompt = request
        .prompt
        .clone()
        .or_else(|| request.spec.spec.goal.as_ref().map(|g| g.prompt.clone()))
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            NotStarted::Invalid(
                "spec.goal.prompt: missing; add goal.prompt to the TaskSpec or pass --prompt"
                    .into(),
            )
        })?;
    let plugins = super::plugins::resolve(runtime, &request.spec)
        .map_err(|problems| NotStarted::Invalid(lines(&problems)))?;

    // Every host path the TaskSpec names, before anything starts (nothing walks `/`).
    let host_paths = Arc::new(HostPaths::of_this_host(
        runtime.path_grants(),
        &request.home,
        crate::capabilities::guarded_paths(),
    ));
    check_host_paths(&host_paths, &request.spec)?;
    // An allowlist that asks for more than the operator's cap is refused before
    // anything is made for the run.
    if let Some(egress) = &request.spec.spec.execution.sandbox.egress {
        crate::egress::check_cap(&egress.allow, &runtime.egress_grants().cap)
            .map_err(|refusal| NotStarted::Invalid(refusal.to_string()))?;
    }

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
        .map_err(StartError::from)?;
        let opened = RunFolder::create(&request.home, &run_id, redactor.clone())
            .map_err(|source| StartError::Folder {
                home: request.home.clone(),
                source,
            })
            .and_then(|folder| {
                let events = EventSink::new(
                    &run_id,
                    &folder.events(),
                    request.observer.take(),
                    redactor.clone(),
                )
                .map_err(|source| StartError::Events {
                    path: folder.events(),
                    source,
                })?;
                Ok((folder, Arc::new(events)))
            });
        let (folder, events) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // Nothing was started: the row must not wait for gc as an orphan.
                let _ = tracker.finished("error");
                return Err(e);
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
        Ok::<_, StartError>((run_id, tracker, folder, events))
    };
    let ((), set_up) = tokio::join!(preload, set_up);
    let (run_id, tracker, folder, events) = set_up?;
    let mut run = Run {
        runtime,
        plugins,
        env: RunEnv {
            spec: &request.spec,
            ctx: runtime.run_context(
                RunIdentity::new(run_id, tracker.owner().to_string(), &request.home),
                events.clone(),
            ),
            events: events.clone(),
            redactor,
            folder,
            tracker,
            host_paths,
        },
        timeline: Timeline::new(events),
        started: SystemTime::now() - request.started.elapsed(),
        clock: request.started,
        workspace: None,
        sandbox: None,
    };

    let timeout = agent::time_limit(&request.spec);
    // `parse` bounds every timeout; the clamp keeps a TaskSpec built in code from overflowing.
    let deadline = Instant::now() + timeout.min(taskspec::MAX_DURATION);
    let phases = run.phases(&prompt, &request.secrets, deadline);
    let outcome = agent::bounded(phases, timeout, deadline, &mut request.cancel).await;
    let result = run.finish(outcome).await;
    Ok(RunReport {
        folder: run.env.folder.path().to_path_buf(),
        result,
    })
}

/// A run once it is recorded, with each phase's value from the moment it exists until
/// cleanup.
struct Run<'a> {
    runtime: &'a Runtime,
    plugins: Plugins<'a>,
    env: RunEnv<'a>,
    timeline: Timeline,
    started: SystemTime,
    clock: Instant,
    workspace: Option<Prepared>,
    sandbox: Option<Sandbox>,
}

impl Run<'_> {
    /// Plugins, workspace, sandbox, agent. Dropped at the deadline or on cancel;
    /// whatever it made is in `self` by then for `finish` to tear down.
    async fn phases(
        &mut self,
        prompt: &str,
        secrets: &[(String, String)],
        deadline: Instant,
    ) -> Outcome {
        // The `plugins` phase counts from the run's start: finding the plugins and
        // resolving the TaskSpec came before the events could be recorded.
        self.timeline.begin("plugins");
        let result = self.load_plugins().await;
        self.timeline
            .end("plugins", self.clock, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.timeline.begin("workspace");
        let result = self.prepare_workspace(deadline).await;
        self.timeline.end("workspace", since, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.timeline.begin("sandbox");
        let result = self.create_sandbox(deadline).await;
        self.timeline.end("sandbox", since, result.as_ref().err());
        if let Err(failure) = result {
            return failure;
        }

        let since = self.timeline.begin("agent");
        let outcome = self.run_agent(prompt, secrets, deadline).await;
        let failure = matches!(outcome, Outcome::Failed { .. }).then_some(&outcome);
        self.timeline.end("agent", since, failure);
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
        let source = self
            .runtime
            .workspace_source(self.plugins.source, self.env.ctx.clone())
            .await
            .map_err(Outcome::plugin)?;
        self.workspace = Some(workspace::prepare(Box::new(source), &self.env, deadline).await?);
        Ok(())
    }

    async fn create_sandbox(&mut self, deadline: Instant) -> Result<(), Outcome> {
        let prepared = self
            .workspace
            .as_ref()
            .expect("prepared before the sandbox");
        let provider = self
            .runtime
            .sandbox_provider(self.plugins.provider, self.env.ctx.clone())
            .await
            .map_err(Outcome::plugin)?;
        let grants = self.runtime.egress_grants();
        let grants = GateGrants {
            cap: grants.cap.clone(),
            nameserver: grants.nameserver,
        };
        sandbox::create(
            &mut self.sandbox,
            Box::new(provider),
            self.plugins.provider.name(),
            &prepared.workspace,
            &self.env,
            grants,
            deadline,
        )
        .await
    }

    async fn run_agent(
        &mut self,
        prompt: &str,
        secrets: &[(String, String)],
        deadline: Instant,
    ) -> Outcome {
        let mut driver = match self
            .runtime
            .agent_driver(self.plugins.driver, self.env.ctx.clone())
            .await
        {
            Ok(driver) => driver,
            Err(e) => return Outcome::plugin(e),
        };
        let name = self.plugins.driver.name();
        agent::run(&mut driver, name, &self.env, prompt, secrets, deadline).await
    }

    /// Tears every phase down, later phases first, collects changes and writes
    /// `result.json`. Every promise of the run it finds broken is a [`Shortfall`];
    /// [`Shortfalls::settle`] decides what they do to the status.
    async fn finish(&mut self, outcome: Outcome) -> RunResult {
        let since = self.timeline.begin("cleanup");
        let mut shortfalls = Shortfalls::default();
        let env = &self.env;
        let (outcome, sandbox) = match self.sandbox.take() {
            Some(sandbox) => {
                let provider = self.plugins.provider.name();
                let reaper = GcReaper(self.runtime);
                sandbox
                    .teardown(outcome, env, provider, &reaper, &mut shortfalls)
                    .await
            }
            None => (outcome, SandboxRecord::default()),
        };
        // A run whose changes are unknown, or were made to a root it then moved away,
        // or whose files a copy back left out, has an incomplete record.
        let (changes, compared) = match self.workspace.take() {
            Some(prepared) => {
                let (changes, compared) = prepared.compare(env, &mut shortfalls);
                (changes, Some(compared))
            }
            None => (Changes::default(), None),
        };
        shortfalls.add(Shortfall::LeftOut(env.ctx.left_out()));
        let source = &env.spec.spec.execution.workspace.source;
        let workspace = compared
            .as_ref()
            .map(|compared| compared.workspace.record(source.clone()));
        if let Some(compared) = compared {
            let plugin = self.plugins.source.name();
            compared.release(env, plugin, &mut shortfalls).await;
        }
        env.folder.prune_scratch(WORKSPACE_SCRATCH);
        for error in shortfalls.cleanup_messages() {
            env.events.host_log("error", format!("cleanup: {error}"));
        }
        self.timeline.end("cleanup", since, None);

        let left_something = shortfalls.left_something();
        let facts = Facts {
            spec: env.spec,
            run_id: env.ctx.run_id.clone(),
            started: self.started,
            clock: self.clock,
            phases: self.timeline.phases().clone(),
            plugins: [
                ("workspace", self.plugins.source),
                ("sandbox", self.plugins.provider),
                ("agent", self.plugins.driver),
            ]
            .into_iter()
            .map(|(role, plugin)| (role.to_string(), result::plugin_record(plugin)))
            .collect(),
            workspace,
            sandbox,
            changes,
        };
        let result = result::settle_and_write(outcome, facts, shortfalls, env);
        let status = serde_json::to_value(result.status).expect("statuses serialize");
        let status = status.as_str().unwrap_or_default();
        let recorded = if left_something {
            env.tracker.cleanup_failed(status)
        } else {
            env.tracker.finished(status)
        };
        if let Err(e) = recorded {
            env.registry_error(e);
        }
        result
    }
}

/// Problems, one a line.
fn lines(problems: &[impl ToString]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
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
fn check_host_paths(paths: &HostPaths, spec: &TaskSpec) -> Result<(), NotStarted> {
    let problems = paths.check_spec(spec);
    if problems.is_empty() {
        return Ok(());
    }
    Err(NotStarted::Invalid(lines(&problems)))
}
