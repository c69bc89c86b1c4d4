//! A test's own namespace, and what a test does in it.

use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::DEFAULT_TIMEOUT;
use crate::backends::bosun_binary;
use crate::cluster::{Cluster, cluster, repo_root};
use crate::node::NODES_LABEL;
use crate::operator::Bosun;

/// Everything a test needs: a client and a namespace of its own.
#[derive(Clone)]
pub struct Env {
    pub cluster: Cluster,
    pub client: Client,
    pub ns: String,
}

impl Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").field("ns", &self.ns).finish_non_exhaustive()
    }
}

/// Run `test` in a fresh namespace named after it; the namespace is deleted
/// afterwards, whether the test passed or panicked (bosun's finalizers removed from what
/// is left first: the test's bosun is gone).
pub async fn e2e<F, Fut>(name: &str, test: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    let cluster = cluster().await;
    let client = cluster.client.clone();
    let suffix: u32 = rand::random::<u32>() % 100_000;
    let ns = format!("e2e-{}-{suffix:05}", name.replace('_', "-")).chars().take(63).collect::<String>();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": ns, "labels": {"bosun.dev/e2e": "true", NODES_LABEL: "fake"}}
    }))
    .expect("namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));

    let env = Env { cluster, client: client.clone(), ns: ns.clone() };
    let started = std::time::Instant::now();
    let result = AssertUnwindSafe(test(env)).catch_unwind().await;
    record_time(name, started.elapsed(), result.is_ok());
    if result.is_err() {
        crate::evidence::keep(&client, &ns).await;
    }
    release_finalizers(&client, &ns).await;
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Append `seconds name outcome` to the file `BOSUN_TEST_TIMES` names, if it does: `make
/// test` prints the ten slowest end-to-end tests from it. One short write (`O_APPEND`),
/// so the lines of tests that end together do not mix.
fn record_time(name: &str, took: std::time::Duration, passed: bool) {
    use std::io::Write;
    let Some(path) = std::env::var_os("BOSUN_TEST_TIMES") else { return };
    let line = format!("{:8.1}s  {name}{}\n", took.as_secs_f64(), if passed { "" } else { "  (FAILED)" });
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Remove bosun's own finalizers — a stack's `…/ordered-deletion` — from what a test
/// left in `ns` and in the namespaces `ns` owns. The test's bosun has stopped by now and
/// nothing else removes them, so those namespaces could never finish deleting; a user
/// who removes bosun for good does the same by hand. Each request is bounded: a broken
/// cluster delays the cleanup, never the suite.
async fn release_finalizers(client: &Client, ns: &str) {
    use bosun_api::stack::{AppStack, EcommercePlatform};
    use bosun_controller::stacks::{APPSTACK_FINALIZER, PLATFORM_FINALIZER};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut targets = vec![ns.to_owned()];
    if let Ok(Some(uid)) = namespaces.get_opt(ns).await.map(|n| n.and_then(|n| n.metadata.uid)) {
        let owned = namespaces.list(&ListParams::default().labels("bosun.dev/e2e=true")).await;
        let owned = owned.map(|l| l.items).unwrap_or_default();
        targets.extend(
            owned.into_iter().filter(|n| n.owner_references().iter().any(|o| o.uid == uid)).map(|n| n.name_any()),
        );
    }
    for target in &targets {
        release::<AppStack>(client, target, APPSTACK_FINALIZER).await;
        release::<EcommercePlatform>(client, target, PLATFORM_FINALIZER).await;
    }
}

/// Remove `finalizer` from every `K` in `ns`.
async fn release<K>(client: &Client, ns: &str, finalizer: &str)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let bound = Duration::from_secs(10);
    let Ok(Ok(list)) = tokio::time::timeout(bound, api.list(&ListParams::default())).await else { return };
    for obj in list.items {
        let finalizers = obj.meta().finalizers.clone().unwrap_or_default();
        if finalizers.iter().any(|f| f == finalizer) {
            let keep: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
            let patch = serde_json::json!({"metadata": {"finalizers": keep}});
            let name = obj.meta().name.clone().unwrap_or_default();
            let _ = tokio::time::timeout(bound, api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))).await;
        }
    }
}

impl Env {
    /// An `Api` for `K` in the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Start `bosun run` watching only this test's namespace, as ServiceAccount
    /// `bosun` with only the generated roles (the ClusterRole, and the leader-election
    /// Role in the test namespace).
    pub async fn start_bosun(&self, extra_args: &[&str]) -> Bosun {
        let kubeconfig = self.bosun_kubeconfig().await;
        self.start_bosun_as(&kubeconfig, extra_args)
    }

    /// A kubeconfig for ServiceAccount `bosun` in this namespace with no permissions
    /// yet; [`Env::grant_bosun`] binds its ClusterRole.
    pub async fn unbound_bosun_kubeconfig(&self) -> std::path::PathBuf {
        crate::identity::unbound_kubeconfig(&self.client, &self.cluster.kubeconfig, &self.ns).await
    }

    /// Bind bosun's ClusterRole to ServiceAccount `bosun` in this namespace.
    pub async fn grant_bosun(&self) {
        crate::identity::bind(&self.client, &self.ns, &self.cluster.cluster_role).await;
    }

    /// Another namespace `<ns>-<suffix>`, owned by the test's namespace so that it is
    /// garbage-collected with it; its pods go to the fake nodes, as the test's own do.
    pub async fn extra_namespace(&self, suffix: &str) -> String {
        self.namespace_labelled(suffix, &[(NODES_LABEL, "fake")]).await
    }

    /// Another namespace `<ns>-<suffix>` as [`Env::extra_namespace`], with `labels`
    /// only: without [`NODES_LABEL`], the local cluster places it as a user's.
    pub async fn namespace_labelled(&self, suffix: &str, labels: &[(&str, &str)]) -> String {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let owner = namespaces.get(&self.ns).await.expect("test namespace").controller_owner_ref(&()).expect("uid");
        let name = format!("{}-{suffix}", self.ns);
        let mut all: std::collections::BTreeMap<&str, &str> = labels.iter().copied().collect();
        all.insert("bosun.dev/e2e", "true");
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": all, "ownerReferences": [owner]}
        }))
        .expect("namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// A kubeconfig for ServiceAccount `bosun` in this namespace, bound to bosun's ClusterRole.
    pub async fn bosun_kubeconfig(&self) -> std::path::PathBuf {
        crate::identity::bosun_kubeconfig(&self.client, &self.cluster.kubeconfig, &self.ns, &self.cluster.cluster_role)
            .await
    }

    /// [`Env::start_bosun`] logging with `filter` (`RUST_LOG` syntax), for a test whose
    /// failure needs the debug lines to be told.
    pub async fn start_bosun_logging(&self, extra_args: &[&str], filter: &str) -> Bosun {
        let kubeconfig = self.bosun_kubeconfig().await;
        let (args, log) = self.bosun_args(extra_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Bosun::start_logging(&bosun_binary(), &kubeconfig, &args, log, filter)
    }

    /// Start `bosun run` watching only this test's namespace with `kubeconfig`.
    pub fn start_bosun_as(&self, kubeconfig: &Path, extra_args: &[&str]) -> Bosun {
        let (args, log) = self.bosun_args(extra_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Bosun::start(&bosun_binary(), kubeconfig, &args, log)
    }

    /// The arguments of a `bosun run` for this test, and the file of its log.
    fn bosun_args(&self, extra_args: &[&str]) -> (Vec<String>, PathBuf) {
        let mut args = vec![format!("--namespaces={}", self.ns)];
        // Tests run in parallel: every bosun takes a free port unless told otherwise.
        if !extra_args.iter().any(|a| a.starts_with("--metrics-bind-address")) {
            args.push("--metrics-bind-address=127.0.0.1:0".into());
        }
        args.extend(extra_args.iter().map(|a| (*a).to_owned()));
        let log = repo_root().join("target/e2e-logs").join(format!("{}-{}.log", self.ns, rand::random::<u16>()));
        (args, log)
    }

    /// Server-side apply `obj` into the test namespace as the test (field manager `e2e`).
    pub async fn apply<K>(&self, obj: &K) -> K
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        let name = obj.meta().name.clone().expect("object name");
        self.api::<K>()
            .patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("applying {} {name}: {e}", K::kind(&())))
    }

    /// Create an object of `K`'s kind from raw JSON, bypassing the Rust types, and
    /// return what the apiserver said: for testing what the schema rejects.
    pub async fn create_raw<K>(&self, object: serde_json::Value) -> Result<DynamicObject, kube::Error>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        let ar = ApiResource::erase::<K>(&());
        let mut obj: DynamicObject = serde_json::from_value(object).expect("raw object");
        obj.types = Some(kube::api::TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() });
        Api::<DynamicObject>::namespaced_with(self.client.clone(), &self.ns, &ar)
            .create(&PostParams::default(), &obj)
            .await
    }

    /// Poll `name` until `condition` holds; panics after `DEFAULT_TIMEOUT` saying what
    /// was expected and showing the object as last seen.
    pub async fn wait_for<K>(&self, name: &str, expected: &str, condition: impl Fn(&K) -> bool) -> K
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + DeserializeOwned + Serialize + Clone + Debug,
    {
        self.wait_for_within(name, expected, DEFAULT_TIMEOUT, condition).await
    }

    /// [`Env::wait_for`] with an explicit timeout.
    pub async fn wait_for_within<K>(
        &self,
        name: &str,
        expected: &str,
        timeout: Duration,
        condition: impl Fn(&K) -> bool,
    ) -> K
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + DeserializeOwned + Serialize + Clone + Debug,
    {
        let api = self.api::<K>();
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < timeout {
            match api.get_opt(name).await {
                Ok(Some(obj)) if condition(&obj) => return obj,
                Ok(seen) => last = Some(seen),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let shown = match last {
            Some(Some(mut obj)) => {
                obj.meta_mut().managed_fields = None;
                serde_yaml_ng::to_string(&obj).unwrap_or_default()
            }
            Some(None) => "it does not exist".to_owned(),
            None => "it could not be read".to_owned(),
        };
        panic!(
            "timed out after {timeout:?} waiting for {} {}/{name}: expected {expected}; last seen:\n{shown}\n{}",
            K::kind(&()),
            self.ns,
            self.namespace_story()
        )
    }

    /// What a timed-out wait shows besides the object: this namespace's pods and Jobs,
    /// its newest events (a pod that never started, a Job that made no pod), and the
    /// last lines of its Jobs' pods (a run that hangs).
    pub fn namespace_story(&self) -> String {
        let (_, workloads) = self.kubectl(&["get", "pods,jobs", "-o", "wide"]);
        let (_, events) = self.kubectl(&["get", "events", "--sort-by=.lastTimestamp"]);
        let lines: Vec<&str> = events.lines().collect();
        let newest = lines[lines.len().saturating_sub(25)..].join("\n");
        let job_pods = ["-l", "batch.kubernetes.io/job-name", "--all-containers", "--prefix", "--tail=15"];
        let (_, logs) = self.kubectl(&[&["logs", "--max-log-requests=8"], &job_pods[..]].concat());
        format!(
            "pods and Jobs of {}:\n{workloads}\nits newest events:\n{newest}\nits Jobs' pods' last lines:\n{logs}",
            self.ns
        )
    }

    /// Poll until `name` no longer exists.
    pub async fn wait_gone<K>(&self, name: &str) -> Duration
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + DeserializeOwned + Serialize + Clone + Debug,
    {
        let start = Instant::now();
        let api = self.api::<K>();
        while start.elapsed() < DEFAULT_TIMEOUT {
            if matches!(api.get_opt(name).await, Ok(None)) {
                return start.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("timed out after {DEFAULT_TIMEOUT:?} waiting for {} {}/{name} to be deleted", K::kind(&()), self.ns)
    }

    /// The Warning events about the object `name` in this namespace: (reason, note).
    pub async fn warnings_about(&self, name: &str) -> Vec<(String, String)> {
        let events = self.api::<k8s_openapi::api::events::v1::Event>();
        let list = events.list(&Default::default()).await.expect("listing events");
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// Wait until a Warning event `reason` about `name` has a note containing `text`.
    pub async fn wait_warning(&self, name: &str, reason: &str, text: &str) {
        let start = Instant::now();
        loop {
            let seen = self.warnings_about(name).await;
            if seen.iter().any(|(r, note)| r == reason && note.contains(text)) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no Warning {reason} with {text:?} about {name}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Run kubectl against the cluster in this namespace; returns (success, stdout+stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let (ok, stdout, stderr) = self.kubectl_split(args);
        (ok, format!("{stdout}{stderr}"))
    }

    /// Run kubectl against the cluster in this namespace; returns (success, stdout, stderr).
    pub fn kubectl_split(&self, args: &[&str]) -> (bool, String, String) {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.cluster.kubeconfig)
            .arg("--namespace")
            .arg(&self.ns)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running kubectl: {e}"));
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// `kubectl bosun ARGS` in this namespace, run as kubectl runs the plugin (the
    /// binary under test, called `kubectl-bosun`): (succeeded, stdout, stderr).
    pub fn kubectl_bosun(&self, args: &[&str]) -> (bool, String, String) {
        let dir = std::env::temp_dir().join(format!("bosun-plugin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the plugin");
        let link = dir.join("kubectl-bosun");
        if !link.exists() {
            // Another test of this binary may have made it meanwhile.
            let _ = std::os::unix::fs::symlink(bosun_binary(), &link);
        }
        let out = std::process::Command::new(&link)
            .env("KUBECONFIG", &self.cluster.kubeconfig)
            .args(["-n", &self.ns])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running kubectl-bosun: {e}"));
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// `kubectl apply -f` of `yaml` in the test namespace, as a user would apply a
    /// manifest: (succeeded, kubectl's output).
    pub fn kubectl_apply(&self, yaml: &str) -> (bool, String) {
        let file = std::env::temp_dir().join(format!("bosun-e2e-{}-{}.yaml", self.ns, rand::random::<u32>()));
        std::fs::write(&file, yaml).expect("manifest file");
        let out = self.kubectl(&["apply", "-f", file.to_str().expect("path")]);
        let _ = std::fs::remove_file(&file);
        out
    }
}
