//! Server-side apply: the only way bosun writes.
//!
//! Children and status are applied with one field manager and `force`, so bosun owns
//! exactly the fields it sets and takes them back from anyone who edited them (drift
//! correction), while fields it never sets stay with whoever set them. An apply that
//! changes nothing is not a write: the apiserver keeps the resourceVersion.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::Error;
use crate::events::ChildChange;

/// The field manager of everything bosun applies.
pub const FIELD_MANAGER: &str = "bosun";

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Apply a namespaced child built by a pure builder; returns it as stored.
pub async fn apply<C>(client: &Client, child: &C) -> Result<C, Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = child.name_any();
    let ns = child.namespace().unwrap_or_default();
    Api::<C>::namespaced(client.clone(), &ns)
        .patch(&name, &params(), &Patch::Apply(child))
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
        .patch_status(&owner.name_any(), &params(), &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(Error::Status)
}

/// Apply `child` of `owner` and publish a `Created`/`Updated` event on the owner when
/// the apply changed it.
///
/// Whether bosun's apply changed the object is read from the object itself: the
/// apiserver moves the `time` of bosun's managedFields entry only when bosun's fields
/// changed; a time at or after the start of this apply (less a second: the stamps have
/// one-second precision) means this apply changed it. It was created by this apply when
/// that time is also its `creationTimestamp`. An update within the second of the
/// creation reads as part of the creation.
pub async fn apply_child<K, C>(ctx: &Context, owner: &K, child: &C) -> Result<C, Error>
where
    K: Resource<DynamicType = ()>,
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + DeserializeOwned + Clone + Debug,
{
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let applied = apply(&ctx.client, child).await?;
    let change = change_of(&applied, started);
    if change != ChildChange::Unchanged {
        ctx.events.child(&owner.object_ref(&()), change, applied.object_ref(&())).await;
    }
    Ok(applied)
}

fn change_of<C: Resource>(applied: &C, since: jiff::Timestamp) -> ChildChange {
    let meta = applied.meta();
    let ours = meta.managed_fields.iter().flatten().find(|m| m.manager.as_deref() == Some(FIELD_MANAGER));
    let Some(stamped) = ours.and_then(|m| m.time.as_ref()).map(|t| t.0) else {
        return ChildChange::Unchanged;
    };
    if stamped < since {
        ChildChange::Unchanged
    } else if meta.creation_timestamp.as_ref().is_some_and(|c| c.0 == stamped) {
        ChildChange::Created
    } else {
        ChildChange::Updated
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

    fn cm(created: i64, stamped: Option<(&str, i64)>) -> ConfigMap {
        let managed = stamped.map(|(manager, t)| {
            vec![ManagedFieldsEntry { manager: Some(manager.into()), time: Some(Time(at(t))), ..Default::default() }]
        });
        ConfigMap {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(at(created))),
                managed_fields: managed,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn tells_created_updated_and_unchanged_apart() {
        assert_eq!(change_of(&cm(100, Some(("bosun", 100))), at(100)), ChildChange::Created);
        assert_eq!(change_of(&cm(50, Some(("bosun", 100))), at(100)), ChildChange::Updated);
        // Updated one second after it was created: still an update.
        assert_eq!(change_of(&cm(99, Some(("bosun", 100))), at(99)), ChildChange::Updated);
        assert_eq!(change_of(&cm(50, Some(("bosun", 60))), at(100)), ChildChange::Unchanged);
        // Someone else's change is not bosun's.
        assert_eq!(change_of(&cm(50, Some(("kubectl", 100))), at(100)), ChildChange::Unchanged);
    }
}
