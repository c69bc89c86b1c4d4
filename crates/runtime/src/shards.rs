//! `--shards N`: bosun's replicas divide the objects among themselves (issue 48).
//!
//! ```text
//!  every replica ──holds──▶ Lease <base>-member-<N>-<identity>   (it is alive, and counts N shards)
//!  every retry period: list the Leases ─▶ live members ─▶ rendezvous: who should hold each shard
//!     a shard that is mine and free    ─▶ take <base>-shard-<i>-of-<N> ─▶ its controllers start,
//!                                          watching `bosun.dev/bucket in (its buckets)`
//!     a shard held here, now another's ─▶ its controllers stop, in-flight reconciles finish ─▶ release
//!     replicas of another count are the incumbents (they hold the oldest shard Lease, or, none
//!     held, the oldest member Lease) ─▶ take nothing, give up what is held, say why: a rollout of
//!     a new count waits for the old replicas to go, and the old divide their shards meanwhile
//!  a shard Lease lost or not renewable ─▶ exit 1 at once (never reconcile a shard unheld)
//!  the holder of shard 0 ─▶ labels the objects without a bucket; leads the webhooks' CA bundle
//! ```
//!
//! The plan — buckets, shards, selectors, lease names, owners — is
//! [`bosun_resources::shard`]'s, pure and unit-tested; this module only runs it.
//! A shard's Lease is held from before its first reconcile until after its last, so
//! two replicas never reconcile one object at once: a shard moves only through its
//! Lease being released or expiring.

use std::collections::BTreeMap;
use std::sync::Arc;

use bosun_controller::Context;
use bosun_controller::checkpoint;
use bosun_resources::shard::{self, BUCKET_LABEL, Shards};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::args::RunArgs;
use crate::leader::{self, LeaseConfig, LeaseError};

/// What the shards of this replica report: `bosun_shards` (the count),
/// `bosun_shards_held` and `bosun_shards_refused` (1 while it takes no lease because
/// replicas disagree on the count), and to /readyz each held shard's caches.
#[derive(Default)]
pub struct ShardStatus {
    count: Gauge,
    held: Gauge,
    refused: Gauge,
    contexts: std::sync::Mutex<BTreeMap<u16, Arc<Context>>>,
}

impl std::fmt::Debug for ShardStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardStatus").field("held", &self.held.get()).finish_non_exhaustive()
    }
}

impl ShardStatus {
    fn contexts(&self) -> std::sync::MutexGuard<'_, BTreeMap<u16, Arc<Context>>> {
        self.contexts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn took(&self, shard: u16, ctx: Arc<Context>) {
        let mut contexts = self.contexts();
        contexts.insert(shard, ctx);
        self.held.set(contexts.len() as i64);
    }

    fn gave_up(&self, shard: u16) {
        let mut contexts = self.contexts();
        contexts.remove(&shard);
        self.held.set(contexts.len() as i64);
    }

    /// /readyz of the shards: every held shard's caches synced and its watches
    /// flowing. A replica that holds none (its count waits for the incumbents to go,
    /// or there are more replicas than shards) is ready: a rollout goes on through it.
    pub fn ready(&self) -> Result<(), String> {
        for (shard, ctx) in self.contexts().iter() {
            crate::http::caches_ready(ctx, true).map_err(|why| format!("shard {shard}: {why}"))?;
        }
        Ok(())
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "bosun_shards",
            "The shards (--shards) this replica divides the objects in",
            self.count.clone(),
        );
        registry.register("bosun_shards_held", "Shards whose lease this replica holds", self.held.clone());
        registry.register(
            "bosun_shards_refused",
            "1 while this replica takes no shard lease because a replica runs with another --shards",
            self.refused.clone(),
        );
    }
}

/// The Lease that says a replica is alive: `<base>-member-<count>-<identity>`.
pub fn member_lease(base: &str, shards: Shards, identity: &str) -> String {
    format!("{base}-member-{}-{identity}", shards.count())
}

/// A member Lease's shard count and identity.
fn parse_member(base: &str, name: &str) -> Option<(u16, String)> {
    let rest = name.strip_prefix(base)?.strip_prefix("-member-")?;
    let (count, identity) = rest.split_once('-')?;
    Some((count.parse().ok()?, identity.to_owned()))
}

/// Whether `lease` is held and has not expired at `now`.
fn live(lease: &Lease, now: jiff::Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else { return false };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return false;
    }
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    renewed.is_some_and(|r| r + jiff::SignedDuration::from_secs(duration) > now)
}

/// When `lease` last showed its replica alive: renewed, acquired, or created. A Lease
/// kube-lease-manager has just created, or one released, has no holder and no times,
/// so its creation is what dates it (without it, a replica's member Lease in the
/// instant between its creation and its first lock looked long gone to the others).
fn last_sign_of_life(lease: &Lease) -> Option<jiff::Timestamp> {
    let spec = lease.spec.as_ref();
    let renewed = spec.and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref())).map(|t| t.0);
    let created = lease.metadata.creation_timestamp.as_ref().map(|t| t.0);
    renewed.max(created)
}

/// What the Leases say, for one replica: the live members of its count, and why it
/// must take nothing (another count is the incumbent).
#[derive(Debug, PartialEq)]
struct View {
    members: Vec<String>,
    /// Why this replica takes no shard and gives up those it holds: replicas of
    /// another count are the incumbents.
    refusal: Option<String>,
    /// Member Leases with no sign of life for ten minutes (replicas gone): removed, so
    /// they do not pile up; each with the resourceVersion it was judged by.
    stale: Vec<(String, Option<String>)>,
}

/// A live Lease that speaks for a shard count: (since when, its name, its holder, the count).
type Claim = (jiff::Timestamp, String, String, u16);

/// Which count's replicas divide the shards while replicas of two counts run (a
/// rollout of a new `--shards`): the count of the longest-held live shard Lease, or,
/// when no shard is held at all, of the longest-lived member. The others take nothing
/// until the incumbents are gone, and one bucket is never in shards of two counts at
/// once. The incumbents go on dividing their shards among themselves, so the shards
/// of a replica that leaves are taken over by one of its count (none left unowned).
fn incumbent(shards: &[Claim], members: &[Claim]) -> Option<Claim> {
    let first = |claims: &[Claim]| claims.iter().min().cloned();
    first(shards).or_else(|| first(members))
}

fn view(base: &str, shards: Shards, leases: &[Lease], now: jiff::Timestamp) -> View {
    let mut members = Vec::new();
    let mut stale = Vec::new();
    let (mut held_claims, mut member_claims) = (Vec::new(), Vec::new());
    let long_ago = now - jiff::SignedDuration::from_mins(10);
    for lease in leases {
        let name = lease.name_any();
        let claim = |count: u16| -> Claim {
            let spec = lease.spec.as_ref();
            let since = spec.and_then(|s| s.acquire_time.as_ref().or(s.renew_time.as_ref())).map(|t| t.0);
            let holder = spec.and_then(|s| s.holder_identity.clone()).unwrap_or_default();
            (since.unwrap_or(now), name.clone(), holder, count)
        };
        if let Some((count, identity)) = parse_member(base, &name) {
            if live(lease, now) {
                member_claims.push(claim(count));
                if count == shards.count() {
                    members.push(identity);
                }
            } else if last_sign_of_life(lease).is_none_or(|t| t < long_ago) {
                stale.push((name, lease.metadata.resource_version.clone()));
            }
        } else if let Some((_, count)) = shard::parse_lease(base, &name)
            && live(lease, now)
        {
            held_claims.push(claim(count));
        }
    }
    let refusal =
        incumbent(&held_claims, &member_claims).filter(|c| c.3 != shards.count()).map(|(_, name, holder, count)| {
            let mine = shards.count();
            if parse_member(base, &name).is_some() {
                format!(
                    "replica {holder} runs with --shards {count} and came first; this replica runs with --shards {mine}"
                )
            } else {
                format!("{holder} holds {name} of --shards {count}; this replica runs with --shards {mine}")
            }
        });
    members.sort();
    View { members, refusal, stale }
}

/// A shard this replica holds: its controllers, and how to stop them.
struct Held {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Run the controllers of the shards this replica should hold, until `shutdown`
/// (every shard finishes and releases its Lease) or a Lease is lost (an error: the
/// process exits at once).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    base: Arc<Context>,
    make_ctx: impl Fn(String) -> Context,
    args: &RunArgs,
    client: &Client,
    lease: LeaseConfig,
    shards: Shards,
    status: Arc<ShardStatus>,
    shutdown: CancellationToken,
) -> Result<(), LeaseError> {
    let member_cfg = LeaseConfig { name: member_lease(&lease.name, shards, &lease.identity), ..lease.clone() };
    let member = leader::acquire(client, &member_cfg).await;
    info!(shards = shards.count(), member = %member_cfg.name, "sharded: dividing the objects among the replicas");
    status.count.set(i64::from(shards.count()));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::unbounded_channel::<LeaseError>();
    let mut held: BTreeMap<u16, Held> = BTreeMap::new();
    let mut said: Option<String> = None;
    // Renewed on its own task: the loop below may wait a while (a shard handed over
    // finishes its reconciles first), and a member Lease let lapse would look like a
    // replica gone, moving its shards for nothing.
    let member = Arc::new(member);
    let renewing = {
        let (member, cfg, lost) = (member.clone(), member_cfg.clone(), lost_tx.clone());
        tokio::spawn(async move {
            let _ = lost.send(leader::hold(&member, &cfg).await);
        })
    };
    let result = loop {
        let listed = leases.list(&ListParams::default()).await;
        match listed {
            Err(err) => warn!(%err, "listing the Leases of the shards"),
            Ok(list) => {
                let view = view(&lease.name, shards, &list.items, jiff::Timestamp::now());
                for (name, version) in &view.stale {
                    // Only the Lease as it was judged: one renewed or re-taken since stays.
                    let unchanged = Preconditions { resource_version: version.clone(), uid: None };
                    let _ = leases
                        .delete(name, &DeleteParams { preconditions: Some(unchanged), ..Default::default() })
                        .await;
                }
                if view.refusal != said {
                    match &view.refusal {
                        Some(why) => warn!(%why, "taking no shard lease until every replica runs with one count"),
                        None => info!("every replica runs with --shards {}", shards.count()),
                    }
                    said.clone_from(&view.refusal);
                }
                status.refused.set(i64::from(view.refusal.is_some()));
                let members: Vec<&str> = view.members.iter().map(String::as_str).collect();
                let owners = shards.owners(&members);
                // Give up first what another replica should hold, so it can take it; all
                // of it when replicas of another count are the incumbents (two counts
                // taking shards at once, a race only at a start).
                let refused = view.refusal.is_some();
                let leaving: Vec<u16> = held
                    .keys()
                    .copied()
                    .filter(|i| refused || owners[usize::from(*i)] != Some(&lease.identity))
                    .collect();
                for i in leaving {
                    if let Some(h) = held.remove(&i) {
                        status.gave_up(i);
                        info!(shard = i, refused, "handing the shard over");
                        h.stop.cancel();
                        let _ = h.task.await;
                    }
                }
                if view.refusal.is_none() {
                    for (i, owner) in (0..shards.count()).zip(owners.iter()) {
                        if *owner != Some(lease.identity.as_str()) || held.contains_key(&i) {
                            continue;
                        }
                        let cfg = LeaseConfig { name: shards.lease(&lease.name, i), ..lease.clone() };
                        match leader::try_acquire(client, &cfg).await {
                            Ok(Some(mgr)) => {
                                info!(shard = i, lease = %cfg.name, "took the shard");
                                let ctx = Arc::new(make_ctx(shards.selector(i)));
                                status.took(i, ctx.clone());
                                let stop = CancellationToken::new();
                                let task = tokio::spawn(serve_shard(ShardRun {
                                    shard: i,
                                    ctx,
                                    base: base.clone(),
                                    args: args.clone(),
                                    client: client.clone(),
                                    mgr,
                                    cfg,
                                    stop: stop.clone(),
                                    lost: lost_tx.clone(),
                                }));
                                held.insert(i, Held { stop, task });
                            }
                            Ok(None) => {}
                            Err(err) => warn!(%err, shard = i, "trying to take the shard's lease"),
                        }
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(lease.retry) => {}
            () = shutdown.cancelled() => break Ok(()),
            Some(lost) = lost_rx.recv() => break Err(lost),
        }
    };
    if let Err(lost) = &result {
        // Stop writing at once: returning ends the process and every in-flight reconcile.
        for h in held.values() {
            h.stop.cancel();
        }
        base.leader.shut();
        error!(error = %lost, "a lease was lost; exiting");
        return result;
    }
    for h in held.values() {
        h.stop.cancel();
    }
    for (_, h) in held {
        let _ = h.task.await;
    }
    renewing.abort();
    let _ = renewing.await;
    if let Err(err) = member.release().await {
        warn!(%err, "could not release the member lease; it expires");
    }
    result
}

struct ShardRun {
    shard: u16,
    ctx: Arc<Context>,
    base: Arc<Context>,
    args: RunArgs,
    client: Client,
    mgr: kube_lease_manager::LeaseManager,
    cfg: LeaseConfig,
    stop: CancellationToken,
    lost: tokio::sync::mpsc::UnboundedSender<LeaseError>,
}

/// One shard: its controllers (and, for shard 0, the labeller and the webhooks' lead)
/// from its Lease's taking to its release.
async fn serve_shard(run: ShardRun) {
    let ShardRun { shard, ctx, base, args, client, mgr, cfg, stop, lost } = run;
    let place = checkpoint::Place { namespace: cfg.namespace.clone(), lease: cfg.name.clone() };
    ctx.checkpoints.load_bounded(&client, &place).await;
    ctx.leader.open();
    let labeller = (shard == 0).then(|| {
        base.leader.open();
        tokio::spawn(label_unbucketed(client.clone(), args.clone(), stop.clone()))
    });
    let controllers = crate::manager::run_controllers(ctx.clone(), &args, stop.clone());
    tokio::pin!(controllers);
    tokio::select! {
        () = ctx.checkpoints.keep(&client, &place, &mut controllers) => {
            ctx.checkpoints.flush(&client, &place).await;
            if shard == 0 {
                base.leader.shut();
            }
            if let Err(err) = mgr.release().await {
                warn!(%err, shard, "could not release the shard's lease; it expires");
            } else {
                info!(shard, lease = %cfg.name, "released the shard");
            }
        }
        err = leader::hold(&mgr, &cfg) => {
            ctx.leader.shut();
            let _ = lost.send(err);
        }
    }
    if let Some(labeller) = labeller {
        labeller.abort();
    }
}

/// Labels patched at once.
const LABELLING: usize = 16;

/// Every object of the served kinds without a bucket gets its own (`bosun.dev/bucket`,
/// see [`shard::bucket`]); its children then take it from it. Objects created by a
/// bosun owner already carry the owner's and are left as they are.
async fn label_unbucketed(client: Client, args: RunArgs, stop: CancellationToken) {
    let enabled = args.enabled_controllers();
    let mut kinds = Vec::new();
    for served in bosun_controller::kinds::ALL {
        if !served.controllers.iter().any(|c| enabled.contains(c)) {
            continue;
        }
        for t in served.types {
            kinds.extend(crate::webhook::conversion::storage_resource(&(t.crd)()));
        }
    }
    let namespaces: Vec<Option<String>> =
        if args.namespaces.is_empty() { vec![None] } else { args.namespaces.iter().cloned().map(Some).collect() };
    let mut watches = Vec::new();
    for kind in &kinds {
        for ns in &namespaces {
            let api: Api<PartialObjectMeta<DynamicObject>> = match ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, kind),
                None => Api::all_with(client.clone(), kind),
            };
            let config = watcher::Config::default().labels(&format!("!{BUCKET_LABEL}"));
            let client = client.clone();
            let kind = kind.clone();
            watches.push(
                watcher(api, config)
                    .default_backoff()
                    .applied_objects()
                    // Many at once: at a first start over existing objects, this is
                    // one patch each, and a shard reconciles its objects only once
                    // they carry their bucket.
                    .for_each_concurrent(LABELLING, move |object| {
                        let (client, kind) = (client.clone(), kind.clone());
                        async move {
                            let Ok(object) = object else { return };
                            let (ns, name) = (object.namespace(), object.name_any());
                            let bucket = shard::bucket(ns.as_deref(), &name).to_string();
                            let api: Api<DynamicObject> = match ns.as_deref() {
                                Some(ns) => Api::namespaced_with(client, ns, &kind),
                                None => Api::all_with(client, &kind),
                            };
                            let patch = serde_json::json!({"metadata": {"labels": {BUCKET_LABEL: bucket}}});
                            if let Err(err) = api.patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch)).await
                            {
                                warn!(%err, kind = %kind.kind, ?ns, %name, "could not label the object with its bucket");
                            }
                        }
                    })
                    .boxed(),
            );
        }
    }
    tokio::select! {
        _ = futures::future::join_all(watches) => {}
        () = stop.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

    use super::*;

    fn lease(name: &str, holder: &str, renewed_ago: i64) -> Lease {
        let now = jiff::Timestamp::from_second(10_000).unwrap();
        Lease {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(now - jiff::SignedDuration::from_secs(renewed_ago))),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn members_are_the_live_replicas_of_the_same_count() {
        let three = Shards::new(3).unwrap();
        let now = jiff::Timestamp::from_second(10_000).unwrap();
        let leases = [
            lease(&member_lease("bosun", three, "pod-b"), "pod-b", 1),
            lease(&member_lease("bosun", three, "pod-a"), "pod-a", 14),
            lease(&member_lease("bosun", three, "pod-gone"), "pod-gone", 16),
            lease(&member_lease("bosun", three, "pod-long-gone"), "pod-long-gone", 3600),
            lease("bosun-leader", "pod-x", 1),
            lease("other-member-3-pod-c", "pod-c", 1),
        ];
        let v = view("bosun", three, &leases, now);
        assert_eq!(v.members, ["pod-a", "pod-b"]);
        assert_eq!(v.refusal, None);
        assert_eq!(v.stale, [("bosun-member-3-pod-long-gone".to_owned(), None)]);

        // As kube-lease-manager creates a Lease (before its first lock) or leaves it
        // released: no holder, no times. Dated by its creation, kept while young.
        let bare = |name: &str, created_ago: i64| Lease {
            metadata: ObjectMeta {
                name: Some(member_lease("bosun", three, name)),
                creation_timestamp: Some(Time(now - jiff::SignedDuration::from_secs(created_ago))),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        };
        let v = view("bosun", three, &[bare("pod-new", 0), bare("pod-released-long-ago", 3600)], now);
        assert!(v.members.is_empty());
        assert_eq!(v.stale, [("bosun-member-3-pod-released-long-ago".to_owned(), Some("42".to_owned()))]);
        assert_eq!(parse_member("bosun", "bosun-member-3-pod-a-7f9"), Some((3, "pod-a-7f9".into())));
    }

    #[tokio::test]
    async fn a_replica_is_ready_over_the_shards_it_holds_once_their_caches_have_synced() {
        let unreachable = tower::service_fn(|_: axum::http::Request<kube::client::Body>| async {
            axum::http::Response::builder().status(503).body(kube::client::Body::empty())
        });
        let client = Client::new(unreachable, "default");
        let metrics = Arc::new(bosun_controller::metrics::Metrics::default());
        let status = ShardStatus::default();
        assert_eq!(status.ready(), Ok(()), "holding no shard (waiting its turn), a replica is ready");
        // A shard just taken: its controllers have not listed yet.
        status.took(1, Arc::new(Context::new(client, "test", metrics)));
        let why = status.ready().unwrap_err();
        assert!(why.starts_with("shard 1: caches have not synced yet"), "{why}");
        assert_eq!(status.held.get(), 1);
        status.gave_up(1);
        assert_eq!((status.ready(), status.held.get()), (Ok(()), 0));
    }

    /// A live Lease acquired `acquired_ago` seconds ago and renewed a second ago.
    fn held(name: &str, holder: &str, acquired_ago: i64) -> Lease {
        let mut l = lease(name, holder, 1);
        let now = jiff::Timestamp::from_second(10_000).unwrap();
        l.spec.as_mut().unwrap().acquire_time = Some(MicroTime(now - jiff::SignedDuration::from_secs(acquired_ago)));
        l
    }

    #[test]
    fn replicas_of_another_count_that_came_first_are_a_refusal_naming_both_counts() {
        let three = Shards::new(3).unwrap();
        let two = Shards::new(2).unwrap();
        let now = jiff::Timestamp::from_second(10_000).unwrap();
        let view3 = |leases: &[Lease]| view("bosun", three, leases, now).refusal;
        let view2 = |leases: &[Lease]| view("bosun", two, leases, now).refusal;

        // No shard held yet: the longest-running member's count goes first.
        let members = [
            held(&member_lease("bosun", two, "pod-old"), "pod-old", 60),
            held(&member_lease("bosun", three, "pod-new"), "pod-new", 5),
        ];
        let why = view3(&members).unwrap();
        assert!(why.contains("pod-old") && why.contains("--shards 2") && why.contains("--shards 3"), "{why}");
        assert_eq!(view2(&members), None);

        // A rollout from 2 to 3: the old count holds its shards and goes on dividing them
        // among its own (a member of the new count is no reason for it to stop); the new
        // count waits, even where its member is older than every shard Lease.
        let rollout = [
            held(&member_lease("bosun", three, "pod-new"), "pod-new", 600),
            held(&member_lease("bosun", two, "pod-old"), "pod-old", 60),
            held(&two.lease("bosun", 1), "pod-old", 30),
        ];
        let why = view3(&rollout).unwrap();
        assert!(why.contains("bosun-shard-1-of-2") && why.contains("--shards 3"), "{why}");
        assert_eq!(view2(&rollout), None);

        // Both counts took shards in the same instant (a race at a start): the later
        // gives up, and both sides agree which that is.
        let race = [held(&two.lease("bosun", 0), "pod-old", 3), held(&three.lease("bosun", 2), "pod-new", 2)];
        assert!(view3(&race).is_some());
        assert_eq!(view2(&race), None);

        // Expired, or released (no holder): no longer in the way.
        let expired = [lease(&two.lease("bosun", 1), "pod-old", 20), lease(&two.lease("bosun", 0), "", 1)];
        assert_eq!(view3(&expired), None);
    }
}
