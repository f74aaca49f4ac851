//! `agentgate sandboxes`: what the registry tracks, like `docker ps`.

use std::process::ExitCode;

use super::table::{self, ago};
use super::{fail, Cli, EXIT_ERROR};
use crate::registry::{effective_state, Registry, RunRow};

#[derive(Debug, clap::Args)]
pub struct SandboxesArgs {
    /// Also list finished and crashed runs (by default: running, orphaned and
    /// cleanup-failed ones).
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

fn table(rows: &[RunRow]) -> String {
    let header = [
        "RUN ID", "PROVIDER", "SANDBOX", "STATE", "CREATED", "OWNER", "NAME",
    ];
    let rows = rows
        .iter()
        .map(|row| {
            let sandbox = row.sandbox.as_ref();
            let owner_pid = row
                .owner
                .split(',')
                .find_map(|part| part.strip_prefix("pid="))
                .unwrap_or("?");
            vec![
                row.run_id.chars().take(12).collect(),
                sandbox.map_or("-".into(), |s| s.provider.clone()),
                sandbox
                    .and_then(|s| s.sandbox_id.as_deref())
                    .map_or("-".into(), |id| id.chars().take(12).collect()),
                effective_state(row).to_string(),
                ago(row.started_ms),
                owner_pid.to_string(),
                row.name.clone(),
            ]
        })
        .collect();
    table::render(&header, rows)
}
