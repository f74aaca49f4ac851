//! The operator scope of `http`: the hosts requests may go to, `http: {hosts: [HOST]}`
//! or the older `hosts: [HOST]` beside `capabilities`; `--grant NAME=http:HOST`. With
//! none listed a plugin reaches nothing, built-in or not (a built-in's hosts are in its
//! built-in grant).

use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use super::HostAllowlist;
use crate::capabilities::scope::{
    mapping, typed_entry, Base, EntryError, Scope, ScopeError, ScopeShape,
};

/// `http:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpEntry {
    #[serde(default)]
    hosts: Vec<String>,
}

impl Scope for HostAllowlist {
    fn shown(&self) -> serde_json::Value {
        serde_json::json!({ "hosts": self.entries() })
    }
    crate::scope_any!();
}

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["hosts"]
    }

    fn base(&self, _base: Base) -> Arc<dyn Scope> {
        Arc::new(HostAllowlist::default())
    }

    fn narrowed(&self, _scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: HttpEntry = typed_entry("http", entry)?;
        let hosts = HostAllowlist::parse(&e.hosts).map_err(|e| ScopeError {
            key: "hosts".into(),
            message: e.to_string(),
        })?;
        Ok(Arc::new(hosts))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// `http:HOST`: one more host.
    fn add_flag_item(&self, host: &str, entry: &mut Value) -> Result<(), EntryError> {
        HostAllowlist::parse(&[host]).map_err(EntryError::capability)?;
        push_hosts(entry, vec![Value::String(host.to_string())]);
        Ok(())
    }

    /// Only the host (and explicit port) of `url`.
    fn entry_of_url(&self, url: &str) -> Option<Result<Value, EntryError>> {
        Some(
            HostAllowlist::of_url(url)
                .map(|hosts| {
                    let mut entry = Value::Null;
                    push_hosts(
                        &mut entry,
                        hosts.entries().iter().cloned().map(Value::String).collect(),
                    );
                    entry
                })
                .map_err(EntryError::capability),
        )
    }

    fn legacy_key(&self) -> Option<&'static str> {
        Some("hosts")
    }

    fn read_legacy(&self, value: Value, entry: &mut Value) -> Result<(), EntryError> {
        let hosts: Vec<String> = serde_yaml::from_value(value)?;
        push_hosts(entry, hosts.into_iter().map(Value::String).collect());
        Ok(())
    }
}

fn push_hosts(entry: &mut Value, hosts: Vec<Value>) {
    let list = mapping(entry)
        .entry("hosts".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if let Value::Sequence(list) = list {
        list.extend(hosts);
    }
}
