//! The run-time side: what the runtime loads of the installed plugins.
//!
//! Before plugins are loaded, the revocation lists of each namespace installed from
//! are fetched again when older than the maximum age; offline, the last verified lists
//! hold and their age is reported. Each locked plugin is handed to the catalog with
//! its locked sha256 and, when revoked (or its signer is no longer trusted, or the
//! lists of its namespace are too old or missing when required), the reason, so it is
//! refused at load.

use std::collections::BTreeSet;
use std::time::Duration;

use super::lockfile::Lockfile;
use super::oci::Registry;
use super::revocation::{age_text, RevocationCache};
use super::trust::TrustStore;
use super::{MarketError, MarketHome, MarketSettings};
use crate::runtime::Installed;

/// The installed plugins as the runtime loads them, and warnings to show (a refresh
/// that failed, with the age of the lists that hold).
pub async fn installed_plugins(
    home: &MarketHome,
    max_age: Duration,
    settings: &MarketSettings,
) -> Result<(Vec<Installed>, Vec<String>), MarketError> {
    let lock = Lockfile::load(&home.lockfile())?;
    if lock.plugins().is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let trust = TrustStore::load(&home.trust_store())?;
    let mut revocations = RevocationCache::load(&home.revocations())?;
    let mut warnings = Vec::new();
    let scopes: BTreeSet<&str> = lock.plugins().iter().map(|p| p.scope.as_str()).collect();
    let mut registry = None;
    for scope in scopes {
        let age = revocations.age(scope);
        if age.is_some_and(|age| age <= max_age) {
            continue;
        }
        let registry = registry.get_or_insert_with(|| Registry::with_settings(settings));
        if let Err(e) = revocations.refresh(registry, &trust, scope, settings).await {
            warnings.push(format!(
                "cannot refresh the revocation lists of {scope}: {e}; {}",
                match age {
                    Some(age) => format!("the lists fetched {} ago hold", age_text(age)),
                    None => "none was ever fetched".to_string(),
                }
            ));
        }
    }
    let installed = lock
        .plugins()
        .iter()
        .map(|p| {
            // A signer no longer trusted for the namespace vouches for nothing, and its
            // revocations are no longer read: the plugin is refused, not kept unchecked.
            let untrusted = !trust.keys_for(&p.scope).any(|k| k.id == p.signer);
            let refused = if untrusted {
                Some(format!(
                    "installed {} {} was signed by key {}, which is no longer trusted for {}; trust it again or `agentgate plugins remove {}`",
                    p.name, p.version, p.signer, p.scope, p.name
                ))
            } else if let Some(r) = revocations.revocation_of(&trust, &p.scope, &p.wasm) {
                Some(format!("installed {} {} is {r}", p.name, p.version))
            } else {
                // Lists too old (or missing when required) cannot say it is not revoked.
                revocations
                    .check_fresh(&trust, &p.scope, settings)
                    .err()
                    .map(|e| format!("installed {} {} cannot be loaded: {e}", p.name, p.version))
            };
            Installed {
                path: home.component(&p.wasm),
                digest: p.wasm.clone(),
                refused,
            }
        })
        .collect();
    Ok((installed, warnings))
}
