//! The signals that end an invocation: SIGINT, SIGTERM, SIGHUP and SIGQUIT.
//!
//! Their handlers are installed before anything else happens, so none of them ever
//! kills the host outright, which would leave an agent running without a result.
//! Until a run takes them over, nothing has started that needs cleaning up (plugins
//! are compiling, files are being read), so a signal exits 130 at once. Once a run has
//! taken them over, a signal cancels it: the engine kills what the run started, writes
//! `result.json`, and the run exits 130. Later signals during that cleanup are ignored,
//! so a second Ctrl-C cannot cut the cleanup short.

use std::sync::{Arc, Mutex};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The exit code of an interrupted invocation.
pub(crate) const EXIT_INTERRUPTED: i32 = 130;

pub struct Interrupts {
    /// Whether a run has taken the signals over. Held while a signal is handled, so a
    /// signal either exits before the run starts or cancels it, never half of each.
    run_owns: Arc<Mutex<bool>>,
    received: watch::Receiver<bool>,
}

impl Interrupts {
    /// Installs the handlers. Must be called inside the async runtime.
    pub fn install() -> std::io::Result<Interrupts> {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut quit = signal(SignalKind::quit())?;
        let run_owns = Arc::new(Mutex::new(false));
        let (sender, received) = watch::channel(false);
        let owner = run_owns.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                    _ = hup.recv() => {}
                    _ = quit.recv() => {}
                }
                let run_owns = owner.lock().unwrap_or_else(|e| e.into_inner());
                if !*run_owns {
                    std::process::exit(EXIT_INTERRUPTED);
                }
                sender.send_replace(true);
            }
        });
        Ok(Interrupts { run_owns, received })
    }

    /// Hands the signals to a run: from now on a signal resolves the returned future
    /// instead of exiting.
    pub fn take_over(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        *self.run_owns.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let mut received = self.received.clone();
        async move {
            if received.wait_for(|&signalled| signalled).await.is_err() {
                // The handler task is gone only when the runtime shuts down.
                std::future::pending::<()>().await;
            }
        }
    }
}
