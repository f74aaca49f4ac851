//! Recording and delivering work: commit everything, branch, push, read HEAD.
//!
//! Each works on the host's own copy of the workspace's repository
//! ([`HostRepo`](super::host_repo::HostRepo)), never through the settings in its
//! `.git`, and what it changes is written back into the workspace's `.git`.

use std::path::Path;

use git2::{IndexAddOption, PushOptions, Signature};

use super::credentials::{check_url, Secret};
use super::error::GitError;
use super::host_repo::{HostRepo, Parts};
use crate::wit::git::RepoState;

/// Stages every change (untracked and deleted files included) and commits it.
pub fn commit_all(path: &Path, message: &str, name: &str, email: &str) -> Result<String, GitError> {
    let host = HostRepo::open(path, Parts::WorkTree)?;
    let repo = &host.repo;
    let err = |e: git2::Error| GitError::repo(path, e);
    let mut index = repo.index().map_err(err)?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(err)?;
    index.update_all(["*"], None).map_err(err)?;
    index.write().map_err(err)?;
    let tree = repo
        .find_tree(index.write_tree().map_err(err)?)
        .map_err(err)?;
    let author = Signature::now(name, email).map_err(err)?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    let id = repo
        .commit(Some("HEAD"), &author, &author, message, &tree, &parents)
        .map_err(err)?;
    // The ref HEAD names moved (HEAD itself when detached).
    let moved = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|head| head.symbolic_target().ok().flatten().map(str::to_string))
        .unwrap_or_else(|| "HEAD".to_string());
    host.write_back(&[&moved], true)
        .map_err(|e| GitError::repo(path, format!("writing the commit back: {e}")))?;
    Ok(id.to_string())
}

/// Creates (or moves) `branch` to HEAD and checks it out.
pub fn checkout_new_branch(path: &Path, branch: &str) -> Result<(), GitError> {
    if !git2::Branch::name_is_valid(branch).unwrap_or(false) {
        return Err(GitError::repo(
            path,
            format!("{branch:?} is not a branch name"),
        ));
    }
    let host = HostRepo::open(path, Parts::Refs)?;
    let head = host
        .repo
        .refname_to_id("HEAD")
        .map_err(|e| GitError::repo(path, e))?;
    let name = format!("refs/heads/{branch}");
    let written = host
        .write_ref_file(&name, &format!("{head}\n"))
        .and_then(|()| host.write_ref_file("HEAD", &format!("ref: {name}\n")))
        .and_then(|()| host.write_back(&[&name, "HEAD"], false));
    written.map_err(|e| GitError::repo(path, format!("writing branch {branch}: {e}")))
}

/// Pushes `refspec` of the repository at `path` to `url`; a ref the server rejects is
/// an error naming it. `url` is used as given: no `insteadOf` or `pushInsteadOf`
/// applies, and nothing in the workspace's `.git/config` is read.
pub fn push(path: &Path, url: &str, refspec: &str, secret: &Secret) -> Result<(), GitError> {
    check_url(url)?;
    let host = HostRepo::open(path, Parts::Objects)?;
    let mut remote = host
        .repo
        .remote_anonymous(url)
        .map_err(|e| GitError::repo(path, e))?;
    let mut rejected = Vec::new();
    {
        let mut callbacks = git2::RemoteCallbacks::new();
        secret.install(&mut callbacks);
        callbacks.push_update_reference(|name, status| {
            if let Some(status) = status {
                rejected.push(format!("{name}: {status}"));
            }
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        remote
            .push(&[refspec], Some(&mut options))
            .map_err(|e| GitError::from_git2(url, &e, secret.is_given()))?;
    }
    if rejected.is_empty() {
        Ok(())
    } else {
        Err(GitError::Other {
            url: url.to_string(),
            detail: format!("the server rejected {}", rejected.join("; ")),
        })
    }
}

/// The commit checked out, and its branch unless detached.
pub fn head(path: &Path) -> Result<RepoState, GitError> {
    let host = HostRepo::open(path, Parts::Refs)?;
    let repo = &host.repo;
    let head = repo.head().map_err(|e| GitError::repo(path, e))?;
    let commit = head
        .target()
        .ok_or_else(|| GitError::repo(path, "HEAD names no commit"))?;
    Ok(RepoState {
        head: commit.to_string(),
        branch: if repo.head_detached().unwrap_or(false) {
            None
        } else {
            head.shorthand().ok().map(str::to_string)
        },
    })
}
