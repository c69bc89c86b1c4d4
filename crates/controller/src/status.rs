//! Writing status: only when it changed, from the status bosun last wrote, and noting
//! when a resource first becomes Ready.
//!
//! The controller's cache can lag behind bosun's own status write: a child that the
//! previous reconcile changed triggers the next one before the watch delivers the new
//! status. Starting from the cached (older) status would carry older condition times
//! into the next write and re-write what was just written. So every status bosun
//! writes is kept ([`Written`], by uid, with the resourceVersion the write produced)
//! until the cache has caught up with it, and a reconcile starts from it meanwhile
//! ([`Written::latest`]) — no read of the object per reconcile.

use std::fmt::Debug;

pub use bosun_api::conditions::Conditioned;
use bosun_api::conditions::{Condition, types};
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use kube::core::object::HasStatus;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::apply::apply_status;
use crate::context::Context;
use crate::error::Error;
pub use crate::written::Written;
use crate::written::resource_version;

fn ready(conditions: &[Condition]) -> bool {
    bosun_resources::conditions::is_true(conditions, types::READY)
}

/// Apply `status` to `owner` unless it equals the status `owner` has (returns whether
/// it wrote); an unchanged status is never re-written, which keeps steady state
/// silent. `owner` must come through [`Written::latest`] (the runner does that). The
/// first time a resource becomes Ready (generation 1, not Ready before), the time since
/// its creation is recorded.
pub async fn update_status<K>(
    ctx: &Context,
    controller: &'static str,
    owner: &K,
    status: &K::Status,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + HasStatus + DeserializeOwned + Clone + Debug,
    K::Status: Serialize + PartialEq + Conditioned,
{
    let previous = owner.status();
    if previous == Some(status) {
        return Ok(false);
    }
    let stored = apply_status(&ctx.client, owner, status).await?;
    if let (Some(uid), Some(rv), Ok(value)) =
        (owner.meta().uid.as_deref(), resource_version(&stored), serde_json::to_value(status))
    {
        ctx.written.remember(uid, rv, value);
    }
    let was_ready = previous.is_some_and(|p| ready(p.conditions()));
    let first_ready = !was_ready && ready(status.conditions()) && owner.meta().generation == Some(1);
    if let (true, Some(created)) = (first_ready, &owner.meta().creation_timestamp) {
        let seconds = ctx.now().duration_since(created.0).as_secs_f64();
        ctx.metrics.became_ready(controller, seconds.max(0.0));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use bosun_api::voteconfig::{VoteConfig, VoteConfigStatus};

    use std::sync::Arc;

    use super::*;

    fn vote(rv: &str, last_updated: Option<&str>) -> Arc<VoteConfig> {
        let mut v: VoteConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "voting.schoolofdevops.com/v1", "kind": "VoteConfig",
            "metadata": {"name": "v", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
            "spec": {"options": [{"id": "a", "label": "A"}]}
        }))
        .unwrap();
        v.status = last_updated.map(|t| VoteConfigStatus {
            last_updated: Some(serde_json::from_value(serde_json::json!(t)).unwrap()),
            ..Default::default()
        });
        Arc::new(v)
    }

    fn last_updated(v: &VoteConfig) -> Option<String> {
        v.status.as_ref().and_then(|s| s.last_updated.as_ref()).map(|t| t.0.to_string())
    }

    #[test]
    fn a_reconcile_starts_from_bosuns_own_write_until_the_cache_has_it() {
        let written = Written::default();
        let newer = VoteConfigStatus {
            last_updated: Some(serde_json::from_value(serde_json::json!("2026-01-02T00:00:00Z")).unwrap()),
            ..Default::default()
        };
        written.remember("u1", 120, serde_json::to_value(&newer).unwrap());
        // The cache is behind the write (rv 100 < 120): the written status is used.
        let lagging = vote("100", Some("2026-01-01T00:00:00Z"));
        assert_eq!(last_updated(&written.latest(lagging.clone())), Some("2026-01-02T00:00:00Z".into()));
        // A watch event older than the write keeps it; one at or after it forgets it.
        written.seen(&lagging.metadata, false);
        assert_eq!(written.pending(), 1);
        let caught_up = vote("120", Some("2026-01-02T00:00:00Z"));
        written.seen(&caught_up.metadata, false);
        assert_eq!(written.pending(), 0);
        // Once forgotten, the cached status is the truth again (someone else may write it).
        let later = vote("130", Some("2026-01-03T00:00:00Z"));
        assert_eq!(last_updated(&written.latest(later)), Some("2026-01-03T00:00:00Z".into()));
    }

    #[test]
    fn a_deleted_object_is_forgotten() {
        let written = Written::default();
        written.remember("u1", 120, serde_json::json!({}));
        written.seen(&vote("100", None).metadata, true);
        assert_eq!(written.pending(), 0);
    }
}
