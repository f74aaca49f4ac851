//! `spec.convergence`: how the reference system reaches the goal (a strategy, its
//! `config`, quality `gates`) and when it must stop (`limits`).
//!
//! Every field the reference documents loads here, typed and checked as strictly as
//! `execution`: a value out of range, a key of another strategy or check type, a strategy
//! the reference only plans (`adaptive`) or a check type it does not have is an error at
//! its field path and line. Loading is not running: this version of agentgate runs one
//! agent session and honours only `limits`, so [`super::check_supported`] refuses a
//! strategy, a `config` and any gate until they are built. The model is complete now so
//! that each can be built, and its refusal dropped, one at a time.
//!
//! Which keys are allowed depends on a sibling key (`config` on `strategy`, a check's
//! settings on its `type`), so those sections are read as the workspace is
//! (`workspace.rs`): every key any variant knows goes into a raw struct (a typo is refused
//! there, with its line), then `TryFrom` checks the keys against the variant and fills in
//! its defaults. Such an error names the mapping (`spec.convergence`) and its line.
//!
//! Where the reference's documentation is vague or contradicts itself, the choice made is
//! written on the field it concerns (and in `docs/taskspec.md`).

use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::error::{unknown_choice, unknown_key};
use super::fields::{self, Scalar};
use super::model::{serialize_duration, serialize_duration_opt};
use super::{schema, units};

/// `convergence`: the strategy and its settings, the gates, and the limits.
///
/// `strategy` and `config` are kept as written (`None` when absent);
/// [`Convergence::effective_strategy`] and [`Convergence::strategy_config`] give what the
/// reference system would run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Convergence {
    /// `strategy` as written; the reference's default, `hybrid`, applies when it is absent.
    pub strategy: Option<StrategyName>,
    /// `config` as written, typed for the strategy it configures, with that strategy's
    /// defaults for the keys left out; `None` when absent.
    pub config: Option<StrategyConfig>,
    /// The gates, in the order they run; empty when none are written.
    pub gates: Vec<Gate>,
    /// Every limit is optional; none set means none applies.
    pub limits: Limits,
}

/// `convergence.limits`: the bounds handed to the agent driver, and the run's wall clock.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// 1 to 10000.
    #[serde(default, deserialize_with = "fields::max_iterations")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_iterations: Option<u32>,
    /// The run times out after this long, when it is shorter than `sandbox.resources.timeout`.
    #[serde(
        default,
        deserialize_with = "fields::duration_opt",
        serialize_with = "serialize_duration_opt"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub max_wall_clock: Option<Duration>,
    /// The token budget of the whole task (input and output of every turn); `agent.maxTokens`
    /// bounds one answer.
    #[serde(default, deserialize_with = "fields::tokens_opt")]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub max_tokens: Option<u64>,
    /// `maxCost: "$5.00"` in the document.
    #[serde(
        rename(deserialize = "maxCost"),
        default,
        deserialize_with = "fields::cost"
    )]
    #[schemars(schema_with = "schema::cost")]
    pub max_cost_usd: Option<f64>,
}

/// The strategies the reference system offers. Its fifth, `adaptive`, is only planned there
/// (and its pages disagree on its settings), so it is refused when the document is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StrategyName {
    /// Exactly `config.iterations` iterations.
    Fixed,
    /// Base iterations always, bonus ones while the gates' progress is good enough. The
    /// reference's default.
    Hybrid,
    /// Until the agent says it is done (the gates verify), its outputs repeat, or a limit.
    Ralph,
    /// A person decides after each iteration. The reference does not say how; that is
    /// left to when the strategy is built.
    Manual,
}

impl StrategyName {
    /// The name as written in a TaskSpec.
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyName::Fixed => "fixed",
            StrategyName::Hybrid => "hybrid",
            StrategyName::Ralph => "ralph",
            StrategyName::Manual => "manual",
        }
    }
}

/// The strategies, as written, for messages.
const STRATEGY_NAMES: [&str; 4] = ["fixed", "hybrid", "ralph", "manual"];

/// The `config` keys of each strategy.
const STRATEGY_KEYS: [(StrategyName, &[&str]); 4] = [
    (StrategyName::Fixed, &["iterations"]),
    (
        StrategyName::Hybrid,
        &["baseIterations", "bonusIterations", "progressThreshold"],
    ),
    (
        StrategyName::Ralph,
        &[
            "convergenceThreshold",
            "windowSize",
            "minIterations",
            "promptHotReload",
        ],
    ),
    (StrategyName::Manual, &[]),
];

/// The most iterations a strategy may name, as `limits.maxIterations`.
const MAX_ITERATIONS: u64 = 10_000;

/// `config`, typed for the strategy it configures (`manual` takes none). Written as the
/// settings alone, without a tag: the strategy is `convergence.strategy`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StrategyConfig {
    /// The settings of `fixed`.
    Fixed(FixedConfig),
    /// The settings of `hybrid`.
    Hybrid(HybridConfig),
    /// The settings of `ralph`.
    Ralph(RalphConfig),
}

/// `config` of `strategy: fixed`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct FixedConfig {
    /// How many iterations run, exactly: 1 to 10000 (the range of `maxIterations`; the
    /// reference gives none). 3 unless set.
    #[serde(default = "FixedConfig::default_iterations")]
    #[schemars(range(min = 1, max = 10000))]
    pub iterations: u32,
}

impl FixedConfig {
    fn default_iterations() -> u32 {
        3
    }
}

impl Default for FixedConfig {
    fn default() -> Self {
        Self {
            iterations: Self::default_iterations(),
        }
    }
}

/// `config` of `strategy: hybrid`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct HybridConfig {
    /// Iterations that always run: 1 to 10000; 3 unless set.
    #[serde(default = "HybridConfig::default_base")]
    #[schemars(range(min = 1, max = 10000))]
    pub base_iterations: u32,
    /// Further iterations while the progress score stays at or above the threshold: 0 to
    /// 10000; 2 unless set.
    #[serde(default = "HybridConfig::default_bonus")]
    #[schemars(range(max = 10000))]
    pub bonus_iterations: u32,
    /// The gate-based progress score (0 to 1) a bonus iteration needs; 0.7 unless set.
    #[serde(default = "HybridConfig::default_threshold")]
    #[schemars(range(min = 0, max = 1))]
    pub progress_threshold: f64,
}

impl HybridConfig {
    fn default_base() -> u32 {
        3
    }

    fn default_bonus() -> u32 {
        2
    }

    fn default_threshold() -> f64 {
        0.7
    }
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            base_iterations: Self::default_base(),
            bonus_iterations: Self::default_bonus(),
            progress_threshold: Self::default_threshold(),
        }
    }
}

/// `config` of `strategy: ralph`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct RalphConfig {
    /// How little the outputs may change (0 to 1) before they count as repeating; 0.05
    /// unless set.
    #[serde(default = "RalphConfig::default_threshold")]
    #[schemars(range(min = 0, max = 1))]
    pub convergence_threshold: f64,
    /// How many recent outputs are compared: 1 to 100 (the reference gives no range); 3
    /// unless set.
    #[serde(default = "RalphConfig::default_window")]
    #[schemars(range(min = 1, max = 100))]
    pub window_size: u32,
    /// Iterations that run before the agent may stop: 1 to 10000; 1 unless set.
    #[serde(default = "RalphConfig::default_min")]
    #[schemars(range(min = 1, max = 10000))]
    pub min_iterations: u32,
    /// Re-read the prompt before each iteration; false unless set.
    #[serde(default)]
    pub prompt_hot_reload: bool,
}

impl RalphConfig {
    fn default_threshold() -> f64 {
        0.05
    }

    fn default_window() -> u32 {
        3
    }

    fn default_min() -> u32 {
        1
    }
}

impl Default for RalphConfig {
    fn default() -> Self {
        Self {
            convergence_threshold: Self::default_threshold(),
            window_size: Self::default_window(),
            min_iterations: Self::default_min(),
            prompt_hot_reload: false,
        }
    }
}

impl Convergence {
    /// The strategy the reference system would run: the one written, or `hybrid`.
    pub fn effective_strategy(&self) -> StrategyName {
        self.strategy.unwrap_or(StrategyName::Hybrid)
    }

    /// The settings of [`Convergence::effective_strategy`]: as written, or its defaults;
    /// `None` for `manual`, which has none.
    pub fn strategy_config(&self) -> Option<StrategyConfig> {
        if let Some(config) = &self.config {
            return Some(config.clone());
        }
        match self.effective_strategy() {
            StrategyName::Fixed => Some(StrategyConfig::Fixed(FixedConfig::default())),
            StrategyName::Hybrid => Some(StrategyConfig::Hybrid(HybridConfig::default())),
            StrategyName::Ralph => Some(StrategyConfig::Ralph(RalphConfig::default())),
            StrategyName::Manual => None,
        }
    }
}

/// One entry of `convergence.gates`: a check, and what follows when it fails or passes.
///
/// `name` and `check` are required (the reference does not say which keys are; its
/// examples always give `name`, `check` and `onFailure`, and a gate without a check checks
/// nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// 1 to 64 characters, unique among the gates.
    #[serde(deserialize_with = "gate_name")]
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// What the gate checks, by `type`.
    pub check: Check,
    /// What follows a failure; `action: iterate` with `auto` feedback when unset.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// What follows a pass; `action: continue` when unset.
    #[serde(default)]
    pub on_success: OnSuccess,
    /// When the gate runs; `when: always` when unset.
    #[serde(default)]
    pub condition: Condition,
}

/// What a gate checks, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Check {
    /// `verification-levels`: the reference's L0 to L3 checks.
    VerificationLevels(VerificationLevelsCheck),
    /// `github-actions`: the repository's workflow runs.
    GithubActions(GithubActionsCheck),
    /// `custom`: a shell command and its exit code.
    Custom(CustomCheck),
    /// `approval`: people approve.
    Approval(ApprovalCheck),
    /// `convergence`: loop detection over the iterations' outputs.
    Convergence(ConvergenceCheck),
}

/// Settings of `check.type: verification-levels`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationLevelsCheck {
    /// Which levels run: at least one of `L0` to `L3`, each once.
    pub levels: Vec<Level>,
    /// How long the checks may take; the run's deadline alone bounds them when unset (the
    /// reference gives no default). The reference writes this one timeout as a number of
    /// milliseconds (`120000`); that is read as milliseconds, and a duration string
    /// (`"2m"`) is accepted too. It prints back as milliseconds.
    #[serde(serialize_with = "serialize_millis_opt")]
    #[schemars(schema_with = "millis_or_duration")]
    pub timeout: Option<Duration>,
}

/// A verification level, as the reference's gates page defines them (its iterations page
/// gives the same names other meanings; the gates page is the one for gates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Level {
    /// Contracts: required files, forbidden patterns, schemas, naming.
    L0,
    /// Tests: test commands and their exit codes.
    L1,
    /// Blackbox: fixture runs with assertions.
    L2,
    /// Sanity: expected files, minimum coverage, size limits.
    L3,
}

/// Settings of `check.type: github-actions`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GithubActionsCheck {
    /// Workflow file names to wait for; every workflow when unset. A list, when written,
    /// names at least one.
    pub workflows: Option<Vec<String>>,
    /// How often the runs are polled; 30s unless set.
    #[serde(
        default = "GithubActionsCheck::default_poll",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub poll_interval: Duration,
    /// How long to wait for the runs to succeed; 30m unless set.
    #[serde(
        default = "GithubActionsCheck::default_timeout",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Duration,
}

impl GithubActionsCheck {
    fn default_poll() -> Duration {
        Duration::from_secs(30)
    }

    fn default_timeout() -> Duration {
        Duration::from_secs(30 * 60)
    }
}

/// Settings of `check.type: custom`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomCheck {
    /// A shell command, run in the sandbox's workdir.
    #[schemars(length(min = 1))]
    pub command: String,
    /// The exit code that passes: 0 to 255; 0 unless set.
    #[serde(default)]
    pub expected_exit: u8,
    /// How long the command may run; 5m unless set.
    #[serde(
        default = "CustomCheck::default_timeout",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Duration,
}

impl CustomCheck {
    fn default_timeout() -> Duration {
        Duration::from_secs(5 * 60)
    }
}

/// Settings of `check.type: approval`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCheck {
    /// GitHub user names, or `@org/team`-style team names (one reference example has
    /// `"@database-team"`); at least one. Required: the reference does not say who may
    /// approve when none is named.
    pub approvers: Vec<String>,
    /// How many approvals pass: 1 to 100; 1 unless set. Not compared with the number of
    /// approvers, since a team names several people.
    #[serde(default = "ApprovalCheck::default_min")]
    #[schemars(range(min = 1, max = 100))]
    pub min_approvals: u32,
    /// Shown to the approvers.
    pub message: Option<String>,
    /// How long to wait for the approvals; the run's deadline alone bounds the wait when
    /// unset. Only the reference's examples use this key.
    #[serde(serialize_with = "serialize_duration_opt")]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Option<Duration>,
}

impl ApprovalCheck {
    fn default_min() -> u32 {
        1
    }
}

/// Settings of `check.type: convergence`: loop detection.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConvergenceCheck {
    /// What is compared; `similarity` unless set.
    #[serde(default)]
    pub strategy: LoopDetection,
    /// How alike (0 to 1) two iterations must be to count as a loop; 0.95 (the reference's
    /// example value) unless set.
    #[serde(default = "ConvergenceCheck::default_threshold")]
    #[schemars(range(min = 0, max = 1))]
    pub threshold: f64,
}

impl ConvergenceCheck {
    fn default_threshold() -> f64 {
        0.95
    }
}

/// How a `convergence` check compares iterations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LoopDetection {
    /// The agent's output text.
    #[default]
    Similarity,
    /// The structure of the code.
    Fingerprint,
}

/// The check types, their names, and the settings each takes besides `type`.
const CHECK_TYPES: [(&str, &[&str]); 5] = [
    ("verification-levels", &["levels", "timeout"]),
    ("github-actions", &["workflows", "pollInterval", "timeout"]),
    ("custom", &["command", "expectedExit", "timeout"]),
    (
        "approval",
        &["approvers", "minApprovals", "message", "timeout"],
    ),
    ("convergence", &["strategy", "threshold"]),
];

/// Every key of `RawCheck`.
const CHECK_KEYS: &[&str] = &[
    "type",
    "levels",
    "timeout",
    "workflows",
    "pollInterval",
    "command",
    "expectedExit",
    "approvers",
    "minApprovals",
    "message",
    "strategy",
    "threshold",
];

/// `onFailure`. The reference gives no defaults; the ones chosen are on each field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnFailure {
    /// `iterate` unless set: a failed gate's outcome in the reference is feedback and a next
    /// iteration.
    #[serde(default)]
    pub action: FailureAction,
    /// How many times this gate may fail before its action no longer repeats: 1 to 1000.
    /// Unset, only `limits` bound it. (The reference does not say what happens when the
    /// attempts run out; that is decided when gates are built.)
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: Option<u32>,
    /// The feedback the next iteration gets; `auto` unless set. Refused with
    /// `action: stop`, which has no next iteration.
    #[serde(default)]
    pub feedback: Feedback,
    /// The wait between attempts; none when unset.
    pub backoff: Option<Backoff>,
}

/// What a failed gate does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureAction {
    /// Feedback to the agent, then a next iteration.
    #[default]
    Iterate,
    /// The task fails at once.
    Stop,
    /// Someone is told, and the run carries on (who, the reference does not say).
    Escalate,
}

/// The feedback a failed gate gives the next iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Feedback {
    /// `auto`: the built-in generator.
    #[default]
    Auto,
    /// `manual`: none.
    Manual,
    /// `{generator: NAME}`: a named generator.
    Generator(String),
}

/// `onFailure.backoff`: the wait before each new attempt. The reference shows
/// `{initial: "5s", max: "1m", multiplier: 2}` and gives no defaults; those values are the
/// defaults of the keys left out.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// The first wait; 5s unless set.
    #[serde(
        default = "Backoff::default_initial",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub initial: Duration,
    /// The longest wait, at least `initial`; 1m unless set.
    #[serde(
        default = "Backoff::default_max",
        serialize_with = "serialize_duration"
    )]
    #[schemars(schema_with = "schema::duration")]
    pub max: Duration,
    /// What each wait is multiplied by: 1 to 10; 2 unless set.
    #[serde(default = "Backoff::default_multiplier")]
    #[schemars(range(min = 1, max = 10))]
    pub multiplier: f64,
}

impl Backoff {
    fn default_initial() -> Duration {
        Duration::from_secs(5)
    }

    fn default_max() -> Duration {
        Duration::from_secs(60)
    }

    fn default_multiplier() -> f64 {
        2.0
    }
}

/// `onSuccess`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnSuccess {
    /// `continue` unless set.
    #[serde(default)]
    pub action: SuccessAction,
}

/// What a passed gate does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SuccessAction {
    /// The next gate runs.
    #[default]
    Continue,
    /// The remaining gates are skipped and the task is complete.
    SkipRemaining,
}

/// `condition`: when a gate runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `always` unless set.
    #[serde(default)]
    pub when: When,
    /// An expression that skips the gate when true (`"iteration < 3"`). The reference does
    /// not define the language; the text is kept, non-empty, and is given meaning when
    /// gates are built.
    #[serde(default, deserialize_with = "skip_if")]
    #[schemars(length(min = 1))]
    pub skip_if: Option<String>,
}

/// When a gate runs. `previousPassed`, which only a reference example uses, is not one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum When {
    /// Every iteration.
    #[default]
    Always,
    /// When files changed (since what, the reference does not say).
    OnChange,
    /// When a person triggers it.
    Manual,
}

/// Why a convergence field or section is refused. serde carries it on as text, to become
/// a [`super::SpecError`] at the field's (or the section's) path and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ConvergenceError {
    #[error("{}", unknown_choice("strategy", .0, &STRATEGY_NAMES))]
    UnknownStrategy(String),
    #[error(
        "strategy \"adaptive\" is only planned in the reference system, not available; \
         expected one of: {}", STRATEGY_NAMES.join(", ")
    )]
    PlannedStrategy,
    #[error("{}", stray_config_key(.key, .strategy, .written))]
    StrayConfigKey {
        key: &'static str,
        strategy: StrategyName,
        written: bool,
    },
    #[error("{}", unknown_choice("check type", .0, &check_type_names()))]
    UnknownCheckType(String),
    #[error("missing key \"type\"; expected one of: {}", check_type_names().join(", "))]
    MissingCheckType,
    #[error("{}", stray_check_key(.key, .of))]
    StrayCheckKey { key: &'static str, of: &'static str },
    #[error("missing key \"{key}\", required for check type {of}")]
    MissingCheckKey { key: &'static str, of: &'static str },
    #[error("\"{key}\" is empty; {expected}")]
    EmptyList {
        key: &'static str,
        expected: &'static str,
    },
    #[error("level {0:?} is listed twice")]
    RepeatedLevel(Level),
    #[error(
        "timeout {0} is a number; check type {1} takes a duration such as \"5m\" (only \
         verification-levels reads a number, as milliseconds)"
    )]
    NumberTimeout(u64, &'static str),
    #[error(
        "{0} is not a timeout; expected milliseconds (e.g. 120000) or a duration (e.g. \"2m\")"
    )]
    NotTimeout(String),
    #[error("{0} milliseconds is out of range; expected 1 to {max}", max = units::MAX_DURATION.as_millis())]
    MillisOutOfRange(String),
    #[error("pollInterval ({poll}) is longer than timeout ({timeout})")]
    PollOverTimeout { poll: String, timeout: String },
    #[error("feedback is given to a next iteration, and action stop has none")]
    FeedbackWithStop,
    #[error("{}", unknown_choice("feedback", .0, &["auto", "manual"]))]
    UnknownFeedback(String),
    #[error("backoff initial ({initial}) is longer than max ({max})")]
    BackoffOverMax { initial: String, max: String },
    #[error("gates[{second}] is named {name:?} like gates[{first}]; gate names must be unique")]
    RepeatedGate {
        name: String,
        first: usize,
        second: usize,
    },
    #[error("{what} is empty")]
    Empty { what: &'static str },
    #[error("{value} is not {what}; expected a string")]
    NotText { value: String, what: &'static str },
    #[error(transparent)]
    Quantity(#[from] units::QuantityError),
}

fn check_type_names() -> Vec<&'static str> {
    CHECK_TYPES.iter().map(|(name, _)| *name).collect()
}

/// The message for a `config` key of another strategy than the one that applies.
fn stray_config_key(key: &str, strategy: &StrategyName, written: &bool) -> String {
    let owner = STRATEGY_KEYS
        .iter()
        .find(|(_, keys)| keys.contains(&key))
        .map_or("", |(name, _)| name.as_str());
    let strategy = strategy.as_str();
    if *written {
        format!("config key \"{key}\" belongs to strategy {owner}, not {strategy}")
    } else {
        super::error::with_hint(
            format_args!(
                "config key \"{key}\" belongs to strategy {owner}, not {strategy} (the \
                 default strategy)"
            ),
            format_args!("write `strategy: {owner}`"),
        )
    }
}

/// The message for a check setting of another type than the check's.
fn stray_check_key(key: &str, of: &str) -> String {
    let owners: Vec<_> = CHECK_TYPES
        .iter()
        .filter(|(_, keys)| keys.contains(&key))
        .map(|(name, _)| *name)
        .collect();
    format!(
        "key \"{key}\" belongs to check type {}, not {of}",
        super::error::either(&owners)
    )
}

fn gate_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    fields::string_in(d, "a gate name", 1, 64)
}

fn skip_if<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    non_empty(d, "an expression").map(Some)
}

/// A string that is not blank.
fn non_empty<'de, D: Deserializer<'de>>(d: D, what: &'static str) -> Result<String, D::Error> {
    fields::checked_by(d, what, |value| match value {
        Scalar::Str(text) if !text.trim().is_empty() => Ok(text.to_string()),
        Scalar::Str(_) => Err(ConvergenceError::Empty { what }),
        other => Err(ConvergenceError::NotText {
            value: other.to_string(),
            what,
        }),
    })
}

fn strategy_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StrategyName>, D::Error> {
    fields::checked_by(d, "a strategy", |value| match value {
        Scalar::Str("fixed") => Ok(StrategyName::Fixed),
        Scalar::Str("hybrid") => Ok(StrategyName::Hybrid),
        Scalar::Str("ralph") => Ok(StrategyName::Ralph),
        Scalar::Str("manual") => Ok(StrategyName::Manual),
        Scalar::Str("adaptive") => Err(ConvergenceError::PlannedStrategy),
        Scalar::Str(other) => Err(ConvergenceError::UnknownStrategy(other.to_string())),
        other => Err(ConvergenceError::UnknownStrategy(other.to_string())),
    })
    .map(Some)
}

fn iterations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    fields::integer(d, "an iteration count", 1, MAX_ITERATIONS).map(|n| Some(n as u32))
}

fn bonus_iterations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    fields::integer(d, "an iteration count", 0, MAX_ITERATIONS).map(|n| Some(n as u32))
}

fn window_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    fields::integer(d, "a window size", 1, 100).map(|n| Some(n as u32))
}

fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    fields::number(d, "a number from 0 to 1", 0.0, 1.0).map(Some)
}

/// `config`: every key of every strategy; `TryFrom<RawConvergence>` checks them against
/// the strategy.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    #[serde(default, deserialize_with = "iterations")]
    iterations: Option<u32>,
    #[serde(default, deserialize_with = "iterations")]
    base_iterations: Option<u32>,
    #[serde(default, deserialize_with = "bonus_iterations")]
    bonus_iterations: Option<u32>,
    #[serde(default, deserialize_with = "fraction")]
    progress_threshold: Option<f64>,
    #[serde(default, deserialize_with = "fraction")]
    convergence_threshold: Option<f64>,
    #[serde(default, deserialize_with = "window_size")]
    window_size: Option<u32>,
    #[serde(default, deserialize_with = "iterations")]
    min_iterations: Option<u32>,
    prompt_hot_reload: Option<bool>,
}

impl RawConfig {
    fn written_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            ("iterations", self.iterations.is_some()),
            ("baseIterations", self.base_iterations.is_some()),
            ("bonusIterations", self.bonus_iterations.is_some()),
            ("progressThreshold", self.progress_threshold.is_some()),
            ("convergenceThreshold", self.convergence_threshold.is_some()),
            ("windowSize", self.window_size.is_some()),
            ("minIterations", self.min_iterations.is_some()),
            ("promptHotReload", self.prompt_hot_reload.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, written)| written.then_some(key))
    }

    /// The config of `strategy`, its keys checked against it and its defaults filled in;
    /// `None` for `manual`.
    fn into_config(
        self,
        strategy: StrategyName,
        written: bool,
    ) -> Result<Option<StrategyConfig>, ConvergenceError> {
        let allowed = STRATEGY_KEYS
            .iter()
            .find(|(name, _)| *name == strategy)
            .map_or(&[][..], |(_, keys)| keys);
        if let Some(key) = self.written_keys().find(|key| !allowed.contains(key)) {
            return Err(ConvergenceError::StrayConfigKey {
                key,
                strategy,
                written,
            });
        }
        Ok(match strategy {
            StrategyName::Fixed => Some(StrategyConfig::Fixed(FixedConfig {
                iterations: self
                    .iterations
                    .unwrap_or_else(FixedConfig::default_iterations),
            })),
            StrategyName::Hybrid => Some(StrategyConfig::Hybrid(HybridConfig {
                base_iterations: self
                    .base_iterations
                    .unwrap_or_else(HybridConfig::default_base),
                bonus_iterations: self
                    .bonus_iterations
                    .unwrap_or_else(HybridConfig::default_bonus),
                progress_threshold: self
                    .progress_threshold
                    .unwrap_or_else(HybridConfig::default_threshold),
            })),
            StrategyName::Ralph => Some(StrategyConfig::Ralph(RalphConfig {
                convergence_threshold: self
                    .convergence_threshold
                    .unwrap_or_else(RalphConfig::default_threshold),
                window_size: self.window_size.unwrap_or_else(RalphConfig::default_window),
                min_iterations: self.min_iterations.unwrap_or_else(RalphConfig::default_min),
                prompt_hot_reload: self.prompt_hot_reload.unwrap_or(false),
            })),
            StrategyName::Manual => None,
        })
    }
}

/// Every key of `RawConvergence`.
const CONVERGENCE_KEYS: &[&str] = &["strategy", "config", "gates", "limits"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConvergence {
    #[serde(default, deserialize_with = "strategy_name")]
    strategy: Option<StrategyName>,
    config: Option<RawConfig>,
    #[serde(default)]
    gates: Gates,
    #[serde(default)]
    limits: Limits,
}

impl TryFrom<RawConvergence> for Convergence {
    type Error = ConvergenceError;

    fn try_from(raw: RawConvergence) -> Result<Self, ConvergenceError> {
        let strategy = raw.strategy.unwrap_or(StrategyName::Hybrid);
        let config = match raw.config {
            Some(config) => config.into_config(strategy, raw.strategy.is_some())?,
            None => None,
        };
        Ok(Self {
            strategy: raw.strategy,
            config,
            gates: raw.gates.0,
            limits: raw.limits,
        })
    }
}

impl<'de> Deserialize<'de> for Convergence {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawConvergence, Self>(deserializer, CONVERGENCE_KEYS)
    }
}

/// `gates`: a list whose names are unique. The check runs as each gate is read, so the
/// error names the list and its line.
#[derive(Default)]
struct Gates(Vec<Gate>);

impl<'de> Deserialize<'de> for Gates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GatesVisitor;

        impl<'de> Visitor<'de> for GatesVisitor {
            type Value = Gates;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of gates")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Gates, A::Error> {
                let mut gates: Vec<Gate> = Vec::new();
                while let Some(gate) = seq.next_element::<Gate>()? {
                    if let Some(first) = gates.iter().position(|g| g.name == gate.name) {
                        return Err(de::Error::custom(ConvergenceError::RepeatedGate {
                            name: gate.name,
                            first,
                            second: gates.len(),
                        }));
                    }
                    gates.push(gate);
                }
                Ok(Gates(gates))
            }
        }

        deserializer.deserialize_seq(GatesVisitor)
    }
}

/// A check's `type`, read on its own so that an unknown one is refused at its line.
#[derive(Clone, Copy, PartialEq, Eq)]
struct CheckType(&'static str);

fn check_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CheckType>, D::Error> {
    fields::checked_by(d, "a check type", |value| {
        let text = match value {
            Scalar::Str(text) => text.to_string(),
            other => other.to_string(),
        };
        CHECK_TYPES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(name, _)| Some(CheckType(name)))
            .ok_or(ConvergenceError::UnknownCheckType(text))
    })
}

/// A `timeout` as written: a number of milliseconds, or a duration string.
enum RawTimeout {
    Millis(u64),
    Text(Duration),
}

impl RawTimeout {
    fn duration(&self) -> Duration {
        match *self {
            RawTimeout::Millis(ms) => Duration::from_millis(ms),
            RawTimeout::Text(duration) => duration,
        }
    }

    /// A timeout for a check type that reads durations only.
    fn duration_for(&self, of: &'static str) -> Result<Duration, ConvergenceError> {
        match *self {
            RawTimeout::Millis(ms) => Err(ConvergenceError::NumberTimeout(ms, of)),
            RawTimeout::Text(duration) => Ok(duration),
        }
    }
}

fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawTimeout>, D::Error> {
    let max = units::MAX_DURATION.as_millis() as i128;
    fields::checked_by(d, "a timeout", |value| -> Result<_, ConvergenceError> {
        match value {
            Scalar::Int(ms) if (1..=max).contains(&ms) => Ok(RawTimeout::Millis(ms as u64)),
            Scalar::Int(_) => Err(ConvergenceError::MillisOutOfRange(value.to_string())),
            Scalar::Str(text) => Ok(RawTimeout::Text(units::parse_duration(text)?)),
            other => Err(ConvergenceError::NotTimeout(other.to_string())),
        }
    })
    .map(Some)
}

fn expected_exit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    fields::integer(d, "an exit code", 0, 255).map(|n| Some(n as u8))
}

fn min_approvals<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    fields::integer(d, "a number of approvals", 1, 100).map(|n| Some(n as u32))
}

fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    non_empty(d, "a command").map(Some)
}

/// A list of names, none of them blank (workflows, approvers).
fn names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    struct Name(String);

    impl<'de> Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            non_empty(d, "a name").map(Name)
        }
    }

    let names = Vec::<Name>::deserialize(d)?;
    Ok(Some(names.into_iter().map(|Name(name)| name).collect()))
}

/// `check`: every key of every check type; `TryFrom` checks them against `type`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCheck {
    #[serde(rename = "type", default, deserialize_with = "check_type")]
    kind: Option<CheckType>,
    levels: Option<Vec<Level>>,
    #[serde(default, deserialize_with = "timeout")]
    timeout: Option<RawTimeout>,
    #[serde(default, deserialize_with = "names")]
    workflows: Option<Vec<String>>,
    #[serde(default, deserialize_with = "fields::duration_opt")]
    poll_interval: Option<Duration>,
    #[serde(default, deserialize_with = "command")]
    command: Option<String>,
    #[serde(default, deserialize_with = "expected_exit")]
    expected_exit: Option<u8>,
    #[serde(default, deserialize_with = "names")]
    approvers: Option<Vec<String>>,
    #[serde(default, deserialize_with = "min_approvals")]
    min_approvals: Option<u32>,
    message: Option<String>,
    strategy: Option<LoopDetection>,
    #[serde(default, deserialize_with = "fraction")]
    threshold: Option<f64>,
}

impl RawCheck {
    fn written_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            ("levels", self.levels.is_some()),
            ("timeout", self.timeout.is_some()),
            ("workflows", self.workflows.is_some()),
            ("pollInterval", self.poll_interval.is_some()),
            ("command", self.command.is_some()),
            ("expectedExit", self.expected_exit.is_some()),
            ("approvers", self.approvers.is_some()),
            ("minApprovals", self.min_approvals.is_some()),
            ("message", self.message.is_some()),
            ("strategy", self.strategy.is_some()),
            ("threshold", self.threshold.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, written)| written.then_some(key))
    }
}

impl TryFrom<RawCheck> for Check {
    type Error = ConvergenceError;

    fn try_from(raw: RawCheck) -> Result<Self, ConvergenceError> {
        let CheckType(of) = raw.kind.ok_or(ConvergenceError::MissingCheckType)?;
        let allowed = CHECK_TYPES
            .iter()
            .find(|(name, _)| *name == of)
            .map_or(&[][..], |(_, keys)| keys);
        if let Some(key) = raw.written_keys().find(|key| !allowed.contains(key)) {
            return Err(ConvergenceError::StrayCheckKey { key, of });
        }
        let missing = |key| ConvergenceError::MissingCheckKey { key, of };
        let timeout = |default: Duration| match &raw.timeout {
            Some(timeout) => timeout.duration_for(of),
            None => Ok(default),
        };
        Ok(match of {
            "verification-levels" => {
                let levels = raw.levels.clone().ok_or_else(|| missing("levels"))?;
                if levels.is_empty() {
                    return Err(ConvergenceError::EmptyList {
                        key: "levels",
                        expected: "expected at least one of L0, L1, L2, L3",
                    });
                }
                for (index, level) in levels.iter().enumerate() {
                    if levels[..index].contains(level) {
                        return Err(ConvergenceError::RepeatedLevel(*level));
                    }
                }
                Check::VerificationLevels(VerificationLevelsCheck {
                    levels,
                    timeout: raw.timeout.as_ref().map(RawTimeout::duration),
                })
            }
            "github-actions" => {
                if raw.workflows.as_ref().is_some_and(Vec::is_empty) {
                    return Err(ConvergenceError::EmptyList {
                        key: "workflows",
                        expected: "name at least one workflow file, or leave workflows out \
                                   to wait for every workflow",
                    });
                }
                let poll_interval = raw
                    .poll_interval
                    .unwrap_or_else(GithubActionsCheck::default_poll);
                let timeout = timeout(GithubActionsCheck::default_timeout())?;
                if poll_interval > timeout {
                    return Err(ConvergenceError::PollOverTimeout {
                        poll: units::format_duration(poll_interval),
                        timeout: units::format_duration(timeout),
                    });
                }
                Check::GithubActions(GithubActionsCheck {
                    workflows: raw.workflows.clone(),
                    poll_interval,
                    timeout,
                })
            }
            "custom" => Check::Custom(CustomCheck {
                command: raw.command.clone().ok_or_else(|| missing("command"))?,
                expected_exit: raw.expected_exit.unwrap_or(0),
                timeout: timeout(CustomCheck::default_timeout())?,
            }),
            "approval" => {
                let approvers = raw.approvers.clone().ok_or_else(|| missing("approvers"))?;
                if approvers.is_empty() {
                    return Err(ConvergenceError::EmptyList {
                        key: "approvers",
                        expected: "name at least one GitHub user or team",
                    });
                }
                Check::Approval(ApprovalCheck {
                    approvers,
                    min_approvals: raw.min_approvals.unwrap_or_else(ApprovalCheck::default_min),
                    message: raw.message.clone(),
                    timeout: raw
                        .timeout
                        .as_ref()
                        .map(|timeout| timeout.duration_for(of))
                        .transpose()?,
                })
            }
            _ => Check::Convergence(ConvergenceCheck {
                strategy: raw.strategy.unwrap_or_default(),
                threshold: raw
                    .threshold
                    .unwrap_or_else(ConvergenceCheck::default_threshold),
            }),
        })
    }
}

impl<'de> Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawCheck, Self>(deserializer, CHECK_KEYS)
    }
}

/// Every key of `RawOnFailure`.
const ON_FAILURE_KEYS: &[&str] = &["action", "maxAttempts", "feedback", "backoff"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawOnFailure {
    action: Option<FailureAction>,
    #[serde(default, deserialize_with = "max_attempts")]
    max_attempts: Option<u32>,
    feedback: Option<Feedback>,
    backoff: Option<Backoff>,
}

fn max_attempts<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    fields::integer(d, "a number of attempts", 1, 1000).map(|n| Some(n as u32))
}

impl TryFrom<RawOnFailure> for OnFailure {
    type Error = ConvergenceError;

    fn try_from(raw: RawOnFailure) -> Result<Self, ConvergenceError> {
        let action = raw.action.unwrap_or_default();
        if action == FailureAction::Stop && raw.feedback.is_some() {
            return Err(ConvergenceError::FeedbackWithStop);
        }
        Ok(Self {
            action,
            max_attempts: raw.max_attempts,
            feedback: raw.feedback.unwrap_or_default(),
            backoff: raw.backoff,
        })
    }
}

impl<'de> Deserialize<'de> for OnFailure {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawOnFailure, Self>(deserializer, ON_FAILURE_KEYS)
    }
}

/// Every key of `RawBackoff`.
const BACKOFF_KEYS: &[&str] = &["initial", "max", "multiplier"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawBackoff {
    #[serde(default, deserialize_with = "fields::duration_opt")]
    initial: Option<Duration>,
    #[serde(default, deserialize_with = "fields::duration_opt")]
    max: Option<Duration>,
    #[serde(default, deserialize_with = "multiplier")]
    multiplier: Option<f64>,
}

fn multiplier<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    fields::number(d, "a multiplier", 1.0, 10.0).map(Some)
}

impl TryFrom<RawBackoff> for Backoff {
    type Error = ConvergenceError;

    fn try_from(raw: RawBackoff) -> Result<Self, ConvergenceError> {
        let backoff = Backoff {
            initial: raw.initial.unwrap_or_else(Backoff::default_initial),
            max: raw.max.unwrap_or_else(Backoff::default_max),
            multiplier: raw.multiplier.unwrap_or_else(Backoff::default_multiplier),
        };
        if backoff.initial > backoff.max {
            return Err(ConvergenceError::BackoffOverMax {
                initial: units::format_duration(backoff.initial),
                max: units::format_duration(backoff.max),
            });
        }
        Ok(backoff)
    }
}

impl<'de> Deserialize<'de> for Backoff {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fields::converted::<D, RawBackoff, Self>(deserializer, BACKOFF_KEYS)
    }
}

/// `feedback: auto`, `feedback: manual` or `feedback: {generator: NAME}`.
impl<'de> Deserialize<'de> for Feedback {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FeedbackVisitor;

        impl<'de> Visitor<'de> for FeedbackVisitor {
            type Value = Feedback;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("auto, manual or {generator: NAME}")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Feedback, E> {
                match text {
                    "auto" => Ok(Feedback::Auto),
                    "manual" => Ok(Feedback::Manual),
                    other => Err(E::custom(ConvergenceError::UnknownFeedback(
                        other.to_string(),
                    ))),
                }
            }

            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Feedback, A::Error> {
                let mut generator = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "generator" || generator.is_some() {
                        return Err(de::Error::custom(unknown_key(&key, &["generator"])));
                    }
                    generator = Some(map.next_value::<String>()?);
                }
                match generator {
                    Some(name) if !name.trim().is_empty() => Ok(Feedback::Generator(name)),
                    Some(_) => Err(de::Error::custom(ConvergenceError::Empty {
                        what: "the generator's name",
                    })),
                    None => Err(de::Error::custom(
                        "missing key \"generator\"; expected {generator: NAME}",
                    )),
                }
            }
        }

        deserializer.deserialize_any(FeedbackVisitor)
    }
}

impl Serialize for Feedback {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Feedback::Auto => serializer.serialize_str("auto"),
            Feedback::Manual => serializer.serialize_str("manual"),
            Feedback::Generator(name) => {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("generator", name)?;
                map.end()
            }
        }
    }
}

impl JsonSchema for Feedback {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Feedback".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "The feedback a failed gate gives the next iteration: auto (the \
                            built-in generator), manual (none) or {generator: NAME}.",
            "default": "auto",
            "oneOf": [
                {"enum": ["auto", "manual"]},
                {
                    "type": "object",
                    "properties": {"generator": {"type": "string", "minLength": 1}},
                    "required": ["generator"],
                    "additionalProperties": false,
                },
            ],
        })
    }
}

/// A duration that prints back as milliseconds, as the reference writes
/// `verification-levels` timeouts.
fn serialize_millis_opt<S: Serializer>(
    duration: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    duration
        .map(|duration| duration.as_millis() as u64)
        .serialize(s)
}

fn millis_or_duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Milliseconds (a number, as the reference system writes this timeout), \
                        or a duration such as \"2m\".",
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": units::MAX_DURATION.as_millis() as u64},
            {"type": "string", "pattern": units::DURATION_PATTERN},
        ],
    })
}

/// One `oneOf` branch per check type, each with its `type` and its own keys only.
impl JsonSchema for Check {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Check".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let branches = vec![
            schema::tagged_branch::<VerificationLevelsCheck>(
                generator,
                "type",
                "verification-levels",
            ),
            schema::tagged_branch::<GithubActionsCheck>(generator, "type", "github-actions"),
            schema::tagged_branch::<CustomCheck>(generator, "type", "custom"),
            schema::tagged_branch::<ApprovalCheck>(generator, "type", "approval"),
            schema::tagged_branch::<ConvergenceCheck>(generator, "type", "convergence"),
        ];
        json_schema!({
            "description": "What a gate checks, by type.",
            "oneOf": branches,
        })
    }
}

/// `config`'s schema follows `strategy`: each strategy's branch allows its own keys only
/// (`hybrid`'s when `strategy` is absent), and `manual` allows none.
impl JsonSchema for Convergence {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Convergence".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let fixed = generator.subschema_for::<FixedConfig>();
        let hybrid = generator.subschema_for::<HybridConfig>();
        let ralph = generator.subschema_for::<RalphConfig>();
        let gates = generator.subschema_for::<Vec<Gate>>();
        let limits = generator.subschema_for::<Limits>();
        let config_of = |strategy: &str, config: serde_json::Value| {
            serde_json::json!({
                "if": {"properties": {"strategy": {"const": strategy}}},
                "then": {"properties": {"config": config}},
            })
        };
        json_schema!({
            "description": "How the reference system reaches the goal, and when it must stop. \
                            This version of agentgate loads every field and honours only \
                            limits: a strategy, config or gate is refused until it is built.",
            "type": "object",
            "properties": {
                "strategy": {
                    "description": "hybrid when absent. adaptive is only planned in the \
                                    reference system and is refused.",
                    "enum": STRATEGY_NAMES,
                },
                "config": {"type": "object"},
                "gates": gates,
                "limits": limits,
            },
            "additionalProperties": false,
            "allOf": [
                config_of("fixed", fixed.to_value()),
                config_of("hybrid", hybrid.to_value()),
                config_of("ralph", ralph.to_value()),
                config_of("manual", serde_json::json!({"type": "object", "maxProperties": 0})),
            ],
        })
    }
}
