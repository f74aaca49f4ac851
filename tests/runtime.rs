//! The plugin runtime against real components: grants read from imports, deadlines,
//! trap isolation and memory caps. Runs in-process through the library.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentgate::engine::{self, RunRequest, RunStatus};
use agentgate::runtime::bindings::types::PluginKind;
use agentgate::runtime::{Grants, PluginLimits, Runtime, RuntimeConfig};
use support::{fixture_plugins, shell_agent, task_spec};

async fn runtime(grants: Grants, limits: PluginLimits) -> Arc<Runtime> {
    let cache = std::env::temp_dir().join("agentgate-test-component-cache");
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache),
        plugin_dirs: vec![fixture_plugins()],
        grants,
        limits,
    })
    .await
    .expect("runtime loads")
}

fn spec(name: &str, agent: &str, timeout: &str, workspace: &Path) -> agentgate::taskspec::TaskSpec {
    let execution = format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: subprocess\n  resources:\n    timeout: {timeout}\n{agent}",
        workspace.display()
    );
    agentgate::taskspec::parse(&task_spec(name, "do it", &execution), "test.yaml", &|_| {
        None
    })
    .expect("valid spec")
}

fn hostile(behavior: &str) -> String {
    format!("agent:\n  driver: hostile\n  options:\n    behavior: {behavior}\n")
}

#[tokio::test]
async fn a_plugin_importing_an_ungranted_interface_is_refused() {
    let runtime = runtime(Grants::default(), PluginLimits::default()).await;
    let plugin = runtime
        .catalog()
        .get("sneaky-docker")
        .expect("the fixture loads");
    let refusal = plugin
        .refusal()
        .expect("it imports docker without a grant")
        .to_string();
    assert!(refusal.contains("agentgate:plugin/docker"), "{refusal}");
    assert!(
        refusal.contains("--grant sneaky-docker=docker"),
        "{refusal}"
    );

    let error = runtime
        .catalog()
        .resolve(PluginKind::AgentDriver, "sneaky")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("refused") && error.contains("agentgate:plugin/docker"),
        "{error}"
    );

    // A plugin that imports no capability needs no grant.
    assert!(runtime
        .catalog()
        .get("hostile-driver")
        .unwrap()
        .refusal()
        .is_none());
}

#[tokio::test]
async fn a_grant_admits_the_plugin_and_a_digest_pins_it() {
    let mut grants = Grants::default();
    grants.add_flag("sneaky-docker=docker").unwrap();
    let runtime = runtime(grants.clone(), PluginLimits::default()).await;
    let digest = runtime
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .digest()
        .to_string();
    assert!(runtime
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .is_none());

    grants.plugins.get_mut("sneaky-docker").unwrap().digest = Some("sha256:0000".into());
    let pinned_elsewhere = self::runtime(grants.clone(), PluginLimits::default()).await;
    assert!(pinned_elsewhere
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .is_some());

    grants.plugins.get_mut("sneaky-docker").unwrap().digest = Some(digest);
    let pinned_here = self::runtime(grants, PluginLimits::default()).await;
    assert!(pinned_here
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .is_none());

    // Admitted, it reaches the docker interface, which fails closed while unbuilt.
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let agent = "agent:\n  driver: sneaky\n";
    let request = RunRequest::new(
        spec("sneaky", agent, "1m", workspace.path()),
        home.path().into(),
    );
    let result = engine::run(&pinned_here, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Error);
    let error = result.error.unwrap();
    assert!(
        error.contains("unavailable") && error.contains("docker"),
        "{error}"
    );
}

#[tokio::test]
async fn a_plugin_that_loops_forever_is_stopped_by_its_cpu_slice() {
    let limits = PluginLimits {
        cpu_slice: Duration::from_millis(300),
        ..PluginLimits::default()
    };
    let runtime = runtime(Grants::default(), limits).await;
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(
        spec("loop", &hostile("loop"), "10m", workspace.path()),
        home.path().into(),
    );
    let report = engine::run(&runtime, request).await.unwrap();
    assert_eq!(report.result.status, RunStatus::Error);
    let error = report.result.error.unwrap();
    assert!(
        error.contains("hostile-driver") && error.contains("without returning to the host"),
        "{error}"
    );
}

#[tokio::test]
async fn a_plugin_that_loops_forever_is_stopped_by_the_run_deadline() {
    // The CPU slice is far away; the run's wall-clock timeout must end it.
    let runtime = runtime(Grants::default(), PluginLimits::default()).await;
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(
        spec("loop", &hostile("loop"), "1s", workspace.path()),
        home.path().into(),
    );
    let report = engine::run(&runtime, request).await.unwrap();
    assert_eq!(
        report.result.status,
        RunStatus::TimedOut,
        "{:?}",
        report.result.error
    );
    assert_eq!(report.result.status.exit_code(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_fails_only_its_own_run() {
    let runtime = runtime(Grants::default(), PluginLimits::default()).await;
    let home = tempfile::tempdir().unwrap();
    let (ws_a, ws_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let trapping = RunRequest::new(
        spec("trap", &hostile("trap"), "1m", ws_a.path()),
        home.path().into(),
    );
    let healthy = RunRequest::new(
        spec(
            "healthy",
            &shell_agent("sleep 0.2; echo done > done.txt"),
            "1m",
            ws_b.path(),
        ),
        home.path().into(),
    );
    let (trapped, completed) = tokio::join!(
        engine::run(&runtime, trapping),
        engine::run(&runtime, healthy)
    );

    let trapped = trapped.unwrap().result;
    assert_eq!(trapped.status, RunStatus::Error);
    let error = trapped.error.unwrap();
    assert!(
        error.contains("plugin hostile-driver trapped in run"),
        "{error}"
    );

    let completed = completed.unwrap().result;
    assert_eq!(
        completed.status,
        RunStatus::Succeeded,
        "{:?}",
        completed.error
    );
    assert_eq!(
        std::fs::read_to_string(ws_b.path().join("done.txt")).unwrap(),
        "done\n"
    );

    // The runtime is still usable after the trap.
    let again = RunRequest::new(
        spec("again", &hostile("ok"), "1m", ws_a.path()),
        home.path().into(),
    );
    assert_eq!(
        engine::run(&runtime, again).await.unwrap().result.status,
        RunStatus::Succeeded
    );
}

#[tokio::test]
async fn a_plugin_that_eats_memory_hits_its_cap() {
    let limits = PluginLimits {
        memory_bytes: 64 << 20,
        ..PluginLimits::default()
    };
    let runtime = runtime(Grants::default(), limits).await;
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(
        spec("oom", &hostile("oom"), "1m", workspace.path()),
        home.path().into(),
    );
    let report = engine::run(&runtime, request).await.unwrap();
    assert_eq!(report.result.status, RunStatus::Error);
    let error = report.result.error.unwrap();
    assert!(
        error.contains("hostile-driver") && error.contains("memory"),
        "{error}"
    );
}

#[tokio::test]
async fn describe_cannot_reach_host_interfaces_and_unknown_values_list_what_exists() {
    let runtime = runtime(Grants::default(), PluginLimits::default()).await;
    let error = runtime
        .catalog()
        .resolve(PluginKind::SandboxProvider, "dokcer")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("sandbox.provider") && error.contains("none, subprocess"),
        "{error}"
    );
}

#[tokio::test]
async fn compiled_components_are_cached_by_digest_and_engine() {
    let cache = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        plugin_dirs: vec![fixture_plugins()],
        grants: Grants::default(),
        limits: PluginLimits::default(),
    };
    let first = Runtime::new(config()).await.unwrap();
    let mut entries: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    // One entry per plugin: <sha256 of the wasm>-<engine hash>.cwasm
    assert_eq!(
        entries.len(),
        first.catalog().plugins().count(),
        "{entries:?}"
    );
    for plugin in first.catalog().plugins() {
        let sha = plugin.digest().trim_start_matches("sha256:");
        assert!(
            entries
                .iter()
                .any(|e| e.starts_with(sha) && e.ends_with(".cwasm")),
            "{sha} not cached"
        );
    }
    // A second runtime loads from the cache and sees the same plugins.
    let second = Runtime::new(config()).await.unwrap();
    let names = |r: &Runtime| {
        r.catalog()
            .plugins()
            .map(|p| p.name().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first), names(&second));
}
