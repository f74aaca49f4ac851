//! The plugin runtime against real components: grants read from imports, deadlines,
//! trap isolation and memory caps, lazy and cached loading, refusals that say why, and
//! `wasi:http` behind the `http` grant. Runs in-process through the library (and the
//! binary, for `plugins cache` and `plugins inspect`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support;
use crate::support::{fixture_plugins, fixture_runtime, shell_agent, task_spec};
use agentgate::engine::{self, RunError, RunRequest};
use agentgate::record::RunStatus;
use agentgate::runtime::{Grants, LoadStats, PluginLimits, PluginOrigin, Runtime, RuntimeConfig};
use agentgate::wit::types::PluginKind;

/// A runtime with its own cache under `cache` and the given plugin directories.
async fn runtime_in(cache: &Path, plugin_dirs: Vec<PathBuf>, grants: Grants) -> Arc<Runtime> {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        plugin_dirs,
        grants,
        ..RuntimeConfig::default()
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
    let runtime = fixture_runtime(Grants::default(), PluginLimits::default()).await;
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
    let runtime = fixture_runtime(grants.clone(), PluginLimits::default()).await;
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
    let pinned_elsewhere = fixture_runtime(grants.clone(), PluginLimits::default()).await;
    let refusal = pinned_elsewhere
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .expect("a grant pinned to another digest grants nothing")
        .to_string();
    // Says that the digest differs, and shows both.
    assert!(
        refusal.contains(&format!(
            "pinned to digest sha256:0000 but this component's digest is {digest}"
        )),
        "{refusal}"
    );

    let mut other_version = grants.clone();
    let grant = other_version.plugins.get_mut("sneaky-docker").unwrap();
    grant.digest = None;
    grant.version = Some("9.9.9".into());
    let pinned_to_version = fixture_runtime(other_version, PluginLimits::default()).await;
    let refusal = pinned_to_version
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .expect("a grant pinned to another version grants nothing")
        .to_string();
    assert!(
        refusal.contains("pinned to version \"9.9.9\" but the plugin reports version \"0.1.0\""),
        "{refusal}"
    );

    grants.plugins.get_mut("sneaky-docker").unwrap().digest = Some(digest);
    let pinned_here = fixture_runtime(grants, PluginLimits::default()).await;
    assert!(pinned_here
        .catalog()
        .get("sneaky-docker")
        .unwrap()
        .refusal()
        .is_none());

    // Admitted, it reaches the docker interface: the engine answers whether it has
    // busybox, or, where no engine runs, the error says docker is unavailable.
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let agent = "agent:\n  driver: sneaky\n";
    let request = RunRequest::new(
        spec("sneaky", agent, "1m", workspace.path()),
        home.path().into(),
    );
    let result = engine::run(&pinned_here, request).await.unwrap().result;
    if result.status == RunStatus::Succeeded {
        let summary = result.agent.and_then(|agent| agent.summary);
        assert!(
            summary
                .as_deref()
                .is_some_and(|s| s.starts_with("busybox present: ")),
            "{summary:?}"
        );
    } else {
        let error = result.error.unwrap_or_default();
        assert!(
            error.contains("unavailable") && error.contains("docker"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_plugin_that_loops_forever_is_stopped_by_its_cpu_slice() {
    let limits = PluginLimits {
        cpu_slice: Duration::from_millis(300),
        ..PluginLimits::default()
    };
    let runtime = fixture_runtime(Grants::default(), limits).await;
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
    let runtime = fixture_runtime(Grants::default(), PluginLimits::default()).await;
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
    let runtime = fixture_runtime(Grants::default(), PluginLimits::default()).await;
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
    let runtime = fixture_runtime(Grants::default(), limits).await;
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
    let runtime = fixture_runtime(Grants::default(), PluginLimits::default()).await;
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
    let first = runtime_in(cache.path(), vec![fixture_plugins()], Grants::default()).await;
    let mut entries: Vec<String> = std::fs::read_dir(cache.path().join("components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    // One entry per plugin file: <sha256 of the wasm>-<engine hash>.cwasm. The
    // built-ins were compiled when the binary was built: nothing of theirs is cached.
    let files: Vec<_> = first
        .catalog()
        .plugins()
        .filter(|p| *p.origin() != PluginOrigin::Builtin)
        .collect();
    assert!(!files.is_empty());
    assert_eq!(entries.len(), files.len(), "{entries:?}");
    for plugin in files {
        let sha = plugin.digest().trim_start_matches("sha256:");
        assert!(
            entries
                .iter()
                .any(|e| e.starts_with(sha) && e.ends_with(".cwasm")),
            "{sha} not cached"
        );
    }
    // A second runtime finds the same plugins from the description cache.
    let second = runtime_in(cache.path(), vec![fixture_plugins()], Grants::default()).await;
    let names = |r: &Runtime| {
        r.catalog()
            .plugins()
            .map(|p| p.name().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first), names(&second));
}

fn builtin_spec(name: &str, workspace: &Path) -> agentgate::taskspec::TaskSpec {
    spec(name, &shell_agent("echo hi > hi.txt"), "1m", workspace)
}

#[tokio::test]
async fn a_second_command_compiles_nothing_and_a_run_loads_only_its_plugins() {
    let cache = tempfile::tempdir().unwrap();
    let dirs = vec![fixture_plugins()];

    // First command: every plugin file is new, so each is compiled and described
    // once. The built-ins were described and compiled when the binary was built.
    let first = runtime_in(cache.path(), dirs.clone(), Grants::default()).await;
    let stats = first.load_stats();
    let found = first
        .catalog()
        .plugins()
        .filter(|p| *p.origin() != PluginOrigin::Builtin)
        .count()
        + first.catalog().broken().len();
    assert_eq!(stats.described, found, "{stats:?}");
    assert_eq!(stats.compiled, found, "{stats:?}");

    // Second command (e.g. `plugins list`): everything comes from the description
    // cache; nothing is compiled, nothing even read from the compile cache.
    let second = runtime_in(cache.path(), dirs.clone(), Grants::default()).await;
    assert_eq!(second.load_stats(), LoadStats::default());
    assert_eq!(
        second.catalog().plugins().count(),
        first.catalog().plugins().count()
    );

    // A run loads exactly its three plugins (built-ins), from the code the binary
    // embeds: nothing is compiled or read from the compile cache.
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(builtin_spec("lazy", workspace.path()), home.path().into());
    let result = engine::run(&second, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);
    assert_eq!(
        second.load_stats(),
        LoadStats {
            compiled: 0,
            from_cache: 0,
            described: 0,
            embedded: 3,
        }
    );
    // Loading is part of the run's timings.
    let loading = result.phases["plugins"];
    assert!(result.duration_ms >= loading, "{result:?}");
    let phases: u64 = result.phases.values().sum();
    assert!(result.duration_ms + 5 >= phases, "{result:?}");

    // In the first runtime too, the run's built-ins come from the binary.
    let request = RunRequest::new(builtin_spec("warm", workspace.path()), home.path().into());
    let result = engine::run(&first, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);
    assert_eq!(
        first.load_stats(),
        LoadStats {
            embedded: 3,
            ..stats
        }
    );
}

#[tokio::test]
async fn a_first_run_in_a_fresh_home_compiles_and_describes_nothing() {
    // An empty cache, as in a fresh AGENTGATE_HOME: finding the built-ins reads
    // nothing, and the run loads its three plugins from the code the binary embeds,
    // which `build.rs` compiled for this very engine configuration.
    let cache = tempfile::tempdir().unwrap();
    let runtime = runtime_in(cache.path(), Vec::new(), Grants::default()).await;
    assert_eq!(runtime.load_stats(), LoadStats::default());
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(builtin_spec("fresh", workspace.path()), home.path().into());
    let result = engine::run(&runtime, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);
    assert_eq!(
        runtime.load_stats(),
        LoadStats {
            embedded: 3,
            ..LoadStats::default()
        }
    );
    // Nothing was written to the caches either.
    for dir in ["components", "described"] {
        let entries = std::fs::read_dir(cache.path().join(dir)).map_or(0, |d| d.count());
        assert_eq!(entries, 0, "{dir}");
    }
}

/// A plugin directory holding a file that is not a component.
fn dir_with_broken_component() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("js-driver.wasm"), b"\0asm not really").unwrap();
    dir
}

#[tokio::test]
async fn a_broken_component_stops_only_the_runs_that_ask_for_what_it_might_serve() {
    let cache = tempfile::tempdir().unwrap();
    let plugins = dir_with_broken_component();
    let runtime = runtime_in(cache.path(), vec![plugins.path().into()], Grants::default()).await;
    let broken = runtime.catalog().broken();
    assert_eq!(broken.len(), 1);
    assert!(
        broken[0].reason.contains("not a valid component"),
        "{broken:?}"
    );

    // A run that uses only built-ins is not stopped by it.
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(builtin_spec("fine", workspace.path()), home.path().into());
    let result = engine::run(&runtime, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);

    // A run asking for a value nobody serves names the broken file and why.
    let agent = "agent:\n  driver: js\n";
    let request = RunRequest::new(
        spec("js", agent, "1m", workspace.path()),
        home.path().into(),
    );
    let Err(RunError::Invalid(message)) = engine::run(&runtime, request).await else {
        panic!("the run should be refused");
    };
    assert!(message.contains("no plugin serves \"js\""), "{message}");
    assert!(
        message.contains("js-driver.wasm") && message.contains("not a valid component"),
        "{message}"
    );

    // Its failure is cached too: the next command does not compile it again.
    let again = runtime_in(cache.path(), vec![plugins.path().into()], Grants::default()).await;
    assert_eq!(again.load_stats(), LoadStats::default());
    assert_eq!(again.catalog().broken().len(), 1);
}

#[tokio::test]
async fn eviction_keeps_the_compile_cache_under_its_bound() {
    let cache = tempfile::tempdir().unwrap();
    // The fixtures compile to a few hundred KiB each (about 2.8 MiB together): a
    // bound of 1 MiB holds some of them, never all.
    let bound: u64 = 1 << 20;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        cache_max_bytes: bound,
        plugin_dirs: vec![fixture_plugins()],
        ..RuntimeConfig::default()
    })
    .await
    .unwrap();
    let sizes: Vec<u64> = std::fs::read_dir(cache.path().join("components"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    let total: u64 = sizes.iter().sum();
    assert!(total <= bound, "{total} bytes in the cache, bound {bound}");
    assert!(!sizes.is_empty());
    assert!(
        sizes.len() < runtime.load_stats().compiled,
        "nothing was evicted: {sizes:?}"
    );
}

fn agentgate(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(args)
        .env("AGENTGATE_HOME", home)
        .env("AGENTGATE_PLUGIN_PATH", fixture_plugins())
        .env_remove("AGENTGATE_CACHE_SIZE")
        .output()
        .unwrap()
}

#[test]
fn plugins_cache_shows_its_entries_and_clears_them() {
    let home = tempfile::tempdir().unwrap();
    let list = agentgate(home.path(), &["plugins", "list"]);
    assert!(list.status.success(), "{list:?}");

    let shown = agentgate(home.path(), &["plugins", "cache"]);
    assert!(shown.status.success(), "{shown:?}");
    let text = support::stdout(&shown);
    let components = home.path().join("cache/components");
    let count = std::fs::read_dir(&components).unwrap().count();
    assert!(count > 0);
    assert!(text.contains(&format!("{count} entries")), "{text}");
    assert!(text.contains("of 1024.0 MiB"), "{text}");
    // Plugin files only: the built-ins' code is embedded in the binary.
    assert!(text.contains("hostile-driver 0.1.0"), "{text}");
    assert!(!text.contains("sandbox-subprocess"), "{text}");

    let cleared = agentgate(home.path(), &["plugins", "cache", "--clear"]);
    assert!(cleared.status.success(), "{cleared:?}");
    assert!(
        support::stdout(&cleared).starts_with("removed "),
        "{}",
        support::stdout(&cleared)
    );
    assert_eq!(std::fs::read_dir(&components).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(home.path().join("cache/described"))
            .unwrap()
            .count(),
        0
    );
    let shown = agentgate(home.path(), &["plugins", "cache"]);
    assert!(
        support::stdout(&shown).contains("  0 entries"),
        "{}",
        support::stdout(&shown)
    );
}

#[test]
fn plugins_inspect_lists_every_import_with_what_it_grants() {
    let home = tempfile::tempdir().unwrap();
    let output = agentgate(home.path(), &["plugins", "inspect", "sandbox-subprocess"]);
    assert!(output.status.success(), "{output:?}");
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let interfaces = info["interfaces"].as_array().unwrap();
    let named = |prefix: &str| {
        interfaces
            .iter()
            .find(|i| i["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} import in {interfaces:?}"))
    };
    let process = named("agentgate:plugin/process@");
    assert_eq!(process["capability"], "process");
    let environment = named("wasi:cli/environment@");
    assert!(environment["capability"].is_null());
    assert!(
        environment["grants"]
            .as_str()
            .unwrap()
            .contains("no environment variables"),
        "{environment}"
    );
    for interface in interfaces {
        assert!(
            !interface["grants"].as_str().unwrap().is_empty(),
            "{interface}"
        );
    }
}

/// Serves one HTTP/1.1 request on 127.0.0.1 with `200 ok`; returns the address and
/// the request line it received.
fn one_shot_http_server() -> (String, std::thread::JoinHandle<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .unwrap();
        String::from_utf8_lossy(&request)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    });
    (address, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_http_sends_only_with_the_http_grant() {
    // Without a grant: `types` alone loads, `outgoing-handler` is refused by name.
    let runtime = fixture_runtime(Grants::default(), PluginLimits::default()).await;
    let types_only = runtime.catalog().get("http-types-driver").unwrap();
    assert!(types_only.refusal().is_none(), "{:?}", types_only.refusal());
    let refusal = runtime
        .catalog()
        .get("http-driver")
        .unwrap()
        .refusal()
        .expect("outgoing-handler needs the http grant")
        .to_string();
    assert!(
        refusal.contains("it imports wasi:http/outgoing-handler@0.2.")
            && refusal.contains("(http) which was not granted")
            && refusal.contains("--grant http-driver=http"),
        "{refusal}"
    );
    assert!(!refusal.contains("wasi:http/types"), "{refusal}");

    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let request = RunRequest::new(
        spec(
            "types",
            "agent:\n  driver: http-types\n",
            "1m",
            workspace.path(),
        ),
        home.path().into(),
    );
    let result = engine::run(&runtime, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);

    // Granted `http` to its host, the request reaches a real HTTP server on 127.0.0.1.
    let (address, server) = one_shot_http_server();
    let mut grants = Grants::default();
    grants
        .add_flag(&format!("http-driver=http:{address}"))
        .unwrap();
    let granted = runtime_in(
        &support::shared_component_cache(),
        vec![fixture_plugins()],
        grants,
    )
    .await;
    assert!(granted
        .catalog()
        .get("http-driver")
        .unwrap()
        .refusal()
        .is_none());
    let agent = format!(
        "agent:\n  driver: http-get\n  options:\n    authority: \"{address}\"\n    path: /v1/ping\n"
    );
    let request = RunRequest::new(
        spec("http", &agent, "1m", workspace.path()),
        home.path().into(),
    );
    let result = engine::run(&granted, request).await.unwrap().result;
    assert_eq!(result.status, RunStatus::Succeeded, "{:?}", result.error);
    assert_eq!(result.agent.unwrap().summary.as_deref(), Some("HTTP 200"));
    assert_eq!(server.join().unwrap(), "GET /v1/ping HTTP/1.1");
}
