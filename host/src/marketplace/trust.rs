//! The trust store: which public key may sign plugins (and revoke them) in which
//! namespaces. A key is trusted for `REGISTRY/NAMESPACE` and what is below it; a
//! signature by a key trusted only elsewhere is refused like one by an unknown key,
//! with its own message.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::oci::PluginRef;
use super::signature::{key_id, public_key};
use super::{write_atomically, MarketError};

/// One trusted key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    /// The key id as minisign prints it.
    pub id: String,
    /// The base64 line of the minisign public key.
    pub public: String,
    /// `REGISTRY/NAMESPACE` entries it may sign for.
    pub scopes: Vec<String>,
}

impl TrustedKey {
    pub fn public_key(&self) -> Result<minisign::PublicKey, MarketError> {
        public_key(&self.public)
    }

    /// Whether it may sign for the namespace `scope`.
    pub fn covers(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| covers(s, scope))
    }
}

/// Whether a key trusted for `trusted` may sign in `scope`: the same namespace or one
/// below it.
pub fn covers(trusted: &str, scope: &str) -> bool {
    scope == trusted
        || scope
            .strip_prefix(trusted)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustFile {
    #[serde(default, rename = "key")]
    keys: Vec<TrustedKey>,
}

#[derive(Debug)]
pub struct TrustStore {
    path: PathBuf,
    file: TrustFile,
}

impl TrustStore {
    /// Reads the store; a missing file trusts nothing.
    pub fn load(path: &Path) -> Result<TrustStore, MarketError> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| MarketError::file(path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TrustFile::default(),
            Err(e) => return Err(MarketError::file(path, e)),
        };
        // A scope written by an older agentgate (or by hand) is held to the same rule.
        for key in &file.keys {
            for scope in &key.scopes {
                PluginRef::check_scope(scope).map_err(|why| {
                    MarketError::file(
                        path,
                        format!(
                            "key {}: scope {scope:?}: {why}; remove that scope from the file and add it again with `agentgate plugins trust add`",
                            key.id
                        ),
                    )
                })?;
            }
        }
        Ok(TrustStore {
            path: path.to_path_buf(),
            file,
        })
    }

    fn save(&self) -> Result<(), MarketError> {
        let text = format!(
            "# Written by `agentgate plugins trust`: which key may sign plugins in which namespaces.\n{}",
            toml::to_string(&self.file).expect("the trust store serializes")
        );
        write_atomically(&self.path, text.as_bytes())
    }

    pub fn keys(&self) -> &[TrustedKey] {
        &self.file.keys
    }

    pub fn get(&self, id: &str) -> Option<&TrustedKey> {
        self.file.keys.iter().find(|k| k.id == id)
    }

    /// The keys trusted for `scope`.
    pub fn keys_for<'a>(&'a self, scope: &'a str) -> impl Iterator<Item = &'a TrustedKey> {
        self.file.keys.iter().filter(move |k| k.covers(scope))
    }

    /// Trusts `key` (a `.pub` file or its base64 line) for `scope`; returns its id.
    pub fn add(&mut self, key: &str, scope: &str) -> Result<String, MarketError> {
        check_scope(scope)?;
        let public = public_key(key)?;
        let id = key_id(&public);
        match self.file.keys.iter_mut().find(|k| k.id == id) {
            Some(existing) => {
                if existing.public != public.to_base64() {
                    return Err(MarketError::Input(format!(
                        "another key with id {id} is trusted already; remove it first (`agentgate plugins trust remove {id}`)"
                    )));
                }
                if !existing.scopes.iter().any(|s| s == scope) {
                    existing.scopes.push(scope.to_string());
                }
            }
            None => self.file.keys.push(TrustedKey {
                id: id.clone(),
                public: public.to_base64(),
                scopes: vec![scope.to_string()],
            }),
        }
        self.save()?;
        Ok(id)
    }

    /// Removes the key `key` (its id, `.pub` file or base64 line), or only its trust
    /// for `scope`.
    pub fn remove(&mut self, key: &str, scope: Option<&str>) -> Result<(), MarketError> {
        let id = match self.get(key) {
            Some(k) => k.id.clone(),
            None => key_id(&public_key(key)?),
        };
        let Some(index) = self.file.keys.iter().position(|k| k.id == id) else {
            return Err(MarketError::Input(format!(
                "key {id} is not trusted; `agentgate plugins trust list` shows the trusted keys"
            )));
        };
        match scope {
            None => {
                self.file.keys.remove(index);
            }
            Some(scope) => {
                let entry = &mut self.file.keys[index];
                let before = entry.scopes.len();
                entry.scopes.retain(|s| s != scope);
                if entry.scopes.len() == before {
                    return Err(MarketError::Input(format!(
                        "key {id} is not trusted for {scope}; it is for {}",
                        entry.scopes.join(", ")
                    )));
                }
                if entry.scopes.is_empty() {
                    self.file.keys.remove(index);
                }
            }
        }
        self.save()
    }
}

/// A namespace is checked as references are, so a scope holds nothing a reference could
/// not (`..`, newlines, patterns).
fn check_scope(scope: &str) -> Result<(), MarketError> {
    PluginRef::check_scope(scope).map_err(|why| {
        MarketError::Input(format!(
            "--scope {scope:?}: {why}; expected REGISTRY/NAMESPACE (e.g. 127.0.0.1:5000/acme), without a tag, digest or pattern"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_covers_its_namespace_and_what_is_below() {
        assert!(covers("reg:5000/acme", "reg:5000/acme"));
        assert!(covers("reg:5000/acme", "reg:5000/acme/tools"));
        assert!(!covers("reg:5000/acme", "reg:5000/acme-evil"));
        assert!(!covers("reg:5000/acme", "reg:5000/other"));
        assert!(!covers("reg:5000/acme", "other:5000/acme"));
    }
}
