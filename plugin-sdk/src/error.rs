//! Constructors for the contract's `error` variant, so plugins read like prose.

use crate::host::types::{Error, FieldError};

/// The TaskSpec is wrong at `path` (relative to the section the plugin received).
pub fn invalid_spec(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::InvalidSpec(FieldError {
        path: path.into(),
        message: message.into(),
    })
}

/// Something needed is missing on this machine.
pub fn unavailable(message: impl Into<String>) -> Error {
    Error::Unavailable(message.into())
}

/// The operation ran and failed.
pub fn failed(message: impl Into<String>) -> Error {
    Error::Failed(message.into())
}

/// Policy refused the request.
pub fn denied(message: impl Into<String>) -> Error {
    Error::Denied(message.into())
}

/// A deadline passed.
pub fn timed_out(message: impl Into<String>) -> Error {
    Error::TimedOut(message.into())
}
