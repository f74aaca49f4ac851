//! The destinations a TaskSpec allows (`host:port`), and the destinations clients ask for.
//!
//! An entry names a port, always: an allowed host is not every service on it. A name is
//! matched exactly (case-insensitive, without a trailing dot); `*.example.com` matches
//! names below `example.com` only, never `example.com` itself, so allowing the
//! subdomains of a forge does not allow its apex by accident. IP literals match the same
//! address only; an IPv4-mapped IPv6 literal is the IPv4 address it carries. Names are
//! restricted to letters, digits, `-` and `_` in dot-separated labels, and the last label
//! may not be all digits: `2130706433` or `0x7f.1` are addresses in disguise to some
//! resolvers, never names here.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A host an allowlist entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// One name, lower-case, without a trailing dot.
    Name(String),
    /// Names strictly below this one (`*.example.com` holds `example.com`).
    Subdomains(String),
    Ip(IpAddr),
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    pub host: HostPattern,
    pub port: u16,
}

/// The host of a destination a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetHost {
    /// Lower-case, without a trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// A destination a client asks for (`CONNECT host:port`, or an absolute URI's authority).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: TargetHost,
    pub port: u16,
}

/// The destinations a task may reach. Empty allows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Destination>,
}

/// An allowlist entry that is not `host:port`. `index` is the entry's place in the list,
/// so the caller can name the field (`sandbox.egress.allow[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "[{index}] `{entry}`: {reason}; expected host:port, e.g. api.example.com:443, \
     *.example.com:443, 203.0.113.7:80 or [2001:db8::1]:443"
)]
pub struct BadDestination {
    pub index: usize,
    pub entry: String,
    pub reason: String,
}

impl Allowlist {
    /// Parses `host:port` entries; the first bad one is the error.
    pub fn parse(entries: &[String]) -> Result<Allowlist, BadDestination> {
        let entries = entries
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                Destination::parse(entry).map_err(|reason| BadDestination {
                    index,
                    entry: entry.clone(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Allowlist { entries })
    }

    pub fn entries(&self) -> &[Destination] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some entry allows `target`.
    pub fn allows(&self, target: &Target) -> bool {
        self.entries.iter().any(|entry| entry.matches(target))
    }

    /// Whether `address` itself, with its port, is listed: such an address is dialed
    /// even in a special range, because someone named it on purpose. An address listed
    /// on one port says nothing of its other ports.
    pub fn lists_address(&self, address: SocketAddr) -> bool {
        let ip = address.ip().to_canonical();
        self.entries
            .iter()
            .any(|entry| entry.host == HostPattern::Ip(ip) && entry.port == address.port())
    }

    /// Whether some entry matches a connection asked for as `target` and dialed at
    /// `address` ([`Destination::matches_connection`]).
    pub fn matches_connection(&self, target: &Target, address: SocketAddr) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.matches_connection(target, address))
    }

    /// Whether some entry naming hosts (not addresses) matches `target`.
    pub fn names(&self, target: &Target) -> bool {
        self.entries
            .iter()
            .any(|entry| !matches!(entry.host, HostPattern::Ip(_)) && entry.matches(target))
    }
}

impl Destination {
    /// Parses `host:port`; the error says what is wrong.
    pub fn parse(entry: &str) -> Result<Destination, String> {
        let target = Target::parse(entry.strip_prefix("*.").unwrap_or(entry))?;
        let host = match (entry.starts_with("*."), target.host) {
            (false, TargetHost::Name(name)) => HostPattern::Name(name),
            (true, TargetHost::Name(name)) => HostPattern::Subdomains(name),
            (false, TargetHost::Ip(ip)) => HostPattern::Ip(ip),
            (true, TargetHost::Ip(_)) => {
                return Err("`*.` goes before a DNS name, not an address".into());
            }
        };
        Ok(Destination {
            host,
            port: target.port,
        })
    }

    pub fn matches(&self, target: &Target) -> bool {
        self.port == target.port
            && match (&self.host, &target.host) {
                (HostPattern::Name(name), TargetHost::Name(asked)) => name == asked,
                (HostPattern::Subdomains(parent), TargetHost::Name(asked)) => {
                    is_below(asked, parent)
                }
                (HostPattern::Ip(ip), TargetHost::Ip(asked)) => ip == asked,
                _ => false,
            }
    }

    /// Whether this entry matches a connection asked for as `target` and dialed at
    /// `address`: an entry naming hosts is matched against the name asked for, an entry
    /// naming an address against the address dialed; the port always counts.
    pub fn matches_connection(&self, target: &Target, address: SocketAddr) -> bool {
        match &self.host {
            HostPattern::Ip(ip) => {
                *ip == address.ip().to_canonical() && self.port == address.port()
            }
            HostPattern::Name(_) | HostPattern::Subdomains(_) => self.matches(target),
        }
    }

    /// Whether every target `other` matches, this matches too.
    pub fn covers(&self, other: &Destination) -> bool {
        self.port == other.port
            && match (&self.host, &other.host) {
                (HostPattern::Subdomains(parent), HostPattern::Subdomains(child)) => {
                    child == parent || is_below(child, parent)
                }
                (_, HostPattern::Subdomains(_)) => false,
                (_, HostPattern::Name(name)) => self.matches(&Target {
                    host: TargetHost::Name(name.clone()),
                    port: other.port,
                }),
                (_, HostPattern::Ip(ip)) => self.matches(&Target {
                    host: TargetHost::Ip(*ip),
                    port: other.port,
                }),
            }
    }

    /// Whether some target matches both.
    pub fn overlaps(&self, other: &Destination) -> bool {
        self.covers(other) || other.covers(self)
    }
}

impl Target {
    /// Parses an authority, `host:port` (`[v6]:port` for IPv6).
    pub fn parse(authority: &str) -> Result<Target, String> {
        let (host, port) = split_host_port(authority)?;
        let port = parse_port(port)?;
        Ok(Target {
            host: TargetHost::parse(host)?,
            port,
        })
    }
}

impl TargetHost {
    /// Parses a host: an IPv4 literal, a bracketed IPv6 literal or a DNS name.
    pub fn parse(host: &str) -> Result<TargetHost, String> {
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6
                .parse::<std::net::Ipv6Addr>()
                .map(|ip| TargetHost::Ip(IpAddr::V6(ip).to_canonical()))
                .map_err(|_| format!("`{v6}` is not an IPv6 address"));
        }
        if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
            return Ok(TargetHost::Ip(IpAddr::V4(ip)));
        }
        if host.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err("an IPv6 address goes in brackets: [2001:db8::1]:443".into());
        }
        validate_name(host).map(TargetHost::Name)
    }

    /// The host as a URI authority writes it (IPv6 in brackets).
    pub fn authority_form(&self) -> String {
        match self {
            TargetHost::Name(name) => name.clone(),
            TargetHost::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            TargetHost::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for TargetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.authority_form())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => write!(f, "{name}:{}", self.port),
            HostPattern::Subdomains(parent) => write!(f, "*.{parent}:{}", self.port),
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            HostPattern::Ip(ip) => write!(f, "{ip}:{}", self.port),
        }
    }
}

fn is_below(name: &str, parent: &str) -> bool {
    name.len() > parent.len() + 1
        && name.ends_with(parent)
        && name.as_bytes()[name.len() - parent.len() - 1] == b'.'
}

fn split_host_port(authority: &str) -> Result<(&str, &str), String> {
    if authority.starts_with('[') {
        let close = authority
            .find(']')
            .ok_or("an IPv6 address needs its closing `]`")?;
        let port = authority[close + 1..]
            .strip_prefix(':')
            .ok_or("the port is missing (host:port)")?;
        return Ok((&authority[..=close], port));
    }
    authority
        .rsplit_once(':')
        .ok_or_else(|| "the port is missing (host:port)".to_string())
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() {
        return Err("the port is missing (host:port)".into());
    }
    let digits_only = port.bytes().all(|b| b.is_ascii_digit()) && !port.starts_with('0');
    match port.parse::<u16>() {
        Ok(port) if digits_only => Ok(port),
        _ => Err(format!("`{port}` is not a port (1-65535)")),
    }
}

fn validate_name(host: &str) -> Result<String, String> {
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name.is_empty() {
        return Err("the host is missing".into());
    }
    if name.len() > 253 {
        return Err("a DNS name has at most 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "`{host}` is not a DNS name (labels of 1 to 63 characters)"
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "`{host}` is not a DNS name (letters, digits, `-` and `_` only; `*.` only at the start)"
            ));
        }
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        return Err(format!(
            "`{host}` is neither a DNS name nor an IPv4 address"
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn target(authority: &str) -> Target {
        Target::parse(authority).unwrap()
    }

    #[test]
    fn names_match_exactly_and_with_their_port() {
        let allow = list(&["API.Example.com:443"]);
        assert!(allow.allows(&target("api.example.com:443")));
        assert!(allow.allows(&target("api.EXAMPLE.com.:443")));
        assert!(!allow.allows(&target("api.example.com:80")));
        assert!(!allow.allows(&target("example.com:443")));
        assert!(!allow.allows(&target("x.api.example.com:443")));
        assert!(!allow.allows(&target("api.example.com.evil.test:443")));
    }

    #[test]
    fn a_wildcard_matches_subdomains_only() {
        let allow = list(&["*.example.com:443"]);
        assert!(allow.allows(&target("a.example.com:443")));
        assert!(allow.allows(&target("a.b.example.com:443")));
        assert!(!allow.allows(&target("example.com:443")));
        assert!(!allow.allows(&target("badexample.com:443")));
        assert!(!allow.allows(&target("a.example.com:444")));
    }

    #[test]
    fn addresses_match_the_same_address_only() {
        let allow = list(&["127.0.0.2:8080", "[2001:db8::1]:443"]);
        assert!(allow.allows(&target("127.0.0.2:8080")));
        assert!(allow.allows(&target("[::ffff:127.0.0.2]:8080")));
        assert!(allow.allows(&target("[2001:DB8:0::1]:443")));
        assert!(!allow.allows(&target("127.0.0.3:8080")));
        assert!(!allow.allows(&target("[2001:db8::2]:443")));
        assert!(allow.lists_address("127.0.0.2:8080".parse().unwrap()));
        assert!(allow.lists_address("[::ffff:127.0.0.2]:8080".parse().unwrap()));
        assert!(!allow.lists_address("127.0.0.1:8080".parse().unwrap()));
        // Listed on one port, not on the others.
        assert!(!allow.lists_address("127.0.0.2:8081".parse().unwrap()));
    }

    #[test]
    fn names_match_the_name_and_addresses_the_address_dialed() {
        let cap = list(&["evil.test:47602", "*.corp.test:443", "127.0.0.6:47602"]);
        let dialed = |s: &str| s.parse::<SocketAddr>().unwrap();
        // A name entry holds whatever the name resolves to.
        assert!(cap.matches_connection(&target("evil.test:47602"), dialed("8.8.8.8:47602")));
        assert!(cap.matches_connection(&target("a.corp.test:443"), dialed("8.8.8.8:443")));
        // An address entry holds any name resolving to it, on its port only.
        assert!(cap.matches_connection(&target("other.test:47602"), dialed("127.0.0.6:47602")));
        assert!(cap.matches_connection(
            &target("other.test:47602"),
            dialed("[::ffff:127.0.0.6]:47602")
        ));
        assert!(!cap.matches_connection(&target("other.test:47603"), dialed("127.0.0.6:47603")));
        assert!(!cap.matches_connection(&target("other.test:47602"), dialed("127.0.0.7:47602")));
        assert!(cap.names(&target("evil.test:47602")));
        assert!(!cap.names(&target("127.0.0.6:47602")));
    }

    #[test]
    fn bad_entries_say_which_and_why() {
        let entries = ["ok.test:1", "nope"].map(String::from);
        let error = Allowlist::parse(&entries).unwrap_err();
        assert_eq!(error.index, 1);
        assert!(error.to_string().contains("port is missing"), "{error}");
        for (entry, why) in [
            ("host:0", "not a port"),
            ("host:65536", "not a port"),
            ("host:+80", "not a port"),
            ("host:080", "not a port"),
            ("::1:443", "brackets"),
            ("2001:db8::1:443", "brackets"),
            ("[::1:443", "closing"),
            ("[nope]:443", "not an IPv6"),
            ("*.10.0.0.1:80", "not an address"),
            ("a*.example.com:443", "not a DNS name"),
            ("*:443", "not a DNS name"),
            ("exa mple.com:443", "not a DNS name"),
            ("2130706433:80", "neither"),
            ("0x7f.1:80", "neither"),
            (":443", "host is missing"),
        ] {
            let error = Destination::parse(entry).unwrap_err();
            assert!(error.contains(why), "{entry}: {error}");
        }
    }

    #[test]
    fn covering_and_overlapping() {
        let d = |s: &str| Destination::parse(s).unwrap();
        assert!(d("*.x.com:443").covers(&d("a.x.com:443")));
        assert!(d("*.x.com:443").covers(&d("*.a.x.com:443")));
        assert!(!d("*.x.com:443").covers(&d("x.com:443")));
        assert!(!d("a.x.com:443").covers(&d("*.x.com:443")));
        assert!(d("a.x.com:443").overlaps(&d("*.x.com:443")));
        assert!(!d("a.x.com:443").overlaps(&d("*.x.com:80")));
    }
}
