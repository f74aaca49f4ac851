//! The integration tests, as one binary with a module per area (as wasmtime's
//! `tests/all`): `support` compiles once, and the tests link once instead of once per
//! area. Tests run the freshly built `agentgate` (`CARGO_BIN_EXE_agentgate`) or the
//! library in-process; every test that changes something process-wide would now
//! change it for all of them, so none does: each passes its home, environment and
//! folders to what it runs.

mod agent_sdk;
mod agents_cli;
mod bare_toolchain;
mod changes;
mod cli;
mod containment;
mod docker;
mod docs;
mod doctor;
mod egress;
mod egress_bypass;
mod egress_proxy;
mod git_workspaces;
mod github_workspaces;
mod host_paths;
mod host_state;
mod hostile_plugins;
mod input_limits;
mod kubernetes;
mod layers;
mod marketplace;
mod polyglot;
mod registry;
mod run_status;
mod runtime;
mod secrets;
mod wit_lines;

mod support;
