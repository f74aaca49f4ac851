//! Address ranges the proxy never dials unless the allowlist names the exact address.
//!
//! A name the TaskSpec allows may resolve anywhere, and its owner controls that: an
//! allowed name answering 127.0.0.1, 10.x or 169.254.169.254 would turn the proxy
//! into a way to the host's own services, the local network or the cloud metadata
//! endpoint. The list follows the IANA special-purpose registries; IPv6 forms that
//! embed an IPv4 address (mapped, compatible, NAT64, 6to4) are refused or checked as
//! the IPv4 address they carry.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// Why an address is not a public destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialRange {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: the host itself.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`: the local network.
    Private,
    /// `169.254/16` (cloud metadata among it), `fe80::/10`, `fec0::/10`.
    LinkLocal,
    /// `100.64.0.0/10`, carrier-grade NAT.
    SharedAddressSpace,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Other special-purpose blocks (`240/4`, `192.0.0/24`, IPv4-compatible `::/96`,
    /// `2001::/23`, ...).
    Reserved,
    /// IPv6 forms that carry or translate to another address (NAT64, 6to4, Teredo).
    Translation,
}

impl fmt::Display for SpecialRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpecialRange::Unspecified => "unspecified",
            SpecialRange::Loopback => "loopback",
            SpecialRange::Private => "private",
            SpecialRange::LinkLocal => "link-local (incl. cloud metadata)",
            SpecialRange::SharedAddressSpace => "shared address space (CGNAT)",
            SpecialRange::Documentation => "documentation",
            SpecialRange::Benchmarking => "benchmarking",
            SpecialRange::Multicast => "multicast",
            SpecialRange::Broadcast => "broadcast",
            SpecialRange::Reserved => "reserved",
            SpecialRange::Translation => "IPv6 translation",
        })
    }
}

const V4_RANGES: &[(&str, SpecialRange)] = &[
    ("0.0.0.0/8", SpecialRange::Unspecified),
    ("10.0.0.0/8", SpecialRange::Private),
    ("100.64.0.0/10", SpecialRange::SharedAddressSpace),
    ("127.0.0.0/8", SpecialRange::Loopback),
    ("169.254.0.0/16", SpecialRange::LinkLocal),
    ("172.16.0.0/12", SpecialRange::Private),
    ("192.0.0.0/24", SpecialRange::Reserved),
    ("192.0.2.0/24", SpecialRange::Documentation),
    ("192.88.99.0/24", SpecialRange::Reserved),
    ("192.168.0.0/16", SpecialRange::Private),
    ("198.18.0.0/15", SpecialRange::Benchmarking),
    ("198.51.100.0/24", SpecialRange::Documentation),
    ("203.0.113.0/24", SpecialRange::Documentation),
    ("224.0.0.0/4", SpecialRange::Multicast),
    ("255.255.255.255/32", SpecialRange::Broadcast),
    ("240.0.0.0/4", SpecialRange::Reserved),
];

const V6_RANGES: &[(&str, SpecialRange)] = &[
    ("::/128", SpecialRange::Unspecified),
    ("::1/128", SpecialRange::Loopback),
    // IPv4-compatible (deprecated): carries an IPv4 address without saying which.
    ("::/96", SpecialRange::Reserved),
    ("64:ff9b::/96", SpecialRange::Translation),
    ("64:ff9b:1::/48", SpecialRange::Translation),
    ("100::/64", SpecialRange::Reserved),
    ("2001::/23", SpecialRange::Reserved),
    ("2001:db8::/32", SpecialRange::Documentation),
    ("2002::/16", SpecialRange::Translation),
    ("3fff::/20", SpecialRange::Documentation),
    ("fc00::/7", SpecialRange::Private),
    ("fe80::/10", SpecialRange::LinkLocal),
    ("fec0::/10", SpecialRange::LinkLocal),
    ("ff00::/8", SpecialRange::Multicast),
];

/// The special range `ip` is in, or `None` for a public address.
pub fn special_range(ip: IpAddr) -> Option<SpecialRange> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => special_v4(v4),
            None => special_v6(v6),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<SpecialRange> {
    V4_RANGES.iter().find_map(|(net, range)| {
        let net: Ipv4Net = net.parse().expect("valid IPv4 range");
        net.contains(&ip).then_some(*range)
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<SpecialRange> {
    V6_RANGES.iter().find_map(|(net, range)| {
        let net: Ipv6Net = net.parse().expect("valid IPv6 range");
        net.contains(&ip).then_some(*range)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(s: &str) -> Option<SpecialRange> {
        special_range(s.parse().unwrap())
    }

    #[test]
    fn refuses_every_special_range_the_task_names() {
        for (ip, expected) in [
            ("127.0.0.1", SpecialRange::Loopback),
            ("127.255.1.2", SpecialRange::Loopback),
            ("10.1.2.3", SpecialRange::Private),
            ("172.16.0.1", SpecialRange::Private),
            ("172.31.255.255", SpecialRange::Private),
            ("192.168.1.1", SpecialRange::Private),
            ("169.254.169.254", SpecialRange::LinkLocal),
            ("100.64.0.1", SpecialRange::SharedAddressSpace),
            ("100.127.255.255", SpecialRange::SharedAddressSpace),
            ("0.0.0.0", SpecialRange::Unspecified),
            ("255.255.255.255", SpecialRange::Broadcast),
            ("224.0.0.251", SpecialRange::Multicast),
            ("192.0.2.1", SpecialRange::Documentation),
            ("198.51.100.7", SpecialRange::Documentation),
            ("203.0.113.9", SpecialRange::Documentation),
            ("198.18.0.1", SpecialRange::Benchmarking),
            ("::1", SpecialRange::Loopback),
            ("::", SpecialRange::Unspecified),
            ("fc00::1", SpecialRange::Private),
            ("fd12:3456::1", SpecialRange::Private),
            ("fe80::1", SpecialRange::LinkLocal),
            ("ff02::1", SpecialRange::Multicast),
            ("2001:db8::1", SpecialRange::Documentation),
            ("::ffff:127.0.0.1", SpecialRange::Loopback),
            ("::ffff:169.254.169.254", SpecialRange::LinkLocal),
            ("::ffff:10.0.0.1", SpecialRange::Private),
            ("64:ff9b::a9fe:a9fe", SpecialRange::Translation),
            ("2002:a9fe:a9fe::1", SpecialRange::Translation),
            ("::127.0.0.1", SpecialRange::Reserved),
        ] {
            assert_eq!(range(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(range(ip), None, "{ip}");
        }
    }
}
