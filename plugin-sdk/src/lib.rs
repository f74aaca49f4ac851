//! Write agentgate plugins in Rust.
//!
//! A plugin is a WebAssembly component that implements one of three worlds of the WIT
//! package `agentgate:plugin@0.1.0` (see `wit/` at the repository root). Enable the
//! cargo feature of that world (`workspace-source`, `sandbox-provider` or
//! `agent-driver`), implement its `Guest` traits and call its export macro:
//!
//! ```text
//! use agentgate_plugin_sdk::agent_driver::{self, driver, Guest};
//! struct Echo;
//! impl Guest for Echo { /* describe() */ }
//! impl driver::Guest for Echo { /* run() */ }
//! agentgate_plugin_sdk::export_agent_driver!(Echo);
//! ```
//!
//! Host interfaces live in [`host`]; each one you call becomes an import of your
//! component, and each import is a capability the operator must grant. The helper
//! modules ([`error`], [`events`], [`output`], [`options`], [`paths`]) keep plugins short.

#[doc(hidden)]
pub use wit_bindgen;

// Lets generated code name this crate by its public path from inside it too.
extern crate self as agentgate_plugin_sdk;

/// Bindings for every host interface a plugin may import.
pub mod host {
    wit_bindgen::generate!({
        world: "host",
        path: "../wit",
        runtime_path: "::agentgate_plugin_sdk::wit_bindgen::rt",
        type_section_suffix: "agentgate-host",
        additional_derives: [PartialEq],
    });
    pub use agentgate::plugin::*;
}

/// Export `describe` and `source` (bindings of the `workspace-source-base` world; the
/// host interfaces you call come from [`host`] and are imported only when called).
#[cfg(feature = "workspace-source")]
pub mod workspace_source {
    wit_bindgen::generate!({
        world: "workspace-source-base",
        path: "../wit",
        runtime_path: "::agentgate_plugin_sdk::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_workspace_source",
        default_bindings_module: "::agentgate_plugin_sdk::workspace_source",
        // No `execution` here: no interface of this world uses it.
        with: {
            "agentgate:plugin/types@0.1.0": crate::host::types,
            "agentgate:plugin/events@0.1.0": crate::host::events,
        },
    });
    pub use exports::agentgate::plugin::source;
}

/// Export `describe` and `provider` (bindings of the `sandbox-provider-base` world).
#[cfg(feature = "sandbox-provider")]
pub mod sandbox_provider {
    wit_bindgen::generate!({
        world: "sandbox-provider-base",
        path: "../wit",
        runtime_path: "::agentgate_plugin_sdk::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_sandbox_provider",
        default_bindings_module: "::agentgate_plugin_sdk::sandbox_provider",
        with: {
            "agentgate:plugin/types@0.1.0": crate::host::types,
            "agentgate:plugin/execution@0.1.0": crate::host::execution,
            "agentgate:plugin/events@0.1.0": crate::host::events,
        },
    });
    pub use exports::agentgate::plugin::provider;
}

/// Export `describe` and `driver` (bindings of the `agent-driver-base` world).
#[cfg(feature = "agent-driver")]
pub mod agent_driver {
    wit_bindgen::generate!({
        world: "agent-driver-base",
        path: "../wit",
        runtime_path: "::agentgate_plugin_sdk::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_agent_driver",
        default_bindings_module: "::agentgate_plugin_sdk::agent_driver",
        // No `execution` here: only `sandbox` (in `host`) uses it.
        with: {
            "agentgate:plugin/types@0.1.0": crate::host::types,
            "agentgate:plugin/events@0.1.0": crate::host::events,
        },
    });
    pub use exports::agentgate::plugin::driver;
}

pub mod cli;
pub mod error;
pub mod events;
pub mod home;
pub mod options;
pub mod output;
pub mod paths;

pub use host::types::{EnvVar, Error, PluginInfo, PluginKind};

/// Shorthand for an environment variable.
pub fn env_var(name: impl Into<String>, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: value.into(),
    }
}
