//! Reading a child as the apiserver has it: only when the caches cannot answer — an
//! apply found a name taken by an object bosun's watches do not see (no bosun label),
//! or the object bosun applied before is gone — and the pods of a finished Job, whose
//! results no watch carries.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::children::{Child, Owned};
use crate::error::Error;

/// The pods of the Job `namespace/job` (by the label the Job controller sets), newest
/// first: where a run's result is, in its termination message.
pub async fn job_pods(client: &Client, namespace: &str, job: &str) -> Result<Vec<Pod>, Error> {
    let mut pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .map_err(|source| Error::Read { what: format!("the pods of Job {namespace}/{job}"), source })?
        .items;
    pods.sort_by(|a, b| {
        b.metadata.creation_timestamp.as_ref().map(|t| t.0).cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    Ok(pods)
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

/// The `C` named `name` in `namespace`: bosun's cached copy, else the apiserver's (an
/// object the user made, which no bosun watch sees), else `None`.
pub async fn cached_or_get<C: Child>(
    client: &Client,
    owned: &Owned<C>,
    namespace: &str,
    name: &str,
) -> Result<Option<C>, Error> {
    if let Some(cached) = owned.get(namespace, name) {
        return Ok(Some((*cached).clone()));
    }
    Api::<C>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::Read { what: format!("{} {namespace}/{name}", C::kind(&())), source })
}
