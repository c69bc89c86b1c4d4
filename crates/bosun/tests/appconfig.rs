//! AppConfig end to end on the local control plane: the ConfigMap rendered from
//! templates, and exactly the workloads that consume it rolled — once per change, never
//! on a restart of bosun, with only the annotation owned by bosun.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_api::appconfig::AppConfig;
use bosun_testing::{Env, e2e};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource};
use serde_json::{Value, json};

const HASH_ANNOTATION: &str = "config.example.com/myapp-config-hash";
/// Test pacing: changes settle for 3 s (room for three applies on a loaded machine), rollouts are at least 2 s apart.
const PACE: [&str; 2] = ["--appconfig-settle=3s", "--appconfig-min-interval=2s"];

fn appconfig(name: &str, config: Value) -> AppConfig {
    serde_json::from_value(json!({
        "apiVersion": "config.example.com/v1", "kind": "AppConfig", "metadata": {"name": name},
        "spec": {"application": "myapp", "environment": "staging", "config": config},
    }))
    .expect("appconfig")
}

fn example(db_host: &str) -> AppConfig {
    appconfig("myapp", json!({"DB_HOST": db_host, "APP_ID": "{{ application }}-{{ namespace }}"}))
}

/// A Deployment running `pod` (a pod spec's fields besides the container list).
fn deployment(name: &str, container: Value, pod: Value) -> Deployment {
    let mut spec = json!({"containers": [container]});
    spec.as_object_mut().unwrap().extend(pod.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }))
    .expect("deployment")
}

fn container() -> Value {
    json!({"name": "app", "image": "nginx:1.25"})
}

/// The four consumers and one workload that does not consume the ConfigMap.
async fn workloads(env: &Env) {
    let cm = "myapp-config";
    let mut env_from = container();
    env_from["envFrom"] = json!([{"configMapRef": {"name": cm}}]);
    env.apply(&deployment("by-env-from", env_from, json!({}))).await;
    let mut mounted = container();
    mounted["volumeMounts"] = json!([{"name": "config", "mountPath": "/etc/config"}]);
    env.apply(&deployment("by-volume", mounted, json!({"volumes": [{"name": "config", "configMap": {"name": cm}}]})))
        .await;
    let init = json!({"name": "init", "image": "nginx:1.25",
        "env": [{"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "DB_HOST"}}}]});
    env.apply(&deployment("by-init-env", container(), json!({"initContainers": [init]}))).await;
    env.apply(&deployment("not-a-consumer", container(), json!({}))).await;
    let sts: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "by-projected"},
        "spec": {
            "serviceName": "by-projected",
            "selector": {"matchLabels": {"app": "by-projected"}},
            "template": {
                "metadata": {"labels": {"app": "by-projected"}},
                "spec": {
                    "containers": [{"name": "app", "image": "nginx:1.25", "volumeMounts": [{"name": "all", "mountPath": "/etc/all"}]}],
                    "volumes": [{"name": "all", "projected": {"sources": [{"configMap": {"name": cm}}]}}],
                },
            },
        },
    }))
    .expect("statefulset");
    env.apply(&sts).await;
}

const CONSUMERS: [&str; 3] = ["by-env-from", "by-volume", "by-init-env"];

/// Every workload's generation and hash annotation.
async fn snapshot(env: &Env) -> BTreeMap<String, (i64, Option<String>)> {
    let annotation = |t: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>| {
        t.and_then(|t| t.metadata.as_ref()?.annotations.as_ref()?.get(HASH_ANNOTATION).cloned())
    };
    let mut out = BTreeMap::new();
    for d in env.api::<Deployment>().list(&Default::default()).await.expect("deployments") {
        let name = d.meta().name.clone().unwrap();
        out.insert(name, (d.meta().generation.unwrap(), annotation(d.spec.as_ref().map(|s| &s.template))));
    }
    for s in env.api::<StatefulSet>().list(&Default::default()).await.expect("statefulsets") {
        let name = s.meta().name.clone().unwrap();
        out.insert(name, (s.meta().generation.unwrap(), annotation(s.spec.as_ref().map(|s| &s.template))));
    }
    out
}

fn ready(a: &AppConfig) -> Option<(String, String, String)> {
    let s = a.status.as_ref()?;
    if s.observed_generation != a.meta().generation {
        return None;
    }
    let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Wait until the AppConfig is Ready and every consumer carries its hash; the hash.
async fn converged(env: &Env, name: &str) -> String {
    let a = env
        .wait_for_within::<AppConfig>(name, "Ready=True", Duration::from_secs(30), |a| {
            ready(a).is_some_and(|(s, _, _)| s == "True")
        })
        .await;
    let hash = a.status.unwrap().config_hash.unwrap();
    for _ in 0..100 {
        let snap = snapshot(env).await;
        if CONSUMERS.iter().chain(["by-projected"].iter()).all(|c| snap[*c].1.as_deref() == Some(hash.as_str()))
            || snap.values().all(|(_, h)| h.is_none())
        {
            return hash;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("consumers did not all reach {hash}: {:?}", snapshot(env).await)
}

fn generations(s: &BTreeMap<String, (i64, Option<String>)>) -> BTreeMap<String, i64> {
    s.iter().map(|(k, (g, _))| (k.clone(), *g)).collect()
}

#[tokio::test]
async fn exactly_the_consumers_roll_once_per_change_and_never_on_a_restart() {
    e2e("appconfig-roll", |env| async move {
        workloads(&env).await;
        let bosun = env.start_bosun(&[&["--controllers=appconfig"][..], &PACE].concat()).await;
        env.apply(&example("db.{{ environment }}.internal")).await;
        let cm = env.wait_for::<ConfigMap>("myapp-config", "the rendered ConfigMap", |c| c.data.is_some()).await;
        let data = cm.data.unwrap();
        assert_eq!(data["DB_HOST"], "db.staging.internal");
        assert_eq!(data["APP_ID"], format!("myapp-{}", env.ns));
        converged(&env, "myapp").await;
        let created = snapshot(&env).await;
        assert!(
            created.values().all(|(g, h)| *g == 1 && h.is_none()),
            "publishing the first data rolled something: {created:?}"
        );

        // Change one value: every consumer rolls once, the other workload not at all.
        env.apply(&example("db2.{{ environment }}.internal")).await;
        env.wait_for::<ConfigMap>("myapp-config", "the new value", |c| {
            c.data.as_ref().is_some_and(|d| d["DB_HOST"] == "db2.staging.internal")
        })
        .await;
        let hash = env
            .wait_for_within::<AppConfig>("myapp", "a rollout", Duration::from_secs(30), |a| {
                a.status.as_ref().is_some_and(|s| s.rolled_out.len() == 4)
            })
            .await
            .status
            .unwrap();
        assert_eq!(
            hash.rolled_out,
            ["Deployment/by-env-from", "Deployment/by-init-env", "Deployment/by-volume", "StatefulSet/by-projected"]
        );
        let hash = converged(&env, "myapp").await;
        let after = snapshot(&env).await;
        for c in CONSUMERS.iter().chain(["by-projected"].iter()) {
            assert_eq!(after[*c], (2, Some(hash.clone())), "{c}");
        }
        assert_eq!(after["not-a-consumer"], (1, None));

        // Bosun owns only the annotation; the test's own fields stay the test's.
        let d = env.api::<Deployment>().get("by-env-from").await.unwrap();
        let fields = d.meta().managed_fields.clone().unwrap();
        let ours =
            fields.iter().find(|f| f.manager.as_deref() == Some("bosun-rollout.myapp-config")).expect("bosun's entry");
        assert_eq!(
            serde_json::to_value(&ours.fields_v1).unwrap(),
            json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {format!("f:{HASH_ANNOTATION}"): {}}}}}}),
        );
        let theirs = fields.iter().find(|f| f.manager.as_deref() == Some("e2e")).expect("the test's entry");
        assert!(serde_json::to_string(&theirs.fields_v1).unwrap().contains("f:containers"));

        // The same again, and a restart of bosun: nothing rolls.
        env.apply(&example("db2.{{ environment }}.internal")).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(bosun);
        let bosun = env.start_bosun(&[&["--controllers=appconfig"][..], &PACE].concat()).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(generations(&snapshot(&env).await), generations(&after), "a re-apply or a restart rolled something");

        // Three changes within a second: each consumer rolls once, to the last.
        for v in ["db3", "db4", "db5"] {
            env.apply(&example(&format!("{v}.{{{{ environment }}}}.internal"))).await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        env.wait_for::<ConfigMap>("myapp-config", "the last value", |c| {
            c.data.as_ref().is_some_and(|d| d["DB_HOST"] == "db5.staging.internal")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let hash = converged(&env, "myapp").await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let last = snapshot(&env).await;
        for c in CONSUMERS.iter().chain(["by-projected"].iter()) {
            assert_eq!(last[*c], (3, Some(hash.clone())), "{c} did not roll exactly once to the last data");
        }
        assert_eq!(last["not-a-consumer"], (1, None));

        // A workload that starts consuming it later started with the current data: not rolled.
        let mut env_from = container();
        env_from["envFrom"] = json!([{"configMapRef": {"name": "myapp-config"}}]);
        env.apply(&deployment("late", env_from, json!({}))).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(snapshot(&env).await["late"], (1, None));

        // Deleting the AppConfig takes its ConfigMap with it and rolls nothing.
        let before_delete = generations(&snapshot(&env).await);
        env.api::<AppConfig>().delete("myapp", &DeleteParams::default()).await.unwrap();
        env.wait_gone::<ConfigMap>("myapp-config").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(generations(&snapshot(&env).await), before_delete, "deleting the AppConfig rolled something");

        let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
        assert!(!log.contains("reconcile failed"), "reconciles failed:\n{}", bosun.log_tail(30));
    })
    .await;
}

#[tokio::test]
async fn template_errors_and_conflicts_touch_nothing() {
    e2e("appconfig-refuse", |env| async move {
        workloads(&env).await;
        let _bosun = env.start_bosun(&[&["--controllers=appconfig"][..], &PACE].concat()).await;
        env.apply(&example("db.{{ environment }}.internal")).await;
        let good = converged(&env, "myapp").await;
        env.apply(&example("db2.{{ environment }}.internal")).await;
        let good2 = env
            .wait_for_within::<AppConfig>("myapp", "the second hash", Duration::from_secs(30), |a| {
                a.status.as_ref().and_then(|s| s.config_hash.as_deref()).is_some_and(|h| h != good)
            })
            .await;
        let good2 = good2.status.unwrap().config_hash.unwrap();
        converged(&env, "myapp").await;
        let before = snapshot(&env).await;
        let cm_before = env.api::<ConfigMap>().get("myapp-config").await.unwrap().data;

        for (bad, expect) in [("{{ unclosed", "syntax"), ("{{ nosuchvar }}", "undefined")] {
            env.apply(&example(bad)).await;
            let a = env
                .wait_for::<AppConfig>("myapp", "TemplateError", |a| {
                    ready(a).is_some_and(|(s, r, _)| s == "False" && r == "TemplateError")
                })
                .await;
            let (_, _, message) = ready(&a).unwrap();
            assert!(message.contains("spec.config.DB_HOST") && message.to_lowercase().contains(expect), "{message}");
            assert_eq!(a.status.unwrap().config_hash.as_deref(), Some(good2.as_str()));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(env.api::<ConfigMap>().get("myapp-config").await.unwrap().data, cm_before, "the ConfigMap changed");
        assert_eq!(generations(&snapshot(&env).await), generations(&before), "a template error rolled something");
        // The fix recovers.
        env.apply(&example("db3.{{ environment }}.internal")).await;
        env.wait_for::<ConfigMap>("myapp-config", "the fixed value", |c| {
            c.data.as_ref().is_some_and(|d| d["DB_HOST"] == "db3.staging.internal")
        })
        .await;
        converged(&env, "myapp").await;

        // A second AppConfig for the same application is refused, naming the first…
        env.apply(&appconfig("second", json!({"DB_HOST": "other"}))).await;
        let a = env
            .wait_for::<AppConfig>("second", "Conflict", |a| {
                ready(a).is_some_and(|(s, r, _)| s == "False" && r == "Conflict")
            })
            .await;
        let (_, _, message) = ready(&a).unwrap();
        assert!(message.contains("AppConfig myapp"), "{message}");
        // …and takes over when the first is deleted.
        env.api::<AppConfig>().delete("myapp", &DeleteParams::default()).await.unwrap();
        env.wait_for_within::<ConfigMap>("myapp-config", "the second's data", Duration::from_secs(60), |c| {
            c.data.as_ref().is_some_and(|d| d.get("DB_HOST").map(String::as_str) == Some("other"))
        })
        .await;
        env.wait_for::<AppConfig>("second", "Ready=True", |a| ready(a).is_some_and(|(s, _, _)| s == "True")).await;

        // Bad input is refused naming the field.
        let api: Api<AppConfig> = env.api();
        let mut bad = example("x");
        bad.spec.application = "other".into();
        let mut value = serde_json::to_value(&bad).unwrap();
        value["spec"]["environment"] = json!("test");
        value["metadata"]["name"] = json!("bad-env");
        let err = env.create_raw::<AppConfig>(value).await.expect_err("environment: test was accepted");
        assert!(err.to_string().contains("spec.environment"), "{err}");
        let _ = api.create(&PostParams::default(), &bad).await;
    })
    .await;
}
