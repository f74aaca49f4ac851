//! Running agentgate as an unprivileged user ([`NOBODY`]), the way an operator gives a
//! user agentgate: a copy of the binary anyone may run, and optionally a cgroup
//! delegated to that user.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The unprivileged user the tests switch to.
pub const NOBODY: u32 = 65534;

/// A copy of the `agentgate` binary in a folder anyone may enter (the build's target
/// folder may not be): the folder, to keep, and the binary.
pub fn agentgate_for_everyone() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("agentgate");
    std::fs::copy(env!("CARGO_BIN_EXE_agentgate"), &bin).unwrap();
    (dir, bin)
}

/// A cgroup handed to [`NOBODY`] as systemd's `Delegate=yes` hands one to a user: the
/// directory and the files that move processes and enable controllers are theirs. It is
/// made where agentgate will look: in the unified hierarchy when that offers memory, cpu
/// and pids, else at the root of each cgroup v1 hierarchy. Removed, with whatever is
/// left below it, on drop.
pub struct DelegatedCgroup {
    pub dirs: Vec<std::path::PathBuf>,
}

impl DelegatedCgroup {
    pub fn new() -> DelegatedCgroup {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let cgroup_mounts: Vec<(&str, String)> = mountinfo
            .lines()
            .filter_map(|line| {
                let (left, right) = line.split_once(" - ")?;
                let right: Vec<&str> = right.split(' ').collect();
                let point = left.split(' ').nth(4)?.to_string();
                match right[0] {
                    "cgroup2" => Some(("", point)),
                    "cgroup" => Some((right.get(2).copied().unwrap_or(""), point)),
                    _ => None,
                }
            })
            .collect();
        let unified = cgroup_mounts
            .iter()
            .find(|(options, _)| options.is_empty())
            .map(|(_, point)| Path::new(point).to_path_buf())
            .filter(|root| {
                let offered =
                    std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
                ["memory", "cpu", "pids"]
                    .iter()
                    .all(|c| offered.split_whitespace().any(|o| o == *c))
            });
        let name = format!("agentgate-test-delegated-{}", std::process::id());
        let (dirs, owned_files): (Vec<_>, &[&str]) = match unified {
            Some(root) => {
                let control = root.join("cgroup.subtree_control");
                std::fs::write(&control, "+memory +cpu +pids").unwrap();
                let files: &[&str] = &["cgroup.procs", "cgroup.subtree_control", "cgroup.threads"];
                (vec![root.join(&name)], files)
            }
            None => {
                let wanted = ["memory", "cpu", "cpuacct", "pids", "freezer"];
                let mut points: Vec<&String> = Vec::new();
                for (options, point) in &cgroup_mounts {
                    let wanted = options.split(',').any(|o| wanted.contains(&o));
                    if wanted && !points.contains(&point) {
                        points.push(point);
                    }
                }
                assert!(
                    points.len() >= 4,
                    "no cgroup v2 with memory, cpu and pids, and cgroup v1 mounts only \
                     {points:?}: this machine cannot give agentgate cgroups"
                );
                let dirs = points.iter().map(|p| Path::new(p).join(&name)).collect();
                (dirs, &["tasks", "cgroup.procs"][..])
            }
        };
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap();
            std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
            for file in owned_files {
                std::os::unix::fs::chown(dir.join(file), Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        DelegatedCgroup { dirs }
    }

    /// Shell that moves the shell itself into every hierarchy of the cgroup.
    pub fn enter(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > {}/cgroup.procs\n", d.display()))
            .collect()
    }

    /// Every cgroup below the delegated one, in one hierarchy.
    pub fn descendants(&self) -> Vec<std::path::PathBuf> {
        assert!(self.dirs[0].is_dir(), "{} is gone", self.dirs[0].display());
        dirs_below(&self.dirs[0])
    }
}

impl Drop for DelegatedCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            // Children before parents: a cgroup is removed only once it has none.
            for below in dirs_below(dir).iter().rev() {
                let _ = std::fs::remove_dir(below);
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Every directory below `root`, each parent before its children; none when `root`
/// cannot be read.
pub fn dirs_below(root: &Path) -> Vec<std::path::PathBuf> {
    let children = |dir: &Path| -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries.map(|e| e.path()).filter(|p| p.is_dir()).collect()
    };
    let mut found = children(root);
    let mut i = 0;
    while i < found.len() {
        let below = children(&found[i]);
        found.extend(below);
        i += 1;
    }
    found
}
