//! What `agentgate run` shows while a run goes on: a live display for people, or
//! NDJSON events for machines (`--json`); and, for every command, a spinner while a
//! component compiles (the first use of a Python or JavaScript build takes seconds).
//!
//! Much of what is shown comes from the agent and plugins. Every piece of it passes
//! through [`crate::escape`] on its way to the terminal, so it can neither drive the
//! terminal (`ESC]0;…`, `ESC[2J`) nor forge lines of its own (a newline in a name).
//!
//! Nothing here writes to the terminal itself: every write, spinners included, goes
//! through [`super::console`], so a reader that stops reading never holds up the run.
//! What finds the console's queue full is counted, and a line says so in its place.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::console::{console, write_stderr, write_stdout};
use crate::engine::RunReport;
use crate::escape;
use crate::record::{EventBody, RunEvent};
use crate::record::{RunResult, RunStatus};

/// One display for the run's spinner and compile spinners, so that neither draws over
/// the other. Used on the console's writer thread only: drawing blocks on the terminal.
fn display() -> &'static MultiProgress {
    static DISPLAY: OnceLock<MultiProgress> = OnceLock::new();
    DISPLAY.get_or_init(MultiProgress::new)
}

/// A spinner that draws nothing until [`show`] adds it to the display.
fn spinner() -> ProgressBar {
    let bar = ProgressBar::hidden();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    bar
}

/// Adds `bar` to the display and starts its ticks (on the console's thread).
fn show(bar: &ProgressBar) {
    let bar = display().add(bar.clone());
    bar.enable_steady_tick(Duration::from_millis(120));
}

/// Components at least this large get a line on stderr when it is not a terminal.
const LARGE_COMPONENT: usize = 1 << 20;

/// Shows a spinner while a component compiles. What finds the console's queue full is
/// not shown: a spinner is not worth a wait.
#[derive(Default)]
pub struct CompileProgress {
    bars: Arc<Mutex<HashMap<String, ProgressBar>>>,
}

impl crate::runtime::LoadObserver for CompileProgress {
    fn compile_started(&self, label: &str, bytes: usize) {
        let what = format!(
            "compiling plugin {} ({:.1} MiB); once per build, cached afterwards",
            escape::text(label),
            bytes as f64 / (1 << 20) as f64
        );
        if !std::io::stderr().is_terminal() {
            if bytes >= LARGE_COMPONENT {
                console().offer(move || write_stderr(&what));
            }
            return;
        }
        let bar = spinner();
        bar.set_message(what);
        if let Ok(mut bars) = self.bars.lock() {
            bars.insert(label.to_string(), bar.clone());
        }
        console().offer(move || show(&bar));
    }

    fn compile_finished(&self, label: &str, _took: Duration) {
        let bar = self
            .bars
            .lock()
            .ok()
            .and_then(|mut bars| bars.remove(label));
        if let Some(bar) = bar {
            console().offer(move || {
                bar.finish_and_clear();
                display().remove(&bar);
            });
        }
    }
}

pub struct Progress {
    json: bool,
    bar: Option<ProgressBar>,
    unshown: Arc<Unshown>,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = spinner();
            let shown = bar.clone();
            console().print(move || show(&shown));
            bar
        });
        let unshown = Arc::new(Unshown {
            json,
            bar: bar.clone(),
            count: Mutex::new(0),
        });
        Progress { json, bar, unshown }
    }

    /// Shows each event, or counts it when the console has no room: the run never
    /// waits for whoever reads agentgate's output.
    pub fn observer(&self) -> Box<dyn Fn(&RunEvent) + Send + Sync> {
        let unshown = self.unshown.clone();
        if self.json {
            return Box::new(move |event| {
                if let Ok(line) = escape::json_line(event) {
                    unshown.offer(&event.run_id, move || write_stdout(&line));
                }
            });
        }
        let bar = self.bar.clone();
        Box::new(move |event| {
            let phase = match &event.body {
                EventBody::Phase {
                    phase,
                    status: crate::record::PhaseStatus::Started,
                    ..
                } => bar.is_some().then(|| format!("{}…", escape::text(phase))),
                _ => None,
            };
            let line = render(event);
            if phase.is_none() && line.is_none() {
                return;
            }
            let bar = bar.clone();
            unshown.offer(&event.run_id, move || {
                if let (Some(bar), Some(phase)) = (&bar, phase) {
                    bar.set_message(phase);
                }
                if let Some(line) = line {
                    print_line(bar.as_ref(), &line);
                }
            });
        })
    }

    /// Prints the run's verdict, after whatever is still queued; this waits for the
    /// reader (the run is over by now).
    pub fn finish(&self, report: &RunReport) {
        self.unshown.say_so(&report.result.run_id);
        if let Some(bar) = self.bar.clone() {
            console().print(move || bar.finish_and_clear());
        }
        let result = &report.result;
        if self.json {
            if let Ok(line) = escape::json_line(result) {
                console().print(move || write_stdout(&line));
            }
            return;
        }
        let summary = summary(result, &report.folder);
        console().print(move || write_stderr(summary.trim_end_matches('\n')));
    }
}

/// What a person reads when a run ends (and `agentgate show` prints for a past run):
/// the verdict, the error, the changed files and where the result is.
pub(super) fn summary(result: &RunResult, folder: &Path) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let verdict = match result.status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::TimedOut => "timed out",
        RunStatus::Cancelled => "was cancelled",
        RunStatus::Invalid => "was rejected",
        RunStatus::Error => "failed with an error",
        RunStatus::Crashed => "crashed",
    };
    let _ = writeln!(
        out,
        "run {} {verdict} in {:.1}s; {} file(s) changed",
        escape::text(&result.run_id),
        result.duration_ms as f64 / 1000.0,
        result.modified_files.len()
    );
    if let Some(error) = &result.error {
        let _ = writeln!(out, "{}", block("  ", error));
    }
    for change in result.modified_files.iter().take(20) {
        // Paths are escaped in the record already; escaping again is a no-op
        // that keeps this line safe whatever the record holds.
        let _ = writeln!(
            out,
            "  {:<10} {}",
            change.change,
            escape::text(&change.path)
        );
    }
    if result.modified_files.len() > 20 {
        let _ = writeln!(out, "  … and {} more", result.modified_files.len() - 20);
    }
    let _ = writeln!(
        out,
        "  results: {}",
        escape::text(&folder.join("result.json").display().to_string())
    );
    out
}

/// A line of the live display: above the spinner when there is one.
fn print_line(bar: Option<&ProgressBar>, line: &str) {
    match bar {
        Some(bar) => bar.println(line),
        None => write_stderr(line),
    }
}

/// The events the console had no room for since it last took one, and the line that
/// says so in their place once it has room again.
struct Unshown {
    json: bool,
    bar: Option<ProgressBar>,
    count: Mutex<u64>,
}

impl Unshown {
    /// Queues `show` on the console, after the notice of what was dropped before it.
    fn offer(&self, run_id: &str, show: impl FnOnce() + Send + 'static) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        if *count > 0 {
            if !console().offer(self.notice(*count, run_id)) {
                *count += 1;
                return;
            }
            *count = 0;
        }
        if !console().offer(show) {
            *count += 1;
        }
    }

    /// Says what was dropped since the console last had room, waiting for room.
    fn say_so(&self, run_id: &str) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        if *count > 0 {
            console().print(self.notice(*count, run_id));
            *count = 0;
        }
    }

    fn notice(&self, count: u64, run_id: &str) -> impl FnOnce() + Send + 'static {
        let (pipe, what) = if self.json {
            ("stdout", "printed")
        } else {
            ("stderr", "shown")
        };
        let message = format!(
            "{count} event(s) were not {what}: agentgate's {pipe} was not being read; \
             events.ndjson in the run folder has every event"
        );
        let line = if self.json {
            escape::json_line(&RunEvent {
                ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
                run_id: run_id.to_string(),
                source: "host".into(),
                body: EventBody::Log {
                    level: "warn",
                    message,
                },
            })
            .ok()
        } else {
            Some(format!("  [warn] {message}"))
        };
        let (json, bar) = (self.json, self.bar.clone());
        move || match (line, json) {
            (Some(line), true) => write_stdout(&line),
            (Some(line), false) => print_line(bar.as_ref(), &line),
            (None, _) => {}
        }
    }
}

/// `text` as lines starting with `prefix` (the first) or as many spaces (the rest),
/// each escaped.
fn block(prefix: &str, text: &str) -> String {
    let indent = " ".repeat(prefix.chars().count());
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(if i == 0 { prefix } else { &indent });
        out.push_str(&escape::text(line));
    }
    if out.is_empty() {
        out.push_str(prefix);
    }
    out
}

/// Lines for a person, or nothing for events that only move the spinner.
fn render(event: &RunEvent) -> Option<String> {
    use crate::record::PhaseStatus;
    let text = |s: &str| escape::text(s).into_owned();
    match &event.body {
        EventBody::Phase {
            phase,
            status: PhaseStatus::Finished,
            ..
        } => Some(format!("✓ {}", text(phase))),
        EventBody::Phase {
            phase,
            status: PhaseStatus::Failed,
            message,
        } => Some(block(
            &format!("✗ {}: ", text(phase)),
            message.as_deref().unwrap_or("failed"),
        )),
        // Shown by `agentgate report` as a chart, not line by line.
        EventBody::Phase { .. } | EventBody::Resources { .. } => None,
        EventBody::Progress { message, .. } => Some(block("  ", message)),
        EventBody::Log { level, message } => Some(block(&format!("  [{level}] "), message)),
        EventBody::Denied { message, .. } => Some(block("  [denied] ", message)),
        EventBody::Egress { allowed: true, .. } => None,
        EventBody::Egress { reason, .. } => Some(block("  [egress refused] ", reason)),
        EventBody::AgentMessage { text } => Some(block("  agent: ", text)),
        EventBody::ToolCall { name, input, .. } => {
            Some(format!("  tool {} {}", text(name), text(input)))
        }
        EventBody::ToolResult {
            output, is_error, ..
        } => Some(format!(
            "  {} {}",
            if *is_error { "✗" } else { "→" },
            text(output.lines().next().unwrap_or(""))
        )),
        EventBody::Usage {
            input_tokens,
            output_tokens,
            cost_usd,
            ..
        } => Some(format!(
            "  usage: {input_tokens} in / {output_tokens} out{}",
            cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default()
        )),
        // One line of output stays one line on the terminal.
        EventBody::Output { line, .. } => Some(format!("  │ {}", text(line))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(body: EventBody) -> RunEvent {
        RunEvent {
            ts: String::new(),
            run_id: "r".into(),
            source: "agent".into(),
            body,
        }
    }

    #[test]
    fn agent_text_cannot_drive_the_terminal_or_forge_lines() {
        let output = render(&event(EventBody::Output {
            pipe: "stdout",
            line: "\x1b]0;pwned\x07\x1b[2J\rrun x succeeded\u{9b}".into(),
        }))
        .unwrap();
        assert_eq!(
            output,
            "  │ \\e]0;pwned\\a\\e[2J\\rrun x succeeded\\xc2\\x9b"
        );

        let message = render(&event(EventBody::AgentMessage {
            text: "done\n✓ cleanup\x1b[1A".into(),
        }))
        .unwrap();
        assert_eq!(message, "  agent: done\n         ✓ cleanup\\e[1A");
        for body in [
            EventBody::Log {
                level: "info",
                message: "\x1bc".into(),
            },
            EventBody::ToolCall {
                id: "1".into(),
                name: "\x1b[31mBash".into(),
                input: "{\"x\":\"\x07\"}\n".into(),
            },
            EventBody::Progress {
                phase: "\x1b".into(),
                message: "\u{202e}txt.exe".into(),
                current: None,
                total: None,
            },
        ] {
            let line = render(&event(body)).unwrap();
            assert!(!line.chars().any(escape::is_unsafe), "{line:?}");
        }
    }
}
