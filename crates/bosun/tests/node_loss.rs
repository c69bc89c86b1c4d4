//! Losing the machine under a PostgreSQL primary, end to end on the local cluster's two
//! real nodes with real PostgreSQL 15: the primary's node loses its power (its kubelet,
//! containerd and every container killed at once), and a standby on the other node
//! takes over while Kubernetes still shows the lost node Ready (it declares it only
//! after its node monitor's grace period); when the node comes back, the old primary
//! rejoins as a standby. A writer pod on the surviving node measures the write outage.
//! Then the same node is cut off the network instead: its primary fences itself before
//! bosun promotes the standby, which a writer on the cut-off node proves.
//!
//! It stops a node every test may use, so it runs alone (hack/test.sh's `alone`).
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

mod writer;

use std::time::{Duration, Instant};

use bosun_api::postgresql::PostgreSQL;
use bosun_testing::node::{REAL_NODE, SECOND_REAL_NODE};
use bosun_testing::{Bosun, Env, NodeAction, NodeGuard, e2e, on_real_node};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use serde_json::json;
use writer::{acks, acks_of, outage, start_writer_named, start_writer_on, unix_now};

const BOSUN: &[&str] =
    &["--controllers=postgresql", "--postgres-image=localhost/postgres:15", "--postgres-volume-permissions"];
const MANIFEST: &str = "apiVersion: database.example.com/v1\nkind: PostgreSQL\nmetadata: {name: test-db}\n\
                        spec: {version: \"15\", storage: 1Gi, replicas: 2, failoverDelay: 10s}\n";
const INSTANCES: [&str; 2] = ["test-db-0", "test-db-1"];
/// The test and the benchmark each break the same node: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn psql(env: &Env, pod: &str, sql: &str) -> Option<String> {
    // stdout alone: kubectl's own warnings (a websocket's stray message) go to stderr.
    let exec =
        ["exec", "--request-timeout=10s", pod, "-c", "postgres", "--", "psql", "-X", "-U", "postgres", "-tAc", sql];
    let (ok, out, _) = env.kubectl_split(&exec);
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

/// bosun and the 2-instance `test-db`, its instances spread over the real nodes and its
/// primary on the second one (switched over there if it started on the first):
/// (bosun, the primary, the standby).
async fn database(env: &Env) -> (Bosun, String, String) {
    env.use_real_nodes().await;
    let bosun = env.start_bosun(BOSUN).await;
    let (ok, out) = env.kubectl_apply(MANIFEST);
    assert!(ok, "{out}");
    wait_streaming(env, "a new database", Duration::from_secs(300)).await;
    let nodes = [node_of(env, INSTANCES[0]).await, node_of(env, INSTANCES[1]).await];
    assert!(nodes[0] != nodes[1], "the instances are spread over the real nodes: {nodes:?}");
    let (primary, standby) = primary_on_the_second_node(env).await;
    (bosun, primary, standby)
}

/// The primary moved to the second node if it is not there: (the primary, the standby).
async fn primary_on_the_second_node(env: &Env) -> (String, String) {
    let mut primary = wait_streaming(env, "before moving the primary", Duration::from_secs(180)).await;
    if node_of(env, &primary).await != SECOND_REAL_NODE {
        let other = INSTANCES.iter().find(|p| **p != primary).unwrap();
        let request = format!("database.example.com/switchover-to={other}");
        let (ok, out) = env.kubectl(&["annotate", "--overwrite", "postgresql", "test-db", &request]);
        assert!(ok, "{out}");
        let start = Instant::now();
        while psql(env, other, "SELECT pg_is_in_recovery()").as_deref() != Some("f") {
            assert!(start.elapsed() < Duration::from_secs(120), "no switchover to {other}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        primary = wait_streaming(env, "a switchover to the second node", Duration::from_secs(120)).await;
        assert_eq!(primary, *other);
    }
    let standby = INSTANCES.iter().find(|p| **p != primary).unwrap().to_string();
    (primary, standby)
}

/// Waits until the writer has a row acknowledged after `at` (Unix seconds); the
/// seconds from `at` to then.
async fn writes_back(env: &Env, at: f64) -> f64 {
    let start = Instant::now();
    while !acks(env).last().is_some_and(|(_, t)| *t > at + 0.5) {
        assert!(start.elapsed() < Duration::from_secs(90), "no write succeeded within 90 s of the node's loss");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    unix_now() - at
}

/// When bosun decided its last change of primary (Unix seconds).
async fn decided(env: &Env) -> Option<f64> {
    let db = env.api::<PostgreSQL>().get("test-db").await.ok()?;
    let started = db.status?.last_primary_change?.started.parse::<jiff::Timestamp>().ok()?;
    Some(started.as_millisecond() as f64 / 1000.0)
}

async fn on_node(action: NodeAction) {
    on_real_node(action, SECOND_REAL_NODE).await;
}

#[tokio::test]
async fn the_primarys_node_lost_a_standby_takes_over_before_kubernetes_notices_and_the_old_primary_rejoins() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("node-loss", |env| async move {
        let (_bosun, primary, standby) = database(&env).await;
        start_writer_on(&env, Some(REAL_NODE)).await;

        // The power cut.
        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Stop).await;
        let writable_after = writes_back(&env, at).await;
        assert!(node_ready(&env, SECOND_REAL_NODE).await, "Kubernetes still shows the lost node Ready: it did not wait for it");
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        let change = db.status.as_ref().and_then(|s| s.last_primary_change.clone()).unwrap();
        assert_eq!((change.from.as_str(), change.to.as_str(), change.kind.as_str()), (primary.as_str(), standby.as_str(), "Failover"));
        assert!(change.reason.contains("has not answered"), "{change:?}");
        assert_eq!(psql(&env, &standby, "SELECT pg_is_in_recovery()").as_deref(), Some("f"));
        let outage = outage(&acks(&env), at);
        eprintln!("node loss: {primary} on {SECOND_REAL_NODE} → {standby}; writes back within {writable_after:.1} s, longest gap between acknowledged writes {outage:.2} s");

        // The node back: the old primary follows the new one, within the minute.
        on_node(NodeAction::Start).await;
        let returned = Instant::now();
        let back = wait_streaming(&env, "the old primary streaming from the new one", Duration::from_secs(60)).await;
        assert_eq!(back, standby, "the new primary stays");
        assert_eq!(psql(&env, &primary, "SELECT pg_is_in_recovery()").as_deref(), Some("t"), "the old primary is a standby");
        eprintln!("node loss: every instance streaming {:.1} s after the node's return", returned.elapsed().as_secs_f64());
        let stored = psql(&env, &standby, "SELECT id FROM w ORDER BY id").unwrap();
        let lost = writer::lost(&stored, &acks(&env));
        eprintln!("node loss: acknowledged rows lost without synchronous replication: {}", lost.len());

        // The network cut instead: the cut-off primary fences itself before a standby is
        // promoted, so a writer beside it on its own node has nothing acknowledged after
        // bosun's decision; healed, it is told it is a standby now and follows.
        let (primary, standby) = primary_on_the_second_node(&env).await;
        let split = split_brain_check(&env, &primary, "island", 1_000_000).await;
        let at = unix_now();
        on_node(NodeAction::Partition).await;
        let writable_after = writes_back(&env, at).await;
        let decision = decided(&env).await.filter(|d| *d >= at).expect("bosun decided a failover");
        assert_eq!(psql(&env, &standby, "SELECT pg_is_in_recovery()").as_deref(), Some("f"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        on_node(NodeAction::Heal).await;
        let healed = Instant::now();
        let back = wait_streaming(&env, "the fenced old primary streaming from the new one", Duration::from_secs(60)).await;
        assert_eq!(back, standby, "the new primary stays");
        let rejoined = healed.elapsed().as_secs_f64();
        let (before, after, last) = split.acks_around(&env, decision);
        eprintln!(
            "partition: {primary} on {SECOND_REAL_NODE} → {standby}; writes back within {writable_after:.1} s, decided {:.1} s \
             after the cut; the cut-off primary's last acknowledged write {:.1} s before the decision; every instance \
             streaming {rejoined:.1} s after the heal",
            decision - at,
            decision - last.unwrap_or(decision)
        );
        assert!(before > 0, "the writer beside the cut-off primary had writes acknowledged before the cut");
        assert_eq!(after, 0, "writes acknowledged by the cut-off primary after a new one was decided");
        let (_, log) = env.kubectl(&["logs", &primary, "-c", "postgres"]);
        assert!(log.contains("fencing it"), "the old primary fenced itself: {}", &log[log.len().saturating_sub(3000)..]);
    })
    .await;
}

/// A writer pod on the second node writing straight to `primary`'s address: what the
/// primary acknowledged around bosun's decision.
struct SplitBrainCheck {
    name: String,
}

async fn split_brain_check(env: &Env, primary: &str, name: &str, first_id: i64) -> SplitBrainCheck {
    let pod = env.api::<Pod>().get(primary).await.unwrap();
    let ip = pod.status.and_then(|s| s.pod_ip).unwrap();
    start_writer_named(env, name, Some(SECOND_REAL_NODE), &ip, first_id).await;
    SplitBrainCheck { name: name.to_owned() }
}

impl SplitBrainCheck {
    /// (writes acknowledged before `decision`, after it, the last one's time).
    fn acks_around(&self, env: &Env, decision: f64) -> (usize, usize, Option<f64>) {
        let acked = acks_of(env, &self.name);
        let after = acked.iter().filter(|(_, t)| *t > decision).count();
        (acked.len() - after, after, acked.iter().map(|(_, t)| *t).filter(|t| *t <= decision).reduce(f64::max))
    }
}

/// `make bench-failover`'s node cases: the primary's node loses its power, or is cut off
/// the network, `BENCH_RUNS` (5) times each, on one asynchronous 2-instance database
/// (the primary moved back to the second node before each run). Per case: writes back
/// after the fault, the longest gap between acknowledged writes, bosun's decision, and
/// every instance streaming again after the node's return; and, for the partition, the
/// writes the cut-off old primary acknowledged (to a writer on its own node) after the
/// new primary was decided: 0 when the old primary fenced itself in time. Prints a table
/// and writes `target/bench/node-loss.json`. Not a test: numbers only.
#[tokio::test]
#[ignore = "a benchmark: make bench-failover"]
async fn bench_node_loss() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("bench-node-loss", |env| async move {
        let _bosun = database(&env).await;
        start_writer_on(&env, Some(REAL_NODE)).await;
        let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
        let mut rows = Vec::new();
        let mut island_acks = Vec::new();
        println!("\nthe primary's node lost ({runs} runs each, asynchronous): seconds");
        println!(
            "{:<12} {:>12} {:>10} {:>10} {:>10} {:>14}",
            "fault", "writes back", "gap", "decided", "rejoined", "split writes"
        );
        for (case, action, mend) in [
            ("power loss", NodeAction::Stop, NodeAction::Start),
            ("partition", NodeAction::Partition, NodeAction::Heal),
        ] {
            let mut samples = Vec::new();
            for run in 0..runs {
                let (primary, _) = primary_on_the_second_node(&env).await;
                let island = match action {
                    NodeAction::Partition => {
                        let first = 1_000_000 * (i64::try_from(run).unwrap() + 1);
                        Some(split_brain_check(&env, &primary, &format!("island-{run}"), first).await)
                    }
                    _ => None,
                };
                let _mend = NodeGuard(SECOND_REAL_NODE);
                let at = unix_now();
                on_node(action).await;
                let back = writes_back(&env, at).await;
                let decision = decided(&env).await.filter(|d| *d >= at).map(|d| d - at);
                tokio::time::sleep(Duration::from_secs(3)).await;
                on_node(mend).await;
                let returned = Instant::now();
                wait_streaming(&env, "every instance streaming after the node's return", Duration::from_secs(240))
                    .await;
                let rejoined = returned.elapsed().as_secs_f64();
                let gap = outage(&acks(&env), at);
                let split = island.map(|check| {
                    let (_, late, _) = check.acks_around(&env, at + decision.unwrap_or(0.0));
                    island_acks.extend(acks_of(&env, &check.name));
                    let (ok, out) = env.kubectl(&["delete", "pod", &check.name, "--wait=false"]);
                    assert!(ok, "{out}");
                    late
                });
                let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
                println!(
                    "{case:<12} {back:>12.2} {gap:>10.2} {:>10} {rejoined:>10.1} {:>14}",
                    show(decision),
                    split.map_or("-".to_owned(), |s| s.to_string())
                );
                samples.push(json!({"writes_back": back, "longest_gap": gap, "decided": decision,
                                    "rejoined": rejoined, "split_writes": split}));
            }
            rows.push(json!({"fault": case, "runs": samples}));
        }
        let primary = wait_streaming(&env, "at the end", Duration::from_secs(240)).await;
        let stored = psql(&env, &primary, "SELECT id FROM w ORDER BY id").unwrap();
        let acked = acks(&env);
        let lost = writer::lost(&stored, &acked).len();
        let island_lost = writer::lost(&stored, &island_acks).len();
        println!(
            "the writer's acknowledged rows: {}, lost: {lost}; the cut-off primary's own writer: {} acknowledged, \
             {island_lost} not in the final history",
            acked.len(),
            island_acks.len()
        );
        let report = json!({"runs": runs, "cases": rows, "acknowledged": acked.len(), "lost": lost,
                            "island_acknowledged": island_acks.len(), "island_lost": island_lost});
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node-loss.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    })
    .await;
}
