//! Images and the storage they live on: a local image is used as it is; an absent
//! one is pulled with progress reported as events; a pull that cannot reach a
//! registry says how to provide the image instead. A disk limit is checked against
//! the storage driver, since most drivers cannot enforce one.

use std::sync::Arc;

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use super::client;
use super::policy::ImageProcess;
use crate::record::{EventBody, EventSink};
use crate::wit::docker::ImageInfo;
use crate::wit::types::Error;

/// The local image `image`, or `None` when it is absent.
pub async fn inspect(image: &str) -> Result<Option<ImageInfo>, Error> {
    let docker = client::connect().await?;
    inspect_with(&docker, image).await
}

async fn inspect_with(docker: &Docker, image: &str) -> Result<Option<ImageInfo>, Error> {
    match docker.inspect_image(image).await {
        Ok(found) => Ok(Some(ImageInfo {
            id: found.id.unwrap_or_default(),
            tags: found.repo_tags.unwrap_or_default(),
            size_bytes: found.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
        })),
        Err(e) if client::status(&e) == Some(404) => Ok(None),
        Err(e) => Err(client::failed(&format!("inspecting image {image}"), e)),
    }
}

/// What `image` runs by itself (`ENTRYPOINT`, `CMD`); `absent` when the engine lacks it.
pub async fn process(docker: &Docker, image: &str) -> Result<ImageProcess, Error> {
    match docker.inspect_image(image).await {
        Ok(found) => {
            let config = found.config.unwrap_or_default();
            Ok(ImageProcess {
                entrypoint: config.entrypoint.unwrap_or_default(),
                cmd: config.cmd.unwrap_or_default(),
            })
        }
        Err(e) if client::status(&e) == Some(404) => Err(absent(image)),
        Err(e) => Err(client::failed(&format!("inspecting image {image}"), e)),
    }
}

/// Pulls `image`, reporting the engine's progress as `pull` events.
pub async fn pull(image: &str, events: &Arc<EventSink>, plugin: &str) -> Result<ImageInfo, Error> {
    let docker = client::connect().await?;
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut stream = std::pin::pin!(docker.create_image(Some(options), None, None));
    let mut last_status = String::new();
    while let Some(next) = stream.next().await {
        let info = next.map_err(|e| cannot_pull(image, &e.to_string()))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(cannot_pull(image, &error));
        }
        let status = info.status.unwrap_or_default();
        // One event per layer state change, not one per byte counter update.
        let key = format!("{} {status}", info.id.as_deref().unwrap_or(""));
        let progress = info.progress_detail.unwrap_or_default();
        if key != last_status || progress.total.is_some() && progress.current == progress.total {
            events.emit(
                plugin,
                EventBody::Progress {
                    phase: "pull".into(),
                    message: format!("{image}: {}", key.trim()),
                    current: progress.current.and_then(|c| u64::try_from(c).ok()),
                    total: progress.total.and_then(|t| u64::try_from(t).ok()),
                },
            );
            last_status = key;
        }
    }
    inspect_with(&docker, image)
        .await?
        .ok_or_else(|| cannot_pull(image, "the engine finished the pull without the image"))
}

fn cannot_pull(image: &str, why: &str) -> Error {
    Error::Unavailable(format!(
        "image {image} is not on this machine and could not be pulled ({why}); provide it \
         with `docker load -i FILE.tar` or `docker build -t {image} .`, or name an image that \
         `docker images` lists"
    ))
}

/// The engine refused to create a container because `image` is absent.
pub fn absent(image: &str) -> Error {
    cannot_pull(image, "the engine does not have it")
}

/// Fails unless the engine's storage driver can enforce a container size limit.
pub async fn check_disk_quota(docker: &Docker) -> Result<(), Error> {
    let info = docker
        .info()
        .await
        .map_err(|e| client::failed("reading the engine's storage driver", e))?;
    Storage::of(&info).disk_quota()
}

/// The engine's storage driver and the file system under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    pub driver: String,
    /// Empty when the engine does not say.
    pub backing: String,
}

/// How to get a storage driver that enforces `resources.disk`.
pub const DISK_QUOTA_FIX: &str = "remove the limit, or give Docker a storage driver with a \
    container size limit (overlay2 on xfs with project quotas, btrfs, zfs or devicemapper) by \
    moving its data root to such a file system";

impl Storage {
    pub fn of(info: &bollard::models::SystemInfo) -> Storage {
        Storage {
            driver: info.driver.clone().unwrap_or_default(),
            backing: info
                .driver_status
                .iter()
                .flatten()
                .find(|kv| kv.first().is_some_and(|k| k == "Backing Filesystem"))
                .and_then(|kv| kv.get(1).cloned())
                .unwrap_or_default(),
        }
    }

    /// Whether a container size limit (`resources.disk`) can be enforced.
    pub fn disk_quota(&self) -> Result<(), Error> {
        let supported = match self.driver.as_str() {
            // overlay2 enforces `size` only on xfs mounted with project quotas.
            "overlay2" => self.backing == "xfs",
            "btrfs" | "zfs" | "devicemapper" | "windowsfilter" => true,
            _ => false,
        };
        if supported {
            return Ok(());
        }
        Err(crate::capabilities::lacking(format!(
            "`resources.disk` cannot be enforced: the Docker engine's storage driver is {self}, \
             which has no container size limit; {DISK_QUOTA_FIX}"
        )))
    }
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.driver)?;
        if !self.backing.is_empty() {
            write!(f, " on {}", self.backing)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(driver: &str, backing: &str) -> Storage {
        Storage::of(&bollard::models::SystemInfo {
            driver: Some(driver.into()),
            driver_status: Some(vec![vec!["Backing Filesystem".into(), backing.into()]]),
            ..Default::default()
        })
    }

    #[test]
    fn disk_limits_are_enforced_only_by_drivers_with_a_size_limit() {
        assert!(storage("overlay2", "xfs").disk_quota().is_ok());
        assert!(storage("btrfs", "btrfs").disk_quota().is_ok());
        let Err(Error::Unavailable(message)) = storage("overlay2", "extfs").disk_quota() else {
            panic!("overlay2 on extfs has no size limit")
        };
        assert!(message.contains("overlay2 on extfs"), "{message}");
        assert!(message.contains(DISK_QUOTA_FIX), "{message}");
        assert!(
            message.ends_with(crate::capabilities::DOCTOR_HINT),
            "{message}"
        );
    }
}
