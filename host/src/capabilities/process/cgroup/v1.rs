//! cgroup v1: one directory per controller hierarchy (memory, cpu, cpuacct, pids, and
//! the freezer when mounted, used only to kill).

use std::io;
use std::path::PathBuf;

use super::{
    cpu_quota, keyed, kill_members, read_u64, swap_active, swap_unaccounted, write, CgroupError,
    CgroupLimits, Freezer, RawUsage,
};

/// The cgroup's directory in each hierarchy; `cpu` equals `cpuacct` when co-mounted.
#[derive(Debug)]
pub(super) struct Dirs {
    pub(super) memory: PathBuf,
    pub(super) cpu: PathBuf,
    pub(super) cpuacct: PathBuf,
    pub(super) pids: PathBuf,
    pub(super) freezer: Option<PathBuf>,
}

impl Dirs {
    pub(super) fn apply(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        if let Some(bytes) = limits.memory_bytes {
            write(
                &self.memory.join("memory.limit_in_bytes"),
                &bytes.to_string(),
            )?;
            // memory+swap: without it, swap would extend the limit.
            let memsw = self.memory.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes.to_string())?;
            } else if swap_active() {
                return Err(swap_unaccounted(&memsw));
            }
        }
        write(&self.pids.join("pids.max"), &limits.pids.to_string())?;
        if let Some(millicores) = limits.cpu_millicores {
            let (quota, period) = cpu_quota(millicores)?;
            write(&self.cpu.join("cpu.cfs_period_us"), &period.to_string())?;
            write(&self.cpu.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        Ok(())
    }

    pub(super) fn usage(&self) -> io::Result<RawUsage> {
        Ok(RawUsage {
            cpu_time_ns: read_u64(&self.cpuacct.join("cpuacct.usage"))?,
            memory_bytes: read_u64(&self.memory.join("memory.usage_in_bytes"))?,
            kernel_peak: read_u64(&self.memory.join("memory.max_usage_in_bytes")).ok(),
            pids: read_u64(&self.pids.join("pids.current"))? as u32,
        })
    }

    /// `oom_kill` of `memory.oom_control` (kernels since 4.13).
    pub(super) fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.memory.join("memory.oom_control")).ok()?;
        keyed(&text, "oom_kill")
    }

    /// v1 has no `cgroup.kill`: freeze (when the freezer is mounted), signal every pid,
    /// thaw, and repeat until the pids hierarchy lists nobody.
    pub(super) fn kill_all(&self) {
        let state = self.freezer.as_ref().map(|dir| dir.join("freezer.state"));
        let freezer = state.as_deref().map(|file| Freezer {
            file,
            freeze: "FROZEN",
            thaw: "THAWED",
            frozen_when: (file, "FROZEN"),
        });
        kill_members(&self.pids.join("cgroup.procs"), freezer);
    }
}
