//! Run an agent's command-line program in the sandbox and read its output line by line.
//!
//! Why: every CLI-backed driver (Claude Code, Codex, ...) does the same around its own
//! parser: start the program through the `sandbox` capability, hand each stdout line to
//! the parser, pass stderr on as output events, and say clearly when the program is
//! not installed in the sandbox. Calling this makes the plugin import `sandbox` and
//! `events`.

use crate::host::sandbox;
use crate::host::types::{EnvVar, Error, ExecRequest, ExitStatus, OutputPipe};
use crate::output::{Line, Lines};

/// Runs `argv` in the sandbox's workdir with `env` added and `stdin` as its whole input
/// (no deadline of its own: the run's applies), and calls `on_stdout` with each line
/// it prints on stdout; stderr lines become `output` events. Returns how it ended.
///
/// A program that cannot be started, or that exits with 127 (the shell's "command not
/// found") without printing anything, is `unavailable` with `install_hint` appended.
pub fn run_lines(
    argv: Vec<String>,
    env: Vec<EnvVar>,
    stdin: String,
    install_hint: &str,
    mut on_stdout: impl FnMut(String),
) -> Result<ExitStatus, Error> {
    let request = ExecRequest {
        argv,
        env,
        cwd: None,
        stdin: Some(stdin.into_bytes()),
        keep_stdin_open: false,
        timeout_ms: None,
    };
    let program = request.argv.first().map(String::as_str).unwrap_or("");
    let missing = |detail: String| {
        crate::error::unavailable(format!(
            "`{program}` was not found in the sandbox ({detail}): {install_hint}"
        ))
    };
    let execution = sandbox::exec(&request).map_err(|e| {
        let text = e.to_string().to_lowercase();
        if text.contains("not found") || text.contains("no such file") {
            missing(e.to_string())
        } else {
            e
        }
    })?;
    let mut printed = false;
    for line in Lines::new(&execution) {
        match line {
            Line::Text(OutputPipe::Stdout, text) => {
                printed = true;
                on_stdout(text);
            }
            Line::Text(pipe, text) => crate::events::output_line(pipe, text),
            Line::Exited(status) if status.code == Some(127) && !printed => {
                return Err(missing("exit code 127".into()))
            }
            Line::Exited(status) => return Ok(status),
        }
    }
    Err(crate::error::failed(format!(
        "the output of `{program}` ended without an exit status"
    )))
}
