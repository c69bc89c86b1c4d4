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
pub fn controller_for<K: Reconciled>(ctx: &Context, namespace: Option<&str>) -> Controller<K> {
    let (reader, writer) = reflector::store();
    let trigger = watcher(api::<K>(&ctx.client, namespace), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(trigger, reader)
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

/// Retry a failed object after its backoff delay.
pub fn error_policy<K: Reconciled>(obj: Arc<K>, _err: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.backoff.failed(obj.as_ref()))
}

/// How a reconcile ended, for the one log line each reconcile writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied and status written from what was applied.
    Applied,
    /// The spec cannot be served; reported on the resource, waiting for a change.
    InvalidSpec,
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
        name = obj.name_any(),
        generation = obj.meta().generation.unwrap_or_default(),
        resource_version = obj.resource_version().unwrap_or_default(),
    );
    let started = Instant::now();
    let result = stage.instrument(span.clone()).await;
    let _enter = span.enter();
    let ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(outcome) => {
            ctx.backoff.succeeded(obj.as_ref());
            info!(outcome = ?outcome, duration_ms = ms, "reconciled");
            Ok(Action::await_change())
        }
        Err(err) => {
            warn!(outcome = "Error", reason = err.category(), duration_ms = ms, error = %err, "reconcile failed");
            Err(err)
        }
    }
}
