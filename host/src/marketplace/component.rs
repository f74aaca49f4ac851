//! What a component is, read from the component itself: its `describe()` answer and
//! every import, classified as the runtime classifies them. Publishing reads the
//! capabilities to sign from here, and installing checks the signed ones against it,
//! so an author cannot under-declare what a component imports.
//!
//! Describing goes through the host's caches, so an installed component is compiled
//! once, at install, and the first run pays nothing.

use std::path::{Path, PathBuf};

use super::MarketError;
use crate::runtime::{Runtime, RuntimeConfig};

/// Where the runtime's caches are, as the CLI sets them.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub dir: Option<PathBuf>,
    pub max_bytes: u64,
}

/// What the host read from a component.
#[derive(Debug, Clone)]
pub struct ComponentFacts {
    pub name: String,
    pub version: String,
    /// Every import (WASI included) with what it grants.
    pub imports: Vec<(String, String)>,
    /// The capabilities its imports ask for, by name, sorted.
    pub capabilities: Vec<String>,
    /// The `agentgate:plugin` package version it imports, e.g. `0.1.0`.
    pub wit: String,
}

/// Describes `wasm` (compiling it through the caches).
pub async fn describe(wasm: &[u8], cache: &CacheSettings) -> Result<ComponentFacts, MarketError> {
    let dir = tempfile::tempdir()
        .map_err(|e| MarketError::Input(format!("cannot make a temporary folder: {e}")))?;
    let path = dir.path().join("component.wasm");
    std::fs::write(&path, wasm).map_err(|e| MarketError::file(&path, e))?;
    describe_file(&path, cache).await
}

/// Describes the component at `path`, which must be alone in its folder (the folder is
/// loaded as a plugin folder), without reading it into memory here.
pub async fn describe_file(
    path: &Path,
    cache: &CacheSettings,
) -> Result<ComponentFacts, MarketError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: cache.dir.clone(),
        cache_max_bytes: cache.max_bytes,
        plugin_dirs: vec![dir.to_path_buf()],
        ..RuntimeConfig::default()
    })
    .await
    .map_err(|e| MarketError::Input(format!("cannot start the runtime: {e}")))?;
    let catalog = runtime.catalog();
    if let Some(broken) = catalog.broken().first() {
        return Err(MarketError::Input(format!(
            "it is not a plugin this host can load: {}",
            broken.reason
        )));
    }
    let origin = crate::runtime::PluginOrigin::File(path.to_path_buf());
    let plugin = catalog
        .plugins()
        .find(|p| *p.origin() == origin)
        .ok_or_else(|| {
            MarketError::Input("the component was not found after describing it".into())
        })?;
    let imports = plugin
        .imports()
        .interfaces
        .iter()
        .map(|i| (i.name.clone(), i.grants()))
        .collect();
    let wit = crate::wit::line_of(plugin.imports().interfaces.iter().map(|i| i.name.as_str()))
        .map_err(|e| MarketError::Input(format!("it is not a plugin this host can load: {e}")))?
        .map_or_else(|| "none".to_string(), |line| line.version.to_string());
    Ok(ComponentFacts {
        name: plugin.name().to_string(),
        version: plugin.info().version.clone(),
        imports,
        capabilities: plugin
            .capabilities()
            .iter()
            .map(|c| c.name().to_string())
            .collect(),
        wit,
    })
}
