//! The host side of `agentgate:plugin/git`.
//!
//! The contract is complete; the git2 implementation is not built yet. Every call
//! fails with `unavailable`, naming what to use instead.

use crate::runtime::bindings::git::{
    CloneRequest, Credentials, FileChange, Host, RepoState, Signature,
};
use crate::runtime::bindings::types::Error;
use crate::runtime::{Capability, PluginState};

impl Host for PluginState {
    async fn clone(
        &mut self,
        _request: CloneRequest,
    ) -> wasmtime::Result<Result<RepoState, Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn status(&mut self, _repo: String) -> wasmtime::Result<Result<Vec<FileChange>, Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn diff(
        &mut self,
        _repo: String,
        _base: Option<String>,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn commit_all(
        &mut self,
        _repo: String,
        _message: String,
        _author: Signature,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn checkout_new_branch(
        &mut self,
        _repo: String,
        _branch: String,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn push(
        &mut self,
        _repo: String,
        _url: String,
        _refspec: String,
        _credentials: Credentials,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
    async fn head(&mut self, _repo: String) -> wasmtime::Result<Result<RepoState, Error>> {
        self.not_built(Capability::Git, "use workspace.source: local")
    }
}
