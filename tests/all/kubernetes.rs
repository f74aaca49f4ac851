//! The `kubernetes` sandbox on a real cluster, against an agent that tries to get out.
//!
//! Each test runs the real `agentgate` binary with `sandbox.provider: kubernetes` on the
//! single-node cluster of `tests/kubernetes/cluster.sh` (support::kubernetes), in a
//! namespace of its own that the test creates and deletes through the API (so tests run
//! in parallel), with a `grants.yaml` that allows that cluster, `agentgate-t-*`
//! namespaces and the test image. The agent is a shell script run by the `command`
//! driver. What a test checks on the cluster it reads back from the API server itself
//! (curl with the admin kubeconfig): the pod's spec, the run's objects, the events.
//!
//! Under `CI=true` a missing cluster fails every test (support::kubernetes never skips).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support;
use crate::support::git_server::git;
use crate::support::kubernetes::{test_cluster, TestCluster};
use crate::support::{eventually, shell_agent, stderr, task_spec, Home};
use serde_json::Value;

/// The context of the test cluster's admin kubeconfig.
const CONTEXT: &str = "agentgate-test";

/// The label every object of a run carries.
const RUN_LABEL: &str = "io.agentgate.run-id";

/// The admin's view of the test cluster, through `curl` (the kubeconfig names its CA,
/// client certificate and key as files).
struct Api {
    server: String,
    ca: String,
    cert: String,
    key: String,
}

impl Api {
    fn new(cluster: &TestCluster) -> Api {
        let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
        let config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let field = |section: &str, key: &str| {
            config[section][0][section.trim_end_matches('s')][key]
                .as_str()
                .unwrap_or_else(|| {
                    panic!("{} has no {section}[0].{key}", cluster.kubeconfig.display())
                })
                .to_owned()
        };
        Api {
            server: field("clusters", "server"),
            ca: field("clusters", "certificate-authority"),
            cert: field("users", "client-certificate"),
            key: field("users", "client-key"),
        }
    }

    /// Sends one request; returns the status and the body as JSON.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--max-time", "30", "-X", method])
            .args([
                "--cacert", &self.ca, "--cert", &self.cert, "--key", &self.key,
            ])
            .args([
                "-H",
                "Content-Type: application/json",
                "-w",
                "\n%{http_code}",
            ])
            .arg(format!("{}{path}", self.server));
        if let Some(body) = body {
            curl.args(["--data-binary", &body.to_string()]);
        }
        let out = curl.output().expect("running curl");
        assert!(
            out.status.success(),
            "curl {method} {path}: {}",
            stderr(&out)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (
            code.trim().parse().unwrap(),
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    }

    fn get(&self, path: &str) -> Value {
        let (code, body) = self.call("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// The items of a list, e.g. `/api/v1/namespaces/NS/pods`.
    fn items(&self, path: &str) -> Vec<Value> {
        self.get(path)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// A namespace of its own for one test, deleted when the test ends.
struct Namespace {
    api: Api,
    name: String,
}

impl Namespace {
    fn new(cluster: &TestCluster) -> Namespace {
        let api = Api::new(cluster);
        let name = format!(
            "agentgate-t-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let (code, answer) = api.call("POST", "/api/v1/namespaces", Some(&body));
        assert_eq!(code, 201, "creating namespace {name}: {answer}");
        Namespace { api, name }
    }

    /// Every object of the kinds a run creates that carries a run label, as
    /// `kind/name`; with `run`, only that run's.
    fn run_objects(&self, run: Option<&str>) -> Vec<String> {
        let selector = match run {
            Some(run) => format!("{RUN_LABEL}%3D{run}"),
            None => RUN_LABEL.to_owned(),
        };
        let ns = &self.name;
        let mut found = Vec::new();
        for (kind, path) in [
            ("pod", format!("/api/v1/namespaces/{ns}/pods")),
            ("configmap", format!("/api/v1/namespaces/{ns}/configmaps")),
            ("secret", format!("/api/v1/namespaces/{ns}/secrets")),
            (
                "networkpolicy",
                format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
            ),
        ] {
            for item in self.api.items(&format!("{path}?labelSelector={selector}")) {
                found.push(format!(
                    "{kind}/{}",
                    item["metadata"]["name"].as_str().unwrap_or("?")
                ));
            }
        }
        found
    }

    fn pods(&self) -> Vec<Value> {
        self.api
            .items(&format!("/api/v1/namespaces/{}/pods", self.name))
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self
            .api
            .call("DELETE", &format!("/api/v1/namespaces/{}", self.name), None);
    }
}

/// `grants.yaml` allowing the test cluster, its namespaces and image; `extra` lines go
/// into the cluster's entry.
fn grants(cluster: &TestCluster, extra: &str) -> String {
    format!(
        "kubernetes:\n  clusters:\n    - context: {CONTEXT}\n      kubeconfig: {}\n      namespaces: [\"agentgate-t-*\"]\n      images: [\"{}\"]\n{}",
        cluster.kubeconfig.display(),
        cluster.image,
        support::indent(extra, 6)
    )
}

/// A `local` workspace in a `kubernetes` sandbox in `namespace`, with extra `sandbox`
/// lines and options.
fn in_pod(
    cluster: &TestCluster,
    workspace: &Path,
    namespace: &str,
    sandbox_extra: &str,
    agent: &str,
) -> String {
    format!(
        "workspace:\n  source: local\n  path: {}\nsandbox:\n  provider: kubernetes\n  image: {}\n{}  options:\n    namespace: {namespace}\n    context: {CONTEXT}\n    kubeconfig: {}\n{agent}",
        workspace.display(),
        cluster.image,
        support::indent(sandbox_extra, 2),
        cluster.kubeconfig.display(),
    )
}

/// A home whose operator allows the test cluster (plus `grants_extra`).
fn home_for(cluster: &TestCluster, grants_extra: &str) -> Home {
    let home = Home::new();
    std::fs::write(
        home.dir.path().join("grants.yaml"),
        grants(cluster, grants_extra),
    )
    .unwrap();
    home
}

/// Starts `agentgate run` on `execution` without waiting, with `env` for agentgate.
fn spawn(home: &Home, execution: &str, env: &[(&str, &str)]) -> std::process::Child {
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("k8s", "x", execution)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting agentgate")
}

fn run_id(home: &Home) -> String {
    home.run_folder()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// The first pod of the namespace once it runs.
fn running_pod(namespace: &Namespace) -> Value {
    let mut pod = Value::Null;
    assert!(
        eventually(180, || {
            pod = namespace
                .pods()
                .into_iter()
                .find(|p| p["status"]["phase"] == "Running")
                .unwrap_or(Value::Null);
            !pod.is_null()
        }),
        "no pod ran in {}",
        namespace.name
    );
    pod
}

/// `agentgate gc` in `home`, which must succeed.
fn gc(home: &Home) {
    let gc = home.agentgate(&["gc"]);
    assert!(gc.status.success(), "{}", stderr(&gc));
}

#[test]
fn a_task_runs_in_a_pod_and_its_changes_come_back() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("change.txt"), "before\n").unwrap();
    std::fs::write(workspace.path().join("gone.txt"), "bye\n").unwrap();
    std::fs::write(workspace.path().join("kept.txt"), "same\n").unwrap();
    // A git workspace: `changes.patch` is what the host writes for one (a plain folder
    // gets `modifiedFiles` only).
    git(workspace.path(), &["init", "-q", "-b", "main"]);
    git(workspace.path(), &["add", "-A"]);
    git(workspace.path(), &["commit", "-q", "-m", "before"]);
    let home = home_for(&cluster, "");
    let output = home.run_spec(&task_spec(
        "k8s",
        "change files",
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  cpu: 0.5\n  memory: 64Mi\n  timeout: 2m\n",
            &shell_agent("cat kept.txt\necho new > added.txt\necho after >> change.txt\nrm gone.txt\necho ran-in-pod"),
        ),
    ));
    let result = home.result();
    assert_eq!(
        result["status"],
        "succeeded",
        "{result:#}\n{}",
        stderr(&output)
    );
    assert!(
        home.log("stdout.log").contains("ran-in-pod"),
        "{}",
        home.log("stdout.log")
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("added.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("change.txt")).unwrap(),
        "before\nafter\n"
    );
    assert!(!workspace.path().join("gone.txt").exists());
    let changes: Vec<(String, String)> = result["modifiedFiles"]
        .as_array()
        .unwrap_or_else(|| panic!("no modifiedFiles: {result:#}"))
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["change"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for expected in [
        ("added.txt", "added"),
        ("change.txt", "modified"),
        ("gone.txt", "deleted"),
    ] {
        assert!(
            changes
                .iter()
                .any(|(p, c)| p == expected.0 && c == expected.1),
            "{expected:?} not in {changes:?}"
        );
    }
    assert!(!changes.iter().any(|(p, _)| p == "kept.txt"), "{changes:?}");
    let patch = home.log("changes.patch");
    assert!(
        patch.contains("added.txt") && patch.contains("+after") && patch.contains("gone.txt"),
        "{patch}"
    );
    assert_eq!(result["sandbox"]["provider"], "kubernetes", "{result:#}");
    assert!(
        namespace.run_objects(Some(&run_id(&home))).is_empty(),
        "{:?}",
        namespace.run_objects(None)
    );
}

#[test]
fn a_running_pod_is_locked_down_holds_the_secret_only_in_its_secret_and_the_timeout_ends_it() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let secret = "k8s-secret-Zq8w3RtY9uVb2NcX7mKp";
    let home = home_for(&cluster, "");
    let mut child = spawn(
        &home,
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  cpu: 0.25\n  memory: 64Mi\n  timeout: 25s\nenvironment:\n  API_TOKEN: ${K8S_TEST_SECRET}\n",
            &shell_agent("echo \"token=$API_TOKEN\"\nsleep 3583"),
        ),
        &[("K8S_TEST_SECRET", secret)],
    );
    let pod = running_pod(&namespace);
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    let either = |key: &str| {
        let from_container = &container["securityContext"][key];
        if from_container.is_null() {
            spec["securityContext"][key].clone()
        } else {
            from_container.clone()
        }
    };
    assert_eq!(either("runAsNonRoot"), true, "{pod:#}");
    assert_eq!(
        either("seccompProfile")["type"],
        "RuntimeDefault",
        "{pod:#}"
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"], false,
        "{pod:#}"
    );
    let drop = container["securityContext"]["capabilities"]["drop"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(drop.iter().any(|c| c == "ALL"), "{pod:#}");
    assert_eq!(spec["automountServiceAccountToken"], false, "{pod:#}");
    assert!(
        spec["activeDeadlineSeconds"]
            .as_u64()
            .is_some_and(|s| s >= 25),
        "{pod:#}"
    );
    let resources = &container["resources"];
    assert!(
        !resources["limits"].is_null() && resources["requests"] == resources["limits"],
        "{pod:#}"
    );
    assert!(
        !spec["hostNetwork"].as_bool().unwrap_or(false)
            && !spec["hostPID"].as_bool().unwrap_or(false)
    );

    // The secret is in the run's Secret (base64) and nowhere else on the cluster.
    assert!(
        !pod.to_string().contains(secret),
        "the pod spec holds the secret: {pod:#}"
    );
    let ns = &namespace.name;
    for path in [
        format!("/api/v1/namespaces/{ns}/configmaps"),
        format!("/api/v1/namespaces/{ns}/events"),
        format!("/api/v1/namespaces/{ns}/pods"),
    ] {
        let text = namespace.api.get(&path).to_string();
        assert!(!text.contains(secret), "{path} holds the secret");
    }
    let encoded = support_base64(secret);
    let secrets = namespace
        .api
        .get(&format!("/api/v1/namespaces/{ns}/secrets"))
        .to_string();
    assert!(
        secrets.contains(&encoded),
        "the environment is not in a Secret: {secrets}"
    );

    let status = child.wait().unwrap();
    assert!(!status.success());
    let result = home.result();
    assert_eq!(result["status"], "timedOut", "{result:#}");
    assert!(
        eventually(60, || namespace.run_objects(None).is_empty()),
        "left on the cluster: {:?}",
        namespace.run_objects(None)
    );
    assert!(
        home.log("stdout.log").contains("token="),
        "{}",
        home.log("stdout.log")
    );
    assert!(
        !support::all_text(&home.run_folder()).contains(secret),
        "the run's record holds the secret"
    );
}

/// Standard base64, as the API shows a Secret's `data`.
fn support_base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[test]
fn a_memory_hog_is_oom_killed_and_the_run_says_so() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let home = home_for(&cluster, "");
    home.run_spec(&task_spec(
        "k8s",
        "eat memory",
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  memory: 64Mi\n  timeout: 2m\n",
            &shell_agent("x=$(head -c 200000000 /dev/zero | tr '\\0' a)\necho survived"),
        ),
    ));
    let result = home.result();
    assert_eq!(result["status"], "failed", "{result:#}");
    assert!(result.to_string().contains("OOMKilled"), "{result:#}");
    assert!(!home.log("stdout.log").contains("survived"));
    assert!(
        namespace.run_objects(None).is_empty(),
        "{:?}",
        namespace.run_objects(None)
    );
}

#[test]
fn network_none_is_refused_where_network_policy_is_not_enforced_and_fenced_where_it_is() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let execution = in_pod(
        &cluster,
        workspace.path(),
        &namespace.name,
        "network: none\nresources:\n  timeout: 2m\n",
        &shell_agent("sleep 3584"),
    );
    let refused = home_for(&cluster, "");
    let output = refused.run_spec(&task_spec("k8s", "x", &execution));
    assert!(!output.status.success());
    let said = format!("{}\n{}", stderr(&output), refused.result());
    assert!(
        said.contains("NetworkPolicy") && said.contains("networkPolicy: enforced"),
        "{said}"
    );
    assert!(
        namespace.run_objects(None).is_empty(),
        "{:?}",
        namespace.run_objects(None)
    );

    let fenced = home_for(&cluster, "networkPolicy: enforced\n");
    let execution = execution
        .replace("sleep 3584", "sleep 3585")
        .replace("timeout: 2m", "timeout: 15s");
    let mut child = spawn(&fenced, &execution, &[]);
    let pod = running_pod(&namespace);
    let policies = namespace.api.items(&format!(
        "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies",
        namespace.name
    ));
    assert_eq!(policies.len(), 1, "{policies:#?}");
    let policy = &policies[0];
    let types: Vec<&str> = policy["spec"]["policyTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        types.contains(&"Ingress") && types.contains(&"Egress"),
        "{policy:#}"
    );
    assert!(
        policy["spec"]["ingress"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{policy:#}"
    );
    assert!(
        policy["spec"]["egress"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{policy:#}"
    );
    // Created before the pod (the API's timestamps have a resolution of a second).
    let created = |o: &Value| {
        o["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(created(policy) <= created(&pod), "{policy:#}\n{pod:#}");
    let selector = &policy["spec"]["podSelector"]["matchLabels"];
    let labels = &pod["metadata"]["labels"];
    assert!(
        selector
            .as_object()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v)),
        "the policy does not select the pod: {policy:#}\n{pod:#}"
    );
    child.wait().unwrap();
    assert!(
        eventually(60, || namespace.run_objects(None).is_empty()),
        "{:?}",
        namespace.run_objects(None)
    );
}

#[test]
fn kill_9_mid_run_then_gc_leaves_nothing_and_the_pod_had_a_deadline() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let home = home_for(&cluster, "");
    let mut child = spawn(
        &home,
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  timeout: 10m\n",
            &shell_agent("sleep 3586"),
        ),
        &[],
    );
    let pod = running_pod(&namespace);
    assert!(
        pod["spec"]["activeDeadlineSeconds"]
            .as_u64()
            .is_some_and(|s| s >= 600),
        "{pod:#}"
    );
    support::sigkill(&mut child);
    let run = run_id(&home);
    assert!(
        !namespace.run_objects(Some(&run)).is_empty(),
        "nothing to reap: the test proves nothing"
    );
    gc(&home);
    assert!(
        eventually(60, || namespace.run_objects(Some(&run)).is_empty()),
        "gc left {:?}",
        namespace.run_objects(Some(&run))
    );
}

#[test]
fn gc_in_one_home_never_touches_the_live_or_dead_runs_of_another() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let other_workspace = tempfile::tempdir().unwrap();
    let home_a = home_for(&cluster, "");
    let dead_a = home_for(&cluster, "");
    let home_b = home_for(&cluster, "");
    let execution = |w: &Path, marker: &str| {
        in_pod(
            &cluster,
            w,
            &namespace.name,
            "resources:\n  timeout: 10m\n",
            &shell_agent(&format!("sleep {marker}")),
        )
    };
    let mut dead = spawn(&dead_a, &execution(other_workspace.path(), "3587"), &[]);
    let mut live = spawn(&home_a, &execution(workspace.path(), "3588"), &[]);
    assert!(
        eventually(180, || namespace
            .pods()
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == 2),
        "the two runs never both ran"
    );
    support::sigkill(&mut dead);
    let before = namespace.run_objects(None);
    gc(&home_b);
    assert_eq!(
        namespace.run_objects(None),
        before,
        "gc in another home removed objects"
    );
    // The dead run's own home reaps it, and only it.
    gc(&dead_a);
    let dead_run = run_id(&dead_a);
    assert!(eventually(60, || namespace
        .run_objects(Some(&dead_run))
        .is_empty()));
    assert!(
        !namespace.run_objects(Some(&run_id(&home_a))).is_empty(),
        "the live run lost its objects"
    );
    support::sigkill(&mut live);
    gc(&home_a);
    assert!(
        eventually(60, || namespace.run_objects(None).is_empty()),
        "{:?}",
        namespace.run_objects(None)
    );
}

#[test]
fn an_unreachable_api_server_fails_before_anything_is_created() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let server = Api::new(&cluster).server;
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed.kubeconfig");
    std::fs::write(
        &closed,
        text.replace(&server, &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    let unreachable = TestCluster {
        kubeconfig: closed,
        image: cluster.image.clone(),
    };
    let workspace = tempfile::tempdir().unwrap();
    let home = home_for(&unreachable, "");
    let output = home.run_spec(&task_spec(
        "k8s",
        "x",
        &in_pod(
            &unreachable,
            workspace.path(),
            &namespace.name,
            "resources:\n  timeout: 1m\n",
            &shell_agent("echo ran"),
        ),
    ));
    assert!(!output.status.success());
    let said = format!("{}\n{}", stderr(&output), home.result());
    assert!(
        said.contains(&format!("127.0.0.1:{port}")),
        "the error does not name the server: {said}"
    );
    assert!(!home.log("stdout.log").contains("ran"));
    assert!(namespace.run_objects(None).is_empty());
}

#[test]
fn a_namespace_image_or_context_the_operator_did_not_allow_is_refused() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let allowed = in_pod(
        &cluster,
        workspace.path(),
        &namespace.name,
        "resources:\n  timeout: 1m\n",
        &shell_agent("echo ran"),
    );
    for (what, execution) in [
        (
            "kube-system",
            allowed.replace(
                &format!("namespace: {}", namespace.name),
                "namespace: kube-system",
            ),
        ),
        (
            "agentgate.test-evil/busybox:1",
            allowed.replace(
                &format!("image: {}", cluster.image),
                "image: agentgate.test-evil/busybox:1",
            ),
        ),
        (
            "elsewhere",
            allowed.replace(&format!("context: {CONTEXT}"), "context: elsewhere"),
        ),
    ] {
        let home = home_for(&cluster, "");
        let output = home.run_spec(&task_spec("k8s", "x", &execution));
        assert!(!output.status.success(), "{what}");
        let said = format!("{}\n{}", stderr(&output), home.result());
        let named = what.split(':').next().unwrap();
        assert!(
            said.contains("grants.yaml") || said.contains("denied") || said.contains("not allow"),
            "{what}: {said}"
        );
        assert!(said.contains(named), "{what} not named: {said}");
        assert!(!home.log("stdout.log").contains("ran"));
    }
    assert!(namespace.run_objects(None).is_empty());
    let system = namespace.api.items(&format!(
        "/api/v1/namespaces/kube-system/pods?labelSelector={RUN_LABEL}"
    ));
    assert!(system.is_empty(), "{system:#?}");
}

#[test]
fn the_agent_attacks_the_copy_back_with_links_and_odd_names() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let outside = target.path().join("owned-by-agent");
    let home = home_for(&cluster, "");
    home.run_spec(&task_spec(
        "k8s",
        "attack",
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  timeout: 2m\n",
            &shell_agent(&format!(
                "ln -s /etc evil\necho owned > evil/agentgate-owned 2>/dev/null\n\
                 ln -s {dir} out\necho owned > out/owned-by-agent 2>/dev/null\n\
                 printf 'nl' > \"$(printf 'line\\nbreak')\"\n\
                 printf 'esc' > \"$(printf 'esc\\033[31m')\"\n\
                 echo attacked",
                dir = target.path().display()
            )),
        ),
    ));
    assert!(
        home.log("stdout.log").contains("attacked"),
        "the agent never ran: {}",
        home.result()
    );
    let link = std::fs::symlink_metadata(workspace.path().join("evil")).unwrap();
    assert!(link.file_type().is_symlink(), "evil is not kept as a link");
    assert_eq!(
        std::fs::read_link(workspace.path().join("evil")).unwrap(),
        Path::new("/etc")
    );
    assert!(
        !Path::new("/etc/agentgate-owned").exists(),
        "a file was written through the link on the host"
    );
    assert!(
        !outside.exists(),
        "a file was written through the link on the host"
    );
    assert_eq!(
        std::fs::read(workspace.path().join("line\nbreak")).unwrap(),
        b"nl"
    );
    assert_eq!(
        std::fs::read(workspace.path().join("esc\x1b[31m")).unwrap(),
        b"esc"
    );
    assert!(namespace.run_objects(None).is_empty());
}

/// `agentgate gc --json` in `home`; asserts it succeeded and returns its report.
fn gc_report(home: &Home) -> Value {
    let gc = home.agentgate(&["gc", "--json"]);
    assert!(gc.status.success(), "{}", stderr(&gc));
    serde_json::from_slice(&gc.stdout).unwrap()
}

/// The operator allows root; the agent, root in its pod, leaves a marker and a fifo,
/// then replaces `/bin/sh` and `tar` (what every command the host runs in the pod
/// starts with) by scripts that `sleep`. The run must not say `succeeded` (the copy
/// back could not finish), must end within a bound, and must leave nothing of the run
/// on the cluster (pod, Secret with the environment, ConfigMap), with `gc` finding
/// nothing afterwards.
#[test]
fn a_root_agent_that_breaks_the_pods_shell_leaves_nothing_and_the_run_is_an_error() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("before.txt"), "before\n").unwrap();
    let secret = "k8s-secret-root-Hq3Lw8Zp2Vn6Tb";
    let home = home_for(&cluster, "root: true\n");
    let execution = in_pod(
        &cluster,
        workspace.path(),
        &namespace.name,
        "resources:\n  timeout: 5m\nenvironment:\n  API_TOKEN: ${K8S_TEST_SECRET}\n",
        &shell_agent(
            "echo marker > marker.txt\nmkfifo fifo\n\
             rm /bin/sh /bin/tar\n\
             printf '#!/bin/busybox sh\\nexec /bin/busybox sleep 3600\\n' > /bin/sh\n\
             cp /bin/sh /bin/tar\nchmod 755 /bin/sh /bin/tar\n\
             echo \"uid=$(id -u) shell=$(head -c 60 /bin/sh | tr '\\n' ' ')\"",
        ),
    )
    .replace(
        "  options:\n    namespace:",
        "  options:\n    runAsUser: 0\n    namespace:",
    );
    let path = home.dir.path().join("task.yaml");
    std::fs::write(&path, task_spec("k8s", "break the pod", &execution)).unwrap();
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", path.to_str().unwrap()])
        .env("AGENTGATE_HOME", home.dir.path())
        .env_remove("AGENTGATE_PLUGIN_PATH")
        .env("K8S_TEST_SECRET", secret)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        home.dir.path().join("runs").exists(),
        "the run did not start: {}",
        stderr(&output)
    );
    let stdout = home.log("stdout.log");
    // The attack acted: root, and the shell replaced.
    assert!(
        stdout.contains("uid=0 shell=#!/bin/busybox sh exec /bin/busybox sleep"),
        "the agent did not break the pod: {stdout}\n{}",
        stderr(&output)
    );
    let result = home.result();
    eprintln!(
        "hostile root pod: the run ended after {:.1}s, status {}, exit code {:?}, leftOut {}",
        took.as_secs_f64(),
        result["status"],
        output.status.code(),
        result["leftOut"]
    );
    // Pod start, agent, a bounded usage reading, a copy back cut after 10 s without a
    // byte, the deletion: well under two minutes.
    assert!(took.as_secs() < 120, "the run took {took:?}");
    let run = run_id(&home);
    let left = namespace.run_objects(Some(&run));
    assert!(left.is_empty(), "left on the cluster: {left:?}");
    let secrets = namespace
        .api
        .get(&format!("/api/v1/namespaces/{}/secrets", namespace.name))
        .to_string();
    assert!(
        !secrets.contains(&support_base64(secret)),
        "the run's environment is still in a Secret"
    );
    // gc finds nothing of the run to reap, and no kubernetes error.
    let report = gc_report(&home);
    for key in ["orphans", "unknown", "errors"] {
        let listed = report[key].as_array().cloned().unwrap_or_default();
        assert!(
            listed.iter().all(|entry| {
                let text = entry.to_string();
                !text.contains(&run) && !text.contains("kubernetes")
            }),
            "gc found something of the run: {report:#}"
        );
    }
    assert!(namespace.run_objects(None).is_empty());
    // The run says what did not happen.
    assert_ne!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["status"], "error", "{result:#}");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let left_out = result["leftOut"].as_array().cloned().unwrap_or_default();
    assert!(
        left_out.iter().any(|l| l["path"] == "."),
        "the cut copy back is not in leftOut: {result:#}"
    );
}

/// The copy back meets entries it refuses (fifos, hard links to them) early and
/// ordinary files after them, in two folders so that whichever tar reads first, the
/// other's files come after its refused entries. Every ordinary file comes back,
/// `ln link hard` comes back as the same link, each refused entry is named with its
/// reason, and the run does not say `succeeded`.
#[test]
fn a_copy_back_goes_on_past_what_it_refuses_and_the_run_says_what_was_left_out() {
    let cluster = test_cluster();
    let namespace = Namespace::new(&cluster);
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("before.txt"), "before\n").unwrap();
    let home = home_for(&cluster, "");
    let output = home.run_spec(&task_spec(
        "k8s",
        "refused entries",
        &in_pod(
            &cluster,
            workspace.path(),
            &namespace.name,
            "resources:\n  timeout: 2m\n",
            &shell_agent(
                "for d in one two; do\n  mkdir $d\n  mkfifo $d/pipe\n  ln $d/pipe $d/pipe-again\n  \
                 ln -s /etc/passwd $d/link\n  ln $d/link $d/link-again\n  \
                 for n in 1 2 3 4 5; do echo $d$n > $d/file$n.txt; done\ndone\n\
                 echo \"made $(stat -c '%F %h' one/pipe)\"",
            ),
        ),
    ));
    assert!(
        home.log("stdout.log").contains("made fifo 2"),
        "the agent did not make its entries: {}\n{}",
        home.log("stdout.log"),
        stderr(&output)
    );
    for d in ["one", "two"] {
        for n in 1..=5 {
            let file = workspace.path().join(format!("{d}/file{n}.txt"));
            assert_eq!(
                std::fs::read_to_string(&file).unwrap_or_default(),
                format!("{d}{n}\n"),
                "{} did not come back: {}",
                file.display(),
                home.result()
            );
        }
        for link in ["link", "link-again"] {
            assert_eq!(
                std::fs::read_link(workspace.path().join(d).join(link)).unwrap(),
                Path::new("/etc/passwd")
            );
        }
    }
    // The plugin was told (its warnings are in the run's events).
    let events = home.log("events.ndjson");
    for entry in ["one/pipe", "two/pipe-again"] {
        assert!(
            events.contains(&format!("not copied back: {entry}")),
            "{entry} not reported: {events}"
        );
    }
    let result = home.result();
    let mut left_out: Vec<String> = result["leftOut"]
        .as_array()
        .unwrap_or_else(|| panic!("no leftOut in result.json: {result:#}"))
        .iter()
        .map(|l| {
            assert!(l["reason"].as_str().is_some_and(|r| !r.is_empty()), "{l}");
            l["path"].as_str().unwrap().to_owned()
        })
        .collect();
    left_out.sort();
    assert_eq!(
        left_out,
        ["one/pipe", "one/pipe-again", "two/pipe", "two/pipe-again"],
        "{result:#}"
    );
    assert_eq!(result["status"], "error", "{result:#}");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(namespace.run_objects(Some(&run_id(&home))).is_empty());
}
