//! The manager in production shape: leader election, metrics, health, events,
//! namespace scope. bosun runs as its ServiceAccount with only the generated ClusterRole.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use std::time::{Duration, Instant};

use bosun_api::webapp::{WebAppKind, apps_v1};
use bosun_testing::{Bosun, Env, e2e};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

fn webapp(name: &str, spec: serde_json::Value) -> apps_v1::WebApp {
    serde_json::from_value(
        json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": name}, "spec": spec}),
    )
    .expect("webapp")
}

fn is_ready(w: &apps_v1::WebApp) -> bool {
    w.current_status().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().last()).and_then(|v| v.parse().ok())
}

async fn holder(env: &Env) -> Option<String> {
    let lease = env.api::<Lease>().get_opt("bosun-leader").await.expect("reading the Lease")?;
    lease.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty())
}

async fn wait_holder(env: &Env, identity: &str, timeout: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if holder(env).await.as_deref() == Some(identity) {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{identity} did not hold the Lease within {timeout:?}; holder: {:?}", holder(env).await)
}

async fn replica(env: &Env, identity: &str, extra: &[&str]) -> Bosun {
    let ns_arg = format!("--leader-elect-namespace={}", env.ns);
    let id_arg = format!("--identity={identity}");
    let mut args = vec!["--leader-elect", ns_arg.as_str(), id_arg.as_str()];
    args.extend_from_slice(extra);
    env.start_bosun(&args).await
}

/// Two replicas: exactly one leads and only it writes; `kill -9` it and the other
/// takes over within the lease duration and reconciles a new WebApp.
#[tokio::test]
async fn one_leader_writes_and_a_standby_takes_over_after_kill_9() {
    e2e("leader-kill", |env| async move {
        let mut a = replica(&env, "replica-a", &[]).await;
        wait_holder(&env, "replica-a", Duration::from_secs(30)).await;
        let b = replica(&env, "replica-b", &[]).await;
        b.http_addr().await;

        env.apply(&webapp("before", json!({"image": "nginx:1.25"}))).await;
        env.wait_for::<apps_v1::WebApp>("before", "Ready=True", is_ready).await;
        let (_, metrics_a) = a.http_get("/metrics").await;
        let (_, metrics_b) = b.http_get("/metrics").await;
        assert_eq!(gauge(&metrics_a, "bosun_leader "), Some(1.0), "{metrics_a}");
        assert_eq!(gauge(&metrics_b, "bosun_leader "), Some(0.0), "{metrics_b}");
        let counted = |m: &str| {
            m.lines()
                .filter(|l| l.starts_with("bosun_reconciles_total{"))
                .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
                .sum::<f64>()
        };
        assert!(counted(&metrics_a) >= 1.0, "the leader did not reconcile:\n{metrics_a}");
        assert_eq!(counted(&metrics_b), 0.0, "the standby reconciled:\n{metrics_b}");
        // A warm standby: its caches are synced before it leads.
        assert_eq!(b.http_get("/readyz").await.0, 200, "the standby's caches are not synced");
        assert!(!b.log_tail(200).contains("reconciled"), "the standby reconciled:\n{}", b.log_tail(50));

        a.signal("KILL");
        a.wait_exit(Duration::from_secs(5)).await.expect("replica-a exits on SIGKILL");
        let killed = Instant::now();
        env.apply(&webapp("after", json!({"image": "nginx:1.25"}))).await;
        // Lease duration 15 s, plus the retry period and some slack.
        env.wait_for_within::<apps_v1::WebApp>(
            "after",
            "Ready=True, reconciled by replica-b",
            Duration::from_secs(25),
            is_ready,
        )
        .await;
        eprintln!("measured: kill -9 failover to a reconciled WebApp took {:?}", killed.elapsed());
        assert_eq!(holder(&env).await.as_deref(), Some("replica-b"));
        let (_, metrics_b) = b.http_get("/metrics").await;
        assert_eq!(gauge(&metrics_b, "bosun_leader "), Some(1.0));
        // The time from taking the lease to the first reconcile is reported (the
        // standby's caches were filled long before; `make bench` measures it).
        let takeover = gauge(&metrics_b, "bosun_leader_first_reconcile_seconds ").expect("takeover gauge");
        eprintln!("measured: lease acquired -> first reconcile {:.0} ms", takeover * 1000.0);
        assert!(takeover > 0.0, "no first reconcile reported after the takeover:\n{metrics_b}");
    })
    .await;
}

/// SIGTERM: in-flight work finishes, the Lease is released, the process exits 0 and
/// the standby takes over in about the retry period, long before the lease would expire.
#[tokio::test]
async fn sigterm_releases_the_lease_for_an_immediate_handover() {
    e2e("leader-term", |env| async move {
        // A long lease: without the release, the standby would wait at least 20 s.
        let timings = [
            "--leader-elect-lease-duration=60s",
            "--leader-elect-renew-deadline=40s",
            "--leader-elect-retry-period=2s",
        ];
        let mut a = replica(&env, "replica-a", &timings).await;
        wait_holder(&env, "replica-a", Duration::from_secs(30)).await;
        let b = replica(&env, "replica-b", &timings).await;
        b.http_addr().await;

        a.signal("TERM");
        let status = a.wait_exit(Duration::from_secs(25)).await.expect("replica-a exits after SIGTERM");
        assert!(status.success(), "replica-a exited with {status}:\n{}", a.log_tail(20));
        assert!(a.log_tail(20).contains("released the leader lease"), "{}", a.log_tail(20));
        let handover = wait_holder(&env, "replica-b", Duration::from_secs(15)).await;
        eprintln!("measured: SIGTERM handover took {handover:?} after replica-a exited");

        env.apply(&webapp("after", json!({"image": "nginx:1.25"}))).await;
        env.wait_for::<apps_v1::WebApp>("after", "Ready=True, reconciled by replica-b", is_ready).await;
    })
    .await;
}

/// /readyz is not ready until the caches have synced (here: until bosun may list its
/// kinds), /healthz is; /metrics has every family and its counters move.
#[tokio::test]
async fn health_and_metrics() {
    e2e("health", |env| async move {
        let kubeconfig = env.unbound_bosun_kubeconfig().await;
        let bosun = env.start_bosun_as(&kubeconfig, &["--controllers=webapp"]);
        let (code, _) = bosun.http_get("/healthz").await;
        assert_eq!(code, 200);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (code, body) = bosun.http_get("/readyz").await;
        assert_eq!(code, 503, "ready although bosun may not list anything: {body}");
        assert!(body.contains("caches have not synced"), "{body}");

        env.grant_bosun().await;
        let start = Instant::now();
        loop {
            let (code, body) = bosun.http_get("/readyz").await;
            if code == 200 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "not ready 60 s after the grant: {body}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        let (_, before) = bosun.http_get("/metrics").await;
        for family in [
            "# TYPE bosun_reconciles counter",
            "# TYPE bosun_reconcile_errors counter",
            "# TYPE bosun_reconcile_duration_seconds histogram",
            "# TYPE bosun_ready_duration_seconds histogram",
            "# TYPE bosun_managed_resources gauge",
            "# TYPE bosun_leader gauge",
            "# TYPE bosun_kube_requests counter",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
        ] {
            assert!(before.contains(family), "/metrics lacks {family}:\n{before}");
        }
        assert!(!before.contains("namespace=") && !before.contains("name=\""), "per-object labels in /metrics");

        env.apply(&webapp("counted", json!({"image": "nginx:1.25", "replicas": 2}))).await;
        env.wait_for::<apps_v1::WebApp>("counted", "Ready=True", is_ready).await;
        // The managed-resources gauge is refreshed every 5 s.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let (_, after) = bosun.http_get("/metrics").await;
        let successes = r#"bosun_reconciles_total{controller="webapp",result="success"} "#;
        assert!(gauge(&after, successes).unwrap_or(0.0) > gauge(&before, successes).unwrap_or(0.0), "{after}");
        assert_eq!(gauge(&after, r#"bosun_managed_resources{controller="webapp"} "#), Some(1.0), "{after}");
        assert_eq!(gauge(&after, r#"bosun_ready_duration_seconds_count{controller="webapp"} "#), Some(1.0), "{after}");
        let requests: f64 = after
            .lines()
            .filter(|l| l.starts_with("bosun_kube_requests_total{"))
            .filter_map(|l| gauge(l, "bosun"))
            .sum();
        assert!(requests > 0.0, "{after}");
    })
    .await;
}

async fn events_for(env: &Env, name: &str) -> Vec<Event> {
    let events: Api<Event> = env.api();
    let list = events.list(&Default::default()).await.expect("listing events");
    list.items.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)).collect()
}

async fn wait_event(env: &Env, name: &str, type_: &str, reason: &str) -> Event {
    let start = Instant::now();
    loop {
        let events = events_for(env, name).await;
        if let Some(e) =
            events.iter().find(|e| e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason))
        {
            return e.clone();
        }
        let seen: Vec<_> = events.iter().map(|e| (e.type_.clone(), e.reason.clone(), e.note.clone())).collect();
        assert!(start.elapsed() < Duration::from_secs(30), "no {type_} event {reason} for {name}; seen: {seen:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn events_tell_what_happened() {
    e2e("events", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        env.apply(&webapp("eventful", json!({"image": "nginx:1.25"}))).await;
        wait_event(&env, "eventful", "Normal", "Created").await;
        env.wait_for::<apps_v1::WebApp>("eventful", "Ready=True", is_ready).await;
        let notes: Vec<_> = events_for(&env, "eventful").await.into_iter().filter_map(|e| e.note).collect();
        assert!(notes.iter().any(|n| n == "Created Deployment eventful"), "{notes:?}");
        assert!(notes.iter().any(|n| n == "Created Service eventful"), "{notes:?}");

        // An update right after the creation is told apart (no clock is compared).
        env.apply(&webapp("eventful", json!({"image": "nginx:1.27"}))).await;
        wait_event(&env, "eventful", "Normal", "Updated").await;

        env.apply(&webapp("broken", json!({"image": "nginx", "env": [{"name": "NOT=VALID"}]}))).await;
        let warning = wait_event(&env, "broken", "Warning", "InvalidSpec").await;
        assert!(warning.note.unwrap_or_default().contains("env[0].name"));
    })
    .await;
}

/// The notes of bosun's Normal events on `name`, each with its series count.
async fn child_events(env: &Env, name: &str) -> Vec<(String, i32)> {
    let mut notes: Vec<_> = events_for(env, name)
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("bosun") && e.type_.as_deref() == Some("Normal"))
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect();
    notes.sort();
    notes
}

/// bosun's field manager for `apps.example.com` WebApps.
const MANAGER: &str = "bosun-webapp.apps.example.com";

fn created_both(name: &str) -> Vec<(String, i32)> {
    vec![(format!("Created Deployment {name}"), 1), (format!("Created Service {name}"), 1)]
}

/// One event per real change: exactly one `Created` per child, and none for a
/// re-applied WebApp or for a restart — which sends nothing for children as bosun left
/// them: it starts from the records of its applies it checkpointed when it stopped.
#[tokio::test]
async fn exactly_one_event_per_real_change() {
    e2e("one-event", |env| async move {
        let mut bosun = env.start_bosun(&[]).await;
        env.apply(&webapp("once", json!({"image": "nginx:1.25"}))).await;
        env.wait_for::<apps_v1::WebApp>("once", "Ready=True", is_ready).await;
        // What bosun's writes changed of the Deployment: its generation and the time of
        // its field manager's entry (kube-controller-manager's status writes move neither).
        let written = |d: &Deployment| {
            let ours = d.metadata.managed_fields.iter().flatten().find(|m| m.manager.as_deref() == Some(MANAGER));
            (d.metadata.generation, ours.and_then(|m| m.time.clone()))
        };
        let before = written(&env.api::<Deployment>().get("once").await.expect("deployment"));
        // Events are published in the background: let them land.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(child_events(&env, "once").await, created_both("once"));

        // The same manifest applied again.
        env.apply(&webapp("once", json!({"image": "nginx:1.25"}))).await;
        // The Deployment rolls on after Ready; once it and the WebApp's status have
        // settled, a restart has no status to write either, and must send nothing.
        settled(&env, "once").await;
        // A restart: the records of the last applies are checkpointed at exit and read back.
        bosun.signal("TERM");
        bosun.wait_exit(Duration::from_secs(30)).await.expect("bosun exits on SIGTERM");
        let checkpoints: Api<ConfigMap> = env.api();
        let kept = checkpoints.list(&ListParams::default().labels("bosun.dev/checkpoint")).await.expect("list");
        let mut names: Vec<String> = kept.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
        names.sort();
        let ns = env.ns.clone();
        assert!(
            names.contains(&format!("bosun-leader-applied-deployment-{ns}"))
                && names.contains(&format!("bosun-leader-applied-service-{ns}")),
            "no checkpoint of the WebApp's children: {names:?}"
        );
        let bosun = env.start_bosun(&[]).await;
        let start = Instant::now();
        while !bosun.log_tail(400).contains("object=\"once\"") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the restarted bosun did not reconcile:\n{}",
                bosun.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(child_events(&env, "once").await, created_both("once"), "a no-op apply published an event");
        let after = written(&env.api::<Deployment>().get("once").await.expect("deployment"));
        assert_eq!(after, before, "the restart changed the Deployment");
        assert!(bosun.log_tail(400).contains("records=2"), "the checkpoint was not read:\n{}", bosun.log_tail(40));
        let (_, metrics) = bosun.http_get("/metrics").await;
        let patches: Vec<&str> =
            metrics.lines().filter(|l| l.starts_with("bosun_kube_requests_total{method=\"PATCH\"}")).collect();
        assert!(
            patches.iter().all(|l| l.ends_with(" 0")),
            "the restarted bosun applied children it had checkpointed: {patches:?}"
        );
    })
    .await;
}

/// Wait until the WebApp `name` and its Deployment have not changed for 3 s.
async fn settled(env: &Env, name: &str) {
    let versions = || async {
        let webapp = env.api::<apps_v1::WebApp>().get(name).await.expect("webapp");
        let deployment = env.api::<Deployment>().get(name).await.expect("deployment");
        (webapp.metadata.resource_version, deployment.metadata.resource_version)
    };
    let start = Instant::now();
    let mut last = versions().await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = versions().await;
        if now == last {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "WebApp {name} still changing after 60 s");
        last = now;
    }
}

/// A child changed by hand while bosun was not running is set back when it starts —
/// with one `Updated` event per child it changed.
#[tokio::test]
async fn a_hand_edit_made_while_bosun_was_stopped_is_reverted_at_start() {
    e2e("edit-while-stopped", |env| async move {
        let mut bosun = env.start_bosun(&[]).await;
        env.apply(&webapp("edited", json!({"image": "nginx:1.25", "replicas": 1}))).await;
        env.wait_for::<apps_v1::WebApp>("edited", "Ready=True", is_ready).await;
        bosun.signal("TERM");
        bosun.wait_exit(Duration::from_secs(30)).await.expect("bosun exits on SIGTERM");

        let kubectl = |args: &[&str]| {
            let (ok, out) = env.kubectl(args);
            assert!(ok, "kubectl {args:?}: {out}");
        };
        kubectl(&["scale", "deployment/edited", "--replicas=3"]);
        kubectl(&["label", "service/edited", "app.kubernetes.io/managed-by-", "app=someone-else", "--overwrite"]);
        kubectl(&[
            "patch",
            "service/edited",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/ports/0/targetPort","value":8080}]"#,
        ]);

        let _bosun = env.start_bosun(&[]).await;
        env.wait_for::<Deployment>("edited", "replicas set back to 1", |d| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(1)
        })
        .await;
        env.wait_for::<k8s_openapi::api::core::v1::Service>("edited", "labels and targetPort set back", |s| {
            let labels = s.metadata.labels.clone().unwrap_or_default();
            let port = s
                .spec
                .as_ref()
                .and_then(|s| s.ports.as_ref())
                .and_then(|p| p.first())
                .and_then(|p| p.target_port.clone());
            labels.get("app").map(String::as_str) == Some("edited")
                && labels.get("app.kubernetes.io/managed-by").map(String::as_str) == Some("bosun")
                && port == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut expected = created_both("edited");
        expected.extend([("Updated Deployment edited".to_owned(), 1), ("Updated Service edited".to_owned(), 1)]);
        expected.sort();
        assert_eq!(child_events(&env, "edited").await, expected);
    })
    .await;
}

#[tokio::test]
async fn namespaces_outside_the_scope_are_left_alone() {
    e2e("scope", |env| async move {
        let team_b = env.extra_namespace("b").await;
        let _bosun = env.start_bosun(&[]).await; // watches only env.ns ("team-a")
        let in_b: Api<apps_v1::WebApp> = Api::namespaced(env.client.clone(), &team_b);
        in_b.create(&Default::default(), &webapp("elsewhere", json!({"image": "nginx"})))
            .await
            .expect("create in team-b");
        env.apply(&webapp("here", json!({"image": "nginx"}))).await;
        env.wait_for::<apps_v1::WebApp>("here", "Ready=True", is_ready).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let elsewhere = in_b.get("elsewhere").await.expect("webapp in team-b");
        // Unobserved: what the CRD's default for status reads, nothing of bosun's.
        let status = elsewhere.status.unwrap_or_default();
        assert!(
            status.observed_generation.unwrap_or(0) == 0 && status.conditions.is_empty(),
            "the WebApp in {team_b} was reconciled: {status:?}"
        );
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &team_b);
        assert!(deployments.get_opt("elsewhere").await.expect("get").is_none(), "a Deployment appeared in {team_b}");
    })
    .await;
}

/// The objects each replica's log says it reconciled (`object="…"` of its
/// `reconciled` lines).
fn reconciled_objects(bosun: &Bosun) -> std::collections::BTreeSet<String> {
    let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("reconciled"))
        .filter_map(|l| l.split("object=\"").nth(1)?.split('"').next().map(str::to_owned))
        .collect()
}

async fn shards_held(bosun: &Bosun) -> f64 {
    gauge(&bosun.http_get("/metrics").await.1, "bosun_shards_held ").unwrap_or(-1.0)
}

/// `count` WebApps `web-<i>`, created and Ready: their names.
async fn webapps_ready(env: &Env, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("web-{i}")).collect();
    for name in &names {
        env.apply(&webapp(name, json!({"image": "nginx:1.25"}))).await;
    }
    for name in &names {
        env.wait_for::<apps_v1::WebApp>(name, "Ready=True", is_ready).await;
    }
    names
}

/// Patch the WebApps `names` to image nginx:1.26.
async fn upgrade_to_1_26(env: &Env, names: impl IntoIterator<Item = &String>) {
    let patch = json!({"spec": {"image": "nginx:1.26"}});
    for name in names {
        env.api::<apps_v1::WebApp>()
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Whether a WebApp's Deployment runs nginx:1.26.
fn on_1_26(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .is_some_and(|p| p.containers[0].image.as_deref() == Some("nginx:1.26"))
}

/// Wait up to `timeout` until the shards each of `replicas` holds are `want`.
async fn wait_held(replicas: &[Bosun], want: &[f64], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut held = Vec::new();
        for r in replicas {
            held.push(shards_held(r).await);
        }
        if held == want {
            return;
        }
        assert!(Instant::now() < deadline, "shards held {held:?}, not {want:?}, after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Wait up to 20 s until `bosun` refuses to take a shard (replicas of another count
/// came first), holding none.
async fn wait_refused(bosun: &Bosun) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = bosun.http_get("/metrics").await.1;
        if gauge(&metrics, "bosun_shards_refused ") == Some(1.0) {
            assert_eq!(gauge(&metrics, "bosun_shards_held "), Some(0.0), "{metrics}");
            return;
        }
        assert!(Instant::now() < deadline, "no refusal for another count:\n{}", bosun.log_tail(30));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Issue 48: `--shards 3` over three replicas. Every WebApp gets its bucket label, its
/// children carry it, each shard is held by one replica and no WebApp is reconciled
/// by two; `kill -9` the replica holding the most shards and the WebApps of its shards
/// converge within the lease duration and some seconds; a replica started with another
/// count takes no lease and says why.
#[tokio::test]
async fn shards_divide_the_webapps_and_a_killed_replicas_shards_are_taken_over() {
    e2e("shards", |env| async move {
        let timings = ["--shards=3", "--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s"];
        let timings = [&timings[..], &["--leader-elect-retry-period=1s"]].concat();
        let mut replicas = Vec::new();
        for name in ["shard-a", "shard-b", "shard-c"] {
            replicas.push(replica(&env, name, &timings).await);
        }
        // The first replica takes every shard until the others are seen; wait until
        // each of the three holds its one (a shard moves only by release: its objects
        // may be reconciled by two replicas one after the other, never at once).
        wait_held(&replicas, &[1.0, 1.0, 1.0], Duration::from_secs(60)).await;
        let names = webapps_ready(&env, 24).await;
        // Buckets: the hash anyone can recompute, on the WebApp and on its Deployment.
        for name in &names {
            let bucket = bosun_resources::shard::bucket(Some(&env.ns), name).to_string();
            let w = env.api::<apps_v1::WebApp>().get(name).await.unwrap();
            assert_eq!(w.metadata.labels.as_ref().and_then(|l| l.get("bosun.dev/bucket")), Some(&bucket), "{name}");
            let d = env.api::<Deployment>().get(name).await.unwrap();
            assert_eq!(d.metadata.labels.as_ref().and_then(|l| l.get("bosun.dev/bucket")), Some(&bucket), "{name}");
        }
        // Every shard held, each by one replica; the replicas' WebApps are disjoint.
        let mut held = Vec::new();
        for r in &replicas {
            held.push(shards_held(r).await);
        }
        assert_eq!(held.iter().sum::<f64>(), 3.0, "shards held per replica: {held:?}");
        let sets: Vec<_> = replicas.iter().map(reconciled_objects).collect();
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                assert!(a.is_disjoint(b), "a WebApp reconciled by two replicas: {:?}", a.intersection(b));
            }
        }
        let all: std::collections::BTreeSet<_> = sets.iter().flatten().cloned().collect();
        assert!(names.iter().all(|n| all.contains(n)), "not every WebApp was reconciled: {all:?}");
        eprintln!(
            "measured: shards held {held:?}; WebApps reconciled per replica {:?}",
            sets.iter().map(|s| s.len()).collect::<Vec<_>>()
        );

        // kill -9 the replica holding the most shards: its WebApps are taken over.
        let most = (0..3).max_by(|a, b| held[*a].total_cmp(&held[*b])).unwrap();
        let mut victim = replicas.remove(most);
        let theirs = sets[most].clone();
        victim.signal("KILL");
        victim.wait_exit(Duration::from_secs(5)).await.expect("the replica exits on SIGKILL");
        let killed = Instant::now();
        upgrade_to_1_26(&env, &theirs).await;
        for name in &theirs {
            // Lease duration 6 s + the issue's 10 s, and slack for a busy machine.
            env.wait_for_within::<Deployment>(
                name,
                "the new image, from a surviving replica",
                Duration::from_secs(40),
                on_1_26,
            )
            .await;
        }
        eprintln!(
            "measured: {} WebApps of the killed replica's shards updated {:?} after kill -9",
            theirs.len(),
            killed.elapsed()
        );
        let mut held = Vec::new();
        for r in &replicas {
            held.push(shards_held(r).await);
        }
        assert_eq!(held.iter().sum::<f64>(), 3.0, "shards held by the two left: {held:?}");

        // Another count: no lease taken, and it says why.
        let other = replica(&env, "shard-other", &["--shards=2", "--leader-elect-retry-period=1s"]).await;
        wait_refused(&other).await;
        let log = other.log_tail(200);
        assert!(log.contains("--shards 3") && log.contains("--shards 2"), "{log}");
    })
    .await;
}

/// What a watcher of the shard Leases saw while replicas came and went.
#[derive(Debug, Default)]
struct Coverage {
    /// The longest time some bucket had no live shard Lease held.
    longest_unowned: Duration,
    /// Times a bucket was in two live held shard Leases at once.
    doubly_owned: usize,
    polls: usize,
}

/// Poll the shard Leases of `env` every 200 ms until `stop`: how well the 256 buckets
/// were owned.
fn watch_coverage(env: &Env, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<Coverage> {
    use bosun_resources::shard::{self, BUCKETS, Shards};
    let leases = env.api::<Lease>();
    tokio::spawn(async move {
        let mut seen = Coverage::default();
        let mut unowned_since: Option<Instant> = None;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let list = leases.list(&ListParams::default()).await.expect("listing the Leases");
            let now = jiff::Timestamp::now();
            let mut owners = vec![0usize; usize::from(BUCKETS)];
            for lease in &list.items {
                let Some((i, count)) = shard::parse_lease("bosun-leader", lease.metadata.name.as_deref().unwrap_or(""))
                else {
                    continue;
                };
                let Some(spec) = lease.spec.as_ref() else { continue };
                let held = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
                let renewed = spec.renew_time.as_ref().map(|t| t.0);
                let duration = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
                if held && renewed.is_some_and(|r| r + duration > now) {
                    for b in Shards::new(count).unwrap().buckets(i) {
                        owners[usize::from(b)] += 1;
                    }
                }
            }
            seen.polls += 1;
            seen.doubly_owned += owners.iter().filter(|o| **o > 1).count();
            if owners.contains(&0) {
                let since = *unowned_since.get_or_insert_with(Instant::now);
                seen.longest_unowned = seen.longest_unowned.max(since.elapsed());
            } else {
                unowned_since = None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    })
}

/// Issue 48: the shard count changed on a running deployment, as a rolling update
/// does it (one new replica up, then one old replica gone, three times): the new
/// replicas take nothing while the old count holds shards, the old ones divide the
/// shards of those that left among themselves, and once the last old one is gone the
/// new count takes over. No bucket is unowned for longer than the lease duration, none
/// is in two held shards at once, and the WebApps converge under the new count.
#[tokio::test]
async fn a_shard_count_changed_on_a_running_deployment_rebalances_with_no_object_unowned() {
    e2e("reshard", |env| async move {
        let timings = ["--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s"];
        let timings = [&timings[..], &["--leader-elect-retry-period=1s"]].concat();
        let with = |count: &'static str| [&[count][..], &timings[..]].concat();
        let mut old = Vec::new();
        for name in ["old-a", "old-b", "old-c"] {
            old.push(replica(&env, name, &with("--shards=3")).await);
        }
        wait_held(&old, &[1.0, 1.0, 1.0], Duration::from_secs(60)).await;
        let names = webapps_ready(&env, 12).await;

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let coverage = watch_coverage(&env, stop.clone());
        let mut new = Vec::new();
        for (step, name) in ["new-a", "new-b", "new-c"].into_iter().enumerate() {
            let fresh = replica(&env, name, &with("--shards=2")).await;
            // Up, ready (a rollout goes on through it), and taking nothing while the
            // old count holds its shards.
            wait_refused(&fresh).await;
            let (status, body) = fresh.http_get("/readyz").await;
            assert_eq!(status, 200, "{name} waiting for its turn is ready: {body}");
            new.push(fresh);
            let mut gone = old.remove(0);
            gone.signal("TERM");
            let status = gone.wait_exit(Duration::from_secs(30)).await.expect("an old replica exits on SIGTERM");
            assert!(status.success(), "{status:?}");
            if step < 2 {
                // The old replicas left hold every shard of the old count again.
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let mut held = 0.0;
                    for r in &old {
                        held += shards_held(r).await;
                    }
                    if held == 3.0 {
                        break;
                    }
                    assert!(Instant::now() < deadline, "the old replicas left hold {held} of 3 shards");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        // The new count holds its two shards, each replica ready over its shards' caches.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut held = 0.0;
            let mut ready = true;
            for r in &new {
                held += shards_held(r).await;
                ready &= r.http_get("/readyz").await.0 == 200;
            }
            if held == 2.0 && ready {
                break;
            }
            assert!(Instant::now() < deadline, "the new replicas hold {held} of 2 shards (all ready: {ready})");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        upgrade_to_1_26(&env, &names).await;
        for name in &names {
            env.wait_for::<Deployment>(name, "the new image, under the new count", on_1_26).await;
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let seen = coverage.await.unwrap();
        eprintln!("measured: shard count 3 → 2 over a rolling update: {seen:?}");
        assert_eq!(seen.doubly_owned, 0, "a bucket was in two held shards at once: {seen:?}");
        assert!(seen.longest_unowned < Duration::from_secs(6), "a bucket unowned longer than the lease: {seen:?}");
        let reconciled: std::collections::BTreeSet<_> = new.iter().flat_map(reconciled_objects).collect();
        assert!(names.iter().all(|n| reconciled.contains(n)), "the new count did not reconcile all: {reconciled:?}");
    })
    .await;
}
