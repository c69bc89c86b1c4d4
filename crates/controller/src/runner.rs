//! Wiring a reconcile pipeline into a kube-runtime `Controller`, the same way for
//! every kind.
//!
//! ```text
//!   watch(K, each object guarded) ─reflect─▶ store ─generation predicate─┐
//!   watch(children, metadata only, managed-by=bosun) ─reflect─▶ Owned<C> ┴─▶ Controller
//!       ─▶ unreadable? report it · being deleted? leave it · else instrumented(reconcile)
//! ```
//!
//! * The parent's watch is filtered on `metadata.generation`, so bosun's own status
//!   writes (which do not bump the generation) never trigger another reconcile.
//! * Every object is decoded on its own ([`Guarded`]): one the types cannot read is
//!   reported on itself and counted, and the watch goes on for all others.
//! * A parent with a `deletionTimestamp` is never reconciled into its children: it is
//!   going away, and its children go with it or — `--cascade=orphan` — stay as they are.
//! * Children are watched as metadata only and only those labelled
//!   `app.kubernetes.io/managed-by=bosun`, into a cache ([`Owned`]) that maps an edit or
//!   deletion back to the owner (drift correction) and answers who controls a name
//!   before bosun writes it ([`crate::children`]).
//! * Each watch retries on its own short backoff (¼ s doubling to 2 s) and the
//!   Controller adds none on top, so reconciling resumes within seconds of an
//!   apiserver's return; a watch that is failing makes `/readyz` say so.
//! * Errors go through [`error_policy`]: per-object exponential backoff with jitter.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{Instrument, debug, info, info_span, warn};

use bosun_resources::meta::MANAGED_BY;

use crate::children::{self, Owned};
use crate::context::{Context, api};
use crate::error::Error;
use crate::guard::{Guarded, Unreadable};

/// Bounds of a resource kind the runner can drive.
pub trait Reconciled:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}
impl<K> Reconciled for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

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

/// No delay: the Controller's own backoff over all its watches would stack on top of
/// each watch's (and be re-armed by every routine "resource version too old" after a
/// restart), holding reconciles back for minutes.
#[derive(Clone, Copy, Debug, Default)]
struct NoBackoff;

impl Iterator for NoBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoBackoff {
    fn reset(&mut self) {}
}

/// `watch` with its health counted towards `/readyz` and its own short backoff.
fn watched<S, T>(ctx: &Context, watch: S) -> impl futures::Stream<Item = Result<T, watcher::Error>> + Send + use<S, T>
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

/// A controller for `K` in `namespace` (or cluster-wide) whose trigger ignores
/// status-only changes. `controller` is its label in metrics.
pub fn controller_for<K: Reconciled>(
    controller: &'static str,
    ctx: &Arc<Context>,
    namespace: Option<&str>,
) -> Controller<Guarded<K>> {
    let (reader, writer) = reflector::store();
    track_cache(ctx, reader.clone(), controller);
    let trigger = watched(ctx, watcher(api::<Guarded<K>>(&ctx.client, namespace), watcher::Config::default()))
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(trigger, reader).trigger_backoff(NoBackoff)
}

/// Count the cache towards readiness, and keep the managed-resources gauge at its size.
fn track_cache<K: Reconciled>(ctx: &Arc<Context>, reader: reflector::Store<K>, controller: &'static str) {
    ctx.caches.expect_one();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        // Store readiness sits on one oneshot receiver, which wakes only its latest
        // poller, and the Controller waits on the same store; so look again every
        // 200 ms instead of waiting once (the value is memoized once set).
        loop {
            match tokio::time::timeout(Duration::from_millis(200), reader.wait_until_ready()).await {
                Ok(Ok(())) => break,
                Ok(Err(err)) => {
                    tracing::error!(%err, controller, "cache writer dropped before the initial list completed");
                    return;
                }
                Err(_) => continue,
            }
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

/// Reconcile the owner of any bosun-managed `C` that changes or disappears, and keep
/// their metadata in the returned cache, which [`crate::apply::apply_child`] decides
/// ownership from.
pub fn owns<K: Reconciled, C: Reconciled>(
    ctrl: Controller<Guarded<K>>,
    ctx: &Context,
    namespace: Option<&str>,
) -> (Controller<Guarded<K>>, Owned<C>) {
    let selector = format!("app.kubernetes.io/managed-by={MANAGED_BY}");
    let (reader, writer) = reflector::store();
    let watch =
        watcher(api::<PartialObjectMeta<C>>(&ctx.client, namespace), watcher::Config::default().labels(&selector));
    let children = watched(ctx, watch).modify(children::trim).reflect(writer).touched_objects();
    (ctrl.owns_stream(children), Owned::new(reader))
}

type Reconcile = Pin<Box<dyn Future<Output = Result<Action, Error>> + Send>>;

/// Drive `ctrl` until `shutdown` resolves; in-flight reconciles finish first.
///
/// Each triggered object goes to `reconcile` (through [`instrumented`]) unless it is
/// unreadable (reported once per change) or being deleted (left alone).
pub async fn drive<K, F, Fut>(
    controller: &'static str,
    ctrl: Controller<Guarded<K>>,
    config: controller::Config,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    mut reconcile: F,
) where
    K: Reconciled,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let dispatch = move |guarded: Arc<Guarded<K>>, ctx: Arc<Context>| -> Reconcile {
        match &guarded.0 {
            Err(unreadable) => {
                let (unreadable, object) = (unreadable.clone(), guarded.object_ref(&()));
                Box::pin(async move {
                    report_unreadable::<K>(controller, &ctx, &unreadable, object).await;
                    Ok(Action::await_change())
                })
            }
            Ok(obj) if obj.meta().deletion_timestamp.is_some() => {
                debug!(
                    controller,
                    namespace = obj.namespace().unwrap_or_default(),
                    object = obj.name_any(),
                    "being deleted: not reconciled"
                );
                Box::pin(std::future::ready(Ok(Action::await_change())))
            }
            Ok(obj) => {
                let obj = Arc::new(obj.clone());
                Box::pin(instrumented(controller, obj.clone(), ctx.clone(), reconcile(obj, ctx)))
            }
        }
    };
    ctrl.with_config(config)
        .graceful_shutdown_on(shutdown)
        .run(dispatch, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
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
    ctx.events.refused(&object, UNREADABLE, &message).await;
}

/// The event reason and error label of an object bosun cannot read.
pub const UNREADABLE: &str = "InvalidObject";

/// Run the controller of `K`, whose children are all of kind `C`, in `namespace` (or
/// cluster-wide) until `shutdown`: the whole wiring of a single-child controller.
/// `reconcile` gets the cache of the children with each object.
pub async fn run_owning<K, C, F, Fut>(
    controller: &'static str,
    ctx: Arc<Context>,
    namespace: Option<String>,
    config: controller::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Reconciled,
    C: Reconciled,
    F: Fn(Arc<K>, Arc<Context>, Owned<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let ns = namespace.as_deref();
    let (ctrl, owned) = owns::<K, C>(controller_for::<K>(controller, &ctx, ns), &ctx, ns);
    drive(controller, ctrl, config, ctx, shutdown, move |obj, ctx| reconcile(obj, ctx, owned.clone())).await;
}

/// Retry a failed object after its backoff delay.
pub fn error_policy<K: Reconciled>(obj: Arc<Guarded<K>>, _err: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.backoff.failed(obj.as_ref()))
}

/// How often a parent whose child name is taken looks again: the object holding the
/// name is not bosun's, so no watch says when it goes away.
pub const NAME_CONFLICT_RECHECK: Duration = Duration::from_secs(30);

/// How a reconcile ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied and status written from what was applied.
    Applied,
    /// The spec cannot be served (`reason` is the condition's, e.g. `InvalidSpec`):
    /// reported on the resource, and in a Warning event when `announce` (the status
    /// changed: the same refusal is announced once); waits for a spec change — or,
    /// for a `NameConflict`, looks again every [`NAME_CONFLICT_RECHECK`].
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
pub async fn instrumented<K, Fut>(
    kind: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    stage: Fut,
) -> Result<Action, Error>
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
            Ok(Action::await_change())
        }
        Ok(Outcome::Refused { reason, message, announce }) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "refused", elapsed.as_secs_f64());
            if announce {
                span.in_scope(
                    || warn!(outcome = "Refused", reason, duration_ms = ms, %message, "reconciled: spec refused"),
                );
                ctx.events.refused(&obj.object_ref(&()), reason, &message).await;
            }
            Ok(if reason == bosun_api::conditions::reasons::NAME_CONFLICT {
                Action::requeue(NAME_CONFLICT_RECHECK)
            } else {
                Action::await_change()
            })
        }
        // Children cannot be created in a namespace being deleted, and need not be:
        // not an error to retry, count or announce.
        Err(err) if err.is_namespace_terminating() => {
            ctx.backoff.succeeded(obj.as_ref());
            span.in_scope(|| debug!(outcome = "NamespaceTerminating", duration_ms = ms, "namespace is being deleted"));
            Ok(Action::await_change())
        }
        Err(err) => {
            ctx.metrics.reconciled(kind, "error", elapsed.as_secs_f64());
            ctx.metrics.failed(kind, err.category());
            span.in_scope(|| warn!(outcome = "Error", reason = err.category(), duration_ms = ms, error = %err, "reconcile failed"));
            ctx.events.failed(&obj.object_ref(&()), &err).await;
            Err(err)
        }
    }
}
