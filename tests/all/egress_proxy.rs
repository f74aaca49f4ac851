//! The egress proxy at the socket level, played by an attacker (see host/src/egress).
//!
//! Hermetic: upstream servers listen on 127.0.0.x (a test that wants one reached lists
//! that exact address, since loopback is otherwise refused), TLS runs under a test CA,
//! and the proxy's resolver asks a DNS server of the test's own that maps names to
//! 127.0.0.x, 169.254.169.254 and 10.1.2.3. Every refusal is checked three ways: the
//! client's `403` (or a closed tunnel), the proxy's report and event, and the upstream
//! that saw nothing.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentgate::egress::{
    Allowlist, EgressReport, Limits, OperatorCap, Policy, Proxy, ProxyError, Resolver,
};
use agentgate::record::{EventBody, EventSink, Redactor, RunEvent};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::support;
use crate::support::dns::TestDns;
use crate::support::upstream::{response_head, TestCa, Upstream};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A running proxy with its folder, DNS server and recorded events.
struct World {
    proxy: Proxy,
    dns: TestDns,
    events: Arc<Mutex<Vec<RunEvent>>>,
    _folder: tempfile::TempDir,
}

/// The names the test DNS server knows.
fn dns() -> TestDns {
    TestDns::start(&[
        ("api.test", ip("127.0.0.3")),
        ("web.test", ip("127.0.0.2")),
        ("loopback.test", ip("127.0.0.1")),
        ("metadata.test", ip("169.254.169.254")),
        ("private.test", ip("10.1.2.3")),
        ("mapped.test", ip("::ffff:127.0.0.1")),
        ("linklocal6.test", ip("fe80::1")),
        // The names: one resolving to a loopback address the operator denies,
        // one to a public address it denies (never dialed: refused before).
        ("evil.test", ip("127.0.0.6")),
        ("fronted.test", ip("11.22.33.44")),
    ])
}

async fn world(allow: &[String]) -> World {
    world_with(allow, OperatorCap::default(), Limits::default()).await
}

async fn world_with(allow: &[String], cap: OperatorCap, limits: Limits) -> World {
    let dns = dns();
    let folder = private_folder();
    let events = Arc::new(Mutex::new(Vec::new()));
    let recorder = events.clone();
    let sink = EventSink::new(
        "run-egress",
        &folder.path().join("events.ndjson"),
        Some(Box::new(move |event: &RunEvent| {
            recorder.lock().unwrap().push(event.clone())
        })),
        Arc::new(Redactor::new(Vec::<String>::new())),
    )
    .unwrap();
    let policy = Policy {
        allow: Allowlist::parse(allow).unwrap(),
        cap,
        resolver: Resolver::nameserver(dns.address()).unwrap(),
    };
    let proxy = Proxy::start_with_limits(
        policy,
        &folder.path().join("proxy.sock"),
        Arc::new(sink),
        limits,
    )
    .await
    .unwrap();
    World {
        proxy,
        dns,
        events,
        _folder: folder,
    }
}

fn private_folder() -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap();
    std::fs::set_permissions(folder.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    folder
}

impl World {
    async fn client(&self) -> UnixStream {
        UnixStream::connect(self.proxy.socket_path()).await.unwrap()
    }

    /// Sends `request` on a new connection and reads until the proxy closes it.
    async fn exchange(&self, request: &str) -> String {
        let mut client = self.client().await;
        client.write_all(request.as_bytes()).await.unwrap();
        read_all(&mut client).await
    }

    /// The `egress` events so far: (host, port, allowed, reason).
    fn egress_events(&self) -> Vec<(String, Option<u16>, bool, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match &event.body {
                EventBody::Egress {
                    host,
                    port,
                    allowed,
                    reason,
                    ..
                } => Some((host.clone(), *port, *allowed, reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// The addresses the `egress` events for `host` name.
    fn event_addresses(&self, host: &str) -> Vec<Option<String>> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match &event.body {
                EventBody::Egress {
                    host: h, address, ..
                } if h == host => Some(address.clone()),
                _ => None,
            })
            .collect()
    }

    /// Asserts one refusal of `host:port` for `code`, in the report and as an event,
    /// and that nothing was let through.
    fn assert_refused(&self, host: &str, port: Option<u16>, code: &str) {
        self.assert_refused_code(host, port, code);
        let report = self.proxy.report();
        assert!(report.destinations.is_empty(), "{report:#?}");
    }

    /// Asserts a refusal of `host:port` for `code`, in the report and as an event (the
    /// connection may have been let through before).
    fn assert_refused_code(&self, host: &str, port: Option<u16>, code: &str) {
        let report = self.proxy.report();
        assert!(
            report
                .refused
                .iter()
                .any(|r| r.host == host && r.port == port && r.reason == code),
            "no `{code}` refusal of {host}:{port:?} in {report:#?}"
        );
        assert!(
            self.egress_events()
                .iter()
                .any(|(h, p, allowed, reason)| h == host
                    && *p == port
                    && !allowed
                    && reason.starts_with(code)),
            "no `{code}` event for {host}: {:#?}",
            self.egress_events()
        );
    }
}

async fn read_all(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut bytes))
        .await
        .expect("the proxy answered in time")
        .ok();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Reads a response head (through the blank line).
async fn read_head(stream: &mut UnixStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut byte))
            .await
            .expect("a response head in time")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

fn assert_403(response: &str, code: &str) {
    assert!(
        response.starts_with("HTTP/1.1 403 ")
            && response.contains(&format!("X-Agentgate-Egress: {code}\r\n")),
        "expected a 403 `{code}`, got {response:?}"
    );
}

fn entries(list: &[String]) -> Vec<String> {
    list.to_vec()
}

async fn tls_client(
    stream: UnixStream,
    ca: &TestCa,
    sni: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<UnixStream>> {
    let connector = tokio_rustls::TlsConnector::from(ca.client_config());
    connector
        .connect(ServerName::try_from(sni.to_string()).unwrap(), stream)
        .await
}

// ---- What is allowed goes through, counted ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_tls_to_an_allowed_name_is_relayed_and_counted() {
    let ca = TestCa::new();
    let upstream = Upstream::https(ip("127.0.0.3"), &ca, &["api.test"], 5000);
    let port = upstream.port();
    let world = world(&entries(&[
        format!("api.test:{port}"),
        format!("127.0.0.3:{port}"),
    ]))
    .await;

    let mut client = world.client().await;
    client
        .write_all(
            format!("CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    let mut tls = tls_client(client, &ca, "api.test").await.unwrap();
    tls.write_all(b"GET /v1 HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .await
        .unwrap();
    let response = read_all(&mut tls).await;
    assert_eq!(
        response,
        format!("{}{}", response_head(5000), "x".repeat(5000))
    );

    assert_eq!(upstream.seen().connections, 1);
    assert!(upstream.seen().requests[0].starts_with("GET /v1 "));
    assert_eq!(
        world
            .dns
            .queries()
            .iter()
            .filter(|q| *q == "api.test A")
            .count(),
        1,
        "one lookup (A and AAAA), no second one: {:?}",
        world.dns.queries()
    );
    let events = world.egress_events();
    let report = world.proxy.stop().await;
    let [destination] = &report.destinations[..] else {
        panic!("{report:#?}")
    };
    assert_eq!(
        (destination.host.as_str(), destination.port),
        ("api.test", port)
    );
    assert_eq!(destination.connections, 1);
    // TLS adds records and handshakes around the plain bytes.
    assert!(
        destination.bytes_down > 5000 && destination.bytes_down < 5000 + 8192,
        "{report:#?}"
    );
    assert!(destination.bytes_up > 38, "{report:#?}");
    assert!(report.refused.is_empty());
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(
        events[0].2 && events[0].3.contains("127.0.0.3"),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_listed_address_without_sni_is_relayed() {
    let ca = TestCa::new();
    // A certificate for the address itself: rustls sends no SNI to an IP literal.
    let upstream = Upstream::https(ip("127.0.0.3"), &ca, &["127.0.0.3"], 100);
    let port = upstream.port();
    let world = world(&[format!("127.0.0.3:{port}")]).await;
    let mut client = world.client().await;
    client
        .write_all(format!("CONNECT 127.0.0.3:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    let mut tls = tls_client(client, &ca, "127.0.0.3").await.unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.3\r\n\r\n")
        .await
        .unwrap();
    assert!(read_all(&mut tls).await.ends_with(&"x".repeat(100)));
    assert_eq!(world.proxy.report().destinations[0].connections, 1);
    assert!(world.dns.queries().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_absolute_form_is_forwarded_with_exact_byte_counts() {
    let upstream = Upstream::http(ip("127.0.0.2"), 12345);
    let port = upstream.port();
    let world = world(&entries(&[
        format!("web.test:{port}"),
        format!("127.0.0.2:{port}"),
    ]))
    .await;

    let response = world
        .exchange(&format!(
            "GET http://web.test:{port}/pkg?x=1 HTTP/1.1\r\nHost: web.test:{port}\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n"
        ))
        .await;
    assert_eq!(
        response,
        format!("{}{}", response_head(12345), "x".repeat(12345))
    );

    let seen = upstream.seen();
    assert_eq!(seen.connections, 1);
    let forwarded = &seen.requests[0];
    assert!(
        forwarded.starts_with("GET /pkg?x=1 HTTP/1.1\r\n"),
        "{forwarded}"
    );
    assert!(
        !forwarded.to_ascii_lowercase().contains("proxy-"),
        "{forwarded}"
    );
    assert!(forwarded.contains("Connection: close\r\n"), "{forwarded}");

    let report = world.proxy.stop().await;
    assert_eq!(
        serde_json::to_value(&report).unwrap(),
        serde_json::json!({
            "destinations": [{
                "host": "web.test",
                "port": port,
                "address": format!("127.0.0.2:{port}"),
                "connections": 1,
                "bytesUp": forwarded.len(),
                "bytesDown": response.len(),
            }],
            "refused": [],
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_to_an_allowed_host_is_relayed() {
    let upstream = Upstream::http(ip("127.0.0.2"), 0);
    let port = upstream.port();
    let world = world(&[format!("127.0.0.2:{port}")]).await;
    let mut client = world.client().await;
    client
        .write_all(format!(
            "GET http://127.0.0.2:{port}/ws HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        ).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 101 "));
    client.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    client.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");
    assert!(upstream.seen().requests[0].contains("Connection: Upgrade\r\n"));
}

// ---- Bypass attempts: refused, the upstream sees nothing ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_ip_not_listed_is_refused() {
    let upstream = Upstream::http(ip("127.0.0.2"), 10);
    let port = upstream.port();
    let world = world(&[format!("web.test:{port}")]).await;
    for request in [
        format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n"),
        format!("GET http://127.0.0.2:{port}/ HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\n\r\n"),
    ] {
        assert_403(&world.exchange(&request).await, "not-allowed");
    }
    world.assert_refused("127.0.0.2", Some(port), "not-allowed");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_host_on_another_port_is_refused_without_a_lookup() {
    let allowed = Upstream::http(ip("127.0.0.2"), 10);
    let other = Upstream::http(ip("127.0.0.2"), 10);
    let world = world(&entries(&[
        format!("web.test:{}", allowed.port()),
        format!("127.0.0.2:{}", allowed.port()),
    ]))
    .await;
    let response = world
        .exchange(&format!(
            "CONNECT web.test:{} HTTP/1.1\r\n\r\n",
            other.port()
        ))
        .await;
    assert_403(&response, "not-allowed");
    world.assert_refused("web.test", Some(other.port()), "not-allowed");
    assert_eq!(other.seen().connections, 0);
    assert!(world.dns.queries().is_empty(), "{:?}", world.dns.queries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_with_another_sni_is_closed_before_the_upstream_is_dialed() {
    let ca = TestCa::new();
    let upstream = Upstream::https(ip("127.0.0.3"), &ca, &["api.test", "other.test"], 10);
    let port = upstream.port();
    let world = world(&entries(&[
        format!("api.test:{port}"),
        format!("127.0.0.3:{port}"),
    ]))
    .await;
    let mut client = world.client().await;
    client
        .write_all(format!("CONNECT api.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    let handshake = tls_client(client, &ca, "other.test").await;
    assert!(handshake.is_err(), "the TLS handshake must fail");
    world.assert_refused("api.test", Some(port), "sni-mismatch");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_names_resolving_to_special_addresses_are_refused() {
    // A real server on 127.0.0.1 that an allowed name points at.
    let loopback = Upstream::http(ip("127.0.0.1"), 10);
    let port = loopback.port();
    let names = [
        "loopback.test",
        "metadata.test",
        "private.test",
        "mapped.test",
        "linklocal6.test",
    ];
    let world = world(&names.map(|n| format!("{n}:{port}"))).await;
    for name in names {
        let connect = world
            .exchange(&format!("CONNECT {name}:{port} HTTP/1.1\r\n\r\n"))
            .await;
        assert_403(&connect, "special-address");
        let get = world
            .exchange(&format!(
                "GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n"
            ))
            .await;
        assert_403(&get, "special-address");
        world.assert_refused(name, Some(port), "special-address");
    }
    let reasons: Vec<_> = world.egress_events().into_iter().map(|e| e.3).collect();
    for (name, words) in [
        ("metadata.test", "169.254.169.254, a link-local"),
        ("private.test", "10.1.2.3, a private"),
        ("loopback.test", "127.0.0.1, a loopback"),
    ] {
        assert!(
            reasons
                .iter()
                .any(|r| r.contains(name) && r.contains(words)),
            "{reasons:#?}"
        );
    }
    assert_eq!(loopback.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_literals_not_listed_are_refused() {
    let world = world(&["web.test:443".to_string()]).await;
    for target in [
        "[::1]:443",
        "[::ffff:127.0.0.1]:443",
        "[2606:4700::1111]:443",
    ] {
        let response = world
            .exchange(&format!("CONNECT {target} HTTP/1.1\r\n\r\n"))
            .await;
        assert_403(&response, "not-allowed");
    }
    world.assert_refused("[::1]", Some(443), "not-allowed");
    // The mapped form is the IPv4 address it carries.
    world.assert_refused("127.0.0.1", Some(443), "not-allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_to_a_denied_host_is_refused_without_a_lookup() {
    let upstream = Upstream::http(ip("127.0.0.2"), 10);
    let port = upstream.port();
    let world = world(&[format!("127.0.0.2:{port}")]).await;
    let response = world
        .exchange(&format!(
            "POST http://web.test:{port}/upload HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: 6\r\n\r\nsecret"
        ))
        .await;
    assert_403(&response, "not-allowed");
    world.assert_refused("web.test", Some(port), "not-allowed");
    assert!(world.dns.queries().is_empty());
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_mismatch_is_refused_in_absolute_form_and_in_a_tunnel() {
    let upstream = Upstream::http(ip("127.0.0.2"), 10);
    let port = upstream.port();
    let world = world(&entries(&[
        format!("web.test:{port}"),
        format!("127.0.0.2:{port}"),
    ]))
    .await;
    let response = world
        .exchange(&format!(
            "GET http://web.test:{port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
        ))
        .await;
    assert_403(&response, "host-mismatch");

    let mut client = world.client().await;
    client
        .write_all(format!("CONNECT web.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_all(&mut client).await, "", "the tunnel closes");
    world.assert_refused("web.test", Some(port), "host-mismatch");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upgrade_to_a_denied_host_is_refused() {
    let upstream = Upstream::http(ip("127.0.0.2"), 0);
    let port = upstream.port();
    let world = world(&["api.test:443".to_string()]).await;
    let response = world
        .exchange(&format!(
            "GET http://127.0.0.2:{port}/ws HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ))
        .await;
    assert_403(&response, "not-allowed");
    world.assert_refused("127.0.0.2", Some(port), "not-allowed");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_protocols_in_a_tunnel_are_closed() {
    let upstream = Upstream::http(ip("127.0.0.2"), 0);
    let port = upstream.port();
    let world = world(&[format!("127.0.0.2:{port}")]).await;
    let mut client = world.client().await;
    client
        .write_all(
            format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\nSSH-2.0-OpenSSH_9.6\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let answer = read_all(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(!answer.contains("SSH"), "{answer}");
    world.assert_refused("127.0.0.2", Some(port), "not-tls-or-http");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_proxy_request_is_refused() {
    let world = world(&["web.test:80".to_string()]).await;
    for (request, code) in [
        (
            "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n",
            "not-proxy-request",
        ),
        (
            "GET https://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
            "not-proxy-request",
        ),
        (
            "GET http://user@web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
            "bad-request",
        ),
        (
            "\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03\r\n\r\n",
            "bad-request",
        ),
        ("\0\0\0\0\r\n\r\n", "bad-request"),
        ("CONNECT web.test HTTP/1.1\r\n\r\n", "bad-request"),
    ] {
        assert_403(&world.exchange(request).await, code);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_slow_clients_are_bounded_and_the_proxy_keeps_serving() {
    let upstream = Upstream::http(ip("127.0.0.2"), 3);
    let port = upstream.port();
    let limits = Limits {
        max_connections: 3,
        max_header_bytes: 4096,
        handshake_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let world = world_with(
        &[format!("127.0.0.2:{port}")],
        OperatorCap::default(),
        limits,
    )
    .await;

    // A head that never ends.
    let mut long = world.client().await;
    let _ = long.write_all(&vec![b'A'; 8192]).await;
    assert_403(&read_all(&mut long).await, "header-too-large");

    // Random bytes, with and without a blank line.
    let mut seed = 1u64;
    for round in 0..20 {
        let mut bytes: Vec<u8> = (0..300)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) as u8
            })
            .collect();
        if round % 2 == 0 {
            bytes.extend_from_slice(b"\r\n\r\n");
        }
        let mut client = world.client().await;
        let _ = client.write_all(&bytes).await;
        if round % 2 == 1 && round > 1 {
            // A head cut short by the client (round 1 waits for the timeout instead).
            let _ = client.shutdown().await;
        }
        let answer = read_all(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer:?}");
    }

    // Silent clients take every slot; the next one is refused at once, then they time out.
    let silent: Vec<_> = futures_util::future::join_all((0..3).map(|_| world.client())).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = world.client().await;
    let answer = read_all(&mut extra).await;
    assert!(
        answer.starts_with("HTTP/1.1 503 ") && answer.contains("too-many-connections"),
        "{answer}"
    );
    for mut client in silent {
        assert_403(&read_all(&mut client).await, "request-timeout");
    }

    // Still serving.
    let response = world
        .exchange(&format!(
            "GET http://127.0.0.2:{port}/ HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\n\r\n"
        ))
        .await;
    assert!(response.ends_with("xxx"), "{response}");
}

// ---- The operator's cap, the socket, stopping ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_never_list_wins_over_the_allowlist() {
    let upstream = Upstream::http(ip("127.0.0.2"), 3);
    let port = upstream.port();
    let cap = OperatorCap {
        never: Allowlist::parse(&[format!("127.0.0.2:{port}")]).unwrap(),
        only: None,
    };
    let world = world_with(&[format!("127.0.0.2:{port}")], cap, Limits::default()).await;
    let response = world
        .exchange(&format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n"))
        .await;
    assert_403(&response, "operator-denied");
    world.assert_refused("127.0.0.2", Some(port), "operator-denied");
    assert_eq!(upstream.seen().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_deny_holds_for_allowed_names_resolving_to_a_denied_address() {
    // The denied address has a real server; the names the task allows resolve to it
    // (evil.test) or to a denied public address (fronted.test, refused before dialing).
    let denied = Upstream::http(ip("127.0.0.6"), 10);
    let port = denied.port();
    let cap = OperatorCap {
        never: Allowlist::parse(&[format!("127.0.0.6:{port}"), format!("11.22.33.44:{port}")])
            .unwrap(),
        only: None,
    };
    // The task also lists the denied address on another port, which once unlocked it on
    // every port. None of these entries names a denied destination: the check before
    // the run lets them through.
    let allow = [
        format!("evil.test:{port}"),
        format!("fronted.test:{port}"),
        format!("127.0.0.6:{}", support::another_port(port)),
    ];
    assert!(cap.check(&Allowlist::parse(&allow).unwrap()).is_ok());
    let world = world_with(&allow, cap, Limits::default()).await;
    for (name, address) in [
        ("evil.test", format!("127.0.0.6:{port}")),
        ("fronted.test", format!("11.22.33.44:{port}")),
    ] {
        let connect = world
            .exchange(&format!(
                "CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n"
            ))
            .await;
        assert_403(&connect, "operator-denied");
        let get = world
            .exchange(&format!(
                "GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n"
            ))
            .await;
        assert_403(&get, "operator-denied");
        assert!(get.contains(&address), "{get}");
        world.assert_refused(name, Some(port), "operator-denied");
        // The report and the events name the name and the address it was refused on.
        let report = world.proxy.report();
        let refusal = report
            .refused
            .iter()
            .find(|r| r.host == name)
            .unwrap_or_else(|| panic!("{report:#?}"));
        assert_eq!(refusal.address.as_deref(), Some(address.as_str()));
        assert_eq!(refusal.attempts, 2);
        assert_eq!(
            world.event_addresses(name),
            vec![Some(address.clone()), Some(address.clone())]
        );
    }
    assert_eq!(
        denied.seen().connections,
        0,
        "the denied address was dialed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_special_address_listed_on_one_port_unlocks_no_other_port() {
    let target = Upstream::http(ip("127.0.0.6"), 10);
    let port = target.port();
    let listed = support::another_port(port);
    let world = world(&[
        format!("evil.test:{port}"),
        format!("evil.test:{listed}"),
        format!("127.0.0.6:{listed}"),
    ])
    .await;
    let connect = world
        .exchange(&format!("CONNECT evil.test:{port} HTTP/1.1\r\n\r\n"))
        .await;
    assert_403(&connect, "special-address");
    let get = world
        .exchange(&format!(
            "GET http://evil.test:{port}/ HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"
        ))
        .await;
    assert_403(&get, "special-address");
    world.assert_refused("evil.test", Some(port), "special-address");
    let address = format!("127.0.0.6:{port}");
    assert!(world
        .proxy
        .report()
        .refused
        .iter()
        .all(|r| r.address.as_deref() == Some(address.as_str())));
    assert_eq!(
        target.seen().connections,
        0,
        "the loopback address was dialed"
    );
}

/// A TCP server on `ip` that answers nothing and records every byte each connection
/// sent (until it closes, or 5 s).
struct Recorder {
    port: u16,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Recorder {
    fn start(ip: IpAddr) -> Recorder {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let record = received.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let record = record.clone();
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    let mut bytes = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buffer) {
                        bytes.extend_from_slice(&buffer[..n]);
                        if bytes.ends_with(b"\r\n\r\n") {
                            let _ = stream.write_all(&response_head(0).into_bytes());
                        }
                    }
                    record.lock().unwrap().push(bytes);
                });
            }
        });
        Recorder { port, received }
    }

    /// Everything every connection sent, as text.
    fn received(&self) -> String {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_in_a_plain_tunnel_is_checked_and_h2c_is_refused() {
    let upstream = Recorder::start(ip("127.0.0.2"));
    let port = upstream.port;
    let world = world(&[format!("web.test:{port}"), format!("127.0.0.2:{port}")]).await;
    let world = &world;
    // A tunnel carrying `then`; the client sends nothing more.
    let tunnel = |then: String| async move {
        let mut client = world.client().await;
        client
            .write_all(format!("CONNECT web.test:{port} HTTP/1.1\r\n\r\n{then}").as_bytes())
            .await
            .unwrap();
        let _ = client.shutdown().await;
        read_all(&mut client).await
    };
    let first = format!("GET /first HTTP/1.1\r\nHost: web.test:{port}\r\n\r\n");
    // Pipelined requests naming the same host go through.
    let answer = tunnel(format!("{first}{first}")).await;
    assert!(answer.contains("HTTP/1.1 200 OK\r\n"), "{answer}");
    // A second request naming another host, an upgrade to h2c, the HTTP/2 preface:
    // none reaches the upstream.
    for (then, code) in [
        (
            format!("{first}GET /fronted HTTP/1.1\r\nHost: other.test\r\n\r\n"),
            "host-mismatch",
        ),
        (
            format!(
                "GET /h2c HTTP/1.1\r\nHost: web.test:{port}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
            ),
            "h2c-refused",
        ),
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_string(), "not-tls-or-http"),
    ] {
        tunnel(then).await;
        world.assert_refused_code("web.test", Some(port), code);
    }
    let h2c_absolute = world
        .exchange(&format!(
            "GET http://web.test:{port}/h2c-absolute HTTP/1.1\r\nHost: web.test:{port}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
        ))
        .await;
    assert_403(&h2c_absolute, "h2c-refused");
    // An absolute-form request is one request per connection.
    let mut client = world.client().await;
    client
        .write_all(
            format!(
                "GET http://web.test:{port}/one HTTP/1.1\r\nHost: web.test:{port}\r\n\r\nGET /two HTTP/1.1\r\nHost: other.test\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    read_all(&mut client).await;
    world.assert_refused_code("web.test", Some(port), "one-request");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = upstream.received();
    assert_eq!(received.matches("GET /first ").count(), 2, "{received}");
    for never in [
        "other.test",
        "/fronted",
        "h2c",
        "HTTP2-Settings",
        "PRI *",
        "/two",
    ] {
        assert!(
            !received.contains(never),
            "{never} reached the upstream: {received}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_protocol_after_a_valid_client_hello_is_refused() {
    let ca = TestCa::new();
    let upstream = Upstream::https(ip("127.0.0.3"), &ca, &["api.test"], 10);
    let port = upstream.port();
    let world = world(&[format!("api.test:{port}"), format!("127.0.0.3:{port}")]).await;
    let mut client = world.client().await;
    client
        .write_all(format!("CONNECT api.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 200 "));
    // A real handshake with the right SNI, then ssh on the same tunnel.
    let tls = tls_client(client, &ca, "api.test").await.unwrap();
    let (mut raw, _) = tls.into_inner();
    raw.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await.unwrap();
    read_all(&mut raw).await;
    assert_eq!(upstream.seen().connections, 1);
    assert!(upstream.seen().requests.is_empty(), "{:?}", upstream.seen());
    world.assert_refused_code("api.test", Some(port), "not-tls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_folder_must_be_private() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::set_permissions(folder.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dns = dns();
    let policy = Policy {
        allow: Allowlist::default(),
        cap: OperatorCap::default(),
        resolver: Resolver::nameserver(dns.address()).unwrap(),
    };
    let socket: PathBuf = folder.path().join("proxy.sock");
    let error = Proxy::start(policy, &socket, Arc::new(EventSink::discard()))
        .await
        .err()
        .expect("a shared folder is refused");
    assert!(matches!(error, ProxyError::SocketFolder { .. }), "{error}");
    assert!(error.to_string().contains("mode is 755"), "{error}");
    assert!(!socket.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_closes_open_tunnels_and_removes_the_socket() {
    let upstream = Upstream::http(ip("127.0.0.2"), 0);
    let port = upstream.port();
    let world = world(&[format!("127.0.0.2:{port}")]).await;
    let mut client = world.client().await;
    client
        .write_all(format!(
            "GET http://127.0.0.2:{port}/ws HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        ).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 101 "));
    let socket = world.proxy.socket_path().to_path_buf();
    let report: EgressReport = world.proxy.stop().await;
    assert_eq!(report.destinations[0].connections, 1);
    assert_eq!(read_all(&mut client).await, "", "the open tunnel is closed");
    assert!(!socket.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_name_that_does_not_resolve_is_refused() {
    let world = world(&["missing.test:443".to_string()]).await;
    let response = world
        .exchange("CONNECT missing.test:443 HTTP/1.1\r\n\r\n")
        .await;
    assert_403(&response, "resolve-failed");
    world.assert_refused("missing.test", Some(443), "resolve-failed");
    assert!(world
        .dns
        .queries()
        .iter()
        .any(|q| q.starts_with("missing.test ")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed() {
    let upstream = Upstream::http(ip("127.0.0.2"), 0);
    let port = upstream.port();
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let world = world_with(
        &[format!("127.0.0.2:{port}")],
        OperatorCap::default(),
        limits,
    )
    .await;
    let mut client = world.client().await;
    client
        .write_all(format!(
            "GET http://127.0.0.2:{port}/ws HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        ).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut client).await.starts_with("HTTP/1.1 101 "));
    // Nothing moves either way: the proxy closes the tunnel (read_all waits 20 s at most).
    assert_eq!(read_all(&mut client).await, "");
}
