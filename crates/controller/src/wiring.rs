//! Wiring a reconcile pipeline — watches, caches, a work queue, workers — the same
//! way for every kind.
//!
//! ```text
//!   watch(K, each object guarded) ─reflect─▶ store ─generation (or request) predicate┐
//!   watch(C, managed-by=bosun) ─slim─reflect─▶ Owned<C> ─relevant changes─▶ owner ┴─▶ Triggered
//!     ─▶ work queue (FIFO, each object once) ─ leads? ─▶ `concurrency` workers
//!     ─▶ unreadable? report · being deleted? leave
//!     ─▶ the object as cached now, with bosun's last status ─▶ instrumented(reconcile)
//! ```
//!
//! * The parent's watch is filtered on `metadata.generation` (and the few annotations
//!   that ask for something once, [`REQUEST_ANNOTATIONS`]), so bosun's own status
//!   writes (which do not bump the generation) never trigger another reconcile.
//! * Every object is decoded on its own ([`Guarded`]): one the types cannot read is
//!   reported on itself and counted, and the watch goes on for all others.
//! * A parent with a `deletionTimestamp` is never reconciled into its children: it is
//!   going away, and its children go with it or — `--cascade=orphan` — stay as they are.
//!   Only a controller's own finalizer brings it to a reconcile, for that finalizer's
//!   cleanup ([`drive_finalized`], [`crate::finalizers`]).
//! * Children are watched only when labelled `app.kubernetes.io/managed-by=bosun`, once
//!   per kind however many parent kinds own it ([`watch_children`]), slimmed to what
//!   decisions read ([`Child::slim`]), into a cache ([`Owned`]) that answers who controls
//!   a name before bosun writes it ([`crate::children`]) and whether a child drifted
//!   ([`crate::changes`]). A child triggers its owner only when the slimmed object
//!   changed, or it was deleted.
//! * Every replica runs the watches and fills its queue; reconciles wait at
//!   [`crate::context::Gate`] until the replica leads, then run at most `concurrency`
//!   at a time in trigger order ([`drive_finalized`], [`WorkQueue`]).
//! * Each watch retries on its own short backoff (¼ s doubling to 2 s) and nothing
//!   adds any on top, so reconciling resumes within seconds of an apiserver's return;
//!   a watch that is failing makes `/readyz` say so.
//! * A failed reconcile is looked at again after a per-object exponential backoff
//!   with jitter ([`crate::backoff`]).

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::core::object::HasStatus;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{Instrument, debug, info, info_span, warn};

use bosun_resources::meta::MANAGED_BY;

use crate::changes::{self, Version};
use crate::children::{self, Child, Owned};
use crate::context::{Context, api};
use crate::error::Error;
pub use crate::guard::Reconciled;
use crate::guard::{Guarded, UNREADABLE, Unreadable};
use crate::queue::WorkQueue;

/// The backoff of one watch: ¼ s doubling to 2 s, plus up to as much again of jitter,
/// reset after 30 s without errors. Short on purpose: a restarted apiserver refuses
/// (403) for a moment while its authorizer warms up, and a watch must not sit out
/// the seconds after that in a long backoff. Ten watches retrying every 2–4 s are
/// little load on an apiserver that is coming back.
fn watch_backoff() -> impl Backoff {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(exponential), Duration::from_secs(30))
}

/// Objects per page of a watch's (re)list. A page is decoded whole — managed fields,
/// specs, kubectl's annotation — before each object is slimmed for its cache, so a
/// page is what a start (or a relist of every watch at once) holds on top of the
/// caches: at kube's default of 500 that was 15 MiB more at a restart over 1,000
/// WebApps than at their convergence. 10,000 objects cost 100 list requests a watch.
const LIST_PAGE: u32 = 100;

/// The watcher settings of bosun's caches.
pub(crate) fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// The watcher settings of a cache of parents, or of children that carry their
/// owner's bucket: with `--shards`, only the objects of this shard.
fn shard_config(ctx: &Context, also: Option<&str>) -> watcher::Config {
    let selector = [also, ctx.shard.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(",");
    if selector.is_empty() { list_config() } else { list_config().labels(&selector) }
}

/// `watch` with its health counted towards `/readyz` and its own short backoff.
pub(crate) fn watched<S, T>(
    ctx: &Context,
    watch: S,
) -> impl futures::Stream<Item = Result<T, watcher::Error>> + Send + use<S, T>
where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send,
{
    let flow = ctx.watches.register();
    watch
        .map(move |event| {
            flow.observe(event.is_ok());
            event
        })
        .backoff(watch_backoff())
}

/// What brings the objects of one controller to a reconcile: the cache of its
/// parents, and the streams that name which parent to reconcile — the parents' own
/// watch, and (added by [`owns`], [`triggered_by`] and the `reconcile_*` methods) the
/// changes of their children and of whatever else they read. [`drive`] runs it.
pub struct Triggered<K: Reconciled> {
    store: reflector::Store<Guarded<K>>,
    triggers: Vec<futures::stream::BoxStream<'static, ObjectRef<Guarded<K>>>>,
}

impl<K: Reconciled> Debug for Triggered<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Triggered").field("streams", &self.triggers.len()).finish_non_exhaustive()
    }
}

impl<K: Reconciled> Triggered<K> {
    /// The cache of the parents, as the watch keeps it.
    pub fn store(&self) -> reflector::Store<Guarded<K>> {
        self.store.clone()
    }

    /// Reconcile also each parent `refs` names.
    pub fn reconcile_on(mut self, refs: impl futures::Stream<Item = ObjectRef<Guarded<K>>> + Send + 'static) -> Self {
        self.triggers.push(refs.boxed());
        self
    }

    /// Reconcile every parent in the cache each time `signals` yields.
    pub fn reconcile_all_on(self, signals: impl futures::Stream<Item = ()> + Send + 'static) -> Self {
        let store = self.store();
        let all = signals.flat_map(move |()| {
            futures::stream::iter(store.state().iter().map(|o| key(o.as_ref())).collect::<Vec<_>>())
        });
        self.reconcile_on(all)
    }
}

/// The queue's key of a parent: its namespace and name (no uid nor resourceVersion).
fn key<K: Reconciled>(obj: &Guarded<K>) -> ObjectRef<Guarded<K>> {
    let meta = obj.meta();
    ObjectRef::new(meta.name.as_deref().unwrap_or_default()).within(meta.namespace.as_deref().unwrap_or_default())
}

/// The triggers of `K` in `namespace` (or cluster-wide), starting with its own watch,
/// which ignores status-only changes. `controller` is its label in metrics.
pub fn controller_for<K: Reconciled>(
    controller: &'static str,
    ctx: &Arc<Context>,
    namespace: Option<&str>,
) -> Triggered<K> {
    let (reader, writer) = reflector::store();
    track_cache(ctx, reader.clone(), controller);
    let written = ctx.clone();
    let trigger = watched(ctx, watcher(api::<Guarded<K>>(&ctx.client, namespace), shard_config(ctx, None)))
        .modify(|obj| children::slim_parent_meta(obj.meta_mut()))
        .reflect(writer)
        .inspect_ok(move |event| match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => written.written.seen(obj.meta(), false),
            watcher::Event::Delete(obj) => written.written.seen(obj.meta(), true),
            watcher::Event::Init | watcher::Event::InitDone => {}
        })
        .filter_map({
            // Watch errors are retried by `watched` and reported by /readyz.
            let mut triggers = Triggers::default();
            move |event| futures::future::ready(event.ok().and_then(|e| triggers.filter(e)).map(|o| key(&o)))
        });
    Triggered { store: reader, triggers: vec![trigger.boxed()] }
}

/// Annotations by which a user asks for something once (not spec: no new
/// generation), so a change of one triggers a reconcile as a spec change does.
pub const REQUEST_ANNOTATIONS: &[&str] = &[bosun_api::postgresql::SWITCHOVER_ANNOTATION];

/// The parent's trigger: its generation, and its request annotations.
fn generation_or_request<K: Resource>(obj: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let generation = predicates::generation(obj)?;
    let annotations = obj.meta().annotations.as_ref();
    let requests: Vec<Option<&String>> =
        REQUEST_ANNOTATIONS.iter().map(|a| annotations.and_then(|m| m.get(*a))).collect();
    if requests.iter().all(Option::is_none) {
        return Some(generation);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (generation, requests).hash(&mut hasher);
    Some(hasher.finish())
}

/// A compact key of an object: its namespace and name, hashed.
fn key_of(meta: &kube::api::ObjectMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (meta.namespace.as_deref(), meta.name.as_deref()).hash(&mut hasher);
    hasher.finish()
}

/// The parents' trigger filter: an object passes when it is new (another uid) or its
/// [`generation_or_request`] moved; what was seen of each is 16 bytes, forgotten when
/// the object is deleted (kube's `predicate_filter` keeps a key of three strings per
/// object for an hour).
#[derive(Default)]
struct Triggers {
    seen: std::collections::HashMap<u64, u64>,
}

impl Triggers {
    fn filter<K: Resource>(&mut self, event: watcher::Event<K>) -> Option<K> {
        use std::hash::{Hash, Hasher};
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let Some(trigger) = generation_or_request(&obj) else { return Some(obj) };
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                (obj.meta().uid.as_deref(), trigger).hash(&mut hasher);
                let print = hasher.finish();
                (self.seen.insert(key_of(obj.meta()), print) != Some(print)).then_some(obj)
            }
            watcher::Event::Delete(obj) => {
                self.seen.remove(&key_of(obj.meta()));
                None
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }
}

/// Count the cache towards readiness, and keep the managed-resources gauge at its size.
fn track_cache<K: Reconciled>(ctx: &Arc<Context>, reader: reflector::Store<K>, controller: &'static str) {
    ctx.caches.expect_one();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        if !listed(&reader).await {
            tracing::error!(controller, "cache writer dropped before the initial list completed");
            return;
        }
        tracing::debug!(controller, "cache synced");
        ctx.caches.one_synced();
        let gauge = ctx.metrics.managed.get_or_create(&crate::metrics::ControllerLabels { controller }).clone();
        let mut counted = 0i64;
        loop {
            let now = reader.state().len() as i64;
            gauge.inc_by(now - counted);
            counted = now;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}

/// Wait until `reader`'s first list is in: `false` if its writer went away first.
///
/// Store readiness sits on one oneshot receiver, which wakes only its latest poller,
/// and both the driver and [`track_cache`] wait on the same store; so look again
/// every 200 ms instead of waiting once (the value is memoized once set).
async fn listed<K: Reconciled>(reader: &reflector::Store<K>) -> bool {
    loop {
        match tokio::time::timeout(Duration::from_millis(200), reader.wait_until_ready()).await {
            Ok(result) => return result.is_ok(),
            Err(_) => continue,
        }
    }
}

/// One watch of the bosun-managed `C` in `namespace` (or cluster-wide), shared by
/// the controllers of the parent kinds in `owners` (`(kind, apiVersion)`; both WebApp
/// groups watch the same Deployments): one decode and one cache ([`Owned`], slimmed by
/// [`Child::slim`]) however many parent kinds own `C`. Returns the cache and, per
/// owner kind, the relevant changes of the children it controls.
pub fn watch_children<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    owners: &[(&str, &str)],
) -> (Owned<C>, Vec<mpsc::UnboundedReceiver<C>>) {
    let kinds: Vec<(String, String)> = owners.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let (senders, receivers): (Vec<_>, Vec<_>) = owners.iter().map(|_| mpsc::unbounded()).unzip();
    let pick = move |child: &C| {
        let owner = child.owner_references().iter().find(|r| r.controller == Some(true))?;
        kinds.iter().position(|(kind, api_version)| *kind == owner.kind && *api_version == owner.api_version)
    };
    (watch_routed(ctx, namespace, None, senders, pick, None), receivers)
}

/// One watch of the bosun-managed `C` that also carry the label `app_name` as
/// `app.kubernetes.io/name`, for one controller: the cache and every relevant change,
/// whoever controls the object. For children that outlive their parent and have no
/// controller (a PostgreSQL's credentials and claims): [`triggered_by`] maps them back,
/// by their labels.
pub fn watch_app<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    app_name: &str,
) -> (Owned<C>, mpsc::UnboundedReceiver<C>) {
    let (tx, rx) = mpsc::unbounded();
    let selector = format!("app.kubernetes.io/name={app_name}");
    (watch_routed(ctx, namespace, Some(&selector), vec![tx], |_: &C| Some(0), None), rx)
}

/// One watch of the bosun-managed `C` labelled `app.kubernetes.io/name=app_name`,
/// shared by controllers that each mark their children with a label of their own
/// (`labels`, one per controller): the cache, and per label the changes of the
/// children that carry it — whoever controls them, for children without an owner.
pub fn watch_app_routed<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    app_name: &str,
    labels: &[&'static str],
) -> (Owned<C>, Vec<mpsc::UnboundedReceiver<C>>) {
    app_routed(ctx, namespace, app_name, labels, None)
}

/// [`watch_app_routed`] for a kind that is not Kubernetes' nor bosun's (the Prometheus
/// operator's ServiceMonitor): the watch starts once `installed` resolves (its CRD is
/// there) and does not count towards `/readyz`, as the CRD may be removed again.
pub fn watch_app_routed_when<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    app_name: &str,
    labels: &[&'static str],
    installed: futures::future::BoxFuture<'static, ()>,
) -> (Owned<C>, Vec<mpsc::UnboundedReceiver<C>>) {
    app_routed(ctx, namespace, app_name, labels, Some(installed))
}

fn app_routed<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    app_name: &str,
    labels: &[&'static str],
    installed: Option<futures::future::BoxFuture<'static, ()>>,
) -> (Owned<C>, Vec<mpsc::UnboundedReceiver<C>>) {
    let labels = labels.to_vec();
    let (senders, receivers): (Vec<_>, Vec<_>) = labels.iter().map(|_| mpsc::unbounded()).unzip();
    let selector = format!("app.kubernetes.io/name={app_name}");
    let pick = move |child: &C| labels.iter().position(|l| child.labels().contains_key(*l));
    (watch_routed(ctx, namespace, Some(&selector), senders, pick, installed), receivers)
}

/// The watch behind [`watch_children`], [`watch_app`] and [`watch_app_routed`]: bosun-managed `C` (and
/// `also` selected), slimmed into a cache; each relevant change goes to the sender
/// `pick` names, until every sender's controller stopped.
fn watch_routed<C: Child>(
    ctx: &Context,
    namespace: Option<&str>,
    also: Option<&str>,
    senders: Vec<mpsc::UnboundedSender<C>>,
    pick: impl Fn(&C) -> Option<usize> + Send + 'static,
    installed: Option<futures::future::BoxFuture<'static, ()>>,
) -> Owned<C> {
    let mut selector = format!("app.kubernetes.io/managed-by={MANAGED_BY}");
    if let Some(also) = also {
        selector = format!("{selector},{also}");
    }
    let (reader, writer) = reflector::store();
    let owned = Owned::new(reader);
    ctx.checkpoints.register(&checkpoint_key::<C>(namespace, also), Arc::new(owned.clone()));
    // Children that carry their owner's bucket are watched in its shard only; those
    // that do not (a CronJob's Jobs, the claims and pods of a StatefulSet's template, a
    // stack's members) are watched whole, and only this shard's owners are triggered.
    let config = if C::BUCKETED && also.is_none() {
        shard_config(ctx, Some(&selector))
    } else {
        list_config().labels(&selector)
    };
    let watch = watcher(api::<C>(&ctx.client, namespace), config);
    let mut relevant = Relevant::new(owned.clone());
    let watch = match installed {
        None => watched(ctx, watch).boxed(),
        Some(_) => watch.backoff(watch_backoff()).boxed(),
    };
    let changes =
        watch.modify(C::slim).reflect(writer).flat_map(move |event| futures::stream::iter(relevant.triggers(event)));
    tokio::spawn(async move {
        if let Some(installed) = installed {
            installed.await;
        }
        tokio::pin!(changes);
        // Watch errors are retried by `watched` and reported by /readyz; only objects go
        // on, each to the controller `pick` names.
        while let Some(change) = changes.next().await {
            let Ok(child) = change else { continue };
            if let Some(tx) = pick(&child).and_then(|i| senders.get(i))
                && tx.unbounded_send(child).is_err()
                && senders.iter().all(|tx| tx.is_closed())
            {
                return; // every controller stopped
            }
        }
    });
    owned
}

/// The key of a child cache's checkpoint: its kind, then the namespace it watches and
/// the app it selects, when it does (`deployment`, `secret-shop-postgresql`).
fn checkpoint_key<C: Child>(namespace: Option<&str>, also: Option<&str>) -> String {
    let app = also.and_then(|selector| selector.split_once('=')).map(|(_, app)| app);
    [Some(C::kind(&()).to_lowercase().as_str()), namespace, app].into_iter().flatten().collect::<Vec<_>>().join("-")
}

/// Reconcile the owner of a bosun-managed `C` when `changes` (from
/// [`watch_children`]) says it changed in a way that matters or disappeared.
pub fn owns<K: Reconciled, C: Child>(ctrl: Triggered<K>, changes: mpsc::UnboundedReceiver<C>) -> Triggered<K> {
    triggered_by(ctrl, changes, |child: &C| {
        child
            .owner_references()
            .iter()
            .filter(|r| r.controller == Some(true) && r.kind == K::kind(&()) && r.api_version == K::api_version(&()))
            .map(|r| r.name.clone())
            .collect()
    })
}

/// Reconcile the parents `parents_of` names (in the child's namespace) when `changes`
/// (from [`watch_children`]) brings a child: for children whose controller is not the
/// parent itself, e.g. the Jobs a Backup's CronJob starts.
pub fn triggered_by<K: Reconciled, C: Child>(
    ctrl: Triggered<K>,
    changes: mpsc::UnboundedReceiver<C>,
    parents_of: impl Fn(&C) -> Vec<String> + Send + Sync + 'static,
) -> Triggered<K> {
    let parents = ctrl.store();
    let owners = changes.flat_map(move |child: C| {
        let ns = child.namespace().unwrap_or_default();
        let owners: Vec<ObjectRef<Guarded<K>>> = parents_of(&child)
            .into_iter()
            .map(|name| ObjectRef::new(&name).within(&ns))
            .filter(|owner| parents.get(owner).is_some())
            .collect();
        futures::stream::iter(owners)
    });
    ctrl.reconcile_on(owners)
}

/// Which child watch events trigger the owner: a deletion always; any other event
/// only when the slimmed object changed beyond its resourceVersion — for kinds that
/// keep a generation, where status writes move the resourceVersion (a Deployment's
/// status counters and conditions are kept by the slim, so they still count).
struct Relevant<C: Child> {
    owned: Owned<C>,
    /// The fingerprint last seen of each object, by [`key_of`].
    seen: std::collections::HashMap<u64, u64>,
}

impl<C: Child> Relevant<C> {
    fn new(owned: Owned<C>) -> Self {
        Self { owned, seen: Default::default() }
    }

    fn triggers(&mut self, event: Result<watcher::Event<C>, watcher::Error>) -> Vec<Result<C, watcher::Error>> {
        match event {
            Err(err) => vec![Err(err)],
            Ok(watcher::Event::Apply(mut obj) | watcher::Event::InitApply(mut obj)) => {
                let print = if matches!(Version::of(obj.meta()), Version::Generation(_)) {
                    let rv = obj.meta_mut().resource_version.take();
                    let print = changes::fingerprint(&obj);
                    obj.meta_mut().resource_version = rv;
                    print
                } else {
                    changes::fingerprint(&obj)
                };
                let changed = self.seen.insert(key_of(obj.meta()), print) != Some(print);
                if changed { vec![Ok(obj)] } else { vec![] }
            }
            Ok(watcher::Event::Delete(obj)) => {
                self.seen.remove(&key_of(obj.meta()));
                self.owned.forget(&ObjectRef::from_obj(&obj));
                vec![Ok(obj)]
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => vec![],
        }
    }
}

/// Drive `triggered` until `shutdown` resolves; in-flight reconciles finish first.
///
/// Each triggered object goes to `reconcile` (through [`instrumented`]) unless it is
/// unreadable (reported once per change) or being deleted (left alone).
pub async fn drive<K, F, Fut>(
    controller: &'static str,
    triggered: Triggered<K>,
    concurrency: u16,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Reconciled + HasStatus,
    K::Status: DeserializeOwned,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    drive_finalized(controller, triggered, concurrency, ctx, shutdown, None, reconcile).await;
}

/// When to look at an object again, if no watch event comes first.
type Next = Option<Duration>;

/// When an object whose reconcile panicked is looked at again.
const PANIC_RECHECK: Duration = Duration::from_secs(60);

/// [`drive`] for a controller with a finalizer of its own: an object being deleted
/// that still carries `finalizer` goes to `reconcile` too, whose cleanup removes it
/// ([`crate::finalizers::finalized`]); one without it is left alone, as by [`drive`].
///
/// One loop owns the [`WorkQueue`]: it takes in triggers, hands the objects out in
/// the order they were triggered to at most `concurrency` reconciles at a time (each
/// a task of its own), puts back what they ask to look at again, and fires those
/// when due. A standby keeps its caches warm and its queue filled; it reconciles only
/// once it leads, never after shutdown began, and only after the parents' first list.
pub async fn drive_finalized<K, F, Fut>(
    controller: &'static str,
    triggered: Triggered<K>,
    concurrency: u16,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    finalizer: Option<&'static str>,
    reconcile: F,
) where
    K: Reconciled + HasStatus,
    K::Status: DeserializeOwned,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let Triggered { store, triggers } = triggered;
    let mut triggers = futures::stream::select_all(triggers);
    let depth = ctx.queues.of(controller);
    let workers = usize::from(concurrency.max(1));
    let mut queue = WorkQueue::default();
    let mut running = tokio::task::JoinSet::new();
    let ready = listed(&store);
    let timer = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(shutdown, ready, timer);
    let (mut listed_yet, mut stopping, mut timer_at) = (false, false, None);
    loop {
        if listed_yet && !stopping && ctx.leader.leading() {
            while running.len() < workers
                && let Some(key) = queue.pop()
            {
                match start(controller, &store, &key, &ctx, finalizer, reconcile.clone()) {
                    Some(job) => {
                        // A panic is a bug of bosun's, not the object's: logged, and
                        // looked at again later, so the object is never lost to the queue.
                        running.spawn(std::panic::AssertUnwindSafe(job).catch_unwind().map(move |done| {
                            let next = done.unwrap_or_else(|_| {
                                tracing::error!(controller, "reconcile panicked");
                                Some(PANIC_RECHECK)
                            });
                            (key, next)
                        }));
                    }
                    None => queue.finish(&key, None, Instant::now()),
                }
            }
        }
        depth.set(queue.len());
        if stopping && running.is_empty() {
            return;
        }
        let due = queue.next_due();
        if due != timer_at {
            timer_at = due;
            let far = Instant::now() + Duration::from_secs(86_400);
            timer.as_mut().reset(due.unwrap_or(far).into());
        }
        tokio::select! {
            biased;
            () = &mut shutdown, if !stopping => stopping = true,
            // Never cancelled, and a panic is caught: every task returns its key.
            Some(Ok((key, next))) = running.join_next() => queue.finish(&key, next, Instant::now()),
            ok = &mut ready, if !listed_yet => {
                if !ok {
                    return; // the parents' watch is gone: nothing can trigger any more
                }
                listed_yet = true;
            }
            leads = ctx.leader.wait(), if !stopping && !ctx.leader.leading() => stopping |= !leads,
            () = &mut timer, if timer_at.is_some() => queue.fire(Instant::now()),
            Some(key) = triggers.next() => {
                queue.add(key);
                // Take in what else is ready at once: a list brings thousands.
                for _ in 0..256 {
                    match triggers.next().now_or_never() {
                        Some(Some(key)) => queue.add(key),
                        _ => break,
                    }
                }
            }
        }
    }
}

/// The reconcile of the object `key` names, as cached now, if there is one to run:
/// none for an object gone, or being deleted with nothing of this controller's left
/// to do; a report for one the types cannot read. The job yields when to look again.
fn start<K, F, Fut>(
    controller: &'static str,
    store: &reflector::Store<Guarded<K>>,
    key: &ObjectRef<Guarded<K>>,
    ctx: &Arc<Context>,
    finalizer: Option<&'static str>,
    mut reconcile: F,
) -> Option<Pin<Box<dyn Future<Output = Next> + Send>>>
where
    K: Reconciled + HasStatus,
    K::Status: DeserializeOwned,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let guarded = store.get(key)?;
    let ctx = ctx.clone();
    match &guarded.0 {
        Err(unreadable) => {
            let (unreadable, object) = (unreadable.clone(), guarded.object_ref(&()));
            Some(Box::pin(async move {
                report_unreadable::<K>(controller, &ctx, &unreadable, object).await;
                None
            }))
        }
        Ok(obj)
            if obj.meta().deletion_timestamp.is_some()
                && !finalizer.is_some_and(|f| crate::finalizers::holds(obj.meta(), f)) =>
        {
            debug!(
                controller,
                namespace = obj.namespace().unwrap_or_default(),
                object = obj.name_any(),
                "being deleted: not reconciled"
            );
            None
        }
        Ok(obj) => {
            let obj = ctx.written.latest(Arc::new(obj.clone()));
            ctx.leader.reconciling(&ctx.metrics);
            Some(Box::pin(async move {
                let outcome = instrumented(controller, obj.clone(), ctx.clone(), reconcile(obj.clone(), ctx.clone()));
                match outcome.await {
                    Ok(next) => next,
                    Err(_) => Some(ctx.backoff.failed(obj.as_ref())),
                }
            }))
        }
    }
}

/// An object the types cannot read: a Warning event on it naming the field, a count,
/// and one log line — none with the object's values.
async fn report_unreadable<K: Reconciled>(
    controller: &'static str,
    ctx: &Context,
    unreadable: &Unreadable,
    object: k8s_openapi::api::core::v1::ObjectReference,
) {
    let message = unreadable.message(&K::kind(&()));
    ctx.metrics.reconciled(controller, "refused", 0.0);
    ctx.metrics.failed(controller, UNREADABLE);
    warn!(
        controller,
        namespace = unreadable.metadata.namespace.as_deref().unwrap_or_default(),
        object = unreadable.metadata.name.as_deref().unwrap_or_default(),
        field = %unreadable.field,
        problem = %unreadable.problem,
        "cannot read the object; it is not reconciled until it is fixed"
    );
    ctx.events.refused(&object, UNREADABLE, &message);
}

/// Run the controller of `K`, whose children are all of kind `C`, in `namespace` (or
/// cluster-wide) until `shutdown`: the whole wiring of a single-child controller.
/// `reconcile` gets the cache of the children with each object.
pub async fn run_owning<K, C, F, Fut>(
    controller: &'static str,
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Reconciled + HasStatus,
    K::Status: DeserializeOwned,
    C: Child,
    F: Fn(Arc<K>, Arc<Context>, Owned<C>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let ns = namespace.as_deref();
    let (owned, mut changes) = watch_children::<C>(&ctx, ns, &[(&K::kind(&()), &K::api_version(&()))]);
    let Some(changes) = changes.pop() else { return };
    let ctrl = owns::<K, C>(controller_for::<K>(controller, &ctx, ns), changes);
    drive(controller, ctrl, concurrency, ctx, shutdown, move |obj, ctx| reconcile(obj, ctx, owned.clone())).await;
}

/// How often a parent whose child name is taken looks again: the object holding the
/// name is not bosun's, so no watch says when it goes away.
pub const NAME_CONFLICT_RECHECK: Duration = Duration::from_secs(30);

/// When a reconcile that [`Outcome::Yielded`] goes on if no watch event came first.
pub const YIELD_BACKSTOP: Duration = Duration::from_secs(1);

/// When an object of a namespace being deleted is looked at again: once it is gone
/// (or being deleted without a finalizer of bosun's), the look costs nothing.
pub const NAMESPACE_TERMINATING_RECHECK: Duration = Duration::from_secs(10);

/// How a reconcile ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied and status written from what was applied.
    Applied,
    /// A first wave of children was created and more follow: the reconcile gives its
    /// worker back, and the next one — triggered by the created child's watch event,
    /// or at the latest after [`YIELD_BACKSTOP`] — goes on. So a slow create (a
    /// Service waits for its ClusterIP) never holds back other parents' workloads.
    Yielded,
    /// Applied; the resource has something to do at a time of its own (an AppConfig's
    /// rollout waiting for its settle time): reconcile again after this long.
    Requeue(Duration),
    /// A child is not created yet: the [`crate::window::Window`] of first rollouts in
    /// flight is full. The parent is woken when a slot frees, or looks again after this long.
    Waiting(Duration),
    /// The spec cannot be served (`reason` is the condition's, e.g. `InvalidSpec`):
    /// reported on the resource, and in a Warning event when `announce` (the status
    /// changed: the same refusal is announced once); waits for a spec change — or,
    /// for a refusal in `reasons::RECHECKED` (e.g. `NameConflict`), looks again every
    /// [`NAME_CONFLICT_RECHECK`].
    Refused { reason: &'static str, message: String, announce: bool },
}

impl Outcome {
    /// `Refused` with `(reason, message)` when there is a refusal, else `Applied`.
    pub fn of(refused: Option<(&'static str, String)>, announce: bool) -> Self {
        match refused {
            Some((reason, message)) => Outcome::Refused { reason, message, announce },
            None => Outcome::Applied,
        }
    }
}

/// Run one reconcile of `obj` through `stage` inside a span naming the object, and
/// write one structured line with its outcome and duration.
pub async fn instrumented<K, Fut>(kind: &'static str, obj: Arc<K>, ctx: Arc<Context>, stage: Fut) -> Result<Next, Error>
where
    K: Reconciled,
    Fut: Future<Output = Result<Outcome, Error>>,
{
    let span = info_span!(
        "reconcile",
        controller = kind,
        namespace = obj.namespace().unwrap_or_default(),
        object = obj.name_any(),
        generation = obj.meta().generation.unwrap_or_default(),
        resource_version = obj.resource_version().unwrap_or_default(),
    );
    let started = Instant::now();
    let result = stage.instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let ms = elapsed.as_millis() as u64;
    match result {
        Ok(Outcome::Applied) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "success", elapsed.as_secs_f64());
            span.in_scope(|| info!(outcome = "Applied", duration_ms = ms, "reconciled"));
            Ok(None)
        }
        Ok(Outcome::Requeue(after)) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "success", elapsed.as_secs_f64());
            span.in_scope(|| {
                info!(
                    outcome = "Requeue",
                    duration_ms = ms,
                    after_ms = after.as_millis() as u64,
                    "reconciled: looks again later"
                )
            });
            Ok(Some(after))
        }
        Ok(Outcome::Waiting(after)) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "success", elapsed.as_secs_f64());
            span.in_scope(|| debug!(outcome = "Waiting", duration_ms = ms, "reconciled: waits for a rollout slot"));
            Ok(Some(after))
        }
        Ok(Outcome::Yielded) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "success", elapsed.as_secs_f64());
            span.in_scope(|| info!(outcome = "Yielded", duration_ms = ms, "reconciled: more children follow"));
            Ok(Some(YIELD_BACKSTOP))
        }
        Ok(Outcome::Refused { reason, message, announce }) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "refused", elapsed.as_secs_f64());
            if announce {
                span.in_scope(
                    || warn!(outcome = "Refused", reason, duration_ms = ms, %message, "reconciled: spec refused"),
                );
                ctx.events.refused(&obj.object_ref(&()), reason, &message);
            }
            Ok(if bosun_api::conditions::reasons::RECHECKED.contains(&reason) {
                Some(NAME_CONFLICT_RECHECK)
            } else {
                None
            })
        }
        // Children cannot be created in a namespace being deleted, and need not be:
        // not an error to retry, count or announce. Looked at again all the same: the
        // object's own deletion comes next, and a finalizer of bosun's on it must not
        // wait on that one watch event to be released (it holds up the namespace).
        Err(err) if err.is_namespace_terminating() => {
            ctx.backoff.succeeded(obj.as_ref());
            span.in_scope(|| debug!(outcome = "NamespaceTerminating", duration_ms = ms, "namespace is being deleted"));
            Ok(Some(NAMESPACE_TERMINATING_RECHECK))
        }
        Err(err) => {
            ctx.metrics.reconciled(kind, "error", elapsed.as_secs_f64());
            ctx.metrics.failed(kind, err.category());
            span.in_scope(|| warn!(outcome = "Error", reason = err.category(), duration_ms = ms, error = %err, "reconcile failed"));
            ctx.events.failed(&obj.object_ref(&()), &err);
            Err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use bosun_resources::slim::{SlimDeployment, SlimService};
    use k8s_openapi::api::apps::v1::DeploymentStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::changes::Applied;

    fn deployment(rv: &str, generation: i64, available: i32) -> SlimDeployment {
        let mut d = SlimDeployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                resource_version: Some(rv.into()),
                generation: Some(generation),
                ..Default::default()
            },
            status: Some(DeploymentStatus { available_replicas: Some(available), ..Default::default() }),
        };
        d.slim();
        d
    }

    #[test]
    fn a_parent_triggers_on_a_new_generation_a_request_or_a_new_object_only() {
        use watcher::Event::{Apply, Delete, InitApply};
        let mut triggers = Triggers::default();
        let mut pass = |event: watcher::Event<SlimDeployment>| triggers.filter(event).is_some();
        let with_request = |mut d: SlimDeployment, value: &str| {
            let annotation = bosun_api::postgresql::SWITCHOVER_ANNOTATION.to_owned();
            d.metadata.annotations = Some([(annotation, value.to_owned())].into());
            d
        };
        assert!(pass(InitApply(deployment("1", 1, 0))), "first seen");
        assert!(!pass(InitApply(deployment("1", 1, 0))), "listed again after a watch expired");
        assert!(!pass(Apply(deployment("2", 1, 1))), "a status write");
        assert!(pass(Apply(deployment("3", 2, 1))), "a spec change");
        assert!(pass(Apply(with_request(deployment("4", 2, 1), "db-1"))), "a request");
        assert!(!pass(Apply(with_request(deployment("5", 2, 0), "db-1"))), "the same request");
        assert!(!pass(Delete(deployment("6", 2, 0))), "a deletion is no reconcile of the parent");
        assert!(pass(Apply(deployment("7", 2, 0))), "re-created at the same generation: forgotten at deletion");
        let mut other = deployment("8", 2, 0);
        other.metadata.uid = Some("u2".into());
        assert!(pass(Apply(other)), "replaced without a deletion seen: another uid");
    }

    fn triggered(relevant: &mut Relevant<SlimDeployment>, event: watcher::Event<SlimDeployment>) -> bool {
        !relevant.triggers(Ok(event)).is_empty()
    }

    #[test]
    fn only_changes_a_decision_reads_trigger_the_owner() {
        let (reader, _writer) = reflector::store();
        let owned = Owned::new(reader);
        let mut relevant = Relevant::new(owned.clone());
        assert!(triggered(&mut relevant, watcher::Event::Apply(deployment("10", 1, 0))));
        // A status write that changes nothing the slim keeps (only the resourceVersion).
        assert!(!triggered(&mut relevant, watcher::Event::Apply(deployment("11", 1, 0))));
        // Counters that a WebApp's status shows, and a hand edit (new generation), do.
        assert!(triggered(&mut relevant, watcher::Event::Apply(deployment("12", 1, 1))));
        assert!(triggered(&mut relevant, watcher::Event::Apply(deployment("13", 2, 1))));
        // A deletion always does, and forgets what bosun applied.
        owned.record("ns", "web", Applied::of(&deployment("13", 2, 1).metadata, 7));
        assert!(triggered(&mut relevant, watcher::Event::Delete(deployment("13", 2, 1))));
        assert_eq!(owned.recorded("ns", "web"), None);
    }

    #[test]
    fn kinds_without_a_generation_trigger_on_every_write() {
        let (reader, _writer) = reflector::store();
        let mut relevant = Relevant::new(Owned::<SlimService>::new(reader));
        let service = |rv: &str| SlimService {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
        };
        assert!(!relevant.triggers(Ok(watcher::Event::Apply(service("1")))).is_empty());
        // A Service's spec is not cached: only its resourceVersion tells of an edit.
        assert!(!relevant.triggers(Ok(watcher::Event::Apply(service("2")))).is_empty());
        assert!(relevant.triggers(Ok(watcher::Event::Apply(service("2")))).is_empty());
    }
}
