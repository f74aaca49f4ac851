//! The host side of `agentgate:plugin/process`: start programs on this machine.
//!
//! Every process starts as the leader of a new process group, so a timeout or a cancel
//! kills the whole tree it spawned (grandchildren included) with one `killpg`. The
//! groups a plugin started are tracked per store and killed when the store goes away,
//! so cleanup does not depend on the plugin behaving.

pub mod cgroup;
mod isolation;
mod pump;

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use wasmtime::component::Resource;

use super::execution::{Execution, Kill};
use super::invalid_spec;
use crate::runtime::bindings::process::{Host, SpawnRequest};
use crate::runtime::bindings::types::Error;
use crate::runtime::PluginState;

pub use isolation::Isolation;

/// A process group started by the host.
pub struct ProcessGroup {
    pgid: libc::pid_t,
    finished: AtomicBool,
}

impl ProcessGroup {
    fn new(pgid: libc::pid_t) -> ProcessGroup {
        ProcessGroup {
            pgid,
            finished: AtomicBool::new(false),
        }
    }

    /// SIGKILLs every member. Returns false when the group was already gone.
    fn signal_kill(&self) -> bool {
        if self.finished.load(Ordering::Acquire) {
            return false;
        }
        // SAFETY: killpg has no memory-safety preconditions.
        let rc = unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
        if rc != 0 {
            // ESRCH: nobody left in the group; never signal this id again.
            self.finished.store(true, Ordering::Release);
        }
        rc == 0
    }
}

impl Kill for ProcessGroup {
    fn kill(&self) {
        self.signal_kill();
    }
}

/// The process groups one plugin store started. Dropping it kills them all.
#[derive(Default)]
pub struct ProcessGroups {
    groups: Mutex<Vec<Arc<ProcessGroup>>>,
}

impl ProcessGroups {
    fn track(&self, group: Arc<ProcessGroup>) {
        let mut groups = self.groups.lock().unwrap();
        groups.retain(|g| !g.finished.load(Ordering::Acquire));
        groups.push(group);
    }

    /// Kills every group still alive; returns how many were signalled.
    pub fn kill_all(&self) -> u32 {
        let groups = self.groups.lock().unwrap();
        groups.iter().filter(|g| g.signal_kill()).count() as u32
    }
}

impl Drop for ProcessGroups {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A validated spawn: what `spawn` needs once the WIT request has been checked.
struct Launch {
    argv: Vec<String>,
    cwd: std::path::PathBuf,
    env: Vec<(String, String)>,
    inherit_env: bool,
    stdin: Option<Vec<u8>>,
    keep_stdin_open: bool,
    timeout: Option<Duration>,
    isolation: Isolation,
}

impl Launch {
    fn from_request(request: SpawnRequest) -> Result<Launch, Error> {
        if request.argv.is_empty() || request.argv[0].is_empty() {
            return Err(invalid_spec("argv", "the command is empty"));
        }
        let cwd = Path::new(&request.cwd);
        if !cwd.is_absolute() {
            return Err(invalid_spec(
                "cwd",
                format!("{:?} is not an absolute path", request.cwd),
            ));
        }
        if !cwd.is_dir() {
            return Err(Error::Failed(format!(
                "working directory {} does not exist",
                cwd.display()
            )));
        }
        Ok(Launch {
            argv: request.argv,
            cwd: cwd.to_path_buf(),
            env: request.env.into_iter().map(|e| (e.name, e.value)).collect(),
            inherit_env: request.inherit_env,
            stdin: request.stdin,
            keep_stdin_open: request.keep_stdin_open,
            timeout: request.timeout_ms.map(Duration::from_millis),
            isolation: Isolation::from_request(request.isolation)?,
        })
    }
}

/// Starts `launch` in a new process group and returns its execution.
async fn spawn(launch: Launch, groups: &ProcessGroups, id: String) -> Result<Execution, Error> {
    let mut command = tokio::process::Command::new(&launch.argv[0]);
    command
        .args(&launch.argv[1..])
        .current_dir(&launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if !launch.inherit_env {
        command.env_clear();
    }
    command.envs(launch.env.iter().map(|(k, v)| (k, v)));
    launch.isolation.configure(&mut command, &launch.cwd)?;

    let mut child = command
        .spawn()
        .map_err(|e| launch.isolation.explain_spawn_error(&launch.argv[0], e))?;
    let pid = child
        .id()
        .ok_or_else(|| Error::Failed("the process exited at once".into()))?
        as libc::pid_t;
    let group = Arc::new(ProcessGroup::new(pid));
    groups.track(group.clone());

    // Initial stdin is written in the background when it is closed afterwards, so a
    // command that never reads it cannot block the plugin.
    let stdin = match (child.stdin.take(), launch.stdin, launch.keep_stdin_open) {
        (Some(mut pipe), Some(data), true) => {
            let _ = pipe.write_all(&data).await;
            Some(pipe)
        }
        (Some(mut pipe), Some(data), false) => {
            tokio::spawn(async move {
                let _ = pipe.write_all(&data).await;
            });
            None
        }
        (pipe, None, true) => pipe,
        // Dropping the pipe closes it: the command sees EOF.
        _ => None,
    };

    let output = pump::start(child, group.clone(), launch.timeout);
    let stdin = stdin.map(|s| Box::new(s) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>);
    Ok(Execution::new(id, output, stdin, group))
}

/// Resolves `program` like a shell would, on the host's PATH.
fn which(program: &str) -> Option<String> {
    let is_executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let path = Path::new(program);
        return is_executable(path).then(|| program.to_string());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
        .map(|p| p.display().to_string())
}

impl Host for PluginState {
    async fn spawn(
        &mut self,
        request: SpawnRequest,
    ) -> wasmtime::Result<Result<Resource<Execution>, Error>> {
        self.run.ensure_active()?;
        let launch = match Launch::from_request(request) {
            Ok(launch) => launch,
            Err(e) => return Ok(Err(e)),
        };
        let id = self.run.next_exec_id();
        match spawn(launch, &self.processes, id).await {
            Ok(execution) => Ok(Ok(self.table.push(execution)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn which(&mut self, program: String) -> wasmtime::Result<Option<String>> {
        self.run.ensure_active()?;
        Ok(which(&program))
    }

    async fn kill_all(&mut self) -> wasmtime::Result<u32> {
        Ok(self.processes.kill_all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::execution::Output;
    use crate::runtime::bindings::types::{ExitStatus, OutputPipe};

    fn launch(script: &str, timeout_ms: Option<u64>, isolation: Isolation) -> Launch {
        Launch {
            argv: script.split(' ').map(String::from).collect(),
            cwd: std::env::temp_dir(),
            env: vec![("ONLY_THIS".into(), "1".into())],
            inherit_env: false,
            stdin: None,
            keep_stdin_open: false,
            timeout: timeout_ms.map(Duration::from_millis),
            isolation,
        }
    }

    /// Runs to the end; returns stdout and the exit status.
    async fn run_to_end(launch: Launch) -> (String, ExitStatus) {
        let groups = ProcessGroups::default();
        let mut execution = spawn(launch, &groups, "exec-test".into()).await.unwrap();
        let mut stdout = Vec::new();
        loop {
            match execution.read(Duration::from_secs(10)).await {
                Output::Chunk(chunk) if chunk.pipe == OutputPipe::Stdout => {
                    stdout.extend(chunk.data)
                }
                Output::Exited(status) => {
                    return (String::from_utf8_lossy(&stdout).into_owned(), status)
                }
                _ => {}
            }
        }
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("definitely-not-a-program-xyz").is_none());
        assert_eq!(which("/bin/sh").as_deref(), Some("/bin/sh"));
    }

    #[tokio::test]
    async fn the_environment_is_exactly_what_was_given() {
        let (stdout, status) = run_to_end(launch("/usr/bin/env", None, Isolation::default())).await;
        assert_eq!(status.code, Some(0));
        assert_eq!(stdout.trim(), "ONLY_THIS=1");
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let mut sh = launch("/bin/sh -c", Some(300), Isolation::default());
        sh.argv.push("sleep 30 & echo $!; wait".into());
        let (stdout, status) = run_to_end(sh).await;
        assert!(status.timed_out, "{status:?}");
        assert_eq!(status.signal, Some(libc::SIGKILL));
        let grandchild: i32 = stdout.trim().parse().unwrap();
        // Dead means gone, or a zombie waiting for init to reap it.
        let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
        assert!(!running, "the grandchild survived: {state}");
    }

    #[tokio::test]
    async fn network_none_leaves_only_loopback() {
        let isolation = Isolation::from_request(crate::runtime::bindings::process::Isolation {
            readonly_paths: vec![],
            limits: None,
            network: Some(crate::runtime::bindings::types::NetworkMode::None),
        })
        .unwrap();
        let (stdout, status) =
            run_to_end(launch("/bin/cat /proc/self/net/dev", None, isolation)).await;
        assert_eq!(status.code, Some(0), "{stdout}");
        let interfaces: Vec<&str> = stdout
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(interfaces, ["lo"]);
    }

    #[test]
    fn limits_fail_closed_until_cgroups_exist() {
        let request = crate::runtime::bindings::process::Isolation {
            readonly_paths: vec![],
            limits: Some(crate::runtime::bindings::types::Resources {
                cpu_millicores: None,
                memory_bytes: Some(1 << 30),
                disk_bytes: None,
                pids: None,
                timeout_ms: None,
            }),
            network: None,
        };
        let error = Isolation::from_request(request).unwrap_err();
        assert!(
            matches!(error, Error::Unavailable(ref m) if m.contains("memory")),
            "{error:?}"
        );
    }
}
