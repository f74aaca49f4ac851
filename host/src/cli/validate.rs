//! `agentgate validate FILE...`: check documents without touching the machine.
//!
//! Each document is parsed and checked; then its `options` are checked against the
//! schemas of the installed plugins. A value no installed plugin serves is only a
//! note: the document may be meant for another machine.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Cli;
use crate::engine::{resolve_plugins, PluginProblem};

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// TaskSpec files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub async fn run(cli: &Cli, args: &ValidateArgs) -> ExitCode {
    let runtime = match cli.runtime().await {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("note: plugins could not be loaded, so options are not checked: {e}");
            None
        }
    };
    let mut failed = false;
    for file in &args.files {
        let spec = match crate::taskspec::parse_file(file) {
            Ok(spec) => spec,
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", file.display());
                continue;
            }
        };
        let problems = match &runtime {
            Some(runtime) => resolve_plugins(runtime, &spec).err().unwrap_or_default(),
            None => Vec::new(),
        };
        let mut file_failed = false;
        for problem in &problems {
            match problem {
                PluginProblem::Unresolved(_) => eprintln!("{}: note: {problem}", file.display()),
                PluginProblem::Options(_) => {
                    file_failed = true;
                    eprintln!("{}: {problem}", file.display());
                }
            }
        }
        if file_failed {
            failed = true;
        } else {
            println!("{}: ok ({})", file.display(), spec.metadata.name);
        }
    }
    if failed {
        ExitCode::from(super::EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    }
}
