//! Starting and stopping one run's proxy: the gate a sandbox with `sandbox.egress`
//! reaches the network through.
//!
//! Before anything is made for a run, [`check_cap`] refuses a TaskSpec that allows more
//! than the operator's cap. Once the sandbox's state folder exists, [`RunGate::start`]
//! makes the gate's own 0700 folder next to it (not in anything a sandbox can write, so
//! no sandbox can swap the socket for another path), writes the name files containers
//! bind there, and starts the [`Proxy`] on its socket. [`RunGate::stop`] ends the proxy
//! and removes the folder, once nothing of the sandbox can use it.
//!
//! The names of the folder's files are defined here, where they are written; the
//! sandbox capabilities read them from here.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Allowlist, BadDestination, CapViolation, EgressReport, OperatorCap, Policy, Proxy};
use super::{ProxyError, Resolver, ResolverError};
use crate::record::EventSink;

/// The socket's file name in the gate's folder.
pub const SOCKET_NAME: &str = "proxy.sock";
/// The sandbox's `/etc/hosts` in the gate's folder, for containers.
pub const HOSTS_NAME: &str = "hosts";
/// The sandbox's `/etc/resolv.conf` in the gate's folder, for containers.
pub const RESOLV_CONF_NAME: &str = "resolv.conf";
/// A resolver configuration with no resolver but loopback: a name that is not in the
/// sandbox's `/etc/hosts` resolves nowhere.
pub const RESOLV_CONF: &str = "nameserver 127.0.0.1\n";

/// Where the TaskSpec's allowlist is, in messages.
const FIELD: &str = "spec.execution.sandbox.egress.allow";

/// A TaskSpec's allowlist the operator's cap refuses, found before the run starts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapRefusal {
    /// An entry is not `host:port`.
    #[error("{FIELD}{0}")]
    Destination(#[source] BadDestination),
    /// An entry is outside the operator's cap in grants.yaml.
    #[error("{FIELD}{0}; ask the operator, or remove that entry")]
    Cap(#[source] CapViolation),
}

/// Refuses an allowlist that names a bad destination or asks for more than `cap`.
pub fn check_cap(allow: &[String], cap: &OperatorCap) -> Result<(), CapRefusal> {
    let allow = Allowlist::parse(allow).map_err(CapRefusal::Destination)?;
    cap.check(&allow).map_err(CapRefusal::Cap)
}

/// Why a run's gate did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The TaskSpec's allowlist names a bad destination: the TaskSpec is invalid.
    #[error("{FIELD}: {0}")]
    Destination(#[source] BadDestination),
    /// The proxy's resolver could not be set up.
    #[error("the egress proxy's resolver: {0}")]
    Resolver(#[source] ResolverError),
    /// The gate's folder could not be created (it exists already, or its parent is
    /// missing or not writable).
    #[error("creating the egress proxy's folder {}: {source}", .path.display())]
    Folder {
        /// The folder asked for.
        path: PathBuf,
        /// Why creating it failed.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox's `hosts` or `resolv.conf` could not be written in the gate's folder.
    #[error("writing the sandbox's {name}: {source}")]
    NameFile {
        /// The file's name in the folder.
        name: &'static str,
        /// Why writing it failed.
        #[source]
        source: std::io::Error,
    },
    /// The proxy did not start.
    #[error("starting the egress proxy: {0}")]
    Proxy(#[source] ProxyError),
}

/// What the proxy of a run needs besides the TaskSpec's allowlist: the operator's
/// `egress:` in grants.yaml.
#[derive(Debug, Clone)]
pub struct GateGrants {
    /// What the operator lets a TaskSpec allow.
    pub cap: OperatorCap,
    /// The one nameserver the proxy resolves with; the host's configuration when unset.
    pub nameserver: Option<SocketAddr>,
}

/// A run's running proxy and the folder of its socket.
pub struct RunGate {
    proxy: Proxy,
    folder: PathBuf,
}

/// What stopping the gate found: the proxy's report, and the folder when it could not
/// be removed.
pub struct Stopped {
    /// What the proxy let through and refused during the run.
    pub report: EgressReport,
    /// The folder left behind and why removing it failed; `None` when it is gone.
    pub left: Option<(PathBuf, std::io::Error)>,
}

impl RunGate {
    /// Makes `folder` (0700), writes the name files for `allow` in it and starts the
    /// proxy on its socket. Nothing is left behind when it fails.
    pub async fn start(
        allow: &[String],
        grants: GateGrants,
        folder: PathBuf,
        events: Arc<EventSink>,
    ) -> Result<RunGate, GateError> {
        let allowlist = Allowlist::parse(allow).map_err(GateError::Destination)?;
        let resolver = match grants.nameserver {
            Some(nameserver) => Resolver::nameserver(nameserver),
            None => Resolver::system(),
        }
        .map_err(GateError::Resolver)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&folder)
            .map_err(|source| GateError::Folder {
                path: folder.clone(),
                source,
            })?;
        // The name files containers bind (sealed processes get them as memfds).
        let hosts = agentgate_sandbox_init::relay::hosts_file(allow);
        for (name, text) in [
            (HOSTS_NAME, hosts.as_str()),
            (RESOLV_CONF_NAME, RESOLV_CONF),
        ] {
            if let Err(source) = std::fs::write(folder.join(name), text) {
                let _ = std::fs::remove_dir_all(&folder);
                return Err(GateError::NameFile { name, source });
            }
        }
        let policy = Policy {
            allow: allowlist,
            cap: grants.cap,
            resolver,
        };
        match Proxy::start(policy, &folder.join(SOCKET_NAME), events).await {
            Ok(proxy) => Ok(RunGate { proxy, folder }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&folder);
                Err(GateError::Proxy(e))
            }
        }
    }

    /// The folder holding the socket and the name files.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Stops the proxy (closing every connection) and removes its folder.
    pub async fn stop(self) -> Stopped {
        let report = self.proxy.stop().await;
        let left = std::fs::remove_dir_all(&self.folder)
            .err()
            .map(|e| (self.folder, e));
        Stopped { report, left }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_field_as_before() {
        let bad = check_cap(&["no-port".into()], &OperatorCap::default()).unwrap_err();
        assert!(
            bad.to_string()
                .starts_with("spec.execution.sandbox.egress.allow["),
            "{bad}"
        );
        let cap = OperatorCap {
            never: Allowlist::parse(&["*.example.com:443".into()]).unwrap(),
            only: None,
        };
        let refused = check_cap(&["api.example.com:443".into()], &cap).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.starts_with("spec.execution.sandbox.egress.allow[0]")
                && text.ends_with("; ask the operator, or remove that entry"),
            "{text}"
        );
        assert!(std::error::Error::source(&refused).is_some());
        check_cap(&["api.example.com:443".into()], &OperatorCap::default()).unwrap();
    }

    #[tokio::test]
    async fn the_gate_writes_its_folder_and_removes_it_when_stopped() {
        let base = tempfile::tempdir().unwrap();
        let folder = base.path().join("egress");
        let sink = Arc::new(
            EventSink::new(
                "r",
                &base.path().join("events.ndjson"),
                None,
                Arc::new(crate::record::Redactor::new(Vec::<String>::new())),
            )
            .unwrap(),
        );
        let grants = GateGrants {
            cap: OperatorCap::default(),
            nameserver: Some("127.0.0.1:53".parse().unwrap()),
        };
        let gate = RunGate::start(&["example.com:443".into()], grants, folder.clone(), sink)
            .await
            .unwrap();
        assert_eq!(gate.folder(), folder);
        assert!(folder.join(SOCKET_NAME).exists());
        assert_eq!(
            std::fs::read_to_string(folder.join(RESOLV_CONF_NAME)).unwrap(),
            RESOLV_CONF
        );
        assert!(std::fs::read_to_string(folder.join(HOSTS_NAME)).is_ok());
        let stopped = gate.stop().await;
        assert!(stopped.left.is_none());
        assert!(!folder.exists());
    }
}
