//! What the proxy saw: connections and bytes per destination, and the refused attempts.
//!
//! The report goes into `result.json`: what the agent tried to reach is what a security
//! reviewer wants to see. Its shape is the record's ([`EgressReport`], in
//! [`crate::record`]); the proxy counts here and fills it. A destination is the name asked for and the address dialed
//! (a name may resolve elsewhere on another connection); a refusal decided on an
//! address names it too. Refusals are counted per (destination, reason), and only the
//! first [`MAX_REFUSED_KINDS`] kinds are kept, so an agent that tries a million names
//! cannot grow the host's memory or the result without bound.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

use super::allowlist::Target;
use crate::record::{DestinationTraffic, EgressReport, RefusedAttempt};

/// Distinct refused (destination, reason) pairs kept in the report.
pub const MAX_REFUSED_KINDS: usize = 1000;

/// Live byte counters of one destination, shared by its connections.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    pub connections: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

/// The counters a running proxy updates.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    traffic: Mutex<HashMap<(String, u16, SocketAddr), Arc<Traffic>>>,
    refused: Mutex<Refused>,
}

#[derive(Debug, Default)]
struct Refused {
    kinds: HashMap<(String, Option<u16>, Option<SocketAddr>, String), u64>,
    not_listed: u64,
}

impl Ledger {
    /// Counts a connection to `target`, dialed at `address`, and returns its
    /// destination's counters.
    pub fn connection(&self, target: &Target, address: SocketAddr) -> Arc<Traffic> {
        let key = (target.host.to_string(), target.port, address);
        let traffic = self.traffic.lock().unwrap().entry(key).or_default().clone();
        traffic.connections.fetch_add(1, Ordering::Relaxed);
        traffic
    }

    pub fn refused(
        &self,
        host: &str,
        port: Option<u16>,
        address: Option<SocketAddr>,
        reason: &str,
    ) {
        let mut refused = self.refused.lock().unwrap();
        let key = (host.to_string(), port, address, reason.to_string());
        if let Some(count) = refused.kinds.get_mut(&key) {
            *count += 1;
        } else if refused.kinds.len() < MAX_REFUSED_KINDS {
            refused.kinds.insert(key, 1);
        } else {
            refused.not_listed += 1;
        }
    }

    pub fn report(&self) -> EgressReport {
        let mut destinations: Vec<_> = self
            .traffic
            .lock()
            .unwrap()
            .iter()
            .map(|((host, port, address), t)| DestinationTraffic {
                host: host.clone(),
                port: *port,
                address: address.to_string(),
                connections: t.connections.load(Ordering::Relaxed),
                bytes_up: t.bytes_up.load(Ordering::Relaxed),
                bytes_down: t.bytes_down.load(Ordering::Relaxed),
            })
            .collect();
        destinations
            .sort_by(|a, b| (&a.host, a.port, &a.address).cmp(&(&b.host, b.port, &b.address)));
        let refused = self.refused.lock().unwrap();
        let mut kinds: Vec<_> = refused
            .kinds
            .iter()
            .map(|((host, port, address, reason), attempts)| RefusedAttempt {
                host: host.clone(),
                port: *port,
                address: address.map(|a| a.to_string()),
                reason: reason.clone(),
                attempts: *attempts,
            })
            .collect();
        kinds.sort_by(|a, b| {
            (&a.host, a.port, &a.address, &a.reason).cmp(&(&b.host, b.port, &b.address, &b.reason))
        });
        EgressReport {
            destinations,
            refused: kinds,
            refused_not_listed: refused.not_listed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_and_bounded() {
        let ledger = Ledger::default();
        for _ in 0..3 {
            ledger.refused("a.test", Some(443), None, "not-allowed");
        }
        for n in 0..MAX_REFUSED_KINDS + 5 {
            ledger.refused(&format!("{n}.flood.test"), Some(1), None, "not-allowed");
        }
        let report = ledger.report();
        assert_eq!(report.refused.len(), MAX_REFUSED_KINDS);
        assert_eq!(report.refused_not_listed, 6);
        let first = report.refused.iter().find(|r| r.host == "a.test").unwrap();
        assert_eq!(first.attempts, 3);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["refused"][0].get("attempts").is_some());
        assert_eq!(json["refusedNotListed"], 6);
    }
}
