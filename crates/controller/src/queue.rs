//! The work queue of a controller: which objects wait for a reconcile, in the order
//! they were triggered, each at most once.
//!
//! ```text
//!   add ─▶ waiting (FIFO) ─pop─▶ running ─finish─┬─▶ (triggered while running) waiting again
//!            ▲                                    ├─▶ (asked to look again) delayed ─fire─▶ waiting
//!            └────────────── fire ◀───────────────┴─▶ forgotten
//! ```
//!
//! Every operation is O(1) (O(log n) for a delayed one), whatever the number of
//! objects waiting: kube-runtime's own queue looked through all waiting objects on
//! every wake-up, which at 10,000 WebApps spent most of bosun's CPU in the queue.
//! An object triggered while it is reconciled is reconciled once more after that
//! reconcile — never twice at a time; a reconcile that starts serves the look-again
//! that was pending for its object, and its own outcome says when the next one is.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::metrics::{ControllerLabels, Metrics};

/// Where an object is in the queue.
#[derive(Debug, Default)]
struct Entry {
    /// In the waiting line.
    waiting: bool,
    /// Being reconciled now.
    running: bool,
    /// Triggered while running: back in line when that reconcile ends.
    again: bool,
    /// A look-again pending at this time (the key of its timer).
    due: Option<(Instant, u64)>,
}

impl Entry {
    fn idle(&self) -> bool {
        !self.waiting && !self.running && !self.again && self.due.is_none()
    }
}

/// The queue of one controller over object keys `T`.
#[derive(Debug)]
pub struct WorkQueue<T> {
    line: VecDeque<T>,
    entries: HashMap<T, Entry>,
    timers: BTreeMap<(Instant, u64), T>,
    sequence: u64,
}

impl<T> Default for WorkQueue<T> {
    fn default() -> Self {
        Self { line: VecDeque::new(), entries: HashMap::new(), timers: BTreeMap::new(), sequence: 0 }
    }
}

impl<T: Clone + Eq + Hash> WorkQueue<T> {
    /// `key` was triggered: it joins the end of the line, unless it is in line already,
    /// or — while it is reconciled — once that reconcile ends.
    pub fn add(&mut self, key: T) {
        let entry = self.entries.entry(key.clone()).or_default();
        if entry.running {
            entry.again = true;
        } else if !entry.waiting {
            entry.waiting = true;
            self.line.push_back(key);
        }
    }

    /// The next object to reconcile, now marked running; its pending look-again, if
    /// any, is served by this reconcile.
    pub fn pop(&mut self) -> Option<T> {
        let key = self.line.pop_front()?;
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.waiting = false;
            entry.running = true;
            if let Some(timer) = entry.due.take() {
                self.timers.remove(&timer);
            }
        }
        Some(key)
    }

    /// The reconcile of `key` ended and asked to look again `after` this long (or not):
    /// back in line if it was triggered meanwhile, else delayed, else forgotten.
    pub fn finish(&mut self, key: &T, after: Option<Duration>, now: Instant) {
        let Some(entry) = self.entries.get_mut(key) else { return };
        entry.running = false;
        if std::mem::take(&mut entry.again) {
            entry.waiting = true;
            self.line.push_back(key.clone());
        } else if let Some(after) = after {
            self.sequence += 1;
            let timer = (now.checked_add(after).unwrap_or(now + Duration::from_secs(86_400)), self.sequence);
            entry.due = Some(timer);
            self.timers.insert(timer, key.clone());
        } else if entry.idle() {
            self.entries.remove(key);
        }
    }

    /// When the next look-again is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|((at, _), _)| *at)
    }

    /// Put every object whose look-again is due by `now` in line.
    pub fn fire(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            if let Some(e) = self.entries.get_mut(&key) {
                e.due = None;
            }
            self.add(key);
        }
    }

    /// How many objects wait in line (not those running or delayed).
    pub fn len(&self) -> usize {
        self.line.len()
    }

    pub fn is_empty(&self) -> bool {
        self.line.is_empty()
    }

    /// How many objects the queue knows of: waiting, running or delayed.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }
}

/// The `bosun_workqueue_depth` gauge of one controller: how many objects wait.
#[derive(Debug)]
pub struct Queue {
    depth: prometheus_client::metrics::gauge::Gauge,
}

impl Queue {
    pub(crate) fn set(&self, waiting: usize) {
        self.depth.set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }
}

/// The queue gauges of all controllers, by their metrics label.
#[derive(Debug)]
pub struct Queues {
    metrics: Arc<Metrics>,
    queues: Mutex<HashMap<&'static str, Arc<Queue>>>,
}

impl Queues {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics, queues: Mutex::default() }
    }

    pub fn of(&self, controller: &'static str) -> Arc<Queue> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues
            .entry(controller)
            .or_insert_with(|| {
                let depth = self.metrics.queue_depth.get_or_create(&ControllerLabels { controller }).clone();
                Arc::new(Queue { depth })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut WorkQueue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| q.pop()).collect()
    }

    #[test]
    fn first_in_first_out_each_once() {
        let mut q = WorkQueue::default();
        for key in ["a", "b", "a", "c", "b"] {
            q.add(key);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(drain(&mut q), ["a", "b", "c"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_trigger_while_running_runs_it_once_more_after() {
        let (mut q, now) = (WorkQueue::default(), Instant::now());
        q.add("a");
        assert_eq!(q.pop(), Some("a"));
        q.add("a");
        q.add("a");
        assert_eq!(q.pop(), None, "never twice at a time");
        q.finish(&"a", None, now);
        assert_eq!(drain(&mut q), ["a"], "once more, for the triggers meanwhile");
        q.finish(&"a", None, now);
        assert_eq!(q.tracked(), 0, "forgotten once done");
    }

    #[test]
    fn look_again_later_and_the_earliest_trigger_wins() {
        let (mut q, now) = (WorkQueue::default(), Instant::now());
        q.add("a");
        q.add("b");
        drain(&mut q);
        q.finish(&"a", Some(Duration::from_secs(5)), now);
        q.finish(&"b", Some(Duration::from_secs(1)), now);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(1)));
        q.fire(now);
        assert!(q.is_empty(), "not due yet");
        q.fire(now + Duration::from_secs(1));
        assert_eq!(drain(&mut q), ["b"]);
        // A watch event before its time: reconciled now, and that reconcile serves the
        // look-again (its own outcome says when the next one is).
        q.add("a");
        assert_eq!(drain(&mut q), ["a"]);
        assert_eq!(q.next_due(), None);
        q.finish(&"a", None, now);
        q.finish(&"b", None, now);
        q.fire(now + Duration::from_secs(10));
        assert!(q.is_empty());
        assert_eq!(q.tracked(), 0);
    }

    #[test]
    fn a_look_again_due_while_running_waits_for_that_reconcile() {
        let (mut q, now) = (WorkQueue::default(), Instant::now());
        q.add("a");
        q.pop();
        q.finish(&"a", Some(Duration::ZERO), now);
        q.add("b");
        assert_eq!(drain(&mut q), ["b"]);
        q.fire(now);
        assert_eq!(drain(&mut q), ["a"]);
        q.fire(now);
        q.add("a");
        assert_eq!(q.pop(), None, "running: queued for after it");
        q.finish(&"a", Some(Duration::from_secs(60)), now);
        assert_eq!(drain(&mut q), ["a"], "the trigger meanwhile comes before the look-again");
    }

    #[test]
    fn ten_thousand_objects_in_order() {
        let mut q = WorkQueue::default();
        for round in 0..3 {
            for i in 0..10_000u32 {
                q.add(i);
            }
            assert_eq!(q.len(), 10_000, "round {round}");
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, (0..10_000).collect::<Vec<_>>());
    }
}
