//! Plugins written in Python (componentize-py) and JavaScript (jco / componentize-js),
//! built from `wit/` by `examples/plugins/build.sh` with pinned toolchains, loaded from
//! a plugin directory with exactly the grants their imports ask for, and run end to end
//! by the `agentgate` binary: each language's driver in the built-in `subprocess`
//! sandbox, and each language's provider under the built-in `command` driver.
//!
//! The components are built once per test binary. Without `python3 -m venv`, node or
//! npm the tests skip with a loud message, except under `CI=true`, where that is a
//! failure. A Python or JavaScript component takes seconds to compile, so the first
//! test to need them warms a compile cache (`target/polyglot-home`, kept between runs,
//! so unchanged builds compile once) that every test's home starts from.

use std::path::Path;
use std::process::Output;

use crate::support::polyglot::{built, grant, home_with, PLUGINS};
use crate::support::{indent, shell_agent, stderr, task_spec, Home};

/// Runs `yaml` with the plugin directory and the grants of `plugins`.
fn run(home: &Home, plugin_dir: &Path, plugins: &[&str], yaml: &str) -> Output {
    let task = home.dir.path().join("task.yaml");
    std::fs::write(&task, yaml).unwrap();
    let grants: Vec<String> = plugins.iter().map(|p| grant(p)).collect();
    let mut args = vec!["run", "--plugin-dir", plugin_dir.to_str().unwrap()];
    for g in &grants {
        args.extend(["--grant", g]);
    }
    args.push(task.to_str().unwrap());
    home.agentgate(&args)
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "before\n").unwrap();
    dir
}

fn modified_paths(result: &serde_json::Value) -> Vec<String> {
    result["modifiedFiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                f["change"].as_str().unwrap(),
                f["path"].as_str().unwrap()
            )
        })
        .collect()
}

/// A language's driver, granted `events,sandbox`, runs its agent in the built-in
/// `subprocess` sandbox: the agent's edits land in the workspace, its output in
/// `stdout.log`, its last line is the run's summary.
fn driver_runs_in_the_subprocess_sandbox(driver: &str) -> Option<Home> {
    let built = built()?;
    let (home, plugin_dir) = home_with(built, &[driver]);
    let ws = workspace();
    let agent = format!(
        "agent:\n  driver: {driver}\n  options:\n    command:\n      - sh\n      - -c\n      - |\n{}",
        indent(
            "echo changed-by-agent > README.md\necho \"prompt: $(cat)\"\necho \"finished $AGENTGATE_PROMPT\"",
            8
        )
    );
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: 60s\n{agent}",
        ws.path().display()
    );
    let out = run(
        &home,
        &plugin_dir,
        &[driver],
        &task_spec("polyglot", "fix it", &execution),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("README.md")).unwrap(),
        "changed-by-agent\n"
    );
    let result = home.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["agent"]["driver"], driver);
    assert_eq!(result["agent"]["success"], true);
    assert_eq!(result["agent"]["summary"], "finished fix it");
    assert_eq!(result["sandbox"]["provider"], "subprocess");
    assert_eq!(result["plugins"]["agent"]["name"], driver);
    assert_eq!(modified_paths(&result), ["modified README.md"]);
    assert!(
        home.log("stdout.log").contains("prompt: fix it"),
        "{}",
        home.log("stdout.log")
    );
    Some(home)
}

/// A language's provider, granted `events,process`, seals the built-in `command`
/// driver's agent: it writes the workspace at `/workspace`, has a private HOME, and
/// the host's files outside its view are absent.
fn provider_seals_the_command_driver(provider: &str) {
    let Some(built) = built() else { return };
    let (home, plugin_dir) = home_with(built, &[provider]);
    let ws = workspace();
    let agent = shell_agent(
        "pwd > where.txt\necho \"$HOME\" >> where.txt\ntest -e /root/.bashrc && echo host-home-visible >> where.txt\nrm README.md\necho sealed",
    );
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: {provider}\n  resources:\n    timeout: 60s\n{agent}",
        ws.path().display()
    );
    let out = run(
        &home,
        &plugin_dir,
        &[provider],
        &task_spec("polyglot", "go", &execution),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("where.txt")).unwrap(),
        "/workspace\n/home/agent\n"
    );
    let result = home.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["sandbox"]["provider"], provider);
    assert_eq!(
        result["sandbox"]["id"].as_str().unwrap(),
        format!("{provider}-{}", result["runId"].as_str().unwrap())
    );
    assert!(
        result["sandbox"]["isolation"]
            .as_str()
            .unwrap()
            .contains("sealed by the host's process capability"),
        "{}",
        result["sandbox"]
    );
    assert_eq!(result["plugins"]["sandbox"]["name"], provider);
    let mut changed = modified_paths(&result);
    changed.sort();
    assert_eq!(changed, ["added where.txt", "deleted README.md"]);
    assert!(home.log("stdout.log").contains("sealed"));
}

#[test]
fn python_driver_runs_in_the_subprocess_sandbox() {
    driver_prints_to_the_plugin_log("py-shell");
}

#[test]
fn javascript_driver_runs_in_the_subprocess_sandbox() {
    driver_prints_to_the_plugin_log("js-shell");
}

/// WASI stdout is captured for the run's plugins.log, so `print` / `console.log`
/// debugs a plugin (js-shell is built keeping jco's `stdio` feature for that).
fn driver_prints_to_the_plugin_log(driver: &str) {
    let Some(home) = driver_runs_in_the_subprocess_sandbox(driver) else {
        return;
    };
    let log = home.log("plugins.log");
    assert!(
        log.contains(&format!("{driver}: running sh in subprocess sandbox")),
        "plugins.log: {log}"
    );
}

#[test]
fn python_provider_seals_the_command_driver() {
    provider_seals_the_command_driver("py-sealed");
}

#[test]
fn javascript_provider_seals_the_command_driver() {
    provider_seals_the_command_driver("js-sealed");
}

/// Built for the narrow worlds, each component imports exactly the capabilities it
/// uses (a provider on `process` does not import `docker`), so it loads with exactly
/// those grants, and one fewer is refused.
#[test]
fn each_component_imports_only_what_it_uses() {
    let Some(built) = built() else { return };
    for (name, caps) in PLUGINS {
        let (home, plugin_dir) = home_with(built, &[name]);
        let dir = plugin_dir.to_str().unwrap();
        let granted = grant(name);
        let out = home.agentgate(&[
            "plugins",
            "inspect",
            name,
            "--plugin-dir",
            dir,
            "--grant",
            &granted,
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            capabilities(&info["imports"]),
            caps,
            "{name} imports {}",
            info["imports"]
        );
        assert!(info["refused"].is_null(), "{name}: {}", info["refused"]);

        // Granting only `events` leaves the second capability missing: refused.
        let short = format!("{name}=events");
        let out = home.agentgate(&[
            "plugins",
            "inspect",
            name,
            "--plugin-dir",
            dir,
            "--grant",
            &short,
        ]);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        assert!(text.contains(caps[1]), "{name} with only events: {text}");
        if out.status.success() {
            let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                !info["refused"].is_null(),
                "{name} loaded with only events: {info}"
            );
        }
    }
}

/// The agentgate capabilities among `imports`, whether `plugins inspect` lists them
/// by capability (`events`) or by interface (`agentgate:plugin/events@0.1.0`); WASI
/// imports grant nothing and are left out.
fn capabilities(imports: &serde_json::Value) -> Vec<String> {
    let mut caps: Vec<String> = imports
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| {
            let name = i.as_str().or_else(|| i["name"].as_str())?;
            let name = name.strip_prefix("agentgate:plugin/").unwrap_or(name);
            let name = name.split('@').next().unwrap();
            (!name.contains(':') && !matches!(name, "types" | "execution"))
                .then(|| name.to_string())
        })
        .collect();
    caps.sort();
    caps.dedup();
    caps
}
