//! Checks a plugin's `options` against the JSON Schema the plugin describes.
//!
//! The TaskSpec model cannot know a marketplace plugin's settings, so `options` is kept as
//! free-form JSON while parsing and checked here once the host has loaded the plugin and read
//! its schema. Errors name the full path of the bad value, like every other TaskSpec error.

use jsonschema::paths::LocationSegment;

use super::error::SpecError;

/// Validates `options` against `schema_json`, the schema a plugin's `describe()` returned.
/// `field_path` is where the options sit, e.g. `spec.execution.agent.options`; the error names
/// the path of the first bad value under it.
pub fn validate_options(
    field_path: &str,
    options: &serde_json::Value,
    schema_json: &str,
) -> Result<(), SpecError> {
    let plugin_bug = |message: String| {
        SpecError::new(field_path, message)
            .with_hint("this is a bug in the plugin, not the TaskSpec")
    };
    let schema: serde_json::Value = serde_json::from_str(schema_json)
        .map_err(|e| plugin_bug(format!("the plugin's options schema is not JSON: {e}")))?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| plugin_bug(format!("the plugin's options schema is invalid: {e}")))?;
    let Some(error) = validator.iter_errors(options).next() else {
        return Ok(());
    };
    let mut path = field_path.to_string();
    for segment in error.instance_path().segments() {
        match segment {
            LocationSegment::Property(key) => {
                path.push('.');
                path.push_str(&key);
            }
            LocationSegment::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    Err(SpecError::new(path, error.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SCHEMA: &str = r#"{
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
        "additionalProperties": false
    }"#;

    const PATH: &str = "spec.execution.agent.options";

    #[test]
    fn accepts_valid_options() {
        validate_options(PATH, &json!({"command": ["claude", "-p"]}), SCHEMA).unwrap();
    }

    #[test]
    fn names_the_bad_value() {
        let error = validate_options(PATH, &json!({"command": "claude"}), SCHEMA).unwrap_err();
        assert_eq!(error.path, "spec.execution.agent.options.command");
        assert!(error.message.contains("array"), "{error}");
    }

    #[test]
    fn names_bad_array_items() {
        let error = validate_options(PATH, &json!({"command": ["ok", 3]}), SCHEMA).unwrap_err();
        assert_eq!(error.path, "spec.execution.agent.options.command[1]");
    }

    #[test]
    fn missing_and_unknown_keys_point_at_the_options() {
        let error = validate_options(PATH, &json!({}), SCHEMA).unwrap_err();
        assert_eq!(error.path, PATH);
        assert!(validate_options(PATH, &json!({"command": [], "x": 1}), SCHEMA).is_err());
    }

    #[test]
    fn a_broken_schema_blames_the_plugin() {
        let error = validate_options(PATH, &json!({}), "{not json").unwrap_err();
        assert!(error.hint.unwrap().contains("plugin"));
        assert!(validate_options(PATH, &json!({}), r#"{"type": 12}"#).is_err());
    }
}
