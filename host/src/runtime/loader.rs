//! Compiling components, describing them, and counting both.
//!
//! Everything that turns component bytes into something runnable goes through the
//! [`Loader`]: the compile cache, the description cache, the progress shown while a
//! large component compiles, and the counters tests and benchmarks read to see that a
//! command compiled nothing it did not need.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::Engine;

use super::builtin::{Builtin, PRECOMPILED_FOR};
use super::cache::{Compiled, ComponentCache};
use super::catalog::{self, DescribeFailure, Described, LoadedPlugin, Wasm};
use super::engine_config::engine_key;
use super::{PluginError, PluginLimits, PluginState, Runtime};
use crate::wit::types::{PluginInfo, PluginKind};

/// Bumped when what a description holds changes meaning.
const DESCRIPTION_FORMAT: &str = "d1";

/// Sees components being compiled, e.g. to show progress.
/// Why a component did not compile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompileError {
    #[error("the compiler failed: {0}")]
    Panicked(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Rejected(WasmtimeError),
}

/// An error of wasmtime, kept with its chain: shown as its
/// messages joined by `: ` (as `{:#}` shows them), its causes its `source()`.
#[derive(Debug)]
pub(crate) struct WasmtimeError(Box<dyn std::error::Error + Send + Sync>);

impl From<wasmtime::Error> for WasmtimeError {
    fn from(error: wasmtime::Error) -> WasmtimeError {
        WasmtimeError(error.into())
    }
}

impl std::fmt::Display for WasmtimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

impl std::error::Error for WasmtimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Told when a plugin is compiled rather than read from the compile cache.
pub trait LoadObserver: Send + Sync {
    /// `label` (a file name or a built-in's name) of `bytes` bytes is being compiled:
    /// it was not in the compile cache.
    fn compile_started(&self, label: &str, bytes: usize);
    /// The compile of `label` ended after `took`.
    fn compile_finished(&self, label: &str, took: Duration);
}

/// What loading did so far in this runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Components compiled (not found in the compile cache).
    pub compiled: usize,
    /// Components read from the compile cache.
    pub from_cache: usize,
    /// Components asked to `describe()` themselves (not found in the description cache).
    pub described: usize,
    /// Built-ins loaded from the native code embedded in the binary.
    pub embedded: usize,
}

#[derive(Default)]
struct Counters {
    compiled: AtomicUsize,
    from_cache: AtomicUsize,
    described: AtomicUsize,
    embedded: AtomicUsize,
}

pub(crate) struct Loader {
    engine: Engine,
    /// Whether the built-ins' precompiled code was made for an engine configured like
    /// `engine` (`engine_config::engine_key`), so that it can load it.
    builtins_precompiled_for_it: bool,
    linker: Linker<PluginState>,
    cache: Option<Arc<ComponentCache>>,
    limits: PluginLimits,
    observer: Option<Arc<dyn LoadObserver>>,
    counters: Counters,
}

impl Loader {
    pub(crate) fn new(
        engine: Engine,
        linker: Linker<PluginState>,
        cache: Option<ComponentCache>,
        limits: PluginLimits,
        observer: Option<Arc<dyn LoadObserver>>,
    ) -> Loader {
        Loader {
            builtins_precompiled_for_it: engine_key(&engine) == PRECOMPILED_FOR,
            engine,
            linker,
            cache: cache.map(Arc::new),
            limits,
            observer,
            counters: Counters::default(),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<PluginState> {
        &self.linker
    }

    pub(crate) fn stats(&self) -> LoadStats {
        LoadStats {
            compiled: self.counters.compiled.load(Ordering::Relaxed),
            from_cache: self.counters.from_cache.load(Ordering::Relaxed),
            described: self.counters.described.load(Ordering::Relaxed),
            embedded: self.counters.embedded.load(Ordering::Relaxed),
        }
    }

    fn description_key(digest: &str) -> String {
        format!(
            "{}-{DESCRIPTION_FORMAT}",
            digest.trim_start_matches("sha256:")
        )
    }

    /// The digest recorded for an unchanged plugin file, if any.
    pub(crate) fn file_digest(&self, path: &std::path::Path) -> Option<String> {
        self.cache.as_ref()?.plugin_cache().file_digest(path)
    }

    pub(crate) fn remember_file_digest(
        &self,
        path: &std::path::Path,
        identity: super::cache::FileIdentity,
        digest: &str,
    ) {
        if let Some(cache) = &self.cache {
            cache
                .plugin_cache()
                .remember_file_digest(path, identity, digest);
        }
    }

    /// The cached description of the component with `digest`, if any.
    pub(crate) fn cached_description(&self, digest: &str) -> Option<Described> {
        let bytes = self
            .cache
            .as_ref()?
            .plugin_cache()
            .described(&Self::description_key(digest))?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Compiles and describes a component not seen before, and caches what it said
    /// (or why it failed, unless that may pass). Returns the compiled component too,
    /// so a run that uses it now does not load it twice.
    pub(crate) async fn describe_now(
        &self,
        digest: &str,
        bytes: Cow<'static, [u8]>,
        label: &str,
    ) -> (Described, Option<Component>) {
        let component = match self.compile(label, digest, bytes).await {
            Ok(component) => component,
            Err(reason) => {
                // Kept as text: the cache outlives this process.
                let described = Described::Broken(format!("not a valid component: {reason}"));
                self.store_description(digest, &described);
                return (described, None);
            }
        };
        self.counters.described.fetch_add(1, Ordering::Relaxed);
        let described = match catalog::describe_component(self, &component, label).await {
            Ok(description) => Described::Plugin(description),
            Err(DescribeFailure::Passing(reason)) => {
                return (Described::Broken(reason.to_string()), Some(component))
            }
            Err(DescribeFailure::Lasting(reason)) => Described::Broken(reason.to_string()),
        };
        self.store_description(digest, &described);
        (described, Some(component))
    }

    fn store_description(&self, digest: &str, described: &Described) {
        if let (Some(cache), Ok(json)) = (&self.cache, serde_json::to_vec(described)) {
            cache
                .plugin_cache()
                .store_description(&Self::description_key(digest), &json);
        }
    }

    /// Calls `describe()` on `component` through `linker`.
    pub(crate) async fn describe(
        &self,
        linker: &Linker<PluginState>,
        component: &Component,
        kind: PluginKind,
        label: &str,
    ) -> Result<PluginInfo, PluginError> {
        Runtime::describe(&self.engine, linker, &self.limits, component, kind, label).await
    }

    /// Compiles `bytes` (whose digest is `digest`) through the compile cache, off the
    /// async threads.
    async fn compile(
        &self,
        label: &str,
        digest: &str,
        bytes: Cow<'static, [u8]>,
    ) -> Result<Component, CompileError> {
        let engine = self.engine.clone();
        let cache = self.cache.clone();
        let observer = self.observer.clone();
        let label_owned = label.to_string();
        let sha = digest.trim_start_matches("sha256:").to_string();
        let task = tokio::task::spawn_blocking(move || {
            let mut started = None;
            let mut on_compile = || {
                started = Some(Instant::now());
                if let Some(observer) = &observer {
                    observer.compile_started(&label_owned, bytes.len());
                }
            };
            let result = match &cache {
                Some(cache) => cache.load(&engine, &sha, &bytes, on_compile),
                None => {
                    on_compile();
                    Component::from_binary(&engine, &bytes).map(|c| (c, Compiled::Now))
                }
            };
            if let (Some(observer), Some(started)) = (&observer, started) {
                observer.compile_finished(&label_owned, started.elapsed());
            }
            result
        });
        let (component, how) = task
            .await
            .map_err(CompileError::Panicked)?
            .map_err(|e| CompileError::Rejected(e.into()))?;
        let counter = match how {
            Compiled::Now => &self.counters.compiled,
            Compiled::FromCache => &self.counters.from_cache,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(component)
    }

    /// The compiled component of `plugin`, compiled or read from the cache on first
    /// use. A file that changed since it was described is not loaded.
    pub(crate) async fn component<'p>(
        &self,
        plugin: &'p LoadedPlugin,
    ) -> Result<&'p Component, PluginError> {
        let not_loaded = |reason: String| PluginError::NotLoaded {
            plugin: plugin.name().to_string(),
            reason,
        };
        plugin
            .component
            .get_or_try_init(|| async {
                let bytes = match &plugin.wasm {
                    Wasm::Builtin(builtin) => {
                        if let Some(component) = self.embedded(builtin).await {
                            return Ok(component);
                        }
                        // Part of this binary: no need to check its digest again.
                        Cow::Borrowed(builtin.wasm)
                    }
                    Wasm::File(path) => {
                        let bytes = std::fs::read(path).map_err(|e| {
                            not_loaded(format!("cannot read {}: {e}", path.display()))
                        })?;
                        if catalog::digest_of(&bytes) != plugin.digest() {
                            return Err(not_loaded(format!(
                                "{} changed since the plugins were listed; run the command again",
                                plugin.origin()
                            )));
                        }
                        Cow::Owned(bytes)
                    }
                };
                self.compile(plugin.name(), plugin.digest(), bytes)
                    .await
                    .map_err(|e| not_loaded(e.to_string()))
            })
            .await
    }

    /// Whether `plugin` is a built-in whose precompiled code this engine can load.
    pub(crate) fn has_embedded_code(&self, plugin: &LoadedPlugin) -> bool {
        matches!(plugin.wasm, Wasm::Builtin(_)) && self.builtins_precompiled_for_it
    }

    /// The built-in's code precompiled at build time, when it was compiled for an
    /// engine configured like this one (see `runtime::builtin`). Loaded off the async
    /// threads, like a compile, so that a run's plugins load side by side.
    async fn embedded(&self, builtin: &'static Builtin) -> Option<Component> {
        if !self.builtins_precompiled_for_it {
            return None;
        }
        let engine = self.engine.clone();
        let component = tokio::task::spawn_blocking(move || {
            // SAFETY: these bytes are part of this executable: `build.rs` made them
            // with `precompile_component` of an engine with this configuration key.
            unsafe { Component::deserialize(&engine, builtin.precompiled) }.ok()
        })
        .await
        .ok()??;
        self.counters.embedded.fetch_add(1, Ordering::Relaxed);
        Some(component)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cache::{PluginCache, DEFAULT_MAX_BYTES};
    use crate::runtime::engine_config::engine_config;
    use crate::runtime::{Catalog, Grants};

    fn loader(engine: Engine, cache: &std::path::Path) -> Loader {
        let cache = ComponentCache::new(PluginCache::new(cache, DEFAULT_MAX_BYTES), &engine);
        let linker = Linker::new(&engine);
        Loader::new(engine, linker, Some(cache), PluginLimits::default(), None)
    }

    #[test]
    fn the_builtins_were_precompiled_for_this_hosts_engine() {
        let engine = Engine::new(&engine_config()).unwrap();
        assert_eq!(engine_key(&engine), PRECOMPILED_FOR);
    }

    #[tokio::test]
    async fn a_builtin_precompiled_for_another_engine_is_compiled_for_this_one() {
        // Another configuration stands for another CPU or wasmtime: the embedded code
        // is not used; the built-in is compiled (and cached) only when it is needed.
        let mut config = engine_config();
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        let engine = Engine::new(&config).unwrap();
        assert_ne!(engine_key(&engine), PRECOMPILED_FOR);
        let cache = tempfile::tempdir().unwrap();
        let loader = loader(engine, cache.path());
        let catalog = Catalog::load(&loader, &[], &[], &Grants::default())
            .await
            .unwrap();
        assert_eq!(loader.stats(), LoadStats::default());
        let plugin = catalog.get("sandbox-none").unwrap();
        loader.component(plugin).await.unwrap();
        let compiled_once = LoadStats {
            compiled: 1,
            ..LoadStats::default()
        };
        assert_eq!(loader.stats(), compiled_once);

        // The next process with that engine reads it from the compile cache.
        let engine = Engine::new(&config).unwrap();
        let again = super::tests::loader(engine, cache.path());
        let catalog = Catalog::load(&again, &[], &[], &Grants::default())
            .await
            .unwrap();
        again
            .component(catalog.get("sandbox-none").unwrap())
            .await
            .unwrap();
        assert_eq!(
            again.stats(),
            LoadStats {
                from_cache: 1,
                ..LoadStats::default()
            }
        );
    }

    #[tokio::test]
    async fn a_builtin_loads_from_the_binary_for_this_hosts_engine() {
        let cache = tempfile::tempdir().unwrap();
        let loader = loader(Engine::new(&engine_config()).unwrap(), cache.path());
        let catalog = Catalog::load(&loader, &[], &[], &Grants::default())
            .await
            .unwrap();
        loader
            .component(catalog.get("sandbox-none").unwrap())
            .await
            .unwrap();
        assert_eq!(
            loader.stats(),
            LoadStats {
                embedded: 1,
                ..LoadStats::default()
            }
        );
        assert!(!cache.path().join("components").exists());
    }
}
