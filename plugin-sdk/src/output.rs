//! Turn an `execution`'s chunked output into lines.
//!
//! The host delivers output in chunks as it arrives; agents speak in lines (JSONL,
//! stream-json). [`Lines`] reassembles them per pipe, without losing a final line that
//! has no newline.
//!
//! A line is bounded: the agent may print a gigabyte without a newline, and a plugin's
//! memory is capped. Past [`MAX_LINE_BYTES`] the bytes so far are handed on as a line
//! of their own and the rest continues as the next one, so nothing is lost and nothing
//! grows without bound.

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

/// The longest line [`LineSplitter`] holds before handing it on in pieces.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Splits byte chunks into lines, one buffer per pipe. Independent of the host, so it
/// is unit-tested natively.
#[derive(Default)]
pub struct LineSplitter {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl LineSplitter {
    /// Feeds a chunk; returns the lines it completed, and the pieces of a line that
    /// grew past [`MAX_LINE_BYTES`].
    pub fn push(&mut self, pipe: OutputPipe, data: &[u8]) -> Vec<String> {
        let buf = self.buffer(pipe);
        let mut lines = Vec::new();
        // Only the new bytes are searched: a long line fed in many chunks costs linear
        // time, not quadratic.
        for piece in data.split_inclusive(|&b| b == b'\n') {
            buf.extend_from_slice(piece);
            let ended = buf.last() == Some(&b'\n');
            if ended {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
            }
            while buf.len() > MAX_LINE_BYTES {
                let rest = buf.split_off(char_boundary_at_most(buf, MAX_LINE_BYTES));
                lines.push(String::from_utf8_lossy(buf).into_owned());
                *buf = rest;
            }
            if ended {
                lines.push(String::from_utf8_lossy(buf).into_owned());
                buf.clear();
            }
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

/// The largest cut `<= at` that does not split a UTF-8 character (a cut before a
/// continuation byte would), so both pieces of a long line stay readable.
fn char_boundary_at_most(bytes: &[u8], at: usize) -> usize {
    let is_continuation = |b: u8| b & 0b1100_0000 == 0b1000_0000;
    (at.saturating_sub(3)..=at)
        .rev()
        .find(|&cut| cut == 0 || !bytes.get(cut).copied().is_some_and(is_continuation))
        .filter(|&cut| cut > 0)
        .unwrap_or(at)
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

    #[test]
    fn a_line_without_end_is_handed_on_in_bounded_pieces_and_nothing_is_lost() {
        let mut s = LineSplitter::default();
        let mut pieces = Vec::new();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..40 {
            pieces.extend(s.push(OutputPipe::Stdout, &chunk));
        }
        pieces.extend(s.push(OutputPipe::Stdout, b"tail\nnext"));
        assert_eq!(pieces.len(), 3, "two full pieces and the tail's line");
        assert!(pieces.iter().all(|p| p.len() <= MAX_LINE_BYTES));
        let total: usize = pieces.iter().map(String::len).sum();
        assert_eq!(total, 40 * 64 * 1024 + "tail".len());
        assert_eq!(s.finish(OutputPipe::Stdout).as_deref(), Some("next"));
    }

    #[test]
    fn a_long_line_is_cut_between_characters() {
        let mut s = LineSplitter::default();
        let mut text = vec![b'a'; MAX_LINE_BYTES - 1];
        text.extend_from_slice("é".as_bytes()); // straddles the bound
        text.extend_from_slice(b"\n");
        let lines = s.push(OutputPipe::Stdout, &text);
        assert_eq!(lines.len(), 2);
        assert!(
            !lines.concat().contains('\u{FFFD}'),
            "no character was split"
        );
        assert_eq!(lines[1], "é");
    }
}
