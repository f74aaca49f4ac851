//! Plugins as OCI artifacts, in the CNCF Wasm layout: a config of media type
//! `application/vnd.wasm.config.v0+json` and one `application/wasm` layer.
//!
//! Signatures and revocation lists are OCI artifacts too, found by tag because
//! registries such as Debian's `docker-registry` have no Referrers API: a plugin
//! manifest `sha256:<hex>` has its signature at tag `sha256-<hex>.sig` of the same
//! repository (the OCI tag-fallback scheme), with `subject` pointing at the manifest.
//! Each artifact is two layers: a JSON statement and its minisign signature, so an
//! operator can check one with the `minisign` tool.
//!
//! Every failure is mapped to its own [`MarketError`]: a 404, a registry that cannot
//! be reached and bytes that do not match their digest read differently.

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

use super::MarketError;

/// The config media type of the CNCF Wasm OCI layout.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the component layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The statement layer of a signature or revocation artifact.
pub const STATEMENT_MEDIA_TYPE: &str = "application/vnd.agentgate.statement.v1+json";
/// The minisign signature of the statement.
pub const MINISIGN_MEDIA_TYPE: &str = "application/vnd.agentgate.minisign.v1";
const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.agentgate.plugin.signature.v1";
const REVOCATIONS_ARTIFACT_TYPE: &str = "application/vnd.agentgate.revocations.v1";
const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The repository, under a namespace, that holds its revocation lists.
pub const REVOCATIONS_REPOSITORY: &str = "agentgate-revocations";

/// Bounds of what is pulled, so a hostile registry cannot fill the disk or memory.
const MAX_COMPONENT_BYTES: i64 = 256 << 20;
const MAX_STATEMENT_BYTES: i64 = 1 << 20;

/// `REGISTRY/NAMESPACE/NAME:VERSION`: where a plugin is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    reference: Reference,
}

impl PluginRef {
    pub fn parse(text: &str) -> Result<PluginRef, MarketError> {
        let bad = |why: &str| {
            MarketError::Input(format!(
                "{text:?} is not a plugin reference: {why}; expected REGISTRY/NAMESPACE/NAME:VERSION, e.g. 127.0.0.1:5000/acme/my-driver:1.0.0"
            ))
        };
        let reference: Reference = text.parse().map_err(|e| bad(&format!("{e}")))?;
        if reference.digest().is_some() {
            return Err(bad("it names a digest; name a tag (the version)"));
        }
        // `Reference` adds `docker.io` and `latest` when they are missing; a plugin
        // reference names its registry and version.
        let registry_named = text
            .split('/')
            .next()
            .is_some_and(|first| first == reference.registry());
        if !registry_named {
            return Err(bad("it does not start with a registry host"));
        }
        if !text.contains(':') || !text.rsplit('/').next().unwrap_or("").contains(':') {
            return Err(bad("it has no :VERSION tag"));
        }
        if !reference.repository().contains('/') {
            return Err(bad("it has no namespace"));
        }
        Ok(PluginRef { reference })
    }

    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// `REGISTRY/NAMESPACE/NAME`, without the tag.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.registry(), self.reference.repository())
    }

    /// `REGISTRY/NAMESPACE`: what a key is trusted for.
    pub fn scope(&self) -> String {
        let repository = self.reference.repository();
        let namespace = repository.rsplit_once('/').map_or("", |(ns, _)| ns);
        format!("{}/{namespace}", self.registry())
    }

    /// The last part of the repository: the plugin's name.
    pub fn name(&self) -> &str {
        let repository = self.reference.repository();
        repository.rsplit('/').next().unwrap_or(repository)
    }

    pub fn tag(&self) -> &str {
        self.reference.tag().unwrap_or("latest")
    }

    /// The same repository at another tag.
    pub fn with_tag(&self, tag: &str) -> PluginRef {
        PluginRef {
            reference: Reference::with_tag(
                self.registry().to_string(),
                self.reference.repository().to_string(),
                tag.to_string(),
            ),
        }
    }

    fn oci(&self) -> &Reference {
        &self.reference
    }
}

impl std::fmt::Display for PluginRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.repository(), self.tag())
    }
}

/// A pulled plugin: the manifest's digest and the component's bytes, checked against
/// the layer's digest.
pub struct PulledPlugin {
    pub manifest_digest: String,
    pub wasm_digest: String,
    pub wasm: Vec<u8>,
}

/// A statement and its minisign signature, as stored in a signature or revocation
/// artifact.
pub struct SignedArtifact {
    pub statement: Vec<u8>,
    pub signature: String,
}

/// Speaks to OCI registries: loopback registries in plain HTTP, every other one in
/// HTTPS.
pub struct Registry {
    auth: RegistryAuth,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    pub fn new() -> Registry {
        // TLS, for registries that are not on loopback, uses ring (the provider the
        // rest of the host uses); installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Registry {
            auth: RegistryAuth::Anonymous,
        }
    }

    /// A client that speaks plain HTTP to `registry` when it is on loopback.
    fn client_for(&self, registry: &str) -> Client {
        let protocol = if is_loopback(registry) {
            ClientProtocol::HttpsExcept(vec![registry.to_string()])
        } else {
            ClientProtocol::Https
        };
        Client::new(ClientConfig {
            protocol,
            ..ClientConfig::default()
        })
    }

    /// Pushes `wasm` as a plugin at `reference`; returns the manifest's digest.
    pub async fn push_plugin(
        &self,
        reference: &PluginRef,
        wasm: &[u8],
        imports: &[String],
    ) -> Result<String, MarketError> {
        let client = self.client_for(reference.registry());
        let layer = ImageLayer::new(wasm.to_vec(), WASM_LAYER_MEDIA_TYPE.to_string(), None);
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer.sha256_digest()],
            "component": {"imports": imports, "exports": [], "target": null},
        });
        let config = Config::new(
            serde_json::to_vec(&config).expect("json"),
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        client
            .push(reference.oci(), &[layer], config, &self.auth, None)
            .await
            .map_err(|e| classify(e, "the plugin", reference))?;
        // What the tag points at now: the signature names the component's digest, so
        // a tag moved meanwhile gets a signature that verifies for nothing else.
        self.resolve(reference).await
    }

    /// The digest of the manifest `reference`'s tag points at now.
    pub async fn resolve(&self, reference: &PluginRef) -> Result<String, MarketError> {
        let (_, digest) = self.manifest(reference, "the plugin").await?;
        Ok(digest)
    }

    /// The tags of `reference`'s repository.
    pub async fn tags(&self, reference: &PluginRef) -> Result<Vec<String>, MarketError> {
        let client = self.client_for(reference.registry());
        let tags = client
            .list_tags(reference.oci(), &self.auth, None, None)
            .await
            .map_err(|e| classify(e, "the repository", reference))?;
        Ok(tags.tags)
    }

    async fn manifest(
        &self,
        reference: &PluginRef,
        what: &str,
    ) -> Result<(OciImageManifest, String), MarketError> {
        let client = self.client_for(reference.registry());
        let (bytes, _) = client
            .pull_manifest_raw(reference.oci(), &self.auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| classify(e, what, reference))?;
        // The digest is computed here, not taken from the registry's header.
        let digest = sha256(&bytes);
        let manifest = serde_json::from_slice(&bytes).map_err(|e| MarketError::Registry {
            reference: reference.to_string(),
            reason: format!("its manifest is not an OCI image manifest: {e}"),
        })?;
        Ok((manifest, digest))
    }

    /// Pulls the plugin `reference` points at.
    pub async fn pull_plugin(&self, reference: &PluginRef) -> Result<PulledPlugin, MarketError> {
        let (manifest, manifest_digest) = self.manifest(reference, "the plugin").await?;
        if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
            return Err(not_a_plugin(
                reference,
                format!("its config is {}", manifest.config.media_type),
            ));
        }
        let [layer] = manifest.layers.as_slice() else {
            return Err(not_a_plugin(
                reference,
                format!("it has {} layers, not one", manifest.layers.len()),
            ));
        };
        if layer.media_type != WASM_LAYER_MEDIA_TYPE {
            return Err(not_a_plugin(
                reference,
                format!("its layer is {}", layer.media_type),
            ));
        }
        let wasm = self
            .blob(reference, layer, MAX_COMPONENT_BYTES, "the component")
            .await?;
        Ok(PulledPlugin {
            manifest_digest,
            wasm_digest: layer.digest.clone(),
            wasm,
        })
    }

    async fn blob(
        &self,
        reference: &PluginRef,
        layer: &OciDescriptor,
        max: i64,
        what: &str,
    ) -> Result<Vec<u8>, MarketError> {
        if layer.size > max || layer.size < 0 {
            return Err(MarketError::Registry {
                reference: reference.to_string(),
                reason: format!(
                    "{what} is {} bytes, more than the {max} allowed",
                    layer.size
                ),
            });
        }
        let client = self.client_for(reference.registry());
        let mut bytes = Vec::new();
        client
            .pull_blob(reference.oci(), layer, &mut bytes)
            .await
            .map_err(|e| classify(e, what, reference))?;
        // Checked here too: the client's check depends on how the registry answers.
        let actual = sha256(&bytes);
        if actual != layer.digest {
            return Err(MarketError::BytesMismatch {
                reference: reference.to_string(),
                what: format!("{what}'s digest in the manifest"),
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Pushes the signature of the plugin manifest `subject` at its fallback tag.
    pub async fn push_signature(
        &self,
        reference: &PluginRef,
        subject: &str,
        signed: &SignedArtifact,
    ) -> Result<(), MarketError> {
        let (_, subject_descriptor) = self.descriptor_of(reference).await?;
        self.push_signed(
            &reference.with_tag(&signature_tag(subject)),
            SIGNATURE_ARTIFACT_TYPE,
            signed,
            Some(subject_descriptor),
        )
        .await
    }

    /// The signature stored for the plugin manifest `subject`; `None` when there is none.
    pub async fn pull_signature(
        &self,
        reference: &PluginRef,
        subject: &str,
    ) -> Result<Option<SignedArtifact>, MarketError> {
        self.pull_signed(
            &reference.with_tag(&signature_tag(subject)),
            "the signature",
        )
        .await
    }

    /// The revocation list of `key_id` for the namespace `scope`; `None` when the key
    /// never revoked anything there.
    pub async fn pull_revocations(
        &self,
        scope: &str,
        key_id: &str,
    ) -> Result<Option<SignedArtifact>, MarketError> {
        self.pull_signed(&revocations_ref(scope, key_id)?, "the revocation list")
            .await
    }

    pub async fn push_revocations(
        &self,
        scope: &str,
        key_id: &str,
        signed: &SignedArtifact,
    ) -> Result<(), MarketError> {
        self.push_signed(
            &revocations_ref(scope, key_id)?,
            REVOCATIONS_ARTIFACT_TYPE,
            signed,
            None,
        )
        .await
    }

    /// The descriptor of the manifest `reference` points at, for a `subject`.
    async fn descriptor_of(
        &self,
        reference: &PluginRef,
    ) -> Result<(OciImageManifest, OciDescriptor), MarketError> {
        let client = self.client_for(reference.registry());
        let (bytes, _) = client
            .pull_manifest_raw(reference.oci(), &self.auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| classify(e, "the plugin", reference))?;
        let manifest: OciImageManifest =
            serde_json::from_slice(&bytes).map_err(|e| MarketError::Registry {
                reference: reference.to_string(),
                reason: format!("its manifest is not an OCI image manifest: {e}"),
            })?;
        let descriptor = OciDescriptor {
            media_type: OCI_IMAGE_MEDIA_TYPE.to_string(),
            digest: sha256(&bytes),
            size: bytes.len() as i64,
            ..OciDescriptor::default()
        };
        Ok((manifest, descriptor))
    }

    async fn push_signed(
        &self,
        at: &PluginRef,
        artifact_type: &str,
        signed: &SignedArtifact,
        subject: Option<OciDescriptor>,
    ) -> Result<(), MarketError> {
        let client = self.client_for(at.registry());
        let layers = [
            ImageLayer::new(
                signed.statement.clone(),
                STATEMENT_MEDIA_TYPE.to_string(),
                None,
            ),
            ImageLayer::new(
                signed.signature.clone().into_bytes(),
                MINISIGN_MEDIA_TYPE.to_string(),
                None,
            ),
        ];
        let config = Config::new(b"{}".to_vec(), EMPTY_CONFIG_MEDIA_TYPE.to_string(), None);
        let mut manifest = OciImageManifest::build(&layers, &config, None);
        manifest.artifact_type = Some(artifact_type.to_string());
        manifest.subject = subject;
        client
            .push(at.oci(), &layers, config, &self.auth, Some(manifest))
            .await
            .map_err(|e| classify(e, "the artifact", at))?;
        Ok(())
    }

    async fn pull_signed(
        &self,
        at: &PluginRef,
        what: &str,
    ) -> Result<Option<SignedArtifact>, MarketError> {
        let manifest = match self.manifest(at, what).await {
            Ok((manifest, _)) => manifest,
            Err(MarketError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let layer = |media_type: &str| {
            manifest
                .layers
                .iter()
                .find(|l| l.media_type == media_type)
                .ok_or_else(|| MarketError::Registry {
                    reference: at.to_string(),
                    reason: format!("{what} has no {media_type} layer"),
                })
        };
        let statement = self
            .blob(at, layer(STATEMENT_MEDIA_TYPE)?, MAX_STATEMENT_BYTES, what)
            .await?;
        let signature = self
            .blob(at, layer(MINISIGN_MEDIA_TYPE)?, MAX_STATEMENT_BYTES, what)
            .await?;
        let signature = String::from_utf8(signature).map_err(|_| MarketError::Registry {
            reference: at.to_string(),
            reason: format!("{what}'s minisign signature is not text"),
        })?;
        Ok(Some(SignedArtifact {
            statement,
            signature,
        }))
    }
}

/// `sha256-<hex>.sig`: where the signature of manifest `sha256:<hex>` is found.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// `REGISTRY/NAMESPACE/agentgate-revocations:key-<id>`: one list per key and namespace,
/// so keys that share a namespace never overwrite each other's revocations.
fn revocations_ref(scope: &str, key_id: &str) -> Result<PluginRef, MarketError> {
    PluginRef::parse(&format!(
        "{scope}/{REVOCATIONS_REPOSITORY}:key-{}",
        key_id.to_ascii_lowercase()
    ))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn is_loopback(registry: &str) -> bool {
    let host = registry
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(registry, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn not_a_plugin(reference: &PluginRef, why: String) -> MarketError {
    MarketError::Registry {
        reference: reference.to_string(),
        reason: format!("it is not a Wasm plugin artifact (CNCF Wasm OCI layout): {why}"),
    }
}

/// Maps a client error to its refusal: 404, a registry that cannot be reached, bytes
/// that do not match, or another registry error.
fn classify(error: OciDistributionError, what: &str, reference: &PluginRef) -> MarketError {
    let not_found = || MarketError::NotFound {
        what: what.to_string(),
        reference: reference.to_string(),
    };
    match error {
        OciDistributionError::ImageManifestNotFoundError(_) => not_found(),
        OciDistributionError::ServerError { code: 404, .. } => not_found(),
        OciDistributionError::RegistryError { ref envelope, .. }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                )
            }) =>
        {
            not_found()
        }
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError {
            expected,
            actual,
        }) => MarketError::BytesMismatch {
            reference: reference.to_string(),
            what: format!("{what}'s digest"),
            expected,
            actual,
        },
        OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
            MarketError::RegistryDown {
                registry: reference.registry().to_string(),
                reason: error_chain(&e),
            }
        }
        e => MarketError::Registry {
            reference: reference.to_string(),
            reason: error_chain(&e),
        },
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_names_registry_namespace_name_and_version() {
        let r = PluginRef::parse("127.0.0.1:5000/acme/tools/my-driver:1.2.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.scope(), "127.0.0.1:5000/acme/tools");
        assert_eq!(r.name(), "my-driver");
        assert_eq!(r.tag(), "1.2.0");
        assert_eq!(r.to_string(), "127.0.0.1:5000/acme/tools/my-driver:1.2.0");
        for bad in [
            "acme/my-driver:1.0",
            "127.0.0.1:5000/my-driver:1.0",
            "127.0.0.1:5000/acme/my-driver",
        ] {
            assert!(PluginRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn signatures_are_found_by_the_tag_fallback_scheme() {
        assert_eq!(signature_tag("sha256:abc"), "sha256-abc.sig");
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("ghcr.io"));
    }
}
