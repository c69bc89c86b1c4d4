//! The PostgreSQL controller's pooler stage (`spec.pooler`): the pooler's Secret
//! (made once), its Deployments and Services applied, or removed when the spec no
//! longer asks for them; and what they report, for the status. And around each change
//! of primary ([`crate::failover`]): the pooler paused before, resumed after, so that
//! its clients wait instead of failing.

use bosun_resources::slim::{SlimDeployment, SlimService};
use std::collections::HashMap;
use std::time::Duration;

use bosun_api::postgresql::{PoolerStatus, PostgreSQL};
use bosun_resources::postgresql as build;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::apply::{apply_child, create_if_absent, delete_child};
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::instances::{Instances, Target};

/// The caches the stage reads.
#[derive(Clone, Copy, Debug)]
pub struct Caches<'a> {
    pub deployments: &'a Owned<SlimDeployment>,
    pub services: &'a Owned<SlimService>,
    pub secrets: &'a Owned<Secret>,
}

/// Bring the pooler to `db`'s spec; its status (`None` without `spec.pooler`).
pub async fn serve(db: &PostgreSQL, ctx: &Context, caches: Caches<'_>) -> Result<Option<PoolerStatus>, Error> {
    let ns = db.namespace().unwrap_or_default();
    let sides = build::pooler_sides(db);
    for read_only in [false, true].into_iter().filter(|ro| !sides.contains(ro)) {
        let name = build::pooler_name(db, read_only);
        delete_child(ctx, db, caches.deployments, &ns, &name).await?;
        delete_child(ctx, db, caches.services, &ns, &name).await?;
    }
    if sides.is_empty() {
        return Ok(None);
    }
    // The role's password: made when missing (the primary sets whatever it holds).
    let secret = build::pooler_secret_name(db);
    if crate::read::cached_or_get(&ctx.client, caches.secrets, &ns, &secret).await?.is_none() {
        create_if_absent(ctx, db, &build::desired_pooler_secret(db, &crate::postgresql::new_password())).await?;
    }
    let mut deployments = Vec::new();
    for read_only in sides {
        let Some(desired) = build::desired_pooler_deployment(db, &ctx.settings.postgres, read_only) else { continue };
        let applied = apply_child(ctx, db, caches.deployments, desired).await?;
        apply_child(ctx, db, caches.services, build::desired_pooler_service(db, read_only)).await?;
        // The applied object's status is the one it had: the cache's is as fresh.
        let seen = caches.deployments.get(&ns, &applied.name_any()).filter(|d| controlled_by(d.as_ref(), db));
        deployments.push(Some(seen.map(|d| (*d).clone()).unwrap_or(applied)));
    }
    let refs: Vec<Option<&SlimDeployment>> = deployments.iter().map(Option::as_ref).collect();
    Ok(build::pooler_status(db, &refs))
}

/// The pooler pods paused for a change of primary, to resume after it.
#[derive(Debug)]
pub struct Paused {
    reach: Instances,
    pods: Vec<String>,
    max: Duration,
}

/// Pause `db`'s read-write pooler (`spec.pooler`) before its primary changes: each
/// Ready pod, at once, for `spec.pooler.maxPause` at most (it resumes by itself after
/// that, whatever becomes of bosun). `drain` (a switchover): answered once the
/// transactions in flight ended, so that the old primary stops with none. `None`
/// without a pooler or with no pod to pause. A pod that does not pause is logged and
/// left: its clients see the change as without a pooler.
pub async fn pause(db: &PostgreSQL, ctx: &Context, reach: &Instances, drain: bool) -> Option<Paused> {
    let max = build::max_pause(db)?;
    // In session mode a client's session is tied to the old primary: a pause would
    // only make the switchover wait for sessions to end.
    if db.spec.pooler.as_ref().and_then(|p| p.mode) == Some(bosun_api::postgresql::PoolMode::Session) {
        return None;
    }
    let ns = db.namespace().unwrap_or_default();
    let selector = build::pooler_labels(db, false).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>();
    let params = ListParams::default().labels(&selector.join(","));
    let pods = match Api::<Pod>::namespaced(ctx.client.clone(), &ns).list(&params).await {
        Ok(list) => list.items,
        Err(e) => {
            warn!(db = %db.name_any(), "the pooler's pods could not be listed, it is not paused: {e}");
            return None;
        }
    };
    let server_name = build::pooler_server_name(db);
    let targets: HashMap<String, Target> = pods
        .iter()
        .filter(|p| bosun_resources::failover::pod_ready(p))
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            let port = bosun_instance::api::PORT;
            Some((p.name_any(), Target { ip, port, server_name: server_name.clone() }))
        })
        .collect();
    if targets.is_empty() {
        return None;
    }
    let reach = reach.retargeted(targets.clone());
    let asks = targets.keys().map(|pod| {
        let reach = &reach;
        async move { (pod.clone(), reach.pause_pooler(pod, max, drain, max + ASK_MARGIN).await) }
    });
    let mut paused = Vec::new();
    for (pod, answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(()) => paused.push(pod),
            Err(e) => warn!(db = %db.name_any(), pod, "the pooler did not pause: {e}"),
        }
    }
    info!(db = %db.name_any(), pods = ?paused, "the pooler paused: its clients' transactions wait for the new primary");
    (!paused.is_empty()).then_some(Paused { reach, pods: paused, max })
}

/// Beyond a pause's bound, how long bosun waits for a pooler's answer.
const ASK_MARGIN: Duration = Duration::from_secs(3);

/// Resume what [`pause`] paused, once the new primary serves (each pod waits until
/// the read-write Service reaches it). A pause that had outlived its bound is reported
/// with a Warning (the pooler had let its clients through on its own).
pub async fn resume(db: &PostgreSQL, ctx: &Context, paused: Paused) {
    let asks = paused.pods.iter().map(|pod| {
        let reach = &paused.reach;
        async move { (pod.clone(), reach.resume_pooler(pod, paused.max + ASK_MARGIN).await) }
    });
    let mut expired = Vec::new();
    for (pod, answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(answer) if answer.expired => expired.push(pod),
            Ok(_) => {}
            Err(e) => {
                warn!(db = %db.name_any(), pod, "the pooler did not answer the resume (it resumes by its bound): {e}")
            }
        }
    }
    if !expired.is_empty() {
        let note = format!(
            "the pooler's pause outlived spec.pooler.maxPause ({:.1}s) on {}: it let its clients through before the new \
             primary was confirmed, and they may have seen errors",
            paused.max.as_secs_f64(),
            expired.join(", ")
        );
        warn!(db = %db.name_any(), "{note}");
        ctx.events.warning(&db.object_ref(&()), "PoolerPauseExpired", note);
    } else {
        info!(db = %db.name_any(), "the pooler resumed");
    }
}
