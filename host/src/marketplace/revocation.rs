//! Revocations: signed lists that withdraw published components from every host that
//! installed them.
//!
//! Each key keeps one list per namespace, at `REGISTRY/NAMESPACE/agentgate-revocations`
//! tag `key-<id>`. One list per key (not one tag per revoked digest) because a host
//! refreshes every namespace it installed from in one request per trusted key, and a
//! list carries a sequence number: a registry that serves an older list (to un-revoke
//! by replay) is noticed, since the host keeps the highest sequence it verified. One
//! list per key (not per namespace) because keys sharing a namespace would otherwise
//! overwrite each other's lists. Only keys trusted for the namespace are read.
//!
//! Hosts fetch the lists at `install`, `update`, `verify --refresh`, and before a run
//! when the last fetch is older than a maximum age (default one hour); offline, the last
//! verified lists hold and their age is reported. A revoked component is refused at
//! load, naming the revocation.
//!
//! Each list carries the time it was signed (`signedAt`), as TUF's timestamp role
//! does: a list signed longer ago than the operator's `marketplace.revocationsExpireAfter`
//! (default 7 days) is refused, at fetch and at load, so a registry that serves a
//! fresh host an old list (or keeps a host on an old one) hides a revocation for at most
//! that long. Its publisher re-signs it (`agentgate plugins renew-revocations`) more
//! often than that. A key that never published a list has revoked nothing, unless the
//! operator sets `marketplace.requireRevocationLists`: then a missing list fails closed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::oci::{Registry, SignedArtifact};
use super::signature::{self, SigningKey};
use super::trust::TrustStore;
use super::MarketSettings;
use super::{write_atomically, MarketError};

/// The type of a revocation list statement.
pub const REVOCATIONS_STATEMENT: &str = "agentgate.revocations/v1";

/// Why a list is too old to rely on.
#[derive(Debug, thiserror::Error)]
pub enum Stale {
    #[error("list #{sequence} carries no signing time (signed by an agentgate from before lists were timestamped), so how old it is cannot be told; its publisher re-signs it with `agentgate plugins renew-revocations`")]
    NoTime { sequence: u64 },
    #[error("list #{sequence} has a signing time {text:?} that is not RFC 3339: {reason}")]
    BadTime {
        sequence: u64,
        text: String,
        #[source]
        reason: humantime::TimestampError,
    },
    #[error("list #{sequence} was signed {age} ago, longer ago than marketplace.revocationsExpireAfter ({allowed}) allows; an old list could hide a newer revocation. Its publisher re-signs it with `agentgate plugins renew-revocations`")]
    TooOld {
        sequence: u64,
        age: String,
        allowed: String,
    },
}

/// Why a fetched revocation list is not relied on.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error(transparent)]
    Key(#[from] Box<MarketError>),
    #[error(transparent)]
    Signature(#[from] signature::SignatureError),
    #[error("it is not a revocation list: {0}")]
    NotAList(#[source] serde_json::Error),
    #[error("it is a {kind} for {scope} by key {key}, not a revocation list for {asked_scope} by key {asked_key}")]
    Another {
        kind: String,
        scope: String,
        key: String,
        asked_scope: String,
        asked_key: String,
    },
}

/// One key's revocations in one namespace: what it signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RevocationList {
    #[serde(rename = "type")]
    pub kind: String,
    /// `REGISTRY/NAMESPACE`.
    pub scope: String,
    /// The id of the key that signs it.
    pub key: String,
    /// Grows by one with each revocation or renewal; a host never accepts a lower one.
    pub sequence: u64,
    /// When it was signed, RFC 3339. Lists from before it was signed in are treated
    /// as too old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<String>,
    pub revoked: Vec<Revocation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Revocation {
    /// The reference revoked, as given to `revoke`.
    pub reference: String,
    /// The digest of its manifest.
    pub manifest: String,
    /// `sha256:<hex>` of its component: what a host refuses to load.
    pub wasm: String,
    pub reason: String,
    /// RFC 3339.
    pub revoked_at: String,
}

impl RevocationList {
    fn empty(scope: &str, key: &str) -> RevocationList {
        RevocationList {
            kind: REVOCATIONS_STATEMENT.to_string(),
            scope: scope.to_string(),
            key: key.to_string(),
            sequence: 0,
            signed_at: None,
            revoked: Vec::new(),
        }
    }

    /// How fresh it is: how long ago it was signed, if that is recent enough for
    /// `settings`.
    fn check_fresh(&self, settings: &MarketSettings) -> Result<Duration, Stale> {
        let text = self.signed_at.as_deref().ok_or(Stale::NoTime {
            sequence: self.sequence,
        })?;
        let at = humantime::parse_rfc3339(text).map_err(|e| Stale::BadTime {
            sequence: self.sequence,
            text: text.to_string(),
            reason: e,
        })?;
        // A time ahead of this host's clock counts as now.
        let age = SystemTime::now().duration_since(at).unwrap_or_default();
        if age > settings.revocations_expire_after {
            return Err(Stale::TooOld {
                sequence: self.sequence,
                age: age_text(age),
                allowed: settings.expiry_text(),
            });
        }
        Ok(age)
    }

    /// Reads and checks a fetched list: signed by `key_id` (trusted), for `scope`.
    fn verified(
        artifact: &SignedArtifact,
        scope: &str,
        key: &super::trust::TrustedKey,
    ) -> Result<RevocationList, ListError> {
        let public = key.public_key().map_err(Box::new)?;
        signature::verify(&public, &artifact.statement, &artifact.signature)?;
        let list: RevocationList =
            serde_json::from_slice(&artifact.statement).map_err(ListError::NotAList)?;
        if list.kind != REVOCATIONS_STATEMENT || list.scope != scope || list.key != key.id {
            return Err(ListError::Another {
                kind: list.kind,
                scope: list.scope,
                key: list.key,
                asked_scope: scope.to_string(),
                asked_key: key.id.clone(),
            });
        }
        Ok(list)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Held {
    /// Unix seconds of the last fetch that verified.
    fetched_at: u64,
    list: Option<RevocationList>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CacheFile {
    /// By `SCOPE key-ID`.
    #[serde(default)]
    lists: BTreeMap<String, Held>,
    /// Unix seconds of the last complete refresh of each namespace.
    #[serde(default)]
    refreshed: BTreeMap<String, u64>,
}

/// The verified lists this host fetched last.
#[derive(Debug)]
pub struct RevocationCache {
    path: PathBuf,
    file: CacheFile,
}

impl RevocationCache {
    pub fn load(path: &Path) -> Result<RevocationCache, MarketError> {
        let file = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                MarketError::file(
                    path,
                    format!("{e}; remove it and run `agentgate plugins verify --refresh`"),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheFile::default(),
            Err(e) => return Err(MarketError::file(path, e)),
        };
        Ok(RevocationCache {
            path: path.to_path_buf(),
            file,
        })
    }

    fn save(&self) -> Result<(), MarketError> {
        write_atomically(
            &self.path,
            &serde_json::to_vec_pretty(&self.file).expect("json"),
        )
    }

    /// How long ago the lists of `scope` were fetched, if ever.
    pub fn age(&self, scope: &str) -> Option<Duration> {
        let at = *self.file.refreshed.get(scope)?;
        Some(
            SystemTime::now()
                .duration_since(UNIX_EPOCH + Duration::from_secs(at))
                .unwrap_or_default(),
        )
    }

    /// The revocation of component `wasm` in `scope` by a key still trusted there, as
    /// a sentence, if it is revoked.
    pub fn revocation_of(&self, trust: &TrustStore, scope: &str, wasm: &str) -> Option<String> {
        trust.keys_for(scope).find_map(|key| {
            let held = self.file.lists.get(&list_key(scope, &key.id))?;
            let list = held.list.as_ref()?;
            let revocation = list.revoked.iter().find(|r| r.wasm == wasm)?;
            Some(format!(
                "revoked by key {} for {scope} at {}: {} (revocation list #{} of {scope}/{}:key-{}, fetched {} ago)",
                key.id,
                revocation.revoked_at,
                revocation.reason,
                list.sequence,
                super::oci::REVOCATIONS_REPOSITORY,
                key.id.to_ascii_lowercase(),
                age_text(self.age(scope).unwrap_or_default()),
            ))
        })
    }

    /// Whether the lists held for `scope` may be relied on: each signed recently enough,
    /// and present for every trusted key when the operator requires lists.
    pub fn check_fresh(
        &self,
        trust: &TrustStore,
        scope: &str,
        settings: &MarketSettings,
    ) -> Result<(), MarketError> {
        for key in trust.keys_for(scope) {
            let held = self
                .file
                .lists
                .get(&list_key(scope, &key.id))
                .and_then(|h| h.list.as_ref());
            let problem = match held {
                Some(list) => list
                    .check_fresh(settings)
                    .err()
                    .map(|reason| format!("key {}: {reason}", key.id)),
                None if settings.require_revocation_lists => Some(format!(
                    "{} (none is held; `agentgate plugins verify --refresh` fetches them)",
                    missing_list(scope, &key.id)
                )),
                None => None,
            };
            if let Some(reason) = problem {
                return Err(MarketError::Revocations {
                    scope: scope.to_string(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// One line per key trusted for `scope`: how fresh its list is.
    pub fn freshness(
        &self,
        trust: &TrustStore,
        scope: &str,
        settings: &MarketSettings,
    ) -> Vec<String> {
        trust
            .keys_for(scope)
            .map(|key| {
                let held = self
                    .file
                    .lists
                    .get(&list_key(scope, &key.id))
                    .and_then(|h| h.list.as_ref());
                match held {
                    None if settings.require_revocation_lists => format!(
                        "key {}: no list held, and one is required (marketplace.requireRevocationLists)",
                        key.id
                    ),
                    None => format!(
                        "key {}: no list published (nothing revoked); lists are not required",
                        key.id
                    ),
                    Some(list) => match list.check_fresh(settings) {
                        Ok(age) => format!(
                            "key {}: list #{} signed {} ago, fresh (refused once older than {})",
                            key.id,
                            list.sequence,
                            age_text(age),
                            settings.expiry_text()
                        ),
                        Err(reason) => format!("key {}: STALE: {reason}", key.id),
                    },
                }
            })
            .collect()
    }

    /// Fetches and verifies the list of every key trusted for `scope`. Nothing is kept
    /// from a fetch that fails; a list older than the one held is refused.
    pub async fn refresh(
        &mut self,
        registry: &Registry,
        trust: &TrustStore,
        scope: &str,
        settings: &MarketSettings,
    ) -> Result<(), MarketError> {
        let now = unix_now();
        for key in trust.keys_for(scope) {
            let fetched = registry.pull_revocations(scope, &key.id).await?;
            if fetched.is_none() && settings.require_revocation_lists {
                return Err(MarketError::Revocations {
                    scope: scope.to_string(),
                    reason: missing_list(scope, &key.id),
                });
            }
            let list = match fetched {
                None => None,
                Some(artifact) => Some(RevocationList::verified(&artifact, scope, key).map_err(
                    |reason| MarketError::BadSignature {
                        reference: format!("the revocation list of {scope} by key {}", key.id),
                        key_id: key.id.clone(),
                        reason: reason.into(),
                    },
                )?),
            };
            if let Some(list) = &list {
                list.check_fresh(settings)
                    .map_err(|reason| MarketError::Revocations {
                        scope: scope.to_string(),
                        reason: format!("key {}: {reason}", key.id),
                    })?;
            }
            let entry = self.file.lists.entry(list_key(scope, &key.id)).or_default();
            let held = entry.list.as_ref().map_or(0, |l| l.sequence);
            let served = list.as_ref().map_or(0, |l| l.sequence);
            if served < held {
                return Err(MarketError::Registry {
                    reference: format!("{scope}/{}", super::oci::REVOCATIONS_REPOSITORY),
                    reason: format!(
                        "it served revocation list #{served} of key {} but this host verified #{held} already; an older list is refused (it could un-revoke)",
                        key.id
                    ),
                });
            }
            if list.is_some() {
                entry.list = list;
            }
            entry.fetched_at = now;
        }
        self.file.refreshed.insert(scope.to_string(), now);
        self.save()
    }
}

/// Adds a revocation of `revocation.wasm` to `key`'s list for `scope` and publishes it.
/// Returns the new list's sequence number.
pub async fn publish(
    registry: &Registry,
    key: &SigningKey,
    scope: &str,
    revocation: Revocation,
) -> Result<u64, MarketError> {
    publish_list(registry, key, scope, |list| {
        if !list.revoked.iter().any(|r| r.wasm == revocation.wasm) {
            list.revoked.push(revocation);
        }
    })
    .await
}

/// Re-signs `key`'s list for `scope` with the time now and publishes it (an empty list
/// when there was none), so hosts keep accepting it; returns its sequence number.
pub async fn renew(registry: &Registry, key: &SigningKey, scope: &str) -> Result<u64, MarketError> {
    publish_list(registry, key, scope, |_| {}).await
}

/// Fetches `key`'s list for `scope` (checked against the key), applies `change`,
/// numbers, timestamps, signs and publishes it.
async fn publish_list(
    registry: &Registry,
    key: &SigningKey,
    scope: &str,
    change: impl FnOnce(&mut RevocationList),
) -> Result<u64, MarketError> {
    let id = key.id();
    let mut list = match registry.pull_revocations(scope, &id).await? {
        None => RevocationList::empty(scope, &id),
        Some(artifact) => {
            signature::verify(key.public(), &artifact.statement, &artifact.signature).map_err(
                |reason| MarketError::BadSignature {
                    reference: format!("the revocation list of {scope} by key {id}"),
                    key_id: id.clone(),
                    reason: reason.into(),
                },
            )?;
            serde_json::from_slice(&artifact.statement).map_err(|e| MarketError::Registry {
                reference: scope.to_string(),
                reason: format!("the revocation list is not readable: {e}"),
            })?
        }
    };
    change(&mut list);
    list.sequence += 1;
    list.signed_at = Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
    let statement = serde_json::to_vec_pretty(&list).expect("json");
    let signature = key.sign(
        &statement,
        &format!("agentgate revocations of {scope} #{}", list.sequence),
    )?;
    registry
        .push_revocations(
            scope,
            &id,
            &SignedArtifact {
                statement,
                signature,
            },
        )
        .await?;
    Ok(list.sequence)
}

fn missing_list(scope: &str, key: &str) -> String {
    format!(
        "key {key} publishes no revocation list at {scope}/{}:key-{}, and marketplace.requireRevocationLists is set in grants.yaml, so a missing list is refused rather than read as \"nothing revoked\"; its publisher publishes one with `agentgate plugins renew-revocations {scope} --key KEY`",
        super::oci::REVOCATIONS_REPOSITORY,
        key.to_ascii_lowercase()
    )
}

fn list_key(scope: &str, key: &str) -> String {
    format!("{scope} key-{key}")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `3m 20s`: an age for people.
pub fn age_text(age: Duration) -> String {
    humantime::format_duration(Duration::from_secs(age.as_secs())).to_string()
}
