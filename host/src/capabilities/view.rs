//! What a host call sees of the plugin's store, and what each capability keeps in it.
//!
//! The store's data is the runtime's (`runtime::PluginState`: WASI, limits, the
//! plugin's stdio), and the runtime sits above the capabilities, so no capability can
//! name it. As wasmtime-wasi does with `WasiView` and its `WasiCtxView`, the store
//! data instead hands each host call a view: [`PluginStore::plugin_view`] borrows the
//! resource table, the plugin's name and scopes, the run and the capabilities' own
//! per-store state, and every capability implements its generated `Host` traits for
//! [`PluginView`] and links them with that getter ([`HasPluginView`]). The runtime's
//! store then names no capability: what one keeps per store (the `process`
//! capability's process groups, the `http` capability's `wasi:http` context and
//! policy) lives in [`StoreStates`], a slot per type made by
//! [`super::HostCapability::store_state`] and found by the capability that made it.
//!
//! `wit` maps no WIT resource to a host type (it is a leaf: the generated types are
//! bindgen's empty placeholders), so a capability keeps its own type in the table and
//! converts the handle at the boundary with [`TableAs`]; the table checks the stored
//! type on every access, so a handle of another kind is an error, never a confusion.

use std::any::Any;
use std::sync::Arc;

use wasmtime::component::{HasData, Resource, ResourceTable, ResourceTableError};

use super::scope::{ScopeDenial, Scopes};
use super::RunContext;

/// The store data of every plugin: what lets a capability's host calls see their
/// [`PluginView`]. The runtime's store data implements it.
pub trait PluginStore: Send + 'static {
    /// The part of the store a host call sees.
    fn plugin_view(&mut self) -> PluginView<'_>;
}

/// What a host call sees of the plugin's store. The shared parts are handles of their
/// own (an `Arc` each, as cheap as a borrow to hand out), so a call may keep one
/// across an `.await` while it changes the table.
pub struct PluginView<'a> {
    /// The store's resources (executions, pods, `wasi:http` bodies).
    pub table: &'a mut ResourceTable,
    /// The plugin's name, for messages and events.
    pub plugin: Arc<str>,
    /// How far each capability reaches for this plugin (see [`super::scope`]).
    pub scopes: Arc<Scopes>,
    /// The run the plugin is working for.
    pub run: Arc<RunContext>,
    /// Each capability's own state in this store.
    pub states: &'a mut StoreStates,
}

impl PluginView<'_> {
    /// The calling capability's state in this store; a trap if the store has none,
    /// which no store made by [`StoreStates::new`] lacks.
    pub(crate) fn state<S: StoreState>(&self) -> wasmtime::Result<&S> {
        self.states.get::<S>().ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "the plugin's store has no {}",
                std::any::type_name::<S>()
            ))
        })
    }

    /// Reports a call outside the plugin's scope as a `denied` event of the run, and
    /// returns the `denied` error the plugin gets.
    pub(crate) fn scope_denied(&self, denial: ScopeDenial) -> crate::wit::types::Error {
        crate::wit::types::Error::Denied(denial.record(&self.run.events))
    }
}

/// The `HasData` of every capability's bindings: their host traits are implemented for
/// [`PluginView`], reached through [`PluginStore::plugin_view`].
pub struct HasPluginView;

impl HasData for HasPluginView {
    type Data<'a> = PluginView<'a>;
}

/// What a capability keeps for one plugin store (made by
/// [`super::HostCapability::store_state`]); it goes when the store does.
pub trait StoreState: Any + Send {
    /// The provider's sandbox is gone: nothing this state started may outlive it,
    /// though the store may.
    fn close(&self) {}
}

/// What a store's capabilities made for it when it was made, by type.
#[derive(Default)]
pub struct StoreStates(Vec<Box<dyn StoreState>>);

impl StoreStates {
    /// Every capability's state for a store of `setup.plugin`.
    pub fn new(setup: &StoreSetup<'_>) -> StoreStates {
        StoreStates(
            super::Capability::all()
                .filter_map(|c| c.unit().store_state(setup))
                .collect(),
        )
    }

    /// The state of type `S` its capability made.
    pub fn get<S: StoreState>(&self) -> Option<&S> {
        self.0
            .iter()
            .find_map(|s| (s.as_ref() as &dyn Any).downcast_ref::<S>())
    }

    /// The state of type `S` its capability made, to change.
    pub fn get_mut<S: StoreState>(&mut self) -> Option<&mut S> {
        self.0
            .iter_mut()
            .find_map(|s| (s.as_mut() as &mut dyn Any).downcast_mut::<S>())
    }

    /// Tells every state the provider's sandbox is gone ([`StoreState::close`]).
    pub fn close(&self) {
        for state in &self.0 {
            state.close();
        }
    }
}

/// What a capability may make its per-store state from.
pub struct StoreSetup<'a> {
    /// The plugin's name.
    pub plugin: &'a Arc<str>,
    /// The effective scope of each capability the plugin was granted.
    pub scopes: &'a Scopes,
    /// The run the store works for.
    pub run: &'a Arc<RunContext>,
    /// The bounds of a plugin's outgoing HTTP requests, from the runtime's limits.
    pub http: super::http::HttpLimits,
}

/// A WIT resource `W` (bindgen's placeholder) held in the table as a capability's
/// host type `T`.
pub trait TableAs {
    /// Pushes `value` and hands out its handle as the WIT type.
    fn push_as<W: 'static, T: Send + 'static>(
        &mut self,
        value: T,
    ) -> Result<Resource<W>, ResourceTableError>;
    /// The `T` behind a handle the plugin passed.
    fn get_as<T: 'static, W: 'static>(
        &self,
        handle: &Resource<W>,
    ) -> Result<&T, ResourceTableError>;
    /// The `T` behind a handle the plugin passed, to change.
    fn get_mut_as<T: 'static, W: 'static>(
        &mut self,
        handle: &Resource<W>,
    ) -> Result<&mut T, ResourceTableError>;
    /// Takes the `T` behind an owned handle out of the table.
    fn delete_as<T: 'static, W: 'static>(
        &mut self,
        handle: Resource<W>,
    ) -> Result<T, ResourceTableError>;
}

/// The same table entry, seen as `T`.
fn host_handle<T: 'static, W: 'static>(handle: &Resource<W>) -> Resource<T> {
    if handle.owned() {
        Resource::new_own(handle.rep())
    } else {
        Resource::new_borrow(handle.rep())
    }
}

impl TableAs for ResourceTable {
    fn push_as<W: 'static, T: Send + 'static>(
        &mut self,
        value: T,
    ) -> Result<Resource<W>, ResourceTableError> {
        Ok(Resource::new_own(self.push(value)?.rep()))
    }

    fn get_as<T: 'static, W: 'static>(
        &self,
        handle: &Resource<W>,
    ) -> Result<&T, ResourceTableError> {
        self.get(&host_handle::<T, W>(handle))
    }

    fn get_mut_as<T: 'static, W: 'static>(
        &mut self,
        handle: &Resource<W>,
    ) -> Result<&mut T, ResourceTableError> {
        self.get_mut(&host_handle::<T, W>(handle))
    }

    fn delete_as<T: 'static, W: 'static>(
        &mut self,
        handle: Resource<W>,
    ) -> Result<T, ResourceTableError> {
        self.delete(host_handle::<T, W>(&handle))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Placeholder;
    struct Held(u32);
    struct Other;

    #[test]
    fn a_handle_reaches_the_host_value_it_was_pushed_as_and_no_other_type() {
        let mut table = ResourceTable::new();
        let handle: Resource<Placeholder> = table.push_as(Held(7)).unwrap();
        assert_eq!(table.get_as::<Held, _>(&handle).unwrap().0, 7);
        table.get_mut_as::<Held, _>(&handle).unwrap().0 = 8;
        assert!(table.get_as::<Other, _>(&handle).is_err());
        let borrowed = Resource::<Placeholder>::new_borrow(handle.rep());
        assert_eq!(table.get_as::<Held, _>(&borrowed).unwrap().0, 8);
        assert_eq!(table.delete_as::<Held, _>(handle).unwrap().0, 8);
    }

    struct Closing(Arc<AtomicBool>);

    impl StoreState for Closing {
        fn close(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    struct Counter(u32);

    impl StoreState for Counter {}

    struct Absent;

    impl StoreState for Absent {}

    #[test]
    fn a_store_state_is_found_by_its_type_and_closed_with_the_others() {
        let closed = Arc::new(AtomicBool::new(false));
        let mut states = StoreStates(vec![
            Box::new(Counter(1)),
            Box::new(Closing(closed.clone())),
        ]);
        states.get_mut::<Counter>().unwrap().0 += 1;
        assert_eq!(states.get::<Counter>().unwrap().0, 2);
        assert!(states.get::<Absent>().is_none());
        states.close();
        assert!(closed.load(Ordering::SeqCst));
    }

    #[test]
    fn every_store_has_the_process_and_http_capabilities_state() {
        let plugin: Arc<str> = "p".into();
        let run = RunContext::describe_only();
        let states = StoreStates::new(&StoreSetup {
            plugin: &plugin,
            scopes: &Scopes::default(),
            run: &run,
            http: Default::default(),
        });
        assert!(states
            .get::<super::super::process::ProcessGroups>()
            .is_some());
        assert!(states.get::<super::super::http::HttpStore>().is_some());
    }
}
