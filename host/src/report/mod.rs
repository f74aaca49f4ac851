//! `agentgate report`: one run as a single HTML page a reviewer would rather read than
//! `events.ndjson`.
//!
//! The page is rendered here, on the host, from the run folder ([`crate::history`]):
//! the phases on a timeline, the agent's messages and tool calls in order with their
//! inputs and outputs folded, the sandbox's resource use as charts (the `resources`
//! samples), the change set as a diff, the result and the TaskSpec.
//!
//! Nearly all of it was written by the agent, which is hostile: a file name or an
//! output line may hold `<script>`. So the page is an askama template, which escapes
//! every value it is given for HTML, and no value ever reaches the page another way.
//! The page has no script at all: folding is `<details>`, charts are SVG drawn here.
//! Its Content-Security-Policy is the second fence: no script runs, nothing is
//! fetched (so the page makes no request to any network) and only the page's own
//! stylesheet, named by its hash, applies. Characters that would reorder or hide text
//! (bidirectional overrides, controls) are escaped as on the terminal
//! ([`crate::escape::lines`]). What is read was masked when the run wrote it.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use askama::Template;
use base64::Engine as _;
use sha2::Digest;

use crate::escape;
use crate::history::{status_name, Record, RecordedRun};

/// The page's stylesheet; the Content-Security-Policy names it by its hash.
const STYLE: &str = include_str!("report.css");

/// Most entries (messages, tool calls, output blocks…) the page lists.
const MAX_ENTRIES: usize = 5_000;
/// Most lines one block of output shows.
const MAX_OUTPUT_LINES: usize = 400;
/// Most lines of the diff the page shows.
const MAX_DIFF_LINES: usize = 20_000;

/// The report of `run`, as one HTML document.
pub fn render(run: &RecordedRun) -> String {
    let page = Page::of(run);
    page.render().expect("the report template renders")
}

#[derive(Template)]
#[template(path = "report.html")]
struct Page {
    csp: String,
    style: &'static str,
    name: String,
    run_id: String,
    status: String,
    /// `ok`, `bad` or `pending`: the status badge's colour.
    tone: &'static str,
    facts: Vec<(&'static str, String)>,
    error: Option<String>,
    agent_summary: Option<String>,
    phases: Vec<PhaseBar>,
    entries: Vec<Entry>,
    /// Events left out past [`MAX_ENTRIES`].
    entries_left_out: usize,
    charts: Vec<Chart>,
    samples: Vec<[String; 4]>,
    files: Vec<[String; 3]>,
    changes_from: String,
    diff: Vec<DiffFile>,
    diff_note: Option<String>,
    result_json: Option<String>,
    taskspec: Option<String>,
}

/// One phase on the timeline; `x` and `width` in thousandths of the run.
struct PhaseBar {
    name: String,
    at: String,
    took: String,
    x: String,
    width: String,
    failed: bool,
}

/// One item of the run's story.
struct Entry {
    /// Since the run began: `+1.2s`.
    at: String,
    /// The CSS class: `phase`, `log`, `message`, `tool`, `output`, `usage`, `other`.
    kind: &'static str,
    source: String,
    head: String,
    text: Option<String>,
    folds: Vec<Fold>,
}

/// A folded block: a tool's input or output, a run of output lines.
struct Fold {
    summary: String,
    body: String,
    error: bool,
}

struct Chart {
    title: &'static str,
    unit: &'static str,
    top: String,
    end: String,
    points: String,
    last: String,
}

struct DiffFile {
    name: String,
    added: usize,
    removed: usize,
    lines: Vec<(&'static str, String)>,
}

/// Text the agent may have written, made safe to show: escaped by the template for
/// HTML, and here for what would reorder or hide it.
fn shown(text: &str) -> String {
    escape::lines(text).into_owned()
}

fn seconds(ms: f64) -> String {
    if ms < 60_000.0 {
        format!("{:.1}s", ms / 1000.0)
    } else {
        let secs = (ms / 1000.0) as u64;
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

fn time_of(ts: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(ts).ok()
}

impl Page {
    fn of(run: &RecordedRun) -> Page {
        let summary = run.summary();
        let result = run.result();
        let events: Vec<serde_json::Value> = run.events().collect();
        let begin = summary
            .started_at
            .as_deref()
            .and_then(time_of)
            .or_else(|| events.first().and_then(|e| time_of(e["ts"].as_str()?)));
        let since = |event: &serde_json::Value| -> Option<f64> {
            let at = time_of(event["ts"].as_str()?)?;
            Some(at.duration_since(begin?).unwrap_or_default().as_secs_f64() * 1000.0)
        };
        let total_ms = summary
            .duration_ms
            .map(|d| d as f64)
            .unwrap_or_else(|| events.iter().filter_map(since).fold(0.0, f64::max));

        let tone = match summary.status.as_str() {
            "succeeded" => "ok",
            "running" => "pending",
            _ => "bad",
        };
        let dash = |value: Option<String>| value.unwrap_or_else(|| "-".into());
        let mut facts = vec![
            ("started", dash(summary.started_at.clone())),
            (
                "duration",
                dash(summary.duration_ms.map(|d| seconds(d as f64))),
            ),
            ("provider", dash(summary.provider.clone())),
            ("driver", dash(summary.driver.clone())),
            (
                "files changed",
                dash(summary.files_changed.map(|n| n.to_string())),
            ),
        ];
        if let Some(result) = result {
            facts.push(("exit code", dash(result.exit_code.map(|c| c.to_string()))));
            if let Some(agent) = &result.agent {
                facts.push(("session", dash(agent.session_id.clone())));
                facts.push(("turns", dash(agent.turns.map(|t| t.to_string()))));
            }
            if let Some(usage) = result
                .sandbox
                .as_ref()
                .and_then(|s| s.resource_usage.as_ref())
            {
                facts.push((
                    "resources",
                    format!(
                        "{:.1}% CPU on average, {:.1} MiB at the end, {:.1} MiB at peak{}",
                        usage.cpu_percent,
                        usage.memory_mb,
                        usage.peak_memory_mb,
                        if usage.oom_killed { ", OOM-killed" } else { "" }
                    ),
                ));
            }
        }
        if summary.input_tokens.is_some() || summary.output_tokens.is_some() {
            facts.push((
                "tokens",
                format!(
                    "{} in / {} out",
                    summary.input_tokens.unwrap_or(0),
                    summary.output_tokens.unwrap_or(0)
                ),
            ));
        }
        if let Some(cost) = summary.cost_usd {
            facts.push(("cost", format!("${cost:.4}")));
        }
        let facts = facts
            .into_iter()
            .map(|(key, value)| (key, shown(&value)))
            .collect();

        let (entries, entries_left_out) = entries(&events, &since);
        let (charts, samples) = charts(&events, &since);
        let (diff, diff_note) = match run.patch() {
            Some((patch, cut)) => {
                let (files, shown_all) = diff(&patch);
                let note = (cut || !shown_all).then(|| {
                    "The change set is longer than the page shows: changes.patch in the run \
                     folder has all of it."
                        .to_string()
                });
                (files, note)
            }
            None => (
                Vec::new(),
                Some(match result.map(|r| r.changes_from.as_str()) {
                    Some("snapshot") => "The workspace is not a git repository: it was compared \
                                         by snapshot, which tells which entries changed but \
                                         keeps no contents to diff."
                        .to_string(),
                    _ => "No change set was recorded.".to_string(),
                }),
            ),
        };
        let (error, agent_summary, files, changes_from, result_json) = match &run.record {
            Record::Ended(result) => (
                result.error.as_deref().map(shown),
                result
                    .agent
                    .as_ref()
                    .and_then(|a| a.summary.as_deref())
                    .map(shown),
                result
                    .modified_files
                    .iter()
                    .map(|change| {
                        [
                            change.change.to_string(),
                            shown(&change.path),
                            shown(
                                change
                                    .from
                                    .as_deref()
                                    .or(change.error.as_deref())
                                    .unwrap_or(""),
                            ),
                        ]
                    })
                    .collect(),
                result.changes_from.clone(),
                serde_json::to_string_pretty(result).ok().map(|j| shown(&j)),
            ),
            Record::Pending { .. } => (None, None, Vec::new(), String::new(), None),
            Record::Unreadable(why) => (Some(shown(why)), None, Vec::new(), String::new(), None),
        };
        let taskspec = run
            .taskspec()
            .map(|mut spec| {
                drop_unset(&mut spec);
                spec
            })
            .and_then(|spec| serde_yaml::to_string(&spec).ok())
            .map(|yaml| shown(&yaml));

        Page {
            csp: format!(
                "default-src 'none'; style-src 'sha256-{}'; base-uri 'none'; form-action 'none'",
                base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(STYLE))
            ),
            style: STYLE,
            name: shown(summary.name.as_deref().unwrap_or("?")),
            run_id: shown(&run.run_id),
            status: match result {
                Some(result) => status_name(result.status),
                None => summary.status.clone(),
            },
            tone,
            facts,
            error,
            agent_summary,
            phases: phases(&events, result.map(|r| &r.phases), &since, total_ms),
            entries,
            entries_left_out,
            charts,
            samples,
            files,
            changes_from,
            diff,
            diff_note,
            result_json,
            taskspec,
        }
    }
}

/// Removes the fields a TaskSpec left unset (null, `{}`, `[]`), so the page shows
/// what the run was asked to do rather than every field there is.
fn drop_unset(value: &mut serde_json::Value) {
    use serde_json::Value;
    let unset = |v: &Value| match v {
        Value::Null => true,
        Value::Object(fields) => fields.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    };
    match value {
        Value::Object(fields) => {
            fields.values_mut().for_each(drop_unset);
            fields.retain(|_, v| !unset(v));
        }
        Value::Array(items) => items.iter_mut().for_each(drop_unset),
        _ => {}
    }
}

/// The phases as bars: each ends at its `finished` or `failed` event and lasts what
/// `result.json` says (the `plugins` phase began before events could be recorded).
fn phases(
    events: &[serde_json::Value],
    durations: Option<&BTreeMap<String, u64>>,
    since: &dyn Fn(&serde_json::Value) -> Option<f64>,
    total_ms: f64,
) -> Vec<PhaseBar> {
    let mut bars: Vec<(String, f64, Option<f64>, bool)> = Vec::new();
    for event in events.iter().filter(|e| e["type"] == "phase") {
        let (Some(name), Some(at)) = (event["phase"].as_str(), since(event)) else {
            continue;
        };
        match event["status"].as_str() {
            Some("started") => bars.push((name.to_string(), at, None, false)),
            Some(status) => {
                let failed = status == "failed";
                match bars
                    .iter_mut()
                    .rev()
                    .find(|(n, _, end, _)| n == name && end.is_none())
                {
                    Some(bar) => {
                        bar.2 = Some(at);
                        bar.3 = failed;
                    }
                    None => bars.push((name.to_string(), at, Some(at), failed)),
                }
            }
            None => {}
        }
    }
    let scale = if total_ms > 0.0 {
        1000.0 / total_ms
    } else {
        0.0
    };
    bars.into_iter()
        .map(|(name, started, ended, failed)| {
            let end = ended.unwrap_or(total_ms).min(total_ms.max(started));
            let took = durations
                .and_then(|d| d.get(&name))
                .map_or(end - started, |&ms| ms as f64);
            let start = (end - took).max(0.0);
            PhaseBar {
                at: seconds(start),
                took: seconds(took),
                x: format!("{:.1}", start * scale),
                width: format!("{:.1}", (took * scale).max(2.0)),
                name: shown(&name),
                failed,
            }
        })
        .collect()
}

/// The run's story: phases, logs, the agent's messages, its tool calls with their
/// results folded in, and its output in blocks of consecutive lines.
fn entries(
    events: &[serde_json::Value],
    since: &dyn Fn(&serde_json::Value) -> Option<f64>,
) -> (Vec<Entry>, usize) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut calls: HashMap<String, usize> = HashMap::new();
    let mut left_out = 0;
    // The open block of output: its pipe and the lines it holds (with those left out).
    let mut output: Option<(String, Vec<String>, usize)> = None;
    let text = |event: &serde_json::Value, field: &str| shown(event[field].as_str().unwrap_or(""));

    let close_output = |entries: &mut Vec<Entry>,
                        output: &mut Option<(String, Vec<String>, usize)>| {
        if let Some((pipe, lines, more)) = output.take() {
            let count = lines.len() + more;
            let mut body = lines.join("\n");
            if more > 0 {
                body.push_str(&format!("\n… {more} more lines in {pipe}.log"));
            }
            let first = lines.first().cloned().unwrap_or_default();
            let last = entries.len();
            entries[last - 1].folds.push(Fold {
                summary: format!(
                    "{count} line{} of {pipe}: {first}",
                    if count == 1 { "" } else { "s" }
                ),
                body,
                error: pipe == "stderr",
            });
        }
    };

    for event in events {
        let kind = event["type"].as_str().unwrap_or("");
        if kind == "resources" {
            continue;
        }
        if kind == "output" {
            let pipe = event["pipe"].as_str().unwrap_or("stdout").to_string();
            let line = text(event, "line");
            match &mut output {
                Some((open, lines, more)) if *open == pipe => {
                    if lines.len() < MAX_OUTPUT_LINES {
                        lines.push(line);
                    } else {
                        *more += 1;
                    }
                    continue;
                }
                _ => close_output(&mut entries, &mut output),
            }
            if entries.len() >= MAX_ENTRIES {
                left_out += 1;
                continue;
            }
            output = Some((pipe, vec![line], 0));
            entries.push(entry(event, since, "output", String::new()));
            continue;
        }
        close_output(&mut entries, &mut output);
        if kind == "toolResult" {
            let fold = Fold {
                summary: format!(
                    "{}: {}",
                    if event["isError"] == true {
                        "error"
                    } else {
                        "result"
                    },
                    text(event, "output").lines().next().unwrap_or("")
                ),
                body: text(event, "output"),
                error: event["isError"] == true,
            };
            if let Some(&at) = event["id"].as_str().and_then(|id| calls.get(id)) {
                entries[at].folds.push(fold);
                continue;
            }
            if entries.len() >= MAX_ENTRIES {
                left_out += 1;
                continue;
            }
            let mut orphan = entry(
                event,
                since,
                "tool",
                format!("result of {}", text(event, "id")),
            );
            orphan.folds.push(fold);
            entries.push(orphan);
            continue;
        }
        if entries.len() >= MAX_ENTRIES {
            left_out += 1;
            continue;
        }
        let item = match kind {
            "phase" => {
                let mut item = entry(
                    event,
                    since,
                    "phase",
                    format!("{} {}", text(event, "phase"), text(event, "status")),
                );
                item.text = event["message"].as_str().map(shown);
                item
            }
            "log" => {
                let mut item = entry(event, since, "log", text(event, "level"));
                item.text = Some(text(event, "message"));
                item
            }
            "progress" => {
                let mut item = entry(event, since, "log", text(event, "phase"));
                item.text = Some(text(event, "message"));
                item
            }
            "agentMessage" => {
                let mut item = entry(event, since, "message", "agent".into());
                item.text = Some(text(event, "text"));
                item
            }
            "toolCall" => {
                let input = event["input"].as_str().unwrap_or("");
                // Inputs are JSON: shown indented when they parse.
                let body = serde_json::from_str::<serde_json::Value>(input)
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| input.to_string());
                let mut item = entry(event, since, "tool", text(event, "name"));
                item.folds.push(Fold {
                    summary: format!("input: {}", shown(input.lines().next().unwrap_or(""))),
                    body: shown(&body),
                    error: false,
                });
                if let Some(id) = event["id"].as_str() {
                    calls.insert(id.to_string(), entries.len());
                }
                item
            }
            "usage" => {
                let number = |field: &str| event[field].as_u64().unwrap_or(0);
                let mut head = format!(
                    "{} in / {} out tokens",
                    number("inputTokens"),
                    number("outputTokens")
                );
                if let Some(cost) = event["costUsd"].as_f64() {
                    head.push_str(&format!(", ${cost:.4}"));
                }
                entry(event, since, "usage", head)
            }
            other => {
                // A type this agentgate does not know: shown whole.
                let mut item = entry(event, since, "other", shown(other));
                item.text = Some(shown(&event.to_string()));
                item
            }
        };
        entries.push(item);
    }
    close_output(&mut entries, &mut output);
    (entries, left_out)
}

fn entry(
    event: &serde_json::Value,
    since: &dyn Fn(&serde_json::Value) -> Option<f64>,
    kind: &'static str,
    head: String,
) -> Entry {
    Entry {
        at: since(event).map_or("?".into(), |ms| format!("+{}", seconds(ms))),
        kind,
        source: shown(event["source"].as_str().unwrap_or("")),
        head,
        text: None,
        folds: Vec::new(),
    }
}

/// CPU and memory over time from the `resources` samples, and the samples as rows.
fn charts(
    events: &[serde_json::Value],
    since: &dyn Fn(&serde_json::Value) -> Option<f64>,
) -> (Vec<Chart>, Vec<[String; 4]>) {
    /// One `resources` event, at milliseconds since the run began.
    struct Sample {
        at: f64,
        cpu: f64,
        memory: f64,
        pids: u64,
    }
    let samples: Vec<Sample> = events
        .iter()
        .filter(|e| e["type"] == "resources")
        .filter_map(|e| {
            Some(Sample {
                at: since(e)?,
                cpu: e["cpuPercent"].as_f64()?,
                memory: e["memoryMB"].as_f64()?,
                pids: e["pids"].as_u64().unwrap_or(0),
            })
        })
        .collect();
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return (Vec::new(), Vec::new());
    };
    let span = (last.at - first.at).max(1.0);
    let chart = |title, unit, value: fn(&Sample) -> f64, floor: f64| {
        let top = samples.iter().map(value).fold(floor, f64::max) * 1.1;
        // The plot is 1000 × 200; SVG's y grows downwards.
        let points = samples
            .iter()
            .map(|s| {
                format!(
                    "{:.1},{:.1}",
                    (s.at - first.at) / span * 1000.0,
                    200.0 - value(s) / top * 200.0
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        Chart {
            title,
            unit,
            top: format!("{top:.0}"),
            end: seconds(span),
            points,
            last: format!("{:.1}", value(last)),
        }
    };
    let charts = vec![
        chart("CPU", "%", |s| s.cpu, 100.0),
        chart("Memory", "MiB", |s| s.memory, 1.0),
    ];
    let rows = samples
        .iter()
        .map(|s| {
            [
                format!("+{}", seconds(s.at)),
                format!("{:.1}", s.cpu),
                format!("{:.1}", s.memory),
                s.pids.to_string(),
            ]
        })
        .collect();
    (charts, rows)
}

/// `changes.patch` as files of classified lines, and whether all of it is shown.
fn diff(patch: &str) -> (Vec<DiffFile>, bool) {
    let mut files: Vec<DiffFile> = Vec::new();
    let mut shown_lines = 0;
    for line in patch.lines() {
        if let Some(names) = line.strip_prefix("diff --git ") {
            // `a/x b/x`; a quoted name (git's C-style quoting) is shown as git wrote it.
            let name = match names.rfind(" b/") {
                Some(at) if !names.starts_with('"') => &names[at + 3..],
                _ => names,
            };
            files.push(DiffFile {
                name: shown(name),
                added: 0,
                removed: 0,
                lines: Vec::new(),
            });
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        let class = if line.starts_with("+++") || line.starts_with("---") {
            "meta"
        } else if line.starts_with('+') {
            file.added += 1;
            "add"
        } else if line.starts_with('-') {
            file.removed += 1;
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with(' ') || line.is_empty() {
            "ctx"
        } else {
            "meta"
        };
        if shown_lines >= MAX_DIFF_LINES {
            return (files, false);
        }
        shown_lines += 1;
        file.lines.push((class, shown(line)));
    }
    (files, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_becomes_files_of_classified_lines() {
        let patch = "diff --git a/x.txt b/x.txt\nnew file mode 100644\n--- /dev/null\n+++ b/x.txt\n@@ -0,0 +1,2 @@\n+<script>\n+two\ndiff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-old\n+new\n \n";
        let (files, all) = diff(patch);
        assert!(all);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].name, "x.txt");
        assert_eq!((files[0].added, files[0].removed), (2, 0));
        assert_eq!(files[0].lines[4], ("add", "+<script>".to_string()));
        assert_eq!((files[1].added, files[1].removed), (1, 1));
        assert_eq!(files[1].lines[0].0, "meta");
        assert_eq!(files[1].lines[2].0, "hunk");
    }

    #[test]
    fn the_policy_names_the_stylesheet_by_its_hash_and_allows_nothing_else() {
        let home = tempfile::tempdir().unwrap();
        let folder = home.path().join("runs").join("r1");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("events.ndjson"),
            r#"{"ts":"2026-01-01T00:00:00.000Z","runId":"r1","source":"agent-command","type":"output","pipe":"stdout","line":"<script>alert(1)</script>"}"#,
        )
        .unwrap();
        let page = render(&crate::history::find(home.path(), "r1").unwrap());
        let digest = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(STYLE));
        // The template escapes the policy's quotes; the browser reads them back.
        assert!(
            page.replace("&#39;", "'").contains(&format!(
                "content=\"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'"
            )),
            "{page}"
        );
        assert!(page.contains(&format!("<style>{STYLE}</style>")));
        assert!(!page.contains("<script"), "{page}");
        assert!(
            page.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{page}"
        );
    }
}
