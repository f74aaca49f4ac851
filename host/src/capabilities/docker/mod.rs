//! The host side of `agentgate:plugin/docker`: containers on a real Docker engine.
//!
//! The plugin (normally `sandbox-docker`) decides what a sandbox is made of; this
//! module decides what it may be made of ([`policy`]) and does the work through
//! bollard ([`client`]): images ([`image`]), containers and their usage
//! ([`container`]), commands in them ([`exec`]). Everything created carries the host's
//! labels, so `list-containers`/`list-volumes` (restricted to labelled objects) find
//! what a crashed run left behind. Before any of that, the image and network are checked
//! against the plugin's scope ([`scope`]): an image outside
//! `docker.images` is refused before anything is pulled or created.

mod client;
mod container;
mod exec;
mod image;
mod init;
pub(crate) mod policy;
mod scope;
pub(crate) mod unit;

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use wasmtime::component::Resource;

use super::labels::{LABEL_HOME, LABEL_RUN_ID};
use crate::capabilities::view::TableAs;
use crate::capabilities::PluginView;
use crate::wit::docker::{ContainerSpec, ContainerSummary, Host, ImageInfo};
use crate::wit::execution::Execution as WitExecution;
use crate::wit::types::{Error, ExecRequest, Label, ResourceUsage};
use container::{Container, Guard};
use policy::Policy;
pub use scope::DockerGrant;
use scope::DockerScope;

pub use client::{engine_address, local_socket, ENGINE_FIX};
/// Where a command runs: shared with the other container capabilities.
pub(crate) use exec::working_dir;
pub use image::{Storage, DISK_QUOTA_FIX};

/// The engine as a run would find it, for `agentgate doctor`.
#[derive(Debug)]
pub struct EngineFacts {
    /// The engine's version, e.g. `20.10.24`.
    pub version: String,
    /// The API version agreed with it.
    pub api_version: String,
    pub storage: Storage,
}

/// Connects as a run does (same address, same version negotiation) and reads the
/// engine's version and storage driver, giving up after `timeout`: an engine that does
/// not answer must not hold `agentgate doctor` up.
pub async fn engine_facts(timeout: Duration) -> Result<EngineFacts, Error> {
    let read = async {
        let docker = client::connect().await?;
        let version = docker
            .version()
            .await
            .map_err(|e| client::failed("reading the engine's version", e))?;
        let info = docker
            .info()
            .await
            .map_err(|e| client::failed("reading the engine's storage driver", e))?;
        Ok(EngineFacts {
            version: version.version.unwrap_or_default(),
            api_version: docker.client_version().to_string(),
            storage: Storage::of(&info),
        })
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or_else(|_| {
            Err(crate::capabilities::lacking(format!(
                "the Docker engine at {} did not answer within {}s; {ENGINE_FIX}",
                engine_address(),
                timeout.as_secs()
            )))
        })
}

/// Turns `Result<T, Error>` into the binding's nested result.
fn answer<T>(result: Result<T, Error>) -> wasmtime::Result<Result<T, Error>> {
    Ok(result)
}

impl PluginView<'_> {
    /// The plugin's `docker` scope; a store never granted it reaches nothing.
    fn docker_scope(&self) -> DockerScope {
        (self.scopes.of::<DockerScope>().cloned()).unwrap_or_else(scope::narrowest)
    }

    async fn run_container_checked(&mut self, spec: ContainerSpec) -> Result<String, Error> {
        // The plugin's scope first: nothing is inspected, pulled or created outside it.
        let scope = self.docker_scope();
        scope
            .check_image(&self.plugin, "docker.run-container", &spec.image)
            .map_err(|d| self.scope_denied(d))?;
        let run_folders = self.run.bind_scope().run_folders().to_vec();
        for mount in &spec.mounts {
            // A source that does not resolve is refused by the policy's own check.
            let Ok((resolved, _)) = crate::host_paths::resolve(&mount.source, true) else {
                continue;
            };
            if !run_folders.iter().any(|f| resolved.starts_with(f)) {
                scope
                    .check_mount(&self.plugin, &mount.source, &resolved)
                    .map_err(|d| self.scope_denied(d))?;
            }
        }
        if matches!(spec.network, crate::wit::types::NetworkMode::Host) {
            scope
                .check_host_network(&self.plugin)
                .map_err(|d| self.scope_denied(d))?;
        }
        let policy = Policy::for_run(&self.run)?;
        let docker = client::connect().await?;
        let image = image::process(&docker, &spec.image).await?;
        let (name, body) = policy::container_config(&spec, &policy, &image)?;
        if spec.resources.disk_bytes.is_some() {
            image::check_disk_quota(&docker).await?;
        }
        let mut options = CreateContainerOptionsBuilder::new();
        if let Some(name) = &name {
            options = options.name(name);
        }
        let created = docker
            .create_container(Some(options.build()), body)
            .await
            .map_err(|e| match client::status(&e) {
                Some(404) => image::absent(&spec.image),
                _ => client::failed("creating the container", e),
            })?;
        let container = Container::track(
            created.id.clone(),
            self.run.run_id.clone(),
            spec.workdir.clone(),
            container::ContainerNetwork {
                mode: spec.network,
                egress: policy.egress.is_some(),
            },
            docker,
            self.run.events.clone(),
            self.plugin.clone(),
        );
        // From here on the container is removed even if the plugin never asks.
        self.table
            .push(Guard(container.clone()))
            .map_err(|e| Error::Failed(format!("tracking the container: {e}")))?;
        if let Err(e) = container
            .docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
        {
            let _ = container.remove(Duration::ZERO).await;
            return Err(client::failed("starting the container", e));
        }
        Ok(created.id)
    }

    /// Removes a container of this run, or a labelled leftover of an earlier one.
    async fn remove_checked(&mut self, id: &str, grace: Duration) -> Result<(), Error> {
        if let Ok(container) = Container::of_run(&self.run.run_id, id) {
            return container.remove(grace).await;
        }
        let docker = client::connect().await?;
        match docker
            .inspect_container(
                id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
        {
            Ok(inspect) => {
                let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
                this_homes("container", id, &labels, &self.run.identity()?.home)?;
                container::remove(&docker, id, grace).await
            }
            Err(e) if client::status(&e) == Some(404) => Ok(()),
            Err(e) => Err(client::failed("inspecting the container", e)),
        }
    }
}

/// Engine filters for objects carrying all of `labels`, agentgate's run label and the
/// label of this home (`home`): another home's objects are never listed.
fn label_filters(labels: &[Label], home: &str) -> HashMap<String, Vec<String>> {
    let mut wanted = vec![LABEL_RUN_ID.to_string(), format!("{LABEL_HOME}={home}")];
    wanted.extend(labels.iter().map(|l| format!("{}={}", l.key, l.value)));
    HashMap::from([("label".to_string(), wanted)])
}

/// Whether an object that is not of this run (a leftover) may be removed: only one that
/// agentgate made for this home (labelled `home`).
fn this_homes(
    kind: &str,
    id: &str,
    labels: &HashMap<String, String>,
    home: &str,
) -> Result<(), Error> {
    if !labels.contains_key(LABEL_RUN_ID) {
        return Err(Error::Denied(format!(
            "{kind} {id:?} was not created by agentgate; it is not a plugin's to remove"
        )));
    }
    if labels.get(LABEL_HOME).map(String::as_str) != Some(home) {
        return Err(Error::Denied(format!(
            "{kind} {id:?} belongs to another agentgate home; that home's gc removes it"
        )));
    }
    Ok(())
}

impl Host for PluginView<'_> {
    async fn inspect_image(
        &mut self,
        image: String,
    ) -> wasmtime::Result<Result<Option<ImageInfo>, Error>> {
        self.run.ensure_active()?;
        answer(image::inspect(&image).await)
    }

    async fn pull_image(&mut self, image: String) -> wasmtime::Result<Result<ImageInfo, Error>> {
        self.run.ensure_active()?;
        if let Err(denial) =
            self.docker_scope()
                .check_image(&self.plugin, "docker.pull-image", &image)
        {
            return answer(Err(self.scope_denied(denial)));
        }
        answer(image::pull(&image, &self.run.events, &self.plugin).await)
    }

    async fn run_container(
        &mut self,
        spec: ContainerSpec,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.run.ensure_active()?;
        answer(self.run_container_checked(spec).await)
    }

    async fn exec(
        &mut self,
        container_id: String,
        request: ExecRequest,
    ) -> wasmtime::Result<Result<Resource<WitExecution>, Error>> {
        self.run.ensure_active()?;
        let container = match Container::of_run(&self.run.run_id, &container_id) {
            Ok(c) => c,
            Err(e) => return answer(Err(e)),
        };
        let id = self.run.next_exec_id();
        match exec::start(&container, request, id).await {
            Ok(execution) => Ok(Ok(self.table.push_as(execution)?)),
            Err(e) => answer(Err(e)),
        }
    }

    async fn stats(
        &mut self,
        container_id: String,
    ) -> wasmtime::Result<Result<ResourceUsage, Error>> {
        self.run.ensure_active()?;
        let container = match Container::of_run(&self.run.run_id, &container_id) {
            Ok(c) => c,
            Err(e) => return answer(Err(e)),
        };
        answer(container.usage().await)
    }

    async fn remove_container(
        &mut self,
        container_id: String,
        grace_ms: u32,
    ) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        let grace = Duration::from_millis(u64::from(grace_ms));
        answer(self.remove_checked(&container_id, grace).await)
    }

    async fn list_containers(
        &mut self,
        labels: Vec<Label>,
    ) -> wasmtime::Result<Result<Vec<ContainerSummary>, Error>> {
        self.run.ensure_active()?;
        let result = async {
            let docker = client::connect().await?;
            let options = ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&label_filters(&labels, &self.run.identity()?.home))
                .build();
            let containers = docker
                .list_containers(Some(options))
                .await
                .map_err(|e| client::failed("listing containers", e))?;
            Ok(containers
                .into_iter()
                .map(|c| ContainerSummary {
                    id: c.id.unwrap_or_default(),
                    name: c
                        .names
                        .and_then(|n| n.into_iter().next())
                        .map(|n| n.trim_start_matches('/').to_string())
                        .unwrap_or_default(),
                    image: c.image.unwrap_or_default(),
                    state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    labels: c
                        .labels
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(key, value)| Label { key, value })
                        .collect(),
                    created_at_ms: c.created.and_then(|s| u64::try_from(s).ok()).unwrap_or(0)
                        * 1000,
                })
                .collect())
        }
        .await;
        answer(result)
    }

    async fn list_volumes(
        &mut self,
        labels: Vec<Label>,
    ) -> wasmtime::Result<Result<Vec<String>, Error>> {
        self.run.ensure_active()?;
        let result = async {
            let docker = client::connect().await?;
            let options = ListVolumesOptionsBuilder::new()
                .filters(&label_filters(&labels, &self.run.identity()?.home))
                .build();
            let volumes = docker
                .list_volumes(Some(options))
                .await
                .map_err(|e| client::failed("listing volumes", e))?;
            Ok(volumes
                .volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect())
        }
        .await;
        answer(result)
    }

    async fn remove_volume(&mut self, name: String) -> wasmtime::Result<Result<(), Error>> {
        self.run.ensure_active()?;
        let result = async {
            let docker = client::connect().await?;
            let volume = match docker.inspect_volume(&name).await {
                Ok(v) => v,
                Err(e) if client::status(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(client::failed("inspecting the volume", e)),
            };
            this_homes("volume", &name, &volume.labels, &self.run.identity()?.home)?;
            let options = RemoveVolumeOptionsBuilder::new().force(true).build();
            match docker.remove_volume(&name, Some(options)).await {
                Ok(()) => Ok(()),
                Err(e) if client::status(&e) == Some(404) => Ok(()),
                Err(e) => Err(client::failed("removing the volume", e)),
            }
        }
        .await;
        answer(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin asking to remove a leftover that is not this home's: an object agentgate
    /// never made, and one another home made, are refused; this home's is not.
    #[test]
    fn only_this_homes_leftovers_may_be_removed() {
        let this_home =
            crate::capabilities::labels::home_label(tempfile::tempdir().unwrap().path());
        let labelled = |home: &str| {
            HashMap::from([
                (LABEL_RUN_ID.to_string(), "run-1".to_string()),
                (LABEL_HOME.to_string(), home.to_string()),
            ])
        };

        let error = this_homes("container", "c1", &HashMap::new(), &this_home).unwrap_err();
        assert!(
            error.to_string().contains("not created by agentgate"),
            "{error}"
        );
        let error = this_homes("volume", "v1", &labelled("another-home"), &this_home).unwrap_err();
        assert!(
            error.to_string().contains("another agentgate home"),
            "{error}"
        );
        let unlabelled_home = HashMap::from([(LABEL_RUN_ID.to_string(), "run-1".to_string())]);
        assert!(this_homes("container", "c2", &unlabelled_home, &this_home).is_err());
        this_homes("container", "c3", &labelled(&this_home), &this_home).unwrap();
    }
}
