//! The host's egress proxy: the only way out of a sandbox whose TaskSpec allows a
//! list of destinations (`sandbox.egress.allow`).
//!
//! A sandbox with an egress allowlist has no route but loopback; its clients reach this
//! proxy through a Unix socket bound into it. The proxy speaks the HTTP/1.1 proxy
//! protocol only (`CONNECT host:port` and absolute-form `GET http://host:port/...`)
//! and decides every connection itself, because nothing inside the sandbox can be
//! trusted to:
//!
//! - the destination `host:port` must be in the [`Allowlist`] and within the operator's
//!   [`OperatorCap`] ([`Policy`]);
//! - a name is resolved once, by the proxy's own [`Resolver`]; addresses in loopback,
//!   private, link-local (cloud metadata), multicast and other special ranges are
//!   refused unless that exact address is listed with that port, and the proxy dials the address it
//!   resolved, so a second answer (DNS rebinding) never matters;
//! - the operator's cap is decided per connection on what is dialed: its entries naming
//!   hosts on the name asked for, its entries naming addresses on the resolved address,
//!   with the port ([`OperatorCap::permits`]);
//! - the first bytes of a tunnel must name the same host: a TLS ClientHello's SNI, or
//!   a plain HTTP request's `Host` (module `sniff`); after them every HTTP request is
//!   checked too, `h2c` is refused, and a TLS tunnel must stay TLS records (module
//!   `guard`);
//! - every decision is an `egress` event, and [`EgressReport`] counts connections and
//!   bytes per destination and the refused attempts, for `result.json`.
//!
//! A run starts and stops its proxy through [`RunGate`] (module `run_gate`), which
//! also writes the name files its containers bind. The module does not create the
//! sandbox's side (relays, DNS responder, proxy variables): the sandbox providers wire
//! those to [`Proxy::socket_path`].

mod address;
mod allowlist;
mod guard;
mod policy;
mod proxy;
mod report;
mod request;
mod resolver;
mod run_gate;
mod sniff;

pub use crate::record::{DestinationTraffic, EgressReport, RefusedAttempt};
pub use address::SpecialRange;
pub use allowlist::{Allowlist, BadDestination, Destination, HostPattern, Target, TargetHost};
pub use policy::{CapViolation, OperatorCap, Policy};
pub use proxy::{Limits, Proxy, ProxyError};
pub use resolver::{Resolver, ResolverError};
pub use run_gate::{
    check_cap, CapRefusal, GateError, GateGrants, RunGate, Stopped, HOSTS_NAME, RESOLV_CONF,
    RESOLV_CONF_NAME, SOCKET_NAME,
};
