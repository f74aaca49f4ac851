//! `agentgate runs` and `agentgate show RUN`: the run history of a home, read from
//! its run folders ([`crate::history`]).

use std::process::ExitCode;

use super::progress::summary;
use super::table::{self, ago};
use super::{fail, Cli, EXIT_ERROR, EXIT_INVALID};
use crate::escape;
use crate::history::{self, HistoryError, Record, RecordedRun, RunSummary};

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    /// Only the newest N runs.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The run's id, or the start of it (`agentgate runs` lists them).
    run: String,
    /// Print result.json as one line of JSON instead of the summary.
    #[arg(long)]
    json: bool,
}

pub fn list(cli: &Cli, args: &RunsArgs) -> ExitCode {
    let runs = match history::list(cli.home(), args.limit) {
        Ok(runs) => runs,
        Err(e) => return fail(EXIT_ERROR, e),
    };
    let summaries: Vec<RunSummary> = runs.iter().map(RecordedRun::summary).collect();
    if args.json {
        match escape::json_line(&summaries) {
            Ok(line) => println!("{line}"),
            Err(e) => return fail(EXIT_ERROR, e),
        }
    } else {
        print!("{}", runs_table(&summaries));
    }
    ExitCode::SUCCESS
}

pub fn show(cli: &Cli, args: &ShowArgs) -> ExitCode {
    let run = match history::find(cli.home(), &args.run) {
        Ok(run) => run,
        Err(e) => return fail(history_exit_code(&e), e),
    };
    match &run.record {
        Record::Ended(result) if args.json => match escape::json_line(result) {
            Ok(line) => println!("{line}"),
            Err(e) => return fail(EXIT_ERROR, e),
        },
        Record::Ended(result) => print!("{}", summary(result, &run.folder)),
        Record::Pending { .. } => {
            let about = run.summary();
            if args.json {
                match escape::json_line(&about) {
                    Ok(line) => println!("{line}"),
                    Err(e) => return fail(EXIT_ERROR, e),
                }
            } else {
                println!(
                    "run {} ({}) has no result yet: {}\n  folder: {}",
                    escape::text(&run.run_id),
                    escape::text(about.name.as_deref().unwrap_or("?")),
                    match about.status.as_str() {
                        "running" => "it is running",
                        "orphaned" => "its agentgate died; `agentgate gc` cleans up and writes it",
                        _ => "the registry does not know it",
                    },
                    escape::text(&run.folder.display().to_string())
                );
            }
        }
        Record::Unreadable(why) => {
            return fail(
                EXIT_ERROR,
                format!("run {}: {}", run.run_id, escape::text(why)),
            )
        }
    }
    ExitCode::SUCCESS
}

/// A run that is not there is the caller's mistake; a home that cannot be read is not.
pub(super) fn history_exit_code(error: &HistoryError) -> u8 {
    match error {
        HistoryError::NotFound { .. } | HistoryError::Ambiguous { .. } => EXIT_INVALID,
        HistoryError::Home { .. } => EXIT_ERROR,
    }
}

fn runs_table(runs: &[RunSummary]) -> String {
    let header = [
        "RUN ID", "NAME", "STATUS", "STARTED", "DURATION", "PROVIDER", "DRIVER", "FILES", "TOKENS",
        "COST",
    ];
    let text = |value: Option<&str>| value.map_or("-".into(), |v| escape::text(v).into_owned());
    let rows = runs
        .iter()
        .map(|run| {
            vec![
                run.run_id.clone(),
                text(run.name.as_deref()),
                run.status.clone(),
                run.started_at
                    .as_deref()
                    .and_then(|at| humantime::parse_rfc3339_weak(at).ok())
                    .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or("-".into(), |since| ago(since.as_millis() as u64)),
                run.duration_ms.map_or("-".into(), duration),
                text(run.provider.as_deref()),
                text(run.driver.as_deref()),
                run.files_changed.map_or("-".into(), |n| n.to_string()),
                match (run.input_tokens, run.output_tokens) {
                    (None, None) => "-".into(),
                    (input, output) => {
                        format!("{} in / {} out", input.unwrap_or(0), output.unwrap_or(0))
                    }
                },
                run.cost_usd.map_or("-".into(), |c| format!("${c:.4}")),
            ]
        })
        .collect();
    table::render(&header, rows)
}

/// `4.2s`, `3m05s`, `1h02m`.
fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(4_240), "4.2s");
        assert_eq!(duration(185_000), "3m05s");
        assert_eq!(duration(3_720_000), "1h02m");
    }
}
