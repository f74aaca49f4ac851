//! `agentgate sandboxes`: what the registry tracks, like `docker ps`.

use std::process::ExitCode;
use std::time::Duration;

use super::{fail, Cli, EXIT_ERROR};
use crate::registry::{effective_state, now_ms, Registry, RunRow};

#[derive(Debug, clap::Args)]
pub struct SandboxesArgs {
    /// Also list finished and crashed runs (by default: running and orphaned ones).
    #[arg(long, short)]
    all: bool,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(cli: &Cli, args: &SandboxesArgs) -> ExitCode {
    let rows = match Registry::open(cli.home()).and_then(|r| r.runs(args.all)) {
        Ok(rows) => rows,
        Err(e) => return fail(EXIT_ERROR, e),
    };
    if args.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                let mut value = serde_json::to_value(row).expect("rows serialize");
                value["state"] =
                    serde_json::to_value(effective_state(row)).expect("states serialize");
                value
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        print!("{}", table(&rows));
    }
    ExitCode::SUCCESS
}

/// Columns padded to their widest cell, as `docker ps` prints them.
fn table(rows: &[RunRow]) -> String {
    let header = [
        "RUN ID", "PROVIDER", "SANDBOX", "STATE", "CREATED", "OWNER", "NAME",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let sandbox = row.sandbox.as_ref();
        let owner_pid = row
            .owner
            .split(',')
            .find_map(|part| part.strip_prefix("pid="))
            .unwrap_or("?");
        lines.push(vec![
            row.run_id.chars().take(12).collect(),
            sandbox.map_or("-".into(), |s| s.provider.clone()),
            sandbox
                .and_then(|s| s.sandbox_id.as_deref())
                .map_or("-".into(), |id| id.chars().take(12).collect()),
            effective_state(row).to_string(),
            ago(row.started_ms),
            owner_pid.to_string(),
            row.name.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// "5 minutes ago", as `docker ps` says it.
fn ago(ms: u64) -> String {
    let elapsed = Duration::from_millis(now_ms().saturating_sub(ms)).as_secs();
    let (n, unit) = match elapsed {
        0 => return "Less than a second ago".into(),
        s if s < 60 => (s, "second"),
        s if s < 3600 => (s / 60, "minute"),
        s if s < 86_400 => (s / 3600, "hour"),
        s => (s / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_docker_ps() {
        assert_eq!(ago(now_ms() - 90_000), "1 minute ago");
        assert_eq!(ago(now_ms() - 7_200_000), "2 hours ago");
    }
}
