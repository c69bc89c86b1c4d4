//! Reading a child as the apiserver has it: only when the caches cannot answer — an
//! apply found a name taken by an object bosun's watches do not see (no bosun label),
//! or the object bosun applied before is gone — the pods of a Job, whose results and
//! progress no watch carries, the Warning events of a pod that does not start, and the
//! keys of a Secret a run needs.

use std::fmt::Debug;

use bosun_resources::pods::{self, Progress};
use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::children::{Child, Owned};
use crate::error::Error;

/// The pods of the Job `namespace/job` (by the label the Job controller sets), newest
/// first: where a run's result is, in its termination message.
pub async fn job_pods(client: &Client, namespace: &str, job: &str) -> Result<Vec<Pod>, Error> {
    let selector = format!("batch.kubernetes.io/job-name={job}");
    let mut pods = labelled_pods(client, namespace, &selector, &format!("the pods of Job {namespace}/{job}")).await?;
    pods.sort_by(|a, b| {
        b.metadata.creation_timestamp.as_ref().map(|t| t.0).cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    Ok(pods)
}

/// The last `lines` lines of `container`'s log in the pod `namespace/pod`: where a
/// running backup tells its progress, which no status carries.
pub async fn log_tail(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: &str,
    lines: i64,
) -> Result<String, Error> {
    let params =
        kube::api::LogParams { container: Some(container.to_owned()), tail_lines: Some(lines), ..Default::default() };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(pod, &params)
        .await
        .map_err(|source| Error::Read { what: format!("the log of pod {namespace}/{pod}"), source })
}

async fn labelled_pods(client: &Client, namespace: &str, selector: &str, what: &str) -> Result<Vec<Pod>, Error> {
    Ok(Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|source| Error::Read { what: what.to_owned(), source })?
        .items)
}

/// The pods in `namespace` with every label of `labels`: one list.
pub async fn pods_labelled(
    client: &Client,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
    what: &str,
) -> Result<Vec<Pod>, Error> {
    let selector = labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    labelled_pods(client, namespace, &selector, what).await
}

/// Why a pod of `workload` (a Deployment or StatefulSet, by its pod labels) cannot
/// start, if one cannot (the first, by name): one list of its pods, for a workload that
/// is not ready.
pub async fn workload_stuck(
    client: &Client,
    now: Timestamp,
    namespace: &str,
    workload: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<Option<String>, Error> {
    let mut pods = pods_labelled(client, namespace, labels, &format!("the pods of {namespace}/{workload}")).await?;
    pods.sort_by_key(|p| p.name_any());
    for pod in &pods {
        if let Some(cause) = pod_stuck(client, now, namespace, Some(pod)).await? {
            return Ok(Some(cause));
        }
    }
    Ok(None)
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

/// The reasons and notes of the Warning events about the pod `namespace/pod`, oldest
/// first: what the kubelet or the scheduler said of a pod that does not start (a volume
/// that cannot be mounted shows nowhere else).
pub async fn pod_warnings(client: &Client, namespace: &str, pod: &str) -> Result<Vec<(String, String)>, Error> {
    let selector = format!("involvedObject.kind=Pod,involvedObject.name={pod},type=Warning");
    let mut events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|source| Error::Read { what: format!("the events of pod {namespace}/{pod}"), source })?
        .items;
    let when = |e: &Event| {
        e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)).or(e
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0))
    };
    events.sort_by_key(when);
    Ok(events.into_iter().map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default())).collect())
}

/// The keys of the Secret `namespace/name`, or `None` when there is none. Its values
/// are dropped as soon as it is read.
pub async fn secret_keys(client: &Client, namespace: &str, name: &str) -> Result<Option<Vec<String>>, Error> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::Read { what: format!("Secret {namespace}/{name}"), source })?;
    Ok(secret.map(|s| {
        let data = s.data.into_iter().flat_map(|d| d.into_keys());
        data.chain(s.string_data.into_iter().flat_map(|d| d.into_keys())).collect()
    }))
}

/// How often a parent with a pod that has not started yet (a backup or restore run, a
/// database instance) is looked at, for one that cannot start: nothing else triggers
/// it, as a pod that waits changes neither its Job nor its StatefulSet.
pub const POD_RECHECK: std::time::Duration = pods::WARNING_AFTER;

/// Why `pod` (the newest of a run, an instance of a database) cannot start or make
/// progress, if it cannot, at `now`: what its status says, at once or (the scheduler's
/// words) once it has waited [`pods::WARNING_AFTER`], else then what the Warning events
/// about it say.
pub async fn pod_stuck(
    client: &Client,
    now: Timestamp,
    namespace: &str,
    pod: Option<&Pod>,
) -> Result<Option<String>, Error> {
    let Some(pod) = pod else { return Ok(None) };
    match pods::progress(pod) {
        Progress::Fine => Ok(None),
        Progress::Stuck(cause) => Ok(Some(cause)),
        Progress::Waiting { since, said } => {
            if now.duration_since(since).unsigned_abs() < pods::WARNING_AFTER {
                return Ok(None);
            }
            let name = pod.name_any();
            let warnings = match said {
                Some(_) => Vec::new(),
                None => pod_warnings(client, namespace, &name).await?,
            };
            Ok(pods::waited_too_long(&name, since, said.as_deref(), now, &warnings))
        }
    }
}

/// The first Secret of `needs` in `namespace` that does not exist or lacks a key, as
/// a message naming the field, the Secret and the key.
pub async fn credentials_missing(
    client: &Client,
    namespace: &str,
    needs: &[bosun_resources::backup::SecretNeed],
) -> Result<Option<String>, Error> {
    let mut found = Vec::with_capacity(needs.len());
    for need in needs {
        found.push((need.name.as_str(), secret_keys(client, namespace, &need.name).await?));
    }
    Ok(bosun_resources::backup::missing_credentials(needs, namespace, |name| {
        found.iter().find(|(n, _)| *n == name).and_then(|(_, keys)| keys.clone())
    }))
}
