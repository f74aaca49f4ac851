//! The host side of `agentgate:plugin/git`: repositories on the host, through libgit2.
//!
//! A plugin (normally `workspace-git` or `workspace-github`) says what to clone; this
//! module does it ([`clone`]) with credentials that live only in a callback
//! ([`credentials`]), reads what changed ([`changes`]) and records and delivers work
//! ([`commit`]). Every path must lie under a directory the run gave out (the scratch
//! directory of the workspace request, then the prepared workspace), so a plugin cannot
//! point git at the rest of the host. Every call after the clone works on a host-owned
//! copy of the repository ([`host_repo`]), since the workspace's `.git` is the agent's
//! to write; a push goes to the URL recorded at the clone ([`Origins`]) unless the
//! plugin names one. The clone URL and the push URL (and whether it may push at all)
//! are checked against the plugin's `git` scope first ([`scope`]).
//! libgit2 blocks, so each call runs on a blocking thread; a clone
//! the caller stops waiting for aborts at its next progress report.

mod changes;
mod clone;
pub mod credentials;
mod error;
mod host_repo;
mod scope;
pub(crate) mod unit;

mod commit;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use changes::{diff, status};
pub use commit::{checkout_new_branch, commit_all, head, push};
pub use error::GitError;

use crate::capabilities::PluginView;
use crate::record::EventBody;
use crate::record::EventSink;
use crate::wit::git::{CloneRequest, Credentials, FileChange, Host, RepoState, Signature};
use crate::wit::types::Error;
use credentials::Secret;

/// The URL each repository of a run was cloned from, by its resolved path: recorded by
/// the host at the clone, before any agent ran, and where a push goes by default.
#[derive(Default)]
pub struct Origins(Mutex<HashMap<PathBuf, String>>);

impl Origins {
    fn record(&self, repo: PathBuf, url: String) {
        self.0.lock().unwrap().insert(repo, url);
    }

    fn of(&self, repo: &Path) -> Option<String> {
        self.0.lock().unwrap().get(repo).cloned()
    }
}

/// Reports clone progress as the plugin's events.
struct Events {
    sink: Arc<EventSink>,
    plugin: Arc<str>,
}

impl clone::Report for Events {
    fn progress(&self, message: String, current: Option<u64>, total: Option<u64>) {
        self.sink.emit(
            &self.plugin,
            EventBody::Progress {
                phase: "clone".into(),
                message,
                current,
                total,
            },
        );
    }
    fn warn(&self, message: String) {
        self.sink.emit(
            &self.plugin,
            EventBody::Log {
                level: "warn",
                message,
            },
        );
    }
}

impl PluginView<'_> {
    /// `path` resolved, if it lies under a directory the run gave to git.
    fn repo_path(&self, path: &str) -> Result<PathBuf, GitError> {
        let path = Path::new(path);
        // A clone destination may not exist yet: resolve its parent.
        let resolved = match (path.canonicalize(), path.parent(), path.file_name()) {
            (Ok(p), _, _) => Some(p),
            (Err(_), Some(parent), Some(name)) => parent.canonicalize().ok().map(|p| p.join(name)),
            _ => None,
        };
        let roots = self.run.repo_roots();
        match resolved {
            Some(p) if path.is_absolute() && roots.iter().any(|root| p.starts_with(root)) => Ok(p),
            _ => Err(GitError::Outside {
                path: path.display().to_string(),
                allowed: if roots.is_empty() {
                    "none".into()
                } else {
                    roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }),
        }
    }

    /// Runs `work` on a blocking thread with the checked path.
    async fn blocking<T: Send + 'static>(
        &mut self,
        path: &str,
        work: impl FnOnce(PathBuf) -> Result<T, GitError> + Send + 'static,
    ) -> wasmtime::Result<Result<T, Error>> {
        self.run.ensure_active()?;
        let path = match self.repo_path(path) {
            Ok(path) => path,
            Err(e) => return Ok(Err(e.into())),
        };
        let result = tokio::task::spawn_blocking(move || work(path))
            .await
            .map_err(|e| Error::Failed(format!("git worker: {e}")));
        Ok(result.and_then(|r| r.map_err(Error::from)))
    }
}

fn secret(credentials: &Credentials) -> Result<Secret, Error> {
    Secret::resolve(credentials).map_err(Error::from)
}

impl PluginView<'_> {
    /// The plugin's `git` scope; a store never granted it reaches nothing.
    fn git_scope(&self) -> scope::GitScope {
        (self.scopes.of::<scope::GitScope>().cloned()).unwrap_or_else(scope::narrowest)
    }
}

impl Host for PluginView<'_> {
    async fn clone(&mut self, request: CloneRequest) -> wasmtime::Result<Result<RepoState, Error>> {
        self.run.ensure_active()?;
        if let Err(denial) =
            self.git_scope()
                .check_remote(&self.plugin, "git.clone", &request.url, false)
        {
            return Ok(Err(self.scope_denied(denial)));
        }
        let secret = match secret(&request.credentials) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let report = Events {
            sink: self.run.events.clone(),
            plugin: self.plugin.clone(),
        };
        let cancel = clone::Cancel::default();
        let flag = cancel.0.clone();
        let dest = request.dest.clone();
        let url = request.url.clone();
        let answer = self
            .blocking(&dest, move |dest| {
                let spec = clone::CloneSpec {
                    url: &request.url,
                    dest: &dest,
                    reference: request.reference.as_deref(),
                    depth: request.depth,
                };
                clone::clone(&spec, &secret, &report, &flag).map(|state| (state, dest))
            })
            .await;
        drop(cancel);
        Ok(answer?.map(|(state, dest)| {
            if let Some(origins) = self.run.state::<Origins>() {
                origins.record(dest, url);
            }
            state
        }))
    }

    async fn status(&mut self, repo: String) -> wasmtime::Result<Result<Vec<FileChange>, Error>> {
        self.blocking(&repo, |path| status(&path)).await
    }

    async fn diff(
        &mut self,
        repo: String,
        base: Option<String>,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.blocking(&repo, move |path| diff(&path, base.as_deref()))
            .await
    }

    async fn commit_all(
        &mut self,
        repo: String,
        message: String,
        author: Signature,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.blocking(&repo, move |path| {
            commit::commit_all(&path, &message, &author.name, &author.email)
        })
        .await
    }

    async fn checkout_new_branch(
        &mut self,
        repo: String,
        branch: String,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.blocking(&repo, move |path| {
            commit::checkout_new_branch(&path, &branch)
        })
        .await
    }

    async fn push(
        &mut self,
        repo: String,
        url: Option<String>,
        refspec: String,
        credentials: Credentials,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        // Where the push goes is settled (and checked against the scope) before anything
        // is sent.
        let url = match url {
            Some(url) => url,
            None => {
                let origin = self.repo_path(&repo).and_then(|path| {
                    (self.run.state::<Origins>())
                        .and_then(|origins| origins.of(&path))
                        .ok_or(GitError::NoOrigin {
                            repo: path.display().to_string(),
                        })
                });
                match origin {
                    Ok(url) => url,
                    Err(e) => return Ok(Err(e.into())),
                }
            }
        };
        if let Err(denial) = self
            .git_scope()
            .check_remote(&self.plugin, "git.push", &url, true)
        {
            return Ok(Err(self.scope_denied(denial)));
        }
        let secret = match secret(&credentials) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        self.blocking(&repo, move |path| {
            commit::push(&path, &url, &refspec, &secret)
        })
        .await
    }

    async fn head(&mut self, repo: String) -> wasmtime::Result<Result<RepoState, Error>> {
        self.blocking(&repo, |path| head(&path)).await
    }
}
