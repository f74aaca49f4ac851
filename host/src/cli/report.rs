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

/// The page's name in the run's folder.
const REPORT_FILE: &str = "report.html";

pub fn run(cli: &Cli, args: &ReportArgs) -> ExitCode {
    let run = match history::find(cli.home(), &args.run) {
        Ok(run) => run,
        Err(e) => return fail(history_exit_code(&e), e),
    };
    let page = crate::report::render(&run);
    // The page goes where the user said, or beside the run's record, replacing
    // whatever is at its name there (never writing through a planted link).
    let (path, written) = match &args.output {
        Some(path) if path.as_os_str() == "-" => {
            print!("{page}");
            return ExitCode::SUCCESS;
        }
        Some(path) => (path.clone(), std::fs::write(path, page)),
        None => (
            run.folder.join(REPORT_FILE),
            run.opened()
                .and_then(|folder| folder.replace(REPORT_FILE, page.as_bytes())),
        ),
    };
    if let Err(e) = written {
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
