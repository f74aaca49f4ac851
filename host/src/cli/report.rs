//! `agentgate report RUN`: one run as a self-contained HTML page ([`crate::report`]).

use std::path::PathBuf;
use std::process::ExitCode;

use super::runs::history_exit_code;
use super::{fail, Cli, EXIT_ERROR};
use crate::escape;
use crate::history;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The run's id, or the start of it (`agentgate runs` lists them).
    run: String,
    /// Where to write the page (`-` for stdout); by default `report.html` in the run's
    /// folder.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(cli: &Cli, args: &ReportArgs) -> ExitCode {
    let run = match history::find(cli.home(), &args.run) {
        Ok(run) => run,
        Err(e) => return fail(history_exit_code(&e), e),
    };
    let page = crate::report::render(&run);
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| run.folder.join("report.html"));
    if path.as_os_str() == "-" {
        print!("{page}");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = std::fs::write(&path, page) {
        return fail(
            EXIT_ERROR,
            format!(
                "cannot write {}: {e}",
                escape::text(&path.display().to_string())
            ),
        );
    }
    println!("{}", escape::text(&path.display().to_string()));
    ExitCode::SUCCESS
}
