//! Read the JSON text the host passes for a section's `options` (or a whole section).

use serde::de::DeserializeOwned;

use crate::host::types::Error;

/// Deserializes `json` into `T`. A mismatch becomes `invalid-spec` naming `section`
/// (e.g. `options`) so the host can point at the TaskSpec field.
pub fn parse<T: DeserializeOwned>(section: &str, json: &str) -> Result<T, Error> {
    let json = if json.trim().is_empty() { "{}" } else { json };
    serde_json::from_str(json).map_err(|e| crate::error::invalid_spec(section, e.to_string()))
}
