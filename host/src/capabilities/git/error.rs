//! What can go wrong with a repository, said so that the user knows what to fix.
//!
//! libgit2 reports most failures as text with a class; [`GitError::from_git2`] sorts
//! them into the cases a user acts on differently (credentials, a ref, a missing repo,
//! the network), each naming the URL and the fix.

use crate::wit::types::Error;

/// A failed git operation, each case naming what the user fixes.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The remote refused the credentials that were given.
    #[error("{url} refused the credentials ({detail}); check workspace.credentials: the token (or the key) must be valid and allowed to read the repository")]
    Auth {
        /// The remote's URL.
        url: String,
        /// libgit2's message.
        detail: String,
    },
    /// The remote asks for credentials and the contract gave none.
    #[error("{url} asks for credentials and none were given; set workspace.credentials (type token, ssh or env)")]
    NoCredentials {
        /// The remote's URL.
        url: String,
    },
    /// `workspace.ref` names no branch, tag or commit the remote has.
    #[error("ref {reference:?} is neither a branch, a tag nor a commit of {url}{known}; fix workspace.ref")]
    UnknownRef {
        /// The remote's URL.
        url: String,
        /// The ref as the contract wrote it.
        reference: String,
        /// " (it has a, b, …)" listing up to ten of the remote's branches and tags;
        /// empty when it advertised none.
        known: String,
    },
    /// The remote has no such repository, or hides it from these credentials.
    #[error("repository {url} was not found ({detail}); check workspace.url, and that the credentials may see it if it is private")]
    NotFound {
        /// The remote's URL.
        url: String,
        /// libgit2's message.
        detail: String,
    },
    /// The remote cannot be reached: a network, OS or TLS failure.
    #[error("{url} cannot be reached ({detail}); check the URL and the network")]
    Unreachable {
        /// The remote's URL.
        url: String,
        /// libgit2's message.
        detail: String,
    },
    /// Any other libgit2 failure while talking to a remote.
    #[error("{url}: {detail}")]
    Other {
        /// The remote's URL.
        url: String,
        /// libgit2's message.
        detail: String,
    },
    /// The env variable `workspace.credentials.envVar` names is not set on the host.
    #[error("credentials env variable {name} is not set on the host; export it or fix workspace.credentials.envVar")]
    MissingEnv {
        /// The variable's name.
        name: String,
    },
    /// The ssh key at `workspace.credentials.keyPath` cannot be read.
    #[error("ssh key {path} cannot be read ({detail}); fix workspace.credentials.keyPath")]
    SshKey {
        /// The key's path, `~` expanded.
        path: String,
        /// Why reading it failed.
        detail: String,
    },
    /// The URL embeds a password or token, which would be written to `.git/config`.
    #[error("{url} carries a password or token; put it in workspace.credentials instead, so it is never written to .git/config")]
    SecretInUrl {
        /// The URL as given.
        url: String,
    },
    /// A repository path lies outside the directories this run gave to git.
    #[error("{path} is outside the directories this run gave to git ({allowed}); clone into the workspace request's scratch-dir")]
    Outside {
        /// The path as the plugin gave it.
        path: String,
        /// The allowed directories, comma-separated, or "none".
        allowed: String,
    },
    /// A push without a URL to a repository this run did not clone.
    #[error("{repo} was not cloned by this run, so it has no recorded URL to push to; name the URL in the push")]
    NoOrigin {
        /// The repository's path.
        repo: String,
    },
    /// The clone destination exists and is not empty.
    #[error("clone destination {path} is not empty; choose an empty directory")]
    DestNotEmpty {
        /// The destination's path.
        path: String,
    },
    /// A failure inside a local repository (opening it, reading or writing objects).
    #[error("repository {path}: {detail}")]
    Repo {
        /// The repository's path.
        path: String,
        /// What failed.
        detail: String,
    },
}

impl GitError {
    /// Sorts a libgit2 failure while talking to `url`.
    pub fn from_git2(url: &str, e: &git2::Error, credentials_given: bool) -> GitError {
        let url = url.to_string();
        let detail = e.message().to_string();
        let lower = detail.to_lowercase();
        if e.code() == git2::ErrorCode::Auth
            || lower.contains("401")
            || lower.contains("authentication")
            || lower.contains("credentials")
            || lower.contains("403")
        {
            return if credentials_given {
                GitError::Auth { url, detail }
            } else {
                GitError::NoCredentials { url }
            };
        }
        if lower.contains("404")
            || lower.contains("not found")
            || lower.contains("does not appear to be a git repository")
            || lower.contains("not appear to be a git")
        {
            return GitError::NotFound { url, detail };
        }
        if matches!(
            e.class(),
            git2::ErrorClass::Net | git2::ErrorClass::Os | git2::ErrorClass::Ssl
        ) || lower.contains("failed to connect")
            || lower.contains("could not resolve")
            || lower.contains("connection refused")
        {
            return GitError::Unreachable { url, detail };
        }
        GitError::Other { url, detail }
    }

    /// A [`GitError::Repo`] for the repository at `path`.
    pub fn repo(path: &std::path::Path, e: impl std::fmt::Display) -> GitError {
        GitError::Repo {
            path: path.display().to_string(),
            detail: e.to_string(),
        }
    }
}

impl From<GitError> for Error {
    fn from(e: GitError) -> Error {
        let message = e.to_string();
        match e {
            GitError::UnknownRef { .. } => super::super::invalid_spec("ref", message),
            GitError::SecretInUrl { .. } => super::super::invalid_spec("url", message),
            GitError::MissingEnv { .. } => {
                super::super::invalid_spec("credentials.envVar", message)
            }
            GitError::SshKey { .. } => super::super::invalid_spec("credentials.keyPath", message),
            GitError::Outside { .. } => Error::Denied(message),
            GitError::Unreachable { .. } => Error::Unavailable(message),
            _ => Error::Failed(message),
        }
    }
}
