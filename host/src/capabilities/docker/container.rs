//! The containers a run created, what they use, and their removal.
//!
//! A plugin may exec in, sample and remove only containers its own run created
//! (tracked here, by id), so a granted plugin cannot reach into a user's other
//! containers. While a container lives, a sampler reads its usage every second (the
//! engine's counters are per sample, the peak is the host's to keep) and a watcher
//! listens for the engine's `oom` events, which name any process of the container the
//! kernel killed, not only its main one. Each container also has a guard in its
//! plugin's store: if the store goes away before `remove-container` (a trap, a
//! cancelled run), the guard removes the container.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptions, RemoveContainerOptionsBuilder,
    StatsOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::client;
use crate::capabilities::process::cgroup::{ObservedCgroup, ObservedUsage};
use crate::record::{EventBody, EventSink};
use crate::wit::types::{Error, NetworkMode, ResourceUsage};

/// How often a running container's usage is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// A container this host created for a run.
pub struct Container {
    pub id: String,
    pub run_id: String,
    /// The container's working directory, which a relative exec `cwd` is under.
    pub workdir: String,
    /// Its network, which decides the socket families of its seccomp filter.
    pub network: ContainerNetwork,
    pub docker: Docker,
    started: Instant,
    peak_memory: Mutex<u64>,
    last: Mutex<Option<ResourceUsage>>,
    /// The cgroup of the container's first process (by its pid), once found.
    cgroup: Mutex<Option<(u32, ObservedCgroup)>>,
    oom_killed: AtomicBool,
    removed: AtomicBool,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

static CONTAINERS: LazyLock<Mutex<HashMap<String, Arc<Container>>>> = LazyLock::new(Mutex::default);

/// The network a container was created with.
#[derive(Debug, Clone, Copy)]
pub struct ContainerNetwork {
    /// The mode the plugin asked for.
    pub mode: NetworkMode,
    /// Its run has `sandbox.egress`: it has loopback only whatever the mode, and its
    /// execs get the proxy variables and IP sockets (for the relays on loopback).
    pub egress: bool,
}

impl Container {
    /// Tracks a started container and begins sampling it.
    pub fn track(
        id: String,
        run_id: String,
        workdir: String,
        network: ContainerNetwork,
        docker: Docker,
        events: Arc<EventSink>,
        plugin: Arc<str>,
    ) -> Arc<Container> {
        let container = Arc::new(Container {
            id: id.clone(),
            run_id,
            workdir,
            network,
            docker,
            started: Instant::now(),
            peak_memory: Mutex::new(0),
            last: Mutex::new(None),
            cgroup: Mutex::new(None),
            oom_killed: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            tasks: Mutex::default(),
        });
        let sampler = {
            let weak = Arc::downgrade(&container);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    tick.tick().await;
                    let Some(container) = weak.upgrade() else {
                        return;
                    };
                    if container.sample().await.is_err() {
                        return;
                    }
                }
            })
        };
        let watcher = {
            let weak = Arc::downgrade(&container);
            let docker = container.docker.clone();
            tokio::spawn(async move {
                let filters = HashMap::from([
                    ("container".to_string(), vec![id.clone()]),
                    ("event".to_string(), vec!["oom".to_string()]),
                ]);
                let options = EventsOptionsBuilder::new().filters(&filters).build();
                let mut stream = std::pin::pin!(docker.events(Some(options)));
                while let Some(Ok(_)) = stream.next().await {
                    let Some(container) = weak.upgrade() else {
                        return;
                    };
                    container.oom_killed.store(true, Ordering::Release);
                    events.emit(
                        &plugin,
                        EventBody::Log {
                            level: "error",
                            message: format!(
                                "OOMKilled: the kernel killed a process of container {} because it ran out of memory",
                                short(&container.id)
                            ),
                        },
                    );
                }
            })
        };
        *container.tasks.lock().unwrap() = vec![sampler, watcher];
        CONTAINERS
            .lock()
            .unwrap()
            .insert(container.id.clone(), container.clone());
        container
    }

    /// The container `id` of run `run_id`; any other is refused.
    pub fn of_run(run_id: &str, id: &str) -> Result<Arc<Container>, Error> {
        CONTAINERS
            .lock()
            .unwrap()
            .get(id)
            .filter(|c| c.run_id == run_id)
            .cloned()
            .ok_or_else(|| {
                Error::Denied(format!(
                    "container {id:?} was not created by this run; a plugin may only use the containers it created"
                ))
            })
    }

    /// Reads the container's usage now, and remembers the peak.
    ///
    /// The counters are read from the container's cgroup directly ([`ObservedCgroup`])
    /// where this host can: the engine's own stats come only at its collector's next
    /// tick, up to a second later. The cgroup is found once, from the container's first
    /// process (which an inspect names); while its OOM-kill counter can be read, no
    /// call to the engine is needed. Otherwise the inspect also says whether the engine
    /// recorded an OOM kill of any of the container's processes (its event may not have
    /// arrived yet), and where the cgroup cannot be read (a remote or rootless engine)
    /// the engine's stats are used.
    pub async fn sample(&self) -> Result<ResourceUsage, Error> {
        let known = self.cgroup.lock().unwrap().as_ref().map(|(_, c)| c.usage());
        let counters = match known {
            Some(Ok(counters)) if counters.oom_kills.is_some() => counters,
            _ => self.inspect_and_read().await?,
        };
        if counters.oom_kills.is_some_and(|kills| kills > 0) {
            self.oom_killed.store(true, Ordering::Release);
        }
        let peak = {
            let mut peak = self.peak_memory.lock().unwrap();
            *peak = (*peak)
                .max(counters.memory_bytes)
                .max(counters.peak_memory_bytes.unwrap_or(0));
            *peak
        };
        let elapsed = self.started.elapsed().as_nanos().max(1) as f64;
        let usage = ResourceUsage {
            // Average over the container's life, 100 = one core busy all the time.
            cpu_percent: counters.cpu_time_ns as f64 / elapsed * 100.0,
            memory_bytes: counters.memory_bytes,
            peak_memory_bytes: peak,
            pids: counters.pids,
            oom_killed: self.oom_killed.load(Ordering::Acquire),
        };
        *self.last.lock().unwrap() = Some(usage);
        Ok(usage)
    }

    /// Asks the engine for the container's first process and its OOM record, then
    /// reads that process's cgroup, or the engine's stats.
    async fn inspect_and_read(&self) -> Result<ObservedUsage, Error> {
        let inspect = self
            .docker
            .inspect_container(&self.id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| client::failed("inspecting the container", e))?;
        let state = inspect.state.unwrap_or_default();
        if state.oom_killed == Some(true) {
            self.oom_killed.store(true, Ordering::Release);
        }
        let pid = state.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
        match self.read_cgroup(pid) {
            Some(counters) => Ok(counters),
            None => self.engine_stats().await,
        }
    }

    /// The counters of the cgroup of the container's first process `pid`, when this
    /// host can read it.
    fn read_cgroup(&self, pid: u32) -> Option<ObservedUsage> {
        if pid == 0 || client::local_socket().is_none() {
            return None;
        }
        let mut cgroup = self.cgroup.lock().unwrap();
        if cgroup.as_ref().is_none_or(|(of, _)| *of != pid) {
            *cgroup = ObservedCgroup::of_process(pid, &self.id)
                .ok()
                .map(|found| (pid, found));
        }
        cgroup.as_ref()?.1.usage().ok()
    }

    /// The same counters from the engine's stats.
    async fn engine_stats(&self) -> Result<ObservedUsage, Error> {
        let options = StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        let stats = std::pin::pin!(self.docker.stats(&self.id, Some(options)))
            .next()
            .await
            .ok_or_else(|| Error::Failed("the Docker engine sent no stats".into()))?
            .map_err(|e| client::failed("reading the container's stats", e))?;
        let memory_stats = stats.memory_stats.unwrap_or_default();
        let inactive = memory_stats
            .stats
            .as_ref()
            .and_then(|s| {
                s.get("total_inactive_file")
                    .or_else(|| s.get("inactive_file"))
            })
            .copied()
            .unwrap_or(0);
        Ok(ObservedUsage {
            cpu_time_ns: stats
                .cpu_stats
                .and_then(|c| c.cpu_usage)
                .and_then(|u| u.total_usage)
                .unwrap_or(0),
            memory_bytes: memory_stats.usage.unwrap_or(0).saturating_sub(inactive),
            peak_memory_bytes: memory_stats.max_usage,
            pids: stats
                .pids_stats
                .and_then(|p| p.current)
                .unwrap_or(0)
                .try_into()
                .unwrap_or(u32::MAX),
            oom_kills: None,
        })
    }

    /// The usage now, or the last sample when the container can no longer be read.
    pub async fn usage(&self) -> Result<ResourceUsage, Error> {
        match self.sample().await {
            Ok(usage) => Ok(usage),
            Err(e) => match *self.last.lock().unwrap() {
                Some(mut last) => {
                    last.oom_killed = self.oom_killed.load(Ordering::Acquire);
                    Ok(last)
                }
                None => Err(e),
            },
        }
    }

    /// Stops and removes the container with its anonymous volumes. Idempotent.
    pub async fn remove(&self, grace: Duration) -> Result<(), Error> {
        let result = remove(&self.docker, &self.id, grace).await;
        if result.is_ok() {
            self.forget();
        }
        result
    }

    fn forget(&self) {
        self.removed.store(true, Ordering::Release);
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        CONTAINERS.lock().unwrap().remove(&self.id);
    }
}

/// Stops (SIGTERM, then SIGKILL after `grace`) and removes container `id` with its
/// anonymous volumes. A container that is already gone is fine.
pub async fn remove(docker: &Docker, id: &str, grace: Duration) -> Result<(), Error> {
    let seconds = i32::try_from(grace.as_millis().div_ceil(1000)).unwrap_or(i32::MAX);
    if seconds > 0 {
        let stop = StopContainerOptionsBuilder::new().t(seconds).build();
        match docker.stop_container(id, Some(stop)).await {
            Ok(()) => {}
            // 304: already stopped; 404: already gone.
            Err(e) if matches!(client::status(&e), Some(304 | 404)) => {}
            Err(e) => return Err(client::failed("stopping the container", e)),
        }
    }
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if client::status(&e) == Some(404) => Ok(()),
        // 409: removal already in progress, by an earlier call.
        Err(e) if client::status(&e) == Some(409) => Ok(()),
        Err(e) => Err(client::failed("removing the container", e)),
    }
}

/// Removes its container when the plugin store that created it goes away first.
pub struct Guard(pub Arc<Container>);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.removed.load(Ordering::Acquire) {
            return;
        }
        let container = self.0.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = container.remove(Duration::ZERO).await;
            });
        } else {
            // No runtime to do it on (the host is shutting down): one of its own.
            std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async {
                        if let Ok(docker) = client::connect().await {
                            let _ = remove(&docker, &container.id, Duration::ZERO).await;
                        }
                    });
                }
                container.forget();
            });
        }
    }
}

/// The short form of a container id, for messages.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
