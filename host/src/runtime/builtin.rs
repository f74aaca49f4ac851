//! The plugins compiled into this binary by `build.rs`: their wasm, digest and
//! description, and their native code precompiled at build time.
//!
//! The native code is loaded without compiling, and without the cache's seal: these
//! bytes are part of this executable, which the operator installed and nobody else can
//! change without changing the host itself. That is why only the binary's own bytes are
//! ever loaded this way, never a file. They are used only when this engine's
//! configuration key (`engine_config::engine_key`: wasmtime version, compiler
//! settings, CPU features) is the one they were compiled for; otherwise (another CPU)
//! the built-in is compiled from its wasm through the compile cache, only when a run
//! needs it.

/// One built-in plugin.
pub struct Builtin {
    /// The crate under `plugins/` it is built from.
    pub crate_name: &'static str,
    pub wasm: &'static [u8],
    /// Hex sha256 of `wasm`, computed at build time.
    pub sha256: &'static str,
    /// `describe()`'s answer and the imports, as `description::Description` JSON.
    pub description: &'static str,
    /// `wasm` precompiled for an engine whose key is [`PRECOMPILED_FOR`].
    pub precompiled: &'static [u8],
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin")
            .field("crate_name", &self.crate_name)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));
