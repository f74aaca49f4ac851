//! The capability's parts against a real cluster: `AGENTGATE_TEST_KUBECONFIG` names
//! its kubeconfig (`tests/kubernetes/cluster.sh up` prints it) and
//! `AGENTGATE_TEST_K8S_IMAGE` an image on its node (both as `.ci/run` exports them).
//! Under `CI=true` a missing cluster is a failure. The unreachable-server check needs
//! no cluster.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod as K8sPod, Secret};
use kube::Api;

use super::client;
use super::exec::{self, Target};
use super::leftovers;
use super::objects::{Names, RunMarks, DEFAULT_UID};
use super::pod::{self, Placement};
use super::scope::{AllowedCluster, KubernetesScope};
use crate::capabilities::labels::digest;
use crate::capabilities::scope::Patterns;
use crate::record::EventSink;
use crate::wit::execution::Output;
use crate::wit::kubernetes_v0_1_0::cluster::{PodRequest, Target as WitTarget};
use crate::wit::types::{
    EnvVar, Error, ExecRequest, ExitStatus, NetworkMode, OutputPipe, Resources,
};

fn cluster_under_test() -> Option<(PathBuf, String)> {
    match std::env::var_os("AGENTGATE_TEST_KUBECONFIG") {
        Some(path) => Some((
            PathBuf::from(path),
            std::env::var("AGENTGATE_TEST_K8S_IMAGE").unwrap_or_else(|_| {
                panic!("AGENTGATE_TEST_KUBECONFIG is set but AGENTGATE_TEST_K8S_IMAGE is not: set both (tests/kubernetes/cluster.sh up prints them)")
            }),
        )),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("AGENTGATE_TEST_KUBECONFIG is not set: start the cluster (tests/kubernetes/cluster.sh up) and export what it prints")
        }
        None => {
            eprintln!("AGENTGATE_TEST_KUBECONFIG is not set; the live cluster checks did not run");
            None
        }
    }
}

fn marks() -> RunMarks {
    let run_id = uuid::Uuid::now_v7().simple().to_string();
    RunMarks {
        owner: format!("pid={},start=1,boot=test,pidns=1", std::process::id()),
        created_unix: 1_800_000_000,
        home: digest(&format!("/test-home/{run_id}")),
        run_id,
    }
}

fn request(image: &str) -> PodRequest {
    PodRequest {
        target: WitTarget {
            kubeconfig: None,
            context: None,
            namespace: Some("default".into()),
        },
        image: image.into(),
        env: vec![EnvVar {
            name: "TOKEN".into(),
            value: "s3cr3t-live".into(),
        }],
        workdir: "/workspace".into(),
        resources: Resources {
            cpu_millicores: Some(250),
            memory_bytes: Some(64 << 20),
            disk_bytes: None,
            pids: None,
            timeout_ms: Some(600_000),
        },
        network: NetworkMode::Bridge,
        service_account: None,
        runtime_class_name: None,
        node_selector: vec![],
        tolerations: vec![],
        run_as_user: None,
        labels: vec![],
    }
}

async fn place(kubeconfig: &std::path::Path, marks: &RunMarks) -> Placement {
    let context = client::current_context(Some(kubeconfig)).unwrap();
    let cluster = client::load(Some(kubeconfig), &context)
        .await
        .unwrap()
        .reach()
        .await
        .unwrap();
    Placement {
        cluster,
        namespace: "default".into(),
        names: Names::new(
            &marks.run_id,
            &uuid::Uuid::new_v4().simple().to_string()[..6],
        ),
    }
}

/// Everything an execution printed, by pipe, and how it ended.
async fn collect(
    mut execution: crate::capabilities::execution::Execution,
) -> (String, String, ExitStatus) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match execution.read(Duration::from_secs(60)).await {
            Output::Chunk(c) if c.pipe == OutputPipe::Stdout => out.extend(c.data),
            Output::Chunk(c) => err.extend(c.data),
            Output::Idle => panic!("no output for a minute"),
            Output::Exited(status) => {
                return (
                    String::from_utf8_lossy(&out).into_owned(),
                    String::from_utf8_lossy(&err).into_owned(),
                    status,
                )
            }
        }
    }
}

fn command(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        cwd: None,
        stdin: None,
        keep_stdin_open: false,
        timeout_ms: None,
    }
}

#[tokio::test]
async fn an_unreachable_api_server_is_unavailable_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: {server: 'https://127.0.0.1:1'}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: gone\n  context: {cluster: gone, user: u}\n\
         current-context: gone\n",
    )
    .unwrap();
    let loaded = client::load(Some(&path), "gone").await.unwrap();
    let Err(Error::Unavailable(message)) = loaded.reach().await else {
        panic!("an unreachable server must be unavailable")
    };
    assert!(message.contains("https://127.0.0.1:1"), "{message}");
    assert!(message.contains("nothing was created"), "{message}");
    assert!(
        message.contains("kubectl --context gone version"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_commands_keeps_its_secret_and_is_deleted_whole() {
    let Some((kubeconfig, image)) = cluster_under_test() else {
        return;
    };
    let marks = marks();
    let place = place(&kubeconfig, &marks).await;
    let events = Arc::new(EventSink::discard());
    pod::create(
        &place,
        &marks,
        &request(&image),
        DEFAULT_UID,
        &events,
        "test",
    )
    .await
    .unwrap();
    let target = Target {
        api: place.pods(),
        name: place.names.base.clone(),
        workdir: "/workspace".into(),
    };

    // The environment (the Secret's and the exec's own) reaches the command; the
    // exit code and both pipes come back.
    let mut run = command(&[
        "/bin/sh",
        "-c",
        "echo \"$TOKEN|$EXTRA|$(pwd)|$(id -u)\"; echo oops >&2; exit 3",
    ]);
    run.env.push(EnvVar {
        name: "EXTRA".into(),
        value: "it's \"quoted\"".into(),
    });
    let (out, err, status) = collect(exec::start(&target, run, "e1".into()).await.unwrap()).await;
    assert_eq!(out, "s3cr3t-live|it's \"quoted\"|/workspace|65534\n");
    assert_eq!(err, "oops\n");
    assert_eq!(status.code, Some(3));

    // The secret is in no pod spec.
    let spec = place.pods().get(&place.names.base).await.unwrap();
    let text = serde_json::to_string(&spec).unwrap();
    assert!(!text.contains("s3cr3t-live"), "{text}");

    // A timeout kills the command and what it started, not only the stream.
    let mut slow = command(&["/bin/sh", "-c", "sleep 301 & (sleep 302 & wait) & wait"]);
    slow.timeout_ms = Some(2_000);
    let (_, _, status) = collect(exec::start(&target, slow, "e2".into()).await.unwrap()).await;
    assert!(status.timed_out, "{status:?}");
    let count = "n=0; for f in /proc/[0-9]*/cmdline; do case \"$(tr '\\0' ' ' < $f 2>/dev/null)\" in 'sleep 30'[12]*) n=$((n+1));; esac; done; echo $n";
    let mut left = String::new();
    for _ in 0..20 {
        let (out, _, _) = collect(
            exec::start(&target, command(&["/bin/sh", "-c", count]), "e3".into())
                .await
                .unwrap(),
        )
        .await;
        left = out;
        if left.trim() == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        left.trim(),
        "0",
        "processes of the timed-out command survived"
    );

    // Usage is read from inside the pod.
    let usage = super::stats::read(&target, &super::stats::CpuClock::default(), false)
        .await
        .unwrap();
    assert!(usage.memory_bytes > 0, "{usage:?}");

    // gc of this home finds the run; another home's gc does not.
    let allowed = AllowedCluster {
        context: place.cluster.context.clone(),
        kubeconfig: Some(kubeconfig.clone()),
        namespaces: Patterns::Any,
        images: Patterns::Any,
        network_policy_enforced: false,
        root: false,
    };
    let any = KubernetesScope {
        contexts: Patterns::Any,
        namespaces: Patterns::Any,
        images: Patterns::Any,
    };
    let found = leftovers::list(&place.cluster, &allowed, &any, &marks.home)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0]
        .labels
        .iter()
        .any(|l| l.key == "io.agentgate.run-id" && l.value == marks.run_id));
    let other = leftovers::list(&place.cluster, &allowed, &any, &digest("another home"))
        .await
        .unwrap();
    assert!(
        other.iter().all(|l| !l.id.contains(&marks.run_id)),
        "{other:?}"
    );
    // Another home's reap of this run deletes nothing.
    let id = leftovers::LeftoverId::decode(&found[0].id).unwrap();
    leftovers::reap(&place.cluster, &id, &digest("another home"))
        .await
        .unwrap();
    assert!(place
        .pods()
        .get_opt(&place.names.base)
        .await
        .unwrap()
        .is_some());

    leftovers::reap(&place.cluster, &id, &marks.home)
        .await
        .unwrap();
    assert!(place
        .pods()
        .get_opt(&place.names.base)
        .await
        .unwrap()
        .is_none());
    let client = place.cluster.client.clone();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    assert!(secrets.get_opt(&place.names.base).await.unwrap().is_none());
    let owners: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(owners.get_opt(&place.names.base).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_cannot_start_is_reported_and_leaves_nothing() {
    let Some((kubeconfig, _)) = cluster_under_test() else {
        return;
    };
    let marks = marks();
    let place = place(&kubeconfig, &marks).await;
    let events = Arc::new(EventSink::discard());
    let result = pod::create(
        &place,
        &marks,
        &request("agentgate.test/absent:1"),
        DEFAULT_UID,
        &events,
        "test",
    )
    .await;
    let Err(Error::Unavailable(message)) = result else {
        panic!("{result:?}")
    };
    assert!(message.contains("agentgate.test/absent:1"), "{message}");
    assert!(
        message.contains("Err") || message.contains("BackOff"),
        "{message}"
    );
    let pods: Api<K8sPod> = place.pods();
    let selector = format!("io.agentgate.run-id={}", marks.run_id);
    let left = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert!(left.items.is_empty());
    let owners: Api<ConfigMap> = Api::namespaced(place.cluster.client.clone(), "default");
    let left = owners
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert!(left.items.is_empty());
}

/// Every object of the run `run_id` left in `default`, as `kind/name`.
async fn run_objects(place: &Placement, run_id: &str) -> Vec<String> {
    let client = place.cluster.client.clone();
    let list = kube::api::ListParams::default().labels(&format!("io.agentgate.run-id={run_id}"));
    let mut left = Vec::new();
    let pods: Api<K8sPod> = Api::namespaced(client.clone(), "default");
    for pod in pods.list(&list).await.unwrap().items {
        left.push(format!("pod/{}", pod.metadata.name.unwrap_or_default()));
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    for secret in secrets.list(&list).await.unwrap().items {
        left.push(format!(
            "secret/{}",
            secret.metadata.name.unwrap_or_default()
        ));
    }
    let owners: Api<ConfigMap> = Api::namespaced(client, "default");
    for owner in owners.list(&list).await.unwrap().items {
        left.push(format!(
            "configmap/{}",
            owner.metadata.name.unwrap_or_default()
        ));
    }
    left
}

fn run_context(run_id: &str) -> Arc<crate::capabilities::RunContext> {
    crate::capabilities::RunContext::new(
        crate::capabilities::labels::RunIdentity::new(
            run_id.to_owned(),
            format!("pid={},start=1,boot=test,pidns=1", std::process::id()),
            std::path::Path::new(&format!("/test-home/{run_id}")),
        ),
        Arc::new(EventSink::discard()),
        Default::default(),
    )
}

/// A root pod whose agent replaced `/bin/sh` (which every command the host runs in the
/// pod starts with) by `sleep`: the usage reading and the copy back end within their
/// bounds, the copy back says it was cut and records it, and the run's objects are
/// deleted by the host without the plugin and without entering the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_pod_whose_shell_never_answers_cannot_hold_the_host_or_keep_its_objects() {
    let Some((kubeconfig, image)) = cluster_under_test() else {
        return;
    };
    let marks = marks();
    let place = place(&kubeconfig, &marks).await;
    let events = Arc::new(EventSink::discard());
    let mut root = request(&image);
    root.run_as_user = Some(0);
    pod::create(&place, &marks, &root, 0, &events, "test")
        .await
        .unwrap();
    let run = run_context(&marks.run_id);
    run.state::<super::KubernetesRun>()
        .unwrap()
        .pods
        .lock()
        .unwrap()
        .insert(place.id(), (place.clone(), marks.home.clone()));
    let target = Target {
        api: place.pods(),
        name: place.names.base.clone(),
        workdir: "/workspace".into(),
    };
    let attack = command(&[
        "/bin/busybox",
        "sh",
        "-c",
        "echo marker > /workspace/marker && mkfifo /workspace/fifo && rm /bin/sh && \
         printf '#!/bin/busybox sh\\nexec /bin/busybox sleep 3600\\n' > /bin/sh && \
         chmod 755 /bin/sh && id -u && echo replaced",
    ]);
    let (out, err, status) =
        collect(exec::start(&target, attack, "e1".into()).await.unwrap()).await;
    assert_eq!(out, "0\nreplaced\n", "the attack did not act: {err}");
    assert_eq!(status.code, Some(0));

    let started = std::time::Instant::now();
    let usage = super::stats::read(&target, &super::stats::CpuClock::default(), false).await;
    let stats_took = started.elapsed();
    assert!(matches!(usage, Err(Error::TimedOut(_))), "{usage:?}");
    assert!(stats_took < super::stats::LIMIT, "{stats_took:?}");

    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("kept"), "the host's").unwrap();
    let started = std::time::Instant::now();
    let copied = super::copy::copy_out(
        &target,
        "/workspace",
        workspace.path().to_path_buf(),
        super::copy::bounds(None),
    )
    .await;
    let copy_took = started.elapsed();
    let answer = super::record_copy_back(&run, copied);
    assert!(
        matches!(&answer, Err(Error::TimedOut(m)) if m.contains("no byte moved")),
        "{answer:?}"
    );
    assert!(
        copy_took < super::copy::COPY_OUT.total + Duration::from_secs(3),
        "{copy_took:?}"
    );
    let left_out = run.left_out();
    assert!(
        left_out
            .iter()
            .any(|l| l.path == "." && l.reason.contains("did not finish")),
        "{left_out:?}"
    );
    // A cut copy removes nothing on the host.
    assert_eq!(
        std::fs::read(workspace.path().join("kept")).unwrap(),
        b"the host's"
    );

    assert!(!run_objects(&place, &marks.run_id).await.is_empty());
    let started = std::time::Instant::now();
    let deleted = super::delete_left(&run).await.unwrap();
    let delete_took = started.elapsed();
    assert_eq!(deleted.names, [place.id()]);
    let left = run_objects(&place, &marks.run_id).await;
    assert!(left.is_empty(), "left on the cluster: {left:?}");
    assert!(
        delete_took < pod::DELETE_IN_DESTROY,
        "deleting took {delete_took:?}"
    );
    eprintln!(
        "hostile root pod: stats failed after {stats_took:?}, the copy back was cut after \
         {copy_took:?}, the objects were gone {delete_took:?} after their deletion began"
    );
}

/// A copy back meets refused entries (fifos, hard links to them) early and ordinary
/// files after them: every ordinary file comes back, `ln link hard` comes back as the
/// same link, and each refused entry is recorded on the run with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_back_goes_on_past_the_entries_it_refuses_and_records_them() {
    let Some((kubeconfig, image)) = cluster_under_test() else {
        return;
    };
    let marks = marks();
    let place = place(&kubeconfig, &marks).await;
    let events = Arc::new(EventSink::discard());
    pod::create(
        &place,
        &marks,
        &request(&image),
        DEFAULT_UID,
        &events,
        "test",
    )
    .await
    .unwrap();
    let target = Target {
        api: place.pods(),
        name: place.names.base.clone(),
        workdir: "/workspace".into(),
    };
    // Two folders, each with refused entries and files: whichever tar reads first,
    // the other's files come after its refused entries.
    let make = command(&[
        "/bin/sh",
        "-c",
        "cd /workspace && for d in one two; do mkdir $d && mkfifo $d/pipe && \
         ln $d/pipe $d/pipe-again && ln -s /etc/passwd $d/link && ln $d/link $d/link-again && \
         for n in 1 2 3 4 5; do echo $d$n > $d/file$n.txt; done; done && \
         stat -c '%F %h' one/pipe one/link",
    ]);
    let (out, err, status) = collect(exec::start(&target, make, "e1".into()).await.unwrap()).await;
    assert_eq!(status.code, Some(0), "{err}");
    // A fifo and a link, each with a second name: tar writes the second as a hard link.
    assert_eq!(
        out, "fifo 2\nsymbolic link 2\n",
        "the pod's tree is not what the test needs"
    );

    let run = run_context(&marks.run_id);
    let workspace = tempfile::tempdir().unwrap();
    let copied = super::copy::copy_out(
        &target,
        "/workspace",
        workspace.path().to_path_buf(),
        super::copy::bounds(None),
    )
    .await;
    let transfer = super::record_copy_back(&run, copied).unwrap();
    for d in ["one", "two"] {
        for n in 1..=5 {
            let file = workspace.path().join(format!("{d}/file{n}.txt"));
            assert_eq!(
                std::fs::read_to_string(&file).unwrap_or_default(),
                format!("{d}{n}\n"),
                "{} did not come back; left out: {:?}",
                file.display(),
                transfer.skipped
            );
        }
        for link in ["link", "link-again"] {
            assert_eq!(
                std::fs::read_link(workspace.path().join(d).join(link)).unwrap(),
                std::path::Path::new("/etc/passwd")
            );
        }
    }
    let mut left: Vec<String> = run.left_out().into_iter().map(|l| l.path).collect();
    left.sort();
    assert_eq!(
        left,
        ["one/pipe", "one/pipe-again", "two/pipe", "two/pipe-again"],
        "{:?}",
        run.left_out()
    );
    assert!(run.left_out().iter().all(|l| !l.reason.is_empty()));
    assert_eq!(transfer.skipped.len(), 4, "{:?}", transfer.skipped);
    pod::delete(&place, &marks.home, pod::DELETE_IN_DESTROY)
        .await
        .unwrap();
    assert!(run_objects(&place, &marks.run_id).await.is_empty());
}
