//! TaskSpec: the YAML document that tells agentgate what to run, where and how.
//!
//! This module turns a document into a typed, normalized `TaskSpec` (defaults filled in,
//! quantities converted, `${VAR}`s substituted) or into a `SpecError` a person can act on: the
//! field path, the line, and a hint. It depends on nothing else in the host.
//!
//! A document is untrusted input: its size and nesting are checked before the YAML parser runs,
//! and every value is bounded (`limits.rs`, `units.rs`), so no document can make reading it
//! slow, large or panic. `validate` and `run` both go through `parse`, so they refuse the same.
//!
//! The reference system's whole format loads, `convergence` and `delivery` included; what
//! the host does not do yet (strategies, gates, delivery, notifications) is then refused by
//! [`check_supported`], which `validate` and `run` both apply, rather than accepted and
//! silently not done.

mod convergence;
mod credentials;
mod delivery;
mod destination;
mod document;
mod error;
mod fields;
mod interpolate;
mod limits;
mod model;
mod options;
#[doc(hidden)]
// The properties the property tests and the fuzz target (fuzz/) check.
#[cfg(any(test, fuzzing))]
pub(crate) mod robustness;
mod schema;
mod strict;
mod units;
mod unsupported;
mod workspace;

#[cfg(test)]
mod convergence_tests;
#[cfg(test)]
mod delivery_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use convergence::*;
pub use credentials::{literal_credentials, LiteralCredential};
pub use delivery::*;
pub use destination::{Destination, DestinationError, HostPattern, Target, TargetHost};
pub use error::SpecError;
pub use interpolate::Env;
pub use limits::{read, MAX_DEPTH, MAX_FILE_BYTES, MAX_INTERPOLATED_BYTES, MAX_VALUE_BYTES};
pub use model::*;
pub use options::validate_options;
pub use schema::json_schema;
pub use units::{
    format_duration, parse_bytes, parse_duration, QuantityError, MAX_BYTES, MAX_COST_USD,
    MAX_DURATION, MAX_TOKENS,
};
pub use unsupported::{check_supported, Unsupported};
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
    limits::check_document(text)?;
    let yaml = serde_yaml::Deserializer::from_str(text);
    let interpolator = interpolate::Interpolator::new(env);
    let document: document::Document =
        serde_path_to_error::deserialize(strict::Strict::new(yaml, &interpolator))
            .map_err(SpecError::from_yaml)?;
    document.into_task_spec(source_name, env)
}
