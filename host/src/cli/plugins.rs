//! `agentgate plugins list|inspect|cache`: what is installed, what it serves, what it
//! may touch, and what the plugin caches hold.

use std::process::ExitCode;

use super::{fail, Cli, EXIT_ERROR, EXIT_INVALID};
use crate::runtime::catalog::selector_field;
use crate::runtime::grants::ImportKind;

#[derive(Debug, clap::Subcommand)]
pub enum PluginsCommand {
    /// List every plugin, its grant, and plugins that were refused or broken.
    List,
    /// Show one plugin's info, digest, every import (WASI included) with what it
    /// grants, and its options schema.
    Inspect { name: String },
    /// Show what the compile cache holds (entries, size, bound), or clear it.
    Cache {
        /// Remove every compiled component and cached description.
        #[arg(long)]
        clear: bool,
    },
}

pub async fn run(cli: &Cli, command: &PluginsCommand) -> ExitCode {
    // The cache is read as files: listing or clearing it compiles nothing.
    let name = match command {
        PluginsCommand::Cache { clear } => return cache(cli, *clear),
        PluginsCommand::List => None,
        PluginsCommand::Inspect { name } => Some(name),
    };
    let runtime = match cli.runtime().await {
        Ok(runtime) => runtime,
        Err(e) => return fail(e.exit_code(), e),
    };
    let catalog = runtime.catalog();
    match name {
        None => {
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
                    plugin
                        .capabilities()
                        .iter()
                        .map(|c| c.name())
                        .collect::<Vec<_>>()
                        .join(","),
                    state,
                    plugin.origin()
                );
            }
            for broken in catalog.broken() {
                println!("{}: NOT LOADED: {}", broken.origin, broken.reason);
            }
            ExitCode::SUCCESS
        }
        Some(name) => match catalog.get(name) {
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
                let scopes = plugin.scopes().shown();
                let report = serde_json::json!({
                    "name": info.name,
                    "version": info.version,
                    "kind": selector_field(info.kind),
                    "serves": info.serves,
                    "summary": info.summary,
                    "origin": plugin.origin().to_string(),
                    "digest": plugin.digest(),
                    "imports": plugin.capabilities().iter().map(|c| c.name()).collect::<Vec<_>>(),
                    "interfaces": plugin.imports().interfaces.iter().map(|i| serde_json::json!({
                        "name": i.name,
                        "capability": match i.kind {
                            ImportKind::Capability(c) => Some(c.name()),
                            _ => None,
                        },
                        "grants": i.grants(),
                    })).collect::<Vec<_>>(),
                    "granted": plugin.granted().iter().map(|c| c.name()).collect::<Vec<_>>(),
                    // Kept from before scopes: the hosts of the `http` scope.
                    "httpHosts": scopes.get("http").map_or(serde_json::json!([]), |s| s["hosts"].clone()),
                    // The effective scope of each granted capability that has one.
                    "scopes": scopes,
                    "refused": plugin.refusal().map(|r| r.to_string()),
                    "optionsSchema": schema,
                });
                println!("{}", serde_json::to_string_pretty(&report).expect("json"));
                ExitCode::SUCCESS
            }
        },
    }
}

/// `plugins cache [--clear]`: reads the cache directory only; nothing is compiled.
fn cache(cli: &Cli, clear: bool) -> ExitCode {
    let cache = cli.cache();
    if clear {
        return match cache.clear() {
            Ok((count, bytes)) => {
                println!(
                    "removed {count} cache entries ({}) from {}",
                    mib(bytes),
                    cli.cache_dir().display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(
                EXIT_ERROR,
                format!(
                    "cannot clear the cache at {}: {e}",
                    cli.cache_dir().display()
                ),
            ),
        };
    }
    let compiled = cache.compiled_entries();
    let total: u64 = compiled.iter().map(|e| e.bytes).sum();
    // Name each compiled entry after the plugin its description says it is.
    let names: std::collections::HashMap<String, String> = cache
        .described_entries()
        .iter()
        .filter_map(|e| {
            let json = cache.described(&e.key)?;
            let value: serde_json::Value = serde_json::from_slice(&json).ok()?;
            let plugin = value.get("plugin")?;
            Some((
                e.wasm_sha256().to_string(),
                format!(
                    "{} {}",
                    plugin.get("name")?.as_str()?,
                    plugin.get("version")?.as_str()?
                ),
            ))
        })
        .collect();
    println!("compile cache: {}", cache.compiled_dir().display());
    println!(
        "  {} entries, {} of {} (--cache-size or AGENTGATE_CACHE_SIZE); least recently used are evicted first",
        compiled.len(),
        mib(total),
        mib(cache.max_bytes())
    );
    // Most recently used first.
    for entry in compiled.iter().rev() {
        let used = humantime::format_rfc3339_seconds(entry.last_used);
        let sha = entry.wasm_sha256();
        println!(
            "  sha256:{}…  {:>10}  last used {used}  {}",
            &sha[..sha.len().min(16)],
            mib(entry.bytes),
            names.get(sha).map_or("(no description)", String::as_str)
        );
    }
    println!(
        "descriptions: {} entries in {}",
        cache.described_entries().len(),
        cache.described_dir().display()
    );
    ExitCode::SUCCESS
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
