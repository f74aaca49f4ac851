//! Escaping what the agent controls (file names, printed text) before the host
//! records or shows it.
//!
//! Raw, those bytes could rewrite the operator's terminal (`ESC]0;title`, `ESC[2J`),
//! forge lines of the end-of-run summary (a newline in a file name), reorder what is
//! shown (bidirectional overrides) or be lost (a name that is not UTF-8). They are
//! written the way `git` (core.quotePath) and `ls` quote names: C-style escapes for
//! control characters, `\xNN` for every other byte that must not reach a terminal.
//! std's `escape_ascii` would escape every non-ASCII byte as well, so `café` would
//! become `caf\xc3\xa9`; here names in any script stay readable.

use std::borrow::Cow;
use std::io::{self, Write};

use serde::Serialize;

/// A file name or `/`-separated path, losslessly: distinct byte strings give distinct
/// escaped strings, and a name with no backslash and nothing unsafe is its own form.
///
/// Escapes: `\\` for a backslash; `\a \b \t \n \v \f \r \e` for those controls;
/// `\xNN` for every byte of any other unsafe character and for each byte that is not
/// UTF-8.
pub fn name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                push_char(&mut out, c);
            }
        }
        for byte in chunk.invalid() {
            push_byte(&mut out, *byte);
        }
    }
    out
}

/// Text for a terminal: unsafe characters are escaped as in [`name`], the rest (a
/// backslash included) is kept. Meant to be read, not decoded.
pub fn text(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_char(&mut out, c);
    }
    Cow::Owned(out)
}

/// Text of many lines, for a page (`agentgate report`): like [`text`], but newlines
/// and tabs are kept as they are.
pub fn lines(text: &str) -> Cow<'_, str> {
    let unsafe_here = |c: char| is_unsafe(c) && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_here) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_here(c) {
            push_char(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line of JSON that is also safe on a terminal: besides what JSON escapes
/// (C0 controls), DEL, C1 controls and bidirectional formatting are written `\uXXXX`.
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        TerminalSafeJson,
    ))?;
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// Characters that act on a terminal or on how text around them is displayed:
/// C0 and C1 controls, DEL, and the Unicode bidirectional and line-separator marks.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

fn push_char(out: &mut String, c: char) {
    if !is_unsafe(c) {
        out.push(c);
        return;
    }
    let named = match c {
        '\x07' => "\\a",
        '\x08' => "\\b",
        '\t' => "\\t",
        '\n' => "\\n",
        '\x0b' => "\\v",
        '\x0c' => "\\f",
        '\r' => "\\r",
        '\x1b' => "\\e",
        _ => {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                push_byte(out, byte);
            }
            return;
        }
    };
    out.push_str(named);
}

fn push_byte(out: &mut String, byte: u8) {
    use std::fmt::Write as _;
    let _ = write!(out, "\\x{byte:02x}");
}

/// serde_json's compact output with [`is_unsafe`] characters escaped. serde_json
/// escapes C0 controls, quotes and backslashes itself and hands the runs between them
/// here.
struct TerminalSafeJson;

impl serde_json::ser::Formatter for TerminalSafeJson {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| is_unsafe(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            write!(writer, "\\u{:04x}", c as u32)?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of [`name`], to prove it loses nothing.
    fn unescape(escaped: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut bytes = escaped.bytes();
        while let Some(b) = bytes.next() {
            if b != b'\\' {
                out.push(b);
                continue;
            }
            out.push(match bytes.next().expect("escape has a letter") {
                b'\\' => b'\\',
                b'a' => 0x07,
                b'b' => 0x08,
                b't' => b'\t',
                b'n' => b'\n',
                b'v' => 0x0b,
                b'f' => 0x0c,
                b'r' => b'\r',
                b'e' => 0x1b,
                b'x' => {
                    let hex = [bytes.next().unwrap(), bytes.next().unwrap()];
                    u8::from_str_radix(std::str::from_utf8(&hex).unwrap(), 16).unwrap()
                }
                other => panic!("unknown escape \\{}", other as char),
            });
        }
        out
    }

    #[test]
    fn names_are_escaped_like_git_and_kept_readable() {
        assert_eq!(name(b"src/main.rs"), "src/main.rs");
        assert_eq!(name("café/日本.txt".as_bytes()), "café/日本.txt");
        assert_eq!(name(b"bad\xffname"), "bad\\xffname");
        assert_eq!(name(b"a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(name(b"\x1b]0;title\x07"), "\\e]0;title\\a");
        assert_eq!(name(b"back\\slash"), "back\\\\slash");
        assert_eq!(name(b"nul\x00del\x7f"), "nul\\x00del\\x7f");
        // A C1 control (8-bit CSI) and a right-to-left override, as UTF-8 bytes.
        assert_eq!(name("x\u{9b}2J".as_bytes()), "x\\xc2\\x9b2J");
        assert_eq!(name("a\u{202e}b".as_bytes()), "a\\xe2\\x80\\xaeb");
    }

    #[test]
    fn every_short_byte_string_round_trips() {
        // All strings of one and two bytes, plus each byte after a valid prefix.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for input in [vec![a, b], vec![a], vec![b'x', a, b]] {
                    let escaped = name(&input);
                    assert!(!escaped.chars().any(is_unsafe), "{escaped:?}");
                    assert_eq!(unescape(&escaped), input, "{escaped:?}");
                }
            }
        }
        let multi = "日本\u{202e}\u{9b}é\\".as_bytes();
        assert_eq!(unescape(&name(multi)), multi);
    }

    #[test]
    fn text_escapes_controls_and_keeps_the_rest() {
        assert!(matches!(text("plain \\ text é"), Cow::Borrowed(_)));
        assert_eq!(
            text("\x1b[2Jcleared\rover\x07\n\u{9b}"),
            "\\e[2Jcleared\\rover\\a\\n\\xc2\\x9b"
        );
    }

    #[test]
    fn lines_keep_newlines_and_tabs_and_escape_the_rest() {
        assert!(matches!(lines("a\tb\nc"), Cow::Borrowed(_)));
        assert_eq!(
            lines("a\r\n\x1b[1mb\u{202e}"),
            "a\\r\n\\e[1mb\\xe2\\x80\\xae"
        );
    }

    #[test]
    fn json_lines_carry_no_terminal_controls() {
        let value = serde_json::json!({"line": "\x1b[2J\u{9b}31m\u{7f}\u{202e}ok\n\"q\""});
        let line = json_line(&value).unwrap();
        assert!(!line.chars().any(is_unsafe), "{line}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&line).unwrap(),
            value
        );
        assert!(
            line.contains("\\u001b[2J\\u009b31m\\u007f\\u202eok\\n"),
            "{line}"
        );
    }
}
