//! A bound on the workloads bosun has created whose first rollout has not ended.
//!
//! kube-controller-manager, the scheduler and the kubelets bring a new Deployment to
//! life. Handed ten thousand within a minute they fall far behind and do several times
//! the work per Deployment (measured at 10,000 WebApps on the local cluster: 3.8
//! converged a second, against 13–20 with at most 500 or 1,000 in flight); creating them at a
//! fixed rate instead (30 a second) was measured too, and let a backlog of thousands
//! build up just the same (7–8 a second). So a [`Window`] lets at most `limit`
//! creations be in flight: a workload holds its slot from its creation until its first
//! rollout ends (available, or failed), or for at most `hold`, so a workload that never
//! becomes available (an image that does not exist) slows those behind it and never
//! stops them. The parents that find the window full wait in line, first come first
//! served, and are woken as slots free; a woken parent's slot is kept for it for
//! [`RESERVED`] (one that does not come back, deleted meanwhile, gives it up then).
//!
//! Small numbers never wait: below `limit` creations in flight, a parent goes on at
//! once. `limit` 0 means no bound. One window serves one process (all its shards and
//! namespaces): it paces what this process hands the cluster.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

/// How long a creation holds its slot at most, when its rollout does not end first.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(120);

/// `--max-rollouts-in-flight`'s default: far above what a team creates at once by hand
/// or in one `kubectl apply` (a burst of 1,000 goes unpaced, as fast as without a
/// window), and small enough that a burst of ten thousand is paced (measured at 10,000:
/// all converged in 1,292 s with 1,000, 1,445 s with 500, two sessions).
pub const DEFAULT_LIMIT: usize = 1000;

/// How long a slot stays kept for the parent woken for it (its reconcile may wait
/// behind a long queue of others).
pub const RESERVED: Duration = Duration::from_secs(60);

type Wake = Box<dyn FnOnce() + Send>;

/// See the module's documentation.
pub struct Window {
    /// 0: no bound.
    limit: usize,
    hold: Duration,
    state: Mutex<State>,
    /// Creations in flight, and parents waiting in line (exported as metrics).
    in_flight: Gauge,
    waiting: Gauge,
}

#[derive(Default)]
struct State {
    /// Each creation in flight (its workload's `namespace/name`) and when it began.
    in_flight: HashMap<String, Instant>,
    /// Slots kept for the parents woken for them, and since when.
    reserved: HashMap<String, Instant>,
    /// Parents waiting for a slot, in the order they came, each with how to wake it.
    line: VecDeque<(String, Wake)>,
    in_line: HashSet<String>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("limit", &self.limit).field("hold", &self.hold).finish_non_exhaustive()
    }
}

impl Default for Window {
    fn default() -> Self {
        Self::new(DEFAULT_LIMIT, DEFAULT_HOLD)
    }
}

impl Window {
    pub fn new(limit: usize, hold: Duration) -> Self {
        Self { limit, hold, state: Mutex::default(), in_flight: Gauge::default(), waiting: Gauge::default() }
    }

    /// The gauges of creations in flight and of parents waiting.
    pub fn gauges(&self) -> (Gauge, Gauge) {
        (self.in_flight.clone(), self.waiting.clone())
    }

    /// Export the gauges as `bosun_rollouts_in_flight` and `bosun_rollouts_waiting`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let r = registry.sub_registry_with_prefix("bosun");
        r.register(
            "rollouts_in_flight",
            "Workloads bosun created whose first rollout has not ended (--max-rollouts-in-flight bounds them)",
            self.in_flight.clone(),
        );
        r.register(
            "rollouts_waiting",
            "Parents waiting for a rollout slot before bosun creates their workload",
            self.waiting.clone(),
        );
    }

    /// May the workload `key` (`namespace/name`) be created now? `true` takes a slot
    /// (or finds the one it holds); `false` puts the parent in line, and `wake` is
    /// called once a slot may be free for it. A parent already in line keeps its place.
    pub fn admit(&self, key: &str, now: Instant, wake: impl FnOnce() + Send + 'static) -> bool {
        if self.limit == 0 {
            return true;
        }
        let mut state = self.lock();
        let woken = self.expire(&mut state, now);
        let admitted = if state.in_flight.contains_key(key) {
            true
        } else if state.reserved.remove(key).is_some() || state.in_flight.len() + state.reserved.len() < self.limit {
            // Its turn came, or there is room (then nobody is in line: `expire` woke them).
            state.in_flight.insert(key.to_owned(), now);
            true
        } else {
            if state.in_line.insert(key.to_owned()) {
                state.line.push_back((key.to_owned(), Box::new(wake)));
            }
            false
        };
        self.publish(&state);
        drop(state);
        woken.into_iter().for_each(|wake| wake());
        admitted
    }

    /// The first rollout of `key` ended (or its creation failed): its slot goes to the
    /// first in line.
    pub fn release(&self, key: &str, now: Instant) {
        if self.limit == 0 {
            return;
        }
        let mut state = self.lock();
        if state.in_flight.remove(key).is_none() && state.reserved.remove(key).is_none() && state.line.is_empty() {
            return;
        }
        let woken = self.expire(&mut state, now);
        self.publish(&state);
        drop(state);
        woken.into_iter().for_each(|wake| wake());
    }

    /// Forget the creations that held their slot longer than `hold` and the slots kept
    /// longer than [`RESERVED`], and take out of the line as many parents as there are
    /// free slots, keeping one for each: their wakes, to be called once the lock is released.
    fn expire(&self, state: &mut State, now: Instant) -> Vec<Wake> {
        let hold = self.hold;
        state.in_flight.retain(|_, began| now.saturating_duration_since(*began) < hold);
        state.reserved.retain(|_, since| now.saturating_duration_since(*since) < RESERVED);
        let taken = state.in_flight.len() + state.reserved.len();
        let free = self.limit.saturating_sub(taken).min(state.line.len());
        let woken: Vec<(String, Wake)> = state.line.drain(..free).collect();
        woken
            .into_iter()
            .map(|(key, wake)| {
                state.in_line.remove(&key);
                state.reserved.insert(key, now);
                wake
            })
            .collect()
    }

    /// How long a parent in line waits at most before it looks again by itself: a slot
    /// frees by time alone when a creation's hold runs out with no event to say so.
    pub fn recheck(&self) -> Duration {
        self.hold
    }

    fn publish(&self, state: &State) {
        self.in_flight.set(state.in_flight.len() as i64);
        self.waiting.set(state.line.len() as i64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent at every unlock: a panic elsewhere does not taint it.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A wake that counts how often it was called.
    fn counted() -> (Arc<AtomicUsize>, impl FnOnce() + Send + 'static) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        (calls, move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[test]
    fn below_the_limit_nothing_waits_and_a_full_window_puts_parents_in_line() {
        let window = Window::new(2, DEFAULT_HOLD);
        let t0 = Instant::now();
        assert!(window.admit("ns/a", t0, || {}));
        assert!(window.admit("ns/b", t0, || {}));
        // Asking again for a slot held is no second slot.
        assert!(window.admit("ns/a", t0, || {}));
        let (c_calls, c_wake) = counted();
        assert!(!window.admit("ns/c", t0, c_wake));
        let (d_calls, d_wake) = counted();
        assert!(!window.admit("ns/d", t0, d_wake));
        // In line once: a second ask keeps c's place and its first wake.
        let (again, again_wake) = counted();
        assert!(!window.admit("ns/c", t0, again_wake));
        assert_eq!(window.gauges().0.get(), 2);
        assert_eq!(window.gauges().1.get(), 2);

        // a's rollout ended: the first in line, c, is woken, and only c.
        window.release("ns/a", t0);
        assert_eq!((c_calls.load(Ordering::SeqCst), d_calls.load(Ordering::SeqCst)), (1, 0));
        assert_eq!(again.load(Ordering::SeqCst), 0);
        assert!(window.admit("ns/c", t0, || {}));
        assert!(!window.admit("ns/d", t0, || {}), "d waits: b and c hold both slots");
    }

    #[test]
    fn a_creation_that_never_progresses_gives_its_slot_up_after_the_hold() {
        let hold = Duration::from_secs(120);
        let window = Window::new(1, hold);
        let t0 = Instant::now();
        assert!(window.admit("ns/broken", t0, || {}));
        let (calls, wake) = counted();
        assert!(!window.admit("ns/next", t0 + Duration::from_secs(60), wake));
        assert!(window.recheck() <= hold, "a parent in line looks again by itself at the latest when a hold ends");
        // The hold ran out: the next ask frees the slot, for the first in line.
        assert!(!window.admit("ns/third", t0 + hold, || {}), "the freed slot is next's, not a newcomer's");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(window.admit("ns/next", t0 + hold, || {}));
    }

    #[test]
    fn a_woken_parent_keeps_its_slot_for_a_while_and_no_longer() {
        let window = Window::new(1, DEFAULT_HOLD);
        let t0 = Instant::now();
        assert!(window.admit("ns/a", t0, || {}));
        let (b_calls, b_wake) = counted();
        assert!(!window.admit("ns/b", t0, b_wake));
        let (c_calls, c_wake) = counted();
        assert!(!window.admit("ns/c", t0, c_wake));
        // a is done: b, first in line, is woken; c looking again meanwhile still waits.
        window.release("ns/a", t0);
        assert_eq!((b_calls.load(Ordering::SeqCst), c_calls.load(Ordering::SeqCst)), (1, 0));
        assert!(!window.admit("ns/c", t0, || {}), "b's slot is kept for b");
        assert_eq!(window.gauges().1.get(), 1, "c keeps its place in line");
        // b never comes back (deleted): after RESERVED its slot goes to c.
        assert!(!window.admit("ns/d", t0 + RESERVED, || {}));
        assert_eq!(c_calls.load(Ordering::SeqCst), 1);
        assert!(window.admit("ns/c", t0 + RESERVED, || {}));
    }

    #[test]
    fn a_release_of_what_holds_no_slot_changes_nothing() {
        let window = Window::new(1, DEFAULT_HOLD);
        let t0 = Instant::now();
        assert!(window.admit("ns/a", t0, || {}));
        window.release("ns/unknown", t0);
        assert!(!window.admit("ns/b", t0, || {}));
        assert_eq!(window.gauges().0.get(), 1);
    }

    #[test]
    fn limit_zero_is_no_bound() {
        let window = Window::new(0, DEFAULT_HOLD);
        let t0 = Instant::now();
        assert!((0..10_000).all(|i| window.admit(&format!("ns/{i}"), t0, || {})));
        assert_eq!(window.gauges().0.get(), 0);
    }
}
