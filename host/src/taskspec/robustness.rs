//! The properties every input text must keep, whatever it holds: `parse` returns (no panic),
//! every error carries a message, and the depth pre-check never passes a document that
//! serde_yaml finds much deeper than it measured.
//!
//! One definition, run by the property test (`proptests.rs`, in `cargo test`) and by the fuzz
//! target (`fuzz/fuzz_targets/taskspec.rs`, with cargo-fuzz on nightly).

use super::limits::{nesting_depth, MAX_VALUE_BYTES};
use super::parse;

/// Parses `text` as a TaskSpec and panics if one of the properties does not hold. A panic inside
/// `parse` itself is reported as it is.
#[doc(hidden)]
pub fn check(text: &str) {
    let env = |name: &str| match name {
        "HOME" => Some("/home/fuzz".to_string()),
        "TOKEN" => Some("tok".to_string()),
        "NEWLINES" => Some("a\nb: [c".to_string()),
        "BIG" => Some("x".repeat(MAX_VALUE_BYTES + 1)),
        _ => None,
    };
    if let Err(error) = parse(text, "/specs/fuzz.yaml", &env) {
        assert!(
            !error.message.trim().is_empty() && !error.to_string().trim().is_empty(),
            "an error without a message: {error:?}"
        );
    }
    // Aliases repeat a node wherever they are used, which no text scan can measure.
    if !text.contains('*') {
        if let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(text) {
            let (measured, built) = (nesting_depth(text), depth(&value));
            assert!(
                built <= 2 * measured,
                "serde_yaml built {built} levels, the pre-check measured {measured}"
            );
        }
    }
}

/// How deeply sequences and mappings nest in `value`.
fn depth(value: &serde_yaml::Value) -> usize {
    use serde_yaml::Value;
    match value {
        Value::Sequence(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Mapping(map) => {
            1 + map
                .iter()
                .map(|(key, value)| depth(key).max(depth(value)))
                .max()
                .unwrap_or(0)
        }
        Value::Tagged(tagged) => depth(&tagged.value),
        _ => 0,
    }
}
