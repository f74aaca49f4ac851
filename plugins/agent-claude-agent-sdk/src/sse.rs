//! Server-sent events from a byte source that blocks until data arrives.
//!
//! The Messages API streams its answer as SSE. Decoding (fields, multi-line `data`,
//! comments, CR/LF variants, frames split across reads) is left to the maintained
//! `eventsource-stream` parser; this module only adapts a blocking reader (a
//! `wasi:io` input stream in the component, a list of chunks in tests) to its
//! `Stream` input, and its output to an `Iterator`. The reader never returns
//! `Pending`, so polling with a no-op waker is enough: no executor is needed.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use eventsource_stream::{EventStream, Eventsource};
use futures_core::Stream;

pub use eventsource_stream::Event;

/// A blocking source of byte chunks: `None` at the end.
struct Chunks<F>(F);

impl<F> Stream for Chunks<F>
where
    F: FnMut() -> Option<Result<Vec<u8>, String>> + Unpin,
{
    type Item = Result<Vec<u8>, String>;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready((self.get_mut().0)())
    }
}

/// The events of an SSE body, read as they arrive.
pub struct Events<F>
where
    F: FnMut() -> Option<Result<Vec<u8>, String>> + Unpin,
{
    inner: Pin<Box<EventStream<Chunks<F>>>>,
}

impl<F> Events<F>
where
    F: FnMut() -> Option<Result<Vec<u8>, String>> + Unpin,
{
    /// Decodes the chunks `read` returns, one call per chunk.
    pub fn new(read: F) -> Self {
        Events {
            inner: Box::pin(Chunks(read).eventsource()),
        }
    }
}

impl<F> Iterator for Events<F>
where
    F: FnMut() -> Option<Result<Vec<u8>, String>> + Unpin,
{
    type Item = Result<Event, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.inner.as_mut().poll_next(&mut cx) {
            Poll::Ready(item) => item.map(|r| r.map_err(|e| e.to_string())),
            // The source never waits, so the parser cannot either.
            Poll::Pending => Some(Err("the event stream stalled".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<Result<(String, String), String>> {
        let mut chunks: std::collections::VecDeque<Vec<u8>> =
            chunks.iter().map(|c| c.to_vec()).collect();
        Events::new(move || chunks.pop_front().map(Ok))
            .map(|r| r.map(|e| (e.event, e.data)))
            .collect()
    }

    const BODY: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\n: a comment\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_delta\ndata: {\"a\":\ndata: 1}\n\n";

    fn expected() -> Vec<Result<(String, String), String>> {
        vec![
            Ok((
                "message_start".into(),
                "{\"type\":\"message_start\"}".into(),
            )),
            Ok(("ping".into(), "{\"type\": \"ping\"}".into())),
            Ok(("content_block_delta".into(), "{\"a\":\n1}".into())),
        ]
    }

    #[test]
    fn decodes_whole_frames() {
        assert_eq!(decode(&[BODY]), expected());
    }

    #[test]
    fn frames_split_at_every_byte_decode_the_same() {
        let bytes: Vec<&[u8]> = BODY.chunks(1).collect();
        assert_eq!(decode(&bytes), expected());
        // Split in the middle of a field name, of a line ending and of UTF-8.
        let utf8 = "event: t\ndata: caf\u{e9}\n\n".as_bytes();
        let cut = utf8.len() - 3;
        assert_eq!(
            decode(&[&utf8[..cut], &utf8[cut..]]),
            vec![Ok(("t".into(), "caf\u{e9}".into()))]
        );
    }

    #[test]
    fn crlf_line_endings_are_accepted() {
        let body = b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n";
        let got = decode(&[&body[..5], &body[5..17], &body[17..]]);
        assert_eq!(
            got,
            vec![Ok(("a".into(), "1".into())), Ok(("b".into(), "2".into()))]
        );
    }

    #[test]
    fn a_read_error_ends_the_events_with_it() {
        let mut calls = 0;
        let got: Vec<_> = Events::new(move || {
            calls += 1;
            match calls {
                1 => Some(Ok(b"event: a\ndata: 1\n\n".to_vec())),
                2 => Some(Err("connection reset".into())),
                _ => None,
            }
        })
        .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[1].as_ref().unwrap_err().contains("connection reset"));
    }
}
