//! The sandbox phase with a fake provider, sandbox and reaper: what is made, and
//! the order teardown undoes it in.

use std::sync::Mutex;

use super::*;
use crate::engine::phase::fakes::TestRun;
use crate::engine::workspace::materialize;
use crate::wit::agent_driver::exports::agentgate::plugin::driver::AgentOutcome;
use crate::wit::types::Error;
use crate::wit::workspace_source::exports::agentgate::plugin::source::{
    Lifetime, PreparedWorkspace, RootKind,
};

/// Every call the fakes saw, in order.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<&'static str>>>);

impl Calls {
    fn push(&self, call: &'static str) {
        self.0.lock().unwrap().push(call);
    }

    /// Every call, the resource readings (`sample`) included.
    fn raw(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }

    /// The calls, with the resource readings left out (the sampler's timing is
    /// its own).
    fn seen(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|call| *call != "sample")
            .collect()
    }
}

/// How the fake sandbox behaves.
#[derive(Clone, Copy, Default)]
struct Behaviour {
    fail_create: bool,
    fail_summary: bool,
    fail_destroy: bool,
    oom: bool,
}

struct FakeProvider(Calls, Behaviour);
struct FakeNew(Calls, Behaviour);
struct FakeLive(Calls, Behaviour, Mutex<u32>);

fn failed(call: &'static str) -> PluginError {
    PluginError::Reported {
        plugin: "fake-provider".into(),
        call,
        error: Error::Failed(format!("{call} broke")),
    }
}

impl Provider for FakeProvider {
    fn create<'a>(
        self: Box<Self>,
        _request: &'a SandboxRequest,
        _deadline: Instant,
    ) -> Creation<'a> {
        self.0.push("create");
        Box::pin(async move {
            if self.1.fail_create {
                return Err(CreateFailed {
                    stdio: b"fake provider: no room\n".to_vec(),
                    error: failed("create"),
                });
            }
            Ok(Box::new(FakeNew(self.0, self.1)) as Box<dyn NewSandbox>)
        })
    }
}

impl NewSandbox for FakeNew {
    fn summary(
        &mut self,
        _deadline: Instant,
    ) -> BoxFuture<'_, Result<SandboxSummary, PluginError>> {
        self.0.push("summary");
        let fail = self.1.fail_summary;
        Box::pin(async move {
            if fail {
                return Err(failed("summary"));
            }
            Ok(SandboxSummary {
                id: "sb-1".into(),
                workdir: "/workspace".into(),
                isolation: "fake walls".into(),
            })
        })
    }

    fn destroy(&mut self, _deadline: Instant) -> BoxFuture<'_, Result<(), PluginError>> {
        self.0.push("destroy");
        let fail = self.1.fail_destroy;
        Box::pin(async move {
            if fail {
                Err(failed("destroy"))
            } else {
                Ok(())
            }
        })
    }

    fn into_live(
        self: Box<Self>,
        _details: SandboxDetails,
        _workspace_root: &Path,
        _logs: Arc<OutputLogs>,
        _ctx: &RunContext,
    ) -> std::io::Result<Arc<dyn LiveSandbox>> {
        self.0.push("into_live");
        Ok(Arc::new(FakeLive(self.0, self.1, Mutex::new(0))))
    }
}

impl LiveSandbox for FakeLive {
    fn stats(&self) -> BoxFuture<'_, Result<ResourceUsage, ProviderFailure>> {
        // The sampler's reads come first; the last read is teardown's.
        *self.2.lock().unwrap() += 1;
        self.0.push("sample");
        let oom = self.1.oom;
        Box::pin(async move {
            Ok(ResourceUsage {
                cpu_percent: 12.34,
                memory_bytes: 3 << 20,
                peak_memory_bytes: 5 << 20,
                pids: 2,
                oom_killed: oom,
            })
        })
    }

    fn destroy(&self) -> BoxFuture<'_, Result<(), DestroyError>> {
        self.0.push("destroy");
        let fail = self.1.fail_destroy;
        Box::pin(async move {
            if fail {
                return Err(DestroyError::Provider(
                    "plugin fake-provider trapped in destroy: unreachable".into(),
                ));
            }
            Ok(())
        })
    }

    fn plugin_stdio(&self) -> BoxFuture<'_, Vec<u8>> {
        self.0.push("stdio");
        Box::pin(async { b"fake provider says bye\n".to_vec() })
    }
}

struct FakeReaper(Calls, Vec<String>);

impl Reaper for FakeReaper {
    fn reap<'a>(&'a self, _ctx: &'a RunContext, _provider: &'a str) -> BoxFuture<'a, Reaped> {
        self.0.push("reap");
        Box::pin(async move {
            Reaped {
                reaped: vec!["sb-1".into()],
                reclaimed: BTreeMap::from([("cgroups", vec!["run-x".into()])]),
                errors: self.1.clone(),
            }
        })
    }
}

const EXECUTION: &str = "  workspace:\n    source: local\n    path: /path/to/project\n  \
                         sandbox:\n    provider: fake-provider\n  agent:\n    driver: fake";

const WITH_EGRESS: &str = "  workspace:\n    source: local\n    path: /path/to/project\n  \
                           sandbox:\n    provider: fake-provider\n    egress:\n      \
                           allow: [\"example.com:443\"]\n  agent:\n    driver: fake";

fn workspace(env: &RunEnv) -> Workspace {
    let root = env.folder.path().join("ws");
    materialize(&PreparedWorkspace {
        root: root.display().to_string(),
        root_kind: RootKind::Create,
        readonly: false,
        lifetime: Lifetime::Temporary,
        scaffold: Vec::new(),
        description: String::new(),
    })
    .unwrap()
}

fn grants() -> GateGrants {
    GateGrants {
        cap: Default::default(),
        nameserver: Some("127.0.0.1:53".parse().unwrap()),
    }
}

fn agent(success: bool) -> Outcome {
    Outcome::Agent(AgentOutcome {
        exit_code: if success { 0 } else { 137 },
        success,
        session_id: None,
        turns: None,
        usage: None,
        summary: None,
    })
}

async fn create_with(
    behaviour: Behaviour,
    env: &RunEnv<'_>,
    calls: &Calls,
) -> (Option<Sandbox>, Result<(), Outcome>) {
    let mut slot = None;
    let provider = Box::new(FakeProvider(calls.clone(), behaviour));
    let workspace = workspace(env);
    let deadline = Instant::now() + Duration::from_secs(10);
    let result = create(
        &mut slot,
        provider,
        "fake-provider",
        &workspace,
        env,
        grants(),
        deadline,
    )
    .await;
    (slot, result)
}

#[tokio::test]
async fn teardown_undoes_the_phase_last_made_first() {
    let test = TestRun::new(WITH_EGRESS);
    let env = test.env();
    let calls = Calls::default();
    let (slot, result) = create_with(Behaviour::default(), &env, &calls).await;
    assert!(result.is_ok());
    let sandbox = slot.expect("the phase's value");
    let state = sandbox.state.path().to_path_buf();
    let gate = sandbox.gate.as_ref().unwrap().folder().to_path_buf();
    assert!(state.is_dir() && gate.is_dir());
    assert_eq!(env.ctx.egress().unwrap().socket_dir, gate);

    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), Vec::new());
    let (outcome, record) = sandbox
        .teardown(agent(true), &env, "fake-provider", &reaper, &mut shortfalls)
        .await;
    assert!(matches!(outcome, Outcome::Agent(ref a) if a.success));
    // The last reading before `destroy`, the provider's output after it; no reap.
    let raw = calls.raw();
    let last_reading = raw.iter().rposition(|call| *call == "sample");
    let destroy = raw.iter().position(|call| *call == "destroy");
    assert!(last_reading.is_some() && last_reading < destroy, "{raw:?}");
    assert_eq!(
        calls.seen(),
        ["create", "summary", "into_live", "destroy", "stdio"]
    );
    assert!(
        shortfalls.messages().is_empty(),
        "{:?}",
        shortfalls.messages()
    );
    let info = record.info.expect("the sandbox's record");
    assert_eq!(info.id, "sb-1");
    assert!(
        info.isolation
            .starts_with("fake walls; enforced by the host: loopback only"),
        "{}",
        info.isolation
    );
    let usage = info.resource_usage.expect("the last reading");
    assert_eq!((usage.cpu_percent, usage.peak_memory_mb), (12.3, 5.0));
    assert!(record.logs.is_some() && record.egress.is_some());
    assert!(
        !state.exists() && !gate.exists(),
        "state and gate are removed"
    );
    let log = std::fs::read_to_string(env.folder.path().join("plugins.log")).unwrap();
    assert!(log.contains("fake provider says bye"), "{log}");
}

#[tokio::test]
async fn a_destroy_that_fails_is_reaped_and_named() {
    let test = TestRun::new(EXECUTION);
    let env = test.env();
    let calls = Calls::default();
    let behaviour = Behaviour {
        fail_destroy: true,
        ..Behaviour::default()
    };
    let (slot, result) = create_with(behaviour, &env, &calls).await;
    assert!(result.is_ok());
    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), Vec::new());
    let (_, record) = slot
        .unwrap()
        .teardown(agent(true), &env, "fake-provider", &reaper, &mut shortfalls)
        .await;
    assert_eq!(
        calls.seen(),
        ["create", "summary", "into_live", "destroy", "stdio", "reap"]
    );
    assert!(record.egress.is_none());
    assert_eq!(
        shortfalls.messages(),
        [
            "cleanup: destroying the sandbox: plugin fake-provider trapped in destroy: \
             unreachable; reaped through a fresh instance of provider fake-provider: it \
             removed sb-1, cgroup run-x, nothing of the run is left"
        ]
    );
    assert!(!shortfalls.left_something());

    // A reap that fails leaves something for gc.
    let calls = Calls::default();
    let (slot, _) = create_with(behaviour, &env, &calls).await;
    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), vec!["docker: daemon gone".into()]);
    slot.unwrap()
        .teardown(agent(true), &env, "fake-provider", &reaper, &mut shortfalls)
        .await;
    assert!(shortfalls.left_something());
    let message = &shortfalls.messages()[0];
    assert!(
        message.contains(
            "reaping through a fresh instance of provider fake-provider failed \
                          (it removed sb-1, cgroup run-x), so something of the run is left \
                          for `agentgate gc`: docker: daemon gone"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn a_sandbox_that_cannot_describe_itself_is_destroyed_at_once_and_reaped_later() {
    let test = TestRun::new(EXECUTION);
    let env = test.env();
    let calls = Calls::default();
    let behaviour = Behaviour {
        fail_summary: true,
        fail_destroy: true,
        ..Behaviour::default()
    };
    let (slot, result) = create_with(behaviour, &env, &calls).await;
    let Err(Outcome::Failed { status, message }) = result else {
        panic!("the phase succeeded");
    };
    assert_eq!(status, RunStatus::Error);
    assert_eq!(
        message,
        "plugin fake-provider: summary failed: summary broke"
    );
    let sandbox = slot.expect("the state folder was made");
    let state = sandbox.state.path().to_path_buf();
    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), Vec::new());
    let (_, record) = sandbox
        .teardown(
            Outcome::host("x"),
            &env,
            "fake-provider",
            &reaper,
            &mut shortfalls,
        )
        .await;
    assert_eq!(calls.seen(), ["create", "summary", "destroy", "reap"]);
    assert!(record.info.is_none() && record.logs.is_none());
    assert!(
        shortfalls.messages()[0]
            .starts_with("cleanup: destroying the sandbox: plugin fake-provider: destroy failed"),
        "{:?}",
        shortfalls.messages()
    );
    assert!(!state.exists());
}

#[tokio::test]
async fn an_agent_killed_for_memory_fails_saying_so() {
    let test = TestRun::new(EXECUTION);
    let env = test.env();
    let calls = Calls::default();
    let behaviour = Behaviour {
        oom: true,
        ..Behaviour::default()
    };
    let (slot, _) = create_with(behaviour, &env, &calls).await;
    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), Vec::new());
    let (outcome, _) = slot
        .unwrap()
        .teardown(
            agent(false),
            &env,
            "fake-provider",
            &reaper,
            &mut shortfalls,
        )
        .await;
    let Outcome::Failed { status, message } = outcome else {
        panic!("the failed agent's outcome was kept");
    };
    assert_eq!(status, RunStatus::Failed);
    assert!(
        message.starts_with("OOMKilled: the sandbox ran out of memory"),
        "{message}"
    );
}

#[tokio::test]
async fn a_provider_that_cannot_create_leaves_only_the_state_folder_to_remove() {
    let test = TestRun::new(EXECUTION);
    let env = test.env();
    let calls = Calls::default();
    let behaviour = Behaviour {
        fail_create: true,
        ..Behaviour::default()
    };
    let (slot, result) = create_with(behaviour, &env, &calls).await;
    let Err(Outcome::Failed { message, .. }) = result else {
        panic!("the phase succeeded");
    };
    assert_eq!(message, "plugin fake-provider: create failed: create broke");
    let log = std::fs::read_to_string(env.folder.path().join("plugins.log")).unwrap();
    assert!(log.contains("no room"), "{log}");
    let sandbox = slot.expect("the state folder was made");
    let state = sandbox.state.path().to_path_buf();
    let mut shortfalls = Shortfalls::default();
    let reaper = FakeReaper(calls.clone(), Vec::new());
    let (_, record) = sandbox
        .teardown(
            Outcome::host("x"),
            &env,
            "fake-provider",
            &reaper,
            &mut shortfalls,
        )
        .await;
    assert_eq!(calls.seen(), ["create"]);
    assert!(record.info.is_none() && shortfalls.messages().is_empty());
    assert!(!state.exists());
}
