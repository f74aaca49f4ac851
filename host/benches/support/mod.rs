//! What the benchmarks share: an engine compiled like the host's.

use wasmtime::{Config, Engine};

/// An engine with the settings of the host's (`runtime::build_engine`) that change
/// compiled code, so what is measured is what the host compiles and loads.
pub fn engine() -> Engine {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.max_wasm_stack(1 << 20);
    Engine::new(&config).expect("engine")
}
