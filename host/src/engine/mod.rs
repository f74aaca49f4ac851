//! The run lifecycle: TaskSpec in, result folder out.
//!
//! [`run`] resolves the three plugins a TaskSpec names, then prepares the workspace,
//! creates the sandbox, runs the agent under the run's deadline, collects what changed
//! ([`crate::changeset`]) and cleans up. Cleanup runs on success, failure, timeout and
//! cancellation. Nothing falls back to weaker isolation: a sandbox that cannot be
//! created fails the run. What the TaskSpec asks of each plugin is translated in
//! `requests`; what the run writes is the run record ([`crate::record`]).
//!
//! Each phase owns what it makes and undoes it in its `teardown` (modules `workspace`,
//! `sandbox`, `agent`); `run` orders the phases and their teardowns, `result` writes
//! `result.json`. The plugin calls each phase makes are behind small traits the
//! runtime's instances implement, so each phase is unit-tested with fakes.

mod agent;
mod changes;
mod error;
mod phase;
mod plugins;
mod requests;
mod result;
mod run;
mod sampler;
mod sandbox;
mod shortfall;
mod workspace;

pub use error::{HostFailure, RunError, StartError};
pub use plugins::{resolve as resolve_plugins, PluginProblem, Plugins};
pub use run::{run, RunReport, RunRequest};
