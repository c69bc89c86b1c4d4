//! bosun installed the two ways users install it, on the local cluster's real node, from
//! the images `make docker-build` makes: `make deploy` / `make undeploy` (kustomize,
//! `config/local` over `config/default`) and `helm install` / `helm uninstall`
//! (`charts/bosun`).
//!
//! Both install cluster-wide objects under the same names (CRDs, ClusterRole, webhook
//! configurations with failurePolicy Fail, namespace `bosun-system`), so they run one at
//! a time and in a test binary of their own, which `make test` (hack/test.sh) runs
//! with no other binary that uses the cluster beside it: no other suite meets these
//! webhooks. Whatever a failed test leaves is removed when it ends.
//!
//! `cargo test -p bosun --test install -- --nocapture` prints the numbers: image sizes,
//! build time, `make deploy` to the first reconcile, the pods' RSS.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

mod writer;

use std::process::Command;
use std::time::{Duration, Instant};

use bosun_api::webapp::{WebAppKind, apps_v1};
use bosun_testing::node::{
    NODES_LABEL, REAL_NODE_LABEL, REAL_NODES, pod_ready, real_node_annotations, require_real_node,
};
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
            run_ok("hack/docker-build.sh", &["load", IMG, RUNNER_IMG, "--cluster", cluster_dir().to_str().unwrap()]);
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
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "production", "labels": {NODES_LABEL: "fake"}}})).unwrap();
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
        assert!(
            node.as_deref().is_some_and(|n| REAL_NODES.contains(&n)),
            "{how}: {} runs on a real node: {node:?}",
            pod.name_any()
        );
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

/// The previous release (`hack/previous-release.sh`): its commit, its bosun image
/// (loaded into the real node) and its source tree (for its chart).
fn previous_release() -> (String, String, std::path::PathBuf) {
    let started = Instant::now();
    let out = run_ok("hack/previous-release.sh", &[]);
    let mut words = out.split_whitespace().map(str::to_owned);
    let (commit, image, src) = (words.next().unwrap(), words.next().unwrap(), words.next().unwrap());
    run_ok("hack/docker-build.sh", &["load", &image, "--cluster", cluster_dir().to_str().unwrap()]);
    eprintln!("install: the previous release {commit} ({image}) ready after {:.0} s", started.elapsed().as_secs_f64());
    (commit, image, src.into())
}

/// `helm install|upgrade bosun CHART` into bosun's namespace with bosun `image`, the
/// local cluster's database and cache images, and `--wait`.
fn helm_release(verb: &str, chart: &str, image: &str) {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    let (repository, tag) = (format!("image.repository={repository}"), format!("image.tag={tag}"));
    let args = r#"extraArgs=["--postgres-image=localhost/postgres:{version}","--postgres-volume-permissions","--redis-image=localhost/redis:7"]"#;
    let started = Instant::now();
    let (ok, out, err) = run(
        &helm(),
        &[
            verb,
            "bosun",
            chart,
            "-n",
            NAMESPACE,
            "--set",
            &repository,
            "--set",
            &tag,
            "--set-json",
            args,
            "--wait",
            "--timeout",
            "4m",
        ],
    );
    if ok {
        until_webhooks_answer();
    }
    if !ok {
        // What kept the rollout from finishing: the pods, and what each said last.
        let (_, pods, _) = run("kubectl", &["get", "pods", "-n", NAMESPACE, "-o", "wide"]);
        let (_, logs, _) = run(
            "kubectl",
            &[
                "logs",
                "-n",
                NAMESPACE,
                "-l",
                "control-plane=controller-manager",
                "--tail=30",
                "--prefix",
                "--all-containers",
            ],
        );
        panic!("helm {verb} {chart}:\n{out}\n{err}\npods:\n{pods}\nlogs:\n{logs}");
    }
    eprintln!("install: helm {verb} --wait took {:.1} s", started.elapsed().as_secs_f64());
}

/// One of every kind, on the real node; every workload runs the Redis image (a server
/// that stays up), the databases the local PostgreSQL image.
/// Wait until the apiserver reaches bosun's webhooks: `helm --wait` returns once the
/// pod is Ready, and the Service's rules follow the endpoints by up to a few seconds
/// (kube-proxy), during which a create is refused with "connection refused" (seen once
/// in a full `make test`). A server-side dry run of a WebApp passes both webhooks.
fn until_webhooks_answer() {
    let file = std::env::temp_dir().join(format!("bosun-webhook-probe-{}.yaml", std::process::id()));
    std::fs::write(&file, "apiVersion: apps.example.com/v1\nkind: WebApp\nmetadata: {name: probe}\nspec: {image: probe, replicas: 1, port: 80}\n").unwrap();
    let started = Instant::now();
    loop {
        let (ok, out, err) =
            run("kubectl", &["create", "--dry-run=server", "-n", NAMESPACE, "-f", file.to_str().unwrap()]);
        if ok || !err.contains("failed calling webhook") {
            let _ = std::fs::remove_file(&file);
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the webhooks never answered:\n{out}\n{err}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

const EVERY_KIND: &str = r#"
apiVersion: apps.example.com/v1
kind: WebApp
metadata: {name: web}
spec: {image: "localhost/redis:7", replicas: 1, port: 6379}
---
apiVersion: example.com/v1
kind: WebApp
metadata: {name: legacy}
spec: {image: "localhost/redis:7", replicas: 1, port: 6379}
---
apiVersion: voting.schoolofdevops.com/v1alpha1
kind: VoteConfig
metadata: {name: pets}
spec:
  title: Cats or dogs?
  options: [{id: a, label: Cats}, {id: b, label: Dogs}]
---
apiVersion: voting.schoolofdevops.com/v1alpha1
kind: VoteConfig
metadata: {name: lunch}
spec:
  options: [{id: soup, label: Soup}, {id: salad, label: Salad}, {id: stew, label: Stew}]
---
apiVersion: demo.example.com/v1
kind: DemoVolume
metadata: {name: demo-volume}
spec: {name: demo-volume, size: 1}
---
apiVersion: config.example.com/v1
kind: AppConfig
metadata: {name: myapp}
spec:
  application: myapp
  environment: staging
  config: {DB_HOST: "db.{{ environment }}.internal", APP_ID: "{{ application }}-{{ namespace }}"}
---
apiVersion: database.example.com/v1
kind: PostgreSQL
metadata: {name: test-db}
spec: {version: "15", storage: 1Gi, replicas: 2}
---
apiVersion: backup.example.com/v1
kind: Backup
metadata: {name: nightly}
spec:
  source: {type: postgresql, connection: {host: test-db, port: 5432, database: postgres, secretRef: {name: test-db-credentials}}}
  destination: {type: s3, bucket: backups}
  schedule: "0 2 * * *"
  retention: 30d
---
apiVersion: backup.example.com/v1
kind: Restore
metadata: {name: nightly-restore}
spec:
  backupRef: {name: nightly}
  target: {type: postgresql, connection: {host: restored-db, port: 5432, database: app, secretRef: {name: restored-db-credentials}}}
---
apiVersion: app.example.com/v1
kind: AppStack
metadata: {name: shop}
spec:
  database: {type: postgresql, version: "15", storage: 1Gi}
  cache: {enabled: true}
  backend: {image: "localhost/redis:7", replicas: 1, port: 6379}
  frontend: {image: "localhost/redis:7", replicas: 1, port: 6379}
---
apiVersion: platform.example.com/v1
kind: EcommercePlatform
metadata: {name: store}
spec:
  environment: development
  frontend: {replicas: 1, image: "localhost/redis:7"}
  backend: {replicas: 1, image: "localhost/redis:7"}
  database: {type: postgresql, version: "15", storage: 1Gi}
  cache: {enabled: true}
  monitoring: {enabled: false}
"#;

/// The kinds whose Ready condition the upgrade test waits for (a Restore of a Backup
/// that never ran is not Ready, and stays as it is).
const READY_KINDS: [&str; 9] = [
    "webapps.apps.example.com",
    "webapps.example.com",
    "voteconfigs",
    "demovolumes",
    "appconfigs",
    "postgresqls",
    "backups",
    "appstacks",
    "ecommerceplatforms",
];

/// Every child in `ns` and its version: `Kind/name generation resourceVersion`, and
/// every pod with its uid and restarts; with each child's content as well, less its
/// resourceVersion, managed fields and owner references' `blockOwnerDeletion`
/// ([`only_blocks_owner_deletion`]).
fn children(ns: &str) -> (std::collections::BTreeMap<String, String>, std::collections::BTreeMap<String, Child>) {
    let kinds = "deployments,statefulsets,services,configmaps,secrets,persistentvolumeclaims,cronjobs,ingresses,jobs";
    let listed: serde_json::Value =
        serde_json::from_str(&run_ok("kubectl", &["get", kinds, "-n", ns, "-o", "json"])).expect("kubectl's JSON");
    let mut versions = std::collections::BTreeMap::new();
    let mut contents = std::collections::BTreeMap::new();
    for item in listed["items"].as_array().expect("items") {
        let key = format!("{}/{}", item["kind"].as_str().unwrap(), item["metadata"]["name"].as_str().unwrap());
        let meta = &item["metadata"];
        let generation = meta["generation"].as_i64().map(|g| g.to_string()).unwrap_or_default();
        versions.insert(key.clone(), format!("{generation} {}", meta["resourceVersion"].as_str().unwrap()));
        let mut content = item.clone();
        let meta = content["metadata"].as_object_mut().unwrap();
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        let mut blocks = Vec::new();
        for owner in meta.get_mut("ownerReferences").and_then(|o| o.as_array_mut()).into_iter().flatten() {
            blocks.push(owner.as_object_mut().unwrap().remove("blockOwnerDeletion") == Some(serde_json::json!(true)));
        }
        contents.insert(key, Child { content, blocks });
    }
    let pods = run_ok(
        "kubectl",
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-o",
            r#"jsonpath={range .items[*]}Pod/{.metadata.name} {.metadata.uid} restarts={.status.containerStatuses[*].restartCount}{"\n"}{end}"#,
        ],
    );
    versions.extend(pods.lines().filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_owned(), v.to_owned()))));
    (versions, contents)
}

/// A child's content as [`children`] compares it, and whether each of its owner
/// references blocks the owner's deletion.
#[derive(Debug)]
struct Child {
    content: serde_json::Value,
    blocks: Vec<bool>,
}

/// Whether the only write to a child between `before` and `after` is its owner
/// references gaining `blockOwnerDeletion: true`: the one write an upgrade from a
/// release before bosun set it makes to each child (a foreground deletion of the owner
/// then waits for the child and its pods).
fn only_blocks_owner_deletion(before: Option<&Child>, after: Option<&Child>) -> bool {
    match (before, after) {
        (Some(b), Some(a)) => {
            b.content == a.content && b.blocks.iter().any(|x| !x) && !a.blocks.is_empty() && a.blocks.iter().all(|x| *x)
        }
        _ => false,
    }
}

/// The database pods in `ns`: name, whether its first process is `bosun instance`,
/// whether it is Ready.
fn database_pods(ns: &str) -> Vec<(String, bool, bool)> {
    let out = run_ok(
        "kubectl",
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "app.kubernetes.io/name=postgresql",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].command[1]} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
        ],
    );
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            Some((w.first()?.to_string(), w.get(1) == Some(&"instance"), w.get(2) == Some(&"True")))
        })
        .collect()
}

/// Events in `ns` reported by bosun, by name: `type reason object: message (count)`.
fn bosun_events(ns: &str) -> std::collections::BTreeMap<String, String> {
    let out = run_ok(
        "kubectl",
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            ns,
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name}|{.reportingController}|{.type} {.reason} {.regarding.kind}/{.regarding.name}: {.note} ({.series.count}){"\n"}{end}"#,
        ],
    );
    out.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '|');
            let (name, controller, what) = (parts.next()?, parts.next()?, parts.next()?);
            controller.starts_with("bosun").then(|| (name.to_owned(), what.to_owned()))
        })
        .collect()
}

/// Wait until every object of `READY_KINDS` in `ns` is Current as kstatus has it: Ready
/// for its generation, neither Reconciling nor Stalled.
async fn until_all_ready(ns: &str, within: Duration) {
    let started = Instant::now();
    loop {
        let mut waiting = Vec::new();
        for kind in READY_KINDS {
            let out = run_ok(
                "kubectl",
                &[
                    "get",
                    kind,
                    "-n",
                    ns,
                    "-o",
                    r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Reconciling")].status}{.status.conditions[?(@.type=="Stalled")].status}{"\n"}{end}"#,
                ],
            );
            for line in out.lines() {
                let w: Vec<&str> = line.split(' ').collect();
                if w.len() < 5 || w[1] != w[2] || w[3] != "True" || w[4].contains("True") {
                    waiting.push(format!("{kind}/{line}"));
                }
            }
        }
        if waiting.is_empty() {
            return;
        }
        assert!(started.elapsed() < within, "not Current within {within:?}: {waiting:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The VoteConfigs' specs read in `version`.
fn vote_specs(ns: &str, version: &str) -> String {
    run_ok(
        "kubectl",
        &[
            "get",
            &format!("voteconfigs.{version}.voting.schoolofdevops.com"),
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.spec}{\"\\n\"}{end}",
        ],
    )
}

/// Whatever the upgrade test leaves, the cluster's namespaces can still be deleted: the
/// namespace controller lists VoteConfigs in `v1`, which needs the conversion webhook
/// for objects still stored as `v1alpha1`, and no bosun serves it once the test ends.
/// So the CRD converts by `None` (objects read as `v1` lose their `title`: these are
/// the test's, about to go), and its stored versions are `v1` alone. The next test
/// binary applies bosun's CRDs again.
struct VoteConfigsDeletable;

impl Drop for VoteConfigsDeletable {
    fn drop(&mut self) {
        let crd = "crd/voteconfigs.voting.schoolofdevops.com";
        let stored = run("kubectl", &["get", crd, "-o", "jsonpath={.status.storedVersions}"]).1;
        if stored.contains("v1alpha1") {
            run(
                "kubectl",
                &["patch", crd, "--type=merge", "-p", r#"{"spec":{"conversion":{"strategy":"None","webhook":null}}}"#],
            );
            run("kubectl", &["delete", "voteconfigs", "--all-namespaces", "--all", "--wait"]);
            run(
                "kubectl",
                &[
                    "patch",
                    crd,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    r#"{"status":{"storedVersions":["v1"]}}"#,
                ],
            );
        }
    }
}

#[tokio::test]
async fn helm_upgrade_from_the_previous_release_rolls_nothing_and_moves_voteconfigs_to_v1() {
    e2e("helm-upgrade", |env| async move {
        let _prepared = prepare(&env).await;
        // Dropped first: before the cleanup uninstalls bosun and deletes its namespace.
        let _deletable = VoteConfigsDeletable;
        let (commit, previous, src) = previous_release();
        let crds = bosun_controller::kinds::crds().iter().map(|c| c.name_any()).collect::<Vec<_>>();

        // A fresh install of the previous release: its CRDs (Helm installs a chart's
        // crds/ when they are absent), its chart, its image.
        let mut delete = vec!["delete", "crd", "--ignore-not-found", "--wait"];
        delete.extend(crds.iter().map(String::as_str));
        run_ok("kubectl", &delete);
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NAMESPACE, "annotations": real_node_annotations()}}))
                .unwrap();
        Api::<Namespace>::all(env.client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        helm_release("install", src.join("charts/bosun").to_str().unwrap(), &previous);
        let stored = run_ok("kubectl", &["get", "crd", "voteconfigs.voting.schoolofdevops.com", "-o", "jsonpath={.spec.versions[*].name}"]);
        assert_eq!(stored, "v1alpha1", "the previous release ({commit}) serves VoteConfig v1alpha1 only");

        // One of every kind, Ready under the previous release.
        env.use_real_node().await;
        let (ok, out) = env.kubectl_apply(EVERY_KIND);
        assert!(ok, "applying one of every kind: {out}");
        until_all_ready(&env.ns, Duration::from_secs(300)).await;
        let votes_before = vote_specs(&env.ns, "v1alpha1");
        // Whatever the first reconciles still settle (a status, a rollout's last word).
        tokio::time::sleep(Duration::from_secs(10)).await;
        // A writer through test-db's read-write Service: the write outage of the move.
        writer::start_writer(&env).await;
        let (before, contents_before) = children(&env.ns);
        let vote_maps = ["lunch-config", "pets-config"];
        let data = |name: &str| run_ok("kubectl", &["get", "configmap", name, "-n", &env.ns, "-o", "jsonpath={.data}"]);
        let data_before: Vec<String> = vote_maps.iter().map(|m| data(m)).collect();
        let events_before = bosun_events(&env.ns);
        // A row and the Secret's password, to find again after the databases move to
        // the new instance manager.
        let psql = |pod: &str, sql: &str| {
            let tcp = format!(r#"PGPASSWORD="$POSTGRES_PASSWORD" psql -X -h 127.0.0.1 -U postgres -tAc "{sql}""#);
            env.exec_ok(pod, &["bash", "-c", &tcp]).trim().to_owned()
        };
        psql("test-db-0", "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the upgrade')");
        let databases = database_pods(&env.ns);
        assert_eq!(databases.len(), 4, "test-db's two, the AppStack's and the platform's: {databases:?}");
        let lease = Api::<Lease>::namespaced(env.client.clone(), NAMESPACE);
        let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        let old_leader = holder(lease.get("bosun-leader").await.unwrap());
        eprintln!("install: {} children and pods under {commit}; leader {old_leader}", before.len());

        // The upgrade as documented: the new CRDs (Helm never upgrades crds/), then the chart.
        let (upgraded, upgraded_at) = (Instant::now(), writer::unix_now());
        run_ok("kubectl", &["apply", "--server-side", "--force-conflicts", "-f", "charts/bosun/crds/"]);
        helm_release("upgrade", "charts/bosun", IMG);
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
        let new_pods: Vec<String> = pods
            .list(&ListParams::default().labels("control-plane=controller-manager"))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.containers[0].image.as_deref() == Some(IMG)))
            .map(|p| p.name_any())
            .collect();
        let mut new_leader = String::new();
        while !new_pods.contains(&new_leader) {
            assert!(upgraded.elapsed() < Duration::from_secs(300), "no new pod leads; {new_leader} does");
            tokio::time::sleep(Duration::from_millis(500)).await;
            new_leader = holder(lease.get("bosun-leader").await.unwrap());
        }
        eprintln!("install: {new_leader} leads {:.1} s after the upgrade began", upgraded.elapsed().as_secs_f64());

        // The VoteConfigs written in v1alpha1 are rewritten in v1, and v1alpha1 leaves
        // the stored versions.
        let started = Instant::now();
        loop {
            let stored = run_ok("kubectl", &["get", "crd", "voteconfigs.voting.schoolofdevops.com", "-o", "jsonpath={.status.storedVersions}"]);
            if stored == r#"["v1"]"# {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "storedVersions still {stored}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        eprintln!("install: VoteConfigs migrated to v1 {:.1} s after the upgrade began", upgraded.elapsed().as_secs_f64());
        assert_eq!(vote_specs(&env.ns, "v1alpha1"), votes_before, "read as v1alpha1, they mean what they meant");
        let v1 = vote_specs(&env.ns, "v1");
        assert!(v1.contains(r#"pets={"options":[{"id":"a","label":"Cats"},{"id":"b","label":"Dogs"}],"question":"Cats or dogs?"}"#), "{v1}");
        assert!(v1.contains(r#"lunch={"options":[{"id":"soup","label":"Soup"},{"id":"salad","label":"Salad"},{"id":"stew","label":"Stew"}]}"#), "{v1}");

        // The databases move to the new instance manager (`bosun instance`) with one
        // rolling restart each: their StatefulSet and pods are the only children that
        // change (and their instances' API Secret is new); their data, claims and
        // credentials Secrets (passwords) are kept.
        let moved = Instant::now();
        loop {
            let now = database_pods(&env.ns);
            if now.len() == 4 && now.iter().all(|(_, managed, ready)| *managed && *ready) {
                break;
            }
            assert!(moved.elapsed() < Duration::from_secs(300), "the databases did not move: {now:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!(
            "install: the 3 databases run bosun instance {:.1} s after the upgrade began ({:.1} s after the new leader)",
            upgraded.elapsed().as_secs_f64(),
            moved.elapsed().as_secs_f64()
        );
        // test-db moved by a rolling restart: its standby first, then a switchover, then
        // its old primary as a standby. The writer's longest gap is what clients saw.
        let acked = writer::acks(&env);
        let outage = writer::outage(&acked, upgraded_at);
        eprintln!("install: test-db (2 instances) moved with a write outage of {outage:.2} s ({} rows acknowledged)", acked.len());
        let primary = run_ok("kubectl", &["get", "postgresql", "test-db", "-n", &env.ns, "-o", "jsonpath={.status.currentPrimary}"]);
        let lost = writer::lost(&psql(&primary, "SELECT id FROM w ORDER BY id"), &acked);
        assert!(lost.is_empty(), "acknowledged rows missing on the primary {primary}: {lost:?}");
        assert_eq!(psql("test-db-0", "SELECT v FROM kept"), "before the upgrade", "the data is kept");
        // Each database also gets the Secret of its instances' API (a certificate and a
        // token bosun calls them with, renewed for the Services' names), the CA's for its
        // clients and its application's.
        let rolled = |k: &str| {
            databases.iter().any(|(pod, _, _)| k == format!("Pod/{pod}"))
                || ["test-db", "shop-db", "store-db"].iter().any(|db| {
                    ["instance", "ca", "app"].iter().any(|s| k == format!("Secret/{db}-{s}"))
                        || k == format!("StatefulSet/{db}")
                })
        };

        // The new bosun has looked at everything (its first reconciles follow its start);
        // nothing else it owns was written, no other pod restarted.
        until_all_ready(&env.ns, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(15)).await;
        let (after, contents_after) = children(&env.ns);
        // One write is the upgrade's own: a VoteConfig's ConfigMap names its owner by the
        // version bosun reconciles, now v1 — the garbage collector finds owners by that
        // apiVersion, and v1alpha1 is to go one day. Its data stays as it was.
        for (map, was) in vote_maps.iter().zip(&data_before) {
            assert_eq!(&data(map), was, "{map}'s data");
            let owner = run_ok("kubectl", &["get", "configmap", map, "-n", &env.ns, "-o", "jsonpath={.metadata.ownerReferences[0].apiVersion}"]);
            assert_eq!(owner, "voting.schoolofdevops.com/v1", "{map}'s owner reference");
        }
        // The other write is the upgrade's too, once per child: its owner reference
        // gains blockOwnerDeletion, nothing else of it changes.
        let migrated: Vec<&String> = before
            .iter()
            .filter(|(k, v)| after.get(*k) != Some(v))
            .map(|(k, _)| k)
            .filter(|k| only_blocks_owner_deletion(contents_before.get(*k), contents_after.get(*k)))
            .collect();
        let changed: Vec<String> = before
            .iter()
            .filter(|(k, _)| !vote_maps.iter().any(|m| **k == format!("ConfigMap/{m}")) && !rolled(k))
            .filter(|(k, v)| after.get(*k) != Some(v) && !migrated.contains(k))
            .map(|(k, v)| format!("{k}: {v} → {:?}", after.get(k)))
            .chain(after.keys().filter(|k| !before.contains_key(*k) && !rolled(k)).map(|k| format!("{k}: new")))
            .collect();
        assert!(changed.is_empty(), "the upgrade changed children or pods:\n{}", changed.join("\n"));
        let new_events: Vec<String> =
            bosun_events(&env.ns).into_iter().filter(|(k, v)| events_before.get(k) != Some(v)).map(|(_, v)| v).collect();
        eprintln!(
            "install: {} children and pods unchanged, {} only gained blockOwnerDeletion; events by bosun since the \
             upgrade: {new_events:?}",
            after.len() - migrated.len(),
            migrated.len()
        );
        // No storm: the one event of each owner-reference write above and the
        // databases' rolling restarts, nothing else.
        let others: Vec<&String> = new_events
            .iter()
            .filter(|e| !vote_maps.iter().any(|m| e.ends_with(&format!("Updated ConfigMap {m} ()"))))
            .filter(|e| !migrated.iter().any(|k| e.ends_with(&format!("Updated {} ()", k.replacen('/', " ", 1)))))
            .filter(|e| !e.contains(" PostgreSQL/"))
            .collect();
        assert!(others.is_empty(), "bosun posted events after the upgrade: {new_events:?}");
        // Its own release works as the fresh install's does (the WebApp made for that runs
        // nginx, which only the fake nodes "have").
        let unpinned: serde_json::Map<_, _> = real_node_annotations().keys().map(|k| (k.clone(), json!(null))).collect();
        let unpin = json!({"metadata": {"annotations": unpinned}});
        Api::<Namespace>::all(env.client.clone())
            .patch(&env.ns, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&unpin))
            .await
            .unwrap();
        check_running(&env, "helm upgrade").await;
        env.api::<apps_v1::WebApp>().delete("after-helm", &DeleteParams::default()).await.unwrap();
    })
    .await;
}
