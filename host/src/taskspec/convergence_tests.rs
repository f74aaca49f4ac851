//! `spec.convergence` and `goal.desiredState`: every documented field loads, the defaults,
//! and the errors (path, line, message) of each bad value, unknown key and stray key.

use std::time::Duration;

use super::tests::{full_document, parse_err, parse_ok};
use super::*;

/// The reference-format document with every field of `convergence` and `delivery`.
pub(super) const EVERY_FIELD: &str = include_str!(
    "../../../tests/fixtures/taskspecs-not-yet/every-convergence-and-delivery-field.yaml"
);

/// A full document whose `convergence` is `body` (indented by 4): its first line is line 9.
fn convergence(body: &str) -> String {
    full_document(&format!("  convergence:\n{body}"))
}

/// A document with one gate: `- name: g` on line 10, then `rest` (indented by 8).
fn gate(rest: &str) -> String {
    convergence(&format!("    gates:\n      - name: g\n{rest}"))
}

fn loaded(body: &str) -> Convergence {
    parse_ok(&convergence(body)).spec.convergence.unwrap()
}

fn only_gate(rest: &str) -> Gate {
    let mut gates = parse_ok(&gate(rest)).spec.convergence.unwrap().gates;
    assert_eq!(gates.len(), 1);
    gates.remove(0)
}

#[test]
fn every_documented_field_loads() {
    let spec = parse_ok(EVERY_FIELD);
    let goal = spec.spec.goal.as_ref().unwrap();
    assert_eq!(
        goal.desired_state,
        Some(DesiredState {
            all_gates_passed: true
        })
    );
    let convergence = spec.spec.convergence.as_ref().unwrap();
    assert_eq!(convergence.strategy, Some(StrategyName::Hybrid));
    assert_eq!(
        convergence.config,
        Some(StrategyConfig::Hybrid(HybridConfig {
            base_iterations: 5,
            bonus_iterations: 3,
            progress_threshold: 0.8,
        }))
    );
    let limits = &convergence.limits;
    assert_eq!(limits.max_iterations, Some(10));
    assert_eq!(limits.max_wall_clock, Some(Duration::from_secs(7200)));
    assert_eq!(limits.max_tokens, Some(500_000));
    assert_eq!(limits.max_cost_usd, Some(50.0));

    let gates = &convergence.gates;
    let names: Vec<_> = gates.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "code-quality",
            "ci",
            "integration",
            "review",
            "loop-detection"
        ]
    );

    let quality = &gates[0];
    assert_eq!(
        quality.check,
        Check::VerificationLevels(VerificationLevelsCheck {
            levels: vec![Level::L0, Level::L1],
            timeout: Some(Duration::from_secs(120)),
        })
    );
    assert_eq!(
        quality.on_failure,
        OnFailure {
            action: FailureAction::Iterate,
            max_attempts: Some(5),
            feedback: Feedback::Auto,
            backoff: Some(Backoff {
                initial: Duration::from_secs(5),
                max: Duration::from_secs(60),
                multiplier: 2.0,
            }),
        }
    );
    assert_eq!(quality.on_success.action, SuccessAction::Continue);
    assert_eq!(quality.condition.when, When::Always);

    let ci = &gates[1];
    assert_eq!(
        ci.check,
        Check::GithubActions(GithubActionsCheck {
            workflows: Some(vec!["ci.yml".into(), "lint.yml".into()]),
            poll_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(1800),
        })
    );
    assert_eq!(
        ci.on_failure.feedback,
        Feedback::Generator("ci-log-summary".into())
    );
    assert_eq!(
        ci.condition,
        Condition {
            when: When::OnChange,
            skip_if: Some("iteration < 3".into()),
        }
    );

    assert_eq!(
        gates[2].check,
        Check::Custom(CustomCheck {
            command: "npm run test:integration".into(),
            expected_exit: 0,
            timeout: Duration::from_secs(300),
        })
    );
    assert_eq!(gates[2].on_failure.action, FailureAction::Stop);

    let review = &gates[3];
    assert_eq!(
        review.check,
        Check::Approval(ApprovalCheck {
            approvers: vec!["senior-dev".into(), "@database-team".into()],
            min_approvals: 2,
            message: Some("Please review the storage changes".into()),
            timeout: Some(Duration::from_secs(24 * 3600)),
        })
    );
    assert_eq!(review.on_failure.action, FailureAction::Escalate);
    assert_eq!(review.on_failure.feedback, Feedback::Manual);
    assert_eq!(review.on_success.action, SuccessAction::SkipRemaining);
    assert_eq!(review.condition.when, When::Manual);

    assert_eq!(
        gates[4].check,
        Check::Convergence(ConvergenceCheck {
            strategy: LoopDetection::Similarity,
            threshold: 0.95,
        })
    );
}

#[test]
fn the_loaded_convergence_prints_back_as_written() {
    let spec = parse_ok(EVERY_FIELD);
    let json = serde_json::to_value(&spec).unwrap();
    let convergence = &json["spec"]["convergence"];
    assert_eq!(convergence["strategy"], "hybrid");
    assert_eq!(convergence["config"]["baseIterations"], 5);
    let gates = &convergence["gates"];
    assert_eq!(gates[0]["check"]["type"], "verification-levels");
    assert_eq!(gates[0]["check"]["timeout"], 120_000);
    assert_eq!(gates[0]["onFailure"]["backoff"]["max"], "1m");
    assert_eq!(gates[1]["check"]["pollInterval"], "30s");
    assert_eq!(
        gates[1]["onFailure"]["feedback"],
        serde_json::json!({"generator": "ci-log-summary"})
    );
    assert_eq!(gates[3]["onSuccess"]["action"], "skip-remaining");
    assert_eq!(gates[4]["check"]["type"], "convergence");
    assert_eq!(json["spec"]["goal"]["desiredState"]["allGatesPassed"], true);
}

#[test]
fn strategies_fill_in_their_documented_defaults() {
    let fixed = loaded("    strategy: fixed\n");
    assert_eq!(fixed.config, None);
    assert_eq!(
        fixed.strategy_config(),
        Some(StrategyConfig::Fixed(FixedConfig { iterations: 3 }))
    );

    // `config` without `strategy` configures the default strategy, hybrid.
    let hybrid = loaded("    config: {baseIterations: 4}\n");
    assert_eq!(hybrid.strategy, None);
    assert_eq!(hybrid.effective_strategy(), StrategyName::Hybrid);
    assert_eq!(
        hybrid.config,
        Some(StrategyConfig::Hybrid(HybridConfig {
            base_iterations: 4,
            bonus_iterations: 2,
            progress_threshold: 0.7,
        }))
    );

    let ralph = loaded("    strategy: ralph\n    config: {windowSize: 5}\n");
    assert_eq!(
        ralph.config,
        Some(StrategyConfig::Ralph(RalphConfig {
            convergence_threshold: 0.05,
            window_size: 5,
            min_iterations: 1,
            prompt_hot_reload: false,
        }))
    );

    let manual = loaded("    strategy: manual\n");
    assert_eq!(manual.strategy_config(), None);

    let limits_only = loaded("    limits: {maxIterations: 3}\n");
    assert_eq!(limits_only.strategy, None);
    assert_eq!(limits_only.config, None);
    assert!(limits_only.gates.is_empty());
    assert_eq!(
        limits_only.strategy_config(),
        Some(StrategyConfig::Hybrid(HybridConfig::default()))
    );
}

#[test]
fn gates_fill_in_the_chosen_defaults() {
    let custom = only_gate("        check: {type: custom, command: make test}\n");
    assert_eq!(
        custom.check,
        Check::Custom(CustomCheck {
            command: "make test".into(),
            expected_exit: 0,
            timeout: Duration::from_secs(300),
        })
    );
    assert_eq!(custom.on_failure, OnFailure::default());
    assert_eq!(custom.on_failure.action, FailureAction::Iterate);
    assert_eq!(custom.on_failure.feedback, Feedback::Auto);
    assert_eq!(custom.on_success.action, SuccessAction::Continue);
    assert_eq!(custom.condition.when, When::Always);

    let actions = only_gate("        check: {type: github-actions}\n");
    assert_eq!(
        actions.check,
        Check::GithubActions(GithubActionsCheck {
            workflows: None,
            poll_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(1800),
        })
    );

    let approval = only_gate("        check: {type: approval, approvers: [alice]}\n");
    let Check::Approval(approval) = approval.check else {
        panic!()
    };
    assert_eq!((approval.min_approvals, approval.timeout), (1, None));

    let loops = only_gate("        check: {type: convergence}\n");
    assert_eq!(
        loops.check,
        Check::Convergence(ConvergenceCheck {
            strategy: LoopDetection::Similarity,
            threshold: 0.95,
        })
    );

    let levels = only_gate("        check: {type: verification-levels, levels: [L2]}\n");
    assert_eq!(
        levels.check,
        Check::VerificationLevels(VerificationLevelsCheck {
            levels: vec![Level::L2],
            timeout: None,
        })
    );

    let backoff = only_gate(
        "        check: {type: custom, command: x}\n        onFailure: {backoff: {max: 2m}}\n",
    );
    assert_eq!(
        backoff.on_failure.backoff,
        Some(Backoff {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(120),
            multiplier: 2.0,
        })
    );
}

#[test]
fn adaptive_is_refused_as_planned() {
    let error = parse_err(&convergence("    strategy: adaptive\n"));
    assert_eq!(
        error.to_string(),
        "spec.convergence.strategy (line 9): strategy \"adaptive\" is only planned in the \
         reference system, not available; expected one of: fixed, hybrid, ralph, manual"
    );
}

#[test]
fn an_unknown_strategy_lists_the_strategies_and_suggests_one() {
    let error = parse_err(&convergence("    strategy: hybird\n"));
    assert_eq!(error.path, "spec.convergence.strategy");
    assert_eq!(error.line, Some(9));
    assert_eq!(
        error.message,
        "unknown strategy \"hybird\"; expected one of: fixed, hybrid, ralph, manual"
    );
    assert_eq!(error.hint.as_deref(), Some("did you mean \"hybrid\"?"));
}

#[test]
fn a_config_key_of_another_strategy_names_the_strategy() {
    let error = parse_err(&convergence(
        "    strategy: fixed\n    config:\n      baseIterations: 4\n",
    ));
    assert_eq!(error.path, "spec.convergence");
    assert_eq!(error.line, Some(9));
    assert_eq!(
        error.message,
        "config key \"baseIterations\" belongs to strategy hybrid, not fixed"
    );

    // Without `strategy`, the config is the default strategy's.
    let error = parse_err(&convergence("    config: {iterations: 4}\n"));
    assert_eq!(
        error.to_string(),
        "spec.convergence: config key \"iterations\" belongs to strategy fixed, not hybrid \
         (the default strategy) (line 9); write `strategy: fixed`"
    );

    let error = parse_err(&convergence(
        "    strategy: manual\n    config: {minIterations: 2}\n",
    ));
    assert_eq!(
        error.message,
        "config key \"minIterations\" belongs to strategy ralph, not manual"
    );
}

#[test]
fn config_values_are_checked_at_their_line() {
    for (config, path, message) in [
        (
            "progressThreshold: 1.5",
            "progressThreshold",
            "1.5 is out of range; expected 0 to 1",
        ),
        (
            "baseIterations: 0",
            "baseIterations",
            "0 is out of range; expected 1 to 10000",
        ),
        (
            "bonusIterations: -1",
            "bonusIterations",
            "-1 is out of range; expected 0 to 10000",
        ),
        (
            "baseIterations: 2.5",
            "baseIterations",
            "2.5 is not an integer",
        ),
    ] {
        let error = parse_err(&convergence(&format!("    config:\n      {config}\n")));
        assert_eq!(error.path, format!("spec.convergence.config.{path}"));
        assert_eq!(error.line, Some(10), "{config}");
        assert_eq!(error.message, message);
    }
    let error = parse_err(&convergence(
        "    strategy: ralph\n    config:\n      windowSize: 101\n",
    ));
    assert_eq!(error.path, "spec.convergence.config.windowSize");
    assert_eq!(error.message, "101 is out of range; expected 1 to 100");
    let error = parse_err(&convergence(
        "    strategy: ralph\n    config:\n      promptHotReload: maybe\n",
    ));
    assert_eq!(error.path, "spec.convergence.config.promptHotReload");
}

#[test]
fn unknown_keys_are_refused_in_every_convergence_section() {
    for (document, path, line, hint) in [
        (
            convergence("    strategi: fixed\n"),
            "spec.convergence",
            9,
            "did you mean \"strategy\"?",
        ),
        (
            convergence("    config:\n      iteration: 3\n"),
            "spec.convergence.config",
            10,
            "did you mean \"iterations\"?",
        ),
        (
            gate("        check: {type: custom, command: x}\n        onfailure: {}\n"),
            "spec.convergence.gates[0]",
            12,
            "did you mean \"onFailure\"?",
        ),
        (
            gate("        check:\n          type: custom\n          comand: x\n"),
            "spec.convergence.gates[0].check",
            13,
            "did you mean \"command\"?",
        ),
        (
            gate("        check: {type: custom, command: x}\n        onFailure:\n          actions: stop\n"),
            "spec.convergence.gates[0].onFailure",
            13,
            "did you mean \"action\"?",
        ),
        (
            gate("        check: {type: custom, command: x}\n        onFailure:\n          backoff:\n            maximum: 1m\n"),
            "spec.convergence.gates[0].onFailure.backoff",
            14,
            "expected one of: initial, max, multiplier",
        ),
        (
            gate("        check: {type: custom, command: x}\n        onSuccess:\n          acton: continue\n"),
            "spec.convergence.gates[0].onSuccess",
            13,
            "did you mean \"action\"?",
        ),
        (
            gate("        check: {type: custom, command: x}\n        condition:\n          skipif: x\n"),
            "spec.convergence.gates[0].condition",
            13,
            "did you mean \"skipIf\"?",
        ),
    ] {
        let error = parse_err(&document);
        assert_eq!(error.path, path, "{error}");
        assert_eq!(error.line, Some(line), "{error}");
        assert!(error.message.starts_with("unknown key"), "{error}");
        assert_eq!(error.hint.as_deref(), Some(hint), "{error}");
    }
    // A key only a reference example uses is not part of the format.
    let error = parse_err(&gate(
        "        check: {type: custom, command: x, successPattern: ok}\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates[0].check");
    assert_eq!(error.message, "unknown key \"successPattern\"");
}

#[test]
fn an_unknown_check_type_is_refused_at_its_line() {
    let error = parse_err(&gate("        check:\n          type: lint\n"));
    assert_eq!(
        error.to_string(),
        "spec.convergence.gates[0].check.type (line 12): unknown check type \"lint\"; \
         expected one of: verification-levels, github-actions, custom, approval, convergence"
    );
    let error = parse_err(&gate("        check:\n          type: custm\n"));
    assert_eq!(error.hint.as_deref(), Some("did you mean \"custom\"?"));
    let error = parse_err(&gate("        check: {command: x}\n"));
    assert_eq!(error.path, "spec.convergence.gates[0].check");
    assert!(
        error
            .message
            .starts_with("missing key \"type\"; expected one of"),
        "{error}"
    );
}

#[test]
fn check_settings_belong_to_their_type() {
    let error = parse_err(&gate(
        "        check:\n          type: custom\n          command: x\n          levels: [L0]\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates[0].check");
    assert_eq!(error.line, Some(12));
    assert_eq!(
        error.message,
        "key \"levels\" belongs to check type verification-levels, not custom"
    );
    let error = parse_err(&gate("        check: {type: convergence, timeout: 5m}\n"));
    assert_eq!(
        error.message,
        "key \"timeout\" belongs to check type verification-levels, github-actions, custom \
         or approval, not convergence"
    );
    for (check, message) in [
        (
            "{type: custom}",
            "missing key \"command\", required for check type custom",
        ),
        (
            "{type: verification-levels}",
            "missing key \"levels\", required for check type verification-levels",
        ),
        (
            "{type: approval}",
            "missing key \"approvers\", required for check type approval",
        ),
        (
            "{type: approval, approvers: []}",
            "\"approvers\" is empty; name at least one GitHub user or team",
        ),
        (
            "{type: verification-levels, levels: []}",
            "\"levels\" is empty; expected at least one of L0, L1, L2, L3",
        ),
        (
            "{type: verification-levels, levels: [L1, L0, L1]}",
            "level L1 is listed twice",
        ),
        (
            "{type: github-actions, workflows: []}",
            "\"workflows\" is empty; name at least one workflow file, or leave workflows \
             out to wait for every workflow",
        ),
        (
            "{type: github-actions, pollInterval: 1h, timeout: 30m}",
            "pollInterval (1h) is longer than timeout (30m)",
        ),
    ] {
        let error = parse_err(&gate(&format!("        check: {check}\n")));
        assert_eq!(error.path, "spec.convergence.gates[0].check", "{check}");
        assert_eq!(error.message, message, "{check}");
    }
}

#[test]
fn check_values_are_checked_at_their_line() {
    for (check, path, message) in [
        (
            "{type: verification-levels, levels: [L0, L4]}",
            "levels[1]",
            "unknown variant `L4`, expected one of `L0`, `L1`, `L2`, `L3`",
        ),
        (
            "{type: custom, command: x, expectedExit: 256}",
            "expectedExit",
            "256 is out of range; expected 0 to 255",
        ),
        (
            "{type: custom, command: \"  \"}",
            "command",
            "a command is empty",
        ),
        (
            "{type: custom, command: x, timeout: 5 minutes}",
            "timeout",
            "\"5 minutes\" is not a duration; expected an integer with s, m, h or d (e.g. \"30m\")",
        ),
        (
            "{type: convergence, threshold: 95}",
            "threshold",
            "95 is out of range; expected 0 to 1",
        ),
        (
            "{type: convergence, strategy: tokens}",
            "strategy",
            "unknown variant `tokens`, expected `similarity` or `fingerprint`",
        ),
        (
            "{type: approval, approvers: [a], minApprovals: 0}",
            "minApprovals",
            "0 is out of range; expected 1 to 100",
        ),
        (
            "{type: github-actions, workflows: [ci.yml, \"\"]}",
            "workflows[1]",
            "a name is empty",
        ),
        (
            "{type: verification-levels, levels: [L0], timeout: 0}",
            "timeout",
            "0 milliseconds is out of range; expected 1 to 2592000000",
        ),
    ] {
        let error = parse_err(&gate(&format!("        check: {check}\n")));
        assert_eq!(
            error.path,
            format!("spec.convergence.gates[0].check.{path}"),
            "{check}"
        );
        assert_eq!(error.line, Some(11), "{check}");
        assert_eq!(error.message, message, "{check}");
    }
}

#[test]
fn only_verification_levels_reads_a_number_as_milliseconds() {
    let levels =
        only_gate("        check: {type: verification-levels, levels: [L0], timeout: 1500}\n");
    let Check::VerificationLevels(levels) = levels.check else {
        panic!()
    };
    assert_eq!(levels.timeout, Some(Duration::from_millis(1500)));
    let levels =
        only_gate("        check: {type: verification-levels, levels: [L0], timeout: 2m}\n");
    let Check::VerificationLevels(levels) = levels.check else {
        panic!()
    };
    assert_eq!(levels.timeout, Some(Duration::from_secs(120)));

    let error = parse_err(&gate(
        "        check: {type: custom, command: x, timeout: 300000}\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates[0].check");
    assert_eq!(
        error.message,
        "timeout 300000 is a number; check type custom takes a duration such as \"5m\" (only \
         verification-levels reads a number, as milliseconds)"
    );
}

#[test]
fn gate_names_are_one_to_64_characters_and_unique() {
    let error = parse_err(&convergence(
        "    gates:\n      - name: \"\"\n        check: {type: convergence}\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates[0].name");
    assert_eq!(error.line, Some(10));
    assert_eq!(error.message, "\"\" has 0 characters; expected 1 to 64");
    let long = "n".repeat(65);
    let error = parse_err(&convergence(&format!(
        "    gates:\n      - name: {long}\n        check: {{type: convergence}}\n"
    )));
    assert_eq!(error.path, "spec.convergence.gates[0].name");
    assert!(error.message.contains("has 65 characters"), "{error}");
    let ok = only_gate("        check: {type: convergence}\n");
    assert_eq!(ok.name, "g");

    let error = parse_err(&convergence(
        "    gates:\n      - name: lint\n        check: {type: convergence}\n      \
         - name: test\n        check: {type: convergence}\n      \
         - name: lint\n        check: {type: convergence}\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates");
    assert_eq!(
        error.message,
        "gates[2] is named \"lint\" like gates[0]; gate names must be unique"
    );

    let error = parse_err(&convergence(
        "    gates:\n      - check: {type: convergence}\n",
    ));
    assert_eq!(error.path, "spec.convergence.gates[0]");
    assert!(error.message.contains("missing field `name`"), "{error}");
}

#[test]
fn on_failure_and_condition_are_checked() {
    let check = "        check: {type: custom, command: x}\n";
    for (rest, path, line, message) in [
        (
            "        onFailure: {action: stop, feedback: auto}\n",
            "spec.convergence.gates[0].onFailure",
            12,
            "feedback is given to a next iteration, and action stop has none",
        ),
        (
            "        onFailure: {action: retry}\n",
            "spec.convergence.gates[0].onFailure.action",
            12,
            "unknown variant `retry`, expected one of `iterate`, `stop`, `escalate`",
        ),
        (
            "        onFailure: {feedback: smart}\n",
            "spec.convergence.gates[0].onFailure.feedback",
            12,
            "unknown feedback \"smart\"; expected one of: auto, manual",
        ),
        (
            "        onFailure:\n          feedback: {generator: x, model: y}\n",
            "spec.convergence.gates[0].onFailure.feedback",
            13,
            "unknown key \"model\"",
        ),
        (
            "        onFailure: {maxAttempts: 0}\n",
            "spec.convergence.gates[0].onFailure.maxAttempts",
            12,
            "0 is out of range; expected 1 to 1000",
        ),
        (
            "        onFailure:\n          backoff: {initial: 2m, max: 1m}\n",
            "spec.convergence.gates[0].onFailure.backoff",
            13,
            "backoff initial (2m) is longer than max (1m)",
        ),
        (
            "        onFailure:\n          backoff: {multiplier: 0.5}\n",
            "spec.convergence.gates[0].onFailure.backoff.multiplier",
            13,
            "0.5 is out of range; expected 1 to 10",
        ),
        (
            "        onSuccess: {action: next}\n",
            "spec.convergence.gates[0].onSuccess.action",
            12,
            "unknown variant `next`, expected `continue` or `skip-remaining`",
        ),
        (
            "        condition: {when: previousPassed}\n",
            "spec.convergence.gates[0].condition.when",
            12,
            "unknown variant `previousPassed`, expected one of `always`, `on-change`, `manual`",
        ),
        (
            "        condition: {skipIf: \"\"}\n",
            "spec.convergence.gates[0].condition.skipIf",
            12,
            "an expression is empty",
        ),
    ] {
        let error = parse_err(&gate(&format!("{check}{rest}")));
        assert_eq!(error.path, path, "{error}");
        assert_eq!(error.line, Some(line), "{error}");
        assert_eq!(error.message, message, "{error}");
    }
}

#[test]
fn desired_state_is_a_typed_mapping() {
    let goal = |desired: &str| {
        format!(
            "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {{name: x}}\nspec:\n  \
             goal:\n    prompt: p\n    desiredState:\n{desired}  execution:\n    \
             workspace: {{source: local, path: /x}}\n"
        )
    };
    let spec = parse_ok(&goal("      allGatesPassed: false\n"));
    let desired = spec.spec.goal.unwrap().desired_state.unwrap();
    assert!(!desired.all_gates_passed);
    let spec = parse_ok(&goal("      {}\n"));
    assert!(
        spec.spec
            .goal
            .unwrap()
            .desired_state
            .unwrap()
            .all_gates_passed
    );
    check_supported(&parse_ok(&goal("      allGatesPassed: true\n"))).unwrap();

    let error = parse_err(&goal("      allGatesPass: true\n"));
    assert_eq!(error.path, "spec.goal.desiredState");
    assert_eq!(error.line, Some(8));
    assert_eq!(
        error.hint.as_deref(),
        Some("did you mean \"allGatesPassed\"?")
    );
    let error = parse_err(&goal("      specificTests: [login]\n"));
    assert_eq!(error.message, "unknown key \"specificTests\"");
    let error = parse_err(&goal("      allGatesPassed: yes please\n"));
    assert_eq!(error.path, "spec.goal.desiredState.allGatesPassed");
}
