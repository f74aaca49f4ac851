//! What every phase of a run shares: how a phase ends ([`Outcome`]), the timeline that
//! turns phases into events and `phases` timings, and the run's surroundings
//! ([`RunEnv`]) each phase reads and records into.
//!
//! Kept apart from the phases so that each phase module depends on these and nothing
//! of the others, and a unit test can build a `RunEnv` from temporary folders.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::capabilities::RunContext;
use crate::host_paths::HostPaths;
use crate::record::{EventSink, PhaseStatus, Redactor, RunFolder, RunStatus};
use crate::registry::Tracker;
use crate::runtime::PluginError;
use crate::taskspec::TaskSpec;
use crate::wit::agent_driver::exports::agentgate::plugin::driver::AgentOutcome;

/// How the phases ended.
pub(super) enum Outcome {
    Agent(AgentOutcome),
    Failed { status: RunStatus, message: String },
}

impl Outcome {
    pub fn plugin(error: PluginError) -> Outcome {
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

    pub fn host(message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            status: RunStatus::Error,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            status: RunStatus::Invalid,
            message: message.into(),
        }
    }
}

/// The run's phases as events (`started`, then `finished` or `failed`) and as the
/// milliseconds each took, for `phases` in `result.json`.
pub(super) struct Timeline {
    events: Arc<EventSink>,
    phases: BTreeMap<String, u64>,
}

impl Timeline {
    pub fn new(events: Arc<EventSink>) -> Timeline {
        Timeline {
            events,
            phases: BTreeMap::new(),
        }
    }

    pub fn begin(&self, phase: &str) -> Instant {
        self.events.phase(phase, PhaseStatus::Started, None);
        Instant::now()
    }

    pub fn end(&mut self, phase: &str, since: Instant, failure: Option<&Outcome>) {
        self.phases
            .insert(phase.to_string(), since.elapsed().as_millis() as u64);
        let (status, message) = match failure {
            Some(Outcome::Failed { message, .. }) => (PhaseStatus::Failed, Some(message.clone())),
            _ => (PhaseStatus::Finished, None),
        };
        self.events.phase(phase, status, message);
    }

    pub fn phases(&self) -> &BTreeMap<String, u64> {
        &self.phases
    }
}

/// What every phase of one run reads and records into.
pub(super) struct RunEnv<'a> {
    pub spec: &'a TaskSpec,
    pub ctx: Arc<RunContext>,
    pub events: Arc<EventSink>,
    pub redactor: Arc<Redactor>,
    pub folder: RunFolder,
    pub tracker: Tracker,
    /// Which host folders the TaskSpec and the sandbox may reach.
    pub host_paths: Arc<HostPaths>,
}

impl RunEnv<'_> {
    /// Logs a failure to update the run's registry row: the run goes on.
    pub fn registry_error(&self, error: impl std::fmt::Display) {
        self.events
            .host_log("error", format!("sandbox registry: {error}"));
    }
}

#[cfg(test)]
pub(super) mod fakes {
    //! A `RunEnv` in temporary folders, for the phases' unit tests.

    use super::*;
    use crate::capabilities::RunIdentity;
    use crate::host_paths::PathGrants;

    pub struct TestRun {
        pub home: tempfile::TempDir,
        pub spec: TaskSpec,
    }

    impl TestRun {
        /// A run of a TaskSpec whose `execution` is `execution` (YAML).
        pub fn new(execution: &str) -> TestRun {
            let text = format!("execution:\n{execution}\n");
            let spec = crate::taskspec::parse(&text, "test.yaml", &|name: &str| match name {
                "HOME" => Some("/home/me".to_string()),
                _ => None,
            })
            .unwrap_or_else(|e| panic!("{e}"));
            TestRun {
                home: tempfile::tempdir().unwrap(),
                spec,
            }
        }

        pub fn env(&self) -> RunEnv<'_> {
            let run_id = "0123456789abcdef";
            let redactor = Arc::new(Redactor::new(["s3cret".to_string()]));
            let folder = RunFolder::create(self.home.path(), run_id, redactor.clone()).unwrap();
            let events =
                Arc::new(EventSink::new(run_id, &folder.events(), None, redactor.clone()).unwrap());
            let tracker = Tracker::start(self.home.path(), run_id, "test", folder.path()).unwrap();
            let identity = RunIdentity::new(
                run_id.to_string(),
                tracker.owner().to_string(),
                self.home.path(),
            );
            RunEnv {
                spec: &self.spec,
                ctx: RunContext::new(identity, events.clone(), Default::default()),
                events,
                redactor,
                folder,
                tracker,
                host_paths: Arc::new(HostPaths::of_this_host(
                    &PathGrants::default(),
                    self.home.path(),
                    Vec::new(),
                )),
            }
        }

        /// The events recorded so far, one JSON value each.
        pub fn events(&self, env: &RunEnv) -> Vec<serde_json::Value> {
            std::fs::read_to_string(env.folder.events())
                .unwrap()
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        }
    }
}
