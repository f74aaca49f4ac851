//! `spec.delivery`: every documented field loads, the defaults, the template variables,
//! and the errors (path, line, message) of each bad value, unknown key and contradiction.

use std::collections::BTreeMap;

use super::convergence_tests::EVERY_FIELD;
use super::tests::{full_document, parse_err, parse_ok};
use super::*;

/// A full document whose `delivery` is `body` (indented by 4): its first line is line 9.
fn delivery(body: &str) -> String {
    full_document(&format!("  delivery:\n{body}"))
}

fn loaded(body: &str) -> Delivery {
    parse_ok(&delivery(body)).spec.delivery.unwrap()
}

/// A document with one `onSuccess` notification whose first key is on line 11.
fn notification(entry: &str) -> String {
    delivery(&format!(
        "    notifications:\n      onSuccess:\n        - {entry}\n"
    ))
}

#[test]
fn every_documented_field_loads() {
    let spec = parse_ok(EVERY_FIELD);
    let delivery = spec.spec.delivery.as_ref().unwrap();
    assert_eq!(
        delivery.git,
        Some(GitDelivery {
            mode: GitMode::GithubPr,
            branch_prefix: "feature/".into(),
            branch_name: None,
            commit_prefix: "[AgentGate]".into(),
            commit_template: Some(
                "{type}: {task} ({changes}) [{workOrderId}/{runId}, {date}]".into()
            ),
            auto_commit: true,
            auto_push: true,
            sign_commits: false,
        })
    );
    assert_eq!(
        delivery.pr,
        Some(PullRequest {
            create: true,
            draft: true,
            title: Some("feat: {task}".into()),
            body: Some("Branch {branch}, commit {commit}, after {iterations} iterations.".into()),
            labels: vec!["agent-generated".into(), "needs-review".into()],
            reviewers: vec!["senior-dev".into()],
            assignees: vec!["team-lead".into()],
            base: Some("develop".into()),
            auto_merge: AutoMerge {
                enabled: true,
                method: MergeMethod::Squash,
                wait_for_checks: true,
                delete_on_merge: true,
            },
        })
    );
    let notifications = delivery.notifications.as_ref().unwrap();
    assert_eq!(
        notifications.on_success,
        vec![
            Notification::Slack(SlackNotification {
                webhook: "https://hooks.slack.com/services/T000/B000/XXXX".into(),
                channel: Some("#deployments".into()),
                template: Some(
                    "{task} is done: {prUrl} (#{prNumber}, {branch}@{commit}, {duration})".into()
                ),
            }),
            Notification::Webhook(WebhookNotification {
                url: "https://example.com/hooks/agentgate".into(),
                method: HttpMethod::Put,
                // `${API_KEY}` is substituted when the document is read.
                headers: BTreeMap::from([("Authorization".into(), "Bearer key".into())]),
            }),
        ]
    );
    assert_eq!(
        notifications.on_failure,
        vec![Notification::Email(EmailNotification {
            to: vec!["team@example.com".into(), "lead@example.com".into()],
            subject: Some("{task} failed after {iterations} iterations".into()),
            template: Some("Run {runId} of {workOrderId} failed: {error}".into()),
        })]
    );

    let json = serde_json::to_value(&spec).unwrap();
    let delivery = &json["spec"]["delivery"];
    assert_eq!(delivery["git"]["mode"], "github-pr");
    assert_eq!(delivery["pr"]["autoMerge"]["method"], "squash");
    assert_eq!(delivery["notifications"]["onSuccess"][0]["type"], "slack");
    assert_eq!(delivery["notifications"]["onSuccess"][1]["method"], "PUT");
    assert_eq!(delivery["notifications"]["onFailure"][0]["type"], "email");
}

#[test]
fn defaults_are_the_references() {
    let empty = loaded("    {}\n");
    assert_eq!(empty, Delivery::default());
    let git = empty.git_or_default();
    assert_eq!(git.mode, GitMode::Local);
    assert_eq!(git.branch_prefix, "agentgate/");
    assert_eq!(git.commit_prefix, "[AgentGate]");
    assert!(git.auto_commit && !git.auto_push && !git.sign_commits);
    assert!(!empty.opens_pull_request());

    // The mode decides whether the work is pushed.
    let push = loaded("    git: {mode: push}\n").git.unwrap();
    assert!(push.auto_push);
    let pr = loaded("    git: {mode: github-pr}\n");
    assert!(pr.git.as_ref().unwrap().auto_push);
    assert!(pr.opens_pull_request());
    assert_eq!(pr.pr, None);

    let pr = loaded("    git: {mode: github-pr}\n    pr: {}\n")
        .pr
        .unwrap();
    assert!(pr.create && !pr.draft);
    assert_eq!(pr.auto_merge, AutoMerge::default());
    assert!(!pr.auto_merge.enabled);
    assert_eq!(pr.auto_merge.method, MergeMethod::Merge);
    assert!(pr.auto_merge.wait_for_checks);
    assert!(!pr.auto_merge.delete_on_merge);
    assert!(pr.labels.is_empty() && pr.base.is_none());

    let webhook = loaded(
        "    notifications:\n      onFailure:\n        - {type: webhook, url: \"http://ci/h\"}\n",
    );
    let notifications = webhook.notifications.unwrap();
    assert!(notifications.on_success.is_empty());
    let Notification::Webhook(webhook) = &notifications.on_failure[0] else {
        panic!()
    };
    assert_eq!(webhook.method, HttpMethod::Post);
    assert!(webhook.headers.is_empty());
}

#[test]
fn template_variables_are_checked_against_the_known_ones() {
    let error = parse_err(&delivery(
        "    git:\n      commitTemplate: \"fix: {tsk}\"\n",
    ));
    assert_eq!(error.path, "spec.delivery.git.commitTemplate");
    assert_eq!(error.line, Some(10));
    assert_eq!(
        error.message,
        "unknown variable {tsk} in the template; expected one of: {type}, {task}, {changes}, \
         {workOrderId}, {runId}, {date}"
    );
    assert_eq!(error.hint.as_deref(), Some("did you mean {task}?"));

    // A notification variable is not a commit variable.
    let error = parse_err(&delivery("    git: {commitTemplate: \"{prUrl}\"}\n"));
    assert!(
        error.message.starts_with("unknown variable {prUrl}"),
        "{error}"
    );
    assert_eq!(error.hint, None);

    let error = parse_err(&delivery(
        "    git: {mode: github-pr}\n    pr:\n      body: \"see {prUrl}\"\n",
    ));
    assert_eq!(error.path, "spec.delivery.pr.body");
    assert_eq!(error.line, Some(11));
    assert!(error.message.contains("{iterations}"), "{error}");

    for (entry, field) in [
        (
            "{type: slack, webhook: \"https://h/x\", template: \"{tsk}\"}",
            "template",
        ),
        ("{type: email, to: [a@b], subject: \"{foo}\"}", "subject"),
        ("{type: email, to: [a@b], template: \"{type}\"}", "template"),
    ] {
        let error = parse_err(&notification(entry));
        assert_eq!(
            error.path,
            format!("spec.delivery.notifications.onSuccess[0].{field}")
        );
        assert_eq!(error.line, Some(11), "{entry}");
        assert!(
            error.message.ends_with(
                "expected one of: {task}, {workOrderId}, {runId}, {prUrl}, {prNumber}, \
                 {branch}, {commit}, {duration}, {error}, {iterations}"
            ),
            "{error}"
        );
    }

    // Braces that do not hold a name are text.
    for text in [
        "{ a }",
        "{}",
        "{{task}}",
        "}{",
        "{1x}",
        "{task",
        "json: {\"a\": 1}",
    ] {
        super::delivery::check_template(text, COMMIT_VARIABLES)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }
    assert!(super::delivery::check_template("{task}{date}", COMMIT_VARIABLES).is_ok());
    assert!(super::delivery::check_template("{task}{x_y}", COMMIT_VARIABLES).is_err());
}

#[test]
fn settings_that_would_be_ignored_are_refused() {
    for (body, path, message) in [
        (
            "    pr: {draft: true}\n",
            "spec.delivery",
            "pr applies to git.mode github-pr only, and the mode is local",
        ),
        (
            "    git: {mode: push}\n    pr: {draft: true}\n",
            "spec.delivery",
            "pr applies to git.mode github-pr only, and the mode is push",
        ),
        (
            "    git: {branchPrefix: fix/, branchName: fix-login}\n",
            "spec.delivery.git",
            "branchName replaces the whole branch name, so branchPrefix would be unused",
        ),
        (
            "    git: {autoPush: true}\n",
            "spec.delivery.git",
            "autoPush: true, but mode local does not push",
        ),
        (
            "    git: {mode: github-pr, autoPush: false}\n",
            "spec.delivery.git",
            "autoPush: false, but mode github-pr pushes",
        ),
        (
            "    git: {mode: push, autoCommit: false}\n",
            "spec.delivery.git",
            "autoCommit: false leaves nothing for mode push to push; only mode local may \
             skip the commit",
        ),
        (
            "    git: {autoCommit: false, signCommits: true}\n",
            "spec.delivery.git",
            "signCommits: true needs autoCommit: true",
        ),
        (
            "    git: {mode: github-pr}\n    pr: {create: false}\n",
            "spec.delivery.pr.create",
            "pr.create: false opens no pull request",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      autoMerge: {method: squash}\n",
            "spec.delivery.pr.autoMerge",
            "autoMerge.method has no effect while autoMerge.enabled is false",
        ),
    ] {
        let error = parse_err(&delivery(body));
        assert_eq!(error.path, path, "{error}");
        assert!(error.line.is_some(), "{error}");
        assert_eq!(error.message, message, "{error}");
    }
    let error = parse_err(&delivery("    pr: {title: x}\n"));
    assert_eq!(error.line, Some(9));
    assert_eq!(
        error.hint.as_deref(),
        Some("write git.mode: github-pr, or remove pr")
    );
    // What agrees with the mode is accepted as written.
    loaded("    git: {mode: local, autoCommit: false}\n");
    loaded("    git: {mode: push, autoPush: true, signCommits: true}\n");
    loaded("    git: {branchName: agent/fix-login}\n");
}

#[test]
fn bad_values_name_their_field_and_line() {
    for (body, path, line, message) in [
        (
            "    git: {mode: pull-request}\n",
            "spec.delivery.git.mode",
            9,
            "unknown variant `pull-request`, expected one of `local`, `push`, `github-pr`",
        ),
        (
            "    git:\n      branchName: fix login\n",
            "spec.delivery.git.branchName",
            10,
            "\"fix login\" is not a git branch name: it has a space, a control character or \
             one of ~ ^ : ? * [ \\",
        ),
        (
            "    git:\n      branchPrefix: ../up/\n",
            "spec.delivery.git.branchPrefix",
            10,
            "\"../up/\" is not a git branch name: it has \"..\", \"@{\" or \"//\"",
        ),
        (
            "    git: {branchName: fix/}\n",
            "spec.delivery.git.branchName",
            9,
            "\"fix/\" is not a git branch name: it ends with /, . or .lock",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      base: -main\n",
            "spec.delivery.pr.base",
            11,
            "\"-main\" is not a git branch name: it starts with - or /",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      labels: [ok, \"\"]\n",
            "spec.delivery.pr.labels[1]",
            11,
            "a name is empty",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      autoMerge: {enabled: true, method: ff}\n",
            "spec.delivery.pr.autoMerge.method",
            11,
            "unknown variant `ff`, expected one of `merge`, `squash`, `rebase`",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      create: yes\n",
            "spec.delivery.pr.create",
            11,
            "\"yes\" is not true or false",
        ),
    ] {
        let error = parse_err(&delivery(body));
        assert_eq!(error.path, path, "{error}");
        assert_eq!(error.line, Some(line), "{error}");
        assert_eq!(error.message, message, "{error}");
    }
}

#[test]
fn notifications_are_checked_by_type() {
    let at = "spec.delivery.notifications.onSuccess[0]";
    for (entry, path, message) in [
        (
            "{type: teams, url: \"https://x\"}",
            "type",
            "unknown notification type \"teams\"; expected one of: slack, email, webhook",
        ),
        (
            "{webhook: \"https://x\"}",
            "",
            "missing key \"type\"; expected one of: slack, email, webhook",
        ),
        (
            "{type: slack, channel: \"#x\"}",
            "",
            "missing key \"webhook\", required for notification type slack",
        ),
        (
            "{type: slack, webhook: \"http://hooks.slack.com/x\"}",
            "webhook",
            "\"http://hooks.slack.com/x\" is not an https:// URL",
        ),
        (
            "{type: email, to: [team@example.com], channel: \"#x\"}",
            "",
            "key \"channel\" belongs to notification type slack, not email",
        ),
        (
            "{type: email, to: [nobody]}",
            "to[0]",
            "\"nobody\" is not an e-mail address",
        ),
        (
            "{type: email, to: []}",
            "",
            "\"to\" is empty; expected at least one address",
        ),
        (
            "{type: webhook, url: \"ftp://x\"}",
            "url",
            "\"ftp://x\" is not an http:// or https:// URL",
        ),
        (
            "{type: webhook, url: \"https://x\", method: GET}",
            "method",
            "unknown variant `GET`, expected `POST` or `PUT`",
        ),
        (
            "{type: webhook, url: \"https://x\", headers: {\"X Token\": a}}",
            "",
            "\"X Token\" is not an HTTP header name",
        ),
        (
            "{type: webhook, url: \"https://x\", template: \"{task}\"}",
            "",
            "key \"template\" belongs to notification type slack or email, not webhook",
        ),
    ] {
        let error = parse_err(&notification(entry));
        let expected = if path.is_empty() {
            at.to_string()
        } else {
            format!("{at}.{path}")
        };
        assert_eq!(error.path, expected, "{entry}");
        assert_eq!(error.line, Some(11), "{entry}");
        assert_eq!(error.message, message, "{entry}");
    }
    let error = parse_err(&notification("{type: slak, webhook: \"https://x\"}"));
    assert_eq!(error.hint.as_deref(), Some("did you mean \"slack\"?"));
}

#[test]
fn unknown_keys_are_refused_in_every_delivery_section() {
    for (body, path, line, hint) in [
        ("    gti: {}\n", "spec.delivery", 9, "did you mean \"git\"?"),
        (
            "    git:\n      branchprefix: x/\n",
            "spec.delivery.git",
            10,
            "did you mean \"branchPrefix\"?",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      reviewer: [a]\n",
            "spec.delivery.pr",
            11,
            "did you mean \"reviewers\"?",
        ),
        (
            "    git: {mode: github-pr}\n    pr:\n      autoMerge:\n        enable: true\n",
            "spec.delivery.pr.autoMerge",
            12,
            "did you mean \"enabled\"?",
        ),
        (
            "    notifications:\n      onSucess: []\n",
            "spec.delivery.notifications",
            10,
            "did you mean \"onSuccess\"?",
        ),
        (
            "    notifications:\n      onSuccess:\n        - type: slack\n          webhok: x\n",
            "spec.delivery.notifications.onSuccess[0]",
            12,
            "did you mean \"webhook\"?",
        ),
    ] {
        let error = parse_err(&delivery(body));
        assert_eq!(error.path, path, "{error}");
        assert_eq!(error.line, Some(line), "{error}");
        assert!(error.message.starts_with("unknown key"), "{error}");
        assert_eq!(error.hint.as_deref(), Some(hint), "{error}");
    }
}
