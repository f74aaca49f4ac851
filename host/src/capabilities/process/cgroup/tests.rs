//! Real cgroups and real processes: each test creates its own cgroup, runs shell
//! programs in it, and reads the kernel's answer.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::procfs::Stat;

const MIB: u64 = 1024 * 1024;

/// A cgroup for one test, or `None` where this machine gives none and we are not in CI
/// (a developer's unprivileged shell). Under `CI=true` a missing cgroup is a failure.
fn cgroup(tag: &str, limits: CgroupLimits) -> Option<Arc<Cgroup>> {
    let name = format!("test-{}-{tag}", std::process::id());
    match Cgroup::create(&name, &limits) {
        Ok(cgroup) => Some(Arc::new(cgroup)),
        Err(e @ (CgroupError::Unavailable { .. } | CgroupError::Io { .. }))
            if std::env::var("CI").as_deref() != Ok("true") =>
        {
            eprintln!("NOT RUN (no writable cgroups here, and CI is not set): {e}");
            None
        }
        Err(e) => panic!("cannot create a test cgroup: {e}"),
    }
}

fn only_pids(pids: u32) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: None,
        cpu_millicores: None,
        pids,
    }
}

/// `sh -c script`, moved into `cgroup` between fork and exec.
fn spawn_in(cgroup: &Arc<Cgroup>, script: &str, stdout: Stdio) -> Child {
    let mut command = Command::new("sh");
    command
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null());
    let cgroup = Arc::clone(cgroup);
    // SAFETY: enter_self is async-signal-safe (open/write/close, no allocation).
    unsafe { command.pre_exec(move || cgroup.enter_self()) };
    command.spawn().expect("spawn sh")
}

/// `R`, `S`, `Z`, ... from `/proc/<pid>/stat`, or `None` when the process is gone.
fn process_state(pid: i32) -> Option<char> {
    Stat::of(pid).map(|stat| stat.state)
}

fn session_of(pid: i32) -> Option<i32> {
    Stat::of(pid).map(|stat| stat.session)
}

fn pids_dir(cgroup: &Cgroup) -> &Path {
    match &cgroup.backend {
        Backend::V1(dirs) => &dirs.pids,
        Backend::V2(dir) => &dir.path,
    }
}

#[test]
fn a_memory_hog_is_oom_killed_and_reported() {
    let limits = CgroupLimits {
        memory_bytes: Some(32 * MIB),
        ..only_pids(64)
    };
    let Some(cgroup) = cgroup("oom", limits) else {
        return;
    };
    assert!(!cgroup.oom_killed(), "a fresh cgroup reports no OOM kill");
    // Bounded at 200 MB, so a limit that does not hold cannot take the machine down.
    let mut hog = spawn_in(
        &cgroup,
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived",
        Stdio::piped(),
    );
    let mut said = String::new();
    std::io::Read::read_to_string(hog.stdout.as_mut().unwrap(), &mut said).unwrap();
    let status = hog.wait().unwrap();
    assert!(!status.success(), "the hog ran to the end: {status:?}");
    assert_eq!(said, "", "the hog survived");
    assert!(cgroup.oom_killed(), "the OOM kill is not reported");
    let usage = cgroup.usage().unwrap();
    eprintln!("32 MiB hog: {status:?}, {usage:?}");
    assert!(
        usage.peak_memory_bytes <= 32 * MIB,
        "peak {} over the 32 MiB limit",
        usage.peak_memory_bytes
    );
    assert!(usage.peak_memory_bytes > 16 * MIB, "{usage:?}");
}

#[test]
fn a_pids_limit_stops_a_fork_loop() {
    let Some(cgroup) = cgroup("pids", only_pids(20)) else {
        return;
    };
    let mut bomb = spawn_in(
        &cgroup,
        "i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; wait",
        Stdio::null(),
    );
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut refused = 0;
    while Instant::now() < deadline && refused == 0 {
        most = most.max(cgroup.usage().unwrap().pids);
        let events = std::fs::read_to_string(pids_dir(&cgroup).join("pids.events")).unwrap();
        refused = keyed(&events, "max").unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    most = most.max(cgroup.usage().unwrap().pids);
    eprintln!("pids limit 20: at most {most} seen, {refused} forks refused");
    assert!(refused > 0, "no fork was refused at the limit");
    assert!(most <= 20, "{most} processes in a cgroup limited to 20");
    assert!(
        most >= 10,
        "only {most} processes started; the loop did not run"
    );
    cgroup.kill_all();
    bomb.wait().unwrap();
    // The orphaned sleeps may linger as zombies (counted in pids.current) until their
    // new parent reaps them; none is a live member.
    assert_eq!(
        read_pids(&pids_dir(&cgroup).join("cgroup.procs")),
        Vec::<i32>::new()
    );
}

#[test]
fn a_busy_loop_shows_cpu_time_and_memory() {
    let Some(cgroup) = cgroup("busy", only_pids(16)) else {
        return;
    };
    let mut busy = spawn_in(&cgroup, "while :; do :; done", Stdio::null());
    std::thread::sleep(Duration::from_secs(1));
    let usage = cgroup.usage().unwrap();
    eprintln!("unlimited busy loop for 1 s: {usage:?}");
    assert!(usage.cpu_time_ns > 0, "{usage:?}");
    assert!(usage.cpu_percent > 0.0, "{usage:?}");
    assert!(usage.memory_bytes > 0, "{usage:?}");
    assert!(usage.peak_memory_bytes >= usage.memory_bytes, "{usage:?}");
    assert_eq!(usage.pids, 1, "{usage:?}");
    cgroup.kill_all();
    assert_eq!(busy.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(!cgroup.oom_killed());
}

#[test]
fn a_cpu_limit_of_200m_holds_a_busy_loop_well_under_one_core() {
    let limits = CgroupLimits {
        cpu_millicores: Some(200),
        ..only_pids(16)
    };
    let Some(cgroup) = cgroup("cpu", limits) else {
        return;
    };
    // Two loops, so that without the limit they could take both cores.
    let mut busy = spawn_in(
        &cgroup,
        "while :; do :; done & while :; do :; done",
        Stdio::null(),
    );
    // The machine is shared, so a low share alone proves nothing: wait for the kernel
    // to say it throttled the cgroup at its quota.
    let cpu_stat = match &cgroup.backend {
        Backend::V1(dirs) => dirs.cpu.join("cpu.stat"),
        Backend::V2(dir) => dir.path.join("cpu.stat"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let throttled = loop {
        std::thread::sleep(Duration::from_millis(500));
        let stat = std::fs::read_to_string(&cpu_stat).unwrap();
        let throttled = keyed(&stat, "nr_throttled").unwrap();
        if throttled > 0 || Instant::now() >= deadline {
            break throttled;
        }
    };
    let usage = cgroup.usage().unwrap();
    eprintln!("200m, two busy loops: throttled {throttled} times, {usage:?}");
    cgroup.kill_all();
    busy.wait().unwrap();
    assert!(
        throttled > 0,
        "the 200m quota never throttled two busy loops"
    );
    assert!(usage.cpu_time_ns > 0, "{usage:?}");
    assert!(usage.cpu_percent < 50.0, "200m let through {usage:?}");
}

#[test]
fn kill_all_reaches_a_setsid_double_forked_grandchild() {
    let Some(cgroup) = cgroup("setsid", only_pids(16)) else {
        return;
    };
    let mut parent = spawn_in(
        &cgroup,
        "setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!'",
        Stdio::piped(),
    );
    let mut line = String::new();
    BufReader::new(parent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let escaped: i32 = line.trim().parse().expect("the grandchild's pid");
    parent.wait().unwrap();
    // It left our session and outlived its parent: no process group kill reaches it.
    let state = process_state(escaped);
    assert!(matches!(state, Some('S' | 'R')), "state {state:?}");
    assert_ne!(session_of(escaped), session_of(std::process::id() as i32));

    cgroup.kill_all();
    let state = process_state(escaped);
    assert!(matches!(state, None | Some('Z')), "still {state:?}");
    // pids.current still counts a zombie until its new parent reaps it; cgroup.procs not.
    assert_eq!(
        read_pids(&pids_dir(&cgroup).join("cgroup.procs")),
        Vec::<i32>::new()
    );
}

#[test]
fn the_process_joins_every_hierarchy_of_the_cgroup() {
    let Some(cgroup) = cgroup("join", only_pids(8)) else {
        return;
    };
    let child = spawn_in(&cgroup, "cat /proc/self/cgroup", Stdio::piped());
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    let name = format!("/agentgate/test-{}-join", std::process::id());
    // `hierarchy-id:controllers:path` of every hierarchy now holding the child here.
    let joined: Vec<(&str, &str)> = out
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            path.ends_with(&name).then_some((id, controllers))
        })
        .collect();
    let in_hierarchy = |controller: &str| {
        joined
            .iter()
            .any(|(_, controllers)| controllers.split(',').any(|c| c == controller))
    };
    match &cgroup.backend {
        Backend::V2(_) => assert!(joined.iter().any(|(id, _)| *id == "0"), "{out}"),
        Backend::V1(dirs) => {
            for controller in ["memory", "pids", "cpu", "cpuacct"] {
                assert!(
                    in_hierarchy(controller),
                    "not in the {controller} cgroup: {out}"
                );
            }
            assert_eq!(dirs.freezer.is_some(), in_hierarchy("freezer"), "{out}");
        }
    }
}

#[test]
fn drop_kills_the_members_and_removes_every_directory() {
    let Some(cgroup) = cgroup("drop", only_pids(8)) else {
        return;
    };
    let mut sleeper = spawn_in(&cgroup, "sleep 300", Stdio::null());
    let dirs = cgroup.dirs.clone();
    assert!(!dirs.is_empty() && dirs.iter().all(|d| d.is_dir()));
    drop(Arc::into_inner(cgroup).expect("the only reference"));
    for dir in &dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(dir.parent().unwrap().is_dir(), "the shared folder is kept");
    }
    assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn a_create_that_fails_part_way_removes_what_it_made_and_nothing_else() {
    let Ok(layout) = Layout::of_this_process() else {
        assert!(
            cgroup("probe", only_pids(8)).is_none(),
            "layout and create disagree"
        );
        return;
    };
    let name = format!("test-{}-partial", std::process::id());
    let planned = Backend::new(&layout, &name).dirs();
    // Someone else's cgroup sits where the last directory would go.
    let taken = planned.last().unwrap();
    if let Err(e) = std::fs::create_dir_all(taken) {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{e}");
        return;
    }
    let err = Cgroup::create(&name, &only_pids(8)).unwrap_err();
    assert!(
        matches!(&err, CgroupError::Exists { path } if path == taken),
        "{err}"
    );
    for dir in &planned[..planned.len() - 1] {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    assert!(taken.is_dir(), "removed a cgroup it did not make");
    std::fs::remove_dir(taken).unwrap();
}

#[test]
fn names_must_be_one_plain_path_component() {
    for bad in ["", "../escape", "a/b", ".hidden", "sp ace", "nul\0"] {
        let err = check_name(bad).unwrap_err();
        assert!(
            err.to_string().contains("invalid sandbox cgroup name"),
            "{err}"
        );
    }
    check_name("0193a7c2-run_1.2").unwrap();
    assert!(check_name(&"x".repeat(129)).is_err());
}

#[test]
fn zero_limits_are_refused_with_the_setting_to_change() {
    let memory = CgroupLimits {
        memory_bytes: Some(0),
        ..only_pids(8)
    };
    assert!(check_limits(&memory)
        .unwrap_err()
        .to_string()
        .contains("resources.memory"));
    assert!(check_limits(&only_pids(0))
        .unwrap_err()
        .to_string()
        .contains("resources.pids"));
    let cpu = CgroupLimits {
        cpu_millicores: Some(0),
        ..only_pids(8)
    };
    assert!(check_limits(&cpu)
        .unwrap_err()
        .to_string()
        .contains("resources.cpu"));
}

#[test]
fn permission_errors_say_how_to_get_cgroups() {
    let err = CgroupError::io(
        "create the cgroup",
        Path::new("/sys/fs/cgroup/agentgate/x"),
        io::Error::from_raw_os_error(libc::EACCES),
    );
    let message = err.to_string();
    assert!(message.contains("/sys/fs/cgroup/agentgate/x"), "{message}");
    assert!(message.contains("run agentgate as root"), "{message}");
    assert!(message.contains("Delegate=yes"), "{message}");
}

#[test]
fn cpu_quota_is_in_microseconds_of_a_100ms_period() {
    assert_eq!(cpu_quota(200).unwrap(), (20_000, 100_000));
    assert_eq!(cpu_quota(10).unwrap(), (1_000, 100_000));
    assert_eq!(cpu_quota(9).unwrap(), (9_000, 1_000_000));
}

/// Set in the child process of the test below: the cgroup v2 directory it starts in.
const DELEGATED_V2_ENV: &str = "AGENTGATE_TEST_DELEGATED_V2_CGROUP";

#[test]
fn a_host_in_the_v2_cgroup_it_delegates_from_moves_itself_into_a_leaf() {
    if let Some(dir) = std::env::var_os(DELEGATED_V2_ENV) {
        return host_in_delegated_cgroup(Path::new(&dir));
    }
    // The moment the move is for: a delegated cgroup (a systemd scope, a container's
    // cgroup) that holds the host and must enable controllers for the sandboxes. It is
    // played with any controller the unified hierarchy offers: on this machine's hybrid
    // layout memory, cpu and pids belong to v1, but the rule is the same for each.
    let root = cgroup2_root();
    let offered = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap();
    let controller = offered
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("{} offers no controller to delegate", root.display()))
        .to_string();
    let root_control = root.join("cgroup.subtree_control");
    let enabled_before = std::fs::read_to_string(&root_control).unwrap();
    let enabled_here = !enabled_before.split_whitespace().any(|c| c == controller);
    if enabled_here {
        std::fs::write(&root_control, format!("+{controller}")).unwrap();
    }
    let dir = root.join(format!("test-{}-delegated", std::process::id()));
    std::fs::create_dir(&dir).unwrap();

    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "capabilities::process::cgroup::tests::a_host_in_the_v2_cgroup_it_delegates_from_moves_itself_into_a_leaf",
            "--nocapture",
        ])
        .env(DELEGATED_V2_ENV, &dir)
        .env("AGENTGATE_TEST_CONTROLLER", &controller)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(dir.join(v2::HOST_LEAF));
    let _ = std::fs::remove_dir(&dir);
    if enabled_here {
        let _ = std::fs::write(&root_control, format!("-{controller}"));
    }
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("1 passed"),
        "the child ran no test: {printed}"
    );
}

/// The child's side: it starts in `dir`, as agentgate started in a delegated scope.
fn host_in_delegated_cgroup(dir: &Path) {
    let controller = std::env::var("AGENTGATE_TEST_CONTROLLER").unwrap();
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
    // The kernel's rule: no controllers for children while the cgroup holds processes.
    let refused =
        std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}")).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EBUSY), "{refused}");

    v2::enable_controllers(dir, &[controller.as_str()], true).unwrap();
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap();
    assert!(
        enabled.split_whitespace().any(|c| c == controller),
        "{enabled}"
    );
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v2_line = own.lines().find(|l| l.starts_with("0::")).unwrap();
    let leaf = format!(
        "/{}/{}",
        dir.file_name().unwrap().to_string_lossy(),
        v2::HOST_LEAF
    );
    assert!(v2_line.ends_with(&leaf), "{v2_line}");
    // Asked again (the next run of the same host), nothing moves and nothing fails.
    v2::enable_controllers(dir, &[controller.as_str()], true).unwrap();
    assert_eq!(std::fs::read_to_string("/proc/self/cgroup").unwrap(), own);
}

/// Where the unified (v2) hierarchy is mounted; the tests of the v2 mechanics need one.
fn cgroup2_root() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .filter_map(hierarchy::Mount::parse)
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.point)
        .expect("this test needs a cgroup2 mount")
}

/// A v2 cgroup for one test, made without limits: the unified hierarchy of this
/// machine's hybrid layout offers no memory, cpu or pids controller, and joining
/// does not depend on them.
fn bare_v2_cgroup(tag: &str) -> Arc<Cgroup> {
    let base = cgroup2_root();
    let path = base.join(format!("test-{}-{tag}", std::process::id()));
    std::fs::create_dir(&path).unwrap();
    let entry = CString::new(path.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
    Arc::new(Cgroup {
        v2_dir: Some(v2::open(&path).unwrap()),
        backend: Backend::V2(v2::Dir {
            base,
            path: path.clone(),
        }),
        dirs: vec![path],
        entry_files: vec![entry],
        created: Instant::now(),
        peak_seen: AtomicU64::new(0),
    })
}

/// The v2 cgroup `pid` is in, from `/proc/PID/cgroup`.
fn v2_cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_v2_process_starts_inside_the_cgroup_and_its_waiter_ends_as_it_ends() {
    let cgroup = bare_v2_cgroup("born");
    let name = format!("/test-{}-born", std::process::id());

    // Its output reaches the pipe, and its exit code is the waiter's.
    let mut child = spawn_in(
        &cgroup,
        "grep '^0::' /proc/self/cgroup; exit 7",
        Stdio::piped(),
    );
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.trim_end().ends_with(&name), "{line}");
    assert_eq!(child.wait().unwrap().code(), Some(7));

    // The process Command started stays outside, waiting; the one inside is killed
    // with the cgroup, and the waiter ends by the same signal.
    // `exec`, so the shell does not fork and exactly one process is inside.
    let mut child = spawn_in(&cgroup, "exec sleep 30", Stdio::null());
    let procs = cgroup.dirs[0].join("cgroup.procs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_pids(&procs).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let inside = read_pids(&procs);
    assert_eq!(inside.len(), 1, "{inside:?}");
    assert_ne!(inside[0], child.id() as libc::pid_t);
    assert!(!v2_cgroup_of(child.id()).ends_with(&name));
    cgroup.kill_all();
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(read_pids(&procs).is_empty());
}

#[test]
fn another_process_cgroup_is_read_only_when_it_is_the_named_one() {
    let Some(cgroup) = cgroup("observed", only_pids(16)) else {
        return;
    };
    let mut sleeper = spawn_in(&cgroup, "sleep 30", Stdio::null());
    let name = format!("test-{}-observed", std::process::id());
    let observed = ObservedCgroup::of_process(sleeper.id(), &name).unwrap();
    // The kernel's CPU counters may read 0 until their first update after the spawn.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let usage = loop {
        let usage = observed.usage().unwrap();
        if usage.cpu_time_ns > 0 || std::time::Instant::now() > deadline {
            break usage;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // The shell and its `sleep` (or the `sleep` alone, where the shell execs it).
    assert!((1..=2).contains(&usage.pids), "{usage:?}");
    assert!(usage.cpu_time_ns > 0, "{usage:?}");
    assert_eq!(usage.oom_kills.unwrap_or(0), 0, "{usage:?}");
    // The same process read as another's: its cgroup does not carry that name.
    let error = ObservedCgroup::of_process(sleeper.id(), "some-container-id").unwrap_err();
    assert!(error.to_string().contains("not in a cgroup of"), "{error}");
    cgroup.kill_all();
    let _ = sleeper.wait();
}
