//! `agentgate plugins list|inspect`: what is installed, what it serves, and what it
//! may touch.

use std::process::ExitCode;

use super::{fail, Cli, EXIT_INVALID};
use crate::runtime::catalog::selector_field;
use crate::runtime::LoadedPlugin;

#[derive(Debug, clap::Subcommand)]
pub enum PluginsCommand {
    /// List every plugin, its grant, and plugins that were refused or broken.
    List,
    /// Show one plugin's info, digest, capabilities and options schema.
    Inspect { name: String },
}

pub async fn run(cli: &Cli, command: &PluginsCommand) -> ExitCode {
    let runtime = match cli.runtime().await {
        Ok(runtime) => runtime,
        Err(e) => return fail(e.exit_code(), e),
    };
    let catalog = runtime.catalog();
    match command {
        PluginsCommand::List => {
            for plugin in catalog.plugins() {
                let info = plugin.info();
                let state = match plugin.refusal() {
                    None => "ok".to_string(),
                    Some(refusal) => format!("REFUSED: {refusal}"),
                };
                println!(
                    "{:<22} {:<8} {}: {:<28} imports [{}]  {}  ({})",
                    info.name,
                    info.version,
                    selector_field(info.kind),
                    info.serves.join(", "),
                    caps(plugin),
                    state,
                    plugin.origin()
                );
            }
            for broken in catalog.broken() {
                println!("{}: NOT LOADED: {}", broken.origin, broken.reason);
            }
            ExitCode::SUCCESS
        }
        PluginsCommand::Inspect { name } => match catalog.get(name) {
            None => {
                let names: Vec<_> = catalog.plugins().map(|p| p.name().to_string()).collect();
                fail(
                    EXIT_INVALID,
                    format!("no plugin named {name:?}; installed: {}", names.join(", ")),
                )
            }
            Some(plugin) => {
                let info = plugin.info();
                let schema = info
                    .options_schema
                    .as_deref()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok());
                let report = serde_json::json!({
                    "name": info.name,
                    "version": info.version,
                    "kind": selector_field(info.kind),
                    "serves": info.serves,
                    "summary": info.summary,
                    "origin": plugin.origin().to_string(),
                    "digest": plugin.digest(),
                    "imports": plugin.imports().iter().map(|c| c.name()).collect::<Vec<_>>(),
                    "granted": plugin.granted().iter().map(|c| c.name()).collect::<Vec<_>>(),
                    "refused": plugin.refusal().map(|r| r.to_string()),
                    "optionsSchema": schema,
                });
                println!("{}", serde_json::to_string_pretty(&report).expect("json"));
                ExitCode::SUCCESS
            }
        },
    }
}

fn caps(plugin: &LoadedPlugin) -> String {
    plugin
        .imports()
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(",")
}
