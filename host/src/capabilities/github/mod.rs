//! The host side of `agentgate:plugin/github`: the GitHub REST API through octocrab.
//!
//! The token (`GITHUB_TOKEN`) and the API base URL (`GITHUB_API_URL`, for GitHub
//! Enterprise and the tests) are the host's: a plugin names repositories and gets
//! repository records back, never the token. [`client`] talks to the API and keeps
//! failed answers whole, [`error`] turns them into messages with the fix, [`repos`]
//! holds the operations.

mod client;
mod error;
mod repos;

pub use client::{API_URL_VAR, TOKEN_VAR};
pub use error::GithubError;

use crate::record::EventBody;
use crate::runtime::bindings::github::{Host, NewRepository, PullRequest, Repository};
use crate::runtime::bindings::types::Error;
use crate::runtime::PluginState;
use client::Client;

impl PluginState {
    /// Runs `work` with a client, mapping its error to the contract's.
    async fn github<T, F>(
        &mut self,
        work: impl FnOnce(Client) -> F,
    ) -> wasmtime::Result<Result<T, Error>>
    where
        F: std::future::Future<Output = Result<T, GithubError>>,
    {
        self.run.ensure_active()?;
        let result = match Client::from_env() {
            Ok(client) => work(client).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(Error::from))
    }

    /// Reports a wait for GitHub as a progress event of the plugin.
    fn github_progress(&self) -> impl Fn(String) + Send + Sync + 'static {
        let (events, plugin) = (self.run.events.clone(), self.plugin.clone());
        move |message| {
            events.emit(
                &plugin,
                EventBody::Progress {
                    phase: "github".into(),
                    message,
                    current: None,
                    total: None,
                },
            )
        }
    }
}

impl Host for PluginState {
    async fn authenticated_user(&mut self) -> wasmtime::Result<Result<String, Error>> {
        self.github(|c| async move { repos::authenticated_user(&c).await })
            .await
    }

    async fn get_repository(
        &mut self,
        owner: String,
        name: String,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.github(|c| async move { repos::get(&c, &owner, &name).await.map(Into::into) })
            .await
    }

    async fn fork_repository(
        &mut self,
        owner: String,
        name: String,
        organization: Option<String>,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        let progress = self.github_progress();
        self.github(|c| async move {
            let fork = repos::fork(&c, &owner, &name, organization.as_deref()).await?;
            progress(format!("forked {owner}/{name} to {}", fork.full_name));
            repos::wait_ready(&c, &fork, &repos::Wait::default(), &progress).await?;
            Ok(fork.into())
        })
        .await
    }

    async fn create_repository(
        &mut self,
        request: NewRepository,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        let progress = self.github_progress();
        self.github(|c| async move {
            let repo = repos::create(&c, &request).await?;
            progress(format!("created {}", repo.full_name));
            repos::wait_ready(&c, &repo, &repos::Wait::default(), &progress).await?;
            Ok(repo.into())
        })
        .await
    }

    async fn generate_from_template(
        &mut self,
        template_owner: String,
        template_name: String,
        request: NewRepository,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        let progress = self.github_progress();
        self.github(|c| async move {
            let repo = repos::generate(&c, &template_owner, &template_name, &request).await?;
            progress(format!(
                "generated {} from {template_owner}/{template_name}",
                repo.full_name
            ));
            repos::wait_ready(&c, &repo, &repos::Wait::default(), &progress).await?;
            Ok(repo.into())
        })
        .await
    }

    async fn create_pull_request(
        &mut self,
        owner: String,
        name: String,
        title: String,
        head: String,
        base: String,
        body: String,
    ) -> wasmtime::Result<Result<PullRequest, Error>> {
        self.github(|c| async move {
            let fields =
                serde_json::json!({"title": title, "head": head, "base": base, "body": body});
            repos::pull_request(&c, &owner, &name, fields).await
        })
        .await
    }
}
