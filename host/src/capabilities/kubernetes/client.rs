//! Reaching a cluster: which kubeconfig and context (the usual lookup unless the
//! operator listed a file), a client with explicit timeouts, and a reachability check
//! before anything is created, so an API server that does not answer is `unavailable`
//! naming its URL, not a half-made run.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::capabilities::lacking;
use crate::wit::types::Error;

/// Connecting to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One API call (create, get, delete, list). Exec streams have none of their own:
/// each has its command's timeout.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The reachability check.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one context of one kubeconfig, checked to answer.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub context: String,
    /// The kubeconfig file it came from; `None`: the usual lookup.
    pub kubeconfig: Option<PathBuf>,
}

/// The kubeconfig at `path`, or the usual lookup (`$KUBECONFIG`, then
/// `~/.kube/config`).
fn read_kubeconfig(path: Option<&Path>) -> Result<Kubeconfig, Error> {
    match path {
        Some(path) => Kubeconfig::read_from(path).map_err(|e| {
            lacking(format!(
                "the kubeconfig {} does not read ({e}); fix the file the operator listed under \
                 `kubernetes: clusters:` in grants.yaml",
                path.display()
            ))
        }),
        None => Kubeconfig::read().map_err(|e| {
            lacking(format!(
                "no kubeconfig was found by the usual lookup ($KUBECONFIG, then ~/.kube/config) \
                 ({e}); name one with `kubeconfig:` under `kubernetes: clusters:` in grants.yaml"
            ))
        }),
    }
}

/// The current context of the kubeconfig at `path` (or of the usual lookup).
pub fn current_context(path: Option<&Path>) -> Result<String, Error> {
    read_kubeconfig(path)?.current_context.ok_or_else(|| {
        lacking(format!(
            "the kubeconfig {} has no current-context; name a context in the TaskSpec \
             (`sandbox.options.context`)",
            shown(path)
        ))
    })
}

fn shown(path: Option<&Path>) -> String {
    path.map_or_else(
        || "of the usual lookup".to_string(),
        |p| p.display().to_string(),
    )
}

/// A context's configuration, read from its kubeconfig without contacting the
/// cluster, so every check of the scope comes before any traffic.
pub struct Loaded {
    config: Config,
    context: String,
    kubeconfig: Option<PathBuf>,
}

impl Loaded {
    /// The context's namespace, else `default`.
    pub fn default_namespace(&self) -> &str {
        &self.config.default_namespace
    }

    /// Connects and checks that the API server answers.
    pub async fn reach(self) -> Result<Cluster, Error> {
        let Loaded {
            mut config,
            context,
            kubeconfig,
        } = self;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.write_timeout = Some(CALL_TIMEOUT);
        // No read timeout on the connection: exec streams are long-lived; every plain
        // call is bounded by [`call`] instead.
        config.read_timeout = None;
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| {
            lacking(format!(
                "no client for the API server at {server} (context {context:?}): {e}"
            ))
        })?;
        let unreachable = |why: String| {
            lacking(format!(
                "the Kubernetes API server at {server} (context {context:?} of the kubeconfig \
                 {}) cannot be reached: {why}; nothing was created. Start the cluster or fix \
                 the kubeconfig; `kubectl --context {context} version` must answer",
                shown(kubeconfig.as_deref())
            ))
        };
        match tokio::time::timeout(REACH_TIMEOUT, client.apiserver_version()).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {}s",
                    REACH_TIMEOUT.as_secs()
                )))
            }
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Ok(Ok(_)) => {}
        }
        Ok(Cluster {
            client,
            context,
            kubeconfig,
        })
    }
}

/// Reads `context` of `kubeconfig` (the usual lookup when `None`).
pub async fn load(kubeconfig: Option<&Path>, context: &str) -> Result<Loaded, Error> {
    let file = read_kubeconfig(kubeconfig)?;
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| {
            lacking(format!(
                "context {context:?} of the kubeconfig {} cannot be used ({e}); check it with \
                 `kubectl --context {context} version`",
                shown(kubeconfig)
            ))
        })?;
    Ok(Loaded {
        config,
        context: context.to_string(),
        kubeconfig: kubeconfig.map(Path::to_path_buf),
    })
}

/// The HTTP status of a failed call, when the API server answered one.
pub fn status(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Runs one API call with [`CALL_TIMEOUT`]; `what` says what it was doing.
pub async fn call<T>(
    what: &str,
    future: impl Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, Error> {
    tokio::time::timeout(CALL_TIMEOUT, future)
        .await
        .map_err(|_| {
            Error::TimedOut(format!(
                "{what}: the API server did not answer within {}s",
                CALL_TIMEOUT.as_secs()
            ))
        })
}

/// A call that failed, as the contract's error.
pub fn failed(what: &str, error: kube::Error) -> Error {
    match status(&error) {
        Some(403) => Error::Denied(format!(
            "{what}: the cluster refused the credentials of the kubeconfig ({error}); the \
             operator must give its user the RBAC this needs"
        )),
        _ => Error::Failed(format!("{what}: {error}")),
    }
}

/// [`call`] then [`failed`]: the value, or the contract's error.
pub async fn checked<T>(
    what: &str,
    future: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, Error> {
    call(what, future).await?.map_err(|e| failed(what, e))
}
