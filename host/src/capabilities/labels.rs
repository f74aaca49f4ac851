//! The labels agentgate puts on every object it makes outside this host (Docker
//! containers and volumes, Kubernetes objects). `agentgate gc` finds what a dead run
//! left by them; a plugin can neither set nor change them.
//!
//! What they say is the run's [`RunIdentity`]: the engine computes it once, when the
//! run starts, and hands it to every capability in the run's
//! [`RunContext`](super::RunContext), so no capability reads the process or its
//! environment to learn whose objects it makes.
//!
//! `io.agentgate.home` is a digest of the agentgate home's path. Every listing and
//! removal of leftovers selects on this home's value, so the gc of one home never
//! touches the runs of another home on a Docker engine or cluster they share: that
//! home's own gc (or its next run) settles them, with its own registry.

use std::path::Path;
use std::time::SystemTime;

/// No plugin may set a label under this prefix.
pub const LABEL_PREFIX: &str = "io.agentgate.";
pub const LABEL_RUN_ID: &str = "io.agentgate.run-id";
/// The agentgate process that made the object ([`RunIdentity::owner`]).
pub const LABEL_OWNER: &str = "io.agentgate.owner";
pub const LABEL_CREATED: &str = "io.agentgate.created";
pub const LABEL_HOME: &str = "io.agentgate.home";

/// Whose a run's objects are: what the labels on everything made for it say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunIdentity {
    /// The run's id (the `io.agentgate.run-id` label).
    pub run_id: String,
    /// The agentgate process that runs it, as the registry writes its owner
    /// (`pid=…,start=…,boot=…,pidns=…`), for `agentgate gc`.
    pub owner: String,
    /// When the run started.
    pub created: SystemTime,
    /// The `io.agentgate.home` value of the run's agentgate home ([`home_label`]).
    pub home: String,
}

impl RunIdentity {
    /// Run `run_id` of the agentgate process `owner` in agentgate home `home`,
    /// starting now.
    pub fn new(run_id: String, owner: String, home: &Path) -> RunIdentity {
        RunIdentity {
            run_id,
            owner,
            created: SystemTime::now(),
            home: home_label(home),
        }
    }
}

/// The `io.agentgate.home` value of agentgate home `home`: the digest of its canonical
/// path (of the path as given when it cannot be resolved).
pub fn home_label(home: &Path) -> String {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    digest(&home.to_string_lossy())
}

/// A short digest of `text`, as a label value (Kubernetes allows at most 63 characters).
pub fn digest(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..20].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home is labelled by its resolved path: the same folder named two ways is one
    /// home, two folders are two.
    #[test]
    fn a_home_is_labelled_by_its_resolved_path() {
        let home = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let dotted = home.path().join(".");
        assert_eq!(home_label(home.path()), home_label(&dotted));
        assert_ne!(home_label(home.path()), home_label(other.path()));
        assert_eq!(
            home_label(home.path()),
            digest(&home.path().canonicalize().unwrap().to_string_lossy())
        );
    }

    /// A run's context carries the identity the engine gave it; a context for
    /// `describe()` has none, and asking for it is the `unavailable` error.
    #[test]
    fn only_a_run_context_has_an_identity() {
        use crate::capabilities::RunContext;
        use crate::record::EventSink;
        use crate::wit::types::Error;

        let identity = RunIdentity::new("r1".into(), "pid=1".into(), Path::new("/h"));
        let run = RunContext::new(
            identity.clone(),
            std::sync::Arc::new(EventSink::discard()),
            Default::default(),
        );
        assert_eq!(run.identity().unwrap(), &identity);
        assert_eq!(run.run_id, "r1");
        assert_eq!(identity.home, digest("/h"));

        let error = RunContext::describe_only().identity().unwrap_err();
        assert!(
            matches!(&error, Error::Unavailable(m) if m.contains("agentgate home")),
            "{error}"
        );
    }
}
