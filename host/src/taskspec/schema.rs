//! The JSON Schema of a TaskSpec document, for editors and for `agentgate schema`.
//!
//! Derived from the same types that parse the document (schemars), so it cannot drift. The
//! quantities the parser converts (cores, bytes, durations, money) are described as they are
//! written, with the pattern the parser accepts.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

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

/// The schema of `T` as one branch of a `oneOf` over a tag: `tag` is the constant `value`
/// and required, and no key but `T`'s and the tag is allowed. For sections whose keys
/// depend on their `type` (a gate's check, a notification).
pub(crate) fn tagged_branch<T: JsonSchema>(
    generator: &mut SchemaGenerator,
    tag: &str,
    value: &str,
) -> Schema {
    let mut branch = T::json_schema(generator);
    if let Some(properties) = branch.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.insert(tag.into(), serde_json::json!({ "const": value }));
    }
    let required = branch
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::json!([]));
    if let Some(required) = required.as_array_mut() {
        required.push(tag.into());
    }
    branch.insert("additionalProperties".into(), false.into());
    branch
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

    fn schema_errors(document: &serde_json::Value) -> Vec<String> {
        let schema = json_schema();
        let validator = jsonschema::validator_for(&schema).unwrap();
        validator
            .iter_errors(document)
            .map(|e| e.to_string())
            .collect()
    }

    fn yaml(text: &str) -> serde_json::Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn schema_describes_convergence_delivery_and_the_desired_state() {
        let schema = json_schema();
        let text = serde_json::to_string(&schema).unwrap();
        for word in [
            "\"Convergence\"",
            "\"Delivery\"",
            "\"DesiredState\"",
            "\"allGatesPassed\"",
            "\"verification-levels\"",
            "\"github-actions\"",
            "\"skip-remaining\"",
            "\"github-pr\"",
            "\"autoMerge\"",
            "\"onFailure\"",
            "\"commitTemplate\"",
            "\"progressThreshold\"",
        ] {
            assert!(text.contains(word), "{word} missing from the schema");
        }
        let every_field = yaml(include_str!(
            "../../../tests/fixtures/taskspecs-not-yet/every-convergence-and-delivery-field.yaml"
        ));
        assert_eq!(schema_errors(&every_field), Vec::<String>::new());
        let full = include_str!("../../../tests/fixtures/taskspecs/full-every-field.yaml")
            .replace("priority: 1", "priority: \"1\"")
            .replace("CI: true", "CI: \"true\"")
            .replace("RETRIES: 3", "RETRIES: \"3\"");
        assert_eq!(schema_errors(&yaml(&full)), Vec::<String>::new());
    }

    #[test]
    fn schema_refuses_what_the_parser_refuses() {
        let document = |convergence: &str| {
            yaml(&format!(
                "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {{name: x}}\nspec:\n  \
                 goal: {{prompt: p}}\n  execution:\n    workspace: {{source: local, path: /x}}\n  \
                 convergence:\n{convergence}"
            ))
        };
        assert!(schema_errors(&document(
            "    strategy: fixed\n    config: {iterations: 2}\n"
        ))
        .is_empty());
        for refused in [
            "    strategy: adaptive\n",
            "    strategy: fixed\n    config: {baseIterations: 2}\n",
            "    config: {iterations: 2}\n",
            "    strategy: manual\n    config: {iterations: 2}\n",
            "    gates:\n      - {name: g, check: {type: lint}}\n",
            "    gates:\n      - {name: g, check: {type: custom, command: x, levels: [L0]}}\n",
            "    gates:\n      - {name: g, check: {type: custom, command: x, timeout: 300000}}\n",
            "    gates:\n      - {name: \"\", check: {type: convergence}}\n",
        ] {
            assert!(!schema_errors(&document(refused)).is_empty(), "{refused}");
        }
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
