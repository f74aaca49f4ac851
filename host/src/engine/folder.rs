//! The run's folder under `AGENTGATE_HOME/runs/<run-id>/`.
//!
//! `result.json`, `events.ndjson`, `stdout.log` and `stderr.log` (what the agent's
//! commands printed), `plugins.log` (what plugins printed themselves), plus the
//! scratch directories the host hands to plugins.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::capabilities::execution::OutputTee;
use crate::capabilities::redact::Redactor;
use crate::runtime::bindings::types::OutputPipe;

pub struct RunFolder {
    dir: PathBuf,
}

impl RunFolder {
    /// Creates `home/runs/<run_id>` (private to the user).
    pub fn create(home: &Path, run_id: &str) -> std::io::Result<RunFolder> {
        let dir = home.join("runs").join(run_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(RunFolder { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn events(&self) -> PathBuf {
        self.dir.join("events.ndjson")
    }

    pub fn result(&self) -> PathBuf {
        self.dir.join("result.json")
    }

    /// A fresh, empty, private directory inside the run folder.
    pub fn scratch(&self, name: &str) -> std::io::Result<PathBuf> {
        let path = self.dir.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(path)
    }

    /// Removes a scratch directory and everything in it.
    pub fn remove_scratch(&self, name: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes a scratch directory that nothing was put in.
    pub fn prune_scratch(&self, name: &str) {
        let _ = std::fs::remove_dir(self.dir.join(name));
    }

    pub fn output_logs(&self, redactor: Arc<Redactor>) -> std::io::Result<OutputLogs> {
        Ok(OutputLogs {
            redactor,
            stdout: Mutex::new(File::create(self.dir.join("stdout.log"))?),
            stderr: Mutex::new(File::create(self.dir.join("stderr.log"))?),
        })
    }

    pub fn append_plugin_log(&self, plugin: &str, output: &[u8]) {
        if output.is_empty() {
            return;
        }
        let path = self.dir.join("plugins.log");
        if let Ok(mut file) = File::options().create(true).append(true).open(path) {
            let _ = writeln!(file, "==> {plugin} <==");
            let _ = file.write_all(output);
            let _ = writeln!(file);
        }
    }
}

/// `stdout.log` and `stderr.log`: everything the agent's commands printed.
pub struct OutputLogs {
    redactor: Arc<Redactor>,
    stdout: Mutex<File>,
    stderr: Mutex<File>,
}

impl OutputTee for OutputLogs {
    fn write(&self, pipe: OutputPipe, data: &[u8]) {
        let file = match pipe {
            OutputPipe::Stdout => &self.stdout,
            OutputPipe::Stderr => &self.stderr,
        };
        let _ = file
            .lock()
            .unwrap()
            .write_all(&self.redactor.apply_bytes(data));
    }
}
