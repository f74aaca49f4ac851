//! Cloning at a branch, a tag or a commit, shallow or not.
//!
//! The remote's refs are listed first (one `ls-remote`), so a ref is told apart by
//! what the server has, not by its looks: `v1.0` may be a branch and `deadbeef` a tag.
//! Only what is asked for is fetched, with `depth` applied. A commit SHA that no ref
//! names is fetched directly when the server allows it; otherwise every branch and tag
//! is fetched (whole history: a shallow fetch cannot reach an arbitrary commit) and
//! the event log says so.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use git2::{build::CheckoutBuilder, AutotagOption, Direction, FetchOptions, Repository};

use super::credentials::{check_url, Secret};
use super::error::GitError;
use crate::wit::git::RepoState;

/// What a clone reports while it runs: a line of text, and objects received of total.
pub trait Report {
    fn progress(&self, message: String, current: Option<u64>, total: Option<u64>);
    fn warn(&self, message: String);
}

/// What the ref names on the remote.
#[derive(Debug, PartialEq)]
enum Target {
    Branch(String),
    Tag(String),
    Commit(String),
}

pub struct CloneSpec<'a> {
    pub url: &'a str,
    pub dest: &'a Path,
    pub reference: Option<&'a str>,
    pub depth: Option<u32>,
}

/// Clones `spec.url` into `spec.dest` (absent or empty) and checks out the ref.
pub fn clone(
    spec: &CloneSpec,
    secret: &Secret,
    report: &dyn Report,
    cancelled: &AtomicBool,
) -> Result<RepoState, GitError> {
    check_url(spec.url)?;
    let url = spec.url;
    let net = |e: git2::Error| GitError::from_git2(url, &e, secret.is_given());
    if spec.dest.exists()
        && std::fs::read_dir(spec.dest)
            .map_err(|e| GitError::repo(spec.dest, e))?
            .next()
            .is_some()
    {
        return Err(GitError::DestNotEmpty {
            path: spec.dest.display().to_string(),
        });
    }
    let repo = Repository::init(spec.dest).map_err(|e| GitError::repo(spec.dest, e))?;
    let mut remote = repo
        .remote("origin", url)
        .map_err(|e| GitError::repo(spec.dest, e))?;

    report.progress(format!("listing the refs of {url}"), None, None);
    let (advertised, default_branch) = {
        let mut callbacks = git2::RemoteCallbacks::new();
        secret.install(&mut callbacks);
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks), None)
            .map_err(net)?;
        let heads: Vec<String> = connection
            .list()
            .map_err(net)?
            .iter()
            .map(|head| head.name().to_string())
            .collect();
        let default = connection
            .default_branch()
            .ok()
            .and_then(|b| b.as_str().ok().map(str::to_string));
        (heads, default)
    };
    let target = resolve(url, spec.reference, &advertised, default_branch.as_deref())?;

    let mut fetch = |refspecs: &[&str], depth: Option<u32>| -> Result<(), git2::Error> {
        let mut callbacks = git2::RemoteCallbacks::new();
        secret.install(&mut callbacks);
        let mut last = Instant::now() - Duration::from_secs(1);
        callbacks.transfer_progress(move |p| {
            let done = p.received_objects() == p.total_objects();
            if done || last.elapsed() >= Duration::from_millis(200) {
                last = Instant::now();
                report.progress(
                    format!(
                        "receiving objects {}/{}, {}",
                        p.received_objects(),
                        p.total_objects(),
                        bytes(p.received_bytes() as u64)
                    ),
                    Some(p.received_objects() as u64),
                    Some(p.total_objects() as u64),
                );
            }
            // Returning false aborts the transfer: the run was cancelled.
            !cancelled.load(Ordering::Relaxed)
        });
        let mut options = FetchOptions::new();
        options.remote_callbacks(callbacks);
        options.download_tags(AutotagOption::None);
        if let Some(depth) = depth {
            options.depth(depth as i32);
        }
        remote.fetch(refspecs, Some(&mut options), None)
    };

    let commit_id = match &target {
        Target::Branch(branch) => {
            let local = format!("refs/remotes/origin/{branch}");
            fetch(&[&format!("+refs/heads/{branch}:{local}")], spec.depth).map_err(net)?;
            peel(&repo, &local)?
        }
        Target::Tag(tag) => {
            let local = format!("refs/tags/{tag}");
            fetch(&[&format!("+{local}:{local}")], spec.depth).map_err(net)?;
            peel(&repo, &local)?
        }
        Target::Commit(sha) => {
            let direct = sha.len() == 40
                && fetch(&[sha.as_str()], spec.depth).is_ok()
                && git2::Oid::from_str(sha).is_ok_and(|oid| repo.find_commit(oid).is_ok());
            if !direct {
                if spec.depth.is_some() {
                    report.warn(format!(
                        "{url} does not serve commit {sha} by itself; fetching every branch and tag with their whole history (depth is not applied)"
                    ));
                }
                fetch(
                    &[
                        "+refs/heads/*:refs/remotes/origin/*",
                        "+refs/tags/*:refs/tags/*",
                    ],
                    None,
                )
                .map_err(net)?;
            }
            let unknown = || GitError::UnknownRef {
                url: url.to_string(),
                reference: sha.clone(),
                known: known_refs(&advertised),
            };
            repo.revparse_single(sha)
                .and_then(|object| object.peel_to_commit())
                .map_err(|_| unknown())?
                .id()
        }
    };
    if cancelled.load(Ordering::Relaxed) {
        return Err(GitError::Other {
            url: url.to_string(),
            detail: "the clone was cancelled".into(),
        });
    }

    let commit = repo
        .find_commit(commit_id)
        .map_err(|e| GitError::repo(spec.dest, e))?;
    repo.checkout_tree(commit.as_object(), Some(CheckoutBuilder::new().force()))
        .map_err(|e| GitError::repo(spec.dest, e))?;
    let branch = match &target {
        Target::Branch(name) => {
            let mut local = repo
                .branch(name, &commit, true)
                .map_err(|e| GitError::repo(spec.dest, e))?;
            local
                .set_upstream(Some(&format!("origin/{name}")))
                .map_err(|e| GitError::repo(spec.dest, e))?;
            repo.set_head(&format!("refs/heads/{name}"))
                .map_err(|e| GitError::repo(spec.dest, e))?;
            Some(name.clone())
        }
        _ => {
            repo.set_head_detached(commit_id)
                .map_err(|e| GitError::repo(spec.dest, e))?;
            None
        }
    };
    report.progress(
        format!(
            "checked out {} at {commit_id}",
            spec.reference
                .map(str::to_string)
                .or(branch.clone())
                .unwrap_or_default()
        ),
        None,
        None,
    );
    Ok(RepoState {
        head: commit_id.to_string(),
        branch,
    })
}

/// Tells apart a branch, a tag and a commit by what the remote advertises.
fn resolve(
    url: &str,
    reference: Option<&str>,
    advertised: &[String],
    default_branch: Option<&str>,
) -> Result<Target, GitError> {
    let has = |name: &str| advertised.iter().any(|r| r == name);
    let Some(reference) = reference else {
        return match default_branch.and_then(|b| b.strip_prefix("refs/heads/")) {
            Some(branch) => Ok(Target::Branch(branch.to_string())),
            None => Err(GitError::Other {
                url: url.to_string(),
                detail: "the repository has no default branch (is it empty?); give workspace.ref"
                    .into(),
            }),
        };
    };
    let short = reference
        .strip_prefix("refs/heads/")
        .or_else(|| reference.strip_prefix("refs/tags/"))
        .unwrap_or(reference);
    if has(&format!("refs/heads/{short}")) && !reference.starts_with("refs/tags/") {
        return Ok(Target::Branch(short.to_string()));
    }
    if has(&format!("refs/tags/{short}")) {
        return Ok(Target::Tag(short.to_string()));
    }
    if (4..=40).contains(&reference.len()) && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Target::Commit(reference.to_ascii_lowercase()));
    }
    Err(GitError::UnknownRef {
        url: url.to_string(),
        reference: reference.to_string(),
        known: known_refs(advertised),
    })
}

/// A few of the remote's branches and tags, for an error message.
fn known_refs(advertised: &[String]) -> String {
    let names: Vec<&str> = advertised
        .iter()
        .filter_map(|r| {
            r.strip_prefix("refs/heads/")
                .or_else(|| r.strip_prefix("refs/tags/"))
        })
        .filter(|r| !r.ends_with("^{}"))
        .take(10)
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" (it has {})", names.join(", "))
    }
}

fn peel(repo: &Repository, name: &str) -> Result<git2::Oid, GitError> {
    repo.find_reference(name)
        .and_then(|r| r.peel_to_commit())
        .map(|c| c.id())
        .map_err(|e| GitError::repo(repo.path(), e))
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Set when the caller stopped waiting, so the blocking clone aborts at its next
/// progress callback.
#[derive(Default, Clone)]
pub struct Cancel(pub Arc<AtomicBool>);

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<String> {
        [
            "HEAD",
            "refs/heads/main",
            "refs/heads/v2",
            "refs/tags/v1.0",
            "refs/tags/v1.0^{}",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn refs_are_told_apart_by_what_the_remote_has() {
        let r = |x| resolve("u", x, &refs(), Some("refs/heads/main")).unwrap();
        assert_eq!(r(None), Target::Branch("main".into()));
        assert_eq!(r(Some("v2")), Target::Branch("v2".into()));
        assert_eq!(r(Some("refs/heads/main")), Target::Branch("main".into()));
        assert_eq!(r(Some("v1.0")), Target::Tag("v1.0".into()));
        assert_eq!(r(Some("ABC123")), Target::Commit("abc123".into()));
        let err = resolve("u", Some("nope"), &refs(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"nope\"") && err.contains("main, v2, v1.0)"),
            "{err}"
        );
    }
}
