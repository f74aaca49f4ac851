//! The WebAssembly side of the host: one wasmtime engine, plugin loading, the compile
//! cache, per-store limits and capability grants.
//!
//! A plugin runs in its own `Store` per run. Everything that can go wrong inside one (a
//! trap, a runaway loop, memory exhaustion) poisons only that store: the call returns a
//! [`PluginError`] that names the plugin, and the host and other runs carry on.

pub mod bindings;
mod builtin;
mod cache;
pub mod catalog;
pub mod grants;
pub mod instance;
mod limits;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine};

pub use catalog::{Catalog, LoadedPlugin, PluginOrigin};
pub use grants::{Capability, Grants};
pub use instance::PluginError;
pub use limits::PluginLimits;
pub use state::PluginState;

/// How often the epoch ticks. Guest code is interrupted (and may yield) at this rate.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings for the runtime, from the CLI or a test.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Extra plugin directories, searched in order after the built-ins.
    pub plugin_dirs: Vec<PathBuf>,
    /// What the operator granted to non-built-in plugins.
    pub grants: Grants,
    pub limits: PluginLimits,
}

/// The engine, the linker with every host interface, and the plugin catalog.
pub struct Runtime {
    engine: Engine,
    linker: Linker<PluginState>,
    pub(crate) limits: PluginLimits,
    catalog: Catalog,
    _ticker: EpochTicker,
}

impl Runtime {
    /// Builds the engine and loads every plugin (built-ins first, then the plugin
    /// directories, where a plugin with a built-in's name replaces it).
    pub async fn new(config: RuntimeConfig) -> anyhow::Result<Arc<Runtime>> {
        let engine = build_engine()?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::add_host_interfaces(&mut linker)?;
        let ticker = EpochTicker::start(engine.clone());
        let cache = config
            .cache_dir
            .map(|dir| cache::ComponentCache::new(dir, &engine));
        let catalog = Catalog::load(
            &engine,
            &linker,
            cache.as_ref(),
            &config.plugin_dirs,
            &config.grants,
            &config.limits,
        )
        .await?;
        Ok(Arc::new(Runtime {
            engine,
            linker,
            limits: config.limits,
            catalog,
            _ticker: ticker,
        }))
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<PluginState> {
        &self.linker
    }
}

fn build_engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    // Keep stack overflow in a guest a clean trap, well inside the fiber's stack.
    config.max_wasm_stack(1 << 20);
    Ok(Engine::new(&config)?)
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
