//! Per-object exponential backoff with jitter for transient errors.
//!
//! The work queue ([`crate::wiring::drive_finalized`]) asks how long to wait before retrying a failed object; the
//! delay doubles with each consecutive failure of that object (from 1 s, capped at
//! 5 minutes) and is drawn uniformly from the upper half of the window so that many
//! objects failing together (an apiserver restart) do not retry in lockstep. A
//! successful reconcile forgets the object's failures.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

pub const BASE: Duration = Duration::from_secs(1);
pub const CAP: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

/// The window for the `n`th consecutive failure (1-based): `BASE·2^(n-1)`, at most `CAP`.
pub fn window(n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.saturating_sub(1).min(20)).unwrap_or(u32::MAX);
    BASE.saturating_mul(factor).min(CAP)
}

fn key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    ObjectRef::from_obj(obj).to_string()
}

impl Backoff {
    /// Record a failure of `obj` and return how long to wait before retrying it.
    pub fn failed<K: Resource<DynamicType = ()>>(&self, obj: &K) -> Duration {
        let n = {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            let n = failures.entry(key(obj)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let w = window(n);
        let half = w / 2;
        half + half.mul_f64(rand::random::<f64>())
    }

    /// Forget the failures of `obj` after a successful reconcile.
    pub fn succeeded<K: Resource<DynamicType = ()>>(&self, obj: &K) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(&key(obj));
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("ns".into()), ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn windows_double_and_cap_at_five_minutes() {
        assert_eq!(window(1), Duration::from_secs(1));
        assert_eq!(window(2), Duration::from_secs(2));
        assert_eq!(window(5), Duration::from_secs(16));
        assert_eq!(window(9), Duration::from_secs(256));
        assert_eq!(window(10), CAP);
        assert_eq!(window(1000), CAP);
    }

    #[test]
    fn delays_stay_within_the_upper_half_of_the_window_and_reset_on_success() {
        let b = Backoff::default();
        let a = cm("a");
        for n in 1..=12 {
            let d = b.failed(&a);
            assert!(d >= window(n) / 2 && d <= window(n), "failure {n}: {d:?} outside {:?}", window(n));
        }
        // Another object has its own count.
        assert!(b.failed(&cm("b")) <= window(1));
        b.succeeded(&a);
        assert!(b.failed(&a) <= window(1));
    }
}
