//! `SpecError`: the one error type of TaskSpec loading.
//!
//! A person fixes a TaskSpec by reading the error, so every error names the field path
//! (`spec.execution.sandbox.resources.memory`), the line when it is known, what is wrong, and
//! where possible a hint (`did you mean "path"?`). Errors raised while serde walks the YAML
//! travel through serde_yaml as plain strings; this file turns them back into a `SpecError`.

use std::fmt::Display;

/// Separates a message from its hint while the pair travels through serde as one string.
const HINT_SEPARATOR: char = '\u{1f}';

/// Something wrong with a TaskSpec document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", render(self))]
pub struct SpecError {
    /// Field path in the document, e.g. `spec.execution.workspace.path`; empty for the document
    /// itself (YAML syntax errors, a document of the wrong shape).
    pub path: String,
    /// 1-based line of the offending YAML node, when known.
    pub line: Option<usize>,
    /// 1-based column of the offending YAML node, when known.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// How to fix it, e.g. `did you mean "path"?`.
    pub hint: Option<String>,
}

/// `path (line N): message`, or `path: message (line N); hint` when there is a hint, so that
/// the hint is read last. Without a path: `line N, column M: message`.
fn render(error: &SpecError) -> String {
    let SpecError {
        path,
        line,
        column,
        message,
        hint,
    } = error;
    let line_note = line
        .map(|line| format!(" (line {line})"))
        .unwrap_or_default();
    match hint {
        _ if path.is_empty() => {
            let location = match (line, column) {
                (Some(line), Some(column)) => format!("line {line}, column {column}: "),
                (Some(line), None) => format!("line {line}: "),
                _ => String::new(),
            };
            let hint = hint
                .as_ref()
                .map(|hint| format!("; {hint}"))
                .unwrap_or_default();
            format!("{location}{message}{hint}")
        }
        Some(hint) => format!("{path}: {message}{line_note}; {hint}"),
        None => format!("{path}{line_note}: {message}"),
    }
}

impl SpecError {
    /// An error at `path` with no known line.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            line: None,
            column: None,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Converts a failure of the YAML deserializer, with the path `serde_path_to_error` tracked.
    pub(crate) fn from_yaml(error: serde_path_to_error::Error<serde_yaml::Error>) -> Self {
        let path = render_path(error.path());
        let error = error.into_inner();
        let location = error.location();
        let mut text = error.to_string();
        if let Some(at) = &location {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            if let Some(stripped) = text.strip_suffix(&suffix) {
                text.truncate(stripped.len());
            }
        }
        let text = strip_yaml_path(&text);
        let (message, hint) = match text.split_once(HINT_SEPARATOR) {
            Some((message, hint)) => (message, Some(hint.to_string())),
            None => (text, None),
        };
        Self {
            path,
            line: location.as_ref().map(|at| at.line()),
            column: location.as_ref().map(|at| at.column()),
            message: message.to_string(),
            hint,
        }
    }
}

/// Joins a message and a hint into one string that survives a trip through `de::Error::custom`.
pub(crate) fn with_hint(message: impl Display, hint: impl Display) -> String {
    format!("{message}{HINT_SEPARATOR}{hint}")
}

/// The message for a key that is not one of `allowed`, with the closest allowed key as a hint.
pub(crate) fn unknown_key(key: &str, allowed: &[&str]) -> String {
    let hint = match did_you_mean(key, allowed) {
        Some(near) => format!("did you mean \"{near}\"?"),
        None => format!("expected one of: {}", allowed.join(", ")),
    };
    with_hint(format_args!("unknown key \"{key}\""), hint)
}

/// The message for a value that is not one of `allowed` (`unknown strategy "hybird";
/// expected one of: fixed, hybrid, ralph, manual`), with a "did you mean" when one is close.
/// `what` names the kind of value; `value` is shown as written.
pub(crate) fn unknown_choice(what: &str, value: &str, allowed: &[&str]) -> String {
    let message = format!(
        "unknown {what} {value:?}; expected one of: {}",
        allowed.join(", ")
    );
    match did_you_mean(value, allowed) {
        Some(near) => with_hint(message, format_args!("did you mean \"{near}\"?")),
        None => message,
    }
}

/// `a`, `a or b`, `a, b or c`: the words as a person would list the alternatives.
pub(crate) fn either(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The allowed word closest to `word`, if it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(word: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(word, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2 && *distance < word.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `a.b[0].c`, the same form serde_yaml and the CLI use; empty for the document root.
fn render_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => push_key(&mut out, key),
            Segment::Enum { variant } => push_key(&mut out, variant),
            Segment::Unknown => {}
        }
    }
    out
}

fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(key);
}

/// serde_yaml writes its own `path: ` before a message; we report the path separately. A path
/// has no spaces while every message has one before its first `": "`, which tells them apart.
fn strip_yaml_path(text: &str) -> &str {
    match text.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && !head.contains(char::is_whitespace) => rest,
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_value_error_with_line_after_path() {
        let error = SpecError {
            line: Some(14),
            ..SpecError::new("spec.execution.sandbox.resources.memory", "\"4Gb\" is bad")
        };
        assert_eq!(
            error.to_string(),
            "spec.execution.sandbox.resources.memory (line 14): \"4Gb\" is bad"
        );
    }

    #[test]
    fn renders_hint_last() {
        let error = SpecError {
            line: Some(9),
            ..SpecError::new("spec.execution.workspace", "unknown key \"pth\"")
                .with_hint("did you mean \"path\"?")
        };
        assert_eq!(
            error.to_string(),
            "spec.execution.workspace: unknown key \"pth\" (line 9); did you mean \"path\"?"
        );
    }

    #[test]
    fn renders_document_level_error_with_column() {
        let error = SpecError {
            line: Some(3),
            column: Some(7),
            ..SpecError::new("", "mapping values are not allowed")
        };
        assert_eq!(
            error.to_string(),
            "line 3, column 7: mapping values are not allowed"
        );
    }

    #[test]
    fn suggests_close_keys_only() {
        assert_eq!(did_you_mean("pth", &["source", "path"]), Some("path"));
        assert_eq!(
            did_you_mean("maxtokens", &["maxTokens", "model"]),
            Some("maxTokens")
        );
        assert_eq!(did_you_mean("completely", &["path"]), None);
    }

    #[test]
    fn strips_yaml_path_but_not_message_colons() {
        assert_eq!(strip_yaml_path("a.b[0]: unknown key"), "unknown key");
        assert_eq!(
            strip_yaml_path("invalid type: string"),
            "invalid type: string"
        );
    }
}
