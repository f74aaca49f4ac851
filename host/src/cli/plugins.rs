//! `agentgate plugins list|inspect|cache`: what is installed, what it serves, what it
//! may touch, and what the plugin caches hold; and the marketplace's commands
//! (`publish`, `trust`, `install`, `update`, `remove`, `verify`, `revoke`; see
//! `crate::marketplace`).

use std::path::PathBuf;
use std::process::ExitCode;

use super::{fail, Cli, EXIT_ERROR, EXIT_INVALID};
use crate::marketplace::component::CacheSettings;
use crate::marketplace::trust::TrustStore;
use crate::marketplace::{self, Installer, MarketError, Outcome};
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
    /// Push a component and its signature to an OCI registry.
    Publish {
        /// The component (.wasm).
        file: PathBuf,
        /// REGISTRY/NAMESPACE/NAME:VERSION; NAME and VERSION are what the component's
        /// describe() reports.
        reference: String,
        /// The minisign secret key that signs it (`minisign -G` makes one); an
        /// encrypted key's password is read from AGENTGATE_KEY_PASSWORD or asked.
        #[arg(long, value_name = "SECRET_KEY")]
        key: PathBuf,
        /// The scopes it asks for: YAML shaped like a grants.yaml plugin entry, e.g.
        /// `docker: {images: ["node:20"]}`; capabilities come from its imports.
        #[arg(long, value_name = "FILE")]
        scopes: Option<PathBuf>,
    },
    /// Which keys may sign plugins in which namespaces.
    #[command(subcommand)]
    Trust(TrustCommand),
    /// Fetch a signed plugin, show what it asks for, and install it with consent.
    Install {
        /// REGISTRY/NAMESPACE/NAME:VERSION.
        reference: String,
        /// Consent without asking (for scripts); without a terminal and without it,
        /// nothing is installed.
        #[arg(long)]
        yes: bool,
    },
    /// Take the newest version of installed plugins (or a moved tag); asking for more
    /// needs consent again, asking for less narrows the grant at once.
    Update {
        /// Only this plugin.
        name: Option<String>,
        #[arg(long)]
        yes: bool,
    },
    /// Uninstall a plugin: its lock entry, grant and file.
    Remove { name: String },
    /// Check each installed plugin's bytes and revocations; with --refresh, fetch the
    /// revocation lists and check that no tag moved.
    Verify {
        #[arg(long)]
        refresh: bool,
    },
    /// Publish a signed revocation of the component REF points at.
    Revoke {
        reference: String,
        #[arg(long, value_name = "SECRET_KEY")]
        key: PathBuf,
        /// Why, shown to every host that refuses it.
        #[arg(long, default_value = "revoked by its publisher")]
        reason: String,
    },
    /// Re-sign the key's revocation list for a namespace with the time now (publishing
    /// an empty one when there is none): hosts refuse a list signed longer ago than
    /// their `marketplace.revocationsExpireAfter` (default 7 days), so run it more often.
    RenewRevocations {
        /// REGISTRY/NAMESPACE.
        scope: String,
        #[arg(long, value_name = "SECRET_KEY")]
        key: PathBuf,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum TrustCommand {
    /// Trust a minisign public key (a .pub file or its base64 line) for a namespace.
    Add {
        key: String,
        /// REGISTRY/NAMESPACE it may sign for (and what is below it).
        #[arg(long)]
        scope: String,
    },
    /// List the trusted keys and their namespaces.
    List,
    /// Stop trusting a key (its id, .pub file or base64 line), or only for one namespace.
    Remove {
        key: String,
        #[arg(long)]
        scope: Option<String>,
    },
}

pub async fn run(cli: &Cli, command: &PluginsCommand) -> ExitCode {
    // The cache is read as files: listing or clearing it compiles nothing.
    let name = match command {
        PluginsCommand::Cache { clear } => return cache(cli, *clear),
        PluginsCommand::List => None,
        PluginsCommand::Inspect { name } => Some(name),
        market => return marketplace(cli, market).await,
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

/// The marketplace's commands.
async fn marketplace(cli: &Cli, command: &PluginsCommand) -> ExitCode {
    match market_command(cli, command).await {
        Ok(code) => code,
        Err(e) => fail(
            if e.is_input() {
                EXIT_INVALID
            } else {
                EXIT_ERROR
            },
            e,
        ),
    }
}

async fn market_command(cli: &Cli, command: &PluginsCommand) -> Result<ExitCode, MarketError> {
    let home = cli.market_home();
    let cache = CacheSettings {
        dir: Some(cli.cache_dir()),
        max_bytes: cli.cache_size,
    };
    match command {
        PluginsCommand::Publish {
            file,
            reference,
            key,
            scopes,
        } => {
            let published =
                marketplace::publish::publish(file, reference, key, scopes.as_deref(), &cache)
                    .await?;
            println!(
                "published {} {} as {reference} ({})\n  component {}\n  capabilities [{}]\n  signed by key {} at tag {}",
                published.statement.name,
                published.statement.version,
                published.manifest,
                published.statement.wasm,
                published.statement.capabilities.join(", "),
                published.key_id,
                published.signature_tag
            );
        }
        PluginsCommand::Trust(trust) => {
            let mut store = TrustStore::load(&home.trust_store())?;
            match trust {
                TrustCommand::Add { key, scope } => {
                    let id = store.add(key, scope)?;
                    println!("trusted key {id} for {scope}");
                }
                TrustCommand::List => {
                    for key in store.keys() {
                        println!("{}  {}  {}", key.id, key.public, key.scopes.join(", "));
                    }
                }
                TrustCommand::Remove { key, scope } => {
                    store.remove(key, scope.as_deref())?;
                    match scope {
                        Some(scope) => println!("key {key} is no longer trusted for {scope}"),
                        None => println!("key {key} is no longer trusted"),
                    }
                }
            }
        }
        PluginsCommand::Install { reference, yes } => {
            let mut installer = Installer::open(home, cache, market_settings(cli)?)?;
            match installer.install(reference, *yes).await? {
                Outcome::AlreadyInstalled(p) => {
                    println!("{} {} is installed already ({})", p.name, p.version, p.wasm)
                }
                Outcome::Installed(p) => println!(
                    "installed {} {} ({}); granted [{}]",
                    p.name,
                    p.version,
                    p.wasm,
                    granted_text(&p.grant)
                ),
                _ => {}
            }
        }
        PluginsCommand::Update { name, yes } => {
            let mut installer = Installer::open(home, cache, market_settings(cli)?)?;
            let names: Vec<String> = match name {
                Some(name) => vec![name.clone()],
                None => installer
                    .lock()
                    .plugins()
                    .iter()
                    .map(|p| p.name.clone())
                    .collect(),
            };
            for name in names {
                match installer.update(&name, *yes).await? {
                    Outcome::UpToDate(p) => println!("{} {} is up to date", p.name, p.version),
                    Outcome::Updated { from, to } => println!(
                        "updated {} {} -> {} ({}); granted [{}]",
                        to.name,
                        from.version,
                        to.version,
                        to.wasm,
                        granted_text(&to.grant)
                    ),
                    _ => {}
                }
            }
        }
        PluginsCommand::Remove { name } => {
            let mut installer = Installer::open(home, cache, market_settings(cli)?)?;
            let removed = installer.remove(name)?;
            println!("removed {} {}", removed.name, removed.version);
        }
        PluginsCommand::Verify { refresh } => {
            let mut installer = Installer::open(home, cache, market_settings(cli)?)?;
            let (lines, ok) = installer.verify(*refresh).await;
            for line in lines {
                println!("{line}");
            }
            if !ok {
                return Ok(ExitCode::from(EXIT_ERROR));
            }
        }
        PluginsCommand::Revoke {
            reference,
            key,
            reason,
        } => {
            let (digest, sequence) = marketplace::publish::revoke(reference, key, reason).await?;
            println!("revoked {reference} ({digest}) in revocation list #{sequence}");
        }
        PluginsCommand::RenewRevocations { scope, key } => {
            let sequence = marketplace::publish::renew_revocations(scope, key).await?;
            println!("re-signed the revocation list of {scope} as #{sequence}, signed now");
        }
        PluginsCommand::List | PluginsCommand::Inspect { .. } | PluginsCommand::Cache { .. } => {
            unreachable!("handled by run")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The operator's marketplace settings: `marketplace:` in grants.yaml.
fn market_settings(cli: &Cli) -> Result<marketplace::MarketSettings, MarketError> {
    crate::runtime::Grants::from_file(&cli.home().join("grants.yaml"))
        .map(|grants| grants.marketplace)
        .map_err(|e| MarketError::Input(e.to_string()))
}

/// `events, sandbox; docker.images: node:20`: what a locked grant allows.
fn granted_text(grant: &serde_json::Value) -> String {
    marketplace::consent::allowances(grant)
        .into_iter()
        .map(|a| a.trim_start_matches("capability ").to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
