//! The one trait every host capability implements, and the name handle the rest of
//! the host uses for one.
//!
//! The runtime, the engine and the registry reach a capability only through
//! [`HostCapability`]: they link what it links, parse and show the scope it shapes,
//! keep the per-run state it makes, ask it which host objects it created and let it
//! reclaim what a dead run left, or what a run whose provider's `destroy` failed
//! still holds. None of them names a capability, so adding one is a
//! new folder under `capabilities/` and a line in [`super::ALL`]
//! (docs/adding-a-host-capability.md).

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use serde_yaml::Value;
use wasmtime::component::Linker;

use super::scope::ScopeShape;
use super::RunContext;
use crate::runtime::PluginState;

/// One host capability: a WIT interface (or a few) a plugin must be granted.
pub trait HostCapability: Sync {
    /// Its name in `grants.yaml`, `--grant` and messages (`docker`).
    fn name(&self) -> &'static str;
    /// What it lets a plugin do, in a few words.
    fn summary(&self) -> &'static str;
    /// The WIT interfaces that are this capability, without version
    /// (`agentgate:plugin/docker`); importing any of them needs the grant.
    fn interfaces(&self) -> &'static [&'static str];
    /// Interfaces it links that grant nothing by themselves, with what they give
    /// (`wasi:http/types`, whose requests only `outgoing-handler` can send).
    fn free_interfaces(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Links its interfaces into the one linker every plugin is instantiated with.
    /// Whether a plugin may import them is decided at load from its grant.
    fn add_to_linker(&self, linker: &mut Linker<PluginState>) -> wasmtime::Result<()>;
    /// The shape of its operator scope; `None`: the grant alone says everything.
    fn scope(&self) -> Option<&'static dyn ScopeShape> {
        None
    }
    /// The keys of its host-wide section of `grants.yaml` (the top-level key named as
    /// the capability), which holds whichever plugin calls it; `None`: it has none.
    fn host_section_fields(&self) -> Option<&'static [&'static str]> {
        None
    }
    /// Reads its host-wide section (its keys already checked): the folders it names
    /// that belong to the top-level `mounts:` (an older spelling kept working), with
    /// the warning to print, or why it does not read.
    fn read_host_section(
        &self,
        _section: &Value,
    ) -> Result<Option<(Vec<String>, String)>, crate::capabilities::scope::EntryError> {
        Ok(None)
    }
    /// What it keeps for one run, made when the run's context is (`section`: its
    /// host-wide section, when the operator wrote one).
    fn run_state(&self, _section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        None
    }
    /// Host paths no TaskSpec may name and no sandbox may bind, whatever the operator
    /// allows, with why (`docker`: the engine's local socket).
    fn guarded_paths(&self) -> Vec<(PathBuf, &'static str)> {
        Vec::new()
    }
    /// The kind of host object `id` is when this capability created it for the run
    /// (`container`), so the run's record can name it.
    fn host_object(&self, _run: &RunContext, _id: &str) -> Option<&'static str> {
        None
    }
    /// Reclaims what the dead run `run_id` left behind that only this capability
    /// knows how to find, and says what it removed; `dry_run`: only what it would look
    /// for. Called by `gc`; `None`: it leaves nothing of its own.
    fn reap_run(&self, _run_id: &str, _dry_run: bool) -> Option<Result<Reclaimed, String>> {
        None
    }
    /// Deletes what this capability made for the live run `run` and still holds (its
    /// per-run state knows it), without the plugin that asked for it, and says what it
    /// removed. Called by the engine when the provider's `destroy` failed, timed out or
    /// trapped, before it reaps through a fresh instance of the provider; bounded by
    /// the engine. `None`: it holds nothing of the run's that outlives the plugin.
    fn delete_left<'a>(&self, _run: &'a RunContext) -> Option<DeleteLeft<'a>> {
        None
    }
}

/// What [`HostCapability::delete_left`] returns: the deletion, to be awaited.
pub type DeleteLeft<'a> = futures_util::future::BoxFuture<'a, Result<Reclaimed, String>>;

/// What a capability reclaimed of a dead run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// What they are, plural (`cgroups`): the key in `gc --json`.
    pub kind: &'static str,
    pub names: Vec<String>,
}

/// A capability by name: a handle on one entry of [`super::ALL`], ordered as listed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability(u8);

impl Capability {
    /// Every capability this host has, in [`super::ALL`]'s order.
    pub fn all() -> impl Iterator<Item = Capability> {
        (0..super::ALL.len()).map(|i| Capability(i as u8))
    }

    /// The capability called `name`.
    pub fn named(name: &str) -> Option<Capability> {
        Capability::all().find(|c| c.name() == name)
    }

    /// The capability whose interface `interface` (without version) is.
    pub fn of_interface(interface: &str) -> Option<Capability> {
        Capability::all().find(|c| c.unit().interfaces().contains(&interface))
    }

    pub fn unit(self) -> &'static dyn HostCapability {
        super::ALL[self.0 as usize]
    }

    pub fn name(self) -> &'static str {
        self.unit().name()
    }

    pub fn summary(self) -> &'static str {
        self.unit().summary()
    }
}

/// Every capability's name, for messages and serde.
static NAMES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| Capability::all().map(Capability::name).collect());

impl fmt::Debug for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Capability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Capability::named(s).ok_or_else(|| {
            format!(
                "unknown capability {s:?}; expected one of {}",
                NAMES.join(", ")
            )
        })
    }
}

impl serde::Serialize for Capability {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Capability {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Capability;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a capability name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Capability, E> {
                Capability::named(name).ok_or_else(|| E::unknown_variant(name, NAMES.as_slice()))
            }
        }
        deserializer.deserialize_str(Name)
    }
}
