//! What each import of a component gives it: a capability (which must be granted),
//! something every plugin gets (WASI, which grants nothing here), or nothing this host
//! provides (the plugin is refused).
//!
//! A plugin's capabilities are exactly the host interfaces its component imports, read
//! from the component's type, never from what the plugin claims.

use std::collections::BTreeSet;

use crate::capabilities::Capability;

/// What linking one import gives a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportKind {
    /// A capability: the plugin must be granted it.
    Capability(Capability),
    /// Linked for every plugin; what it gives (often nothing) is the text.
    Free(&'static str),
    /// Nothing in this host provides it.
    Unknown,
}

/// One import of a component, by its full name (`wasi:http/types@0.2.3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub kind: ImportKind,
}

impl Import {
    /// What the import grants the plugin, in words.
    pub fn grants(&self) -> String {
        match self.kind {
            ImportKind::Capability(c) => format!("capability {c}: {}", c.summary()),
            ImportKind::Free(what) => what.to_string(),
            ImportKind::Unknown => "not provided by this host: the plugin is refused".into(),
        }
    }
}

/// Every import of a component, classified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imports {
    pub interfaces: Vec<Import>,
}

impl Imports {
    /// The capabilities the component imports.
    pub fn capabilities(&self) -> BTreeSet<Capability> {
        self.interfaces
            .iter()
            .filter_map(|i| match i.kind {
                ImportKind::Capability(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Imports the host does not provide at all.
    pub fn unknown(&self) -> Vec<String> {
        self.of_kind(ImportKind::Unknown)
    }

    /// The imported interfaces behind `capability`, by full name.
    pub fn of_capability(&self, capability: Capability) -> Vec<String> {
        self.of_kind(ImportKind::Capability(capability))
    }

    fn of_kind(&self, kind: ImportKind) -> Vec<String> {
        self.interfaces
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.name.clone())
            .collect()
    }
}

/// The interfaces this host links for every plugin, and what each gives: the
/// contract's shared types and WASI. What a plugin can do through WASI is set by its
/// store's WASI context, which grants nothing (see `runtime::state`).
const FREE: &[(&str, &str)] = &[
    ("agentgate:plugin/types", "nothing: shared types"),
    (
        "agentgate:plugin/execution",
        "nothing by itself: handles of commands started through a capability",
    ),
    ("wasi:io/error", "nothing by itself: errors of streams"),
    (
        "wasi:io/poll",
        "nothing by itself: waiting on other interfaces",
    ),
    (
        "wasi:io/streams",
        "nothing by itself: streams of other interfaces",
    ),
    ("wasi:clocks/wall-clock", "reading the time of day"),
    (
        "wasi:clocks/monotonic-clock",
        "reading a monotonic clock and waiting",
    ),
    ("wasi:random/random", "random bytes"),
    ("wasi:random/insecure", "random bytes"),
    ("wasi:random/insecure-seed", "a random seed"),
    (
        "wasi:cli/environment",
        "nothing: no environment variables, no arguments",
    ),
    ("wasi:cli/exit", "ending the call (reported as a trap)"),
    ("wasi:cli/stdin", "nothing: stdin is empty"),
    ("wasi:cli/stdout", "printing to the run's plugins.log"),
    ("wasi:cli/stderr", "printing to the run's plugins.log"),
    ("wasi:cli/terminal-input", "nothing: there is no terminal"),
    ("wasi:cli/terminal-output", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stdin", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stdout", "nothing: there is no terminal"),
    ("wasi:cli/terminal-stderr", "nothing: there is no terminal"),
    (
        "wasi:filesystem/types",
        "nothing: no directory is preopened",
    ),
    (
        "wasi:filesystem/preopens",
        "nothing: no directory is preopened",
    ),
    ("wasi:sockets/network", "nothing: sockets are denied"),
    (
        "wasi:sockets/instance-network",
        "nothing: sockets are denied",
    ),
    ("wasi:sockets/tcp", "nothing: sockets are denied"),
    (
        "wasi:sockets/tcp-create-socket",
        "nothing: sockets are denied",
    ),
    ("wasi:sockets/udp", "nothing: sockets are denied"),
    (
        "wasi:sockets/udp-create-socket",
        "nothing: sockets are denied",
    ),
    (
        "wasi:sockets/ip-name-lookup",
        "nothing: name lookups are denied",
    ),
];

/// Classifies one import name (e.g. `agentgate:plugin/process@0.1.0`).
pub fn classify_import(name: &str) -> ImportKind {
    let unversioned = name.split('@').next().unwrap_or(name);
    if let Some(capability) = Capability::of_interface(unversioned) {
        return ImportKind::Capability(capability);
    }
    let free_of_capabilities = Capability::all().flat_map(|c| c.unit().free_interfaces());
    FREE.iter()
        .chain(free_of_capabilities)
        .find(|(interface, _)| *interface == unversioned)
        .map_or(ImportKind::Unknown, |(_, what)| ImportKind::Free(what))
}

/// Classifies a component's import names.
pub fn classify_imports<'a>(names: impl IntoIterator<Item = &'a str>) -> Imports {
    Imports {
        interfaces: names
            .into_iter()
            .map(|name| Import {
                name: name.to_string(),
                kind: classify_import(name),
            })
            .collect(),
    }
}
