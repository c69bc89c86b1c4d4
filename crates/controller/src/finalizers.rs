//! Finalizers, the same way for every kind that needs one: for a cleanup that
//! ownerReference garbage collection cannot do (children deleted in an order, state
//! outside the cluster).
//!
//! ```text
//!  reconcile(obj) ─▶ finalized(finalizer, obj, apply, cleanup)
//!    not being deleted, no finalizer yet ─▶ add it (one patch, once per object) ─▶ apply
//!    not being deleted                   ─▶ apply
//!    being deleted, finalizer ours       ─▶ cleanup ─┬─ Done           ─▶ remove it (one patch)
//!                                                    └─ Pending(after) ─▶ look again
//!    being deleted, no finalizer of ours ─▶ never reconciled (see crate::wiring::drive_finalized)
//! ```
//!
//! * The finalizer is added before anything is applied, so every child that exists is
//!   under it. It is added with a server-side apply of that one list item (the
//!   controller's field manager owns it and nothing else of the object's metadata),
//!   with the object's uid as a precondition: once per object, then never again, so
//!   the steady state stays silent. An object that already existed before its
//!   controller used a finalizer gets it on its next reconcile; one whose deletion began
//!   before that has none, and goes the ordinary way (the apiserver refuses to add a
//!   finalizer to an object being deleted).
//! * It is removed with a JSON patch that tests the uid and the item at its index
//!   first: exactly this object's, exactly this finalizer, whoever else wrote the list.
//! * A cleanup must end: it reports what holds it up on the object and releases the
//!   finalizer after a bound of its own (a deletion never hangs because of a bug).
//!   Errors are retried with the controller's backoff like any other reconcile error.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::{debug, info};

use crate::apply::field_manager;
use crate::context::Context;
use crate::error::Error;
use crate::guard::Reconciled;
use crate::permissions::Permission;
use crate::wiring::Outcome;

/// What a deletion's cleanup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing is left to do: the finalizer goes.
    Done,
    /// Not yet: look again after this long, or sooner when a watch says something changed.
    Pending(Duration),
}

/// Adding and removing a finalizer on the kind `group`/`plural` (a patch of the object
/// itself, not of its status).
pub const fn permission(group: &'static str, plural: &'static str) -> Permission {
    Permission::new(group, plural, &["patch"])
}

/// Reading whether a namespace is being deleted ([`namespace_terminating`]).
pub const NAMESPACES: Permission = Permission::new("", "namespaces", &["get"]);

/// Whether `meta` carries `finalizer`.
pub fn holds(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Reconcile `obj` under `finalizer`: `apply` while it lives (after adding the
/// finalizer if it lacks it), `cleanup` once it is being deleted (removing the
/// finalizer when the cleanup is done).
pub async fn finalized<K, A, C>(
    ctx: &Context,
    finalizer: &'static str,
    obj: &K,
    apply: impl FnOnce() -> A,
    cleanup: impl FnOnce() -> C,
) -> Result<Outcome, Error>
where
    K: Reconciled,
    A: Future<Output = Result<Outcome, Error>>,
    C: Future<Output = Result<Cleanup, Error>>,
{
    let meta = obj.meta();
    if meta.deletion_timestamp.is_none() {
        if !holds(meta, finalizer) {
            add(ctx, obj, finalizer).await?;
        }
        return apply().await;
    }
    if !holds(meta, finalizer) {
        return Ok(Outcome::Applied);
    }
    match cleanup().await? {
        Cleanup::Done => {
            remove(ctx, obj, finalizer).await?;
            Ok(Outcome::Applied)
        }
        Cleanup::Pending(after) => Ok(Outcome::Requeue(after)),
    }
}

/// Add `finalizer` to `obj`: a server-side apply of that list item alone (the list is a
/// set: the apiserver keeps every other item, whoever wrote it), only to this very
/// object (its uid).
async fn add<K: Reconciled>(ctx: &Context, obj: &K, finalizer: &str) -> Result<(), Error> {
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": ns, "uid": obj.meta().uid, "finalizers": [finalizer]},
    });
    Api::<K>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &PatchParams::apply(&field_manager::<K>()).force(), &Patch::Apply(&body))
        .await
        .map_err(|source| Error::Apply { kind: K::kind(&()).into_owned(), name: name.clone(), source })?;
    debug!(kind = %K::kind(&()), %ns, %name, finalizer, "finalizer added");
    Ok(())
}

/// Remove `finalizer` from `obj`: a JSON patch that first tests the uid and the item
/// at the index the cached object has it, so it removes exactly that. A cache behind
/// the object fails the test; the reconcile is retried once the watch caught up.
async fn remove<K: Reconciled>(ctx: &Context, obj: &K, finalizer: &str) -> Result<(), Error> {
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else { return Ok(()) };
    let item = format!("/metadata/finalizers/{index}");
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": obj.meta().uid},
        {"op": "test", "path": item, "value": finalizer},
        {"op": "remove", "path": item},
    ]))
    .map_err(|err| Error::Apply {
        kind: K::kind(&()).into_owned(),
        name: name.clone(),
        source: kube::Error::SerdeError(err),
    })?;
    let params = PatchParams { field_manager: Some(field_manager::<K>()), ..PatchParams::default() };
    match Api::<K>::namespaced(ctx.client.clone(), &ns).patch(&name, &params, &Patch::<()>::Json(patch)).await {
        Ok(_) => {}
        // Gone already: nothing holds it.
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(source) => return Err(Error::Apply { kind: K::kind(&()).into_owned(), name, source }),
    }
    info!(kind = %K::kind(&()), %ns, %name, finalizer, "finalizer removed");
    Ok(())
}

/// Whether namespace `ns` is being deleted. Not knowing (it cannot be read) counts as
/// not: a cleanup's own bound still ends the wait.
pub async fn namespace_terminating(ctx: &Context, ns: &str) -> bool {
    match Api::<Namespace>::all(ctx.client.clone()).get_opt(ns).await {
        Ok(Some(namespace)) => {
            namespace.metadata.deletion_timestamp.is_some()
                || namespace.status.and_then(|s| s.phase).is_some_and(|p| p == "Terminating")
        }
        Ok(None) => false,
        Err(err) => {
            debug!(%err, namespace = ns, "cannot tell whether the namespace is being deleted");
            false
        }
    }
}
