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

use super::fetch::{error_chain, is_loopback, Fetcher, Limit, Target};
use super::{MarketError, MarketSettings};

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

/// The fixed caps of what is pulled besides the component (whose bound is its
/// declared size and the operator's `marketplace.maxComponentSize`).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The cap, in bytes, on a signed statement and on its signature (1 MiB each).
pub const MAX_STATEMENT_BYTES: u64 = 1 << 20;
/// The cap, in bytes, on a repository's tag list (4 MiB).
pub const MAX_TAG_LIST_BYTES: u64 = 4 << 20;

/// Why a text is not a namespace (`REGISTRY/NAMESPACE`).
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// No plugin reference below the text parses.
    #[error("it is not a namespace a plugin reference can name")]
    NotANamespace,
    /// A reference below the text parses but names another namespace: this one.
    #[error("it reads as {0}")]
    ReadsAs(String),
}

/// `REGISTRY/NAMESPACE/NAME:VERSION`: where a plugin is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    reference: Reference,
}

impl PluginRef {
    /// Reads `REGISTRY/NAMESPACE/NAME:VERSION`; [`MarketError::Input`] when the registry
    /// host, the namespace or the `:VERSION` tag is missing, or it names a digest.
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

    /// The registry host, with its port if the reference names one.
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

    /// Checks that `text` is a namespace, `REGISTRY/NAMESPACE`, by the grammar
    /// references are read with (so no `..`, no control characters, no upper case, no
    /// tag or digest): a plugin reference below it must parse and name exactly it.
    pub fn check_scope(text: &str) -> Result<(), ScopeError> {
        let below =
            PluginRef::parse(&format!("{text}/name:0")).map_err(|_| ScopeError::NotANamespace)?;
        if below.scope() != text {
            return Err(ScopeError::ReadsAs(below.scope()));
        }
        Ok(())
    }

    /// The last part of the repository: the plugin's name.
    pub fn name(&self) -> &str {
        let repository = self.reference.repository();
        repository.rsplit('/').next().unwrap_or(repository)
    }

    /// The tag: the plugin's version.
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

/// A pulled plugin: the manifest's digest and the component, downloaded to a file and
/// checked against the layer's digest and size.
pub struct PulledPlugin {
    /// The manifest's digest, `sha256:<hex>`: what the signature is attached to.
    pub manifest_digest: String,
    /// The component's digest, `sha256:<hex>`, as the layer declares it and the
    /// download matched.
    pub wasm_digest: String,
    /// The downloaded component, in the folder given to [`Registry::pull_plugin`].
    pub path: std::path::PathBuf,
    /// The component's size in bytes.
    pub size: u64,
}

/// What a plugin's manifest says: its digest and its one component layer.
pub struct PluginManifest {
    /// The manifest's digest, `sha256:<hex>`.
    pub manifest_digest: String,
    /// The Wasm component layer: its media type, digest and declared size.
    pub layer: OciDescriptor,
}

/// A statement and its minisign signature, as stored in a signature or revocation
/// artifact.
pub struct SignedArtifact {
    /// The signed statement (JSON), as its exact bytes.
    pub statement: Vec<u8>,
    /// The minisign signature of `statement`, as its text.
    pub signature: String,
}

/// Speaks to OCI registries: loopback registries in plain HTTP, every other one in
/// HTTPS. Everything pulled goes through one bounded fetch ([`super::fetch`]); pushing
/// (the author's side, to their own registry) goes through `oci-client`.
pub struct Registry {
    auth: RegistryAuth,
    fetcher: Fetcher,
    settings: MarketSettings,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// A registry client with the default bounds.
    pub fn new() -> Registry {
        Registry::with_settings(&MarketSettings::default())
    }

    /// A registry client bounded by the operator's `settings`.
    pub fn with_settings(settings: &MarketSettings) -> Registry {
        // The fetcher installs the TLS provider the push client uses too.
        Registry {
            auth: RegistryAuth::Anonymous,
            fetcher: Fetcher::new(settings.registry_timeout),
            settings: settings.clone(),
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
            connect_timeout: Some(super::fetch::CONNECT_TIMEOUT),
            read_timeout: Some(super::fetch::IDLE_TIMEOUT),
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
        let (_, descriptor) = self.manifest(reference, "the plugin").await?;
        Ok(descriptor.digest)
    }

    /// The tags of `reference`'s repository.
    pub async fn tags(&self, reference: &PluginRef) -> Result<Vec<String>, MarketError> {
        #[derive(serde::Deserialize)]
        struct TagList {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let mut body = Vec::new();
        self.fetcher
            .get(
                &Target {
                    registry: reference.registry(),
                    repository: reference.oci().repository(),
                    path: "tags/list".into(),
                    accept: None,
                    what: "the tag list",
                    reference: reference.repository(),
                },
                Limit::AtMost {
                    bytes: MAX_TAG_LIST_BYTES,
                    of: "a tag list",
                },
                &mut body,
            )
            .await?;
        let list: TagList = serde_json::from_slice(&body).map_err(|e| MarketError::Registry {
            reference: reference.repository(),
            reason: format!("its tag list is not one: {e}"),
        })?;
        Ok(list.tags.unwrap_or_default())
    }

    /// The manifest `reference` points at, read within [`MAX_MANIFEST_BYTES`], and its
    /// descriptor (digest computed here, not taken from the registry's header).
    async fn manifest(
        &self,
        reference: &PluginRef,
        what: &str,
    ) -> Result<(OciImageManifest, OciDescriptor), MarketError> {
        let mut bytes = Vec::new();
        let digest = self
            .fetcher
            .get(
                &Target {
                    registry: reference.registry(),
                    repository: reference.oci().repository(),
                    path: format!("manifests/{}", reference.tag()),
                    accept: Some(OCI_IMAGE_MEDIA_TYPE),
                    what,
                    reference: reference.to_string(),
                },
                Limit::AtMost {
                    bytes: MAX_MANIFEST_BYTES,
                    of: "a manifest",
                },
                &mut bytes,
            )
            .await?;
        let manifest = serde_json::from_slice(&bytes).map_err(|e| MarketError::Registry {
            reference: reference.to_string(),
            reason: format!("its manifest is not an OCI image manifest: {e}"),
        })?;
        let descriptor = OciDescriptor {
            media_type: OCI_IMAGE_MEDIA_TYPE.to_string(),
            digest,
            size: bytes.len() as i64,
            ..OciDescriptor::default()
        };
        Ok((manifest, descriptor))
    }

    /// The manifest of the plugin `reference` points at, checked to be a Wasm plugin
    /// of one component layer.
    pub async fn plugin_manifest(
        &self,
        reference: &PluginRef,
    ) -> Result<PluginManifest, MarketError> {
        let (manifest, descriptor) = self.manifest(reference, "the plugin").await?;
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
        Ok(PluginManifest {
            manifest_digest: descriptor.digest,
            layer: layer.clone(),
        })
    }

    /// Pulls the plugin `reference` points at: its component is streamed to
    /// `dir/component.wasm`, never held in memory, refused before the download when
    /// its declared size is over the operator's `marketplace.maxComponentSize`.
    pub async fn pull_plugin(
        &self,
        reference: &PluginRef,
        dir: &std::path::Path,
    ) -> Result<PulledPlugin, MarketError> {
        let plugin = self.plugin_manifest(reference).await?;
        let max = self.settings.max_component_size;
        let size = declared_size(reference, &plugin.layer, "the component")?;
        if size > max {
            return Err(MarketError::Body {
                reference: reference.to_string(),
                what: "the component".into(),
                reason: format!(
                    "its descriptor declares {size} bytes, more than the {max} allowed (marketplace.maxComponentSize in grants.yaml); refused before downloading it"
                ),
            });
        }
        let path = dir.join("component.wasm");
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| MarketError::file(&path, e))?;
        self.blob(reference, &plugin.layer, size, "the component", &mut file)
            .await?;
        file.sync_all()
            .await
            .map_err(|e| MarketError::file(&path, e))?;
        Ok(PulledPlugin {
            manifest_digest: plugin.manifest_digest,
            wasm_digest: plugin.layer.digest,
            path,
            size,
        })
    }

    /// Pulls the blob `layer` of `size` bytes (its declared size) into `sink`, and
    /// checks its digest.
    async fn blob(
        &self,
        reference: &PluginRef,
        layer: &OciDescriptor,
        size: u64,
        what: &str,
        sink: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
    ) -> Result<(), MarketError> {
        if !is_sha256(&layer.digest) {
            return Err(MarketError::Registry {
                reference: reference.to_string(),
                reason: format!("{what}'s digest {:?} is not sha256:<hex>", layer.digest),
            });
        }
        let actual = self
            .fetcher
            .get(
                &Target {
                    registry: reference.registry(),
                    repository: reference.oci().repository(),
                    path: format!("blobs/{}", layer.digest),
                    accept: None,
                    what,
                    reference: reference.to_string(),
                },
                Limit::Exactly(size),
                sink,
            )
            .await?;
        if actual != layer.digest {
            return Err(MarketError::BytesMismatch {
                reference: reference.to_string(),
                what: format!("{what}'s digest in the manifest"),
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(())
    }

    /// A small blob (a statement, a signature), bounded by `max` and its declared size.
    async fn small_blob(
        &self,
        reference: &PluginRef,
        layer: &OciDescriptor,
        max: u64,
        what: &str,
    ) -> Result<Vec<u8>, MarketError> {
        let size = declared_size(reference, layer, what)?;
        if size > max {
            return Err(MarketError::Body {
                reference: reference.to_string(),
                what: what.to_string(),
                reason: format!("its descriptor declares {size} bytes, more than the {max} allowed; refused before downloading it"),
            });
        }
        let mut bytes = Vec::new();
        self.blob(reference, layer, size, what, &mut bytes).await?;
        Ok(bytes)
    }

    /// Pushes the signature of the plugin manifest `subject` at its fallback tag.
    pub async fn push_signature(
        &self,
        reference: &PluginRef,
        subject: &str,
        signed: &SignedArtifact,
    ) -> Result<(), MarketError> {
        let (_, subject_descriptor) = self.manifest(reference, "the plugin").await?;
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
    /// never published one there.
    pub async fn pull_revocations(
        &self,
        scope: &str,
        key_id: &str,
    ) -> Result<Option<SignedArtifact>, MarketError> {
        self.pull_signed(&revocations_ref(scope, key_id)?, "the revocation list")
            .await
    }

    /// Publishes `signed`, the revocation list of `key_id` for the namespace `scope`, at
    /// `SCOPE/agentgate-revocations:key-<key id>`.
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
            .small_blob(at, layer(STATEMENT_MEDIA_TYPE)?, MAX_STATEMENT_BYTES, what)
            .await?;
        let signature = self
            .small_blob(at, layer(MINISIGN_MEDIA_TYPE)?, MAX_STATEMENT_BYTES, what)
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

/// The size a descriptor declares, refused when negative.
fn declared_size(
    reference: &PluginRef,
    layer: &OciDescriptor,
    what: &str,
) -> Result<u64, MarketError> {
    u64::try_from(layer.size).map_err(|_| MarketError::Body {
        reference: reference.to_string(),
        what: what.to_string(),
        reason: format!("its descriptor declares {} bytes", layer.size),
    })
}

fn is_sha256(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
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

/// `sha256:<hex>` of the file at `path`, read in pieces (a component may be large).
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
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
        PluginRef::check_scope("127.0.0.1:5000/acme").unwrap();
        PluginRef::check_scope("ghcr.io/acme/tools").unwrap();
        for bad in [
            "127.0.0.1:5000/acme/../evil",
            "127.0.0.1:5000/acme\nx",
            "127.0.0.1:5000/Acme",
            "127.0.0.1:5000/acme:1",
            "127.0.0.1:5000/acme@sha256:00",
            "127.0.0.1:5000",
            "acme/tools",
            "127.0.0.1:5000/*",
        ] {
            assert!(PluginRef::check_scope(bad).is_err(), "{bad:?}");
        }
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
