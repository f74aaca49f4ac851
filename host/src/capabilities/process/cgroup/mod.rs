//! One cgroup per sandbox: the kernel's limits on memory, CPU and process count, its
//! usage counters, and a kill that reaches every descendant.
//!
//! Process groups and sessions are the agent's to change (`setsid`, double forks); a
//! cgroup is not, so it is what bounds an agent and what kills all of it. cgroup v2 is
//! used where its unified hierarchy offers the memory, cpu and pids controllers, v1
//! otherwise (the two speak different files: see `v1.rs` and `v2.rs`). Everything fails
//! closed: a limit that cannot be set is an error, never a skipped line.
//!
//! Hand-written rather than a cgroup crate because joining must happen between `fork`
//! and `exec`, where only async-signal-safe calls are allowed; the rest is a handful of
//! files per version.

mod clone_into;
mod hierarchy;
mod observed;
mod v1;
mod v2;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hierarchy::Layout;
pub use observed::{ObservedCgroup, ObservedUsage};

/// The folder, in each hierarchy, that holds every sandbox cgroup. It is shared by
/// concurrent runs, so it is created when missing and never removed.
const ROOT_FOLDER: &str = "agentgate";

/// How to get cgroups, for errors that find none usable.
pub const SETUP_HINT: &str = "run agentgate as root on a machine with cgroup2 mounted at \
    /sys/fs/cgroup offering the memory, cpu and pids controllers (the default of current \
    systemd distributions), or with the cgroup v1 memory, cpu, cpuacct and pids controllers \
    mounted; without root, start agentgate in a delegated cgroup (systemd: Delegate=yes, e.g. \
    `systemd-run --user -p Delegate=yes --scope agentgate ...`)";

/// Limits for one sandbox's cgroup. `pids` is always set (the caller defaults it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    /// Thousandths of one CPU: 1000 is one full core.
    pub cpu_millicores: Option<u32>,
    pub pids: u32,
}

/// A sample of what a cgroup's processes use, descendants included.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupUsage {
    /// CPU time of every process that ran in the cgroup, user and system.
    pub cpu_time_ns: u64,
    /// CPU time over wall time since the cgroup was created; 100 is one full core.
    pub cpu_percent: f64,
    pub memory_bytes: u64,
    pub peak_memory_bytes: u64,
    pub pids: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("invalid sandbox cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid sandbox limit: {0}")]
    InvalidLimit(String),
    #[error("no usable cgroups on this machine: {detail}; {}", SETUP_HINT)]
    Unavailable { detail: String },
    #[error(
        "sandbox cgroup {} already exists: another sandbox uses this name, or a crashed run \
         left it behind (remove it with rmdir once it holds no process)",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error("cannot {action} {}: {source}{hint}", path.display())]
    Io {
        action: String,
        path: PathBuf,
        #[source]
        source: io::Error,
        /// What to do about it, empty when there is nothing specific to say.
        hint: String,
    },
}

impl CgroupError {
    fn io(action: impl Into<String>, path: &Path, source: io::Error) -> CgroupError {
        let hint = match source.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => {
                format!("; this process may not manage cgroups here: {SETUP_HINT}")
            }
            Some(libc::EBUSY) if path.ends_with("cgroup.subtree_control") => {
                "; cgroup v2 enables controllers only below a cgroup that holds no processes \
                 itself, and agentgate moved itself out (into `agentgate-host` below it) but \
                 other processes remain there: start agentgate in a delegated cgroup of its \
                 own (systemd: `systemd-run --user -p Delegate=yes --scope agentgate ...`), \
                 or run it as root"
                    .to_string()
            }
            Some(libc::ENOENT) => {
                "; the controller for this file is not available in this cgroup".to_string()
            }
            _ => String::new(),
        };
        CgroupError::Io {
            action: action.into(),
            path: path.to_path_buf(),
            source,
            hint,
        }
    }
}

/// A sandbox's cgroup (one directory per v1 hierarchy, one in v2). Dropping it kills
/// every process in it and removes the directories.
#[derive(Debug)]
pub struct Cgroup {
    backend: Backend,
    /// The directories this cgroup made, in creation order; the only ones it removes.
    dirs: Vec<PathBuf>,
    /// The file of every directory that `enter_self` writes after `fork`.
    entry_files: Vec<CString>,
    /// v2: the directory, for starting processes in it rather than moving them there.
    v2_dir: Option<OwnedFd>,
    created: Instant,
    /// Highest memory sampled, for kernels without a peak counter.
    peak_seen: AtomicU64,
}

#[derive(Debug)]
enum Backend {
    V1(v1::Dirs),
    V2(v2::Dir),
}

impl Backend {
    fn new(layout: &Layout, name: &str) -> Backend {
        let dir = |base: &Path| base.join(ROOT_FOLDER).join(name);
        match layout {
            Layout::V2 { base } => Backend::V2(v2::Dir {
                base: base.clone(),
                path: dir(base),
            }),
            Layout::V1 {
                memory,
                cpu,
                cpuacct,
                pids,
                freezer,
            } => Backend::V1(v1::Dirs {
                memory: dir(memory),
                cpu: dir(cpu),
                cpuacct: dir(cpuacct),
                pids: dir(pids),
                freezer: freezer.as_deref().map(dir),
            }),
        }
    }

    /// The directories `layout` names themselves (an observed cgroup's).
    fn at(layout: &Layout) -> Backend {
        match layout {
            Layout::V2 { base } => Backend::V2(v2::Dir {
                base: base.clone(),
                path: base.clone(),
            }),
            Layout::V1 {
                memory,
                cpu,
                cpuacct,
                pids,
                freezer,
            } => Backend::V1(v1::Dirs {
                memory: memory.clone(),
                cpu: cpu.clone(),
                cpuacct: cpuacct.clone(),
                pids: pids.clone(),
                freezer: freezer.clone(),
            }),
        }
    }

    /// The file a process writes "0" to in order to join. v1's `tasks` moves only the
    /// writing thread, which the kernel does without the global write lock that
    /// `cgroup.procs` takes and its RCU grace period (10-20 ms on a busy machine, per
    /// spawn). v2 has no such file for domain cgroups, so it uses `cgroup.procs`.
    fn entry_file_name(&self) -> &'static str {
        match self {
            Backend::V1(_) => "tasks",
            Backend::V2(_) => "cgroup.procs",
        }
    }

    /// Every directory to create, each once (co-mounted v1 controllers share one).
    fn dirs(&self) -> Vec<PathBuf> {
        match self {
            Backend::V2(dir) => vec![dir.path.clone()],
            Backend::V1(dirs) => {
                let mut all: Vec<PathBuf> = Vec::new();
                let wanted = [&dirs.memory, &dirs.cpu, &dirs.cpuacct, &dirs.pids];
                for dir in wanted.into_iter().chain(&dirs.freezer) {
                    if !all.contains(dir) {
                        all.push(dir.clone());
                    }
                }
                all
            }
        }
    }
}

impl Cgroup {
    /// Creates a fresh cgroup `agentgate/<name>` with the limits: v2 where the unified
    /// hierarchy has the memory, cpu and pids controllers, v1 otherwise. `name` is one
    /// path component, e.g. `<run-id>-<n>`.
    pub fn create(name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        check_name(name)?;
        check_limits(limits)?;
        Cgroup::create_in(&Layout::of_this_process()?, name, limits)
    }

    fn create_in(
        layout: &Layout,
        name: &str,
        limits: &CgroupLimits,
    ) -> Result<Cgroup, CgroupError> {
        // Built up step by step so that a failure part way drops it, which removes what
        // was made so far.
        let mut cgroup = Cgroup {
            backend: Backend::new(layout, name),
            dirs: Vec::new(),
            entry_files: Vec::new(),
            v2_dir: None,
            created: Instant::now(),
            peak_seen: AtomicU64::new(0),
        };
        if let Backend::V2(dir) = &cgroup.backend {
            v2::delegate_controllers(&dir.base)?;
        }
        for dir in cgroup.backend.dirs() {
            if let Some(parent) = dir.parent() {
                make_dir(parent, true)?;
            }
            make_dir(&dir, false)?;
            let entry = dir.join(cgroup.backend.entry_file_name());
            let entry_file = CString::new(entry.as_os_str().as_bytes()).map_err(|_| {
                CgroupError::InvalidName {
                    name: name.to_string(),
                    reason: "the cgroup path contains a NUL byte",
                }
            })?;
            cgroup.dirs.push(dir);
            cgroup.entry_files.push(entry_file);
        }
        match &cgroup.backend {
            Backend::V1(dirs) => dirs.apply(limits)?,
            Backend::V2(dir) => {
                dir.apply(limits)?;
                cgroup.v2_dir = Some(v2::open(&dir.path)?);
            }
        }
        cgroup.created = Instant::now();
        Ok(cgroup)
    }

    /// Puts the calling process into the cgroup (every hierarchy of it).
    ///
    /// Async-signal-safe, for a `pre_exec` closure between `fork` and `exec`: only
    /// system calls on paths and descriptors prepared at `create`, no allocation. v1
    /// moves the calling thread (the child of a `fork` has one, so that moves the
    /// process). v2 continues in a new child started inside the cgroup, the caller
    /// staying behind as its waiter (see [`clone_into`]); where the kernel cannot do
    /// that, the process moves itself.
    pub fn enter_self(&self) -> io::Result<()> {
        if let Some(dir) = &self.v2_dir {
            match clone_into::continue_in(dir.as_raw_fd()) {
                Ok(()) => return Ok(()),
                Err(e) if clone_into::unsupported(&e) => {}
                Err(e) => return Err(e),
            }
        }
        for file in &self.entry_files {
            // SAFETY: `file` is a NUL-terminated path that outlives the call; open,
            // write and close are async-signal-safe. "0" names the writing thread.
            unsafe {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                // Read errno before close can overwrite it.
                let error = io::Error::last_os_error();
                libc::close(fd);
                if written != 1 {
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Current usage. The peak is the kernel's where it keeps one (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`), else the highest sampled.
    pub fn usage(&self) -> io::Result<CgroupUsage> {
        let raw = match &self.backend {
            Backend::V1(dirs) => dirs.usage()?,
            Backend::V2(dir) => dir.usage()?,
        };
        let peak_seen = self
            .peak_seen
            .fetch_max(raw.memory_bytes, Ordering::Relaxed);
        let elapsed = self.created.elapsed().as_nanos().max(1) as f64;
        Ok(CgroupUsage {
            cpu_time_ns: raw.cpu_time_ns,
            cpu_percent: raw.cpu_time_ns as f64 / elapsed * 100.0,
            memory_bytes: raw.memory_bytes,
            peak_memory_bytes: raw
                .kernel_peak
                .unwrap_or(0)
                .max(peak_seen)
                .max(raw.memory_bytes),
            pids: raw.pids,
        })
    }

    /// True when the kernel OOM-killed a process of this cgroup.
    pub fn oom_killed(&self) -> bool {
        match &self.backend {
            Backend::V1(dirs) => dirs.oom_kills(),
            Backend::V2(dir) => dir.oom_kills(),
        }
        .is_some_and(|kills| kills > 0)
    }

    /// Kills every process in the cgroup, including ones that forked or `setsid`ed away,
    /// and waits (bounded) until none is left.
    pub fn kill_all(&self) {
        match &self.backend {
            Backend::V1(dirs) => dirs.kill_all(),
            Backend::V2(dir) => dir.kill_all(),
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.dirs.is_empty() {
            self.kill_all();
        }
        for dir in self.dirs.iter().rev() {
            remove_dir(dir);
        }
    }
}

/// Where this process would put sandbox cgroups: the version and the directories, as
/// `agentgate doctor` shows them.
pub fn placement() -> Result<String, CgroupError> {
    Ok(Layout::of_this_process()?.to_string())
}

/// Finding the cgroups a dead host left behind (for `agentgate gc`).
impl Cgroup {
    /// Kills every process in, and removes, each sandbox cgroup whose name starts
    /// with `prefix` (a run's id and `-`), in the hierarchies this process would use.
    /// Returns the names it found. Only for runs whose host is gone: a live run's
    /// cgroup would be killed too.
    pub fn reclaim(prefix: &str) -> Result<Vec<String>, CgroupError> {
        check_name(prefix)?;
        let layout = Layout::of_this_process()?;
        let mut names = std::collections::BTreeSet::new();
        // Any name gives the folders that hold every sandbox cgroup.
        for dir in Backend::new(&layout, prefix).dirs() {
            let Some(parent) = dir.parent() else { continue };
            let entries = match std::fs::read_dir(parent) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CgroupError::io("list", parent, e)),
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(prefix) && entry.path().is_dir() {
                    names.insert(name);
                }
            }
        }
        for name in &names {
            let backend = Backend::new(&layout, name);
            let dirs = backend.dirs().into_iter().filter(|d| d.is_dir()).collect();
            // Dropping it kills what is inside and removes the directories.
            drop(Cgroup {
                backend,
                dirs,
                entry_files: Vec::new(),
                v2_dir: None,
                created: Instant::now(),
                peak_seen: AtomicU64::new(0),
            });
        }
        Ok(names.into_iter().collect())
    }
}

/// The numbers each version reads; `Cgroup::usage` derives the rest.
struct RawUsage {
    cpu_time_ns: u64,
    memory_bytes: u64,
    kernel_peak: Option<u64>,
    pids: u32,
}

fn check_name(name: &str) -> Result<(), CgroupError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 128 {
        Some("it is longer than 128 bytes")
    } else if name.starts_with('.') {
        Some("it starts with '.'")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Some("use only letters, digits, '-', '_' and '.' (one path component)")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CgroupError::InvalidName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn check_limits(limits: &CgroupLimits) -> Result<(), CgroupError> {
    if limits.memory_bytes == Some(0) {
        return Err(CgroupError::InvalidLimit(
            "a memory limit of 0 bytes leaves nothing to run; set sandbox.resources.memory above 0"
                .into(),
        ));
    }
    if limits.pids == 0 {
        return Err(CgroupError::InvalidLimit(
            "a pids limit of 0 leaves nothing to run; set sandbox.resources.pids above 0".into(),
        ));
    }
    if let Some(millicores) = limits.cpu_millicores {
        cpu_quota(millicores)?;
    }
    Ok(())
}

/// CFS bandwidth for `millicores`: `(quota, period)` in microseconds. The period is the
/// kernel's default 100 ms, stretched to its maximum 1 s when the quota would fall
/// under the kernel's 1 ms minimum.
fn cpu_quota(millicores: u32) -> Result<(u64, u64), CgroupError> {
    if millicores == 0 {
        return Err(CgroupError::InvalidLimit(
            "a cpu limit of 0 never lets the agent run; set sandbox.resources.cpu above 0".into(),
        ));
    }
    let millicores = u64::from(millicores);
    Ok(if millicores * 100 >= 1000 {
        (millicores * 100, 100_000)
    } else {
        (millicores * 1000, 1_000_000)
    })
}

/// Makes `dir`; an existing one is fine only when `may_exist` (the shared parent).
fn make_dir(dir: &Path, may_exist: bool) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if may_exist {
                Ok(())
            } else {
                Err(CgroupError::Exists {
                    path: dir.to_path_buf(),
                })
            }
        }
        Err(e) => Err(CgroupError::io("create the cgroup", dir, e)),
    }
}

/// Removes a cgroup directory, retrying briefly while the kernel drains exiting tasks.
fn remove_dir(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            // Nothing to report to: the directory stays, empty of processes or not.
            Err(_) => return,
        }
    }
}

fn write(file: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(file, value).map_err(|e| CgroupError::io(format!("write {value:?} to"), file, e))
}

fn read_u64(file: &Path) -> io::Result<u64> {
    let text = std::fs::read_to_string(file)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds {:?}, not a number", file.display(), text.trim()),
        )
    })
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// Whether any swap device is on (`/proc/swaps` lists more than its header).
fn swap_active() -> bool {
    std::fs::read_to_string("/proc/swaps").map_or(true, |text| text.lines().count() > 1)
}

/// The error for a memory limit that swap would extend.
fn swap_unaccounted(file: &Path) -> CgroupError {
    CgroupError::Unavailable {
        detail: format!(
            "swap is on but {} is missing, so swap would extend the memory limit; turn swap \
             off or boot with swap accounting (swapaccount=1)",
            file.display()
        ),
    }
}

/// SIGKILLs every process listed in `procs` until none is left (bounded), with the
/// members frozen for the first round when a freezer is given, so none forks between
/// the listing and the kill.
fn kill_members(procs: &Path, freezer: Option<Freezer<'_>>) {
    // The usual case at the end of a run: nothing left, nothing to freeze.
    if read_pids(procs).is_empty() {
        return;
    }
    let frozen = freezer.as_ref().is_some_and(Freezer::freeze);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut thawed = !frozen;
    loop {
        let pids = read_pids(procs);
        for &pid in &pids {
            // SAFETY: kill has no memory-safety preconditions; the pid is in the cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if !thawed {
            // A frozen task dies of its pending SIGKILL only once thawed.
            if let Some(freezer) = &freezer {
                freezer.thaw();
            }
            thawed = true;
        }
        if pids.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn read_pids(procs: &Path) -> Vec<libc::pid_t> {
    std::fs::read_to_string(procs)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|&pid| pid > 0)
        .collect()
}

/// A freezer file and the words that freeze and thaw it (v1 `freezer.state`, v2
/// `cgroup.freeze`).
struct Freezer<'a> {
    file: &'a Path,
    freeze: &'static str,
    thaw: &'static str,
    /// How to ask whether freezing finished: the file and the content that says so.
    frozen_when: (&'a Path, &'static str),
}

impl Freezer<'_> {
    /// Freezes and waits (bounded) until the kernel says every task is frozen.
    fn freeze(&self) -> bool {
        if std::fs::write(self.file, self.freeze).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        let (file, word) = self.frozen_when;
        while Instant::now() < deadline {
            if std::fs::read_to_string(file).is_ok_and(|text| text.contains(word)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.file, self.thaw);
    }
}

#[cfg(test)]
mod tests;
