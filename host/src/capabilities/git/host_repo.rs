//! A workspace's repository as the host reads and writes it: never through its settings.
//!
//! A workspace's `.git` is the agent's to write. libgit2 reads a repository's config
//! whenever it opens one: `url.*.insteadOf` / `pushInsteadOf` rewrite where a push goes
//! (and its credentials with it), `include.path` makes the host read any file (a FIFO
//! hangs it), `core.worktree` points the work tree at a host folder. It also follows
//! `objects/info/alternates`, a symlinked ref or pack, and a `.git` file or symlink to
//! another repository. So the host never opens a workspace's `.git` with libgit2.
//!
//! [`HostRepo::open`] copies the parts that are data (`HEAD`, `packed-refs`, `refs/`,
//! and when asked `shallow`, `index` and `objects/`: loose objects and packs, never
//! `objects/info/`) into a temporary repository of the host's own. Each is a regular
//! file opened by one name relative to its folder without following a link (by
//! [`crate::beneath`]); a link, a FIFO or a device is left out, and `.git` itself must
//! be a directory. That repository gets an empty in-memory config, so no setting
//! rewrites a URL, names a proxy or a helper, and its work tree is the workspace root
//! whatever `core.worktree` says. What a call changes (new objects, a ref, the index)
//! is written back the same way: a new file renamed into place, never through a link.
//!
//! The price is a copy of the object store (in the system's temporary folder) for each
//! call that needs objects (push, status, diff, commit); `head` and branching copy only
//! the refs.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use git2::{Config, Repository};
use rustix::fs::Mode;
use rustix::io::Errno;

use super::error::GitError;
use crate::beneath::{self, NewFile, OpenError};

/// How much of the workspace's repository a call needs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// `HEAD` and the refs: what names commits.
    Refs,
    /// The refs, the objects and `shallow`: what a push sends.
    Objects,
    /// Everything, the index included, with the workspace as the work tree.
    WorkTree,
}

/// A host-owned copy of a workspace's repository, removed when dropped.
pub struct HostRepo {
    pub repo: Repository,
    /// The workspace's `.git`, opened without following a link.
    workspace_git: OwnedFd,
    /// Loose objects copied from the workspace (`xx/yyyy…`): the others are new.
    copied_objects: HashSet<String>,
    dir: tempfile::TempDir,
}

impl HostRepo {
    /// Copies what `parts` names of the repository at `root` (a work tree holding
    /// `.git`) and opens the copy with an empty config.
    pub fn open(root: &Path, parts: Parts) -> Result<HostRepo, GitError> {
        let fail = |detail: String| GitError::Repo {
            path: root.display().to_string(),
            detail,
        };
        let root_dir = beneath::open_dir(rustix::fs::CWD, root)
            .map_err(|e| fail(format!("cannot open the workspace: {e}")))?;
        let workspace_git = match beneath::open_dir(&root_dir, ".git") {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(fail(
                    ".git is not a directory (a symlink or a `gitdir:` file); the host does not follow it to another repository".into(),
                ))
            }
            Err(e) => return Err(fail(format!("cannot open .git: {e}"))),
        };
        let dir = tempfile::Builder::new()
            .prefix("agentgate-git-")
            .tempdir()
            .map_err(|e| fail(format!("creating the host's copy: {e}")))?;
        let mut host = HostRepo {
            repo: Repository::init_bare(dir.path()).map_err(|e| fail(e.to_string()))?,
            workspace_git,
            copied_objects: HashSet::new(),
            dir,
        };
        host.copy_in(parts)
            .map_err(|e| fail(format!("copying the repository: {e}")))?;
        // Reopen, so that nothing the init read or cached survives, then drop every
        // setting: the operator's files included, nothing rewrites or redirects.
        host.repo = Repository::open_bare(host.dir.path()).map_err(|e| fail(e.to_string()))?;
        let empty = Config::new().map_err(|e| fail(e.to_string()))?;
        host.repo
            .set_config(&empty)
            .map_err(|e| fail(e.to_string()))?;
        if parts == Parts::WorkTree {
            host.repo
                .set_workdir(root, false)
                .map_err(|e| fail(e.to_string()))?;
        }
        Ok(host)
    }

    fn copy_in(&mut self, parts: Parts) -> std::io::Result<()> {
        let to = self.dir.path().to_path_buf();
        let from = &self.workspace_git;
        if !copy_file(from, "HEAD", &to.join("HEAD"))? {
            return Err(std::io::Error::other("HEAD is missing or not a file"));
        }
        copy_file(from, "packed-refs", &to.join("packed-refs"))?;
        if let Ok(refs) = beneath::open_dir(from, "refs") {
            copy_tree(&refs, &to.join("refs"))?;
        }
        if parts == Parts::Refs {
            return Ok(());
        }
        copy_file(from, "shallow", &to.join("shallow"))?;
        if parts == Parts::WorkTree {
            copy_file(from, "index", &to.join("index"))?;
        }
        let Ok(objects) = beneath::open_dir(from, "objects") else {
            return Ok(());
        };
        for name in names(&objects)? {
            if name == "pack" {
                let Ok(packs) = beneath::open_dir(&objects, "pack") else {
                    continue;
                };
                for file in names(&packs)? {
                    if file.starts_with("pack-")
                        && (file.ends_with(".pack") || file.ends_with(".idx"))
                    {
                        copy_file(&packs, &file, &to.join("objects/pack").join(&file))?;
                    }
                }
            } else if is_hex(&name, 2) {
                let Ok(fanout) = beneath::open_dir(&objects, name.as_str()) else {
                    continue;
                };
                std::fs::create_dir_all(to.join("objects").join(&name))?;
                for file in names(&fanout)? {
                    if is_hex(&file, 38)
                        && copy_file(&fanout, &file, &to.join("objects").join(&name).join(&file))?
                    {
                        self.copied_objects.insert(format!("{name}/{file}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes back into the workspace what a call made in the copy: its new loose
    /// objects, the refs named (`HEAD`, `refs/heads/…`, as the copy holds them), and the
    /// index when asked.
    pub fn write_back(&self, refs: &[&str], index: bool) -> std::io::Result<()> {
        let copy = self.dir.path();
        let objects_copy = copy.join("objects");
        let mut objects: Option<OwnedFd> = None;
        for entry in std::fs::read_dir(&objects_copy)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if !is_hex(&name, 2) {
                continue;
            }
            for file in std::fs::read_dir(objects_copy.join(&name))? {
                let file = file?.file_name().to_string_lossy().into_owned();
                if self.copied_objects.contains(&format!("{name}/{file}")) {
                    continue;
                }
                let objects = match &objects {
                    Some(fd) => fd,
                    None => objects.insert(make_dir_at(&self.workspace_git, "objects")?),
                };
                let fanout = make_dir_at(objects, &name)?;
                let bytes = std::fs::read(objects_copy.join(&name).join(&file))?;
                replace_file(&fanout, &file, &bytes, 0o444)?;
            }
        }
        for name in refs {
            let (parents, file) = match name.rsplit_once('/') {
                Some((parents, file)) => (Some(parents), file),
                None => (None, *name),
            };
            let mut dir = self.workspace_git.as_fd().try_clone_to_owned()?;
            for part in parents.into_iter().flat_map(|p| p.split('/')) {
                dir = make_dir_at(&dir, part)?;
            }
            replace_file(&dir, file, &std::fs::read(copy.join(name))?, 0o644)?;
        }
        if index {
            replace_file(
                &self.workspace_git,
                "index",
                &std::fs::read(copy.join("index"))?,
                0o644,
            )?;
        }
        Ok(())
    }

    /// Writes `name` (a loose ref, or `HEAD`) into the copy, so that
    /// [`HostRepo::write_back`] can take it to the workspace.
    pub fn write_ref_file(&self, name: &str, content: &str) -> std::io::Result<()> {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)
    }
}

fn is_hex(name: &str, len: usize) -> bool {
    name.len() == len && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The directory `name` under `at`, made when absent; a link there is refused.
fn make_dir_at(at: &OwnedFd, name: &str) -> std::io::Result<OwnedFd> {
    Ok(beneath::make_dir(at, name, Mode::from_raw_mode(0o755))?)
}

/// The names in the directory open at `dir` (those that are text), `.` and `..`
/// left out.
fn names(dir: &OwnedFd) -> std::io::Result<Vec<String>> {
    Ok(beneath::list(dir)?
        .into_iter()
        .filter_map(|(name, _)| String::from_utf8(name).ok())
        .collect())
}

/// Copies `name` under `at` to `to` if it is a regular file; false if it is absent or
/// anything else (a link, a FIFO, a device, a directory).
fn copy_file(at: &OwnedFd, name: &str, to: &Path) -> std::io::Result<bool> {
    let mut file = match beneath::open_regular(at, name, None) {
        Ok(file) => file,
        Err(OpenError::NotRegular { .. }) => return Ok(false),
        Err(OpenError::Io(e))
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR | libc::EISDIR | libc::ENXIO)
            ) =>
        {
            return Ok(false)
        }
        Err(OpenError::Io(e)) => return Err(e),
        Err(e) => return Err(std::io::Error::other(e)),
    };
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::io::copy(&mut file, &mut File::create(to)?)?;
    Ok(true)
}

/// Copies the regular files under the directory open at `from` to `to`, folders
/// included, links and special files left out.
fn copy_tree(from: &OwnedFd, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for name in names(from)? {
        match beneath::open_dir(from, name.as_str()) {
            Ok(sub) => copy_tree(&sub, &to.join(&name))?,
            Err(_) => {
                copy_file(from, &name, &to.join(&name))?;
            }
        }
    }
    Ok(())
}

/// Replaces `name` under `dir` with `bytes`: written to a new file, then renamed over
/// whatever was there (a link at `name` is replaced, never followed).
fn replace_file(dir: &OwnedFd, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    NewFile::write(dir, name, bytes, Mode::from_raw_mode(mode))
}

#[cfg(test)]
mod tests {
    use rustix::fs::FileType;

    use super::*;

    /// A repository with one commit on `main`, made with libgit2.
    fn repository(dir: &Path) -> git2::Oid {
        let repo = Repository::init(dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let me = git2::Signature::now("t", "t@example.com").unwrap();
        let id = repo
            .commit(Some("refs/heads/main"), &me, &me, "one", &tree, &[])
            .unwrap();
        repo.set_head("refs/heads/main").unwrap();
        id
    }

    #[test]
    fn links_and_fifos_are_left_out_and_writes_replace_links() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let head = repository(&work);
        let outside = root.path().join("outside");
        std::fs::write(&outside, format!("{head}\n")).unwrap();
        let refs = work.join(".git/refs/heads");
        std::os::unix::fs::symlink(&outside, refs.join("linked")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            refs.join("fifo").as_path(),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();

        let host = HostRepo::open(&work, Parts::Refs).unwrap();
        assert_eq!(host.repo.refname_to_id("refs/heads/main").unwrap(), head);
        assert!(host.repo.find_reference("refs/heads/linked").is_err());
        assert!(host.repo.find_reference("refs/heads/fifo").is_err());

        // A write to the linked ref replaces the link, never the file it names.
        host.write_ref_file(
            "refs/heads/linked",
            "0000000000000000000000000000000000000001\n",
        )
        .unwrap();
        host.write_back(&["refs/heads/linked"], false).unwrap();
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            format!("{head}\n")
        );
        assert!(!std::fs::symlink_metadata(refs.join("linked"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
