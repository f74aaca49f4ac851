//! The host side of `agentgate:plugin/github`.
//!
//! The contract is complete; the REST client (octocrab) is not built yet. Every call
//! fails with `unavailable`.

use crate::runtime::bindings::github::{Host, NewRepository, PullRequest, Repository};
use crate::runtime::bindings::types::Error;
use crate::runtime::{Capability, PluginState};

impl Host for PluginState {
    async fn authenticated_user(&mut self) -> wasmtime::Result<Result<String, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
    async fn get_repository(
        &mut self,
        _owner: String,
        _name: String,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
    async fn fork_repository(
        &mut self,
        _owner: String,
        _name: String,
        _organization: Option<String>,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
    async fn create_repository(
        &mut self,
        _request: NewRepository,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
    async fn generate_from_template(
        &mut self,
        _template_owner: String,
        _template_name: String,
        _request: NewRepository,
    ) -> wasmtime::Result<Result<Repository, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
    async fn create_pull_request(
        &mut self,
        _owner: String,
        _name: String,
        _title: String,
        _head: String,
        _base: String,
        _body: String,
    ) -> wasmtime::Result<Result<PullRequest, Error>> {
        self.not_built(Capability::Github, "use workspace.source: local")
    }
}
