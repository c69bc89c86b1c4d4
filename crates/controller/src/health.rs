//! What `/readyz` reads: whether every cache has synced and every watch flows.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether every controller's cache has been filled by its initial list (for /readyz).
#[derive(Debug, Default)]
pub struct Caches {
    expected: AtomicUsize,
    synced: AtomicUsize,
}

impl Caches {
    pub(crate) fn expect_one(&self) {
        self.expected.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn one_synced(&self) {
        self.synced.fetch_add(1, Ordering::SeqCst);
    }

    /// (synced, expected) cache counts.
    pub fn counts(&self) -> (usize, usize) {
        (self.synced.load(Ordering::SeqCst), self.expected.load(Ordering::SeqCst))
    }

    /// True once at least one cache exists and all have synced.
    pub fn all_synced(&self) -> bool {
        let expected = self.expected.load(Ordering::SeqCst);
        expected > 0 && self.synced.load(Ordering::SeqCst) >= expected
    }
}

/// Whether every watch is flowing (for /readyz): a watch whose last attempt failed is
/// not, until it delivers again or stays quiet for [`Watches::QUIET`] (longer than
/// its longest backoff, so a quiet watch has reconnected: a failed attempt would
/// have said so).
#[derive(Debug, Default)]
pub struct Watches {
    flows: Mutex<Vec<Arc<Flow>>>,
}

/// One watch's health: when its last failed attempt was, 0 while it flows.
#[derive(Debug)]
pub struct Flow {
    epoch: Instant,
    failed_at_ms: AtomicU64,
}

impl Flow {
    /// Record one item of the watch: an event (`true`) or an error.
    pub fn observe(&self, ok: bool) {
        let now = (self.epoch.elapsed().as_millis() as u64).max(1);
        self.failed_at_ms.store(if ok { 0 } else { now }, Ordering::SeqCst);
    }

    fn flowing(&self) -> bool {
        let failed = self.failed_at_ms.load(Ordering::SeqCst);
        failed == 0 || self.epoch.elapsed().as_millis() as u64 > failed + Watches::QUIET.as_millis() as u64
    }
}

impl Watches {
    pub const QUIET: Duration = Duration::from_secs(10);

    pub(crate) fn register(&self) -> Arc<Flow> {
        let flow = Arc::new(Flow { epoch: Instant::now(), failed_at_ms: AtomicU64::new(0) });
        self.flows.lock().unwrap_or_else(|e| e.into_inner()).push(flow.clone());
        flow
    }

    /// (failing, total) watches.
    pub fn counts(&self) -> (usize, usize) {
        let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        (flows.iter().filter(|f| !f.flowing()).count(), flows.len())
    }
}
