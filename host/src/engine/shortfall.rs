//! What a run fell short of, and the one place that decides whether it may still say
//! `succeeded`.
//!
//! A run promises more than its agent's outcome: that its change record is complete,
//! that every file a copy back was to bring came back, that its source released the
//! work, and that cleanup left nothing. Each part of the engine that finds a promise
//! broken adds a [`Shortfall`] here instead of deciding the status itself; [`settle`]
//! then turns `succeeded` into `error` and names every shortfall in `error`. A run that
//! already failed, timed out, was cancelled or was invalid keeps that status (it says
//! more about why the run did not succeed), and its `error` names the shortfalls too.
//!
//! [`settle`]: Shortfalls::settle

use crate::record::{LeftOutFile, RunResult, RunStatus};

/// Left-out entries named in `error`; the rest are counted (all are in `leftOut`).
const LEFT_OUT_NAMED: usize = 10;

/// One promise the run did not keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Shortfall {
    /// Cleanup did not complete. `leftover`: something of the run is still there
    /// (a container, a pod, a cgroup, the sandbox's state folder) that `gc` retries.
    Cleanup { message: String, leftover: bool },
    /// The record of what the agent changed is incomplete.
    Changes(String),
    /// The source could not deliver the work (a push, a pull request).
    Release(String),
    /// A copy back from the sandbox left these entries out.
    LeftOut(Vec<LeftOutFile>),
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shortfall::Cleanup { message, .. } => write!(f, "cleanup: {message}"),
            Shortfall::Changes(message) | Shortfall::Release(message) => f.write_str(message),
            Shortfall::LeftOut(files) => {
                let named: Vec<String> = files
                    .iter()
                    .take(LEFT_OUT_NAMED)
                    .map(|file| format!("{} ({})", file.path, file.reason))
                    .collect();
                write!(
                    f,
                    "the copy back from the sandbox left out {} entr{} the agent changed: {}",
                    files.len(),
                    if files.len() == 1 { "y" } else { "ies" },
                    named.join(", ")
                )?;
                if files.len() > LEFT_OUT_NAMED {
                    write!(
                        f,
                        " and {} more (see leftOut)",
                        files.len() - LEFT_OUT_NAMED
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Every shortfall of one run, in the order found.
#[derive(Debug, Default)]
pub(super) struct Shortfalls(Vec<Shortfall>);

impl Shortfalls {
    pub fn add(&mut self, shortfall: Shortfall) {
        if !matches!(&shortfall, Shortfall::LeftOut(files) if files.is_empty()) {
            self.0.push(shortfall);
        }
    }

    /// Cleanup did not complete, but nothing of the run is left for `gc`.
    pub fn cleanup(&mut self, message: impl Into<String>) {
        self.add(Shortfall::Cleanup {
            message: message.into(),
            leftover: false,
        });
    }

    /// Something of the run is still there after cleanup; `gc` retries it.
    pub fn leftover(&mut self, message: impl Into<String>) {
        self.add(Shortfall::Cleanup {
            message: message.into(),
            leftover: true,
        });
    }

    /// Whether anything of the run is left for `gc` (its registry row then says
    /// `cleanup-failed`).
    pub fn left_something(&self) -> bool {
        self.0
            .iter()
            .any(|s| matches!(s, Shortfall::Cleanup { leftover: true, .. }))
    }

    /// Every shortfall as `error` names it, in the order found.
    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }

    pub fn cleanup_messages(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|s| match s {
            Shortfall::Cleanup { message, .. } => Some(message.as_str()),
            _ => None,
        })
    }

    /// Applies the shortfalls to `result`: `succeeded` becomes `error`, every other
    /// status stays; `error` names each shortfall after what it already said;
    /// `leftOut` lists what copies back left out.
    pub fn settle(self, result: &mut RunResult) {
        if self.0.is_empty() {
            return;
        }
        if result.status == RunStatus::Succeeded {
            result.status = RunStatus::Error;
        }
        let mut parts: Vec<String> = result.error.take().into_iter().collect();
        for shortfall in self.0 {
            parts.push(shortfall.to_string());
            if let Shortfall::LeftOut(files) = shortfall {
                result.left_out.extend(files);
            }
        }
        result.error = Some(parts.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::capabilities::RunContext;
    use crate::record::RESULT_VERSION;

    fn result(status: RunStatus, error: Option<&str>) -> RunResult {
        RunResult {
            version: RESULT_VERSION,
            run_id: "r1".into(),
            name: "task".into(),
            status,
            exit_code: Some(0),
            error: error.map(str::to_string),
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            phases: BTreeMap::new(),
            plugins: BTreeMap::new(),
            workspace: None,
            sandbox: None,
            agent: None,
            modified_files: Vec::new(),
            ignored_files: Vec::new(),
            changes_from: "snapshot".into(),
            patch: None,
            logs: None,
            egress: None,
            left_out: Vec::new(),
        }
    }

    #[test]
    fn no_shortfall_keeps_a_success() {
        let mut succeeded = result(RunStatus::Succeeded, None);
        let mut shortfalls = Shortfalls::default();
        // A copy back that left nothing out is no shortfall.
        shortfalls.add(Shortfall::LeftOut(Vec::new()));
        shortfalls.settle(&mut succeeded);
        assert_eq!(succeeded.status, RunStatus::Succeeded);
        assert_eq!(succeeded.error, None);
        let json = serde_json::to_value(&succeeded).unwrap();
        assert!(json.get("leftOut").is_none(), "{json}");
    }

    #[test]
    fn a_file_a_copy_back_left_out_ends_the_run_in_error_and_is_listed() {
        // What a host capability records while it copies the workspace back.
        let ctx = RunContext::describe_only();
        ctx.record_left_out("src/link", "a symlink in the sandbox, refused");
        ctx.record_left_out("big.bin", "larger than the copy-back cap");
        let mut shortfalls = Shortfalls::default();
        shortfalls.add(Shortfall::LeftOut(ctx.left_out()));
        assert!(!shortfalls.left_something(), "nothing for gc");
        let mut run = result(RunStatus::Succeeded, None);
        shortfalls.settle(&mut run);
        assert_eq!(run.status, RunStatus::Error);
        assert_eq!(run.status.exit_code(), 3);
        let error = run.error.clone().unwrap();
        assert!(
            error.contains("left out 2 entries")
                && error.contains("src/link (a symlink in the sandbox, refused)")
                && error.contains("big.bin"),
            "{error}"
        );
        let json = serde_json::to_value(&run).unwrap();
        assert_eq!(json["leftOut"][0]["path"], "src/link", "{json}");
        assert_eq!(
            json["leftOut"][1]["reason"],
            "larger than the copy-back cap"
        );
    }

    #[test]
    fn a_failed_timed_out_or_cancelled_run_keeps_its_status_and_names_the_shortfall() {
        for status in [
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Cancelled,
            RunStatus::Invalid,
            RunStatus::Error,
        ] {
            let mut run = result(status, Some("the agent failed (exit code 1)"));
            let mut shortfalls = Shortfalls::default();
            shortfalls.leftover("container abc is still there");
            shortfalls.add(Shortfall::Changes("the workspace root moved".into()));
            assert!(shortfalls.left_something());
            shortfalls.settle(&mut run);
            assert_eq!(run.status, status);
            assert_eq!(
                run.error.as_deref(),
                Some(
                    "the agent failed (exit code 1); cleanup: container abc is still there; \
                     the workspace root moved"
                )
            );
        }
    }

    #[test]
    fn every_kind_of_shortfall_turns_a_success_into_an_error() {
        let kinds = [
            Shortfall::Cleanup {
                message: "destroying the sandbox: trapped".into(),
                leftover: false,
            },
            Shortfall::Cleanup {
                message: "removing the sandbox state /tmp/s: busy".into(),
                leftover: true,
            },
            Shortfall::Changes("the workspace's changes could not be read".into()),
            Shortfall::Release("releasing the workspace: push refused".into()),
            Shortfall::LeftOut(vec![LeftOutFile {
                path: "a".into(),
                reason: "a device".into(),
            }]),
        ];
        for kind in kinds {
            let mut run = result(RunStatus::Succeeded, None);
            let mut shortfalls = Shortfalls::default();
            shortfalls.add(kind.clone());
            shortfalls.settle(&mut run);
            assert_eq!(run.status, RunStatus::Error, "{kind:?}");
            assert_eq!(run.error, Some(kind.to_string()));
        }
    }

    #[test]
    fn many_left_out_entries_are_counted_not_all_named() {
        let files: Vec<LeftOutFile> = (0..25)
            .map(|i| LeftOutFile {
                path: format!("f{i}"),
                reason: "too large".into(),
            })
            .collect();
        let text = Shortfall::LeftOut(files).to_string();
        assert!(text.contains("f9 (too large)"), "{text}");
        assert!(!text.contains("f10 "), "{text}");
        assert!(text.ends_with("and 15 more (see leftOut)"), "{text}");
    }
}
