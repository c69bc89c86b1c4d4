//! The work queues of the controllers, as sets (for the `bosun_workqueue_depth` gauge).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

use crate::metrics::{ControllerLabels, Metrics};

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
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
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
