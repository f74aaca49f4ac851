//! Installing, updating, removing and verifying plugins: fetch, verify the signature
//! against the trust store, check the bytes and the signed statement against the
//! component itself, check revocations, ask for consent, then lock.
//!
//! Every check runs before anything is written; a refusal leaves the lockfile, the
//! installed files and the grants as they were.

use super::component::{self, CacheSettings, ComponentFacts};
use super::consent;
use super::lockfile::{self, LockedPlugin, Lockfile};
use super::oci::{sha256_file, PluginRef, PulledPlugin, Registry};
use super::revocation::RevocationCache;
use super::signature::{self, PluginStatement, PLUGIN_STATEMENT};
use super::trust::TrustStore;
use super::{MarketError, MarketHome, MarketSettings};
use crate::runtime::grants::Grant;
use crate::runtime::Grants;

/// What a command did.
#[derive(Debug)]
pub enum Outcome {
    /// The plugin was verified, granted with consent and locked.
    Installed(LockedPlugin),
    /// The same reference was installed already and its tag has not moved; nothing
    /// changed.
    AlreadyInstalled(LockedPlugin),
    /// The plugin was replaced by a newer version, or by what its moved tag names now.
    Updated {
        /// The lock entry before the update.
        from: Box<LockedPlugin>,
        /// The lock entry after it.
        to: Box<LockedPlugin>,
    },
    /// No higher version is published and the locked tag has not moved.
    UpToDate(LockedPlugin),
}

/// A plugin fetched and verified, not yet granted.
struct Verified {
    reference: PluginRef,
    pulled: PulledPlugin,
    /// The download folder (in the home's component folder, so the file is moved into
    /// place, not copied); removed with what is left in it.
    _download: tempfile::TempDir,
    statement: PluginStatement,
    signer: String,
    facts: ComponentFacts,
    grant: serde_json::Value,
}

impl Verified {
    fn locked(&self) -> LockedPlugin {
        LockedPlugin {
            name: self.statement.name.clone(),
            version: self.statement.version.clone(),
            reference: self.reference.to_string(),
            manifest: self.pulled.manifest_digest.clone(),
            wasm: self.statement.wasm.clone(),
            wit: self.facts.wit.clone(),
            signer: self.signer.clone(),
            scope: self.reference.scope(),
            grant: self.grant.clone(),
        }
    }
}

/// Runs the `plugins` commands (install, update, remove, verify) on a home's
/// lockfile, trust store, revocation cache and installed components.
pub struct Installer {
    home: MarketHome,
    registry: Registry,
    trust: TrustStore,
    lock: Lockfile,
    revocations: RevocationCache,
    cache: CacheSettings,
    settings: MarketSettings,
}

impl Installer {
    /// Opens the home's marketplace files; every registry request is bounded by the
    /// operator's `settings`.
    pub fn open(
        home: MarketHome,
        cache: CacheSettings,
        settings: MarketSettings,
    ) -> Result<Installer, MarketError> {
        Ok(Installer {
            registry: Registry::with_settings(&settings),
            settings,
            trust: TrustStore::load(&home.trust_store())?,
            lock: Lockfile::load(&home.lockfile())?,
            revocations: RevocationCache::load(&home.revocations())?,
            home,
            cache,
        })
    }

    /// The lockfile as this installer holds it (with its own changes).
    pub fn lock(&self) -> &Lockfile {
        &self.lock
    }

    /// `plugins install REF`.
    pub async fn install(&mut self, reference: &str, yes: bool) -> Result<Outcome, MarketError> {
        let reference = PluginRef::parse(reference)?;
        if let Some(locked) = self.lock.get(reference.name()).cloned() {
            if locked.reference != reference.to_string() {
                return Err(MarketError::Input(format!(
                    "{} is installed from {} already; run `agentgate plugins update {}` for a newer version, or `agentgate plugins remove {}` first",
                    locked.name, locked.reference, locked.name, locked.name
                )));
            }
            let now = self.registry.resolve(&reference).await?;
            if now != locked.manifest {
                return Err(MarketError::TagMoved {
                    reference: reference.to_string(),
                    name: locked.name.clone(),
                    locked: locked.manifest.clone(),
                    now,
                });
            }
            return Ok(Outcome::AlreadyInstalled(locked));
        }
        let verified = self.fetch_verified(&reference).await?;
        eprintln!(
            "{} {} from {}\n  signed by key {} (trusted for {})\n  component {}\n{}",
            verified.statement.name,
            verified.statement.version,
            reference,
            verified.signer,
            reference.scope(),
            verified.statement.wasm,
            consent::summary(&verified.facts.imports, &verified.grant)
        );
        consent::ask(&format!("grant these to {}", verified.statement.name), yes)?;
        let locked = self.commit(&verified, None)?;
        Ok(Outcome::Installed(locked))
    }

    /// `plugins update [NAME]`: the highest version published above the locked one, or
    /// the locked tag if it moved.
    pub async fn update(&mut self, name: &str, yes: bool) -> Result<Outcome, MarketError> {
        let locked = self
            .lock
            .get(name)
            .cloned()
            .ok_or_else(|| not_installed(name, &self.lock))?;
        let current = PluginRef::parse(&locked.reference)?;
        let target = match self.newer_version(&current, &locked.version).await? {
            Some(tag) => current.with_tag(&tag),
            None => {
                if self.registry.resolve(&current).await? == locked.manifest {
                    self.refresh_revocations(&current.scope()).await?;
                    return Ok(Outcome::UpToDate(locked));
                }
                current.clone()
            }
        };
        let verified = self.fetch_verified(&target).await?;
        if verified.statement.name != locked.name {
            return Err(MarketError::StatementMismatch {
                reference: target.to_string(),
                reason: format!(
                    "it is plugin {}, not {}",
                    verified.statement.name, locked.name
                ),
            });
        }
        let (added, removed) = consent::diff(&locked.grant, &verified.grant);
        eprintln!(
            "{} {} -> {} from {}\n  signed by key {} (trusted for {})\n  component {}",
            locked.name,
            locked.version,
            verified.statement.version,
            target,
            verified.signer,
            target.scope(),
            verified.statement.wasm,
        );
        for line in &removed {
            eprintln!("  no longer asks for: {line}");
        }
        if !added.is_empty() {
            eprint!(
                "{}",
                consent::summary(&verified.facts.imports, &verified.grant)
            );
            for line in &added {
                eprintln!("  NEW: {line}");
            }
            consent::ask(
                &format!("the update of {} asks for more; grant it", locked.name),
                yes,
            )?;
        }
        let to = self.commit(&verified, Some(&locked))?;
        Ok(Outcome::Updated {
            from: Box::new(locked),
            to: Box::new(to),
        })
    }

    /// `plugins remove NAME`.
    pub fn remove(&mut self, name: &str) -> Result<LockedPlugin, MarketError> {
        let locked = self
            .lock
            .remove(name)
            .ok_or_else(|| not_installed(name, &self.lock))?;
        self.lock.save()?;
        lockfile::remove_component(&self.home, &self.lock, &locked.wasm, name);
        Ok(locked)
    }

    /// `plugins verify [--refresh]`: one line per installed plugin, and whether all hold.
    pub async fn verify(&mut self, refresh: bool) -> (Vec<String>, bool) {
        let mut lines = Vec::new();
        let mut ok = true;
        let scopes: std::collections::BTreeSet<String> = self
            .lock
            .plugins()
            .iter()
            .map(|p| p.scope.clone())
            .collect();
        if refresh {
            for scope in &scopes {
                if let Err(e) = self.refresh_revocations(scope).await {
                    ok = false;
                    lines.push(format!("revocations of {scope}: {e}"));
                }
            }
        }
        for locked in self.lock.plugins().to_vec() {
            let problem = self.check_installed(&locked, refresh).await.err();
            ok &= problem.is_none();
            lines.push(match problem {
                None => format!(
                    "{} {}: ok ({}, signed by {}; revocations of {} fetched {})",
                    locked.name,
                    locked.version,
                    locked.wasm,
                    locked.signer,
                    locked.scope,
                    self.revocations
                        .age(&locked.scope)
                        .map_or("never".into(), |a| format!(
                            "{} ago",
                            super::revocation::age_text(a)
                        ))
                ),
                Some(problem) => format!("{} {}: {problem}", locked.name, locked.version),
            });
        }
        // How fresh each list is, as its publisher signed it.
        for scope in &scopes {
            for line in self
                .revocations
                .freshness(&self.trust, scope, &self.settings)
            {
                lines.push(format!("revocations of {scope}: {line}"));
            }
        }
        (lines, ok)
    }

    async fn check_installed(
        &self,
        locked: &LockedPlugin,
        online: bool,
    ) -> Result<(), MarketError> {
        let path = self.home.component(&locked.wasm);
        let actual = sha256_file(&path).map_err(|e| MarketError::file(&path, e))?;
        if actual != locked.wasm {
            // The file on this host changed since it was installed and checked: the
            // registry is not what altered it.
            return Err(MarketError::InstalledAltered {
                name: locked.name.clone(),
                reference: locked.reference.clone(),
                path: path.display().to_string(),
                expected: locked.wasm.clone(),
                actual,
            });
        }
        self.revocations
            .check_fresh(&self.trust, &locked.scope, &self.settings)?;
        if let Some(revocation) =
            self.revocations
                .revocation_of(&self.trust, &locked.scope, &locked.wasm)
        {
            return Err(MarketError::Revoked {
                reference: locked.reference.clone(),
                digest: locked.wasm.clone(),
                revocation,
            });
        }
        if online {
            let reference = PluginRef::parse(&locked.reference)?;
            let now = self.registry.resolve(&reference).await?;
            if now != locked.manifest {
                return Err(MarketError::TagMoved {
                    reference: locked.reference.clone(),
                    name: locked.name.clone(),
                    locked: locked.manifest.clone(),
                    now,
                });
            }
        }
        Ok(())
    }

    async fn refresh_revocations(&mut self, scope: &str) -> Result<(), MarketError> {
        self.revocations
            .refresh(&self.registry, &self.trust, scope, &self.settings)
            .await
    }

    /// The highest semver tag above `version` in `reference`'s repository.
    async fn newer_version(
        &self,
        reference: &PluginRef,
        version: &str,
    ) -> Result<Option<String>, MarketError> {
        let Ok(current) = semver::Version::parse(version) else {
            return Ok(None);
        };
        let tags = self.registry.tags(reference).await?;
        Ok(tags
            .into_iter()
            .filter_map(|t| semver::Version::parse(&t).ok().map(|v| (v, t)))
            .filter(|(v, _)| *v > current)
            .max()
            .map(|(_, t)| t))
    }

    /// Fetches `reference` and runs every check; nothing is written.
    async fn fetch_verified(&mut self, reference: &PluginRef) -> Result<Verified, MarketError> {
        let components = self.home.components();
        std::fs::create_dir_all(&components).map_err(|e| MarketError::file(&components, e))?;
        let download = tempfile::Builder::new()
            .prefix(".download-")
            .tempdir_in(&components)
            .map_err(|e| MarketError::file(&components, e))?;
        let pulled = self
            .registry
            .pull_plugin(reference, download.path())
            .await?;
        let signed = self
            .registry
            .pull_signature(reference, &pulled.manifest_digest)
            .await?
            .ok_or_else(|| MarketError::Unsigned {
                reference: reference.to_string(),
                tag: super::oci::signature_tag(&pulled.manifest_digest),
            })?;
        let scope = reference.scope();
        let key_id = signature::signer_of(&signed.signature).map_err(|reason| {
            MarketError::BadSignature {
                reference: reference.to_string(),
                key_id: "(unreadable)".into(),
                reason: reason.into(),
            }
        })?;
        let key = self
            .trust
            .get(&key_id)
            .ok_or_else(|| MarketError::ForeignKey {
                reference: reference.to_string(),
                key_id: key_id.clone(),
                scope: scope.clone(),
            })?;
        if !key.covers(&scope) {
            return Err(MarketError::KeyNotTrustedForScope {
                reference: reference.to_string(),
                key_id,
                trusted: key.scopes.join(", "),
                scope,
            });
        }
        signature::verify(&key.public_key()?, &signed.statement, &signed.signature).map_err(
            |reason| MarketError::BadSignature {
                reference: reference.to_string(),
                key_id: key_id.clone(),
                reason: reason.into(),
            },
        )?;
        let mismatch = |reason: String| MarketError::StatementMismatch {
            reference: reference.to_string(),
            reason,
        };
        let statement: PluginStatement = serde_json::from_slice(&signed.statement)
            .map_err(|e| mismatch(format!("it is not a plugin statement: {e}")))?;
        if statement.kind != PLUGIN_STATEMENT {
            return Err(mismatch(format!("it is a {:?} statement", statement.kind)));
        }
        if statement.repository != reference.repository() || statement.name != reference.name() {
            return Err(mismatch(format!(
                "it was signed for {} (plugin {}), not {}",
                statement.repository,
                statement.name,
                reference.repository()
            )));
        }
        if statement.version != reference.tag() {
            return Err(mismatch(format!(
                "it was signed for version {}, not {}",
                statement.version,
                reference.tag()
            )));
        }
        // The download's digest was computed as it arrived and checked against the
        // manifest; the signature must name the same bytes.
        if statement.wasm != pulled.wasm_digest {
            return Err(MarketError::BytesMismatch {
                reference: reference.to_string(),
                what: "the signed sha256".into(),
                expected: statement.wasm.clone(),
                actual: pulled.wasm_digest.clone(),
            });
        }
        self.refresh_revocations(&scope).await?;
        if let Some(revocation) =
            self.revocations
                .revocation_of(&self.trust, &scope, &statement.wasm)
        {
            return Err(MarketError::Revoked {
                reference: reference.to_string(),
                digest: statement.wasm.clone(),
                revocation,
            });
        }
        let facts = component::describe_file(&pulled.path, &self.cache).await?;
        if facts.name != statement.name || facts.version != statement.version {
            return Err(mismatch(format!(
                "the component describes itself as {} {}, the signature says {} {}",
                facts.name, facts.version, statement.name, statement.version
            )));
        }
        if facts.wit != statement.wit {
            return Err(mismatch(format!(
                "the component imports agentgate:plugin@{}, the signature says @{}",
                facts.wit, statement.wit
            )));
        }
        if facts.capabilities != statement.capabilities {
            return Err(mismatch(format!(
                "the component imports capabilities [{}] but the signature names [{}]",
                facts.capabilities.join(", "),
                statement.capabilities.join(", ")
            )));
        }
        let grant = consent::grant_entry(
            &statement.capabilities,
            &statement.scopes,
            &statement.version,
            &statement.wasm,
        );
        check_grant(&statement.name, &grant, &reference.to_string())?;
        check_scopes_imported(&grant).map_err(|e| mismatch(e.to_string()))?;
        Ok(Verified {
            reference: reference.clone(),
            pulled,
            _download: download,
            statement,
            signer: key_id,
            facts,
            grant,
        })
    }

    /// Stores the verified bytes and locks them, replacing `previous`.
    fn commit(
        &mut self,
        verified: &Verified,
        previous: Option<&LockedPlugin>,
    ) -> Result<LockedPlugin, MarketError> {
        let locked = verified.locked();
        let path = self.home.component(&locked.wasm);
        std::fs::rename(&verified.pulled.path, &path).map_err(|e| MarketError::file(&path, e))?;
        self.lock.put(locked.clone());
        self.lock.save()?;
        if let Some(previous) = previous.filter(|p| p.wasm != locked.wasm) {
            lockfile::remove_component(&self.home, &self.lock, &previous.wasm, "");
        }
        Ok(locked)
    }
}

/// Reads `grant` as a grants.yaml entry would be read, so what is locked is what a
/// run will parse.
pub fn check_grant(name: &str, grant: &serde_json::Value, origin: &str) -> Result<(), MarketError> {
    let entry =
        serde_yaml::to_value(grant).map_err(|e| MarketError::Input(format!("{origin}: {e}")))?;
    Grants::default()
        .add_entry(name, entry, origin)
        .map_err(|e| {
            MarketError::Input(format!("the scopes it asks for are not a valid grant: {e}"))
        })
}

/// Scopes a statement asks for capabilities the component does not import.
#[derive(Debug, thiserror::Error)]
#[error(
    "it carries scopes for {} [{}], which the component does not import (it imports [{}]); a plugin asks only for scopes of capabilities it imports",
    if unimported.len() == 1 { "capability" } else { "capabilities" },
    unimported.join(", "),
    imported.join(", ")
)]
pub struct UnimportedScopes {
    pub unimported: Vec<String>,
    pub imported: Vec<String>,
}

/// Refuses scopes for capabilities the component does not import: the statement
/// may ask only for what its imports can use, so nothing unused lands in the lockfile
/// (where a later build that imports it would find it granted). `grant` has passed
/// [`check_grant`].
pub fn check_scopes_imported(grant: &serde_json::Value) -> Result<(), UnimportedScopes> {
    let grant: Grant = serde_yaml::to_value(grant)
        .ok()
        .and_then(|entry| serde_yaml::from_value(entry).ok())
        .unwrap_or_default();
    let unimported: Vec<String> = grant
        .scopes
        .keys()
        .filter(|c| !grant.capabilities.contains(*c))
        .map(|c| c.name().to_string())
        .collect();
    if unimported.is_empty() {
        return Ok(());
    }
    Err(UnimportedScopes {
        unimported,
        imported: grant
            .capabilities
            .iter()
            .map(|c| c.name().to_string())
            .collect(),
    })
}

fn not_installed(name: &str, lock: &Lockfile) -> MarketError {
    let names: Vec<&str> = lock.plugins().iter().map(|p| p.name.as_str()).collect();
    MarketError::Input(format!(
        "no installed plugin named {name:?}; installed: {}",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    ))
}
