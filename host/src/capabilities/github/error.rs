//! GitHub's answers, turned into messages that name the repository and the fix.
//!
//! GitHub signals a spent rate limit with 403 or 429 and `x-ratelimit-remaining: 0`
//! (the reset time in `x-ratelimit-reset`, epoch seconds) or with `retry-after`; that
//! is told apart from a plain 403 (a token without the permission).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

use crate::wit::types::Error;

#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error("{what}: GitHub refused the token (401 {message}); set GITHUB_TOKEN on the host to a valid token")]
    Unauthorized { what: String, message: String },
    #[error("{what} needs a GitHub token and GITHUB_TOKEN is not set on the host; export it (a token with the `repo` scope)")]
    NoToken { what: String },
    #[error("{what}: the GitHub API rate limit is spent until {reset}; wait until then or use a token with a higher limit")]
    RateLimited { what: String, reset: String },
    #[error("{what}: GitHub forbids it (403 {message}); give GITHUB_TOKEN the permission (e.g. the `repo` scope or organization access)")]
    Forbidden { what: String, message: String },
    #[error("{what}: not found (404); check the owner and name, and that GITHUB_TOKEN may see it if it is private")]
    NotFound { what: String },
    #[error("{what}: the name is already taken ({message}); choose another repoName or remove the existing repository")]
    NameTaken { what: String, message: String },
    #[error("{what}: GitHub rejected the request (422 {message})")]
    Unprocessable { what: String, message: String },
    #[error("{what}: the GitHub API at {api} cannot be reached ({detail}); check GITHUB_API_URL and the network")]
    Unreachable {
        what: String,
        api: String,
        detail: String,
    },
    #[error("{what}: GitHub answered {status} {message}")]
    Other {
        what: String,
        status: u16,
        message: String,
    },
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },
    #[error("{what} was not ready after {waited:?}; GitHub may still be copying it: try the run again later")]
    NotReady { what: String, waited: Duration },
    #[error("{owner} is a GitHub user other than the token's ({login}); a repository can only be created for the token's user or an organization")]
    OtherUser { owner: String, login: String },
}

impl GithubError {
    /// The error for a non-success answer to a request about `what`.
    pub fn from_status(what: &str, status: u16, headers: &HeaderMap, body: &str) -> GithubError {
        let what = what.to_string();
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        let mut message = parsed["message"]
            .as_str()
            .unwrap_or(body)
            .trim()
            .to_string();
        if let Some(errors) = parsed["errors"].as_array() {
            let details: Vec<String> = errors
                .iter()
                .filter_map(|e| {
                    e["message"]
                        .as_str()
                        .or(e["code"].as_str())
                        .map(String::from)
                })
                .collect();
            if !details.is_empty() {
                message = format!("{message}: {}", details.join("; "));
            }
        }
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let spent = header("x-ratelimit-remaining") == Some("0");
        if matches!(status, 403 | 429) && (spent || header("retry-after").is_some()) {
            let reset = header("x-ratelimit-reset")
                .and_then(|s| s.parse::<u64>().ok())
                .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
                .or_else(|| {
                    header("retry-after")
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(|secs| SystemTime::now() + Duration::from_secs(secs))
                });
            return GithubError::RateLimited {
                what,
                reset: reset
                    .map(|t| humantime::format_rfc3339_seconds(t).to_string())
                    .unwrap_or_else(|| "an unknown time".into()),
            };
        }
        match status {
            401 => GithubError::Unauthorized { what, message },
            403 => GithubError::Forbidden { what, message },
            404 => GithubError::NotFound { what },
            422 if message.contains("already exists") => GithubError::NameTaken { what, message },
            422 => GithubError::Unprocessable { what, message },
            _ => GithubError::Other {
                what,
                status,
                message,
            },
        }
    }
}

impl From<GithubError> for Error {
    fn from(e: GithubError) -> Error {
        let message = e.to_string();
        match e {
            GithubError::Unreachable { .. } | GithubError::NoToken { .. } => {
                Error::Unavailable(message)
            }
            GithubError::NotReady { .. } => Error::TimedOut(message),
            GithubError::OtherUser { .. } => super::super::invalid_spec("owner", message),
            _ => Error::Failed(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_errors_that_say_what_to_do() {
        let none = HeaderMap::new();
        let e = GithubError::from_status("repo o/r", 404, &none, r#"{"message":"Not Found"}"#);
        assert!(matches!(e, GithubError::NotFound { .. }), "{e}");
        let body = r#"{"message":"Repository creation failed.","errors":[{"resource":"Repository","code":"custom","field":"name","message":"name already exists on this account"}]}"#;
        let e = GithubError::from_status("new repo o/r", 422, &none, body);
        assert!(e.to_string().contains("already taken"), "{e}");
        let mut limited = HeaderMap::new();
        limited.insert("x-ratelimit-remaining", "0".parse().unwrap());
        limited.insert("x-ratelimit-reset", "1893456000".parse().unwrap());
        let e = GithubError::from_status(
            "repo o/r",
            403,
            &limited,
            r#"{"message":"API rate limit exceeded"}"#,
        );
        assert!(e.to_string().contains("2030-01-01T00:00:00Z"), "{e}");
        let e = GithubError::from_status(
            "repo o/r",
            403,
            &none,
            r#"{"message":"Must have admin rights"}"#,
        );
        assert!(matches!(e, GithubError::Forbidden { .. }), "{e}");
    }
}
