//! Finding, loading and resolving plugins.
//!
//! Built-ins load first, then each plugin directory in order; a directory plugin with
//! a built-in's name replaces it (and does not inherit its grant). Each plugin is
//! compiled (through the cache), its imports are read, and it is asked to
//! `describe()` itself in a store where host interfaces trap. A plugin whose imports
//! exceed its grant stays in the catalog as refused, so `plugins list` can say why and
//! a run that needs it fails with the reason.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::Engine;

use super::bindings::types::{PluginInfo, PluginKind};
use super::cache::ComponentCache;
use super::grants::{self, Capability, Grants, Refusal};
use super::{PluginLimits, PluginState, Runtime};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginOrigin {
    Builtin,
    File(PathBuf),
}

impl std::fmt::Display for PluginOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginOrigin::Builtin => f.write_str("built-in"),
            PluginOrigin::File(path) => write!(f, "{}", path.display()),
        }
    }
}

pub struct LoadedPlugin {
    info: PluginInfo,
    origin: PluginOrigin,
    digest: String,
    imports: BTreeSet<Capability>,
    granted: BTreeSet<Capability>,
    refusal: Option<Refusal>,
    component: Component,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.info.name)
            .field("origin", &self.origin)
            .field("digest", &self.digest)
            .field("refusal", &self.refusal)
            .finish_non_exhaustive()
    }
}

impl LoadedPlugin {
    pub fn name(&self) -> &str {
        &self.info.name
    }
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }
    pub fn origin(&self) -> &PluginOrigin {
        &self.origin
    }
    /// `sha256:<hex>` of the component file.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// The capabilities the component imports.
    pub fn imports(&self) -> &BTreeSet<Capability> {
        &self.imports
    }
    pub fn granted(&self) -> &BTreeSet<Capability> {
        &self.granted
    }
    /// Why the plugin may not run, if it may not.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }
    pub(crate) fn component(&self) -> &Component {
        &self.component
    }
}

/// A plugin file that could not be loaded at all.
#[derive(Debug, Clone)]
pub struct BrokenPlugin {
    pub origin: PluginOrigin,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{field}: no plugin serves {value:?}; available: {}", available.join(", "))]
    Unknown {
        field: &'static str,
        value: String,
        available: Vec<String>,
    },
    #[error("{field}: plugin {plugin} ({origin}) serves {value:?} but was refused: {refusal}")]
    Refused {
        field: &'static str,
        value: String,
        plugin: String,
        origin: String,
        refusal: Box<Refusal>,
    },
}

pub struct Catalog {
    /// In priority order: later directories, then earlier ones, then built-ins.
    plugins: Vec<LoadedPlugin>,
    broken: Vec<BrokenPlugin>,
}

/// The TaskSpec field a kind of plugin is chosen by.
pub fn selector_field(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::WorkspaceSource => "workspace.source",
        PluginKind::SandboxProvider => "sandbox.provider",
        PluginKind::AgentDriver => "agent.driver",
    }
}

impl Catalog {
    pub(crate) async fn load(
        engine: &Engine,
        linker: &Linker<PluginState>,
        cache: Option<&ComponentCache>,
        plugin_dirs: &[PathBuf],
        grants: &Grants,
        limits: &PluginLimits,
    ) -> anyhow::Result<Catalog> {
        let loader = Loader {
            engine,
            linker,
            cache,
            grants,
            limits,
        };
        let mut catalog = Catalog {
            plugins: Vec::new(),
            broken: Vec::new(),
        };
        for (name, bytes) in super::builtin::BUILTIN_PLUGINS {
            // A built-in that fails to load is a bug in this build, not user input.
            let plugin = loader
                .load(bytes, PluginOrigin::Builtin)
                .await
                .map_err(|reason| {
                    anyhow::anyhow!("built-in plugin {name} does not load: {reason}")
                })?;
            catalog.insert(plugin);
        }
        for dir in plugin_dirs {
            for path in wasm_files(dir)? {
                let origin = PluginOrigin::File(path.clone());
                let loaded = match std::fs::read(&path) {
                    Ok(bytes) => loader.load(&bytes, origin.clone()).await,
                    Err(e) => Err(format!("cannot read it: {e}")),
                };
                match loaded {
                    Ok(plugin) => catalog.insert(plugin),
                    Err(reason) => catalog.broken.push(BrokenPlugin { origin, reason }),
                }
            }
        }
        Ok(catalog)
    }

    /// Adds `plugin` with the highest priority, replacing one of the same name.
    fn insert(&mut self, plugin: LoadedPlugin) {
        self.plugins.retain(|p| p.name() != plugin.name());
        self.plugins.insert(0, plugin);
    }

    pub fn plugins(&self) -> impl Iterator<Item = &LoadedPlugin> {
        self.plugins.iter()
    }

    pub fn broken(&self) -> &[BrokenPlugin] {
        &self.broken
    }

    pub fn get(&self, name: &str) -> Option<&LoadedPlugin> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// The plugin of `kind` that serves the TaskSpec value `value`.
    pub fn resolve(&self, kind: PluginKind, value: &str) -> Result<&LoadedPlugin, ResolveError> {
        let field = selector_field(kind);
        let plugin = self
            .plugins
            .iter()
            .find(|p| p.info.kind == kind && p.info.serves.iter().any(|s| s == value))
            .ok_or_else(|| ResolveError::Unknown {
                field,
                value: value.to_string(),
                available: self.served(kind),
            })?;
        match &plugin.refusal {
            None => Ok(plugin),
            Some(refusal) => Err(ResolveError::Refused {
                field,
                value: value.to_string(),
                plugin: plugin.name().to_string(),
                origin: plugin.origin.to_string(),
                refusal: Box::new(refusal.clone()),
            }),
        }
    }

    /// Every value served for `kind`, sorted.
    pub fn served(&self, kind: PluginKind) -> Vec<String> {
        let values: BTreeSet<&String> = self
            .plugins
            .iter()
            .filter(|p| p.info.kind == kind)
            .flat_map(|p| p.info.serves.iter())
            .collect();
        values.into_iter().cloned().collect()
    }
}

fn wasm_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read plugin directory {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

struct Loader<'a> {
    engine: &'a Engine,
    linker: &'a Linker<PluginState>,
    cache: Option<&'a ComponentCache>,
    grants: &'a Grants,
    limits: &'a PluginLimits,
}

impl Loader<'_> {
    async fn load(&self, bytes: &[u8], origin: PluginOrigin) -> Result<LoadedPlugin, String> {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        let component = match self.cache {
            Some(cache) => cache.load(self.engine, &digest[7..], bytes),
            None => Component::from_binary(self.engine, bytes).map_err(anyhow::Error::from),
        }
        .map_err(|e| format!("not a valid component: {e}"))?;

        let ty = component.component_type();
        let imports = grants::classify_imports(ty.imports(self.engine).map(|(name, _)| name));
        let kind = world_of(ty.exports(self.engine).map(|(name, _)| name))?;
        // Checked before instantiating: an import nothing provides cannot link.
        if !imports.unknown.is_empty() {
            return Err(Refusal::UnknownImports(imports.unknown.clone()).to_string());
        }
        if imports.capabilities.contains(&Capability::Http) {
            return Err(format!(
                "it imports {} (capability http), which this build of agentgate does not provide yet",
                Capability::Http.interface()
            ));
        }
        let label = match &origin {
            PluginOrigin::Builtin => "built-in plugin".to_string(),
            PluginOrigin::File(path) => path.display().to_string(),
        };
        let info = Runtime::describe(
            self.engine,
            self.linker,
            self.limits,
            &component,
            kind,
            &label,
        )
        .await
        .map_err(|e| e.to_string())?;
        check_info(&info, kind)?;

        let granted = match origin {
            PluginOrigin::Builtin => grants::builtin_grant(kind),
            PluginOrigin::File(_) => self.grants.granted(&info.name, &info.version, &digest),
        };
        let refusal = grants::check(&info.name, &imports, &granted).err();
        Ok(LoadedPlugin {
            info,
            origin,
            digest,
            imports: imports.capabilities,
            granted,
            refusal,
            component,
        })
    }
}

/// Which plugin world a component implements, from its exports.
fn world_of<'a>(exports: impl Iterator<Item = &'a str>) -> Result<PluginKind, String> {
    let mut kinds = Vec::new();
    for name in exports {
        match name.split('@').next().unwrap_or(name) {
            "agentgate:plugin/source" => kinds.push(PluginKind::WorkspaceSource),
            "agentgate:plugin/provider" => kinds.push(PluginKind::SandboxProvider),
            "agentgate:plugin/driver" => kinds.push(PluginKind::AgentDriver),
            _ => {}
        }
    }
    match kinds.as_slice() {
        [kind] => Ok(*kind),
        [] => Err("it exports none of the plugin worlds (source, provider, driver) of agentgate:plugin@0.1".into()),
        _ => Err("it exports more than one plugin world; a plugin implements exactly one".into()),
    }
}

fn check_info(info: &PluginInfo, kind: PluginKind) -> Result<(), String> {
    let valid_name = !info.name.is_empty()
        && info.name.len() <= 64
        && info
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_name {
        return Err(format!(
            "describe() returned an invalid name {:?} (lowercase letters, digits and '-')",
            info.name
        ));
    }
    if info.kind != kind {
        return Err(format!(
            "plugin {} describes itself as {:?} but implements {:?}",
            info.name, info.kind, kind
        ));
    }
    if info.serves.is_empty() {
        return Err(format!(
            "plugin {} serves no {} value",
            info.name,
            selector_field(kind)
        ));
    }
    if let Some(schema) = &info.options_schema {
        serde_json::from_str::<serde_json::Value>(schema)
            .map_err(|e| format!("plugin {}'s options schema is not JSON: {e}", info.name))?;
    }
    Ok(())
}
