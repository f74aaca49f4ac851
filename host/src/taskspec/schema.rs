//! The JSON Schema of a TaskSpec document, for editors and for `agentgate schema`.
//!
//! Derived from the same types that parse the document (schemars), so it cannot drift. The
//! quantities the parser converts (cores, bytes, durations, money) are described as they are
//! written, with the pattern the parser accepts.

use schemars::{json_schema, Schema, SchemaGenerator};

use super::document::Document;
use super::units::{BYTES_PATTERN, COST_PATTERN, DURATION_PATTERN};

/// The JSON Schema (draft 2020-12) of a whole TaskSpec document.
pub fn json_schema() -> serde_json::Value {
    schemars::schema_for!(Document).to_value()
}

pub(crate) fn bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Bytes: an integer, optionally with Ki, Mi, Gi or Ti (e.g. \"4Gi\"); at most 1024Ti.",
        "type": ["string", "integer"],
        "pattern": BYTES_PATTERN,
        "minimum": 1,
    })
}

pub(crate) fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "A duration: an integer with s, m, h or d (e.g. \"30m\"), from 1s to 30d.",
        "type": "string",
        "pattern": DURATION_PATTERN,
    })
}

pub(crate) fn cost(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "US dollars, e.g. \"$5.00\"; at most $1000000.",
        "type": ["string", "number"],
        "pattern": COST_PATTERN,
        "exclusiveMinimum": 0,
    })
}

pub(crate) fn cpu(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "CPU cores, 0.1 to 64.",
        "type": "number",
        "minimum": 0.1,
        "maximum": 64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_describes_the_document() {
        let schema = json_schema();
        let text = serde_json::to_string(&schema).unwrap();
        let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(schema["properties"]["spec"].is_object());
        assert!(schema["properties"]["execution"].is_object());
        assert!(text.contains(BYTES_PATTERN.replace('\\', "\\\\").as_str()));
        assert!(
            jsonschema::meta::is_valid(&schema),
            "not a valid JSON Schema"
        );
    }

    #[test]
    fn schema_accepts_a_seed_example() {
        let schema = json_schema();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let document: serde_json::Value = serde_yaml::from_str(include_str!(
            "../../../tests/fixtures/taskspecs/seed-full-featured-execution.yaml"
        ))
        .unwrap();
        let errors: Vec<_> = validator
            .iter_errors(&document)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
