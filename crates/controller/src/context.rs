//! What every reconcile gets: the client, the clock, and shared bookkeeping.

use jiff::Timestamp;
use kube::{Api, Client, Resource};

use crate::backoff::Backoff;

/// Shared state of one controller manager.
pub struct Context {
    pub client: Client,
    pub backoff: Backoff,
    /// The clock status timestamps are taken from; injectable so tests are deterministic.
    pub clock: fn() -> Timestamp,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("backoff", &self.backoff).finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client) -> Self {
        Self { client, backoff: Backoff::default(), clock: Timestamp::now }
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
