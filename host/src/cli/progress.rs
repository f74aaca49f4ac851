//! What `agentgate run` shows while a run goes on: a live display for people, or
//! NDJSON events for machines (`--json`); and, for every command, a spinner while a
//! component compiles (the first use of a Python or JavaScript build takes seconds).
//!
//! Much of what is shown comes from the agent and plugins. Every piece of it passes
//! through [`crate::escape`] on its way to the terminal, so it can neither drive the
//! terminal (`ESC]0;…`, `ESC[2J`) nor forge lines of its own (a newline in a name).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::engine::{RunReport, RunResult, RunStatus};
use crate::escape;
use crate::record::{EventBody, RunEvent};

/// One display for the run's spinner and compile spinners, so that neither draws over
/// the other.
fn display() -> &'static MultiProgress {
    static DISPLAY: OnceLock<MultiProgress> = OnceLock::new();
    DISPLAY.get_or_init(MultiProgress::new)
}

/// Components at least this large get a line on stderr when it is not a terminal.
const LARGE_COMPONENT: usize = 1 << 20;

/// Shows a spinner while a component compiles.
#[derive(Default)]
pub struct CompileProgress {
    bars: Mutex<HashMap<String, ProgressBar>>,
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
                eprintln!("{what}");
            }
            return;
        }
        let bar = display().add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
        );
        bar.set_message(what);
        bar.enable_steady_tick(Duration::from_millis(120));
        if let Ok(mut bars) = self.bars.lock() {
            bars.insert(label.to_string(), bar);
        }
    }

    fn compile_finished(&self, label: &str, _took: Duration) {
        let bar = self
            .bars
            .lock()
            .ok()
            .and_then(|mut bars| bars.remove(label));
        if let Some(bar) = bar {
            bar.finish_and_clear();
            display().remove(&bar);
        }
    }
}

pub struct Progress {
    json: bool,
    bar: Option<Arc<ProgressBar>>,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = display().add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            Arc::new(bar)
        });
        Progress { json, bar }
    }

    pub fn observer(&self) -> Box<dyn Fn(&RunEvent) + Send + Sync> {
        if self.json {
            return Box::new(|event| {
                if let Ok(line) = escape::json_line(event) {
                    println!("{line}");
                }
            });
        }
        let bar = self.bar.clone();
        Box::new(move |event| {
            if let EventBody::Phase { phase, status, .. } = &event.body {
                if let (Some(bar), crate::record::PhaseStatus::Started) = (&bar, status) {
                    bar.set_message(format!("{}…", escape::text(phase)));
                }
            }
            if let Some(line) = render(event) {
                match &bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
        })
    }

    pub fn finish(&self, report: &RunReport) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.json {
            if let Ok(line) = escape::json_line(&report.result) {
                println!("{line}");
            }
            return;
        }
        eprint!("{}", summary(&report.result, &report.folder));
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
