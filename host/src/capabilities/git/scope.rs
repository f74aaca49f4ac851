//! The operator scope of `git`: `git: {remotes: [GLOB], push: BOOL}`.
//!
//! A plugin that is not built in may clone from no remote and push nowhere; a built-in
//! may do both anywhere. Remotes are the clone or push URL with any `user:password@`
//! removed, which is a credential and never part of the scope. Checked calls:
//! `git.clone` (the URL) and `git.push` (the URL, recorded or given, and `push`).
//! `--grant` items: `git:remote=GLOB`, `git:push`.

use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use crate::capabilities::scope::{
    set, typed_entry, Base, Compared, EntryError, FlagItem, Patterns, Scope, ScopeDenial,
    ScopeError, ScopeShape,
};

/// `git:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct GitEntry {
    #[serde(default)]
    remotes: Option<Vec<String>>,
    #[serde(default)]
    push: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitScope {
    pub remotes: Patterns,
    pub push: bool,
}

impl Scope for GitScope {
    fn shown(&self) -> serde_json::Value {
        serde_json::json!({"remotes": self.remotes.shown(), "push": self.push})
    }
    crate::scope_any!();
}

const REMOTE: Compared = Compared {
    normalize: without_userinfo,
    ..Compared::AS_WRITTEN
};

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["remotes", "push"]
    }

    fn base(&self, base: Base) -> Arc<dyn Scope> {
        Arc::new(match base {
            Base::Widest => GitScope {
                remotes: Patterns::Any,
                push: true,
            },
            Base::Narrowest => GitScope {
                remotes: Patterns::none(),
                push: false,
            },
        })
    }

    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: GitEntry = typed_entry("git", entry)?;
        let mut scope = downcast(scope);
        set(&mut scope.push, e.push);
        if let Some(p) = &e.remotes {
            scope.remotes = Patterns::parse("git.remotes", REMOTE, p)?;
        }
        Ok(Arc::new(scope))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &["git:remote=GLOB", "git:push"]
    }

    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError> {
        let item = FlagItem::parse("git", rest);
        match item.key {
            "remote" => item.push(entry, "remotes"),
            "push" => item.set_bool(entry, "push"),
            _ => Err(item.unknown()),
        }
    }
}

/// The scope of a plugin that was not granted `git` at all.
pub(super) fn narrowest() -> GitScope {
    downcast(Shape.base(Base::Narrowest).as_ref())
}

fn downcast(scope: &dyn Scope) -> GitScope {
    crate::capabilities::scope::concrete(scope)
}

impl GitScope {
    /// A clone from, or (with `push`) a push to, `url`.
    pub fn check_remote(
        &self,
        plugin: &str,
        call: &'static str,
        url: &str,
        push: bool,
    ) -> Result<(), ScopeDenial> {
        let shown = without_userinfo(url);
        let in_remotes = self.remotes.allows(&shown);
        if in_remotes && (!push || self.push) {
            return Ok(());
        }
        let remotes = if in_remotes {
            String::new()
        } else {
            format!("remotes: [{shown:?}]")
        };
        let key_value = match (push && !self.push, remotes.is_empty()) {
            (true, true) => "push: true".to_string(),
            (true, false) => format!("{remotes}, push: true"),
            (false, _) => remotes,
        };
        Err(ScopeDenial::new(
            plugin,
            "git",
            call,
            format!("remote {shown:?}"),
            format!(
                "git.remotes: {}; git.push: {}",
                self.remotes.text(),
                self.push
            ),
            key_value,
        ))
    }
}

/// `url` without `user:password@`, which is a credential and never part of the scope.
pub fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_are_compared_without_credentials_and_push_needs_its_key() {
        let entry: Value =
            serde_yaml::from_str("{remotes: [\"https://git.example.com/team/*\"]}").unwrap();
        let scope = Shape
            .narrowed(Shape.base(Base::Narrowest).as_ref(), &entry)
            .unwrap();
        let scope = downcast(scope.as_ref());
        let clone = |url| scope.check_remote("p", "git.clone", url, false);
        assert!(clone("https://git.example.com/team/repo.git").is_ok());
        assert!(clone("https://user:secret@git.example.com/team/repo.git").is_ok());
        assert!(clone("https://git.example.com/team/sub/repo.git").is_err());
        let push = scope
            .check_remote(
                "p",
                "git.push",
                "https://tok@git.example.com/team/repo.git",
                true,
            )
            .unwrap_err();
        assert_eq!(push.allow, "plugins: {p: {git: {push: true}}}");
        assert!(!push.to_string().contains("tok"), "{push}");
        assert!(narrowest()
            .check_remote("p", "git.clone", "https://x/y", false)
            .is_err());
        let widest = downcast(Shape.base(Base::Widest).as_ref());
        assert!(widest
            .check_remote("p", "git.push", "https://x/y", true)
            .is_ok());
    }
}
