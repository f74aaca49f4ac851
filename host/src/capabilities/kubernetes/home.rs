//! Which agentgate home made an object: the label `io.agentgate.home` is a digest of
//! the home's path, so `gc` of one home lists and reaps only its own runs on a cluster
//! shared with other homes (and other machines).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::runtime::bindings::types::Error;

static HOME: OnceLock<PathBuf> = OnceLock::new();

/// Sets this process's agentgate home (the CLI does, once it knows it).
pub fn set(home: &Path) {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let _ = HOME.set(home);
}

/// The label value of this process's home; without a known home nothing may be made
/// (its objects could not be told from another home's).
pub fn label() -> Result<String, Error> {
    let home = HOME.get().cloned().or_else(|| {
        std::env::var_os("AGENTGATE_HOME")
            .filter(|h| !h.is_empty())
            .map(|h| {
                let h = PathBuf::from(h);
                h.canonicalize().unwrap_or(h)
            })
    });
    match home {
        Some(home) => Ok(super::objects::digest(&home.to_string_lossy())),
        None => Err(Error::Unavailable(
            "this process does not know its agentgate home, so the objects it would make on \
             a cluster could not be told from another home's; run through the agentgate \
             command or set AGENTGATE_HOME"
                .into(),
        )),
    }
}
