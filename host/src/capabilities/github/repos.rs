//! Repositories: get, fork (and wait), create for a user or an organization, generate
//! from a template, open a pull request.
//!
//! GitHub forks and generates asynchronously: the API answers `202` before the new
//! repository has its branches. [`wait_ready`] polls the default branch, bounded, and
//! reports each wait as a progress event so a slow copy shows as such.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client::Client;
use super::error::GithubError;
use crate::wit::github::{NewRepository, PullRequest, Repository};

/// The fields of GitHub's repository object the plugins use
/// (<https://docs.github.com/rest/repos/repos#get-a-repository>).
#[derive(Debug, Deserialize)]
pub struct RepoBody {
    pub name: String,
    pub full_name: String,
    pub owner: Account,
    pub clone_url: String,
    pub html_url: String,
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub private: bool,
    #[serde(default)]
    pub fork: bool,
}

#[derive(Debug, Deserialize)]
pub struct Account {
    pub login: String,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

impl From<RepoBody> for Repository {
    fn from(r: RepoBody) -> Repository {
        Repository {
            owner: r.owner.login,
            name: r.name,
            full_name: r.full_name,
            clone_url: r.clone_url,
            html_url: r.html_url,
            default_branch: r.default_branch.unwrap_or_else(|| "main".into()),
            private: r.private,
            fork: r.fork,
        }
    }
}

/// How long to wait for a fork or a generated repository, and how often to look.
pub struct Wait {
    pub limit: Duration,
    pub first: Duration,
    pub max_interval: Duration,
}

impl Default for Wait {
    fn default() -> Wait {
        Wait {
            limit: Duration::from_secs(300),
            first: Duration::from_millis(500),
            max_interval: Duration::from_secs(5),
        }
    }
}

fn seg(s: &str) -> String {
    // Owner and repository names are URL path segments.
    s.chars()
        .flat_map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => vec![c],
            other => format!("%{:02X}", other as u32).chars().collect(),
        })
        .collect()
}

pub async fn authenticated_user(client: &Client) -> Result<String, GithubError> {
    client.require_token("the token's user")?;
    let user: Account = client.get("the token's user", "/user").await?;
    Ok(user.login)
}

pub async fn get(client: &Client, owner: &str, name: &str) -> Result<RepoBody, GithubError> {
    client
        .get(
            &format!("repository {owner}/{name}"),
            &format!("/repos/{}/{}", seg(owner), seg(name)),
        )
        .await
}

/// Polls until the default branch of `repo` exists.
pub async fn wait_ready(
    client: &Client,
    repo: &RepoBody,
    wait: &Wait,
    progress: &(dyn Fn(String) + Send + Sync),
) -> Result<(), GithubError> {
    let what = format!("repository {}", repo.full_name);
    let branch = repo.default_branch.as_deref().unwrap_or("main");
    let route = format!(
        "/repos/{}/{}/branches/{}",
        seg(&repo.owner.login),
        seg(&repo.name),
        seg(branch)
    );
    let started = Instant::now();
    let mut interval = wait.first;
    loop {
        let status = client.probe(&what, &route).await?;
        if status.is_success() {
            return Ok(());
        }
        // 404 (not there yet) and 409 (empty while copying) mean "wait"; others fail.
        if !matches!(status.as_u16(), 404 | 409) {
            return Err(GithubError::Other {
                what,
                status: status.as_u16(),
                message: format!("while waiting for branch {branch}"),
            });
        }
        if started.elapsed() + interval > wait.limit {
            return Err(GithubError::NotReady {
                what,
                waited: started.elapsed(),
            });
        }
        progress(format!(
            "waiting for GitHub to copy {} ({}s so far)",
            repo.full_name,
            started.elapsed().as_secs()
        ));
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(wait.max_interval);
    }
}

pub async fn fork(
    client: &Client,
    owner: &str,
    name: &str,
    organization: Option<&str>,
) -> Result<RepoBody, GithubError> {
    let what = format!("forking {owner}/{name}");
    client.require_token(&what)?;
    let mut body = serde_json::Map::new();
    if let Some(org) = organization {
        body.insert("organization".into(), org.into());
    }
    client
        .post(
            &what,
            &format!("/repos/{}/{}/forks", seg(owner), seg(name)),
            &body,
        )
        .await
}

#[derive(Serialize)]
struct CreateBody<'a> {
    name: &'a str,
    private: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    auto_init: bool,
}

/// Creates the repository under `request.owner`: the token's user (`/user/repos`) or
/// an organization (`/orgs/{org}/repos`), whichever the owner is.
pub async fn create(client: &Client, request: &NewRepository) -> Result<RepoBody, GithubError> {
    let what = format!(
        "creating repository {}/{}",
        request.owner.as_deref().unwrap_or("(token's user)"),
        request.name
    );
    client.require_token(&what)?;
    let body = CreateBody {
        name: &request.name,
        private: request.private,
        description: request.description.as_deref(),
        auto_init: true,
    };
    let route = match &request.owner {
        None => "/user/repos".to_string(),
        Some(owner) => {
            let login = authenticated_user(client).await?;
            if owner.eq_ignore_ascii_case(&login) {
                "/user/repos".to_string()
            } else {
                let account: Account = client
                    .get(&format!("owner {owner}"), &format!("/users/{}", seg(owner)))
                    .await?;
                if account.kind.as_deref() != Some("Organization") {
                    return Err(GithubError::OtherUser {
                        owner: owner.clone(),
                        login,
                    });
                }
                format!("/orgs/{}/repos", seg(owner))
            }
        }
    };
    client.post(&what, &route, &body).await
}

pub async fn generate(
    client: &Client,
    template_owner: &str,
    template_name: &str,
    request: &NewRepository,
) -> Result<RepoBody, GithubError> {
    let what = format!(
        "generating {}/{} from template {template_owner}/{template_name}",
        request.owner.as_deref().unwrap_or("(token's user)"),
        request.name
    );
    client.require_token(&what)?;
    let owner = match &request.owner {
        Some(owner) => owner.clone(),
        None => authenticated_user(client).await?,
    };
    let mut body = json!({
        "owner": owner,
        "name": request.name,
        "private": request.private,
        "include_all_branches": false,
    });
    if let Some(description) = &request.description {
        body["description"] = description.clone().into();
    }
    client
        .post(
            &what,
            &format!(
                "/repos/{}/{}/generate",
                seg(template_owner),
                seg(template_name)
            ),
            &body,
        )
        .await
}

pub async fn pull_request(
    client: &Client,
    owner: &str,
    name: &str,
    fields: serde_json::Value,
) -> Result<PullRequest, GithubError> {
    #[derive(Deserialize)]
    struct PullBody {
        number: u64,
        html_url: String,
    }
    let what = format!("opening a pull request on {owner}/{name}");
    client.require_token(&what)?;
    let pull: PullBody = client
        .post(
            &what,
            &format!("/repos/{}/{}/pulls", seg(owner), seg(name)),
            &fields,
        )
        .await?;
    Ok(PullRequest {
        number: pull.number,
        html_url: pull.html_url,
    })
}
