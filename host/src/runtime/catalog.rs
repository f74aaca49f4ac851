//! Finding, describing and resolving plugins.
//!
//! Built-ins come first, then each plugin directory in order; a directory plugin with
//! a built-in's name replaces it (and does not inherit its grant). Each component is
//! known by its sha256. What it is (its `describe()` answer and its imports) is read
//! from the description cache, so finding plugins compiles nothing already seen; an
//! unseen component is compiled (through the compile cache) and asked to `describe()`
//! itself once, in a store where host interfaces trap. A plugin is compiled for use
//! only when a run needs it (see `Runtime::load`).
//!
//! A plugin whose imports exceed its grant stays in the catalog as refused, and a file
//! that could not be described is kept as broken, so `plugins list` can say why and a
//! run that needs it fails with the reason.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

pub(crate) use super::description::Description;
use super::grants::{self, Grants, Imports, Refusal};
use super::loader::Loader;
use super::PluginError;
use crate::capabilities::scope::Scopes;
use crate::capabilities::Capability;
use crate::wit::types::{PluginInfo, PluginKind};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginOrigin {
    /// Built into this binary.
    Builtin,
    /// A component file: installed from a registry or found in a plugin directory.
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

/// Where a plugin's bytes are read from when it is compiled for use.
#[derive(Debug, Clone)]
pub(crate) enum Wasm {
    Builtin(&'static super::builtin::Builtin),
    File(PathBuf),
}

/// A plugin the catalog found: what it says it is, where it came from, what it imports
/// and was granted, and whether it may run; compiled on first use.
pub struct LoadedPlugin {
    info: PluginInfo,
    origin: PluginOrigin,
    digest: String,
    imports: Imports,
    granted: BTreeSet<Capability>,
    scopes: std::sync::Arc<Scopes>,
    refusal: Option<Refusal>,
    pub(crate) wasm: Wasm,
    /// Compiled (or read from the compile cache) on first use.
    pub(crate) component: tokio::sync::OnceCell<Component>,
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
    /// Its name, as its `describe()` says.
    pub fn name(&self) -> &str {
        &self.info.name
    }
    /// Its `describe()` answer.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }
    /// Where it came from.
    pub fn origin(&self) -> &PluginOrigin {
        &self.origin
    }
    /// `sha256:<hex>` of the component file.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// The capabilities the component imports.
    pub fn capabilities(&self) -> BTreeSet<Capability> {
        self.imports.capabilities()
    }
    /// Every import of the component, WASI included, with what it grants.
    pub fn imports(&self) -> &Imports {
        &self.imports
    }
    /// The capabilities it was granted: by `grants.yaml` for a file, by its kind and
    /// the operator's entry for a built-in.
    pub fn granted(&self) -> &BTreeSet<Capability> {
        &self.granted
    }
    /// How far each of its granted capabilities reaches.
    pub fn scopes(&self) -> &std::sync::Arc<Scopes> {
        &self.scopes
    }
    /// Why the plugin may not run, if it may not.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }
}

/// A plugin installed from a registry: its file, the sha256 the lockfile holds, and
/// why it may not load (its revocation, or a signer no longer trusted), if it may not. Only those bytes load: a file
/// with others is not loaded, and `Runtime::load` checks them again before compiling.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The component file.
    pub path: PathBuf,
    /// `sha256:<hex>`, from the lockfile.
    pub digest: String,
    /// Set when it may not load, saying why (naming the revocation). The component is
    /// then neither described nor compiled.
    pub refused: Option<String>,
}

/// A plugin file that could not be loaded at all.
#[derive(Debug, Clone)]
pub struct BrokenPlugin {
    pub origin: PluginOrigin,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{field}: no plugin serves {value:?}; available: {}{}", available.join(", "), broken_text(.broken))]
    Unknown {
        field: &'static str,
        value: String,
        available: Vec<String>,
        /// Plugin files that could not be loaded: one of them may be the one meant.
        broken: Vec<BrokenPlugin>,
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

fn broken_text(broken: &[BrokenPlugin]) -> String {
    if broken.is_empty() {
        return String::new();
    }
    let list: Vec<String> = broken
        .iter()
        .map(|b| format!("\n  {}: {}", b.origin, b.reason))
        .collect();
    format!(
        "\nthese plugin files could not be loaded, so what they serve is unknown (one may be the plugin meant):{}",
        list.concat()
    )
}

/// Why a plugin file is kept as broken (its [`BrokenPlugin::reason`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoverError {
    #[error("cannot read it: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error(
        "its bytes ({digest}) are not the ones plugins.lock holds ({locked}); \
         run `agentgate plugins verify`, then install it again"
    )]
    NotLocked { digest: String, locked: String },
    #[error("its description vanished from the cache; run the command again")]
    Vanished,
    /// Why it could not be described, as the description cache keeps it: text, since
    /// the cache outlives the process that failed.
    #[error("{0}")]
    Undescribed(String),
    #[error("unknown plugin kind {0:?} in its description")]
    UnknownKind(String),
    #[error("its embedded description is not valid: {0}")]
    BadEmbedded(#[source] serde_json::Error),
    /// The marketplace refused the installed file (revoked, altered).
    #[error("{digest}: {reason}")]
    Refused { digest: String, reason: String },
}

/// Why a component cannot be described; the description cache keeps its text (see
/// [`Described::Broken`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DescribeError {
    #[error(transparent)]
    Contract(#[from] crate::wit::LineError),
    #[error("cannot link it: {0}")]
    Link(#[source] super::loader::WasmtimeError),
    #[error(transparent)]
    Call(#[from] PluginError),
    #[error(
        "it exports none of the plugin worlds (source, provider, driver) of agentgate:plugin@0.1"
    )]
    NoWorld,
    #[error("it exports more than one plugin world; a plugin implements exactly one")]
    ManyWorlds,
    #[error("describe() returned {0} bytes of text; the limit is {MAX_DESCRIBE_BYTES}")]
    TooLarge(usize),
    #[error("describe() returned an invalid name {0:?} (lowercase letters, digits and '-')")]
    BadName(String),
    #[error("plugin {name} describes itself as {described:?} but implements {implements:?}")]
    WrongKind {
        name: String,
        described: PluginKind,
        implements: PluginKind,
    },
    #[error("plugin {name} serves no {field} value")]
    ServesNothing { name: String, field: &'static str },
    #[error("plugin {name}'s options schema is not JSON: {source}")]
    BadSchema {
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Every plugin found, by priority, and the files that could not be loaded.
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
    /// Finds every plugin: built-ins, then the plugin directories in order.
    pub(crate) async fn load(
        loader: &Loader,
        installed: &[Installed],
        plugin_dirs: &[PathBuf],
        grants: &Grants,
    ) -> Result<Catalog, super::RuntimeError> {
        let mut catalog = Catalog {
            plugins: Vec::new(),
            broken: Vec::new(),
        };
        for builtin in super::builtin::BUILTIN_PLUGINS {
            // Described at build time: nothing is read, hashed or compiled here. One
            // that fails to load is a bug in this build, not user input.
            let name = builtin.crate_name;
            let described = serde_json::from_str(builtin.description)
                .map(Described::Plugin)
                .map_err(DiscoverError::BadEmbedded);
            let plugin = match described {
                Ok(described) => {
                    let digest = format!("sha256:{}", builtin.sha256);
                    entry(grants, Wasm::Builtin(builtin), digest, described, None)
                }
                Err(reason) => Err(reason),
            }
            .map_err(|reason| super::RuntimeError::Builtin {
                name,
                source: reason.into(),
            })?;
            catalog.insert(plugin);
        }
        for plugin in installed {
            let origin = PluginOrigin::File(plugin.path.clone());
            let loaded = match &plugin.refused {
                Some(reason) => Err(DiscoverError::Refused {
                    digest: plugin.digest.clone(),
                    reason: reason.clone(),
                }),
                None => discover_file(loader, grants, &plugin.path, Some(&plugin.digest)).await,
            };
            match loaded {
                Ok(plugin) => catalog.insert(plugin),
                Err(reason) => catalog.broken.push(BrokenPlugin {
                    origin,
                    reason: reason.to_string(),
                }),
            }
        }
        for dir in plugin_dirs {
            for path in wasm_files(dir)? {
                let origin = PluginOrigin::File(path.clone());
                match discover_file(loader, grants, &path, None).await {
                    Ok(plugin) => catalog.insert(plugin),
                    Err(reason) => catalog.broken.push(BrokenPlugin {
                        origin,
                        reason: reason.to_string(),
                    }),
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

    /// The plugins, highest priority first.
    pub fn plugins(&self) -> impl Iterator<Item = &LoadedPlugin> {
        self.plugins.iter()
    }

    /// The plugin files that could not be loaded, with why.
    pub fn broken(&self) -> &[BrokenPlugin] {
        &self.broken
    }

    /// The plugin called `name`, if any.
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
                broken: self.broken.clone(),
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

fn wasm_files(dir: &Path) -> Result<Vec<PathBuf>, super::RuntimeError> {
    let entries = std::fs::read_dir(dir).map_err(|source| super::RuntimeError::PluginDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// A description, or why the component cannot be described: both are cached, so a
/// broken component costs one compile per digest, not one per command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Described {
    Plugin(Description),
    Broken(String),
}

fn description(info: &PluginInfo, imports: Vec<String>) -> Description {
    Description {
        kind: kind_name(info.kind).to_string(),
        name: info.name.clone(),
        version: info.version.clone(),
        serves: info.serves.clone(),
        summary: info.summary.clone(),
        options_schema: info.options_schema.clone(),
        imports,
    }
}

fn info_of(description: &Description) -> Result<PluginInfo, DiscoverError> {
    let kind = [
        PluginKind::WorkspaceSource,
        PluginKind::SandboxProvider,
        PluginKind::AgentDriver,
    ]
    .into_iter()
    .find(|k| kind_name(*k) == description.kind)
    .ok_or_else(|| DiscoverError::UnknownKind(description.kind.clone()))?;
    Ok(PluginInfo {
        name: description.name.clone(),
        version: description.version.clone(),
        kind,
        serves: description.serves.clone(),
        summary: description.summary.clone(),
        options_schema: description.options_schema.clone(),
    })
}

fn kind_name(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::WorkspaceSource => "source",
        PluginKind::SandboxProvider => "provider",
        PluginKind::AgentDriver => "driver",
    }
}

/// Makes the catalog entry of the plugin file `path`; with `locked`, only if its
/// digest is that one.
async fn discover_file(
    loader: &Loader,
    grants: &Grants,
    path: &Path,
    locked: Option<&str>,
) -> Result<LoadedPlugin, DiscoverError> {
    let label = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    // An unchanged file already described is neither read nor hashed (its bytes are
    // checked again when it is compiled for a run).
    let remembered = loader
        .file_digest(path)
        .filter(|digest| loader.cached_description(digest).is_some());
    let (digest, bytes) = match remembered {
        Some(digest) => (digest, None),
        None => {
            let (digest, bytes) =
                read_and_remember(loader, path).map_err(DiscoverError::Unreadable)?;
            (digest, Some(Cow::Owned(bytes)))
        }
    };
    if let Some(locked) = locked.filter(|locked| *locked != digest) {
        return Err(DiscoverError::NotLocked {
            digest,
            locked: locked.to_string(),
        });
    }
    let wasm = Wasm::File(path.to_path_buf());
    discover(loader, grants, wasm, digest, bytes, &label).await
}

/// Reads a plugin file and records its digest for the next command.
fn read_and_remember(loader: &Loader, path: &Path) -> std::io::Result<(String, Vec<u8>)> {
    let identity = super::cache::FileIdentity::of(path);
    let bytes = std::fs::read(path)?;
    let digest = digest_of(&bytes);
    if let Some(identity) = identity {
        loader.remember_file_digest(path, identity, &digest);
    }
    Ok((digest, bytes))
}

/// `sha256:<hex>` of a component's bytes.
pub(crate) fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Makes the catalog entry for one plugin file's component: described from the cache,
/// or described now (compiling it) and cached.
async fn discover(
    loader: &Loader,
    grants: &Grants,
    wasm: Wasm,
    digest: String,
    bytes: Option<Cow<'static, [u8]>>,
    label: &str,
) -> Result<LoadedPlugin, DiscoverError> {
    let (described, component) = match (loader.cached_description(&digest), bytes) {
        (Some(described), _) => (described, None),
        (None, Some(bytes)) => loader.describe_now(&digest, bytes, label).await,
        (None, None) => return Err(DiscoverError::Vanished),
    };
    entry(grants, wasm, digest, described, component)
}

/// The catalog entry for a described component: its imports checked against its grant.
fn entry(
    grants: &Grants,
    wasm: Wasm,
    digest: String,
    described: Described,
    component: Option<Component>,
) -> Result<LoadedPlugin, DiscoverError> {
    let description = match described {
        Described::Plugin(description) => description,
        Described::Broken(reason) => return Err(DiscoverError::Undescribed(reason)),
    };
    let info = info_of(&description)?;
    let origin = match &wasm {
        Wasm::Builtin(_) => PluginOrigin::Builtin,
        Wasm::File(path) => PluginOrigin::File(path.clone()),
    };
    let imports = grants::classify_imports(description.imports.iter().map(String::as_str));
    let granted = match origin {
        PluginOrigin::Builtin => grants::builtin_granted(&info.name, info.kind, grants),
        PluginOrigin::File(_) => grants.granted(&info.name, &info.version, &digest),
    };
    let refusal = grants::check(&info.name, &imports, &granted).err();
    Ok(LoadedPlugin {
        info,
        origin,
        digest,
        imports,
        granted: granted.capabilities,
        scopes: std::sync::Arc::new(granted.scopes),
        refusal,
        wasm,
        component: tokio::sync::OnceCell::new_with(component),
    })
}

/// Describes a compiled component: reads its world and imports, and calls
/// `describe()`. Imports this host does not provide are linked as traps for the call,
/// so the plugin can still say what it serves (and be refused by name).
pub(crate) async fn describe_component(
    loader: &Loader,
    component: &Component,
    label: &str,
) -> Result<Description, DescribeFailure> {
    let engine = loader.engine();
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    crate::wit::line_of(
        imports
            .iter()
            .map(String::as_str)
            .chain(exports.iter().copied()),
    )
    .map_err(|e| DescribeFailure::Lasting(e.into()))?;
    let kind = world_of(exports.into_iter()).map_err(DescribeFailure::Lasting)?;
    let classified = grants::classify_imports(imports.iter().map(String::as_str));
    let info = if classified.unknown().is_empty() {
        loader
            .describe(loader.linker(), component, kind, label)
            .await
    } else {
        let mut linker = loader.linker().clone();
        linker
            .define_unknown_imports_as_traps(component)
            .map_err(|e| DescribeFailure::Lasting(DescribeError::Link(e.into())))?;
        loader.describe(&linker, component, kind, label).await
    }
    .map_err(|e| match e {
        PluginError::Deadline { .. } => DescribeFailure::Passing(e.into()),
        e => DescribeFailure::Lasting(e.into()),
    })?;
    check_info(&info, kind).map_err(DescribeFailure::Lasting)?;
    Ok(description(&info, imports))
}

/// Why a component could not be described.
pub(crate) enum DescribeFailure {
    /// The same bytes will fail the same way: cached.
    Lasting(DescribeError),
    /// It may work next time (a deadline on a busy machine): not cached.
    Passing(DescribeError),
}

/// Which plugin world a component implements, from its exports.
fn world_of<'a>(exports: impl Iterator<Item = &'a str>) -> Result<PluginKind, DescribeError> {
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
        [] => Err(DescribeError::NoWorld),
        _ => Err(DescribeError::ManyWorlds),
    }
}

/// Most text a plugin's `describe()` may return, its options schema included: it is
/// kept for every plugin, cached, and shown by `plugins list`.
const MAX_DESCRIBE_BYTES: usize = 1 << 20;

fn check_info(info: &PluginInfo, kind: PluginKind) -> Result<(), DescribeError> {
    let text_bytes = [&info.name, &info.version, &info.summary]
        .into_iter()
        .chain(&info.serves)
        .chain(&info.options_schema)
        .map(String::len)
        .sum::<usize>();
    if text_bytes > MAX_DESCRIBE_BYTES {
        // Not even the name is shown: it may be the giant part.
        return Err(DescribeError::TooLarge(text_bytes));
    }
    let valid_name = !info.name.is_empty()
        && info.name.len() <= 64
        && info
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_name {
        return Err(DescribeError::BadName(info.name.clone()));
    }
    if info.kind != kind {
        return Err(DescribeError::WrongKind {
            name: info.name.clone(),
            described: info.kind,
            implements: kind,
        });
    }
    if info.serves.is_empty() {
        return Err(DescribeError::ServesNothing {
            name: info.name.clone(),
            field: selector_field(kind),
        });
    }
    if let Some(schema) = &info.options_schema {
        serde_json::from_str::<serde_json::Value>(schema).map_err(|source| {
            DescribeError::BadSchema {
                name: info.name.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_giant_description_is_refused_without_repeating_it() {
        let info = PluginInfo {
            name: "n".repeat(MAX_DESCRIBE_BYTES),
            version: "0.1.0".into(),
            kind: PluginKind::AgentDriver,
            serves: vec!["x".into()],
            summary: String::new(),
            options_schema: None,
        };
        let error = check_info(&info, PluginKind::AgentDriver)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("describe() returned"), "{error}");
        assert!(error.len() < 200, "{error}");
    }
}
