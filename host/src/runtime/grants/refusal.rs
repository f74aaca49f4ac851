//! Why a plugin is refused at load: it imports a capability it was not granted, or an
//! interface this host does not provide. The text says how to grant it.

use super::imports::Imports;
use super::{Granted, PinMismatch};
use crate::capabilities::Capability;

/// Why a plugin was refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it imports {} which {} not granted; grant with --grant {plugin}={} or in grants.yaml{}", list(.missing), if .missing.len() == 1 { "was" } else { "were" }, names(.missing), pin_text(.pin))]
    NotGranted {
        plugin: String,
        /// Each capability missing, with the interfaces the component imports for it.
        missing: Vec<(Capability, Vec<String>)>,
        /// A grant that exists but is pinned to another build.
        pin: Option<PinMismatch>,
    },
    #[error("it imports {} which this host does not provide", .0.join(", "))]
    UnknownImports(Vec<String>),
}

fn list(missing: &[(Capability, Vec<String>)]) -> String {
    missing
        .iter()
        .map(|(c, interfaces)| format!("{} ({})", interfaces.join(", "), c.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn names(missing: &[(Capability, Vec<String>)]) -> String {
    missing
        .iter()
        .map(|(c, _)| c.name())
        .collect::<Vec<_>>()
        .join(",")
}

fn pin_text(pin: &Option<PinMismatch>) -> String {
    pin.as_ref().map(|p| format!("; {p}")).unwrap_or_default()
}

/// Checks imports against a grant.
pub fn check(plugin: &str, imports: &Imports, granted: &Granted) -> Result<(), Refusal> {
    let unknown = imports.unknown();
    if !unknown.is_empty() {
        return Err(Refusal::UnknownImports(unknown));
    }
    let missing: Vec<_> = imports
        .capabilities()
        .difference(&granted.capabilities)
        .map(|c| (*c, imports.of_capability(*c)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Refusal::NotGranted {
            plugin: plugin.to_string(),
            missing,
            pin: granted.mismatch.clone(),
        })
    }
}
