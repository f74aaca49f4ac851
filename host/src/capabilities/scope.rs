//! What every capability's operator scope has in common: the shape a capability gives
//! its scope ([`ScopeShape`]), the opaque per-plugin map the runtime carries
//! ([`Scopes`]), glob lists ([`Patterns`]), the `--grant` item helpers, and the one
//! way a call outside its scope is refused ([`ScopeDenial`]).
//!
//! A grant says which host interfaces a plugin may import; its scope says which
//! arguments each call may carry. A plugin that is not built in starts with each
//! capability's narrowest scope, a built-in with its widest; a key the operator writes
//! in the plugin's `grants.yaml` entry (`docker: {images: [...]}`) or as a `--grant
//! NAME=CAP:KEY[=VALUE]` item replaces that key's default, for built-ins too. Which keys
//! exist, how they read and how they are checked is each capability's own business
//! (its `scope.rs`); the runtime only carries the result.
//!
//! **Patterns** are globs ([`globset`]) where `*` and `?` never match `/` and `**`
//! matches across it: `ghcr.io/acme/*` allows `ghcr.io/acme/app:1` but not
//! `ghcr.io/acme/team/app:1`; `ghcr.io/acme/**` allows both. A capability says how a
//! value is compared (normalised, case) with [`Compared`].

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use serde::de::DeserializeOwned;
use serde_yaml::Value;

/// The operator scope of one capability, resolved for one plugin. Only its capability
/// downcasts it (through [`Scopes::of`]); the runtime shows it and passes it on.
pub trait Scope: Any + fmt::Debug + Send + Sync {
    /// The scope as JSON, for `plugins inspect`.
    fn shown(&self) -> serde_json::Value;
    fn as_any(&self) -> &dyn Any;
    /// Equal to `other` (a scope of the same capability).
    fn same_as(&self, other: &dyn Scope) -> bool;
}

/// [`Scope::as_any`] and [`Scope::same_as`] for a scope type that is `PartialEq`.
#[macro_export]
macro_rules! scope_any {
    () => {
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn same_as(&self, other: &dyn $crate::capabilities::scope::Scope) -> bool {
            other.as_any().downcast_ref::<Self>() == Some(self)
        }
    };
}

/// `scope` as its capability's own scope type: a shape is only ever handed its own.
pub fn concrete<T: Scope + Clone>(scope: &dyn Scope) -> T {
    scope
        .as_any()
        .downcast_ref::<T>()
        .cloned()
        .unwrap_or_else(|| panic!("not a {}", std::any::type_name::<T>()))
}

/// Where a plugin's scope starts before the operator's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// A built-in plugin: today's reach.
    Widest,
    /// A plugin that is not built in: nothing beyond the capability itself.
    Narrowest,
}

/// How a capability's scope is written by the operator and read by the host.
pub trait ScopeShape: Sync {
    /// The keys of its entry in a plugin's `grants.yaml` entry (`images`, `push`, ...).
    fn fields(&self) -> &'static [&'static str];
    /// The scope before any key of the operator.
    fn base(&self, base: Base) -> Arc<dyn Scope>;
    /// `scope` with every key of `entry` (already read by [`ScopeShape::fields`])
    /// replacing its value.
    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError>;
    /// The `--grant` items it takes, for messages (`docker:image=GLOB`).
    fn flag_keys(&self) -> &'static [&'static str];
    /// Adds the `--grant` item `CAP:rest` to `entry` (a mapping of its keys).
    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError>;
    /// A key beside `capabilities` that is an older spelling of this entry (`hosts:`
    /// for `http: {hosts:}`): it is read into the entry, and names the capability.
    fn legacy_key(&self) -> Option<&'static str> {
        None
    }
    /// The entry a value of [`ScopeShape::legacy_key`] stands for, added to `entry`.
    fn read_legacy(&self, _value: Value, _entry: &mut Value) -> Result<(), EntryError> {
        Ok(())
    }
    /// The entry that allows exactly what the URL `url` names (a built-in's base URL
    /// from the operator's environment), or why it cannot; `None`: a URL means
    /// nothing to this capability.
    fn entry_of_url(&self, _url: &str) -> Option<Result<Value, EntryError>> {
        None
    }
}

/// Something the operator wrote toward a scope entry that does not read: a `--grant`
/// item, the value of an older key ([`ScopeShape::read_legacy`]), a base URL
/// ([`ScopeShape::entry_of_url`]) or a capability's host-wide section.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    #[error("{capability}:{key}={value}: expected true or false")]
    NotBool {
        capability: String,
        key: String,
        value: String,
    },
    #[error("{capability}:{key} needs a value: {capability}:{key}=VALUE")]
    NeedsValue { capability: String, key: String },
    #[error("{capability}:{key}: unknown scope key; expected one of {expected}")]
    UnknownKey {
        capability: String,
        key: String,
        /// Every capability's `--grant` keys, joined.
        expected: String,
    },
    /// The value does not read as the entry's YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// A capability's own reason (its host list, its section's rules).
    #[error(transparent)]
    Capability(Box<dyn std::error::Error + Send + Sync>),
}

impl EntryError {
    /// A capability's own error.
    pub fn capability(error: impl std::error::Error + Send + Sync + 'static) -> EntryError {
        EntryError::Capability(Box::new(error))
    }
}

/// A scope entry that does not read, or holds a value that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ScopeError {
    /// The key, from the capability on (`docker.images`).
    pub key: String,
    pub message: String,
}

impl ScopeError {
    /// A pattern of `key` that is not one.
    pub fn bad_pattern(key: &str, pattern: &str, message: impl fmt::Display) -> ScopeError {
        ScopeError {
            key: key.to_string(),
            message: format!("{pattern:?} is not a valid pattern: {message}"),
        }
    }
}

/// Reads `entry` as the capability's typed entry `E` (unknown keys refused by `E`).
pub fn typed_entry<E: DeserializeOwned>(capability: &str, entry: &Value) -> Result<E, ScopeError> {
    serde_yaml::from_value(entry.clone()).map_err(|e| ScopeError {
        key: capability.to_string(),
        message: e.to_string(),
    })
}

/// Sets `field` when the operator wrote a value for it.
pub fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// The effective scope of each granted capability that has one, for one plugin.
#[derive(Debug, Clone, Default)]
pub struct Scopes(BTreeMap<&'static str, Arc<dyn Scope>>);

impl PartialEq for Scopes {
    fn eq(&self, other: &Scopes) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && x.same_as(y.as_ref()))
    }
}

impl Scopes {
    pub(crate) fn insert(&mut self, capability: &'static str, scope: Arc<dyn Scope>) {
        self.0.insert(capability, scope);
    }

    /// The scope of type `S`, if its capability was granted.
    pub fn of<S: Scope>(&self) -> Option<&S> {
        self.0
            .values()
            .find_map(|scope| scope.as_any().downcast_ref::<S>())
    }

    /// Each scope as JSON, by capability name.
    pub fn shown(&self) -> serde_json::Map<String, serde_json::Value> {
        self.0
            .iter()
            .map(|(name, scope)| (name.to_string(), scope.shown()))
            .collect()
    }
}

/// How values of one kind are compared with their patterns.
#[derive(Clone, Copy)]
pub struct Compared {
    /// The form a pattern is compared in (images: Docker's normal form).
    pub normalize: fn(&str) -> String,
    /// Refuses a pattern that cannot be one (a program that is not absolute), saying
    /// why.
    pub check: fn(&str) -> Result<(), &'static str>,
    pub case_insensitive: bool,
}

impl Compared {
    /// Compared as written.
    pub const AS_WRITTEN: Compared = Compared {
        normalize: str::to_string,
        check: |_| Ok(()),
        case_insensitive: false,
    };
}

/// What a list-valued scope allows.
#[derive(Debug, Clone)]
pub enum Patterns {
    /// Anything (a built-in plugin the operator did not narrow).
    Any,
    /// Only values matching one of these; none allows nothing.
    Only(Vec<Pattern>),
}

/// One glob, as the operator wrote it and as it is compared.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub written: String,
    matcher: GlobMatcher,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.written == other.written && self.matcher.glob() == other.matcher.glob()
    }
}
impl Eq for Pattern {}

impl PartialEq for Patterns {
    fn eq(&self, other: &Patterns) -> bool {
        match (self, other) {
            (Patterns::Any, Patterns::Any) => true,
            (Patterns::Only(a), Patterns::Only(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Patterns {}

impl Patterns {
    /// Nothing allowed.
    pub fn none() -> Patterns {
        Patterns::Only(Vec::new())
    }

    /// The patterns `written` under `key`, compared as `compared` says.
    pub fn parse(
        key: &str,
        compared: Compared,
        written: &[String],
    ) -> Result<Patterns, ScopeError> {
        written
            .iter()
            .map(|w| {
                let bad = |message: &dyn fmt::Display| ScopeError::bad_pattern(key, w, message);
                (compared.check)(w).map_err(|why| bad(&why))?;
                let glob = GlobBuilder::new(&(compared.normalize)(w))
                    .literal_separator(true)
                    .case_insensitive(compared.case_insensitive)
                    .build()
                    .map_err(|e| bad(e.kind()))?;
                Ok(Pattern {
                    written: w.clone(),
                    matcher: glob.compile_matcher(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Patterns::Only)
    }

    /// Whether `value` (already in its compared form) is allowed.
    pub fn allows(&self, value: &str) -> bool {
        match self {
            Patterns::Any => true,
            Patterns::Only(patterns) => patterns.iter().any(|p| p.matcher.is_match(value)),
        }
    }

    /// The patterns as written, or `any`.
    pub fn shown(&self) -> serde_json::Value {
        match self {
            Patterns::Any => "any".into(),
            Patterns::Only(patterns) => patterns.iter().map(|p| p.written.clone()).collect(),
        }
    }

    /// The patterns in words, for a denial.
    pub fn text(&self) -> String {
        match self {
            Patterns::Any => "any".into(),
            Patterns::Only(p) if p.is_empty() => "none".into(),
            Patterns::Only(p) => p
                .iter()
                .map(|p| p.written.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// One `--grant` item `KEY[=VALUE]` of a capability, taken apart.
pub struct FlagItem<'a> {
    capability: &'a str,
    pub key: &'a str,
    value: Option<&'a str>,
}

impl<'a> FlagItem<'a> {
    pub fn parse(capability: &'a str, rest: &'a str) -> FlagItem<'a> {
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (rest, None),
        };
        FlagItem {
            capability,
            key,
            value,
        }
    }

    /// A boolean key: `KEY` (true) or `KEY=true|false`, set as `field` of `entry`.
    pub fn set_bool(&self, entry: &mut Value, field: &str) -> Result<(), EntryError> {
        let value = match self.value {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(EntryError::NotBool {
                    capability: self.capability.to_string(),
                    key: self.key.to_string(),
                    value: other.to_string(),
                })
            }
        };
        mapping(entry).insert(field.into(), Value::Bool(value));
        Ok(())
    }

    /// A list key: `KEY=VALUE` adds `VALUE` to the list `field` of `entry`.
    pub fn push(&self, entry: &mut Value, field: &str) -> Result<(), EntryError> {
        let value = self
            .value
            .filter(|v| !v.is_empty())
            .ok_or_else(|| EntryError::NeedsValue {
                capability: self.capability.to_string(),
                key: self.key.to_string(),
            })?;
        let list = mapping(entry)
            .entry(field.into())
            .or_insert_with(|| Value::Sequence(Vec::new()));
        if let Value::Sequence(list) = list {
            list.push(Value::String(value.to_string()));
        }
        Ok(())
    }

    /// The error for a key the capability does not take: it lists every capability's
    /// keys.
    pub fn unknown(&self) -> EntryError {
        let keys: Vec<&str> = crate::capabilities::Capability::all()
            .filter_map(|c| c.unit().scope())
            .flat_map(|shape| shape.flag_keys().iter().copied())
            .collect();
        EntryError::UnknownKey {
            capability: self.capability.to_string(),
            key: self.key.to_string(),
            expected: keys.join(", "),
        }
    }
}

/// `entry` as a mapping, made one if it was not.
pub fn mapping(entry: &mut Value) -> &mut serde_yaml::Mapping {
    if !entry.is_mapping() {
        *entry = Value::Mapping(Default::default());
    }
    entry.as_mapping_mut().expect("made a mapping")
}

/// A call outside its plugin's scope: what the plugin gets back as `denied`, and the
/// `denied` event of the run (see `PluginView::scope_denied`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeDenial {
    pub plugin: String,
    pub capability: crate::capabilities::Capability,
    /// The call, e.g. `docker.run-container`.
    pub call: &'static str,
    /// The offending argument, e.g. `image "evil:latest" (docker.io/library/evil:latest)`.
    pub argument: String,
    /// What the scope allows, in words (`docker.images: node:20`).
    pub allowed: String,
    /// The grants.yaml line that would allow the call.
    pub allow: String,
}

impl fmt::Display for ScopeDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} by plugin {}: {} is outside its scope ({}); to allow it the operator adds to \
             $AGENTGATE_HOME/grants.yaml: {}",
            self.call, self.plugin, self.argument, self.allowed, self.allow
        )
    }
}

impl ScopeDenial {
    /// Records the denial as a `denied` event of the run, from the plugin refused;
    /// returns the message the plugin and the operator see.
    pub(crate) fn record(self, events: &crate::record::EventSink) -> String {
        let message = self.to_string();
        events.emit(
            &self.plugin,
            crate::record::EventBody::Denied {
                capability: self.capability.name(),
                call: self.call,
                argument: self.argument,
                allow: self.allow,
                message: message.clone(),
            },
        );
        message
    }

    /// A denial of `call` by `plugin`; `key_value` is what the operator would write in
    /// the capability's entry to allow it.
    pub fn new(
        plugin: &str,
        capability: &'static str,
        call: &'static str,
        argument: String,
        allowed: String,
        key_value: String,
    ) -> ScopeDenial {
        ScopeDenial {
            plugin: plugin.to_string(),
            capability: crate::capabilities::Capability::named(capability)
                .expect("a denial names a capability of this host"),
            call,
            argument,
            allowed,
            allow: format!("plugins: {{{plugin}: {{{capability}: {{{key_value}}}}}}}"),
        }
    }
}
