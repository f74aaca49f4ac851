//! The run's `result.json`: built from how the phases ended and what their teardowns
//! left, after the shortfalls decided the status.
//!
//! Kept apart from the phases so the record is built from plain values (a unit test
//! builds one without any plugin or sandbox).

use std::collections::BTreeMap;
use std::time::SystemTime;

use tokio::time::Instant;

use super::changes::Changes;
use super::phase::{Outcome, RunEnv};
use super::sandbox::SandboxRecord;
use super::shortfall::Shortfalls;
use crate::record::RESULT_VERSION;
use crate::record::{AgentRecord, PluginRecord, RunResult, RunStatus, WorkspaceRecord};
use crate::runtime::LoadedPlugin;
use crate::taskspec::TaskSpec;

/// Everything `result.json` says besides how the phases ended.
pub(super) struct Facts<'a> {
    pub spec: &'a TaskSpec,
    pub run_id: String,
    /// When the run began, by the wall clock and by the monotonic one.
    pub started: SystemTime,
    pub clock: Instant,
    pub phases: BTreeMap<String, u64>,
    pub plugins: BTreeMap<String, PluginRecord>,
    pub workspace: Option<WorkspaceRecord>,
    pub sandbox: SandboxRecord,
    pub changes: Changes,
}

/// How `result.json` names a plugin.
pub(super) fn plugin_record(plugin: &LoadedPlugin) -> PluginRecord {
    PluginRecord {
        name: plugin.name().to_string(),
        version: plugin.info().version.clone(),
        digest: plugin.digest().to_string(),
        origin: plugin.origin().to_string(),
    }
}

/// The result, before the shortfalls are settled and it is masked.
pub(super) fn build(outcome: Outcome, facts: Facts) -> RunResult {
    let (status, exit_code, error, agent) = match outcome {
        Outcome::Agent(outcome) => {
            let status = if outcome.success {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            };
            let error = (!outcome.success)
                .then(|| format!("the agent failed (exit code {})", outcome.exit_code));
            let agent = AgentRecord {
                driver: facts.spec.spec.execution.agent.driver.clone(),
                success: outcome.success,
                session_id: outcome.session_id,
                turns: outcome.turns,
                usage: outcome.usage.map(|u| {
                    serde_json::json!({
                        "inputTokens": u.input_tokens,
                        "outputTokens": u.output_tokens,
                        "cacheReadTokens": u.cache_read_tokens,
                        "cacheWriteTokens": u.cache_write_tokens,
                        "costUsd": u.cost_usd,
                    })
                }),
                summary: outcome.summary,
            };
            (status, Some(outcome.exit_code), error, Some(agent))
        }
        Outcome::Failed { status, message } => (status, None, Some(message), None),
    };
    RunResult {
        version: RESULT_VERSION,
        run_id: facts.run_id,
        name: facts.spec.metadata.name.clone(),
        status,
        exit_code,
        error,
        started_at: humantime::format_rfc3339_millis(facts.started).to_string(),
        finished_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        duration_ms: facts.clock.elapsed().as_millis() as u64,
        phases: facts.phases,
        plugins: facts.plugins,
        workspace: facts.workspace,
        sandbox: facts.sandbox.info,
        agent,
        modified_files: facts.changes.files,
        ignored_files: facts.changes.ignored,
        changes_from: facts.changes.from.to_string(),
        patch: facts.changes.patch,
        logs: facts.sandbox.logs,
        egress: facts.sandbox.egress,
        left_out: Vec::new(),
    }
}

/// Settles the shortfalls into the result, masks it and writes `result.json`.
pub(super) fn settle_and_write(
    outcome: Outcome,
    facts: Facts,
    shortfalls: Shortfalls,
    env: &RunEnv,
) -> RunResult {
    let mut result = build(outcome, facts);
    shortfalls.settle(&mut result);
    // Free text and file names in the result may quote what an agent printed.
    result.mask(&env.redactor);
    if let Err(e) = env.folder.write_result(&result) {
        env.events
            .host_log("error", format!("writing result.json: {e}"));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::phase::fakes::TestRun;
    use crate::engine::shortfall::Shortfall;
    use crate::wit::agent_driver::exports::agentgate::plugin::driver::AgentOutcome;

    const EXECUTION: &str = "  workspace:\n    source: local\n    path: /path/to/project\n  \
                             agent:\n    driver: fake";

    fn facts(spec: &TaskSpec) -> Facts<'_> {
        Facts {
            spec,
            run_id: "r-1".into(),
            started: SystemTime::now(),
            clock: Instant::now(),
            phases: BTreeMap::from([("agent".to_string(), 7), ("cleanup".to_string(), 1)]),
            plugins: BTreeMap::new(),
            workspace: None,
            sandbox: SandboxRecord::default(),
            changes: Changes::default(),
        }
    }

    fn agent(success: bool, exit_code: i32) -> Outcome {
        Outcome::Agent(AgentOutcome {
            exit_code,
            success,
            session_id: None,
            turns: None,
            usage: None,
            summary: Some("said s3cret".into()),
        })
    }

    #[test]
    fn the_agents_outcome_decides_the_status_and_exit_code() {
        let spec = TestRun::new(EXECUTION).spec;
        let result = build(agent(true, 0), facts(&spec));
        assert_eq!(
            (result.status, result.exit_code),
            (RunStatus::Succeeded, Some(0))
        );
        assert_eq!(result.phases["agent"], 7);
        assert_eq!(result.changes_from, "snapshot");
        let result = build(agent(false, 2), facts(&spec));
        assert_eq!(result.status, RunStatus::Failed);
        assert_eq!(
            result.error.as_deref(),
            Some("the agent failed (exit code 2)")
        );
        let result = build(Outcome::host("no sandbox"), facts(&spec));
        assert_eq!((result.status, result.exit_code), (RunStatus::Error, None));
        assert!(result.agent.is_none());
    }

    #[tokio::test]
    async fn shortfalls_turn_a_success_into_an_error_in_the_written_result() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let mut shortfalls = Shortfalls::default();
        shortfalls.add(Shortfall::Release(
            "releasing the workspace: push refused".into(),
        ));
        shortfalls.leftover("removing the sandbox state /tmp/s: busy");
        let result = settle_and_write(agent(true, 0), facts(&test.spec), shortfalls, &env);
        assert_eq!(result.status, RunStatus::Error);
        assert_eq!(
            result.error.as_deref(),
            Some(
                "releasing the workspace: push refused; cleanup: removing the sandbox state \
                 /tmp/s: busy"
            )
        );
        let written: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(env.folder.path().join("result.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written["status"], "error");
        // Masked like everything the run writes.
        assert_eq!(written["agent"]["summary"], "said ***", "{written}");
    }
}
