//! The writer of the write-outage measurements (the failover tests, the upgrade from
//! the previous release): a pod that inserts a numbered row through the read-write
//! Service of `test-db` every ~20 ms and logs each acknowledged id with its time.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses part of it

use std::time::{Duration, Instant};

use bosun_testing::Env;
use bosun_testing::node::images;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// The writer: a numbered insert through `test-db` every ~20 ms, each bounded to 2 s
/// (a commit waiting for a lost synchronous standby is not acknowledged; `TIMEOUT`
/// sets another bound), logging `ack <id> <unix time>` for every acknowledged commit.
const WRITER: &str = r#"until timeout 3 psql -X -q -c 'CREATE TABLE IF NOT EXISTS w (id bigint PRIMARY KEY)' 2>/dev/null; do sleep 0.2; done
i=${FIRST_ID:-0}
while :; do
  i=$((i+1))
  if out=$(timeout ${TIMEOUT:-2} psql -X -q -c "INSERT INTO w VALUES ($i)" 2>&1); then echo "ack $i $(date +%s.%N)"
  else echo "failed $i $(date +%s.%N) $(echo $out | head -c 200)"; fi
  sleep 0.02
done"#;

/// The writer pod, started in `env`'s namespace against the PostgreSQL `test-db`, and its
/// first acknowledged rows awaited.
pub async fn start_writer(env: &Env) {
    start_writer_on(env, None).await;
}

/// The same, on node `node` when one is given (a test that loses another node).
pub async fn start_writer_on(env: &Env, node: Option<&str>) {
    start_writer_named(env, "writer", node, "test-db", 0).await;
}

/// A writer pod `name` on `node` (if given) writing to `host` (the Service `test-db`, or
/// one instance's address), its ids counting from `first_id` + 1 (two writers of one
/// table keep apart so), its first acknowledged rows awaited.
pub async fn start_writer_named(env: &Env, name: &str, node: Option<&str>, host: &str, first_id: i64) {
    let secret = |key: &str| json!({"secretKeyRef": {"name": "test-db-credentials", "key": key}});
    let mut pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "writer", "image": images::POSTGRES, "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", WRITER],
                "env": [
                    {"name": "PGHOST", "value": host},
                    {"name": "FIRST_ID", "value": first_id.to_string()},
                    {"name": "PGUSER", "valueFrom": secret("username")},
                    {"name": "PGPASSWORD", "valueFrom": secret("password")},
                    {"name": "PGCONNECT_TIMEOUT", "value": "1"},
                ],
            }],
        },
    }))
    .unwrap();
    if let (Some(node), Some(spec)) = (node, pod.spec.as_mut()) {
        spec.node_selector = Some([("kubernetes.io/hostname".to_owned(), node.to_owned())].into());
    }
    env.apply(&pod).await;
    await_first_acks(env, name).await;
}

/// Writer `name` Ready, and its first ten acknowledgements.
async fn await_first_acks(env: &Env, name: &str) {
    env.wait_pod_ready(name, Duration::from_secs(120)).await;
    let start = Instant::now();
    while acks_of(env, name).len() < 10 {
        let log = || env.kubectl(&["logs", name]).1;
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the writer {name} acknowledged 10 rows not within 60 s: {}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A writer pod `name` on `node` of the application's role (as [`start_session_writer`]:
/// TLS, the server verified) through `host` (`test-db`, `test-db-pooler`), a new
/// connection for each insert, each bounded (its connection too) to `timeout` seconds, its ids counting from
/// `first_id` + 1; its first acknowledged rows awaited.
pub async fn start_app_writer(env: &Env, name: &str, node: &str, host: &str, (timeout, first_id): (u32, i64)) {
    let mut variables = app_env(host);
    let more = [
        ("TIMEOUT", timeout.to_string()),
        ("PGCONNECT_TIMEOUT", timeout.to_string()),
        ("FIRST_ID", first_id.to_string()),
    ];
    variables.as_array_mut().unwrap().extend(more.map(|(k, v)| json!({"name": k, "value": v})));
    start_app_pod(env, name, WRITER, variables, Some(node)).await;
}

/// Pod `name` running `script` (bash) as the application (`variables`, the CA of
/// `test-db-ca` at `/ca`), on `node` when given; its first acknowledgements awaited.
async fn start_app_pod(env: &Env, name: &str, script: &str, variables: serde_json::Value, node: Option<&str>) {
    let mut pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [{
                "name": "writer", "image": images::POSTGRES, "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", script],
                "env": variables,
                "volumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": true}],
            }],
            "volumes": [{"name": "ca", "secret": {"secretName": "test-db-ca"}}],
        },
    }))
    .unwrap();
    if let (Some(node), Some(spec)) = (node, pod.spec.as_mut()) {
        spec.node_selector = Some([("kubernetes.io/hostname".to_owned(), node.to_owned())].into());
    }
    env.apply(&pod).await;
    await_first_acks(env, name).await;
}

/// The inserts that failed (or outlived their bound) between the first and the last
/// acknowledged one: each id is one attempt.
pub fn failed_between(acks: &[(i64, f64)]) -> usize {
    let (Some(first), Some(last)) = (acks.iter().map(|a| a.0).min(), acks.iter().map(|a| a.0).max()) else {
        return 0;
    };
    usize::try_from(last - first + 1).unwrap_or(0).saturating_sub(acks.len())
}

/// The writer's acknowledged ids with their times.
pub fn acks(env: &Env) -> Vec<(i64, f64)> {
    acks_of(env, "writer")
}

/// Writer `name`'s acknowledged ids with their times.
pub fn acks_of(env: &Env, name: &str) -> Vec<(i64, f64)> {
    let (_, out) = env.kubectl(&["logs", name]);
    out.lines()
        .filter_map(|l| l.strip_prefix("ack "))
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(id, t)| Some((id.parse().ok()?, t.parse().ok()?)))
        .collect()
}

/// The longest gap between acknowledged writes after `since` (Unix seconds).
pub fn outage(acks: &[(i64, f64)], since: f64) -> f64 {
    let times: Vec<f64> = acks.iter().map(|(_, t)| *t).filter(|t| *t >= since - 1.0).collect();
    times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The acknowledged ids missing from `stored` (the table's ids, one a line).
pub fn lost(stored: &str, acks: &[(i64, f64)]) -> Vec<i64> {
    let stored: std::collections::BTreeSet<i64> = stored.lines().filter_map(|l| l.trim().parse().ok()).collect();
    acks.iter().map(|(id, _)| *id).filter(|id| !stored.contains(id)).collect()
}

/// The session writer: one psql session that inserts a numbered row every 50 ms and
/// logs `ack <id> <unix time>` for each commit, psql's errors in between (it goes on
/// after one); a lost connection ends it.
const SESSION_WRITER: &str = r#"{ echo "CREATE TABLE IF NOT EXISTS ws (id bigint);"
i=0; while :; do i=$((i+1))
  echo "INSERT INTO ws VALUES ($i) RETURNING 'ack ' || $i || ' ' || extract(epoch from clock_timestamp());"
  sleep 0.05; done; } | psql -X -tA -v ON_ERROR_STOP=0 2>&1"#;

/// A session writer pod `name` of the application's role (Secret `test-db-app`, the
/// server verified with `test-db-ca`) through `host` (`test-db`, `test-db-pooler`), its
/// first commits awaited.
pub async fn start_session_writer(env: &Env, name: &str, host: &str) {
    start_app_pod(env, name, SESSION_WRITER, app_env(host), None).await;
}

/// libpq's variables for the application's role (Secret `test-db-app`) through `host`,
/// verifying the server with the CA mounted at `/ca` (`test-db-ca`).
pub fn app_env(host: &str) -> serde_json::Value {
    let secret = |key: &str| json!({"secretKeyRef": {"name": "test-db-app", "key": key}});
    json!([
        {"name": "PGHOST", "value": host},
        {"name": "PGUSER", "valueFrom": secret("username")},
        {"name": "PGPASSWORD", "valueFrom": secret("password")},
        {"name": "PGDATABASE", "valueFrom": secret("dbname")},
        {"name": "PGSSLMODE", "value": "verify-full"},
        {"name": "PGSSLROOTCERT", "value": "/ca/ca.crt"},
    ])
}

/// What session writer `name` printed that is neither a commit, its command tag nor a
/// notice: psql's errors, each a line.
pub fn session_errors(env: &Env, name: &str) -> Vec<String> {
    let (_, out) = env.kubectl(&["logs", name]);
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("ack ") && !l.starts_with("INSERT 0 1"))
        .filter(|l| !l.starts_with("CREATE TABLE") && !l.starts_with("NOTICE:"))
        .map(str::to_owned)
        .collect()
}
