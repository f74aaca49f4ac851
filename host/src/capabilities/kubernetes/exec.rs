//! Commands in a pod through `pods/exec` over WebSocket, as host-owned executions.
//!
//! The exec URL is logged by API servers, so it carries nothing secret: the command's
//! environment travels over its stdin, read by a small `/bin/sh` preamble that also
//! enters the working directory and prints its pid (the command keeps it through
//! `exec`). `pods/exec` has no call to stop a command, and closing the stream does not
//! end it, so a timeout or a kill runs a second exec that freezes the command's whole
//! tree (found through `/proc` inside the pod) and kills it.
//!
//! What the host runs in the pod for itself ([`run`]: the kill, the usage reading) has
//! a time bound of its own: by then the agent may have replaced `/bin/sh` with
//! something that never answers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod as K8sPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, AttachedProcess};
use kube::Api;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::client;
use super::objects::CONTAINER;
use crate::capabilities::execution::{feed_stdin, Execution, Kill, MAX_CHUNK};
use crate::capabilities::invalid_spec;
use crate::wit::execution::{Output, OutputChunk};
use crate::wit::types::{Error, ExecRequest, ExitStatus, OutputPipe};

/// Chunks buffered between the pump and a plugin that is slow to read.
const BUFFERED_CHUNKS: usize = 16;
/// How long a killed command's output may take to end before the stream is dropped.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(5);
/// How long the exec that kills a command may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long starting a command may take once its exec is attached (passing the
/// environment on its stdin).
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the environment from stdin up to the marker line (`$0`), enters `$1`, prints
/// its pid and becomes the command (`$2...`). `read` takes one line at a time from a
/// pipe, so the command's own stdin starts right after the marker.
const PREAMBLE: &str = r#"e=
while IFS= read -r l; do
  [ "$l" = "$0" ] && break
  e="$e$l
"
done
eval "$e" || exit 127
cd -- "$1" || exit 126
shift
echo $$
exec "$@""#;

/// Freezes `$1` and every process below it (by parent, through `/proc`), then kills
/// them all: a stopped process cannot fork, so a tree is caught whole. Each process
/// found is put first in the list, so they are killed newest first and the root last:
/// a stopped member of a group that loses its root is woken by the kernel (SIGHUP,
/// SIGCONT), and must have its SIGKILL pending by then (see `docker::exec`).
const KILL_TREE: &str = r#"r=$1
case "$r" in ''|0|1|*[!0-9]*) exit 0;; esac
kill -STOP "$r" 2>/dev/null
f=" $r "
n=0
while [ $n -lt 50 ]; do
  n=$((n+1)); more=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$f" in *" $p "*) continue;; esac
    { read -r s < "$d/stat"; } 2>/dev/null || continue
    set -- ${s##*) }
    case "$f" in *" $2 "*) kill -STOP "$p" 2>/dev/null; f=" $p$f"; more=1;; esac
  done
  [ -z "$more" ] && break
done
kill -KILL $f 2>/dev/null
exit 0"#;

/// A pod to exec in.
#[derive(Clone)]
pub struct Target {
    pub api: Api<K8sPod>,
    pub name: String,
    /// The pod's workdir: where commands run unless they say otherwise.
    pub workdir: String,
}

impl Target {
    pub(super) async fn attach(
        &self,
        argv: Vec<String>,
        stdin: bool,
    ) -> Result<AttachedProcess, Error> {
        let params = AttachParams {
            container: Some(CONTAINER.into()),
            stdin,
            stdout: true,
            stderr: true,
            tty: false,
            ..Default::default()
        };
        client::checked(
            "starting a command in the pod",
            self.api.exec(&self.name, argv, &params),
        )
        .await
    }
}

/// `value` quoted for the shell.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The bytes sent first on stdin: one `export` per variable, then the marker.
fn env_block(request: &ExecRequest, marker: &str) -> Result<Vec<u8>, Error> {
    let mut block = String::new();
    for (i, var) in request.env.iter().enumerate() {
        crate::env_name::check(&var.name, crate::env_name::Rule::Shell)
            .map_err(|invalid| invalid_spec(&format!("env[{i}].name"), invalid.to_string()))?;
        if var.value.contains('\0') {
            return Err(invalid_spec(
                &format!("env[{i}].value"),
                "a variable cannot hold a NUL byte",
            ));
        }
        block.push_str(&format!("export {}={}\n", var.name, quoted(&var.value)));
    }
    block.push_str(marker);
    block.push('\n');
    Ok(block.into_bytes())
}

/// Starts `request` in the pod; its output streams into the returned execution.
pub async fn start(target: &Target, request: ExecRequest, id: String) -> Result<Execution, Error> {
    if request.argv.is_empty() || request.argv[0].is_empty() {
        return Err(invalid_spec("argv", "the command is empty"));
    }
    let cwd = crate::capabilities::docker::working_dir(&target.workdir, request.cwd.as_deref())?;
    let marker = format!("agentgate-env-{}", uuid::Uuid::new_v4().simple());
    let env = env_block(&request, &marker)?;
    let mut argv = vec!["/bin/sh".into(), "-c".into(), PREAMBLE.into(), marker, cwd];
    argv.extend(request.argv.iter().cloned());
    let mut attached = target.attach(argv, true).await?;
    let mut input = attached
        .stdin()
        .ok_or_else(|| Error::Failed("the exec has no stdin".into()))?;
    tokio::time::timeout(START_TIMEOUT, input.write_all(&env))
        .await
        .map_err(|_| {
            Error::TimedOut(format!(
                "passing the environment: the pod took no input for {}s",
                START_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| Error::Failed(format!("passing the environment: {e}")))?;
    let killer = Arc::new(TreeKiller {
        target: target.clone(),
        pid: AtomicU32::new(0),
    });
    // The preamble reads the environment from stdin, so there is always one to feed.
    let stdin = feed_stdin(input, request.stdin, request.keep_stdin_open).await;
    let timeout = request.timeout_ms.map(Duration::from_millis);
    let rx = pump(attached, killer.clone(), timeout);
    Ok(Execution::new(id, rx, stdin, killer))
}

/// Moves the command's output into a channel; ends with its exit status.
fn pump(
    mut attached: AttachedProcess,
    killer: Arc<TreeKiller>,
    timeout: Option<Duration>,
) -> mpsc::Receiver<Output> {
    let (tx, rx) = mpsc::channel(BUFFERED_CHUNKS);
    let stdout = attached.stdout();
    let stderr = attached.stderr();
    let status = attached.take_status();
    tokio::spawn(async move {
        let out = tokio::spawn(forward(
            stdout,
            OutputPipe::Stdout,
            tx.clone(),
            Some(killer.clone()),
        ));
        let err = tokio::spawn(forward(stderr, OutputPipe::Stderr, tx.clone(), None));
        let streams = async {
            let _ = out.await;
            let _ = err.await;
        };
        let mut timed_out = false;
        tokio::pin!(streams);
        let ended = match timeout {
            None => {
                streams.as_mut().await;
                true
            }
            Some(t) => tokio::time::timeout(t, streams.as_mut()).await.is_ok(),
        };
        if !ended {
            timed_out = true;
            killer.kill_now().await;
            if tokio::time::timeout(DRAIN_AFTER_KILL, streams.as_mut())
                .await
                .is_err()
            {
                attached.abort();
            }
        }
        let code = match status {
            Some(status) if !timed_out => tokio::time::timeout(DRAIN_AFTER_KILL, status)
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        let status = if timed_out {
            ExitStatus {
                code: None,
                signal: Some(libc::SIGKILL),
                timed_out: true,
            }
        } else {
            ExitStatus {
                code: code.as_ref().and_then(exit_code),
                signal: None,
                timed_out: false,
            }
        };
        let _ = tx.send(Output::Exited(status)).await;
        drop(attached);
    });
    rx
}

/// Sends what `reader` yields as chunks of `pipe`. On stdout the preamble's first line
/// is its pid, for `killer`, and is not passed on.
async fn forward(
    reader: Option<impl AsyncRead + Unpin>,
    pipe: OutputPipe,
    tx: mpsc::Sender<Output>,
    killer: Option<Arc<TreeKiller>>,
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut pid_line = killer.as_ref().map(|_| Vec::new());
    let mut buffer = vec![0u8; MAX_CHUNK];
    loop {
        let n = match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut data = &buffer[..n];
        if let Some(line) = &mut pid_line {
            match data.iter().position(|&b| b == b'\n') {
                None => {
                    line.extend_from_slice(data);
                    continue;
                }
                Some(end) => {
                    line.extend_from_slice(&data[..end]);
                    if let (Some(killer), Ok(pid)) =
                        (&killer, String::from_utf8_lossy(line).trim().parse::<u32>())
                    {
                        killer.pid.store(pid, Ordering::Release);
                    }
                    pid_line = None;
                    data = &data[end + 1..];
                }
            }
        }
        if data.is_empty() {
            continue;
        }
        let chunk = Output::Chunk(OutputChunk {
            pipe,
            data: data.to_vec(),
        });
        if tx.send(chunk).await.is_err() {
            // Nobody will read: the execution was dropped, which killed the command.
            return;
        }
    }
}

/// The exit code the API server reported.
pub(super) fn exit_code(status: &Status) -> Option<i32> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    status
        .details
        .as_ref()?
        .causes
        .iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))?
        .message
        .as_deref()?
        .parse()
        .ok()
}

/// Kills a command's tree inside the pod, by the pid its preamble printed.
pub struct TreeKiller {
    target: Target,
    pid: AtomicU32,
}

impl TreeKiller {
    /// Kills the tree and waits for the killing exec to end.
    async fn kill_now(&self) {
        let pid = self.pid.swap(0, Ordering::AcqRel);
        if pid > 1 {
            let _ = kill_tree(&self.target, pid).await;
        }
    }
}

impl Kill for TreeKiller {
    fn kill(&self) {
        let pid = self.pid.swap(0, Ordering::AcqRel);
        if pid <= 1 {
            return;
        }
        let target = self.target.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = kill_tree(&target, pid).await;
            });
        }
    }
}

async fn kill_tree(target: &Target, pid: u32) -> Result<(), Error> {
    let argv = [
        "/bin/sh",
        "-c",
        KILL_TREE,
        "agentgate-kill",
        &pid.to_string(),
    ]
    .map(String::from)
    .to_vec();
    run(target, argv, None, KILL_TIMEOUT).await.map(|_| ())
}

/// What a command the host runs for itself printed, and how it ended.
pub struct Captured {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `argv` in the pod for the host itself (no preamble), with `stdin` written
/// then closed, and collects its output; `TimedOut` past `within` (the exec is dropped
/// then; what it started ends with the pod).
pub async fn run(
    target: &Target,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
    within: Duration,
) -> Result<Captured, Error> {
    let what = argv.get(3).cloned().unwrap_or_default();
    tokio::time::timeout(within, run_unbounded(target, argv, stdin))
        .await
        .map_err(|_| {
            Error::TimedOut(format!(
                "the host's own command in the pod ({what}) did not end within {}s: the \
                 pod does not answer",
                within.as_secs()
            ))
        })?
}

async fn run_unbounded(
    target: &Target,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
) -> Result<Captured, Error> {
    let mut attached = target.attach(argv, stdin.is_some()).await?;
    if let (Some(data), Some(mut input)) = (stdin, attached.stdin()) {
        tokio::spawn(async move {
            let _ = input.write_all(&data).await;
            let _ = input.shutdown().await;
        });
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = attached.take_status();
    let (stdout, stderr) = (attached.stdout(), attached.stderr());
    let read_out = async {
        if let Some(mut r) = stdout {
            let _ = r.read_to_end(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(mut r) = stderr {
            let _ = r.read_to_end(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let code = match status {
        Some(status) => status.await.as_ref().and_then(exit_code),
        None => None,
    };
    Ok(Captured {
        code,
        stdout: out,
        stderr: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::types::EnvVar;

    fn request(env: &[(&str, &str)]) -> ExecRequest {
        ExecRequest {
            argv: vec!["env".into()],
            env: env
                .iter()
                .map(|(n, v)| EnvVar {
                    name: n.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            cwd: None,
            stdin: None,
            keep_stdin_open: false,
            timeout_ms: None,
        }
    }

    /// The block and the preamble, run by this machine's `sh` exactly as in a pod.
    fn through_preamble(env: &[(&str, &str)], stdin_after: &str, argv: &[&str]) -> String {
        let marker = "agentgate-env-test";
        let mut input = env_block(&request(env), marker).unwrap();
        input.extend_from_slice(stdin_after.as_bytes());
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", PREAMBLE, marker, "/"])
            .args(argv)
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn the_environment_arrives_whole_over_stdin_and_stdin_follows() {
        let tricky = "it's $HOME `id` \"q\"\nsecond line\n";
        let out = through_preamble(
            &[("TOKEN", tricky), ("EMPTY", "")],
            "the command's own stdin\n",
            &[
                "/bin/sh",
                "-c",
                "printf '%s|%s|' \"$TOKEN\" \"$EMPTY\"; cat; pwd",
            ],
        );
        let (pid, rest) = out.split_once('\n').unwrap();
        assert!(pid.parse::<u32>().is_ok(), "{out:?}");
        assert_eq!(rest, format!("{tricky}||the command's own stdin\n/\n"));
    }

    #[test]
    fn a_variable_name_that_is_no_name_is_refused() {
        for bad in ["", "A=B", "X;id", "1A", "A B"] {
            assert!(
                matches!(env_block(&request(&[(bad, "v")]), "m"), Err(Error::InvalidSpec(f)) if f.path == "env[0].name"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_tree_killer_kills_a_forking_tree_and_nothing_else() {
        let mut tree = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 60 & (sleep 60 & wait) & wait"])
            .spawn()
            .unwrap();
        let mut bystander = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", KILL_TREE, "agentgate-kill", &tree.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let ended = tree.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&ended),
            Some(libc::SIGKILL)
        );
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "a bystander was killed"
        );
        let _ = bystander.kill();
        let _ = bystander.wait();
    }
}
