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
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::children::{self, Claim, Owned, Parent};
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
    let name = child.name_any();
    let ns = child.namespace().unwrap_or_default();
    Api::<C>::namespaced(client.clone(), &ns)
        .patch(&name, &params(manager), &Patch::Apply(child))
        .await
        .map_err(|source| Error::Apply { kind: C::kind(&()).into_owned(), name, source })
}

/// Apply `status` to the status subresource of `owner`.
pub async fn apply_status<K, S>(client: &Client, owner: &K, status: &S) -> Result<(), Error>
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
        .map(|_| ())
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

/// Apply `child` of `owner` — only if the name is free or the object is the owner's
/// (see [`crate::children`]) — and publish a `Created`/`Updated` event on the owner
/// when the apply created or changed it. `owned` is the cache of the child's kind.
///
/// A name held by someone else is an [`Error::NameConflict`] and nothing is written.
pub async fn apply_child<K, C>(ctx: &Context, owner: &K, owned: &Owned<C>, mut child: C) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned + Clone + Debug,
{
    let ns = child.namespace().unwrap_or_default();
    let name = child.name_any();
    let cached = owned.get(&ns, &name);
    match apply_claimed(ctx, owner, &mut child, cached.as_ref().map(|c| &c.metadata)).await {
        // The cache did not know the name's holder (not yet, or never: no bosun label):
        // read it and judge once more.
        Err(err) if err.is_precondition_failed() => {
            let stored = read::metadata::<C>(&ctx.client, &ns, &name).await?;
            apply_claimed(ctx, owner, &mut child, stored.as_ref().map(|s| &s.metadata)).await
        }
        result => result,
    }
}

/// Claim `child`'s name from `existing`, apply with the claim's precondition, and
/// publish the event of what the apply did.
async fn apply_claimed<K, C>(ctx: &Context, owner: &K, child: &mut C, existing: Option<&ObjectMeta>) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned + Clone + Debug,
{
    let manager = field_manager::<K>();
    let claim = claim_child(owner, child, existing)?;
    let meta = child.meta_mut();
    (meta.uid, meta.resource_version) = match &claim {
        Claim::Ours { uid } => (Some(uid.clone()), None),
        _ => (None, Some(CREATE_ONLY.to_owned())),
    };
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let applied = apply(&ctx.client, &manager, child).await?;
    let change = match claim {
        Claim::Create => ChildChange::Created,
        _ if applied.resource_version() == existing.and_then(|e| e.resource_version.clone()) => ChildChange::Unchanged,
        _ => change_of(&applied, &manager, started),
    };
    if change != ChildChange::Unchanged {
        ctx.events.child(&owner.object_ref(&()), change, applied.object_ref(&())).await;
    }
    Ok(applied)
}

/// A resourceVersion no stored object has (etcd revisions are positive int64 and
/// never reach the maximum): as the precondition of an apply it means "create only".
/// The apiserver ignores a resourceVersion when the apply creates the object, and
/// refuses the apply (409) when any object holds the name.
const CREATE_ONLY: &str = "9223372036854775807";

/// Whether an apply that moved the resourceVersion changed bosun's own fields (a
/// resourceVersion also moves when another writer changed something in between):
/// the apiserver moves the `time` of `manager`'s managedFields entry only when its
/// fields changed; a time at or after the start of the apply (less a second: the stamps
/// have one-second precision) means this apply changed them.
fn change_of<C: Resource>(applied: &C, manager: &str, since: jiff::Timestamp) -> ChildChange {
    let meta = applied.meta();
    let ours = meta.managed_fields.iter().flatten().find(|m| m.manager.as_deref() == Some(manager));
    match ours.and_then(|m| m.time.as_ref()).map(|t| t.0) {
        Some(stamped) if stamped >= since => ChildChange::Updated,
        _ => ChildChange::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

    use super::*;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
    }

    fn cm(stamped: Option<(&str, i64)>) -> ConfigMap {
        let managed = stamped.map(|(manager, t)| {
            vec![ManagedFieldsEntry { manager: Some(manager.into()), time: Some(Time(at(t))), ..Default::default() }]
        });
        ConfigMap { metadata: ObjectMeta { managed_fields: managed, ..Default::default() }, ..Default::default() }
    }

    #[test]
    fn an_update_is_told_from_the_managers_own_stamp() {
        assert_eq!(change_of(&cm(Some(("bosun-x", 100))), "bosun-x", at(100)), ChildChange::Updated);
        assert_eq!(change_of(&cm(Some(("bosun-x", 60))), "bosun-x", at(100)), ChildChange::Unchanged);
        // Someone else's change is not bosun's.
        assert_eq!(change_of(&cm(Some(("kubectl", 100))), "bosun-x", at(100)), ChildChange::Unchanged);
        assert_eq!(change_of(&cm(None), "bosun-x", at(100)), ChildChange::Unchanged);
    }

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
