//! What a run's proxy enforces: the TaskSpec's allowlist, inside the operator's cap.
//!
//! The TaskSpec's author may be another team or a script, so the operator can cap what
//! it allows in `grants.yaml`: destinations a TaskSpec may never allow, or the only ones
//! it may. [`OperatorCap::check`] refuses a TaskSpec that asks for more (before the run,
//! with the entry named); the proxy checks the cap again on every connection, and that
//! check is the one that holds: a name's owner decides where it resolves, so the check
//! before the run, on names, cannot know the addresses. Per connection, cap entries
//! naming hosts are matched against the name asked for and entries naming addresses
//! against the address the proxy dials (after resolution), with the port in both.

use std::net::SocketAddr;

use super::allowlist::{Allowlist, Destination, Target};
use super::resolver::Resolver;

/// Everything the proxy needs to decide.
#[derive(Clone)]
pub struct Policy {
    /// The TaskSpec's `sandbox.egress.allow`.
    pub allow: Allowlist,
    /// The operator's cap from `grants.yaml`, checked again on every connection.
    pub cap: OperatorCap,
    /// Resolves allowed names, once per connection.
    pub resolver: Resolver,
}

/// The operator's limits on what a TaskSpec may allow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorCap {
    /// Destinations no TaskSpec may allow (an entry overlapping one is refused).
    pub never: Allowlist,
    /// When set, every TaskSpec entry must lie within one of these.
    pub only: Option<Allowlist>,
}

/// A TaskSpec entry the operator's cap does not permit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapViolation {
    /// An entry overlaps one of the cap's `never` entries.
    #[error("[{index}] `{entry}` is refused by the operator (grants.yaml never allows `{never}`)")]
    Never {
        /// The entry's place in `sandbox.egress.allow`, from 0.
        index: usize,
        /// The TaskSpec's entry.
        entry: String,
        /// The `never` entry it overlaps.
        never: String,
    },
    #[error(
        "[{index}] `{entry}` is outside what the operator allows (grants.yaml allows only {only})"
    )]
    /// The cap has an `only` list and no entry of it covers this entry.
    NotOnly {
        /// The entry's place in `sandbox.egress.allow`, from 0.
        index: usize,
        /// The TaskSpec's entry.
        entry: String,
        /// The `only` entries, listed for the message.
        only: String,
    },
}

impl OperatorCap {
    /// Refuses the first entry of `allow` the cap does not permit.
    pub fn check(&self, allow: &Allowlist) -> Result<(), CapViolation> {
        for (index, entry) in allow.entries().iter().enumerate() {
            if let Some(never) = self.never.entries().iter().find(|n| n.overlaps(entry)) {
                return Err(CapViolation::Never {
                    index,
                    entry: entry.to_string(),
                    never: never.to_string(),
                });
            }
            if let Some(only) = &self.only {
                if !only.entries().iter().any(|o| o.covers(entry)) {
                    return Err(CapViolation::NotOnly {
                        index,
                        entry: entry.to_string(),
                        only: list_text(only.entries()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether a `never` entry naming hosts refuses `target` already by its name, so the
    /// proxy need not even resolve it.
    pub fn refuses_name(&self, target: &Target) -> bool {
        self.never.names(target)
    }

    /// Whether the cap lets a connection asked for as `target` and dialed at `address`
    /// through: no `never` entry matches it, and (when `only` is set) an `only` entry
    /// does ([`Allowlist::matches_connection`]).
    pub fn permits(&self, target: &Target, address: SocketAddr) -> bool {
        !self.never.matches_connection(target, address)
            && self
                .only
                .as_ref()
                .is_none_or(|only| only.matches_connection(target, address))
    }
}

fn list_text(entries: &[Destination]) -> String {
    if entries.is_empty() {
        return "nothing".into();
    }
    entries
        .iter()
        .map(|e| format!("`{e}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn never_refuses_overlapping_entries() {
        let cap = OperatorCap {
            never: list(&["secrets.corp.test:443"]),
            only: None,
        };
        assert!(cap.check(&list(&["api.test:443"])).is_ok());
        let error = cap
            .check(&list(&["api.test:443", "*.corp.test:443"]))
            .unwrap_err();
        assert!(
            matches!(error, CapViolation::Never { index: 1, .. }),
            "{error}"
        );
        let public = |port| SocketAddr::from(([8, 8, 8, 8], port));
        let secrets = |port| Target::parse(&format!("secrets.corp.test:{port}")).unwrap();
        assert!(cap.refuses_name(&secrets(443)));
        assert!(!cap.permits(&secrets(443), public(443)));
        assert!(!cap.refuses_name(&secrets(80)));
        assert!(cap.permits(&secrets(80), public(80)));
    }

    #[test]
    fn never_holds_the_address_dialed_whatever_the_name() {
        let cap = OperatorCap {
            never: list(&["127.0.0.6:47602", "11.22.33.44:47602"]),
            only: None,
        };
        let evil = Target::parse("evil.example.test:47602").unwrap();
        // The names pass the check before the run: they name no denied address.
        assert!(cap.check(&list(&["evil.example.test:47602"])).is_ok());
        assert!(!cap.refuses_name(&evil));
        assert!(!cap.permits(&evil, "127.0.0.6:47602".parse().unwrap()));
        assert!(!cap.permits(&evil, "11.22.33.44:47602".parse().unwrap()));
        assert!(!cap.permits(&evil, "[::ffff:11.22.33.44]:47602".parse().unwrap()));
        let other_port = Target::parse("evil.example.test:47603").unwrap();
        assert!(cap.permits(&other_port, "127.0.0.6:47603".parse().unwrap()));
    }

    #[test]
    fn only_requires_every_entry_inside() {
        let cap = OperatorCap {
            never: Allowlist::default(),
            only: Some(list(&["*.forge.test:443", "api.test:443"])),
        };
        assert!(cap
            .check(&list(&["a.forge.test:443", "api.test:443"]))
            .is_ok());
        let error = cap.check(&list(&["forge.test:443"])).unwrap_err();
        assert!(error.to_string().contains("allows only"), "{error}");
        assert!(cap.check(&list(&["api.test:80"])).is_err());
        let anywhere = SocketAddr::from(([8, 8, 8, 8], 443));
        assert!(!cap.permits(&Target::parse("other.test:443").unwrap(), anywhere));
        assert!(cap.permits(&Target::parse("a.forge.test:443").unwrap(), anywhere));
        // An address entry permits that address, whatever name led there.
        let cap = OperatorCap {
            never: Allowlist::default(),
            only: Some(list(&["203.0.113.7:443"])),
        };
        let listed = SocketAddr::from(([203, 0, 113, 7], 443));
        assert!(cap.permits(&Target::parse("203.0.113.7:443").unwrap(), listed));
        assert!(!cap.permits(&Target::parse("203.0.113.8:443").unwrap(), anywhere));
    }
}
