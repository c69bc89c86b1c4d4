//! Statuses bosun wrote that the caches may not have seen yet (see [`crate::status`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::object::HasStatus;
use serde::de::DeserializeOwned;

/// Statuses bosun wrote that the caches may not have seen yet: uid → (the
/// resourceVersion the write produced, the status).
#[derive(Debug, Default)]
pub struct Written {
    statuses: Mutex<HashMap<String, (u64, serde_json::Value)>>,
}

pub(crate) fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref().and_then(|rv| rv.parse().ok())
}

impl Written {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, serde_json::Value)>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `obj` with the status bosun last wrote on it, when its cached copy is older
    /// than that write; otherwise `obj` itself.
    pub fn latest<K>(&self, obj: Arc<K>) -> Arc<K>
    where
        K: Resource + HasStatus + Clone,
        K::Status: DeserializeOwned,
    {
        let Some(uid) = obj.meta().uid.as_deref() else { return obj };
        let written = match self.lock().get(uid) {
            Some((rv, status)) if resource_version(obj.meta()).is_none_or(|cached| cached < *rv) => status.clone(),
            _ => return obj,
        };
        match serde_json::from_value(written) {
            Ok(status) => {
                let mut newer = (*obj).clone();
                *newer.status_mut() = Some(status);
                Arc::new(newer)
            }
            Err(_) => obj,
        }
    }

    pub(crate) fn remember(&self, uid: &str, rv: u64, status: serde_json::Value) {
        self.lock().insert(uid.to_owned(), (rv, status));
    }

    /// The cache now holds `meta` (an object seen by a watch): forget a write it has
    /// caught up with, or that belonged to a deleted object (`gone`).
    pub fn seen(&self, meta: &ObjectMeta, gone: bool) {
        let Some(uid) = meta.uid.as_deref() else { return };
        let mut statuses = self.lock();
        if let Some((rv, _)) = statuses.get(uid)
            && (gone || resource_version(meta).is_some_and(|cached| cached >= *rv))
        {
            statuses.remove(uid);
        }
    }

    /// How many written statuses the caches have not caught up with.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.lock().len()
    }
}
