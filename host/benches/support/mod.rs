//! What the benchmarks share: an engine compiled like the host's.

use wasmtime::Engine;

/// An engine with the host's own configuration (`runtime::engine_config`, the one the
/// runtime and the build-time precompiler use), so what is measured is what the host
/// compiles and loads.
pub fn engine() -> Engine {
    Engine::new(&agentgate::runtime::engine_config()).expect("engine")
}
