//! The one way the marketplace reads what a registry sends: every GET (manifests, blobs,
//! tag lists, bearer tokens) goes through [`Fetcher::get`], which bounds it.
//!
//! A registry is an outside party: it may send an endless body, a body longer or shorter
//! than the descriptor it served declared, or trickle bytes forever. So each body is
//! bounded before and while it is read, never after: a `Content-Length` beyond the
//! bound is refused before the body is read, the body is counted chunk by chunk and the
//! read stops at the first byte over the bound, its sha256 is computed on the way, and
//! it goes to the sink (memory for small bodies, a file for a component) without ever
//! being held whole by this module. Each request has a deadline from connecting to its
//! last byte (the operator's `marketplace.registryTimeout`) and an idle bound (no byte
//! for [`IDLE_TIMEOUT`]), so a registry that stalls or trickles ends with an error
//! that says so.

use std::collections::HashMap;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::MarketError;

/// How long a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a response may send nothing before it is abandoned.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The most bytes of an error answer read for its message.
const ERROR_BODY_BYTES: u64 = 16 << 10;
/// The most bytes of a bearer token answer.
const TOKEN_BYTES: u64 = 64 << 10;

/// How many bytes a body may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// At most this many: the fixed cap of its kind (`of`: "a manifest").
    AtMost { bytes: u64, of: &'static str },
    /// Exactly this many: a blob whose descriptor declared its size.
    Exactly(u64),
}

impl Limit {
    fn max(self) -> u64 {
        match self {
            Limit::AtMost { bytes: n, .. } | Limit::Exactly(n) => n,
        }
    }
}

/// What is fetched, for the request and for messages.
pub struct Target<'a> {
    /// `REGISTRY` as written in the reference (plain HTTP when on loopback).
    pub registry: &'a str,
    /// `NAMESPACE/NAME`, for the bearer token's scope.
    pub repository: &'a str,
    /// The path below `/v2/<repository>/`, e.g. `manifests/1.0.0`.
    pub path: String,
    /// The `Accept` header, when the kind of answer matters.
    pub accept: Option<&'a str>,
    /// What it is, for messages: `the manifest`, `the component`.
    pub what: &'a str,
    /// The reference it belongs to, for messages.
    pub reference: String,
}

/// Reads registries within the bounds.
pub struct Fetcher {
    client: reqwest::Client,
    timeout: Duration,
    /// Bearer tokens by `registry scope`, from anonymous token requests.
    tokens: tokio::sync::Mutex<HashMap<String, String>>,
}

impl Fetcher {
    /// A fetcher whose requests each end within `timeout`.
    pub fn new(timeout: Duration) -> Fetcher {
        // TLS, for registries that are not on loopback, uses ring (the provider the
        // rest of the host uses); installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .user_agent(concat!("agentgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Fetcher {
            client,
            timeout,
            tokens: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// GETs `target` into `sink` within `limit` and the deadline; returns the sha256
    /// (`sha256:<hex>`) of what was written.
    pub async fn get(
        &self,
        target: &Target<'_>,
        limit: Limit,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
    ) -> Result<String, MarketError> {
        let started = Instant::now();
        let mut received = 0u64;
        let result = tokio::time::timeout_at(
            started + self.timeout,
            self.get_within(target, limit, sink, &mut received),
        )
        .await;
        match result {
            Ok(result) => result,
            Err(_) => Err(MarketError::TimedOut {
                registry: target.registry.to_string(),
                what: target.what.to_string(),
                reference: target.reference.clone(),
                reason: format!(
                    "it was not complete after {} ({received} bytes received); each request to a registry must end within marketplace.registryTimeout in grants.yaml ({})",
                    humantime::format_duration(Duration::from_secs(self.timeout.as_secs())),
                    crate::taskspec::format_duration(self.timeout)
                ),
            }),
        }
    }

    async fn get_within(
        &self,
        target: &Target<'_>,
        limit: Limit,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        received: &mut u64,
    ) -> Result<String, MarketError> {
        let url = format!(
            "{}://{}/v2/{}/{}",
            scheme(target.registry),
            registry_host(target.registry),
            target.repository,
            target.path
        );
        let mut response = self.send(target, &url, None).await?;
        if response.status() == reqwest::StatusCode::UNAUTHORIZED {
            if let Some(challenge) = bearer_challenge(&response) {
                let token = self.token(target, &challenge).await?;
                response = self.send(target, &url, Some(&token)).await?;
            }
        }
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(target, response).await);
        }
        let refuse = |reason: String| MarketError::Body {
            reference: target.reference.clone(),
            what: target.what.to_string(),
            reason,
        };
        let too_long = |limit: Limit, got: u64| {
            match limit {
            Limit::Exactly(n) => format!(
                "it is longer than the {n} bytes its descriptor declares ({got} or more sent); refused"
            ),
            Limit::AtMost { bytes: n, of } => {
                format!("it is larger than the {n} bytes {of} may be ({got} or more sent); refused")
            }
        }
        };
        if let Some(announced) = response.content_length() {
            match limit {
                Limit::Exactly(n) if announced != n => {
                    return Err(refuse(format!(
                        "the registry announces {announced} bytes but the descriptor declares {n}; refused before reading"
                    )))
                }
                Limit::AtMost { bytes: n, of } if announced > n => {
                    return Err(refuse(format!(
                        "the registry announces {announced} bytes, more than the {n} {of} may be; refused before reading"
                    )))
                }
                _ => {}
            }
        }
        let mut hasher = Sha256::new();
        loop {
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT, response.chunk()).await {
                Err(_) => {
                    return Err(MarketError::TimedOut {
                        registry: target.registry.to_string(),
                        what: target.what.to_string(),
                        reference: target.reference.clone(),
                        reason: format!(
                            "it sent nothing for {} ({} bytes received)",
                            humantime::format_duration(IDLE_TIMEOUT),
                            *received
                        ),
                    })
                }
                Ok(Err(e)) => {
                    return Err(MarketError::Registry {
                        reference: target.reference.clone(),
                        reason: format!(
                            "reading {} failed after {} bytes: {}",
                            target.what,
                            *received,
                            error_chain(&e)
                        ),
                    })
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            *received += chunk.len() as u64;
            if *received > limit.max() {
                return Err(refuse(too_long(limit, *received)));
            }
            hasher.update(&chunk);
            sink.write_all(&chunk)
                .await
                .map_err(|e| refuse(format!("cannot store it: {e}")))?;
        }
        if let Limit::Exactly(n) = limit {
            if *received < n {
                return Err(refuse(format!(
                    "it ended after {} of the {n} bytes its descriptor declares; refused",
                    *received
                )));
            }
        }
        sink.flush()
            .await
            .map_err(|e| refuse(format!("cannot store it: {e}")))?;
        Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
    }

    async fn send(
        &self,
        target: &Target<'_>,
        url: &str,
        token: Option<&str>,
    ) -> Result<reqwest::Response, MarketError> {
        let mut request = self.client.get(url);
        if let Some(accept) = target.accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        let token = match token {
            Some(token) => Some(token.to_string()),
            None => self
                .tokens
                .lock()
                .await
                .get(&token_key(target.registry, target.repository))
                .cloned(),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                MarketError::RegistryDown {
                    registry: target.registry.to_string(),
                    reason: error_chain(&e),
                }
            } else {
                MarketError::Registry {
                    reference: target.reference.clone(),
                    reason: error_chain(&e),
                }
            }
        })
    }

    /// An anonymous bearer token for `challenge` (the registry's `WWW-Authenticate`),
    /// as `docker pull` gets one; its answer is bounded like every other.
    async fn token(
        &self,
        target: &Target<'_>,
        challenge: &HashMap<String, String>,
    ) -> Result<String, MarketError> {
        let bad = |reason: String| MarketError::Registry {
            reference: target.reference.clone(),
            reason: format!("its token service: {reason}"),
        };
        let realm = challenge
            .get("realm")
            .ok_or_else(|| bad("the Bearer challenge names no realm".into()))?;
        let mut url =
            reqwest::Url::parse(realm).map_err(|e| bad(format!("realm {realm:?}: {e}")))?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = challenge.get("service") {
                query.append_pair("service", service);
            }
            let scope = challenge
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", target.repository));
            query.append_pair("scope", &scope);
        }
        let response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| bad(error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(bad(format!("it answered {}", response.status())));
        }
        let mut body = Vec::new();
        // A registry's reason is one line of text (see `MarketError`).
        read_bounded(response, TOKEN_BYTES, &mut body)
            .await
            .map_err(|e| bad(e.to_string()))?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Token =
            serde_json::from_slice(&body).map_err(|e| bad(format!("not a token answer: {e}")))?;
        let token = answer
            .token
            .or(answer.access_token)
            .ok_or_else(|| bad("its answer holds no token".into()))?;
        self.tokens
            .lock()
            .await
            .insert(token_key(target.registry, target.repository), token.clone());
        Ok(token)
    }

    /// The refusal for an answer that is not a success: 404 (or an OCI "unknown" error)
    /// is [`MarketError::NotFound`].
    async fn status_error(&self, target: &Target<'_>, response: reqwest::Response) -> MarketError {
        let status = response.status();
        let mut body = Vec::new();
        let _ = read_bounded(response, ERROR_BODY_BYTES, &mut body).await;
        let text = String::from_utf8_lossy(&body);
        let unknown = ["MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN"]
            .iter()
            .any(|code| text.contains(code));
        if status == reqwest::StatusCode::NOT_FOUND || unknown {
            return MarketError::NotFound {
                what: target.what.to_string(),
                reference: target.reference.clone(),
            };
        }
        MarketError::Registry {
            reference: target.reference.clone(),
            reason: format!(
                "it answered {status} for {}: {}",
                target.what,
                text.trim().chars().take(400).collect::<String>()
            ),
        }
    }
}

/// Why a bounded answer was not read whole.
#[derive(Debug, thiserror::Error)]
enum BoundedReadError {
    #[error("it sent nothing for {}", humantime::format_duration(IDLE_TIMEOUT))]
    Idle,
    /// Shown with its causes on one line, as every registry reason is.
    #[error("{}", error_chain(.0))]
    Transport(#[source] reqwest::Error),
    #[error("its answer is larger than {0} bytes")]
    TooLarge(u64),
}

/// Reads at most `max` bytes of `response` into `out` (error answers, tokens), within
/// the idle bound.
async fn read_bounded(
    mut response: reqwest::Response,
    max: u64,
    out: &mut Vec<u8>,
) -> Result<(), BoundedReadError> {
    loop {
        let chunk = tokio::time::timeout(IDLE_TIMEOUT, response.chunk())
            .await
            .map_err(|_| BoundedReadError::Idle)?
            .map_err(BoundedReadError::Transport)?;
        let Some(chunk) = chunk else {
            return Ok(());
        };
        let room = (max as usize).saturating_sub(out.len());
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Err(BoundedReadError::TooLarge(max));
        }
        out.extend_from_slice(&chunk);
    }
}

/// The parameters of a `WWW-Authenticate: Bearer ...` challenge.
fn bearer_challenge(response: &reqwest::Response) -> Option<HashMap<String, String>> {
    let header = response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)?
        .to_str()
        .ok()?;
    let rest = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))?;
    let mut params = HashMap::new();
    let mut text = rest.trim();
    while !text.is_empty() {
        let (key, after) = text.split_once('=')?;
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        params.insert(key, value.to_string());
        text = after.trim_start_matches([',', ' ']);
    }
    Some(params)
}

fn token_key(registry: &str, repository: &str) -> String {
    format!("{registry} {repository}")
}

/// Plain HTTP to a registry on loopback, HTTPS to every other.
fn scheme(registry: &str) -> &'static str {
    if is_loopback(registry) {
        "http"
    } else {
        "https"
    }
}

/// The host that serves `registry`: Docker Hub's name is not its API's.
fn registry_host(registry: &str) -> &str {
    if registry == "docker.io" {
        "index.docker.io"
    } else {
        registry
    }
}

pub(crate) fn is_loopback(registry: &str) -> bool {
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

pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
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

    /// A server on 127.0.0.1 that answers one request with `head` and then sends
    /// nothing for a minute.
    async fn announcing(head: &'static str) -> String {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            stream.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        address
    }

    async fn fetch(address: &str, limit: Limit) -> MarketError {
        let target = Target {
            registry: address,
            repository: "acme/x",
            path: "manifests/1.0.0".into(),
            accept: None,
            what: "the plugin",
            reference: format!("{address}/acme/x:1.0.0"),
        };
        let mut sink = Vec::new();
        let error = Fetcher::new(Duration::from_secs(30))
            .get(&target, limit, &mut sink)
            .await
            .unwrap_err();
        assert!(sink.is_empty(), "nothing was read into the sink");
        error
    }

    #[tokio::test]
    async fn an_announced_length_beyond_the_bound_is_refused_before_reading() {
        let started = std::time::Instant::now();
        let address = announcing("HTTP/1.1 200 OK\r\ncontent-length: 9999999999\r\n\r\n").await;
        let limit = Limit::AtMost {
            bytes: 1 << 20,
            of: "a manifest",
        };
        let error = fetch(&address, limit).await.to_string();
        assert!(
            error.contains("announces 9999999999 bytes, more than the 1048576 a manifest may be"),
            "{error}"
        );
        let address = announcing("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n").await;
        let error = fetch(&address, Limit::Exactly(10)).await.to_string();
        assert!(
            error.contains("announces 12 bytes but the descriptor declares 10"),
            "{error}"
        );
        // Neither waited for a body that never came.
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_bearer_challenge_is_read() {
        let header = r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:acme/x:pull""#;
        let response: reqwest::Response = http::Response::builder()
            .status(401)
            .header("www-authenticate", header)
            .body(Vec::<u8>::new())
            .unwrap()
            .into();
        let params = bearer_challenge(&response).unwrap();
        assert_eq!(params["realm"], "https://auth.example.com/token");
        assert_eq!(params["service"], "registry.example.com");
        assert_eq!(params["scope"], "repository:acme/x:pull");
    }
}
