//! The `agentgate` command line.
//!
//! Exit codes: 0 the run succeeded (or the command did); 1 the agent failed; 2 the
//! input is invalid (TaskSpec, options, flags); 3 a plugin or the host failed; 4 the
//! run timed out; 130 the run was interrupted.

mod plugins;
mod progress;
mod run;
mod schema;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::runtime::{Grants, PluginLimits, Runtime, RuntimeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "agentgate",
    version,
    about = "Run AI coding agents on tasks, in sandboxes, through WebAssembly plugins."
)]
pub struct Cli {
    /// Where runs, caches and grants live.
    #[arg(long, global = true, env = "AGENTGATE_HOME")]
    home: Option<PathBuf>,
    /// Extra plugin directory (repeatable); also AGENTGATE_PLUGIN_PATH, colon-separated.
    #[arg(long = "plugin-dir", global = true)]
    plugin_dirs: Vec<PathBuf>,
    /// Grant host interfaces to a plugin for this invocation: NAME=CAP[,CAP...].
    #[arg(long = "grant", global = true, value_name = "NAME=CAPS")]
    grants: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a TaskSpec end to end.
    Run(run::RunArgs),
    /// Check TaskSpec files without running them.
    Validate(validate::ValidateArgs),
    /// Print the JSON Schema of the TaskSpec format.
    Schema,
    /// List and inspect plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
}

/// Exit code for invalid input.
pub(crate) const EXIT_INVALID: u8 = 2;
/// Exit code for a host or plugin failure.
pub(crate) const EXIT_ERROR: u8 = 3;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the async runtime");
    runtime.block_on(cli.dispatch())
}

impl Cli {
    async fn dispatch(self) -> ExitCode {
        match &self.command {
            Command::Schema => schema::print(),
            Command::Validate(args) => validate::run(&self, args).await,
            Command::Run(args) => run::run(&self, args).await,
            Command::Plugins(command) => plugins::run(&self, command).await,
        }
    }

    fn home(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            home.join(".agentgate")
        })
    }

    /// Loads the runtime with this invocation's plugin directories and grants.
    async fn runtime(&self) -> Result<std::sync::Arc<Runtime>, String> {
        let home = self.home();
        let mut grants = Grants::from_file(&home.join("grants.yaml")).map_err(|e| e.to_string())?;
        for flag in &self.grants {
            grants.add_flag(flag).map_err(|e| e.to_string())?;
        }
        let mut plugin_dirs: Vec<PathBuf> = std::env::var_os("AGENTGATE_PLUGIN_PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        plugin_dirs.extend(self.plugin_dirs.iter().cloned());
        Runtime::new(RuntimeConfig {
            cache_dir: Some(home.join("cache").join("components")),
            plugin_dirs,
            grants,
            limits: PluginLimits::default(),
        })
        .await
        .map_err(|e| format!("{e:#}"))
    }
}

/// Prints `message` as an error and returns `code`.
pub(crate) fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}
