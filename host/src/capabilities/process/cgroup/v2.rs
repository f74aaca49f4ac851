//! cgroup v2: one directory in the unified hierarchy, below parents that delegate the
//! memory, cpu and pids controllers to it.

use std::io;
use std::path::{Path, PathBuf};

use super::hierarchy::V2_CONTROLLERS;
use super::{
    cpu_quota, keyed, kill_members, make_dir, read_u64, swap_active, swap_unaccounted, write,
    CgroupError, CgroupLimits, Freezer, RawUsage, ROOT_FOLDER,
};

#[derive(Debug)]
pub(super) struct Dir {
    /// The cgroup under which `agentgate/` lives.
    pub(super) base: PathBuf,
    pub(super) path: PathBuf,
}

/// The leaf cgroup a host process moves itself into when the cgroup it was started in
/// must hand controllers to sandboxes. cgroup v2 lets a cgroup other than the root
/// enable controllers for its children only while it holds no process itself, and a
/// delegated cgroup (systemd's `Delegate=yes`, a container's own cgroup) holds the
/// host. [`super::hierarchy::Layout`] reads a host in this leaf as being in its parent.
pub(super) const HOST_LEAF: &str = "agentgate-host";

/// Enables the controllers for children of `base` and of `base/agentgate` (creating
/// it); a v2 cgroup only has the controllers its parent's `subtree_control` lists.
pub(super) fn delegate_controllers(base: &Path) -> Result<(), CgroupError> {
    enable_controllers(base, &V2_CONTROLLERS, true)?;
    let folder = base.join(ROOT_FOLDER);
    make_dir(&folder, true)?;
    enable_controllers(&folder, &V2_CONTROLLERS, false)
}

/// Enables `controllers` for the children of `dir`. When `dir` refuses because it holds
/// processes and `may_move_self` is set, this process moves into [`HOST_LEAF`] below it
/// and asks again; other processes left in `dir` still make it refuse.
pub(super) fn enable_controllers(
    dir: &Path,
    controllers: &[&str],
    may_move_self: bool,
) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&file).map_err(|e| CgroupError::io("read", &file, e))?;
    let missing = missing_controllers(&enabled, controllers);
    if missing.is_empty() {
        return Ok(());
    }
    match std::fs::write(&file, &missing) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) && may_move_self => {
            move_self_into(&dir.join(HOST_LEAF))?;
            write(&file, &missing)
        }
        Err(e) => Err(CgroupError::io(format!("write {missing:?} to"), &file, e)),
    }
}

/// Moves this whole process (every thread) into `leaf`, creating it when missing.
fn move_self_into(leaf: &Path) -> Result<(), CgroupError> {
    make_dir(leaf, true)?;
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())
}

/// The `+controller` words `subtree_control` needs beyond what it already `enabled`.
fn missing_controllers(enabled: &str, controllers: &[&str]) -> String {
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    controllers
        .iter()
        .filter(|c| !enabled.contains(c))
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A descriptor of the cgroup directory `path`, for `CLONE_INTO_CGROUP`.
pub(super) fn open(path: &Path) -> Result<std::os::fd::OwnedFd, CgroupError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
        .map(Into::into)
        .map_err(|e| CgroupError::io("open", path, e))
}

impl Dir {
    pub(super) fn apply(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        if let Some(bytes) = limits.memory_bytes {
            write(&self.path.join("memory.max"), &bytes.to_string())?;
            let swap = self.path.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            } else if swap_active() {
                return Err(swap_unaccounted(&swap));
            }
        }
        write(&self.path.join("pids.max"), &limits.pids.to_string())?;
        if let Some(millicores) = limits.cpu_millicores {
            write(&self.path.join("cpu.max"), &cpu_max(millicores)?)?;
        }
        Ok(())
    }

    pub(super) fn usage(&self) -> io::Result<RawUsage> {
        let cpu_stat = std::fs::read_to_string(self.path.join("cpu.stat"))?;
        let usage_usec = keyed(&cpu_stat, "usage_usec").ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "cpu.stat has no usage_usec")
        })?;
        Ok(RawUsage {
            cpu_time_ns: usage_usec.saturating_mul(1000),
            memory_bytes: read_u64(&self.path.join("memory.current"))?,
            // memory.peak exists since Linux 5.19.
            kernel_peak: read_u64(&self.path.join("memory.peak")).ok(),
            pids: read_u64(&self.path.join("pids.current"))? as u32,
        })
    }

    /// `oom_kill` of `memory.events`, which counts descendants too.
    pub(super) fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.path.join("memory.events")).ok()?;
        keyed(&text, "oom_kill")
    }

    /// `cgroup.kill` (Linux 5.14) kills everything at once; older kernels freeze and
    /// signal each pid. Either way, wait until the cgroup is empty.
    pub(super) fn kill_all(&self) {
        let procs = self.path.join("cgroup.procs");
        if std::fs::write(self.path.join("cgroup.kill"), "1").is_ok() {
            kill_members(&procs, None);
            return;
        }
        let (freeze, events) = (
            self.path.join("cgroup.freeze"),
            self.path.join("cgroup.events"),
        );
        kill_members(
            &procs,
            Some(Freezer {
                file: &freeze,
                freeze: "1",
                thaw: "0",
                frozen_when: (&events, "frozen 1"),
            }),
        );
    }
}

/// The `cpu.max` line for `millicores`: `"quota period"` in microseconds.
fn cpu_max(millicores: u32) -> Result<String, CgroupError> {
    let (quota, period) = cpu_quota(millicores)?;
    Ok(format!("{quota} {period}"))
}

#[cfg(test)]
mod tests {
    use super::super::keyed;
    use super::*;

    #[test]
    fn cpu_max_is_quota_and_period_in_microseconds() {
        assert_eq!(cpu_max(200).unwrap(), "20000 100000");
        assert_eq!(cpu_max(1000).unwrap(), "100000 100000");
        assert_eq!(cpu_max(2500).unwrap(), "250000 100000");
        // Under the kernel's 1 ms minimum quota the period stretches instead.
        assert_eq!(cpu_max(5).unwrap(), "5000 1000000");
        assert!(cpu_max(0).is_err());
    }

    #[test]
    fn cpu_stat_usage_is_read() {
        let stat = "usage_usec 1523\nuser_usec 1000\nsystem_usec 523\nnr_periods 0\n";
        assert_eq!(keyed(stat, "usage_usec"), Some(1523));
        assert_eq!(keyed(stat, "system_usec"), Some(523));
    }

    #[test]
    fn memory_events_oom_kill_is_told_from_oom() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(1));
        assert_eq!(
            keyed("low 0\nmax 0\noom 0\noom_kill 0\n", "oom_kill"),
            Some(0)
        );
        assert_eq!(keyed("low 0\n", "oom_kill"), None);
    }

    #[test]
    fn only_missing_controllers_are_enabled() {
        let missing = |enabled| missing_controllers(enabled, &V2_CONTROLLERS);
        assert_eq!(missing(""), "+memory +cpu +pids");
        assert_eq!(missing("cpu io memory\n"), "+pids");
        assert_eq!(missing("cpuset cpu memory pids\n"), "");
    }
}
