//! Proofs that the local cluster's real node runs real containers: commands whose
//! output, exit codes and memory use come from a real process, PostgreSQL serving SQL
//! from the offline image, and pods that reach the apiserver and cluster DNS. Each
//! test sends its namespace's pods to the real node with [`Env::use_real_node`]; the
//! manifests themselves are ordinary.
//!
//! Run with a cluster up: `hack/controlplane/cluster.sh up`, then
//! `cargo test -p bosun-testing --test node`.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // tests: failing loudly is the point

use std::time::{Duration, Instant};

use bosun_testing::e2e;
use bosun_testing::node::{
    NODES_LABEL, REAL_NODE, REAL_NODE_LABEL, container_status, images, pod_ready, require_real_node,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Pods on the real node start in about a second; leave room for a loaded machine.
const START: Duration = Duration::from_secs(90);

fn object<K: DeserializeOwned>(manifest: Value) -> K {
    serde_json::from_value(manifest).unwrap_or_else(|e| panic!("manifest: {e}"))
}

/// A pod running `script` in `image` with bash.
fn pod(name: &str, image: &str, script: &str, restart_policy: &str) -> Pod {
    object(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["bash", "-c", script],
            }],
        },
    }))
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

fn pod_ip(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).unwrap_or("")
}

// --- commands, exit codes, memory -----------------------------------------------------

/// A container's output reaches `kubectl logs`, `kubectl exec` runs in it, and its pod
/// has an address on the node's bridge, while a pod of an ordinary namespace still
/// lands on a fake node.
#[tokio::test]
async fn a_pod_on_the_real_node_runs_a_real_command() {
    e2e("node-command", |env| async move {
        env.use_real_node().await;
        let created = Instant::now();
        env.apply(&pod(
            "hello",
            images::BASE,
            "echo \"hello from $(hostname) pid $BASHPID\"; exec sleep infinity",
            "Always",
        ))
        .await;
        let running = env.wait_pod_ready("hello", START).await;
        eprintln!("pod create to Ready on the real node: {:?}", created.elapsed());
        assert_eq!(node_of(&running), REAL_NODE, "placed by the namespace's node selector");
        assert!(pod_ip(&running).starts_with("10.245.0."), "address on the node's bridge: {}", pod_ip(&running));

        let logs = env.logs("hello", None, false);
        assert!(logs.contains("hello from hello pid 1"), "the container's own output: {logs:?}");
        let os = env.exec_ok("hello", &["cat", "/etc/os-release"]);
        assert!(os.contains("Debian GNU/Linux 12 (bookworm)"), "exec ran inside the image: {os}");
        let (ok, out) = env.exec("hello", &["bash", "-c", "exit 7"]);
        assert!(!ok, "a failing exec is reported as failed: {out}");

        // In a namespace labelled bosun.dev/nodes=fake, the taint keeps pods off the real node.
        let other = env.extra_namespace("fake").await;
        let (ok, out) = env.kubectl(&[
            "run",
            "elsewhere",
            "--namespace",
            &other,
            "--image",
            images::BASE,
            "--image-pull-policy=Never",
            "--command",
            "--",
            "sleep",
            "infinity",
        ]);
        assert!(ok, "kubectl run: {out}");
        let api = kube::Api::<Pod>::namespaced(env.client.clone(), &other);
        let start = Instant::now();
        let node = loop {
            let p = api.get("elsewhere").await.expect("pod elsewhere");
            if !node_of(&p).is_empty() && pod_ready(&p) {
                break node_of(&p).to_owned();
            }
            assert!(start.elapsed() < START, "pod elsewhere was not scheduled and Ready: {:?}", p.status);
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert!(node.starts_with("kwok-node-"), "a pod of a namespace labelled fake goes to a fake node, not {node}");
    })
    .await;
}

/// The local cluster places namespaces (its MutatingAdmissionPolicy): one made without
/// a choice sends its pods to the real node, as `default` does; one labelled
/// `bosun.dev/nodes=fake`, or the peer benchmark's, keeps them on the fake nodes; and
/// the label moves a namespace whenever it changes.
#[tokio::test]
async fn namespaces_go_to_the_real_node_unless_they_ask_for_fake_nodes() {
    e2e("node-placement", |env| async move {
        require_real_node(&env.client).await;
        let api = kube::Api::<Namespace>::all(env.client.clone());
        let placed = |name: String| {
            let api = api.clone();
            async move {
                let ns = api.get(&name).await.unwrap_or_else(|e| panic!("namespace {name}: {e}"));
                ns.metadata.annotations.unwrap_or_default().get("scheduler.alpha.kubernetes.io/node-selector").cloned()
            }
        };
        let real = Some(format!("{REAL_NODE_LABEL}=true"));
        let user = env.namespace_labelled("user", &[]).await;
        assert_eq!(placed(user.clone()).await, real, "a namespace as a user makes it");
        let bench = env.namespace_labelled("bench", &[("bosun-peer-bench", "true")]).await;
        assert_eq!(placed(bench.clone()).await.as_deref(), Some(""), "the peer benchmark's");
        let fake = env.extra_namespace("fake").await;
        assert_eq!(placed(fake).await.as_deref(), Some(""), "labelled {NODES_LABEL}=fake");
        let default = api.get("default").await.unwrap();
        let chosen = default.labels().get(NODES_LABEL).cloned();
        let selector = default.annotations().get("scheduler.alpha.kubernetes.io/node-selector").cloned();
        assert!(chosen.is_some() || selector.is_some(), "default is placed: {:?}", default.metadata);

        for (value, expected) in [("fake", Some(String::new())), ("real", real.clone())] {
            let label = format!("{NODES_LABEL}={value}");
            let (ok, out) = env.kubectl(&["label", "namespace", &user, &label, "--overwrite"]);
            assert!(ok, "{out}");
            assert_eq!(placed(user.clone()).await, expected, "after {label}");
        }
        // An edit of the placement itself is kept (the label did not change).
        let own = "scheduler.alpha.kubernetes.io/node-selector=type=kwok";
        let (ok, out) = env.kubectl(&["annotate", "namespace", &user, own, "--overwrite"]);
        assert!(ok, "{out}");
        assert_eq!(placed(user.clone()).await.as_deref(), Some("type=kwok"), "the user's own placement");

        // And the pods follow: the benchmark's to a fake node.
        let pods = kube::Api::<Pod>::namespaced(env.client.clone(), &bench);
        pods.create(&Default::default(), &pod("bench", images::BASE, "sleep infinity", "Always")).await.unwrap();
        let start = Instant::now();
        let node = loop {
            let p = pods.get("bench").await.unwrap();
            if !node_of(&p).is_empty() {
                break node_of(&p).to_owned();
            }
            assert!(start.elapsed() < START, "pod bench was not scheduled: {:?}", p.status);
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert!(node.starts_with("kwok-node-"), "the benchmark's pod goes to a fake node, not {node}");
    })
    .await;
}

/// A Job completes because its container exited 0 (not because a fake kubelet said so),
/// and a container that exits non-zero is restarted and shows its exit code.
#[tokio::test]
async fn exit_codes_are_real_jobs_complete_and_failures_restart() {
    e2e("node-exit", |env| async move {
        env.use_real_node().await;
        env.apply(&object::<Job>(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "sums"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "main",
                        "image": images::BASE,
                        "imagePullPolicy": "Never",
                        "command": ["bash", "-c", "test $((6 * 7)) = 42 && echo computed"],
                    }],
                }},
            },
        })))
        .await;
        // Fails once, then stays up: kubelet keeps one dead container per container,
        // so with a single failure `logs --previous` always has it to show.
        let once = "if [ -e /state/failed ]; then echo recovered; exec sleep infinity; fi; \
                    touch /state/failed; echo attempt; sleep 1; exit 3";
        let mut crashes = pod("crashes", images::BASE, once, "Always");
        let spec = crashes.spec.as_mut().unwrap();
        spec.volumes = Some(vec![object(json!({"name": "state", "emptyDir": {}}))]);
        spec.containers[0].volume_mounts = Some(vec![object(json!({"name": "state", "mountPath": "/state"}))]);
        env.apply(&crashes).await;

        env.wait_for_within::<Job>("sums", "condition Complete", START, |j| {
            j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
        })
        .await;
        let (ok, out) = env.kubectl(&["logs", "job/sums"]);
        assert!(ok && out.contains("computed"), "the Job's container ran: {out}");

        let crashed = env
            .wait_pod("crashes", "restarted after exiting 3", START, |p| {
                container_status(p, "main").is_some_and(|c| {
                    c.restart_count >= 1
                        && c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 3)
                })
            })
            .await;
        let last = container_status(&crashed, "main").and_then(|c| c.last_state.as_ref()?.terminated.clone());
        assert_eq!(last.map(|t| t.reason), Some(Some("Error".to_owned())), "a non-zero exit is an Error");
        let previous = env.logs("crashes", None, true);
        assert!(previous.contains("attempt"), "the previous container's output: {previous:?}");
        let current = env.wait_pod_ready("crashes", START).await;
        assert_eq!(container_status(&current, "main").map(|c| c.restart_count), Some(1), "one failure, one restart");
    })
    .await;
}

/// The kernel enforces a container's memory limit: a process that grows past it is
/// killed (SIGKILL), and the kubelet reports it (OOMKilled, when containerd saw the
/// OOM event first).
#[tokio::test]
async fn a_memory_limit_is_enforced() {
    e2e("node-oom", |env| async move {
        env.use_real_node().await;
        let mut greedy = pod("greedy", images::BASE, "exec tail /dev/zero", "Never");
        let container = &mut greedy.spec.as_mut().unwrap().containers[0];
        container.resources = Some(object(json!({"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}})));
        env.apply(&greedy).await;
        let killed = env
            .wait_pod("greedy", "terminated by the OOM killer", START, |p| {
                container_status(p, "main").and_then(|c| c.state.as_ref()?.terminated.as_ref()).is_some()
            })
            .await;
        let terminated = container_status(&killed, "main").and_then(|c| c.state.as_ref()?.terminated.clone()).unwrap();
        // Nothing but the kernel's OOM killer sends `tail /dev/zero` a SIGKILL. The
        // reason is OOMKilled when containerd (1.6, Debian's) sees the cgroup's OOM event
        // before the exit; on a loaded machine the exit may come first and the reason
        // is the generic Error (make test runs test binaries side by side).
        assert_eq!(terminated.exit_code, 137, "killed by SIGKILL: {terminated:?}");
        let reason = terminated.reason.as_deref();
        assert!(matches!(reason, Some("OOMKilled" | "Error")), "{terminated:?}");
        if reason != Some("OOMKilled") {
            eprintln!("node-oom: killed by SIGKILL, reported as {reason:?} (the exit came before the OOM event)");
        }
    })
    .await;
}

// --- PostgreSQL from the offline image --------------------------------------------------

/// The StatefulSet one would write for the official `postgres:15` image runs unchanged
/// on the local image: the readiness probe passes only once the server accepts
/// connections, `psql` answers over `kubectl exec`, and the data on the claim of the
/// default StorageClass survives the pod being deleted.
#[tokio::test]
async fn postgresql_15_serves_sql_and_keeps_its_data_across_a_pod_delete() {
    e2e("node-postgres", |env| async move {
        env.use_real_node().await;
        let readiness = |port: u16| {
            json!({
                "exec": {"command": ["pg_isready", "-U", "postgres", "-h", "127.0.0.1", "-p", port.to_string()]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            })
        };
        let statefulset = |name: &str, probe_port: u16| {
            object::<StatefulSet>(json!({
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": name},
                "spec": {
                    "serviceName": name,
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "terminationGracePeriodSeconds": 5,
                            "containers": [{
                                "name": "postgres",
                                "image": images::POSTGRES,
                                "imagePullPolicy": "IfNotPresent",
                                "env": [
                                    {"name": "POSTGRES_PASSWORD", "value": "s3cret"},
                                    {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                                ],
                                "ports": [{"name": "postgres", "containerPort": 5432}],
                                "readinessProbe": readiness(probe_port),
                                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                            }],
                        },
                    },
                    "volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                    }],
                },
            }))
        };
        env.apply(&statefulset("test-db", 5432)).await;
        // The same server probed on a port it does not serve: Running, never Ready.
        env.apply(&statefulset("wrong-probe", 5433)).await;

        // The probe gates Ready: proven by wrong-probe below (Running, never Ready). Seeing
        // test-db-0 Running-but-not-Ready during initdb depended on polling in time, and a
        // fast initdb on a quiet machine made that check fail at random.
        let ready = env.wait_pod_ready("test-db-0", START).await;
        assert_eq!(node_of(&ready), REAL_NODE);
        let accepting = env.exec_ok("test-db-0", &["pg_isready", "-h", "127.0.0.1"]);
        assert!(accepting.contains("accepting connections"), "{accepting}");

        let version = env.exec_ok("test-db-0", &["psql", "-U", "postgres", "-tAc", "SELECT version();"]);
        assert!(version.starts_with("PostgreSQL 15."), "{version}");

        // From another pod, over the pod network: password authentication, as the
        // official image configures it for remote clients.
        env.apply(&pod("client", images::POSTGRES, "exec sleep infinity", "Always")).await;
        env.wait_pod_ready("client", START).await;
        let server = pod_ip(&ready).to_owned();
        let psql = |password: &str, sql: &str| {
            env.exec(
                "client",
                &[
                    "env",
                    &format!("PGPASSWORD={password}"),
                    "psql",
                    "-h",
                    &server,
                    "-U",
                    "postgres",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-tAc",
                    sql,
                ],
            )
        };
        let (ok, out) = psql("wrong", "SELECT 1");
        assert!(!ok && out.contains("password authentication failed"), "a wrong password is refused: {out}");
        let (ok, out) =
            psql("s3cret", "CREATE TABLE kept (id int, note text); INSERT INTO kept VALUES (1, 'über die Brücke');");
        assert!(ok, "the right password is accepted: {out}");

        let first_uid = ready.metadata.uid.clone();
        env.api::<Pod>().delete("test-db-0", &Default::default()).await.expect("delete pod");
        let again = env
            .wait_pod("test-db-0", "re-created and Ready", START, |p| p.metadata.uid != first_uid && pod_ready(p))
            .await;
        assert_eq!(node_of(&again), REAL_NODE);
        let kept = env.exec_ok("test-db-0", &["psql", "-U", "postgres", "-tAc", "SELECT note FROM kept WHERE id = 1"]);
        assert_eq!(kept.trim(), "über die Brücke", "the row survived the pod");

        // wrong-probe-0 (its claim provisioned and its pod started independently of
        // test-db-0's) serves on 5432 like the other; its probe of 5433 keeps failing.
        env.wait_pod("wrong-probe-0", "Running", START, |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .await;
        let serving = Instant::now();
        while !env.exec("wrong-probe-0", &["pg_isready", "-U", "postgres", "-h", "127.0.0.1"]).0 {
            assert!(serving.elapsed() < START, "wrong-probe-0's server never accepted connections");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Several probe periods (1 s) after the server is up, still not Ready.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let wrong = env.api::<Pod>().get("wrong-probe-0").await.expect("pod wrong-probe-0");
        assert!(!pod_ready(&wrong), "a probe of a port nothing serves keeps the pod un-Ready");
    })
    .await;
}

// --- API and DNS from a pod ---------------------------------------------------------------

/// An ordinary pod resolves Service names through cluster DNS and reaches the
/// apiserver through the `kubernetes` Service with its ServiceAccount token: allowed
/// what its Role grants, refused the rest.
#[tokio::test]
async fn a_pod_reaches_the_apiserver_and_resolves_services() {
    e2e("node-api-dns", |env| async move {
        env.use_real_node().await;
        let ns = env.ns.clone();
        env.apply(&object::<ServiceAccount>(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}),
        ))
        .await;
        env.apply(&object::<Role>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        })))
        .await;
        env.apply(&object::<RoleBinding>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        })))
        .await;
        env.apply(&object::<Service>(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        })))
        .await;
        let mut prober = pod("prober", images::TOOLBOX, "exec sleep infinity", "Always");
        prober.spec.as_mut().unwrap().service_account_name = Some("reader".to_owned());
        env.apply(&prober).await;
        // A real server behind the Service, on the real node as well: it answers each
        // connection with its host name.
        let serve = "while true; do echo \"served by $(hostname)\" | nc -N -l 8080; done";
        let mut web = pod("web", images::TOOLBOX, serve, "Always");
        web.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        env.apply(&web).await;
        env.wait_pod_ready("prober", START).await;
        env.wait_pod_ready("web", START).await;

        let cluster_ip = env.api::<Service>().get("web").await.unwrap().spec.unwrap().cluster_ip.unwrap();
        let resolved = env.exec_ok("prober", &["getent", "hosts", &format!("web.{ns}.svc.cluster.local")]);
        assert!(resolved.starts_with(&cluster_ip), "DNS answers the Service's ClusterIP {cluster_ip}: {resolved}");
        let short = env.exec_ok("prober", &["getent", "hosts", "web"]);
        assert!(short.starts_with(&cluster_ip), "the search path resolves the short name: {short}");
        // kube-proxy programs a new Service within a second or two, and the server
        // re-listens after each connection: ask until it answers.
        let start = Instant::now();
        loop {
            let (_, answer) = env.exec("prober", &["nc", "-w", "3", "web", "80"]);
            if answer.contains("served by web") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the Service never routed to the server pod: {answer}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        let api = |path: &str| {
            format!(
                "curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' \
                 --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt \
                 -H \"Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)\" \
                 https://kubernetes.default.svc{path}"
            )
        };
        let pods_path = format!("/api/v1/namespaces/{ns}/pods");
        let listed =
            env.exec_ok("prober", &["bash", "-c", &api(&pods_path).replace("-o /dev/null -w '%{http_code}'", "")]);
        let listed: Value = serde_json::from_str(&listed).unwrap_or_else(|e| panic!("pod list JSON ({e}): {listed}"));
        let names: Vec<&str> =
            listed["items"].as_array().unwrap().iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
        assert!(names.contains(&"prober"), "the pod lists its own namespace's pods: {names:?}");
        let status = env.exec_ok("prober", &["bash", "-c", &api(&format!("/api/v1/namespaces/{ns}/secrets"))]);
        assert_eq!(status.trim(), "403", "what the Role does not grant is refused");
    })
    .await;
}
