//! The WebAssembly side of the host: one wasmtime engine, plugin loading, the compile
//! and description caches, per-store limits and capability grants.
//!
//! Loading is lazy: making a `Runtime` finds and describes plugins (from the
//! description cache when seen before), and a plugin is compiled only when a run needs
//! it ([`Runtime::load`]). The built-ins cost neither: the build described them and
//! compiled them for this host's engine configuration (`engine_config`), and the
//! binary embeds both (see `builtin`), so even the first run in a fresh
//! `AGENTGATE_HOME` compiles nothing.
//!
//! A plugin runs in its own `Store` per run. Everything that can go wrong inside one (a
//! trap, a runaway loop, memory exhaustion) poisons only that store: the call returns a
//! [`PluginError`] that names the plugin, and the host and other runs carry on.

mod builtin;
pub mod cache;
pub(crate) mod catalog;
mod description;
mod engine_config;
pub(crate) mod grants;
#[cfg(test)]
mod grants_tests;
pub(crate) mod instance;
mod limits;
mod loader;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::Engine;

pub use crate::capabilities::http::{BadHost, HostAllowlist, HttpLimits};
pub use crate::capabilities::Capability;
pub use catalog::{Catalog, Installed, LoadedPlugin, PluginOrigin};
pub use engine_config::engine_config;
pub use grants::Grants;
pub use instance::PluginError;
pub use limits::PluginLimits;
pub use loader::{LoadObserver, LoadStats};
pub use state::PluginState;

/// How often the epoch ticks. Guest code is interrupted (and may yield) at this rate.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings for the runtime, from the CLI or a test.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// The root of the plugin caches (`components/` for compiled components,
    /// `described/` for what each component's `describe()` said); `None` disables
    /// both.
    pub cache_dir: Option<PathBuf>,
    /// The bound of the compiled entries, in bytes; least recently used entries are
    /// evicted past it.
    pub cache_max_bytes: u64,
    /// Extra plugin directories, searched in order after the built-ins.
    pub plugin_dirs: Vec<PathBuf>,
    /// Plugins installed from a registry (the marketplace's plugins.lock), after the
    /// built-ins and before the plugin directories.
    pub installed: Vec<catalog::Installed>,
    /// What the operator granted to non-built-in plugins.
    pub grants: Grants,
    /// What each plugin's store may use: memory, compute slices, call deadlines, HTTP.
    pub limits: PluginLimits,
    /// Sees compiles, e.g. to show progress.
    pub observer: Option<Arc<dyn LoadObserver>>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            cache_max_bytes: cache::DEFAULT_MAX_BYTES,
            plugin_dirs: Vec::new(),
            installed: Vec::new(),
            grants: Grants::default(),
            limits: PluginLimits::default(),
            observer: None,
        }
    }
}

/// The engine, the linker with every host interface, and the plugin catalog.
pub struct Runtime {
    loader: loader::Loader,
    pub(crate) limits: PluginLimits,
    catalog: Catalog,
    sections: crate::capabilities::HostSections,
    path_grants: crate::host_paths::PathGrants,
    egress: grants::EgressGrants,
    _ticker: EpochTicker,
}

impl Runtime {
    /// Builds the engine and finds every plugin (built-ins first, then the plugin
    /// directories, where a plugin with a built-in's name replaces it). Nothing is
    /// compiled but components never described before.
    pub async fn new(config: RuntimeConfig) -> Result<Arc<Runtime>, RuntimeError> {
        let engine =
            Engine::new(&engine_config::engine_config()).map_err(RuntimeError::wasmtime)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(RuntimeError::wasmtime)?;
        crate::capabilities::add_to_linker(&mut linker).map_err(RuntimeError::wasmtime)?;
        let ticker = EpochTicker::start(engine.clone());
        let cache = config.cache_dir.map(|dir| {
            cache::ComponentCache::new(
                cache::PluginCache::new(&dir, config.cache_max_bytes),
                &engine,
            )
        });
        let loader = loader::Loader::new(
            engine,
            linker,
            cache,
            config.limits.clone(),
            config.observer,
        );
        let catalog = Catalog::load(
            &loader,
            &config.installed,
            &config.plugin_dirs,
            &config.grants,
        )
        .await?;
        Ok(Arc::new(Runtime {
            loader,
            limits: config.limits,
            catalog,
            sections: config.grants.sections.clone(),
            path_grants: config.grants.paths.clone(),
            egress: config.grants.egress.clone(),
            _ticker: ticker,
        }))
    }

    /// The plugins found when the runtime was made.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The context of the run `identity` names (or of a `gc` call) with `events`: each
    /// capability's per-run state made from the operator's host-wide sections.
    pub fn run_context(
        &self,
        identity: crate::capabilities::labels::RunIdentity,
        events: Arc<crate::record::EventSink>,
    ) -> Arc<crate::capabilities::RunContext> {
        crate::capabilities::RunContext::new(identity, events, self.sections.clone())
    }

    /// The host folders the operator allows TaskSpecs (`workspaces:`, `mounts:`).
    pub fn path_grants(&self) -> &crate::host_paths::PathGrants {
        &self.path_grants
    }

    /// The operator's `egress:` in grants.yaml: the cap on TaskSpecs' allowlists and
    /// the proxy's nameserver.
    pub fn egress_grants(&self) -> &grants::EgressGrants {
        &self.egress
    }

    /// Compiles `plugin` (or reads it from the compile cache) unless that was done
    /// already. A run calls this for its three plugins before it starts, so loading
    /// is timed as part of the run; instantiating a plugin also does it.
    pub async fn load(&self, plugin: &LoadedPlugin) -> Result<(), PluginError> {
        self.loader.component(plugin).await.map(|_| ())
    }

    /// Loads those of `plugins` whose native code is part of this binary (built-ins
    /// precompiled for this engine), side by side, off the async threads. Only a
    /// head start: [`Runtime::load`] in the run's `plugins` phase reports what failed
    /// here, and loads what must be compiled, under the run's timeout.
    pub async fn preload_builtins(&self, plugins: &[&LoadedPlugin]) {
        let loads = plugins
            .iter()
            .filter(|plugin| self.loader.has_embedded_code(plugin))
            .map(|plugin| self.load(plugin));
        futures_util::future::join_all(loads).await;
    }

    /// What loading compiled, read from the caches and described so far.
    pub fn load_stats(&self) -> LoadStats {
        self.loader.stats()
    }

    pub(crate) fn engine(&self) -> &Engine {
        self.loader.engine()
    }

    pub(crate) fn linker(&self) -> &Linker<PluginState> {
        self.loader.linker()
    }

    pub(crate) fn loader(&self) -> &loader::Loader {
        &self.loader
    }
}

/// Why a [`Runtime`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// wasmtime refused the engine's configuration or the host's imports: a defect of
    /// this build or of the machine, not of any plugin.
    #[error("cannot set up wasmtime: {0}")]
    Wasmtime(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A built-in plugin does not load: a defect of this build.
    #[error("built-in plugin {name} does not load: {source}")]
    Builtin {
        /// The built-in's crate name.
        name: &'static str,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A plugin directory (`--plugin-dir`, `AGENTGATE_PLUGIN_DIR`) could not be read.
    #[error("cannot read plugin directory {}: {source}", .dir.display())]
    PluginDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl RuntimeError {
    fn wasmtime(error: wasmtime::Error) -> RuntimeError {
        // Its text is its whole chain, as wasmtime's errors are read.
        RuntimeError::Wasmtime(Box::new(loader::WasmtimeError::from(error)))
    }
}

/// Advances the engine's epoch on a background thread until dropped.
struct EpochTicker {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> EpochTicker {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("agentgate-epoch".into())
            .spawn(move || {
                while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
