//! The host side of `agentgate:plugin/docker`.
//!
//! The contract is complete; the engine integration (bollard) is not built yet. Every
//! call fails with `unavailable`, so a Docker sandbox is refused rather than replaced
//! by something weaker.

use wasmtime::component::Resource;

use super::execution::Execution;
use crate::runtime::bindings::docker::{ContainerSpec, ContainerSummary, Host, ImageInfo};
use crate::runtime::bindings::types::{Error, ExecRequest, Label, ResourceUsage};
use crate::runtime::{Capability, PluginState};

impl Host for PluginState {
    async fn inspect_image(
        &mut self,
        _image: String,
    ) -> wasmtime::Result<Result<Option<ImageInfo>, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn pull_image(&mut self, _image: String) -> wasmtime::Result<Result<ImageInfo, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn run_container(
        &mut self,
        _spec: ContainerSpec,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn exec(
        &mut self,
        _container_id: String,
        _request: ExecRequest,
    ) -> wasmtime::Result<Result<Resource<Execution>, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn stats(
        &mut self,
        _container_id: String,
    ) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn remove_container(
        &mut self,
        _container_id: String,
        _grace_ms: u32,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn list_containers(
        &mut self,
        _labels: Vec<Label>,
    ) -> wasmtime::Result<Result<Vec<ContainerSummary>, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn list_volumes(
        &mut self,
        _labels: Vec<Label>,
    ) -> wasmtime::Result<Result<Vec<String>, Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
    async fn remove_volume(&mut self, _name: String) -> wasmtime::Result<Result<(), Error>> {
        self.not_built(Capability::Docker, "use sandbox.provider: subprocess")
    }
}
