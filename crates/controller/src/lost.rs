//! The PostgreSQL controller's stage for instances whose data lives only on a lost
//! node ([`build::lost`]): found among the instances that are not Ready or do not
//! answer, reported in `status.instances[].dataOnLostNode` (with a Warning when first
//! seen), and replaced when the annotation [`REPLACE_ANNOTATION`] asks.
//!
//! Finding costs a read of the volume (and of its node when the volume is pinned to
//! one) per instance that is not Ready or silent; a database whose instances all
//! answer costs nothing. A read that fails (a cluster that does not let bosun read
//! volumes or nodes) is no finding, never a failed reconcile.

use std::sync::Arc;
use std::time::Duration;

use bosun_api::postgresql::{InstanceStatus, PostgreSQL};
use bosun_resources::postgresql as build;
use bosun_resources::postgresql::lost::{self, LostInstance, REPLACE_ANNOTATION, Replace};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use crate::apply::{delete_at_once, delete_exactly, merge_into, merge_into_cluster};
use crate::context::Context;
use crate::error::Error;

/// How soon a replacement that waits (for the node controller's verdict, for a
/// ready primary) is looked at again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(10);

/// The annotation bosun puts on a volume it kept for a replaced instance: which one.
pub const KEPT_FOR: &str = "database.example.com/kept-for-instance";

/// The instances of `instances` (the database's pods) whose data is only on a lost
/// node; `unanswered` says whether one has left bosun's heartbeat unanswered.
pub async fn find(
    ctx: &Context,
    claims: &[&PersistentVolumeClaim],
    instances: &[Arc<Pod>],
    unanswered: impl Fn(&Pod) -> bool,
) -> Vec<LostInstance> {
    let mut found = Vec::new();
    for pod in instances {
        let silent = unanswered(pod);
        if bosun_resources::failover::pod_ready(pod) && !silent {
            continue;
        }
        let name = pod.name_any();
        let claim = build::claim_of_pod(&name);
        let Some(volume) =
            claims.iter().find(|c| c.name_any() == claim).and_then(|c| c.spec.as_ref()?.volume_name.clone())
        else {
            continue;
        };
        match pinned(ctx, &volume).await {
            Ok(Some((node, node_not_ready, volume_uid))) if node_not_ready || silent => {
                found.push(LostInstance { name, node, node_not_ready, volume, volume_uid });
            }
            Ok(_) => {}
            Err(e) => debug!(instance = %name, volume, error = %e, "could not tell where the instance's data is"),
        }
    }
    found
}

/// The node `volume` is pinned to, if any, whether Kubernetes holds it lost, and the
/// volume's uid.
async fn pinned(ctx: &Context, volume: &str) -> Result<Option<(String, bool, String)>, kube::Error> {
    let Some(pv) = Api::<PersistentVolume>::all(ctx.client.clone()).get_opt(volume).await? else { return Ok(None) };
    let Some(node) = lost::pinned_node(&pv) else { return Ok(None) };
    let seen = Api::<Node>::all(ctx.client.clone()).get_opt(&node).await?;
    Ok(Some((node, lost::node_lost(seen.as_ref()), pv.metadata.uid.unwrap_or_default())))
}

/// `status.instances` with the node of each lost instance's data; a Warning for each
/// newly lost one (not already in the status `db` has).
pub fn report(db: &PostgreSQL, ctx: &Context, instances: &mut [InstanceStatus], lost: &[LostInstance]) {
    let before = db.status.as_ref().map(|s| s.instances.as_slice()).unwrap_or_default();
    for l in lost {
        let Some(instance) = instances.iter_mut().find(|i| i.name == l.name) else { continue };
        instance.data_on_lost_node = Some(l.node.clone());
        let known = before.iter().any(|i| i.name == l.name && i.data_on_lost_node.as_ref() == Some(&l.node));
        if !known {
            let note = format!(
                "instance {}'s only copy of its data is on node {}, which is lost (volume {}): it comes back with the \
                 node, or annotate {REPLACE_ANNOTATION}={} to replace it with a fresh copy of the primary (the volume \
                 is kept)",
                l.name, l.node, l.volume, l.name
            );
            ctx.events.instance_warning(&db.object_ref(&()), instance_ref(db, &l.name), "DataOnLostNode", note);
        }
    }
}

/// The replacement the annotation asks for, if any: done, refused (the annotation
/// goes either way) or waiting. Returns when to look again while it waits.
pub async fn replace(
    db: &PostgreSQL,
    ctx: &Context,
    (instances, claims): (&[Arc<Pod>], &[&PersistentVolumeClaim]),
    lost: &[LostInstance],
    primary: Option<&str>,
) -> Result<Option<Duration>, Error> {
    let Some(target) = db.annotations().get(REPLACE_ANNOTATION).map(|s| s.trim()).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let names: Vec<String> = instances.iter().map(|p| p.name_any()).collect();
    let primary =
        primary.map(|p| (p, instances.iter().any(|i| i.name_any() == p && bosun_resources::failover::pod_ready(i))));
    let owner = db.object_ref(&());
    match lost::decide(target, &names, lost, primary) {
        Replace::Wait(why) => {
            info!(db = %db.name_any(), why, "a replacement of an instance waits");
            Ok(Some(WAIT_RECHECK))
        }
        Replace::Refuse(why) => {
            ctx.events.instance_warning(&owner, instance_ref(db, target), "ReplaceRefused", why);
            forget(db, ctx).await.map(|()| None)
        }
        Replace::Go(instance) => {
            // The volume first: once the claim goes, a volume left at Delete would go too.
            let keep = json!({
                "metadata": {"annotations": {KEPT_FOR: format!("{}/{target}", db.namespace().unwrap_or_default())}},
                "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            });
            let volume = (instance.volume.as_str(), instance.volume_uid.as_str());
            merge_into_cluster::<PostgreSQL, PersistentVolume>(ctx, volume, keep).await?;
            // The claim stays, deleted, until no pod uses it; meanwhile the StatefulSet
            // makes no pod for it, so the pod's deletion ends the claim, and only then
            // do a new claim and pod come.
            let claim = build::claim_of_pod(target);
            if let Some(claim) = claims.iter().find(|c| c.name_any() == claim) {
                delete_exactly(ctx, *claim).await?;
            }
            if let Some(pod) = instances.iter().find(|p| p.name_any() == target) {
                delete_at_once(ctx, pod.as_ref()).await?;
            }
            let note = format!(
                "instance {target} replaced: its data was only on node {}, which is lost; volume {} is kept (Retain, \
                 annotated {KEPT_FOR}), its claim and pod are deleted, and a new instance clones the primary",
                instance.node, instance.volume
            );
            ctx.events.instance_replaced(&owner, instance_ref(db, target), note);
            forget(db, ctx).await.map(|()| None)
        }
    }
}

/// The replacement asked for is done (or refused): its annotation goes.
async fn forget(db: &PostgreSQL, ctx: &Context) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {REPLACE_ANNOTATION: null}}});
    merge_into::<PostgreSQL, _>(ctx, db, patch).await.map(drop)
}

/// The pod of `db`'s instance `name`, as an event's related object.
fn instance_ref(db: &PostgreSQL, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    ObjectRef::<Pod>::new(name).within(&db.namespace().unwrap_or_default()).into()
}
