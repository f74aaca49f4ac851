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

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    /// RFC 3339 time with milliseconds.
    pub ts: String,
    pub run_id: String,
    /// `host` or the plugin's name.
    pub source: String,
    #[serde(flatten)]
    pub body: EventBody,
}

#[derive(Debug, Clone, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum EventBody {
    /// A lifecycle phase of the run started or ended.
    Phase {
        phase: String,
        status: PhaseStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Progress {
        phase: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        current: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<u64>,
    },
    Log {
        level: &'static str,
        message: String,
    },
    AgentMessage {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        input: String,
    },
    ToolResult {
        id: String,
        output: String,
        is_error: bool,
    },
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    Output {
        pipe: &'static str,
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
        message: String,
    },
    /// The sandbox's resource use, sampled through the run (see
    /// `engine::sampler`).
    Resources {
        /// CPU use since the previous sample; 100 is one core busy all the time.
        cpu_percent: f64,
        #[serde(rename = "memoryMB")]
        memory_mb: f64,
        pids: u32,
    },
    /// A decision of the egress proxy (see `egress`): a connection let through to
    /// `host:port`, or refused and why.
    Egress {
        /// The host asked for; empty when the request named none.
        host: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        /// The address (`ip:port`) dialed, or the one the refusal was decided on; none
        /// when the decision came before resolution.
        #[serde(skip_serializing_if = "Option::is_none")]
        address: Option<String>,
        allowed: bool,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PhaseStatus {
    Started,
    Finished,
    Failed,
}

pub type Observer = Box<dyn Fn(&RunEvent) + Send + Sync>;

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
