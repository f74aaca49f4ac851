//! The single-node Kubernetes cluster of `tests/kubernetes/cluster.sh`, for the tests of
//! the `kubernetes` sandbox provider.
//!
//! Why: the provider is tested against a real API server, kubelet, containerd and runc,
//! never a mocked client. CI brings the cluster up once and names it in
//! `AGENTGATE_TEST_KUBECONFIG` and `AGENTGATE_TEST_K8S_IMAGE`; elsewhere the first test
//! that asks runs `cluster.sh up` itself (idempotent: under a second when the cluster
//! already runs). A cluster that cannot be had fails the test, never skips it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::{repo_root, stderr};

/// Names the variable holding an admin kubeconfig of a running test cluster.
pub const KUBECONFIG_VAR: &str = "AGENTGATE_TEST_KUBECONFIG";
/// Names the variable holding the image the test cluster can run without a registry.
pub const IMAGE_VAR: &str = "AGENTGATE_TEST_K8S_IMAGE";

/// A running cluster: an admin kubeconfig for it, and an image its node already has
/// (busybox, `imagePullPolicy: Never`: no registry is reachable).
#[derive(Clone, Debug)]
pub struct TestCluster {
    pub kubeconfig: PathBuf,
    pub image: String,
}

/// The test cluster, from the environment or from `cluster.sh up` (once per test
/// binary). Panics with what to do when there is none.
pub fn test_cluster() -> TestCluster {
    static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();
    match CLUSTER.get_or_init(find_or_start) {
        Ok(cluster) => cluster.clone(),
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true and there is no test Kubernetes cluster: {why}")
        }
        Err(why) => panic!(
            "this test needs the test Kubernetes cluster: {why}\n\
             bring it up as root with `{}` and rerun (or set {KUBECONFIG_VAR} and {IMAGE_VAR})",
            cluster_script().display()
        ),
    }
}

fn cluster_script() -> PathBuf {
    repo_root().join("tests/kubernetes/cluster.sh")
}

fn find_or_start() -> Result<TestCluster, String> {
    let kubeconfig = std::env::var_os(KUBECONFIG_VAR);
    let image = std::env::var(IMAGE_VAR).ok();
    let cluster = match (kubeconfig, image) {
        (Some(kubeconfig), Some(image)) => TestCluster {
            kubeconfig: kubeconfig.into(),
            image,
        },
        (None, None) => start()?,
        _ => return Err(format!("set {KUBECONFIG_VAR} and {IMAGE_VAR} together")),
    };
    if !cluster.kubeconfig.is_file() {
        return Err(format!(
            "the kubeconfig {} does not exist",
            cluster.kubeconfig.display()
        ));
    }
    Ok(cluster)
}

/// Runs `cluster.sh up` and reads the `KUBECONFIG=` and `IMAGE=` lines it prints.
fn start() -> Result<TestCluster, String> {
    let script = cluster_script();
    let out = Command::new(&script)
        .arg("up")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} up` failed ({}):\n{}",
            script.display(),
            out.status,
            stderr(&out)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
            .ok_or_else(|| format!("`{} up` printed no {key}= line: {stdout}", script.display()))
    };
    Ok(TestCluster {
        kubeconfig: value("KUBECONFIG")?.into(),
        image: value("IMAGE")?,
    })
}
