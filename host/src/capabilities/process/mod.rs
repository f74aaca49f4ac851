//! The host side of `agentgate:plugin/process`: start programs on this machine.
//!
//! Every process starts as the leader of a new process group, so a timeout or a cancel
//! kills the whole tree it spawned (grandchildren included) with one `killpg`. A sealed
//! process ([`isolation`]) is run by bubblewrap in namespaces of its own ([`sealed`],
//! [`seccomp`], [`network`]) and in the plugin's cgroup ([`cgroup`]), which limits,
//! measures and kills it and everything it starts, `setsid` and double forks included.
//! What a plugin started is tracked per store and killed when the store goes away, so
//! cleanup does not depend on the plugin behaving. A prerequisite the machine lacks
//! (bubblewrap, user namespaces, cgroups) fails the spawn with `unavailable`, and
//! `agentgate doctor` asks the same functions ([`bubblewrap`], [`UserNamespaces`],
//! [`probe_sealed`], ...).

pub(crate) mod cgroup;
mod init_file;
mod isolation;
pub(crate) mod landlock;
mod memfd;
mod network;
mod pump;
mod scope;
mod sealed;
pub(crate) mod seccomp;
pub(crate) mod unit;
mod userns;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::Resource;

use super::execution::{feed_stdin, Execution, Kill};
use super::invalid_spec;
use crate::capabilities::view::TableAs;
use crate::capabilities::PluginView;
use crate::host_paths::BindScope;
use crate::wit::execution::Execution as WitExecution;
use crate::wit::process::{Host, SpawnRequest};
use crate::wit::types::{Error, NetworkMode, ResourceUsage};
use scope::ProcessScope;

use cgroup::{Cgroup, CgroupError, CgroupLimits};
pub use init_file::init_file;
pub use isolation::{default_limits, Isolation};
pub use network::{open_tun, slirp4netns, SLIRP4NETNS_FIX, TUN_FIX};
pub use sealed::{bubblewrap, BUBBLEWRAP_FIX, MIN_BUBBLEWRAP};
pub use seccomp::SeccompPrograms;
pub use userns::UserNamespaces;

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

/// What one plugin store started: process groups, and the cgroup its sealed processes
/// share. Dropping it kills them all.
#[derive(Default)]
pub struct ProcessGroups {
    groups: Mutex<Vec<Arc<ProcessGroup>>>,
    cgroup: Mutex<Option<(CgroupLimits, Arc<Cgroup>)>>,
}

impl ProcessGroups {
    fn track(&self, group: Arc<ProcessGroup>) {
        let mut groups = self.groups.lock().unwrap();
        groups.retain(|g| !g.finished.load(Ordering::Acquire));
        groups.push(group);
    }

    /// The store's cgroup, created with `limits` by the first sealed spawn. Later
    /// spawns share it, so they must ask for the same limits.
    fn cgroup(&self, name: &str, limits: &CgroupLimits) -> Result<Arc<Cgroup>, Error> {
        let mut slot = self.cgroup.lock().unwrap();
        if let Some((created_with, cgroup)) = slot.as_ref() {
            if created_with != limits {
                return Err(invalid_spec(
                    "isolation.limits",
                    "every sealed process of a sandbox shares one cgroup; ask for the same limits each time",
                ));
            }
            return Ok(cgroup.clone());
        }
        let cgroup = Arc::new(Cgroup::create(name, limits).map_err(cgroup_unavailable)?);
        *slot = Some((limits.clone(), cgroup.clone()));
        Ok(cgroup)
    }

    /// Resource use of the sealed processes, from their cgroup.
    pub fn usage(&self) -> Result<ResourceUsage, Error> {
        let slot = self.cgroup.lock().unwrap();
        let (_, cgroup) = slot.as_ref().ok_or_else(|| {
            Error::Unavailable(
                "no sealed process has been started, so there is no usage to report".into(),
            )
        })?;
        let usage = cgroup
            .usage()
            .map_err(|e| Error::Failed(format!("reading the sandbox's cgroup: {e}")))?;
        Ok(ResourceUsage {
            cpu_percent: usage.cpu_percent,
            memory_bytes: usage.memory_bytes,
            peak_memory_bytes: usage.peak_memory_bytes,
            pids: usage.pids,
            oom_killed: cgroup.oom_killed(),
        })
    }

    /// Kills every group still alive, and everything in the cgroup; returns how many
    /// groups were signalled.
    pub fn kill_all(&self) -> u32 {
        let signalled = {
            let groups = self.groups.lock().unwrap();
            groups.iter().filter(|g| g.signal_kill()).count() as u32
        };
        if let Some((_, cgroup)) = self.cgroup.lock().unwrap().as_ref() {
            cgroup.kill_all();
        }
        signalled
    }

    /// Kills everything and removes the cgroup, once the sandbox is gone. The store
    /// may outlive the run, its cgroup must not.
    pub fn close(&self) {
        self.kill_all();
        drop(self.cgroup.lock().unwrap().take());
    }
}

/// A store's process groups are its state of this capability: the provider's sandbox
/// gone, they are closed.
impl crate::capabilities::StoreState for ProcessGroups {
    fn close(&self) {
        ProcessGroups::close(self);
    }
}

impl Drop for ProcessGroups {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A sandbox cgroup that could not be made: the machine lacks cgroups this process may
/// use, unless the name or limits were wrong.
fn cgroup_unavailable(error: CgroupError) -> Error {
    let message = format!("cannot limit and track the sandbox's processes: {error}");
    match error {
        CgroupError::Unavailable { .. } | CgroupError::Io { .. } => super::lacking(message),
        _ => Error::Unavailable(message),
    }
}

/// A validated spawn: what `spawn` needs once the WIT request has been checked.
struct Launch {
    argv: Vec<String>,
    /// The file an unsealed spawn runs: `argv[0]`, or the file the plugin's scope
    /// resolved it to on the host's PATH (see [`PluginView::check_scope`]).
    program: String,
    cwd: std::path::PathBuf,
    env: Vec<(String, String)>,
    inherit_env: bool,
    stdin: Option<Vec<u8>>,
    keep_stdin_open: bool,
    timeout: Option<Duration>,
    isolation: Isolation,
    /// The run's egress proxy: the process gets it instead of any network.
    egress: Option<Arc<crate::capabilities::EgressGate>>,
}

impl Launch {
    /// `scope` is what a sealed process may bind (the run's, see [`RunContext`]).
    ///
    /// [`RunContext`]: crate::capabilities::RunContext
    fn from_request(request: SpawnRequest, scope: &BindScope) -> Result<Launch, Error> {
        if request.argv.is_empty() || request.argv[0].is_empty() {
            return Err(invalid_spec("argv", "the command is empty"));
        }
        let isolation = Isolation::from_request(request.isolation, scope)?;
        let cwd = Path::new(&request.cwd);
        if !cwd.is_absolute() {
            return Err(invalid_spec(
                "cwd",
                format!("{:?} is not an absolute path", request.cwd),
            ));
        }
        // A sealed process's cwd is a path in its own view; bubblewrap checks it there.
        if matches!(isolation, Isolation::Host) && !cwd.is_dir() {
            return Err(Error::Failed(format!(
                "working directory {} does not exist",
                cwd.display()
            )));
        }
        for (i, var) in request.env.iter().enumerate() {
            crate::env_name::check(&var.name, crate::env_name::Rule::Exec)
                .map_err(|invalid| invalid_spec(&format!("env[{i}].name"), invalid.to_string()))?;
        }
        if request.inherit_env && !matches!(isolation, Isolation::Host) {
            return Err(invalid_spec(
                "inherit-env",
                "a sealed process never inherits the host's environment",
            ));
        }
        Ok(Launch {
            program: request.argv[0].clone(),
            argv: request.argv,
            cwd: cwd.to_path_buf(),
            env: request.env.into_iter().map(|e| (e.name, e.value)).collect(),
            inherit_env: request.inherit_env,
            stdin: request.stdin,
            keep_stdin_open: request.keep_stdin_open,
            timeout: request.timeout_ms.map(Duration::from_millis),
            isolation,
            egress: None,
        })
    }
}

/// The command that runs `launch`, and what must be done once it started.
struct Prepared {
    command: tokio::process::Command,
    /// Descriptors bubblewrap reads (its options, seccomp programs): kept open until
    /// the child has been spawned, since it inherits them, then closed. (The init's is
    /// the process's, kept open for every spawn.)
    handed_to_bwrap: Vec<OwnedFd>,
    bridge: Option<NetworkSetup>,
}

/// What the host does to a sealed process's network namespace before its command runs.
enum NetworkSetup {
    /// `network: bridge`: attach slirp4netns.
    Bridge(network::BridgePipes),
    /// An egress allowlist: let the relays listen on low ports of its loopback.
    EgressRelays(network::BridgePipes),
}

/// What a sealed process of a run with an egress allowlist is given: the proxy's
/// folder and the name files, whose memfds must stay open until bubblewrap has run.
fn sealed_egress(
    gate: &crate::capabilities::EgressGate,
) -> Result<(sealed::SealedEgress, [OwnedFd; 2]), Error> {
    let unavailable =
        |e: std::io::Error| Error::Unavailable(format!("preparing the egress files: {e}"));
    let hosts = memfd::sealed(
        c"agentgate-hosts",
        landlock::hosts_file(&gate.allow).as_bytes(),
    )
    .map_err(unavailable)?;
    let resolv_conf = memfd::sealed(
        c"agentgate-resolv-conf",
        crate::capabilities::EGRESS_RESOLV_CONF.as_bytes(),
    )
    .map_err(unavailable)?;
    let egress = sealed::SealedEgress {
        socket_dir: gate.socket_dir.clone(),
        allow: gate.allow.clone(),
        hosts: hosts.as_raw_fd(),
        resolv_conf: resolv_conf.as_raw_fd(),
    };
    Ok((egress, [hosts, resolv_conf]))
}

/// Builds the command: the program itself, or bubblewrap around it.
fn prepare(launch: &Launch, groups: &ProcessGroups, cgroup_name: &str) -> Result<Prepared, Error> {
    let Isolation::Sealed {
        view,
        limits,
        network,
    } = &launch.isolation
    else {
        if launch.egress.is_some() {
            return Err(Error::Denied(
                "this run's TaskSpec has sandbox.egress: every process of its sandbox must be sealed (`isolation.sealed`), so that its only way out is the egress proxy".into(),
            ));
        }
        let mut command = tokio::process::Command::new(&launch.program);
        command
            .arg0(&launch.argv[0])
            .args(&launch.argv[1..])
            .current_dir(&launch.cwd);
        return Ok(Prepared {
            command,
            handed_to_bwrap: Vec::new(),
            bridge: None,
        });
    };
    let bwrap = sealed::bubblewrap()?;
    UserNamespaces::of_this_kernel()
        .check()
        .map_err(super::lacking)?;
    let cgroup = groups.cgroup(cgroup_name, limits)?;
    // With an egress allowlist the process gets loopback only, whatever it asked for;
    // IP sockets stay allowed, since loopback is where the relays listen.
    let (network, sockets) = match &launch.egress {
        Some(_) => (&NetworkMode::None, seccomp::Sockets::Network),
        None => (network, seccomp::Sockets::for_network(*network)),
    };
    let egress = launch.egress.as_deref().map(sealed_egress).transpose()?;
    let seccomp = seccomp::SeccompPrograms::build(sockets)?;
    let bridge = match network {
        _ if egress.is_some() => Some(NetworkSetup::EgressRelays(network::BridgePipes::new()?)),
        NetworkMode::Bridge => {
            network::slirp4netns()?;
            Some(NetworkSetup::Bridge(network::BridgePipes::new()?))
        }
        NetworkMode::None | NetworkMode::Host => None,
    };
    let init = init_file()?;
    let mut fds = sealed::BwrapFds {
        seccomp: seccomp.fds.iter().map(AsRawFd::as_raw_fd).collect(),
        init: Some(init.fd()),
        egress: egress.as_ref().map(|(egress, _)| egress.clone()),
        ..Default::default()
    };
    if let Some(NetworkSetup::Bridge(pipes) | NetworkSetup::EgressRelays(pipes)) = &bridge {
        fds.info = Some(pipes.info_write.as_raw_fd());
        fds.block = Some(pipes.block_read.as_raw_fd());
    }
    // SAFETY: geteuid/getegid have no preconditions.
    let ids = unsafe { (libc::geteuid(), libc::getegid()) };
    let invocation = view.bwrap_args(
        &launch.argv,
        &launch.cwd.to_string_lossy(),
        *network == NetworkMode::Host,
        ids,
        &fds,
    );
    let options = memfd::sealed(c"agentgate-bwrap-args", &invocation.options_data()?)
        .map_err(|e| Error::Unavailable(format!("preparing the sandbox's options: {e}")))?;
    let mut command = tokio::process::Command::new(bwrap);
    command
        .arg("--args")
        .arg(options.as_raw_fd().to_string())
        .arg("--")
        .args(&invocation.command)
        .current_dir("/");
    let inherited = fds.seccomp.iter().copied().chain(view.bind_fds());
    let bwrap_reads = [init.fd(), options.as_raw_fd()];
    let egress_files = egress.iter().flat_map(|(e, _)| [e.hosts, e.resolv_conf]);
    for fd in inherited
        .chain(egress_files)
        .chain(fds.info)
        .chain(fds.block)
        .chain(bwrap_reads)
    {
        inherit_fd(&mut command, fd);
    }
    // SAFETY: the closure makes only async-signal-safe calls (prctl, and the cgroup's
    // open/write/close on paths prepared beforehand). `init` is moved in only to keep
    // its descriptor open until the child has it.
    unsafe {
        command.pre_exec(move || {
            let _ = &init;
            // The sandbox dies with the host, even when the host is killed outright.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            cgroup.enter_self()
        });
    }
    let mut handed_to_bwrap = seccomp.fds;
    handed_to_bwrap.push(options);
    handed_to_bwrap.extend(egress.into_iter().flat_map(|(_, files)| files));
    Ok(Prepared {
        command,
        handed_to_bwrap,
        bridge,
    })
}

/// Starts `launch` in a new process group and returns its execution.
async fn spawn(
    launch: Launch,
    groups: &ProcessGroups,
    id: String,
    cgroup_name: &str,
) -> Result<Execution, Error> {
    let Prepared {
        mut command,
        handed_to_bwrap,
        bridge,
    } = prepare(&launch, groups, cgroup_name)?;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if !launch.inherit_env {
        command.env_clear();
    }
    command.envs(launch.env.iter().map(|(k, v)| (k, v)));

    let mut child = command
        .spawn()
        .map_err(|e| explain_spawn_error(&launch, e))?;
    drop(handed_to_bwrap);
    let pid = child
        .id()
        .ok_or_else(|| Error::Failed("the process exited at once".into()))?
        as libc::pid_t;
    let group = Arc::new(ProcessGroup::new(pid));
    groups.track(group.clone());
    let attached = match bridge {
        Some(NetworkSetup::Bridge(pipes)) => pipes.attach().await.map(Some),
        Some(NetworkSetup::EgressRelays(pipes)) => pipes.open_low_ports().await.map(|()| None),
        None => Ok(None),
    };
    let bridge = match attached {
        Ok(bridge) => bridge,
        Err(e) => {
            group.kill();
            let _ = child.wait().await;
            return Err(e);
        }
    };

    let stdin = match child.stdin.take() {
        Some(pipe) => feed_stdin(pipe, launch.stdin, launch.keep_stdin_open).await,
        None => None,
    };
    let output = pump::start(child, group.clone(), launch.timeout, bridge);
    Ok(Execution::new(id, output, stdin, group))
}

/// Starts `/bin/true` sealed exactly as a sandbox's command is (bubblewrap, user
/// namespaces, seccomp, the Landlock init, a cgroup of its own, `network`) and waits
/// for it: `agentgate doctor`'s proof that the pieces it checked one by one also work
/// together. Ok when it exited 0; otherwise what it printed.
pub async fn probe_sealed(network: NetworkMode) -> Result<(), Error> {
    let isolation = Isolation::from_request(
        crate::wit::process::Isolation {
            sealed: Some(crate::wit::process::SealedView { binds: Vec::new() }),
            limits: None,
            network: Some(network),
        },
        // It binds nothing of the host beyond the sealed view's system folders.
        &crate::host_paths::BindScope::default(),
    )?;
    let launch = Launch {
        argv: vec!["/bin/true".into()],
        program: "/bin/true".into(),
        cwd: "/".into(),
        env: Vec::new(),
        inherit_env: false,
        stdin: None,
        keep_stdin_open: false,
        timeout: Some(Duration::from_secs(30)),
        isolation,
        egress: None,
    };
    let groups = ProcessGroups::default();
    let name = format!(
        "doctor-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    );
    let mut execution = spawn(launch, &groups, "doctor".into(), &name).await?;
    // What bubblewrap or the init printed, on either pipe, says what was refused.
    let mut printed = Vec::new();
    let status = loop {
        match execution.read(Duration::from_secs(30)).await {
            crate::wit::execution::Output::Chunk(chunk) => printed.extend(chunk.data),
            crate::wit::execution::Output::Exited(status) => break status,
            _ => {}
        }
    };
    groups.close();
    if status.code == Some(0) {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&printed);
    Err(Error::Unavailable(format!(
        "a sealed `/bin/true` {}{}",
        match (status.code, status.signal, status.timed_out) {
            (_, _, true) => "timed out".to_string(),
            (Some(code), _, _) => format!("exited {code}"),
            (None, Some(signal), _) => format!("was killed by signal {signal}"),
            _ => "ended without a status".to_string(),
        },
        match said.trim() {
            "" => String::new(),
            said => format!(": {said}"),
        }
    )))
}

/// Lets the child keep `fd` across exec (every fd the host opens is close-on-exec).
fn inherit_fd(command: &mut tokio::process::Command, fd: RawFd) {
    // SAFETY: fcntl is async-signal-safe and touches only the child's descriptor table.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Turns a spawn failure into a message that says whether the sandbox was the cause.
fn explain_spawn_error(launch: &Launch, error: std::io::Error) -> Error {
    let program = &launch.argv[0];
    match (&launch.isolation, error.kind()) {
        (Isolation::Host, std::io::ErrorKind::NotFound) => {
            Error::Failed(format!("cannot start {program:?}: no such program"))
        }
        (Isolation::Sealed { .. }, _) => {
            Error::Unavailable(format!("cannot start the sandbox for {program:?}: {error}"))
        }
        _ => Error::Failed(format!("cannot start {program:?}: {error}")),
    }
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

impl PluginView<'_> {
    /// Checks an unsealed `launch` against the plugin's `process` scope; when it lists
    /// programs, pins the program to the file on the host's PATH that was checked, so a
    /// `PATH` in the plugin's environment cannot swap another one in.
    fn check_scope(&self, launch: &mut Launch) -> Result<(), Error> {
        if !matches!(launch.isolation, Isolation::Host) {
            return Ok(());
        }
        // A store without the scope (never granted) reaches nothing: fail closed.
        let scope = (self.scopes.of::<ProcessScope>().cloned()).unwrap_or_else(scope::narrowest);
        if scope.allows_any_unsealed() {
            return Ok(());
        }
        let resolved = which(&launch.argv[0]).unwrap_or_else(|| launch.argv[0].clone());
        scope
            .check_unsealed(&self.plugin, &resolved)
            .map_err(|d| self.scope_denied(d))?;
        launch.program = resolved;
        Ok(())
    }
}

impl Host for PluginView<'_> {
    async fn spawn(
        &mut self,
        request: SpawnRequest,
    ) -> wasmtime::Result<Result<Resource<WitExecution>, Error>> {
        self.run.ensure_active()?;
        let mut launch = match Launch::from_request(request, &self.run.bind_scope()) {
            Ok(launch) => launch,
            Err(e) => return Ok(Err(e)),
        };
        if let Err(e) = self.check_scope(&mut launch) {
            return Ok(Err(e));
        }
        if let Some(gate) = self.run.egress() {
            launch.egress = Some(gate.clone());
            let proxy_vars = crate::capabilities::EgressGate::environment();
            launch
                .env
                .retain(|(name, _)| !proxy_vars.iter().any(|(n, _)| n == name));
            launch.env.extend(proxy_vars);
        }
        let id = self.run.next_exec_id();
        let cgroup_name = format!("{}-{}", self.run.run_id, self.plugin);
        match spawn(launch, self.state::<ProcessGroups>()?, id, &cgroup_name).await {
            Ok(execution) => Ok(Ok(self.table.push_as(execution)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn which(&mut self, program: String) -> wasmtime::Result<Option<String>> {
        self.run.ensure_active()?;
        Ok(which(&program))
    }

    async fn kill_all(&mut self) -> wasmtime::Result<u32> {
        Ok(self.state::<ProcessGroups>()?.kill_all())
    }

    async fn usage(&mut self) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        self.run.ensure_active()?;
        Ok(self.state::<ProcessGroups>()?.usage())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::execution::Output;
    use crate::wit::process::{Isolation as IsolationRequest, SealedView};
    use crate::wit::types::{ExitStatus, Mount, OutputPipe, Resources};

    fn launch(script: &str, timeout_ms: Option<u64>, isolation: Isolation) -> Launch {
        Launch {
            argv: script.split(' ').map(String::from).collect(),
            program: script.split(' ').next().unwrap_or_default().into(),
            cwd: if matches!(isolation, Isolation::Host) {
                std::env::temp_dir()
            } else {
                "/".into()
            },
            env: vec![("ONLY_THIS".into(), "1".into())],
            inherit_env: false,
            stdin: None,
            keep_stdin_open: false,
            timeout: timeout_ms.map(Duration::from_millis),
            isolation,
            egress: None,
        }
    }

    /// A sealed isolation whose binds' sources are the run's own folders.
    fn sealed(binds: Vec<Mount>, limits: Option<Resources>, network: NetworkMode) -> Isolation {
        let folders: Vec<std::path::PathBuf> =
            binds.iter().map(|b| b.source.clone().into()).collect();
        Isolation::from_request(
            IsolationRequest {
                sealed: Some(SealedView { binds }),
                limits,
                network: Some(network),
            },
            &BindScope::only(&folders),
        )
        .unwrap()
    }

    /// Runs to the end; returns stdout and the exit status.
    async fn run_to_end(launch: Launch, groups: &ProcessGroups) -> (String, ExitStatus) {
        let mut execution = spawn(launch, groups, "exec-test".into(), &unique_cgroup())
            .await
            .unwrap();
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

    fn unique_cgroup() -> String {
        format!(
            "unit-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        )
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("definitely-not-a-program-xyz").is_none());
        assert_eq!(which("/bin/sh").as_deref(), Some("/bin/sh"));
    }

    #[tokio::test]
    async fn the_environment_is_exactly_what_was_given() {
        let groups = ProcessGroups::default();
        for isolation in [Isolation::Host, sealed(vec![], None, NetworkMode::None)] {
            let (stdout, status) =
                run_to_end(launch("/usr/bin/env", None, isolation), &groups).await;
            assert_eq!(status.code, Some(0), "{stdout}");
            // bubblewrap tells the command where it starts, as a shell would.
            let env: Vec<&str> = stdout.lines().filter(|l| *l != "PWD=/").collect();
            assert_eq!(env, ["ONLY_THIS=1"]);
        }
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let groups = ProcessGroups::default();
        let mut sh = launch("/bin/sh -c", Some(300), Isolation::Host);
        sh.argv.push("sleep 30 & echo $!; wait".into());
        let (stdout, status) = run_to_end(sh, &groups).await;
        assert!(status.timed_out, "{status:?}");
        assert_eq!(status.signal, Some(libc::SIGKILL));
        let grandchild: i32 = stdout.trim().parse().unwrap();
        // Dead means gone, or a zombie waiting for init to reap it. SIGKILL is
        // delivered at once but a busy kernel may take a moment to tear the process
        // down, so the state is polled for a bounded time (this times nothing).
        let dead = || crate::procfs::is_dead(grandchild);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !dead() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let stat = crate::procfs::Stat::of(grandchild);
        assert!(dead(), "the grandchild survived: {stat:?}");
    }

    #[tokio::test]
    async fn a_sealed_process_sees_only_its_view_and_loopback() {
        let groups = ProcessGroups::default();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker"), "in view").unwrap();
        let bind = Mount {
            source: dir.path().display().to_string(),
            target: "/workspace".into(),
            readonly: true,
        };
        let mut sh = launch(
            "/bin/sh -c",
            None,
            sealed(vec![bind], None, NetworkMode::None),
        );
        sh.argv.push(
            "cat /workspace/marker; echo; ls /; tail -n +3 /proc/net/dev | cut -d: -f1; \
             echo x > /workspace/new || echo read-only"
                .into(),
        );
        sh.cwd = "/workspace".into();
        let (stdout, status) = run_to_end(sh, &groups).await;
        assert_eq!(status.code, Some(0), "{stdout}");
        assert!(stdout.starts_with("in view"), "{stdout}");
        for absent in ["root", "home", "run", "var", "srv"] {
            assert!(
                !stdout.lines().any(|l| l == absent),
                "/{absent} visible: {stdout}"
            );
        }
        let interfaces: Vec<&str> = stdout
            .lines()
            .map(str::trim)
            .filter(|l| *l == "lo" || l.starts_with("eth"))
            .collect();
        assert_eq!(interfaces, ["lo"], "{stdout}");
        assert!(stdout.contains("read-only"), "{stdout}");
        assert!(!dir.path().join("new").exists());
    }

    #[tokio::test]
    async fn sealed_processes_share_one_cgroup_that_measures_and_limits_them() {
        let groups = ProcessGroups::default();
        let limits = Resources {
            cpu_millicores: None,
            memory_bytes: Some(256 << 20),
            disk_bytes: None,
            pids: Some(64),
            timeout_ms: None,
        };
        let mut busy = launch(
            "/bin/sh -c",
            None,
            sealed(vec![], Some(limits), NetworkMode::None),
        );
        busy.argv
            .push("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done".into());
        let (stdout, status) = run_to_end(busy, &groups).await;
        assert_eq!(status.code, Some(0), "{stdout}");
        let usage = groups.usage().unwrap();
        assert!(usage.cpu_percent > 0.0, "{usage:?}");
        assert!(usage.peak_memory_bytes > 0, "{usage:?}");
        assert!(!usage.oom_killed);

        // A second spawn must not ask for other limits than the shared cgroup has.
        let mut other = limits;
        other.pids = Some(65);
        let error = Launch::from_request(
            SpawnRequest {
                argv: vec!["true".into()],
                cwd: "/".into(),
                env: vec![],
                inherit_env: false,
                stdin: None,
                keep_stdin_open: false,
                timeout_ms: None,
                isolation: IsolationRequest {
                    sealed: Some(SealedView { binds: vec![] }),
                    limits: Some(other),
                    network: None,
                },
            },
            &BindScope::default(),
        )
        .map(|launch| prepare(&launch, &groups, "unused").map(|_| ()));
        assert!(
            matches!(error, Ok(Err(Error::InvalidSpec(ref f))) if f.path == "isolation.limits"),
            "{:?}",
            error.map(|r| r.err())
        );
    }

    #[test]
    fn a_variable_name_a_process_cannot_hold_is_refused() {
        let spawn = |name: &str| SpawnRequest {
            argv: vec!["true".into()],
            cwd: "/".into(),
            env: vec![crate::wit::types::EnvVar {
                name: name.into(),
                value: "v".into(),
            }],
            inherit_env: false,
            stdin: None,
            keep_stdin_open: false,
            timeout_ms: None,
            isolation: IsolationRequest {
                sealed: None,
                limits: None,
                network: None,
            },
        };
        for bad in ["", "A=B", "A\0B"] {
            let result = Launch::from_request(spawn(bad), &BindScope::default());
            assert!(
                matches!(&result, Err(Error::InvalidSpec(f)) if f.path == "env[0].name"),
                "{bad:?}"
            );
        }
        let launch = Launch::from_request(spawn("GOOD_1"), &BindScope::default()).unwrap();
        assert_eq!(launch.env, [("GOOD_1".to_owned(), "v".to_owned())]);
    }
}
