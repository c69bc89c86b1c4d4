//! What every reconcile gets: the client, the clock, and shared bookkeeping.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tracing::info;

use crate::backoff::Backoff;
use crate::events::Events;
use crate::metrics::{ControllerLabels, Metrics};
use crate::status::Written;

/// Shared state of one controller manager.
pub struct Context {
    pub client: Client,
    pub backoff: Backoff,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    pub caches: Caches,
    pub watches: Watches,
    /// Statuses written that the caches may not have caught up with.
    pub written: Written,
    /// Objects triggered and waiting for a reconcile, per controller.
    pub queues: Queues,
    /// Whether this replica may reconcile (it leads).
    pub leader: Gate,
    /// The clock status timestamps are taken from; injectable so tests are deterministic.
    pub clock: fn() -> Timestamp,
    /// Operator configuration the children are built with.
    pub settings: Settings,
}

/// Operator configuration that goes into children (set by `bosun run`'s flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The image whose `bosun` runs backups and restores (`--runner-image`).
    pub runner_image: String,
    /// How PostgreSQL instances are run (`--postgres-image`, `--postgres-volume-permissions`).
    pub postgres: bosun_resources::postgresql::Settings,
    /// The images of a stack's MySQL and Redis (`--mysql-image`, `--redis-image`).
    pub stack: bosun_resources::stack::Images,
    /// How AppConfig rollouts are paced (`--appconfig-settle`, `--appconfig-min-interval`).
    pub rollout_pace: bosun_resources::appconfig::Pace,
}

/// `--appconfig-settle`'s default: changes within it roll consumers once.
pub const DEFAULT_ROLLOUT_SETTLE: Duration = Duration::from_secs(2);
/// `--appconfig-min-interval`'s default: the least time between two rollouts of one AppConfig.
pub const DEFAULT_ROLLOUT_MIN_INTERVAL: Duration = Duration::from_secs(10);

pub use bosun_resources::backup::DEFAULT_RUNNER_IMAGE;
pub use bosun_resources::postgresql::DEFAULT_IMAGE as DEFAULT_POSTGRES_IMAGE;

impl Default for Settings {
    fn default() -> Self {
        Self {
            runner_image: DEFAULT_RUNNER_IMAGE.to_owned(),
            postgres: bosun_resources::postgresql::Settings::default(),
            stack: bosun_resources::stack::Images::default(),
            rollout_pace: bosun_resources::appconfig::Pace {
                settle: DEFAULT_ROLLOUT_SETTLE,
                min_interval: DEFAULT_ROLLOUT_MIN_INTERVAL,
            },
        }
    }
}

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

/// The work queue of one controller as a set: objects a watch triggered whose
/// reconcile has not started yet (kube-runtime's queue does not expose its length).
/// Its size is the `bosun_workqueue_depth` gauge.
#[derive(Debug)]
pub struct Queue {
    /// Hashes of the objects' references: a set of 1,000 erased references cost a
    /// quarter of a megabyte in names of their kind, group and version alone.
    waiting: Mutex<HashSet<u64>>,
    depth: prometheus_client::metrics::gauge::Gauge,
}

impl Queue {
    pub(crate) fn add<K: Resource>(&self, object: &ObjectRef<K>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.insert(key(object));
        self.depth.set(waiting.len() as i64);
    }

    pub(crate) fn done<K: Resource>(&self, object: &ObjectRef<K>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.remove(&key(object));
        self.depth.set(waiting.len() as i64);
    }
}

fn key<K: Resource>(object: &ObjectRef<K>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (K::group(&object.dyntype), K::kind(&object.dyntype), &object.namespace, &object.name).hash(&mut hasher);
    hasher.finish()
}

/// The queues of all controllers, by their metrics label.
#[derive(Debug)]
pub struct Queues {
    metrics: Arc<Metrics>,
    queues: Mutex<HashMap<&'static str, Arc<Queue>>>,
}

impl Queues {
    fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics, queues: Mutex::default() }
    }

    pub fn of(&self, controller: &'static str) -> Arc<Queue> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues
            .entry(controller)
            .or_insert_with(|| {
                let depth = self.metrics.queue_depth.get_or_create(&ControllerLabels { controller }).clone();
                Arc::new(Queue { waiting: Mutex::default(), depth })
            })
            .clone()
    }
}

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

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("backoff", &self.backoff).finish_non_exhaustive()
    }
}

impl Context {
    /// `identity` names this replica in events (the pod name).
    pub fn new(client: Client, identity: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            events: Events::new(client.clone(), identity),
            client,
            backoff: Backoff::default(),
            queues: Queues::new(metrics.clone()),
            metrics,
            caches: Caches::default(),
            watches: Watches::default(),
            written: Written::default(),
            leader: Gate::default(),
            clock: Timestamp::now,
            settings: Settings::default(),
        }
    }

    pub fn now(&self) -> Timestamp {
        (self.clock)()
    }
}

/// Which namespaces the manager watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Empty means every namespace.
    pub namespaces: Vec<String>,
}

impl Scope {
    /// One watch target per namespace (`None` = cluster-wide). Each gets its own
    /// controller and cache: a reflector cannot merge several watches into one store.
    pub fn targets(&self) -> Vec<Option<String>> {
        if self.namespaces.is_empty() { vec![None] } else { self.namespaces.iter().cloned().map(Some).collect() }
    }
}

/// An `Api` for `K` in `namespace`, or across all namespaces.
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
