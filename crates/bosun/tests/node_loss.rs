//! Losing the machine under a PostgreSQL primary, end to end on the local cluster's two
//! real nodes with real PostgreSQL 15: the primary's node loses its power (its kubelet,
//! containerd and every container killed at once), and a standby on the other node
//! takes over while Kubernetes still shows the lost node Ready (it declares it only
//! after its node monitor's grace period); when the node comes back, the old primary
//! rejoins as a standby. A writer pod on the surviving node measures the write outage.
//!
//! It stops a node every test may use, so it runs alone (hack/test.sh's `alone`).
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

mod writer;

use std::time::{Duration, Instant};

use bosun_api::postgresql::PostgreSQL;
use bosun_testing::node::{REAL_NODE, SECOND_REAL_NODE};
use bosun_testing::{Env, NodeAction, NodeGuard, break_node, e2e};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use writer::{acks, outage, start_writer_on, unix_now};

const BOSUN: &[&str] =
    &["--controllers=postgresql", "--postgres-image=localhost/postgres:15", "--postgres-volume-permissions"];
const MANIFEST: &str = "apiVersion: database.example.com/v1\nkind: PostgreSQL\nmetadata: {name: test-db}\n\
                        spec: {version: \"15\", storage: 1Gi, replicas: 2, failoverDelay: 10s}\n";
const INSTANCES: [&str; 2] = ["test-db-0", "test-db-1"];

fn psql(env: &Env, pod: &str, sql: &str) -> Option<String> {
    let (ok, out) = env.kubectl(&[
        "exec",
        "--request-timeout=10s",
        pod,
        "-c",
        "postgres",
        "--",
        "psql",
        "-X",
        "-U",
        "postgres",
        "-tAc",
        sql,
    ]);
    ok.then(|| out.trim().to_owned())
}

/// The primary, once exactly one instance is out of recovery and streams to the other.
fn streaming_primary(env: &Env) -> Result<String, String> {
    let mut primaries = Vec::new();
    for pod in INSTANCES {
        match psql(env, pod, "SELECT pg_is_in_recovery()").as_deref() {
            Some("f") => primaries.push(pod),
            Some("t") => {}
            other => return Err(format!("{pod} does not answer: {other:?}")),
        }
    }
    let [primary] = primaries[..] else { return Err(format!("instances out of recovery: {primaries:?}")) };
    let streaming = psql(env, primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'");
    if streaming.as_deref() != Some("1") {
        return Err(format!("{primary} streams to {streaming:?} standbys"));
    }
    Ok(primary.to_owned())
}

async fn wait_streaming(env: &Env, what: &str, timeout: Duration) -> String {
    let start = Instant::now();
    loop {
        match streaming_primary(env) {
            Ok(primary) => return primary,
            Err(why) if start.elapsed() > timeout => {
                let (_, pods) = env.kubectl(&["get", "pods", "-o", "wide", "-L", "database.example.com/role"]);
                panic!("{what}: not after {timeout:?}: {why}\n{pods}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn node_of(env: &Env, pod: &str) -> String {
    env.api::<Pod>().get(pod).await.unwrap().spec.and_then(|s| s.node_name).unwrap_or_default()
}

async fn node_ready(env: &Env, name: &str) -> bool {
    let node = Api::<Node>::all(env.client.clone()).get(name).await.unwrap();
    let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

async fn on_node(action: NodeAction) {
    tokio::task::spawn_blocking(move || break_node(action, SECOND_REAL_NODE))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{action:?} {SECOND_REAL_NODE}: {e:#}"));
}

#[tokio::test]
async fn the_primarys_node_lost_a_standby_takes_over_before_kubernetes_notices_and_the_old_primary_rejoins() {
    e2e("node-loss", |env| async move {
        env.use_real_nodes().await;
        let _bosun = env.start_bosun(BOSUN).await;
        let (ok, out) = env.kubectl_apply(MANIFEST);
        assert!(ok, "{out}");
        let mut primary = wait_streaming(&env, "a new database", Duration::from_secs(300)).await;
        let nodes = [node_of(&env, INSTANCES[0]).await, node_of(&env, INSTANCES[1]).await];
        assert!(nodes[0] != nodes[1], "the instances are spread over the real nodes: {nodes:?}");
        if node_of(&env, &primary).await != SECOND_REAL_NODE {
            let other = INSTANCES.iter().find(|p| **p != primary).unwrap();
            let (ok, out) = env.kubectl(&["annotate", "postgresql", "test-db", &format!("database.example.com/switchover-to={other}")]);
            assert!(ok, "{out}");
            primary = wait_streaming(&env, "a switchover to the second node", Duration::from_secs(120)).await;
            assert_eq!(primary, *other);
        }
        let standby = INSTANCES.iter().find(|p| **p != primary).unwrap().to_string();
        start_writer_on(&env, Some(REAL_NODE)).await;

        // The power cut.
        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Stop).await;
        let start = Instant::now();
        while !acks(&env).last().is_some_and(|(_, t)| *t > at + 0.5) {
            assert!(start.elapsed() < Duration::from_secs(90), "no write succeeded within 90 s of the node's loss");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let writable_after = unix_now() - at;
        assert!(node_ready(&env, SECOND_REAL_NODE).await, "Kubernetes still shows the lost node Ready: it did not wait for it");
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        let change = db.status.as_ref().and_then(|s| s.last_primary_change.clone()).unwrap();
        assert_eq!((change.from.as_str(), change.to.as_str(), change.kind.as_str()), (primary.as_str(), standby.as_str(), "Failover"));
        assert!(change.reason.contains("has not answered"), "{change:?}");
        assert_eq!(psql(&env, &standby, "SELECT pg_is_in_recovery()").as_deref(), Some("f"));
        let outage = outage(&acks(&env), at);
        eprintln!("node loss: {primary} on {SECOND_REAL_NODE} → {standby}; writes back within {writable_after:.1} s, longest gap between acknowledged writes {outage:.2} s");

        // The node back: the old primary follows the new one.
        on_node(NodeAction::Start).await;
        let returned = Instant::now();
        let back = wait_streaming(&env, "the old primary streaming from the new one", Duration::from_secs(180)).await;
        let rejoined = returned.elapsed().as_secs_f64();
        assert_eq!(back, standby, "the new primary stays");
        assert_eq!(psql(&env, &primary, "SELECT pg_is_in_recovery()").as_deref(), Some("t"), "the old primary is a standby");
        let stored = psql(&env, &standby, "SELECT id FROM w ORDER BY id").unwrap();
        let lost = writer::lost(&stored, &acks(&env));
        eprintln!(
            "node loss: every instance streaming {rejoined:.1} s after the node's return; acknowledged rows lost \
             without synchronous replication: {}",
            lost.len()
        );
    })
    .await;
}
