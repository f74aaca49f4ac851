//! Credentials for one git call, handed to libgit2 through its credential callback.
//!
//! Nothing here is written anywhere: the secret lives in the callback's closure for the
//! duration of the call, so it never reaches a remote URL, `.git/config`, a log or an
//! event. The callback answers once; when the server refuses that answer libgit2 asks
//! again, and a second answer would only loop, so it fails as an authentication error.

use std::path::PathBuf;

use super::error::GitError;
use crate::home_path::expand_home;
use crate::wit::git::Credentials;

/// The username GitHub (and most forges) accept with a token as the password.
const TOKEN_USER: &str = "x-access-token";

/// Credentials resolved on the host, ready for the callback.
#[derive(Clone)]
pub enum Secret {
    /// No credentials: the callback refuses when asked.
    None,
    /// A username and password; a token goes as the password of `x-access-token`.
    UserPass {
        /// The username.
        user: String,
        /// The password or token.
        password: String,
    },
    /// The path of an ssh private key, `~` expanded.
    SshKey(PathBuf),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret itself.
        f.write_str(match self {
            Secret::None => "none",
            Secret::UserPass { .. } => "user/password",
            Secret::SshKey(_) => "ssh key",
        })
    }
}

impl Secret {
    /// Resolves the contract's credentials: reads the env variable, expands `~`.
    pub fn resolve(credentials: &Credentials) -> Result<Secret, GitError> {
        Ok(match credentials {
            Credentials::None => Secret::None,
            Credentials::Token(token) => Secret::token(token),
            Credentials::Env(name) => {
                let value =
                    std::env::var(name).map_err(|_| GitError::MissingEnv { name: name.clone() })?;
                match value.split_once(':') {
                    Some((user, password)) => Secret::UserPass {
                        user: user.to_string(),
                        password: password.to_string(),
                    },
                    None => Secret::token(&value),
                }
            }
            Credentials::GithubToken => match std::env::var(crate::capabilities::github::TOKEN_VAR)
            {
                Ok(token) if !token.is_empty() => Secret::token(&token),
                _ => Secret::None,
            },
            Credentials::SshKey(path) => {
                // `~` names the host user's home; without `HOME` the path is taken
                // as written.
                let env = |name: &str| std::env::var(name).ok();
                let path = PathBuf::from(expand_home(path, &env).unwrap_or_else(|_| path.clone()));
                if let Err(e) = std::fs::metadata(&path) {
                    return Err(GitError::SshKey {
                        path: path.display().to_string(),
                        detail: e.to_string(),
                    });
                }
                Secret::SshKey(path)
            }
        })
    }

    fn token(token: &str) -> Secret {
        Secret::UserPass {
            user: TOKEN_USER.to_string(),
            password: token.to_string(),
        }
    }

    /// Whether any credentials were given (anything but [`Secret::None`]).
    pub fn is_given(&self) -> bool {
        !matches!(self, Secret::None)
    }

    /// Installs the credential callback on `callbacks`.
    pub fn install<'a>(&'a self, callbacks: &mut git2::RemoteCallbacks<'a>) {
        let mut asked = 0;
        callbacks.credentials(move |_url, username_from_url, allowed| {
            asked += 1;
            if asked > 1 {
                return Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    "authentication failed: the server refused the credentials",
                ));
            }
            match self {
                Secret::None => Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    "authentication required but no credentials were given",
                )),
                Secret::UserPass { user, password }
                    if allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) =>
                {
                    git2::Cred::userpass_plaintext(user, password)
                }
                Secret::SshKey(path) if allowed.contains(git2::CredentialType::SSH_KEY) => {
                    git2::Cred::ssh_key(username_from_url.unwrap_or("git"), None, path, None)
                }
                Secret::SshKey(_) if allowed.contains(git2::CredentialType::USERNAME) => {
                    git2::Cred::username(username_from_url.unwrap_or("git"))
                }
                other => Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    format!(
                        "authentication failed: the server does not accept {other:?} credentials"
                    ),
                )),
            }
        });
    }
}

/// Refuses a URL that carries a password or token in its user part.
pub fn check_url(url: &str) -> Result<(), GitError> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        if userinfo.contains(':') {
            return Err(GitError::SecretInUrl {
                url: redact_url(url),
            });
        }
    }
    Ok(())
}

/// `url` with any password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_secrets_are_refused_and_redacted() {
        assert!(check_url("https://host/o/r.git").is_ok());
        assert!(check_url("https://git@host/o/r.git").is_ok());
        assert!(check_url("git@host:o/r.git").is_ok());
        let err = check_url("https://u:s3cret@host/o/r.git")
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("s3cret") && err.contains("u:***@host"),
            "{err}"
        );
    }

    #[test]
    fn home_is_expanded() {
        let home = std::env::var("HOME").unwrap();
        let missing = |path: &str| match Secret::resolve(&Credentials::SshKey(path.into())) {
            Err(GitError::SshKey { path, .. }) => path,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            missing("~/.ssh/agentgate-no-such-key"),
            format!("{}/.ssh/agentgate-no-such-key", home.trim_end_matches('/'))
        );
        assert_eq!(missing("/agentgate-no-such-key"), "/agentgate-no-such-key");
    }
}
