//! Hard bounds on what a TaskSpec may cost to read: its size, its nesting depth, and the size of
//! what `${VAR}` substitution may insert.
//!
//! A TaskSpec can come from anyone (a shared repository, a bot), so reading one must stay cheap
//! whatever it holds. The YAML parser underneath (libyaml, through serde_yaml) is quadratic in
//! the nesting depth of flow collections (`[[[[…`: 200k levels take over a minute) and loads the
//! whole document before serde sees any of it, so both the size and the depth are checked here,
//! on the raw text, before the parser runs. The bounds of each quantity field (durations, bytes,
//! cores, money) live with their parsers in `units.rs`.

use std::io::Read;
use std::path::Path;

use super::error::SpecError;

/// The largest TaskSpec file accepted, in bytes (1 MiB). Real TaskSpecs are a few KiB; a long
/// prompt belongs in the document, a large data set does not.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The deepest nesting accepted: flow collections (`[`, `{`) plus block indentation levels.
/// A TaskSpec needs about ten; serde_yaml itself gives up at 128.
pub const MAX_DEPTH: usize = 64;

/// The largest value one `${VAR}` may insert, in bytes (64 KiB).
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The most that all `${VAR}` substitutions of one document may insert together, in bytes (1 MiB),
/// so that a value repeated many times cannot multiply the document.
pub const MAX_INTERPOLATED_BYTES: usize = 1 << 20;

/// Reads a TaskSpec file, refusing one larger than `MAX_FILE_BYTES` without reading all of it.
///
/// Only a regular file is read. The path is opened without blocking and its type checked on the
/// opened descriptor (not on the path, which could be swapped in between), so a FIFO with no
/// writer, a terminal or a device is refused at once instead of hanging or reading forever.
pub fn read(path: &Path) -> Result<String, SpecError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    let cannot_read =
        |e: std::io::Error| SpecError::new("", format!("cannot read {}: {e}", path.display()));
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot_read)?;
    let kind = file.metadata().map_err(cannot_read)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO (named pipe)"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "a special file"
        };
        return Err(SpecError::new(
            "",
            format!("{} is {what}, not a TaskSpec file", path.display()),
        )
        .with_hint("give the path of a regular file holding the TaskSpec's YAML"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_large(None));
    }
    String::from_utf8(bytes).map_err(|e| {
        SpecError::new(
            "",
            format!(
                "{} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
        .with_hint("save the TaskSpec as UTF-8")
    })
}

/// Checks the size and the nesting depth of a document before it is parsed.
pub(crate) fn check_document(text: &str) -> Result<(), SpecError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_large(Some(text.len())));
    }
    check_depth(text)
}

fn too_large(size: Option<usize>) -> SpecError {
    let size = size.map(|n| format!(" ({n} bytes)")).unwrap_or_default();
    SpecError::new(
        "",
        format!("the TaskSpec is larger than {MAX_FILE_BYTES} bytes (1 MiB){size}"),
    )
    .with_hint(
        "keep large data out of the TaskSpec: put it in the workspace or a mounted file and refer \
         to it by path",
    )
}

/// A value a `${VAR}` would insert is over `MAX_VALUE_BYTES`; the message names the
/// variable, and carries its hint as serde carries it (see [`super::error::with_hint`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", super::error::with_hint(
    format_args!(
        "environment variable \"{name}\" is {bytes} bytes; a ${{VAR}} value may be at most \
         {MAX_VALUE_BYTES} bytes (64 KiB)"
    ),
    "pass large data through a file (a mount or the workspace) rather than ${VAR}",
))]
pub(crate) struct ValueTooLarge {
    name: String,
    bytes: usize,
}

/// Checks one value a `${VAR}` inserts.
pub(crate) fn check_value(name: &str, value: &str) -> Result<(), ValueTooLarge> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(ValueTooLarge {
            name: name.to_string(),
            bytes: value.len(),
        });
    }
    Ok(())
}

/// The substitutions of one document together exceed `MAX_INTERPOLATED_BYTES`, at
/// variable `name`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", super::error::with_hint(
    format_args!(
        "substituting \"${{{name}}}\" takes the values inserted by ${{VAR}}s in this document \
         over {MAX_INTERPOLATED_BYTES} bytes (1 MiB)"
    ),
    "refer to large or repeated data by path instead of through ${VAR}",
))]
pub(crate) struct InterpolatedTooMuch {
    pub(crate) name: String,
}

/// Refuses a document nested deeper than `MAX_DEPTH`, in one linear pass over the text.
///
/// The pass follows libyaml's tokenizer closely enough to tell structure from content: quoted,
/// plain and block scalars and comments are skipped as libyaml skips them (so brackets in a
/// prompt do not count, and brackets hidden in a string cannot close real ones), flow levels are
/// counted at `[`/`{` exactly as libyaml counts them (its cost grows with their square), and
/// block levels where libyaml opens an indentation level. serde_yaml can see at most twice the
/// depth measured here (a single-pair mapping `[a: b]` is a level of its own), so a document
/// that passes never reaches serde_yaml's own limit of 128, aliases aside.
pub(crate) fn check_depth(text: &str) -> Result<(), SpecError> {
    DepthScan::new(text, MAX_DEPTH).run()
}

/// The deepest nesting `check_depth` measures in `text`, whatever it is; `robustness` checks it
/// against what serde_yaml builds.
#[cfg(any(test, fuzzing))]
pub(crate) fn nesting_depth(text: &str) -> usize {
    let mut scan = DepthScan::new(text, usize::MAX);
    let _ = scan.run();
    scan.deepest
}

/// A position in the text, with libyaml's 1-based line and 0-based column in characters.
struct Cursor<'t> {
    bytes: &'t [u8],
    pos: usize,
    line: usize,
    column: usize,
}

impl<'t> Cursor<'t> {
    fn new(bytes: &'t [u8]) -> Self {
        let bom = if bytes.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        Self {
            bytes,
            pos: bom,
            line: 1,
            column: 0,
        }
    }

    fn at(&self, ahead: usize) -> u8 {
        self.bytes.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn is_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// The length of the line break at `ahead`, 0 if there is none (`\r\n`, `\r`, `\n`, NEL,
    /// LS and PS, as libyaml reads them).
    fn break_len(&self, ahead: usize) -> usize {
        match (self.at(ahead), self.at(ahead + 1), self.at(ahead + 2)) {
            (b'\r', b'\n', _) => 2,
            (b'\r' | b'\n', _, _) => 1,
            (0xC2, 0x85, _) => 2,
            (0xE2, 0x80, 0xA8 | 0xA9) => 3,
            _ => 0,
        }
    }

    fn is_blank(&self, ahead: usize) -> bool {
        matches!(self.at(ahead), b' ' | b'\t')
    }

    fn is_blankz(&self, ahead: usize) -> bool {
        self.is_blank(ahead) || self.break_len(ahead) > 0 || self.pos + ahead >= self.bytes.len()
    }

    /// libyaml's "alpha": letters, digits, `_` and `-`.
    fn is_alpha(&self) -> bool {
        matches!(self.at(0), b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'-')
    }

    /// Steps over one character, or one line break.
    fn skip(&mut self) {
        match self.break_len(0) {
            0 => {
                let width = match self.at(0) {
                    0xF0..=0xFF => 4,
                    0xE0..=0xEF => 3,
                    0xC0..=0xDF => 2,
                    _ => 1,
                };
                self.pos = (self.pos + width).min(self.bytes.len());
                self.column += 1;
            }
            len => {
                self.pos += len;
                self.line += 1;
                self.column = 0;
            }
        }
    }

    fn skip_line(&mut self) {
        while !self.is_end() && self.break_len(0) == 0 {
            self.skip();
        }
    }

    /// `---` or `...` at the start of a line.
    fn at_document_marker(&self) -> bool {
        self.column == 0
            && ((self.at(0), self.at(1), self.at(2)) == (b'-', b'-', b'-')
                || (self.at(0), self.at(1), self.at(2)) == (b'.', b'.', b'.'))
            && self.is_blankz(3)
    }
}

/// What opened a block indentation level.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Mapping,
    Sequence,
}

/// Where a simple key (`key: value`) may have started, as libyaml remembers it.
#[derive(Clone, Copy)]
struct Key {
    line: usize,
    column: usize,
    pos: usize,
}

struct DepthScan<'t> {
    cursor: Cursor<'t>,
    /// libyaml's flow level: how many `[`/`{` are open.
    flow: usize,
    /// libyaml's block indentation levels.
    indents: Vec<(usize, Level)>,
    key_allowed: bool,
    /// The possible simple key of each flow level, outermost first.
    keys: Vec<Option<Key>>,
    limit: usize,
    deepest: usize,
}

impl<'t> DepthScan<'t> {
    fn new(text: &'t str, limit: usize) -> Self {
        Self {
            cursor: Cursor::new(text.as_bytes()),
            flow: 0,
            indents: Vec::new(),
            key_allowed: true,
            keys: vec![None],
            limit,
            deepest: 0,
        }
    }

    fn run(&mut self) -> Result<(), SpecError> {
        loop {
            self.skip_to_token();
            if self.cursor.is_end() {
                return Ok(());
            }
            self.forget_stale_keys();
            if self.flow == 0 {
                let column = self.cursor.column;
                while self.indents.last().is_some_and(|(at, _)| *at > column) {
                    self.indents.pop();
                }
            }
            self.token()?;
        }
    }

    /// A flow collection that may turn out to be a block mapping's key (`[a]: b`) sits inside a
    /// mapping level that libyaml opens only at the `:`; it is counted from the start.
    fn depth(&self) -> usize {
        let pending_key = self.flow > 0 && self.keys[0].is_some();
        self.flow + self.indents.len() + usize::from(pending_key)
    }

    fn too_deep(&mut self) -> Result<(), SpecError> {
        self.deepest = self.deepest.max(self.depth());
        if self.depth() <= self.limit {
            return Ok(());
        }
        Err(SpecError {
            line: Some(self.cursor.line),
            column: Some(self.cursor.column + 1),
            ..SpecError::new(
                "",
                format!("the document is nested more than {MAX_DEPTH} levels deep"),
            )
            .with_hint(format!(
                "a TaskSpec may nest at most {MAX_DEPTH} levels of mappings and sequences; \
                 flatten this structure"
            ))
        })
    }

    /// Blanks, comments and line breaks between tokens.
    fn skip_to_token(&mut self) {
        let c = &mut self.cursor;
        loop {
            while c.at(0) == b' ' || (c.at(0) == b'\t' && (self.flow > 0 || !self.key_allowed)) {
                c.skip();
            }
            if c.at(0) == b'#' {
                c.skip_line();
            }
            if c.break_len(0) == 0 || c.is_end() {
                return;
            }
            c.skip();
            if self.flow == 0 {
                self.key_allowed = true;
            }
        }
    }

    /// A simple key must end (at its `:`) on its line and within 1024 characters.
    fn forget_stale_keys(&mut self) {
        let (line, pos) = (self.cursor.line, self.cursor.pos);
        for slot in &mut self.keys {
            if slot.is_some_and(|key| key.line < line || key.pos + 1024 < pos) {
                *slot = None;
            }
        }
    }

    fn key(&mut self) -> &mut Option<Key> {
        self.keys
            .last_mut()
            .expect("one slot per flow level, and one outside")
    }

    fn save_key(&mut self) {
        if self.key_allowed {
            *self.key() = Some(Key {
                line: self.cursor.line,
                column: self.cursor.column,
                pos: self.cursor.pos,
            });
        }
    }

    /// Opens a block level at `column` unless one is open there already.
    fn roll_indent(&mut self, column: usize, level: Level) -> Result<(), SpecError> {
        if self.flow > 0 {
            return Ok(());
        }
        match self.indents.last() {
            Some((at, _)) if *at > column => return Ok(()),
            // A sequence written at its parent key's indentation is a level of its own.
            Some((at, Level::Mapping)) if *at == column && level == Level::Sequence => {}
            Some((at, _)) if *at == column => return Ok(()),
            _ => {}
        }
        self.indents.push((column, level));
        self.too_deep()
    }

    /// A key at `column` ends an indentless sequence written at the same indentation.
    fn close_indentless_sequence(&mut self, column: usize) {
        let n = self.indents.len();
        if n >= 2
            && self.indents[n - 1] == (column, Level::Sequence)
            && self.indents[n - 2] == (column, Level::Mapping)
        {
            self.indents.pop();
        }
    }

    fn token(&mut self) -> Result<(), SpecError> {
        let c = &self.cursor;
        let (here, column, flow) = (c.at(0), c.column, self.flow > 0);
        let (next_blank, next_blankz) = (c.is_blank(1), c.is_blankz(1));
        match here {
            b'%' if column == 0 => self.cursor.skip_line(),
            _ if c.at_document_marker() => {
                self.indents.clear();
                *self.key() = None;
                self.key_allowed = false;
                for _ in 0..3 {
                    self.cursor.skip();
                }
            }
            b'[' | b'{' => {
                self.save_key();
                self.flow += 1;
                self.keys.push(None);
                self.too_deep()?;
                self.key_allowed = true;
                self.cursor.skip();
            }
            b']' | b'}' => {
                if self.flow > 0 {
                    self.keys.pop();
                }
                self.flow = self.flow.saturating_sub(1);
                self.key_allowed = false;
                self.cursor.skip();
            }
            b',' => {
                *self.key() = None;
                self.key_allowed = true;
                self.cursor.skip();
            }
            b'-' if next_blankz => {
                self.roll_indent(column, Level::Sequence)?;
                *self.key() = None;
                self.key_allowed = true;
                self.cursor.skip();
            }
            b'?' if flow || next_blankz => {
                self.roll_indent(column, Level::Mapping)?;
                *self.key() = None;
                self.key_allowed = !flow;
                self.cursor.skip();
            }
            b':' if flow || next_blankz => {
                match self.key().take() {
                    Some(key) => {
                        if !flow {
                            self.close_indentless_sequence(key.column);
                        }
                        self.roll_indent(key.column, Level::Mapping)?;
                        self.key_allowed = false;
                    }
                    None => {
                        self.roll_indent(column, Level::Mapping)?;
                        self.key_allowed = !flow;
                    }
                }
                self.cursor.skip();
            }
            b'*' | b'&' => {
                self.save_key();
                self.key_allowed = false;
                self.cursor.skip();
                while self.cursor.is_alpha() {
                    self.cursor.skip();
                }
            }
            b'!' => {
                self.save_key();
                self.key_allowed = false;
                self.skip_tag();
            }
            b'|' | b'>' if !flow => {
                *self.key() = None;
                self.key_allowed = true;
                self.skip_block_scalar();
            }
            b'\'' | b'"' => {
                self.save_key();
                self.key_allowed = false;
                self.skip_quoted(here);
            }
            _ if starts_plain(here, next_blank, next_blankz, flow) => {
                self.save_key();
                self.key_allowed = false;
                self.skip_plain();
            }
            // libyaml stops with an error here; stepping over it can only count more.
            _ => self.cursor.skip(),
        }
        Ok(())
    }

    fn skip_tag(&mut self) {
        let c = &mut self.cursor;
        c.skip();
        if c.at(0) == b'<' {
            while !c.is_end() && c.at(0) != b'>' && !c.is_blankz(0) {
                c.skip();
            }
            if c.at(0) == b'>' {
                c.skip();
            }
            return;
        }
        while c.is_alpha() || b";/?:@&=+$.%!~*'()".contains(&c.at(0)) {
            c.skip();
        }
    }

    /// A `'…'` or `"…"` scalar, across lines.
    fn skip_quoted(&mut self, quote: u8) {
        let c = &mut self.cursor;
        c.skip();
        while !c.is_end() {
            match c.at(0) {
                b'\'' if quote == b'\'' && c.at(1) == b'\'' => {
                    c.skip();
                    c.skip();
                }
                b'\\' if quote == b'"' => {
                    c.skip();
                    if !c.is_end() {
                        c.skip();
                    }
                }
                byte if byte == quote => {
                    c.skip();
                    return;
                }
                _ => c.skip(),
            }
        }
    }

    /// A plain scalar, across lines while they stay indented under its parent.
    fn skip_plain(&mut self) {
        let flow = self.flow > 0;
        let min_indent = self.indents.last().map_or(0, |(at, _)| at + 1);
        let mut crossed_line = false;
        let c = &mut self.cursor;
        loop {
            if c.at_document_marker() || c.at(0) == b'#' {
                break;
            }
            while !c.is_blankz(0) {
                let ends = (c.at(0) == b':' && c.is_blankz(1))
                    || (flow
                        && (b",[]{}".contains(&c.at(0))
                            || c.at(0) == b':' && b",?[]{}".contains(&c.at(1))));
                if ends {
                    break;
                }
                c.skip();
            }
            if !(c.is_blank(0) || c.break_len(0) > 0) {
                break;
            }
            while c.is_blank(0) || c.break_len(0) > 0 {
                if c.break_len(0) > 0 {
                    crossed_line = true;
                }
                c.skip();
            }
            if !flow && c.column < min_indent {
                break;
            }
        }
        if crossed_line {
            self.key_allowed = true;
        }
    }

    /// A `|` or `>` scalar: its header line, then every line indented as its content.
    fn skip_block_scalar(&mut self) {
        let parent = self.indents.last().map(|(at, _)| *at);
        let c = &mut self.cursor;
        c.skip();
        let mut increment = 0;
        for _ in 0..2 {
            match c.at(0) {
                b'+' | b'-' => c.skip(),
                digit @ b'1'..=b'9' => {
                    increment = usize::from(digit - b'0');
                    c.skip();
                }
                _ => break,
            }
        }
        while c.is_blank(0) {
            c.skip();
        }
        if c.at(0) == b'#' {
            c.skip_line();
        }
        if c.break_len(0) == 0 {
            // libyaml stops with an error: the header must end its line.
            return;
        }
        c.skip();
        let mut indent = match (increment, parent) {
            (0, _) => 0,
            (n, Some(at)) => at + n,
            (n, None) => n,
        };
        block_scalar_breaks(c, &mut indent, parent);
        while c.column == indent && !c.is_end() {
            c.skip_line();
            if c.is_end() {
                break;
            }
            c.skip();
            block_scalar_breaks(c, &mut indent, parent);
        }
    }
}

/// libyaml's `scan_block_scalar_breaks`: the blank lines of a block scalar, and its content
/// indentation when the header did not give one.
fn block_scalar_breaks(c: &mut Cursor, indent: &mut usize, parent: Option<usize>) {
    let mut max_indent = 0;
    loop {
        while (*indent == 0 || c.column < *indent) && c.at(0) == b' ' {
            c.skip();
        }
        max_indent = max_indent.max(c.column);
        if c.break_len(0) == 0 {
            break;
        }
        c.skip();
    }
    if *indent == 0 {
        *indent = max_indent.max(parent.map_or(0, |at| at + 1)).max(1);
    }
}

/// Whether libyaml starts a plain scalar at this character.
fn starts_plain(here: u8, next_is_blank: bool, next_is_blankz: bool, flow: bool) -> bool {
    let indicator = b"-?:,[]{}#&*!|>'\"%@` \t".contains(&here);
    !indicator
        || (here == b'-' && !next_is_blank)
        || (!flow && (here == b'?' || here == b':') && !next_is_blankz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_error(text: &str) -> Option<SpecError> {
        check_depth(text).err()
    }

    #[test]
    fn only_a_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO nobody writes to: a blocking open would wait for a writer forever.
        let fifo = dir.path().join("task.yaml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let error = read(&fifo).unwrap_err().to_string();
        assert!(
            error.contains("is a FIFO (named pipe), not a TaskSpec file"),
            "{error}"
        );
        assert!(error.contains("regular file"), "{error}");
        let error = read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is a directory"), "{error}");
        let error = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(error.contains("is a device"), "{error}");
        let file = dir.path().join("ok.yaml");
        std::fs::write(&file, "a: 1\n").unwrap();
        assert_eq!(read(&file).unwrap(), "a: 1\n");
    }

    #[test]
    fn ordinary_documents_pass() {
        for text in [
            "a: 1\nb:\n  c: [1, 2, {d: e}]\n",
            "- a\n- - b\n  - c\n",
            "prompt: |\n  fix a[0] and {\n  [[[[[[[[[[\nnext: x\n",
            "prompt: \"[[[[[[[[[[[[[[\"\nother: '{{{{{{{{{{{'\n",
            "# [[[[[[[[[[[[[[[[[[\nkey: value # {{{{{{{{{{{{{\n",
            "key: a[0][1][2]{x}[[[[[[[[[\n",
        ] {
            assert!(check_depth(text).is_ok(), "{text:?}");
        }
    }

    #[test]
    fn deep_flow_nesting_is_refused_with_its_position() {
        let text = format!("a: {}", "[".repeat(200_000));
        let started = std::time::Instant::now();
        let error = depth_error(&text).expect("refused");
        assert_eq!(error.line, Some(1));
        assert_eq!(error.column, Some(3 + MAX_DEPTH));
        assert!(
            error.to_string().contains(&MAX_DEPTH.to_string()),
            "{error}"
        );
        // Generous: the point is linear time, not speed (the parser took over a minute).
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn depth_is_measured_not_counted() {
        let balanced = "x: [".to_string() + &"[], ".repeat(10_000) + "]";
        assert!(check_depth(&balanced).is_ok());
        let nest = |n| format!("x: {}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(nesting_depth(&nest(MAX_DEPTH - 1)), MAX_DEPTH);
        assert!(check_depth(&nest(MAX_DEPTH - 1)).is_ok());
        assert!(check_depth(&nest(MAX_DEPTH)).is_err());
    }

    #[test]
    fn brackets_inside_strings_cannot_close_real_ones() {
        let level = "[ \"]]]\", '}}}', {\"a\":\"}\"}, ";
        let text = level.repeat(MAX_DEPTH + 1);
        assert!(check_depth(&text).is_err());
    }

    #[test]
    fn deep_block_nesting_is_refused() {
        let mut text = String::new();
        for level in 0..=MAX_DEPTH {
            text.push_str(&format!("{}k{level}:\n", " ".repeat(level)));
        }
        let error = depth_error(&text).expect("refused");
        assert_eq!(error.line, Some(MAX_DEPTH + 1));
        let compact = "- ".repeat(MAX_DEPTH + 1) + "x\n";
        assert!(check_depth(&compact).is_err());
    }

    #[test]
    fn block_scalars_end_where_their_indentation_ends() {
        let text = format!("a: |\n  text\nb: {}", "[".repeat(MAX_DEPTH + 1));
        assert!(check_depth(&text).is_err());
        let text = format!("- k: |\n   text\n- {}", "[".repeat(MAX_DEPTH + 1));
        assert!(check_depth(&text).is_err());
    }

    #[test]
    fn a_quote_inside_a_plain_scalar_is_content() {
        let text = format!("k: a\n  \"b\nx: {}", "[".repeat(MAX_DEPTH + 1));
        assert!(check_depth(&text).is_err());
        let text = format!("[ a \"b, {}", "[".repeat(MAX_DEPTH + 1));
        assert!(check_depth(&text).is_err());
    }

    #[test]
    fn a_flow_key_counts_the_mapping_it_opens() {
        assert_eq!(nesting_depth("[a]: b\n"), 2);
        assert_eq!(nesting_depth("a: [b]\n"), 2);
        assert_eq!(nesting_depth("a:\n- b: c\n"), 3);
    }

    #[test]
    fn values_over_the_cap_name_the_variable() {
        assert!(check_value("SMALL", "x").is_ok());
        let error = check_value("BIG", &"x".repeat(MAX_VALUE_BYTES + 1))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("\"BIG\"") && error.contains("65536"),
            "{error}"
        );
    }
}
