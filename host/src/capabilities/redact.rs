//! Keeps secrets out of what a run writes: events, logs and `result.json`.
//!
//! The host knows the secret values it handed out (`--secret-env`, and `${VAR}`s with
//! secret-looking names); any of them that an agent or a plugin echoes is replaced by
//! `***` before it is stored or shown.

use std::borrow::Cow;

/// Values shorter than this are not treated as secrets: replacing them would mangle
/// ordinary text.
const MIN_SECRET_LEN: usize = 4;
const MASK: &str = "***";

#[derive(Debug, Default, Clone)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a secret containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    pub fn apply(&self, text: String) -> String {
        if !self.secrets.iter().any(|s| text.contains(s.as_str())) {
            return text;
        }
        self.secrets
            .iter()
            .fold(text, |text, secret| text.replace(secret.as_str(), MASK))
    }

    pub fn apply_bytes<'a>(&self, data: &'a [u8]) -> Cow<'a, [u8]> {
        let mut data = Cow::Borrowed(data);
        for secret in &self.secrets {
            let needle = secret.as_bytes();
            if !data.windows(needle.len()).any(|w| w == needle) {
                continue;
            }
            let mut out = Vec::with_capacity(data.len());
            let mut rest: &[u8] = &data;
            while let Some(pos) = rest.windows(needle.len()).position(|w| w == needle) {
                out.extend_from_slice(&rest[..pos]);
                out.extend_from_slice(MASK.as_bytes());
                rest = &rest[pos + needle.len()..];
            }
            out.extend_from_slice(rest);
            data = Cow::Owned(out);
        }
        data
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
