//! When a recorded run is an orphan: its owner is dead ([`Liveness::Dead`]), or it
//! cannot be seen from here (another pid namespace) and the run's heartbeat is stale.
//! A live owner's run is never one, whoever owns it. The listings (`agentgate
//! sandboxes`, the history) show orphans as such and `agentgate gc` reaps them, so
//! both read the one rule here, next to the rows it reads.

use std::time::Duration;

use super::owner::{Liveness, Owner};
use super::store::{now_ms, RunRow, RunState};

/// How long a heartbeat may be silent before a run whose owner cannot be seen is
/// taken for dead. Runs beat every [`HEARTBEAT_INTERVAL`].
pub const STALE_AFTER: Duration = Duration::from_secs(60);
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);

/// Whether a `running` row is an orphan now, with `older_than` applied.
pub fn is_orphan(row: &RunRow, older_than: Duration) -> bool {
    let silent = Duration::from_millis(now_ms().saturating_sub(row.heartbeat_ms));
    match row.owner.parse::<Owner>().map(|o| o.liveness()) {
        Ok(Liveness::Alive) => false,
        Ok(Liveness::Dead) => silent >= older_than,
        Ok(Liveness::Unknown) | Err(_) => silent >= older_than.max(STALE_AFTER),
    }
}

/// The state to show for a row: `running` rows whose owner is gone are `orphaned`.
pub fn effective_state(row: &RunRow) -> RunState {
    if row.state == RunState::Running && is_orphan(row, Duration::ZERO) {
        RunState::Orphaned
    } else {
        row.state
    }
}
