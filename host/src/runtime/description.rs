//! What finding plugins needs to know about a component without compiling it: its
//! `describe()` answer and its imports, in the form the description cache stores and
//! the build embeds for the built-ins.
//!
//! Depends on serde alone: the build-time precompiler (`host/precompile`) includes
//! this file to write the built-ins' descriptions in exactly this form.

use serde::{Deserialize, Serialize};

/// What `describe()` said about a component, and what it imports.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    /// `source`, `provider` or `driver`.
    pub kind: String,
    pub name: String,
    pub version: String,
    pub serves: Vec<String>,
    pub summary: String,
    pub options_schema: Option<String>,
    /// Every import of the component, by name.
    pub imports: Vec<String>,
}
