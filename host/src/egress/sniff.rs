//! The first bytes of a CONNECT tunnel must name the host the CONNECT named.
//!
//! An allowed name's address may serve other names too (a CDN, a shared host): a TLS
//! ClientHello whose SNI names another site, or a plain HTTP request whose `Host` does,
//! would reach that other site through an allowed tunnel (domain fronting). So the proxy
//! reads the client's first bytes before it dials anything:
//!
//! - a TLS ClientHello (parsed by rustls's [`Acceptor`]) must carry an SNI equal to the
//!   CONNECT host; a CONNECT to an IP literal may have no SNI, or that literal;
//! - a plain HTTP request's `Host` must name the CONNECT host and port (80 may be left
//!   out); what follows the first message is checked by a [`super::guard::Guard`] as it
//!   is relayed (every later request, and TLS record framing);
//! - anything else (ssh, a database protocol, a server-speaks-first protocol) is
//!   refused: its destination name cannot be checked, and an allowlist written for web
//!   APIs and forges must not become a raw pipe. Use git and package managers over
//!   HTTPS.

use std::time::Duration;

use rustls::server::Acceptor;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::allowlist::{Target, TargetHost};
use super::request::{host_headers, host_names, printable};

/// What a tunnel's first bytes turned out to be, when they do not name the CONNECT host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub code: &'static str,
    pub detail: String,
}

/// What a tunnel carries, as its first message showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Tls,
    Http,
}

/// Reads the tunnel's first bytes into `buffer` (at most `max`, within `timeout`) and
/// checks that they name `target`.
pub async fn check_tunnel_start(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    target: &Target,
    max: usize,
    timeout: Duration,
) -> Result<Carried, Mismatch> {
    tokio::time::timeout(timeout, check(stream, buffer, target, max))
        .await
        .unwrap_or_else(|_| {
            Err(Mismatch {
                code: "tunnel-timeout",
                detail: format!(
                    "the client sent no complete TLS ClientHello or HTTP request head within {}s",
                    timeout.as_secs()
                ),
            })
        })
}

async fn check(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    target: &Target,
    max: usize,
) -> Result<Carried, Mismatch> {
    if buffer.is_empty() {
        read_more(stream, buffer, max).await?;
    }
    if buffer[0] == 0x16 {
        let sni = client_hello_sni(stream, buffer, max).await?;
        return check_sni(sni.as_deref(), target).map(|()| Carried::Tls);
    }
    loop {
        match http_request_line(buffer) {
            Some(true) => {
                return check_http(stream, buffer, target, max)
                    .await
                    .map(|()| Carried::Http)
            }
            Some(false) => {
                return Err(Mismatch {
                    code: "not-tls-or-http",
                    detail: "the tunnel carries neither TLS nor HTTP; other protocols are \
                             not forwarded"
                        .into(),
                });
            }
            None => read_more(stream, buffer, max).await?,
        }
    }
}

/// Whether `buffer` starts with an HTTP/1.x request line; `None` until that is known.
fn http_request_line(buffer: &[u8]) -> Option<bool> {
    let method_len = buffer.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match buffer.get(method_len) {
        None if method_len < 16 => return None,
        Some(b' ') if (1..16).contains(&method_len) => {}
        _ => return Some(false),
    }
    let line_end = buffer.windows(2).position(|w| w == b"\r\n")?;
    let line = &buffer[..line_end];
    Some(line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0"))
}

async fn read_more(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    max: usize,
) -> Result<(), Mismatch> {
    if buffer.len() >= max {
        return Err(Mismatch {
            code: "header-too-large",
            detail: format!("the tunnel's first message is longer than {max} bytes"),
        });
    }
    let mut chunk = [0u8; 4096];
    let want = chunk.len().min(max - buffer.len());
    match stream.read(&mut chunk[..want]).await {
        Ok(0) | Err(_) => Err(Mismatch {
            code: "tunnel-closed",
            detail: "the client closed the tunnel before naming its host".into(),
        }),
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The SNI of the ClientHello at the start of `buffer`, reading more as needed.
async fn client_hello_sni(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    max: usize,
) -> Result<Option<String>, Mismatch> {
    let mut acceptor = Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < buffer.len() {
            let mut rest = &buffer[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(n) => fed += n,
                Err(e) => return Err(bad_tls(e.to_string())),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Ok(accepted
                    .client_hello()
                    .server_name()
                    .map(|name| name.trim_end_matches('.').to_ascii_lowercase()));
            }
            Ok(None) => read_more(stream, buffer, max).await?,
            Err((error, _alert)) => return Err(bad_tls(error.to_string())),
        }
    }
}

fn bad_tls(detail: String) -> Mismatch {
    Mismatch {
        code: "bad-tls",
        detail: format!("not a TLS ClientHello: {detail}"),
    }
}

fn check_sni(sni: Option<&str>, target: &Target) -> Result<(), Mismatch> {
    let matches = match (&target.host, sni) {
        (TargetHost::Name(name), Some(sni)) => sni == name,
        (TargetHost::Name(_), None) => false,
        (TargetHost::Ip(_), None) => true,
        (TargetHost::Ip(ip), Some(sni)) => sni == ip.to_string(),
    };
    if matches {
        return Ok(());
    }
    Err(Mismatch {
        code: "sni-mismatch",
        detail: match sni {
            Some(sni) => format!(
                "the TLS SNI `{}` is not the CONNECT host {}",
                printable(sni),
                target.host
            ),
            None => format!(
                "the TLS ClientHello names no host; CONNECT named {}",
                target.host
            ),
        },
    })
}

async fn check_http(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    target: &Target,
    max: usize,
) -> Result<(), Mismatch> {
    let end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        read_more(stream, buffer, max).await?;
    };
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(
        request.parse(&buffer[..end]),
        Ok(httparse::Status::Complete(_))
    ) {
        return Err(Mismatch {
            code: "not-tls-or-http",
            detail: "the tunnel's first bytes are not an HTTP request".into(),
        });
    }
    let hosts = host_headers(request.headers);
    match &hosts[..] {
        [host] if host_names(host, target, 80) => Ok(()),
        [host] => Err(Mismatch {
            code: "host-mismatch",
            detail: format!(
                "Host `{}` in the tunnel is not the CONNECT target {target}",
                printable(host)
            ),
        }),
        _ => Err(Mismatch {
            code: "host-mismatch",
            detail: format!(
                "{} Host headers in the tunnel; exactly one naming {target} is needed",
                hosts.len()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sniff(bytes: &[u8], target: &str) -> Result<Carried, Mismatch> {
        let mut stream = bytes;
        let mut buffer = Vec::new();
        check_tunnel_start(
            &mut stream,
            &mut buffer,
            &Target::parse(target).unwrap(),
            16 * 1024,
            Duration::from_secs(1),
        )
        .await
    }

    #[tokio::test]
    async fn plain_http_host_must_match() {
        let get = |host: &str| format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert!(sniff(get("a.test").as_bytes(), "a.test:80").await.is_ok());
        assert!(sniff(get("a.test:8080").as_bytes(), "a.test:8080")
            .await
            .is_ok());
        let error = sniff(get("b.test").as_bytes(), "a.test:80")
            .await
            .unwrap_err();
        assert_eq!(error.code, "host-mismatch");
        let error = sniff(get("a.test").as_bytes(), "a.test:8080")
            .await
            .unwrap_err();
        assert_eq!(error.code, "host-mismatch");
    }

    #[tokio::test]
    async fn other_protocols_and_short_tunnels_are_refused() {
        let error = sniff(b"SSH-2.0-OpenSSH_9.6\r\n", "a.test:22")
            .await
            .unwrap_err();
        assert_eq!(error.code, "not-tls-or-http");
        let error = sniff(b"\x00\x01binary", "a.test:22").await.unwrap_err();
        assert_eq!(error.code, "not-tls-or-http");
        let error = sniff(b"\x16\x03\x01\x00\x05hello", "a.test:443")
            .await
            .unwrap_err();
        assert!(
            matches!(error.code, "bad-tls" | "tunnel-closed"),
            "{error:?}"
        );
        let error = sniff(b"", "a.test:443").await.unwrap_err();
        assert_eq!(error.code, "tunnel-closed");
    }

    #[test]
    fn sni_must_be_the_connect_host() {
        let target = |s: &str| Target::parse(s).unwrap();
        assert!(check_sni(Some("a.test"), &target("a.test:443")).is_ok());
        assert!(check_sni(Some("b.test"), &target("a.test:443")).is_err());
        assert!(check_sni(None, &target("a.test:443")).is_err());
        assert!(check_sni(None, &target("127.0.0.2:443")).is_ok());
        assert!(check_sni(Some("a.test"), &target("127.0.0.2:443")).is_err());
    }
}
