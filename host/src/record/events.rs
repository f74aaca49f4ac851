//! The run's event stream.
//!
//! Plugins (through the `events` capability) and the host itself report into one
//! [`EventSink`] per run. Each event is masked, then appended to `events.ndjson` as it
//! happens (so a crash keeps what came before it) and handed to an observer (the CLI's
//! live display or `--json` output). Strings are truncated after masking, so a cut
//! never leaves the start of a secret behind; each source has an event budget, so a
//! flood slows only its sender.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::redact::Redactor;

/// Longest string kept in one event field.
const MAX_FIELD_BYTES: usize = 16 * 1024;
/// Events one source may report in one run.
const MAX_EVENTS_PER_SOURCE: u64 = 200_000;
/// Bytes of events (as written to `events.ndjson`) one source may report in one run:
/// without it, a flood of maximal fields fills 200 000 × 16 KiB = 3.2 GB of disk.
const MAX_EVENT_BYTES_PER_SOURCE: u64 = 64 << 20;

/// One line of `events.ndjson`: when, from whom, and what happened (`type` and its fields).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    /// RFC 3339 time with milliseconds.
    pub ts: String,
    /// The run it belongs to.
    pub run_id: String,
    /// `host` or the plugin's name.
    pub source: String,
    /// What happened; its `type` and fields sit beside `ts`, `runId` and `source`.
    #[serde(flatten)]
    pub body: EventBody,
}

/// What an event says, tagged by `type` (`phase`, `progress`, `log`, …).
#[derive(Debug, Clone, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum EventBody {
    /// A lifecycle phase of the run started or ended.
    Phase {
        /// `plugins`, `workspace`, `sandbox`, `agent` or `cleanup`.
        phase: String,
        /// Whether the phase started, finished or failed.
        status: PhaseStatus,
        /// Why the phase failed; absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A plugin's report of how far a step has got.
    Progress {
        /// A short machine-readable step, e.g. `clone`, `pull`, `agent`.
        phase: String,
        /// What is happening, for people.
        message: String,
        /// Units done so far, when the plugin counts them.
        #[serde(skip_serializing_if = "Option::is_none")]
        current: Option<u64>,
        /// Units in all, when the plugin knows.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<u64>,
    },
    /// A log line from a plugin or the host.
    Log {
        /// `trace`, `debug`, `info`, `warn` or `error`.
        level: &'static str,
        /// What is logged.
        message: String,
    },
    /// Text the agent said.
    AgentMessage {
        /// The text, masked and cut to 16 KiB like every string of an event.
        text: String,
    },
    /// The agent called a tool.
    ToolCall {
        /// The agent's id for the call, which its `toolResult` repeats.
        id: String,
        /// The tool's name, as the agent names it.
        name: String,
        /// The tool's input as JSON text.
        input: String,
    },
    /// What a tool call returned.
    ToolResult {
        /// The id of the `toolCall` it answers.
        id: String,
        /// What the tool returned, as text.
        output: String,
        /// Whether the tool reported failure.
        is_error: bool,
    },
    /// Token use and cost as the agent driver reports them: some drivers per turn, some once
    /// for the whole session.
    Usage {
        /// Tokens the model read.
        input_tokens: u64,
        /// Tokens the model wrote.
        output_tokens: u64,
        /// Tokens read from the model's prompt cache.
        cache_read_tokens: u64,
        /// Tokens written to the model's prompt cache.
        cache_write_tokens: u64,
        /// In US dollars; absent when the agent reports no cost (Codex).
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A line of raw output from the agent process.
    Output {
        /// `stdout` or `stderr`.
        pipe: &'static str,
        /// The line as the driver read it.
        line: String,
    },
    /// A plugin's call outside the scope the operator granted it (see
    /// `runtime::scopes`): refused with `denied`, nothing done.
    Denied {
        /// The capability, e.g. `docker`.
        capability: &'static str,
        /// The call, e.g. `docker.run-container`.
        call: &'static str,
        /// The argument outside the scope.
        argument: String,
        /// The grants.yaml line that would allow the call; empty when no grant can
        /// (a path out of the workspace).
        allow: String,
        /// The refusal as the plugin and the operator read it: the call, the plugin and why.
        message: String,
    },
    /// The sandbox's resource use, sampled through the run (see
    /// `engine::sampler`).
    Resources {
        /// CPU use since the previous sample; 100 is one core busy all the time.
        cpu_percent: f64,
        /// Memory in use, in MiB (to a tenth).
        #[serde(rename = "memoryMB")]
        memory_mb: f64,
        /// Processes in the sandbox, as its provider counts them.
        pids: u32,
    },
    /// A decision of the egress proxy (see `egress`): a connection let through to
    /// `host:port`, or refused and why.
    Egress {
        /// The host asked for; empty when the request named none.
        host: String,
        /// The port asked for; absent when the request named none.
        #[serde(skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        /// The address (`ip:port`) dialed, or the one the refusal was decided on; none
        /// when the decision came before resolution.
        #[serde(skip_serializing_if = "Option::is_none")]
        address: Option<String>,
        /// True when the connection was let through.
        allowed: bool,
        /// `allowed: …` with what and where, or the refusal's code and detail.
        reason: String,
    },
}

impl EventBody {
    /// Applies `f` to every string field.
    fn map_strings(self, f: impl Fn(String) -> String) -> EventBody {
        match self {
            EventBody::Phase {
                phase,
                status,
                message,
            } => EventBody::Phase {
                phase: f(phase),
                status,
                message: message.map(&f),
            },
            EventBody::Progress {
                phase,
                message,
                current,
                total,
            } => EventBody::Progress {
                phase: f(phase),
                message: f(message),
                current,
                total,
            },
            EventBody::Log { level, message } => EventBody::Log {
                level,
                message: f(message),
            },
            EventBody::AgentMessage { text } => EventBody::AgentMessage { text: f(text) },
            EventBody::ToolCall { id, name, input } => EventBody::ToolCall {
                id: f(id),
                name: f(name),
                input: f(input),
            },
            EventBody::ToolResult {
                id,
                output,
                is_error,
            } => EventBody::ToolResult {
                id: f(id),
                output: f(output),
                is_error,
            },
            numbers @ (EventBody::Usage { .. } | EventBody::Resources { .. }) => numbers,
            EventBody::Denied {
                capability,
                call,
                argument,
                allow,
                message,
            } => EventBody::Denied {
                capability,
                call,
                argument: f(argument),
                allow: f(allow),
                message: f(message),
            },
            EventBody::Output { pipe, line } => EventBody::Output {
                pipe,
                line: f(line),
            },
            EventBody::Egress {
                host,
                port,
                address,
                allowed,
                reason,
            } => EventBody::Egress {
                host: f(host),
                port,
                address: address.map(&f),
                allowed,
                reason: f(reason),
            },
        }
    }
}

/// How a run's phase stands in a `phase` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PhaseStatus {
    /// The phase began.
    Started,
    /// The phase ended without failing the run.
    Finished,
    /// The phase failed the run; the event's `message` says why.
    Failed,
}

/// Sees every event after masking and the source's budget (the CLI's live display or `--json`).
pub type Observer = Box<dyn Fn(&RunEvent) + Send + Sync>;

/// Where a run's events go: masked, cut, counted against their source's budget, appended to
/// `events.ndjson` and handed to the observer. Shared by the host and every plugin of the run.
pub struct EventSink {
    run_id: String,
    /// Events one source may report in this run.
    budget: u64,
    /// Bytes of events one source may report in this run.
    byte_budget: u64,
    redactor: Arc<Redactor>,
    file: Mutex<Option<BufWriter<File>>>,
    observer: Option<Observer>,
    counts: Mutex<HashMap<String, Spent>>,
}

impl EventSink {
    /// Appends to `path` and calls `observer` for each event.
    pub fn new(
        run_id: &str,
        path: &Path,
        observer: Option<Observer>,
        redactor: Arc<Redactor>,
    ) -> std::io::Result<EventSink> {
        let file = File::options().create(true).append(true).open(path)?;
        Ok(EventSink {
            run_id: run_id.to_string(),
            budget: MAX_EVENTS_PER_SOURCE,
            byte_budget: MAX_EVENT_BYTES_PER_SOURCE,
            redactor,
            file: Mutex::new(Some(BufWriter::new(file))),
            observer,
            counts: Mutex::default(),
        })
    }

    /// A sink that keeps nothing.
    pub fn discard() -> EventSink {
        EventSink {
            run_id: String::new(),
            budget: MAX_EVENTS_PER_SOURCE,
            byte_budget: MAX_EVENT_BYTES_PER_SOURCE,
            redactor: Arc::default(),
            file: Mutex::new(None),
            observer: None,
            counts: Mutex::default(),
        }
    }

    /// Records `body` from `source` (`host` or a plugin's name), unless the source has spent
    /// its budget; the first event over it cuts the source off with one warning.
    pub fn emit(&self, source: &str, body: EventBody) {
        if self.exhausted(source) {
            return;
        }
        let event = RunEvent {
            ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            run_id: self.run_id.clone(),
            source: source.to_string(),
            body: body.map_strings(|s| bounded(self.redactor.apply(s))),
        };
        let line = serde_json::to_string(&event).ok();
        let bytes = line.as_ref().map_or(0, |l| l.len() as u64 + 1);
        if !self.within_budget(source, bytes) {
            return;
        }
        if let (Some(file), Some(line)) = (self.file.lock().unwrap().as_mut(), line) {
            let _ = writeln!(file, "{line}").and_then(|_| file.flush());
        }
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }

    /// Records that the run's `phase` started, finished or failed, from `host`.
    pub fn phase(&self, phase: &str, status: PhaseStatus, message: Option<String>) {
        self.emit(
            "host",
            EventBody::Phase {
                phase: phase.to_string(),
                status,
                message,
            },
        );
    }

    /// Records a log line from `host` at `level` (`info`, `warn`, …).
    pub fn host_log(&self, level: &'static str, message: impl Into<String>) {
        self.emit(
            "host",
            EventBody::Log {
                level,
                message: message.into(),
            },
        );
    }

    /// Whether `source` was already cut off (checked before masking the next event).
    fn exhausted(&self, source: &str) -> bool {
        self.counts
            .lock()
            .unwrap()
            .get(source)
            .is_some_and(|spent| spent.cut_off)
    }

    /// Counts one event of `bytes` against `source`'s budget; the first event over it
    /// cuts the source off with one warning.
    fn within_budget(&self, source: &str, bytes: u64) -> bool {
        let mut counts = self.counts.lock().unwrap();
        let spent = counts.entry(source.to_string()).or_default();
        if spent.cut_off {
            return false;
        }
        spent.events += 1;
        spent.bytes += bytes;
        if spent.events <= self.budget && spent.bytes <= self.byte_budget {
            return true;
        }
        spent.cut_off = true;
        drop(counts);
        self.emit(
            "host",
            EventBody::Log {
                level: "warn",
                message: format!(
                    "{source} exceeded {} events or {} MiB of events; further events from it are dropped",
                    self.budget,
                    self.byte_budget >> 20
                ),
            },
        );
        false
    }
}

/// What one source has reported so far.
#[derive(Debug, Default)]
struct Spent {
    events: u64,
    bytes: u64,
    cut_off: bool,
}

/// Cuts `s` to at most [`MAX_FIELD_BYTES`], on a character boundary.
fn bounded(mut s: String) -> String {
    if s.len() > MAX_FIELD_BYTES {
        let mut cut = MAX_FIELD_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        let dropped = s.len() - cut;
        s.truncate(cut);
        s.push_str(&format!("…[{dropped} bytes truncated]"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_over_its_byte_budget_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let mut sink = EventSink::new("r1", &path, None, Arc::default()).unwrap();
        sink.byte_budget = 10 * MAX_FIELD_BYTES as u64;
        for _ in 0..100 {
            sink.emit(
                "flooder",
                EventBody::AgentMessage {
                    text: "F".repeat(2 * MAX_FIELD_BYTES),
                },
            );
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let kept = text
            .lines()
            .filter(|l| l.contains("\"source\":\"flooder\""))
            .count();
        assert!((9..=10).contains(&kept), "{kept} events kept");
        assert!(text.len() < 11 * MAX_FIELD_BYTES);
        assert!(text.contains("MiB of events; further events from it are dropped"));
    }

    #[test]
    fn a_flooding_source_is_cut_off_with_one_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let mut sink = EventSink::new("r1", &path, None, Arc::default()).unwrap();
        sink.budget = 5;
        for i in 0..100 {
            sink.emit(
                "flooder",
                EventBody::AgentMessage {
                    text: format!("{i}"),
                },
            );
        }
        sink.emit(
            "other",
            EventBody::AgentMessage {
                text: "still heard".into(),
            },
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("\"source\":\"flooder\""))
                .count(),
            5
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("further events from it are dropped"))
                .count(),
            1
        );
        assert!(text.contains("still heard"));
    }

    #[test]
    fn truncates_long_fields_on_char_boundaries() {
        let long = "é".repeat(MAX_FIELD_BYTES);
        let cut = bounded(long);
        assert!(cut.len() < MAX_FIELD_BYTES + 40);
        assert!(cut.ends_with("bytes truncated]"));
    }

    #[test]
    fn masks_before_truncating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let secret = "sk-live-0123456789abcdef";
        let sink = EventSink::new(
            "r1",
            &path,
            None,
            Arc::new(Redactor::new([secret.to_string()])),
        )
        .unwrap();
        // The secret straddles the truncation point.
        let line = format!("{}{secret}", "x".repeat(MAX_FIELD_BYTES - 20));
        sink.emit(
            "agent-command",
            EventBody::Output {
                pipe: "stdout",
                line,
            },
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&secret[..8]), "the secret's start leaked");
        assert!(text.contains("x***"));
    }

    #[test]
    fn writes_redacted_ndjson() {
        let dir = std::env::temp_dir().join(format!("ag-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.ndjson");
        let sink = EventSink::new(
            "r1",
            &path,
            None,
            Arc::new(Redactor::new(["hunter22".to_string()])),
        )
        .unwrap();
        sink.host_log("info", "hello");
        sink.host_log("info", "token hunter22");
        let text = std::fs::read_to_string(&path).unwrap();
        let event: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(event["type"], "log");
        assert_eq!(event["message"], "hello");
        assert_eq!(event["runId"], "r1");
        let redacted: serde_json::Value =
            serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(redacted["message"], "token ***");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
