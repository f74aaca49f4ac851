//! Keeps secrets out of the run record: events, logs, `result.json`, the terminal.
//!
//! The host knows the secret values it handed out (`--secret-env`, and `${VAR}`s with
//! secret-looking names); any of them that an agent or a plugin echoes is replaced by
//! `***` before it is stored or shown. Each line of a multi-line secret (a PEM key) is
//! a secret too, so a value printed line by line is masked as well.
//!
//! Masking marks every byte covered by an occurrence of any secret (occurrences may
//! overlap) and replaces each run of marked bytes by one `***`. Output arrives in
//! chunks, so [`MaskStream`] holds back the last (longest secret − 1) bytes of a
//! stream until it knows whether they start a secret: the result is the same wherever
//! the stream was split.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::AhoCorasick;

/// Values (and lines of values) shorter than this are not treated as secrets:
/// replacing them would mangle ordinary text.
const MIN_SECRET_LEN: usize = 4;
const MASK: &[u8] = b"***";

/// Masks a run's secret values as `***`; the default masks nothing.
#[derive(Debug, Default, Clone)]
pub struct Redactor {
    /// `None` when there is nothing to mask.
    needles: Option<AhoCorasick>,
    /// Length of the longest needle, in bytes.
    longest: usize,
}

impl Redactor {
    /// A redactor for `secrets` and each of their lines; values shorter than 4 bytes are not
    /// masked.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut needles: Vec<String> = Vec::new();
        for secret in secrets {
            let lines = secret
                .split('\n')
                .map(|line| line.strip_suffix('\r').unwrap_or(line).to_string());
            needles.extend(lines.chain([secret.clone()]));
        }
        needles.retain(|n| n.len() >= MIN_SECRET_LEN);
        needles.sort();
        needles.dedup();
        let longest = needles.iter().map(String::len).max().unwrap_or(0);
        let needles = (!needles.is_empty())
            .then(|| AhoCorasick::new(&needles).expect("a few short literal needles always build"));
        Redactor { needles, longest }
    }

    /// `text` with each stretch covered by secrets replaced by one `***`.
    pub fn apply(&self, text: String) -> String {
        if let Cow::Owned(bytes) = self.apply_bytes(text.as_bytes()) {
            // Needles are whole UTF-8 strings or lines of them, so the masked spans
            // start and end on character boundaries.
            return String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        }
        text
    }

    /// [`Redactor::apply`] for bytes; borrowed when nothing is masked.
    pub fn apply_bytes<'a>(&self, data: &'a [u8]) -> Cow<'a, [u8]> {
        if self.spans(data).is_empty() {
            return Cow::Borrowed(data);
        }
        let mut stream = MaskStream::new(Arc::new(self.clone()));
        let mut out = stream.push(data);
        out.extend(stream.finish());
        Cow::Owned(out)
    }

    /// A masker for one stream of output (one pipe of one command).
    pub fn stream(self: &Arc<Self>) -> MaskStream {
        MaskStream::new(self.clone())
    }

    /// Bytes a stream must hold back: a secret may start in them.
    fn carry(&self) -> usize {
        self.longest.saturating_sub(1)
    }

    /// The byte ranges of `data` covered by any secret, merged where they overlap or
    /// touch, in order.
    fn spans(&self, data: &[u8]) -> Vec<(usize, usize)> {
        let Some(needles) = &self.needles else {
            return Vec::new();
        };
        let mut found: Vec<(usize, usize)> = needles
            .find_overlapping_iter(data)
            .map(|m| (m.start(), m.end()))
            .collect();
        found.sort_unstable();
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(found.len());
        for (start, end) in found {
            match spans.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => spans.push((start, end)),
            }
        }
        spans
    }
}

/// Masks one stream of bytes delivered in chunks.
///
/// `raw` keeps the bytes not yet written out plus (longest secret − 1) bytes before
/// them, so a secret that covers a byte about to be written is always seen whole.
pub struct MaskStream {
    redactor: Arc<Redactor>,
    raw: Vec<u8>,
    /// Bytes of `raw` already written out.
    written: usize,
    /// The last byte written was masked: a continuing run adds no second `***`.
    in_mask: bool,
}

impl MaskStream {
    fn new(redactor: Arc<Redactor>) -> MaskStream {
        MaskStream {
            redactor,
            raw: Vec::new(),
            written: 0,
            in_mask: false,
        }
    }

    /// Takes a chunk; returns what can be written now (possibly nothing).
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        if self.redactor.needles.is_none() {
            return data.to_vec();
        }
        self.raw.extend_from_slice(data);
        let limit = self.raw.len().saturating_sub(self.redactor.carry());
        self.release(limit)
    }

    /// Ends the stream: returns what was held back, masked.
    pub fn finish(&mut self) -> Vec<u8> {
        let out = self.release(self.raw.len());
        self.raw.clear();
        self.written = 0;
        self.in_mask = false;
        out
    }

    /// Writes out `raw[written..limit]`, masked, and forgets what no secret can
    /// reach any more.
    fn release(&mut self, limit: usize) -> Vec<u8> {
        let limit = limit.max(self.written);
        let mut out = Vec::with_capacity(limit - self.written);
        let mut pos = self.written;
        for (start, end) in self.redactor.spans(&self.raw) {
            if end <= pos {
                continue;
            }
            if start >= limit {
                break;
            }
            let start = start.max(pos);
            if start > pos {
                out.extend_from_slice(&self.raw[pos..start]);
                self.in_mask = false;
            }
            if !self.in_mask {
                out.extend_from_slice(MASK);
                self.in_mask = true;
            }
            pos = end.min(limit);
        }
        if pos < limit {
            out.extend_from_slice(&self.raw[pos..limit]);
            self.in_mask = false;
        }
        let forget = limit.saturating_sub(self.redactor.carry());
        self.raw.drain(..forget);
        self.written = limit - forget;
        out
    }
}

/// Whether a variable's name says it holds a secret (`GIT_TOKEN`, `API_KEY`, ...).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(secrets: &[&str]) -> Arc<Redactor> {
        Arc::new(Redactor::new(secrets.iter().map(|s| s.to_string())))
    }

    /// Feeds `chunks` through one stream and returns everything it wrote.
    fn streamed(r: &Arc<Redactor>, chunks: &[&[u8]]) -> Vec<u8> {
        let mut stream = r.stream();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(stream.push(chunk));
        }
        out.extend(stream.finish());
        out
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn masks_every_occurrence_in_text_and_bytes() {
        let r = Redactor::new(["s3cr3t-token".to_string(), "abc".to_string()]);
        assert_eq!(
            r.apply("a s3cr3t-token b s3cr3t-token".into()),
            "a *** b ***"
        );
        assert_eq!(
            r.apply("abc is too short to mask".into()),
            "abc is too short to mask"
        );
        assert_eq!(&*r.apply_bytes(b"x=s3cr3t-token\n"), b"x=***\n");
        assert!(matches!(r.apply_bytes(b"nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_split_at_any_byte_is_masked() {
        let secret = "sk-live-0123456789abcdef";
        let r = redactor(&[secret]);
        let text = format!("before {secret} middle {secret}\nafter");
        let whole = r.apply_bytes(text.as_bytes()).into_owned();
        assert_eq!(whole, b"before *** middle ***\nafter");
        for cut in 0..=text.len() {
            let (a, b) = text.as_bytes().split_at(cut);
            assert_eq!(streamed(&r, &[a, b]), whole, "split at {cut}");
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(streamed(&r, &bytes), whole);
    }

    #[test]
    fn a_stream_holds_back_only_what_could_start_a_secret() {
        let r = redactor(&["0123456789"]);
        let mut stream = r.stream();
        // Nine bytes could be the start of the secret: none are written yet.
        assert_eq!(stream.push(b"abc012345678"), b"abc");
        assert_eq!(stream.push(b"9!"), b"***");
        assert_eq!(stream.finish(), b"!");
        // A prefix that never completes is written at the end, unchanged.
        assert_eq!(stream.push(b"01234"), b"");
        assert_eq!(stream.finish(), b"01234");
    }

    #[test]
    fn each_line_of_a_multi_line_secret_is_masked() {
        let pem =
            "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkq\r\nhkiG9w0BAQEFAASC\r\n-----END KEY-----";
        let r = redactor(&[pem, "ab\ncd\nlongline"]);
        assert_eq!(r.apply(format!("key: {pem}!")), "key: ***!");
        // Printed line by line, with other line endings.
        let printed = "MIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n";
        assert_eq!(r.apply(printed.into()), "***\n***\n");
        // Lines shorter than the minimum stay ordinary text.
        assert_eq!(r.apply("ab cd longline".into()), "ab cd ***");
        for cut in 0..=printed.len() {
            let (a, b) = printed.as_bytes().split_at(cut);
            assert_eq!(streamed(&r, &[a, b]), b"***\n***\n", "split at {cut}");
        }
    }

    #[test]
    fn overlapping_secrets_are_masked_as_one() {
        let r = redactor(&["abcdef", "defghi", "xyz0"]);
        let text = b"1abcdefghi2 xyz0xyz0 3";
        let whole = r.apply_bytes(text).into_owned();
        assert_eq!(whole, b"1***2 *** 3");
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(streamed(&r, &[a, b]), whole, "split at {cut}");
        }
        // A secret inside a longer one.
        let r = redactor(&["token", "my-token-value"]);
        assert_eq!(r.apply("a my-token-value b token".into()), "a *** b ***");
    }

    #[test]
    fn a_long_line_before_a_secret_does_not_shift_the_mask() {
        let secret = "sk-live-0123456789abcdef";
        let r = redactor(&[secret]);
        let text = format!("{}{secret}\n", "x".repeat(16_364));
        let out = streamed(&r, &[text.as_bytes()]);
        assert!(!contains(&out, &secret.as_bytes()[..8]));
        assert!(out.ends_with(b"x***\n"));
        // Chunks the size of a pipe read.
        let chunks: Vec<&[u8]> = text.as_bytes().chunks(4096).collect();
        assert_eq!(streamed(&r, &chunks), out);
    }

    #[test]
    fn bytes_that_are_not_utf8_pass_through() {
        let r = redactor(&["secret-value"]);
        let text = b"\xff\xfe secret-value \x80";
        assert_eq!(&*r.apply_bytes(text), b"\xff\xfe *** \x80");
        let nothing = Arc::new(Redactor::default());
        assert_eq!(streamed(&nothing, &[text]), text);
    }

    #[test]
    fn recognises_secret_names() {
        assert!(
            is_secret_name("GIT_TOKEN")
                && is_secret_name("api_key")
                && is_secret_name("DB_PASSWORD")
        );
        assert!(!is_secret_name("NODE_ENV") && !is_secret_name("LOG_LEVEL"));
    }
}
