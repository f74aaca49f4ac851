//! The peak memory of a process a test starts, without the test process's own.
//!
//! `wait4`'s `ru_maxrss` of a child the test process starts directly counts the test
//! process's peak too: `exec` keeps the high-water mark of the address space it
//! replaces, which for a child of this process is this process's. With every test in
//! one binary, that is the peak of whichever tests ran beside it (in-process runtimes
//! among them), so a bound could fail for another test's memory, and a comparison
//! (this input against that one) could pass without measuring anything. So the
//! command runs under `tests/fixtures/probes/peak-rss.c`, a small process of its own
//! that starts it and reports its `ru_maxrss`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;

use super::{repo_root, stderr};

/// How a measured process ended, and its own peak resident set size.
#[derive(Debug)]
pub struct Ended {
    /// Its exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Its peak resident set size, in bytes.
    pub peak_rss: u64,
}

/// `command` (its program, arguments, environment and folder) run under the probe,
/// and where the probe will report. Set the standard streams on the returned command,
/// spawn it, and pass the child to [`Report::wait`].
pub fn measured(command: &Command) -> (Command, Report) {
    let report = tempfile::tempdir().unwrap();
    let mut probed = Command::new(probe());
    probed
        .arg(report.path().join("report"))
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => probed.env(name, value),
            None => probed.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        probed.current_dir(dir);
    }
    (probed, Report { dir: report })
}

/// Where the probe writes how the measured process ended.
pub struct Report {
    dir: tempfile::TempDir,
}

impl Report {
    /// Waits for the probe (`child`, spawned from [`measured`]'s command) and reads its
    /// report.
    pub fn wait(self, mut child: Child) -> Ended {
        child.wait().expect("waiting for the peak-rss probe");
        self.read()
    }

    /// The report of a probe that has been waited for.
    pub fn read(self) -> Ended {
        let report = std::fs::read_to_string(self.dir.path().join("report"))
            .unwrap_or_else(|e| panic!("the peak-rss probe wrote no report: {e}"));
        parse(&report)
    }
}

fn parse(report: &str) -> Ended {
    let fields: Vec<&str> = report.split_whitespace().collect();
    let [how, value, kib] = fields[..] else {
        panic!("the peak-rss probe's report is malformed: {report:?}")
    };
    let value: i32 = value.parse().unwrap();
    // Linux reports ru_maxrss in KiB.
    let peak_rss = kib.parse::<u64>().unwrap() * 1024;
    match how {
        "exited" => Ended {
            code: Some(value),
            signal: None,
            peak_rss,
        },
        "signalled" => Ended {
            code: None,
            signal: Some(value),
            peak_rss,
        },
        _ => panic!("the peak-rss probe's report is malformed: {report:?}"),
    }
}

/// `tests/fixtures/probes/peak-rss.c`, built once per test binary (gcc).
fn probe() -> &'static Path {
    static PROBE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = PROBE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peak-rss");
        let source = repo_root().join("tests/fixtures/probes/peak-rss.c");
        let out = Command::new("gcc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&path)
            .arg(&source)
            .output()
            .expect("gcc builds the peak-rss probe (apt-get install gcc libc6-dev)");
        assert!(out.status.success(), "building the probe: {}", stderr(&out));
        (dir, path)
    });
    path
}
