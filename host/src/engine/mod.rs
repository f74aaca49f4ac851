//! The run lifecycle: TaskSpec in, result folder out.
//!
//! [`run`] resolves the three plugins a TaskSpec names, then prepares the workspace,
//! creates the sandbox, runs the agent under the run's deadline, collects what changed
//! ([`crate::changeset`]) and cleans up. Cleanup runs on success, failure, timeout and
//! cancellation. Nothing falls back to weaker isolation: a sandbox that cannot be
//! created fails the run. What the TaskSpec asks of each plugin is translated in
//! `requests`; what the run writes is the run record ([`crate::record`]).

mod plugins;
mod requests;
mod run;
mod sampler;
mod shortfall;
mod workspace;

pub use plugins::{resolve as resolve_plugins, PluginProblem, Plugins};
pub use run::{run, RunError, RunReport, RunRequest};
