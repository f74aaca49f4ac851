//! The data each plugin store carries: WASI (granting nothing), the resource table,
//! limits, the run the plugin is working for, and what each capability keeps per
//! store ([`StoreStates`], `wasi:http`'s context among them), which it names none of:
//! a capability sees the store through the [`PluginView`] this data hands out
//! ([`PluginStore`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::capabilities::scope::Scopes;
use crate::capabilities::{PluginStore, PluginView, RunContext, StoreSetup, StoreStates};

/// What a plugin may print to its own stdout/stderr (kept for the run's plugin log).
const PLUGIN_STDIO_CAPACITY: usize = 1 << 20;

/// The data of one plugin's store: its WASI context (which grants nothing), resource
/// table, limits, grants' scopes, run and per-store capability state.
pub struct PluginState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: super::limits::StoreLimiter,
    /// The plugin's name, for messages and events.
    pub(crate) plugin: Arc<str>,
    /// How far each capability reaches for this plugin (see `capabilities::scope`).
    pub(crate) scopes: Arc<Scopes>,
    pub(crate) run: Arc<RunContext>,
    /// What each capability keeps for this store.
    pub(crate) states: StoreStates,
    /// When the guest last got control from the host (see `limits`).
    pub(crate) guest_entered: Instant,
    /// Set while the epoch callback runs, so its return is not mistaken for a host call.
    pub(crate) in_epoch_check: bool,
    pub(crate) cpu_slice: Duration,
    stdio: MemoryOutputPipe,
}

impl PluginState {
    pub(crate) fn new(
        plugin: Arc<str>,
        run: Arc<RunContext>,
        limits: &super::PluginLimits,
        scopes: Arc<Scopes>,
    ) -> PluginState {
        let stdio = MemoryOutputPipe::new(PLUGIN_STDIO_CAPACITY);
        // No preopens, no environment, no arguments, no sockets: WASI is linked so
        // that any toolchain's component loads, but it grants nothing.
        let wasi = WasiCtx::builder()
            .stdout(stdio.clone())
            .stderr(stdio.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let states = StoreStates::new(&StoreSetup {
            plugin: &plugin,
            scopes: &scopes,
            run: &run,
            http: limits.http,
        });
        PluginState {
            wasi,
            table: ResourceTable::new(),
            limits: limits.store_limits(),
            plugin,
            scopes,
            run,
            states,
            guest_entered: Instant::now(),
            in_epoch_check: false,
            cpu_slice: limits.cpu_slice,
            stdio,
        }
    }

    /// What the plugin printed to its stdout and stderr.
    pub(crate) fn stdio(&self) -> Vec<u8> {
        self.stdio.contents().to_vec()
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl PluginStore for PluginState {
    fn plugin_view(&mut self) -> PluginView<'_> {
        PluginView {
            table: &mut self.table,
            plugin: self.plugin.clone(),
            scopes: self.scopes.clone(),
            run: self.run.clone(),
            states: &mut self.states,
        }
    }
}
