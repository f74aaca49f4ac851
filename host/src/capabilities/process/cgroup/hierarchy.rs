//! Which cgroup hierarchy this process can put sandboxes in, read from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`.
//!
//! The choice is a pure function of those two texts (plus the `cgroup.controllers` file
//! it names), so it is tested with the layouts of machines other than this one.

use std::path::{Path, PathBuf};

use super::v2::HOST_LEAF;
use super::CgroupError;

/// The controllers a sandbox needs, in v2 spelling.
pub(super) const V2_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Where the sandbox cgroups go: the directories under which `agentgate/<name>` is made.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Layout {
    /// The unified hierarchy, with memory, cpu and pids available at `base`.
    V2 { base: PathBuf },
    /// One directory per v1 controller; `cpu` and `cpuacct` are equal when co-mounted.
    V1 {
        memory: PathBuf,
        cpu: PathBuf,
        cpuacct: PathBuf,
        pids: PathBuf,
        freezer: Option<PathBuf>,
    },
}

impl Layout {
    /// The layout for the running process.
    pub(super) fn of_this_process() -> Result<Layout, CgroupError> {
        let read = |path: &str| {
            std::fs::read_to_string(path).map_err(|e| CgroupError::Unavailable {
                detail: format!("cannot read {path}: {e}"),
            })
        };
        let mountinfo = read("/proc/self/mountinfo")?;
        let self_cgroup = read("/proc/self/cgroup")?;
        // SAFETY: geteuid has no preconditions.
        let privileged = unsafe { libc::geteuid() } == 0;
        Layout::choose(&mountinfo, &self_cgroup, privileged, &|dir| {
            std::fs::read_to_string(dir.join("cgroup.controllers")).ok()
        })
    }

    /// Picks v2 when the unified hierarchy offers memory, cpu and pids at the place this
    /// process may use, else v1 when all of memory, cpu, cpuacct and pids are mounted.
    ///
    /// `privileged` (root) uses each hierarchy's root; otherwise this process's own
    /// cgroup, which is only writable when it was delegated. `controllers_of` reads a v2
    /// directory's `cgroup.controllers`.
    pub(super) fn choose(
        mountinfo: &str,
        self_cgroup: &str,
        privileged: bool,
        controllers_of: &dyn Fn(&Path) -> Option<String>,
    ) -> Result<Layout, CgroupError> {
        let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
        let memberships: Vec<Membership> =
            self_cgroup.lines().filter_map(Membership::parse).collect();
        let place = |mount: &Mount, own: Option<&str>| -> PathBuf {
            match own {
                Some(own) if !privileged => mount.dir_of(own),
                _ => mount.point.clone(),
            }
        };
        // A host that moved itself into its leaf still delegates from the cgroup above.
        let place_v2 = |mount: &Mount, own: Option<&str>| -> PathBuf {
            let own = own.map(|path| {
                match path
                    .strip_suffix(HOST_LEAF)
                    .and_then(|p| p.strip_suffix('/'))
                {
                    Some("") => "/",
                    Some(parent) => parent,
                    None => path,
                }
            });
            place(mount, own)
        };

        let mut found = Vec::new();
        if let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup2") {
            let own = memberships.iter().find(|m| m.hierarchy == "0");
            let base = place_v2(mount, own.map(|m| m.path.as_str()));
            let offered = controllers_of(&base).unwrap_or_default();
            let offered: Vec<&str> = offered.split_whitespace().collect();
            if V2_CONTROLLERS.iter().all(|c| offered.contains(c)) {
                return Ok(Layout::V2 { base });
            }
            found.push(format!(
                "cgroup2 at {} offers [{}], not all of memory, cpu, pids",
                base.display(),
                offered.join(" ")
            ));
        }

        let v1 = |controller: &str| -> Option<PathBuf> {
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))?;
            let own = memberships
                .iter()
                .find(|m| m.controllers.split(',').any(|c| c == controller));
            Some(place(mount, own.map(|m| m.path.as_str())))
        };
        let (memory, cpu, cpuacct, pids) = (v1("memory"), v1("cpu"), v1("cpuacct"), v1("pids"));
        if let (Some(memory), Some(cpu), Some(cpuacct), Some(pids)) =
            (memory.clone(), cpu.clone(), cpuacct.clone(), pids.clone())
        {
            return Ok(Layout::V1 {
                memory,
                cpu,
                cpuacct,
                pids,
                freezer: v1("freezer"),
            });
        }
        let missing: Vec<&str> = [
            ("memory", memory.is_none()),
            ("cpu", cpu.is_none()),
            ("cpuacct", cpuacct.is_none()),
            ("pids", pids.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, absent)| absent.then_some(name))
        .collect();
        found.push(format!(
            "cgroup v1 has no hierarchy for {}",
            missing.join(", ")
        ));
        Err(CgroupError::Unavailable {
            detail: found.join("; "),
        })
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layout::V2 { base } => write!(f, "cgroup v2 below {}", base.display()),
            Layout::V1 {
                memory,
                cpu,
                cpuacct,
                pids,
                freezer,
            } => {
                write!(
                    f,
                    "cgroup v1 below memory {}, cpu {}, cpuacct {}, pids {}",
                    memory.display(),
                    cpu.display(),
                    cpuacct.display(),
                    pids.display()
                )?;
                match freezer {
                    Some(freezer) => write!(f, ", freezer {}", freezer.display()),
                    None => write!(f, " (no freezer)"),
                }
            }
        }
    }
}

/// One cgroup filesystem line of `/proc/self/mountinfo`.
#[derive(Debug)]
pub(super) struct Mount {
    /// The hierarchy path shown at the mount point (not `/` without a cgroup namespace
    /// inside some containers).
    root: String,
    pub(super) point: PathBuf,
    pub(super) fstype: String,
    options: Vec<String>,
}

impl Mount {
    /// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
    pub(super) fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let fstype = right.next()?;
        if fstype != "cgroup" && fstype != "cgroup2" {
            return None;
        }
        let _source = right.next()?;
        let options = right.next().unwrap_or("");
        Some(Mount {
            root: unescape(left.get(3)?),
            point: PathBuf::from(unescape(left.get(4)?)),
            fstype: fstype.to_string(),
            options: options.split(',').map(str::to_string).collect(),
        })
    }

    /// The directory of cgroup `path` (as `/proc/self/cgroup` names it) in this mount.
    fn dir_of(&self, path: &str) -> PathBuf {
        let relative = if self.root == "/" {
            Some(path)
        } else {
            path.strip_prefix(self.root.as_str())
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        match relative.map(|r| r.trim_start_matches('/')) {
            Some(r) if !r.is_empty() => self.point.join(r),
            _ => self.point.clone(),
        }
    }
}

/// Mountinfo escapes space, tab, newline and backslash as three octal digits.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/self/cgroup`: `4:memory:/user.slice` or `0::/user.slice/x.scope`.
#[derive(Debug)]
struct Membership {
    hierarchy: String,
    controllers: String,
    path: String,
}

impl Membership {
    fn parse(line: &str) -> Option<Membership> {
        let mut parts = line.splitn(3, ':');
        Some(Membership {
            hierarchy: parts.next()?.to_string(),
            controllers: parts.next()?.to_string(),
            path: parts.next()?.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kind: v1 controllers mounted one per hierarchy, and an empty
    /// `unified` v2 mount.
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_SELF: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/e44f
2:cpuacct:/
1:cpu:/
0::/
";
    const V2_MOUNTS: &str = "\
25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const V2_SELF: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n";

    fn offers(controllers: &'static str) -> impl Fn(&Path) -> Option<String> {
        move |_| Some(controllers.to_string())
    }

    #[test]
    fn hybrid_machine_with_an_empty_unified_mount_uses_v1_at_the_roots() {
        let layout = Layout::choose(HYBRID_MOUNTS, HYBRID_SELF, true, &offers("")).unwrap();
        assert_eq!(
            layout,
            Layout::V1 {
                memory: "/sys/fs/cgroup/memory".into(),
                cpu: "/sys/fs/cgroup/cpu".into(),
                cpuacct: "/sys/fs/cgroup/cpuacct".into(),
                pids: "/sys/fs/cgroup/pids".into(),
                freezer: Some("/sys/fs/cgroup/freezer".into()),
            }
        );
    }

    #[test]
    fn unprivileged_v1_uses_the_own_cgroup_of_each_controller() {
        let layout = Layout::choose(HYBRID_MOUNTS, HYBRID_SELF, false, &offers("")).unwrap();
        let Layout::V1 { memory, cpu, .. } = layout else {
            panic!("expected v1, got {layout:?}")
        };
        assert_eq!(
            memory,
            PathBuf::from("/sys/fs/cgroup/memory/process_api/e44f")
        );
        assert_eq!(cpu, PathBuf::from("/sys/fs/cgroup/cpu"));
    }

    #[test]
    fn co_mounted_cpu_and_cpuacct_share_one_directory() {
        let mounts = "\
30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
";
        let Layout::V1 {
            cpu,
            cpuacct,
            freezer,
            ..
        } = Layout::choose(mounts, "", true, &offers("")).unwrap()
        else {
            panic!("expected v1")
        };
        assert_eq!(cpu, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(cpu, cpuacct);
        assert_eq!(freezer, None);
    }

    #[test]
    fn v2_with_the_controllers_is_chosen_at_the_root_for_root() {
        let layout = Layout::choose(
            V2_MOUNTS,
            V2_SELF,
            true,
            &offers("cpuset cpu io memory pids\n"),
        )
        .unwrap();
        assert_eq!(
            layout,
            Layout::V2 {
                base: "/sys/fs/cgroup".into()
            }
        );
    }

    #[test]
    fn v2_unprivileged_uses_the_own_delegated_cgroup_and_asks_it_for_controllers() {
        let asked = std::cell::RefCell::new(Vec::new());
        let controllers_of = |dir: &Path| {
            asked.borrow_mut().push(dir.to_path_buf());
            Some("memory pids cpu".to_string())
        };
        let layout = Layout::choose(V2_MOUNTS, V2_SELF, false, &controllers_of).unwrap();
        let own = PathBuf::from(
            "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope",
        );
        assert_eq!(layout, Layout::V2 { base: own.clone() });
        assert_eq!(asked.into_inner(), vec![own]);
    }

    #[test]
    fn v2_unprivileged_host_in_its_own_leaf_delegates_from_the_cgroup_above() {
        let scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope";
        for (own, base) in [
            (
                format!("0::{scope}/agentgate-host\n"),
                format!("/sys/fs/cgroup{scope}"),
            ),
            (
                "0::/agentgate-host\n".to_string(),
                "/sys/fs/cgroup".to_string(),
            ),
            // Only the leaf's exact name is read so.
            (
                format!("0::{scope}/not-agentgate-host\n"),
                format!("/sys/fs/cgroup{scope}/not-agentgate-host"),
            ),
        ] {
            let layout =
                Layout::choose(V2_MOUNTS, &own, false, &offers("memory pids cpu")).unwrap();
            assert_eq!(layout, Layout::V2 { base: base.into() }, "{own}");
        }
    }

    #[test]
    fn v2_without_cpu_and_no_v1_says_what_is_missing() {
        let err = Layout::choose(V2_MOUNTS, V2_SELF, true, &offers("memory pids")).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("offers [memory pids]"), "{message}");
        assert!(
            message.contains("no hierarchy for memory, cpu, cpuacct, pids"),
            "{message}"
        );
        assert!(message.contains("cgroup2 mounted"), "{message}");
    }

    #[test]
    fn no_cgroup_mounts_at_all_is_unavailable() {
        let err = Layout::choose("", "", true, &offers("")).unwrap_err();
        assert!(matches!(err, CgroupError::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn a_mount_of_a_subtree_maps_own_paths_below_its_root() {
        // Without a cgroup namespace, a container sees its own cgroup mounted as the root.
        let mounts = "40 30 0:40 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let layout = Layout::choose(
            mounts,
            "0::/docker/abc/sub\n",
            false,
            &offers("memory cpu pids"),
        )
        .unwrap();
        assert_eq!(
            layout,
            Layout::V2 {
                base: "/sys/fs/cgroup/sub".into()
            }
        );
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
        assert_eq!(unescape(r"/back\134slash"), r"/back\slash");
        assert_eq!(unescape(r"/plain\x"), r"/plain\x");
    }
}
