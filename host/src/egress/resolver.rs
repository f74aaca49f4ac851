//! Resolves allowed names for the proxy, once per connection.
//!
//! The proxy, not the sandbox, resolves: no DNS query from the sandbox reaches a real
//! resolver, and the address checked is the address dialed. Names are looked up as
//! fully qualified names (a trailing dot), so a search domain in the host's
//! resolv.conf never turns `api.example.com` into `api.example.com.corp.internal`.
//! Tests point the resolver at a DNS server of their own with [`Resolver::nameserver`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

/// A DNS resolver: the system's configuration, or one nameserver.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<TokioResolver>,
}

/// What hickory reports, kept as the source of a [`ResolverError`].
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a resolver could not be made or a name did not resolve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolverError {
    /// The host's resolver configuration (`/etc/resolv.conf`) could not be read.
    #[error("cannot read the system's resolver configuration: {0}")]
    SystemConfig(#[source] Cause),
    /// The resolver could not be built from its configuration.
    #[error("cannot build the resolver: {0}")]
    Build(#[source] Cause),
    /// The lookup failed (no such name, server failure, a network error).
    #[error("`{name}` did not resolve: {source}")]
    Lookup {
        /// The name looked up, without a trailing dot.
        name: String,
        /// hickory's error.
        #[source]
        source: Cause,
    },
    /// No answer within the lookup timeout (5 s, all attempts included).
    #[error("`{name}` did not resolve: no answer in time")]
    TimedOut {
        /// The name looked up, without a trailing dot.
        name: String,
    },
    /// The answer held no address.
    #[error("`{name}` did not resolve: no address")]
    NoAddress {
        /// The name looked up, without a trailing dot.
        name: String,
    },
}

/// How long one lookup may take, all attempts included.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

impl Resolver {
    /// The host's resolver configuration (`/etc/resolv.conf`, `/etc/hosts`).
    pub fn system() -> Result<Resolver, ResolverError> {
        let mut builder =
            TokioResolver::builder_tokio().map_err(|e| ResolverError::SystemConfig(e.into()))?;
        builder.options_mut().timeout = Duration::from_secs(2);
        let inner = builder
            .build()
            .map_err(|e| ResolverError::Build(e.into()))?;
        Ok(Resolver {
            inner: Arc::new(inner),
        })
    }

    /// Asks only the nameserver at `address` (UDP, then TCP for long answers); no hosts
    /// file.
    pub fn nameserver(address: SocketAddr) -> Result<Resolver, ResolverError> {
        let connections = [ConnectionConfig::udp(), ConnectionConfig::tcp()]
            .into_iter()
            .map(|mut connection| {
                connection.port = address.port();
                connection
            })
            .collect();
        let server = NameServerConfig::new(address.ip(), true, connections);
        let mut options = ResolverOpts::default();
        options.use_hosts_file = ResolveHosts::Never;
        options.timeout = Duration::from_secs(2);
        options.attempts = 1;
        let inner = TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(vec![server]),
            TokioRuntimeProvider::default(),
        )
        .with_options(options)
        .build()
        .map_err(|e| ResolverError::Build(e.into()))?;
        Ok(Resolver {
            inner: Arc::new(inner),
        })
    }

    /// The addresses of `name` (a validated DNS name without a trailing dot).
    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolverError> {
        let fqdn = format!("{name}.");
        let name = name.to_string();
        let lookup = match tokio::time::timeout(LOOKUP_TIMEOUT, self.inner.lookup_ip(fqdn)).await {
            Err(_) => return Err(ResolverError::TimedOut { name }),
            Ok(Err(e)) => {
                return Err(ResolverError::Lookup {
                    name,
                    source: e.into(),
                })
            }
            Ok(Ok(lookup)) => lookup,
        };
        let addresses: Vec<IpAddr> = lookup.iter().map(|ip| ip.to_canonical()).collect();
        if addresses.is_empty() {
            return Err(ResolverError::NoAddress { name });
        }
        Ok(addresses)
    }
}
