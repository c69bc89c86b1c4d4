//! Reading a child as the apiserver has it: only when the caches cannot answer — an
//! apply found a name taken by an object bosun's watches do not see (no bosun label),
//! or the object bosun applied before is gone.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::error::Error;

/// The metadata of the `C` named `name` in `namespace`, or `None` when there is none.
pub async fn metadata<C>(client: &Client, namespace: &str, name: &str) -> Result<Option<PartialObjectMeta<C>>, Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
{
    Api::<C>::namespaced(client.clone(), namespace)
        .get_metadata_opt(name)
        .await
        .map_err(|source| Error::Read { what: format!("{} {namespace}/{name}", C::kind(&())), source })
}
