//! The in-process parts of a run, with criterion: what the host pays per run before and
//! around the agent, without process start-up, the CLI or the sandbox around it.
//!
//! - `taskspec/parse`: a TaskSpec's text to a checked `TaskSpec` (the seed's minimal
//!   one and one with every field), what `run` and `validate` do first;
//! - `component/load-from-cache`: a built-in plugin's compiled code read back from the
//!   host's sealed compile cache (`ComponentCache::load` on a hit), what every run pays
//!   per plugin;
//! - `component/instantiate`: a fresh store and instance of the command driver, what
//!   every run pays per plugin;
//! - `call/driver-broker-provider`: the command driver running `true`: the driver
//!   (guest) asks the host's sandbox broker to exec, the host calls the `none`
//!   provider (guest), which asks the host's process capability to spawn; the host
//!   waits for the exit, and the driver reads the outcome. `call/raw-spawn` spawns and
//!   waits for `true` directly: the difference is what the guest→host→guest path adds
//!   to an exec.
//!
//!   cargo bench -p agentgate --bench in_process [-- FILTER]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentgate::capabilities::RunIdentity;
use agentgate::capabilities::SandboxBroker;
use agentgate::record::{EventSink, OutputLogs, Redactor};
use agentgate::runtime::cache::{ComponentCache, PluginCache, DEFAULT_MAX_BYTES};
use agentgate::runtime::{Runtime, RuntimeConfig};
use agentgate::wit::agent_driver::exports::agentgate::plugin::driver::{
    AgentCapabilities, AgentTask,
};
use agentgate::wit::sandbox::SandboxDetails;
use agentgate::wit::sandbox_provider::exports::agentgate::plugin::provider::{
    SandboxRequest, WorkspaceMount,
};
use agentgate::wit::types::{NetworkMode, Resources};
use criterion::{criterion_group, criterion_main, Criterion};
use tokio::time::Instant;

mod support;

const MINIMAL_SPEC: &str =
    include_str!("../../tests/fixtures/taskspecs/seed-minimal-execution.yaml");
const FULL_SPEC: &str = include_str!("../../tests/fixtures/taskspecs/full-every-field.yaml");

fn taskspec(c: &mut Criterion) {
    let env = |_: &str| Some("value".to_string());
    let mut group = c.benchmark_group("taskspec");
    for (name, text) in [
        ("parse-minimal", MINIMAL_SPEC),
        ("parse-every-field", FULL_SPEC),
    ] {
        agentgate::taskspec::parse(text, name, &env).expect("the fixture parses");
        group.bench_function(name, |b| {
            b.iter(|| agentgate::taskspec::parse(text, name, &env).unwrap())
        });
    }
    group.finish();
}

/// A built-in plugin's component as host/build.rs compiled it.
fn builtin_wasm(crate_name: &str) -> Vec<u8> {
    let fixtures = Path::new(env!("AGENTGATE_FIXTURE_PLUGIN_DIR"));
    let path = fixtures.join(format!("../wasm32-wasip2/release/{crate_name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn component_load(c: &mut Criterion) {
    let engine = support::engine();
    let wasm = builtin_wasm("agent_command");
    let digest = sha256_hex(&wasm);
    let dir = tempfile::tempdir().unwrap();
    let cache = ComponentCache::new(PluginCache::new(dir.path(), DEFAULT_MAX_BYTES), &engine);
    // The first load compiles and stores; every measured one must be a hit.
    cache.load(&engine, &digest, &wasm, || {}).unwrap();
    c.bench_function("component/load-from-cache", |b| {
        b.iter(|| {
            cache
                .load(&engine, &digest, &wasm, || panic!("a cache miss"))
                .unwrap()
        })
    });
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A runtime with a compile cache, and a tokio runtime to drive it.
struct Host {
    tokio: tokio::runtime::Runtime,
    runtime: Arc<Runtime>,
    _home: tempfile::TempDir,
}

impl Host {
    /// The identity of the benchmark's run, in this host's home.
    fn identity(&self) -> RunIdentity {
        let owner = format!("pid={},start=1,boot=bench,pidns=1", std::process::id());
        RunIdentity::new("bench".into(), owner, self._home.path())
    }

    fn new() -> Host {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let home = tempfile::tempdir().unwrap();
        let config = RuntimeConfig {
            cache_dir: Some(home.path().join("cache")),
            ..RuntimeConfig::default()
        };
        let runtime = tokio.block_on(Runtime::new(config)).unwrap();
        Host {
            tokio,
            runtime,
            _home: home,
        }
    }

    fn plugin(&self, name: &str) -> &agentgate::runtime::LoadedPlugin {
        let plugin = self
            .runtime
            .catalog()
            .get(name)
            .unwrap_or_else(|| panic!("no built-in {name}"));
        self.tokio.block_on(self.runtime.load(plugin)).unwrap();
        plugin
    }
}

fn instantiate(c: &mut Criterion) {
    let host = Host::new();
    let driver = host.plugin("agent-command");
    let run = host
        .runtime
        .run_context(host.identity(), Arc::new(EventSink::discard()));
    c.bench_function("component/instantiate", |b| {
        b.iter(|| {
            host.tokio
                .block_on(host.runtime.agent_driver(driver, run.clone()))
                .unwrap()
        })
    });
}

fn call(c: &mut Criterion) {
    let host = Host::new();
    let folder = tempfile::tempdir().unwrap();
    let workspace = folder.path().join("workspace");
    let state = folder.path().join("state");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let run = host
        .runtime
        .run_context(host.identity(), Arc::new(EventSink::discard()));
    let provider = host.plugin("sandbox-none");
    let driver = host.plugin("agent-command");
    let deadline = || Instant::now() + Duration::from_secs(60);
    let mut driver = host.tokio.block_on(async {
        let provider = host
            .runtime
            .sandbox_provider(provider, run.clone())
            .await
            .unwrap();
        let sandbox = provider
            .create(&sandbox_request(&workspace, &state), deadline())
            .await
            .map_err(|(_, e)| e)
            .unwrap();
        let details = SandboxDetails {
            provider: "none".into(),
            id: "host".into(),
            workdir: workspace.display().to_string(),
            network: NetworkMode::Host,
            readonly_workspace: false,
        };
        let logs = OutputLogs::create(folder.path(), Arc::new(Redactor::default())).unwrap();
        let broker = SandboxBroker::new(sandbox, details, &workspace, Arc::new(logs)).unwrap();
        run.set_broker(Arc::new(broker));
        host.runtime
            .agent_driver(driver, run.clone())
            .await
            .unwrap()
    });
    let task = agent_task(&["true"]);
    let outcome = host.tokio.block_on(driver.run(&task, deadline())).unwrap();
    assert!(outcome.success, "{outcome:?}");

    let mut group = c.benchmark_group("call");
    group.bench_function("driver-broker-provider", |b| {
        b.iter(|| host.tokio.block_on(driver.run(&task, deadline())).unwrap())
    });
    // No `current_dir`, so std spawns with posix_spawn (a vfork), not fork + exec of this
    // large process: the cheapest spawn there is.
    group.bench_function("raw-spawn", |b| {
        b.iter(|| std::process::Command::new("true").status().unwrap())
    });
    group.finish();
}

fn sandbox_request(workspace: &Path, state: &Path) -> SandboxRequest {
    SandboxRequest {
        run_id: "bench".into(),
        provider: "none".into(),
        image: None,
        resources: Resources {
            cpu_millicores: None,
            memory_bytes: None,
            disk_bytes: None,
            pids: None,
            timeout_ms: Some(3_600_000),
        },
        network: NetworkMode::Host,
        workspace: WorkspaceMount {
            host_path: workspace.display().to_string(),
            readonly: false,
        },
        state_dir: state.display().to_string(),
        workdir: "/workspace".into(),
        mounts: vec![],
        env: vec![],
        labels: vec![],
        options: "{}".into(),
    }
}

fn agent_task(command: &[&str]) -> AgentTask {
    AgentTask {
        run_id: "bench".into(),
        driver: "command".into(),
        prompt: "run true".into(),
        context: None,
        system_prompt: None,
        model: None,
        max_tokens: 4096,
        temperature: None,
        tools: vec![],
        capabilities: AgentCapabilities {
            file_system: true,
            network: true,
            shell: true,
            browser: false,
        },
        mcp_servers: vec![],
        max_iterations: None,
        max_cost_usd: None,
        max_total_tokens: None,
        timeout_ms: 3_600_000,
        secrets: vec![],
        options: serde_json::json!({ "command": command }).to_string(),
    }
}

/// Short runs: the machine is shared, and these are steady once warm.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = taskspec, component_load, instantiate, call
}
criterion_main!(benches);
