//! What a client sends after the proxy let its connection through, checked as it goes.
//!
//! Checking only a connection's first message would let everything after it through
//! unchecked: pipelined requests naming another `Host` (domain fronting on a shared
//! address), a switch to HTTP/2 (`h2c`, whose streams name their own authority), or
//! another protocol after a valid first message. So every byte from the client passes a
//! [`Guard`] before it goes upstream:
//!
//! - **Plain HTTP/1.x** (a CONNECT tunnel carrying HTTP, or an absolute-form request):
//!   each request head is read whole and checked before any of it is forwarded: origin
//!   form, exactly one `Host` naming the checked destination, no `Upgrade: h2c`, and an
//!   unambiguous body length (one `Content-Length`, or `Transfer-Encoding` ending in
//!   `chunked` without one), so the next head is found where the upstream will find it.
//!   The HTTP/2 preface is no HTTP/1.x request and is refused. An absolute-form request
//!   is one request per connection (the upstream was told `Connection: close`): bytes
//!   after it are refused. Another upgrade (WebSocket) must be a connection's first
//!   request; the client's bytes after it are held until the upstream answers: `101`
//!   makes the rest an opaque stream of the protocol switched to, anything else keeps
//!   checking requests.
//! - **TLS** (after a ClientHello whose SNI names the host): only the record framing is
//!   checked (content types 20 to 23, a TLS version, a bounded length), so the tunnel
//!   stays TLS; what the records carry is encrypted and not checked.

use super::allowlist::Target;
use super::request::{host_headers, host_names, printable};
use super::sniff::Mismatch;

/// Longest chunk-size or trailer line of a chunked body.
const MAX_LINE: usize = 4096;
/// Longest TLS record payload: 2^14 plus the expansion TLS 1.2 allows.
const MAX_TLS_RECORD: usize = 16384 + 2048;

/// How a request's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body, or a body of this many bytes.
    Length(u64),
    Chunked,
}

/// The checker of one connection's client bytes.
#[derive(Debug)]
pub struct Guard {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Tls(TlsRecords),
    Http(HttpRequests),
    /// After an upgrade the upstream accepted.
    Opaque,
}

#[derive(Debug, Default)]
struct TlsRecords {
    header: Vec<u8>,
    left: usize,
}

#[derive(Debug)]
struct HttpRequests {
    target: Target,
    state: State,
    /// Bytes held back until checked: an unfinished head or chunk line, or what came
    /// after an upgrade request before the upstream's answer.
    pending: Vec<u8>,
    max_head: usize,
    requests: u64,
    /// Whether more requests may follow on this connection.
    more: bool,
    /// Whether the request being read asked to upgrade.
    upgrading: bool,
    /// The upstream's first bytes after an upgrade request, until they show its status.
    verdict: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    AwaitUpgrade,
}

fn refuse(code: &'static str, detail: String) -> Mismatch {
    Mismatch { code, detail }
}

impl Guard {
    /// A TLS tunnel, from its first byte (the ClientHello's record).
    pub fn tls() -> Guard {
        Guard {
            kind: Kind::Tls(TlsRecords::default()),
        }
    }

    /// A CONNECT tunnel carrying plain HTTP to `target`, from its first byte.
    pub fn http_tunnel(target: &Target, max_head: usize) -> Guard {
        Guard {
            kind: Kind::Http(HttpRequests::new(target, max_head, State::Head, 0, true)),
        }
    }

    /// What follows the head of an absolute-form request (already checked and
    /// forwarded): its body, and nothing after it but what an accepted upgrade carries.
    pub fn forwarded(target: &Target, max_head: usize, body: Framing, upgrade: bool) -> Guard {
        let mut requests = HttpRequests::new(target, max_head, State::Head, 1, false);
        requests.upgrading = upgrade;
        requests.state = requests.body_state(body);
        Guard {
            kind: Kind::Http(requests),
        }
    }

    /// Whether the client's bytes wait for the upstream's answer to an upgrade.
    pub fn waits_for_upstream(&self) -> bool {
        matches!(&self.kind, Kind::Http(h) if h.state == State::AwaitUpgrade)
    }

    /// Checks the client's next `bytes`; appends to `out` what may go upstream now.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Mismatch> {
        match &mut self.kind {
            Kind::Opaque => {
                out.extend_from_slice(bytes);
                Ok(())
            }
            Kind::Tls(tls) => tls.feed(bytes, out),
            Kind::Http(http) => {
                http.pending.extend_from_slice(bytes);
                http.advance(out)
            }
        }
    }

    /// Sees the upstream's `bytes` (on their way to the client); appends to `out` the
    /// client's held bytes they release.
    pub fn upstream(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Mismatch> {
        let Kind::Http(http) = &mut self.kind else {
            return Ok(());
        };
        if http.state != State::AwaitUpgrade {
            return Ok(());
        }
        let want = 12usize.saturating_sub(http.verdict.len());
        http.verdict
            .extend_from_slice(&bytes[..want.min(bytes.len())]);
        if http.verdict.len() < 12 {
            return Ok(());
        }
        let switched =
            http.verdict.starts_with(b"HTTP/1.1 101") || http.verdict.starts_with(b"HTTP/1.0 101");
        if switched {
            out.append(&mut http.pending);
            self.kind = Kind::Opaque;
            return Ok(());
        }
        // Not switched: the connection still speaks HTTP/1.x.
        http.verdict.clear();
        http.upgrading = false;
        http.state = State::Head;
        http.advance(out)
    }
}

impl TlsRecords {
    fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Mismatch> {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                out.extend_from_slice(&bytes[..n]);
                self.left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (5 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() < 5 {
                break;
            }
            let [kind, major, minor, high, low] = self.header[..] else {
                unreachable!("five bytes")
            };
            let length = usize::from(u16::from_be_bytes([high, low]));
            if !(20..=23).contains(&kind) || major != 3 || minor > 4 || length > MAX_TLS_RECORD {
                return Err(refuse(
                    "not-tls",
                    format!(
                        "after its ClientHello the tunnel sent something that is not a TLS \
                         record (type {kind}, version {major}.{minor}, length {length}); \
                         other protocols are not forwarded"
                    ),
                ));
            }
            out.append(&mut self.header);
            self.left = length;
        }
        Ok(())
    }
}

impl HttpRequests {
    fn new(target: &Target, max_head: usize, state: State, requests: u64, more: bool) -> Self {
        HttpRequests {
            target: target.clone(),
            state,
            pending: Vec::new(),
            max_head,
            requests,
            more,
            upgrading: false,
            verdict: Vec::new(),
        }
    }

    /// The state after a head whose body is `body`.
    fn body_state(&self, body: Framing) -> State {
        match body {
            Framing::Length(0) => self.after_request(),
            Framing::Length(n) => State::Body(n),
            Framing::Chunked => State::ChunkSize,
        }
    }

    fn after_request(&self) -> State {
        if self.upgrading {
            State::AwaitUpgrade
        } else {
            State::Head
        }
    }

    /// Moves what `pending` holds through the checks, as far as it goes.
    fn advance(&mut self, out: &mut Vec<u8>) -> Result<(), Mismatch> {
        let mut at = 0;
        let result = self.consume(&mut at, out);
        self.pending.drain(..at);
        result
    }

    fn consume(&mut self, at: &mut usize, out: &mut Vec<u8>) -> Result<(), Mismatch> {
        while *at < self.pending.len() {
            let rest = &self.pending[*at..];
            match self.state {
                State::AwaitUpgrade => {
                    if rest.len() > self.max_head {
                        return Err(refuse(
                            "header-too-large",
                            "the client sent too much before the upstream answered its upgrade"
                                .into(),
                        ));
                    }
                    return Ok(());
                }
                State::Head => {
                    if !self.more && self.requests > 0 {
                        return Err(refuse(
                            "one-request",
                            "an absolute-form request is one request per connection; \
                             open a new connection for the next"
                                .into(),
                        ));
                    }
                    let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if rest.len() >= self.max_head {
                            return Err(refuse(
                                "header-too-large",
                                format!("a request head is longer than {} bytes", self.max_head),
                            ));
                        }
                        return Ok(());
                    };
                    let head = rest[..end + 4].to_vec();
                    let body = self.check_head(&head)?;
                    out.extend_from_slice(&head);
                    *at += head.len();
                    self.requests += 1;
                    self.state = self.body_state(body);
                }
                State::Body(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    out.extend_from_slice(&rest[..n]);
                    *at += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        self.after_request()
                    } else {
                        State::Body(left)
                    };
                }
                State::ChunkSize | State::Trailers => {
                    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if rest.len() >= MAX_LINE {
                            return Err(bad_chunk("a chunk line is too long"));
                        }
                        return Ok(());
                    };
                    let line = &rest[..end];
                    out.extend_from_slice(&rest[..end + 2]);
                    *at += end + 2;
                    self.state = if self.state == State::Trailers {
                        if line.is_empty() {
                            self.after_request()
                        } else {
                            State::Trailers
                        }
                    } else {
                        match chunk_size(line)? {
                            0 => State::Trailers,
                            n => State::ChunkData(n),
                        }
                    };
                }
                State::ChunkData(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    out.extend_from_slice(&rest[..n]);
                    *at += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                }
                State::ChunkEnd => {
                    if rest.len() < 2 {
                        return Ok(());
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(bad_chunk("a chunk's data does not end with CRLF"));
                    }
                    out.extend_from_slice(b"\r\n");
                    *at += 2;
                    self.state = State::ChunkSize;
                }
            }
        }
        Ok(())
    }

    /// Checks a complete request head; returns how its body ends.
    fn check_head(&mut self, head: &[u8]) -> Result<Framing, Mismatch> {
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut request = httparse::Request::new(&mut headers);
        if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
            return Err(refuse(
                "not-http1",
                format!(
                    "request {} on this connection is not an HTTP/1.x request (HTTP/2 and \
                     other protocols are not forwarded)",
                    self.requests + 1
                ),
            ));
        }
        let path = request.path.unwrap_or_default();
        if !(path.starts_with('/') || path == "*") {
            return Err(refuse(
                "request-target",
                format!(
                    "request {} names `{}`; inside a tunnel only origin-form requests are forwarded",
                    self.requests + 1,
                    printable(path)
                ),
            ));
        }
        let hosts = host_headers(request.headers);
        match &hosts[..] {
            [host] if host_names(host, &self.target, 80) => {}
            _ => {
                return Err(refuse(
                    "host-mismatch",
                    format!(
                        "request {} on the connection to {} names Host {}; each request must name it",
                        self.requests + 1,
                        self.target,
                        printable(&hosts.join(", "))
                    ),
                ));
            }
        }
        self.upgrading = check_upgrade(request.headers)?;
        if self.upgrading && self.requests > 0 {
            return Err(refuse(
                "upgrade-not-first",
                "an upgrade must be the first request of its connection".into(),
            ));
        }
        framing(request.headers)
    }
}

fn bad_chunk(detail: &str) -> Mismatch {
    refuse("bad-chunked-body", detail.into())
}

fn chunk_size(line: &[u8]) -> Result<u64, Mismatch> {
    let size = line.split(|&b| b == b';').next().unwrap_or_default();
    let size = std::str::from_utf8(size)
        .ok()
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 15 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| bad_chunk("a chunk size is not a hexadecimal number"))?;
    u64::from_str_radix(size, 16).map_err(|_| bad_chunk("a chunk size is out of range"))
}

/// Whether a request asks to upgrade; `h2c` (HTTP/2 in the clear, whose streams name
/// their own hosts) is refused.
pub fn check_upgrade(headers: &[httparse::Header]) -> Result<bool, Mismatch> {
    let mut upgrade = false;
    for header in headers.iter().filter(|h| {
        h.name.eq_ignore_ascii_case("upgrade") || h.name.eq_ignore_ascii_case("http2-settings")
    }) {
        upgrade = true;
        let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
        let h2 = header.name.eq_ignore_ascii_case("http2-settings")
            || value
                .split(',')
                .any(|p| matches!(p.trim().split('/').next(), Some("h2c" | "h2")));
        if h2 {
            return Err(refuse(
                "h2c-refused",
                "an upgrade to HTTP/2 (h2c) is refused: its streams would name hosts the \
                 proxy does not check"
                    .into(),
            ));
        }
    }
    Ok(upgrade)
}

/// How the body of a request with `headers` ends; ambiguous framing (several lengths,
/// a length and a transfer coding, a coding not ending in `chunked`) is refused, since
/// the upstream might find the next request elsewhere than the proxy does.
pub fn framing(headers: &[httparse::Header]) -> Result<Framing, Mismatch> {
    let ambiguous = |detail: &str| refuse("ambiguous-framing", detail.into());
    let named = |name: &str| {
        headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
            .collect::<Vec<_>>()
    };
    let codings = named("transfer-encoding");
    let lengths = named("content-length");
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err(ambiguous("both Transfer-Encoding and Content-Length"));
        }
        let last = codings.join(",");
        if last.rsplit(',').next().map(str::trim) != Some("chunked") {
            return Err(ambiguous(
                "a Transfer-Encoding that does not end in chunked",
            ));
        }
        return Ok(Framing::Chunked);
    }
    match &lengths[..] {
        [] => Ok(Framing::Length(0)),
        [length]
            if !length.is_empty()
                && length.len() <= 18
                && length.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Ok(Framing::Length(length.parse().unwrap_or(0)))
        }
        _ => Err(ambiguous("a Content-Length that is not one number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    /// Feeds `bytes` one chunk at a time (every split point matters) and returns what
    /// went upstream, or the refusal's code.
    fn run(mut guard: Guard, bytes: &[u8], step: usize) -> Result<Vec<u8>, &'static str> {
        let mut out = Vec::new();
        for chunk in bytes.chunks(step) {
            guard.feed(chunk, &mut out).map_err(|m| m.code)?;
        }
        Ok(out)
    }

    fn tunnel() -> Guard {
        Guard::http_tunnel(&target("a.test:80"), 4096)
    }

    #[test]
    fn every_request_of_a_tunnel_must_name_its_host() {
        let good = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\nPOST /x HTTP/1.1\r\nHost: a.test:80\r\nContent-Length: 5\r\n\r\nhelloGET /y HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n";
        for step in [1, 3, 7, 1000] {
            assert_eq!(
                run(tunnel(), good.as_bytes(), step).unwrap(),
                good.as_bytes()
            );
        }
        // The second request names another host; its head never goes upstream.
        let fronted =
            "GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
        for step in [1, 1000] {
            assert_eq!(
                run(tunnel(), fronted.as_bytes(), step),
                Err("host-mismatch")
            );
        }
        let mut guard = tunnel();
        let mut out = Vec::new();
        let _ = guard.feed(fronted.as_bytes(), &mut out);
        assert_eq!(out, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
        // A second request hidden in a body the proxy counts differently: refused.
        let smuggled = "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
        assert_eq!(
            run(tunnel(), smuggled.as_bytes(), 1000),
            Err("ambiguous-framing")
        );
        let absolute = "GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_eq!(
            run(tunnel(), absolute.as_bytes(), 1000),
            Err("request-target")
        );
    }

    #[test]
    fn h2c_and_the_http2_preface_are_refused() {
        let h2c = "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
        assert_eq!(run(tunnel(), h2c.as_bytes(), 1000), Err("h2c-refused"));
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(run(tunnel(), preface, 1000), Err("not-http1"));
    }

    #[test]
    fn an_upgrade_holds_the_client_until_the_upstream_switches() {
        let ws =
            "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        // Accepted: the frames that came early are released, and the rest is opaque.
        let mut guard = tunnel();
        let mut out = Vec::new();
        guard
            .feed(format!("{ws}frame").as_bytes(), &mut out)
            .unwrap();
        assert_eq!(out, ws.as_bytes());
        assert!(guard.waits_for_upstream());
        out.clear();
        guard.upstream(b"HTTP/1.1 101 Switching", &mut out).unwrap();
        assert_eq!(out, b"frame");
        assert!(!guard.waits_for_upstream());
        out.clear();
        guard
            .feed(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n", &mut out)
            .unwrap();
        assert!(out.starts_with(b"GET"));
        // Declined: what follows is checked as requests again.
        let mut guard = tunnel();
        let mut out = Vec::new();
        guard
            .feed(
                format!("{ws}GET / HTTP/1.1\r\nHost: b.test\r\n\r\n").as_bytes(),
                &mut out,
            )
            .unwrap();
        let error = guard.upstream(b"HTTP/1.1 400 Bad Request\r\n", &mut Vec::new());
        assert_eq!(error.unwrap_err().code, "host-mismatch");
        // Not the first request: refused.
        let late = format!("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n{ws}");
        assert_eq!(
            run(tunnel(), late.as_bytes(), 1000),
            Err("upgrade-not-first")
        );
    }

    #[test]
    fn an_absolute_form_request_is_the_only_one_of_its_connection() {
        let forwarded = || Guard::forwarded(&target("a.test:80"), 4096, Framing::Length(4), false);
        assert_eq!(run(forwarded(), b"body", 1).unwrap(), b"body");
        assert_eq!(
            run(
                forwarded(),
                b"bodyGET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
                1000
            ),
            Err("one-request")
        );
    }

    #[test]
    fn a_tls_tunnel_stays_tls() {
        let records = [&[22u8, 3, 1, 0, 2, 1, 2][..], &[23, 3, 3, 0, 3, 9, 9, 9]].concat();
        for step in [1, 2, 100] {
            assert_eq!(run(Guard::tls(), &records, step).unwrap(), records);
        }
        let ssh = [&records[..], b"SSH-2.0-OpenSSH_9.6\r\n"].concat();
        assert_eq!(run(Guard::tls(), &ssh, 100), Err("not-tls"));
        let mut out = Vec::new();
        let _ = Guard::tls().feed(&ssh, &mut out);
        assert_eq!(out, records);
    }
}
