//! The run folder's log files: `stdout.log` and `stderr.log` (what the agent's
//! commands printed) and `plugins.log` (what plugins printed themselves).
//!
//! Every byte is masked before it is written. Each output log is masked as one stream
//! (a [`MaskStream`] over exactly the bytes that land in the file), so a secret
//! printed in pieces, even by two commands, is still caught. What the stream holds
//! back is written when the run's output ends ([`OutputLogs::finish`]).
//!
//! Each output log is bounded ([`MAX_LOG_BYTES`]): an agent printing without end must
//! not fill the host's disk. What is past the bound is counted, not kept, and the log
//! ends with a line that says so; the result records it too ([`OutputLogs::sizes`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::redact::{MaskStream, Redactor};
use crate::wit::types::OutputPipe;

/// The most one output log keeps.
pub const MAX_LOG_BYTES: u64 = 64 << 20;

/// How much one output log received, and how much of it was dropped past the bound.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct LogSize {
    /// Bytes written to the file (the truncation notice excluded).
    pub bytes: u64,
    /// Bytes the agent printed past the bound, not kept. 0 when the log is whole.
    pub truncated_bytes: u64,
}

/// `stdout.log` and `stderr.log`, shared by every command of the run.
pub struct OutputLogs {
    stdout: Mutex<MaskedFile>,
    stderr: Mutex<MaskedFile>,
}

struct MaskedFile {
    file: File,
    stream: MaskStream,
    size: LogSize,
    limit: u64,
    ended: bool,
}

impl MaskedFile {
    /// Writes what fits under the bound and counts the rest.
    fn keep(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.size.bytes);
        let kept = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if self.file.write_all(&data[..kept]).is_ok() {
            self.size.bytes += kept as u64;
        }
        self.size.truncated_bytes += (data.len() - kept) as u64;
    }
}

impl OutputLogs {
    /// Creates both logs in `dir`.
    pub fn create(dir: &Path, redactor: Arc<Redactor>) -> std::io::Result<OutputLogs> {
        OutputLogs::bounded(dir, redactor, MAX_LOG_BYTES)
    }

    /// Both logs, each keeping at most `limit` bytes.
    pub fn bounded(dir: &Path, redactor: Arc<Redactor>, limit: u64) -> std::io::Result<OutputLogs> {
        let open = |name: &str| -> std::io::Result<Mutex<MaskedFile>> {
            Ok(Mutex::new(MaskedFile {
                file: File::create(dir.join(name))?,
                stream: redactor.stream(),
                size: LogSize::default(),
                limit,
                ended: false,
            }))
        };
        Ok(OutputLogs {
            stdout: open("stdout.log")?,
            stderr: open("stderr.log")?,
        })
    }

    /// Masks `data` and appends it to the pipe's log, up to the bound; what the stream
    /// holds back (a possible secret's start) is written later.
    pub fn write(&self, pipe: OutputPipe, data: &[u8]) {
        let mut log = self.log(pipe).lock().unwrap();
        let masked = log.stream.push(data);
        log.keep(&masked);
    }

    /// The run's output ended: writes what the streams held back.
    pub fn finish(&self) {
        for pipe in [OutputPipe::Stdout, OutputPipe::Stderr] {
            let mut log = self.log(pipe).lock().unwrap();
            if log.ended {
                continue;
            }
            log.ended = true;
            let rest = log.stream.finish();
            log.keep(&rest);
            if log.size.truncated_bytes > 0 {
                let notice = format!(
                    "\n[agentgate: this log stops at {} bytes; {} more bytes were printed and not kept]\n",
                    log.size.bytes, log.size.truncated_bytes
                );
                let _ = log.file.write_all(notice.as_bytes());
            }
        }
    }

    /// How much each log (stdout, stderr) received and dropped.
    pub fn sizes(&self) -> (LogSize, LogSize) {
        let size = |pipe| self.log(pipe).lock().unwrap().size;
        (size(OutputPipe::Stdout), size(OutputPipe::Stderr))
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

    #[test]
    fn a_log_past_its_bound_keeps_the_start_and_says_how_much_was_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let logs = OutputLogs::bounded(dir.path(), Arc::default(), 10).unwrap();
        logs.write(OutputPipe::Stdout, b"0123456");
        logs.write(OutputPipe::Stdout, b"789abcdef");
        logs.write(OutputPipe::Stderr, b"short");
        logs.finish();
        let (stdout, stderr) = logs.sizes();
        assert_eq!(
            stdout,
            LogSize {
                bytes: 10,
                truncated_bytes: 6
            }
        );
        assert_eq!(
            stderr,
            LogSize {
                bytes: 5,
                truncated_bytes: 0
            }
        );
        let text = std::fs::read_to_string(dir.path().join("stdout.log")).unwrap();
        assert_eq!(
            text,
            "0123456789\n[agentgate: this log stops at 10 bytes; 6 more bytes were printed and not kept]\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("stderr.log")).unwrap(),
            "short"
        );
    }
}
