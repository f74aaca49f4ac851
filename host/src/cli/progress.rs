//! What `agentgate run` shows while a run goes on: a live display for people, or
//! NDJSON events for machines (`--json`).

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::{RunReport, RunStatus};
use crate::record::{EventBody, RunEvent};

pub struct Progress {
    json: bool,
    bar: Option<Arc<ProgressBar>>,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new_spinner();
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
                if let Ok(line) = serde_json::to_string(event) {
                    println!("{line}");
                }
            });
        }
        let bar = self.bar.clone();
        Box::new(move |event| {
            if let EventBody::Phase { phase, status, .. } = &event.body {
                if let (Some(bar), crate::record::PhaseStatus::Started) = (&bar, status) {
                    bar.set_message(format!("{phase}…"));
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
        let result = &report.result;
        if self.json {
            if let Ok(line) = serde_json::to_string(result) {
                println!("{line}");
            }
            return;
        }
        let verdict = match result.status {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed out",
            RunStatus::Cancelled => "was cancelled",
            RunStatus::Invalid => "was rejected",
            RunStatus::Error => "failed with an error",
        };
        eprintln!(
            "run {} {verdict} in {:.1}s; {} file(s) changed",
            result.run_id,
            result.duration_ms as f64 / 1000.0,
            result.modified_files.len()
        );
        if let Some(error) = &result.error {
            eprintln!("  {error}");
        }
        for change in result.modified_files.iter().take(20) {
            eprintln!("  {:?} {}", change.change, change.path);
        }
        eprintln!("  results: {}", report.folder.join("result.json").display());
    }
}

/// One line for a person, or nothing for events that only move the spinner.
fn render(event: &RunEvent) -> Option<String> {
    use crate::record::PhaseStatus;
    match &event.body {
        EventBody::Phase {
            phase,
            status: PhaseStatus::Finished,
            ..
        } => Some(format!("✓ {phase}")),
        EventBody::Phase {
            phase,
            status: PhaseStatus::Failed,
            message,
        } => Some(format!(
            "✗ {phase}: {}",
            message.as_deref().unwrap_or("failed")
        )),
        EventBody::Phase { .. } => None,
        EventBody::Progress { message, .. } => Some(format!("  {message}")),
        EventBody::Log { level, message } => Some(format!("  [{level}] {message}")),
        EventBody::AgentMessage { text } => Some(format!("  agent: {text}")),
        EventBody::ToolCall { name, input, .. } => Some(format!("  tool {name} {input}")),
        EventBody::ToolResult {
            output, is_error, ..
        } => Some(format!(
            "  {} {}",
            if *is_error { "✗" } else { "→" },
            output.lines().next().unwrap_or("")
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
        EventBody::Output { line, .. } => Some(format!("  │ {line}")),
    }
}
