//! The author's side: `plugins publish` pushes a component and its signed statement;
//! `plugins revoke` adds a signed revocation of a published component;
//! `plugins renew-revocations` re-signs a key's list with the time now.

use std::path::Path;

use super::component::{self, CacheSettings};
use super::consent;
use super::install::{check_grant, check_scopes_imported};
use super::oci::{sha256, signature_tag, PluginRef, Registry, SignedArtifact};
use super::revocation::{self, Revocation};
use super::signature::{PluginStatement, SigningKey, PLUGIN_STATEMENT};
use super::MarketError;

/// What `publish` pushed.
#[derive(Debug)]
pub struct Published {
    pub manifest: String,
    pub signature_tag: String,
    pub statement: PluginStatement,
    pub key_id: String,
}

/// Reads an author's `--scopes` manifest (YAML shaped like a grants.yaml plugin entry).
pub fn read_scopes(path: Option<&Path>) -> Result<serde_json::Value, MarketError> {
    let Some(path) = path else {
        return Ok(serde_json::json!({}));
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        MarketError::Input(format!("--scopes {}: cannot read it: {e}", path.display()))
    })?;
    let scopes: serde_json::Value = serde_yaml::from_str(&text)
        .map_err(|e| MarketError::Input(format!("--scopes {}: {e}", path.display())))?;
    let scopes = if scopes.is_null() {
        serde_json::json!({})
    } else {
        scopes
    };
    consent::check_asked_scopes(&scopes)?;
    Ok(scopes)
}

/// `plugins publish FILE REF --key KEY [--scopes FILE]`.
pub async fn publish(
    file: &Path,
    reference: &str,
    key: &Path,
    scopes: Option<&Path>,
    cache: &CacheSettings,
) -> Result<Published, MarketError> {
    let reference = PluginRef::parse(reference)?;
    let key = SigningKey::from_file(key)?;
    let scopes = read_scopes(scopes)?;
    let wasm = std::fs::read(file)
        .map_err(|e| MarketError::Input(format!("{}: cannot read it: {e}", file.display())))?;
    let facts = component::describe(&wasm, cache)
        .await
        .map_err(|e| MarketError::Input(format!("{}: {e}", file.display())))?;
    if facts.name != reference.name() || facts.version != reference.tag() {
        return Err(MarketError::Input(format!(
            "{} describes itself as {} {}; publish it as .../{}:{} (the reference names the plugin and its version)",
            file.display(),
            facts.name,
            facts.version,
            facts.name,
            facts.version
        )));
    }
    let statement = PluginStatement {
        kind: PLUGIN_STATEMENT.to_string(),
        repository: reference.repository(),
        name: facts.name.clone(),
        version: facts.version.clone(),
        wasm: sha256(&wasm),
        wit: facts.wit.clone(),
        capabilities: facts.capabilities.clone(),
        scopes,
    };
    let grant = consent::grant_entry(
        &statement.capabilities,
        &statement.scopes,
        &statement.version,
        &statement.wasm,
    );
    check_grant(&statement.name, &grant, "--scopes")?;
    check_scopes_imported(&grant).map_err(|e| {
        MarketError::Input(format!(
            "--scopes: {e}; remove those keys, or publish a build that imports them"
        ))
    })?;
    let statement_bytes = serde_json::to_vec_pretty(&statement).expect("json");
    let signature = key.sign(
        &statement_bytes,
        &format!(
            "agentgate plugin {} {} {}",
            statement.name, statement.version, statement.wasm
        ),
    )?;
    let registry = Registry::new();
    let imports: Vec<String> = facts.imports.iter().map(|(i, _)| i.clone()).collect();
    let manifest = registry.push_plugin(&reference, &wasm, &imports).await?;
    registry
        .push_signature(
            &reference,
            &manifest,
            &SignedArtifact {
                statement: statement_bytes,
                signature,
            },
        )
        .await?;
    Ok(Published {
        signature_tag: signature_tag(&manifest),
        manifest,
        statement,
        key_id: key.id(),
    })
}

/// `plugins revoke REF --key KEY`: revokes the component `REF` points at now, in the
/// key's list for `REF`'s namespace. Returns the revoked component's digest and the
/// list's new sequence number.
pub async fn revoke(
    reference: &str,
    key: &Path,
    reason: &str,
) -> Result<(String, u64), MarketError> {
    let reference = PluginRef::parse(reference)?;
    let key = SigningKey::from_file(key)?;
    let registry = Registry::new();
    // The manifest names the component's digest: nothing else is downloaded.
    let plugin = registry.plugin_manifest(&reference).await?;
    let revocation = Revocation {
        reference: reference.to_string(),
        manifest: plugin.manifest_digest,
        wasm: plugin.layer.digest.clone(),
        reason: reason.to_string(),
        revoked_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    };
    let sequence = revocation::publish(&registry, &key, &reference.scope(), revocation).await?;
    Ok((plugin.layer.digest, sequence))
}

/// `plugins renew-revocations SCOPE --key KEY`: re-signs the key's revocation list for
/// `SCOPE` with the time now; returns its sequence number.
pub async fn renew_revocations(scope: &str, key: &Path) -> Result<u64, MarketError> {
    PluginRef::check_scope(scope).map_err(|why| {
        MarketError::Input(format!("{scope:?}: {why}; expected REGISTRY/NAMESPACE"))
    })?;
    let key = SigningKey::from_file(key)?;
    revocation::renew(&Registry::new(), &key, scope).await
}
