//! Workspace source `github-new`: create a GitHub repository, then clone it into the
//! run's scratch directory.
//!
//! The repository is made through the host's `github` capability, under the user or
//! the organization `owner` names, empty (with GitHub's initial commit) or generated
//! from `template`, and cloned with the host's token, which the plugin never sees.

use agentgate_plugin_sdk::host::git::{self, CloneRequest, Credentials};
use agentgate_plugin_sdk::host::github::{self, NewRepository};
use agentgate_plugin_sdk::workspace_source::source::{
    Guest as Source, Lifetime, PreparedWorkspace, RootKind, WorkspaceRequest,
};
use agentgate_plugin_sdk::workspace_source::Guest;
use agentgate_plugin_sdk::{error, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;

/// The `workspace` section for `source: github-new`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewSection {
    #[allow(dead_code)]
    source: Option<String>,
    owner: Option<String>,
    repo_name: String,
    #[serde(default = "private_by_default")]
    private: bool,
    template: Option<String>,
    description: Option<String>,
    #[allow(dead_code)]
    options: Option<serde_json::Value>,
}

fn private_by_default() -> bool {
    true
}

/// What to ask GitHub for: the new repository, and the template to generate it from.
fn plan(section_json: &str) -> Result<(NewRepository, Option<(String, String)>), Error> {
    let section: NewSection = options::parse("", section_json)?;
    if section.repo_name.is_empty() || section.repo_name.contains('/') {
        return Err(error::invalid_spec(
            "repoName",
            format!(
                "{:?} is not a repository name (no `/`, not empty)",
                section.repo_name
            ),
        ));
    }
    let template = match &section.template {
        None => None,
        Some(template) => match template.split_once('/') {
            Some((owner, name)) if !owner.is_empty() && !name.is_empty() && !name.contains('/') => {
                Some((owner.to_string(), name.to_string()))
            }
            _ => {
                return Err(error::invalid_spec(
                    "template",
                    format!("{template:?} is not `owner/repo`"),
                ))
            }
        },
    };
    Ok((
        NewRepository {
            owner: section.owner.filter(|o| !o.is_empty()),
            name: section.repo_name,
            private: section.private,
            description: section.description,
        },
        template,
    ))
}

struct GithubNew;

impl Guest for GithubNew {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "workspace-github-new".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::WorkspaceSource,
            serves: vec!["github-new".into()],
            summary: "A new GitHub repository (`owner`, `repoName`, `private`, `template`), cloned"
                .into(),
            options_schema: None,
        }
    }
}

impl Source for GithubNew {
    fn prepare(request: WorkspaceRequest) -> Result<PreparedWorkspace, Error> {
        let (new, template) = plan(&request.section)?;
        let repo = match &template {
            Some((owner, name)) => github::generate_from_template(owner, name, &new)?,
            None => github::create_repository(&new)?,
        };
        let clone = CloneRequest {
            url: repo.clone_url.clone(),
            dest: request.scratch_dir.trim_end_matches('/').to_string(),
            reference: None,
            depth: None,
            credentials: Credentials::GithubToken,
        };
        let state = git::clone(&clone)?;
        let from = template
            .map(|(o, n)| format!(" from template {o}/{n}"))
            .unwrap_or_default();
        Ok(PreparedWorkspace {
            root: clone.dest,
            root_kind: RootKind::Existing,
            readonly: false,
            lifetime: Lifetime::Kept,
            scaffold: vec![],
            description: format!(
                "github-new {}{from} ({}, {})",
                repo.full_name,
                if repo.private { "private" } else { "public" },
                &state.head[..state.head.len().min(12)]
            ),
        })
    }

    fn release(_workspace: PreparedWorkspace) -> Result<(), Error> {
        // The repository is the run's product: it stays, and so does its clone.
        Ok(())
    }
}

agentgate_plugin_sdk::workspace_source::export_workspace_source!(GithubNew);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_by_default_and_template_split() {
        let (new, template) =
            plan(r#"{"source":"github-new","repoName":"p","template":"acme/tpl","options":{}}"#)
                .unwrap();
        assert!(new.private);
        assert_eq!(new.owner, None);
        assert_eq!(template, Some(("acme".into(), "tpl".into())));
        let (new, _) =
            plan(r#"{"owner":"acme","repoName":"p","private":false,"description":"d"}"#).unwrap();
        assert_eq!(new.owner.as_deref(), Some("acme"));
        assert!(!new.private);
        assert_eq!(new.description.as_deref(), Some("d"));
    }

    #[test]
    fn bad_names_are_refused() {
        for (json, field) in [
            (r#"{"repoName":"a/b"}"#, "repoName"),
            (r#"{"repoName":"p","template":"tpl"}"#, "template"),
        ] {
            match plan(json).unwrap_err() {
                Error::InvalidSpec(e) => assert_eq!(e.path, field),
                other => panic!("{other:?}"),
            }
        }
    }
}
