//! `http` as a host capability: `wasi:http/outgoing-handler`, for drivers that call a
//! model API themselves, to the hosts of its scope ([`super::scope`]) only.

use wasmtime::component::Linker;

use crate::capabilities::scope::ScopeShape;
use crate::capabilities::HostCapability;
use crate::capabilities::{PluginStore, StoreSetup, StoreState};

pub struct Http;

impl HostCapability for Http {
    fn name(&self) -> &'static str {
        "http"
    }
    fn summary(&self) -> &'static str {
        "outbound HTTP(S) requests to the hosts of its grant"
    }
    fn interfaces(&self) -> &'static [&'static str] {
        &["wasi:http/outgoing-handler"]
    }
    fn free_interfaces(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "wasi:http/types",
            "nothing by itself: HTTP request and response types (sending needs capability http)",
        )]
    }
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()> {
        super::add_to_linker(linker)
    }
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        Some(&super::scope::Shape)
    }
    /// The store's `wasi:http` context and the policy every request it sends runs
    /// under (none, without the grant).
    fn store_state(&self, store: &StoreSetup<'_>) -> Option<Box<dyn StoreState>> {
        Some(Box::new(super::HttpStore::new(store)))
    }
}
