//! On-disk cache of compiled components.
//!
//! Compiling a component costs from tens of milliseconds (Rust) to seconds (Python,
//! JavaScript). Entries are keyed by the wasm's sha256 and the engine's compatibility
//! hash, so a new wasmtime or a different CPU never loads a stale artifact.
//!
//! An entry is native code the host maps and runs, so the cache loads only what it
//! wrote itself, unchanged: the directory must be owned by us and writable by no one
//! else, entries are written atomically, and each entry starts with a seal, the sha256
//! of its key and compiled bytes recorded when it was written. The seal is checked
//! before anything is deserialized; an entry whose bytes changed since (an agent that
//! reached the cache, a disk fault) or that was copied from another key is discarded
//! with a warning and compiled again. The seal detects change, not a forger who
//! recomputes it: keeping agents away from `AGENTGATE_HOME` is the sandbox's job.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The first bytes of every entry: the format, then the 32-byte seal.
const MAGIC: &[u8] = b"agentgate-cwasm-1\n";
const SEAL_LEN: usize = 32;

pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

/// What reading an entry found.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// No entry, or a cache directory others could have written to.
    Missing,
    /// The compiled bytes, exactly as this host wrote them for this key.
    Sealed(Vec<u8>),
    /// An entry that must not be loaded, and why.
    Rejected(String),
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
        let key = self.key(digest);
        let path = self.dir.join(format!("{key}.cwasm"));
        match self.read(&path, &key) {
            Entry::Sealed(compiled) => {
                // SAFETY: the seal shows these bytes are unchanged since this host wrote
                // them for this key, from `precompile_component` of an engine with the
                // same compatibility hash, in a directory only this user can write.
                if let Ok(component) = unsafe { Component::deserialize(engine, &compiled) } {
                    return Ok(component);
                }
            }
            Entry::Rejected(reason) => eprintln!(
                "warning: not loading the cached component {}: {reason}; compiling it again",
                path.display()
            ),
            Entry::Missing => {}
        }
        let compiled = engine.precompile_component(wasm)?;
        if let Err(e) = self.store(&path, &key, &compiled) {
            eprintln!(
                "warning: cannot write the component cache at {}: {e}",
                self.dir.display()
            );
        }
        // SAFETY: these bytes were produced by this engine a moment ago.
        Ok(unsafe { Component::deserialize(engine, &compiled)? })
    }

    /// The entry name for a wasm digest: the engine is part of it.
    fn key(&self, digest: &str) -> String {
        format!("{digest}-{}", self.engine_key)
    }

    /// Reads the entry at `path` and checks its seal. The bytes checked are the bytes
    /// returned, so a change after the check cannot reach the deserializer.
    fn read(&self, path: &Path, key: &str) -> Entry {
        if !self.dir_is_private() {
            return Entry::Missing;
        }
        let mut bytes = Vec::new();
        let read = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes));
        match read {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Missing,
            Err(e) => return Entry::Rejected(format!("it cannot be read ({e})")),
        }
        let Some(rest) = bytes.strip_prefix(MAGIC).filter(|r| r.len() > SEAL_LEN) else {
            return Entry::Rejected("it is not an entry this host wrote".into());
        };
        let (recorded, compiled) = rest.split_at(SEAL_LEN);
        if recorded != seal(key, compiled).as_slice() {
            return Entry::Rejected(
                "its bytes changed since it was written (the recorded digest does not match)"
                    .into(),
            );
        }
        Entry::Sealed(compiled.to_vec())
    }

    fn store(&self, path: &Path, key: &str, compiled: &[u8]) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        // Unique per write: concurrent loaders of one plugin must not share a file.
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::now_v7().simple()));
        let mut file = std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&seal(key, compiled))?;
        file.write_all(compiled)?;
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

/// Binds compiled bytes to the key they were compiled for, so an entry copied from
/// another key is rejected like a changed one.
fn seal(key: &str, compiled: &[u8]) -> [u8; SEAL_LEN] {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0]);
    hasher.update(compiled);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path) -> ComponentCache {
        ComponentCache {
            dir: dir.join("components"),
            engine_key: "0123456789abcdef".into(),
        }
    }

    fn stored(cache: &ComponentCache, digest: &str, compiled: &[u8]) -> (PathBuf, String) {
        let key = cache.key(digest);
        let path = cache.dir.join(format!("{key}.cwasm"));
        cache.store(&path, &key, compiled).unwrap();
        (path, key)
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let (path, key) = stored(&cache, "aa", b"compiled bytes");
        assert_eq!(
            cache.read(&path, &key),
            Entry::Sealed(b"compiled bytes".to_vec())
        );
        let missing = cache.dir.join("bb.cwasm");
        assert_eq!(cache.read(&missing, &cache.key("bb")), Entry::Missing);
    }

    #[test]
    fn a_changed_entry_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let (path, key) = stored(&cache, "aa", b"compiled bytes");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(cache.read(&path, &key), Entry::Rejected(r) if r.contains("changed")));
    }

    #[test]
    fn an_entry_copied_from_another_key_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let (path_a, _) = stored(&cache, "aa", b"plugin a");
        let (path_b, key_b) = stored(&cache, "bb", b"plugin b");
        std::fs::copy(&path_a, &path_b).unwrap();
        assert!(matches!(cache.read(&path_b, &key_b), Entry::Rejected(_)));
    }

    #[test]
    fn an_unsealed_entry_or_a_symlink_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let (path, key) = stored(&cache, "aa", b"compiled bytes");
        std::fs::write(&path, b"\x7fELF raw precompiled bytes").unwrap();
        assert!(
            matches!(cache.read(&path, &key), Entry::Rejected(r) if r.contains("not an entry"))
        );

        let (real, _) = stored(&cache, "cc", b"compiled bytes");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(
            matches!(cache.read(&path, &key), Entry::Rejected(r) if r.contains("cannot be read"))
        );
    }

    #[test]
    fn a_directory_others_can_write_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let (path, key) = stored(&cache, "aa", b"compiled bytes");
        std::fs::set_permissions(&cache.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(cache.read(&path, &key), Entry::Missing);
    }
}
