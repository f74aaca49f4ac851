//! The request a client sends the proxy: `CONNECT host:port` or an absolute-form HTTP
//! request, and nothing else.
//!
//! The head is read with a size bound and parsed by httparse. An absolute-form request
//! is forwarded in origin form with its hop-by-hop proxy headers removed and
//! `Connection: close`, so the upstream answers one request and closes; its body goes
//! after it, and nothing else (see [`super::guard`]). An `Upgrade` keeps its
//! `Connection: upgrade`: once the upstream switched, the connection is a tunnel to the
//! same destination; `h2c` is refused.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::allowlist::{Target, TargetHost};
use super::guard::{self, Framing};

/// Headers a request head may have.
const MAX_HEADERS: usize = 100;

/// A parsed proxy request.
#[derive(Debug)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: a tunnel.
    Connect { target: Target },
    /// `METHOD http://host:port/path`: one request, forwarded.
    Forward {
        target: Target,
        /// The head to send upstream (origin form).
        head: Vec<u8>,
        /// The request asks to switch protocols (e.g. WebSocket).
        upgrade: bool,
        /// How the request's body ends.
        body: Framing,
    },
}

/// Why a request head was not accepted; `code` is the refusal's short name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    pub code: &'static str,
    pub detail: String,
    /// What the request asked for, when that much could be read.
    pub target: Option<Target>,
}

impl BadRequest {
    fn new(code: &'static str, detail: impl Into<String>) -> BadRequest {
        BadRequest {
            code,
            detail: detail.into(),
            target: None,
        }
    }
}

/// Reads a request head (up to and including the blank line) into `buffer`, at most
/// `max` bytes. Returns the head's length; bytes after it stay in `buffer`.
pub async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    max: usize,
) -> Result<usize, BadRequest> {
    loop {
        if let Some(end) = head_end(buffer) {
            return Ok(end);
        }
        if buffer.len() >= max {
            return Err(BadRequest::new(
                "header-too-large",
                format!("the request head is longer than {max} bytes"),
            ));
        }
        let mut chunk = [0u8; 4096];
        let want = chunk.len().min(max - buffer.len());
        let n = stream
            .read(&mut chunk[..want])
            .await
            .map_err(|e| BadRequest::new("bad-request", format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(BadRequest::new(
                "bad-request",
                "the connection closed before the request head ended",
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
}

/// Parses a complete request head.
pub fn parse(head: &[u8]) -> Result<ProxyRequest, BadRequest> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(BadRequest::new("bad-request", "incomplete request head"));
        }
        Err(e) => {
            return Err(BadRequest::new(
                "bad-request",
                format!("not an HTTP request: {e}"),
            ));
        }
    }
    let method = request.method.unwrap_or_default();
    let uri = request.path.unwrap_or_default();
    // HTTP/1.0 too: Python's http.client sends `CONNECT host:port HTTP/1.0`.
    if !matches!(request.version, Some(0 | 1)) {
        return Err(BadRequest::new("bad-request", "only HTTP/1.x is spoken"));
    }
    if method == "CONNECT" {
        let target = Target::parse(uri)
            .map_err(|e| BadRequest::new("bad-request", format!("CONNECT needs host:port: {e}")))?;
        return Ok(ProxyRequest::Connect { target });
    }
    let (target, origin_form) = absolute_uri(uri)?;
    check_host_header(request.headers, &target)?;
    let refused = |m: super::sniff::Mismatch| BadRequest {
        code: m.code,
        detail: m.detail,
        target: Some(target.clone()),
    };
    let upgrade = guard::check_upgrade(request.headers).map_err(refused)?;
    let body = guard::framing(request.headers).map_err(refused)?;
    let head = origin_form_head(method, &origin_form, request.headers, upgrade);
    Ok(ProxyRequest::Forward {
        target,
        head,
        upgrade,
        body,
    })
}

/// Splits `http://host[:port]/path` into its target and origin form.
fn absolute_uri(uri: &str) -> Result<(Target, String), BadRequest> {
    let Some(rest) = uri
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &uri[7..])
    else {
        let detail = if uri.starts_with('/') {
            "not a proxy request: use CONNECT host:port or an absolute http:// URI"
        } else {
            "only http:// URIs are forwarded; use CONNECT for TLS"
        };
        return Err(BadRequest::new("not-proxy-request", detail));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(BadRequest::new(
            "bad-request",
            "user information in the URI is not forwarded",
        ));
    }
    let authority_with_port = if has_port(authority) {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let target = Target::parse(&authority_with_port)
        .map_err(|e| BadRequest::new("bad-request", format!("the URI's host: {e}")))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    Ok((target, path))
}

fn has_port(authority: &str) -> bool {
    match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    }
}

/// The `Host` header must name the URI's authority (port 80 may be left out).
fn check_host_header(headers: &[httparse::Header], target: &Target) -> Result<(), BadRequest> {
    let hosts: Vec<_> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .collect();
    let mismatch = |detail: String| BadRequest {
        code: "host-mismatch",
        detail,
        target: Some(target.clone()),
    };
    let [host] = hosts[..] else {
        return Err(mismatch(format!(
            "{} Host headers; exactly one naming {target} is needed",
            hosts.len()
        )));
    };
    let value = std::str::from_utf8(host.value).unwrap_or_default();
    if !host_names(value, target, 80) {
        return Err(mismatch(format!(
            "Host `{}` is not the URI's {target}",
            printable(value)
        )));
    }
    Ok(())
}

/// The values of every `Host` header of a request: a request must have exactly one.
pub fn host_headers(headers: &[httparse::Header<'_>]) -> Vec<String> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .collect()
}

/// Whether a `Host` value names `target` (`default_port` may be left out).
pub fn host_names(value: &str, target: &Target, default_port: u16) -> bool {
    let value = value.trim();
    let with_port = if has_port(value) {
        value.to_string()
    } else {
        format!("{value}:{default_port}")
    };
    match Target::parse(&with_port) {
        Ok(named) => named == *target,
        Err(_) => false,
    }
}

/// Hop-by-hop headers meant for the proxy, never forwarded.
const PROXY_HEADERS: &[&str] = &[
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
];

fn origin_form_head(
    method: &str,
    path: &str,
    headers: &[httparse::Header],
    upgrade: bool,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for header in headers {
        let name = header.name.to_ascii_lowercase();
        if PROXY_HEADERS.contains(&name.as_str()) || (!upgrade && name == "connection") {
            continue;
        }
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    if !upgrade {
        head.extend_from_slice(b"Connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// `text` with anything but printable ASCII replaced, at most 200 characters: safe in a
/// refusal's body and in an event.
pub fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// The host the refusal names for `target`, when known.
pub fn target_parts(target: Option<&Target>) -> (String, Option<u16>) {
    match target {
        Some(t) => (t.host.to_string(), Some(t.port)),
        None => (String::new(), None),
    }
}

impl TargetHost {
    /// The host as the TLS SNI names it, for names.
    pub fn as_name(&self) -> Option<&str> {
        match self {
            TargetHost::Name(name) => Some(name),
            TargetHost::Ip(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(head: &str) -> Result<ProxyRequest, BadRequest> {
        parse(head.as_bytes())
    }

    #[test]
    fn connect_names_its_target() {
        let ProxyRequest::Connect { target } =
            parse_str("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n").unwrap()
        else {
            panic!("not a CONNECT")
        };
        assert_eq!(target.to_string(), "api.test:443");
    }

    #[test]
    fn absolute_form_is_forwarded_in_origin_form() {
        let ProxyRequest::Forward {
            target,
            head,
            upgrade,
            body,
        } = parse_str(
            "GET http://Web.test/a?b HTTP/1.1\r\nHost: web.test\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nX: y\r\n\r\n",
        )
        .unwrap()
        else {
            panic!("not forwarded")
        };
        assert_eq!(target.to_string(), "web.test:80");
        assert!(!upgrade);
        assert_eq!(body, Framing::Length(0));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: web.test\r\nX: y\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn refuses_what_is_not_a_checked_proxy_request() {
        for (head, code) in [
            (
                "GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n",
                "not-proxy-request",
            ),
            (
                "GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
                "not-proxy-request",
            ),
            (
                "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
                "host-mismatch",
            ),
            (
                "GET http://a.test/ HTTP/1.1\r\nHost: a.test:81\r\n\r\n",
                "host-mismatch",
            ),
            ("GET http://a.test/ HTTP/1.1\r\n\r\n", "host-mismatch"),
            (
                "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
                "host-mismatch",
            ),
            (
                "GET http://a.test@b.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
                "bad-request",
            ),
            ("CONNECT a.test HTTP/1.1\r\n\r\n", "bad-request"),
            (
                "GET http://a.test/ HTTP/2.0\r\nHost: a.test\r\n\r\n",
                "bad-request",
            ),
            ("\x16\x03\x01\x00\r\n\r\n", "bad-request"),
            (
                "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
                "h2c-refused",
            ),
            (
                "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "ambiguous-framing",
            ),
        ] {
            let error = parse_str(head).unwrap_err();
            assert_eq!(error.code, code, "{head:?}: {error:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 7u64;
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..64)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 33) as u8
                })
                .collect();
            let _ = parse(&bytes);
        }
    }
}
