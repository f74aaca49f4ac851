//! TaskSpec: the YAML document that tells agentgate what to run, where and how.
//!
//! This module turns a document into a typed, normalized `TaskSpec` (defaults filled in,
//! quantities converted, `${VAR}`s substituted) or into a `SpecError` a person can act on: the
//! field path, the line, and a hint. It depends on nothing else in the host.

mod document;
mod error;
mod fields;
mod interpolate;
mod model;
mod options;
mod schema;
mod strict;
mod units;
mod workspace;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use error::SpecError;
pub use interpolate::Env;
pub use model::*;
pub use options::validate_options;
pub use schema::json_schema;
pub use units::{format_duration, parse_bytes, parse_duration};
pub use workspace::*;

/// Parses a TaskSpec document.
///
/// `source_name` names the document in messages and, for a document without metadata, gives
/// `metadata.name` (its file stem). `env` looks up `${VAR}`s and `HOME`; pass
/// `&|name| std::env::var(name).ok()` for the process environment.
pub fn parse(
    text: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TaskSpec, SpecError> {
    let yaml = serde_yaml::Deserializer::from_str(text);
    let document: document::Document =
        serde_path_to_error::deserialize(strict::Strict::new(yaml, env))
            .map_err(SpecError::from_yaml)?;
    document.into_task_spec(source_name, env)
}

/// Reads and parses a TaskSpec file, with `${VAR}`s from the process environment.
pub fn parse_file(path: &Path) -> Result<TaskSpec, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::new("", format!("cannot read {}: {e}", path.display())))?;
    parse(&text, &path.to_string_lossy(), &|name| {
        std::env::var(name).ok()
    })
}
