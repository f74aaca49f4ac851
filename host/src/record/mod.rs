//! The run record: what a run writes into its folder and shows on the terminal.
//!
//! The engine, the CLI and the capabilities all report into it, so it belongs to none
//! of them. Nothing enters the record unmasked: [`Redactor`] masks the run's secrets
//! in events ([`EventSink`]), in the agent's output logs ([`OutputLogs`]), in
//! `plugins.log`, in `result.json` and in what the CLI prints.

mod events;
mod logs;
mod redact;

pub use events::{EventBody, EventSink, Observer, PhaseStatus, RunEvent};
pub use logs::{append_plugin_log, LogSize, OutputLogs, MAX_LOG_BYTES};
pub use redact::{is_secret_name, MaskStream, Redactor};
