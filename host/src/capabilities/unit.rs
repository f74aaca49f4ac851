//! The one trait every host capability implements, and the name handle the rest of
//! the host uses for one.
//!
//! The runtime, the engine and `gc` reach a capability only through
//! [`HostCapability`]: they link what it links, parse and show the scope it shapes,
//! keep the per-run and per-store state it makes, ask it which host objects it
//! created and let it reclaim what a dead run left, or what a run whose provider's
//! `destroy` failed still holds. None of them names a capability, so adding one is a
//! new folder under `capabilities/` and a line in the list that makes [`super::ALL`]
//! and [`super::add_to_linker`] (docs/adding-a-host-capability.md). Its errors are
//! typed ([`HostSectionError`], [`ReclaimError`], [`UnknownCapability`]) and keep the
//! capability's own error as their source.

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use serde_yaml::Value;
use wasmtime::component::Linker;

use super::scope::ScopeShape;
use super::view::{PluginStore, StoreSetup, StoreState};
use super::RunContext;

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
    /// Links its interfaces into the one linker every plugin is instantiated with,
    /// its host traits implemented for [`PluginView`](super::PluginView) and reached
    /// through [`PluginStore::plugin_view`]. Whether a plugin may import them is
    /// decided at load from its grant. Generic over the store data, so called on the
    /// concrete unit only (by [`super::add_to_linker`], from the one list).
    fn add_to_linker<T: PluginStore>(&self, linker: &mut Linker<T>) -> wasmtime::Result<()>
    where
        Self: Sized;
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
    ) -> Result<Option<(Vec<String>, String)>, HostSectionError> {
        Ok(None)
    }
    /// What it keeps for one run, made when the run's context is (`section`: its
    /// host-wide section, when the operator wrote one).
    fn run_state(&self, _section: Option<&Value>) -> Option<Arc<dyn Any + Send + Sync>> {
        None
    }
    /// What it keeps for one plugin store, made with the store (the `process`
    /// capability's process groups); found again in the [`PluginView`](super::PluginView)'s
    /// `states` by its type. `None`: it keeps nothing per store.
    fn store_state(&self, _store: &StoreSetup<'_>) -> Option<Box<dyn StoreState>> {
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
    fn reap_run(&self, _run_id: &str, _dry_run: bool) -> Option<Result<Reclaimed, ReclaimError>> {
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
pub type DeleteLeft<'a> = futures_util::future::BoxFuture<'a, Result<Reclaimed, ReclaimError>>;

/// Any error, kept with its sources, that a capability's own code returns through
/// this trait (its scope readers, its clients).
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a capability's host-wide section of `grants.yaml` does not read
/// ([`HostCapability::read_host_section`]); shown as the capability's reader says it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct HostSectionError(Cause);

impl HostSectionError {
    /// The section does not read, for `cause`.
    pub fn new(cause: impl Into<Cause>) -> HostSectionError {
        HostSectionError(cause.into())
    }
}

/// Why a capability did not reclaim everything of a run
/// ([`HostCapability::reap_run`], [`HostCapability::delete_left`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReclaimError {
    /// Removing what it made of the run (its `kind`, plural: `cgroups`) failed.
    #[error("removing its {kind}: {source}")]
    Removing {
        /// What it made, plural (`cgroups`).
        kind: &'static str,
        /// The capability's own error.
        #[source]
        source: Cause,
    },
    /// Some of what it held was not deleted: one entry per object, naming it and why.
    #[error("{}", .failures.join("; "))]
    NotDeleted {
        /// One line per object not deleted: its name and why.
        failures: Vec<String>,
    },
}

/// A capability name this host does not have ([`Capability`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability {name:?}; expected one of {}", NAMES.join(", "))]
pub struct UnknownCapability {
    /// The name as given.
    pub name: String,
}

/// What a capability reclaimed of a dead run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// What they are, plural (`cgroups`): the key in `gc --json`.
    pub kind: &'static str,
    /// The objects removed (or, on a dry run, that would be), by name.
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

    /// The capability's implementation.
    pub fn unit(self) -> &'static dyn HostCapability {
        super::ALL[self.0 as usize]
    }

    /// Its name in `grants.yaml`, `--grant` and messages ([`HostCapability::name`]).
    pub fn name(self) -> &'static str {
        self.unit().name()
    }

    /// What it lets a plugin do, in a few words ([`HostCapability::summary`]).
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
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, UnknownCapability> {
        Capability::named(s).ok_or_else(|| UnknownCapability {
            name: s.to_string(),
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
