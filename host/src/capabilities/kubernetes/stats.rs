//! Memory and CPU of a pod, read inside it from its cgroup: the API server's metrics
//! need a metrics server the cluster may not have, while the cgroup files are always
//! there (v1: `memory.usage_in_bytes`, `max_usage_in_bytes`, `memory.oom_control`,
//! `cpuacct.usage`; v2: `memory.current`, `memory.peak`, `memory.events`,
//! `cpu.stat`). The container's `OOMKilled` status counts too.
//!
//! A reading is bounded ([`READ_TIMEOUT`], and [`LIMIT`] with the pod's status): the
//! engine drops a `stats` call of the plugin after 10 s, which leaves the plugin's
//! instance unusable for the `destroy` that follows, so a pod whose `/bin/sh` never
//! answers must fail the reading well before.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::exec::{self, Target};
use crate::wit::types::{Error, ResourceUsage};

/// Prints `key value` lines from whichever cgroup version the pod sees.
const READ_CGROUP: &str = r#"c=/sys/fs/cgroup
v() { cat "$1" 2>/dev/null || echo 0; }
if [ -f $c/memory.current ]; then
  echo "memory $(v $c/memory.current)"
  echo "peak $(v $c/memory.peak)"
  while read -r k n; do [ "$k" = oom_kill ] && echo "oom $n"; done < $c/memory.events
  while read -r k n; do [ "$k" = usage_usec ] && echo "cpu_ns ${n}000"; done < $c/cpu.stat
  echo "pids $(v $c/pids.current)"
else
  echo "memory $(v $c/memory/memory.usage_in_bytes)"
  echo "peak $(v $c/memory/memory.max_usage_in_bytes)"
  while read -r k n; do [ "$k" = oom_kill ] && echo "oom $n"; done < $c/memory/memory.oom_control
  for f in $c/cpuacct/cpuacct.usage $c/cpu,cpuacct/cpuacct.usage; do
    [ -f $f ] && { echo "cpu_ns $(cat $f)"; break; }
  done
  echo "pids $(v $c/pids/pids.current)"
fi"#;

/// How long the exec that reads the cgroup may take.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole `stats` call (the pod's status, then the reading) may take.
pub const LIMIT: Duration = Duration::from_secs(8);

/// What one reading found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub memory: u64,
    pub peak: u64,
    pub oom_kills: u64,
    pub cpu_ns: u64,
    pub pids: u32,
}

impl Reading {
    pub fn parse(text: &str) -> Reading {
        let mut r = Reading::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            let n: u64 = value.trim().parse().unwrap_or(0);
            match key {
                "memory" => r.memory = n,
                "peak" => r.peak = n,
                "oom" => r.oom_kills = n,
                "cpu_ns" => r.cpu_ns = n,
                "pids" => r.pids = u32::try_from(n).unwrap_or(u32::MAX),
                _ => {}
            }
        }
        r
    }
}

/// The CPU time seen at the previous reading, for a percentage between two.
#[derive(Default)]
pub struct CpuClock(Mutex<Option<(u64, Instant)>>);

impl CpuClock {
    /// Percent of one core since the previous reading (0 the first time).
    fn percent(&self, cpu_ns: u64) -> f64 {
        let now = Instant::now();
        let previous = self.0.lock().unwrap().replace((cpu_ns, now));
        match previous {
            Some((before, at)) if cpu_ns >= before => {
                let wall = now.duration_since(at).as_nanos() as f64;
                if wall > 0.0 {
                    (cpu_ns - before) as f64 * 100.0 / wall
                } else {
                    0.0
                }
            }
            _ => 0.0,
        }
    }
}

/// Reads the pod's usage; `oom_killed_status`: the cluster reported the container
/// `OOMKilled`.
pub async fn read(
    target: &Target,
    clock: &CpuClock,
    oom_killed_status: bool,
) -> Result<ResourceUsage, Error> {
    let argv = ["/bin/sh", "-c", READ_CGROUP, "agentgate-stats"]
        .map(String::from)
        .to_vec();
    let out = exec::run(target, argv, None, READ_TIMEOUT).await?;
    if out.code != Some(0) {
        return Err(Error::Failed(format!(
            "reading the pod's cgroup failed (exit {:?}): {}",
            out.code,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let reading = Reading::parse(&String::from_utf8_lossy(&out.stdout));
    Ok(ResourceUsage {
        cpu_percent: clock.percent(reading.cpu_ns),
        memory_bytes: reading.memory,
        peak_memory_bytes: reading.peak.max(reading.memory),
        pids: reading.pids,
        oom_killed: reading.oom_kills > 0 || oom_killed_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cgroup_versions_read_the_same() {
        let r = Reading::parse("memory 1048576\npeak 2097152\noom 1\ncpu_ns 5000000\npids 3\n");
        assert_eq!(
            r,
            Reading {
                memory: 1 << 20,
                peak: 2 << 20,
                oom_kills: 1,
                cpu_ns: 5_000_000,
                pids: 3
            }
        );
        assert_eq!(Reading::parse("garbage\nmemory x\n"), Reading::default());
    }

    #[test]
    fn this_machines_cgroup_reads_through_the_script() {
        // The script as a pod runs it, here against this process's own view.
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", READ_CGROUP])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("memory ") && text.contains("pids "), "{text}");
    }
}
