//! Reading a child as it is: the dereference stage of a pipeline, the only one that
//! reads the cluster.
//!
//! Reads go to the apiserver rather than a cache on purpose: children are watched as
//! metadata only, and a decision taken before an apply (is this a shrink? did the data
//! change?) must not rest on a stale copy.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::error::Error;

/// The `C` named `name` in `namespace`, or `None` when there is none.
pub async fn current<C>(client: &Client, namespace: &str, name: &str) -> Result<Option<C>, Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
{
    Api::<C>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::Read { what: format!("{} {namespace}/{name}", C::kind(&())), source })
}

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
