//! Proofs about the local cluster's two real nodes: a pod on the second one serves a
//! pod on the first through a Service and cluster DNS, and the machine reaches it;
//! and a test can break the second node the ways a machine is lost (a network
//! partition, a power loss) and mend it, with the cluster seeing each.
//!
//! It breaks the second real node, so it runs beside no other test that uses that node
//! (hack/test.sh's `node 2`).
//! Run with a cluster up: `hack/controlplane/cluster.sh up`, then
//! `cargo test -p bosun-testing --test nodes`.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // tests: failing loudly is the point

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bosun_testing::node::{REAL_NODE, SECOND_REAL_NODE, images};
use bosun_testing::{NodeAction, NodeGuard, e2e, on_real_node};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use serde_json::json;

const START: Duration = Duration::from_secs(90);

/// A pod of `image` on real node `node` (its own selector beside the namespace's).
fn pod_on(name: &str, node: &str, image: &str, command: Option<&str>) -> Pod {
    let mut container = json!({"name": "main", "image": image, "imagePullPolicy": "Never"});
    if let Some(script) = command {
        container["command"] = json!(["bash", "-c", script]);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }))
    .unwrap()
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()
}

fn container_id(pod: &Pod) -> String {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    statuses.first().and_then(|c| c.container_id.clone()).unwrap_or_default()
}

/// The HTTP status line nginx at `ip:80` answers the machine with, or why there is none.
fn http_from_host(ip: &str) -> Result<String, String> {
    let addr: SocketAddr = format!("{ip}:80").parse().map_err(|e| format!("{ip}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.lines().next().map(str::to_owned).ok_or_else(|| "no answer".into())
}

async fn node_action(action: NodeAction) {
    on_real_node(action, SECOND_REAL_NODE).await;
}

/// Asks until `probe` holds (a route, a Service or a restarted pod takes a moment).
async fn eventually(what: &str, limit: Duration, probe: impl Fn() -> Result<(), String>) {
    let started = Instant::now();
    loop {
        match probe() {
            Ok(()) => return,
            Err(e) if started.elapsed() > limit => panic!("{what}: still not after {limit:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[tokio::test]
async fn the_second_node_serves_across_nodes_and_is_lost_and_found_again() {
    e2e("nodes", |env| async move {
        env.use_real_nodes().await;
        env.apply(
            &serde_json::from_value::<Service>(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }))
            .unwrap(),
        )
        .await;
        env.apply(&pod_on("web", SECOND_REAL_NODE, images::NGINX, None)).await;
        env.apply(&pod_on("prober", REAL_NODE, images::TOOLBOX, Some("exec sleep infinity"))).await;
        let web = env.wait_pod_ready("web", START).await;
        env.wait_pod_ready("prober", START).await;
        assert_eq!(node_of(&web), SECOND_REAL_NODE);
        let ip = pod_ip(&web);
        assert!(ip.starts_with("10.245.1."), "a pod address of the second node's range: {ip}");

        // Across nodes: the first node's pod finds the Service by name and reaches the
        // pod behind it; the second node's pod resolves names too (DNS runs on the first).
        let curl = |target: &str| {
            let (ok, out) =
                env.exec("prober", &["curl", "-s", "--max-time", "3", "-o", "/dev/null", "-w", "%{http_code}", target]);
            if ok && out.trim() == "200" { Ok(()) } else { Err(format!("{ok} {out}")) }
        };
        eventually("the first node's pod reaches the Service web on the second", Duration::from_secs(30), || {
            curl("http://web")
        })
        .await;
        let resolved = env.exec_ok("web", &["getent", "hosts", "kubernetes.default.svc.cluster.local"]);
        assert!(resolved.starts_with("10.96.0.1"), "cluster DNS from the second node: {resolved}");
        let host = |ip: &str| http_from_host(ip).and_then(|l| if l.contains("200") { Ok(()) } else { Err(l) });
        eventually("the machine reaches the second node's pod", Duration::from_secs(10), || host(&ip)).await;

        // A partition: nothing passes, both ways, but the node's processes run on.
        let _mend = NodeGuard(SECOND_REAL_NODE);
        node_action(NodeAction::Partition).await;
        assert!(host(&ip).is_err(), "the machine still reaches {ip} across the partition");
        assert!(curl(&format!("http://{ip}")).is_err(), "the first node's pod still reaches {ip} across the partition");
        let (ok, out) = env.kubectl(&["exec", "--request-timeout=5s", "web", "--", "true"]);
        assert!(!ok, "exec through the partitioned node's kubelet worked: {out}");
        node_action(NodeAction::Heal).await;
        eventually("the pod answers again after the heal", Duration::from_secs(30), || host(&ip)).await;
        curl(&format!("http://{ip}")).unwrap();

        // A power loss: the node's daemons and containers die at once; its lease is no
        // longer renewed. Started again, its kubelet brings the pod back, in a new container.
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
        let renewed = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
        let before = container_id(&env.api::<Pod>().get("web").await.unwrap());
        node_action(NodeAction::Stop).await;
        assert!(host(&ip).is_err(), "the stopped node's pod still answers");
        let stopped_at = renewed(leases.get(SECOND_REAL_NODE).await.unwrap());
        tokio::time::sleep(Duration::from_secs(15)).await;
        let later = renewed(leases.get(SECOND_REAL_NODE).await.unwrap());
        assert_eq!(later, stopped_at, "the stopped node's lease was renewed");
        assert!(host(&ip).is_err(), "the stopped node's pod answers again on its own");
        node_action(NodeAction::Start).await;
        let back = env
            .wait_pod("web", "Ready in a new container", START, |p| {
                bosun_testing::node::pod_ready(p) && container_id(p) != before
            })
            .await;
        let ip = pod_ip(&back);
        eventually("the restarted pod answers", Duration::from_secs(30), || host(&ip)).await;
        let renewed_again = renewed(leases.get(SECOND_REAL_NODE).await.unwrap());
        assert!(renewed_again > later, "the started node renews its lease again");
    })
    .await;
}
