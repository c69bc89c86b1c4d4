//! What the local control plane's health checks ask of the apiserver, through kube's
//! client: the objects every cluster needs (fake nodes, the default StorageClass; the
//! real node's DNS Service and RBAC), created whenever a check finds them missing (a
//! test that deleted a fake node does not break the next `up`), and the rounds of
//! checks `up` waits on.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::admissionregistration::v1beta1::{MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::{Namespace, Node, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::cluster::Cluster;
use crate::controlplane::{
    DNS_SERVICE_IP, FAKE_NODES, LOCAL_STORAGE_CLASS, LOCAL_STORAGE_PROVISIONER, NODE_IP, NODE_LABEL, NODE_NAME,
    NODES_LABEL, STORAGE_CLASS, STORAGE_PROVISIONER,
};

/// The namespace placement policy's name (and its binding's).
pub const PLACEMENT_POLICY: &str = "bosun-local-node-placement";
/// The namespace annotation PodNodeSelector reads (the placement of its pods).
pub const NODE_SELECTOR: &str = "scheduler.alpha.kubernetes.io/node-selector";
/// The label the peer benchmark (`../shared/peer`) gives its namespaces.
const PEER_BENCH_LABEL: &str = "bosun-peer-bench";
use crate::supervise::{StateDir, Waiting, http_status, waiting};

/// A client of the apiserver from a kubeconfig, with short timeouts (a check that
/// hangs is a check that failed). Made inside the caller's runtime.
pub async fn client(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(Client::try_from(config)?)
}

/// GET `path` of a component serving HTTPS on 127.0.0.1 with a certificate of its
/// own (the controller-manager, the scheduler): anonymous, as their health is.
async fn healthz(port: u16, path: &str) -> bool {
    let Ok(url) = format!("https://127.0.0.1:{port}").parse() else { return false };
    let mut config = Config::new(url);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(3));
    let Ok(client) = Client::try_from(config) else { return false };
    get(&client, path).await.is_ok()
}

/// A raw GET; an error unless the status is 2xx.
async fn get(client: &Client, path: &str) -> Result<String> {
    Ok(client.request_text(http::Request::get(path).body(Vec::new())?).await?)
}

// --- the objects ----------------------------------------------------------------

/// A typed object (the shape checked by its type), ready to create.
struct Object {
    resource: ApiResource,
    namespace: Option<String>,
    object: DynamicObject,
}

fn object<K>(value: serde_json::Value) -> Result<Object>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    let typed: K = serde_json::from_value(value).with_context(|| format!("a {} of the bootstrap", K::kind(&())))?;
    let object: DynamicObject = serde_json::from_value(serde_json::to_value(&typed)?)?;
    Ok(Object { resource: ApiResource::erase::<K>(&()), namespace: object.metadata.namespace.clone(), object })
}

/// The fake nodes (played by kwok because of its annotation) and the default
/// StorageClass; with the real node, its DNS Service (CoreDNS runs on the node's
/// address) and the RBAC of CoreDNS and of the apiserver calling kubelets.
fn objects(with_node: bool) -> Result<Vec<Object>> {
    let mut all = Vec::new();
    for (i, name) in FAKE_NODES.iter().enumerate() {
        // Each node gets its own pod CIDR (/18: 16382 addresses) so kwok can hand
        // out distinct pod IPs for the 8,000 pods a node takes (`make bench N=10000`
        // needs 10,000 pods). No taints: any ordinary pod may land there. The
        // addresses are made up; kwok copies the InternalIP into the pods' hostIP.
        let cidr = format!("10.244.{}.0/18", i * 64);
        let resources = json!({"cpu": "512", "memory": "4Ti", "pods": "8000", "ephemeral-storage": "16Ti"});
        all.push(object::<Node>(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name, "node-role.kubernetes.io/agent": "",
                },
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": format!("10.240.0.{}", 10 + i)},
                    {"type": "Hostname", "address": name},
                ],
                "allocatable": resources, "capacity": resources,
            },
        }))?);
    }
    // allowVolumeExpansion lets the apiserver accept raised requests on claims (the
    // PersistentVolumeClaimResize admission plugin checks it); nothing resizes the
    // fake volumes, so status.capacity keeps the old size.
    all.push(object::<StorageClass>(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": STORAGE_PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))?);
    all.push(object::<StorageClass>(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": LOCAL_STORAGE_CLASS},
        "provisioner": LOCAL_STORAGE_PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
    }))?);
    if !with_node {
        return Ok(all);
    }
    let dns_ports =
        json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]);
    all.push(object::<Service>(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": DNS_SERVICE_IP, "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
        ]},
    }))?);
    all.push(object::<EndpointSlice>(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kube-dns-host", "namespace": "kube-system", "labels": {
            "kubernetes.io/service-name": "kube-dns",
            "endpointslice.kubernetes.io/managed-by": "localcluster.bosun.dev",
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": true}, "nodeName": NODE_NAME}],
        "ports": dns_ports,
    }))?);
    all.push(object::<ClusterRole>(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bosun:coredns"},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }))?);
    for (name, role, user) in [
        ("bosun:coredns", "bosun:coredns", "bosun:coredns"),
        ("bosun:apiserver-kubelet-client", "system:kubelet-api-admin", "kube-apiserver-kubelet-client"),
    ] {
        all.push(object::<ClusterRoleBinding>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))?);
    }
    Ok(all)
}

/// The annotations that send a namespace's pods to the real node (PodNodeSelector and
/// PodTolerationRestriction read them when a pod is made) or, for `fake`, leave them
/// where the scheduler puts them: the fake nodes, as the real node is tainted.
pub fn placement_annotations(real: bool) -> serde_json::Value {
    let tolerations = json!([{"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
    let (selector, tolerations) =
        if real { (format!("{NODE_LABEL}=true"), tolerations.to_string()) } else { (String::new(), "[]".into()) };
    json!({
        NODE_SELECTOR: selector,
        "scheduler.alpha.kubernetes.io/defaultTolerations": tolerations,
    })
}

/// With the real node, what the tutorials show runs for real: a namespace made without
/// a placement of its own (the node-selector annotation) sends its pods to the real
/// node, unless labelled `bosun.dev/nodes=fake` — or `bosun-peer-bench` (the peer
/// benchmark's namespaces, which hold thousands of pods). A change of the label places
/// the namespace again (`kubectl label ns X bosun.dev/nodes=fake --overwrite` moves the
/// pods made after it); an edit of the annotations themselves is kept. The placement
/// is plain annotations on the namespace, so `kubectl get ns X -o yaml` shows why a
/// pod went where it did.
fn placement_policy() -> Result<Vec<Object>> {
    // What a namespace asks for: `real`, `fake`, `bench` (the peer's label) or ''.
    let choice = |o: &str| {
        format!(
            "(has({o}.metadata.labels) && '{NODES_LABEL}' in {o}.metadata.labels ? {o}.metadata.labels['{NODES_LABEL}'] \
             : has({o}.metadata.labels) && '{PEER_BENCH_LABEL}' in {o}.metadata.labels ? 'bench' : '')"
        )
    };
    let (new, old) = (choice("object"), choice("oldObject"));
    let unplaced = format!("!has(object.metadata.annotations) || !('{NODE_SELECTOR}' in object.metadata.annotations)");
    // Made with a choice or without a placement; or its choice changed (an edit of the
    // annotations themselves is left alone: whoever makes it means it).
    let applies =
        format!("request.operation == 'CREATE' ? ({new} != '' || {unplaced}) : ({new} != '' && {new} != {old})");
    let cel = |v: serde_json::Value| -> String {
        let pairs: Vec<String> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("'{k}': '{}'", v.as_str().unwrap_or_default()))
            .collect();
        format!("{{{}}}", pairs.join(", "))
    };
    let fake = format!("{new} == 'fake' || {new} == 'bench'");
    let policy = object::<MutatingAdmissionPolicy>(json!({
        "apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": PLACEMENT_POLICY},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["namespaces"],
            }]},
            "matchConditions": [{"name": "new-or-a-changed-choice", "expression": applies}],
            "variables": [{"name": "fake", "expression": fake}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": format!(
                    "Object{{metadata: Object.metadata{{annotations: variables.fake ? {} : {}}}}}",
                    cel(placement_annotations(false)),
                    cel(placement_annotations(true)),
                )},
            }],
        },
    }))?;
    let binding = object::<MutatingAdmissionPolicyBinding>(json!({
        "apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": PLACEMENT_POLICY},
        "spec": {"policyName": PLACEMENT_POLICY},
    }))?;
    Ok(vec![policy, binding])
}

/// Creates every bootstrap object that does not exist (nothing existing is
/// changed); failures go to `logs/bootstrap.log` (the next round tries again).
async fn bootstrap(dir: &StateDir, client: &Client, with_node: bool) {
    let mut errors = String::new();
    match objects(with_node) {
        Ok(objects) => {
            for o in objects {
                let api = api(client, o.namespace.as_deref(), &o.resource);
                match api.create(&PostParams::default(), &o.object).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => errors.push_str(&format!(
                        "{} {}: {e}\n",
                        o.resource.kind,
                        o.object.metadata.name.as_deref().unwrap_or("?")
                    )),
                    Ok(_) => {}
                }
            }
        }
        Err(e) => errors.push_str(&format!("{e:#}\n")),
    }
    let _ = std::fs::write(dir.log("bootstrap"), errors);
}

/// The API of `resource`, in `namespace` or cluster-wide.
fn api(client: &Client, namespace: Option<&str>, resource: &ApiResource) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

// --- checks ---------------------------------------------------------------------

async fn exists<K>(client: &Client, namespace: Option<&str>, name: &str) -> bool
where
    K: Resource<DynamicType = ()>,
{
    matches!(api(client, namespace, &ApiResource::erase::<K>(&())).get_opt(name).await, Ok(Some(_)))
}

/// The node's Ready condition and its taints' keys; None when it cannot be read.
async fn node_state(client: &Client, name: &str) -> Option<(bool, Vec<String>)> {
    let node = Api::<Node>::all(client.clone()).get(name).await.ok()?;
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.key).collect();
    Some((ready, taints))
}

/// What a restarted apiserver has to pass: etcd answers and the apiserver is ready.
pub async fn apiserver(s: &Cluster, admin: &Client) -> Result<(), Waiting> {
    if http_status(&format!("http://127.0.0.1:{}/health", s.ports.etcd)) != Some(200) {
        return Err(waiting("etcd /health", "etcd"));
    }
    get(admin, "/readyz").await.map_err(|_| waiting("kube-apiserver /readyz", "kube-apiserver"))?;
    Ok(())
}

/// One round of the whole cluster's checks, in the order things come up.
pub async fn cluster(dir: &StateDir, s: &Cluster, admin: &Client) -> Result<(), Waiting> {
    apiserver(s, admin).await?;
    let with_node = s.node.is_ok();
    // Created as soon as the apiserver is up, while the others still start.
    let mut missing = !exists::<StorageClass>(admin, None, STORAGE_CLASS).await;
    missing |= !exists::<StorageClass>(admin, None, LOCAL_STORAGE_CLASS).await;
    for n in FAKE_NODES {
        missing |= !exists::<Node>(admin, None, n).await;
    }
    if missing {
        bootstrap(dir, admin, with_node).await;
        return Err(waiting("fake nodes and StorageClass to be created", "bootstrap"));
    }
    if !healthz(s.ports.kube_controller_manager, "/healthz").await {
        return Err(waiting("kube-controller-manager /healthz", "kube-controller-manager"));
    }
    if !healthz(s.ports.kube_scheduler, "/healthz").await {
        return Err(waiting("kube-scheduler /healthz", "kube-scheduler"));
    }
    // Ready and untainted: the node lifecycle controller removes the not-ready taint
    // a few seconds after kwok reports Ready; until then pods stay Pending.
    for n in FAKE_NODES {
        match node_state(admin, n).await {
            Some((true, taints)) if taints.is_empty() => {}
            Some((true, taints)) => {
                return Err(waiting(
                    format!("node {n} to lose its taints ({})", taints.join(" ")),
                    "kube-controller-manager",
                ));
            }
            _ => return Err(waiting(format!("node {n} to become Ready"), "kwok")),
        }
    }
    if !exists::<ServiceAccount>(admin, Some("default"), "default").await {
        return Err(waiting("ServiceAccount default/default", "kube-controller-manager"));
    }
    if with_node { node(dir, s, admin).await } else { Ok(()) }
}

/// The real nodes (but one a test broke on purpose): Ready, untainted but for their
/// own taint, kube-proxy healthy; the DNS Service there.
async fn node(dir: &StateDir, s: &Cluster, admin: &Client) -> Result<(), Waiting> {
    for n in s.real_nodes().into_iter().filter(|n| n.broken(dir.path()).is_none()) {
        let name = n.name;
        match node_state(admin, name).await {
            Some((true, taints)) if taints == [NODE_LABEL] => {}
            Some((true, taints)) => {
                return Err(waiting(
                    format!("real node {name} to have only its own taint ({})", taints.join(" ")),
                    "kube-controller-manager",
                ));
            }
            _ => return Err(waiting(format!("real node {name} to become Ready"), n.kubelet.name)),
        }
        let healthz = format!("http://{}:{}/healthz", n.probe_host(), s.ports.kube_proxy_healthz);
        if http_status(&healthz) != Some(200) {
            return Err(waiting(format!("{} /healthz", n.kube_proxy.name), n.kube_proxy.name));
        }
    }
    if !exists::<Service>(admin, Some("kube-system"), "kube-dns").await {
        bootstrap(dir, admin, true).await;
        return Err(waiting("kube-dns Service to be created", "bootstrap"));
    }
    placement(admin).await
}

/// The placement policy in force (a namespace made now, in a dry run, comes back
/// placed on the real node), and the `default` namespace — older than the policy —
/// placed as a new one would be, unless someone placed it already.
async fn placement(admin: &Client) -> Result<(), Waiting> {
    // Applied, not only created when missing: a cluster started by an older checkout
    // gets this one's policy (an unchanged apply writes nothing).
    let applied = async {
        for o in placement_policy()? {
            let name = o.object.metadata.name.clone().unwrap_or_default();
            api(admin, None, &o.resource)
                .patch(&name, &PatchParams::apply("localcluster").force(), &Patch::Apply(&o.object))
                .await?;
        }
        anyhow::Ok(())
    };
    if applied.await.is_err() {
        return Err(waiting("the namespace placement policy to be applied", "kube-apiserver"));
    }
    let namespaces = Api::<Namespace>::all(admin.clone());
    let probe: Namespace = serde_json::from_value(json!({"metadata": {"name": "bosun-placement-check"}}))
        .map_err(|_| waiting("a namespace to try the placement policy with", "bootstrap"))?;
    let tried = namespaces.create(&PostParams { dry_run: true, ..PostParams::default() }, &probe).await;
    let selector = |ns: &Namespace| ns.metadata.annotations.as_ref().and_then(|a| a.get(NODE_SELECTOR)).cloned();
    let wanted = format!("{NODE_LABEL}=true");
    if !tried.as_ref().is_ok_and(|ns| selector(ns).as_deref() == Some(wanted.as_str())) {
        return Err(waiting("the namespace placement policy to take effect", "kube-apiserver"));
    }
    let default = namespaces.get("default").await.map_err(|_| waiting("namespace default", "kube-apiserver"))?;
    let chosen = default.metadata.labels.as_ref().is_some_and(|l| l.contains_key(NODES_LABEL));
    if !chosen && selector(&default).is_none() {
        let patch = json!({"metadata": {"labels": {NODES_LABEL: "real"}, "annotations": placement_annotations(true)}});
        namespaces
            .patch("default", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|_| waiting("namespace default to be placed on the real node", "kube-apiserver"))?;
    }
    Ok(())
}

/// The apiserver's failing readiness checks (`/readyz?verbose`, without the passing ones).
pub async fn failing_readyz(admin: &Client) -> String {
    let text =
        match admin.request_text(http::Request::get("/readyz?verbose").body(Vec::new()).unwrap_or_default()).await {
            Ok(t) => t,
            Err(kube::Error::Api(s)) => s.message.clone(),
            Err(e) => e.to_string(),
        };
    text.lines().filter(|l| !l.starts_with("[+]")).collect::<Vec<_>>().join("\n")
}

/// The HTTP status of the apiserver's `/readyz` as text, for `status`.
pub async fn readyz(admin: &Client) -> String {
    match get(admin, "/readyz").await {
        Ok(_) => "200".into(),
        Err(e) => match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(s)) => s.code.to_string(),
            _ => "unreachable".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_bootstrap_objects_are_valid_typed_objects_with_the_node_only_when_it_runs() {
        let without = objects(false).unwrap();
        let kinds: Vec<&str> = without.iter().map(|o| o.resource.kind.as_str()).collect();
        assert_eq!(kinds, ["Node", "Node", "StorageClass", "StorageClass"]);
        // The second class: a node's own disk, bound where the first pod is scheduled.
        let local = &without[3].object;
        assert_eq!(local.metadata.name.as_deref(), Some(LOCAL_STORAGE_CLASS));
        assert_eq!(local.data["volumeBindingMode"], "WaitForFirstConsumer");
        let with = objects(true).unwrap();
        assert_eq!(with.len(), 9);
        let placement = placement_policy().unwrap();
        let kinds: Vec<&str> = placement.iter().map(|o| o.resource.kind.as_str()).collect();
        assert_eq!(kinds, ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]);
        let dns = with.iter().find(|o| o.resource.kind == "Service").unwrap();
        assert_eq!(dns.namespace.as_deref(), Some("kube-system"));
        assert_eq!(dns.object.data["spec"]["clusterIP"], DNS_SERVICE_IP);
        let node = &with[1].object;
        assert_eq!(node.metadata.name.as_deref(), Some(FAKE_NODES[1]));
        assert_eq!(node.data["spec"]["podCIDR"], "10.244.64.0/18");
        assert_eq!(node.data["status"]["allocatable"]["pods"], "8000");
    }
}
