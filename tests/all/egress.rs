//! `sandbox.egress`: the only way out of a sandbox is the host's egress proxy.
//!
//! Each test runs a real TaskSpec through the `agentgate` binary. Hermetic: the
//! upstream listens on 127.0.0.3 of the host, the proxy resolves names with a DNS
//! server of the test's own (grants.yaml `egress.nameserver`), and the allowlist
//! lists that exact loopback address too, since the proxy refuses loopback otherwise.
//! The agent's attempts are proved to have run (files it wrote), then checked on the
//! host: what the upstream and the DNS server saw, and the run's `result.json`.

use std::net::IpAddr;

use crate::support::dns::TestDns;
use crate::support::upstream::Upstream;
use crate::support::{docker_ready, shell_agent, stderr, task_spec, Home, DOCKER_TEST_IMAGE};

/// An upstream on the host and a DNS server that knows it as `api.test`.
struct World {
    upstream: Upstream,
    dns: TestDns,
    home: Home,
    workspace: tempfile::TempDir,
}

const UPSTREAM_IP: &str = "127.0.0.3";

impl World {
    fn new() -> World {
        let ip: IpAddr = UPSTREAM_IP.parse().unwrap();
        let upstream = Upstream::http(ip, 5);
        let dns = TestDns::start(&[("api.test", ip), ("other.test", ip)]);
        let home = Home::new();
        std::fs::write(
            home.dir.path().join("grants.yaml"),
            format!("egress:\n  nameserver: \"{}\"\n", dns.address()),
        )
        .unwrap();
        World {
            upstream,
            dns,
            home,
            workspace: tempfile::tempdir().unwrap(),
        }
    }

    /// The TaskSpec: `provider` with `sandbox_extra` lines, egress to `api.test` only
    /// (on the upstream's port, and on 443, a privileged port the sandbox's relay must
    /// still listen on).
    fn spec(&self, provider: &str, sandbox_extra: &str, script: &str) -> String {
        let port = self.upstream.port();
        let execution = format!(
            "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: {provider}\n{sandbox_extra}  egress:\n    allow: [\"api.test:{port}\", \"{UPSTREAM_IP}:{port}\", \"api.test:443\"]\n{}",
            self.workspace.path().display(),
            shell_agent(script)
        );
        task_spec("egress", "reach the allowed host", &execution)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.workspace.path().join(name))
            .unwrap_or_else(|e| panic!("the agent wrote no {name}: {e}"))
    }

    fn requests(&self) -> Vec<String> {
        self.upstream.seen().requests
    }
}

/// What the agent tries: the proxy variables, a client that ignores them, a raw IP,
/// a name that is not allowed, and a DNS query to the host's loopback. Each result
/// goes to a file, so the test knows the attempt ran.
fn attempts(port: u16, dns_port: u16) -> String {
    format!(
        "curl -sS -m 10 -o via-proxy.txt -w '%{{http_code}}' http://api.test:{port}/via-proxy > via-proxy.code 2>&1 || echo failed > via-proxy.code\n\
         curl -sS -m 10 --noproxy '*' -o transparent.txt -w '%{{http_code}}' http://api.test:{port}/transparent > transparent.code 2>&1 || echo failed > transparent.code\n\
         curl -sS -m 5 --noproxy '*' http://{UPSTREAM_IP}:{port}/raw-ip > raw-ip.txt 2>&1 && echo reached >> raw-ip.txt || echo refused >> raw-ip.txt\n\
         curl -sS -m 5 --noproxy '*' http://other.test:{port}/other-name > other-name.txt 2>&1 && echo reached >> other-name.txt || echo refused >> other-name.txt\n\
         printf '\\022\\064\\001\\000\\000\\001\\000\\000\\000\\000\\000\\000\\004leak\\004test\\000\\000\\001\\000\\001' > /tmp/query\n\
         (bash -c 'cat /tmp/query > /dev/udp/127.0.0.1/{dns_port}' && echo sent || echo unsent) > udp.txt 2>&1\n\
         (bash -c 'cat /tmp/query > /dev/udp/8.8.8.8/53' && echo sent || echo unsent) >> udp.txt 2>&1\n\
         env | grep -i _proxy | sort > proxy-env.txt\n\
         echo done > done.txt\n"
    )
}

/// The checks after [`attempts`] ran in a sandbox with egress.
fn assert_only_the_allowed_destination_was_reached(world: &World) {
    assert_eq!(world.file("done.txt").trim(), "done");
    // Through the proxy variables, and with them ignored (the sandbox's /etc/hosts
    // names api.test to a relay that opens the tunnel itself).
    assert_eq!(
        world.file("via-proxy.code").trim(),
        "200",
        "{}",
        world.file("via-proxy.code")
    );
    assert_eq!(world.file("via-proxy.txt"), "xxxxx");
    assert_eq!(
        world.file("transparent.code").trim(),
        "200",
        "{}",
        world.file("transparent.code")
    );
    assert_eq!(world.file("transparent.txt"), "xxxxx");
    // A raw IP and a name that is not allowed reach nothing.
    assert!(
        world.file("raw-ip.txt").ends_with("refused\n"),
        "{}",
        world.file("raw-ip.txt")
    );
    assert!(
        world.file("other-name.txt").ends_with("refused\n"),
        "{}",
        world.file("other-name.txt")
    );
    let requests = world.requests();
    let reached = |path: &str| requests.iter().any(|r| r.contains(path));
    assert!(
        reached("/via-proxy") && reached("/transparent"),
        "{requests:?}"
    );
    assert!(
        !reached("/raw-ip") && !reached("/other-name"),
        "{requests:?}"
    );
    // UDP to the host's DNS server never arrives (the sandbox's 127.0.0.1 is its own).
    assert!(
        !world
            .dns
            .queries()
            .iter()
            .any(|q| q.starts_with("leak.test")),
        "{:?}",
        world.dns.queries()
    );
    assert!(world
        .file("proxy-env.txt")
        .contains("HTTPS_PROXY=http://127.0.0.1:3128"));
    // The proxy's account in result.json.
    let result = world.home.result();
    let egress = &result["egress"];
    let destinations = egress["destinations"].as_array().unwrap();
    let api = destinations
        .iter()
        .find(|d| d["host"] == "api.test")
        .unwrap_or_else(|| panic!("{egress:#}"));
    assert_eq!(api["connections"], 2, "{egress:#}");
    assert!(api["bytesDown"].as_u64().unwrap() > 0, "{egress:#}");
}

#[test]
fn a_subprocess_sandbox_reaches_only_the_allowed_destination_through_the_proxy() {
    let world = World::new();
    let script = attempts(world.upstream.port(), world.dns.address().port());
    let output = world.home.run_spec(&world.spec("subprocess", "", &script));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_only_the_allowed_destination_was_reached(&world);
    // The host lets the relays of the sandbox's own network namespace listen on low
    // ports: `api.test:443` has its relay too, so no name is left to the proxy
    // variables alone.
    assert!(
        !world
            .home
            .log("stderr.log")
            .contains("is reachable through the proxy variables only"),
        "{}",
        world.home.log("stderr.log")
    );
}

#[test]
fn egress_with_network_none_or_provider_none_is_refused_before_the_run() {
    let world = World::new();
    for (provider, extra, expected) in [
        ("subprocess", "  network: none\n", "needs `network: bridge`"),
        ("subprocess", "  network: host\n", "needs `network: bridge`"),
        ("none", "", "provider `none`"),
    ] {
        let output = world
            .home
            .run_spec(&world.spec(provider, extra, "echo ran > ran.txt\n"));
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("sandbox.egress") && message.contains(expected),
            "{message}"
        );
        assert!(!world.workspace.path().join("ran.txt").exists());
    }
}

/// The same attempts with busybox's `nc` in a container (its `wget` crashes in the
/// test image): the request through the proxy goes to the address `http_proxy`
/// names, the others straight to the name or address. The container has no network
/// but loopback; the relays run in its first process.
fn busybox_attempts(port: u16) -> String {
    let request = |target: &str| {
        format!(
            "printf 'GET {target} HTTP/1.1\\r\\nHost: api.test:{port}\\r\\nConnection: close\\r\\n\\r\\n' | nc -w 10"
        )
    };
    format!(
        "proxy=$(echo $http_proxy | sed 's,^http://,,; s,:, ,')\n\
         {} $proxy > via-proxy.txt 2>&1\n\
         {} api.test {port} > transparent.txt 2>&1\n\
         {} {UPSTREAM_IP} {port} > raw-ip.txt 2>&1 && echo reached >> raw-ip.txt || echo refused >> raw-ip.txt\n\
         {} other.test {port} > other-name.txt 2>&1 && echo reached >> other-name.txt || echo refused >> other-name.txt\n\
         env | grep -i _proxy | sort > proxy-env.txt\n\
         echo done > done.txt\n",
        request(&format!("http://api.test:{port}/via-proxy")),
        request("/transparent"),
        request("/raw-ip"),
        request("/other-name"),
    )
}

#[test]
fn a_docker_sandbox_reaches_only_the_allowed_destination_through_the_proxy() {
    if !docker_ready() {
        return;
    }
    let world = World::new();
    let script = busybox_attempts(world.upstream.port());
    let output = world.home.run_spec(&world.spec(
        "docker",
        &format!("  image: {DOCKER_TEST_IMAGE}\n"),
        &script,
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(world.file("done.txt").trim(), "done");
    for file in ["via-proxy.txt", "transparent.txt"] {
        let response = world.file(file);
        assert!(
            response.starts_with("HTTP/1.1 200 ") && response.ends_with("xxxxx"),
            "{file}: {response:?}"
        );
    }
    for file in ["raw-ip.txt", "other-name.txt"] {
        let response = world.file(file);
        assert!(response.ends_with("refused\n"), "{file}: {response:?}");
    }
    let requests = world.requests();
    let reached = |path: &str| requests.iter().any(|r| r.contains(path));
    assert!(
        reached("/via-proxy") && reached("/transparent"),
        "{requests:?}"
    );
    assert!(
        !reached("/raw-ip") && !reached("/other-name"),
        "{requests:?}"
    );
    assert!(world
        .file("proxy-env.txt")
        .contains("http_proxy=http://127.0.0.1:3128"));
    let result = world.home.result();
    let isolation = result["sandbox"]["isolation"].as_str().unwrap_or_default();
    assert!(
        isolation.contains("enforced by the host: loopback only"),
        "{isolation}"
    );
    let api = result["egress"]["destinations"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["host"] == "api.test").cloned())
        .unwrap_or_else(|| panic!("{result:#}"));
    assert_eq!(api["connections"], 2, "{api:#}");
}

#[test]
fn an_allowlist_beyond_the_operators_cap_is_refused_before_the_run() {
    let world = World::new();
    let grants = world.home.dir.path().join("grants.yaml");
    let mut text = std::fs::read_to_string(&grants).unwrap();
    text.push_str("  deny: [\"*.test:443\"]\n");
    std::fs::write(&grants, text).unwrap();
    let output = world
        .home
        .run_spec(&world.spec("subprocess", "", "echo ran > ran.txt\n"));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("sandbox.egress.allow")
            && message.contains("`api.test:443`")
            && message.contains("*.test:443"),
        "{message}"
    );
    assert!(!world.workspace.path().join("ran.txt").exists());
    assert!(
        !world.home.dir.path().join("runs").exists()
            || std::fs::read_dir(world.home.dir.path().join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
}
