//! The destinations a TaskSpec allows (`host:port`), matched against the destinations
//! clients ask for. Both are written and parsed as the TaskSpec's allowlist entries are
//! ([`crate::taskspec::Destination`]); what they let through is decided here.
//!
//! An entry names a port, always: an allowed host is not every service on it. A name is
//! matched exactly (case-insensitive, without a trailing dot); `*.example.com` matches
//! names below `example.com` only, never `example.com` itself, so allowing the
//! subdomains of a forge does not allow its apex by accident. IP literals match the same
//! address only; an IPv4-mapped IPv6 literal is the IPv4 address it carries.

use std::net::SocketAddr;

use crate::taskspec::DestinationError;
pub use crate::taskspec::{Destination, HostPattern, Target, TargetHost};

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
    /// The entry's place in the list, from 0.
    pub index: usize,
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: DestinationError,
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

    /// The entries, in the order written.
    pub fn entries(&self) -> &[Destination] {
        &self.entries
    }

    /// Whether there are no entries, so nothing is allowed.
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
    /// Whether this entry allows `target`: same port, and the same name, a name below a
    /// `*.` entry's, or the same address.
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

fn is_below(name: &str, parent: &str) -> bool {
    name.len() > parent.len() + 1
        && name.ends_with(parent)
        && name.as_bytes()[name.len() - parent.len() - 1] == b'.'
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
        assert_eq!(error.reason, DestinationError::MissingPort);
        assert!(error.to_string().contains("port is missing"), "{error}");
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
