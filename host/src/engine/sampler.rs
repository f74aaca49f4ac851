//! The sandbox's resource use over time.
//!
//! `result.json` keeps the totals (average CPU, peak memory), read once at the end.
//! A reviewer also wants to see when the agent was busy, so from the sandbox's
//! creation to its end the host asks the provider for its stats every
//! [`SAMPLE_INTERVAL`] and records each answer as a `resources` event in
//! `events.ndjson` (`agentgate report` draws them). Providers report CPU as the
//! average since the sandbox started; each sample turns that into the use over the
//! interval since the previous one.
//!
//! A sample in flight is never cancelled: dropping a call into the provider half way
//! leaves its component instance unusable (wasmtime refuses to enter it again), and the
//! `destroy` that follows would then fail and leave the sandbox behind. Stopping waits
//! for the sample in flight instead.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::sandbox::LiveSandbox;
use crate::record::{EventBody, EventSink};
use crate::wit::types::ResourceUsage;

/// How often the sandbox's stats are read.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Samples one sandbox until [`ResourceSampler::stop`] or drop.
pub struct ResourceSampler {
    task: Option<JoinHandle<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    series: Arc<Mutex<Series>>,
}

/// What turns cumulative CPU averages into per-interval use.
struct Series {
    /// When the sandbox was created: providers average CPU over the time since.
    created: Instant,
    /// Time since `created` and CPU seconds used by then, at the previous sample.
    previous: Option<(Duration, f64)>,
}

impl Series {
    fn sample(&mut self, usage: &ResourceUsage, now: Instant) -> EventBody {
        let elapsed = now.saturating_duration_since(self.created);
        let cpu_seconds = usage.cpu_percent / 100.0 * elapsed.as_secs_f64();
        let (since, used_before) = self.previous.unwrap_or((Duration::ZERO, 0.0));
        let interval = elapsed.saturating_sub(since).as_secs_f64();
        let cpu_percent = if interval > 0.0 {
            ((cpu_seconds - used_before) / interval * 100.0).max(0.0)
        } else {
            usage.cpu_percent
        };
        self.previous = Some((elapsed, cpu_seconds));
        EventBody::Resources {
            cpu_percent: tenths(cpu_percent),
            memory_mb: tenths(usage.memory_bytes as f64 / (1024.0 * 1024.0)),
            pids: usage.pids,
        }
    }
}

fn tenths(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

impl ResourceSampler {
    /// Starts sampling `sandbox`, created at `created`.
    pub fn start(
        sandbox: Arc<dyn LiveSandbox>,
        events: Arc<EventSink>,
        created: Instant,
    ) -> ResourceSampler {
        let series = Arc::new(Mutex::new(Series {
            created,
            previous: None,
        }));
        let sampling = series.clone();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(SAMPLE_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Only the wait between samples is cut short, never a sample.
                tokio::select! {
                    _ = interval.tick() => {}
                    _ = stopped.changed() => {}
                }
                if *stopped.borrow() {
                    break;
                }
                // A provider with nothing to measure yet (no process started) or at
                // all (`none`) answers with an error: that sample is skipped.
                if let Ok(usage) = sandbox.stats().await {
                    let body = sampling.lock().unwrap().sample(&usage, Instant::now());
                    events.emit("host", body);
                }
            }
        });
        ResourceSampler {
            task: Some(task),
            stop,
            series,
        }
    }

    /// Stops sampling, once the sample in flight (if any) has its answer.
    pub async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Records `usage`, read as the sandbox ends, as the last sample.
    pub fn finish(self, usage: &ResourceUsage, events: &EventSink) {
        let body = self.series.lock().unwrap().sample(usage, Instant::now());
        events.emit("host", body);
    }
}

impl Drop for ResourceSampler {
    /// Tells the task to end after its sample in flight; the sandbox's lock makes a
    /// later `destroy` wait for that sample.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cpu_percent: f64, memory_bytes: u64) -> ResourceUsage {
        ResourceUsage {
            cpu_percent,
            memory_bytes,
            peak_memory_bytes: memory_bytes,
            pids: 3,
            oom_killed: false,
        }
    }

    #[test]
    fn cumulative_averages_become_use_per_interval() {
        let created = Instant::now();
        let mut series = Series {
            created,
            previous: None,
        };
        // One core busy for the first 2 s (average 100%), idle for the next 2 s
        // (average 50% over 4 s), then busy on two cores for 1 s (average 80% over 5 s).
        let at = |secs| created + Duration::from_secs(secs);
        let cpu = |body: EventBody| match body {
            EventBody::Resources { cpu_percent, .. } => cpu_percent,
            other => panic!("{other:?}"),
        };
        assert_eq!(cpu(series.sample(&usage(100.0, 0), at(2))), 100.0);
        assert_eq!(cpu(series.sample(&usage(50.0, 0), at(4))), 0.0);
        assert_eq!(cpu(series.sample(&usage(80.0, 0), at(5))), 200.0);
        match series.sample(&usage(80.0, 3 << 20), at(5)) {
            EventBody::Resources {
                memory_mb, pids, ..
            } => assert_eq!((memory_mb, pids), (3.0, 3)),
            other => panic!("{other:?}"),
        }
    }
}
