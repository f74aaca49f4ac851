//! The registry database: `AGENTGATE_HOME/registry.db`.
//!
//! SQLite in WAL mode, so many `agentgate` processes (runs, `gc`, `sandboxes`) read
//! and write it at once; every write is one short transaction, and a writer that finds
//! the database locked waits for it (busy timeout) instead of failing. The schema is
//! versioned with `PRAGMA user_version` and migrated forward in an immediate
//! transaction, so two processes opening a new home do not both migrate it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use super::owner::Owner;

/// Migrations, in order: entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: one row per run and one per sandbox.
    "CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        folder TEXT NOT NULL,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,
        status TEXT,
        started_ms INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        finished_ms INTEGER,
        workspace TEXT,
        temporary_workspace INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_state ON runs(state);
    CREATE TABLE sandboxes (
        run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
        provider TEXT NOT NULL,
        sandbox_id TEXT,
        container_id TEXT,
        cgroup TEXT,
        workspace TEXT NOT NULL,
        mounts TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        state TEXT NOT NULL
    );",
    // 2: the workspace as `result.json` records it, so a crashed run's result says
    // where its work is.
    "ALTER TABLE runs ADD COLUMN workspace_record TEXT;",
    // 3: the sandbox's private state folder, outside the run's folder.
    "ALTER TABLE runs ADD COLUMN sandbox_state TEXT;",
];

/// WAL pages after which a commit checkpoints the WAL into the database.
const WAL_CHECKPOINT_PAGES: u32 = 100;

/// How long a writer waits for another process's transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong with `registry.db`; each message names the file, and the fix if any.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The home folder could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The home folder.
        path: PathBuf,
        /// Why it could not be created.
        source: std::io::Error,
    },
    /// SQLite failed on the database.
    #[error("sandbox registry {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file is not a SQLite database (overwritten or damaged); the message says how to
    /// start afresh.
    #[error(
        "sandbox registry {path} is damaged ({source}), so no run can be recorded for cleanup \
         after a crash; move it aside (mv {path} {path}.damaged, and its -wal and -shm files \
         if there are any) and agentgate starts a new one. The runs it knew are then unknown \
         to gc, which still finds their Docker objects by label",
        path = path.display()
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file system cannot do write-ahead logging (some network mounts).
    #[error(
        "sandbox registry {} cannot use write-ahead logging (journal mode {mode}); put \
         AGENTGATE_HOME on a local file system",
        path.display()
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept instead.
        mode: String,
    },
    /// A newer agentgate migrated the database past the schema this one knows.
    #[error(
        "sandbox registry {} has schema version {found}, newer than this agentgate knows \
         ({known}); use a newer agentgate with this home",
        path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The database's schema version.
        found: u32,
        /// The newest schema version this agentgate knows.
        known: u32,
    },
}

/// A run's state as the registry records it. `orphaned` is not stored: it is a
/// `running` row whose owner is gone ([`super::effective_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Its owner is at work on it, or died without recording an end.
    Running,
    /// It ended and left nothing behind (or gc removed what it left).
    Finished,
    /// Its owner died before the end; gc cleaned up after it and wrote its `result.json`.
    Crashed,
    /// Only computed, never stored: a `running` run whose owner is gone.
    Orphaned,
    /// The run ended, but its cleanup left something (a container, a pod, a cgroup,
    /// the sandbox's state folder): `gc` retries it on every pass until it is gone,
    /// then marks the row `finished`.
    CleanupFailed,
}

impl RunState {
    fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Crashed => "crashed",
            RunState::Orphaned => "orphaned",
            RunState::CleanupFailed => "cleanup-failed",
        }
    }

    fn parse(text: &str) -> RunState {
        match text {
            "finished" => RunState::Finished,
            "crashed" => RunState::Crashed,
            "orphaned" => RunState::Orphaned,
            "cleanup-failed" => RunState::CleanupFailed,
            _ => RunState::Running,
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A run as it starts.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// The TaskSpec's `metadata.name`.
    pub name: &'a str,
    /// The run's folder, `AGENTGATE_HOME/runs/<run-id>/`.
    pub folder: &'a Path,
    /// The `agentgate` process running it.
    pub owner: &'a Owner,
}

/// A sandbox as its creation starts: the id comes later ([`Registry::sandbox_created`]).
#[derive(Debug, Clone)]
pub struct NewSandbox<'a> {
    /// The run the sandbox belongs to.
    pub run_id: &'a str,
    /// The TaskSpec's `sandbox.provider`.
    pub provider: &'a str,
    /// The prefix of the names of the cgroups the host makes for the run's processes.
    pub cgroup: &'a str,
    /// The workspace's root on the host, bound into the sandbox.
    pub workspace: &'a Path,
    /// `sandbox.mounts` as JSON.
    pub mounts: String,
}

/// One run and its sandbox, as listed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    /// The run's id.
    pub run_id: String,
    /// The TaskSpec's `metadata.name`.
    pub name: String,
    /// The run's folder on the host.
    pub folder: String,
    /// [`Owner`] in its label form, kept as text so a row a newer agentgate wrote
    /// still lists.
    pub owner: String,
    /// The state as stored; see [`super::effective_state`] for `orphaned`.
    pub state: RunState,
    /// The `status` of the run's `result.json` once it ended (`crashed` when gc wrote it,
    /// `unknown` when gc found the run had finished after all); absent while it runs.
    pub status: Option<String>,
    /// When the run started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// The owner's last heartbeat (every 10 s while the run lasts), in milliseconds since the
    /// Unix epoch.
    pub heartbeat_ms: u64,
    /// When the run ended, in milliseconds since the Unix epoch; absent while it runs.
    pub finished_ms: Option<u64>,
    /// The workspace's root on the host, once prepared.
    pub workspace: Option<String>,
    /// The source meant the workspace to be removed when the run ends. gc keeps it
    /// all the same: the run never collected what its agent did there.
    pub temporary_workspace: bool,
    /// The workspace as the run's `result.json` records it (JSON), once prepared.
    #[serde(skip)]
    pub workspace_record: Option<String>,
    /// The sandbox's private state folder, once chosen (before it is created).
    pub sandbox_state: Option<String>,
    /// The run's sandbox, once its creation began.
    pub sandbox: Option<SandboxRow>,
}

/// A run's sandbox, as listed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRow {
    /// The TaskSpec's `sandbox.provider`.
    pub provider: String,
    /// The provider's id for the sandbox; absent until it was created.
    pub sandbox_id: Option<String>,
    /// The sandbox's container, when it is one.
    pub container_id: Option<String>,
    /// The prefix of the names of the cgroups the host makes for the run's processes.
    pub cgroup: Option<String>,
    /// The workspace's root on the host, bound into the sandbox.
    pub workspace: String,
    /// `sandbox.mounts` as recorded; null when the stored JSON cannot be read.
    pub mounts: serde_json::Value,
    /// When its creation began, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// `creating`, `live`, `destroyed` or `reaped`.
    pub state: String,
}

/// An open connection to `AGENTGATE_HOME/registry.db`.
pub struct Registry {
    path: PathBuf,
    conn: Connection,
}

impl RegistryError {
    /// What SQLite said about the database at `path`; a file that is not a database
    /// (overwritten, damaged) is told apart, with how to recover.
    fn sqlite(path: &Path, source: rusqlite::Error) -> RegistryError {
        let damaged = matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
        );
        let path = path.to_path_buf();
        if damaged {
            RegistryError::Corrupt { path, source }
        } else {
            RegistryError::Sqlite { path, source }
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Switches the database to WAL and returns the journal mode it has.
///
/// The switch needs the database to itself, and SQLite answers `SQLITE_BUSY` at once,
/// without the busy handler, where waiting could deadlock (two connections that both
/// read the new file). Runs started together in a fresh home meet exactly that, so the
/// switch is retried until the busy timeout. WAL is persistent: once one connection
/// made it, the others find it set and change nothing.
fn enable_wal(conn: &Connection) -> rusqlite::Result<String> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let attempt = conn
            .pragma_query_value(None, "journal_mode", |row| row.get::<_, String>(0))
            .and_then(|mode| {
                if mode.eq_ignore_ascii_case("wal") {
                    Ok(mode)
                } else {
                    conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
                }
            });
        match attempt {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

impl Registry {
    /// Opens (creating and migrating when needed) the registry of `home`.
    pub fn open(home: &Path) -> Result<Registry, RegistryError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .map_err(|source| RegistryError::Create {
                path: home.to_path_buf(),
                source,
            })?;
        let path = home.join("registry.db");
        let sqlite = |source| RegistryError::sqlite(&path, source);
        let conn = Connection::open(&path).map_err(sqlite)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
        // WAL lets readers and one writer work at once; NORMAL sync is durable across
        // a crash of the process (not of the machine), which is what orphans come from.
        let mode = enable_wal(&conn).map_err(sqlite)?;
        if !mode.eq_ignore_ascii_case("wal") {
            // A file system without shared memory (some network mounts) cannot do
            // WAL; concurrent runs would then block each other for long.
            return Err(RegistryError::NoWal {
                path: path.clone(),
                mode,
            });
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sqlite)?;
        // The last connection to close would otherwise checkpoint the WAL into the
        // database and delete it, and the next process recreate it: four fsyncs per
        // `agentgate` command, most of a short run's I/O. The WAL stays instead
        // (a copy of the registry is `registry.db` with its `-wal` beside it). The
        // first process to open it reads the whole WAL to rebuild its index, so it is
        // kept short: checkpointed in whichever commit takes it past 100 pages (a run
        // writes about 12), not SQLite's default of 1000.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(sqlite)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
            .map_err(sqlite)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sqlite)?;
        let mut registry = Registry { path, conn };
        registry.migrate()?;
        Ok(registry)
    }

    fn error(&self, source: rusqlite::Error) -> RegistryError {
        RegistryError::sqlite(&self.path, source)
    }

    fn migrate(&mut self) -> Result<(), RegistryError> {
        let known = MIGRATIONS.len() as u32;
        let path = self.path.clone();
        let sqlite = |source| RegistryError::sqlite(&path, source);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let found: u32 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(sqlite)?;
        if found > known {
            return Err(RegistryError::TooNew {
                path: path.clone(),
                found,
                known,
            });
        }
        for migration in &MIGRATIONS[found as usize..] {
            tx.execute_batch(migration).map_err(sqlite)?;
        }
        if found < known {
            tx.pragma_update(None, "user_version", known)
                .map_err(sqlite)?;
        }
        tx.commit().map_err(sqlite)
    }

    /// Records a run that starts now, owned by `run.owner`.
    pub fn run_started(&self, run: &NewRun<'_>) -> Result<(), RegistryError> {
        let now = now_ms();
        self.conn
            .execute(
                "INSERT INTO runs (run_id, name, folder, owner, state, started_ms, heartbeat_ms)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
                params![
                    run.run_id,
                    run.name,
                    run.folder.display().to_string(),
                    run.owner.to_string(),
                    now
                ],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The run's workspace on the host; `temporary` when the run removes it at cleanup;
    /// `record` is how `result.json` describes it (JSON).
    pub fn workspace_prepared(
        &self,
        run_id: &str,
        workspace: &Path,
        temporary: bool,
        record: &str,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE runs SET workspace = ?2, temporary_workspace = ?3, workspace_record = ?4
                 WHERE run_id = ?1",
                params![run_id, workspace.display().to_string(), temporary, record],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Where the sandbox's private state will be; recorded before the folder is made,
    /// so gc finds it after a crash at any point.
    pub fn sandbox_state_chosen(&self, run_id: &str, state: &Path) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE runs SET sandbox_state = ?2 WHERE run_id = ?1",
                params![run_id, state.display().to_string()],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Records a sandbox before the provider is asked for it, so a crash during
    /// creation still leaves a row that says where to look.
    pub fn sandbox_creating(&self, sandbox: &NewSandbox<'_>) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO sandboxes
                 (run_id, provider, cgroup, workspace, mounts, created_ms, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'creating')",
                params![
                    sandbox.run_id,
                    sandbox.provider,
                    sandbox.cgroup,
                    sandbox.workspace.display().to_string(),
                    sandbox.mounts,
                    now_ms()
                ],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The provider created the sandbox `sandbox_id` (a container when `container_id` is set);
    /// the sandbox is `live`.
    pub fn sandbox_created(
        &self,
        run_id: &str,
        sandbox_id: &str,
        container_id: Option<&str>,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE sandboxes SET sandbox_id = ?2, container_id = ?3, state = 'live'
                 WHERE run_id = ?1",
                params![run_id, sandbox_id, container_id],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The sandbox is gone: `destroyed` by its run, or `reaped` by gc. A sandbox its
    /// run destroyed stays `destroyed`.
    pub fn sandbox_ended(&self, run_id: &str, state: &str) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE sandboxes SET state = ?2 WHERE run_id = ?1 AND state <> 'destroyed'",
                params![run_id, state],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The owner is still at work on the run.
    pub fn heartbeat(&self, run_id: &str) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE runs SET heartbeat_ms = ?2 WHERE run_id = ?1 AND state = 'running'",
                params![run_id, now_ms()],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The run ended: `finished` (or `cleanup-failed`) by its owner, or `crashed` as gc
    /// found it. Only a `running` row changes, so gc never overwrites a run its owner
    /// finished.
    pub fn run_ended(
        &self,
        run_id: &str,
        state: RunState,
        status: &str,
    ) -> Result<bool, RegistryError> {
        let changed = self
            .conn
            .execute(
                "UPDATE runs SET state = ?2, status = ?3, finished_ms = ?4
                 WHERE run_id = ?1 AND state = 'running'",
                params![run_id, state.as_str(), status, now_ms()],
            )
            .map_err(|e| self.error(e))?;
        Ok(changed == 1)
    }

    /// gc removed what the cleanup of a `cleanup-failed` run left: the run is
    /// `finished`, with the status it ended with.
    pub fn cleanup_done(&self, run_id: &str) -> Result<bool, RegistryError> {
        let changed = self
            .conn
            .execute(
                "UPDATE runs SET state = 'finished' WHERE run_id = ?1 AND state = 'cleanup-failed'",
                params![run_id],
            )
            .map_err(|e| self.error(e))?;
        Ok(changed == 1)
    }

    /// Every run, newest first; unless `all`, only those that still need something:
    /// `running` ones and `cleanup-failed` ones.
    pub fn runs(&self, all: bool) -> Result<Vec<RunRow>, RegistryError> {
        let sql = format!(
            "SELECT r.run_id, r.name, r.folder, r.owner, r.state, r.status, r.started_ms,
                    r.heartbeat_ms, r.finished_ms, r.workspace, r.temporary_workspace,
                    r.workspace_record, s.provider, s.sandbox_id, s.container_id, s.cgroup,
                    s.workspace, s.mounts, s.created_ms, s.state, r.sandbox_state
             FROM runs r LEFT JOIN sandboxes s ON s.run_id = r.run_id
             {}
             ORDER BY r.started_ms DESC, r.run_id DESC",
            if all {
                ""
            } else {
                "WHERE r.state IN ('running', 'cleanup-failed')"
            }
        );
        let mut statement = self.conn.prepare(&sql).map_err(|e| self.error(e))?;
        let rows = statement
            .query_map([], |row| {
                let provider: Option<String> = row.get(12)?;
                let sandbox = match provider {
                    None => None,
                    Some(provider) => Some(SandboxRow {
                        provider,
                        sandbox_id: row.get(13)?,
                        container_id: row.get(14)?,
                        cgroup: row.get(15)?,
                        workspace: row.get(16)?,
                        mounts: serde_json::from_str(&row.get::<_, String>(17)?)
                            .unwrap_or(serde_json::Value::Null),
                        created_ms: row.get(18)?,
                        state: row.get(19)?,
                    }),
                };
                Ok(RunRow {
                    run_id: row.get(0)?,
                    name: row.get(1)?,
                    folder: row.get(2)?,
                    owner: row.get(3)?,
                    state: RunState::parse(&row.get::<_, String>(4)?),
                    status: row.get(5)?,
                    started_ms: row.get(6)?,
                    heartbeat_ms: row.get(7)?,
                    finished_ms: row.get(8)?,
                    workspace: row.get(9)?,
                    temporary_workspace: row.get(10)?,
                    workspace_record: row.get(11)?,
                    sandbox_state: row.get(20)?,
                    sandbox,
                })
            })
            .map_err(|e| self.error(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))
    }

    /// Whether the registry knows `run_id`.
    pub fn knows(&self, run_id: &str) -> Result<bool, RegistryError> {
        self.conn
            .query_row(
                "SELECT 1 FROM runs WHERE run_id = ?1",
                params![run_id],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_opening_a_fresh_home_together_all_get_the_registry() {
        for _ in 0..5 {
            let home = tempfile::tempdir().unwrap();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
            let openers: Vec<_> = (0..16)
                .map(|_| {
                    let (home, barrier) = (home.path().to_path_buf(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        Registry::open(&home).map(|_| ())
                    })
                })
                .collect();
            for opener in openers {
                opener
                    .join()
                    .unwrap()
                    .expect("every opener gets the registry");
            }
        }
    }

    #[test]
    fn the_wal_outlives_each_process_and_stays_short() {
        let home = tempfile::tempdir().unwrap();
        let wal = home.path().join("registry.db-wal");
        let owner = Owner::current().unwrap();
        for process in 0..40 {
            let registry = Registry::open(home.path()).unwrap();
            for run in 0..10 {
                let run_id = format!("r{process}-{run}");
                registry
                    .run_started(&NewRun {
                        run_id: &run_id,
                        name: "task",
                        folder: Path::new("/tmp/r"),
                        owner: &owner,
                    })
                    .unwrap();
                registry.heartbeat(&run_id).unwrap();
            }
            drop(registry);
            // Not checkpointed and deleted on close: the next process reuses it.
            assert!(wal.is_file(), "after process {process}");
        }
        // Checkpointed every WAL_CHECKPOINT_PAGES, so the next opener reads little
        // (SQLite's default of 1000 pages lets it grow past 4 MB).
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(len < 1 << 20, "the WAL is {len} bytes");
        let registry = Registry::open(home.path()).unwrap();
        assert_eq!(registry.runs(true).unwrap().len(), 400);
    }

    #[test]
    fn a_run_is_recorded_heartbeats_and_ends_once() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::open(home.path()).unwrap();
        let owner = Owner::current().unwrap();
        registry
            .run_started(&NewRun {
                run_id: "r1",
                name: "task",
                folder: Path::new("/tmp/r1"),
                owner: &owner,
            })
            .unwrap();
        registry
            .sandbox_creating(&NewSandbox {
                run_id: "r1",
                provider: "docker",
                cgroup: "r1-",
                workspace: Path::new("/tmp/ws"),
                mounts: "[]".into(),
            })
            .unwrap();
        registry.sandbox_created("r1", "abc", Some("abc")).unwrap();
        registry
            .sandbox_state_chosen("r1", Path::new("/tmp/agentgate-1"))
            .unwrap();
        registry
            .workspace_prepared("r1", Path::new("/tmp/ws"), false, r#"{"root":"/tmp/ws"}"#)
            .unwrap();
        registry.heartbeat("r1").unwrap();
        let runs = registry.runs(false).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].owner, owner.to_string());
        assert_eq!(runs[0].sandbox.as_ref().unwrap().state, "live");
        assert_eq!(
            runs[0].workspace_record.as_deref(),
            Some(r#"{"root":"/tmp/ws"}"#)
        );
        assert_eq!(runs[0].sandbox_state.as_deref(), Some("/tmp/agentgate-1"));
        assert!(registry
            .run_ended("r1", RunState::Finished, "succeeded")
            .unwrap());
        // gc arriving late must not turn a finished run into a crashed one.
        assert!(!registry
            .run_ended("r1", RunState::Crashed, "crashed")
            .unwrap());
        assert!(registry.runs(false).unwrap().is_empty());
        assert_eq!(registry.runs(true).unwrap()[0].state, RunState::Finished);
        // Reopening keeps the schema and the rows.
        drop(registry);
        let registry = Registry::open(home.path()).unwrap();
        assert!(registry.knows("r1").unwrap());
    }

    #[test]
    fn a_run_whose_cleanup_failed_stays_listed_until_gc_is_done_with_it() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::open(home.path()).unwrap();
        let owner = Owner::current().unwrap();
        registry
            .run_started(&NewRun {
                run_id: "r1",
                name: "task",
                folder: Path::new("/tmp/r1"),
                owner: &owner,
            })
            .unwrap();
        assert!(registry
            .run_ended("r1", RunState::CleanupFailed, "error")
            .unwrap());
        let rows = registry.runs(false).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].state, RunState::CleanupFailed);
        assert_eq!(
            serde_json::to_value(rows[0].state).unwrap(),
            "cleanup-failed"
        );
        // gc arriving for an orphan cannot turn it into a crashed run.
        assert!(!registry
            .run_ended("r1", RunState::Crashed, "crashed")
            .unwrap());
        assert!(registry.cleanup_done("r1").unwrap());
        assert!(!registry.cleanup_done("r1").unwrap());
        assert!(registry.runs(false).unwrap().is_empty());
        let row = &registry.runs(true).unwrap()[0];
        assert_eq!(row.state, RunState::Finished);
        assert_eq!(row.status.as_deref(), Some("error"));
    }

    #[test]
    fn a_newer_schema_is_refused_with_advice() {
        let home = tempfile::tempdir().unwrap();
        drop(Registry::open(home.path()).unwrap());
        let conn = Connection::open(home.path().join("registry.db")).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let error = Registry::open(home.path()).err().unwrap().to_string();
        assert!(error.contains("schema version 99"), "{error}");
        assert!(error.contains("newer agentgate"), "{error}");
    }

    #[test]
    fn a_damaged_database_is_named_with_the_way_out() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("registry.db"),
            "not a database at all\n".repeat(400),
        )
        .unwrap();
        let error = Registry::open(home.path()).err().unwrap();
        assert!(matches!(error, RegistryError::Corrupt { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("is damaged"), "{text}");
        assert!(text.contains("registry.db.damaged"), "{text}");
    }
}
