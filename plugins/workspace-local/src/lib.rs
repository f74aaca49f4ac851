//! Workspace source `local`: use a directory that already exists on the host.
//!
//! The plugin only decides what the workspace is. The host checks that `path` is a
//! directory before the run, and the sandbox enforces `readonly` (or refuses to start),
//! so this plugin needs no capabilities at all. The directory is the user's: it is
//! never created and never removed.

use agentgate_plugin_sdk::workspace_source::source::{
    Guest as Source, Lifetime, PreparedWorkspace, RootKind, WorkspaceRequest,
};
use agentgate_plugin_sdk::workspace_source::Guest;
use agentgate_plugin_sdk::{error, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;

/// The `workspace` section for `source: local`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LocalSection {
    #[allow(dead_code)]
    source: Option<String>,
    path: String,
    #[serde(default)]
    readonly: bool,
    #[allow(dead_code)]
    options: Option<serde_json::Value>,
}

/// Turns the section into the workspace. Pure, so it is tested natively.
fn prepare(section_json: &str) -> Result<PreparedWorkspace, Error> {
    let section: LocalSection = options::parse("", section_json)?;
    if !section.path.starts_with('/') {
        return Err(error::invalid_spec(
            "path",
            format!(
                "`{}` is not absolute; give the full path of the directory",
                section.path
            ),
        ));
    }
    let root = match section.path.trim_end_matches('/') {
        "" => "/".to_string(),
        trimmed => trimmed.to_string(),
    };
    let description = if section.readonly {
        format!("local {root} (read-only)")
    } else {
        format!("local {root}")
    };
    Ok(PreparedWorkspace {
        root,
        root_kind: RootKind::Existing,
        readonly: section.readonly,
        lifetime: Lifetime::Kept,
        scaffold: vec![],
        description,
    })
}

struct Local;

impl Guest for Local {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "workspace-local".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::WorkspaceSource,
            serves: vec!["local".into()],
            summary: "An existing directory on the host (`path`), optionally read-only".into(),
            options_schema: None,
        }
    }
}

impl Source for Local {
    fn prepare(request: WorkspaceRequest) -> Result<PreparedWorkspace, Error> {
        prepare(&request.section)
    }

    fn release(_workspace: PreparedWorkspace) -> Result<(), Error> {
        // The directory belongs to the user: nothing to undo.
        Ok(())
    }
}

agentgate_plugin_sdk::workspace_source::export_workspace_source!(Local);

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid_path(err: Error) -> String {
        match err {
            Error::InvalidSpec(e) => e.path,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn uses_the_directory_as_is() {
        let ws = prepare(r#"{"source":"local","path":"/src/app/"}"#).unwrap();
        assert_eq!(ws.root, "/src/app");
        assert_eq!(ws.root_kind, RootKind::Existing);
        assert_eq!(ws.lifetime, Lifetime::Kept);
        assert!(!ws.readonly);
        assert!(ws.scaffold.is_empty());
        assert_eq!(ws.description, "local /src/app");
    }

    #[test]
    fn readonly_is_passed_on() {
        let ws = prepare(r#"{"source":"local","path":"/src/app","readonly":true}"#).unwrap();
        assert!(ws.readonly);
        assert_eq!(ws.description, "local /src/app (read-only)");
    }

    #[test]
    fn relative_path_is_refused() {
        let err = prepare(r#"{"source":"local","path":"src/app"}"#).unwrap_err();
        assert_eq!(invalid_path(err), "path");
    }

    #[test]
    fn missing_path_is_refused() {
        let err = prepare(r#"{"source":"local"}"#).unwrap_err();
        assert!(format!("{err:?}").contains("path"), "{err:?}");
    }
}
