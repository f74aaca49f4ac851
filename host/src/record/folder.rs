//! The run's folder under `AGENTGATE_HOME/runs/<run-id>/`.
//!
//! `result.json`, `events.ndjson`, `stdout.log` and `stderr.log` (what the agent's
//! commands printed), `plugins.log` (what plugins printed themselves), `taskspec.json`
//! (the TaskSpec as the run read it) and `changes.patch`, plus the scratch directory
//! the host hands to a source that creates a workspace ([`WORKSPACE_SCRATCH`], kept).
//! Everything written here is masked with the run's [`Redactor`].
//!
//! The sandbox's private state ([`SandboxState`]) is deliberately not here: the kernel
//! shows a bind mount's host path in the sandbox's `/proc/self/mountinfo`, so a HOME
//! bound from the run's folder would tell the agent where `AGENTGATE_HOME` is.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::beneath::{Folder, OpenError};

use super::logs::{append_plugin_log, OutputLogs};
use super::redact::Redactor;
use super::result::RunResult;

/// The scratch directory a source that creates a workspace is given (`fresh` without a
/// `destPath`, clones): the workspace itself, kept after the run.
pub const WORKSPACE_SCRATCH: &str = "workspace";

/// Where runs of earlier agentgates kept the sandbox's private state, in the run's
/// folder; gc still removes it after their crashes.
const LEGACY_SANDBOX_STATE: &str = "sandbox";

/// The sandbox's private state (its HOME): a folder of its own under the system's
/// temporary folder, with a random name, so that nothing of `AGENTGATE_HOME` shows
/// in the sandbox's mount tables. It must outlive each command of the sandbox (files
/// are written to HOME before the agent runs), so it is a host folder, not a
/// per-command tmpfs. The run records it in the registry before creating it and
/// removes it at cleanup; gc removes it after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxState {
    path: PathBuf,
}

impl SandboxState {
    /// A new location, not created yet: `<temp dir>/agentgate-state-<random>`.
    pub fn choose() -> std::io::Result<SandboxState> {
        let name = format!("agentgate-state-{}", uuid::Uuid::new_v4().simple());
        Ok(SandboxState {
            path: std::path::absolute(std::env::temp_dir())?.join(name),
        })
    }

    /// The state of a run as the registry recorded it; rows of earlier agentgates
    /// recorded none, their state was in the run's folder.
    pub fn recorded(path: Option<&str>, run_folder: &Path) -> SandboxState {
        SandboxState {
            path: path.map_or_else(|| run_folder.join(LEGACY_SANDBOX_STATE), PathBuf::from),
        }
    }

    /// The state folder's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the run's egress proxy keeps its socket and the name files the sandbox
    /// binds: `<state>-egress`, beside the state rather than in it, so nothing the
    /// sandbox can write holds it. Created by the run when it has egress; removed with
    /// the state. Like the state, its host path shows in the sandbox's mount tables (a
    /// bind mount's source always does): a temporary folder with a random name, nothing
    /// of `AGENTGATE_HOME` (tests/all/egress_bypass.rs checks both sandboxes).
    pub fn egress_dir(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push("-egress");
        PathBuf::from(name)
    }

    /// Creates the folder, mode 0700, this user's. The temporary folder is shared, so
    /// anything already there (a folder or a symlink another user planted) is an
    /// error, never reused: `mkdir` fails on an existing name without following it.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::DirBuilder::new().mode(0o700).create(&self.path)
    }

    /// Whether the folder is there and is this user's own folder (not a symlink, not
    /// someone else's folder at a name this user chose and then removed).
    pub fn is_ours(&self) -> bool {
        is_own_folder(&self.path)
    }

    /// Removes the folder and its egress folder and everything in them, when they are
    /// ours (symlinks inside are removed, never followed). What is not ours is left
    /// alone.
    pub fn remove(&self) -> std::io::Result<()> {
        for folder in [self.path.clone(), self.egress_dir()] {
            if !is_own_folder(&folder) {
                continue;
            }
            match std::fs::remove_dir_all(&folder) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether `path` is a folder (not a symlink) of this user.
fn is_own_folder(path: &Path) -> bool {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir() && meta.uid() == uid)
}

/// A run's folder, `AGENTGATE_HOME/runs/<run-id>/`, and the redactor that masks
/// everything written in it.
pub struct RunFolder {
    dir: PathBuf,
    redactor: Arc<Redactor>,
}

impl RunFolder {
    /// Where the folder of run `run_id` is: `home/runs/<run_id>`.
    pub fn location(home: &Path, run_id: &str) -> PathBuf {
        home.join("runs").join(run_id)
    }

    /// Creates `home/runs/<run_id>` (private to the user).
    pub fn create(
        home: &Path,
        run_id: &str,
        redactor: Arc<Redactor>,
    ) -> std::io::Result<RunFolder> {
        let dir = RunFolder::location(home, run_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(RunFolder { dir, redactor })
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The path of the run's event log, `events.ndjson`.
    pub fn events(&self) -> PathBuf {
        self.dir.join("events.ndjson")
    }

    /// The path of `result.json`.
    pub fn result(&self) -> PathBuf {
        self.dir.join("result.json")
    }

    /// A fresh, empty, private directory inside the run folder.
    pub fn scratch(&self, name: &str) -> std::io::Result<PathBuf> {
        let path = self.dir.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(path)
    }

    /// Removes a scratch directory that nothing was put in.
    pub fn prune_scratch(&self, name: &str) {
        let _ = std::fs::remove_dir(self.dir.join(name));
    }

    /// Creates `stdout.log` and `stderr.log`, bounded and masked with the run's redactor.
    pub fn output_logs(&self) -> std::io::Result<OutputLogs> {
        OutputLogs::create(&self.dir, self.redactor.clone())
    }

    /// Appends what `plugin` printed to `plugins.log`, masked, under a `==> plugin <==`
    /// header; nothing when `output` is empty.
    pub fn append_plugin_log(&self, plugin: &str, output: &[u8]) {
        append_plugin_log(&self.dir, &self.redactor, plugin, output);
    }

    /// Writes `changes.patch` (git workspaces), masked like every file here.
    pub fn write_patch(&self, patch: &[u8]) -> std::io::Result<()> {
        std::fs::write(
            self.dir.join("changes.patch"),
            self.redactor.apply_bytes(patch),
        )
    }

    /// Writes `taskspec.json`: the TaskSpec the run was given, masked. Each string is
    /// masked before the JSON is written (where a secret holding `"` or `\` would be
    /// escaped out of recognition), and the text once more.
    pub fn write_taskspec(&self, spec: &serde_json::Value) -> std::io::Result<()> {
        fn mask(value: &mut serde_json::Value, redactor: &Redactor) {
            match value {
                serde_json::Value::String(text) => {
                    *text = redactor.apply(std::mem::take(text));
                }
                serde_json::Value::Array(items) => {
                    items.iter_mut().for_each(|item| mask(item, redactor));
                }
                serde_json::Value::Object(fields) => {
                    fields.values_mut().for_each(|item| mask(item, redactor));
                }
                _ => {}
            }
        }
        let mut spec = spec.clone();
        mask(&mut spec, &self.redactor);
        let json = serde_json::to_string_pretty(&spec).expect("JSON values serialize");
        std::fs::write(
            self.dir.join("taskspec.json"),
            self.redactor.apply(json) + "\n",
        )
    }

    /// Writes `result.json`. The result must already be masked ([`RunResult::mask`]);
    /// the text is masked once more, so no field is ever written in clear.
    pub fn write_result(&self, result: &RunResult) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(result).expect("results serialize");
        std::fs::write(self.result(), self.redactor.apply(json) + "\n")
    }
}

/// A run folder opened to be read back or added to (`agentgate report`, `runs`,
/// `show`), by the rules the workspace is read by ([`crate::beneath::Folder`]): the
/// folder and each file are opened without following a symlink, a file is read only
/// when the opened descriptor is a regular file (a FIFO put in its place neither
/// blocks nor is read), every read is bounded, and a file is replaced by a rename,
/// never written through whatever is at its name.
pub struct OpenedRunFolder {
    folder: Folder,
}

impl OpenedRunFolder {
    /// Opens the folder at `path`; a symlink there is refused (`ELOOP`/`ENOTDIR`).
    pub fn open(path: &Path) -> std::io::Result<OpenedRunFolder> {
        Ok(OpenedRunFolder {
            folder: Folder::open(path)?,
        })
    }

    /// The regular file `name` of the folder, opened for reading.
    pub fn open_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        self.folder.open_file(name).map_err(|e| refused(name, e))
    }

    /// At most `max` bytes of the regular file `name`, and whether it held more.
    pub fn read(&self, name: &str, max: u64) -> std::io::Result<(Vec<u8>, bool)> {
        self.folder.read(name, max).map_err(|e| refused(name, e))
    }

    /// Writes `name` as a new file and renames it into place: whatever was at the name
    /// (a symlink, a FIFO) is replaced, never written through.
    pub fn replace(&self, name: &str, contents: &[u8]) -> std::io::Result<()> {
        self.folder.replace(name, contents)
    }
}

/// Why the file `name` of a run folder was not read, as the readers of a run folder
/// (`runs`, `show`, `report`) say it.
fn refused(name: &str, error: OpenError) -> std::io::Error {
    match error {
        OpenError::Io(e) => e,
        OpenError::NotRegular { kind } => std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{name} is not a regular file ({kind:?}); it is not read"),
        ),
        other => std::io::Error::other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{FileType, Mode};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_sandbox_state_is_a_fresh_private_folder_outside_any_home() {
        let state = SandboxState::choose().unwrap();
        assert!(state.path().starts_with(std::env::temp_dir()));
        let name = state.path().file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("agentgate-state-") && name.len() > 40,
            "{name}"
        );
        assert_ne!(state, SandboxState::choose().unwrap());
        state.create().unwrap();
        let meta = std::fs::symlink_metadata(state.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert!(state.is_ours());
        std::fs::create_dir(state.path().join(".config")).unwrap();
        std::fs::write(state.path().join(".config/token"), "x").unwrap();
        state.remove().unwrap();
        assert!(!state.path().exists());
        // Removing what is gone is not an error (gc after the run's own cleanup).
        state.remove().unwrap();
    }

    #[test]
    fn a_planted_name_is_never_used_nor_removed_through() {
        let shared = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        std::fs::write(victim.path().join("precious"), "x").unwrap();
        let state = SandboxState {
            path: shared.path().join("agentgate-planted"),
        };
        // Another user plants a symlink where the run is about to create its state.
        std::os::unix::fs::symlink(victim.path(), state.path()).unwrap();
        let error = state.create().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(!state.is_ours());
        state.remove().unwrap();
        assert!(victim.path().join("precious").exists());
        assert!(std::fs::symlink_metadata(state.path()).is_ok());

        // Another user's folder at a recorded name (after the run removed its own) is
        // left to them.
        let theirs = SandboxState {
            path: shared.path().join("agentgate-theirs"),
        };
        theirs.create().unwrap();
        std::fs::write(theirs.path().join("precious"), "x").unwrap();
        std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
        assert!(!theirs.is_ours());
        theirs.remove().unwrap();
        assert!(theirs.path().join("precious").exists());
    }

    #[test]
    fn rows_of_earlier_agentgates_name_the_state_in_the_run_folder() {
        let folder = Path::new("/home/u/.agentgate/runs/r1");
        assert_eq!(
            SandboxState::recorded(None, folder).path(),
            folder.join("sandbox")
        );
        assert_eq!(
            SandboxState::recorded(Some("/tmp/agentgate-1"), folder).path(),
            Path::new("/tmp/agentgate-1")
        );
    }

    #[test]
    fn a_run_folder_is_read_and_replaced_without_following_links_or_blocking() {
        let home = tempfile::tempdir().unwrap();
        let folder = home.path().join("run");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("result.json"), "0123456789").unwrap();
        let outside = home.path().join("outside");
        std::fs::write(&outside, "secret").unwrap();
        std::os::unix::fs::symlink(&outside, folder.join("taskspec.json")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            folder.join("changes.patch"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, folder.join("report.html")).unwrap();

        let opened = OpenedRunFolder::open(&folder).unwrap();
        assert_eq!(
            opened.read("result.json", 4).unwrap(),
            (b"0123".to_vec(), true)
        );
        assert!(!opened.read("result.json", 99).unwrap().1);
        // A symlink is not followed, a FIFO neither blocks nor is read.
        assert!(opened.read("taskspec.json", 99).is_err());
        let fifo = opened.read("changes.patch", 99).unwrap_err();
        assert!(fifo.to_string().contains("not a regular file"), "{fifo}");
        // The planted link is replaced, its target untouched.
        opened.replace("report.html", b"<html>").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
        let meta = std::fs::symlink_metadata(folder.join("report.html")).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(
            std::fs::read(folder.join("report.html")).unwrap(),
            b"<html>"
        );
        // The folder itself as a symlink is refused.
        let linked = home.path().join("linked");
        std::os::unix::fs::symlink(&folder, &linked).unwrap();
        assert!(OpenedRunFolder::open(&linked).is_err());
    }
}
