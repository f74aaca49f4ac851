//! The `agentgate` command line.
//!
//! Exit codes: 0 the run succeeded (or the command did); 1 the agent failed; 2 the
//! input is invalid (TaskSpec, options, flags); 3 a plugin or the host failed; 4 the
//! run timed out; 130 the run was interrupted (SIGINT, SIGTERM, SIGHUP or SIGQUIT, at
//! any point). `doctor` exits 0 when the provider it checks for can run here, 1 when not.

mod completions;
mod console;
mod doctor;
mod gc;
mod interrupt;
mod plugins;
mod progress;
#[cfg(test)]
mod reference;
mod report;
mod run;
mod runs;
mod sandboxes;
mod schema;
mod table;
mod validate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::{PathBufValueParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::runtime::grants::GrantsError;
use crate::runtime::{Grants, PluginLimits, Runtime, RuntimeConfig};
use interrupt::Interrupts;

#[derive(Debug, Parser)]
#[command(
    name = "agentgate",
    version,
    about = "Run AI coding agents on tasks, in sandboxes, through WebAssembly plugins."
)]
/// The command line: global options and one subcommand.
pub struct Cli {
    /// Where runs, caches and grants live; a relative path is taken from the current
    /// directory.
    // Made absolute once, here, so every later use (run folders, fresh workspaces,
    // the cache) sees the same absolute path.
    #[arg(
        long,
        global = true,
        env = "AGENTGATE_HOME",
        default_value_os_t = default_home(),
        value_parser = PathBufValueParser::new().try_map(std::path::absolute),
    )]
    home: PathBuf,
    /// Extra plugin directory (repeatable); also AGENTGATE_PLUGIN_PATH, colon-separated.
    #[arg(long = "plugin-dir", global = true)]
    plugin_dirs: Vec<PathBuf>,
    /// Grant host interfaces to a plugin for this invocation: NAME=CAP[,CAP...]; a
    /// `CAP:KEY=VALUE` item grants CAP and widens its scope (http:HOST,
    /// process:unsealed, process:program=PATH, docker:image=GLOB, docker:hostNetwork,
    /// git:remote=GLOB, git:push, github:repo=OWNER/NAME, github:create, github:fork).
    #[arg(long = "grant", global = true, value_name = "NAME=CAPS")]
    grants: Vec<String>,
    /// Bound of the compile cache (e.g. 512Mi, 2Gi); least recently used entries are
    /// evicted past it.
    #[arg(
        long = "cache-size",
        global = true,
        env = "AGENTGATE_CACHE_SIZE",
        default_value = "1Gi",
        value_name = "SIZE",
        value_parser = crate::taskspec::parse_bytes,
    )]
    cache_size: u64,
    /// How old the revocation lists of installed plugins may be before a command that
    /// loads plugins fetches them again (e.g. 30m, 1h); offline, the last lists hold.
    #[arg(
        long = "revocation-max-age",
        global = true,
        env = "AGENTGATE_REVOCATION_MAX_AGE",
        default_value = "1h",
        value_name = "AGE",
        value_parser = humantime::parse_duration,
    )]
    revocation_max_age: std::time::Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a TaskSpec end to end.
    Run(run::RunArgs),
    /// Check TaskSpec files without running them.
    Validate(validate::ValidateArgs),
    /// Print the JSON Schema of the TaskSpec format (or, with --result, of result.json).
    Schema(schema::SchemaArgs),
    /// List and inspect plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// List the runs and sandboxes the registry tracks, like `docker ps`.
    Sandboxes(sandboxes::SandboxesArgs),
    /// Clean up after runs whose agentgate died: containers, processes, cgroups, sandbox
    /// state. Workspaces and what the runs recorded are kept.
    Gc(gc::GcArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Check everything a run needs on this machine, each with what was found and the fix.
    Doctor(doctor::DoctorArgs),
    /// The run history of this home, newest first.
    Runs(runs::RunsArgs),
    /// One run's summary, as `run` prints it at the end.
    Show(runs::ShowArgs),
    /// Write one run as a self-contained HTML page for review.
    Report(report::ReportArgs),
}

/// Exit code for invalid input.
pub(crate) const EXIT_INVALID: u8 = 2;
/// Exit code for a host or plugin failure.
pub(crate) const EXIT_ERROR: u8 = 3;

/// Parses the command line, runs the subcommand on a Tokio runtime and returns its
/// exit code (listed in `docs/commands.md`).
pub fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(EXIT_ERROR, format!("cannot start the async runtime: {e}")),
    };
    let code = runtime.block_on(async {
        // First, so that no signal from here on kills the host outright.
        let interrupts = match Interrupts::install() {
            Ok(interrupts) => interrupts,
            Err(e) => return fail(EXIT_ERROR, format!("cannot handle signals: {e}")),
        };
        Cli::parse().dispatch(&interrupts).await
    });
    // Exit once the reader has taken everything the command printed.
    console::close();
    code
}

/// `~/.agentgate`, or `./.agentgate` where `HOME` is not set.
fn default_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".agentgate")
}

/// Why the plugins could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    /// The operator's grants (file or flags) are invalid: input, not a host failure.
    #[error(transparent)]
    Grants(#[from] GrantsError),
    /// The marketplace's files (plugins.lock, trust store, revocations).
    #[error(transparent)]
    Marketplace(#[from] crate::marketplace::MarketError),
    /// The runtime could not be built.
    #[error(transparent)]
    Runtime(crate::runtime::RuntimeError),
}

impl LoadError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            LoadError::Grants(_) => EXIT_INVALID,
            LoadError::Marketplace(e) if e.is_input() => EXIT_INVALID,
            LoadError::Marketplace(_) | LoadError::Runtime(_) => EXIT_ERROR,
        }
    }
}

impl Cli {
    async fn dispatch(&self, interrupts: &Interrupts) -> ExitCode {
        match &self.command {
            Command::Schema(args) => schema::print(args),
            Command::Validate(args) => validate::run(self, args).await,
            Command::Run(args) => run::run(self, args, interrupts).await,
            Command::Plugins(command) => plugins::run(self, command).await,
            Command::Sandboxes(args) => sandboxes::run(self, args),
            Command::Gc(args) => gc::run(self, args).await,
            Command::Completions(args) => completions::print(args),
            Command::Doctor(args) => doctor::run(self, args).await,
            Command::Runs(args) => runs::list(self, args),
            Command::Show(args) => runs::show(self, args),
            Command::Report(args) => report::run(self, args),
        }
    }

    /// `AGENTGATE_HOME`, absolute.
    fn home(&self) -> &Path {
        &self.home
    }

    /// The root of the plugin caches (compiled components and descriptions).
    fn cache(&self) -> crate::runtime::cache::PluginCache {
        crate::runtime::cache::PluginCache::new(&self.cache_dir(), self.cache_size)
    }

    fn cache_dir(&self) -> PathBuf {
        self.home().join("cache")
    }

    /// The plugin directories: `AGENTGATE_PLUGIN_PATH`'s, then `--plugin-dir`s.
    fn plugin_dirs(&self) -> Vec<PathBuf> {
        let mut plugin_dirs: Vec<PathBuf> = std::env::var_os("AGENTGATE_PLUGIN_PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        plugin_dirs.extend(self.plugin_dirs.iter().cloned());
        plugin_dirs
    }

    /// Loads the runtime with this invocation's plugin directories and grants.
    /// Components never seen before are compiled and described, with progress shown.
    async fn runtime(&self) -> Result<std::sync::Arc<Runtime>, LoadError> {
        let grants = self.grants()?;
        self.runtime_with(grants).await
    }

    /// The operator's grants: `grants.yaml`, then `--grant` flags and the base URLs
    /// built-ins take from the environment (the Agent SDK driver's
    /// `ANTHROPIC_BASE_URL`). What the file should change is printed as a warning.
    fn grants(&self) -> Result<Grants, LoadError> {
        let mut grants = Grants::from_file(&self.home().join("grants.yaml"))?;
        for warning in &grants.warnings {
            eprintln!("warning: {warning}");
        }
        // Installed plugins: the grants consented to at install.
        crate::marketplace::Lockfile::load(&self.market_home().lockfile())?
            .add_grants(&mut grants)?;
        for flag in &self.grants {
            grants.add_flag(flag)?;
        }
        // The built-in that takes one may reach this host, and only it.
        for variable in crate::runtime::grants::base_url_variables() {
            if let Some(url) = std::env::var(variable).ok().filter(|u| !u.is_empty()) {
                grants.set_base_url(variable, &url)?;
            }
        }
        Ok(grants)
    }

    /// Where the marketplace keeps installed plugins, the lockfile and trust store.
    fn market_home(&self) -> crate::marketplace::MarketHome {
        crate::marketplace::MarketHome::new(self.home())
    }

    /// Loads the runtime with this invocation's plugin directories, the installed
    /// plugins (revocations refreshed when stale) and `grants`.
    async fn runtime_with(&self, grants: Grants) -> Result<std::sync::Arc<Runtime>, LoadError> {
        let (installed, warnings) = crate::marketplace::load::installed_plugins(
            &self.market_home(),
            self.revocation_max_age,
            &grants.marketplace,
        )
        .await?;
        for warning in warnings {
            eprintln!("warning: {warning}");
        }
        Runtime::new(RuntimeConfig {
            cache_dir: Some(self.cache_dir()),
            cache_max_bytes: self.cache_size,
            installed,
            plugin_dirs: self.plugin_dirs(),
            grants,
            limits: PluginLimits::default(),
            observer: Some(std::sync::Arc::new(progress::CompileProgress::default())),
        })
        .await
        .map_err(LoadError::Runtime)
    }
}

/// Prints `message` as an error (after what the console still holds) and returns `code`.
pub(crate) fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    let line = format!("error: {message}");
    console::console().print(move || console::write_stderr(&line));
    ExitCode::from(code)
}
