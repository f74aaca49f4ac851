//! What a run's proxy enforces: the TaskSpec's allowlist, inside the operator's cap.
//!
//! The TaskSpec's author may be another team or a script, so the operator can cap what
//! it allows in `grants.yaml`: destinations a TaskSpec may never allow, or the only ones
//! it may. [`OperatorCap::check`] refuses a TaskSpec that asks for more (before the run,
//! with the entry named); the proxy checks the cap again on every connection, so a
//! mistake in one place does not open the other.

use super::allowlist::{Allowlist, Destination, Target};
use super::resolver::Resolver;

/// Everything the proxy needs to decide.
#[derive(Clone)]
pub struct Policy {
    /// The TaskSpec's `sandbox.egress.allow`.
    pub allow: Allowlist,
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
    #[error("[{index}] `{entry}` is refused by the operator (grants.yaml never allows `{never}`)")]
    Never {
        index: usize,
        entry: String,
        never: String,
    },
    #[error(
        "[{index}] `{entry}` is outside what the operator allows (grants.yaml allows only {only})"
    )]
    NotOnly {
        index: usize,
        entry: String,
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

    /// Whether the cap lets a connection to `target` through.
    pub fn permits(&self, target: &Target) -> bool {
        !self.never.allows(target) && self.only.as_ref().is_none_or(|only| only.allows(target))
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
        assert!(!cap.permits(&Target::parse("secrets.corp.test:443").unwrap()));
        assert!(cap.permits(&Target::parse("secrets.corp.test:80").unwrap()));
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
        assert!(!cap.permits(&Target::parse("other.test:443").unwrap()));
    }
}
