//! Workspace source `git`: clone a repository into the run's scratch directory.
//!
//! The plugin turns the `workspace` section into a clone request; the host's `git`
//! capability does the clone (refs, depth, credentials, progress events) and refuses a
//! destination outside the directory it gave for this run. The clone is the run's
//! output as much as its input, so it is kept (lifetime `kept`) in the run folder.

use agentgate_plugin_sdk::host::git::{self, CloneRequest, Credentials};
use agentgate_plugin_sdk::workspace_source::source::{
    Guest as Source, Lifetime, PreparedWorkspace, RootKind, WorkspaceRequest,
};
use agentgate_plugin_sdk::workspace_source::Guest;
use agentgate_plugin_sdk::{error, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;

/// The `workspace` section for `source: git`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GitSection {
    #[allow(dead_code)]
    source: Option<String>,
    url: String,
    #[serde(rename = "ref")]
    reference: Option<String>,
    depth: Option<u32>,
    credentials: Option<CredentialsSection>,
    #[allow(dead_code)]
    options: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
enum CredentialsSection {
    Token { token: String },
    Ssh { key_path: String },
    Env { env_var: String },
}

/// The clone request for a section. Pure, so it is tested natively.
fn plan(section_json: &str, scratch_dir: &str) -> Result<CloneRequest, Error> {
    let section: GitSection = options::parse("", section_json)?;
    if section.url.trim().is_empty() {
        return Err(error::invalid_spec(
            "url",
            "is empty; give the repository's clone URL",
        ));
    }
    if section.depth == Some(0) {
        return Err(error::invalid_spec(
            "depth",
            "must be at least 1; leave it out for the whole history",
        ));
    }
    let credentials = match section.credentials {
        None => Credentials::None,
        Some(CredentialsSection::Token { token }) if token.is_empty() => {
            return Err(error::invalid_spec(
                "credentials.token",
                "is empty; is the variable it names set on the host?",
            ))
        }
        Some(CredentialsSection::Token { token }) => Credentials::Token(token),
        Some(CredentialsSection::Ssh { key_path }) => Credentials::SshKey(key_path),
        Some(CredentialsSection::Env { env_var }) => Credentials::Env(env_var),
    };
    Ok(CloneRequest {
        url: section.url,
        dest: scratch_dir.trim_end_matches('/').to_string(),
        reference: section.reference,
        depth: section.depth,
        credentials,
    })
}

/// The workspace for a finished clone.
fn prepared(request: &CloneRequest, head: &str) -> PreparedWorkspace {
    let at = match &request.reference {
        Some(reference) => format!("{reference} ({})", &head[..head.len().min(12)]),
        None => head[..head.len().min(12)].to_string(),
    };
    PreparedWorkspace {
        root: request.dest.clone(),
        root_kind: RootKind::Existing,
        readonly: false,
        lifetime: Lifetime::Kept,
        scaffold: vec![],
        description: format!("git {} at {at} in {}", request.url, request.dest),
    }
}

struct Git;

impl Guest for Git {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "workspace-git".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::WorkspaceSource,
            serves: vec!["git".into()],
            summary: "A clone of a git repository (`url`, `ref`, `depth`, `credentials`)".into(),
            options_schema: None,
        }
    }
}

impl Source for Git {
    fn prepare(request: WorkspaceRequest) -> Result<PreparedWorkspace, Error> {
        let clone = plan(&request.section, &request.scratch_dir)?;
        let state = git::clone(&clone)?;
        Ok(prepared(&clone, &state.head))
    }

    fn release(_workspace: PreparedWorkspace) -> Result<(), Error> {
        // The clone stays in the run folder with the rest of the run's record.
        Ok(())
    }
}

agentgate_plugin_sdk::workspace_source::export_workspace_source!(Git);

#[cfg(test)]
mod tests {
    use super::*;

    fn field(err: Error) -> String {
        match err {
            Error::InvalidSpec(e) => e.path,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_section_becomes_a_clone_into_the_scratch_dir() {
        let req = plan(
            r#"{"source":"git","url":"https://h/o/r.git","ref":"v1","depth":1,
                "credentials":{"type":"token","token":"t0k"},"options":{}}"#,
            "/runs/r1/workspace/",
        )
        .unwrap();
        assert_eq!(req.dest, "/runs/r1/workspace");
        assert_eq!(req.reference.as_deref(), Some("v1"));
        assert_eq!(req.depth, Some(1));
        assert_eq!(req.credentials, Credentials::Token("t0k".into()));
        let ws = prepared(&req, "0123456789abcdef0123");
        assert_eq!(ws.root_kind, RootKind::Existing);
        assert_eq!(ws.lifetime, Lifetime::Kept);
        assert_eq!(
            ws.description,
            "git https://h/o/r.git at v1 (0123456789ab) in /runs/r1/workspace"
        );
        assert!(!ws.description.contains("t0k"));
    }

    #[test]
    fn credentials_of_each_kind() {
        let creds = |c: &str| {
            plan(&format!(r#"{{"url":"u","credentials":{c}}}"#), "/s").map(|r| r.credentials)
        };
        assert_eq!(
            creds(r#"{"type":"ssh","keyPath":"~/.ssh/id"}"#).unwrap(),
            Credentials::SshKey("~/.ssh/id".into())
        );
        assert_eq!(
            creds(r#"{"type":"env","envVar":"GIT_TOKEN"}"#).unwrap(),
            Credentials::Env("GIT_TOKEN".into())
        );
        assert_eq!(
            field(creds(r#"{"type":"token","token":""}"#).unwrap_err()),
            "credentials.token"
        );
        assert!(creds(r#"{"type":"password"}"#).is_err());
    }

    #[test]
    fn bad_sections_name_their_field() {
        assert_eq!(field(plan(r#"{"url":" "}"#, "/s").unwrap_err()), "url");
        assert_eq!(
            field(plan(r#"{"url":"u","depth":0}"#, "/s").unwrap_err()),
            "depth"
        );
    }
}
