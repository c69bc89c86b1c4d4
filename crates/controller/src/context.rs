//! What every reconcile gets: the client, the clock, and the shared bookkeeping
//! ([`Caches`] and [`Watches`] for `/readyz`, [`Queues`], the leader [`Gate`], the
//! statuses [`Written`]) and [`Settings`], each in a module of its own.

use std::sync::Arc;

use jiff::Timestamp;
use kube::{Api, Client, Resource};

use crate::backoff::Backoff;
use crate::events::Events;
pub use crate::gate::Gate;
pub use crate::health::{Caches, Watches};
use crate::metrics::Metrics;
pub use crate::queue::Queues;
pub use crate::settings::Settings;
pub use crate::written::Written;

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
    /// bosun's records of its applies, kept across restarts.
    pub checkpoints: crate::checkpoint::Checkpoints,
    /// With `--shards`: the label selector of the shard these controllers serve (its
    /// buckets), which their watches of parents and of bucketed children ask for.
    pub shard: Option<String>,
    /// The workloads created whose first rollout has not ended (one per process,
    /// shared by every context).
    pub rollouts: Arc<crate::window::Window>,
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
            checkpoints: Default::default(),
            shard: None,
            rollouts: Arc::default(),
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
