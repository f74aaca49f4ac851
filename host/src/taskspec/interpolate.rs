//! `${NAME}` substitution in string values.
//!
//! TaskSpecs carry secrets by reference (`token: ${GIT_TOKEN}`). Substitution runs on each string
//! scalar after YAML parsing, never on the raw text, so a variable's value can never add YAML
//! structure; see `strict.rs` for where it is applied.

use std::borrow::Cow;

/// Looks up an environment variable by name.
pub type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// Replaces every `${NAME}` in `text` with the variable's value; `$${` stands for a literal `${`.
/// A `$` followed by anything else is kept as it is. Values are inserted verbatim and are not
/// scanned again.
pub(crate) fn interpolate<'a>(text: &'a str, env: Env) -> Result<Cow<'a, str>, String> {
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
            let end = tail.find('}').ok_or_else(|| {
                "unterminated \"${\"; write \"$${\" for a literal \"${\"".to_string()
            })?;
            let name = &tail[..end];
            if !is_variable_name(name) {
                return Err(format!(
                    "\"${{{name}}}\" is not a variable reference; a name is letters, digits and _"
                ));
            }
            let value =
                env(name).ok_or_else(|| format!("environment variable \"{name}\" is not set"))?;
            out.push_str(&value);
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
            _ => None,
        }
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
        assert_eq!(error, "environment variable \"NOPE\" is not set");
    }

    #[test]
    fn malformed_references_are_errors() {
        assert!(interpolate("${TOKEN", &env).is_err());
        assert!(interpolate("${A-B}", &env).is_err());
        assert!(interpolate("${}", &env).is_err());
    }
}
