//! What confinement one spawn asks for, checked before anything starts.
//!
//! Two shapes only. An unsealed process runs in the host's own view with a clean
//! environment and nothing else (that is `sandbox-none`), so it may not ask for
//! limits or a network mode it would not get. A sealed process gets the whole sandbox:
//! the view and namespaces of [`super::sealed`], the filter of [`super::seccomp`], the
//! plugin's cgroup, and the network it asked for. Whatever the machine lacks for that
//! fails the spawn with `unavailable` and says how to get it.

use crate::host_paths::BindScope;
use crate::wit::process::Isolation as IsolationRequest;
use crate::wit::types::{Error, NetworkMode, Resources};

use super::cgroup::CgroupLimits;
use super::sealed::SealedView;

/// Processes a sandbox may hold at once when the spec sets no limit: enough for any
/// build, few enough that a fork bomb stops.
pub const DEFAULT_PIDS_LIMIT: u32 = 4096;

#[derive(Debug)]
pub enum Isolation {
    /// The host's view: only a clean environment.
    Host,
    Sealed {
        view: SealedView,
        limits: CgroupLimits,
        network: NetworkMode,
    },
}

impl Isolation {
    /// `scope` is what a sealed view may bind (see [`SealedView::new`]).
    pub fn from_request(request: IsolationRequest, scope: &BindScope) -> Result<Isolation, Error> {
        let Some(view) = request.sealed else {
            return match (request.limits, request.network) {
                (None, None | Some(NetworkMode::Host)) => Ok(Isolation::Host),
                _ => Err(Error::Unavailable(
                    "resource limits and network modes need a sealed process (`isolation.sealed`); \
                     an unsealed process runs as the host itself"
                        .into(),
                )),
            };
        };
        let view = SealedView::new(view.binds, scope)?;
        let limits = cgroup_limits(request.limits.as_ref())?;
        Ok(Isolation::Sealed {
            view,
            limits,
            network: request.network.unwrap_or(NetworkMode::None),
        })
    }
}

/// The limits of a sandbox whose spec sets none: a pids limit only.
pub fn default_limits() -> CgroupLimits {
    CgroupLimits {
        memory_bytes: None,
        cpu_millicores: None,
        pids: DEFAULT_PIDS_LIMIT,
    }
}

fn cgroup_limits(resources: Option<&Resources>) -> Result<CgroupLimits, Error> {
    let Some(r) = resources else {
        return Ok(default_limits());
    };
    if r.disk_bytes.is_some() {
        return Err(Error::Unavailable(
            "a sealed process cannot have a disk quota: its writable folders are host \
             directories; refuse the spec or use `provider: docker` with a quota-capable \
             storage driver"
                .into(),
        ));
    }
    Ok(CgroupLimits {
        memory_bytes: r.memory_bytes,
        cpu_millicores: r.cpu_millicores,
        pids: r.pids.unwrap_or(DEFAULT_PIDS_LIMIT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::process::SealedView as SealedRequest;

    fn request(
        sealed: bool,
        limits: Option<Resources>,
        network: Option<NetworkMode>,
    ) -> IsolationRequest {
        IsolationRequest {
            sealed: sealed.then(|| SealedRequest { binds: vec![] }),
            limits,
            network,
        }
    }

    fn memory(bytes: u64) -> Resources {
        Resources {
            cpu_millicores: None,
            memory_bytes: Some(bytes),
            disk_bytes: None,
            pids: None,
            timeout_ms: None,
        }
    }

    #[test]
    fn unsealed_processes_get_no_limits_or_network_they_would_not_have() {
        assert!(matches!(
            Isolation::from_request(request(false, None, None), &BindScope::default()),
            Ok(Isolation::Host)
        ));
        for (limits, network) in [
            (Some(memory(1 << 20)), None),
            (None, Some(NetworkMode::None)),
            (None, Some(NetworkMode::Bridge)),
        ] {
            let error =
                Isolation::from_request(request(false, limits, network), &BindScope::default())
                    .unwrap_err();
            assert!(
                matches!(error, Error::Unavailable(ref m) if m.contains("sealed")),
                "{error:?}"
            );
        }
    }

    #[test]
    fn sealed_processes_always_have_a_pids_limit_and_no_network_by_default() {
        let Isolation::Sealed {
            limits, network, ..
        } = Isolation::from_request(
            request(true, Some(memory(64 << 20)), None),
            &BindScope::default(),
        )
        .unwrap()
        else {
            panic!("sealed")
        };
        assert_eq!(limits.pids, DEFAULT_PIDS_LIMIT);
        assert_eq!(limits.memory_bytes, Some(64 << 20));
        assert_eq!(network, NetworkMode::None);
    }

    #[test]
    fn a_disk_quota_is_refused_not_ignored() {
        let mut limits = memory(1 << 20);
        limits.disk_bytes = Some(1 << 30);
        let error =
            Isolation::from_request(request(true, Some(limits), None), &BindScope::default())
                .unwrap_err();
        assert!(
            matches!(error, Error::Unavailable(ref m) if m.contains("disk")),
            "{error:?}"
        );
    }
}
