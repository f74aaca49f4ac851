//! One entry of a TaskSpec's egress allowlist (`sandbox.egress.allow`): a `host:port`,
//! and the `host:port` a client asks for, parsed by the same rules.
//!
//! The TaskSpec is checked when it is read, before anything runs, so the syntax of an
//! entry is the TaskSpec's; what an entry lets through is the egress proxy's
//! (`egress`), which matches what clients ask for against these entries.
//!
//! An entry names a port, always: an allowed host is not every service on it. A name is
//! kept lower-case, without a trailing dot; `*.example.com` stands for the names below
//! `example.com` only. An IPv4-mapped IPv6 literal is the IPv4 address it carries. Names
//! are restricted to letters, digits, `-` and `_` in dot-separated labels, and the last
//! label may not be all digits: `2130706433` or `0x7f.1` are addresses in disguise to
//! some resolvers, never names here.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A host an allowlist entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// One name, lower-case, without a trailing dot.
    Name(String),
    /// Names strictly below this one (`*.example.com` holds `example.com`).
    Subdomains(String),
    /// One address; an IPv4-mapped IPv6 address is kept as its IPv4 address.
    Ip(IpAddr),
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// The host or hosts the entry allows.
    pub host: HostPattern,
    /// The one port allowed on them.
    pub port: u16,
}

/// The host of a destination a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetHost {
    /// Lower-case, without a trailing dot.
    Name(String),
    /// An address literal; an IPv4-mapped IPv6 address is kept as its IPv4 address.
    Ip(IpAddr),
}

/// A destination a client asks for (`CONNECT host:port`, or an absolute URI's authority).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The name or address asked for.
    pub host: TargetHost,
    /// The port asked for.
    pub port: u16,
}

/// What is wrong with a `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DestinationError {
    /// A `*.` wildcard is put before an IP address.
    #[error("`*.` goes before a DNS name, not an address")]
    WildcardAddress,
    /// A `[` opens an IPv6 address that no `]` closes.
    #[error("an IPv6 address needs its closing `]`")]
    UnclosedBracket,
    /// There is no `:port`, or it is empty.
    #[error("the port is missing (host:port)")]
    MissingPort,
    /// The port (carried) is not a number from 1 to 65535 without leading zeros.
    #[error("`{0}` is not a port (1-65535)")]
    BadPort(String),
    /// The text in brackets (carried) is not an IPv6 address.
    #[error("`{0}` is not an IPv6 address")]
    BadIpv6(String),
    /// An IPv6 address is written without brackets.
    #[error("an IPv6 address goes in brackets: [2001:db8::1]:443")]
    UnbracketedIpv6,
    /// The host before `:port` is empty.
    #[error("the host is missing")]
    MissingHost,
    /// The name is longer than 253 characters.
    #[error("a DNS name has at most 253 characters")]
    NameTooLong,
    /// A label of the host (carried) is empty or longer than 63 characters.
    #[error("`{0}` is not a DNS name (labels of 1 to 63 characters)")]
    BadLabelLength(String),
    /// A label of the host (carried) has a character other than letters, digits, `-` and `_`,
    /// or starts or ends with `-`.
    #[error("`{0}` is not a DNS name (letters, digits, `-` and `_` only; `*.` only at the start)")]
    BadLabel(String),
    /// The host's last label (host carried) is all digits or starts with `0x`: an address in
    /// disguise, not a name.
    #[error("`{0}` is neither a DNS name nor an IPv4 address")]
    NumericName(String),
}

impl Destination {
    /// Parses `host:port`; the error says what is wrong.
    pub fn parse(entry: &str) -> Result<Destination, DestinationError> {
        let target = Target::parse(entry.strip_prefix("*.").unwrap_or(entry))?;
        let host = match (entry.starts_with("*."), target.host) {
            (false, TargetHost::Name(name)) => HostPattern::Name(name),
            (true, TargetHost::Name(name)) => HostPattern::Subdomains(name),
            (false, TargetHost::Ip(ip)) => HostPattern::Ip(ip),
            (true, TargetHost::Ip(_)) => return Err(DestinationError::WildcardAddress),
        };
        Ok(Destination {
            host,
            port: target.port,
        })
    }
}

impl Target {
    /// Parses an authority, `host:port` (`[v6]:port` for IPv6).
    pub fn parse(authority: &str) -> Result<Target, DestinationError> {
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
    pub fn parse(host: &str) -> Result<TargetHost, DestinationError> {
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6
                .parse::<Ipv6Addr>()
                .map(|ip| TargetHost::Ip(IpAddr::V6(ip).to_canonical()))
                .map_err(|_| DestinationError::BadIpv6(v6.to_string()));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(TargetHost::Ip(IpAddr::V4(ip)));
        }
        if host.parse::<Ipv6Addr>().is_ok() {
            return Err(DestinationError::UnbracketedIpv6);
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

fn split_host_port(authority: &str) -> Result<(&str, &str), DestinationError> {
    if authority.starts_with('[') {
        let close = authority
            .find(']')
            .ok_or(DestinationError::UnclosedBracket)?;
        let port = authority[close + 1..]
            .strip_prefix(':')
            .ok_or(DestinationError::MissingPort)?;
        return Ok((&authority[..=close], port));
    }
    authority
        .rsplit_once(':')
        .ok_or(DestinationError::MissingPort)
}

fn parse_port(port: &str) -> Result<u16, DestinationError> {
    if port.is_empty() {
        return Err(DestinationError::MissingPort);
    }
    let digits_only = port.bytes().all(|b| b.is_ascii_digit()) && !port.starts_with('0');
    match port.parse::<u16>() {
        Ok(port) if digits_only => Ok(port),
        _ => Err(DestinationError::BadPort(port.to_string())),
    }
}

fn validate_name(host: &str) -> Result<String, DestinationError> {
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name.is_empty() {
        return Err(DestinationError::MissingHost);
    }
    if name.len() > 253 {
        return Err(DestinationError::NameTooLong);
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(DestinationError::BadLabelLength(host.to_string()));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(DestinationError::BadLabel(host.to_string()));
        }
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        return Err(DestinationError::NumericName(host.to_string()));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_entries_say_why() {
        for (entry, why) in [
            ("nope", "port is missing"),
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
            let error = Destination::parse(entry).unwrap_err().to_string();
            assert!(error.contains(why), "{entry}: {error}");
        }
    }

    #[test]
    fn entries_are_kept_in_one_spelling() {
        let d = |s: &str| Destination::parse(s).unwrap();
        assert_eq!(
            d("API.Example.com.:443").host,
            HostPattern::Name("api.example.com".into())
        );
        assert_eq!(
            d("*.Example.com:443").host,
            HostPattern::Subdomains("example.com".into())
        );
        assert_eq!(d("[::ffff:127.0.0.2]:80").to_string(), "127.0.0.2:80");
        assert_eq!(d("[2001:DB8::1]:443").to_string(), "[2001:db8::1]:443");
    }
}
