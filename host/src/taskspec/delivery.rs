//! `spec.delivery`: how the reference system ships the work once every gate passes: a
//! git commit, a push, a GitHub pull request, and notifications.
//!
//! Every documented field loads here, typed and checked: enumerations, branch names,
//! URLs, e-mail addresses, and the `{variables}` of every template (an unknown one is an
//! error that lists the known ones). Settings that would contradict each other, so that
//! one of them would be silently ignored (`pr` under `mode: local`, `branchPrefix` beside
//! `branchName`, `autoPush: true` under `mode: local`), are refused too. Loading is not
//! delivering: this version of agentgate delivers nothing itself, so
//! [`super::check_supported`] refuses the section until delivery is built; before this
//! module the section was accepted and ignored, and a user waited for a pull request that
//! never came.
//!
//! As in `workspace.rs`, sections whose keys depend on a sibling (a notification's keys on
//! its `type`) or whose keys must agree (`git`) are read into a raw struct, then checked by
//! `TryFrom`; such an error names the mapping and its line. Where the reference's
//! documentation is vague, the choice made is written on the field (and in
//! `docs/taskspec.md`).

use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

use super::error::{did_you_mean, unknown_choice, with_hint};
use super::fields::{self, Scalar};
use super::schema;

/// `delivery`. Sections left out are `None`; [`Delivery::git_or_default`] gives the git
/// delivery that applies (the reference's defaults when `git` is absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct Delivery {
    /// How the work is committed and pushed.
    pub git: Option<GitDelivery>,
    /// The pull request; only with `git.mode: github-pr`, which opens one with these
    /// defaults when `pr` is absent.
    pub pr: Option<PullRequest>,
    /// Who is told when the task succeeds or fails.
    pub notifications: Option<Notifications>,
}

impl Delivery {
    /// `git` as written, or the reference's defaults (`mode: local`).
    pub fn git_or_default(&self) -> GitDelivery {
        self.git.clone().unwrap_or_default()
    }

    /// Whether a pull request is opened: `mode: github-pr` (a `pr` section needs it).
    pub fn opens_pull_request(&self) -> bool {
        self.git_or_default().mode == GitMode::GithubPr
    }
}

/// `delivery.git`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct GitDelivery {
    /// `local` unless set.
    #[serde(default)]
    pub mode: GitMode,
    /// The branch is this prefix and the task's slug; `agentgate/` unless set. Refused
    /// beside `branchName`, which would make it unused.
    #[serde(default = "GitDelivery::default_branch_prefix")]
    pub branch_prefix: String,
    /// The whole branch name, instead of prefix and slug.
    pub branch_name: Option<String>,
    /// Put before each commit message; `[AgentGate]` unless set (the reference's default,
    /// kept so that existing tooling matching it still does).
    #[serde(default = "GitDelivery::default_commit_prefix")]
    pub commit_prefix: String,
    /// The commit message, with `{type}`, `{task}`, `{changes}` (the changed files),
    /// `{workOrderId}`, `{runId}` and `{date}`. How `{type}` is chosen, the reference does
    /// not say; that is decided when delivery is built.
    pub commit_template: Option<String>,
    /// Commit the work; true unless set. `false` is allowed with `mode: local` only (the
    /// changes stay uncommitted in the workspace): the other modes push a commit.
    #[serde(default = "yes")]
    pub auto_commit: bool,
    /// Whether the work is pushed. The mode decides: `push` and `github-pr` push (a pull
    /// request needs its branch on GitHub), `local` does not. The reference's default,
    /// false, and its silence on whether `github-pr` pushes without `autoPush` leave it
    /// ambiguous, so a value written here must agree with the mode, and this field holds
    /// what the mode decides.
    #[serde(default)]
    pub auto_push: bool,
    /// Sign the commits with GPG; false unless set. Needs `autoCommit`.
    #[serde(default)]
    pub sign_commits: bool,
}

fn yes() -> bool {
    true
}

impl GitDelivery {
    fn default_branch_prefix() -> String {
        "agentgate/".into()
    }

    fn default_commit_prefix() -> String {
        "[AgentGate]".into()
    }
}

impl Default for GitDelivery {
    fn default() -> Self {
        Self {
            mode: GitMode::default(),
            branch_prefix: Self::default_branch_prefix(),
            branch_name: None,
            commit_prefix: Self::default_commit_prefix(),
            commit_template: None,
            auto_commit: true,
            auto_push: false,
            sign_commits: false,
        }
    }
}

/// How far the work goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GitMode {
    /// A commit in the workspace.
    #[default]
    Local,
    /// A commit on a new branch, pushed.
    Push,
    /// A commit on a new branch, pushed, and a GitHub pull request.
    GithubPr,
}

impl GitMode {
    fn as_str(self) -> &'static str {
        match self {
            GitMode::Local => "local",
            GitMode::Push => "push",
            GitMode::GithubPr => "github-pr",
        }
    }
}

/// `delivery.pr`: the pull request `mode: github-pr` opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullRequest {
    /// Always true: `false` would open no pull request under a mode that opens one, so it
    /// is refused (use `mode: push`). The reference's examples leave it out; true unless
    /// set.
    #[serde(default = "yes", deserialize_with = "create")]
    pub create: bool,
    /// Open it as a draft; false unless set.
    #[serde(default)]
    pub draft: bool,
    /// A template (the reference does not list the pull request's variables; those of the
    /// commit template and `{branch}`, `{commit}`, `{iterations}` are allowed).
    #[serde(default, deserialize_with = "pr_template")]
    pub title: Option<String>,
    /// A template, with the variables of `title`.
    #[serde(default, deserialize_with = "pr_template")]
    pub body: Option<String>,
    /// Labels to add.
    #[serde(default, deserialize_with = "names")]
    pub labels: Vec<String>,
    /// GitHub users or teams asked to review.
    #[serde(default, deserialize_with = "names")]
    pub reviewers: Vec<String>,
    /// GitHub users assigned.
    #[serde(default, deserialize_with = "names")]
    pub assignees: Vec<String>,
    /// The branch to merge into; the repository's default branch when unset.
    #[serde(default, deserialize_with = "base")]
    pub base: Option<String>,
    /// Merge on its own once allowed; off unless set.
    #[serde(default)]
    pub auto_merge: AutoMerge,
}

/// `pr.autoMerge`. The reference gives no defaults but for `enabled`; the others are
/// chosen on each field. Its other keys are refused while `enabled` is false, where they
/// would do nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct AutoMerge {
    /// False unless set.
    #[serde(default)]
    pub enabled: bool,
    /// `merge` (GitHub's own default) unless set.
    #[serde(default)]
    pub method: MergeMethod,
    /// Wait for the required checks to pass; true unless set, since merging before them is
    /// the unsafe choice.
    #[serde(default = "yes")]
    pub wait_for_checks: bool,
    /// Delete the branch once merged; false (as GitHub does by default) unless set.
    #[serde(default)]
    pub delete_on_merge: bool,
}

impl Default for AutoMerge {
    fn default() -> Self {
        Self {
            enabled: false,
            method: MergeMethod::default(),
            wait_for_checks: true,
            delete_on_merge: false,
        }
    }
}

/// How a pull request is merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MergeMethod {
    /// A merge commit.
    #[default]
    Merge,
    /// One squashed commit.
    Squash,
    /// The commits, rebased.
    Rebase,
}

/// `delivery.notifications`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Notifications {
    /// Sent when the task succeeds.
    #[serde(default)]
    pub on_success: Vec<Notification>,
    /// Sent when the task fails.
    #[serde(default)]
    pub on_failure: Vec<Notification>,
}

/// One notification, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Notification {
    /// A Slack message through an incoming webhook.
    Slack(SlackNotification),
    /// An e-mail.
    Email(EmailNotification),
    /// An HTTP request with a JSON body (`event`, `workOrderId`, `runId`, `task`, `prUrl`,
    /// `duration` in milliseconds, `timestamp`).
    Webhook(WebhookNotification),
}

/// Settings of a `slack` notification.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlackNotification {
    /// The incoming webhook's `https://` URL. Required (as in the reference's source
    /// schema; its examples leave it out, but nothing else says where to post).
    pub webhook: String,
    /// The channel, when the webhook's own is not the one.
    pub channel: Option<String>,
    /// The message, with the notification variables.
    pub template: Option<String>,
}

/// Settings of an `email` notification.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmailNotification {
    /// Addresses; at least one.
    pub to: Vec<String>,
    /// The subject, with the notification variables.
    pub subject: Option<String>,
    /// The body, with the notification variables.
    pub template: Option<String>,
}

/// Settings of a `webhook` notification.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookNotification {
    /// An `http://` or `https://` URL.
    pub url: String,
    /// `POST` unless set.
    #[serde(default)]
    pub method: HttpMethod,
    /// Request headers. A `${VAR}` in a value is substituted when the TaskSpec is read, as
    /// everywhere in a TaskSpec (the reference's examples use it; it does not say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The method of a webhook notification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// `POST`.
    #[default]
    Post,
    /// `PUT`.
    Put,
}

/// The variables of `git.commitTemplate`.
pub const COMMIT_VARIABLES: &[&str] = &["type", "task", "changes", "workOrderId", "runId", "date"];

/// The variables of `pr.title` and `pr.body`: the reference does not list them; those of
/// the commit template, and what is known once the branch is pushed.
pub const PR_VARIABLES: &[&str] = &[
    "type",
    "task",
    "changes",
    "workOrderId",
    "runId",
    "date",
    "branch",
    "commit",
    "iterations",
];

/// The variables of notification templates (Slack `template`, e-mail `subject` and
/// `template`).
pub const NOTIFICATION_VARIABLES: &[&str] = &[
    "task",
    "workOrderId",
    "runId",
    "prUrl",
    "prNumber",
    "branch",
    "commit",
    "duration",
    "error",
    "iterations",
];

/// Why a delivery field or section is refused. serde carries it on as text, to become a
/// [`super::SpecError`] at the field's (or the section's) path and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum DeliveryError {
    #[error("{}", unknown_variable(.name, .known))]
    UnknownVariable {
        name: String,
        known: &'static [&'static str],
    },
    #[error("{value} is not {what}; expected a string")]
    NotText { value: String, what: &'static str },
    #[error("{what} is empty")]
    Empty { what: &'static str },
    #[error("{name:?} is not a git branch name: it {problem}")]
    NotABranch { name: String, problem: &'static str },
    #[error("{0:?} is not an https:// URL")]
    NotHttps(String),
    #[error("{0:?} is not an http:// or https:// URL")]
    NotHttp(String),
    #[error("{0:?} is not an e-mail address")]
    NotEmail(String),
    #[error("{0:?} is not an HTTP header name")]
    NotHeaderName(String),
    #[error(
        "{}",
        with_hint(
            "pr.create: false opens no pull request",
            "use git.mode push to push without one, or remove create"
        )
    )]
    CreateFalse,
    #[error("{0} is not true or false")]
    NotBool(String),
    #[error(
        "{}",
        with_hint(
            "branchName replaces the whole branch name, so branchPrefix would be unused",
            "write branchPrefix or branchName, not both"
        )
    )]
    PrefixAndName,
    #[error(
        "{}",
        with_hint(
            "autoPush: true, but mode local does not push",
            "write mode: push (or github-pr) to push"
        )
    )]
    PushUnderLocal,
    #[error("{}", no_push_under(.0))]
    NoPushUnder(&'static str),
    #[error("autoCommit: false leaves nothing for mode {0} to push; only mode local may skip the commit")]
    NoCommitUnder(&'static str),
    #[error("signCommits: true needs autoCommit: true")]
    SignWithoutCommit,
    #[error("{}", pr_without_github_pr(.0))]
    PrWithoutGithubPr(&'static str),
    #[error("{}", auto_merge_disabled(.0))]
    AutoMergeDisabled(&'static str),
    #[error("{}", unknown_choice("notification type", .0, &NOTIFICATION_TYPE_NAMES))]
    UnknownNotificationType(String),
    #[error("missing key \"type\"; expected one of: {}", NOTIFICATION_TYPE_NAMES.join(", "))]
    MissingNotificationType,
    #[error("{}", stray_notification_key(.key, .of))]
    StrayNotificationKey { key: &'static str, of: &'static str },
    #[error("missing key \"{key}\", required for notification type {of}")]
    MissingNotificationKey { key: &'static str, of: &'static str },
    #[error("\"to\" is empty; expected at least one address")]
    NoRecipient,
}

fn no_push_under(mode: &str) -> String {
    with_hint(
        format_args!("autoPush: false, but mode {mode} pushes"),
        "write mode: local to keep the commit local, or remove autoPush",
    )
}

fn pr_without_github_pr(mode: &str) -> String {
    with_hint(
        format_args!("pr applies to git.mode github-pr only, and the mode is {mode}"),
        "write git.mode: github-pr, or remove pr",
    )
}

fn auto_merge_disabled(key: &str) -> String {
    with_hint(
        format_args!("autoMerge.{key} has no effect while autoMerge.enabled is false"),
        "write enabled: true, or remove it",
    )
}

/// The message for a template variable that is not one of `known`.
fn unknown_variable(name: &str, known: &[&str]) -> String {
    let listed: Vec<_> = known.iter().map(|known| format!("{{{known}}}")).collect();
    let message = format!(
        "unknown variable {{{name}}} in the template; expected one of: {}",
        listed.join(", ")
    );
    match did_you_mean(name, known) {
        Some(near) => with_hint(message, format_args!("did you mean {{{near}}}?")),
        None => message,
    }
}

/// Checks the `{variables}` of a template against `known`. A variable is `{` and a name
/// (a letter or `_`, then letters, digits or `_`) and `}`; any other brace is text.
pub(crate) fn check_template(
    text: &str,
    known: &'static [&'static str],
) -> Result<(), DeliveryError> {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let length = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..length];
        let is_name = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if is_name && after[length..].starts_with('}') {
            if !known.contains(&name) {
                return Err(DeliveryError::UnknownVariable {
                    name: name.to_string(),
                    known,
                });
            }
            rest = &after[length + 1..];
        } else {
            rest = after;
        }
    }
    Ok(())
}

/// A string field checked by `check`, at its line.
fn checked_text<'de, D: Deserializer<'de>, T>(
    d: D,
    what: &'static str,
    check: impl FnOnce(&str) -> Result<T, DeliveryError>,
) -> Result<T, D::Error> {
    fields::checked_by(d, what, |value| match value {
        Scalar::Str(text) => check(text),
        other => Err(DeliveryError::NotText {
            value: other.to_string(),
            what,
        }),
    })
}

fn template<'de, D: Deserializer<'de>>(
    d: D,
    known: &'static [&'static str],
) -> Result<Option<String>, D::Error> {
    checked_text(d, "a template", |text| {
        check_template(text, known)?;
        Ok(Some(text.to_string()))
    })
}

fn commit_template<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    template(d, COMMIT_VARIABLES)
}

fn pr_template<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    template(d, PR_VARIABLES)
}

fn notification_template<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    template(d, NOTIFICATION_VARIABLES)
}

fn non_empty(text: &str, what: &'static str) -> Result<String, DeliveryError> {
    if text.trim().is_empty() {
        return Err(DeliveryError::Empty { what });
    }
    Ok(text.to_string())
}

/// Why `name` is not a git branch name (git's `check-ref-format` rules); `None` when it is.
/// A prefix may be empty and may end with `/`.
fn branch_problem(name: &str, prefix: bool) -> Option<&'static str> {
    if name.is_empty() {
        return (!prefix).then_some("is empty");
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        return Some("has a space, a control character or one of ~ ^ : ? * [ \\");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return Some("has \"..\", \"@{\" or \"//\"");
    }
    if name.starts_with('-') || name.starts_with('/') {
        return Some("starts with - or /");
    }
    if name.split('/').any(|part| part.starts_with('.')) {
        return Some("has a part that starts with .");
    }
    if !prefix && (name.ends_with('/') || name.ends_with('.') || name.ends_with(".lock")) {
        return Some("ends with /, . or .lock");
    }
    None
}

fn branch<'de, D: Deserializer<'de>>(d: D, prefix: bool) -> Result<Option<String>, D::Error> {
    checked_text(d, "a branch name", |text| {
        match branch_problem(text, prefix) {
            Some(problem) => Err(DeliveryError::NotABranch {
                name: text.to_string(),
                problem,
            }),
            None => Ok(Some(text.to_string())),
        }
    })
}

fn branch_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    branch(d, true)
}

fn branch_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    branch(d, false)
}

fn base<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    branch(d, false)
}

fn create<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    fields::checked_by(d, "true", |value| match value {
        Scalar::Bool(true) => Ok(true),
        Scalar::Bool(false) => Err(DeliveryError::CreateFalse),
        other => Err(DeliveryError::NotBool(other.to_string())),
    })
}

/// A list of names (labels, reviewers, assignees), none blank.
fn names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Name(String);

    impl<'de> Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            checked_text(d, "a name", |text| non_empty(text, "a name")).map(Name)
        }
    }

    let names = Vec::<Name>::deserialize(d)?;
    Ok(names.into_iter().map(|Name(name)| name).collect())
}

fn url(text: &str, https_only: bool) -> Result<String, DeliveryError> {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://").filter(|_| !https_only));
    let well_formed = rest.is_some_and(|rest| {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    match (well_formed, https_only) {
        (true, _) => Ok(text.to_string()),
        (false, true) => Err(DeliveryError::NotHttps(text.to_string())),
        (false, false) => Err(DeliveryError::NotHttp(text.to_string())),
    }
}

fn https_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_text(d, "a URL", |text| url(text, true)).map(Some)
}

fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_text(d, "a URL", |text| url(text, false)).map(Some)
}

fn channel<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked_text(d, "a channel", |text| non_empty(text, "the channel")).map(Some)
}

/// E-mail addresses: one `@` with text on both sides, no spaces. Whether an address
/// exists is for the mail server.
fn addresses<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    struct Address(String);

    impl<'de> Deserialize<'de> for Address {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            checked_text(d, "an e-mail address", |text| match text.split_once('@') {
                Some((local, domain))
                    if !local.is_empty()
                        && !domain.is_empty()
                        && !domain.contains('@')
                        && !text.chars().any(|c| c.is_whitespace() || c.is_control()) =>
                {
                    Ok(Address(text.to_string()))
                }
                _ => Err(DeliveryError::NotEmail(text.to_string())),
            })
        }
    }

    let addresses = Vec::<Address>::deserialize(d)?;
    Ok(Some(
        addresses
            .into_iter()
            .map(|Address(address)| address)
            .collect(),
    ))
}

/// Every key of `RawDelivery`.
const DELIVERY_KEYS: &[&str] = &["git", "pr", "notifications"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDelivery {
    git: Option<GitDelivery>,
    pr: Option<PullRequest>,
    notifications: Option<Notifications>,
}

impl TryFrom<RawDelivery> for Delivery {
    type Error = DeliveryError;

    fn try_from(raw: RawDelivery) -> Result<Self, DeliveryError> {
        let delivery = Delivery {
            git: raw.git,
            pr: raw.pr,
            notifications: raw.notifications,
        };
        let mode = delivery.git_or_default().mode;
        if delivery.pr.is_some() && mode != GitMode::GithubPr {
            return Err(DeliveryError::PrWithoutGithubPr(mode.as_str()));
        }
        Ok(delivery)
    }
}

impl<'de> Deserialize<'de> for Delivery {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawDelivery, Self>(deserializer, DELIVERY_KEYS)
    }
}

/// Every key of `RawGit`.
const GIT_KEYS: &[&str] = &[
    "mode",
    "branchPrefix",
    "branchName",
    "commitPrefix",
    "commitTemplate",
    "autoCommit",
    "autoPush",
    "signCommits",
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGit {
    mode: Option<GitMode>,
    #[serde(default, deserialize_with = "branch_prefix")]
    branch_prefix: Option<String>,
    #[serde(default, deserialize_with = "branch_name")]
    branch_name: Option<String>,
    commit_prefix: Option<String>,
    #[serde(default, deserialize_with = "commit_template")]
    commit_template: Option<String>,
    auto_commit: Option<bool>,
    auto_push: Option<bool>,
    sign_commits: Option<bool>,
}

impl TryFrom<RawGit> for GitDelivery {
    type Error = DeliveryError;

    fn try_from(raw: RawGit) -> Result<Self, DeliveryError> {
        let mode = raw.mode.unwrap_or_default();
        if raw.branch_prefix.is_some() && raw.branch_name.is_some() {
            return Err(DeliveryError::PrefixAndName);
        }
        let pushes = mode != GitMode::Local;
        match raw.auto_push {
            Some(true) if !pushes => return Err(DeliveryError::PushUnderLocal),
            Some(false) if pushes => return Err(DeliveryError::NoPushUnder(mode.as_str())),
            _ => {}
        }
        let auto_commit = raw.auto_commit.unwrap_or(true);
        if !auto_commit && pushes {
            return Err(DeliveryError::NoCommitUnder(mode.as_str()));
        }
        let sign_commits = raw.sign_commits.unwrap_or(false);
        if sign_commits && !auto_commit {
            return Err(DeliveryError::SignWithoutCommit);
        }
        Ok(Self {
            mode,
            branch_prefix: raw
                .branch_prefix
                .unwrap_or_else(Self::default_branch_prefix),
            branch_name: raw.branch_name,
            commit_prefix: raw
                .commit_prefix
                .unwrap_or_else(Self::default_commit_prefix),
            commit_template: raw.commit_template,
            auto_commit,
            auto_push: pushes,
            sign_commits,
        })
    }
}

impl<'de> Deserialize<'de> for GitDelivery {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawGit, Self>(deserializer, GIT_KEYS)
    }
}

/// Every key of `RawAutoMerge`.
const AUTO_MERGE_KEYS: &[&str] = &["enabled", "method", "waitForChecks", "deleteOnMerge"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAutoMerge {
    enabled: Option<bool>,
    method: Option<MergeMethod>,
    wait_for_checks: Option<bool>,
    delete_on_merge: Option<bool>,
}

impl TryFrom<RawAutoMerge> for AutoMerge {
    type Error = DeliveryError;

    fn try_from(raw: RawAutoMerge) -> Result<Self, DeliveryError> {
        let enabled = raw.enabled.unwrap_or(false);
        let written = [
            ("method", raw.method.is_some()),
            ("waitForChecks", raw.wait_for_checks.is_some()),
            ("deleteOnMerge", raw.delete_on_merge.is_some()),
        ];
        if let Some((key, _)) = written
            .into_iter()
            .find(|&(_, written)| written && !enabled)
        {
            return Err(DeliveryError::AutoMergeDisabled(key));
        }
        Ok(Self {
            enabled,
            method: raw.method.unwrap_or_default(),
            wait_for_checks: raw.wait_for_checks.unwrap_or(true),
            delete_on_merge: raw.delete_on_merge.unwrap_or(false),
        })
    }
}

impl<'de> Deserialize<'de> for AutoMerge {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawAutoMerge, Self>(deserializer, AUTO_MERGE_KEYS)
    }
}

/// The notification types and the keys each takes besides `type`.
const NOTIFICATION_TYPES: [(&str, &[&str]); 3] = [
    ("slack", &["webhook", "channel", "template"]),
    ("email", &["to", "subject", "template"]),
    ("webhook", &["url", "method", "headers"]),
];

const NOTIFICATION_TYPE_NAMES: [&str; 3] = ["slack", "email", "webhook"];

/// Every key of `RawNotification`.
const NOTIFICATION_KEYS: &[&str] = &[
    "type", "webhook", "channel", "template", "to", "subject", "url", "method", "headers",
];

fn stray_notification_key(key: &str, of: &str) -> String {
    let owners: Vec<_> = NOTIFICATION_TYPES
        .iter()
        .filter(|(_, keys)| keys.contains(&key))
        .map(|(name, _)| *name)
        .collect();
    format!(
        "key \"{key}\" belongs to notification type {}, not {of}",
        super::error::either(&owners)
    )
}

/// A notification's `type`, read on its own so that an unknown one is refused at its line.
#[derive(Clone, Copy)]
struct NotificationType(&'static str);

fn notification_type<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<NotificationType>, D::Error> {
    fields::checked_by(d, "a notification type", |value| {
        let text = match value {
            Scalar::Str(text) => text.to_string(),
            other => other.to_string(),
        };
        NOTIFICATION_TYPE_NAMES
            .iter()
            .find(|name| **name == text)
            .map(|name| Some(NotificationType(name)))
            .ok_or(DeliveryError::UnknownNotificationType(text))
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawNotification {
    #[serde(rename = "type", default, deserialize_with = "notification_type")]
    kind: Option<NotificationType>,
    #[serde(default, deserialize_with = "https_url")]
    webhook: Option<String>,
    #[serde(default, deserialize_with = "channel")]
    channel: Option<String>,
    #[serde(default, deserialize_with = "notification_template")]
    template: Option<String>,
    #[serde(default, deserialize_with = "addresses")]
    to: Option<Vec<String>>,
    #[serde(default, deserialize_with = "notification_template")]
    subject: Option<String>,
    #[serde(default, deserialize_with = "http_url")]
    url: Option<String>,
    method: Option<HttpMethod>,
    #[serde(default, deserialize_with = "headers")]
    headers: Option<BTreeMap<String, String>>,
}

fn headers<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    fields::string_map(d).map(Some)
}

/// RFC 9110's token characters: what a header name is made of.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl RawNotification {
    fn written_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            ("webhook", self.webhook.is_some()),
            ("channel", self.channel.is_some()),
            ("template", self.template.is_some()),
            ("to", self.to.is_some()),
            ("subject", self.subject.is_some()),
            ("url", self.url.is_some()),
            ("method", self.method.is_some()),
            ("headers", self.headers.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, written)| written.then_some(key))
    }
}

impl TryFrom<RawNotification> for Notification {
    type Error = DeliveryError;

    fn try_from(raw: RawNotification) -> Result<Self, DeliveryError> {
        let NotificationType(of) = raw.kind.ok_or(DeliveryError::MissingNotificationType)?;
        let allowed = NOTIFICATION_TYPES
            .iter()
            .find(|(name, _)| *name == of)
            .map_or(&[][..], |(_, keys)| keys);
        if let Some(key) = raw.written_keys().find(|key| !allowed.contains(key)) {
            return Err(DeliveryError::StrayNotificationKey { key, of });
        }
        let missing = |key| DeliveryError::MissingNotificationKey { key, of };
        Ok(match of {
            "slack" => Notification::Slack(SlackNotification {
                webhook: raw.webhook.ok_or_else(|| missing("webhook"))?,
                channel: raw.channel,
                template: raw.template,
            }),
            "email" => {
                let to = raw.to.ok_or_else(|| missing("to"))?;
                if to.is_empty() {
                    return Err(DeliveryError::NoRecipient);
                }
                Notification::Email(EmailNotification {
                    to,
                    subject: raw.subject,
                    template: raw.template,
                })
            }
            _ => {
                let headers = raw.headers.unwrap_or_default();
                if let Some(name) = headers.keys().find(|name| !is_header_name(name)) {
                    return Err(DeliveryError::NotHeaderName(name.clone()));
                }
                Notification::Webhook(WebhookNotification {
                    url: raw.url.ok_or_else(|| missing("url"))?,
                    method: raw.method.unwrap_or_default(),
                    headers,
                })
            }
        })
    }
}

impl<'de> Deserialize<'de> for Notification {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawNotification, Self>(deserializer, NOTIFICATION_KEYS)
    }
}

/// One `oneOf` branch per notification type, each with its `type` and its own keys only.
impl JsonSchema for Notification {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Notification".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let branches = vec![
            schema::tagged_branch::<SlackNotification>(generator, "type", "slack"),
            schema::tagged_branch::<EmailNotification>(generator, "type", "email"),
            schema::tagged_branch::<WebhookNotification>(generator, "type", "webhook"),
        ];
        json_schema!({
            "description": "One notification, by type.",
            "oneOf": branches,
        })
    }
}
