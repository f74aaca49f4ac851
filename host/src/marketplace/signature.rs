//! Signatures in minisign's format (ed25519): keys made by `minisign -G` sign here, and
//! what is signed here verifies with `minisign -V`.
//!
//! What is signed is a statement (JSON), never the registry's manifest: the statement
//! names the component's sha256, its repository, name and version, the WIT package it
//! was built against, and every capability and scope it asks for, so none of them can
//! be swapped alone. The statement is stored byte for byte next to its signature, so
//! `minisign -Vm statement.json -P KEY -x statement.json.minisig` checks it offline.

use std::io::Cursor;
use std::path::Path;

use minisign::{PublicKey, SecretKey, SignatureBox};
use serde::{Deserialize, Serialize};

use super::MarketError;

/// The type of a plugin statement; a statement of another type never verifies as one.
pub const PLUGIN_STATEMENT: &str = "agentgate.plugin/v1";

/// What an author signs when publishing a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginStatement {
    /// The statement's type, `"type"` in JSON: [`PLUGIN_STATEMENT`] for a plugin.
    #[serde(rename = "type")]
    pub kind: String,
    /// `REGISTRY/NAMESPACE/NAME`: a copy under another namespace does not verify.
    pub repository: String,
    /// The plugin's name: the last part of `repository`.
    pub name: String,
    /// The plugin's version: the tag it is published at.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub wasm: String,
    /// The `agentgate:plugin` package version the component imports, e.g. `0.1.0`.
    pub wit: String,
    /// The capabilities its imports ask for.
    pub capabilities: Vec<String>,
    /// The scopes it asks for, shaped like a grants.yaml plugin entry.
    pub scopes: serde_json::Value,
}

/// A secret key and its public half.
pub struct SigningKey {
    secret: SecretKey,
    public: PublicKey,
}

impl SigningKey {
    /// Reads a minisign secret key. An encrypted key takes its password from
    /// `AGENTGATE_KEY_PASSWORD`, or asks on a terminal.
    pub fn from_file(path: &Path) -> Result<SigningKey, MarketError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            MarketError::Input(format!("--key {}: cannot read it: {e}", path.display()))
        })?;
        let bad = |e: minisign::PError| {
            MarketError::Input(format!(
                "--key {}: not a usable minisign secret key: {e}",
                path.display()
            ))
        };
        let decrypt = |password| {
            minisign::SecretKeyBox::from_string(&text)
                .and_then(|b| SecretKey::from_box(b, password))
                .map_err(bad)
        };
        let secret = match unencrypted(&text) {
            Some(secret) => secret,
            None => match std::env::var("AGENTGATE_KEY_PASSWORD") {
                Ok(password) => decrypt(Some(password))?,
                Err(_) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => decrypt(None)?,
                Err(_) => {
                    return Err(MarketError::Input(format!(
                        "--key {}: the key is encrypted; set AGENTGATE_KEY_PASSWORD or run on a terminal to be asked",
                        path.display()
                    )))
                }
            },
        };
        let public = PublicKey::from_secret_key(&secret).map_err(bad)?;
        Ok(SigningKey { secret, public })
    }

    /// The public half, which operators trust.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// The key's id as minisign prints it: 16 upper-case hex digits.
    pub fn id(&self) -> String {
        key_id(&self.public)
    }

    /// Signs `statement`; returns the signature as a `.minisig` file holds it.
    pub fn sign(&self, statement: &[u8], trusted_comment: &str) -> Result<String, MarketError> {
        let signature = minisign::sign(
            Some(&self.public),
            &self.secret,
            Cursor::new(statement),
            Some(trusted_comment),
            Some("signature from agentgate"),
        )
        .map_err(|e| MarketError::Input(format!("cannot sign: {e}")))?;
        Ok(signature.into_string())
    }
}

/// A secret key stored without a password (`minisign -G -W`). minisign 0.11 writes no
/// checksum in such keys, which the minisign crate's reader refuses, so it is read here.
fn unencrypted(text: &str) -> Option<SecretKey> {
    use base64::Engine;
    let line = text.lines().nth(1)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line.trim())
        .ok()?;
    // Bytes 2..4 are the KDF algorithm: zero for a key without a password.
    if bytes.get(2..4)? != [0, 0] {
        return None;
    }
    SecretKey::from_bytes(&bytes).ok()
}

/// Reads a public key: a minisign `.pub` file, or its base64 line.
pub fn public_key(text_or_path: &str) -> Result<PublicKey, MarketError> {
    let path = Path::new(text_or_path);
    let result = if path.is_file() {
        PublicKey::from_file(path)
    } else {
        PublicKey::from_base64(text_or_path.trim())
    };
    result.map_err(|e| {
        MarketError::Input(format!(
            "{text_or_path:?} is neither a minisign public key file nor its base64 line (RW...): {e}"
        ))
    })
}

/// The key id as minisign prints it: 16 upper-case hex digits.
pub fn key_id(key: &PublicKey) -> String {
    keynum_id(key.keynum())
}

fn keynum_id(keynum: &[u8]) -> String {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&keynum[..8]);
    format!("{:016X}", u64::from_le_bytes(bytes))
}

/// Why a signature is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The text does not read as a minisign signature.
    #[error("not a minisign signature: {0}")]
    Unreadable(#[source] minisign::PError),
    /// It reads, but does not verify: another key made it, or the statement or the
    /// signature was altered.
    #[error("{0}")]
    DoesNotVerify(#[source] minisign::PError),
}

/// The id of the key that made `signature` (not yet verified).
pub fn signer_of(signature: &str) -> Result<String, SignatureError> {
    let signature = SignatureBox::from_string(signature).map_err(SignatureError::Unreadable)?;
    Ok(keynum_id(signature.keynum()))
}

/// Checks that `key` signed `statement`.
pub fn verify(key: &PublicKey, statement: &[u8], signature: &str) -> Result<(), SignatureError> {
    let signature = SignatureBox::from_string(signature).map_err(SignatureError::Unreadable)?;
    minisign::verify(key, &signature, Cursor::new(statement), true, false, false)
        .map_err(SignatureError::DoesNotVerify)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_statement_and_key() {
        let pair = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        let key = SigningKey {
            public: pair.pk.clone(),
            secret: pair.sk,
        };
        let signature = key.sign(b"statement", "agentgate test").unwrap();
        assert_eq!(signer_of(&signature).unwrap(), key.id());
        verify(&pair.pk, b"statement", &signature).unwrap();
        assert!(verify(&pair.pk, b"statemenT", &signature).is_err());
        let other = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        assert!(verify(&other.pk, b"statement", &signature).is_err());
    }
}
