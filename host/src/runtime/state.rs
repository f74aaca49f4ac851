//! The data each plugin store carries: WASI (granting nothing), `wasi:http` (sending
//! only when granted, only to the granted hosts), the resource table, limits, and the run the plugin is working
//! for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::capabilities::http::HttpPolicy;
use crate::capabilities::process::ProcessGroups;
use crate::capabilities::scope::{ScopeDenial, Scopes};
use crate::capabilities::RunContext;

/// What a plugin may print to its own stdout/stderr (kept for the run's plugin log).
const PLUGIN_STDIO_CAPACITY: usize = 1 << 20;

pub struct PluginState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    pub(crate) table: ResourceTable,
    pub(crate) limits: super::limits::StoreLimiter,
    /// The plugin's name, for messages and events.
    pub(crate) plugin: Arc<str>,
    /// How far each capability reaches for this plugin (see `capabilities::scope`).
    pub(crate) scopes: Arc<Scopes>,
    pub(crate) run: Arc<RunContext>,
    /// Process groups this store started through the `process` capability.
    pub(crate) processes: ProcessGroups,
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
        PluginState {
            wasi,
            http: WasiHttpCtx::new(),
            http_policy: HttpPolicy::new(plugin.clone(), &scopes, limits.http, run.events.clone()),
            table: ResourceTable::new(),
            limits: limits.store_limits(),
            plugin,
            scopes,
            run,
            processes: ProcessGroups::default(),
            guest_entered: Instant::now(),
            in_epoch_check: false,
            cpu_slice: limits.cpu_slice,
            stdio,
        }
    }

    /// Reports a call outside the plugin's scope as a `denied` event of the run, and
    /// returns the `denied` error the plugin gets.
    pub(crate) fn scope_denied(&self, denial: ScopeDenial) -> crate::wit::types::Error {
        crate::wit::types::Error::Denied(denial.record(&self.run.events))
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

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_policy,
        }
    }
}
