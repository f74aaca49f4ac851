//! The host side of `agentgate:plugin/github`: the GitHub REST API through octocrab.
//!
//! The token (`GITHUB_TOKEN`) and the API base URL (`GITHUB_API_URL`, for GitHub
//! Enterprise and the tests) are the host's: a plugin names repositories and gets
//! repository records back, never the token. [`client`] talks to the API and keeps
//! failed answers whole, [`error`] turns them into messages with the fix, [`repos`]
//! holds the operations. Every call naming a repository is first checked against the
//! plugin's `github` scope ([`scope`]): the repository against
//! `repos`, a fork against `fork` (the repository forked and where the fork lands), a
//! new repository (its `owner/name`, the token's user when no owner is given) against
//! `create` and `repos`.

mod client;
mod error;
mod repos;
mod scope;
pub(crate) mod unit;

pub use client::TOKEN_VAR;
pub use error::GithubError;

use crate::capabilities::PluginView;
use crate::record::EventBody;
use crate::wit::github::{Host, NewRepository, PullRequest, Repository};
use crate::wit::types::Error;
use client::Client;

impl PluginView<'_> {
    /// The plugin's `github` scope; a store never granted it reaches nothing.
    fn github_scope(&self) -> scope::GithubScope {
        (self.scopes.of::<scope::GithubScope>().cloned()).unwrap_or_else(scope::narrowest)
    }

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

    /// Checks a call on `owner/name` against the plugin's scope; `needs` is `create` or
    /// `fork` for a call that makes a repository.
    fn check_repo(
        &self,
        call: &'static str,
        owner: &str,
        name: &str,
        needs: Option<&'static str>,
    ) -> Result<(), Error> {
        self.github_scope()
            .check_repo(&self.plugin, call, &format!("{owner}/{name}"), needs)
            .map_err(|d| self.scope_denied(d))
    }

    /// Checks the creation of `request` (`call`).
    async fn check_new_repo(
        &mut self,
        call: &'static str,
        request: &NewRepository,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.check_destination(call, request.owner.as_deref(), &request.name, "create")
            .await
    }

    /// Checks a repository a call makes (`needs`: `create` or `fork`) at `owner/name`;
    /// without an owner it is the token's user's, asked of GitHub only when the scope
    /// lists repositories.
    async fn check_destination(
        &mut self,
        call: &'static str,
        owner: Option<&str>,
        name: &str,
        needs: &'static str,
    ) -> wasmtime::Result<Result<(), Error>> {
        let owner = match owner {
            Some(owner) => owner.to_string(),
            None if self.github_scope().repos == crate::capabilities::scope::Patterns::Any => {
                String::from("*")
            }
            None => match self
                .github(|c| async move { repos::authenticated_user(&c).await })
                .await?
            {
                Ok(user) => user,
                Err(e) => return Ok(Err(e)),
            },
        };
        Ok(self.check_repo(call, &owner, name, Some(needs)))
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

impl Host for PluginView<'_> {
    async fn authenticated_user(&mut self) -> wasmtime::Result<Result<String, Error>> {
        self.github(|c| async move { repos::authenticated_user(&c).await })
            .await
    }

    async fn get_repository(
        &mut self,
        owner: String,
        name: String,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.run.ensure_active()?;
        if let Err(e) = self.check_repo("github.get-repository", &owner, &name, None) {
            return Ok(Err(e));
        }
        self.github(|c| async move { repos::get(&c, &owner, &name).await.map(Into::into) })
            .await
    }

    async fn fork_repository(
        &mut self,
        owner: String,
        name: String,
        organization: Option<String>,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.run.ensure_active()?;
        let call = "github.fork-repository";
        if let Err(e) = self.check_repo(call, &owner, &name, Some("fork")) {
            return Ok(Err(e));
        }
        // Where the fork lands must be in scope too.
        if let Err(e) = self
            .check_destination(call, organization.as_deref(), &name, "fork")
            .await?
        {
            return Ok(Err(e));
        }
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
        self.run.ensure_active()?;
        if let Err(e) = self
            .check_new_repo("github.create-repository", &request)
            .await?
        {
            return Ok(Err(e));
        }
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
        self.run.ensure_active()?;
        let call = "github.generate-from-template";
        if let Err(e) = self.check_repo(call, &template_owner, &template_name, None) {
            return Ok(Err(e));
        }
        if let Err(e) = self.check_new_repo(call, &request).await? {
            return Ok(Err(e));
        }
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
        self.run.ensure_active()?;
        if let Err(e) = self.check_repo("github.create-pull-request", &owner, &name, None) {
            return Ok(Err(e));
        }
        self.github(|c| async move {
            let fields =
                serde_json::json!({"title": title, "head": head, "base": base, "body": body});
            repos::pull_request(&c, &owner, &name, fields).await
        })
        .await
    }
}
