//! Files in the sandbox's private `HOME`, for agent drivers.
//!
//! Why: agent CLIs read their configuration (MCP servers, model providers) from files,
//! and those may hold credentials. They belong in the sandbox's private state, which
//! the host throws away with the sandbox, never in the workspace that the run records
//! and returns. The `sandbox` capability's file operations reach only the workspace, so
//! the file is written by a fixed shell script in the sandbox with its contents on
//! stdin: nothing of the contents or the path reaches a command line.
//!
//! Calling this makes the plugin import `sandbox`.

use crate::host::sandbox;
use crate::host::types::{Error, ExecRequest, OutputPipe};
use crate::output::{exit_code, Line, Lines};

/// Writes `contents` to `$HOME/<relative>` in the sandbox (mode 0600, folders created,
/// 0700) and returns the file's absolute path there. `relative` must be a plain
/// relative path of letters, digits, `.`, `-`, `_` and `/`, without `..`.
pub fn write_file(relative: &str, contents: &[u8]) -> Result<String, Error> {
    let plain = !relative.is_empty()
        && !relative.starts_with('/')
        && relative
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
        && !relative
            .split('/')
            .any(|part| part == ".." || part.is_empty());
    if !plain {
        return Err(crate::error::failed(format!(
            "home::write_file: {relative:?} is not a plain relative path"
        )));
    }
    let script = "umask 077 && f=\"$HOME/$1\" && mkdir -p \"$(dirname \"$f\")\" && cat > \"$f\" && printf %s \"$f\"";
    let execution = sandbox::exec(&ExecRequest {
        argv: vec![
            "sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            relative.into(),
        ],
        env: vec![],
        cwd: None,
        stdin: Some(contents.to_vec()),
        keep_stdin_open: false,
        timeout_ms: Some(30_000),
    })?;
    let (mut path, mut problems) = (String::new(), String::new());
    for line in Lines::new(&execution) {
        match line {
            Line::Text(OutputPipe::Stdout, text) => path.push_str(&text),
            Line::Text(OutputPipe::Stderr, text) => problems.push_str(&text),
            Line::Exited(status) if status.code == Some(0) && path.starts_with('/') => {
                return Ok(path)
            }
            Line::Exited(status) => {
                return Err(crate::error::failed(format!(
                    "writing $HOME/{relative} in the sandbox failed (exit {}): {problems}",
                    exit_code(&status)
                )))
            }
        }
    }
    Err(crate::error::failed(format!(
        "writing $HOME/{relative} in the sandbox: no exit status"
    )))
}
