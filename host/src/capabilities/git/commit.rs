//! Recording and delivering work: commit everything, branch, push, read HEAD.

use std::path::Path;

use git2::{IndexAddOption, PushOptions, Repository, Signature};

use super::credentials::{check_url, Secret};
use super::error::GitError;
use crate::runtime::bindings::git::RepoState;

fn open(path: &Path) -> Result<Repository, GitError> {
    Repository::open(path).map_err(|e| GitError::repo(path, e))
}

/// Stages every change (untracked and deleted files included) and commits it.
pub fn commit_all(path: &Path, message: &str, name: &str, email: &str) -> Result<String, GitError> {
    let repo = open(path)?;
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
    Ok(id.to_string())
}

/// Creates (or moves) `branch` to HEAD and checks it out.
pub fn checkout_new_branch(path: &Path, branch: &str) -> Result<(), GitError> {
    let repo = open(path)?;
    let err = |e: git2::Error| GitError::repo(path, e);
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(err)?;
    repo.branch(branch, &head, true).map_err(err)?;
    repo.set_head(&format!("refs/heads/{branch}")).map_err(err)
}

/// Pushes `refspec` to `url`; a ref the server rejects is an error naming it.
pub fn push(path: &Path, url: &str, refspec: &str, secret: &Secret) -> Result<(), GitError> {
    check_url(url)?;
    let repo = open(path)?;
    let mut remote = repo
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
    let repo = open(path)?;
    let head = repo.head().map_err(|e| GitError::repo(path, e))?;
    let commit = head.peel_to_commit().map_err(|e| GitError::repo(path, e))?;
    Ok(RepoState {
        head: commit.id().to_string(),
        branch: if repo.head_detached().unwrap_or(false) {
            None
        } else {
            head.shorthand().ok().map(str::to_string)
        },
    })
}
