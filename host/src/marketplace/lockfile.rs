//! `$AGENTGATE_HOME/plugins.lock`: what is installed, exactly.
//!
//! Each entry pins a plugin to one component (its sha256, and the manifest digest its
//! tag pointed at), names who signed it, and holds the grant the operator consented to,
//! shaped exactly like a grants.yaml plugin entry and read by the same code
//! (`Grants::add_entry`). A run loads the locked bytes only; a tag that moved is
//! noticed by `install` and `verify --refresh` and taken only by `update`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{write_atomically, MarketError, MarketHome};
use crate::runtime::grants::{Grants, GrantsError};

/// One installed plugin: a `[[plugin]]` entry of `plugins.lock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPlugin {
    /// The name the component's `describe()` reports (and the grant is for).
    pub name: String,
    /// The version its signed statement names (the tag it was published at).
    pub version: String,
    /// `REGISTRY/NAMESPACE/NAME:VERSION` it was installed from.
    pub reference: String,
    /// The digest of the OCI manifest the tag pointed at.
    pub manifest: String,
    /// `sha256:<hex>` of the component: the only bytes a run loads.
    pub wasm: String,
    /// The `agentgate:plugin` WIT package version it was built against.
    pub wit: String,
    /// The id of the key that signed it.
    pub signer: String,
    /// The namespace that key is trusted for, whose revocations apply.
    pub scope: String,
    /// The grant consented to, as a grants.yaml plugin entry.
    pub grant: serde_json::Value,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFile {
    #[serde(default, rename = "plugin")]
    plugins: Vec<LockedPlugin>,
}

/// `plugins.lock` as read from a home, changed in memory until [`Lockfile::save`].
#[derive(Debug)]
pub struct Lockfile {
    path: PathBuf,
    file: LockFile,
}

impl Lockfile {
    /// Reads the lockfile; a missing one has no plugins.
    pub fn load(path: &Path) -> Result<Lockfile, MarketError> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| {
                MarketError::file(
                    path,
                    format!("{e}\n  it is written by `agentgate plugins`; restore it, or remove the file and install again"),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => LockFile::default(),
            Err(e) => return Err(MarketError::file(path, e)),
        };
        Ok(Lockfile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes it back whole, atomically, under a header that says who writes it.
    pub fn save(&self) -> Result<(), MarketError> {
        let text = format!(
            "# Written by `agentgate plugins install|update|remove`; a run uses exactly these bytes and grants.\n{}",
            toml::to_string(&self.file).map_err(|e| MarketError::file(&self.path, e))?
        );
        write_atomically(&self.path, text.as_bytes())
    }

    /// Every locked plugin, in the file's order.
    pub fn plugins(&self) -> &[LockedPlugin] {
        &self.file.plugins
    }

    /// The entry of the plugin named `name`, if it is installed.
    pub fn get(&self, name: &str) -> Option<&LockedPlugin> {
        self.file.plugins.iter().find(|p| p.name == name)
    }

    /// Adds `plugin`, replacing the entry of the same name.
    pub fn put(&mut self, plugin: LockedPlugin) {
        match self.file.plugins.iter_mut().find(|p| p.name == plugin.name) {
            Some(entry) => *entry = plugin,
            None => self.file.plugins.push(plugin),
        }
    }

    /// Takes out the entry of the plugin named `name`; `None` when it has none.
    pub fn remove(&mut self, name: &str) -> Option<LockedPlugin> {
        let index = self.file.plugins.iter().position(|p| p.name == name)?;
        Some(self.file.plugins.remove(index))
    }

    /// Adds each locked grant to `grants`, read as the grants file's entries are.
    pub fn add_grants(&self, grants: &mut Grants) -> Result<(), GrantsError> {
        let origin = self.path.display().to_string();
        for plugin in &self.file.plugins {
            let entry =
                serde_yaml::to_value(&plugin.grant).map_err(|source| GrantsError::Parse {
                    path: origin.clone(),
                    source,
                })?;
            grants.add_entry(&plugin.name, entry, &origin)?;
        }
        Ok(())
    }

    /// Whether another entry than `except` uses the component `wasm`.
    pub fn uses(&self, wasm: &str, except: &str) -> bool {
        self.file
            .plugins
            .iter()
            .any(|p| p.wasm == wasm && p.name != except)
    }
}

/// Removes the installed file of `wasm` unless another entry uses it.
pub fn remove_component(home: &MarketHome, lock: &Lockfile, wasm: &str, name: &str) {
    if !lock.uses(wasm, name) {
        let _ = std::fs::remove_file(home.component(wasm));
    }
}
