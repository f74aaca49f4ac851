//! The operator's marketplace settings: the `marketplace:` section of
//! `$AGENTGATE_HOME/grants.yaml`, the file only the operator writes.
//!
//! They bound what a registry may make this host do (how large a component it
//! downloads, how long any request may take) and how fresh a signed revocation list
//! must be, as TUF's timestamp role: a list signed longer ago than
//! `revocationsExpireAfter` is refused, so a registry (or a mirror) that keeps serving
//! an old list cannot hide a newer revocation for longer than that.
//!
//! The section is read here, with the rest of the file, so that reading grants needs
//! nothing of the marketplace; `crate::marketplace` re-exports [`MarketSettings`].

use std::time::Duration;

use serde::Deserialize;

use crate::taskspec::{format_duration, parse_bytes, parse_duration};

/// The largest component installed unless the operator says otherwise.
pub const DEFAULT_MAX_COMPONENT_SIZE: u64 = 256 << 20;
/// How long one request to a registry may take, from connecting to its last byte.
pub const DEFAULT_REGISTRY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long ago a revocation list may have been signed.
pub const DEFAULT_REVOCATIONS_EXPIRE_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// `marketplace:` in grants.yaml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarketSettings {
    /// The most bytes a component layer may declare (and be); a larger one is refused
    /// before it is downloaded.
    pub max_component_size: u64,
    /// The bound on each request to a registry, connect to last byte.
    pub registry_timeout: Duration,
    /// A revocation list signed longer ago than this is refused.
    pub revocations_expire_after: Duration,
    /// When set, every key trusted for a namespace installed from must serve a
    /// revocation list there: a missing one fails closed rather than meaning "nothing
    /// revoked".
    pub require_revocation_lists: bool,
}

impl Default for MarketSettings {
    fn default() -> Self {
        MarketSettings {
            max_component_size: DEFAULT_MAX_COMPONENT_SIZE,
            registry_timeout: DEFAULT_REGISTRY_TIMEOUT,
            revocations_expire_after: DEFAULT_REVOCATIONS_EXPIRE_AFTER,
            require_revocation_lists: false,
        }
    }
}

/// The section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Section {
    #[serde(default)]
    max_component_size: Option<String>,
    #[serde(default)]
    registry_timeout: Option<String>,
    #[serde(default)]
    revocations_expire_after: Option<String>,
    #[serde(default)]
    require_revocation_lists: bool,
}

impl<'de> Deserialize<'de> for MarketSettings {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let section = Option::<Section>::deserialize(deserializer)?;
        let Some(section) = section else {
            return Ok(MarketSettings::default());
        };
        let defaults = MarketSettings::default();
        // serde's errors are text: the message is written into the one it carries.
        let field = |key: &str, message: &dyn std::fmt::Display| {
            D::Error::custom(format!("marketplace.{key}: {message}"))
        };
        let max_component_size = match section.max_component_size {
            None => defaults.max_component_size,
            Some(text) => parse_bytes(&text).map_err(|e| field("maxComponentSize", &e))?,
        };
        let registry_timeout = match section.registry_timeout {
            None => defaults.registry_timeout,
            Some(text) => parse_duration(&text).map_err(|e| field("registryTimeout", &e))?,
        };
        let revocations_expire_after = match section.revocations_expire_after {
            None => defaults.revocations_expire_after,
            Some(text) => {
                let age = parse_duration(&text).map_err(|e| field("revocationsExpireAfter", &e))?;
                if age < Duration::from_secs(60) {
                    return Err(field(
                        "revocationsExpireAfter",
                        &format_args!(
                            "\"{text}\" is shorter than a publisher can re-sign a list; expected 1m or more (e.g. \"7d\")"
                        ),
                    ));
                }
                age
            }
        };
        Ok(MarketSettings {
            max_component_size,
            registry_timeout,
            revocations_expire_after,
            require_revocation_lists: section.require_revocation_lists,
        })
    }
}

impl MarketSettings {
    /// `revocationsExpireAfter 7d`, for messages.
    pub fn expiry_text(&self) -> String {
        format_duration(self.revocations_expire_after)
    }

    /// `registryTimeout` (the bound on each registry request), for messages.
    pub fn timeout_text(&self) -> String {
        format_duration(self.registry_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<MarketSettings, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn settings_are_read_with_defaults_and_checked() {
        assert_eq!(read("null").unwrap(), MarketSettings::default());
        let s = read("maxComponentSize: 8Mi\nregistryTimeout: 5s\nrevocationsExpireAfter: 2d\nrequireRevocationLists: true").unwrap();
        assert_eq!(s.max_component_size, 8 << 20);
        assert_eq!(s.registry_timeout, Duration::from_secs(5));
        assert_eq!(s.revocations_expire_after, Duration::from_secs(2 * 86_400));
        assert!(s.require_revocation_lists);
        let e = read("maxComponentSize: lots").unwrap_err().to_string();
        assert!(e.contains("marketplace.maxComponentSize"), "{e}");
        let e = read("revocationsExpireAfter: 10s").unwrap_err().to_string();
        assert!(e.contains("revocationsExpireAfter"), "{e}");
        let e = read("maxSize: 1Mi").unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
    }
}
