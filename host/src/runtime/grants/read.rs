//! Reading `grants.yaml`: which keys a plugin entry and the file may have comes from
//! the capabilities (a scope key per scoped capability, a host-wide section per
//! capability that has one), so the file is read by hand rather than derived. Each
//! key's value is read inside the YAML parser, so an unknown key names its line.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use serde::de::{DeserializeSeed, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_yaml::{Mapping, Value};

use super::{Grant, Grants};
use crate::capabilities::scope::ScopeShape;
use crate::capabilities::Capability;

/// A mapping whose keys must be among `fields`, kept as written.
struct Keys(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Keys {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Keys {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a mapping of {}", self.0.join(", "))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Mapping::new();
        while let Some(key) = map.next_key::<String>()? {
            if !self.0.contains(&key.as_str()) {
                return Err(A::Error::unknown_field(&key, self.0));
            }
            out.insert(Value::String(key), map.next_value()?);
        }
        Ok(Value::Mapping(out))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Mapping(Mapping::new()))
    }
}

/// `later` laid over `earlier`: lists are joined, anything else replaced.
fn merge(earlier: &mut Value, later: Value) {
    let (Value::Mapping(earlier), Value::Mapping(later)) = (&mut *earlier, &later) else {
        *earlier = later;
        return;
    };
    for (key, value) in later {
        match (earlier.get_mut(key), value) {
            (Some(Value::Sequence(list)), Value::Sequence(more)) => list.extend(more.clone()),
            (_, value) => {
                earlier.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Whether a value says anything (`[]`, `{}` and `null` do not).
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

/// The capability whose older key `key` is.
fn legacy(key: &str) -> Option<(Capability, &'static dyn ScopeShape)> {
    Capability::all().find_map(|c| {
        let shape = c.unit().scope()?;
        (shape.legacy_key() == Some(key)).then_some((c, shape))
    })
}

/// The keys of a plugin entry, for messages.
static ENTRY_FIELDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut fields = vec!["capabilities", "version", "digest"];
    for c in Capability::all() {
        if let Some(shape) = c.unit().scope() {
            fields.push(c.name());
            fields.extend(shape.legacy_key());
        }
    }
    fields
});

impl<'de> Deserialize<'de> for Grant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Grant, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = Grant;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a plugin's grant: capabilities, version, digest and scopes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Grant, A::Error> {
                let mut grant = Grant::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "capabilities" => grant.capabilities = map.next_value()?,
                        "version" => grant.version = map.next_value()?,
                        "digest" => grant.digest = map.next_value()?,
                        name => {
                            let scoped =
                                Capability::named(name).and_then(|c| Some((c, c.unit().scope()?)));
                            if let Some((capability, shape)) = scoped {
                                let entry = map.next_value_seed(Keys(shape.fields()))?;
                                let written = grant.scopes.entry(capability).or_insert(Value::Null);
                                merge(written, entry);
                            } else if let Some((capability, shape)) = legacy(name) {
                                let value: Value = map.next_value()?;
                                if !is_empty(&value) {
                                    grant.legacy.push((key.clone(), capability));
                                }
                                let written = grant.scopes.entry(capability).or_insert(Value::Null);
                                shape
                                    .read_legacy(value, written)
                                    .map_err(A::Error::custom)?;
                            } else {
                                return Err(A::Error::unknown_field(name, &ENTRY_FIELDS));
                            }
                        }
                    }
                }
                Ok(grant)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Grant, E> {
                Ok(Grant::default())
            }
        }
        deserializer.deserialize_map(Entry)
    }
}

/// The file's `egress:` section: the operator's cap on TaskSpecs' egress allowlists.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EgressSection {
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    only: Option<Vec<String>>,
    #[serde(default)]
    nameserver: Option<std::net::SocketAddr>,
}

/// An entry of `egress.deny` or `egress.only` that is not a destination; serde carries
/// it on as text, with the line.
#[derive(Debug, thiserror::Error)]
#[error("egress.{key}{source}")]
struct EgressSectionError {
    key: &'static str,
    #[source]
    source: crate::egress::BadDestination,
}

impl EgressSection {
    fn into_grants(self) -> Result<super::EgressGrants, EgressSectionError> {
        let list = |key: &'static str, entries: &[String]| {
            crate::egress::Allowlist::parse(entries)
                .map_err(|source| EgressSectionError { key, source })
        };
        Ok(super::EgressGrants {
            cap: crate::egress::OperatorCap {
                never: list("deny", &self.deny)?,
                only: self
                    .only
                    .as_deref()
                    .map(|only| list("only", only))
                    .transpose()?,
            },
            nameserver: self.nameserver,
        })
    }
}

/// The top-level keys of the file, for messages.
static FILE_FIELDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut fields = vec!["plugins", "workspaces", "mounts", "egress", "marketplace"];
    fields.extend(
        Capability::all()
            .filter(|c| c.unit().host_section_fields().is_some())
            .map(Capability::name),
    );
    fields
});

impl<'de> Deserialize<'de> for Grants {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Grants, D::Error> {
        struct File;
        impl<'de> Visitor<'de> for File {
            type Value = Grants;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a grants file: plugins, workspaces, mounts and host-wide sections")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Grants, A::Error> {
                let mut grants = Grants::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "plugins" => {
                            grants.plugins = map
                                .next_value::<Option<BTreeMap<String, Grant>>>()?
                                .unwrap_or_default()
                        }
                        "workspaces" => grants.workspaces = map.next_value()?,
                        "mounts" => grants.mounts = map.next_value()?,
                        "egress" => {
                            grants.egress = map
                                .next_value::<EgressSection>()?
                                .into_grants()
                                .map_err(A::Error::custom)?
                        }
                        "marketplace" => grants.marketplace = map.next_value()?,
                        name => {
                            let section = Capability::named(name)
                                .and_then(|c| Some((c, c.unit().host_section_fields()?)));
                            let Some((capability, fields)) = section else {
                                return Err(A::Error::unknown_field(name, &FILE_FIELDS));
                            };
                            let value = map.next_value_seed(Keys(fields))?;
                            capability
                                .unit()
                                .read_host_section(&value)
                                .map_err(|e| A::Error::custom(format!("{name}: {e}")))?;
                            grants.sections.insert(capability, value);
                        }
                    }
                }
                Ok(grants)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Grants, E> {
                Ok(Grants::default())
            }
        }
        deserializer.deserialize_map(File)
    }
}
