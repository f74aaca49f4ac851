//! `agentgate validate FILE...`: check documents without touching the machine.
//!
//! Each document is parsed and checked, and refused when it asks for what this version
//! does not do yet ([`crate::taskspec::check_supported`], as `run` refuses it); then its
//! `options` are checked against the
//! schemas of the installed plugins, and its host paths against the operator's host
//! path policy ([`crate::host_paths`]), as `run` would before it starts. A
//! value no installed plugin serves, or a host path that does not exist here (or is
//! relative), is only a note: the document may be meant for another machine.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Cli;
use crate::engine::{resolve_plugins, PluginProblem};
use crate::host_paths::HostPaths;
use crate::record::is_secret_name;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// TaskSpec files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub async fn run(cli: &Cli, args: &ValidateArgs) -> ExitCode {
    let mut failed = false;
    let (runtime, host_paths) = match cli.grants() {
        Ok(grants) => {
            let host_paths = HostPaths::of_this_host(
                &grants.paths,
                cli.home(),
                crate::capabilities::guarded_paths(),
            );
            let runtime = match cli.runtime_with(grants).await {
                Ok(runtime) => Some(runtime),
                Err(e) => {
                    eprintln!("note: plugins could not be loaded, so options are not checked: {e}");
                    None
                }
            };
            (runtime, Some(host_paths))
        }
        // Without the operator's grants neither plugins nor host paths can be judged.
        Err(e) => {
            eprintln!("error: {e}");
            failed = true;
            (None, None)
        }
    };
    for file in &args.files {
        let parsed = crate::taskspec::read(file).and_then(|text| {
            let spec = crate::taskspec::parse(&text, &file.to_string_lossy(), &|name| {
                std::env::var(name).ok()
            })?;
            Ok((text, spec))
        });
        let (text, spec) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", file.display());
                continue;
            }
        };
        for credential in crate::taskspec::literal_credentials(&text, &is_secret_name) {
            eprintln!("{}: warning: {credential}", file.display());
        }
        let mut file_failed = false;
        // Understood but not done yet: refused here as `run` refuses it.
        if let Err(unsupported) = crate::taskspec::check_supported(&spec) {
            file_failed = true;
            for refusal in &unsupported.refusals {
                eprintln!("{}: {refusal}", file.display());
            }
        }
        let problems = match &runtime {
            Some(runtime) => resolve_plugins(runtime, &spec).err().unwrap_or_default(),
            None => Vec::new(),
        };
        for problem in &problems {
            match problem {
                PluginProblem::Unresolved(_) => eprintln!("{}: note: {problem}", file.display()),
                PluginProblem::Options(_) => {
                    file_failed = true;
                    eprintln!("{}: {problem}", file.display());
                }
            }
        }
        for problem in host_paths.iter().flat_map(|paths| paths.check_spec(&spec)) {
            // Not found here, or relative (the seed format allows `./node_modules`):
            // `run` refuses it, but the document may be meant for another machine.
            if problem.refusal.is_input_error() {
                eprintln!("{}: note: {problem}", file.display());
            } else {
                file_failed = true;
                eprintln!("{}: {problem}", file.display());
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
