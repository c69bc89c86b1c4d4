//! Server-side apply: the only way bosun writes.
//!
//! Each controller writes under a field manager of its own ([`field_manager`]), with
//! `force` — but only over objects its parent controls: every child goes through the
//! ownership rule of [`crate::children`] first, so `force` takes back fields a person
//! edited on bosun's own children (drift correction) and never touches an object that
//! is someone else's. Fields bosun never sets stay with whoever set them. An apply that
//! changes nothing is not a write: the apiserver keeps the resourceVersion.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use crate::changes::{self, Applied};
use crate::children::{self, Child, Claim, Owned, Parent};
use crate::context::Context;
use crate::error::Error;
use crate::events::ChildChange;
use crate::read;

/// The field manager of the controller of `K`, e.g. `bosun-webapp.apps.example.com`:
/// one per controller, so two controllers never silently share (and fight over) fields.
pub fn field_manager<K: Resource<DynamicType = ()>>() -> String {
    format!("bosun-{}.{}", K::kind(&()).to_lowercase(), K::group(&()))
}

fn params(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// Apply a namespaced child built by a pure builder as `manager`; returns it as stored.
pub async fn apply<C>(client: &Client, manager: &str, child: &C) -> Result<C, Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned + Clone + Debug,
{
    apply_read_as(client, manager, child).await
}

/// Apply `child` as `manager` and read what was stored as `R`: the same kind, or the
/// slim type bosun caches of it ([`bosun_resources::slim`]).
async fn apply_read_as<R, C>(client: &Client, manager: &str, child: &C) -> Result<R, Error>
where
    R: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
    C: Resource<DynamicType = ()> + Serialize + Debug,
{
    let name = child.name_any();
    let ns = child.namespace().unwrap_or_default();
    Api::<R>::namespaced(client.clone(), &ns)
        .patch(&name, &params(manager), &Patch::Apply(child))
        .await
        .map_err(|source| Error::Apply { kind: C::kind(&()).into_owned(), name, source })
}

/// Apply `status` to the status subresource of `owner`; returns the stored metadata.
pub async fn apply_status<K, S>(client: &Client, owner: &K, status: &S) -> Result<ObjectMeta, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
    S: Serialize,
{
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let ns = owner.namespace().unwrap_or_default();
    Api::<K>::namespaced(client.clone(), &ns)
        .patch_status(&owner.name_any(), &params(&field_manager::<K>()), &Patch::Apply(body))
        .await
        .map(|stored| stored.meta().clone())
        .map_err(Error::Status)
}

/// Decide from the metadata `existing` (cached or read) whether `owner` may write
/// `child`; an [`Error::NameConflict`] when it may not.
pub fn claim_child<K, C>(owner: &K, child: &C, existing: Option<&ObjectMeta>) -> Result<Claim, Error>
where
    K: Resource<DynamicType = ()>,
    C: Resource<DynamicType = ()>,
{
    let manager = field_manager::<K>();
    let kind = C::kind(&());
    let name = child.meta().name.as_deref().unwrap_or_default();
    match children::claim(&kind, name, existing, Parent::of(owner, &manager)) {
        Claim::Conflict(message) => Err(Error::NameConflict(message)),
        claim => Ok(claim),
    }
}

/// Bring `child` of `owner` to its desired state, and return it as stored (or as
/// cached, when it already was).
///
/// Nothing is sent when the child already holds what bosun last applied and nobody
/// changed it since ([`changes::drift`]); otherwise it is applied — only if the name is
/// free or the object is the owner's (see [`crate::children`]) — and a `Created` or
/// `Updated` event is published on the owner when the apply created or changed it.
/// `owned` is the cache and record of the child's kind. A name held by someone else is
/// an [`Error::NameConflict`] and nothing is written.
pub async fn apply_child<K, C>(ctx: &Context, owner: &K, owned: &Owned<C>, mut child: C::Desired) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Child,
{
    let ns = child.namespace().unwrap_or_default();
    let name = child.name_any();
    let print = changes::fingerprint(&child);
    owned.listed().await;
    let cached = owned.get(&ns, &name);
    let record = owned.recorded(&ns, &name);
    let cached_meta = cached.as_ref().map(|c| c.meta());
    let drift = match (changes::drift(child.meta(), print, record.as_ref(), cached_meta), &cached) {
        (None, Some(cached)) => return Ok((**cached).clone()),
        (drift, _) => drift.unwrap_or(changes::Drift::Missing),
    };
    debug!(kind = %C::kind(&()), %ns, %name, ?drift, "applying");
    // Who holds the name, as far as bosun knows: the cache, else its own record of the
    // object it applied (the watch has not delivered it yet, or it was deleted: the
    // uid precondition tells which).
    let known = cached_meta.cloned().or_else(|| {
        record.as_ref().map(|r| ObjectMeta {
            uid: Some(r.uid.clone()),
            owner_references: child.meta().owner_references.clone(),
            ..ObjectMeta::default()
        })
    });
    let before = Before { cached: cached_meta, record: record.as_ref() };
    let applied: C = match apply_claimed(ctx, owner, &mut child, known.as_ref(), before).await {
        // The cache did not know the name's holder (not yet, or never: no bosun label),
        // or the object bosun applied is gone: read it and judge once more.
        Err(err) if err.is_precondition_failed() => {
            let stored = read::metadata::<C>(&ctx.client, &ns, &name).await?;
            let stored = stored.as_ref().map(|s| &s.metadata);
            apply_claimed(ctx, owner, &mut child, stored, Before { cached: stored, record: None }).await?
        }
        result => result?,
    };
    owned.record(&ns, &name, Applied::of(applied.meta(), print));
    Ok(applied)
}

/// The child as known before an apply, to tell what the apply changed.
#[derive(Clone, Copy)]
struct Before<'a> {
    cached: Option<&'a ObjectMeta>,
    record: Option<&'a Applied>,
}

/// Claim `child`'s name from `existing`, apply with the claim's precondition, and
/// publish the event of what the apply did.
async fn apply_claimed<K, C>(
    ctx: &Context,
    owner: &K,
    child: &mut C::Desired,
    existing: Option<&ObjectMeta>,
    before: Before<'_>,
) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Child,
{
    let manager = field_manager::<K>();
    let claim = claim_child(owner, child, existing)?;
    let desired = child.meta().clone();
    let meta = child.meta_mut();
    (meta.uid, meta.resource_version) = match &claim {
        Claim::Ours { uid } => (Some(uid.clone()), None),
        _ => (None, Some(CREATE_ONLY.to_owned())),
    };
    let applied: C = apply_read_as(&ctx.client, &manager, child).await?;
    let change = changes::change(claim == Claim::Create, &desired, before.cached, before.record, applied.meta());
    if change != ChildChange::Unchanged {
        ctx.events.child(&owner.object_ref(&()), change, applied.object_ref(&()));
    }
    Ok(applied)
}

/// Create `child` of `owner` unless an object holds its name, and return the stored
/// object — the one created, or the one found, as it is. Never writes over an
/// existing object: for children that are written once and then belong to the user
/// (a generated password, a claim of dumps), not kept in a desired state.
pub async fn create_if_absent<K, C>(ctx: &Context, owner: &K, child: &C) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: crate::guard::Reconciled + Serialize,
{
    let name = child.name_any();
    let ns = child.namespace().unwrap_or_default();
    let api = Api::<C>::namespaced(ctx.client.clone(), &ns);
    let failed = |source| Error::Apply { kind: C::kind(&()).into_owned(), name: name.clone(), source };
    let params = PostParams { field_manager: Some(field_manager::<K>()), ..PostParams::default() };
    match api.create(&params, child).await {
        Ok(created) => {
            ctx.events.child(&owner.object_ref(&()), ChildChange::Created, created.object_ref(&()));
            Ok(created)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            api.get(&name).await.map_err(|source| Error::Read { what: format!("{} {ns}/{name}", C::kind(&())), source })
        }
        Err(source) => Err(failed(source)),
    }
}

/// Delete the child `namespace/name` of `owner` if bosun's cache holds it and
/// `owner` controls it — and only that object (a uid precondition): a child that is
/// no longer wanted (a Service for standbys after scaling to one instance).
pub async fn delete_child<K, C>(
    ctx: &Context,
    owner: &K,
    owned: &Owned<C>,
    namespace: &str,
    name: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>,
    C: Child,
{
    let Some(cached) = owned.get(namespace, name).filter(|c| children::controlled_by(c.as_ref(), owner)) else {
        return Ok(());
    };
    if delete_exactly(ctx, cached.as_ref()).await? {
        ctx.events.deleted(&owner.object_ref(&()), cached.object_ref(&()));
    }
    Ok(())
}

/// Delete `target` — that very object (a uid precondition), and what it owns: whether it was deleted
/// now (not when it was gone already, or replaced by another of its name).
pub async fn delete_exactly<C>(ctx: &Context, target: &C) -> Result<bool, Error>
where
    C: crate::guard::Reconciled,
{
    // In the background: a Job's pods go with it (the API's default for Jobs orphans them).
    delete_with(ctx, target, DeleteParams::background(), None).await
}

/// Delete `target` of `owner` — that very object (a uid precondition) — in the
/// foreground: it stays in the API, with a `deletionTimestamp`, until the garbage
/// collector has deleted what it owns (a Deployment's ReplicaSets and their pods, a
/// StatefulSet's pods, a PostgreSQL's StatefulSet and Services), so "gone" means gone
/// with its pods. A `Deleted` event on `owner` names it.
pub async fn delete_in_foreground<K, C>(ctx: &Context, owner: &K, target: &C) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>,
    C: crate::guard::Reconciled,
{
    if delete_with(ctx, target, DeleteParams::foreground(), None).await? {
        ctx.events.deleted(&owner.object_ref(&()), target.object_ref(&()));
    }
    Ok(())
}

/// Delete `target` — that very object — at once, without its grace period: a pod on
/// a lost node, whose kubelet will never confirm that it ended.
pub async fn delete_at_once<C>(ctx: &Context, target: &C) -> Result<bool, Error>
where
    C: crate::guard::Reconciled,
{
    delete_with(ctx, target, DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::background() }, None).await
}

/// Delete `target` only as it was seen: its uid and its resourceVersion are
/// preconditions. For a decision taken on a cache that may lag behind the apiserver
/// (restart this pod): when the object has changed since — already being deleted by
/// the previous reconcile, say — nothing is done and `Ok(false)` says so, and the
/// change's watch event brings the decision back on what is current. Without it, a
/// pod already terminating is "deleted" a second time, with a second event.
pub async fn delete_as_seen<C>(ctx: &Context, target: &C) -> Result<bool, Error>
where
    C: crate::guard::Reconciled,
{
    let seen = target.meta().resource_version.clone();
    delete_with(ctx, target, DeleteParams::background(), seen).await
}

/// Delete `target` — that very object (its uid), and with `resource_version`, only as
/// it was then.
async fn delete_with<C>(
    ctx: &Context,
    target: &C,
    params: DeleteParams,
    resource_version: Option<String>,
) -> Result<bool, Error>
where
    C: crate::guard::Reconciled,
{
    let (namespace, name) = (target.namespace().unwrap_or_default(), target.name_any());
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: target.meta().uid.clone(), resource_version }),
        ..params
    };
    match Api::<C>::namespaced(ctx.client.clone(), &namespace).delete(&name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(source) => Err(Error::Apply { kind: C::kind(&()).into_owned(), name, source }),
    }
}

/// Merge `patch` into `target` — that very object: its uid is a precondition, so a
/// replacement is left alone — as the field manager of `K`'s controller. For fields
/// of objects bosun does not apply whole: a claim's storage request, a pod's label.
pub async fn merge_into<K, C>(ctx: &Context, target: &C, patch: serde_json::Value) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: crate::guard::Reconciled,
{
    let (ns, name) = (target.namespace().unwrap_or_default(), target.name_any());
    let mut patch = patch;
    patch["metadata"]["uid"] = serde_json::json!(target.meta().uid);
    let params = PatchParams { field_manager: Some(field_manager::<K>()), ..PatchParams::default() };
    Api::<C>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Apply { kind: C::kind(&()).into_owned(), name, source })
}

/// [`merge_into`] for the cluster-scoped object `name` of kind `C` whose uid is `uid`
/// (a volume bosun keeps for a replaced instance).
pub async fn merge_into_cluster<K, C>(
    ctx: &Context,
    (name, uid): (&str, &str),
    patch: serde_json::Value,
) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope> + DeserializeOwned + Clone + Debug,
{
    let mut patch = patch;
    patch["metadata"]["uid"] = serde_json::json!(uid);
    let params = PatchParams { field_manager: Some(field_manager::<K>()), ..PatchParams::default() };
    Api::<C>::all(ctx.client.clone()).patch(name, &params, &Patch::Merge(&patch)).await.map_err(|source| Error::Apply {
        kind: C::kind(&()).into_owned(),
        name: name.to_owned(),
        source,
    })
}

/// Apply `fields` (a partial object: apiVersion, kind, and the fields alone) to the
/// object `namespace/name` of kind `C` whose uid is `uid`, as `manager`: for fields
/// bosun keeps on objects that are not its own (a ConfigMap's hash in a consumer's pod
/// template, under a field manager of that ConfigMap's). Only that very object: the
/// uid is a precondition. `Ok(false)` when it is gone or replaced: nothing to write.
pub async fn apply_fields<C>(
    ctx: &Context,
    manager: &str,
    (namespace, name, uid): (&str, &str, &str),
    fields: serde_json::Value,
) -> Result<bool, Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
{
    let mut fields = fields;
    fields["apiVersion"] = serde_json::json!(C::api_version(&()));
    fields["kind"] = serde_json::json!(C::kind(&()));
    fields["metadata"] = serde_json::json!({"name": name, "namespace": namespace, "uid": uid});
    match Api::<C>::namespaced(ctx.client.clone(), namespace)
        .patch(name, &params(manager), &Patch::Apply(&fields))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(source) => Err(Error::Apply { kind: C::kind(&()).into_owned(), name: name.to_owned(), source }),
    }
}

/// A resourceVersion no stored object has (etcd revisions are positive int64 and
/// never reach the maximum): as the precondition of an apply it means "create only".
/// The apiserver ignores a resourceVersion when the apply creates the object, and
/// refuses the apply (409) when any object holds the name.
const CREATE_ONLY: &str = "9223372036854775807";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_managers_are_per_controller() {
        use bosun_api::webapp::{apps_v1, example_v1};
        assert_eq!(field_manager::<apps_v1::WebApp>(), "bosun-webapp.apps.example.com");
        assert_ne!(field_manager::<apps_v1::WebApp>(), field_manager::<example_v1::WebApp>());
    }

    #[test]
    fn create_only_is_a_resource_version_beyond_any_revision() {
        assert_eq!(CREATE_ONLY.parse::<i64>().ok(), Some(i64::MAX));
    }
}
