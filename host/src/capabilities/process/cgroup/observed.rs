//! Reading the cgroup of a process this host did not place: a container's.
//!
//! The Docker engine answers a stats request only at its collector's next tick, up to
//! a second later, so a run that asks for its container's usage as it ends waited that
//! long. On the engine's own machine the same counters are files the host can read at
//! once: the container's first process names its cgroup in `/proc/<pid>/cgroup`, and
//! this host's mount table says where that is, for v1 and v2 alike (the same
//! [`Layout`] rules as for our own sandboxes). A cgroup is used only when every
//! directory found names the container (engines name a container's cgroup after its
//! id, whatever the driver); anything else is refused, so the caller asks the engine.

use std::io;
use std::path::Path;

use super::hierarchy::Layout;
use super::{keyed, Backend, CgroupError};

/// Another process's cgroup, read only.
#[derive(Debug)]
pub struct ObservedCgroup {
    backend: Backend,
}

/// What an observed cgroup's processes use, as the Docker engine reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedUsage {
    pub cpu_time_ns: u64,
    /// In use, less the page cache the kernel may drop (`inactive_file`).
    pub memory_bytes: u64,
    /// The kernel's peak, where it keeps one.
    pub peak_memory_bytes: Option<u64>,
    pub pids: u32,
    /// Processes the kernel OOM-killed, where it counts them.
    pub oom_kills: Option<u64>,
}

impl ObservedCgroup {
    /// The cgroup process `pid` is in, when each of its directories names `name`.
    pub fn of_process(pid: u32, name: &str) -> Result<ObservedCgroup, CgroupError> {
        let read = |path: &str| {
            std::fs::read_to_string(path).map_err(|e| CgroupError::Unavailable {
                detail: format!("cannot read {path}: {e}"),
            })
        };
        let mountinfo = read("/proc/self/mountinfo")?;
        let memberships = read(&format!("/proc/{pid}/cgroup"))?;
        // Unprivileged placement is "the process's own cgroup in each hierarchy".
        let layout = Layout::choose(&mountinfo, &memberships, false, &|dir| {
            std::fs::read_to_string(dir.join("cgroup.controllers")).ok()
        })?;
        let backend = Backend::at(&layout);
        let names = |dir: &Path| dir.to_string_lossy().contains(name);
        if name.is_empty() || !backend.dirs().iter().all(|dir| names(dir)) {
            return Err(CgroupError::Unavailable {
                detail: format!("process {pid} is not in a cgroup of {name:?}"),
            });
        }
        Ok(ObservedCgroup { backend })
    }

    pub fn usage(&self) -> io::Result<ObservedUsage> {
        let (raw, stat_file, oom_kills) = match &self.backend {
            Backend::V1(dirs) => (
                dirs.usage()?,
                dirs.memory.join("memory.stat"),
                dirs.oom_kills(),
            ),
            Backend::V2(dir) => (dir.usage()?, dir.path.join("memory.stat"), dir.oom_kills()),
        };
        let stat = std::fs::read_to_string(stat_file)?;
        let inactive = keyed(&stat, "total_inactive_file")
            .or_else(|| keyed(&stat, "inactive_file"))
            .unwrap_or(0);
        Ok(ObservedUsage {
            cpu_time_ns: raw.cpu_time_ns,
            memory_bytes: raw.memory_bytes.saturating_sub(inactive),
            peak_memory_bytes: raw.kernel_peak,
            pids: raw.pids,
            oom_kills,
        })
    }
}
