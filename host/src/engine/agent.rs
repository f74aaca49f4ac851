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
use crate::runtime::instance::DriverInstance;
use crate::runtime::PluginError;
use crate::taskspec;
use crate::wit::agent_driver::exports::agentgate::plugin::driver::{AgentOutcome, AgentTask};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::phase::fakes::TestRun;

    /// A driver that answers with `answer`, or never when it is `None`.
    struct FakeDriver(Option<Result<AgentOutcome, PluginError>>);

    impl Driver for FakeDriver {
        fn run<'a>(
            &'a mut self,
            task: &'a AgentTask,
            _deadline: Instant,
        ) -> BoxFuture<'a, Result<AgentOutcome, PluginError>> {
            assert_eq!(task.prompt, "do it");
            let answer = self.0.take();
            Box::pin(async move {
                match answer {
                    Some(answer) => answer,
                    None => std::future::pending().await,
                }
            })
        }

        fn plugin_stdio(&self) -> Vec<u8> {
            b"fake driver says hi\n".to_vec()
        }
    }

    const EXECUTION: &str = "  workspace:\n    source: local\n    path: /path/to/project\n  \
                             agent:\n    driver: fake";

    fn outcome(success: bool) -> AgentOutcome {
        AgentOutcome {
            exit_code: i32::from(!success),
            success,
            session_id: Some("s-1".into()),
            turns: Some(3),
            usage: None,
            summary: Some("done".into()),
        }
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn the_drivers_outcome_is_the_phases_and_its_output_is_kept() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let mut driver = FakeDriver(Some(Ok(outcome(true))));
        let ended = run(&mut driver, "fake", &env, "do it", &[], soon()).await;
        assert!(matches!(ended, Outcome::Agent(ref a) if a.success && a.turns == Some(3)));
        let log = std::fs::read_to_string(env.folder.path().join("plugins.log")).unwrap();
        assert!(log.contains("fake driver says hi"), "{log}");
    }

    #[tokio::test]
    async fn a_driver_past_its_deadline_times_the_run_out() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let late = PluginError::Deadline {
            plugin: "fake".into(),
            call: "run",
            limit: Duration::from_secs(1),
        };
        let mut driver = FakeDriver(Some(Err(late)));
        let Outcome::Failed { status, message } =
            run(&mut driver, "fake", &env, "do it", &[], soon()).await
        else {
            panic!("no failure");
        };
        assert_eq!(status, RunStatus::TimedOut);
        assert!(
            message.starts_with("plugin fake did not finish run within 1s"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn phases_that_outlive_the_timeout_or_a_cancel_end_there() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        // The deadline is the time limit from the run's start; a little of it is left.
        let timeout = Duration::from_secs(120);
        let mut never: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(std::future::pending());
        let mut driver = FakeDriver(None);
        let phases = run(&mut driver, "fake", &env, "do it", &[], soon());
        let Outcome::Failed { status, message } = bounded(
            phases,
            timeout,
            Instant::now() + Duration::from_millis(50),
            &mut never,
        )
        .await
        else {
            panic!("no failure");
        };
        assert_eq!(status, RunStatus::TimedOut);
        assert_eq!(
            message,
            "the run exceeded its timeout of 2m; everything it started was killed"
        );

        let mut cancel: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async {});
        let mut driver = FakeDriver(None);
        let phases = run(&mut driver, "fake", &env, "do it", &[], soon());
        let Outcome::Failed { status, message } =
            bounded(phases, timeout, soon(), &mut cancel).await
        else {
            panic!("no failure");
        };
        assert_eq!(status, RunStatus::Cancelled);
        assert_eq!(message, "the run was cancelled");
    }

    #[test]
    fn the_time_limit_is_the_shorter_of_timeout_and_max_wall_clock() {
        let spec = TestRun::new(EXECUTION).spec;
        let timeout = spec.spec.execution.sandbox.resources.timeout;
        assert_eq!(time_limit(&spec), timeout);
    }
}
