//! Host-side bindings for the WIT contract `agentgate:plugin@0.1.0`.
//!
//! The `host` world generates every host interface once; the three plugin worlds reuse
//! those types through `with`, so a value (an `execution`, an `error`) means the same
//! Rust type whichever world it crosses.
//!
//! One binding per plugin kind is enough: the narrow worlds of `wit/worlds.wit`
//! (`process-sandbox-provider`, `http-agent-driver`, ...) differ only in their imports,
//! which the linker satisfies from each capability's `add_to_linker` (through these
//! modules), [`add_shared_interfaces`] and WASI, while these bindings only look up the
//! exports (`describe` and the kind's interface), the same in every world of a kind.
//! Which imports a plugin may have is decided by `runtime::grants`.

mod generated {
    wasmtime::component::bindgen!({
        world: "host",
        path: "../wit",
        imports: { default: async | trappable },
        with: {
            "agentgate:plugin/execution.execution": crate::capabilities::execution::Execution,
        },
    });
}

pub use generated::agentgate::plugin::{
    docker, events, execution, git, github, process, sandbox, types,
};

/// Every interface of the `host` world, by its WIT name: a capability added to that
/// world is here without an edit of this file (`interfaces::kube`).
pub mod interfaces {
    pub use super::generated::agentgate::plugin::*;
}

/// Adds the interfaces of the contract that are no capability (`types`, `execution`)
/// to `linker`; each capability links its own.
pub fn add_shared_interfaces(
    linker: &mut wasmtime::component::Linker<crate::runtime::PluginState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    types::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    execution::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
}

/// The `workspace-source` world.
pub mod workspace_source {
    wasmtime::component::bindgen!({
        world: "workspace-source",
        path: "../wit",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "agentgate:plugin/types": super::types,
            "agentgate:plugin/events": super::events,
            "agentgate:plugin/git": super::git,
            "agentgate:plugin/github": super::github,
        },
    });
}

/// The `sandbox-provider` world.
pub mod sandbox_provider {
    wasmtime::component::bindgen!({
        world: "sandbox-provider",
        path: "../wit",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "agentgate:plugin/types": super::types,
            "agentgate:plugin/execution": super::execution,
            "agentgate:plugin/events": super::events,
            "agentgate:plugin/process": super::process,
            "agentgate:plugin/docker": super::docker,
        },
    });
}

/// The `agent-driver` world.
pub mod agent_driver {
    wasmtime::component::bindgen!({
        world: "agent-driver",
        path: "../wit",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "agentgate:plugin/types": super::types,
            "agentgate:plugin/execution": super::execution,
            "agentgate:plugin/events": super::events,
            "agentgate:plugin/sandbox": super::sandbox,
        },
    });
}
