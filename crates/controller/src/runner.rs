//! Wiring a reconcile pipeline into a kube-runtime `Controller`, the same way for
//! every kind.
//!
//! ```text
//!   watch(K) ─reflect─▶ store ─generation predicate─┐
//!   watch(children, metadata only, managed-by=bosun) ┴─▶ Controller ─▶ instrumented(reconcile)
//! ```
//!
//! * The parent's watch is filtered on `metadata.generation`, so bosun's own status
//!   writes (which do not bump the generation) never trigger another reconcile.
//! * Children are watched as metadata only and only those labelled
//!   `app.kubernetes.io/managed-by=bosun`: enough to map an edit or deletion back to
//!   the owner (drift correction) without caching every Deployment in the cluster.
//! * Errors go through [`error_policy`]: per-object exponential backoff with jitter.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{Instrument, info, info_span, warn};

use bosun_resources::meta::MANAGED_BY;

use crate::context::{Context, api};
use crate::error::Error;

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

/// A controller for `K` in `namespace` (or cluster-wide) whose trigger ignores
/// status-only changes.
/// `controller` is its label in metrics.
pub fn controller_for<K: Reconciled>(
    controller: &'static str,
    ctx: &Arc<Context>,
    namespace: Option<&str>,
) -> Controller<K> {
    let (reader, writer) = reflector::store();
    track_cache(ctx, reader.clone(), controller);
    let trigger = watcher(api::<K>(&ctx.client, namespace), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(trigger, reader)
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
            match tokio::time::timeout(std::time::Duration::from_millis(200), reader.wait_until_ready()).await {
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
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
    });
}

/// Reconcile the owner of any bosun-managed `C` that changes or disappears.
pub fn owns<K: Reconciled, C: Reconciled>(
    ctrl: Controller<K>,
    ctx: &Context,
    namespace: Option<&str>,
) -> Controller<K> {
    let selector = format!("app.kubernetes.io/managed-by={MANAGED_BY}");
    let children =
        watcher(api::<PartialObjectMeta<C>>(&ctx.client, namespace), watcher::Config::default().labels(&selector))
            .default_backoff()
            .touched_objects();
    ctrl.owns_stream(children)
}

/// Drive `ctrl` until `shutdown` resolves; in-flight reconciles finish first.
pub async fn drive<K, F, Fut>(
    ctrl: Controller<K>,
    config: controller::Config,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Reconciled,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    ctrl.with_config(config)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
}

/// Run the controller of `K`, whose children are all of kind `C`, in `namespace` (or
/// cluster-wide) until `shutdown`: the whole wiring of a single-child controller.
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
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Outcome, Error>> + Send + 'static,
{
    let ns = namespace.as_deref();
    let ctrl = owns::<K, C>(controller_for::<K>(controller, &ctx, ns), &ctx, ns);
    drive(ctrl, config, ctx, shutdown, move |obj, ctx| {
        instrumented(controller, obj.clone(), ctx.clone(), reconcile(obj, ctx))
    })
    .await;
}

/// Retry a failed object after its backoff delay.
pub fn error_policy<K: Reconciled>(obj: Arc<K>, _err: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.backoff.failed(obj.as_ref()))
}

/// How a reconcile ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied and status written from what was applied.
    Applied,
    /// The spec cannot be served (`reason` is the condition's, e.g. `InvalidSpec`):
    /// reported on the resource and in a Warning event; waits for a spec change.
    Refused { reason: &'static str, message: String },
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
        Ok(Outcome::Refused { reason, message }) => {
            ctx.backoff.succeeded(obj.as_ref());
            ctx.metrics.reconciled(kind, "refused", elapsed.as_secs_f64());
            span.in_scope(
                || warn!(outcome = "Refused", reason, duration_ms = ms, %message, "reconciled: spec refused"),
            );
            ctx.events.refused(&obj.object_ref(&()), reason, &message).await;
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
