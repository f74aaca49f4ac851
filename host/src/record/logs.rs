//! The run folder's log files: `stdout.log` and `stderr.log` (what the agent's
//! commands printed) and `plugins.log` (what plugins printed themselves).
//!
//! Every byte is masked before it is written. Each output log is masked as one stream
//! (a [`MaskStream`] over exactly the bytes that land in the file), so a secret
//! printed in pieces, even by two commands, is still caught. What the stream holds
//! back is written when the run's output ends ([`OutputLogs::finish`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::redact::{MaskStream, Redactor};
use crate::runtime::bindings::types::OutputPipe;

/// `stdout.log` and `stderr.log`, shared by every command of the run.
pub struct OutputLogs {
    stdout: Mutex<MaskedFile>,
    stderr: Mutex<MaskedFile>,
}

struct MaskedFile {
    file: File,
    stream: MaskStream,
}

impl OutputLogs {
    /// Creates both logs in `dir`.
    pub fn create(dir: &Path, redactor: Arc<Redactor>) -> std::io::Result<OutputLogs> {
        let open = |name: &str| -> std::io::Result<Mutex<MaskedFile>> {
            Ok(Mutex::new(MaskedFile {
                file: File::create(dir.join(name))?,
                stream: redactor.stream(),
            }))
        };
        Ok(OutputLogs {
            stdout: open("stdout.log")?,
            stderr: open("stderr.log")?,
        })
    }

    pub fn write(&self, pipe: OutputPipe, data: &[u8]) {
        let mut log = self.log(pipe).lock().unwrap();
        let masked = log.stream.push(data);
        let _ = log.file.write_all(&masked);
    }

    /// The run's output ended: writes what the streams held back.
    pub fn finish(&self) {
        for pipe in [OutputPipe::Stdout, OutputPipe::Stderr] {
            let mut log = self.log(pipe).lock().unwrap();
            let rest = log.stream.finish();
            let _ = log.file.write_all(&rest);
        }
    }

    fn log(&self, pipe: OutputPipe) -> &Mutex<MaskedFile> {
        match pipe {
            OutputPipe::Stdout => &self.stdout,
            OutputPipe::Stderr => &self.stderr,
        }
    }
}

impl Drop for OutputLogs {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Appends what `plugin` printed on its own stdout/stderr to `plugins.log` in `dir`.
pub fn append_plugin_log(dir: &Path, redactor: &Redactor, plugin: &str, output: &[u8]) {
    if output.is_empty() {
        return;
    }
    let mut entry = format!("==> {plugin} <==\n").into_bytes();
    entry.extend_from_slice(output);
    entry.push(b'\n');
    let path = dir.join("plugins.log");
    if let Ok(mut file) = File::options().create(true).append(true).open(path) {
        let _ = file.write_all(&redactor.apply_bytes(&entry));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_written_in_pieces_is_masked_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let redactor = Arc::new(Redactor::new(["sk-live-0123456789".to_string()]));
        let logs = OutputLogs::create(dir.path(), redactor.clone()).unwrap();
        logs.write(OutputPipe::Stdout, b"key=sk-live-01");
        logs.write(OutputPipe::Stderr, b"err sk-live");
        logs.write(OutputPipe::Stdout, b"23456789\n");
        // Another command finishing the secret on the same pipe.
        logs.write(OutputPipe::Stderr, b"-0123456789 tail");
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        // What could still be part of a secret is held back until the end.
        assert_eq!(read("stdout.log"), "key=***");
        assert_eq!(read("stderr.log"), "err ***");
        drop(logs);
        assert_eq!(read("stdout.log"), "key=***\n");
        assert_eq!(read("stderr.log"), "err *** tail");

        append_plugin_log(
            dir.path(),
            &redactor,
            "p",
            b"plugin said sk-live-0123456789",
        );
        assert_eq!(read("plugins.log"), "==> p <==\nplugin said ***\n");
    }
}
