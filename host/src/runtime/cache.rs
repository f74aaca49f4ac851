//! On-disk caches of what loading a plugin produces: compiled components, and what
//! each component's `describe()` returned.
//!
//! Compiling a component costs from tens of milliseconds (Rust) to seconds (Python,
//! JavaScript). Compiled entries are keyed by the wasm's sha256 and the engine's
//! compatibility hash, so a new wasmtime or a different CPU never loads a stale
//! artifact. Descriptions are keyed by the wasm's sha256 alone, so listing plugins and
//! resolving a TaskSpec compile nothing already seen.
//!
//! An entry is native code the host maps and runs (or, for a description, what decides
//! which plugin a run uses), so the cache loads only what it wrote itself, unchanged:
//! the directory must be owned by us and writable by no one else, entries are written
//! atomically, and each entry starts with a seal, the sha256 of its key and bytes
//! recorded when it was written. The seal is checked before anything is used; an entry
//! whose bytes changed since (an agent that reached the cache, a disk fault) or that
//! was copied from another key is discarded with a warning and made again. The seal
//! detects change, not a forger who recomputes it: keeping agents away from
//! `AGENTGATE_HOME` is the sandbox's job.
//!
//! The compiled entries are bounded in size: each use marks an entry (its mtime), and
//! storing a new one evicts the least recently used until the total fits.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The first bytes of every entry: the format, then the 32-byte seal.
const MAGIC: &[u8] = b"agentgate-cwasm-1\n";
const SEAL_LEN: usize = 32;

/// The default bound of the compiled entries: about 30 Python or JavaScript builds.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Subdirectories of the cache root.
const COMPILED_DIR: &str = "components";
const DESCRIBED_DIR: &str = "described";
const FILES_DIR: &str = "files";
const COMPILED_EXT: &str = "cwasm";
const DESCRIBED_EXT: &str = "json";

/// A temporary file older than this was left by a writer that died.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// A directory of sealed entries.
struct SealedDir {
    dir: PathBuf,
    ext: &'static str,
}

/// What reading an entry found.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// No entry, or a cache directory others could have written to.
    Missing,
    /// The bytes, exactly as this host wrote them for this key.
    Sealed(Vec<u8>),
    /// An entry that must not be used, and why.
    Rejected(String),
}

impl SealedDir {
    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{}", self.ext))
    }

    /// Reads the entry for `key` and checks its seal. The bytes checked are the bytes
    /// returned, so a change after the check cannot reach the caller. A sealed entry
    /// is marked as used now.
    fn read(&self, key: &str) -> Entry {
        if !self.dir_is_private() {
            return Entry::Missing;
        }
        let path = self.path(key);
        let mut bytes = Vec::new();
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let read = file.and_then(|mut file| file.read_to_end(&mut bytes).map(|_| file));
        let file = match read {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Missing,
            Err(e) => return Entry::Rejected(format!("it cannot be read ({e})")),
        };
        let Some(rest) = bytes.strip_prefix(MAGIC).filter(|r| r.len() > SEAL_LEN) else {
            return Entry::Rejected("it is not an entry this host wrote".into());
        };
        let (recorded, content) = rest.split_at(SEAL_LEN);
        if recorded != seal(key, content).as_slice() {
            return Entry::Rejected(
                "its bytes changed since it was written (the recorded digest does not match)"
                    .into(),
            );
        }
        // The mtime is the entry's last use, for eviction; failing to set it only
        // makes the entry look older.
        let _ = file.set_modified(SystemTime::now());
        Entry::Sealed(content.to_vec())
    }

    fn store(&self, key: &str, content: &[u8]) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let path = self.path(key);
        // Unique per write: concurrent loaders of one plugin must not share a file.
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::now_v7().simple()));
        let mut file = std::fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&seal(key, content))?;
        file.write_all(content)?;
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

    /// Every entry, with its size and last use; temporary files are left out.
    fn entries(&self) -> Vec<CacheEntry> {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        read.filter_map(Result::ok)
            .filter_map(|entry| {
                let path = entry.path();
                let key = path
                    .file_name()?
                    .to_str()?
                    .strip_suffix(&format!(".{}", self.ext))?
                    .to_string();
                let meta = std::fs::symlink_metadata(&path).ok()?;
                meta.is_file().then(|| CacheEntry {
                    key,
                    bytes: meta.len(),
                    last_used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    path,
                })
            })
            .collect()
    }

    /// Removes temporary files that a writer which died left behind.
    fn sweep_stale_tmp(&self) {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in read.filter_map(Result::ok) {
            let is_tmp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.contains(".tmp-"));
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_TMP);
            if is_tmp && old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Removes every entry (and temporary file); returns how many entries and bytes.
    fn clear(&self) -> std::io::Result<(usize, u64)> {
        let entries = self.entries();
        let bytes = entries.iter().map(|e| e.bytes).sum();
        for entry in &entries {
            remove_if_present(&entry.path)?;
        }
        if let Ok(read) = std::fs::read_dir(&self.dir) {
            for entry in read.filter_map(Result::ok) {
                if entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.contains(".tmp-"))
                {
                    remove_if_present(&entry.path())?;
                }
            }
        }
        Ok((entries.len(), bytes))
    }
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// One cache entry, as `agentgate plugins cache` shows it.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    /// `<sha256 of the wasm>-<engine hash>` for compiled entries, `<sha256>-<format>`
    /// for descriptions.
    pub key: String,
    /// The entry file's size, in bytes.
    pub bytes: u64,
    /// When it was last stored or read (the file's mtime, refreshed on a hit).
    pub last_used: SystemTime,
    /// The entry file.
    pub path: PathBuf,
}

impl CacheEntry {
    /// The sha256 of the component the entry was made from.
    pub fn wasm_sha256(&self) -> &str {
        self.key.split('-').next().unwrap_or(&self.key)
    }
}

/// How the compiled component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiled {
    /// Loaded from a sealed cache entry: nothing was compiled.
    FromCache,
    /// Compiled now (and stored, when the cache is writable).
    Now,
}

/// The caches under one root directory: compiled components and descriptions.
pub struct PluginCache {
    compiled: SealedDir,
    described: SealedDir,
    /// The digest of each plugin file, by path, with the file's identity (device,
    /// inode, size, mtime, ctime) when it was hashed: a file that has not changed is
    /// not read and hashed again.
    files: SealedDir,
    max_bytes: u64,
}

impl PluginCache {
    /// The caches under `root`, with compiled entries bounded to `max_bytes`.
    pub fn new(root: &Path, max_bytes: u64) -> PluginCache {
        PluginCache {
            compiled: SealedDir {
                dir: root.join(COMPILED_DIR),
                ext: COMPILED_EXT,
            },
            described: SealedDir {
                dir: root.join(DESCRIBED_DIR),
                ext: DESCRIBED_EXT,
            },
            files: SealedDir {
                dir: root.join(FILES_DIR),
                ext: DESCRIBED_EXT,
            },
            max_bytes,
        }
    }

    /// Cache directories that exist but are not private to this user (someone else
    /// owns them, or others may write to them): nothing is read from them, so every
    /// plugin is compiled and described again each time.
    pub fn unprotected_dirs(&self) -> Vec<&Path> {
        [&self.compiled, &self.described, &self.files]
            .into_iter()
            .filter(|sealed| sealed.dir.exists() && !sealed.dir_is_private())
            .map(|sealed| sealed.dir.as_path())
            .collect()
    }

    /// Where compiled components are kept.
    pub fn compiled_dir(&self) -> &Path {
        &self.compiled.dir
    }

    /// Where plugin descriptions are kept.
    pub fn described_dir(&self) -> &Path {
        &self.described.dir
    }

    /// The bound on the compiled entries' total size, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The compiled entries, least recently used first.
    pub fn compiled_entries(&self) -> Vec<CacheEntry> {
        let mut entries = self.compiled.entries();
        entries.sort_by_key(|e| e.last_used);
        entries
    }

    /// The description entries, in directory order.
    pub fn described_entries(&self) -> Vec<CacheEntry> {
        self.described.entries()
    }

    /// The description stored for `key`, if there is a sealed one.
    pub fn described(&self, key: &str) -> Option<Vec<u8>> {
        match self.described.read(key) {
            Entry::Sealed(bytes) => Some(bytes),
            Entry::Rejected(reason) => {
                eprintln!(
                    "warning: not using the cached plugin description {}: {reason}; describing the plugin again",
                    self.described.path(key).display()
                );
                None
            }
            Entry::Missing => None,
        }
    }

    /// Stores the description `bytes` under `key`; a failure is only warned about.
    pub fn store_description(&self, key: &str, bytes: &[u8]) {
        if let Err(e) = self.described.store(key, bytes) {
            eprintln!(
                "warning: cannot write the plugin description cache at {}: {e}",
                self.described.dir.display()
            );
        }
    }

    /// The digest recorded for the file at `path`, if the file is still the one
    /// that was hashed (same device, inode, size, mtime and ctime).
    pub fn file_digest(&self, path: &Path) -> Option<String> {
        let identity = FileIdentity::of(path)?;
        let Entry::Sealed(bytes) = self.files.read(&file_key(path)) else {
            return None;
        };
        let recorded: FileDigest = serde_json::from_slice(&bytes).ok()?;
        (recorded.identity == identity).then_some(recorded.digest)
    }

    /// Records that the file at `path` had `digest` when it had `identity`. Take the
    /// identity before reading the bytes: a change in between changes the ctime, so
    /// the record never matches the changed file.
    pub fn remember_file_digest(&self, path: &Path, identity: FileIdentity, digest: &str) {
        let record = FileDigest {
            identity,
            digest: digest.to_string(),
        };
        if let Ok(json) = serde_json::to_vec(&record) {
            let _ = self.files.store(&file_key(path), &json);
        }
    }

    /// Removes every entry of the caches; returns how many entries and bytes.
    pub fn clear(&self) -> std::io::Result<(usize, u64)> {
        let (a, a_bytes) = self.compiled.clear()?;
        let (b, b_bytes) = self.described.clear()?;
        self.files.clear()?;
        Ok((a + b, a_bytes + b_bytes))
    }

    /// Evicts least recently used compiled entries until they fit the bound, never
    /// `keep` (the entry just stored).
    fn evict(&self, keep: &str) {
        self.compiled.sweep_stale_tmp();
        let entries = self.compiled_entries();
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        for entry in entries {
            if total <= self.max_bytes {
                break;
            }
            if entry.key == keep {
                continue;
            }
            if remove_if_present(&entry.path).is_ok() {
                total = total.saturating_sub(entry.bytes);
            }
        }
    }
}

/// What identifies a file's content without reading it: any write, rename over it or
/// `touch` changes one of these (the ctime cannot be set back by its owner).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileIdentity {
    /// The identity of the file at `path`; `None` when it cannot be read.
    pub fn of(path: &Path) -> Option<FileIdentity> {
        let meta = std::fs::metadata(path).ok()?;
        Some(FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        })
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FileDigest {
    identity: FileIdentity,
    digest: String,
}

/// The entry name for a plugin file: the sha256 of its path.
fn file_key(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let hash = Sha256::digest(path.as_os_str().as_bytes());
    format!("{}-f1", hex::encode(&hash[..16]))
}

/// The compile cache bound to one engine.
pub struct ComponentCache {
    cache: PluginCache,
    engine_key: String,
}

impl ComponentCache {
    /// `cache` bound to `engine`: its compiled entries are keyed by the engine's
    /// settings too.
    pub fn new(cache: PluginCache, engine: &Engine) -> ComponentCache {
        ComponentCache {
            cache,
            engine_key: super::engine_config::engine_key(engine),
        }
    }

    /// The caches it uses.
    pub fn plugin_cache(&self) -> &PluginCache {
        &self.cache
    }

    /// Returns the compiled component for `wasm` (whose sha256 is `digest`), compiling
    /// and storing it on a miss. Cache failures fall back to compiling in memory.
    /// `compiling` is called just before a compile starts.
    pub fn load(
        &self,
        engine: &Engine,
        digest: &str,
        wasm: &[u8],
        compiling: impl FnOnce(),
    ) -> Result<(Component, Compiled), wasmtime::Error> {
        let key = self.key(digest);
        match self.cache.compiled.read(&key) {
            Entry::Sealed(compiled) => {
                // SAFETY: the seal shows these bytes are unchanged since this host wrote
                // them for this key, from `precompile_component` of an engine with the
                // same compatibility hash, in a directory only this user can write.
                if let Ok(component) = unsafe { Component::deserialize(engine, &compiled) } {
                    return Ok((component, Compiled::FromCache));
                }
            }
            Entry::Rejected(reason) => eprintln!(
                "warning: not loading the cached component {}: {reason}; compiling it again",
                self.cache.compiled.path(&key).display()
            ),
            Entry::Missing => {}
        }
        compiling();
        let compiled = engine.precompile_component(wasm)?;
        let size = (MAGIC.len() + SEAL_LEN + compiled.len()) as u64;
        if size > self.cache.max_bytes {
            eprintln!(
                "warning: the compiled component ({} MiB) is larger than the whole compile cache ({} MiB), so it is not kept; raise --cache-size",
                size >> 20,
                self.cache.max_bytes >> 20
            );
        } else if let Err(e) = self.cache.compiled.store(&key, &compiled) {
            eprintln!(
                "warning: cannot write the component cache at {}: {e}",
                self.cache.compiled.dir.display()
            );
        } else {
            self.cache.evict(&key);
        }
        // SAFETY: these bytes were produced by this engine a moment ago.
        Ok((
            unsafe { Component::deserialize(engine, &compiled)? },
            Compiled::Now,
        ))
    }

    /// The entry name for a wasm digest: the engine is part of it.
    fn key(&self, digest: &str) -> String {
        format!("{digest}-{}", self.engine_key)
    }
}

/// Binds bytes to the key they were stored for, so an entry copied from another key
/// is rejected like a changed one.
fn seal(key: &str, content: &[u8]) -> [u8; SEAL_LEN] {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0]);
    hasher.update(content);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(dir: &Path) -> SealedDir {
        SealedDir {
            dir: dir.join("components"),
            ext: COMPILED_EXT,
        }
    }

    fn stored(dir: &SealedDir, key: &str, content: &[u8]) -> PathBuf {
        dir.store(key, content).unwrap();
        dir.path(key)
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sealed(tmp.path());
        stored(&dir, "aa-1", b"compiled bytes");
        assert_eq!(dir.read("aa-1"), Entry::Sealed(b"compiled bytes".to_vec()));
        assert_eq!(dir.read("bb-1"), Entry::Missing);
    }

    #[test]
    fn a_changed_entry_is_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sealed(tmp.path());
        let path = stored(&dir, "aa-1", b"compiled bytes");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(dir.read("aa-1"), Entry::Rejected(r) if r.contains("changed")));
    }

    #[test]
    fn an_entry_copied_from_another_key_is_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sealed(tmp.path());
        let path_a = stored(&dir, "aa-1", b"plugin a");
        let path_b = stored(&dir, "bb-1", b"plugin b");
        std::fs::copy(&path_a, &path_b).unwrap();
        assert!(matches!(dir.read("bb-1"), Entry::Rejected(_)));
    }

    #[test]
    fn an_unsealed_entry_or_a_symlink_is_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sealed(tmp.path());
        let path = stored(&dir, "aa-1", b"compiled bytes");
        std::fs::write(&path, b"\x7fELF raw precompiled bytes").unwrap();
        assert!(matches!(dir.read("aa-1"), Entry::Rejected(r) if r.contains("not an entry")));

        let real = stored(&dir, "cc-1", b"compiled bytes");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(matches!(dir.read("aa-1"), Entry::Rejected(r) if r.contains("cannot be read")));
    }

    #[test]
    fn a_directory_others_can_write_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = sealed(tmp.path());
        stored(&dir, "aa-1", b"compiled bytes");
        std::fs::set_permissions(&dir.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(dir.read("aa-1"), Entry::Missing);
    }

    /// Sets an entry's last use to `secs` after the epoch.
    fn used_at(dir: &SealedDir, key: &str, secs: u64) {
        let file = std::fs::File::options()
            .write(true)
            .open(dir.path(key))
            .unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn eviction_keeps_the_cache_under_its_bound_least_recently_used_first() {
        let tmp = tempfile::tempdir().unwrap();
        let entry = 1000usize;
        let overhead = (MAGIC.len() + SEAL_LEN) as u64;
        // Room for three entries, not four.
        let cache = PluginCache::new(tmp.path(), 3 * (entry as u64 + overhead) + 10);
        for (i, key) in ["a-1", "b-1", "c-1"].iter().enumerate() {
            cache.compiled.store(key, &vec![i as u8; entry]).unwrap();
            used_at(&cache.compiled, key, 1000 + i as u64);
        }
        // Reading `a` makes it the most recently used.
        assert!(matches!(cache.compiled.read("a-1"), Entry::Sealed(_)));
        cache.compiled.store("d-1", &vec![3; entry]).unwrap();
        cache.evict("d-1");
        let mut keys: Vec<_> = cache
            .compiled_entries()
            .into_iter()
            .map(|e| e.key)
            .collect();
        keys.sort();
        assert_eq!(keys, ["a-1", "c-1", "d-1"], "b was the least recently used");
        let total: u64 = cache.compiled_entries().iter().map(|e| e.bytes).sum();
        assert!(
            total <= cache.max_bytes(),
            "{total} > {}",
            cache.max_bytes()
        );

        // The entry just stored stays even when older ones must all go.
        let small = PluginCache::new(tmp.path(), entry as u64 + overhead);
        small.evict("d-1");
        let keys: Vec<_> = small
            .compiled_entries()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, ["d-1"]);
    }

    #[test]
    fn clear_removes_every_entry_of_both_caches() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = PluginCache::new(tmp.path(), DEFAULT_MAX_BYTES);
        cache.compiled.store("a-1", b"x").unwrap();
        cache.store_description("a-d1", b"{}");
        std::fs::write(cache.compiled.dir.join("b.tmp-1"), b"partial").unwrap();
        let (count, bytes) = cache.clear().unwrap();
        assert_eq!(count, 2);
        assert!(bytes > 0);
        assert!(cache.compiled_entries().is_empty());
        assert!(cache.described_entries().is_empty());
        assert_eq!(std::fs::read_dir(cache.compiled_dir()).unwrap().count(), 0);
    }

    #[test]
    fn a_file_digest_is_remembered_until_the_file_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = PluginCache::new(&tmp.path().join("cache"), DEFAULT_MAX_BYTES);
        let plugin = tmp.path().join("p.wasm");
        std::fs::write(&plugin, b"one").unwrap();
        assert_eq!(cache.file_digest(&plugin), None);
        let identity = FileIdentity::of(&plugin).unwrap();
        cache.remember_file_digest(&plugin, identity, "sha256:one");
        assert_eq!(cache.file_digest(&plugin).as_deref(), Some("sha256:one"));

        // Same size, same mtime put back: the ctime still differs.
        let mtime = std::fs::metadata(&plugin).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&plugin, b"two").unwrap();
        let file = std::fs::File::options().write(true).open(&plugin).unwrap();
        file.set_modified(mtime).unwrap();
        assert_eq!(cache.file_digest(&plugin), None);
    }
}
