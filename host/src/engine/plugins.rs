//! Choosing the plugins a TaskSpec names, and checking each section's `options`
//! against the JSON Schema its plugin declares.

use crate::runtime::catalog::ResolveError;
use crate::runtime::{LoadedPlugin, Runtime};
use crate::taskspec::{self, TaskSpec};
use crate::wit::types::PluginKind;

/// The three plugins a TaskSpec resolved to.
pub struct Plugins<'a> {
    /// The workspace source (`execution.workspace`).
    pub source: &'a LoadedPlugin,
    /// The sandbox provider (`execution.sandbox`).
    pub provider: &'a LoadedPlugin,
    /// The agent driver (`execution.agent`).
    pub driver: &'a LoadedPlugin,
}

impl<'a> Plugins<'a> {
    /// The three, in the order a run uses them.
    pub fn all(&self) -> [&'a LoadedPlugin; 3] {
        [self.source, self.provider, self.driver]
    }
}

/// Something wrong between a TaskSpec and the installed plugins.
#[derive(Debug, thiserror::Error)]
pub enum PluginProblem {
    /// No usable plugin serves the value (none installed, or refused).
    #[error("spec.execution.{0}")]
    Unresolved(ResolveError),
    /// The section's `options` do not match the plugin's schema.
    #[error("{0}")]
    Options(String),
}

/// Resolves all three plugins and checks their options, reporting every problem.
pub fn resolve<'a>(
    runtime: &'a Runtime,
    spec: &TaskSpec,
) -> Result<Plugins<'a>, Vec<PluginProblem>> {
    let execution = &spec.spec.execution;
    let sections = [
        (
            "workspace",
            PluginKind::WorkspaceSource,
            &execution.workspace.source,
            &execution.workspace.options,
        ),
        (
            "sandbox",
            PluginKind::SandboxProvider,
            &execution.sandbox.provider,
            &execution.sandbox.options,
        ),
        (
            "agent",
            PluginKind::AgentDriver,
            &execution.agent.driver,
            &execution.agent.options,
        ),
    ];
    let mut problems = Vec::new();
    let mut found = Vec::new();
    for (section, kind, value, options) in sections {
        match runtime.catalog().resolve(kind, value) {
            Ok(plugin) => {
                if let Err(problem) = check_options(section, options, plugin) {
                    problems.push(problem);
                }
                found.push(plugin);
            }
            Err(e) => problems.push(PluginProblem::Unresolved(e)),
        }
    }
    match (problems.is_empty(), found.as_slice()) {
        (true, [source, provider, driver]) => Ok(Plugins {
            source,
            provider,
            driver,
        }),
        _ => Err(problems),
    }
}

fn check_options(
    section: &str,
    options: &taskspec::Options,
    plugin: &LoadedPlugin,
) -> Result<(), PluginProblem> {
    let path = format!("spec.execution.{section}.options");
    let value = serde_json::Value::Object(options.clone());
    match &plugin.info().options_schema {
        Some(schema) => taskspec::validate_options(&path, &value, schema)
            .map_err(|e| PluginProblem::Options(e.to_string())),
        None if options.is_empty() => Ok(()),
        None => Err(PluginProblem::Options(format!(
            "{path}: plugin {} takes no options; remove the options block",
            plugin.name()
        ))),
    }
}
