//! Faults from outside: objects the types cannot read, an apiserver restart, bosun
//! killed mid-convergence.
//!
//! These tests change what every test would see (a CRD's schema, the apiserver
//! itself), so they run one at a time, and in a test binary of their own: cargo runs
//! test binaries one after another, so no other suite shares the cluster meanwhile.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_api::demovolume::DemoVolume;
use bosun_api::webapp::{WebAppKind, apps_v1};
use bosun_testing::{Bosun, Env, e2e, repo_root, restart_apiserver};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

/// One test at a time in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn webapp(name: &str, spec: serde_json::Value) -> apps_v1::WebApp {
    serde_json::from_value(
        json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": name}, "spec": spec}),
    )
    .expect("webapp")
}

fn is_ready(w: &apps_v1::WebApp) -> bool {
    w.current_status().is_some_and(|s| {
        s.observed_generation == w.metadata.generation
            && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn kubectl_ok(env: &Env, args: &[&str]) -> String {
    let (ok, out) = env.kubectl(args);
    assert!(ok, "kubectl {args:?} failed: {out}");
    out
}

async fn wait_readyz(bosun: &Bosun, want: u16, timeout: Duration) -> Duration {
    let start = Instant::now();
    let mut last = (0, String::new());
    while start.elapsed() < timeout {
        last = bosun.http_get("/readyz").await;
        if last.0 == want {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("/readyz was not {want} within {timeout:?}: last {} {}; log:\n{}", last.0, last.1, bosun.log_tail(30))
}

/// Drop the `maximum` of one property of a CRD's schema, as an older, looser version
/// of the CRD had it; `restore_crds` puts the committed CRDs back.
fn loosen(env: &Env, crd: &str, property_path: &[&str]) {
    let out = kubectl_ok(env, &["get", "crd", crd, "-o", "json"]);
    let mut crd_json: serde_json::Value = serde_json::from_str(&out).expect("crd json");
    for version in crd_json["spec"]["versions"].as_array_mut().expect("versions") {
        let mut schema = &mut version["schema"]["openAPIV3Schema"];
        for p in property_path {
            schema = &mut schema["properties"][*p];
        }
        schema.as_object_mut().expect("property schema").remove("maximum");
    }
    let file = std::env::temp_dir().join(format!("{crd}-{}.json", std::process::id()));
    std::fs::write(&file, crd_json.to_string()).expect("write crd");
    kubectl_ok(env, &["replace", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(file);
}

fn restore_crds(env: &Env) {
    let bases = repo_root().join("config/crd/bases");
    kubectl_ok(env, &["apply", "--server-side", "--force-conflicts", "-f", bases.to_str().unwrap()]);
}

async fn events_with_reason(env: &Env, reason: &str) -> Vec<Event> {
    let events = env.api::<Event>().list(&ListParams::default()).await.expect("events");
    events.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect()
}

fn metric(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// Nothing in a log that is an object body or a value of one.
fn assert_log_clean(log: &Path, secrets: &[&str]) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for secret in secrets {
        assert!(!text.contains(secret), "{} contains the value {secret}", log.display());
    }
    for body in ["\"metadata\":{", "\"apiVersion\":\"", "managedFields"] {
        assert!(!text.contains(body), "{} contains an object body ({body})", log.display());
    }
}

/// Objects stored while the schema was looser — a DemoVolume of 2³¹ GiB and a WebApp
/// whose status says 3,000,000,000 replicas — cannot be read by bosun's types. They are
/// reported on themselves, naming the field; everything else converges, /readyz is
/// 200 (also after a restart), and no log holds an object body or an env value.
#[tokio::test]
async fn unreadable_objects_are_reported_and_everything_else_converges() {
    let _serial = SERIAL.lock().await;
    e2e("unreadable", |env| async move {
        const SECRET: &str = "s3cr3t-env-value-7f3a";
        loosen(&env, "demovolumes.demo.example.com", &["spec", "size"]);
        loosen(&env, "webapps.apps.example.com", &["status", "availableReplicas"]);
        let created = async {
            let huge = env
                .create_raw::<DemoVolume>(
                    json!({"metadata": {"name": "huge"}, "spec": {"name": "huge", "size": 2147483648u64}}),
                )
                .await;
            env.apply(&webapp("leaky", json!({"image": "nginx", "env": [{"name": "PASSWORD", "value": SECRET}]})))
                .await;
            let (ok, out) = env.kubectl(&[
                "patch",
                "webapp.apps.example.com",
                "leaky",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"availableReplicas":3000000000}}"#,
            ]);
            (huge, ok, out)
        }
        .await;
        restore_crds(&env);
        let (huge, ok, out) = created;
        huge.expect("a DemoVolume of 2^31 GiB under the looser schema");
        assert!(ok, "writing the out-of-range status: {out}");

        let mut bosun = env.start_bosun(&[]).await;
        env.apply(&webapp("good", json!({"image": "nginx", "replicas": 2}))).await;
        let volume: DemoVolume = serde_json::from_value(json!({
            "apiVersion": "demo.example.com/v1", "kind": "DemoVolume", "metadata": {"name": "fine"},
            "spec": {"name": "fine", "size": 1}
        }))
        .unwrap();
        env.apply(&volume).await;
        env.wait_for::<apps_v1::WebApp>("good", "Ready=True beside an unreadable WebApp", is_ready).await;
        env.wait_for::<DemoVolume>("fine", "Ready=True beside an unreadable DemoVolume", |v| {
            v.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .await;
        wait_readyz(&bosun, 200, Duration::from_secs(30)).await;

        let start = Instant::now();
        let reported = loop {
            let events = events_with_reason(&env, "InvalidObject").await;
            let notes: Vec<String> = events.iter().filter_map(|e| e.note.clone()).collect();
            if notes.iter().any(|n| n.contains("spec.size"))
                && notes.iter().any(|n| n.contains("status.availableReplicas"))
            {
                break notes;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no InvalidObject events naming the fields: {notes:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(reported.iter().all(|n| !n.contains(SECRET) && !n.contains("3000000000")), "{reported:?}");
        let (_, metrics) = bosun.http_get("/metrics").await;
        assert!(metric(&metrics, "bosun_reconcile_errors_total{") >= 2.0, "unreadable objects not counted:\n{metrics}");
        assert!(
            metrics.lines().any(|l| l.contains("reason=\"InvalidObject\"") && !l.trim_end().ends_with(" 0")),
            "no InvalidObject count"
        );
        assert!(
            env.api::<Deployment>().get_opt("leaky").await.expect("get").is_none(),
            "an unreadable WebApp was applied"
        );

        // A restart lists the unreadable objects again: the cache still syncs.
        bosun.signal("KILL");
        bosun.wait_exit(Duration::from_secs(10)).await;
        let again = env.start_bosun(&[]).await;
        wait_readyz(&again, 200, Duration::from_secs(30)).await;
        for log in [&bosun.log, &again.log] {
            assert_log_clean(log, &[SECRET]);
        }
    })
    .await;
}

/// After a kube-apiserver restart, bosun reconciles again within seconds of the API's
/// return, and /readyz says 503 while its watches cannot flow.
#[tokio::test]
async fn reconciling_resumes_within_seconds_of_an_apiserver_restart() {
    let _serial = SERIAL.lock().await;
    e2e("apiserver-restart", |env| async move {
        let bosun = env.start_bosun(&[]).await;
        env.apply(&webapp("before", json!({"image": "nginx"}))).await;
        env.wait_for::<apps_v1::WebApp>("before", "Ready=True", is_ready).await;
        wait_readyz(&bosun, 200, Duration::from_secs(30)).await;

        let restart = tokio::task::spawn_blocking(|| restart_apiserver(Duration::from_secs(10)));
        // While the API is away, /readyz must not say 200.
        let seen_unready = async {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                if bosun.http_get("/readyz").await.0 == 503 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            false
        };
        let (restarted, seen_unready) = tokio::join!(restart, seen_unready);
        restarted.expect("restart task").unwrap_or_else(|e| panic!("restarting the apiserver failed: {e:#}"));
        assert!(seen_unready, "/readyz never left 200 while the apiserver was down");
        let back = Instant::now();

        // The test's own client reconnects too.
        let start = Instant::now();
        while env.api::<apps_v1::WebApp>().get_opt("before").await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "the apiserver did not answer the test");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        env.apply(&webapp("after", json!({"image": "nginx"}))).await;
        env.wait_for_within::<Deployment>(
            "after",
            "the Deployment of a WebApp made after the restart",
            Duration::from_secs(60),
            |_| true,
        )
        .await;
        let took = back.elapsed();
        println!("Deployment of a new WebApp {:.1} s after the apiserver was back", took.as_secs_f64());
        assert!(took <= Duration::from_secs(10), "reconciling resumed only {took:?} after the API returned");
        // Status is written again too. (Not Ready: that needs kube-controller-manager,
        // kube-scheduler and kwok to recover from the outage as well, and on a fresh CI
        // machine their node lifecycle and reflector backoffs kept the pod un-Ready for
        // minutes — not bosun's doing.)
        env.wait_for::<apps_v1::WebApp>("after", "a status for generation 1", |w| {
            w.status.as_ref().is_some_and(|s| s.observed_generation == Some(1))
        })
        .await;
        // And a change to a WebApp from before the restart is applied.
        env.apply(&webapp("before", json!({"image": "nginx", "replicas": 2}))).await;
        env.wait_for::<Deployment>("before", "replicas 2", |d| d.spec.as_ref().and_then(|s| s.replicas) == Some(2))
            .await;
        wait_readyz(&bosun, 200, Duration::from_secs(30)).await;
        // The next test of this binary starts on fake nodes that hold their leases
        // again (kwok backs off while the API is away).
        let back_at = jiff::Timestamp::now();
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(env.client.clone(), "kube-node-lease");
        let start = Instant::now();
        loop {
            let list = leases.list(&ListParams::default()).await.expect("node leases");
            let stale: Vec<String> = list
                .items
                .iter()
                .filter(|l| l.name_any().starts_with("kwok-"))
                .filter(|l| l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).is_none_or(|t| t.0 < back_at))
                .map(|l| l.name_any())
                .collect();
            if stale.is_empty() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(90), "fake nodes without a renewed lease: {stale:?}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
}

/// 200 WebApps, bosun killed with SIGKILL five times while they converge: all converge,
/// with exactly one Deployment and one Service each, each controlled by its WebApp,
/// and nothing left over.
#[tokio::test]
async fn two_hundred_webapps_converge_through_five_kills() {
    let _serial = SERIAL.lock().await;
    e2e("kill-chaos", |env| async move {
        const N: usize = 200;
        let mut bosun = env.start_bosun(&[]).await;
        let names: Vec<String> = (0..N).map(|i| format!("app-{i:03}")).collect();
        let create = futures::stream::iter(names.clone())
            .map(|name| {
                let env = env.clone();
                async move { env.apply(&webapp(&name, json!({"image": "nginx", "replicas": 1}))).await }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>();
        let kills = async {
            for _ in 0..5 {
                let pause = Duration::from_millis(1000 + rand::random::<u64>() % 3000);
                tokio::time::sleep(pause).await;
                bosun.signal("KILL");
                bosun.wait_exit(Duration::from_secs(10)).await.expect("bosun did not die");
                bosun = env.start_bosun(&[]).await;
            }
            bosun
        };
        let (_, bosun) = tokio::join!(create, kills);

        let start = Instant::now();
        loop {
            let list = env.api::<apps_v1::WebApp>().list(&ListParams::default()).await.expect("list");
            let ready = list.items.iter().filter(|w| is_ready(w)).count();
            if ready == N {
                break;
            }
            if start.elapsed() >= Duration::from_secs(240) {
                // Which ones, as bosun last saw them and as their Deployments are now:
                // the difference between a missed trigger and a rollout that never ended.
                let mut stuck = String::new();
                for w in list.items.iter().filter(|w| !is_ready(w)) {
                    let d = env.api::<Deployment>().get_opt(&w.name_any()).await.expect("deployment");
                    stuck += &format!(
                        "{}: generation {:?}, status {}\n  Deployment: {}\n",
                        w.name_any(),
                        w.metadata.generation,
                        serde_json::to_string(&w.current_status()).unwrap(),
                        serde_json::to_string(&d.map(|d| (d.metadata.generation, d.status))).unwrap()
                    );
                }
                panic!(
                    "{ready} of {N} WebApps Ready after {:?}:\n{stuck}log:\n{}",
                    start.elapsed(),
                    bosun.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let uids: BTreeMap<String, String> = env
            .api::<apps_v1::WebApp>()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|w| (w.name_any(), w.uid().unwrap()))
            .collect();
        let deployments = env.api::<Deployment>().list(&ListParams::default()).await.expect("deployments").items;
        let services = env.api::<Service>().list(&ListParams::default()).await.expect("services").items;
        assert_eq!(
            deployments.len(),
            N,
            "Deployments: {:?}",
            deployments.iter().map(|d| d.name_any()).collect::<Vec<_>>()
        );
        assert_eq!(services.len(), N, "Services");
        for (kind, owners) in [
            (
                "Deployment",
                deployments.iter().map(|d| (d.name_any(), d.owner_references().to_vec())).collect::<Vec<_>>(),
            ),
            ("Service", services.iter().map(|s| (s.name_any(), s.owner_references().to_vec())).collect()),
        ] {
            for (name, refs) in owners {
                assert_eq!(refs.len(), 1, "{kind} {name} has owners {refs:?}");
                assert_eq!(Some(&refs[0].uid), uids.get(&name), "{kind} {name} is not controlled by its WebApp");
                assert_eq!(refs[0].controller, Some(true));
            }
        }
    })
    .await;
}
