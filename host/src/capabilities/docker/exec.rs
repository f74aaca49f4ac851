//! Commands run in a container (`docker exec`), as host-owned executions.
//!
//! The engine multiplexes stdout and stderr over one connection in frames; bollard's
//! decoder reassembles a frame split across reads, and the pump here passes each
//! frame on as chunks of at most [`MAX_CHUNK`]. The engine has no call to stop an
//! exec, so a timeout or a kill stops the command from the host: the engine reports
//! the exec's host pid, and the command and everything it started are frozen and
//! killed there (the container's own init and other execs are left alone).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::client;
use super::container::Container;
use super::init;
use crate::capabilities::execution::{feed_stdin, Execution, Kill, MAX_CHUNK};
use crate::capabilities::invalid_spec;
use crate::procfs::{self, Stat};
use crate::wit::execution::{Output, OutputChunk};
use crate::wit::types::{Error, ExecRequest, ExitStatus, OutputPipe};

/// Chunks buffered between the pump and a plugin that is slow to read.
const BUFFERED_CHUNKS: usize = 16;

/// How long a killed command's output may take to end before the exec is given up.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(5);

/// `env` (`NAME=value`s) with the egress proxy's variables in place of its own.
fn with_proxy_variables(env: Vec<String>) -> Vec<String> {
    let proxy = crate::capabilities::EgressGate::environment();
    env.into_iter()
        .filter(|var| {
            let name = var.split_once('=').map_or(var.as_str(), |(n, _)| n);
            !proxy.iter().any(|(p, _)| p == name)
        })
        .chain(proxy.iter().map(|(name, value)| format!("{name}={value}")))
        .collect()
}

/// Starts `request` in `container`.
pub async fn start(
    container: &Container,
    request: ExecRequest,
    id: String,
) -> Result<Execution, Error> {
    if request.argv.is_empty() || request.argv[0].is_empty() {
        return Err(invalid_spec("argv", "the command is empty"));
    }
    let env = request
        .env
        .iter()
        .enumerate()
        .map(|(i, v)| {
            crate::env_name::check(&v.name, crate::env_name::Rule::Exec)
                .map(|()| format!("{}={}", v.name, v.value))
                .map_err(|invalid| invalid_spec(&format!("env[{i}].name"), invalid.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let env = match container.network.egress {
        true => with_proxy_variables(env),
        false => env,
    };
    let cwd = working_dir(&container.workdir, request.cwd.as_deref())?;
    let attach_stdin = request.stdin.is_some() || request.keep_stdin_open;
    let docker = &container.docker;
    let created = docker
        .create_exec(
            &container.id,
            ExecConfig {
                // Through the init, which loads the host's seccomp filter first.
                cmd: Some(match container.network.egress {
                    true => init::wrap_for_egress(&request.argv, false, None)?,
                    false => init::wrap(&request.argv, container.network.mode, false)?,
                }),
                env: Some(env),
                working_dir: Some(cwd),
                attach_stdin: Some(attach_stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                privileged: Some(false),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| client::failed("creating the exec", e))?;
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: Some(MAX_CHUNK),
            }),
        )
        .await
        .map_err(|e| client::failed("starting the exec", e))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(Error::Failed("the Docker engine detached the exec".into()));
    };
    let killer = Arc::new(ExecKiller::default());
    // The exec runs once it is attached; its host pid is what a kill needs. It is
    // asked for while the command runs (a kill asked for before the answer is done
    // when it comes, see `ExecKiller`).
    tokio::spawn({
        let (docker, exec_id, killer) = (docker.clone(), created.id.clone(), killer.clone());
        async move {
            if let Ok(inspect) = docker.inspect_exec(&exec_id).await {
                killer.set_pid(inspect.pid.unwrap_or(0));
            }
        }
    });

    // Without stdin the exec was not attached to one: shutting that stream would end
    // the whole attachment, output included.
    let stdin = if attach_stdin {
        feed_stdin(input, request.stdin, request.keep_stdin_open).await
    } else {
        None
    };
    let timeout = request.timeout_ms.map(Duration::from_millis);
    let rx = pump(docker.clone(), created.id, output, killer.clone(), timeout);
    Ok(Execution::new(id, rx, stdin, killer))
}

/// The exec's working directory: the container's workdir, or `cwd` under it.
pub(crate) fn working_dir(workdir: &str, cwd: Option<&str>) -> Result<String, Error> {
    let Some(cwd) = cwd else {
        return Ok(workdir.to_string());
    };
    if cwd.split('/').any(|c| c == "..") {
        return Err(invalid_spec(
            "cwd",
            format!("`{cwd}` must not contain `..`"),
        ));
    }
    Ok(if cwd.starts_with('/') {
        cwd.to_string()
    } else {
        format!("{}/{cwd}", workdir.trim_end_matches('/'))
    })
}

type OutputStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

/// Moves the exec's output into a channel; ends with its exit status.
fn pump(
    docker: Docker,
    exec_id: String,
    mut output: OutputStream,
    killer: Arc<ExecKiller>,
    timeout: Option<Duration>,
) -> mpsc::Receiver<Output> {
    let (tx, rx) = mpsc::channel(BUFFERED_CHUNKS);
    tokio::spawn(async move {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut timed_out = false;
        let mut drain_until: Option<Instant> = None;
        loop {
            let wake = drain_until.or(if timed_out { None } else { deadline });
            let next = tokio::select! {
                next = output.next() => next,
                _ = sleep_until(wake) => {
                    if drain_until.is_some() {
                        break;
                    }
                    timed_out = true;
                    if !killer.has_pid() {
                        // Started too quickly for the first look: ask again.
                        if let Ok(inspect) = docker.inspect_exec(&exec_id).await {
                            killer.set_pid(inspect.pid.unwrap_or(0));
                        }
                    }
                    killer.kill();
                    drain_until = Some(Instant::now() + DRAIN_AFTER_KILL);
                    continue;
                }
            };
            let (pipe, message) = match next {
                None | Some(Err(_)) => break,
                Some(Ok(LogOutput::StdOut { message })) => (OutputPipe::Stdout, message),
                Some(Ok(LogOutput::StdErr { message })) => (OutputPipe::Stderr, message),
                Some(Ok(_)) => continue,
            };
            for data in message.chunks(MAX_CHUNK) {
                let chunk = Output::Chunk(OutputChunk {
                    pipe,
                    data: data.to_vec(),
                });
                if tx.send(chunk).await.is_err() {
                    // Nobody will read: the execution was dropped.
                    killer.kill();
                    return;
                }
            }
        }
        let code = exit_code(&docker, &exec_id).await;
        let status = if timed_out {
            ExitStatus {
                code: None,
                signal: Some(libc::SIGKILL),
                timed_out: true,
            }
        } else {
            ExitStatus {
                code,
                signal: None,
                timed_out: false,
            }
        };
        let _ = tx.send(Output::Exited(status)).await;
    });
    rx
}

/// The exit code once the engine has recorded it. The output ends as the command
/// exits and the engine records the exit a moment later, so the first waits are short.
async fn exit_code(docker: &Docker, exec_id: &str) -> Option<i32> {
    let mut wait = Duration::from_millis(1);
    let give_up = Instant::now() + Duration::from_secs(1);
    loop {
        match docker.inspect_exec(exec_id).await {
            Ok(inspect) if inspect.running != Some(true) => {
                return inspect.exit_code.and_then(|c| i32::try_from(c).ok())
            }
            Ok(_) if Instant::now() < give_up => tokio::time::sleep(wait).await,
            _ => return None,
        }
        wait = (wait * 2).min(Duration::from_millis(20));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Kills an exec's process tree from the host, by the host pid the engine reported.
/// A kill asked for before the pid is known is remembered and done when it arrives;
/// a tree is killed at most once, so a pid learnt late (and maybe reused since) is
/// never killed after the kill was done.
#[derive(Default)]
pub struct ExecKiller {
    /// The pid; 0 while unknown, [`KILL_WHEN_KNOWN`] when a kill waits for it,
    /// [`KILLED`] once the kill was done.
    pid: AtomicI32,
}

/// [`ExecKiller::pid`] when a kill came before the pid.
const KILL_WHEN_KNOWN: i32 = -1;
/// [`ExecKiller::pid`] once the tree was killed.
const KILLED: i32 = -2;

impl ExecKiller {
    fn has_pid(&self) -> bool {
        self.pid.load(Ordering::Acquire) > 1
    }

    fn set_pid(&self, pid: i64) {
        let pid = i32::try_from(pid).unwrap_or(0);
        if pid <= 1 {
            return;
        }
        let waiting = self
            .pid
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
            .err()
            == Some(KILL_WHEN_KNOWN);
        if waiting
            && self
                .pid
                .compare_exchange(KILL_WHEN_KNOWN, KILLED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            kill_tree(pid);
        }
    }
}

impl Kill for ExecKiller {
    fn kill(&self) {
        let mut now = self.pid.load(Ordering::Acquire);
        loop {
            let next = if now > 1 || now == KILLED {
                KILLED
            } else {
                KILL_WHEN_KNOWN
            };
            match self
                .pid
                .compare_exchange(now, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(changed) => now = changed,
            }
        }
        if now > 1 {
            kill_tree(now);
        }
    }
}

/// How long [`kill_tree`] keeps freezing a tree before it kills what it froze, however
/// slowly the processes stop (a loaded machine) or however fast they fork.
const FREEZE_BUDGET: Duration = Duration::from_secs(5);

/// Freezes `root` and every descendant until no new one appears, then kills them all.
///
/// A stopped process cannot fork, so a listing taken once every process listed before
/// has been seen stopped is complete: the tree is frozen when such a listing finds no
/// new process. A fork bomb is caught whole. Killing only after the whole tree is
/// frozen keeps children from being reparented out of reach.
///
/// A process waiting in the kernel (`D`) also counts as stopped: it handles the pending
/// stop before it runs any code of its own, so it cannot fork first. That is where a
/// shell waits for a child it made with `vfork` (dash does, for simple commands), and
/// that child was stopped before it could exec: waiting for the shell to show `T`
/// would wait forever.
fn kill_tree(root: libc::pid_t) {
    let deadline = std::time::Instant::now() + FREEZE_BUDGET;
    let settled = |pid: &libc::pid_t| {
        Stat::of(*pid).is_none_or(|stat| stat.is_stopped_or_dead() || stat.state == 'D')
    };
    let mut frozen = HashSet::new();
    // In the order found: each process after its parent.
    let mut found = Vec::new();
    loop {
        while !frozen.iter().all(settled) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let new: Vec<_> = descendants(root)
            .into_iter()
            .filter(|pid| !frozen.contains(pid))
            .collect();
        let out_of_time = std::time::Instant::now() >= deadline;
        for &pid in &new {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            frozen.insert(pid);
            found.push(pid);
        }
        if new.is_empty() || out_of_time {
            break;
        }
    }
    // Children before parents, the root last. When a process group loses the member
    // that tied it to another group (here the root), the kernel wakes its stopped
    // members with SIGHUP and SIGCONT; one that ignores SIGHUP would run, and fork,
    // unless its SIGKILL is already pending.
    for &pid in found.iter().rev() {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// `root` (while alive) and every live process below it, each after its parent, from
/// the host's /proc.
fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    let mut alive = HashSet::new();
    // Without a readable /proc there is nothing to be found, so nothing to stop.
    for pid in procfs::pids().into_iter().flatten() {
        let Some(stat) = Stat::of(pid) else {
            continue;
        };
        if !stat.is_dead() {
            alive.insert(pid);
        }
        children.entry(stat.parent).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if alive.contains(&pid) {
            out.push(pid);
        }
        if let Some(kids) = children.get(&pid) {
            stack.extend(kids);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn cwd_is_under_the_workdir() {
        assert_eq!(working_dir("/workspace", None).unwrap(), "/workspace");
        assert_eq!(
            working_dir("/workspace/", Some("src")).unwrap(),
            "/workspace/src"
        );
        assert_eq!(working_dir("/workspace", Some("/tmp")).unwrap(), "/tmp");
        assert!(matches!(
            working_dir("/workspace", Some("../etc")),
            Err(Error::InvalidSpec(f)) if f.path == "cwd"
        ));
    }

    #[test]
    fn a_kill_before_the_pid_is_done_when_it_arrives_and_never_twice() {
        use std::os::unix::process::ExitStatusExt;
        let sleeper = || {
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap()
        };
        let mut first = sleeper();
        let killer = ExecKiller::default();
        killer.kill();
        assert!(!killer.has_pid());
        killer.set_pid(first.id().into());
        assert_eq!(first.wait().unwrap().signal(), Some(libc::SIGKILL));
        // A pid learnt after the kill was done (the same look answered twice, or a pid
        // reused since) is left alone.
        let mut second = sleeper();
        killer.set_pid(second.id().into());
        killer.kill();
        assert!(second.try_wait().unwrap().is_none());
        second.kill().unwrap();
        let _ = second.wait();
    }

    #[test]
    fn a_tree_is_killed_to_the_last_grandchild() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & sleep 60 & wait"])
            .spawn()
            .unwrap();
        let root = child.id() as libc::pid_t;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while descendants(root).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let tree = descendants(root);
        assert_eq!(tree.len(), 3, "{tree:?}");
        kill_tree(root);
        let _ = child.wait();
        assert!(descendants(root).is_empty());
        // SIGKILL is delivered when the process next runs; on a loaded machine
        // that may be a moment after kill_tree returns.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !tree[1..].iter().all(|&pid| procfs::is_dead(pid))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        for &pid in &tree[1..] {
            assert!(procfs::is_dead(pid), "{pid} survived: {:?}", Stat::of(pid));
        }
    }

    #[test]
    fn a_forking_tree_is_frozen_whole_and_killed() {
        // Every shell keeps forking copies of itself (to a bounded depth) while it is
        // killed; one that slipped out would be reparented and keep the group alive.
        // They ignore SIGHUP, as a hostile agent would: the kernel sends SIGHUP and
        // SIGCONT to the stopped members of a group that lost its tie to its parent's.
        let script = "trap '' HUP; f() { [ $1 -lt 5 ] || exec sleep 60; \
                      for i in 1 2 3; do (f $(($1 + 1))) & sleep 0.02; done; wait; }; f 0";
        let mut child = std::process::Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .spawn()
            .unwrap();
        let root = child.id() as libc::pid_t;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while descendants(root).len() < 20 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        kill_tree(root);
        let _ = child.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !live_members(root).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left: Vec<_> = live_members(root)
            .into_iter()
            .map(|pid| (pid, Stat::of(pid).map(|s| (s.state, s.parent))))
            .collect();
        assert!(
            left.is_empty(),
            "left alive (pid, (state, parent)): {left:?}"
        );
    }

    /// Live processes in process group `group`, wherever they were reparented.
    fn live_members(group: libc::pid_t) -> Vec<libc::pid_t> {
        let member = |pid| Stat::of(pid).is_some_and(|s| s.process_group == group && !s.is_dead());
        procfs::pids().unwrap().filter(|&pid| member(pid)).collect()
    }
}
