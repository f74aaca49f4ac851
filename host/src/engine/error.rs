//! How a run fails to start: the errors [`super::run`] returns before a run has a
//! folder. Once it has started, every outcome is a [`crate::record::RunResult`].

use std::path::PathBuf;

use crate::registry::TrackError;

/// Why a run could not start. Once it has started, every outcome is a [`RunResult`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The TaskSpec cannot run here; the text (masked) says why.
    #[error("{0}")]
    Invalid(String),
    /// The host could not record the run.
    #[error(transparent)]
    Host(HostFailure),
}

/// The host could not start the run: the text is the cause's, masked.
///
/// The cause is kept for code ([`HostFailure::cause`]) but is not the error's
/// `source()`: its text may quote a secret, and a printer of source chains would show
/// it unmasked.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HostFailure {
    message: String,
    cause: StartError,
}

impl HostFailure {
    /// `cause`, its text masked by `mask`.
    pub(super) fn masked(cause: StartError, mask: impl FnOnce(String) -> String) -> HostFailure {
        HostFailure {
            message: mask(cause.to_string()),
            cause,
        }
    }

    /// What failed, unmasked: for code that matches on it, never for printing.
    pub fn cause(&self) -> &StartError {
        &self.cause
    }
}

/// What kept the host from recording a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The run could not be recorded in the sandbox registry.
    #[error(transparent)]
    Registry(#[from] TrackError),
    /// The run's folder could not be created.
    #[error("cannot create the run folder under {}: {source}", .home.display())]
    Folder {
        /// `AGENTGATE_HOME`.
        home: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The run's event log could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Events {
        /// The event log.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why [`start`] did not start the run, before masking.
pub(super) enum NotStarted {
    Invalid(String),
    Host(StartError),
}

impl From<StartError> for NotStarted {
    fn from(error: StartError) -> NotStarted {
        NotStarted::Host(error)
    }
}
