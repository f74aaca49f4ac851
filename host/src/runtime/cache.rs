//! On-disk cache of compiled components.
//!
//! Compiling a component costs from tens of milliseconds (Rust) to seconds (Python,
//! JavaScript). Entries are keyed by the wasm's sha256 and the engine's compatibility
//! hash, so a new wasmtime or a different CPU never loads a stale artifact. Only files
//! this host wrote are deserialized: the directory must be owned by us and not writable
//! by anyone else, and entries are written atomically.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

impl ComponentCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> ComponentCache {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    /// Returns the compiled component for `wasm` (whose sha256 is `digest`), compiling
    /// and storing it on a miss. Cache failures fall back to compiling in memory.
    pub fn load(&self, engine: &Engine, digest: &str, wasm: &[u8]) -> anyhow::Result<Component> {
        let path = self.dir.join(format!("{digest}-{}.cwasm", self.engine_key));
        if path.is_file() && self.dir_is_private() {
            // SAFETY: the file was produced by `precompile_component` of an engine with
            // the same compatibility hash, in a directory only this user can write.
            if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
                return Ok(component);
            }
        }
        let compiled = engine.precompile_component(wasm)?;
        if let Err(e) = self.store(&path, &compiled) {
            eprintln!(
                "warning: cannot write the component cache at {}: {e}",
                self.dir.display()
            );
        }
        // SAFETY: these bytes were produced by this engine a moment ago.
        Ok(unsafe { Component::deserialize(engine, &compiled)? })
    }

    fn store(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        // Unique per write: concurrent loaders of one plugin must not share a file.
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::now_v7().simple()));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(tmp, path)
    }

    fn dir_is_private(&self) -> bool {
        let Ok(meta) = std::fs::metadata(&self.dir) else {
            return false;
        };
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        meta.uid() == uid && meta.permissions().mode() & 0o022 == 0
    }
}
