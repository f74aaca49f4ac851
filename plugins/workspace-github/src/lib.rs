//! Workspace source `github`: clone a GitHub repository (or a fork of it) into the
//! run's scratch directory.
//!
//! The plugin looks the repository up (or forks it) through the host's `github`
//! capability, then clones its `clone_url` with the host's `git`, asking for the host's
//! GitHub token as credentials. The token never passes through the plugin.

use agentgate_plugin_sdk::host::git::{self, CloneRequest, Credentials};
use agentgate_plugin_sdk::host::github::{self, Repository};
use agentgate_plugin_sdk::workspace_source::source::{
    Guest as Source, Lifetime, PreparedWorkspace, RootKind, WorkspaceRequest,
};
use agentgate_plugin_sdk::workspace_source::Guest;
use agentgate_plugin_sdk::{error, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;

/// The `workspace` section for `source: github`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GithubSection {
    #[allow(dead_code)]
    source: Option<String>,
    owner: String,
    repo: String,
    #[serde(rename = "ref")]
    reference: Option<String>,
    #[serde(default)]
    fork: bool,
    #[allow(dead_code)]
    options: Option<serde_json::Value>,
}

fn parse(section_json: &str) -> Result<GithubSection, Error> {
    let section: GithubSection = options::parse("", section_json)?;
    for (field, value) in [("owner", &section.owner), ("repo", &section.repo)] {
        if value.is_empty() || value.contains('/') {
            return Err(error::invalid_spec(
                field,
                format!("{value:?} is not a GitHub {field} name (no `/`, not empty)"),
            ));
        }
    }
    Ok(section)
}

/// The clone of `repo` at `reference` into `dest`, with the host's token.
fn clone_request(repo: &Repository, reference: Option<String>, dest: &str) -> CloneRequest {
    CloneRequest {
        url: repo.clone_url.clone(),
        dest: dest.trim_end_matches('/').to_string(),
        reference,
        depth: None,
        credentials: Credentials::GithubToken,
    }
}

fn describe_workspace(section: &GithubSection, repo: &Repository, head: &str) -> String {
    let short = &head[..head.len().min(12)];
    let at = match &section.reference {
        Some(reference) => format!("{reference} ({short})"),
        None => format!("{} ({short})", repo.default_branch),
    };
    if section.fork {
        format!(
            "github {} (fork of {}/{}) at {at}",
            repo.full_name, section.owner, section.repo
        )
    } else {
        format!("github {} at {at}", repo.full_name)
    }
}

struct Github;

impl Guest for Github {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "workspace-github".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::WorkspaceSource,
            serves: vec!["github".into()],
            summary: "A clone of a GitHub repository (`owner`, `repo`, `ref`), or of a fork of it (`fork`)".into(),
            options_schema: None,
        }
    }
}

impl Source for Github {
    fn prepare(request: WorkspaceRequest) -> Result<PreparedWorkspace, Error> {
        let section = parse(&request.section)?;
        let repo = if section.fork {
            github::fork_repository(&section.owner, &section.repo, None)?
        } else {
            github::get_repository(&section.owner, &section.repo)?
        };
        let clone = clone_request(&repo, section.reference.clone(), &request.scratch_dir);
        let state = git::clone(&clone)?;
        Ok(PreparedWorkspace {
            root: clone.dest,
            root_kind: RootKind::Existing,
            readonly: false,
            lifetime: Lifetime::Kept,
            scaffold: vec![],
            description: describe_workspace(&section, &repo, &state.head),
        })
    }

    fn release(_workspace: PreparedWorkspace) -> Result<(), Error> {
        // The clone stays in the run folder; the fork stays on GitHub for delivery.
        Ok(())
    }
}

agentgate_plugin_sdk::workspace_source::export_workspace_source!(Github);

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> Repository {
        Repository {
            owner: "me".into(),
            name: "api".into(),
            full_name: "me/api".into(),
            clone_url: "https://github.com/me/api.git".into(),
            html_url: "https://github.com/me/api".into(),
            default_branch: "main".into(),
            private: false,
            fork: true,
        }
    }

    #[test]
    fn clones_with_the_hosts_token_and_says_what_it_forked() {
        let section =
            parse(r#"{"source":"github","owner":"acme","repo":"api","fork":true,"options":{}}"#)
                .unwrap();
        let req = clone_request(&repo(), section.reference.clone(), "/runs/r/workspace/");
        assert_eq!(req.credentials, Credentials::GithubToken);
        assert_eq!(req.dest, "/runs/r/workspace");
        assert_eq!(req.url, "https://github.com/me/api.git");
        assert_eq!(
            describe_workspace(&section, &repo(), "0123456789abcdef"),
            "github me/api (fork of acme/api) at main (0123456789ab)"
        );
    }

    #[test]
    fn names_are_checked() {
        let err = parse(r#"{"owner":"a/b","repo":"r"}"#).unwrap_err();
        assert!(
            matches!(err, Error::InvalidSpec(ref e) if e.path == "owner"),
            "{err:?}"
        );
        assert!(parse(r#"{"owner":"a","repo":"r","token":"x"}"#).is_err());
    }
}
