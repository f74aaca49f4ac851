//! The host capabilities: each folder is one unit, and nothing else.
//!
//! A capability (`events`, `process`, `docker`, `git`, `github`, `sandbox`, `http`,
//! `kubernetes`)
//! implements its WIT interface for the [`PluginView`] a host call sees of the store
//! (see [`view`]) and the one trait [`HostCapability`] (its `unit.rs`), through which
//! the runtime links it, reads and shows its operator scope, makes its per-run and
//! per-store state, and `gc` reclaims what it left; one list makes [`ALL`] and
//! [`add_to_linker`]. A plugin can only reach a capability whose
//! interface it imports and was granted; the runtime checks that at load. What all of
//! them act on is the plugin's [`RunContext`]; what they report goes into the run
//! record ([`crate::record`]). `execution` is not a capability: it is the handle type
//! the `process`, `docker` and `sandbox` capabilities hand out.

pub(crate) mod docker;
pub(crate) mod events;
pub(crate) mod execution;
pub mod git;
pub(crate) mod github;
pub(crate) mod http;
pub(crate) mod kubernetes;
pub(crate) mod labels;
pub(crate) mod process;
pub(crate) mod sandbox;
pub(crate) mod scope;
mod unit;
pub(crate) mod view;

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::host_paths::BindScope;
use crate::record::EventSink;

pub use labels::RunIdentity;
pub use sandbox::SandboxBroker;
pub use unit::{
    Capability, DeleteLeft, HostCapability, HostSectionError, ReclaimError, Reclaimed,
    UnknownCapability,
};
pub use view::{HasPluginView, PluginStore, PluginView, StoreSetup, StoreState, StoreStates};

/// Lists the capabilities once and makes both things that need the list: [`ALL`], the
/// objects the rest of the host asks about a capability through, and
/// [`add_to_linker`], which links every capability into a linker of any store data
/// that is a [`PluginStore`].
///
/// Why a macro rather than a loop over [`ALL`]: linking is generic over the store's
/// type (the runtime's, which this layer cannot name), and a generic method makes a
/// trait unusable as an object; [`HostCapability::add_to_linker`] is therefore only
/// callable on the concrete unit (`where Self: Sized`), which this list names.
macro_rules! capabilities {
    ($($unit:path),* $(,)?) => {
        /// Every capability of this host, in the order they are listed to users.
        /// Adding a capability adds its line to the list this is made from.
        pub static ALL: &[&dyn HostCapability] = &[$(&$unit),*];

        /// Links the interfaces of the contract that are no capability (`types`,
        /// `execution`) and every capability's, into the one linker every plugin is
        /// instantiated with. Whether a plugin may import one is decided at load.
        pub fn add_to_linker<T: PluginStore>(
            linker: &mut wasmtime::component::Linker<T>,
        ) -> wasmtime::Result<()> {
            crate::wit::types::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)?;
            crate::wit::execution::add_to_linker::<T, HasPluginView>(linker, T::plugin_view)?;
            $(HostCapability::add_to_linker(&$unit, linker)?;)*
            Ok(())
        }
    };
}

capabilities![
    events::unit::Events,
    process::unit::Process,
    docker::unit::Docker,
    git::unit::Git,
    github::unit::Github,
    sandbox::unit::Sandbox,
    http::unit::Http,
    kubernetes::unit::Kubernetes,
];

/// Host paths no TaskSpec may name and no sandbox may bind, whatever the operator
/// allows, with why: every capability's [`HostCapability::guarded_paths`], for
/// [`crate::host_paths`], which sits below the capabilities and is handed them.
pub fn guarded_paths() -> Vec<(std::path::PathBuf, &'static str)> {
    Capability::all()
        .flat_map(|c| c.unit().guarded_paths())
        .collect()
}

/// The host-wide sections of `grants.yaml` the operator wrote, by capability (see
/// [`HostCapability::host_section_fields`]).
pub type HostSections = BTreeMap<Capability, serde_yaml::Value>;

/// A run's egress proxy as the sandboxes see it: the host folder (0700, the run's
/// alone, outside anything a sandbox can write) holding the proxy's socket, and the
/// allowed `host:port`s the in-sandbox relays listen for.
#[derive(Debug, Clone)]
pub struct EgressGate {
    /// The host folder holding the proxy's socket (and, for containers, the
    /// sandbox's `/etc/hosts` and `/etc/resolv.conf`).
    pub socket_dir: std::path::PathBuf,
    /// The `host:port`s the run may reach, which the in-sandbox relays listen for.
    pub allow: Vec<String>,
}

impl EgressGate {
    /// The variables that send clients to the relay on `127.0.0.1:3128` inside the
    /// sandbox, for every tool that reads its own (curl, pip, npm, git, cargo, ...).
    /// They replace whatever the plugin or TaskSpec set under the same names.
    pub fn environment() -> Vec<(String, String)> {
        let proxy = format!("http://{}", process::landlock::PROXY_ADDRESS);
        let mut vars: Vec<(String, String)> = [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
            "PIP_PROXY",
            "npm_config_proxy",
            "npm_config_https_proxy",
            "YARN_HTTP_PROXY",
            "YARN_HTTPS_PROXY",
            "CARGO_HTTP_PROXY",
            "GIT_HTTP_PROXY",
        ]
        .into_iter()
        .map(|name| (name.to_string(), proxy.clone()))
        .collect();
        for name in ["NO_PROXY", "no_proxy"] {
            vars.push((name.into(), "localhost,127.0.0.1".into()));
        }
        // git reads `http.proxy` from its configuration; the environment's entries
        // reach it without touching any `.git/config`.
        vars.extend([
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "http.proxy".into()),
            ("GIT_CONFIG_VALUE_0".into(), proxy),
        ]);
        vars
    }
}

/// The files in [`EgressGate::socket_dir`]: its socket, and the sandbox's `/etc/hosts`
/// and `/etc/resolv.conf` for containers (written where the gate starts).
pub use crate::egress::{
    HOSTS_NAME as EGRESS_HOSTS_NAME, RESOLV_CONF as EGRESS_RESOLV_CONF,
    RESOLV_CONF_NAME as EGRESS_RESOLV_CONF_NAME, SOCKET_NAME as EGRESS_SOCKET_NAME,
};

/// The run a plugin store works for: what the engine tells every capability about the
/// run (its id and identity, events, the folders its sandbox may bind, the folders its
/// workspace source may act in, its sandbox), and each capability's own per-run state.
pub struct RunContext {
    /// The run's id.
    pub run_id: String,
    /// Whose the run's objects are; `None` while a plugin is only being described.
    identity: Option<labels::RunIdentity>,
    /// Where the run's events go (the run record).
    pub events: Arc<EventSink>,
    /// Each capability's per-run state ([`HostCapability::run_state`]), by name.
    states: BTreeMap<&'static str, Arc<dyn Any + Send + Sync>>,
    /// What a sandbox may bind: the folders the host gave this run's sandbox
    /// (workspace, state) and what the operator allows for mounts. Unset, nothing.
    bind_scope: OnceLock<BindScope>,
    broker: OnceLock<Arc<SandboxBroker>>,
    /// Set when the TaskSpec has `sandbox.egress`: every sandbox process and container
    /// of the run is cut off every network but loopback and given this proxy.
    egress: OnceLock<Arc<EgressGate>>,
    /// False while a plugin is only being described: no host interface may act then.
    active: bool,
    exec_ids: AtomicU64,
    /// Directories the run's repositories may be in (see [`RunContext::allow_repo_root`]).
    repo_roots: std::sync::Mutex<Vec<std::path::PathBuf>>,
    /// What copies from the sandbox back to the host left out (see [`RunContext::record_left_out`]).
    left_out: std::sync::Mutex<Vec<crate::record::LeftOutFile>>,
}

impl RunContext {
    /// The context of the run `identity` names; `sections` are the operator's
    /// host-wide sections each capability makes its per-run state from.
    pub fn new(
        identity: labels::RunIdentity,
        events: Arc<EventSink>,
        sections: HostSections,
    ) -> Arc<RunContext> {
        let states = Capability::all()
            .filter_map(|c| {
                let state = c.unit().run_state(sections.get(&c))?;
                Some((c.name(), state))
            })
            .collect();
        Arc::new(RunContext {
            run_id: identity.run_id.clone(),
            identity: Some(identity),
            events,
            states,
            bind_scope: OnceLock::new(),
            broker: OnceLock::new(),
            egress: OnceLock::new(),
            active: true,
            exec_ids: AtomicU64::new(0),
            repo_roots: Default::default(),
            left_out: Default::default(),
        })
    }

    /// A context for `describe()`: every host interface traps.
    pub fn describe_only() -> Arc<RunContext> {
        Arc::new(RunContext {
            run_id: String::new(),
            identity: None,
            events: Arc::new(EventSink::discard()),
            states: BTreeMap::new(),
            bind_scope: OnceLock::new(),
            broker: OnceLock::new(),
            egress: OnceLock::new(),
            active: false,
            exec_ids: AtomicU64::new(0),
            repo_roots: Default::default(),
            left_out: Default::default(),
        })
    }

    /// Whose the run's objects are, for the labels on them. Without an identity nothing
    /// may be made: its objects could not be told from another home's.
    pub fn identity(&self) -> Result<&labels::RunIdentity, crate::wit::types::Error> {
        self.identity.as_ref().ok_or_else(|| {
            crate::wit::types::Error::Unavailable(
                "this process does not know its agentgate home, so the objects it would make \
                 could not be told from another home's; run through the agentgate command or \
                 set AGENTGATE_HOME"
                    .into(),
            )
        })
    }

    /// The per-run state of type `S` its capability made, if it made one.
    pub(crate) fn state<S: Any + Send + Sync>(&self) -> Option<&S> {
        self.states.values().find_map(|s| s.downcast_ref::<S>())
    }

    /// The kind of host object (`container`) `id` is, when a capability created it for
    /// this run; `None` for anything else.
    pub fn host_object(&self, id: &str) -> Option<&'static str> {
        Capability::all().find_map(|c| c.unit().host_object(self, id))
    }

    /// Traps the calling plugin when host interfaces are not available.
    pub(crate) fn ensure_active(&self) -> wasmtime::Result<()> {
        if self.active {
            Ok(())
        } else {
            Err(wasmtime::Error::msg(
                "host interfaces cannot be called from describe(); describe() must only return the plugin's info",
            ))
        }
    }

    pub(crate) fn next_exec_id(&self) -> String {
        format!("exec-{}", self.exec_ids.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Confines every sandbox the run starts from now on to the egress proxy.
    pub fn set_egress(&self, gate: EgressGate) {
        let _ = self.egress.set(Arc::new(gate));
    }

    /// The run's egress proxy, when its TaskSpec has `sandbox.egress`.
    pub fn egress(&self) -> Option<&Arc<EgressGate>> {
        self.egress.get()
    }

    /// Makes the run's sandbox reachable through the `sandbox` interface.
    pub fn set_broker(&self, broker: Arc<SandboxBroker>) {
        let _ = self.broker.set(broker);
    }

    pub(crate) fn broker(&self) -> Option<&Arc<SandboxBroker>> {
        self.broker.get()
    }

    /// Sets what the run's sandbox may bind, once the host prepared its folders.
    pub fn set_bind_scope(&self, scope: BindScope) {
        let _ = self.bind_scope.set(scope);
    }

    /// What a sandbox capability may bind now: nothing before [`Self::set_bind_scope`].
    pub(crate) fn bind_scope(&self) -> BindScope {
        self.bind_scope.get().cloned().unwrap_or_default()
    }

    /// Lets capabilities clone into or open repositories under `dir` (the workspace
    /// request's scratch dir, the prepared workspace). Nothing else.
    pub fn allow_repo_root(&self, dir: &std::path::Path) {
        if let Ok(dir) = dir.canonicalize() {
            self.repo_roots.lock().unwrap().push(dir);
        }
    }

    pub(crate) fn repo_roots(&self) -> Vec<std::path::PathBuf> {
        self.repo_roots.lock().unwrap().clone()
    }

    /// Records an entry of the sandbox that a copy back to the host left out: the host
    /// capability that moved the files says so itself, whatever the plugin reports, and
    /// the run cannot end `succeeded` with any.
    pub fn record_left_out(&self, path: impl Into<String>, reason: impl Into<String>) {
        self.left_out
            .lock()
            .unwrap()
            .push(crate::record::LeftOutFile {
                path: path.into(),
                reason: reason.into(),
            });
    }

    /// Everything [`Self::record_left_out`] recorded so far.
    pub fn left_out(&self) -> Vec<crate::record::LeftOutFile> {
        self.left_out.lock().unwrap().clone()
    }
}

impl crate::wit::types::Host for PluginView<'_> {}

/// The words that end every `unavailable` error saying that this machine lacks
/// something a run needs, so a user learns every missing prerequisite at once rather
/// than one failed run at a time.
pub const DOCTOR_HINT: &str = "run `agentgate doctor` for every check";

/// The contract's `unavailable` error for a prerequisite this machine lacks: `message`
/// says what and how to get it; [`DOCTOR_HINT`] follows.
pub(crate) fn lacking(message: impl std::fmt::Display) -> crate::wit::types::Error {
    crate::wit::types::Error::Unavailable(format!("{message}; {DOCTOR_HINT}"))
}

/// `message` without the [`DOCTOR_HINT`] that [`lacking`] added, for `agentgate
/// doctor` itself.
pub fn without_doctor_hint(message: &str) -> &str {
    message
        .strip_suffix(DOCTOR_HINT)
        .map_or(message, |rest| rest.trim_end_matches("; "))
}

/// The contract's `invalid-spec` error for `path` (relative to the request).
pub(crate) fn invalid_spec(path: &str, message: impl Into<String>) -> crate::wit::types::Error {
    crate::wit::types::Error::InvalidSpec(crate::wit::types::FieldError {
        path: path.to_string(),
        message: message.into(),
    })
}
