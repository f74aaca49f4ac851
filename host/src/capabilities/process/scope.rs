//! The operator scope of `process`: `process: {unsealed: BOOL, programs: [PATH]}`.
//!
//! A plugin that is not built in may start sealed processes only; `unsealed: true`
//! allows spawns with the host's view as the invoking user, `programs` narrows those to
//! the listed absolute paths. An unsealed spawn's program is resolved on the host's
//! `PATH` (never the one the plugin passes in the environment) and that file is what
//! runs. `programs` limits unsealed spawns only: a sealed process sees nothing of the
//! host but the system's program folders read-only and its binds, and any shell in
//! there can start any other program, so a list would promise nothing. A built-in may
//! spawn anything. `--grant` items: `process:unsealed`, `process:program=PATH`.

use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use crate::capabilities::scope::{
    set, typed_entry, Base, Compared, EntryError, FlagItem, Patterns, Scope, ScopeDenial,
    ScopeError, ScopeShape,
};

/// `process:` of a plugin's entry in grants.yaml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessEntry {
    #[serde(default)]
    unsealed: Option<bool>,
    #[serde(default)]
    programs: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessScope {
    /// Spawns with `sealed: none` (the host's view, as the invoking user) are allowed.
    pub unsealed: bool,
    /// The programs unsealed spawns may start (any, unless the operator lists them).
    pub programs: Patterns,
}

impl Scope for ProcessScope {
    fn shown(&self) -> serde_json::Value {
        // Programs matter only for unsealed spawns.
        let programs = if self.unsealed {
            self.programs.shown()
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"unsealed": self.unsealed, "programs": programs})
    }
    crate::scope_any!();
}

const PROGRAM: Compared = Compared {
    check: |w| {
        if w.starts_with('/') {
            Ok(())
        } else {
            Err("a program is an absolute path")
        }
    },
    ..Compared::AS_WRITTEN
};

pub(super) struct Shape;

impl ScopeShape for Shape {
    fn fields(&self) -> &'static [&'static str] {
        &["unsealed", "programs"]
    }

    fn base(&self, base: Base) -> Arc<dyn Scope> {
        Arc::new(ProcessScope {
            unsealed: base == Base::Widest,
            // `unsealed: true` alone allows any program; `programs` narrows it.
            programs: Patterns::Any,
        })
    }

    fn narrowed(&self, scope: &dyn Scope, entry: &Value) -> Result<Arc<dyn Scope>, ScopeError> {
        let e: ProcessEntry = typed_entry("process", entry)?;
        let mut scope = downcast(scope);
        set(&mut scope.unsealed, e.unsealed);
        if let Some(p) = &e.programs {
            scope.programs = Patterns::parse("process.programs", PROGRAM, p)?;
        }
        Ok(Arc::new(scope))
    }

    fn flag_keys(&self) -> &'static [&'static str] {
        &["process:unsealed", "process:program=PATH"]
    }

    fn add_flag_item(&self, rest: &str, entry: &mut Value) -> Result<(), EntryError> {
        let item = FlagItem::parse("process", rest);
        match item.key {
            "unsealed" => item.set_bool(entry, "unsealed"),
            "program" => item.push(entry, "programs"),
            _ => Err(item.unknown()),
        }
    }
}

/// The scope of a plugin that was not granted `process` at all.
pub(super) fn narrowest() -> ProcessScope {
    downcast(Shape.base(Base::Narrowest).as_ref())
}

fn downcast(scope: &dyn Scope) -> ProcessScope {
    crate::capabilities::scope::concrete(scope)
}

impl ProcessScope {
    /// Whether every unsealed spawn is allowed, so nothing needs resolving.
    pub fn allows_any_unsealed(&self) -> bool {
        self.unsealed && self.programs == Patterns::Any
    }

    /// An unsealed spawn of `program` (resolved on the host's PATH when it could be).
    pub fn check_unsealed(&self, plugin: &str, program: &str) -> Result<(), ScopeDenial> {
        let denial = |allowed: String, key_value: String| {
            Err(ScopeDenial::new(
                plugin,
                "process",
                "process.spawn",
                format!("unsealed program {program:?}"),
                allowed,
                key_value,
            ))
        };
        if !self.unsealed {
            let programs = match &self.programs {
                Patterns::Any => String::new(),
                _ => format!(", programs: [{program:?}]"),
            };
            return denial(
                "process.unsealed: false; only sealed spawns".into(),
                format!("unsealed: true{programs}"),
            );
        }
        if !self.programs.allows(program) {
            return denial(
                format!("process.programs: {}", self.programs.text()),
                format!("unsealed: true, programs: [{program:?}]"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(base: Base, entry: &str) -> ProcessScope {
        let entry: Value = serde_yaml::from_str(entry).unwrap();
        let scope = Shape.narrowed(Shape.base(base).as_ref(), &entry).unwrap();
        downcast(scope.as_ref())
    }

    #[test]
    fn a_third_party_plugin_spawns_sealed_only_and_a_builtin_anything() {
        let none = scope(Base::Narrowest, "{}");
        assert!(none.check_unsealed("p", "/bin/sh").is_err());
        assert!(scope(Base::Widest, "{}")
            .check_unsealed("p", "/bin/sh")
            .is_ok());
        let listed = scope(
            Base::Narrowest,
            "{unsealed: true, programs: [/usr/bin/python3]}",
        );
        assert!(listed.check_unsealed("p", "/usr/bin/python3").is_ok());
        let denial = listed.check_unsealed("p", "/bin/sh").unwrap_err();
        assert!(denial.allow.contains("programs: [\"/bin/sh\"]"), "{denial}");
    }

    #[test]
    fn a_program_that_is_not_absolute_is_refused_with_its_key() {
        let entry: Value = serde_yaml::from_str("{unsealed: true, programs: [python3]}").unwrap();
        let text = Shape
            .narrowed(Shape.base(Base::Narrowest).as_ref(), &entry)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("process.programs") && text.contains("absolute"),
            "{text}"
        );
    }
}
