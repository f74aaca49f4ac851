//! The egress proxy's account of a run, as `result.json` carries it: what the agent
//! connected to and what it was refused. The proxy (`egress`) counts and fills it; the
//! record owns its shape, so the result and its schema need not know the proxy.

use serde::{Deserialize, Serialize};

/// The proxy's account of a run, for `result.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressReport {
    /// Allowed destinations that were connected to, sorted.
    pub destinations: Vec<DestinationTraffic>,
    /// Refused attempts, sorted.
    pub refused: Vec<RefusedAttempt>,
    /// Refused attempts of kinds beyond the kept ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused_not_listed: u64,
}

/// Traffic to one allowed destination: a host and port asked for, at one address dialed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestinationTraffic {
    /// The host asked for (a name or an address).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// The address the proxy dialed (`ip:port`); empty in results of earlier
    /// agentgates.
    #[serde(default)]
    pub address: String,
    /// Connections opened to it.
    pub connections: u64,
    /// Bytes sent from the sandbox to the destination.
    pub bytes_up: u64,
    /// Bytes sent from the destination to the sandbox.
    pub bytes_down: u64,
}

/// Refused attempts of one kind: the same destination refused for the same reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefusedAttempt {
    /// The host asked for; empty when the request named none.
    pub host: String,
    /// The port asked for; absent when the request named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The address (`ip:port`) the refusal was decided on, when the host had been
    /// resolved (the operator's cap on addresses, special addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Why the proxy refused, a short code such as `not-allowed`, `operator-denied`,
    /// `special-address` or `resolve-failed`.
    pub reason: String,
    /// How many times this was refused.
    pub attempts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
