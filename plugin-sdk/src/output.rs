//! Turn an `execution`'s chunked output into lines.
//!
//! The host delivers output in chunks as it arrives; agents speak in lines (JSONL,
//! stream-json). [`Lines`] reassembles them per pipe, without losing a final line that
//! has no newline.

use crate::host::execution::{Execution, Output};
use crate::host::types::{ExitStatus, OutputPipe};

/// One step of an execution's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A complete line (without its `\n`; invalid UTF-8 replaced).
    Text(OutputPipe, String),
    /// The command ended; no more lines follow.
    Exited(ExitStatus),
}

/// Splits byte chunks into lines, one buffer per pipe. Independent of the host, so it
/// is unit-tested natively.
#[derive(Default)]
pub struct LineSplitter {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl LineSplitter {
    /// Feeds a chunk; returns the lines it completed.
    pub fn push(&mut self, pipe: OutputPipe, data: &[u8]) -> Vec<String> {
        let buf = self.buffer(pipe);
        buf.extend_from_slice(data);
        let mut lines = Vec::new();
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let rest = buf.split_off(pos + 1);
            let mut line = std::mem::replace(buf, rest);
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            lines.push(String::from_utf8_lossy(&line).into_owned());
        }
        lines
    }

    /// Returns what is left of `pipe` without a trailing newline.
    pub fn finish(&mut self, pipe: OutputPipe) -> Option<String> {
        let buf = self.buffer(pipe);
        if buf.is_empty() {
            return None;
        }
        let rest = std::mem::take(buf);
        Some(String::from_utf8_lossy(&rest).into_owned())
    }

    fn buffer(&mut self, pipe: OutputPipe) -> &mut Vec<u8> {
        match pipe {
            OutputPipe::Stdout => &mut self.stdout,
            OutputPipe::Stderr => &mut self.stderr,
        }
    }
}

/// A shell-style exit code: the code, or 128 + the signal that ended the command.
pub fn exit_code(status: &ExitStatus) -> i32 {
    match (status.code, status.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => -1,
    }
}

/// Iterates an execution's output as lines until it exits.
pub struct Lines<'a> {
    execution: &'a Execution,
    splitter: LineSplitter,
    pending: std::collections::VecDeque<Line>,
    done: bool,
}

impl<'a> Lines<'a> {
    pub fn new(execution: &'a Execution) -> Self {
        Lines {
            execution,
            splitter: LineSplitter::default(),
            pending: Default::default(),
            done: false,
        }
    }
}

impl Iterator for Lines<'_> {
    type Item = Line;

    fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some(line);
            }
            if self.done {
                return None;
            }
            match self.execution.read(1_000) {
                Output::Idle => {}
                Output::Chunk(chunk) => {
                    for text in self.splitter.push(chunk.pipe, &chunk.data) {
                        self.pending.push_back(Line::Text(chunk.pipe, text));
                    }
                }
                Output::Exited(status) => {
                    for pipe in [OutputPipe::Stdout, OutputPipe::Stderr] {
                        if let Some(text) = self.splitter.finish(pipe) {
                            self.pending.push_back(Line::Text(pipe, text));
                        }
                    }
                    self.pending.push_back(Line::Exited(status));
                    self.done = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_across_chunks_per_pipe() {
        let mut s = LineSplitter::default();
        assert!(s.push(OutputPipe::Stdout, b"hel").is_empty());
        assert_eq!(s.push(OutputPipe::Stderr, b"err\n"), vec!["err"]);
        assert_eq!(s.push(OutputPipe::Stdout, b"lo\r\nwor"), vec!["hello"]);
        assert_eq!(s.finish(OutputPipe::Stdout).as_deref(), Some("wor"));
        assert_eq!(s.finish(OutputPipe::Stdout), None);
    }
}
