//! End-to-end tests of `parse`: the seed's examples, a document with every field, and the
//! errors a person is most likely to meet.

use std::time::Duration;

use super::*;

/// `(file name, text)` of every fixture in `tests/fixtures/taskspecs/`.
macro_rules! fixtures {
    ($($name:literal,)*) => {
        [$(($name, include_str!(concat!("../../../tests/fixtures/taskspecs/", $name))),)*]
    };
}

pub(super) const FIXTURES: [(&str, &str); 21] = fixtures![
    "full-every-field.yaml",
    "seed-credentials-env.yaml",
    "seed-credentials-ssh.yaml",
    "seed-environment.yaml",
    "seed-execution-specification.yaml",
    "seed-full-featured-execution.yaml",
    "seed-github-with-docker.yaml",
    "seed-minimal-execution.yaml",
    "seed-mounts.yaml",
    "seed-network.yaml",
    "seed-resources.yaml",
    "seed-sandbox-configuration.yaml",
    "seed-sandbox-docker.yaml",
    "seed-sandbox-none.yaml",
    "seed-sandbox-subprocess.yaml",
    "seed-troubleshooting.yaml",
    "seed-workspace-fresh.yaml",
    "seed-workspace-git.yaml",
    "seed-workspace-github-new.yaml",
    "seed-workspace-github.yaml",
    "seed-workspace-local.yaml",
];

pub(super) fn env(name: &str) -> Option<String> {
    let value = match name {
        "HOME" => "/home/me",
        "GIT_TOKEN" => "tok-123",
        "DATABASE_URL" => "postgres://db",
        "API_KEY" => "key",
        "TRICKY" => "x\nfoo: bar",
        _ => return None,
    };
    Some(value.to_string())
}

pub(super) fn parse_ok(yaml: &str) -> TaskSpec {
    parse(yaml, "/specs/example.yaml", &env).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn parse_err(yaml: &str) -> SpecError {
    match parse(yaml, "/specs/example.yaml", &env) {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(error) => error,
    }
}

/// A local-workspace document with `sandbox` set to the given block (indented by 4).
fn with_sandbox(sandbox: &str) -> String {
    format!("execution:\n  workspace:\n    source: local\n    path: /src\n  sandbox:\n{sandbox}")
}

/// A full document with a goal and a local workspace, and `sections` (indented by 2)
/// after `execution` under `spec`: the first line of `sections` is line 8.
pub(super) fn full_document(sections: &str) -> String {
    format!(
        "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {{name: x}}\nspec:\n  \
         goal: {{prompt: p}}\n  execution:\n    workspace: {{source: local, path: /x}}\n\
         {sections}"
    )
}

fn fixture(name: &str) -> &'static str {
    FIXTURES
        .iter()
        .find(|(file, _)| *file == name)
        .expect("no such fixture")
        .1
}

#[test]
fn every_seed_example_parses() {
    for (name, text) in FIXTURES {
        if let Err(error) = parse(text, name, &env) {
            panic!("{name}: {error}");
        }
    }
}

#[test]
fn seed_full_featured_example_is_normalized() {
    let spec = parse(
        fixture("seed-full-featured-execution.yaml"),
        "seed-full.yaml",
        &env,
    )
    .unwrap();
    assert_eq!(spec.api_version, "agentgate.io/v1");
    assert_eq!(spec.metadata.name, "seed-full");
    assert!(spec.spec.goal.is_none());
    let execution = &spec.spec.execution;
    let WorkspaceKind::Github(github) = &execution.workspace.kind else {
        panic!()
    };
    assert_eq!(github.git_ref.as_deref(), Some("feature/new-api"));
    let sandbox = &execution.sandbox;
    assert_eq!(sandbox.resources.cpu_millicores, Some(4000));
    assert_eq!(sandbox.resources.memory_bytes, Some(8 << 30));
    assert_eq!(sandbox.resources.disk_bytes, Some(50 << 30));
    assert_eq!(sandbox.resources.timeout, Duration::from_secs(4 * 3600));
    assert_eq!(sandbox.mounts[0].source, "/home/me/.npm");
    assert_eq!(sandbox.environment["CI"], "true");
    assert_eq!(execution.agent.driver, "claude-agent-sdk");
    assert_eq!(execution.agent.temperature, Some(0.7));
    assert_eq!(execution.agent.tools.len(), 2);
    assert_eq!(execution.agent.capabilities.shell, Some(true));
}

#[test]
fn full_document_with_every_field() {
    let spec = parse_ok(fixture("full-every-field.yaml"));
    assert_eq!(spec.metadata.name, "fix-login-bug");
    assert_eq!(spec.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(spec.metadata.labels["priority"], "1");
    assert_eq!(
        spec.spec.goal.as_ref().unwrap().prompt,
        "Fix the failing login test"
    );
    let limits = &spec.spec.convergence.as_ref().unwrap().limits;
    assert_eq!(limits.max_iterations, Some(10));
    assert_eq!(limits.max_wall_clock, Some(Duration::from_secs(4 * 3600)));
    assert_eq!(limits.max_tokens, Some(200_000));
    assert_eq!(limits.max_cost_usd, Some(5.0));

    let execution = &spec.spec.execution;
    let WorkspaceKind::Git(git) = &execution.workspace.kind else {
        panic!()
    };
    assert_eq!(git.depth, Some(1));
    assert_eq!(
        git.credentials,
        Some(GitCredentials::Token {
            token: "tok-123".into()
        })
    );
    // workspace-git takes no options, and validation checks them against its schema.
    assert!(execution.workspace.options.is_empty());

    let sandbox = &execution.sandbox;
    assert_eq!(sandbox.resources.cpu_millicores, Some(500));
    assert_eq!(sandbox.resources.memory_bytes, Some(512 << 20));
    assert_eq!(sandbox.network, Network::None);
    assert_eq!(sandbox.environment["RETRIES"], "3");
    assert_eq!(sandbox.workdir, "/src");
    assert_eq!(sandbox.options["pids"], 512);

    let agent = &execution.agent;
    assert_eq!(agent.max_tokens, 100_000);
    assert!(agent.tools[0].enabled);
    assert!(!agent.tools[1].enabled);
    assert_eq!(agent.tools[1].config["headless"], true);
    assert_eq!(agent.mcp_servers["github"].env["GITHUB_TOKEN"], "tok-123");
    assert_eq!(agent.options["command"][0], "claude");
    let goal = spec.spec.goal.as_ref().unwrap();
    assert_eq!(
        goal.desired_state,
        Some(DesiredState {
            all_gates_passed: true
        })
    );
    // Every field of this fixture is one this version honours.
    assert!(spec.spec.delivery.is_none());
    check_supported(&spec).unwrap();
}

#[test]
fn a_delivery_section_is_typed_not_kept_verbatim() {
    let error = parse_err(&full_document(
        "  delivery:\n    gitOps: {mode: pull-request}\n    anything: [1, 2, 3]\n",
    ));
    assert_eq!(error.path, "spec.delivery");
    assert_eq!(error.line, Some(9));
    assert_eq!(error.message, "unknown key \"gitOps\"");
    assert_eq!(
        error.hint.as_deref(),
        Some("expected one of: git, pr, notifications")
    );
}

#[test]
fn normalized_spec_prints_as_camel_case_json() {
    let spec = parse_ok(fixture("full-every-field.yaml"));
    let json = serde_json::to_value(&spec).unwrap();
    let sandbox = &json["spec"]["execution"]["sandbox"];
    assert_eq!(sandbox["resources"]["cpuMillicores"], 500);
    assert_eq!(sandbox["resources"]["memoryBytes"], 512 << 20);
    assert_eq!(sandbox["resources"]["timeout"], "30m");
    assert_eq!(json["spec"]["convergence"]["limits"]["maxCostUsd"], 5.0);
    assert_eq!(
        json["spec"]["execution"]["agent"]["mcpServers"]["github"]["command"],
        "npx"
    );
    assert_eq!(json["apiVersion"], "agentgate.io/v1");
}

#[test]
fn workspace_section_json_has_everything_the_plugin_needs() {
    let spec = parse_ok(fixture("full-every-field.yaml"));
    let section = spec.spec.execution.workspace.section_json();
    assert_eq!(
        section,
        serde_json::json!({
            "source": "git",
            "url": "https://example.com/myorg/myrepo.git",
            "ref": "develop",
            "depth": 1,
            "credentials": {"type": "token", "token": "tok-123"},
            "options": {},
        })
    );
}

#[test]
fn defaults_are_filled_in() {
    let spec = parse_ok("execution:\n  workspace: {source: local, path: /src}\n");
    let execution = &spec.spec.execution;
    assert_eq!(execution.sandbox.provider, "none");
    assert_eq!(execution.sandbox.network, Network::Bridge);
    assert_eq!(execution.sandbox.workdir, "/workspace");
    assert_eq!(
        execution.sandbox.resources.timeout,
        Duration::from_secs(3600)
    );
    assert_eq!(execution.agent.driver, "claude-code-subscription");
    assert_eq!(execution.agent.max_tokens, 200_000);

    let spec = parse_ok(&with_sandbox("    image: alpine\n"));
    assert_eq!(spec.spec.execution.sandbox.provider, "docker");
}

#[test]
fn each_source_normalizes() {
    let spec = parse_ok(fixture("seed-workspace-github-new.yaml"));
    let WorkspaceKind::GithubNew(new) = &spec.spec.execution.workspace.kind else {
        panic!()
    };
    assert_eq!(new.template.as_deref(), Some("mycompany/project-template"));
    assert!(new.private);

    let spec = parse_ok(fixture("seed-workspace-fresh.yaml"));
    let WorkspaceKind::Fresh(fresh) = &spec.spec.execution.workspace.kind else {
        panic!()
    };
    assert_eq!(fresh.template, FreshTemplate::NodeTypescript);

    let spec = parse_ok(fixture("seed-credentials-ssh.yaml"));
    let WorkspaceKind::Git(git) = &spec.spec.execution.workspace.kind else {
        panic!()
    };
    assert_eq!(
        git.credentials,
        Some(GitCredentials::Ssh {
            key_path: "~/.ssh/id_rsa".into()
        })
    );
}

#[test]
fn plugin_sources_take_only_options() {
    let spec = parse_ok("execution:\n  workspace:\n    source: s3\n    options: {bucket: b}\n");
    let workspace = &spec.spec.execution.workspace;
    assert!(matches!(workspace.kind, WorkspaceKind::Plugin));
    assert_eq!(
        workspace.section_json(),
        serde_json::json!({"source": "s3", "options": {"bucket": "b"}})
    );

    let error = parse_err("execution:\n  workspace:\n    source: s3\n    path: /x\n");
    assert!(error.message.contains("plugin source \"s3\""), "{error}");
}

#[test]
fn bad_memory_names_path_line_and_format() {
    let error = parse_err(&with_sandbox("    resources:\n      memory: \"4Gb\"\n"));
    assert_eq!(
        error.to_string(),
        "execution.sandbox.resources.memory (line 7): \"4Gb\" is not a byte quantity; \
         expected an integer with Ki, Mi, Gi or Ti (e.g. \"4Gi\")"
    );
    assert_eq!(error.column, Some(15));
}

#[test]
fn bad_units_are_rejected() {
    for (resources, path) in [
        ("timeout: \"1.5h\"", "timeout"),
        ("timeout: 10", "timeout"),
        ("cpu: 0", "cpu"),
        ("cpu: 65", "cpu"),
        ("disk: 0", "disk"),
        ("memory: 4G", "memory"),
    ] {
        let error = parse_err(&with_sandbox(&format!(
            "    resources:\n      {resources}\n"
        )));
        assert_eq!(
            error.path,
            format!("execution.sandbox.resources.{path}"),
            "{resources}"
        );
        assert_eq!(error.line, Some(7), "{resources}");
    }
    let error = parse_err(&with_sandbox("    resources:\n      cpu: 65\n"));
    assert!(error.message.contains("0.1 to 64"), "{error}");
}

#[test]
fn unknown_key_suggests_the_closest() {
    let yaml = "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata:\n  name: x\nspec:\n  \
                goal: {prompt: p}\n  execution:\n    workspace:\n      pth: /src\n      source: local\n";
    let error = parse_err(yaml);
    assert_eq!(
        error.to_string(),
        "spec.execution.workspace: unknown key \"pth\" (line 9); did you mean \"path\"?"
    );
    let error = parse_err(&with_sandbox("    netwrok: none\n"));
    assert_eq!(error.hint.as_deref(), Some("did you mean \"network\"?"));
    assert_eq!(error.path, "execution.sandbox");
    let error =
        parse_err("execution:\n  workspace: {source: local, path: /x}\n  agent: {maxtokens: 3}\n");
    assert_eq!(error.hint.as_deref(), Some("did you mean \"maxTokens\"?"));
}

#[test]
fn missing_variable_is_named_with_its_line() {
    let error = parse_err(&with_sandbox("    environment:\n      KEY: ${NOT_SET}\n"));
    assert_eq!(error.path, "execution.sandbox.environment.KEY");
    assert_eq!(error.line, Some(7));
    assert!(error.message.contains("\"NOT_SET\""), "{error}");
}

#[test]
fn interpolation_substitutes_escapes_and_cannot_inject_yaml() {
    let spec = parse_ok(&with_sandbox(
        "    environment:\n      A: \"${GIT_TOKEN}\"\n      B: $${GIT_TOKEN}\n      C: ${TRICKY}\n",
    ));
    let environment = &spec.spec.execution.sandbox.environment;
    assert_eq!(environment["A"], "tok-123");
    assert_eq!(environment["B"], "${GIT_TOKEN}");
    assert_eq!(environment["C"], "x\nfoo: bar");
    assert!(!environment.contains_key("foo"));
}

#[test]
fn wrong_enum_value_lists_the_choices() {
    let error = parse_err(&with_sandbox("    network: bridged\n"));
    assert_eq!(error.path, "execution.sandbox.network");
    assert_eq!(error.line, Some(6));
    for choice in ["none", "bridge", "host"] {
        assert!(error.message.contains(choice), "{error}");
    }
    let error = parse_err("execution:\n  workspace:\n    source: fresh\n    template: java\n");
    assert!(error.message.contains("node-typescript"), "{error}");
}

#[test]
fn out_of_range_values_say_the_range() {
    let error = parse_err(
        "execution:\n  workspace: {source: local, path: /x}\n  agent:\n    temperature: 3\n",
    );
    assert_eq!(
        error.to_string(),
        "execution.agent.temperature (line 4): 3 is out of range; expected 0 to 2"
    );
    let yaml = "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {name: x}\nspec:\n  \
                goal: {prompt: p}\n  convergence:\n    limits:\n      maxIterations: 0\n  \
                execution:\n    workspace: {source: local, path: /x}\n";
    let error = parse_err(yaml);
    assert_eq!(error.path, "spec.convergence.limits.maxIterations");
    assert!(error.message.contains("1 to 10000"), "{error}");
}

#[test]
fn wrong_api_version_and_kind() {
    let error = parse_err("apiVersion: agentgate.io/v2\nkind: TaskSpec\n");
    assert_eq!(error.path, "apiVersion");
    assert_eq!(error.line, Some(1));
    assert!(error.message.contains("agentgate.io/v1"), "{error}");
    let error = parse_err("apiVersion: agentgate.io/v1\nkind: Task\n");
    assert_eq!(error.path, "kind");
}

#[test]
fn full_documents_need_every_header() {
    let error = parse_err(
        "spec:\n  goal: {prompt: p}\n  execution:\n    workspace: {source: local, path: /x}\n",
    );
    assert_eq!(error.path, "apiVersion");
    let error = parse_err("apiVersion: agentgate.io/v1\nkind: TaskSpec\nspec:\n  execution:\n    workspace: {source: local, path: /x}\n");
    assert_eq!(error.path, "metadata");
    let error = parse_err("apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {name: \"\"}\nspec:\n  execution:\n    workspace: {source: local, path: /x}\n");
    assert_eq!(error.path, "metadata.name");
    let error =
        parse_err("metadata: {name: x}\nexecution:\n  workspace: {source: local, path: /x}\n");
    assert_eq!(error.path, "execution");
}

#[test]
fn a_key_of_another_source_names_that_source() {
    let error = parse_err(
        "execution:\n  workspace:\n    source: local\n    path: /x\n    url: https://x\n",
    );
    assert_eq!(error.path, "execution.workspace");
    assert!(
        error
            .message
            .contains("\"url\" belongs to source git, not local"),
        "{error}"
    );
    assert_eq!(error.line, Some(3));
}

#[test]
fn local_path_must_be_absolute() {
    let error = parse_err("execution:\n  workspace:\n    source: local\n    path: ./src\n");
    assert_eq!(error.path, "execution.workspace.path");
    assert_eq!(error.line, Some(4));
    assert!(error.message.contains("absolute"), "{error}");
}

#[test]
fn credentials_need_the_field_of_their_type() {
    let error = parse_err(
        "execution:\n  workspace:\n    source: git\n    url: u\n    credentials: {type: ssh}\n",
    );
    assert_eq!(error.path, "execution.workspace.credentials");
    assert!(error.message.contains("keyPath"), "{error}");
    let error = parse_err(
        "execution:\n  workspace:\n    source: git\n    url: u\n    credentials: {type: oauth}\n",
    );
    assert!(
        error.message.contains("token") && error.message.contains("ssh"),
        "{error}"
    );
}

#[test]
fn yaml_syntax_errors_have_line_and_column() {
    let error = parse_err("execution:\n  workspace: {source: local, path: /x\n\n");
    assert_eq!((error.line, error.column), (Some(4), Some(1)), "{error:?}");
    assert!(
        error
            .message
            .starts_with("did not find expected ',' or '}'"),
        "{error}"
    );
}

#[test]
fn mount_targets_and_workdir_are_absolute() {
    let error = parse_err(&with_sandbox(
        "    mounts:\n      - {source: /a, target: rel}\n",
    ));
    assert_eq!(error.path, "execution.sandbox.mounts[0].target");
    let error = parse_err(&with_sandbox("    workdir: work\n"));
    assert_eq!(error.path, "execution.sandbox.workdir");
}

#[test]
fn bad_cost_is_rejected() {
    let yaml = "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {name: x}\nspec:\n  \
                goal: {prompt: p}\n  convergence: {limits: {maxCost: \"five dollars\"}}\n  \
                execution:\n    workspace: {source: local, path: /x}\n";
    assert_eq!(parse_err(yaml).path, "spec.convergence.limits.maxCost");
}

#[test]
fn huge_quantities_name_the_field_and_the_allowed_range() {
    let error = parse_err(&with_sandbox(
        "    resources:\n      timeout: 9223372036854775807s\n",
    ));
    assert_eq!(error.path, "execution.sandbox.resources.timeout");
    assert_eq!(error.line, Some(7));
    assert!(error.message.contains("expected 1s to 30d"), "{error}");
    let error = parse_err(&with_sandbox("    resources:\n      memory: 99999Ti\n"));
    assert_eq!(error.path, "execution.sandbox.resources.memory");
    assert!(error.message.contains("1 to 1024Ti"), "{error}");
    let limits = |body: &str| {
        format!(
            "apiVersion: agentgate.io/v1\nkind: TaskSpec\nmetadata: {{name: x}}\nspec:\n  \
             goal: {{prompt: p}}\n  convergence:\n    limits: {{{body}}}\n  \
             execution:\n    workspace: {{source: local, path: /x}}\n"
        )
    };
    let error = parse_err(&limits("maxWallClock: 99999999999999999999d"));
    assert_eq!(error.path, "spec.convergence.limits.maxWallClock");
    assert!(error.message.contains("out of range"), "{error}");
    let error = parse_err(&limits("maxTokens: 18446744073709551615"));
    assert_eq!(error.path, "spec.convergence.limits.maxTokens");
    // A `${VAR}` goes through the same bound.
    let env = |name: &str| (name == "T").then(|| "9223372036854775807s".to_string());
    let text = with_sandbox("    resources:\n      timeout: ${T}\n");
    let error = parse(&text, "x.yaml", &env).unwrap_err();
    assert_eq!(error.path, "execution.sandbox.resources.timeout");
}

#[test]
fn an_oversized_document_is_refused_before_parsing() {
    let mut text = with_sandbox("    environment:\n");
    while text.len() <= MAX_FILE_BYTES {
        text.push_str(&format!("      V{}: x\n", text.len()));
    }
    let error = parse_err(&text);
    assert_eq!(error.path, "");
    assert!(error.message.contains("1048576 bytes (1 MiB)"), "{error}");
    assert!(error.hint.is_some());
}

#[test]
fn deep_nesting_is_refused_before_the_parser() {
    let text = format!("execution: {}", "[".repeat(200_000));
    let started = std::time::Instant::now();
    let error = parse_err(&text);
    // Generous: the parser alone took over a minute on this; the pre-check is linear.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((error.line, error.column), (Some(1), Some(11 + MAX_DEPTH)));
    assert!(error.to_string().contains("more than 64 levels"), "{error}");
}

#[test]
fn oversized_variable_values_are_refused_at_their_field() {
    let big = "x".repeat(MAX_VALUE_BYTES + 1);
    let env = |name: &str| (name == "BIG").then(|| big.clone());
    let text = with_sandbox("    environment:\n      HUGE: ${BIG}\n");
    let error = parse(&text, "x.yaml", &env).unwrap_err();
    assert_eq!(error.path, "execution.sandbox.environment.HUGE");
    assert_eq!(error.line, Some(7));
    assert!(error.message.contains("\"BIG\""), "{error}");
    assert!(error.hint.unwrap().contains("file"));
    // Many small values may not add up to more than the document total either.
    let value = "y".repeat(MAX_VALUE_BYTES);
    let env = |name: &str| (name == "V").then(|| value.clone());
    let many: String = (0..=MAX_INTERPOLATED_BYTES / MAX_VALUE_BYTES)
        .map(|i| format!("      K{i}: ${{V}}\n"))
        .collect();
    let text = with_sandbox(&format!("    environment:\n{many}"));
    let error = parse(&text, "x.yaml", &env).unwrap_err();
    assert!(error.message.contains("1048576"), "{error}");
}
