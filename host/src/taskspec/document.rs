//! The document as written, and how each accepted shape becomes a `TaskSpec`.
//!
//! Three shapes are accepted: a full `apiVersion/kind/metadata/spec` document, a bare
//! `execution:` block, and `spec:` holding only `execution:` (how the reference system's own
//! examples are written). The last two take their name from the file and their prompt from the
//! CLI. This is also where the few checks that need the whole document or the environment run.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::error::SpecError;
use super::fields::{self, API_VERSION, KIND};
use super::interpolate::Env;
use super::model::{Execution, Metadata, Network, SandboxSpec, Spec, TaskSpec};
use crate::home_path::expand_home;

/// Every top-level key any shape allows.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(title = "TaskSpec")]
pub(crate) struct Document {
    /// Exactly `agentgate.io/v1`; required unless the document is only an execution block.
    #[serde(default, deserialize_with = "fields::api_version")]
    #[schemars(extend("const" = API_VERSION))]
    api_version: Option<String>,
    /// Exactly `TaskSpec`.
    #[serde(default, deserialize_with = "fields::kind")]
    #[schemars(extend("const" = KIND))]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    spec: Option<Spec>,
    /// A document may be just an execution block.
    #[serde(default)]
    execution: Option<Execution>,
}

impl Document {
    /// Checks the shape, fills in what a short document leaves out, and expands `~` in mounts.
    pub(crate) fn into_task_spec(self, source_name: &str, env: Env) -> Result<TaskSpec, SpecError> {
        let is_full = self.api_version.is_some() || self.kind.is_some() || self.metadata.is_some();
        let (metadata, mut spec, execution_path) = match (self.spec, self.execution) {
            (None, Some(execution)) if !is_full => {
                let spec = Spec {
                    goal: None,
                    convergence: None,
                    execution,
                    delivery: None,
                };
                (metadata_for(source_name), spec, "execution")
            }
            (Some(_), Some(_)) | (None, Some(_)) => {
                return Err(SpecError::new(
                    "execution",
                    "a top-level execution block cannot be combined with apiVersion, kind, \
                     metadata or spec",
                )
                .with_hint("put it under spec"))
            }
            (None, None) => {
                return Err(SpecError::new(
                    "",
                    "not a TaskSpec: expected apiVersion, kind, metadata and spec, or an \
                     execution block",
                ))
            }
            (Some(spec), None) if !is_full && is_execution_only(&spec) => {
                (metadata_for(source_name), spec, "spec.execution")
            }
            (Some(spec), None) => {
                let full_only = "required in a full TaskSpec (one with goal, convergence, \
                                 delivery, or any of apiVersion, kind and metadata)";
                let missing = |key| SpecError::new(key, format!("missing; {full_only}"));
                self.api_version.ok_or_else(|| missing("apiVersion"))?;
                self.kind.ok_or_else(|| missing("kind"))?;
                (
                    self.metadata.ok_or_else(|| missing("metadata"))?,
                    spec,
                    "spec.execution",
                )
            }
        };
        for (index, mount) in spec.execution.sandbox.mounts.iter_mut().enumerate() {
            mount.source = expand_home(&mount.source, env).map_err(|error| {
                SpecError::new(
                    format!("{execution_path}.sandbox.mounts[{index}].source"),
                    error.to_string(),
                )
            })?;
        }
        check_egress(&spec.execution.sandbox, execution_path)?;
        Ok(TaskSpec {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata,
            spec,
        })
    }
}

/// `sandbox.egress` is enforced by cutting the sandbox off every network but loopback:
/// it needs a sandbox (not provider `none`) whose network would otherwise be `bridge`,
/// and entries the proxy can read.
fn check_egress(sandbox: &SandboxSpec, execution_path: &str) -> Result<(), SpecError> {
    let Some(egress) = &sandbox.egress else {
        return Ok(());
    };
    let path = format!("{execution_path}.sandbox.egress");
    if sandbox.provider == "none" {
        return Err(SpecError::new(
            &path,
            "provider `none` runs the agent on the host, where nothing would enforce an egress allowlist",
        )
        .with_hint("use provider `subprocess` or `docker`, or remove sandbox.egress"));
    }
    if sandbox.network != Network::Bridge {
        let network = serde_json::to_value(sandbox.network).unwrap_or_default();
        return Err(SpecError::new(
            &path,
            format!(
                "needs `network: bridge`, but network is {}",
                network.as_str().unwrap_or_default()
            ),
        )
        .with_hint(
            "write `network: bridge` (the sandbox then reaches only the allowed destinations, through the proxy), or remove sandbox.egress",
        ));
    }
    for (index, entry) in egress.allow.iter().enumerate() {
        super::Destination::parse(entry).map_err(|error| {
            SpecError::new(format!("{path}.allow[{index}]"), error.to_string())
                .with_hint("write host:port, e.g. `api.example.com:443` or `*.example.com:443`")
        })?;
    }
    Ok(())
}

fn is_execution_only(spec: &Spec) -> bool {
    spec.goal.is_none() && spec.convergence.is_none() && spec.delivery.is_none()
}

/// The metadata of a short document: named after its file.
fn metadata_for(source_name: &str) -> Metadata {
    let stem = Path::new(source_name)
        .file_stem()
        .and_then(|stem| stem.to_str());
    Metadata {
        name: stem
            .filter(|stem| !stem.is_empty())
            .unwrap_or("taskspec")
            .to_string(),
        namespace: None,
        labels: Default::default(),
        annotations: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_documents_are_named_after_their_file() {
        assert_eq!(metadata_for("/tmp/fix-login.yaml").name, "fix-login");
        assert_eq!(metadata_for("").name, "taskspec");
    }
}
