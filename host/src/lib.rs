//! agentgate: an execution host that runs AI coding agents on tasks, safely.
//!
//! A task is a TaskSpec ([`taskspec`]). The host prepares a workspace, creates a
//! sandbox, runs an agent driver in it and collects what happened ([`engine`]),
//! including what the agent changed ([`changeset`]). Every workspace source, sandbox
//! provider and agent driver is a WebAssembly component ([`runtime`]) that reaches the
//! machine only through the host interfaces it was granted ([`capabilities`]); third-party
//! plugins arrive signed and locked from OCI registries ([`marketplace`]). What a run
//! writes and shows (events, logs, the result), with its secrets masked, is the run
//! record ([`record`]).

mod beneath;
pub mod capabilities;
pub mod changeset;
pub mod cli;
pub mod egress;
pub mod engine;
mod env_name;
pub mod escape;
pub mod gc;
pub mod history;
pub mod home_path;
pub mod host_paths;
pub mod marketplace;
pub mod procfs;
pub mod record;
pub mod registry;
pub mod report;
pub mod runtime;
pub mod taskspec;
pub mod wit;
