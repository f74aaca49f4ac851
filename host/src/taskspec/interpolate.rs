//! `${NAME}` substitution in string values.
//!
//! TaskSpecs carry secrets by reference (`token: ${GIT_TOKEN}`). Substitution runs on each string
//! scalar after YAML parsing, never on the raw text, so a variable's value can never add YAML
//! structure; see `strict.rs` for where it is applied. What substitution may insert is bounded
//! (`limits.rs`), per value and per document.

use std::borrow::Cow;
use std::cell::Cell;

use super::limits::{self, InterpolatedTooMuch, ValueTooLarge, MAX_INTERPOLATED_BYTES};

/// Looks up an environment variable by name.
pub type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// Why a `${NAME}` could not be substituted. serde carries it on as text, to become a
/// [`super::SpecError`] at the string's path and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum InterpolateError {
    #[error("environment variable \"{0}\" is not set")]
    Unset(String),
    #[error("unterminated \"${{\"; write \"$${{\" for a literal \"${{\"")]
    Unterminated,
    #[error("\"${{{0}}}\" is not a variable reference; a name is letters, digits and _")]
    NotAReference(String),
    #[error(transparent)]
    ValueTooLarge(#[from] ValueTooLarge),
    #[error(transparent)]
    TooMuch(#[from] InterpolatedTooMuch),
}

/// Substitutes `${NAME}`s for one document, counting what it inserts.
pub(crate) struct Interpolator<'e> {
    env: Env<'e>,
    inserted: Cell<usize>,
}

impl<'e> Interpolator<'e> {
    pub(crate) fn new(env: Env<'e>) -> Self {
        Self {
            env,
            inserted: Cell::new(0),
        }
    }

    /// Replaces every `${NAME}` in `text` with the variable's value; `$${` stands for a literal
    /// `${`. A `$` followed by anything else is kept as it is. Values are inserted verbatim and
    /// are not scanned again.
    pub(crate) fn interpolate<'a>(&self, text: &'a str) -> Result<Cow<'a, str>, InterpolateError> {
        interpolate(text, &|name| self.lookup(name))
    }

    /// A variable's value, refused when it or the document's running total is over its cap.
    fn lookup(&self, name: &str) -> Result<String, InterpolateError> {
        let value = (self.env)(name).ok_or_else(|| InterpolateError::Unset(name.to_string()))?;
        limits::check_value(name, &value)?;
        let inserted = self.inserted.get().saturating_add(value.len());
        if inserted > MAX_INTERPOLATED_BYTES {
            return Err(InterpolatedTooMuch {
                name: name.to_string(),
            }
            .into());
        }
        self.inserted.set(inserted);
        Ok(value)
    }
}

fn interpolate<'a>(
    text: &'a str,
    lookup: &dyn Fn(&str) -> Result<String, InterpolateError>,
) -> Result<Cow<'a, str>, InterpolateError> {
    if !text.contains("${") {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or(InterpolateError::Unterminated)?;
            let name = &tail[..end];
            if !is_variable_name(name) {
                return Err(InterpolateError::NotAReference(name.to_string()));
            }
            out.push_str(&lookup(name)?);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "TRICKY" => Some("x\nfoo: bar ${TOKEN}".into()),
            "BIG" => Some("x".repeat(limits::MAX_VALUE_BYTES + 1)),
            "HALF" => Some("x".repeat(limits::MAX_VALUE_BYTES)),
            _ => None,
        }
    }

    fn interpolate<'a>(text: &'a str, env: Env) -> Result<Cow<'a, str>, InterpolateError> {
        Interpolator::new(env).interpolate(text)
    }

    #[test]
    fn substitutes_variables() {
        assert_eq!(interpolate("a-${TOKEN}-b", &env).unwrap(), "a-s3cret-b");
        assert_eq!(
            interpolate("${TOKEN}${TOKEN}", &env).unwrap(),
            "s3crets3cret"
        );
    }

    #[test]
    fn leaves_plain_text_borrowed() {
        assert!(matches!(
            interpolate("cost $5", &env).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn double_dollar_escapes() {
        assert_eq!(interpolate("$${TOKEN}", &env).unwrap(), "${TOKEN}");
        assert_eq!(interpolate("$5 and $$", &env).unwrap(), "$5 and $$");
    }

    #[test]
    fn values_are_not_rescanned() {
        assert_eq!(
            interpolate("${TRICKY}", &env).unwrap(),
            "x\nfoo: bar ${TOKEN}"
        );
    }

    #[test]
    fn missing_variable_is_named() {
        let error = interpolate("${NOPE}", &env).unwrap_err();
        assert_eq!(
            error.to_string(),
            "environment variable \"NOPE\" is not set"
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        assert!(interpolate("${TOKEN", &env).is_err());
        assert!(interpolate("${A-B}", &env).is_err());
        assert!(interpolate("${}", &env).is_err());
    }

    #[test]
    fn a_value_over_the_cap_is_refused() {
        let error = interpolate("${BIG}", &env).unwrap_err().to_string();
        assert!(
            error.contains("\"BIG\"") && error.contains("65536"),
            "{error}"
        );
    }

    #[test]
    fn the_document_total_is_capped() {
        let interpolator = Interpolator::new(&env);
        let fits = MAX_INTERPOLATED_BYTES / limits::MAX_VALUE_BYTES;
        for _ in 0..fits {
            interpolator.interpolate("${HALF}").unwrap();
        }
        let error = interpolator.interpolate("${HALF}").unwrap_err().to_string();
        assert!(error.contains("1048576"), "{error}");
    }
}
