//! The leader gate: reconciles run only on the replica that leads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use tracing::info;

use crate::metrics::Metrics;

/// Whether reconciles may run: closed on a standby (its watches and caches run all
/// the same, so it takes over warm), open once it leads, shut at shutdown.
#[derive(Debug)]
pub struct Gate {
    state: watch::Sender<GateState>,
    first_reconcile: AtomicBool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum GateState {
    Standby,
    Leading(Instant),
    Shut,
}

impl Default for Gate {
    fn default() -> Self {
        Self { state: watch::Sender::new(GateState::Standby), first_reconcile: AtomicBool::new(false) }
    }
}

impl Gate {
    /// This replica leads (from now: the takeover time is measured from here).
    pub fn open(&self) {
        self.state.send_replace(GateState::Leading(Instant::now()));
    }

    /// Whether this replica leads now (not standby, not shut).
    pub fn leading(&self) -> bool {
        matches!(*self.state.borrow(), GateState::Leading(_))
    }

    /// No reconcile starts any more; those waiting return without reconciling.
    pub fn shut(&self) {
        self.state.send_replace(GateState::Shut);
    }

    /// Wait until this replica leads: `true`, or `false` once shut.
    pub async fn wait(&self) -> bool {
        let mut rx = self.state.subscribe();
        match rx.wait_for(|s| *s != GateState::Standby).await {
            Ok(state) => matches!(*state, GateState::Leading(_)),
            Err(_) => false,
        }
    }

    /// A reconcile starts: the first one after taking the lead reports the time since.
    pub(crate) fn reconciling(&self, metrics: &Metrics) {
        if self.first_reconcile.swap(true, Ordering::SeqCst) {
            return;
        }
        if let GateState::Leading(since) = *self.state.borrow() {
            let seconds = since.elapsed().as_secs_f64();
            metrics.takeover.set(seconds);
            info!(ms = (seconds * 1000.0) as u64, "first reconcile after taking the lead");
        }
    }
}
