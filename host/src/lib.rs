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

#![warn(missing_docs)]

mod beneath;
pub mod capabilities;
pub mod changeset;
pub mod cli;
pub mod egress;
pub mod engine;
mod env_name;
mod escape;
mod gc;
mod history;
mod home_path;
mod host_paths;
pub mod marketplace;
pub mod procfs;
pub mod record;
mod registry;
mod report;
pub mod runtime;
pub mod taskspec;
pub mod wit;
