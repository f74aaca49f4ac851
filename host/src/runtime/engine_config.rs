//! The one wasmtime configuration of this host.
//!
//! Compiled code loads only into an engine configured like the one that compiled it.
//! The runtime and the build-time precompiler of the built-in plugins
//! (`host/precompile`, which includes this file) both take their `Config` from
//! [`engine_config`], so the code embedded in the binary matches the engine that runs
//! it; [`engine_key`] names that configuration in cache entries and in the embedded
//! table, and a mismatch (another CPU, another wasmtime) is caught before any embedded
//! code is used.

use std::hash::{Hash, Hasher};

use wasmtime::{Config, Engine};

/// The configuration every engine of this host is built with.
pub fn engine_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    // Keep stack overflow in a guest a clean trap, well inside the fiber's stack.
    config.max_wasm_stack(1 << 20);
    config
}

/// What compiled code depends on in `engine` (wasmtime version, compiler settings, CPU
/// features, tunables), as 16 hex digits: code compiled by an engine with another key
/// does not load into this one.
pub fn engine_key(engine: &Engine) -> String {
    // `DefaultHasher::new` is the same function in every program built by one Rust
    // release, and the same toolchain (rust-toolchain.toml) builds the precompiler and
    // the host. Were they to differ, the keys would not match and the built-ins would
    // be compiled at run time, never loaded wrongly.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}
