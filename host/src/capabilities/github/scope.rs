//! The operator scope of `github`: `github: {repos: [OWNER/NAME glob], create: BOOL,
//! fork: BOOL}`.
//!
//! A plugin that is not built in may name no repository; a built-in any. Repositories
//! are `owner/name`, compared without regard to case as GitHub does. Checked calls:
//! every call naming a repository; a fork needs `fork`, creating or generating one
//! needs `create`, and the new repository must be in `repos` too. `--grant` items:
//! `github:repo=OWNER/NAME`, `github:create`, `github:fork`.

use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use crate::capabilities::scope::{
    set, typed_entry, Base, Compared, EntryError, FlagItem, Patterns, Scope, ScopeDenial,
    ScopeError, ScopeShape,
};

/// `github:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubEntry {
    #[serde(default)]
    repos: Option<Vec<String>>,
    #[serde(default)]
    create: Option<bool>,
    #[serde(default)]
    fork: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubScope {
    pub repos: Patterns,
    pub create: bool,
    pub fork: bool,
}

impl Scope for GithubScope {
    fn shown(&self) -> serde_json::Value {
        serde_json::json!({
            "repos": self.repos.shown(),
            "create": self.create,
            "fork": self.fork,
        })
    }
    crate::scope_any!();
}

const REPO: Compared = Compared {
    check: |w| {
        if w.split('/').count() == 2 {
            Ok(())
        } else {
            Err("a repository is OWNER/NAME")
        }
    },
    case_insensitive: true,
    ..Compared::AS_WRITTEN
};

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["repos", "create", "fork"]
    }

    fn base(&self, base: Base) -> Arc<dyn Scope> {
        let widest = base == Base::Widest;
        Arc::new(GithubScope {
            repos: if widest {
                Patterns::Any
            } else {
                Patterns::none()
            },
            create: widest,
            fork: widest,
        })
    }

    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: GithubEntry = typed_entry("github", entry)?;
        let mut scope = downcast(scope);
        set(&mut scope.create, e.create);
        set(&mut scope.fork, e.fork);
        if let Some(p) = &e.repos {
            scope.repos = Patterns::parse("github.repos", REPO, p)?;
        }
        Ok(Arc::new(scope))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &["github:repo=OWNER/NAME", "github:create", "github:fork"]
    }

    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError> {
        let item = FlagItem::parse("github", rest);
        match item.key {
            "repo" => item.push(entry, "repos"),
            "create" => item.set_bool(entry, "create"),
            "fork" => item.set_bool(entry, "fork"),
            _ => Err(item.unknown()),
        }
    }
}

/// The scope of a plugin that was not granted `github` at all.
pub(super) fn narrowest() -> GithubScope {
    downcast(Shape.base(Base::Narrowest).as_ref())
}

fn downcast(scope: &dyn Scope) -> GithubScope {
    crate::capabilities::scope::concrete(scope)
}

impl GithubScope {
    /// A GitHub call on `owner/name`; `needs` is `create` or `fork` when the call
    /// makes a repository.
    pub fn check_repo(
        &self,
        plugin: &str,
        call: &'static str,
        full_name: &str,
        needs: Option<&'static str>,
    ) -> Result<(), ScopeDenial> {
        let in_repos = self.repos.allows(full_name);
        let permitted = match needs {
            Some("create") => self.create,
            Some("fork") => self.fork,
            _ => true,
        };
        if in_repos && permitted {
            return Ok(());
        }
        let mut key_value = Vec::new();
        if !in_repos {
            key_value.push(format!("repos: [{full_name:?}]"));
        }
        if let (false, Some(needs)) = (permitted, needs) {
            key_value.push(format!("{needs}: true"));
        }
        Err(ScopeDenial::new(
            plugin,
            "github",
            call,
            format!("repository {full_name:?}"),
            format!(
                "github.repos: {}; github.create: {}; github.fork: {}",
                self.repos.text(),
                self.create,
                self.fork
            ),
            key_value.join(", "),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(entry: &str) -> Result<GithubScope, ScopeError> {
        let entry: Value = serde_yaml::from_str(entry).unwrap();
        let scope = Shape.narrowed(Shape.base(Base::Narrowest).as_ref(), &entry)?;
        Ok(downcast(scope.as_ref()))
    }

    #[test]
    fn repositories_are_compared_without_case_and_making_one_needs_its_key() {
        let scope = scope("{repos: [\"Acme/*\"], create: true}").unwrap();
        assert!(scope
            .check_repo("p", "github.get-repository", "acme/app", None)
            .is_ok());
        assert!(scope
            .check_repo("p", "github.create-repository", "acme/new", Some("create"))
            .is_ok());
        let fork = scope
            .check_repo("p", "github.fork-repository", "other/x", Some("fork"))
            .unwrap_err();
        assert_eq!(
            fork.allow,
            "plugins: {p: {github: {repos: [\"other/x\"], fork: true}}}"
        );
        assert!(narrowest()
            .check_repo("p", "github.get-repository", "a/b", None)
            .is_err());
        let widest = downcast(Shape.base(Base::Widest).as_ref());
        assert!(widest
            .check_repo("p", "github.fork-repository", "a/b", Some("fork"))
            .is_ok());
    }

    #[test]
    fn a_repository_pattern_is_owner_and_name() {
        let text = scope("{repos: [acme]}").unwrap_err().to_string();
        assert!(text.contains("OWNER/NAME"), "{text}");
    }
}
