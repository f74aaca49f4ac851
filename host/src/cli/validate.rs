//! `agentgate validate FILE...`: check documents without touching the machine.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// TaskSpec files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(args: &ValidateArgs) -> ExitCode {
    let mut failed = false;
    for file in &args.files {
        match crate::taskspec::parse_file(file) {
            Ok(spec) => println!("{}: ok ({})", file.display(), spec.metadata.name),
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", file.display());
            }
        }
    }
    if failed {
        ExitCode::from(super::EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    }
}
