//! `execution.workspace`: where the code comes from.
//!
//! Which keys are allowed depends on `source`, so the section is read in two steps: every key
//! any source knows goes into `RawWorkspace` (a typo is rejected there, with its line), then the
//! keys are checked against the source (`url` on a local workspace names the source it belongs
//! to) and the section becomes a `WorkspaceKind`. A source that is not built in names a
//! marketplace plugin, whose settings all go under `options`.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use super::fields;
use super::model::Options;

/// The built-in sources and the keys each allows besides `source` and `options`.
const SOURCES: [(&str, &[&str]); 5] = [
    ("local", &["path", "readonly"]),
    ("git", &["url", "ref", "depth", "credentials"]),
    ("github", &["owner", "repo", "ref", "fork"]),
    (
        "github-new",
        &["owner", "repoName", "private", "template", "description"],
    ),
    ("fresh", &["destPath", "template", "projectName"]),
];

/// Every key of `RawWorkspace`.
const ALL_KEYS: &[&str] = &[
    "source",
    "options",
    "path",
    "readonly",
    "url",
    "ref",
    "depth",
    "credentials",
    "owner",
    "repo",
    "fork",
    "repoName",
    "private",
    "template",
    "description",
    "destPath",
    "projectName",
];

/// The workspace section: its source, the source's settings, and options for its plugin.
#[derive(Debug, Clone)]
pub struct WorkspaceSpec {
    /// `local`, `git`, `github`, `github-new`, `fresh`, or a plugin's source name.
    pub source: String,
    /// The checked settings of a built-in source, or `Plugin` for a plugin's source.
    pub kind: WorkspaceKind,
    /// Settings for the source's plugin, passed through unread; empty when absent.
    pub options: Options,
}

/// The settings of each built-in source.
#[derive(Debug, Clone)]
pub enum WorkspaceKind {
    /// `source: local`: an existing host directory.
    Local(LocalWorkspace),
    /// `source: git`: a clone from any git server.
    Git(GitWorkspace),
    /// `source: github`: a clone of a GitHub repository or of a fork of it.
    Github(GithubWorkspace),
    /// `source: github-new`: a new GitHub repository, created and cloned.
    GithubNew(GithubNewWorkspace),
    /// `source: fresh`: a new directory scaffolded from a template.
    Fresh(FreshWorkspace),
    /// A marketplace plugin's source: everything is in `options`.
    Plugin,
}

/// Settings of `source: local`: an existing host directory, never created or removed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalWorkspace {
    /// Absolute host path.
    pub path: String,
    /// Mount the workspace read-only; the sandbox enforces it or refuses to start. Default
    /// false.
    #[serde(default)]
    pub readonly: bool,
}

/// Settings of `source: git`: a clone from any git server into the run folder.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitWorkspace {
    /// Repository URL to clone; a URL with a password is refused.
    pub url: String,
    /// Branch, tag or commit.
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
    /// Shallow clone depth, at least 1.
    #[schemars(range(min = 1))]
    pub depth: Option<u32>,
    /// How to authenticate the clone; none when unset.
    pub credentials: Option<GitCredentials>,
}

/// How to authenticate a clone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum GitCredentials {
    /// A token written in the TaskSpec, usually as `${VAR}`.
    Token {
        /// The token.
        token: String,
    },
    /// An SSH private key.
    Ssh {
        /// Path of the private key file.
        key_path: String,
    },
    /// A token read from the host's environment.
    Env {
        /// Name of the environment variable that holds the token.
        env_var: String,
    },
}

/// Settings of `source: github`: a clone of a GitHub repository, or of a fork of it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GithubWorkspace {
    /// User or organization that owns the repository.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// Branch, tag or commit; the default branch when unset.
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
    /// Fork the repository first and clone the fork. Default false.
    #[serde(default)]
    pub fork: bool,
}

/// Settings of `source: github-new`: a new GitHub repository, created and cloned.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GithubNewWorkspace {
    /// User or organization; the token's user when unset.
    pub owner: Option<String>,
    /// Name of the repository to create.
    pub repo_name: String,
    /// Private unless `private: false` is written, so that what an agent writes is not
    /// published by accident.
    #[serde(default = "private_by_default")]
    pub private: bool,
    /// Template repository, `owner/repo`.
    #[schemars(regex(pattern = r"^[^/]+/[^/]+$"))]
    pub template: Option<String>,
    /// The new repository's description on GitHub.
    pub description: Option<String>,
}

/// Settings of `source: fresh`: a new directory scaffolded from a template.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FreshWorkspace {
    /// Absolute host path of the new directory, refused if it exists and is not empty; a
    /// scratch directory in the run folder when unset.
    pub dest_path: Option<String>,
    /// Project scaffold to write; `empty` when unset.
    #[serde(default)]
    pub template: FreshTemplate,
    /// Project name, rewritten into a valid name for the template's ecosystem; the last
    /// part of `destPath`, or `project`, when unset.
    pub project_name: Option<String>,
}

fn private_by_default() -> bool {
    true
}

/// Scaffolding for a fresh workspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FreshTemplate {
    /// A Node.js project in TypeScript.
    NodeTypescript,
    /// A Node.js project in JavaScript.
    NodeJavascript,
    /// A Python project.
    Python,
    /// A Cargo project.
    Rust,
    /// A Go module.
    Go,
    /// No files: an empty directory.
    #[default]
    Empty,
}

impl WorkspaceSpec {
    /// The section as camelCase JSON, with `source`, every setting (secrets included) and
    /// `options`: what the host hands to the workspace plugin.
    pub fn section_json(&self) -> serde_json::Value {
        let settings = match &self.kind {
            WorkspaceKind::Local(local) => serde_json::to_value(local),
            WorkspaceKind::Git(git) => serde_json::to_value(git),
            WorkspaceKind::Github(github) => serde_json::to_value(github),
            WorkspaceKind::GithubNew(github_new) => serde_json::to_value(github_new),
            WorkspaceKind::Fresh(fresh) => serde_json::to_value(fresh),
            WorkspaceKind::Plugin => Ok(serde_json::Value::Object(Options::new())),
        };
        let Ok(serde_json::Value::Object(settings)) = settings else {
            unreachable!("workspace settings are structs of strings, numbers and booleans");
        };
        let mut section = Options::new();
        section.insert("source".into(), self.source.clone().into());
        section.extend(settings);
        section.insert("options".into(), self.options.clone().into());
        serde_json::Value::Object(section)
    }
}

impl Serialize for WorkspaceSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.section_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WorkspaceSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawWorkspace, Self>(deserializer, ALL_KEYS)
    }
}

/// Every key any source knows; `TryFrom` then checks them against the source.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWorkspace {
    source: Option<String>,
    options: Option<Options>,
    #[serde(default, deserialize_with = "fields::absolute_path_opt")]
    path: Option<String>,
    readonly: Option<bool>,
    url: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    #[serde(default, deserialize_with = "fields::depth")]
    depth: Option<u32>,
    credentials: Option<GitCredentials>,
    owner: Option<String>,
    repo: Option<String>,
    fork: Option<bool>,
    repo_name: Option<String>,
    private: Option<bool>,
    template: Option<String>,
    description: Option<String>,
    dest_path: Option<String>,
    project_name: Option<String>,
}

impl RawWorkspace {
    /// The source-specific keys that were written.
    fn written_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            ("path", self.path.is_some()),
            ("readonly", self.readonly.is_some()),
            ("url", self.url.is_some()),
            ("ref", self.git_ref.is_some()),
            ("depth", self.depth.is_some()),
            ("credentials", self.credentials.is_some()),
            ("owner", self.owner.is_some()),
            ("repo", self.repo.is_some()),
            ("fork", self.fork.is_some()),
            ("repoName", self.repo_name.is_some()),
            ("private", self.private.is_some()),
            ("template", self.template.is_some()),
            ("description", self.description.is_some()),
            ("destPath", self.dest_path.is_some()),
            ("projectName", self.project_name.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, written)| written.then_some(key))
    }
}

/// Why a `workspace` or its `credentials` mapping is refused. serde carries it on as
/// text, to become a [`super::SpecError`] at the mapping's path and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum WorkspaceError {
    #[error(
        "missing key \"source\"; expected {} or a plugin's source",
        source_names()
    )]
    MissingSource,
    #[error("\"source\" is empty")]
    EmptySource,
    #[error("{}", stray_key(.key, .of))]
    StrayKey { key: &'static str, of: String },
    #[error("missing key \"{key}\", required for source \"{of}\"")]
    Missing { key: &'static str, of: String },
    #[error("template {0:?} is not a repository; expected \"owner/repo\"")]
    NotARepository(String),
    #[error(
        "template {0:?} is not a fresh template; expected one of \
         node-typescript, node-javascript, python, rust, go, empty"
    )]
    NotAFreshTemplate(String),
    #[error("credentials of type {kind} take only \"{key}\"")]
    CredentialsTakeOnly {
        kind: &'static str,
        key: &'static str,
    },
    #[error("missing key \"{key}\", required for credentials of type {kind}")]
    CredentialsMissing {
        kind: &'static str,
        key: &'static str,
    },
}

/// The built-in sources, for messages.
fn source_names() -> String {
    let names: Vec<_> = SOURCES.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

impl TryFrom<RawWorkspace> for WorkspaceSpec {
    type Error = WorkspaceError;

    fn try_from(raw: RawWorkspace) -> Result<Self, WorkspaceError> {
        let source = raw.source.clone().ok_or(WorkspaceError::MissingSource)?;
        let allowed = SOURCES
            .iter()
            .find(|(name, _)| *name == source)
            .map_or(&[][..], |(_, keys)| keys);
        if let Some(stray) = raw.written_keys().find(|key| !allowed.contains(key)) {
            return Err(WorkspaceError::StrayKey {
                key: stray,
                of: source,
            });
        }
        let required = |value: Option<String>, key: &'static str| {
            value.ok_or_else(|| WorkspaceError::Missing {
                key,
                of: source.clone(),
            })
        };
        let kind = match source.as_str() {
            "local" => WorkspaceKind::Local(LocalWorkspace {
                path: required(raw.path, "path")?,
                readonly: raw.readonly.unwrap_or(false),
            }),
            "git" => WorkspaceKind::Git(GitWorkspace {
                url: required(raw.url, "url")?,
                git_ref: raw.git_ref,
                depth: raw.depth,
                credentials: raw.credentials,
            }),
            "github" => WorkspaceKind::Github(GithubWorkspace {
                owner: required(raw.owner, "owner")?,
                repo: required(raw.repo, "repo")?,
                git_ref: raw.git_ref,
                fork: raw.fork.unwrap_or(false),
            }),
            "github-new" => WorkspaceKind::GithubNew(GithubNewWorkspace {
                owner: raw.owner,
                repo_name: required(raw.repo_name, "repoName")?,
                private: raw.private.unwrap_or_else(private_by_default),
                template: raw.template.map(repository_template).transpose()?,
                description: raw.description,
            }),
            "fresh" => WorkspaceKind::Fresh(FreshWorkspace {
                dest_path: raw.dest_path,
                template: raw
                    .template
                    .map(fresh_template)
                    .transpose()?
                    .unwrap_or_default(),
                project_name: raw.project_name,
            }),
            "" => return Err(WorkspaceError::EmptySource),
            _ => WorkspaceKind::Plugin,
        };
        Ok(Self {
            source,
            kind,
            options: raw.options.unwrap_or_default(),
        })
    }
}

/// The message for a key that the workspace's source does not take.
fn stray_key(key: &str, source: &str) -> String {
    let owners: Vec<_> = SOURCES
        .iter()
        .filter(|(_, keys)| keys.contains(&key))
        .map(|(name, _)| *name)
        .collect();
    if SOURCES.iter().any(|(name, _)| *name == source) {
        format!(
            "key \"{key}\" belongs to source {}, not {source}",
            owners.join(" or ")
        )
    } else {
        format!(
            "key \"{key}\" does not apply to plugin source \"{source}\"; \
             put a plugin's settings under options"
        )
    }
}

fn repository_template(template: String) -> Result<String, WorkspaceError> {
    match template.split_once('/') {
        Some((owner, repo)) if !owner.is_empty() && !repo.is_empty() && !repo.contains('/') => {
            Ok(template)
        }
        _ => Err(WorkspaceError::NotARepository(template)),
    }
}

fn fresh_template(template: String) -> Result<FreshTemplate, WorkspaceError> {
    FreshTemplate::deserialize(de::value::StrDeserializer::<de::value::Error>::new(
        &template,
    ))
    .map_err(|_| WorkspaceError::NotAFreshTemplate(template))
}

/// `credentials`: `type` decides which other key is required.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCredentials {
    #[serde(rename = "type")]
    kind: CredentialType,
    token: Option<String>,
    key_path: Option<String>,
    env_var: Option<String>,
}

const CREDENTIAL_KEYS: &[&str] = &["type", "token", "keyPath", "envVar"];

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum CredentialType {
    Token,
    Ssh,
    Env,
}

impl<'de> Deserialize<'de> for GitCredentials {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawCredentials, Self>(deserializer, CREDENTIAL_KEYS)
    }
}

impl TryFrom<RawCredentials> for GitCredentials {
    type Error = WorkspaceError;

    fn try_from(raw: RawCredentials) -> Result<Self, WorkspaceError> {
        let (kind, key, value, others) = match raw.kind {
            CredentialType::Token => ("token", "token", raw.token, [raw.key_path, raw.env_var]),
            CredentialType::Ssh => ("ssh", "keyPath", raw.key_path, [raw.token, raw.env_var]),
            CredentialType::Env => ("env", "envVar", raw.env_var, [raw.token, raw.key_path]),
        };
        if others.iter().any(Option::is_some) {
            return Err(WorkspaceError::CredentialsTakeOnly { kind, key });
        }
        let value = value.ok_or(WorkspaceError::CredentialsMissing { kind, key })?;
        Ok(match raw.kind {
            CredentialType::Token => Self::Token { token: value },
            CredentialType::Ssh => Self::Ssh { key_path: value },
            CredentialType::Env => Self::Env { env_var: value },
        })
    }
}

/// One `oneOf` branch per built-in source, plus one for plugin sources.
impl JsonSchema for WorkspaceSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WorkspaceSpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let options = generator.subschema_for::<Options>();
        let mut branches = vec![
            source_branch::<LocalWorkspace>(generator, "local", &options),
            source_branch::<GitWorkspace>(generator, "git", &options),
            source_branch::<GithubWorkspace>(generator, "github", &options),
            source_branch::<GithubNewWorkspace>(generator, "github-new", &options),
            source_branch::<FreshWorkspace>(generator, "fresh", &options),
        ];
        let built_in: Vec<_> = SOURCES.iter().map(|(name, _)| *name).collect();
        branches.push(json_schema!({
            "type": "object",
            "properties": {
                "source": {"type": "string", "minLength": 1, "not": {"enum": built_in}},
                "options": options,
            },
            "required": ["source"],
            "additionalProperties": false,
        }));
        json_schema!({ "oneOf": branches })
    }
}

fn source_branch<T: JsonSchema>(
    generator: &mut SchemaGenerator,
    source: &str,
    options: &Schema,
) -> Schema {
    let mut branch = T::json_schema(generator);
    if let Some(properties) = branch.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.insert("source".into(), serde_json::json!({ "const": source }));
        properties.insert("options".into(), options.clone().into());
    }
    let required = branch
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::json!([]));
    if let Some(required) = required.as_array_mut() {
        required.push("source".into());
    }
    branch.insert("additionalProperties".into(), false.into());
    branch
}
