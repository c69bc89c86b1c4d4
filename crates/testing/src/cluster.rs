//! Finding and connecting to the local cluster, once per test binary.

use std::path::{Path, PathBuf};

use bosun_localcluster::cluster::ClusterDir;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, Config, ResourceExt};
use tokio::sync::OnceCell;

/// The running cluster the tests use.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    /// The admin kubeconfig, for processes the tests start (bosun, kubectl).
    pub kubeconfig: PathBuf,
    /// The ClusterRole bosun runs with (from `config/rbac/role.yaml`).
    pub cluster_role: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("kubeconfig", &self.kubeconfig).finish_non_exhaustive()
    }
}

/// The repository root (this crate lives in `crates/testing`).
pub fn repo_root() -> PathBuf {
    bosun_localcluster::repo_root()
}

/// The admin kubeconfig of the local cluster: `$BOSUN_TEST_KUBECONFIG`, else the one
/// `make cluster` writes (`$BOSUN_CLUSTER_DIR/kubeconfig`, default `.cluster/kubeconfig`).
///
/// `KUBECONFIG` is deliberately not used: the tests create and delete namespaces and
/// CRDs, and must never do that to whatever cluster a developer's shell points at.
pub fn kubeconfig_path() -> PathBuf {
    if let Some(p) = std::env::var_os("BOSUN_TEST_KUBECONFIG") {
        return PathBuf::from(p);
    }
    ClusterDir::from_env().kubeconfig()
}

/// The local cluster's state directory (`$BOSUN_CLUSTER_DIR`, default `.cluster`).
pub fn cluster_dir() -> PathBuf {
    ClusterDir::from_env().path().to_owned()
}

/// Stops the local cluster's kube-apiserver, waits `outage` and starts it again with
/// the same arguments, returning once it is ready (chaos tests; blocking: call it from
/// `spawn_blocking`).
pub fn restart_apiserver(outage: std::time::Duration) -> anyhow::Result<()> {
    let dir = bosun_localcluster::controlplane::state_dir(None)?;
    bosun_localcluster::controlplane::restart_apiserver(&dir, outage)
}

/// What a test does to a real node; see [`break_node`].
pub use bosun_localcluster::controlplane::NodeAction;

/// Breaks or mends real node `name` (`cluster.sh node ACTION NAME`): stop kills its
/// kubelet, containerd and containers at once, start brings them back; partition cuts
/// the second node off the network, heal undoes it. Start and heal return once the
/// cluster is healthy again. Blocking: call it from `spawn_blocking`. A test that
/// breaks a node holds a [`NodeGuard`], so that a failing assertion does not leave it
/// broken for the tests after it.
pub fn break_node(action: NodeAction, name: &str) -> anyhow::Result<()> {
    let dir = bosun_localcluster::controlplane::state_dir(None)?;
    bosun_localcluster::controlplane::node(&dir, action, name)
}

/// [`break_node`] from a test's async code (on a blocking thread), panicking with the
/// reason when it fails; logs how long it took.
pub async fn on_real_node(action: NodeAction, name: &'static str) {
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || break_node(action, name))
        .await
        .expect("the node action's thread")
        .unwrap_or_else(|e| panic!("{action:?} {name}: {e:#}"));
    eprintln!("{action:?} {name}: {:.1}s", started.elapsed().as_secs_f64());
}

/// Mends real node `name` when dropped (a stop is started again, a partition healed),
/// whatever the test did in between.
#[derive(Debug)]
pub struct NodeGuard(pub &'static str);

impl Drop for NodeGuard {
    fn drop(&mut self) {
        // On a thread of its own: the supervisor's code runs a runtime of its own, which
        // cannot start on the test's runtime thread this drop may run on.
        let name = self.0;
        let mend = std::thread::spawn(move || {
            for action in [NodeAction::Heal, NodeAction::Start] {
                if let Err(e) = break_node(action, name) {
                    eprintln!("mending {name} ({action:?}) failed: {e:#}");
                }
            }
        });
        if mend.join().is_err() {
            eprintln!("mending {name} panicked");
        }
    }
}

const HOW_TO_START: &str = "start the local control plane with `make cluster` (or run the whole suite with `make test`), \
                            or point BOSUN_TEST_KUBECONFIG at a test cluster";

static INSTALLED: OnceCell<(PathBuf, String)> = OnceCell::const_new();

/// The local cluster with bosun's CRDs installed. Panics, saying how to start it, when
/// there is none.
///
/// Every call makes a new client: each `#[tokio::test]` has its own runtime, and a
/// client's connection worker dies with the runtime that created it. Only finding the
/// cluster and installing the CRDs happen once per test binary.
pub async fn cluster() -> Cluster {
    let (path, cluster_role) = INSTALLED
        .get_or_init(|| async {
            let path = kubeconfig_path();
            let client = connect(&path).await;
            install_crds(&client).await;
            remove_left_webhooks(&client).await;
            let role = crate::identity::install_cluster_role(&client).await;
            (path, role)
        })
        .await
        .clone();
    Cluster { client: connect(&path).await, kubeconfig: path, cluster_role }
}

async fn connect(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap_or_else(|e| {
        panic!("no local cluster: cannot read kubeconfig {} ({e}); {HOW_TO_START}", path.display())
    });
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("invalid kubeconfig {}: {e}; {HOW_TO_START}", path.display()));
    let client = Client::try_from(config).expect("kube client");
    if let Err(e) = client.apiserver_version().await {
        panic!("the local cluster in {} is not reachable ({e}); {HOW_TO_START}", path.display());
    }
    client
}

/// Delete the webhook configurations a `make run` left (they point at a URL on this
/// host and fail closed): with bosun gone, every WebApp in the cluster would be
/// refused. Each test that needs webhooks makes configurations of its own.
async fn remove_left_webhooks(client: &Client) {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    let params = kube::api::DeleteParams::default();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("bosun-validating-webhook-configuration", &params)
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete("bosun-mutating-webhook-configuration", &params)
        .await;
}

/// Apply bosun's CRDs (from the Rust types) and wait until they are established.
async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in bosun_controller::kinds::crds() {
        let name = crd.name_any();
        // A bosun run with --webhook-url pointed the conversion at its URL; the shipped
        // CRD names the Service, and the apiserver refuses both at once: the Service first.
        if let Some(webhook) = crd.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref()) {
            let service = webhook.client_config.as_ref().and_then(|c| c.service.clone());
            let back = serde_json::json!({"spec": {"conversion": {"webhook": {"clientConfig": {"url": null, "service": service}}}}});
            let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&back)).await;
        }
        api.patch(&name, &PatchParams::apply("bosun-e2e").force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} was not established within 30s"))
        .unwrap_or_else(|e| panic!("waiting for CRD {name}: {e}"));
    }
}

/// A tool `hack/backends/build.sh` builds from the Go module proxy into the cache
/// (helm, promtool): its path.
pub fn built_tool(name: &str) -> PathBuf {
    let built = std::process::Command::new(repo_root().join("hack/backends/build.sh"))
        .arg(name)
        .output()
        .unwrap_or_else(|e| panic!("hack/backends/build.sh {name}: {e}"));
    assert!(built.status.success(), "building {name}: {}", String::from_utf8_lossy(&built.stderr));
    PathBuf::from(String::from_utf8(built.stdout).expect("UTF-8").trim()).join(name)
}
