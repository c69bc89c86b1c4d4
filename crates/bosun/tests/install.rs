//! bosun installed the two ways users install it, on the local cluster's real node, from
//! the images `make docker-build` makes: `make deploy` / `make undeploy` (kustomize,
//! `config/local` over `config/default`) and `helm install` / `helm uninstall`
//! (`charts/bosun`).
//!
//! Both install cluster-wide objects under the same names (CRDs, ClusterRole, webhook
//! configurations with failurePolicy Fail, namespace `bosun-system`), so they run one at
//! a time and in a test binary of their own: cargo runs test binaries one after
//! another, so no other suite meets these webhooks. Whatever a failed test leaves is
//! removed when it ends.
//!
//! `cargo test -p bosun --test install -- --nocapture` prints the numbers: image sizes,
//! build time, `make deploy` to the first reconcile, the pods' RSS.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use std::process::Command;
use std::time::{Duration, Instant};

use bosun_api::webapp::{WebAppKind, apps_v1};
use bosun_testing::node::{REAL_NODE, REAL_NODE_LABEL, pod_ready, real_node_annotations, require_real_node};
use bosun_testing::{Env, built_tool, cluster_dir, e2e, repo_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// One install at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// `make docker-build` and the import into the real node, once for both tests.
static IMAGES: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

const NAMESPACE: &str = "bosun-system";
const DEPLOYMENT: &str = "bosun-controller-manager";
const IMG: &str = "localhost/bosun:dev";
const RUNNER_IMG: &str = "localhost/bosun-runner:dev";
const WEBHOOKS: [(&str, &str); 2] = [
    ("validatingwebhookconfiguration", "bosun-validating-webhook-configuration"),
    ("mutatingwebhookconfiguration", "bosun-mutating-webhook-configuration"),
];

/// Runs a command in the repository with the local cluster's kubeconfig: (success,
/// stdout, stderr).
fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .env("BOSUN_CLUSTER_DIR", cluster_dir())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn run_ok(program: &str, args: &[&str]) -> String {
    let (ok, out, err) = run(program, args);
    assert!(ok, "{program} {args:?} failed:\n{out}\n{err}");
    out
}

fn helm() -> String {
    built_tool("helm").to_string_lossy().into_owned()
}

/// Removes whatever an install left (also after a failed test): the webhook
/// configurations first, which would otherwise refuse every WebApp in the cluster.
struct Cleanup;

impl Cleanup {
    fn now() -> Cleanup {
        let cleanup = Cleanup;
        cleanup.run();
        cleanup
    }

    fn run(&self) {
        for (kind, name) in WEBHOOKS {
            run("kubectl", &["delete", kind, name, "--ignore-not-found"]);
        }
        let helm = helm();
        run(&helm, &["uninstall", "bosun", "-n", NAMESPACE, "--ignore-not-found", "--wait"]);
        run("kubectl", &["delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait"]);
        run("kubectl", &["delete", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/part-of=bosun"]);
        // The test suites' own copy of bosun's ClusterRole (bosun_testing applies
        // config/rbac/role.yaml for the bosun processes they start; none runs in this
        // binary): Helm adopts no object it did not make.
        run("kubectl", &["delete", "clusterrole", "bosun-manager-role", "--ignore-not-found"]);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run();
    }
}

/// `make docker-build`, then both images into the real node's containerd, once.
async fn images() {
    IMAGES
        .get_or_init(|| async {
            let started = Instant::now();
            let out = run_ok("make", &["-s", "docker-build"]);
            eprintln!("install: make docker-build took {:.0} s; images:\n{out}", started.elapsed().as_secs_f64());
            for image in [IMG, RUNNER_IMG] {
                assert!(out.contains(image), "make docker-build did not report {image}:\n{out}");
            }
            let socket = cluster_dir().join("node/containerd.sock");
            run_ok("hack/docker-build.sh", &["load", IMG, RUNNER_IMG, "--address", socket.to_str().unwrap()]);
        })
        .await;
}

/// Held for a whole test: the cleanup runs (fields drop in order) before the next test
/// may start.
struct Prepared {
    _cleanup: Cleanup,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// One install at a time, on the real node, from a clean slate, with the images built.
async fn prepare(env: &Env) -> Prepared {
    let serial = SERIAL.lock().await;
    require_real_node(&env.client).await;
    let cleanup = Cleanup::now();
    images().await;
    Prepared { _cleanup: cleanup, _serial: serial }
}

fn webapp(name: &str, replicas: i32) -> apps_v1::WebApp {
    serde_json::from_value(json!({
        "apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": name},
        "spec": {"image": "nginx:1.25", "replicas": replicas, "port": 80}
    }))
    .unwrap()
}

fn is_ready(w: &apps_v1::WebApp) -> bool {
    w.current_status().is_some_and(|s| {
        s.observed_generation == w.metadata.generation
            && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// The namespace `production` (the default policy's), made for the test if absent:
/// returns whether the test made it.
async fn production(env: &Env) -> bool {
    let api: Api<Namespace> = Api::all(env.client.clone());
    if let Some(ns) = api.get_opt("production").await.unwrap() {
        assert!(ns.metadata.deletion_timestamp.is_none(), "namespace production is being deleted");
        return false;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "production"}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
    true
}

/// What an installed bosun must do, whichever way it was installed: two pods Ready on
/// the real node, one of them leading; a WebApp created now is admitted through the
/// webhook Service (mutated) and reconciled; the validating webhook denies in
/// production; every pod's /metrics answers. Prints the pods' RSS.
async fn check_running(env: &Env, how: &str) {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let list = pods.list(&ListParams::default().labels("control-plane=controller-manager")).await.unwrap();
    let names: Vec<String> = list.items.iter().map(|p| p.name_any()).collect();
    assert_eq!(names.len(), 2, "{how}: two bosun pods, found {names:?}");
    for pod in &list.items {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(node.as_deref(), Some(REAL_NODE), "{how}: {} runs on the real node", pod.name_any());
        assert!(pod_ready(pod), "{how}: {} is Ready", pod.name_any());
    }
    let leader = async {
        for _ in 0..60 {
            let lease = Api::<Lease>::namespaced(env.client.clone(), NAMESPACE).get_opt("bosun-leader").await.unwrap();
            if let Some(holder) = lease.and_then(|l| l.spec?.holder_identity).filter(|h| names.contains(h)) {
                return holder;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        panic!("{how}: no bosun pod holds the Lease bosun-leader");
    }
    .await;

    // Admitted through the webhook Service (the mutating webhook's labels), reconciled.
    // make deploy waits for the webhooks to answer; helm --wait only for the pods, and
    // the Service is routed a moment later.
    let name = format!("after-{}", how.split_whitespace().next().unwrap());
    let routed = Instant::now();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    while let Err(e) = env.api::<apps_v1::WebApp>().create(&dry_run, &webapp(&name, 1)).await {
        assert!(routed.elapsed() < Duration::from_secs(60), "{how}: the webhooks do not answer: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("install: {how}: webhooks answer {:.1} s after the install returned", routed.elapsed().as_secs_f64());
    let created = Instant::now();
    let app = env.apply(&webapp(&name, 1)).await;
    assert_eq!(app.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("bosun"), "{how}: mutated");
    env.wait_for::<apps_v1::WebApp>(&name, "Ready", is_ready).await;
    eprintln!("install: {how}: a WebApp created afterwards is Ready after {:.1} s", created.elapsed().as_secs_f64());

    let made = production(env).await;
    let denied = Api::<apps_v1::WebApp>::namespaced(env.client.clone(), "production")
        .create(&PostParams { dry_run: true, ..PostParams::default() }, &webapp("too-many", 12))
        .await
        .expect_err("12 replicas in production are denied");
    assert!(denied.to_string().contains("spec.replicas"), "{how}: the denial names the field: {denied}");
    if made {
        let _ = Api::<Namespace>::all(env.client.clone()).delete("production", &DeleteParams::default()).await;
    }

    for pod in &names {
        let (ok, metrics, err) =
            run("kubectl", &["get", "--raw", &format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}:8080/proxy/metrics")]);
        assert!(ok, "{how}: /metrics of {pod}: {err}");
        let rss = metrics
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{how}: {pod} exports no process_resident_memory_bytes"));
        let role = if *pod == leader { "leader" } else { "standby" };
        if *pod == leader {
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with("bosun_reconciles_total{") && l.contains("controller=\"webapp\"")),
                "{how}: the leader counts its WebApp reconciles"
            );
        }
        eprintln!("install: {how}: {role} {pod} RSS {:.1} MiB", rss / 1048576.0);
    }
}

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none()
}

/// Every CRD of bosun's, present or not.
async fn crds_present(env: &Env) -> Vec<bool> {
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    let mut present = Vec::new();
    for crd in bosun_controller::kinds::crds() {
        present.push(!gone(&api, &crd.name_any()).await);
    }
    present
}

async fn webhooks_gone(env: &Env) -> bool {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    gone(&Api::<ValidatingWebhookConfiguration>::all(env.client.clone()), WEBHOOKS[0].1).await
        && gone(&Api::<MutatingWebhookConfiguration>::all(env.client.clone()), WEBHOOKS[1].1).await
}

/// Wait until no custom resource of bosun's kinds is left anywhere (other suites'
/// namespaces may still be going away).
async fn until_no_custom_resources(env: &Env) {
    for _ in 0..120 {
        let (_, left, _) = run("hack/deploy.sh", &["resources"]);
        if left.trim().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (_, left, _) = run("hack/deploy.sh", &["resources"]);
    panic!("custom resources are left in the cluster (ns {}):\n{left}", env.ns);
}

#[tokio::test]
async fn make_docker_build_and_make_deploy_run_bosun_on_the_real_node_and_make_undeploy_removes_it() {
    e2e("make-deploy", |env| async move {
        let _prepared = prepare(&env).await;

        // The images as the Deployment runs them: non-root, read-only root file system,
        // no capabilities. The bosun image has no shell; the runner has the dump clients.
        env.use_real_node().await;
        let locked = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
        for (name, image, command) in [
            ("bosun-version", IMG, json!(["/bosun", "--version"])),
            ("runner-tools", RUNNER_IMG, json!(["sh", "-c", "bosun --version && pg_dump --version && mariadb-dump --version && zstd --version && id -u"])),
        ] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": image, "imagePullPolicy": "Never", "command": command, "securityContext": locked
                }]}
            }))
            .unwrap();
            env.api::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
            env.wait_pod(name, "Succeeded", Duration::from_secs(120), |p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            })
            .await;
            let logs = env.logs(name, None, false);
            assert!(logs.contains("bosun "), "{name} printed bosun's version: {logs}");
            eprintln!("install: {name}: {}", logs.trim().replace('\n', " | "));
        }
        let (_, logs) = env.kubectl(&["logs", "runner-tools"]);
        assert!(logs.contains("pg_dump (PostgreSQL)") && logs.trim_end().ends_with("65532"), "runner tools as 65532: {logs}");
        // The WebApps below run nginx, which only the fake nodes "have".
        let unpinned: serde_json::Map<_, _> = real_node_annotations().keys().map(|k| (k.clone(), json!(null))).collect();
        let unpin = json!({"metadata": {"annotations": unpinned}});
        Api::<Namespace>::all(env.client.clone())
            .patch(&env.ns, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&unpin))
            .await
            .unwrap();

        // A WebApp made before bosun is installed: the first reconcile after make deploy.
        env.apply(&webapp("before", 1)).await;
        let started = Instant::now();
        let deploy = tokio::task::spawn_blocking(|| run("make", &["-s", "deploy"]));
        let deployments = env.api::<Deployment>();
        while deployments.get_opt("before").await.unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(240), "the WebApp made before make deploy was never reconciled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let reconciled = started.elapsed();
        let (ok, out, err) = deploy.await.unwrap();
        assert!(ok, "make deploy:\n{out}\n{err}");
        eprintln!(
            "install: make deploy: the first reconcile {:.1} s after it started; it returned after {:.1} s (rollout and webhooks)",
            reconciled.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        let namespace = Api::<Namespace>::all(env.client.clone()).get(NAMESPACE).await.unwrap();
        assert!(
            namespace.annotations().get("scheduler.alpha.kubernetes.io/node-selector").is_some_and(|s| s.starts_with(REAL_NODE_LABEL)),
            "config/local sends bosun-system's pods to the real node"
        );
        check_running(&env, "make deploy").await;

        // make undeploy refuses while custom resources exist (deleting the CRDs would
        // delete them and their workloads), and removes nothing.
        let (ok, _, err) = run("make", &["-s", "undeploy"]);
        assert!(!ok, "make undeploy refuses while WebApps exist");
        assert!(err.contains(&format!("WebApp/before -n {}", env.ns)), "the refusal lists the WebApps: {err}");
        let manager = Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE);
        assert!(!gone(&manager, DEPLOYMENT).await, "nothing was removed");
        assert!(crds_present(&env).await.iter().all(|p| *p), "the CRDs stay");

        for name in ["before", "after-make"] {
            env.api::<apps_v1::WebApp>().delete(name, &DeleteParams::default()).await.unwrap();
        }
        until_no_custom_resources(&env).await;
        let started = Instant::now();
        let (ok, out, err) = run("make", &["-s", "undeploy"]);
        assert!(ok, "make undeploy:\n{out}\n{err}");
        eprintln!("install: make undeploy took {:.1} s", started.elapsed().as_secs_f64());
        assert!(gone(&Api::<Namespace>::all(env.client.clone()), NAMESPACE).await, "bosun-system is gone");
        assert!(crds_present(&env).await.iter().all(|p| !*p), "the CRDs are gone");
        assert!(webhooks_gone(&env).await, "the webhook configurations are gone");
        let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(env.client.clone());
        assert!(gone(&roles, "bosun-manager-role").await, "the ClusterRole is gone");
    })
    .await;
}

#[tokio::test]
async fn helm_install_runs_bosun_on_the_real_node_and_helm_uninstall_removes_it() {
    e2e("helm-install", |env| async move {
        let _prepared = prepare(&env).await;
        let helm = helm();

        // On the local cluster, the namespace sends its pods to the real node (what
        // config/local does for make deploy); helm installs into it.
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE, "annotations": real_node_annotations()}}))
                .unwrap();
        Api::<Namespace>::all(env.client.clone()).create(&PostParams::default(), &ns).await.unwrap();

        let started = Instant::now();
        let (ok, out, err) = run(
            &helm,
            &[
                "install",
                "bosun",
                "charts/bosun",
                "-n",
                NAMESPACE,
                "--set",
                "image.repository=localhost/bosun",
                "--set",
                "image.tag=dev",
                "--wait",
                "--timeout",
                "3m",
            ],
        );
        assert!(ok, "helm install:\n{out}\n{err}");
        eprintln!("install: helm install --wait took {:.1} s", started.elapsed().as_secs_f64());
        check_running(&env, "helm install").await;

        env.api::<apps_v1::WebApp>().delete("after-helm", &DeleteParams::default()).await.unwrap();
        run_ok(&helm, &["uninstall", "bosun", "-n", NAMESPACE, "--wait"]);
        let manager = Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE);
        assert!(gone(&manager, DEPLOYMENT).await, "the Deployment is gone");
        assert!(webhooks_gone(&env).await, "the webhook configurations are gone");
        let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(env.client.clone());
        assert!(gone(&roles, "bosun-manager-role").await, "the ClusterRole is gone");
        // Helm never deletes the CRDs of a chart's crds/ (nor, so, any resource of them).
        assert!(crds_present(&env).await.iter().all(|p| *p), "the CRDs stay, as Helm keeps them");
        // What bosun made at runtime in its namespace (the certificate Secret, the
        // Lease) goes with the namespace the user made.
        let _ = Api::<Namespace>::all(env.client.clone()).delete(NAMESPACE, &DeleteParams::default()).await;
    })
    .await;
}
