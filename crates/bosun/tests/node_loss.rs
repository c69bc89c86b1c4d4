//! Losing the machine under a PostgreSQL primary, end to end on the local cluster's two
//! real nodes with real PostgreSQL 15: the primary's node loses its power (its kubelet,
//! containerd and every container killed at once), and a standby on the other node
//! takes over while Kubernetes still shows the lost node Ready (it declares it only
//! after its node monitor's grace period); when the node comes back, the old primary
//! rejoins as a standby. A writer pod on the surviving node measures the write outage.
//! Then the same node is cut off the network instead: its primary fences itself before
//! bosun promotes the standby, which a writer on the cut-off node proves. Then the
//! faults around it: the standby's node lost (no failover, the standby reported), a
//! flapping partition (never two primaries taking writes), and bosun down when the node
//! is lost and killed again at its decision (the next bosun finishes the failover).
//! And a standby whose data is on a local volume of the lost node: reported, and
//! replaced from the primary when the user asks, its old volume kept.
//!
//! It stops and partitions the second real node, so it runs beside no other test that
//! uses that node (hack/test.sh's `node 2`).
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

mod writer;

use std::time::{Duration, Instant};

use bosun_api::postgresql::PostgreSQL;
use bosun_testing::node::{REAL_NODE, SECOND_REAL_NODE};
use bosun_testing::{Bosun, Env, NodeAction, NodeGuard, e2e, on_real_node};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use writer::{acks, acks_of, failed_between, outage, start_app_writer, start_writer_named, start_writer_on, unix_now};

const BOSUN: &[&str] =
    &["--controllers=postgresql", "--postgres-image=localhost/postgres:15", "--postgres-volume-permissions"];
/// The database, `extra` added to its spec (`, synchronous: {number: 1}`).
fn manifest(replicas: usize, extra: &str) -> String {
    format!(
        "apiVersion: database.example.com/v1\nkind: PostgreSQL\nmetadata: {{name: test-db}}\n\
         spec: {{version: \"15\", storage: 1Gi, replicas: {replicas}, failoverDelay: 10s{extra}}}\n"
    )
}
/// The test and the benchmark each break the same node: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn psql(env: &Env, pod: &str, sql: &str) -> Option<String> {
    // stdout alone: kubectl's own warnings (a websocket's stray message) go to stderr.
    let exec =
        ["exec", "--request-timeout=10s", pod, "-c", "postgres", "--", "psql", "-X", "-U", "postgres", "-tAc", sql];
    let (ok, out, _) = env.kubectl_split(&exec);
    ok.then(|| out.trim().to_owned())
}

/// The database's instances, by its `spec.replicas`.
fn instances(env: &Env) -> Vec<String> {
    let (_, out) = env.kubectl(&["get", "postgresql", "test-db", "-o", "jsonpath={.spec.replicas}"]);
    (0..out.trim().parse::<usize>().unwrap_or(2)).map(|i| format!("test-db-{i}")).collect()
}

/// The primary, once exactly one instance is out of recovery and every other streams
/// from it.
fn streaming_primary(env: &Env) -> Result<String, String> {
    let all = instances(env);
    let mut primaries = Vec::new();
    for pod in &all {
        match psql(env, pod, "SELECT pg_is_in_recovery()").as_deref() {
            Some("f") => primaries.push(pod),
            Some("t") => {}
            other => return Err(format!("{pod} does not answer: {other:?}")),
        }
    }
    let [primary] = primaries[..] else { return Err(format!("instances out of recovery: {primaries:?}")) };
    let streaming = psql(env, primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'");
    if streaming != Some((all.len() - 1).to_string()) {
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

/// bosun and `test-db` of `replicas` instances, spread over the real nodes with one
/// alone on the second (moved off it while it holds more), and its primary there
/// (switched over if it started elsewhere): (bosun, the primary, a standby).
async fn database(env: &Env, replicas: usize, extra: &str) -> (Bosun, String, String) {
    env.use_real_nodes().await;
    let bosun = env.start_bosun(BOSUN).await;
    let (ok, out) = env.kubectl_apply(&manifest(replicas, extra));
    assert!(ok, "{out}");
    wait_streaming(env, "a new database", Duration::from_secs(300)).await;
    let mut on_second = on_the_second_node(env).await;
    if replicas == 2 {
        assert_eq!(on_second.len(), 1, "the instances are spread over the real nodes");
    }
    while on_second.len() > 1 {
        let standby = on_second.iter().find(|p| psql(env, p, "SELECT pg_is_in_recovery()").as_deref() == Some("t"));
        let standby = standby.expect("a standby on the second node").clone();
        let _cordon = Cordon::new(env);
        let (ok, out) = env.kubectl(&["delete", "pod", &standby]);
        assert!(ok, "{out}");
        wait_streaming(env, "an instance moved off the second node", Duration::from_secs(180)).await;
        on_second = on_the_second_node(env).await;
    }
    assert_eq!(on_second.len(), 1, "one instance on the second node");
    let (primary, standby) = primary_on_the_second_node(env).await;
    (bosun, primary, standby)
}

/// The instances on the second real node.
async fn on_the_second_node(env: &Env) -> Vec<String> {
    let mut on = Vec::new();
    for pod in instances(env) {
        if node_of(env, &pod).await == SECOND_REAL_NODE {
            on.push(pod);
        }
    }
    on
}

/// A real node cordoned while it lives: a pod deleted there is placed on the other
/// (the second node's, unless said).
struct Cordon<'a>(&'a Env, &'static str);

impl<'a> Cordon<'a> {
    fn new(env: &'a Env) -> Cordon<'a> {
        Cordon::of(env, SECOND_REAL_NODE)
    }

    fn of(env: &'a Env, node: &'static str) -> Cordon<'a> {
        let (ok, out) = env.kubectl(&["cordon", node]);
        assert!(ok, "{out}");
        Cordon(env, node)
    }
}

impl Drop for Cordon<'_> {
    fn drop(&mut self) {
        let (ok, out) = self.0.kubectl(&["uncordon", self.1]);
        if !ok {
            eprintln!("uncordoning {} failed: {out}", self.1);
        }
    }
}

/// Two of the three instances on the second real node, one on the first: a standby
/// moved (the node it leaves cordoned while it is placed) while it is not so.
async fn two_on_the_second_node(env: &Env) {
    loop {
        let on_second = on_the_second_node(env).await;
        let (from, node) = match on_second.len() {
            2 => return,
            3 => (on_second, SECOND_REAL_NODE),
            _ => (instances(env).into_iter().filter(|p| !on_second.contains(p)).collect(), REAL_NODE),
        };
        let standby = from.iter().find(|p| psql(env, p, "SELECT pg_is_in_recovery()").as_deref() == Some("t"));
        let standby = standby.unwrap_or_else(|| panic!("a standby on {node}")).clone();
        let _cordon = Cordon::of(env, node);
        let (ok, out) = env.kubectl(&["delete", "pod", &standby]);
        assert!(ok, "{out}");
        wait_streaming(env, "an instance moved", Duration::from_secs(180)).await;
    }
}

/// The primary moved to the instance on the second node if it is not there: (the
/// primary, a standby). A switchover that does not hold (the primary changed again
/// after it) is said, with bosun's reason, and asked once more: this sets the stage,
/// the faults come after it.
async fn primary_on_the_second_node(env: &Env) -> (String, String) {
    for attempt in 0..2 {
        let primary = wait_streaming(env, "before moving the primary", Duration::from_secs(180)).await;
        if node_of(env, &primary).await == SECOND_REAL_NODE {
            let standby = instances(env).into_iter().find(|p| *p != primary).unwrap();
            return (primary, standby);
        }
        let other = on_the_second_node(env).await.into_iter().next().expect("an instance on the second node");
        let request = format!("database.example.com/switchover-to={other}");
        let (ok, out) = env.kubectl(&["annotate", "--overwrite", "postgresql", "test-db", &request]);
        assert!(ok, "{out}");
        let start = Instant::now();
        while psql(env, &other, "SELECT pg_is_in_recovery()").as_deref() != Some("f") {
            assert!(start.elapsed() < Duration::from_secs(120), "no switchover to {other}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let now = wait_streaming(env, "a switchover to the second node", Duration::from_secs(120)).await;
        if now == other {
            continue;
        }
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        let change = db.status.and_then(|s| s.last_primary_change);
        assert_eq!(attempt, 0, "the switchover to {other} did not hold twice: {now} is the primary ({change:?})");
        eprintln!("the switchover to {other} did not hold: {now} is the primary again ({change:?}); asked once more");
    }
    let primary = wait_streaming(env, "a switchover to the second node", Duration::from_secs(120)).await;
    assert_eq!(node_of(env, &primary).await, SECOND_REAL_NODE, "the primary {primary} is not on the second node");
    let standby = instances(env).into_iter().find(|p| *p != primary).unwrap();
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
        let (mut bosun, primary, standby) = database(&env, 2, "").await;
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
        let gap = outage(&acks(&env), at);
        eprintln!("node loss: {primary} on {SECOND_REAL_NODE} → {standby}; writes back within {writable_after:.1} s, longest gap between acknowledged writes {gap:.2} s");

        // The node back: the old primary follows the new one, within the issue's minute.
        on_node(NodeAction::Start).await;
        let returned = Instant::now();
        let back = wait_streaming(&env, "the old primary streaming from the new one", Duration::from_secs(60)).await;
        assert_eq!(back, standby, "the new primary stays");
        assert_eq!(psql(&env, &primary, "SELECT pg_is_in_recovery()").as_deref(), Some("t"), "the old primary is a standby");
        eprintln!("node loss: every instance streaming {:.1} s after the node's return", returned.elapsed().as_secs_f64());
        // The acknowledgements first: every one of them was committed before the table is read.
        let acked = acks(&env);
        let stored = psql(&env, &standby, "SELECT id FROM w ORDER BY id").unwrap();
        let lost = writer::lost(&stored, &acked);
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

        // The standby's node lost instead: no failover, the primary goes on taking
        // writes, and the database reports the standby that does not answer.
        let (primary, standby) = (standby, primary);
        // Ready in the API too (the kubelet reports it after its probe), and staying so:
        // only a pod that looks Ready is reported as not answering, and the rejoined
        // instance's pod was once seen Ready in bosun's status while it had turned
        // not Ready again (CI).
        steadily_ready(&env, 2).await;
        let last_change = decided(&env).await;
        let at = unix_now();
        on_node(NodeAction::Stop).await;
        let reported = wait_for(&env, "the lost standby reported", |db| unanswered(db, &standby).is_some()).await;
        let gap = outage(&acks(&env), at);
        assert_eq!(decided(&env).await, last_change, "no change of primary when a standby's node is lost");
        assert!(gap < 5.0, "the primary went on taking writes: the longest gap was {gap:.1} s");
        eprintln!("standby's node lost: reported {reported:.1} s after; longest gap between acknowledged writes {gap:.2} s");
        on_node(NodeAction::Start).await;
        assert_eq!(wait_streaming(&env, "the standby back", Duration::from_secs(60)).await, primary);
        wait_for(&env, "the standby no longer reported", |db| unanswered(db, &standby).is_none()).await;

        // A flapping partition of the primary's node: cut and healed again and again,
        // one cut long enough for a failover. Never two primaries taking writes; one
        // primary, every instance streaming, at the end.
        let (primary, _) = primary_on_the_second_node(&env).await;
        let split = split_brain_check(&env, &primary, "flap", 2_000_000).await;
        let (at, before) = (unix_now(), decided(&env).await);
        for cut in [2, 4, 7, 3] {
            on_node(NodeAction::Partition).await;
            tokio::time::sleep(Duration::from_secs(cut)).await;
            on_node(NodeAction::Heal).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let now = wait_streaming(&env, "one primary after the flapping", Duration::from_secs(90)).await;
        let decision = decided(&env).await.filter(|d| Some(*d) != before);
        let (_, after, _) = split.acks_around(&env, decision.unwrap_or(f64::MAX));
        eprintln!(
            "flapping partition: primary {primary} → {now}, decided {} s after the first cut; writes the old primary \
             acknowledged after it: {after}",
            decision.map_or("never".into(), |d| format!("{:.1}", d - at))
        );
        assert_eq!(after, 0, "writes acknowledged by the old primary after a new one was decided");

        // bosun down when the node is lost, started again, and killed again as soon as
        // it has decided the failover: the next bosun finishes it.
        let (primary, standby) = primary_on_the_second_node(&env).await;
        bosun.signal("KILL");
        bosun.wait_exit(Duration::from_secs(10)).await;
        let at = unix_now();
        on_node(NodeAction::Stop).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        bosun = env.start_bosun(BOSUN).await;
        let start = Instant::now();
        while current_primary(&env).await.as_deref() == Some(primary.as_str()) {
            assert!(start.elapsed() < Duration::from_secs(60), "no failover began after bosun's restart");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bosun.signal("KILL");
        bosun.wait_exit(Duration::from_secs(10)).await;
        let decided_after = unix_now() - at;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let _bosun = env.start_bosun(BOSUN).await;
        let writable_after = writes_back(&env, at).await;
        assert_eq!(current_primary(&env).await.as_deref(), Some(standby.as_str()));
        // The new primary may have fenced itself meanwhile (no bosun, and its only
        // standby lost with the node): the bosun now running tells it its role again.
        let start = Instant::now();
        while psql(&env, &standby, "SELECT pg_is_in_recovery()").as_deref() != Some("f") {
            assert!(start.elapsed() < Duration::from_secs(30), "{standby} does not serve as the primary");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!(
            "node loss with bosun down, then killed at its decision ({decided_after:.1} s): writes back within \
             {writable_after:.1} s"
        );
        on_node(NodeAction::Start).await;
        assert_eq!(wait_streaming(&env, "after the restarts", Duration::from_secs(60)).await, standby);
    })
    .await;
}

/// Issue 45's fence gap: the cut-off primary's container restarts (the kubelet of a
/// partitioned node still runs) after bosun has decided the failover. The new container
/// counts its silence from when the one before last heard anyone, not from its own
/// start: past its fencing time it starts fenced, so a writer beside it on its own node
/// has nothing acknowledged after the decision (before, it served writes for a fencing
/// time after its start). Healed, it follows the new primary.
#[tokio::test]
async fn a_cut_off_primary_whose_container_restarts_takes_no_write_after_the_decision() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("node-loss-restart", |env| async move {
        let (_bosun, primary, standby) = database(&env, 2, "").await;
        start_writer_on(&env, Some(REAL_NODE)).await;
        let split = split_brain_check(&env, &primary, "island", 1_000_000).await;
        let uid = env.api::<Pod>().get(&primary).await.unwrap().metadata.uid.unwrap();

        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Partition).await;
        let writable_after = writes_back(&env, at).await;
        let decision = decided(&env).await.filter(|d| *d >= at).expect("bosun decided a failover");
        // Its container's processes killed, as a crash does; the kubelet starts it again.
        let killed = kill_pod_processes(&uid);
        assert!(killed > 0, "no process of {primary} ({uid}) found on the machine");
        let restarted = unix_now();
        // Long enough for the new container to start and, were it not fenced, to take
        // writes for a whole fencing time after its start; then healed (the island
        // writer's log is read through its node's kubelet).
        tokio::time::sleep(Duration::from_secs(20)).await;
        on_node(NodeAction::Heal).await;
        assert_eq!(wait_streaming(&env, "the old primary following the new one", Duration::from_secs(90)).await, standby);
        let (before, after, last) = split.acks_around(&env, decision);
        eprintln!(
            "partition, then a restart: {primary} → {standby}; decided {:.1} s after the cut, writes back within \
             {writable_after:.1} s; its container killed {:.1} s after the cut; the cut-off primary's last acknowledged \
             write {:.1} s before the decision, {after} after it",
            decision - at,
            restarted - at,
            decision - last.unwrap_or(decision)
        );
        assert!(before > 0, "the writer beside the cut-off primary had writes acknowledged before the cut");
        assert_eq!(after, 0, "writes acknowledged by the cut-off primary's new container after a new one was decided");
        // The kubelet reports the restart once it reaches the apiserver again.
        let start = Instant::now();
        loop {
            let pod = env.api::<Pod>().get(&primary).await.unwrap();
            let statuses = pod.status.and_then(|s| s.container_statuses).unwrap_or_default();
            if statuses.iter().find(|c| c.name == "postgres").is_some_and(|c| c.restart_count >= 1) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the old primary's container did not restart: {statuses:?}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (_, log) = env.kubectl(&["logs", &primary, "-c", "postgres"]);
        assert!(
            log.contains("starts fenced"),
            "the restarted primary did not start fenced: {}",
            &log[log.len().saturating_sub(3000)..]
        );
    })
    .await;
}

/// Issue 45's second fence gap: a partition that leaves a standby beside the primary.
/// Three instances: the primary and a standby on the second node, the other standby
/// on the first with bosun. Cut off, the primary goes on hearing the standby beside
/// it, but that standby no longer hears bosun (the primary asks it): the primary
/// fences itself within its fencing time of the cut, before bosun promotes the standby
/// on the first node, so a writer beside it on its own node has nothing acknowledged
/// after bosun's decision (before, it went on taking writes while its neighbour
/// replied). Healed, both follow the new primary.
#[tokio::test]
async fn a_partition_that_leaves_a_standby_beside_the_primary_fences_it_before_the_other_is_promoted() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("node-loss-split", |env| async move {
        let (_bosun, primary, beside, away) = split_database(&env, "").await;
        start_writer_on(&env, Some(REAL_NODE)).await;
        let split = split_brain_check(&env, &primary, "island", 1_000_000).await;

        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Partition).await;
        let writable_after = writes_back(&env, at).await;
        let decision = decided(&env).await.filter(|d| *d >= at).expect("bosun decided a failover");
        assert_eq!(current_primary(&env).await.as_deref(), Some(away.as_str()), "the standby bosun reaches takes over");
        tokio::time::sleep(Duration::from_secs(2)).await;
        on_node(NodeAction::Heal).await;
        let healed = Instant::now();
        let back = wait_streaming(&env, "both old instances following the new primary", Duration::from_secs(90)).await;
        assert_eq!(back, away, "the new primary stays");
        let (before, after, last) = split.acks_around(&env, decision);
        eprintln!(
            "split partition: {primary} and {beside} on {SECOND_REAL_NODE} cut off, {away} promoted; writes back within \
             {writable_after:.1} s, decided {:.1} s after the cut; the cut-off primary's last acknowledged write {:.1} s \
             before the decision, {after} after it; every instance streaming {:.1} s after the heal",
            decision - at,
            decision - last.unwrap_or(decision),
            healed.elapsed().as_secs_f64()
        );
        assert!(before > 0, "the writer beside the cut-off primary had writes acknowledged before the cut");
        assert_eq!(after, 0, "writes acknowledged by the cut-off primary after a new one was decided");
        let (_, log) = env.kubectl(&["logs", &primary, "-c", "postgres"]);
        assert!(log.contains("fencing it"), "the old primary fenced itself: {}", &log[log.len().saturating_sub(3000)..]);
    })
    .await;
}

/// The same partition with `synchronous: {number: 1}`: a commit may be on the standby
/// beside the primary only, so bosun promotes no one (the standby it reaches may lack
/// acknowledged commits) and the primary, which hears that standby, goes on serving
/// the clients on its side, its commits confirmed by it. Healed: the same primary,
/// every instance streaming, and no acknowledged row lost, on either side.
#[tokio::test]
async fn a_synchronous_database_cut_with_its_primary_and_a_standby_promotes_no_one_and_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("node-loss-split-sync", |env| async move {
        let (_bosun, primary, beside, away) = split_database(&env, ", synchronous: {number: 1}").await;
        start_writer_on(&env, Some(REAL_NODE)).await;
        let split = split_brain_check(&env, &primary, "island", 1_000_000).await;
        let before = decided(&env).await;

        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Partition).await;
        // Long past bosun's limit (5 s) and the standbys' receiver timeout (5 s).
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(decided(&env).await, before, "no change of primary while the standby that may hold commits is cut off");
        assert_eq!(current_primary(&env).await.as_deref(), Some(primary.as_str()));
        on_node(NodeAction::Heal).await;
        let back = wait_streaming(&env, "every instance streaming after the heal", Duration::from_secs(90)).await;
        assert_eq!(back, primary, "the primary stays");
        // The acknowledgements first: every one of them was committed before the table is read.
        let (island, through) = (acks_of(&env, "island"), acks(&env));
        let served = island.iter().filter(|(_, t)| *t > at + 10.0 && *t < at + 20.0).count();
        let stored = psql(&env, &primary, "SELECT id FROM w ORDER BY id").unwrap();
        let (lost_here, lost_there) = (writer::lost(&stored, &island), writer::lost(&stored, &through));
        let (_, after, _) = split.acks_around(&env, at);
        eprintln!(
            "split partition, synchronous: {primary} and {beside} cut off, {away} not promoted; the primary acknowledged \
             {after} writes on its side after the cut ({served} between 10 and 20 s after it); acknowledged rows lost: \
             {} of {} beside it, {} of {} through the Service",
            lost_here.len(),
            island.len(),
            lost_there.len(),
            through.len()
        );
        assert!(served > 0, "the primary served its side while cut off: its standby beside it confirmed its commits");
        assert!(lost_here.is_empty() && lost_there.is_empty(), "acknowledged rows lost: {lost_here:?} {lost_there:?}");
    })
    .await;
}

/// bosun and `test-db` of three instances with `extra` in its spec, two of them on the
/// second real node, its primary one of those: (bosun, the primary, the standby beside
/// it, the standby on the first node).
async fn split_database(env: &Env, extra: &str) -> (Bosun, String, String, String) {
    env.use_real_nodes().await;
    let bosun = env.start_bosun(BOSUN).await;
    let (ok, out) = env.kubectl_apply(&manifest(3, extra));
    assert!(ok, "{out}");
    wait_streaming(env, "a new database", Duration::from_secs(300)).await;
    two_on_the_second_node(env).await;
    let (primary, _) = primary_on_the_second_node(env).await;
    let beside = on_the_second_node(env).await.into_iter().find(|p| *p != primary).expect("a standby beside it");
    let away = instances(env).into_iter().find(|p| *p != primary && *p != beside).unwrap();
    (bosun, primary, beside, away)
}

/// SIGKILL to every process of the pod `uid` but its sandbox's (on this machine: the
/// real nodes' pods run here, and a partitioned node's cannot be reached through the
/// API); how many.
fn kill_pod_processes(uid: &str) -> usize {
    let in_pod = format!("pod{uid}");
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cgroup.contains(&in_pod) && comm.trim() != "pause" {
            let status = std::process::Command::new("kill").args(["-KILL", &pid]).status();
            killed += usize::from(status.is_ok_and(|s| s.success()));
        }
    }
    killed
}

/// Issue 46: the primary's node cut off the network while an application writes
/// through the pooler (on the other node), a new connection for each insert, each
/// allowed a minute: the pooler finds its connections to the lost primary dead (its
/// TCP timeouts), bosun pauses it at the failover and resumes it on the new primary,
/// so the inserts that fail are the one in flight at the cut and those given a dead
/// connection before bosun's decision; the others wait. A writer straight to the
/// Service, each insert allowed 5 s, beside it for comparison.
#[tokio::test]
async fn the_primarys_node_cut_off_the_poolers_clients_lose_only_what_was_in_flight() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("node-loss-pooler", |env| async move {
        let (_bosun, primary, standby) = database(&env, 2, ", pooler: {instances: 1}").await;
        pooler_off_the_second_node(&env).await;
        start_app_writer(&env, "pooled", REAL_NODE, "test-db-pooler", (60, 0)).await;
        start_app_writer(&env, "direct", REAL_NODE, "test-db", (5, 1_000_000)).await;

        let _mend = NodeGuard(SECOND_REAL_NODE);
        let at = unix_now();
        on_node(NodeAction::Partition).await;
        let start = Instant::now();
        let back = |name: &str| acks_of(&env, name).last().is_some_and(|(_, t)| *t > at + 0.5);
        while !(back("pooled") && back("direct")) {
            assert!(start.elapsed() < Duration::from_secs(120), "writes not back within 120 s of the cut");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let decision = decided(&env).await.filter(|d| *d >= at).expect("bosun decided a failover");
        // A few more inserts after the return, on both.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pooled, direct) = (acks_of(&env, "pooled"), acks_of(&env, "direct"));
        let after = |acks: &[(i64, f64)]| acks.iter().filter(|(_, t)| *t > at).cloned().collect::<Vec<_>>();
        let first_back = |acks: &[(i64, f64)]| acks.iter().map(|(_, t)| *t - at).find(|d| *d > 0.5).unwrap_or(0.0);
        let (pooled_failed, direct_failed) = (failed_between(&pooled), failed_between(&direct));
        eprintln!(
            "pooler, node of {primary} cut off → {standby} (decided {:.1} s after the cut): through the pooler {} \
             inserts failed, writes back {:.1} s after the cut, longest gap {:.2} s; straight to the Service {} failed, \
             back {:.1} s after, longest gap {:.2} s",
            decision - at,
            pooled_failed,
            first_back(&after(&pooled)),
            outage(&pooled, at),
            direct_failed,
            first_back(&after(&direct)),
            outage(&direct, at),
        );
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        let change = db.status.as_ref().and_then(|s| s.last_primary_change.clone()).unwrap();
        assert_eq!((change.from.as_str(), change.to.as_str()), (primary.as_str(), standby.as_str()));
        let (_, log) = env.kubectl(&["logs", "pooled"]);
        let failures: Vec<&str> = log.lines().filter(|l| l.starts_with("failed ")).collect();
        eprintln!("through the pooler:\n{}", failures.join("\n"));
        assert!(
            pooled_failed <= 2,
            "{pooled_failed} inserts through the pooler failed: more than the one in flight at the cut and one on a \
             connection not yet found dead"
        );
        let expired = env.kubectl(&["get", "events", "--field-selector", "reason=PoolerPauseExpired", "-o", "name"]).1;
        assert!(expired.trim().is_empty(), "the pause outlived its bound: {expired}");

        on_node(NodeAction::Heal).await;
        assert_eq!(wait_streaming(&env, "the old primary back as a standby", Duration::from_secs(90)).await, standby);
    })
    .await;
}

/// The pooler's pods moved off the second real node (the one the tests break), and
/// the pooler Ready.
async fn pooler_off_the_second_node(env: &Env) {
    let rw = ListParams::default().labels("database.example.com/pooler=rw");
    let start = Instant::now();
    loop {
        let pods = env.api::<Pod>().list(&rw).await.unwrap().items;
        let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let away: Vec<String> = pods.iter().filter(|p| node(p) == SECOND_REAL_NODE).map(|p| p.name_any()).collect();
        if away.is_empty() && !pods.is_empty() && pods.iter().all(bosun_testing::node::pod_ready) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "the pooler is not Ready off {SECOND_REAL_NODE}: {pods:?}");
        if !away.is_empty() {
            let _cordon = Cordon::new(env);
            for pod in &away {
                let (ok, out) = env.kubectl(&["delete", "pod", pod]);
                assert!(ok, "{out}");
            }
            // Its replacement placed while the node is cordoned.
            let start = Instant::now();
            while env
                .api::<Pod>()
                .list(&rw)
                .await
                .unwrap()
                .items
                .iter()
                .all(|p| node(p).is_empty() || node(p) == SECOND_REAL_NODE)
            {
                assert!(start.elapsed() < Duration::from_secs(60), "no pooler pod placed off {SECOND_REAL_NODE}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Issue 45, part 4: a standby whose data is on a local volume of the lost node (the
/// local cluster's `bosun-local` class: a volume pinned to the node its first pod was
/// scheduled to). The database reports it and goes on taking writes; a replacement of
/// the primary is refused; the annotation replaces the standby once Kubernetes holds
/// the node NotReady: the lost volume is kept (Retain), and a new standby on the other
/// node clones the primary. The node back, nothing of the old standby returns.
#[tokio::test]
async fn a_standby_whose_data_was_only_on_the_lost_node_is_replaced_when_asked_and_its_volume_kept() {
    let _one = ONE_AT_A_TIME.lock().await;
    e2e("local-volume-loss", |env| async move {
        env.use_real_nodes().await;
        let _bosun = env.start_bosun(BOSUN).await;
        let (ok, out) = env.kubectl_apply(&manifest(2, ", storageClassName: bosun-local"));
        assert!(ok, "{out}");
        let mut primary = wait_streaming(&env, "a new database on local volumes", Duration::from_secs(300)).await;
        let on_second = on_the_second_node(&env).await;
        assert_eq!(on_second.len(), 1, "the instances are spread over the real nodes");
        if on_second[0] == primary {
            let other = instances(&env).into_iter().find(|p| *p != primary).unwrap();
            let request = format!("database.example.com/switchover-to={other}");
            let (ok, out) = env.kubectl(&["annotate", "--overwrite", "postgresql", "test-db", &request]);
            assert!(ok, "{out}");
            let start = Instant::now();
            while wait_streaming(&env, "a switchover off the second node", Duration::from_secs(120)).await != other {
                assert!(start.elapsed() < Duration::from_secs(120), "no switchover to {other}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            primary = other;
        }
        let standby = on_second[0].clone();
        // The class is fixed once the claims are made in it: a change is refused at once.
        let change = r#"{"spec":{"storageClassName":"kwok-volume"}}"#;
        let (ok, out) = env.kubectl(&["patch", "postgresql", "test-db", "--type=merge", "-p", change]);
        assert!(!ok && out.contains("spec.storageClassName is immutable"), "{out}");
        let old_volume = volume_of(&env, &standby).await;
        assert_eq!(
            pinned_to(&env, &old_volume).await.as_deref(),
            Some(SECOND_REAL_NODE),
            "{standby}'s volume is local"
        );
        start_writer_on(&env, Some(REAL_NODE)).await;

        // The standby's node lost: reported, no failover, writes go on.
        let _mend = NodeGuard(SECOND_REAL_NODE);
        let last_change = decided(&env).await;
        let at = unix_now();
        on_node(NodeAction::Stop).await;
        let reported = wait_for(&env, "the standby's data reported on the lost node", |db| {
            lost_node(db, &standby).as_deref() == Some(SECOND_REAL_NODE)
        })
        .await;
        env.wait_warning("test-db", "DataOnLostNode", &standby).await;
        eprintln!("local volume: {standby}'s data reported on the lost node {reported:.1} s after the loss");

        // The primary is not replaced, nor a name that is no instance: refused, the
        // annotation goes.
        let ask = |instance: &str| {
            let request = format!("database.example.com/replace-instance={instance}");
            let (ok, out) = env.kubectl(&["annotate", "--overwrite", "postgresql", "test-db", &request]);
            assert!(ok, "{out}");
        };
        for (instance, why) in [(primary.as_str(), "is the primary"), ("test-db-7", "is not an instance")] {
            ask(instance);
            env.wait_warning("test-db", "ReplaceRefused", why).await;
            wait_for(&env, "the refused annotation removed", |db| !db.annotations().contains_key(REPLACE)).await;
        }

        // The standby is: once Kubernetes holds the node NotReady (its grace period).
        ask(&standby);
        let asked = Instant::now();
        let start = Instant::now();
        let mut not_ready = None;
        loop {
            if not_ready.is_none() && !node_ready(&env, SECOND_REAL_NODE).await {
                not_ready = Some(Instant::now());
            }
            let claim_volume = env
                .api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>()
                .get_opt(&format!("data-{standby}"))
                .await
                .unwrap()
                .and_then(|c| c.spec?.volume_name);
            if claim_volume.is_some_and(|v| v != old_volume) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(300), "{standby} not replaced within 300 s of the request");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let back = wait_streaming(&env, "the replaced standby streaming", Duration::from_secs(180)).await;
        assert_eq!(back, primary, "the primary stays");
        assert_eq!(node_of(&env, &standby).await, REAL_NODE, "the new {standby} runs where a node can take it");
        let new_volume = volume_of(&env, &standby).await;
        assert_eq!(pinned_to(&env, &new_volume).await.as_deref(), Some(REAL_NODE));
        let not_ready = not_ready.expect("the node NotReady before the replacement");
        eprintln!(
            "local volume: {standby} streaming again {:.1} s after the request, {:.1} s after Kubernetes marked the \
             node NotReady",
            asked.elapsed().as_secs_f64(),
            not_ready.elapsed().as_secs_f64()
        );
        assert!(!node_ready(&env, SECOND_REAL_NODE).await, "replaced only once Kubernetes held the node lost");
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        assert!(!db.annotations().contains_key(REPLACE), "the annotation goes once done");
        assert_eq!(decided(&env).await, last_change, "no change of primary");
        // The primary never fenced itself (its standby lost, it hears bosun), and no
        // write waited on a failover: the gaps are a loaded machine's, such as the
        // replacement's clone forcing a checkpoint (5.5 s once, with three test binaries
        // on two cores; a fence would add a fencing time and a re-tell on top).
        let (_, log) = env.kubectl(&["logs", &primary, "-c", "postgres"]);
        assert!(!log.contains("fencing it"), "the primary fenced itself: {}", &log[log.len().saturating_sub(3000)..]);
        let gap = outage(&acks(&env), at);
        assert!(gap < 10.0, "the primary went on taking writes: the longest gap was {gap:.1} s");

        // The lost volume is kept, with a word of why.
        let pvs = Api::<PersistentVolume>::all(env.client.clone());
        let kept = pvs.get(&old_volume).await.expect("the lost volume is kept");
        assert_eq!(kept.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()), Some("Retain"));
        let kept_for = kept.annotations().get("database.example.com/kept-for-instance").cloned();
        assert_eq!(kept_for, Some(format!("{}/{standby}", env.ns)));

        // The node back: the old pod is gone from the API, so its kubelet ends it, and
        // the database is as it was.
        on_node(NodeAction::Start).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(wait_streaming(&env, "after the node's return", Duration::from_secs(60)).await, primary);
        assert_eq!(node_of(&env, &standby).await, REAL_NODE);
        let rows = |pod: &str| psql(&env, pod, "SELECT count(*) > 0 FROM w");
        assert_eq!(rows(&standby).as_deref(), Some("t"), "the new standby has the primary's rows");
        // The kept volume is the test's to delete (bosun never does).
        let _ = pvs.delete(&old_volume, &Default::default()).await;
    })
    .await;
}

const REPLACE: &str = "database.example.com/replace-instance";

/// The node whose disk holds `pod`'s data, as the database reports it while lost.
fn lost_node(db: &PostgreSQL, pod: &str) -> Option<String> {
    db.status.as_ref()?.instances.iter().find(|i| i.name == pod)?.data_on_lost_node.clone()
}

/// The volume of `pod`'s data claim.
async fn volume_of(env: &Env, pod: &str) -> String {
    let claims = env.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>();
    let claim = claims.get(&format!("data-{pod}")).await.unwrap();
    claim.spec.and_then(|s| s.volume_name).expect("a bound data claim")
}

/// The one node `volume` can be used on.
async fn pinned_to(env: &Env, volume: &str) -> Option<String> {
    let pv = Api::<PersistentVolume>::all(env.client.clone()).get(volume).await.unwrap();
    let term = pv.spec?.node_affinity?.required?.node_selector_terms.into_iter().next()?;
    term.match_expressions?.into_iter().find(|e| e.key == "kubernetes.io/hostname")?.values?.into_iter().next()
}

/// Waits (up to 90 s) until `count` instance pods are Ready in the API for 5 s running.
async fn steadily_ready(env: &Env, count: usize) {
    let (start, mut since) = (Instant::now(), None::<Instant>);
    loop {
        let params = kube::api::ListParams::default()
            .labels("app.kubernetes.io/instance=test-db,app.kubernetes.io/name=postgresql");
        let pods = env.api::<Pod>().list(&params).await.map(|l| l.items).unwrap_or_default();
        let ready = pods.len() == count && pods.iter().all(bosun_testing::node::pod_ready);
        since = if ready { since.or(Some(Instant::now())) } else { None };
        if since.is_some_and(|s| s.elapsed() >= Duration::from_secs(5)) {
            return;
        }
        let states: Vec<_> =
            pods.iter().map(|p| (kube::ResourceExt::name_any(p), bosun_testing::node::pod_ready(p))).collect();
        assert!(start.elapsed() < Duration::from_secs(90), "the instances not steadily Ready within 90 s: {states:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn current_primary(env: &Env) -> Option<String> {
    env.api::<PostgreSQL>().get("test-db").await.ok()?.status?.current_primary
}

/// Since when the database reports `pod` unanswered.
fn unanswered(db: &PostgreSQL, pod: &str) -> Option<String> {
    db.status.as_ref()?.instances.iter().find(|i| i.name == pod)?.unanswered_since.clone()
}

/// Waits (up to 60 s) until the database's status says `done`; the seconds it took.
async fn wait_for(env: &Env, what: &str, done: impl Fn(&PostgreSQL) -> bool) -> f64 {
    let start = Instant::now();
    loop {
        let db = env.api::<PostgreSQL>().get("test-db").await.unwrap();
        if done(&db) {
            return start.elapsed().as_secs_f64();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{what}: not within 60 s: {:?}", db.status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
/// the network, `BENCH_RUNS` (5) times each, on a 2-instance asynchronous database and
/// a 3-instance synchronous one (`number: 1`: with 2, the new primary would wait for
/// the lost one), the primary alone on the second node (moved back before each run). Per case: writes back
/// after the fault, the longest gap between acknowledged writes, bosun's decision, and
/// every instance streaming again after the node's return; and, for the partition, the
/// writes the cut-off old primary acknowledged (to a writer on its own node) after the
/// new primary was decided: 0 when the old primary fenced itself in time. Prints a table
/// and writes `target/bench/node-loss-<mode>.json`. Not a test: numbers only.
#[tokio::test]
#[ignore = "a benchmark: make bench-failover"]
async fn bench_node_loss_asynchronous() {
    e2e("bench-node-loss-async", |env| async move { bench_node_loss(&env, "asynchronous", 2, "").await }).await;
}

#[tokio::test]
#[ignore = "a benchmark: make bench-failover"]
async fn bench_node_loss_synchronous() {
    e2e("bench-node-loss-sync", |env| async move {
        bench_node_loss(&env, "synchronous", 3, ", synchronous: {number: 1}").await;
    })
    .await;
}

async fn bench_node_loss(env: &Env, mode: &str, replicas: usize, extra: &str) {
    let _one = ONE_AT_A_TIME.lock().await;
    let _bosun = database(env, replicas, extra).await;
    start_writer_on(env, Some(REAL_NODE)).await;
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let mut rows = Vec::new();
    let mut island_acks = Vec::new();
    println!("\nthe primary's node lost ({runs} runs each, {mode}): seconds");
    println!(
        "{:<12} {:>12} {:>10} {:>10} {:>10} {:>14}",
        "fault", "writes back", "gap", "decided", "rejoined", "split writes"
    );
    for (case, action, mend) in
        [("power loss", NodeAction::Stop, NodeAction::Start), ("partition", NodeAction::Partition, NodeAction::Heal)]
    {
        let mut samples = Vec::new();
        for run in 0..runs {
            let (primary, _) = primary_on_the_second_node(env).await;
            let island = match action {
                NodeAction::Partition => {
                    let first = 1_000_000 * (i64::try_from(run).unwrap() + 1);
                    Some(split_brain_check(env, &primary, &format!("island-{run}"), first).await)
                }
                _ => None,
            };
            let _mend = NodeGuard(SECOND_REAL_NODE);
            let at = unix_now();
            on_node(action).await;
            let back = writes_back(env, at).await;
            let decision = decided(env).await.filter(|d| *d >= at).map(|d| d - at);
            tokio::time::sleep(Duration::from_secs(3)).await;
            on_node(mend).await;
            let returned = Instant::now();
            wait_streaming(env, "every instance streaming after the node's return", Duration::from_secs(240)).await;
            let rejoined = returned.elapsed().as_secs_f64();
            let gap = outage(&acks(env), at);
            let split = island.map(|check| {
                let (_, late, _) = check.acks_around(env, at + decision.unwrap_or(0.0));
                island_acks.extend(acks_of(env, &check.name));
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
    let primary = wait_streaming(env, "at the end", Duration::from_secs(240)).await;
    // The acknowledgements first: every one of them was committed before the table is read.
    let acked = acks(env);
    let stored = psql(env, &primary, "SELECT id FROM w ORDER BY id").unwrap();
    let lost = writer::lost(&stored, &acked);
    if !lost.is_empty() {
        let when: Vec<(i64, f64)> = acked.iter().filter(|(id, _)| lost.contains(id)).copied().collect();
        println!("acknowledged rows lost (id, unix time acknowledged): {when:?}");
    }
    let lost = lost.len();
    let island_lost = writer::lost(&stored, &island_acks).len();
    println!(
        "the writer's acknowledged rows: {}, lost: {lost}; the cut-off primary's own writer: {} acknowledged, \
             {island_lost} not in the final history",
        acked.len(),
        island_acks.len()
    );
    let report = json!({"mode": mode, "runs": runs, "cases": rows, "acknowledged": acked.len(), "lost": lost,
                            "island_acknowledged": island_acks.len(), "island_lost": island_lost});
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("node-loss-{mode}.json")), serde_json::to_string_pretty(&report).unwrap()).unwrap();
}
