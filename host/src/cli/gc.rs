//! `agentgate gc`: clean up after runs whose `agentgate` died, and after runs whose
//! own cleanup left something (`cleanup-failed`).

use std::process::ExitCode;
use std::time::Duration;

use super::{fail, Cli, EXIT_ERROR};
use crate::gc::{GcOptions, ReapedRun, Scope};

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only orphans silent for at least this long (e.g. 30m, 2h); by default every one.
    #[arg(long, value_name = "DURATION", value_parser = crate::taskspec::parse_duration)]
    older_than: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(cli: &Cli, args: &GcArgs) -> ExitCode {
    let runtime = match cli.runtime().await {
        Ok(runtime) => runtime,
        Err(e) => return fail(e.exit_code(), e),
    };
    let options = GcOptions {
        dry_run: args.dry_run,
        older_than: args.older_than.unwrap_or(Duration::ZERO),
        scope: Scope::Everything,
    };
    let report = match crate::gc::collect(&runtime, cli.home(), &options).await {
        Ok(report) => report,
        Err(e) => return fail(EXIT_ERROR, e),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialize")
        );
    } else {
        let verb = if args.dry_run { "would reap" } else { "reaped" };
        for orphan in &report.orphans {
            println!(
                "{verb} run {}{}{}{}",
                orphan.run_id,
                reaped_objects(orphan),
                orphan
                    .workspace
                    .as_ref()
                    .map_or(String::new(), |w| format!("; kept its workspace {w}")),
                orphan
                    .result
                    .as_ref()
                    .map_or(String::new(), |r| format!("; marked crashed in {r}")),
            );
        }
        for run in &report.cleanup_failed {
            if args.dry_run || run.complete {
                println!(
                    "{verb} what the cleanup of finished run {} left{}{}",
                    run.run_id,
                    reaped_objects(run),
                    if args.dry_run {
                        ""
                    } else {
                        "; marked finished"
                    }
                );
            } else {
                println!(
                    "could not reap all that the cleanup of finished run {} left{}; it stays \
                     cleanup-failed (see the errors)",
                    run.run_id,
                    reaped_objects(run),
                );
            }
        }
        for object in &report.unknown {
            println!(
                "{verb} {} {} of unknown run {}",
                object.provider, object.id, object.run_id
            );
        }
        if report.orphans.is_empty()
            && report.cleanup_failed.is_empty()
            && report.unknown.is_empty()
        {
            println!("no orphans");
        }
        if !report.live.is_empty() {
            println!("left alone {} live run(s)", report.live.len());
        }
    }
    let failed = report
        .orphans
        .iter()
        .chain(&report.cleanup_failed)
        .any(|o| !o.complete);
    for error in &report.errors {
        eprintln!("{}: {error}", if failed { "error" } else { "warning" });
    }
    if failed {
        ExitCode::from(EXIT_ERROR)
    } else {
        ExitCode::SUCCESS
    }
}

/// `: ID, cgroup NAME, FOLDER` for what gc removed of one run, or nothing.
fn reaped_objects(run: &ReapedRun) -> String {
    let mut what: Vec<String> = run.leftovers.clone();
    // `cgroups` → `cgroup NAME`.
    what.extend(run.reclaimed.iter().flat_map(|(kind, names)| {
        let one = kind.strip_suffix('s').unwrap_or(kind);
        names.iter().map(move |name| format!("{one} {name}"))
    }));
    what.extend(run.folders.clone());
    if what.is_empty() {
        String::new()
    } else {
        format!(": {}", what.join(", "))
    }
}
