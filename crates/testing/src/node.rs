//! The local cluster's real nodes: pods that really run.
//!
//! Everything else in the local cluster runs on kwok's fake nodes, which mark pods
//! Ready without starting a container. A test that needs a process to really run
//! (a database, a backup job, bosun in a pod) calls [`Env::use_real_node`]: every pod
//! of its namespace then lands on the first real node, through the apiserver's
//! `PodNodeSelector` and `PodTolerationRestriction` admission plugins, so the
//! manifests under test stay unchanged. A test of more than one machine (losing a
//! node) calls [`Env::use_real_nodes`] instead: the scheduler spreads its pods over
//! both. When the machine cannot run the nodes, the test **fails** with the reason
//! `cluster.sh` recorded; it never skips.
//!
//! The node runs images built offline by `hack/images.sh`; [`images`] names them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::env::Env;
use bosun_localcluster::bootstrap::NODE_SELECTOR;
use bosun_localcluster::cluster::ClusterDir;

/// The first real node's name (`hack/controlplane/node.sh`).
pub const REAL_NODE: &str = bosun_localcluster::realnode::FIRST.name;
/// The second real node's, in a network namespace of its own (the one a test can
/// partition).
pub const SECOND_REAL_NODE: &str = bosun_localcluster::realnode::SECOND.name;
pub const REAL_NODES: [&str; 2] = [REAL_NODE, SECOND_REAL_NODE];
/// The label and the taint (value `true`, effect `NoSchedule`) that keep ordinary pods off it.
pub const REAL_NODE_LABEL: &str = "bosun.dev/real-node";
/// The namespace label that chooses the real node (`real`) or the fake ones (`fake`) on
/// the local cluster; a namespace without it is placed on the real node when made.
pub use bosun_localcluster::controlplane::NODES_LABEL;

/// The images `hack/images.sh` builds from Debian packages and imports into the real
/// node. Nothing can pull on this machine: use them with `imagePullPolicy: Never`
/// (or `IfNotPresent`).
pub mod images {
    /// A minimal Debian base (bash, coreutils, ca-certificates).
    pub const BASE: &str = "localhost/bosun-base:bookworm";
    /// The base plus curl, DNS and network tools, for probing from inside a pod.
    pub const TOOLBOX: &str = "localhost/bosun-toolbox:bookworm";
    /// PostgreSQL 15 with the official `postgres` image's interface.
    pub const POSTGRES: &str = "localhost/postgres:15";
    /// MariaDB 10.11 with the official `mariadb` image's interface.
    pub const MARIADB: &str = "localhost/mariadb:10.11";
    /// Redis 7.
    pub const REDIS: &str = "localhost/redis:7";
    /// Debian's nginx serving its welcome page on ports 80 and 8080.
    pub const NGINX: &str = "localhost/nginx:bookworm";
    /// The backup runner's base: the base plus the database dump clients and zstd.
    pub const RUNNER_BASE: &str = "localhost/bosun-runner-base:trixie";
}

/// Why the running cluster has no real node, as `cluster.sh up` recorded it.
fn missing_reason() -> String {
    ClusterDir::from_env()
        .node_missing()
        .unwrap_or_else(|| "cluster.sh recorded no reason; see `hack/controlplane/cluster.sh status`".to_owned())
}

/// Panics, saying why, unless the (first) real node is registered and Ready.
pub async fn require_real_node(client: &kube::Client) {
    require_node(client, REAL_NODE).await;
}

/// Panics, saying why, unless both real nodes are registered and Ready.
pub async fn require_real_nodes(client: &kube::Client) {
    for name in REAL_NODES {
        require_node(client, name).await;
    }
}

async fn require_node(client: &kube::Client, name: &str) {
    let node = Api::<Node>::all(client.clone()).get_opt(name).await.expect("reading nodes");
    let Some(node) = node else {
        let why = if name == REAL_NODE {
            missing_reason()
        } else {
            ClusterDir::from_env()
                .cluster()
                .and_then(|c| c.node_2.err())
                .unwrap_or_else(|| "see `hack/controlplane/cluster.sh status`".into())
        };
        panic!("this test needs the local cluster's real node {name}, which is missing: {why}");
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(ready, "the real node {name} is not Ready: {conditions:?}");
    // A Ready node can still refuse every pod: the kubelet's disk, memory or PID
    // pressure taints it NoSchedule. Say so now, with the node's own words and the
    // disk's free space, rather than as a pod Pending for minutes.
    let blocking: Vec<String> = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != REAL_NODE_LABEL)
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    if !blocking.is_empty() {
        let pressure: Vec<String> = conditions
            .iter()
            .filter(|c| c.type_ != "Ready" && c.status == "True")
            .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or("")))
            .collect();
        let df = std::process::Command::new("df")
            .args(["-h", "/"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "the real node {name} is Ready but tainted {blocking:?}, so no pod is scheduled there: {pressure:?}\n{df}"
        );
    }
}

/// A container's state as the kubelet reported it.
pub fn container_status<'a>(pod: &'a Pod, container: &str) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == container)
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The namespace annotations that send every pod of a namespace to the real node
/// (what `config/local` gives `bosun-system`, and the local cluster's placement policy
/// any namespace made without a choice).
pub fn real_node_annotations() -> serde_json::Map<String, serde_json::Value> {
    match bosun_localcluster::bootstrap::placement_annotations(true) {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("placement_annotations returns an object"),
    }
}

impl Env {
    /// Send every pod of this test's namespace to the first real node (and fail, with
    /// the reason, if the cluster has none): a test of one machine stays on one, where
    /// it always lands the same way.
    pub async fn use_real_node(&self) {
        require_real_node(&self.client).await;
        self.place_on_real_nodes(Some(REAL_NODE)).await;
    }

    /// Send every pod of this test's namespace to the real nodes, both of them (and
    /// fail, with the reason, unless both run): a test of losing a machine.
    pub async fn use_real_nodes(&self) {
        require_real_nodes(&self.client).await;
        self.place_on_real_nodes(None).await;
    }

    async fn place_on_real_nodes(&self, only: Option<&str>) {
        // Every database instance's first process is the runner image's bosun.
        if only.is_some() {
            import_runner_image();
        } else {
            import_runner_image_everywhere();
        }
        // The label keeps the local cluster's placement policy from putting the
        // namespace back on the fake nodes at this change; the policy then places it
        // on the real nodes. A choice of one is an edit of the annotations alone,
        // after that, which the policy leaves as it is.
        let namespaces = Api::<Namespace>::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {NODES_LABEL: "real"}, "annotations": real_node_annotations()}});
        namespaces
            .patch(&self.ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("annotating namespace {} for the real nodes: {e}", self.ns));
        if let Some(node) = only {
            let selector = format!("{REAL_NODE_LABEL}=true,kubernetes.io/hostname={node}");
            let patch = json!({"metadata": {"annotations": {NODE_SELECTOR: selector}}});
            let placed = namespaces
                .patch(&self.ns, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_or_else(|e| panic!("placing namespace {} on {node}: {e}", self.ns));
            let kept = placed.metadata.annotations.as_ref().and_then(|a| a.get(NODE_SELECTOR));
            assert_eq!(kept, Some(&selector), "namespace {} keeps its placement on {node}", self.ns);
        }
    }

    /// Enforce the `restricted` Pod Security Standard in the test's namespace: a pod
    /// that does not pass it is refused by the apiserver (a StatefulSet's or a Job's
    /// then never runs).
    pub async fn use_restricted(&self) {
        let labels = json!({
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        });
        let patch = json!({"metadata": {"labels": labels}});
        Api::<Namespace>::all(self.client.clone())
            .patch(&self.ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("labelling namespace {} restricted: {e}", self.ns));
    }

    /// Wait until pod `name` is Ready; panics after `timeout` with its status and the
    /// node's view of it (events), which is what explains a pod that does not start.
    pub async fn wait_pod_ready(&self, name: &str, timeout: Duration) -> Pod {
        self.wait_pod(name, "Ready", timeout, pod_ready).await
    }

    /// Poll pod `name` until `condition` holds; on timeout, panic with its status and events.
    pub async fn wait_pod(
        &self,
        name: &str,
        expected: &str,
        timeout: Duration,
        condition: impl Fn(&Pod) -> bool,
    ) -> Pod {
        let api = self.api::<Pod>();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(pod)) = api.get_opt(name).await
                && condition(&pod)
            {
                return pod;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (_, described) = self.kubectl(&["describe", "pod", name]);
        panic!("timed out after {timeout:?} waiting for pod {}/{name} to be {expected}:\n{described}", self.ns)
    }

    /// `kubectl exec POD -- COMMAND...`: (exit status zero, its stdout; stdout and stderr
    /// when it failed).
    pub fn exec(&self, pod: &str, command: &[&str]) -> (bool, String) {
        let mut args = vec!["exec", pod, "--"];
        args.extend_from_slice(command);
        // The command's output alone when it succeeds: kubectl's own klog lines
        // (`E1124 03:23:58.137830 … websocket.go:296] Unknown stream id 1, discarding
        // message`), which a loaded exec websocket writes, go to stderr.
        let (ok, stdout, stderr) = self.kubectl_split(&args);
        if ok { (ok, stdout) } else { (ok, format!("{stdout}{stderr}")) }
    }

    /// `kubectl exec`, panicking with the output when the command fails.
    pub fn exec_ok(&self, pod: &str, command: &[&str]) -> String {
        let (ok, out) = self.exec(pod, command);
        assert!(ok, "kubectl exec {pod} -- {command:?} failed:\n{out}");
        out
    }

    /// `kubectl logs POD [-c CONTAINER] [--previous]`.
    pub fn logs(&self, pod: &str, container: Option<&str>, previous: bool) -> String {
        let mut args = vec!["logs", pod];
        if let Some(c) = container {
            args.extend(["-c", c]);
        }
        if previous {
            args.push("--previous");
        }
        let (ok, out) = self.kubectl(&args);
        assert!(ok, "kubectl logs {pod} failed:\n{out}");
        out
    }
}

/// The host's address on the real node's pod bridge: a server a test starts on the
/// host and binds here is reachable from pods (and from the host), nowhere else.
pub const BRIDGE_IP: &str = "10.245.0.1";

/// The runner image Backup and Restore runs use (`bosun run --runner-image`'s default).
pub const RUNNER_IMAGE: &str = "localhost/bosun-runner:dev";

/// Build [`RUNNER_IMAGE`] from the `bosun` under test, linked statically as images
/// have it (`hack/static-bosun.sh`: cargo, nothing to do when `make test` built it),
/// and import it into the first real node (`hack/images.sh runner`), where every test
/// of one machine places its pods; once per test process.
///
/// Only there: the second node may be stopped or cut off at that moment by a test of
/// losing a machine (`make test` runs those beside the others), and a test of one
/// machine has no pod on it.
pub fn import_runner_image() {
    import_runner_image_into(1);
}

/// [`import_runner_image`] into every real node: for a test that places pods on both.
pub fn import_runner_image_everywhere() {
    import_runner_image_into(usize::MAX);
}

fn import_runner_image_into(nodes: usize) {
    static DONE: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let sockets: Vec<_> = ClusterDir::from_env().containerd_sockets().into_iter().take(nodes).collect();
    if sockets.iter().all(|s| done.contains(s)) {
        return;
    }
    let binary = match std::env::var_os("BOSUN_STATIC_BIN") {
        Some(path) => path.into(),
        None => {
            let out = std::process::Command::new(crate::repo_root().join("hack/static-bosun.sh"))
                .output()
                .unwrap_or_else(|e| panic!("running hack/static-bosun.sh: {e}"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "hack/static-bosun.sh failed:\n{stderr}");
            std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    for socket in sockets {
        if done.contains(&socket) {
            continue;
        }
        let out = std::process::Command::new(crate::repo_root().join("hack/images.sh"))
            .arg("runner")
            .arg("--address")
            .arg(&socket)
            .arg(&binary)
            .output()
            .unwrap_or_else(|e| panic!("running hack/images.sh runner: {e}"));
        assert!(
            out.status.success(),
            "hack/images.sh runner --address {} failed:\n{}{}",
            socket.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        done.push(socket);
    }
}
