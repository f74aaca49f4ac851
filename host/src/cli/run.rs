//! `agentgate run TASK.yaml`.

use std::path::PathBuf;
use std::process::ExitCode;

use super::interrupt::Interrupts;
use super::progress::Progress;
use super::{fail, Cli, EXIT_ERROR, EXIT_INVALID};
use crate::engine::{self, RunError, RunRequest};
use crate::record::{is_secret_name, Redactor};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The TaskSpec to run.
    task: PathBuf,
    /// The goal prompt, replacing (or supplying) `spec.goal.prompt`.
    #[arg(long)]
    prompt: Option<String>,
    /// Print events as NDJSON on stdout instead of the live display.
    #[arg(long)]
    json: bool,
    /// Pass this host environment variable to the agent driver as a secret (repeatable).
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
}

pub async fn run(cli: &Cli, args: &RunArgs, interrupts: &Interrupts) -> ExitCode {
    let text = match crate::taskspec::read(&args.task) {
        Ok(text) => text,
        Err(e) => return fail(EXIT_INVALID, format!("{}: {e}", args.task.display())),
    };
    // Values of secret-looking ${VAR}s are remembered so the run can mask them.
    let interpolated_secrets = std::cell::RefCell::new(Vec::new());
    let lookup = |name: &str| {
        let value = std::env::var(name).ok();
        if let Some(value) = value.as_ref().filter(|_| is_secret_name(name)) {
            interpolated_secrets.borrow_mut().push(value.clone());
        }
        value
    };
    let spec = match crate::taskspec::parse(&text, &args.task.to_string_lossy(), &lookup) {
        Ok(spec) => spec,
        Err(e) => {
            return fail(
                EXIT_INVALID,
                Redactor::new(interpolated_secrets.take())
                    .apply(format!("{}: {e}", args.task.display())),
            )
        }
    };
    // Understood but not done yet: refused before anything loads, as `validate` refuses
    // it (the engine checks again for callers of the library).
    if let Err(unsupported) = crate::taskspec::check_supported(&spec) {
        let lines: Vec<_> = unsupported
            .refusals
            .iter()
            .map(|refusal| format!("{}: {refusal}", args.task.display()))
            .collect();
        return fail(EXIT_INVALID, lines.join("\n"));
    }
    for credential in crate::taskspec::literal_credentials(&text, &is_secret_name) {
        eprintln!("{}: warning: {credential}", args.task.display());
    }
    let mut secrets = Vec::new();
    for name in &args.secret_env {
        match std::env::var(name) {
            Ok(value) => secrets.push((name.clone(), value)),
            Err(_) => {
                return fail(
                    EXIT_INVALID,
                    format!("--secret-env {name}: the variable is not set"),
                )
            }
        }
    }
    // The run's clock starts before the plugins are found: loading is part of it.
    let started = tokio::time::Instant::now();
    let runtime = match cli.runtime().await {
        Ok(runtime) => runtime,
        Err(e) => return fail(e.exit_code(), e),
    };
    let progress = Progress::new(args.json);
    let mut request = RunRequest::new(spec, cli.home().to_path_buf());
    request.prompt = args.prompt.clone();
    request.secrets = secrets;
    request.redact = interpolated_secrets.into_inner();
    request.observer = Some(progress.observer());
    request.cancel = Box::pin(interrupts.take_over());
    request.started = started;

    match engine::run(&runtime, request).await {
        Ok(report) => {
            progress.finish(&report);
            ExitCode::from(report.result.status.exit_code())
        }
        Err(RunError::Invalid(message)) => fail(EXIT_INVALID, message),
        Err(RunError::Host(e)) => fail(EXIT_ERROR, format!("{e:#}")),
    }
}
