//! Admission webhooks end to end: the real apiserver calls bosun over TLS with the
//! certificates bosun made itself. Each test's bosun creates configurations of its own
//! (`--webhook-configuration-prefix`) that select only the test's namespaces, so tests
//! run side by side.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bosun_api::webapp::apps_v1;
use bosun_testing::{Bosun, Env, e2e, free_port};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

struct Hooks {
    policy: PathBuf,
    port: u16,
    prefix: String,
    namespaces: String,
}

impl Hooks {
    async fn new(env: &Env, extra: &[&str]) -> (Hooks, Vec<String>) {
        let mut namespaces = vec![env.ns.clone()];
        for suffix in extra {
            namespaces.push(env.extra_namespace(suffix).await);
        }
        let policy = std::env::temp_dir().join(format!("bosun-policy-{}.yaml", env.ns));
        let hooks =
            Hooks { policy, port: free_port(), prefix: format!("{}-", env.ns), namespaces: namespaces.join(",") };
        (hooks, namespaces)
    }

    fn write_policy(&self, text: &str) {
        // Written aside and renamed, as a ConfigMap volume updates: never half a file.
        let tmp = self.policy.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.policy).unwrap();
    }

    fn args(&self, url_port: u16) -> Vec<String> {
        vec![
            "--controllers=webapp".into(),
            format!("--namespaces={}", self.namespaces),
            format!("--webhook-port={}", self.port),
            format!("--webhook-url=https://127.0.0.1:{url_port}"),
            format!("--webhook-configuration-prefix={}", self.prefix),
            format!("--admission-policy={}", self.policy.display()),
        ]
    }

    async fn start(&self, env: &Env, more: &[&str]) -> Bosun {
        let mut args = self.args(self.port);
        args.extend(more.iter().map(|s| (*s).to_owned()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        env.start_bosun(&refs).await
    }

    fn validating(&self) -> String {
        format!("{}validating-webhook-configuration", self.prefix)
    }

    async fn remove(&self, env: &Env) {
        let _ = std::fs::remove_file(&self.policy);
        for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
            let name = format!("{}{}-webhook-configuration", self.prefix, &kind[..kind.find("webhook").unwrap()]);
            let _ = env.kubectl(&["delete", kind, &name, "--ignore-not-found"]);
        }
    }
}

fn webapp(name: &str, replicas: i32, image: &str, limits: bool) -> apps_v1::WebApp {
    let mut spec = json!({"image": image, "replicas": replicas});
    if limits {
        spec["resources"] = json!({"limits": {"cpu": "500m", "memory": "256Mi"}});
    }
    serde_json::from_value(
        json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

/// Create `app` in `ns` (a dry run unless `keep`): the admitted object, or the
/// apiserver's message.
async fn create(env: &Env, ns: &str, app: &apps_v1::WebApp, keep: bool) -> Result<apps_v1::WebApp, String> {
    let api: Api<apps_v1::WebApp> = Api::namespaced(env.client.clone(), ns);
    let params = PostParams { dry_run: !keep, ..PostParams::default() };
    api.create(&params, app).await.map_err(|e| e.to_string())
}

/// Wait until the webhooks answer (the first certificate made and its bundle injected):
/// a WebApp comes back mutated, which only bosun's webhook does.
async fn until_admitting(env: &Env, ns: &str, bosun: &Bosun, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let outcome = create(env, ns, &webapp("probe", 1, "nginx:1.25", true), false).await;
        if outcome.as_ref().is_ok_and(mutated) {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "admissions never worked: {outcome:?}\n{}", bosun.log_tail(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether bosun's mutating webhook saw `app`.
fn mutated(app: &apps_v1::WebApp) -> bool {
    app.metadata.labels.as_ref().and_then(|l| l.get("app.kubernetes.io/managed-by")).is_some_and(|v| v == "bosun")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
}

#[tokio::test]
async fn production_is_denied_and_defaulted_and_the_policy_file_is_followed() {
    e2e("webhooks", |env| async move {
        let (hooks, ns) = Hooks::new(&env, &["production", "dev"]).await;
        let (prod, dev) = (ns[1].clone(), ns[2].clone());
        hooks.write_policy(&format!("productionNamespaces: [{prod}]\nmaxReplicas: 10\n"));
        let mut bosun = hooks.start(&env, &[]).await;
        until_admitting(&env, &prod, &bosun, Duration::from_secs(60)).await;

        let err = create(&env, &prod, &webapp("big", 12, "nginx:1.25", true), true).await.unwrap_err();
        assert!(err.contains("spec.replicas: 12 exceeds the maximum of 10"), "{err}");
        let err = create(&env, &prod, &webapp("nolimits", 3, "nginx:1.25", false), true).await.unwrap_err();
        assert!(err.contains("spec.resources.limits"), "{err}");
        let admitted = create(&env, &prod, &webapp("good", 3, "nginx:1.25", true), true).await.unwrap();
        let sc = admitted.spec.security_context.as_ref().expect("a defaulted securityContext");
        assert_eq!(sc.run_as_non_root, Some(true));
        assert!(sc.run_as_user.is_some_and(|u| u != 0), "{sc:?}");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let labels = admitted.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("app.kubernetes.io/managed-by").map(String::as_str), Some("bosun"));
        assert_eq!(labels.get("app.kubernetes.io/version").map(String::as_str), Some("v1"));
        // Outside production the replica rule does not apply, and no securityContext is imposed.
        let dev_app = create(&env, &dev, &webapp("big", 12, "nginx:1.25", false), true).await.unwrap();
        assert!(dev_app.spec.security_context.is_none());

        // The policy file changes: the decision follows, without a restart.
        hooks.write_policy(&format!("productionNamespaces: [{prod}]\nallowedRegistries: [registry.company.com/]\n"));
        let started = Instant::now();
        loop {
            match create(&env, &dev, &webapp("web", 1, "nginx:1.25", false), false).await {
                Err(e) if e.contains("spec.image: nginx:1.25 is not from an allowed registry") => break,
                other => {
                    assert!(started.elapsed() < Duration::from_secs(20), "the new policy never applied: {other:?}")
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        create(&env, &dev, &webapp("web", 1, "registry.company.com/shop/web:1.0", false), false).await.unwrap();
        // A broken policy file is refused, naming the key; the last good policy stays.
        hooks.write_policy("maxReplica: 5\n");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(bosun.log_tail(40).contains("maxReplica"), "the bad key was not named:\n{}", bosun.log_tail(40));
        assert!(create(&env, &dev, &webapp("web", 1, "nginx:1.25", false), false).await.is_err());

        // Latency: 1,000 admissions in a row (dry-run creates through both webhooks).
        let mut took = Vec::with_capacity(1000);
        for i in 0..1000 {
            let started = Instant::now();
            create(&env, &dev, &webapp(&format!("l{i}"), 1, "registry.company.com/a:1", false), false).await.unwrap();
            took.push(started.elapsed());
        }
        took.sort();
        let (_, metrics) = bosun.http_get("/metrics").await;
        let served: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                l.starts_with("bosun_webhook_admission_duration_seconds_sum")
                    || l.starts_with("bosun_webhook_admission_duration_seconds_count")
            })
            .collect();
        eprintln!(
            "webhooks: 1,000 creates through both webhooks: client p50 {:.1} ms, p99 {:.1} ms; bosun's own: {served:?}",
            percentile(&took, 0.5),
            percentile(&took, 0.99)
        );
        let (_, apiserver) = env.kubectl(&["get", "--raw", "/metrics"]);
        let ours: Vec<&str> = apiserver
            .lines()
            .filter(|l| {
                (l.starts_with("apiserver_admission_webhook_admission_duration_seconds_sum")
                    || l.starts_with("apiserver_admission_webhook_admission_duration_seconds_count"))
                    && l.contains("webapp")
            })
            .collect();
        eprintln!("webhooks: apiserver_admission_webhook_admission_duration_seconds for bosun's webhooks: {ours:?}");

        // bosun stopped: creating a WebApp fails (failurePolicy Fail), saying why.
        bosun.signal("TERM");
        bosun.wait_exit(Duration::from_secs(30)).await;
        let err = create(&env, &dev, &webapp("after", 1, "registry.company.com/a:1", false), false).await.unwrap_err();
        assert!(err.contains("failed calling webhook"), "{err}");
        hooks.remove(&env).await;
    })
    .await;
}

fn bundle_of(config: &ValidatingWebhookConfiguration) -> Vec<u8> {
    config.webhooks.as_ref().unwrap()[0].client_config.ca_bundle.as_ref().map(|b| b.0.clone()).unwrap_or_default()
}

#[tokio::test]
async fn certificates_are_made_restored_and_rotated_without_a_failed_admission() {
    e2e("webhook-certs", |env| async move {
        // bosun's own namespace (the test's) is never admitted: WebApps go to another.
        let (hooks, ns) = Hooks::new(&env, &["apps"]).await;
        let apps = ns[1].clone();
        hooks.write_policy("");
        let bosun = hooks.start(&env, &["--webhook-cert-validity=2m", "--webhook-cert-renew-before=1m"]).await;
        let first = until_admitting(&env, &apps, &bosun, Duration::from_secs(60)).await;
        eprintln!("webhooks: from start to the first admission {:.1} s", first.as_secs_f64());
        let secrets = env.api::<Secret>();
        let secret = secrets.get("bosun-webhook-certs").await.expect("the certificate Secret");
        let data = secret.data.clone().unwrap();
        assert!(["ca.crt", "ca.key", "tls.crt", "tls.key"].iter().all(|k| data.contains_key(*k)), "{:?}", data.keys());
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
        let config = configs.get(&hooks.validating()).await.unwrap();
        assert_eq!(bundle_of(&config), data["ca.crt"].0, "the CA is not the configuration's bundle");

        // Deleted: made again and injected again; admissions work within seconds.
        secrets.delete("bosun-webhook-certs", &DeleteParams::default()).await.unwrap();
        let again = {
            let started = Instant::now();
            loop {
                let now = secrets.get_opt("bosun-webhook-certs").await.unwrap();
                if let Some(s) = now
                    && s.data.as_ref().unwrap()["ca.crt"] != data["ca.crt"]
                    && create(&env, &apps, &webapp("probe", 1, "nginx:1.25", true), false).await.is_ok_and(|a| mutated(&a))
                {
                    break started.elapsed();
                }
                assert!(started.elapsed() < Duration::from_secs(30), "no new certificate that works:\n{}", bosun.log_tail(20));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        eprintln!("webhooks: Secret deleted → admissions work again after {:.1} s", again.as_secs_f64());

        // The bundle overwritten with garbage: put back.
        let current = secrets.get("bosun-webhook-certs").await.unwrap().data.unwrap()["ca.crt"].0.clone();
        let garbage = json!({"webhooks": [{"name": "vwebapp.apps.example.com", "clientConfig": {"caBundle": "Z2FyYmFnZQ=="}}]});
        configs.patch(&hooks.validating(), &PatchParams::apply("someone-else").force(), &Patch::Apply(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "webhooks": garbage["webhooks"].clone()}))).await.unwrap();
        let started = Instant::now();
        while bundle_of(&configs.get(&hooks.validating()).await.unwrap()) != current {
            assert!(started.elapsed() < Duration::from_secs(20), "the bundle was not put back");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Two minutes' validity, renewed at one: creates in a loop see no failure while
        // the serving certificate changes under them.
        let serving = secrets.get("bosun-webhook-certs").await.unwrap().data.unwrap()["tls.crt"].0.clone();
        let (mut ok, mut failed) = (0, Vec::new());
        let started = Instant::now();
        let mut rotated_at = None;
        while started.elapsed() < Duration::from_secs(90) && (rotated_at.is_none() || started.elapsed() < rotated_at.unwrap() + Duration::from_secs(10)) {
            match create(&env, &apps, &webapp("loop", 1, "nginx:1.25", true), false).await {
                Ok(app) if mutated(&app) => ok += 1,
                Ok(_) => failed.push("admitted without bosun's webhook".to_owned()),
                Err(e) => failed.push(e),
            }
            if rotated_at.is_none() {
                let now = secrets.get("bosun-webhook-certs").await.unwrap().data.unwrap()["tls.crt"].0.clone();
                if now != serving {
                    rotated_at = Some(started.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(rotated_at.is_some(), "the serving certificate did not rotate within 90 s");
        assert!(failed.is_empty(), "{} of {} admissions failed during the rotation: {:?}", failed.len(), ok + failed.len(), failed.first());
        eprintln!("webhooks: serving certificate rotated at {:?}; {ok} admissions, none failed", rotated_at.unwrap());
        drop(bosun);
        hooks.remove(&env).await;
    })
    .await;
}

#[tokio::test]
async fn the_standby_serves_admissions_and_keeps_serving_when_the_leader_dies() {
    e2e("webhook-replicas", |env| async move {
        let (hooks, ns) = Hooks::new(&env, &["apps"]).await;
        let apps = ns[1].clone();
        hooks.write_policy("");
        // Both replicas point the configurations at the standby's port: whatever the
        // apiserver admits, the standby answered.
        let standby_port = free_port();
        let mut leader_args = hooks.args(standby_port);
        leader_args.push("--leader-elect".into());
        let refs: Vec<&str> = leader_args.iter().map(String::as_str).collect();
        let mut leader = env.start_bosun(&refs).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut standby_args = hooks.args(standby_port);
        standby_args.retain(|a| !a.starts_with("--webhook-port"));
        standby_args.extend([format!("--webhook-port={standby_port}"), "--leader-elect".into()]);
        let refs: Vec<&str> = standby_args.iter().map(String::as_str).collect();
        let standby = env.start_bosun(&refs).await;
        until_admitting(&env, &apps, &standby, Duration::from_secs(60)).await;
        let (_, metrics) = standby.http_get("/metrics").await;
        assert!(
            metrics.lines().any(|l| l.starts_with("bosun_webhook_admissions_total{") && l.contains("allowed")),
            "the standby answered none"
        );

        // The leader dies (SIGKILL: no lease release): admissions keep working.
        leader.signal("KILL");
        leader.wait_exit(Duration::from_secs(10)).await;
        for i in 0..20 {
            let app = create(&env, &apps, &webapp(&format!("after-{i}"), 1, "nginx:1.25", true), false)
                .await
                .unwrap_or_else(|e| panic!("an admission failed after the leader died: {e}"));
            assert!(mutated(&app), "admitted without bosun's webhook");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        drop(standby);
        hooks.remove(&env).await;
    })
    .await;
}

#[tokio::test]
async fn the_ca_rotates_with_an_overlap_and_no_admission_fails() {
    e2e("webhook-ca", |env| async move {
        let (hooks, ns) = Hooks::new(&env, &["apps"]).await;
        let apps = ns[1].clone();
        hooks.write_policy("");
        // A CA of three minutes whose rotation starts at one, in steps of 20 s.
        let args = ["--webhook-ca-validity=3m", "--webhook-ca-renew-before=2m", "--webhook-ca-overlap=20s"];
        let bosun = hooks.start(&env, &args).await;
        until_admitting(&env, &apps, &bosun, Duration::from_secs(60)).await;
        let secrets = env.api::<Secret>();
        let ca = |s: &Secret, key: &str| s.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.clone());
        let first = ca(&secrets.get("bosun-webhook-certs").await.unwrap(), "ca.crt").unwrap();
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
        let (mut ok, mut failed, mut most_trusted) = (0, Vec::new(), 1);
        let started = Instant::now();
        let mut done = false;
        while !done && started.elapsed() < Duration::from_secs(150) {
            match create(&env, &apps, &webapp("loop", 1, "nginx:1.25", true), false).await {
                Ok(app) if mutated(&app) => ok += 1,
                Ok(_) => failed.push("admitted without bosun's webhook".to_owned()),
                Err(e) => failed.push(e),
            }
            let bundle = bundle_of(&configs.get(&hooks.validating()).await.unwrap());
            let trusted = String::from_utf8_lossy(&bundle).matches("BEGIN CERTIFICATE").count();
            most_trusted = most_trusted.max(trusted);
            let secret = secrets.get("bosun-webhook-certs").await.unwrap();
            // Over: a new CA signs, and it alone is trusted again.
            done = ca(&secret, "ca.crt").is_some_and(|c| c != first)
                && ca(&secret, "previous-ca.crt").is_none()
                && trusted == 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(done, "the CA did not rotate within 150 s:\n{}", bosun.log_tail(20));
        assert_eq!(most_trusted, 2, "the old and the new CA were never trusted together");
        assert!(
            failed.is_empty(),
            "{} of {} admissions failed during the CA rotation: {:?}",
            failed.len(),
            ok + failed.len(),
            failed.first()
        );
        eprintln!("webhooks: CA rotated in {:.0} s; {ok} admissions, none failed", started.elapsed().as_secs_f64());
        drop(bosun);
        hooks.remove(&env).await;
    })
    .await;
}
