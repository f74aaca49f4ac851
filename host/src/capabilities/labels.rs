//! The labels agentgate puts on every object it makes outside this host (Docker
//! containers and volumes, Kubernetes objects). `agentgate gc` finds what a dead run
//! left by them; a plugin can neither set nor change them.
//!
//! `io.agentgate.home` is a digest of the agentgate home's path. Every listing and
//! removal of leftovers selects on this home's value, so the gc of one home never
//! touches the runs of another home on a Docker engine or cluster they share: that
//! home's own gc (or its next run) settles them, with its own registry.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::wit::types::Error;

/// No plugin may set a label under this prefix.
pub const LABEL_PREFIX: &str = "io.agentgate.";
pub const LABEL_RUN_ID: &str = "io.agentgate.run-id";
/// The agentgate process that made the object ([`crate::registry::Owner`]).
pub const LABEL_OWNER: &str = "io.agentgate.owner";
pub const LABEL_CREATED: &str = "io.agentgate.created";
pub const LABEL_HOME: &str = "io.agentgate.home";

static HOME: OnceLock<PathBuf> = OnceLock::new();

/// Sets this process's agentgate home (the CLI does, once it knows it).
pub fn set_home(home: &Path) {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let _ = HOME.set(home);
}

/// The `io.agentgate.home` value of this process's home. Without a known home nothing
/// may be made: its objects could not be told from another home's.
pub fn home_label() -> Result<String, Error> {
    let home = HOME.get().cloned().or_else(|| {
        std::env::var_os("AGENTGATE_HOME")
            .filter(|h| !h.is_empty())
            .map(|h| {
                let h = PathBuf::from(h);
                h.canonicalize().unwrap_or(h)
            })
    });
    match home {
        Some(home) => Ok(digest(&home.to_string_lossy())),
        None => Err(Error::Unavailable(
            "this process does not know its agentgate home, so the objects it would make \
             could not be told from another home's; run through the agentgate command or \
             set AGENTGATE_HOME"
                .into(),
        )),
    }
}

/// A short digest of `text`, as a label value (Kubernetes allows at most 63 characters).
pub fn digest(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..20].to_string()
}
