//! What a TaskSpec may say that this version of agentgate understands but does not do yet.
//!
//! The TaskSpec module loads the reference system's whole format (`convergence.rs`,
//! `delivery.rs`), so that a document is either understood or refused with its path and
//! line. The host, though, runs one agent session and delivers nothing itself: a strategy,
//! a gate, a delivery or a notification would be accepted and silently not honoured, and a
//! user would wait for a pull request that never comes. [`check_supported`] refuses each of
//! them instead, naming the field and saying that it was understood: `validate` and `run`
//! apply it where they accept a TaskSpec, so both refuse the same (exit 2).
//!
//! `NOT_YET` is the list of those behaviours, one entry each. When one is built, its entry
//! goes, and nothing else changes.

use super::delivery::Delivery;
use super::error::SpecError;
use super::model::TaskSpec;

/// One behaviour the TaskSpec format describes and this version does not have yet.
pub(crate) struct NotYet {
    /// What agentgate would do, completing "this version of agentgate does not yet …".
    pub(crate) does: &'static str,
    /// The paths at which `spec` asks for it; empty when it does not.
    pub(crate) asked_at: fn(&TaskSpec) -> Vec<&'static str>,
}

/// Every behaviour not built yet. Each entry is independent of the others: removing one
/// lets the TaskSpecs that ask only for it through.
pub(crate) const NOT_YET: &[NotYet] = &[
    NotYet {
        does: "run convergence strategies (a run is one agent session)",
        asked_at: |spec| {
            let convergence = spec.spec.convergence.as_ref();
            let mut paths = Vec::new();
            if convergence.is_some_and(|c| c.strategy.is_some()) {
                paths.push("spec.convergence.strategy");
            }
            if convergence.is_some_and(|c| c.config.is_some()) {
                paths.push("spec.convergence.config");
            }
            paths
        },
    },
    NotYet {
        does: "run gates",
        asked_at: |spec| {
            let gates = spec.spec.convergence.as_ref().map(|c| c.gates.len());
            when(gates.unwrap_or(0) > 0, "spec.convergence.gates")
        },
    },
    NotYet {
        does: "deliver the work with git (commit, push)",
        asked_at: |spec| match delivery(spec) {
            Some(delivery) if delivery.git.is_some() => vec!["spec.delivery.git"],
            // Without `git`, the reference still commits (mode local).
            Some(_) => vec!["spec.delivery"],
            None => Vec::new(),
        },
    },
    NotYet {
        does: "open pull requests",
        asked_at: |spec| match delivery(spec) {
            Some(delivery) if delivery.pr.is_some() => vec!["spec.delivery.pr"],
            Some(delivery) if delivery.opens_pull_request() => vec!["spec.delivery.git.mode"],
            _ => Vec::new(),
        },
    },
    NotYet {
        does: "send notifications",
        asked_at: |spec| {
            let notifications = delivery(spec).and_then(|d| d.notifications.as_ref());
            when(notifications.is_some(), "spec.delivery.notifications")
        },
    },
];

fn delivery(spec: &TaskSpec) -> Option<&Delivery> {
    spec.spec.delivery.as_ref()
}

fn when(asked: bool, path: &'static str) -> Vec<&'static str> {
    if asked {
        vec![path]
    } else {
        Vec::new()
    }
}

/// A TaskSpec asks for what this version does not do yet: one [`SpecError`] per field, in
/// the order of the list of behaviours not built yet, each saying what is not done and which field to remove.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", lines(.refusals))]
pub struct Unsupported {
    /// One per field asking for a behaviour not built yet.
    pub refusals: Vec<SpecError>,
}

fn lines(refusals: &[SpecError]) -> String {
    let lines: Vec<_> = refusals.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

/// Refuses a TaskSpec that asks for a behaviour not built yet: `spec.convergence.gates:
/// this version of agentgate does not yet run gates; remove `spec.convergence.gates``.
/// `validate` and `run` both apply it to every TaskSpec they accept.
pub fn check_supported(spec: &TaskSpec) -> Result<(), Unsupported> {
    let refusals: Vec<_> = NOT_YET
        .iter()
        .flat_map(|entry| {
            (entry.asked_at)(spec).into_iter().map(|path| {
                SpecError::new(
                    path,
                    format!("this version of agentgate does not yet {}", entry.does),
                )
                .with_hint(format!("remove `{path}`"))
            })
        })
        .collect();
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(Unsupported { refusals })
    }
}

#[cfg(test)]
mod tests {
    use super::super::convergence_tests::EVERY_FIELD;
    use super::super::tests::{full_document, parse_ok, FIXTURES};
    use super::*;

    fn refused_paths(document: &str) -> Vec<String> {
        match check_supported(&parse_ok(document)) {
            Ok(()) => Vec::new(),
            Err(unsupported) => unsupported.refusals.into_iter().map(|e| e.path).collect(),
        }
    }

    #[test]
    fn a_reference_document_is_refused_at_each_field_not_built_yet() {
        let unsupported = check_supported(&parse_ok(EVERY_FIELD)).unwrap_err();
        let paths: Vec<_> = unsupported
            .refusals
            .iter()
            .map(|e| e.path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "spec.convergence.strategy",
                "spec.convergence.config",
                "spec.convergence.gates",
                "spec.delivery.git",
                "spec.delivery.pr",
                "spec.delivery.notifications",
            ]
        );
        assert_eq!(
            unsupported.refusals[2].to_string(),
            "spec.convergence.gates: this version of agentgate does not yet run gates; \
             remove `spec.convergence.gates`"
        );
        let text = unsupported.to_string();
        assert_eq!(text.lines().count(), 6, "{text}");
        assert!(text.contains(
            "spec.delivery.pr: this version of agentgate does not yet open pull requests; \
             remove `spec.delivery.pr`"
        ));
        assert!(text.contains("does not yet send notifications"));
        assert!(text.contains("does not yet deliver the work with git"));
        assert!(text.contains("does not yet run convergence strategies"));
    }

    #[test]
    fn each_behaviour_is_refused_on_its_own() {
        let convergence = |body: &str| full_document(&format!("  convergence:\n{body}"));
        let delivery = |body: &str| full_document(&format!("  delivery:\n{body}"));
        for (document, paths) in [
            (
                convergence("    strategy: fixed\n"),
                vec!["spec.convergence.strategy"],
            ),
            (
                convergence("    config: {bonusIterations: 0}\n"),
                vec!["spec.convergence.config"],
            ),
            (
                convergence("    gates:\n      - {name: g, check: {type: convergence}}\n"),
                vec!["spec.convergence.gates"],
            ),
            (delivery("    {}\n"), vec!["spec.delivery"]),
            (
                delivery("    git: {mode: push}\n"),
                vec!["spec.delivery.git"],
            ),
            (
                delivery("    git: {mode: github-pr}\n"),
                vec!["spec.delivery.git", "spec.delivery.git.mode"],
            ),
            (
                delivery(
                    "    notifications:\n      onFailure:\n        \
                     - {type: webhook, url: \"https://x\"}\n",
                ),
                vec!["spec.delivery", "spec.delivery.notifications"],
            ),
        ] {
            assert_eq!(refused_paths(&document), paths, "{document}");
        }
    }

    #[test]
    fn what_is_honoured_passes() {
        for (name, text) in FIXTURES {
            let spec = crate::taskspec::parse(text, name, &super::super::tests::env).unwrap();
            assert!(check_supported(&spec).is_ok(), "{name}");
        }
        let convergence = |body: &str| full_document(&format!("  convergence:\n{body}"));
        assert!(refused_paths(&convergence("    limits: {maxIterations: 3}\n")).is_empty());
        assert!(refused_paths(&convergence("    gates: []\n")).is_empty());
    }
}
