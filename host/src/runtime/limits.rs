//! Per-store limits: linear memory, guest CPU time between host calls, and table sizes.
//!
//! The wall-clock deadline of a call is applied where the call is made
//! (`runtime::instance`), because it also has to cover time spent awaiting host calls.

use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline};

use super::PluginState;

/// The bounds every plugin store runs under.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// Linear memory a plugin may grow to, across all its memories.
    pub memory_bytes: usize,
    /// Longest stretch a plugin may compute without returning to the host. A plugin
    /// waiting on a host call (an agent running for an hour) does not use this budget.
    pub cpu_slice: Duration,
    /// Deadline for `describe()` and other short calls.
    pub short_call: Duration,
    /// Timeouts and the response cap of a plugin's outgoing HTTP requests.
    pub http: super::HttpLimits,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            memory_bytes: 256 << 20,
            cpu_slice: Duration::from_secs(10),
            short_call: Duration::from_secs(10),
            http: super::HttpLimits::default(),
        }
    }
}

impl PluginLimits {
    pub(crate) fn store_limits(&self) -> StoreLimiter {
        StoreLimiter {
            limits: StoreLimitsBuilder::new()
                .memory_size(self.memory_bytes)
                .instances(64)
                .tables(64)
                .memories(16)
                .trap_on_grow_failure(true)
                .build(),
            memory_bytes: self.memory_bytes,
        }
    }

    /// Installs the CPU-slice check and cooperative yielding on `store`.
    ///
    /// Every epoch tick interrupts guest code; the callback traps when the guest has
    /// computed for longer than `cpu_slice` since it last entered from or returned
    /// from the host, and otherwise yields so other runs on the same thread progress.
    pub(crate) fn apply(&self, store: &mut Store<PluginState>) {
        store.limiter(|state| &mut state.limits);
        store.call_hook(|mut ctx, hook| {
            let state = ctx.data_mut();
            match hook {
                // The epoch check itself is a call into the host; returning from it
                // is not the guest yielding control.
                wasmtime::CallHook::ReturningFromHost if state.in_epoch_check => {
                    state.in_epoch_check = false
                }
                wasmtime::CallHook::CallingWasm | wasmtime::CallHook::ReturningFromHost => {
                    state.guest_entered = Instant::now();
                }
                _ => {}
            }
            Ok(())
        });
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            state.in_epoch_check = true;
            if state.guest_entered.elapsed() > state.cpu_slice {
                return Err(wasmtime::Error::msg(format!(
                    "computed for more than {} without returning to the host (runaway loop?)",
                    humantime::format_duration(state.cpu_slice)
                )));
            }
            Ok(UpdateDeadline::Yield(1))
        });
    }
}

/// A store's limiter: wasmtime's [`StoreLimits`], except that growing past the memory
/// cap traps with a message naming the cap (wasmtime's says only "forcing trap when
/// growing memory to N bytes").
pub(crate) struct StoreLimiter {
    limits: StoreLimits,
    memory_bytes: usize,
}

impl ResourceLimiter for StoreLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(wasmtime::Error::msg(format!(
                "memory limit reached: growing its linear memory to {desired} bytes would pass \
                 the limit of {} MiB per plugin",
                self.memory_bytes >> 20
            )));
        }
        self.limits.memory_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
