//! Which `agentgate` process owns a run, and whether it still lives.
//!
//! A pid alone is not an identity: once the owner dies the kernel hands its pid to
//! another process. The owner is therefore the pid plus the start time the kernel
//! recorded for it (`/proc/PID/stat`, field 22, in clock ticks since boot), the boot
//! it ran in and the pid namespace its pid means something in. A process with the
//! same pid but another start time is not the owner.

use std::fmt;
use std::str::FromStr;

use crate::procfs::Stat;

/// The identity of an `agentgate` process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// `/proc/PID/stat` field 22: clock ticks from boot to the process's start.
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id`: a start time only means something in one boot.
    pub boot_id: String,
    /// The inode of `/proc/self/ns/pid`: a pid only means something in one namespace.
    pub pid_ns: u64,
}

/// What can be said of an owner from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The very process runs (same pid, start time, boot and namespace).
    Alive,
    /// It is gone: the pid is free or now belongs to a process started later, or the
    /// machine rebooted since.
    Dead,
    /// Its pid lives in another pid namespace, so this process cannot see it; only a
    /// stale heartbeat can tell.
    Unknown,
}

impl Owner {
    /// This process.
    pub fn current() -> std::io::Result<Owner> {
        let pid = std::process::id();
        Ok(Owner {
            pid,
            start_ticks: start_ticks(pid)?.ok_or_else(|| {
                std::io::Error::other("/proc/self/stat has no start time for this process")
            })?,
            boot_id: boot_id()?,
            pid_ns: pid_namespace()?,
        })
    }

    /// Whether the owner still runs, seen from this process.
    pub fn liveness(&self) -> Liveness {
        match (boot_id(), pid_namespace()) {
            (Ok(boot), _) if boot != self.boot_id => Liveness::Dead,
            (Ok(_), Ok(ns)) if ns == self.pid_ns => match start_ticks(self.pid) {
                Ok(Some(ticks)) if ticks == self.start_ticks => Liveness::Alive,
                Ok(_) => Liveness::Dead,
                // /proc unreadable: nothing is known, so nothing may be reaped.
                Err(_) => Liveness::Unknown,
            },
            _ => Liveness::Unknown,
        }
    }
}

/// The label form `pid=1234,start=5678,boot=<uuid>,pidns=4026531836`.
impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid={},start={},boot={},pidns={}",
            self.pid, self.start_ticks, self.boot_id, self.pid_ns
        )
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid owner {text:?}: expected pid=N,start=N,boot=UUID,pidns=N")]
pub struct OwnerParseError {
    text: String,
}

impl FromStr for Owner {
    type Err = OwnerParseError;

    fn from_str(text: &str) -> Result<Owner, OwnerParseError> {
        let error = || OwnerParseError {
            text: text.to_string(),
        };
        let (mut pid, mut start, mut boot, mut ns) = (None, None, None, None);
        for part in text.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(error)?;
            match key {
                "pid" => pid = value.parse().ok(),
                "start" => start = value.parse().ok(),
                "boot" => boot = Some(value.to_string()),
                "pidns" => ns = value.parse().ok(),
                _ => return Err(error()),
            }
        }
        Ok(Owner {
            pid: pid.ok_or_else(error)?,
            start_ticks: start.ok_or_else(error)?,
            boot_id: boot.filter(|b| !b.is_empty()).ok_or_else(error)?,
            pid_ns: ns.ok_or_else(error)?,
        })
    }
}

/// The start time of `pid`, or `None` when no such process exists. A zombie still has
/// its start time, but it is dead for every purpose here.
fn start_ticks(pid: u32) -> std::io::Result<Option<u64>> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    let stat = Stat::read(pid)?;
    Ok(stat
        .filter(|stat| stat.state != 'Z')
        .map(|stat| stat.start_ticks))
}

fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

fn pid_namespace() -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self/ns/pid")?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_round_trips_through_its_label() {
        let me = Owner::current().unwrap();
        assert_eq!(me.liveness(), Liveness::Alive);
        assert_eq!(me.to_string().parse::<Owner>().unwrap(), me);
    }

    #[test]
    fn a_reused_pid_is_not_the_owner() {
        let mut me = Owner::current().unwrap();
        me.start_ticks += 1;
        assert_eq!(me.liveness(), Liveness::Dead);
    }

    #[test]
    fn an_exited_process_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let mut owner = Owner::current().unwrap();
        owner.pid = child.id();
        owner.start_ticks = start_ticks(child.id()).unwrap().unwrap_or(0);
        child.wait().unwrap();
        assert_eq!(owner.liveness(), Liveness::Dead);
    }

    #[test]
    fn another_boot_is_dead_and_another_namespace_unknown() {
        let me = Owner::current().unwrap();
        let rebooted = Owner {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me.clone()
        };
        assert_eq!(rebooted.liveness(), Liveness::Dead);
        let elsewhere = Owner {
            pid_ns: me.pid_ns + 1,
            ..me
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
    }

    #[test]
    fn a_malformed_label_names_what_is_expected() {
        let error = "pid:12".parse::<Owner>().unwrap_err().to_string();
        assert!(error.contains("pid=N,start=N"), "{error}");
    }
}
