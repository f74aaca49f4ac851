//! The run history of a home: run folders read back, for `agentgate runs`, `show`
//! and `report`.
//!
//! The folders are the history: each run writes `result.json` when it ends, and
//! `agentgate gc` writes one (status `crashed`) for a run whose agentgate died, so
//! every run that is over has one. A folder without a result is a run still under
//! way, or one whose agentgate died and no gc has seen yet: the sandbox registry
//! tells which. Run ids are UUIDv7, ordered by when the run began, so the newest
//! runs are found without reading the others. Everything read here was masked when
//! it was written; nothing here writes. Each folder is read through
//! [`OpenedRunFolder`]: no symlink is followed, no FIFO blocks a read, every read is
//! bounded.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::record::{OpenedRunFolder, RunResult, RunStatus, RESULT_VERSION};
use crate::registry::{effective_state, Registry, RunRow, RunState};

/// The most of `changes.patch` read back.
pub const MAX_PATCH_BYTES: u64 = 8 << 20;

/// The most of `result.json` or `taskspec.json` read back: far above what a run writes.
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Why the runs of a home could not be listed, or a run not found.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The home's `runs/` folder could not be read.
    #[error("cannot read the runs of {}: {source}", home.display())]
    Home {
        /// The home whose runs were asked for.
        home: PathBuf,
        /// Why `runs/` could not be read.
        source: std::io::Error,
    },
    /// No run's id is, or starts with, the one asked for.
    #[error(
        "no run {wanted:?} in {}; `agentgate runs` lists them",
        home.display()
    )]
    NotFound {
        /// The home searched.
        home: PathBuf,
        /// The id, or start of one, asked for.
        wanted: String,
    },
    /// More than one run's id starts with the one asked for.
    #[error("{wanted:?} names {count} runs ({}); give more of the id", examples.join(", "))]
    Ambiguous {
        /// The start of an id asked for.
        wanted: String,
        /// How many runs' ids start with it.
        count: usize,
        /// Up to three of those ids, for the message.
        examples: Vec<String>,
    },
}

/// One run as its folder (and, while it has no result, the registry) records it.
#[derive(Debug)]
pub struct RecordedRun {
    /// The run's id: the name of its folder.
    pub run_id: String,
    /// `AGENTGATE_HOME/runs/<run-id>/`.
    pub folder: PathBuf,
    /// What is known of how the run ended, or that it has not.
    pub record: Record,
}

/// What a run folder says of its end: its result, or why there is none to read.
#[derive(Debug)]
pub enum Record {
    /// The run is over: its `result.json`.
    Ended(Box<RunResult>),
    /// No result yet. `state` is `running` or `orphaned` (its agentgate died; `gc`
    /// cleans up and writes the result); `None` when the registry does not know the
    /// run either.
    Pending {
        /// The TaskSpec's `metadata.name`, from the registry; `None` when it does not know the
        /// run.
        name: Option<String>,
        /// When the run started, in milliseconds since the Unix epoch, from the registry.
        started_ms: Option<u64>,
        /// `running` or `orphaned`; `None` when the registry does not know the run.
        state: Option<RunState>,
    },
    /// `result.json` is there but cannot be read.
    Unreadable(String),
}

/// One line of `agentgate runs`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The run's id: 32 hex digits of a UUIDv7, so ids sort by start.
    pub run_id: String,
    /// The TaskSpec's `metadata.name`; absent when neither the result, the run's
    /// `taskspec.json` nor the registry names it.
    pub name: Option<String>,
    /// A `result.json` status (`succeeded`, `failed`, `timedOut`, …), or `running`,
    /// `orphaned`, `unknown` (no result and no registry row), `unreadable`.
    pub status: String,
    /// RFC 3339.
    pub started_at: Option<String>,
    /// The whole run, as `result.json` gives it; absent until the run has a result.
    pub duration_ms: Option<u64>,
    /// The TaskSpec's `sandbox.provider`, when known.
    pub provider: Option<String>,
    /// The TaskSpec's `agent.driver`, when known.
    pub driver: Option<String>,
    /// Entries in the result's `modifiedFiles`; absent without a result, or for a crashed run,
    /// which never compared its workspace.
    pub files_changed: Option<usize>,
    /// Reported by the agent driver, when it reports them.
    pub input_tokens: Option<u64>,
    /// Reported by the agent driver, when it reports them.
    pub output_tokens: Option<u64>,
    /// In US dollars, reported by the agent driver, when it reports it.
    pub cost_usd: Option<f64>,
    /// The run's folder.
    pub folder: PathBuf,
}

/// The newest `limit` runs of `home` (all with `None`), newest first.
pub fn list(home: &Path, limit: Option<usize>) -> Result<Vec<RecordedRun>, HistoryError> {
    let mut ids = run_ids(home)?;
    ids.truncate(limit.unwrap_or(usize::MAX));
    let registry = RegistryView::open(home);
    Ok(ids
        .into_iter()
        .map(|id| RecordedRun::read(home, id, &registry))
        .collect())
}

/// The run whose id is `wanted`, or the only one whose id starts with it.
pub fn find(home: &Path, wanted: &str) -> Result<RecordedRun, HistoryError> {
    let not_found = || HistoryError::NotFound {
        home: home.to_path_buf(),
        wanted: wanted.to_string(),
    };
    let ids = run_ids(home)?;
    let mut matching: Vec<String> = match ids.iter().find(|id| *id == wanted) {
        Some(exact) => vec![exact.clone()],
        None if wanted.is_empty() => Vec::new(),
        None => ids
            .into_iter()
            .filter(|id| id.starts_with(wanted))
            .collect(),
    };
    match matching.len() {
        0 => Err(not_found()),
        1 => Ok(RecordedRun::read(
            home,
            matching.remove(0),
            &RegistryView::open(home),
        )),
        count => Err(HistoryError::Ambiguous {
            wanted: wanted.to_string(),
            count,
            examples: matching.into_iter().take(3).collect(),
        }),
    }
}

/// The names of the run folders, newest first. A home with no runs yet (or no home
/// yet) has none.
fn run_ids(home: &Path) -> Result<Vec<String>, HistoryError> {
    let runs = home.join("runs");
    let entries = match std::fs::read_dir(&runs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(HistoryError::Home {
                home: home.to_path_buf(),
                source,
            })
        }
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    Ok(ids)
}

/// The registry's rows, when the home has a registry.
struct RegistryView {
    rows: Vec<RunRow>,
}

impl RegistryView {
    fn open(home: &Path) -> RegistryView {
        // Opening creates a registry; a home without one has no runs in progress.
        let rows = if home.join("registry.db").is_file() {
            Registry::open(home)
                .and_then(|registry| registry.runs(true))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        RegistryView { rows }
    }

    fn row(&self, run_id: &str) -> Option<&RunRow> {
        self.rows.iter().find(|row| row.run_id == run_id)
    }
}

impl RecordedRun {
    fn read(home: &Path, run_id: String, registry: &RegistryView) -> RecordedRun {
        let folder = home.join("runs").join(&run_id);
        let text = OpenedRunFolder::open(&folder)
            .and_then(|opened| opened.read("result.json", MAX_RECORD_BYTES));
        let record = match text {
            Ok((_, true)) => Record::Unreadable(format!(
                "result.json: larger than {} MiB",
                MAX_RECORD_BYTES >> 20
            )),
            Ok((bytes, false)) => match parse_result(&String::from_utf8_lossy(&bytes)) {
                Ok(result) => Record::Ended(Box::new(result)),
                Err(why) => Record::Unreadable(format!("result.json: {why}")),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let row = registry.row(&run_id);
                Record::Pending {
                    name: row.map(|r| r.name.clone()),
                    started_ms: row.map(|r| r.started_ms),
                    state: row.map(effective_state),
                }
            }
            Err(e) => Record::Unreadable(format!("result.json: {e}")),
        };
        RecordedRun {
            run_id,
            folder,
            record,
        }
    }

    /// The run's folder, opened to be read (or added to) without following links.
    pub fn opened(&self) -> std::io::Result<OpenedRunFolder> {
        OpenedRunFolder::open(&self.folder)
    }

    /// The result, when the run is over and it could be read.
    pub fn result(&self) -> Option<&RunResult> {
        match &self.record {
            Record::Ended(result) => Some(result),
            _ => None,
        }
    }

    /// The TaskSpec the run recorded (`taskspec.json`), when there is one.
    pub fn taskspec(&self) -> Option<serde_json::Value> {
        let (bytes, cut) = self
            .opened()
            .and_then(|opened| opened.read("taskspec.json", MAX_RECORD_BYTES))
            .ok()?;
        (!cut)
            .then(|| serde_json::from_slice(&bytes).ok())
            .flatten()
    }

    /// The events of `events.ndjson` in order; a line that is not a JSON object is
    /// skipped (a crash can cut the last one short).
    pub fn events(&self) -> impl Iterator<Item = serde_json::Value> {
        let lines = self
            .opened()
            .and_then(|opened| opened.open_file("events.ndjson"))
            .map(|file| BufReader::new(file).lines())
            .ok();
        lines
            .into_iter()
            .flatten()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(&line).ok())
            .filter(serde_json::Value::is_object)
    }

    /// `changes.patch` (git workspaces), at most [`MAX_PATCH_BYTES`] of it, and
    /// whether it was cut there.
    pub fn patch(&self) -> Option<(String, bool)> {
        let (bytes, cut) = self
            .opened()
            .and_then(|opened| opened.read("changes.patch", MAX_PATCH_BYTES))
            .ok()?;
        Some((String::from_utf8_lossy(&bytes).into_owned(), cut))
    }

    /// The run in one line of `agentgate runs`.
    pub fn summary(&self) -> RunSummary {
        let spec = self.taskspec();
        let from_spec = |section: &str, field: &str| {
            spec.as_ref()
                .and_then(|s| s["spec"]["execution"][section][field].as_str())
                .map(str::to_string)
        };
        let mut summary = RunSummary {
            run_id: self.run_id.clone(),
            name: spec
                .as_ref()
                .and_then(|s| s["metadata"]["name"].as_str())
                .map(str::to_string),
            status: String::new(),
            started_at: None,
            duration_ms: None,
            provider: from_spec("sandbox", "provider"),
            driver: from_spec("agent", "driver"),
            files_changed: None,
            input_tokens: None,
            output_tokens: None,
            cost_usd: None,
            folder: self.folder.clone(),
        };
        match &self.record {
            Record::Ended(result) => {
                summary.name = Some(result.name.clone());
                summary.status = status_name(result.status);
                summary.started_at = Some(result.started_at.clone());
                summary.duration_ms = Some(result.duration_ms);
                if let Some(sandbox) = &result.sandbox {
                    summary.provider = Some(sandbox.provider.clone());
                }
                // A run that fails before the agent ends has no agent record.
                if let Some(agent) = &result.agent {
                    summary.driver = Some(agent.driver.clone());
                    let usage = agent.usage.as_ref();
                    let number = |field: &str| usage.and_then(|u| u[field].as_u64());
                    summary.input_tokens = number("inputTokens");
                    summary.output_tokens = number("outputTokens");
                    summary.cost_usd = usage.and_then(|u| u["costUsd"].as_f64());
                }
                // `crashed` runs never compared their workspace.
                if result.changes_from != "none" {
                    summary.files_changed = Some(result.modified_files.len());
                }
            }
            Record::Pending {
                name,
                started_ms,
                state,
            } => {
                summary.name = summary.name.take().or_else(|| name.clone());
                summary.status = state.map_or("unknown".into(), |s| s.to_string());
                summary.started_at = started_ms.map(|ms| {
                    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
                    humantime::format_rfc3339_millis(at).to_string()
                });
            }
            Record::Unreadable(_) => summary.status = "unreadable".into(),
        }
        summary
    }
}

/// A status as `result.json` spells it.
pub fn status_name(status: RunStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Why a `result.json` is not read.
#[derive(Debug, thiserror::Error)]
enum ResultError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(
        "version {0} was written by a newer agentgate (this one reads up to {RESULT_VERSION})"
    )]
    Newer(u32),
}

/// Reads `result.json`, refusing one a newer agentgate wrote in a shape this one does
/// not know.
fn parse_result(text: &str) -> Result<RunResult, ResultError> {
    #[derive(serde::Deserialize)]
    struct Version {
        version: u32,
    }
    let version = serde_json::from_str::<Version>(text)?.version;
    if version > RESULT_VERSION {
        return Err(ResultError::Newer(version));
    }
    Ok(serde_json::from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(home: &Path, id: &str, result: Option<&str>) {
        let dir = home.join("runs").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(result) = result {
            std::fs::write(dir.join("result.json"), result).unwrap();
        }
    }

    #[test]
    fn runs_are_found_newest_first_by_id_or_unique_prefix() {
        let home = tempfile::tempdir().unwrap();
        assert!(list(home.path(), None).unwrap().is_empty());
        for id in ["0190aa01", "0190aa02", "0190bb03"] {
            folder(home.path(), id, None);
        }
        let ids: Vec<String> = list(home.path(), Some(2))
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, ["0190bb03", "0190aa02"]);
        assert_eq!(find(home.path(), "0190b").unwrap().run_id, "0190bb03");
        assert_eq!(find(home.path(), "0190aa01").unwrap().run_id, "0190aa01");
        let ambiguous = find(home.path(), "0190aa").unwrap_err().to_string();
        assert!(ambiguous.contains("names 2 runs"), "{ambiguous}");
        for missing in ["ff", "", "../runs"] {
            assert!(matches!(
                find(home.path(), missing),
                Err(HistoryError::NotFound { .. })
            ));
        }
        // No result and no registry row.
        assert_eq!(
            find(home.path(), "0190b").unwrap().summary().status,
            "unknown"
        );
    }

    #[test]
    fn a_result_from_a_newer_agentgate_is_unreadable_not_misread() {
        let home = tempfile::tempdir().unwrap();
        folder(home.path(), "r1", Some(r#"{"version": 99, "runId": "r1"}"#));
        folder(home.path(), "r2", Some("{not json"));
        for id in ["r1", "r2"] {
            let run = find(home.path(), id).unwrap();
            assert_eq!(run.summary().status, "unreadable");
        }
        let Record::Unreadable(why) = find(home.path(), "r1").unwrap().record else {
            panic!("read a newer result")
        };
        assert!(why.contains("newer agentgate"), "{why}");
    }
}
