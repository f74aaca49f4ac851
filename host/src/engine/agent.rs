//! The agent phase, and the bounds every phase runs under.
//!
//! The driver plugin runs the agent in the sandbox under the run's deadline; what it
//! printed goes to `plugins.log` whatever the result. [`bounded`] runs the phases
//! until the deadline or a cancel: whatever they made is already in the run's slots
//! by then, so dropping them there leaves nothing untorn down.
//!
//! The plugin call the phase makes is behind [`Driver`], so the phase can be tested
//! with a fake driver.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::phase::{Outcome, RunEnv};
use super::requests;
use crate::record::RunStatus;
use crate::runtime::bindings::agent_driver::exports::agentgate::plugin::driver::{
    AgentOutcome, AgentTask,
};
use crate::runtime::instance::DriverInstance;
use crate::runtime::PluginError;
use crate::taskspec;

/// What the engine asks of an agent driver plugin.
pub(super) trait Driver: Send {
    fn run<'a>(
        &'a mut self,
        task: &'a AgentTask,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<AgentOutcome, PluginError>>;
    /// What the plugin printed on its own stdout/stderr, for `plugins.log`.
    fn plugin_stdio(&self) -> Vec<u8>;
}

impl Driver for DriverInstance {
    fn run<'a>(
        &'a mut self,
        task: &'a AgentTask,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<AgentOutcome, PluginError>> {
        Box::pin(DriverInstance::run(self, task, deadline))
    }

    fn plugin_stdio(&self) -> Vec<u8> {
        DriverInstance::plugin_stdio(self)
    }
}

/// Runs the agent through `driver` by `deadline`.
pub(super) async fn run(
    driver: &mut dyn Driver,
    driver_plugin: &str,
    env: &RunEnv<'_>,
    prompt: &str,
    secrets: &[(String, String)],
    deadline: Instant,
) -> Outcome {
    let task = requests::agent_task(
        env.spec,
        &env.ctx.run_id,
        prompt,
        secrets,
        deadline.saturating_duration_since(Instant::now()),
    );
    let result = driver.run(&task, deadline).await;
    env.folder
        .append_plugin_log(driver_plugin, &driver.plugin_stdio());
    match result {
        Ok(outcome) => Outcome::Agent(outcome),
        Err(e) => Outcome::plugin(e),
    }
}

/// The run's time limit: the TaskSpec's `convergence.limits.maxWallClock` when it is
/// shorter than the sandbox's `timeout`.
pub(super) fn time_limit(spec: &taskspec::TaskSpec) -> Duration {
    let limits = spec.spec.convergence.as_ref().map(|c| &c.limits);
    let timeout = spec.spec.execution.sandbox.resources.timeout;
    limits
        .and_then(|l| l.max_wall_clock)
        .map_or(timeout, |wall| wall.min(timeout))
}

/// Runs `phases` until they end, `timeout` passes or `cancel` resolves.
pub(super) async fn bounded(
    phases: impl Future<Output = Outcome>,
    timeout: Duration,
    deadline: Instant,
    cancel: &mut Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Outcome {
    tokio::select! {
        outcome = tokio::time::timeout_at(deadline, phases) => {
            outcome.unwrap_or_else(|_| Outcome::Failed {
                status: RunStatus::TimedOut,
                message: format!(
                    "the run exceeded its timeout of {}; everything it started was killed",
                    taskspec::format_duration(timeout)
                ),
            })
        }
        _ = cancel => Outcome::Failed {
            status: RunStatus::Cancelled,
            message: "the run was cancelled".into(),
        },
    }
}
