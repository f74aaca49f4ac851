//! Consent: what a plugin asks for, shown before it is granted, and what an update
//! adds.
//!
//! The operator sees every interface the component imports (WASI included, read from
//! the component itself, not from what its author says) and the scopes it asks for.
//! Granting needs a yes on a terminal, or `--yes` for scripts; without either nothing is
//! granted. An update that asks for more needs consent again and shows the difference;
//! one that asks for less narrows the grant at once.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};

use super::MarketError;

/// Keys of a grant entry the marketplace sets itself, never the author.
const SET_BY_THE_HOST: [&str; 3] = ["capabilities", "version", "digest"];

/// Checks an author's `--scopes` manifest: a grants.yaml plugin entry without the keys
/// the host sets.
pub fn check_asked_scopes(scopes: &serde_json::Value) -> Result<(), MarketError> {
    let Some(map) = scopes.as_object() else {
        return Err(MarketError::Input(
            "--scopes: expected a mapping shaped like a grants.yaml plugin entry, e.g. `docker: {images: [\"node:20\"]}`".into(),
        ));
    };
    for key in SET_BY_THE_HOST {
        if map.contains_key(key) {
            return Err(MarketError::Input(format!(
                "--scopes: `{key}` is set by agentgate (capabilities come from the component's imports, version and digest from the publish); remove it"
            )));
        }
    }
    Ok(())
}

/// The grants.yaml entry for a component: its capabilities, the asked scopes, and pins
/// to its version and digest, so it holds for exactly those bytes.
pub fn grant_entry(
    capabilities: &[String],
    scopes: &serde_json::Value,
    version: &str,
    digest: &str,
) -> serde_json::Value {
    let mut entry = scopes.as_object().cloned().unwrap_or_default();
    entry.insert("capabilities".into(), serde_json::json!(capabilities));
    entry.insert("version".into(), serde_json::json!(version));
    entry.insert("digest".into(), serde_json::json!(digest));
    serde_json::Value::Object(entry)
}

/// Each thing a grant entry allows, as a line: `capability docker`, `docker.images:
/// node:20`, `git.push`. Pins are not allowances.
pub fn allowances(entry: &serde_json::Value) -> BTreeSet<String> {
    fn walk(path: &str, value: &serde_json::Value, out: &mut BTreeSet<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(path, item, out);
                }
            }
            serde_json::Value::Bool(true) => {
                out.insert(path.to_string());
            }
            serde_json::Value::Bool(false) | serde_json::Value::Null => {}
            serde_json::Value::String(s) => {
                out.insert(format!("{path}: {s}"));
            }
            serde_json::Value::Number(n) => {
                out.insert(format!("{path}: {n}"));
            }
        }
    }
    let mut out = BTreeSet::new();
    if let Some(map) = entry.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "version" | "digest" => {}
                "capabilities" => {
                    for c in value.as_array().into_iter().flatten() {
                        if let Some(c) = c.as_str() {
                            out.insert(format!("capability {c}"));
                        }
                    }
                }
                _ => walk(key, value, &mut out),
            }
        }
    }
    out
}

/// What `new` allows that `old` did not, and what it no longer allows.
pub fn diff(old: &serde_json::Value, new: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let (old, new) = (allowances(old), allowances(new));
    (
        new.difference(&old).cloned().collect(),
        old.difference(&new).cloned().collect(),
    )
}

/// The text shown before consent: every import and what it grants, and the asked
/// scopes.
pub fn summary(imports: &[(String, String)], entry: &serde_json::Value) -> String {
    let mut text = String::from("  it imports:\n");
    for (interface, grants) in imports {
        text.push_str(&format!("    {interface:<44} {grants}\n"));
    }
    let asked = allowances(entry);
    text.push_str("  it asks for:\n");
    if asked.is_empty() {
        text.push_str("    nothing\n");
    }
    for line in asked {
        text.push_str(&format!("    {line}\n"));
    }
    text
}

/// Asks `question` on the terminal; `yes` answers for a script. Without a terminal
/// and without `yes`, the answer is no.
pub fn ask(question: &str, yes: bool) -> Result<(), MarketError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(MarketError::NoConsent(format!(
            "{question}: no terminal to ask on; nothing was granted. Read what it asks for above and pass --yes to consent from a script"
        )));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| MarketError::NoConsent(format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        Ok(())
    } else {
        Err(MarketError::NoConsent(format!(
            "{question}: answered no; nothing was granted"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_that_asks_more_shows_what_it_adds() {
        let old = grant_entry(
            &["events".into(), "docker".into()],
            &serde_json::json!({"docker": {"images": ["node:20"]}}),
            "1.0.0",
            "sha256:a",
        );
        let new = grant_entry(
            &["events".into(), "docker".into(), "http".into()],
            &serde_json::json!({"docker": {"images": ["node:20", "python:3"]}, "hosts": ["api.example.com"]}),
            "1.1.0",
            "sha256:b",
        );
        let (added, removed) = diff(&old, &new);
        assert_eq!(
            added,
            [
                "capability http",
                "docker.images: python:3",
                "hosts: api.example.com"
            ]
        );
        assert!(removed.is_empty());
        let (added, removed) = diff(&new, &old);
        assert!(added.is_empty(), "narrowing adds nothing: {added:?}");
        assert_eq!(removed.len(), 3);
    }

    #[test]
    fn the_author_cannot_set_what_the_host_sets() {
        assert!(check_asked_scopes(&serde_json::json!({"capabilities": ["docker"]})).is_err());
        assert!(check_asked_scopes(&serde_json::json!({"digest": "sha256:x"})).is_err());
        assert!(check_asked_scopes(&serde_json::json!(["x"])).is_err());
        check_asked_scopes(&serde_json::json!({"git": {"push": true}})).unwrap();
    }
}
