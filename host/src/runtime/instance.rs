//! Instantiated plugins, one store each, and the guarded calls into them.
//!
//! Every call into a plugin goes through [`guard`]: it runs under a wall-clock
//! deadline that also covers awaited host calls (the future is dropped at the
//! deadline, which kills whatever the call started), and a trap becomes a
//! [`PluginError`] naming the plugin, never a host failure.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;
use wasmtime::component::ResourceAny;
use wasmtime::Store;

use super::{LoadedPlugin, PluginState, Runtime};
use crate::capabilities::execution::Execution;
use crate::capabilities::sandbox::{ProvidedSandbox, ProviderFailure};
use crate::capabilities::view::TableAs;
use crate::capabilities::RunContext;
use crate::wit::agent_driver::exports::agentgate::plugin::driver::{AgentOutcome, AgentTask};
use crate::wit::agent_driver::AgentDriver;
use crate::wit::sandbox_provider::exports::agentgate::plugin::provider::{
    Leftover, SandboxRequest, SandboxSummary,
};
use crate::wit::sandbox_provider::SandboxProvider;
use crate::wit::types::{Error, ExecRequest, PluginInfo, ResourceUsage};
use crate::wit::workspace_source::exports::agentgate::plugin::source::{
    PreparedWorkspace, WorkspaceRequest,
};
use crate::wit::workspace_source::WorkspaceSource;

/// A plugin call that did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin returned an error from the call.
    #[error("plugin {plugin}: {call} failed: {}", error_text(.error))]
    Reported {
        /// The plugin's name.
        plugin: String,
        /// The export called (`prepare`, `run`, ...).
        call: &'static str,
        /// The error it returned.
        error: Error,
    },
    /// The plugin trapped (or the host failed it) during the call.
    #[error("plugin {plugin} trapped in {call}: {trap}")]
    Trapped {
        /// The plugin's name.
        plugin: String,
        /// The export called (`prepare`, `run`, ...).
        call: &'static str,
        /// The trap's message.
        trap: String,
    },
    /// The plugin's component could not be read, checked or compiled.
    #[error("plugin {plugin} could not be loaded: {reason}")]
    NotLoaded {
        /// The plugin's name.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// The call did not return before its deadline; it was dropped, killing what it
    /// started.
    #[error("plugin {plugin} did not finish {call} within {}; everything it started was killed", humantime::format_duration(Duration::from_millis(.limit.as_millis() as u64)))]
    Deadline {
        /// The plugin's name.
        plugin: String,
        /// The export called (`prepare`, `run`, ...).
        call: &'static str,
        /// The time the call had.
        limit: Duration,
    },
    /// An agent outcome carried more than [`MAX_OUTCOME_TEXT_BYTES`] in one field.
    #[error("plugin {plugin} returned a {field} of {bytes} bytes from {call}; the host keeps at most {MAX_OUTCOME_TEXT_BYTES} bytes there, so the result was refused")]
    Oversized {
        /// The plugin's name.
        plugin: String,
        /// The export called (`prepare`, `run`, ...).
        call: &'static str,
        /// The outcome's field (`summary`, `session id`).
        field: &'static str,
        /// Its length, in bytes.
        bytes: usize,
    },
}

/// Longest text a plugin may hand the host in one field of an agent outcome (its
/// summary: an agent's last words, generous). It ends up in result.json; a plugin may
/// hold up to its memory cap, which is not a size for it.
pub const MAX_OUTCOME_TEXT_BYTES: usize = 1 << 20;

/// Longest error message of a plugin the host keeps (cut beyond): it is shown on the
/// terminal and kept in result.json.
pub const MAX_ERROR_TEXT_BYTES: usize = 64 << 10;

impl PluginError {
    /// The plugin reported that the TaskSpec is wrong.
    pub fn is_invalid_spec(&self) -> bool {
        matches!(
            self,
            PluginError::Reported {
                error: Error::InvalidSpec(_),
                ..
            }
        )
    }
}

/// A readable sentence for a contract error.
pub fn error_text(error: &Error) -> String {
    match error {
        Error::InvalidSpec(e) if e.path.is_empty() => format!("invalid spec: {}", e.message),
        Error::InvalidSpec(e) => format!("invalid {}: {}", e.path, e.message),
        Error::Unavailable(m) => format!("unavailable: {m}"),
        Error::Denied(m) => format!("denied: {m}"),
        Error::Failed(m) => m.clone(),
        Error::TimedOut(m) => format!("timed out: {m}"),
    }
}

/// Runs one call into `plugin` under `deadline`.
async fn guard<T>(
    plugin: &str,
    call: &'static str,
    deadline: Instant,
    fut: impl Future<Output = wasmtime::Result<T>>,
) -> Result<T, PluginError> {
    let limit = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout_at(deadline, fut).await {
        Err(_) => Err(PluginError::Deadline {
            plugin: plugin.to_string(),
            call,
            limit,
        }),
        Ok(Err(trap)) => Err(PluginError::Trapped {
            plugin: plugin.to_string(),
            call,
            trap: trap_text(&trap),
        }),
        Ok(Ok(value)) => Ok(value),
    }
}

/// The trap's causes on one line, without the wasm backtrace.
fn trap_text(trap: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = trap
        .chain()
        .map(|cause| cause.to_string())
        .filter(|cause| !cause.starts_with("error while executing at wasm backtrace"))
        .map(|cause| cause.lines().next().unwrap_or_default().to_string())
        .collect();
    parts.dedup();
    if parts.is_empty() {
        return trap
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
    }
    parts.join(": ")
}

fn reported<T>(
    plugin: &str,
    call: &'static str,
    result: Result<T, Error>,
) -> Result<T, PluginError> {
    result.map_err(|mut error| {
        match &mut error {
            Error::InvalidSpec(e) => cut_text(&mut e.message),
            Error::Unavailable(m) | Error::Denied(m) | Error::Failed(m) | Error::TimedOut(m) => {
                cut_text(m)
            }
        }
        PluginError::Reported {
            plugin: plugin.to_string(),
            call,
            error,
        }
    })
}

/// Cuts a plugin's error message to [`MAX_ERROR_TEXT_BYTES`], on a character boundary.
fn cut_text(text: &mut String) {
    if text.len() > MAX_ERROR_TEXT_BYTES {
        let cut = text.floor_char_boundary(MAX_ERROR_TEXT_BYTES);
        let dropped = text.len() - cut;
        text.truncate(cut);
        text.shrink_to_fit();
        text.push_str(&format!("…[{dropped} bytes cut]"));
    }
}

/// Refuses an agent outcome carrying more text than the host keeps.
fn bounded_outcome(plugin: &str, outcome: AgentOutcome) -> Result<AgentOutcome, PluginError> {
    for (field, text) in [
        ("summary", &outcome.summary),
        ("session id", &outcome.session_id),
    ] {
        let bytes = text.as_ref().map_or(0, String::len);
        if bytes > MAX_OUTCOME_TEXT_BYTES {
            return Err(PluginError::Oversized {
                plugin: plugin.to_string(),
                call: "run",
                field,
                bytes,
            });
        }
    }
    Ok(outcome)
}

impl Runtime {
    fn new_store(&self, plugin: &LoadedPlugin, run: Arc<RunContext>) -> Store<PluginState> {
        // A refused plugin is never run; were it, it would reach nothing.
        let scopes = match plugin.refusal() {
            None => plugin.scopes().clone(),
            Some(_) => Default::default(),
        };
        let state = PluginState::new(plugin.name().into(), run, &self.limits, scopes);
        let mut store = Store::new(self.engine(), state);
        self.limits.apply(&mut store);
        store
    }

    fn short_deadline(&self) -> Instant {
        Instant::now() + self.limits.short_call
    }

    /// Instantiates `component` in a store where host interfaces trap, and asks it
    /// what it is.
    pub(crate) async fn describe(
        engine: &wasmtime::Engine,
        linker: &wasmtime::component::Linker<PluginState>,
        limits: &super::PluginLimits,
        component: &wasmtime::component::Component,
        kind: crate::wit::types::PluginKind,
        label: &str,
    ) -> Result<PluginInfo, PluginError> {
        use crate::wit::types::PluginKind;
        let state = PluginState::new(
            label.into(),
            RunContext::describe_only(),
            limits,
            Default::default(),
        );
        let mut store = Store::new(engine, state);
        limits.apply(&mut store);
        let deadline = Instant::now() + limits.short_call;
        let store = &mut store;
        guard(label, "describe", deadline, async move {
            match kind {
                PluginKind::WorkspaceSource => {
                    WorkspaceSource::instantiate_async(&mut *store, component, linker)
                        .await?
                        .call_describe(&mut *store)
                        .await
                }
                PluginKind::SandboxProvider => {
                    SandboxProvider::instantiate_async(&mut *store, component, linker)
                        .await?
                        .call_describe(&mut *store)
                        .await
                }
                PluginKind::AgentDriver => {
                    AgentDriver::instantiate_async(&mut *store, component, linker)
                        .await?
                        .call_describe(&mut *store)
                        .await
                }
            }
        })
        .await
    }
}

/// Defines a plugin instance type for one world, and the `Runtime` method that
/// instantiates it in a fresh store for a run.
macro_rules! instance {
    ($name:ident, $bindings:ty, $constructor:ident) => {
        pub struct $name {
            store: Store<PluginState>,
            bindings: $bindings,
        }

        impl $name {
            fn plugin(&self) -> Arc<str> {
                self.store.data().plugin.clone()
            }

            /// What the plugin printed on its own stdout/stderr during the run.
            pub fn plugin_stdio(&self) -> Vec<u8> {
                self.store.data().stdio()
            }
        }

        impl Runtime {
            /// Instantiates `plugin` in a fresh store working for `run`, within the
            /// short deadline.
            pub async fn $constructor(
                &self,
                plugin: &LoadedPlugin,
                run: Arc<RunContext>,
            ) -> Result<$name, PluginError> {
                let component = self.loader().component(plugin).await?;
                let mut store = self.new_store(plugin, run);
                let instantiate =
                    <$bindings>::instantiate_async(&mut store, component, self.linker());
                let bindings = guard(
                    plugin.name(),
                    "instantiate",
                    self.short_deadline(),
                    instantiate,
                )
                .await?;
                Ok($name { store, bindings })
            }
        }
    };
}

instance!(SourceInstance, WorkspaceSource, workspace_source);
instance!(ProviderInstance, SandboxProvider, sandbox_provider);
instance!(DriverInstance, AgentDriver, agent_driver);

impl SourceInstance {
    pub async fn prepare(
        &mut self,
        request: &WorkspaceRequest,
        deadline: Instant,
    ) -> Result<PreparedWorkspace, PluginError> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_source()
            .call_prepare(&mut self.store, request);
        reported(
            &plugin,
            "prepare",
            guard(&plugin, "prepare", deadline, call).await?,
        )
    }

    pub async fn release(
        &mut self,
        workspace: &PreparedWorkspace,
        deadline: Instant,
    ) -> Result<(), PluginError> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_source()
            .call_release(&mut self.store, workspace);
        reported(
            &plugin,
            "release",
            guard(&plugin, "release", deadline, call).await?,
        )
    }
}

impl ProviderInstance {
    /// Creates the run's sandbox.
    pub async fn create(
        mut self,
        request: &SandboxRequest,
        deadline: Instant,
    ) -> Result<ActiveSandbox, (Self, PluginError)> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_provider()
            .call_create(&mut self.store, request);
        let result = guard(&plugin, "create", deadline, call).await;
        match result.and_then(|r| reported(&plugin, "create", r)) {
            Ok(handle) => Ok(ActiveSandbox {
                instance: self,
                handle: Some(handle),
            }),
            Err(e) => Err((self, e)),
        }
    }
}

/// Orphan cleanup (`agentgate gc`): in a store of its own, outside any run.
impl ProviderInstance {
    /// What this provider created on this machine that still exists.
    pub async fn list_leftovers(
        &mut self,
        deadline: Instant,
    ) -> Result<Vec<Leftover>, PluginError> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_provider()
            .call_list_leftovers(&mut self.store);
        reported(
            &plugin,
            "list-leftovers",
            guard(&plugin, "list-leftovers", deadline, call).await?,
        )
    }

    /// Removes one leftover that the host judged an orphan.
    pub async fn reap(&mut self, id: &str, deadline: Instant) -> Result<(), PluginError> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_provider()
            .call_reap(&mut self.store, id);
        reported(
            &plugin,
            "reap",
            guard(&plugin, "reap", deadline, call).await?,
        )
    }
}

/// A sandbox a provider created, with the provider's store that owns it.
pub struct ActiveSandbox {
    instance: ProviderInstance,
    handle: Option<ResourceAny>,
}

impl ActiveSandbox {
    /// The sandbox's handle, for `call`; once destroyed, calling it is the host's
    /// mistake, reported as a trap of the call.
    fn handle(&self, call: &'static str) -> Result<ResourceAny, PluginError> {
        self.handle.ok_or_else(|| PluginError::Trapped {
            plugin: self.instance.plugin().to_string(),
            call,
            trap: "the sandbox was already destroyed".into(),
        })
    }

    pub async fn summary(&mut self, deadline: Instant) -> Result<SandboxSummary, PluginError> {
        let plugin = self.instance.plugin();
        let handle = self.handle("summary")?;
        let guest = self.instance.bindings.agentgate_plugin_provider().sandbox();
        let call = guest.call_summary(&mut self.instance.store, handle);
        guard(&plugin, "summary", deadline, call).await
    }

    /// Runs a command; the execution is moved out of the provider's store.
    pub async fn exec(
        &mut self,
        request: ExecRequest,
    ) -> Result<Result<Execution, Error>, PluginError> {
        let plugin = self.instance.plugin();
        let Some(handle) = self.handle else {
            return Ok(Err(Error::Failed("the sandbox was destroyed".into())));
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let guest = self.instance.bindings.agentgate_plugin_provider().sandbox();
        let call = guest.call_exec(&mut self.instance.store, handle, &request);
        match guard(&plugin, "exec", deadline, call).await? {
            Ok(resource) => {
                let execution = self
                    .instance
                    .store
                    .data_mut()
                    .table
                    .delete_as::<Execution, _>(resource)
                    .map_err(|e| PluginError::Trapped {
                        plugin: plugin.to_string(),
                        call: "exec",
                        trap: format!("returned an execution it does not own: {e}"),
                    })?;
                Ok(Ok(execution))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// The sandbox's resource use so far, as the provider measures it.
    pub async fn stats(&mut self) -> Result<ResourceUsage, PluginError> {
        let plugin = self.instance.plugin();
        let handle = self.handle("stats")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let guest = self.instance.bindings.agentgate_plugin_provider().sandbox();
        let call = guest.call_stats(&mut self.instance.store, handle);
        reported(
            &plugin,
            "stats",
            guard(&plugin, "stats", deadline, call).await?,
        )
    }

    /// What the provider plugin printed on its own stdout/stderr so far.
    pub fn plugin_stdio(&self) -> Vec<u8> {
        self.instance.plugin_stdio()
    }

    /// Destroys the sandbox and kills everything the provider started, by `deadline`
    /// (the call), and [`HANDLE_DROP_LIMIT`] more for the guest's destructor of the
    /// handle. Idempotent.
    pub async fn destroy(&mut self, deadline: Instant) -> Result<(), PluginError> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        let plugin = self.instance.plugin();
        let guest = self.instance.bindings.agentgate_plugin_provider().sandbox();
        let call = guest.call_destroy(&mut self.instance.store, handle);
        let result = guard(&plugin, "destroy", deadline, call)
            .await
            .and_then(|r| reported(&plugin, "destroy", r));
        let _ = tokio::time::timeout(
            HANDLE_DROP_LIMIT,
            handle.resource_drop_async(&mut self.instance.store),
        )
        .await;
        // Whatever the plugin did, nothing it started outlives the sandbox.
        self.instance.store.data().states.close();
        result
    }
}

pub use crate::capabilities::sandbox::DESTROY_LIMIT;

/// The broker of the `sandbox` capability drives the run's sandbox through this.
impl ProvidedSandbox for ActiveSandbox {
    fn exec(
        &mut self,
        request: ExecRequest,
    ) -> BoxFuture<'_, Result<Result<Execution, Error>, ProviderFailure>> {
        Box::pin(async move { Ok(ActiveSandbox::exec(self, request).await?) })
    }

    fn stats(&mut self) -> BoxFuture<'_, Result<ResourceUsage, ProviderFailure>> {
        Box::pin(async move { Ok(ActiveSandbox::stats(self).await?) })
    }

    fn plugin_stdio(&self) -> Vec<u8> {
        ActiveSandbox::plugin_stdio(self)
    }

    fn destroy(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), ProviderFailure>> {
        Box::pin(async move { Ok(ActiveSandbox::destroy(self, deadline).await?) })
    }
}

/// How long dropping a destroyed sandbox's handle (the guest's destructor) may take.
const HANDLE_DROP_LIMIT: Duration = Duration::from_secs(5);

impl DriverInstance {
    pub async fn run(
        &mut self,
        task: &AgentTask,
        deadline: Instant,
    ) -> Result<AgentOutcome, PluginError> {
        let plugin = self.plugin();
        let call = self
            .bindings
            .agentgate_plugin_driver()
            .call_run(&mut self.store, task);
        let outcome = reported(&plugin, "run", guard(&plugin, "run", deadline, call).await?)?;
        bounded_outcome(&plugin, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(summary: String) -> AgentOutcome {
        AgentOutcome {
            exit_code: 0,
            success: true,
            session_id: None,
            turns: None,
            usage: None,
            summary: Some(summary),
        }
    }

    #[test]
    fn an_outcome_over_the_text_bound_is_refused_naming_the_field() {
        let fits = "s".repeat(MAX_OUTCOME_TEXT_BYTES);
        assert!(bounded_outcome("p", outcome(fits)).is_ok());
        let error = bounded_outcome("p", outcome("s".repeat(MAX_OUTCOME_TEXT_BYTES + 1)))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!(
                "plugin p returned a summary of {} bytes from run",
                MAX_OUTCOME_TEXT_BYTES + 1
            )),
            "{error}"
        );
    }

    #[test]
    fn a_long_error_message_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_TEXT_BYTES);
        let error = reported::<()>("p", "run", Err(Error::Failed(long))).unwrap_err();
        let PluginError::Reported {
            error: Error::Failed(message),
            ..
        } = error
        else {
            panic!("{error}");
        };
        assert!(
            message.len() < MAX_ERROR_TEXT_BYTES + 40,
            "{}",
            message.len()
        );
        assert!(message.ends_with(&format!("…[{} bytes cut]", MAX_ERROR_TEXT_BYTES)));
    }
}
