//! The workspace phase: the source plugin prepares the workspace, the host checks or
//! creates the root it chose and writes its scaffold files, and takes the baseline the
//! agent's changes are compared with. Its value, [`Prepared`], lives until the run's
//! cleanup, where [`Prepared::compare`] collects the changes and [`Compared::release`]
//! hands the work back to the source and removes a temporary root: a workspace is
//! released once, after the sandbox that used it is gone.
//!
//! The plugin calls the phase makes are behind [`Source`], so the phase can be tested
//! with a fake source.
//!
//! The root is opened once, here, before anything runs in the workspace. Scaffold
//! files are written and change snapshots read through that `cap_std` handle, so a
//! plugin cannot name a path outside it and an agent that later renames the root
//! away (and puts, say, a symlink to `/etc` at its path) cannot redirect them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Permissions, PermissionsExt};
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::changes::{self, Baseline, Changes};
use super::phase::{Outcome, RunEnv};
use super::requests;
use super::shortfall::{Shortfall, Shortfalls};
use crate::host_paths::{self, PathUse};
use crate::record::{WorkspaceRecord, WORKSPACE_SCRATCH};
use crate::runtime::instance::SourceInstance;
use crate::runtime::PluginError;
use crate::wit::workspace_source::exports::agentgate::plugin::source::{
    Lifetime, PreparedWorkspace, RootKind, WorkspaceRequest,
};

/// How long a source may take to release the workspace at cleanup.
const RELEASE_LIMIT: Duration = Duration::from_secs(30);

/// What the engine asks of a workspace source plugin.
pub(super) trait Source: Send {
    fn prepare<'a>(
        &'a mut self,
        request: &'a WorkspaceRequest,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<PreparedWorkspace, PluginError>>;
    fn release<'a>(
        &'a mut self,
        workspace: &'a PreparedWorkspace,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<(), PluginError>>;
    /// What the plugin printed on its own stdout/stderr, for `plugins.log`.
    fn plugin_stdio(&self) -> Vec<u8>;
}

impl Source for SourceInstance {
    fn prepare<'a>(
        &'a mut self,
        request: &'a WorkspaceRequest,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<PreparedWorkspace, PluginError>> {
        Box::pin(SourceInstance::prepare(self, request, deadline))
    }

    fn release<'a>(
        &'a mut self,
        workspace: &'a PreparedWorkspace,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(SourceInstance::release(self, workspace, deadline))
    }

    fn plugin_stdio(&self) -> Vec<u8> {
        SourceInstance::plugin_stdio(self)
    }
}

/// A prepared workspace, with the source that prepared it and the baseline its
/// changes are compared with.
pub(super) struct Prepared {
    source: Box<dyn Source>,
    /// The workspace as the source described it, handed back at release.
    described: PreparedWorkspace,
    pub workspace: Workspace,
    baseline: Baseline,
}

/// A workspace whose changes were collected, waiting for its release.
pub(super) struct Compared {
    source: Box<dyn Source>,
    described: PreparedWorkspace,
    pub workspace: Workspace,
}

/// Prepares the run's workspace through `source` by `deadline`.
pub(super) async fn prepare(
    mut source: Box<dyn Source>,
    env: &RunEnv<'_>,
    deadline: Instant,
) -> Result<Prepared, Outcome> {
    let scratch = env
        .folder
        .scratch(WORKSPACE_SCRATCH)
        .map_err(|e| Outcome::host(format!("creating the scratch workspace: {e}")))?;
    env.ctx.allow_repo_root(&scratch);
    let request = requests::workspace_request(env.spec, &env.ctx.run_id, &scratch);
    let described = source
        .prepare(&request, deadline)
        .await
        .map_err(Outcome::plugin)?;
    // Any source plugin may name any root: one outside the run's folder is held to
    // the policy before it is created or read, and again once resolved.
    check_root(env, &described.root, false)?;
    let workspace = materialize(&described).map_err(|e| Outcome::host(e.to_string()))?;
    check_root(env, &workspace.root.display().to_string(), true)?;
    env.ctx.allow_repo_root(&workspace.root);
    env.events
        .host_log("info", format!("workspace: {}", described.description));
    // Masked like result.json: the registry keeps it for a crashed run's result.
    let record = env.redactor.apply(
        serde_json::to_string(&workspace.record(env.spec.spec.execution.workspace.source.clone()))
            .expect("records serialize"),
    );
    if let Err(e) =
        env.tracker
            .workspace_prepared(&workspace.root, workspace.remove_at_cleanup, &record)
    {
        env.registry_error(e);
    }
    let baseline = Baseline::take(&workspace, env)
        .map_err(|e| Outcome::host(format!("reading the workspace: {e}")))?;
    Ok(Prepared {
        source,
        described,
        workspace,
        baseline,
    })
}

/// Refuses a workspace root outside the run's folder that the host path policy
/// refuses (a `local` path or `fresh` destPath, or a plugin's own choice).
fn check_root(env: &RunEnv, root: &str, must_exist: bool) -> Result<(), Outcome> {
    let run_folder = env.folder.path().canonicalize().unwrap_or_default();
    let inside_run = host_paths::resolve(root, false)
        .is_ok_and(|(resolved, _)| resolved.starts_with(&run_folder));
    if inside_run {
        return Ok(());
    }
    env.host_paths
        .check(PathUse::Workspace, root, must_exist)
        .map(|_| ())
        .map_err(|refusal| Outcome::invalid(format!("the workspace root: {refusal}")))
}

impl Prepared {
    /// Collects what the agent changed (the sandbox is gone by now).
    pub fn compare(self, env: &RunEnv, shortfalls: &mut Shortfalls) -> (Changes, Compared) {
        let changes = changes::collect(&self.workspace, self.baseline, env, shortfalls);
        let compared = Compared {
            source: self.source,
            described: self.described,
            workspace: self.workspace,
        };
        (changes, compared)
    }
}

impl Compared {
    /// Hands the workspace back to its source (a push, a pull request: when that fails
    /// the work was not delivered) and removes a root the host created for the run.
    pub async fn release(mut self, env: &RunEnv<'_>, plugin: &str, shortfalls: &mut Shortfalls) {
        let deadline = Instant::now() + RELEASE_LIMIT;
        if let Err(e) = self.source.release(&self.described, deadline).await {
            shortfalls.add(Shortfall::Release(format!("releasing the workspace: {e}")));
        }
        env.folder
            .append_plugin_log(plugin, &self.source.plugin_stdio());
        if self.workspace.remove_at_cleanup {
            if let Err(e) = std::fs::remove_dir_all(&self.workspace.root) {
                // gc never removes a workspace: this one is the user's to remove.
                shortfalls.cleanup(format!(
                    "removing the temporary workspace {}: {e}",
                    self.workspace.root.display()
                ));
            }
        }
    }
}

/// A workspace ready for a sandbox.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical absolute path.
    pub root: PathBuf,
    /// The root as it was when the workspace was prepared.
    pub dir: Arc<Dir>,
    pub readonly: bool,
    /// The host created the root and removes it at cleanup.
    pub remove_at_cleanup: bool,
    /// The source plugin's one-line description.
    pub description: String,
    /// The commit checked out when the workspace was prepared, when the root is the
    /// top of a git repository (a `git` or `github` workspace, or a local clone).
    pub commit: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("workspace root {0:?} is not an absolute path")]
    NotAbsolute(String),
    #[error("workspace {path} does not exist or is not a directory; check workspace.path")]
    Missing { path: String },
    #[error("workspace destination {path} already exists and is not empty; choose a new destPath or empty it")]
    NotEmpty { path: String },
    #[error("writing the workspace at {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the workspace root {path} was replaced during the run ({now}); its changes are read from the directory that was there before")]
    Replaced { path: String, now: String },
    #[error("scaffold file {file:?}: {source}")]
    Scaffold {
        file: String,
        source: std::io::Error,
    },
}

pub fn materialize(prepared: &PreparedWorkspace) -> Result<Workspace, WorkspaceError> {
    let root = Path::new(&prepared.root);
    if !root.is_absolute() {
        return Err(WorkspaceError::NotAbsolute(prepared.root.clone()));
    }
    let io = |source| WorkspaceError::Io {
        path: prepared.root.clone(),
        source,
    };
    let created = match prepared.root_kind {
        RootKind::Existing => {
            if !root.is_dir() {
                return Err(WorkspaceError::Missing {
                    path: prepared.root.clone(),
                });
            }
            false
        }
        RootKind::Create => {
            if root.exists() {
                let empty = root.is_dir() && std::fs::read_dir(root).map_err(io)?.next().is_none();
                if !empty {
                    return Err(WorkspaceError::NotEmpty {
                        path: prepared.root.clone(),
                    });
                }
            }
            std::fs::create_dir_all(root).map_err(io)?;
            true
        }
    };
    let root = root.canonicalize().map_err(io)?;
    let dir = Dir::open_ambient_dir(&root, ambient_authority()).map_err(io)?;
    if !prepared.scaffold.is_empty() {
        for file in &prepared.scaffold {
            write_scaffold_file(&dir, &file.path, &file.contents, file.executable).map_err(
                |source| WorkspaceError::Scaffold {
                    file: file.path.clone(),
                    source,
                },
            )?;
        }
    }
    let commit = root
        .join(".git")
        .exists()
        .then(|| crate::capabilities::git::head(&root).ok())
        .flatten()
        .map(|state| state.head);
    Ok(Workspace {
        commit,
        root,
        dir: Arc::new(dir),
        readonly: prepared.readonly,
        remove_at_cleanup: created && prepared.lifetime == Lifetime::Temporary,
        description: prepared.description.clone(),
    })
}

impl Workspace {
    /// How `result.json` describes the workspace, prepared by the TaskSpec's `source`.
    pub fn record(&self, source: String) -> WorkspaceRecord {
        WorkspaceRecord {
            source,
            root: self.root.display().to_string(),
            readonly: self.readonly,
            description: self.description.clone(),
            commit: self.commit.clone(),
        }
    }

    /// Whether `root` still names the directory opened when the workspace was
    /// prepared.
    pub fn check_root(&self) -> Result<(), WorkspaceError> {
        let held = rustix::fs::fstat(&*self.dir).map_err(|e| WorkspaceError::Io {
            path: self.root.display().to_string(),
            source: e.into(),
        })?;
        let now = match std::fs::symlink_metadata(&self.root) {
            Ok(meta) if (meta.dev(), meta.ino()) == (held.st_dev as u64, held.st_ino as u64) => {
                return Ok(())
            }
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&self.root).unwrap_or_default();
                format!(
                    "it is now a symlink to {}",
                    crate::escape::name(target.as_os_str().as_encoded_bytes())
                )
            }
            Ok(_) => "another entry now has its name".into(),
            Err(e) => format!("it cannot be found: {e}"),
        };
        Err(WorkspaceError::Replaced {
            path: self.root.display().to_string(),
            now,
        })
    }
}

fn write_scaffold_file(
    dir: &Dir,
    path: &str,
    contents: &[u8],
    executable: bool,
) -> std::io::Result<()> {
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        dir.create_dir_all(parent)?;
    }
    dir.write(path, contents)?;
    if executable {
        dir.set_permissions(path, Permissions::from_mode(0o755))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::workspace_source::exports::agentgate::plugin::source::ScaffoldFile;

    fn prepared(root: &Path, kind: RootKind, scaffold: Vec<ScaffoldFile>) -> PreparedWorkspace {
        PreparedWorkspace {
            root: root.display().to_string(),
            root_kind: kind,
            readonly: false,
            lifetime: Lifetime::Temporary,
            scaffold,
            description: String::new(),
        }
    }

    #[test]
    fn creates_root_and_confines_scaffold() {
        let base = std::env::temp_dir().join(format!("ag-ws-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("new");
        let file = |path: &str| ScaffoldFile {
            path: path.into(),
            contents: b"x".to_vec(),
            executable: true,
        };
        let ws = materialize(&prepared(&root, RootKind::Create, vec![file("a/b.sh")])).unwrap();
        assert!(ws.remove_at_cleanup);
        assert!(root.join("a/b.sh").is_file());
        ws.check_root().unwrap();

        // The root is no longer empty: creating it again is refused.
        let err = materialize(&prepared(&root, RootKind::Create, vec![])).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");

        // A scaffold path that escapes the root is refused by cap-std.
        let other = base.join("other");
        let err = materialize(&prepared(
            &other,
            RootKind::Create,
            vec![file("../escape.txt")],
        ))
        .unwrap_err();
        assert!(err.to_string().contains("../escape.txt"), "{err}");
        assert!(!base.join("escape.txt").exists());

        let err =
            materialize(&prepared(&base.join("missing"), RootKind::Existing, vec![])).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn a_replaced_root_is_noticed() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        let ws = materialize(&prepared(&root, RootKind::Create, vec![])).unwrap();
        ws.check_root().unwrap();
        std::fs::rename(&root, base.path().join("away")).unwrap();
        std::os::unix::fs::symlink("/etc", &root).unwrap();
        let err = ws.check_root().unwrap_err().to_string();
        assert!(
            err.contains("replaced") && err.contains("a symlink to /etc"),
            "{err}"
        );
        std::fs::remove_file(&root).unwrap();
        let err = ws.check_root().unwrap_err().to_string();
        assert!(err.contains("cannot be found"), "{err}");
    }
}

#[cfg(test)]
mod phase_tests {
    use std::sync::Mutex;

    use super::*;
    use crate::engine::phase::fakes::TestRun;
    use crate::record::RunStatus;
    use crate::wit::types::Error;
    use crate::wit::workspace_source::exports::agentgate::plugin::source::ScaffoldFile;

    /// A source that prepares a fresh root in the run's scratch folder (as a clone
    /// does), or `root` when set.
    #[derive(Default)]
    struct FakeSource {
        root: Option<String>,
        refuse_release: bool,
        calls: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Source for FakeSource {
        fn prepare<'a>(
            &'a mut self,
            request: &'a WorkspaceRequest,
            _deadline: Instant,
        ) -> BoxFuture<'a, Result<PreparedWorkspace, PluginError>> {
            self.calls.lock().unwrap().push("prepare");
            let root = self
                .root
                .clone()
                .unwrap_or_else(|| format!("{}/clone", request.scratch_dir));
            Box::pin(async move {
                Ok(PreparedWorkspace {
                    root,
                    root_kind: RootKind::Create,
                    readonly: false,
                    lifetime: Lifetime::Temporary,
                    scaffold: vec![ScaffoldFile {
                        path: "README.md".into(),
                        contents: b"hello".to_vec(),
                        executable: false,
                    }],
                    description: "a fake clone".into(),
                })
            })
        }

        fn release<'a>(
            &'a mut self,
            _workspace: &'a PreparedWorkspace,
            _deadline: Instant,
        ) -> BoxFuture<'a, Result<(), PluginError>> {
            self.calls.lock().unwrap().push("release");
            let refuse = self.refuse_release;
            Box::pin(async move {
                if refuse {
                    return Err(PluginError::Reported {
                        plugin: "fake-source".into(),
                        call: "release",
                        error: Error::Failed("push refused".into()),
                    });
                }
                Ok(())
            })
        }

        fn plugin_stdio(&self) -> Vec<u8> {
            b"fake source says hi\n".to_vec()
        }
    }

    const EXECUTION: &str = "  workspace:\n    source: local\n    path: /path/to/project\n  \
                             agent:\n    driver: fake";

    #[tokio::test]
    async fn prepare_then_compare_and_release_removes_a_temporary_root() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let source = FakeSource::default();
        let calls = source.calls.clone();
        let prepared = prepare(
            Box::new(source),
            &env,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|_| panic!("prepare failed"));
        let root = prepared.workspace.root.clone();
        assert!(root.join("README.md").is_file());
        assert!(prepared.workspace.remove_at_cleanup);

        // The agent's work.
        std::fs::write(root.join("new.txt"), "made by the agent").unwrap();
        let mut shortfalls = Shortfalls::default();
        let (changes, compared) = prepared.compare(&env, &mut shortfalls);
        assert_eq!(changes.from, "snapshot");
        let paths: Vec<&str> = changes.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["new.txt"]);
        let record = compared.workspace.record("local".into());
        assert_eq!(record.description, "a fake clone");

        compared.release(&env, "fake-source", &mut shortfalls).await;
        assert_eq!(*calls.lock().unwrap(), ["prepare", "release"]);
        assert!(!root.exists(), "the temporary root is removed at release");
        assert!(
            shortfalls.messages().is_empty(),
            "{:?}",
            shortfalls.messages()
        );
        let log = std::fs::read_to_string(env.folder.path().join("plugins.log")).unwrap();
        assert!(log.contains("fake source says hi"), "{log}");
        let events = test.events(&env);
        assert!(
            events
                .iter()
                .any(|e| e.to_string().contains("workspace: a fake clone")),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn a_release_that_fails_is_a_shortfall() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let source = FakeSource {
            refuse_release: true,
            ..FakeSource::default()
        };
        let prepared = prepare(
            Box::new(source),
            &env,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|_| panic!("prepare failed"));
        let mut shortfalls = Shortfalls::default();
        let (_, compared) = prepared.compare(&env, &mut shortfalls);
        compared.release(&env, "fake-source", &mut shortfalls).await;
        assert_eq!(
            shortfalls.messages(),
            ["releasing the workspace: plugin fake-source: release failed: push refused"]
        );
        assert!(!shortfalls.left_something());
    }

    #[tokio::test]
    async fn a_root_the_host_path_policy_refuses_fails_the_phase_as_invalid() {
        let test = TestRun::new(EXECUTION);
        let env = test.env();
        let source = FakeSource {
            root: Some("/".into()),
            ..FakeSource::default()
        };
        let Err(Outcome::Failed { status, message }) = prepare(
            Box::new(source),
            &env,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        else {
            panic!("the root / was accepted");
        };
        assert_eq!(status, RunStatus::Invalid);
        assert!(message.starts_with("the workspace root: "), "{message}");
    }
}
