//! Which host folders a TaskSpec may hand to a sandbox: one policy for every provider.
//!
//! Three parties, each with less power than the one before. The **operator** owns the
//! machine and writes `$AGENTGATE_HOME/grants.yaml`. The **TaskSpec's author** may be
//! another team or a script: it names host folders (`workspace.path` of a `local`
//! workspace, `workspace.destPath` of a `fresh` one, `sandbox.mounts[].source`), and may
//! reach only those the operator allows. The **agent** is hostile and gets whatever
//! those folders hold, so a folder that holds the container runtime's socket hands it
//! the host.
//!
//! The rule, on the path with every symlink resolved:
//! - **Refused whatever the grant says:** the system's folders ([`SYSTEM_FOLDERS`]:
//!   `/etc`, `/proc`, `/run`, `/usr`, the container runtimes' state, …) and everything
//!   below them; agentgate's own home and everything below it; the engine's socket; any
//!   ancestor of those (`/`, `/var`, and the user's home when `AGENTGATE_HOME` lies in
//!   it); and a folder that directly holds a socket or a device node, or that is one
//!   (read when checked, at the run's start).
//! - **Allowed:** where the operator said nothing, folders strictly *below* the invoking
//!   user's home and the system's temporary folder (as Docker Desktop shares them), so
//!   a single user running their own tasks notices nothing while `/tmp` itself (with
//!   the X11 and ssh-agent sockets below it) stays out. An operator's list
//!   (`workspaces:` and `mounts:` in `grants.yaml`) replaces that default for its kind
//!   and allows each folder it names and what is below it.
//!
//! Folders the host makes itself (the run's folder under `AGENTGATE_HOME`, where `git`,
//! `github` and `fresh` workspaces are cloned or created, and the sandbox's private
//! state) are not TaskSpec paths: [`BindScope`] lets a sandbox bind them and, besides
//! them, only what this policy allows for `mounts`. The engine checks the TaskSpec
//! before anything starts (and `agentgate validate` reports the same problems); the
//! sandbox capabilities (`docker`, the sealed `process`) check every bind again, since a
//! provider plugin may ask for any path, and bind the resolved path they checked.
//!
//! What remains: the check is a snapshot. A socket created in an allowed folder after
//! the check is visible to the agent, and a socket deeper than directly inside a mounted
//! folder is not looked for (listing a whole tree is a walk). The sealed `process`
//! capability closes the race between check and bind (bubblewrap binds a descriptor of
//! the checked folder and fails if its path now leads elsewhere), but the Docker engine
//! binds by path: a host user who can write to a parent of an allowed folder can swap a
//! component for a symlink between the check and the engine's mount. The agent has not
//! started then, so it is not the one who can.

use std::fmt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::taskspec::{TaskSpec, WorkspaceKind};

/// System folders: refused with everything below them, and every ancestor of them
/// refused too, whatever the operator grants. A TaskSpec that needs a tool from one of
/// them runs it from the sandbox's own view of the system (an image, the sealed view).
pub const SYSTEM_FOLDERS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var/run",
    "/boot",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    // Container runtimes' state: every container's files, and their sockets' configs.
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/kubelet",
];

/// What a host path is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathUse {
    /// The root of a workspace (`local` path, `fresh` destPath).
    Workspace,
    /// An extra bind into the sandbox.
    Mount,
}

impl PathUse {
    /// The key of `grants.yaml` that lists the allowed folders (and the word for them).
    pub fn grants_key(self) -> &'static str {
        match self {
            PathUse::Workspace => "workspaces",
            PathUse::Mount => "mounts",
        }
    }
}

/// The operator's lists from `grants.yaml`, `~` expanded. `None`: the operator said
/// nothing, so the default holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathGrants {
    pub workspaces: Option<Vec<PathBuf>>,
    pub mounts: Option<Vec<PathBuf>>,
}

/// The host folders the policy is made of, read from this process or given by a test.
#[derive(Debug, Clone)]
pub struct HostFolders {
    /// `$HOME` of the invoking user, when set.
    pub user_home: Option<PathBuf>,
    /// The system's temporary folder (`TMPDIR`, or `/tmp`).
    pub temp: PathBuf,
    /// `AGENTGATE_HOME`.
    pub agentgate_home: PathBuf,
    /// Paths capabilities say no TaskSpec or sandbox may reach, whatever the grant,
    /// with why (the Docker engine's local socket).
    pub guarded: Vec<(PathBuf, &'static str)>,
}

impl HostFolders {
    /// This process's home and temporary folder, with `agentgate_home` and the paths
    /// the host's capabilities guard (`capabilities::guarded_paths`: the Docker
    /// engine's socket), which this layer below them is handed rather than asks for.
    pub fn of_this_process(
        agentgate_home: &Path,
        guarded: Vec<(PathBuf, &'static str)>,
    ) -> HostFolders {
        HostFolders {
            user_home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            temp: std::env::temp_dir(),
            agentgate_home: agentgate_home.to_path_buf(),
            guarded,
        }
    }
}

/// Why a folder is refused whatever the grant says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    System,
    AgentgateHome,
    /// Guarded by a capability, for the reason given.
    Capability(&'static str),
}

impl fmt::Display for Protected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protected::System => "a system folder",
            Protected::AgentgateHome => {
                "agentgate's own home (AGENTGATE_HOME: runs, grants, caches)"
            }
            Protected::Capability(why) => why,
        })
    }
}

/// Where paths of one use may lie.
#[derive(Debug, Clone)]
enum Allowed {
    /// The operator said nothing: strictly below each folder.
    Default(Vec<PathBuf>),
    /// The operator's list: each folder and what is below it.
    Listed(Vec<PathBuf>),
}

impl Allowed {
    fn new(listed: Option<&Vec<PathBuf>>, defaults: &[PathBuf]) -> Allowed {
        match listed {
            // A folder that does not exist allows nothing that exists.
            Some(list) => {
                Allowed::Listed(list.iter().filter_map(|p| p.canonicalize().ok()).collect())
            }
            None => Allowed::Default(defaults.to_vec()),
        }
    }

    fn allows(&self, resolved: &Path) -> bool {
        match self {
            Allowed::Default(roots) => roots
                .iter()
                .any(|root| resolved.starts_with(root) && resolved != root),
            Allowed::Listed(roots) => roots.iter().any(|root| resolved.starts_with(root)),
        }
    }

    fn describe(&self, use_: PathUse) -> String {
        let list = |roots: &[PathBuf]| {
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let key = use_.grants_key();
        match self {
            Allowed::Default(roots) => format!(
                "{} must lie strictly below {} (the default: $AGENTGATE_HOME/grants.yaml lists no `{key}:`)",
                use_.grants_key(),
                if roots.is_empty() { "no folder".to_string() } else { list(roots) },
            ),
            Allowed::Listed(roots) if roots.is_empty() => format!(
                "the operator allows no host folder for {} (`{key}:` in $AGENTGATE_HOME/grants.yaml lists none that exists)",
                use_.grants_key()
            ),
            Allowed::Listed(roots) => format!(
                "{} must lie in a folder the operator lists under `{key}:` in $AGENTGATE_HOME/grants.yaml ({})",
                use_.grants_key(),
                list(roots)
            ),
        }
    }
}

/// Why a host path may not be used.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("`{path}` is not an absolute path; give the full path (`~/` is expanded)")]
    NotAbsolute { path: String },
    #[error("`{path}` cannot be used ({source}); create it or fix the path")]
    Missing {
        path: String,
        source: std::io::Error,
    },
    #[error("`{path}`{} is refused: it lies in {folder}, {why}; no grant allows it, so use a folder that holds only what the agent needs", resolved_note(.path, .resolved))]
    Inside {
        path: String,
        resolved: PathBuf,
        folder: PathBuf,
        why: Protected,
    },
    #[error("`{path}`{} is refused: it holds {folder}, {why}; no grant allows it, so use a folder below it that holds only what the agent needs", resolved_note(.path, .resolved))]
    Holds {
        path: String,
        resolved: PathBuf,
        folder: PathBuf,
        why: Protected,
    },
    #[error("`{path}`{} is refused: {what}, which could give the agent a host service; no grant allows it, so use a folder that holds only files", resolved_note(.path, .resolved))]
    Special {
        path: String,
        resolved: PathBuf,
        what: String,
    },
    #[error("`{path}`{} cannot be listed to look for sockets and devices ({source}); it is refused", resolved_note(.path, .resolved))]
    Unreadable {
        path: String,
        resolved: PathBuf,
        source: std::io::Error,
    },
    #[error("`{path}`{} is not allowed: {allowed}; the operator may allow it by adding `{key}: [{resolved_text}]` to $AGENTGATE_HOME/grants.yaml (a list there replaces the default)", resolved_note(.path, .resolved), resolved_text = .resolved.display())]
    NotAllowed {
        path: String,
        resolved: PathBuf,
        allowed: String,
        key: &'static str,
    },
}

impl Refusal {
    /// The path does not exist (or a folder on the way cannot be read).
    pub fn is_missing(&self) -> bool {
        matches!(self, Refusal::Missing { .. })
    }

    /// Refused because the path cannot be judged here (relative, or not found), not for
    /// where it lies.
    pub fn is_input_error(&self) -> bool {
        matches!(self, Refusal::NotAbsolute { .. } | Refusal::Missing { .. })
    }
}

fn resolved_note(path: &str, resolved: &Path) -> String {
    if Path::new(path) == resolved {
        String::new()
    } else {
        format!(" (resolved: {})", resolved.display())
    }
}

/// A TaskSpec field whose host path is refused.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {refusal}")]
pub struct PathProblem {
    /// E.g. `spec.execution.sandbox.mounts[1].source`.
    pub field: String,
    pub refusal: Refusal,
}

/// The policy for one host: what is refused and what is allowed.
#[derive(Debug, Clone)]
pub struct HostPaths {
    workspaces: Allowed,
    mounts: Allowed,
    /// Folders refused with what is below them and every ancestor: each canonical form
    /// and the form written, with why.
    protected: Vec<(PathBuf, Protected)>,
}

impl HostPaths {
    pub fn new(grants: &PathGrants, host: &HostFolders) -> HostPaths {
        let mut protected = Vec::new();
        let mut protect = |path: &Path, why: Protected| {
            // Both the path as written and where it leads (`/var/run` is `/run`).
            for form in [Some(path.to_path_buf()), path.canonicalize().ok()]
                .into_iter()
                .flatten()
            {
                if !protected.iter().any(|(p, _)| *p == form) {
                    protected.push((form, why));
                }
            }
        };
        for folder in SYSTEM_FOLDERS {
            protect(Path::new(folder), Protected::System);
        }
        protect(
            &lexically_absolute(&host.agentgate_home),
            Protected::AgentgateHome,
        );
        for (path, why) in &host.guarded {
            protect(path, Protected::Capability(why));
        }
        // A home of `/` (some service accounts) or inside a system folder is no default:
        // below it lies the whole system.
        let system = |root: &Path| {
            protected.iter().any(|(folder, why)| {
                *why == Protected::System && (root.starts_with(folder) || folder.starts_with(root))
            })
        };
        let defaults: Vec<PathBuf> = host
            .user_home
            .iter()
            .chain([&host.temp])
            .filter_map(|p| p.canonicalize().ok())
            .filter(|root| !system(root))
            .collect();
        HostPaths {
            workspaces: Allowed::new(grants.workspaces.as_ref(), &defaults),
            mounts: Allowed::new(grants.mounts.as_ref(), &defaults),
            protected,
        }
    }

    /// The policy of this process's host, for `agentgate_home`, with the paths the
    /// capabilities guard (`capabilities::guarded_paths()`).
    pub fn of_this_host(
        grants: &PathGrants,
        agentgate_home: &Path,
        guarded: Vec<(PathBuf, &'static str)>,
    ) -> HostPaths {
        HostPaths::new(
            grants,
            &HostFolders::of_this_process(agentgate_home, guarded),
        )
    }

    /// Checks `path` for `use_` and returns it resolved. A path that does not exist is
    /// refused when `must_exist`; otherwise (a folder the run will create) the deepest
    /// part that exists is resolved and the rest appended.
    pub fn check(&self, use_: PathUse, path: &str, must_exist: bool) -> Result<PathBuf, Refusal> {
        let (resolved, exists) = match resolve(path, must_exist) {
            Ok(resolved) => resolved,
            // Where it cannot be followed (a folder this user may not search), the path as
            // written still says whether it lies in a protected folder.
            Err(refusal) => {
                self.refuse_protected(path, &lexically_absolute(Path::new(path)))?;
                return Err(refusal);
            }
        };
        self.refuse_protected(path, &resolved)?;
        if exists {
            refuse_special(path, &resolved)?;
        }
        let allowed = match use_ {
            PathUse::Workspace => &self.workspaces,
            PathUse::Mount => &self.mounts,
        };
        if !allowed.allows(&resolved) {
            return Err(Refusal::NotAllowed {
                path: path.to_string(),
                allowed: allowed.describe(use_),
                resolved,
                key: use_.grants_key(),
            });
        }
        Ok(resolved)
    }

    fn refuse_protected(&self, path: &str, resolved: &Path) -> Result<(), Refusal> {
        for (folder, why) in &self.protected {
            if resolved.starts_with(folder) {
                return Err(Refusal::Inside {
                    path: path.to_string(),
                    resolved: resolved.to_path_buf(),
                    folder: folder.clone(),
                    why: *why,
                });
            }
        }
        for (folder, why) in &self.protected {
            if folder.starts_with(resolved) {
                return Err(Refusal::Holds {
                    path: path.to_string(),
                    resolved: resolved.to_path_buf(),
                    folder: folder.clone(),
                    why: *why,
                });
            }
        }
        Ok(())
    }

    /// Every host path of `spec` that this policy refuses, with its field path: the
    /// `local` workspace's path, a `fresh` workspace's `destPath`, each mount's source.
    pub fn check_spec(&self, spec: &TaskSpec) -> Vec<PathProblem> {
        let execution = &spec.spec.execution;
        let workspace = match &execution.workspace.kind {
            WorkspaceKind::Local(local) => Some(("path", local.path.as_str(), true)),
            WorkspaceKind::Fresh(fresh) => fresh
                .dest_path
                .as_deref()
                .map(|dest| ("destPath", dest, false)),
            _ => None,
        };
        let workspace = workspace.map(|(key, path, must_exist)| {
            (
                format!("spec.execution.workspace.{key}"),
                PathUse::Workspace,
                path,
                must_exist,
            )
        });
        let mounts = execution.sandbox.mounts.iter().enumerate().map(|(i, m)| {
            (
                format!("spec.execution.sandbox.mounts[{i}].source"),
                PathUse::Mount,
                m.source.as_str(),
                true,
            )
        });
        workspace
            .into_iter()
            .chain(mounts)
            .filter_map(|(field, use_, path, must_exist)| {
                self.check(use_, path, must_exist)
                    .err()
                    .map(|refusal| PathProblem { field, refusal })
            })
            .collect()
    }
}

/// What a sandbox may bind during one run: the folders the host made or checked for it
/// (its workspace, its private state), and besides them only what [`HostPaths`] allows
/// for mounts. The default scope binds nothing.
#[derive(Debug, Clone, Default)]
pub struct BindScope {
    run_folders: Vec<PathBuf>,
    paths: Option<Arc<HostPaths>>,
}

impl BindScope {
    /// `run_folders` are the workspace root (checked when the run began, or made by the
    /// host) and the sandbox's state folder.
    pub fn new(run_folders: &[PathBuf], paths: Arc<HostPaths>) -> BindScope {
        BindScope {
            run_folders: run_folders
                .iter()
                .filter_map(|f| f.canonicalize().ok())
                .collect(),
            paths: Some(paths),
        }
    }

    /// A scope of the run's folders alone, for tests of the capabilities.
    #[cfg(test)]
    pub(crate) fn only(run_folders: &[PathBuf]) -> BindScope {
        BindScope {
            run_folders: run_folders
                .iter()
                .filter_map(|f| f.canonicalize().ok())
                .collect(),
            paths: None,
        }
    }

    /// The run's own folders, resolved, in the order given to [`BindScope::new`].
    pub fn run_folders(&self) -> &[PathBuf] {
        &self.run_folders
    }

    /// Checks a bind's host `source` and returns the resolved path to bind.
    pub fn check(&self, source: &str) -> Result<PathBuf, Refusal> {
        let (resolved, _) = resolve(source, true)?;
        if self.run_folders.iter().any(|f| resolved.starts_with(f)) {
            return Ok(resolved);
        }
        match &self.paths {
            Some(paths) => paths.check(PathUse::Mount, source, true),
            None => Err(Refusal::NotAllowed {
                path: source.to_string(),
                allowed: "no host folder may be bound before the run's sandbox is being created"
                    .into(),
                resolved,
                key: PathUse::Mount.grants_key(),
            }),
        }
    }
}

/// `path` with symlinks resolved, and whether it exists. A path that does not exist is
/// resolved as far as it exists, the rest appended (it may not climb with `..`).
pub fn resolve(path: &str, must_exist: bool) -> Result<(PathBuf, bool), Refusal> {
    let as_path = Path::new(path);
    if !as_path.is_absolute() {
        return Err(Refusal::NotAbsolute {
            path: path.to_string(),
        });
    }
    let missing = |source| Refusal::Missing {
        path: path.to_string(),
        source,
    };
    match as_path.canonicalize() {
        Ok(resolved) => Ok((resolved, true)),
        Err(e) if must_exist || e.kind() != std::io::ErrorKind::NotFound => Err(missing(e)),
        Err(e) => {
            let mut existing = as_path;
            let mut rest = Vec::new();
            while !existing.exists() {
                let Some(parent) = existing.parent() else {
                    return Err(missing(e));
                };
                rest.push(existing.file_name());
                existing = parent;
            }
            let mut resolved = existing.canonicalize().map_err(missing)?;
            for part in rest.into_iter().rev() {
                // `file_name` is None for a trailing `..`: refuse rather than guess.
                let part = part.ok_or_else(|| {
                    missing(std::io::Error::other(
                        "`..` after a folder that does not exist",
                    ))
                })?;
                resolved.push(part);
            }
            Ok((resolved, false))
        }
    }
}

/// Refuses a socket or device node, or a folder that directly holds one.
fn refuse_special(path: &str, resolved: &Path) -> Result<(), Refusal> {
    let special = |kind: std::fs::FileType| {
        if kind.is_socket() {
            Some("socket")
        } else if kind.is_char_device() || kind.is_block_device() {
            Some("device node")
        } else {
            None
        }
    };
    let refuse = |what: String| Refusal::Special {
        path: path.to_string(),
        resolved: resolved.to_path_buf(),
        what,
    };
    let unreadable = |source| Refusal::Unreadable {
        path: path.to_string(),
        resolved: resolved.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(resolved).map_err(unreadable)?;
    if let Some(kind) = special(meta.file_type()) {
        return Err(refuse(format!("it is a {kind}")));
    }
    if !meta.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(resolved).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let kind = entry.file_type().map_err(unreadable)?;
        if let Some(kind) = special(kind) {
            let name = crate::escape::name(entry.file_name().as_encoded_bytes());
            return Err(refuse(format!("it holds the {kind} `{name}`")));
        }
    }
    Ok(())
}

/// `path` made absolute without following links, `.` and `..` removed; where the
/// result exists, where it leads.
fn lexically_absolute(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::from("/");
    for part in absolute.components() {
        match part {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    // Where it exists, where it leads is what a resolved path is compared with.
    out.canonicalize().unwrap_or(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host whose home, temporary folder and other folders are test folders.
    struct TestHost {
        base: tempfile::TempDir,
        home: PathBuf,
        temp: PathBuf,
        agentgate: PathBuf,
    }

    impl TestHost {
        fn new() -> TestHost {
            let base = tempfile::tempdir().unwrap();
            let home = base.path().join("home");
            let temp = base.path().join("tmp");
            let agentgate = home.join(".agentgate");
            std::fs::create_dir_all(&agentgate).unwrap();
            std::fs::create_dir_all(&temp).unwrap();
            TestHost {
                base,
                home,
                temp,
                agentgate,
            }
        }

        /// A folder outside the home and the temporary folder.
        fn elsewhere(&self, name: &str) -> String {
            self.dir(self.base.path(), name)
        }

        fn folders(&self) -> HostFolders {
            HostFolders {
                user_home: Some(self.home.clone()),
                temp: self.temp.clone(),
                agentgate_home: self.agentgate.clone(),
                guarded: vec![("/var/run/docker.sock".into(), "an engine's socket")],
            }
        }

        fn paths(&self, grants: &PathGrants) -> HostPaths {
            HostPaths::new(grants, &self.folders())
        }

        fn dir(&self, under: &Path, name: &str) -> String {
            let dir = under.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            dir.display().to_string()
        }
    }

    fn refused(paths: &HostPaths, use_: PathUse, path: &str) -> Refusal {
        match paths.check(use_, path, true) {
            Ok(resolved) => panic!("{path} allowed as {}", resolved.display()),
            Err(refusal) => refusal,
        }
    }

    #[test]
    fn system_folders_and_their_ancestors_are_refused_whatever_the_grant() {
        let host = TestHost::new();
        let everything = PathGrants {
            workspaces: Some(vec!["/".into()]),
            mounts: Some(vec!["/".into()]),
        };
        let paths = host.paths(&everything);
        for path in [
            "/var/run/docker/containerd",
            "/run/containerd",
            "/run/docker",
            "/var/run",
            "/etc",
            "/proc/self",
            "/dev",
            "/usr/bin",
        ] {
            if !Path::new(path).exists() {
                continue;
            }
            for use_ in [PathUse::Workspace, PathUse::Mount] {
                let refusal = refused(&paths, use_, path);
                assert!(
                    matches!(
                        refusal,
                        Refusal::Inside {
                            why: Protected::System,
                            ..
                        }
                    ),
                    "{path}: {refusal}"
                );
            }
        }
        for path in ["/", "/var"] {
            let refusal = refused(&paths, PathUse::Mount, path);
            assert!(
                matches!(refusal, Refusal::Holds { .. }),
                "{path}: {refusal}"
            );
            assert!(
                refusal.to_string().contains("no grant allows it"),
                "{refusal}"
            );
        }
        let text = refused(&paths, PathUse::Mount, "/var/run/docker/containerd").to_string();
        assert!(
            text.contains("(resolved: /run/docker/containerd)"),
            "{text}"
        );
    }

    #[test]
    fn agentgate_home_and_its_ancestors_are_refused() {
        let host = TestHost::new();
        let everything = PathGrants {
            workspaces: Some(vec!["/".into()]),
            mounts: None,
        };
        let paths = host.paths(&everything);
        let inside = host.dir(&host.agentgate, "runs/x");
        let refusal = refused(&paths, PathUse::Workspace, &inside);
        assert!(
            matches!(
                refusal,
                Refusal::Inside {
                    why: Protected::AgentgateHome,
                    ..
                }
            ),
            "{refusal}"
        );
        // The user's home holds AGENTGATE_HOME: refused, even by default's standards.
        let home = host.home.display().to_string();
        let refusal = refused(&paths, PathUse::Workspace, &home);
        assert!(
            matches!(
                refusal,
                Refusal::Holds {
                    why: Protected::AgentgateHome,
                    ..
                }
            ),
            "{refusal}"
        );
        // A sibling of AGENTGATE_HOME is fine.
        let project = host.dir(&host.home, "src/app");
        assert!(paths.check(PathUse::Workspace, &project, true).is_ok());
    }

    #[test]
    fn by_default_folders_strictly_below_home_and_temp_are_allowed() {
        let host = TestHost::new();
        let paths = host.paths(&PathGrants::default());
        let in_temp = host.dir(&host.temp, "work");
        let in_home = host.dir(&host.home, "src");
        for use_ in [PathUse::Workspace, PathUse::Mount] {
            assert!(paths.check(use_, &in_temp, true).is_ok());
            assert!(paths.check(use_, &in_home, true).is_ok());
        }
        // The temporary folder itself is not: it holds other users' sockets.
        let temp = host.temp.display().to_string();
        let refusal = refused(&paths, PathUse::Mount, &temp);
        let text = refusal.to_string();
        assert!(matches!(refusal, Refusal::NotAllowed { .. }), "{text}");
        assert!(text.contains("strictly below"), "{text}");
        assert!(text.contains(&format!("mounts: [{temp}]")), "{text}");
        let elsewhere = host.elsewhere("srv");
        let refusal = refused(&paths, PathUse::Workspace, &elsewhere);
        assert!(refusal.to_string().contains("`workspaces: ["), "{refusal}");
    }

    #[test]
    fn a_home_of_the_root_folder_allows_nothing_by_default() {
        let host = TestHost::new();
        let mut folders = host.folders();
        folders.user_home = Some("/".into());
        let paths = HostPaths::new(&PathGrants::default(), &folders);
        let elsewhere = host.elsewhere("srv");
        let refusal = refused(&paths, PathUse::Workspace, &elsewhere);
        assert!(matches!(refusal, Refusal::NotAllowed { .. }), "{refusal}");
        let in_temp = host.dir(&host.temp, "work");
        assert!(paths.check(PathUse::Workspace, &in_temp, true).is_ok());
    }

    #[test]
    fn an_operators_list_replaces_the_default_for_its_kind() {
        let host = TestHost::new();
        let listed = PathBuf::from(host.elsewhere("datasets"));
        let grants = PathGrants {
            workspaces: None,
            mounts: Some(vec![listed.clone()]),
        };
        let paths = host.paths(&grants);
        let in_temp = host.dir(&host.temp, "data");
        let refusal = refused(&paths, PathUse::Mount, &in_temp);
        assert!(
            refusal.to_string().contains("lists under `mounts:`"),
            "{refusal}"
        );
        // The listed folder itself and below it.
        let listed_path = listed.display().to_string();
        assert!(paths.check(PathUse::Mount, &listed_path, true).is_ok());
        let below = host.dir(&listed, "a/b");
        assert!(paths.check(PathUse::Mount, &below, true).is_ok());
        // Workspaces keep the default.
        assert!(paths.check(PathUse::Workspace, &in_temp, true).is_ok());
        // An empty list allows nothing.
        let none = host.paths(&PathGrants {
            workspaces: Some(vec![]),
            mounts: None,
        });
        let refusal = refused(&none, PathUse::Workspace, &in_temp);
        assert!(
            refusal.to_string().contains("allows no host folder"),
            "{refusal}"
        );
    }

    #[test]
    fn a_folder_holding_a_socket_or_a_socket_itself_is_refused() {
        let host = TestHost::new();
        let paths = host.paths(&PathGrants::default());
        let dir = host.dir(&host.temp, "agent");
        let socket = Path::new(&dir).join("agent.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for path in [dir.clone(), socket.display().to_string()] {
            for use_ in [PathUse::Workspace, PathUse::Mount] {
                let refusal = refused(&paths, use_, &path);
                assert!(
                    matches!(refusal, Refusal::Special { .. })
                        && refusal.to_string().contains("socket"),
                    "{path}: {refusal}"
                );
            }
        }
        // Its parent holds it only indirectly.
        let parent = Path::new(&dir).parent().unwrap();
        let inner = host.dir(parent, "sibling");
        assert!(paths.check(PathUse::Mount, &inner, true).is_ok());
    }

    #[test]
    fn a_symlink_is_judged_by_where_it_leads() {
        let host = TestHost::new();
        let paths = host.paths(&PathGrants::default());
        let link = host.temp.join("etc-link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let refusal = refused(&paths, PathUse::Mount, link.to_str().unwrap());
        assert!(
            matches!(&refusal, Refusal::Inside { folder, .. } if folder == Path::new("/etc")),
            "{refusal}"
        );
        assert!(
            refusal.to_string().contains("(resolved: /etc)"),
            "{refusal}"
        );
    }

    #[test]
    fn a_folder_to_be_created_is_checked_where_it_would_be() {
        let host = TestHost::new();
        let paths = host.paths(&PathGrants::default());
        let new = host.temp.join("new/project");
        let resolved = paths
            .check(PathUse::Workspace, new.to_str().unwrap(), false)
            .unwrap();
        assert_eq!(resolved, new.canonicalize().unwrap_or(resolved.clone()));
        let refusal = paths
            .check(PathUse::Workspace, "/etc/agentgate-new", false)
            .unwrap_err();
        assert!(matches!(refusal, Refusal::Inside { .. }), "{refusal}");
        // Where it must exist, a missing path says so.
        let refusal = paths
            .check(PathUse::Mount, new.to_str().unwrap(), true)
            .unwrap_err();
        assert!(refusal.is_missing(), "{refusal}");
        let refusal = paths.check(PathUse::Mount, "relative", true).unwrap_err();
        assert!(matches!(refusal, Refusal::NotAbsolute { .. }), "{refusal}");
    }

    #[test]
    fn a_bind_scope_allows_the_runs_own_folders_and_else_the_mount_policy() {
        let host = TestHost::new();
        let run_folder = host.dir(&host.agentgate, "runs/r1/sandbox");
        let paths = Arc::new(host.paths(&PathGrants::default()));
        let scope = BindScope::new(&[PathBuf::from(&run_folder)], paths.clone());
        assert!(scope.check(&run_folder).is_ok());
        let other_run = host.dir(&host.agentgate, "runs/r2");
        assert!(scope.check(&other_run).is_err());
        let data = host.dir(&host.temp, "data");
        assert!(scope.check(&data).is_ok());
        assert!(scope.check("/").is_err());
        // No scope set: nothing at all.
        assert!(BindScope::default().check(&data).is_err());
    }
}
