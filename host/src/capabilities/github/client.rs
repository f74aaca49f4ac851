//! The REST client: octocrab, pointed at `GITHUB_API_URL` with `GITHUB_TOKEN`.
//!
//! Both are read from the host's environment when a call is made, never from a plugin.
//! Requests go out through octocrab's raw verbs so that a failed answer keeps its
//! status and headers (the rate-limit reset time lives in a header), and the bodies are
//! read into the few fields the plugins use.

use bytes::Bytes;
use http::StatusCode;
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use octocrab::Octocrab;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::GithubError;

/// Host variable with the API base URL (GitHub Enterprise: `https://HOST/api/v3`).
pub const API_URL_VAR: &str = "GITHUB_API_URL";
/// Host variable with the token.
pub const TOKEN_VAR: &str = "GITHUB_TOKEN";
const DEFAULT_API: &str = "https://api.github.com";

pub struct Client {
    octocrab: Octocrab,
    pub api: String,
    pub has_token: bool,
}

impl Client {
    pub fn from_env() -> Result<Client, GithubError> {
        let api = std::env::var(API_URL_VAR)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_API.into());
        let api = api.trim_end_matches('/').to_string();
        let token = std::env::var(TOKEN_VAR).ok().filter(|s| !s.is_empty());
        let invalid = |detail: String| GithubError::Invalid {
            what: format!("{API_URL_VAR}={api}"),
            detail,
        };
        let mut builder = Octocrab::builder()
            .base_uri(api.as_str())
            .map_err(|e| invalid(format!("not a URL ({e}); set it to e.g. {DEFAULT_API}")))?;
        if let Some(token) = &token {
            builder = builder.personal_token(token.clone());
        }
        let octocrab = builder
            .build()
            .map_err(|e| invalid(format!("building the client: {e}")))?;
        Ok(Client {
            octocrab,
            has_token: token.is_some(),
            api,
        })
    }

    /// Fails with a clear error when `what` needs a token and there is none.
    pub fn require_token(&self, what: &str) -> Result<(), GithubError> {
        if self.has_token {
            Ok(())
        } else {
            Err(GithubError::NoToken { what: what.into() })
        }
    }

    /// The absolute URL of `route` (which starts with `/`).
    fn url(&self, route: &str) -> String {
        format!("{}{route}", self.api)
    }

    pub async fn get<T: DeserializeOwned>(
        &self,
        what: &str,
        route: &str,
    ) -> Result<T, GithubError> {
        let answer = self.octocrab._get(self.url(route)).await;
        self.read(what, answer).await.map(|(_, body)| body)
    }

    /// The status of a GET, for polling; errors other than not-ready still fail.
    pub async fn probe(&self, what: &str, route: &str) -> Result<StatusCode, GithubError> {
        let response = self
            .octocrab
            ._get(self.url(route))
            .await
            .map_err(|e| self.unreachable(what, e))?;
        Ok(response.status())
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        what: &str,
        route: &str,
        body: &B,
    ) -> Result<T, GithubError> {
        let answer = self.octocrab._post(self.url(route), Some(body)).await;
        self.read(what, answer).await.map(|(_, body)| body)
    }

    async fn read<T: DeserializeOwned>(
        &self,
        what: &str,
        answer: octocrab::Result<http::Response<BoxBody<Bytes, octocrab::Error>>>,
    ) -> Result<(StatusCode, T), GithubError> {
        let response = answer.map_err(|e| self.unreachable(what, e))?;
        let (parts, body) = response.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| self.unreachable(what, e))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        if !parts.status.is_success() {
            return Err(GithubError::from_status(
                what,
                parts.status.as_u16(),
                &parts.headers,
                &text,
            ));
        }
        serde_json::from_str(&text)
            .map(|body| (parts.status, body))
            .map_err(|e| GithubError::Invalid {
                what: what.into(),
                detail: format!(
                    "GitHub's answer could not be read ({e}); is {API_URL_VAR} a GitHub API?"
                ),
            })
    }

    fn unreachable(&self, what: &str, e: impl std::fmt::Display) -> GithubError {
        GithubError::Unreachable {
            what: what.into(),
            api: self.api.clone(),
            detail: e.to_string(),
        }
    }
}
