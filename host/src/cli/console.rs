//! What `agentgate` prints on its stdout and stderr, written by a thread of its own.
//!
//! A reader that does not read (a terminal paused with Ctrl-S, a pipe nobody drains)
//! makes every write to it block. The run's tasks must never wait for that: the
//! deadline, the kill and cleanup go on whatever the host prints. So the live display,
//! `--json` and compile spinners hand their writes to one writer thread through a
//! bounded queue. [`Console::offer`] drops what finds the queue full (its caller counts
//! it and says so later; the run folder's files have everything); [`Console::print`]
//! waits for room, for what must be shown once the run is over (its verdict, `--json`'s
//! result line). [`close`] waits until the writer has written everything, so
//! `agentgate` exits once its reader has taken it all.

use std::io::Write;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// How many writes may wait for the reader. Past that, offered writes are dropped.
const QUEUE: usize = 1024;

/// One write: run on the writer thread, where blocking on the reader harms nothing.
type Job = Box<dyn FnOnce() + Send>;

pub struct Console {
    queue: Mutex<Option<SyncSender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// The process's console, its writer started on first use.
pub fn console() -> &'static Console {
    static CONSOLE: OnceLock<Console> = OnceLock::new();
    CONSOLE.get_or_init(Console::start)
}

/// Waits until everything queued is written, then stops the writer. Later writes are
/// made at once, by their caller.
pub fn close() {
    console().close();
}

impl Console {
    fn start() -> Console {
        let (queue, jobs) = sync_channel::<Job>(QUEUE);
        let writer = std::thread::Builder::new()
            .name("agentgate-console".into())
            .spawn(move || {
                for job in jobs {
                    job();
                }
            });
        match writer {
            Ok(writer) => Console {
                queue: Mutex::new(Some(queue)),
                writer: Mutex::new(Some(writer)),
            },
            // No thread for the writer: write in place, as a program without one would.
            Err(_) => Console {
                queue: Mutex::new(None),
                writer: Mutex::new(None),
            },
        }
    }

    /// Queues `job` unless the queue is full. Returns whether it was queued (or, once
    /// the console is closed, done); a dropped job is the caller's to count.
    pub fn offer(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let Some(queue) = self.sender() else {
            job();
            return true;
        };
        match queue.try_send(Box::new(job)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => false,
            Err(TrySendError::Disconnected(job)) => {
                job();
                true
            }
        }
    }

    /// Queues `job`, waiting for room: for what must be shown.
    pub fn print(&self, job: impl FnOnce() + Send + 'static) {
        let Some(queue) = self.sender() else {
            return job();
        };
        if let Err(unsent) = queue.send(Box::new(job)) {
            (unsent.0)();
        }
    }

    fn sender(&self) -> Option<SyncSender<Job>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn close(&self) {
        // Dropping the last sender ends the writer's loop once the queue is empty.
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).take();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// Writes `line` and a newline to stdout. A reader that went away is not an error
/// worth a panic (`println!` would panic on `EPIPE`).
pub fn write_stdout(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Writes `line` and a newline to stderr.
pub fn write_stderr(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn a_stalled_writer_drops_offers_and_never_blocks_them() {
        let console = Console::start();
        // The writer is stuck on its first job, as on a pipe nobody reads.
        let (release, stuck) = channel::<()>();
        let (entered, running) = channel::<()>();
        assert!(console.offer(move || {
            let _ = entered.send(());
            let _ = stuck.recv();
        }));
        running.recv().unwrap();
        let (done, finished) = channel::<usize>();
        let mut dropped = 0;
        for i in 0..QUEUE * 3 {
            let done = done.clone();
            if !console.offer(move || {
                let _ = done.send(i);
            }) {
                dropped += 1;
            }
        }
        // The queue holds QUEUE jobs; the job being run is out of it.
        assert_eq!(dropped, QUEUE * 2);
        release.send(()).unwrap();
        // What must be shown waits for room, and comes after what was queued.
        let last = done.clone();
        console.print(move || {
            let _ = last.send(usize::MAX);
        });
        console.close();
        drop(done);
        let order: Vec<usize> = finished.iter().collect();
        assert_eq!(order.len(), QUEUE + 1);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "out of order");
        assert_eq!(order.last(), Some(&usize::MAX));
        // Once closed, writes are made in place.
        let (after, seen) = channel();
        assert!(console.offer(move || after.send(()).unwrap()));
        seen.recv_timeout(Duration::from_secs(1)).unwrap();
    }
}
