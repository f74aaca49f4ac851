//! What can go wrong with a repository, said so that the user knows what to fix.
//!
//! libgit2 reports most failures as text with a class; [`GitError::from_git2`] sorts
//! them into the cases a user acts on differently (credentials, a ref, a missing repo,
//! the network), each naming the URL and the fix.

use crate::wit::types::Error;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{url} refused the credentials ({detail}); check workspace.credentials: the token (or the key) must be valid and allowed to read the repository")]
    Auth { url: String, detail: String },
    #[error("{url} asks for credentials and none were given; set workspace.credentials (type token, ssh or env)")]
    NoCredentials { url: String },
    #[error("ref {reference:?} is neither a branch, a tag nor a commit of {url}{known}; fix workspace.ref")]
    UnknownRef {
        url: String,
        reference: String,
        known: String,
    },
    #[error("repository {url} was not found ({detail}); check workspace.url, and that the credentials may see it if it is private")]
    NotFound { url: String, detail: String },
    #[error("{url} cannot be reached ({detail}); check the URL and the network")]
    Unreachable { url: String, detail: String },
    #[error("{url}: {detail}")]
    Other { url: String, detail: String },
    #[error("credentials env variable {name} is not set on the host; export it or fix workspace.credentials.envVar")]
    MissingEnv { name: String },
    #[error("ssh key {path} cannot be read ({detail}); fix workspace.credentials.keyPath")]
    SshKey { path: String, detail: String },
    #[error("{url} carries a password or token; put it in workspace.credentials instead, so it is never written to .git/config")]
    SecretInUrl { url: String },
    #[error("{path} is outside the directories this run gave to git ({allowed}); clone into the workspace request's scratch-dir")]
    Outside { path: String, allowed: String },
    #[error("{repo} was not cloned by this run, so it has no recorded URL to push to; name the URL in the push")]
    NoOrigin { repo: String },
    #[error("clone destination {path} is not empty; choose an empty directory")]
    DestNotEmpty { path: String },
    #[error("repository {path}: {detail}")]
    Repo { path: String, detail: String },
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
