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

use crate::error::Error;

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
