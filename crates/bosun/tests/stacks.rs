//! AppStack and EcommercePlatform end to end: the spec's examples on the fake nodes
//! (order of creation against the Ready transitions, the environments' defaults,
//! MySQL, monitoring that follows its CRD, the refusals), and on the real node a stack
//! whose backend is a real client of its real PostgreSQL.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::time::Duration;

use bosun_api::backup::Backup;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::stack::{AppStack, EcommercePlatform, Phase};
use bosun_testing::node::images;
use bosun_testing::{Env, e2e};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

/// The spec's example, verbatim.
const PRODUCTION_STORE: &str = r#"apiVersion: platform.example.com/v1
kind: EcommercePlatform
metadata: {name: production-store, namespace: ecommerce-prod}
spec:
  environment: production
  frontend: {replicas: 5, image: "registry.company.com/ecommerce-frontend:v2.1.0"}
  backend: {replicas: 3, image: "registry.company.com/ecommerce-backend:v2.1.0"}
  database: {type: postgresql, version: "14", storage: 500Gi}
  cache: {enabled: true}
  monitoring: {enabled: true}
"#;

/// The spec's AppStack example, verbatim.
const SHOP: &str = r#"apiVersion: app.example.com/v1
kind: AppStack
metadata: {name: shop}
spec:
  database: {type: postgresql, version: "15", storage: 1Gi}
  cache: {enabled: true}
  backend: {image: "ghcr.io/example/api:1.0", replicas: 2, port: 8080}
  frontend: {image: "ghcr.io/example/web:1.0", replicas: 2, port: 80}
"#;

const BOTH: &str = "--controllers=appstack,ecommerceplatform,postgresql";

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn platform_condition(p: &EcommercePlatform, type_: &str) -> Option<Condition> {
    let status = p.status.as_ref().filter(|s| s.observed_generation == p.metadata.generation)?;
    condition(&status.conditions, type_).cloned()
}

fn platform_is(type_: &'static str, status: &'static str, reason: &'static str) -> impl Fn(&EcommercePlatform) -> bool {
    move |p| platform_condition(p, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

fn platform(name: &str, environment: &str, database: &str) -> String {
    format!(
        "apiVersion: platform.example.com/v1\nkind: EcommercePlatform\nmetadata: {{name: {name}}}\nspec:\n  \
         environment: {environment}\n  frontend: {{image: web}}\n  backend: {{image: api}}\n  \
         database: {{type: {database}}}\n  monitoring: {{enabled: false}}\n"
    )
}

fn created(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Timestamp {
    meta.creation_timestamp.as_ref().expect("creationTimestamp").0
}

/// When `type_` last became True.
fn became_true(conditions: &[Condition], type_: &str) -> Timestamp {
    let c = condition(conditions, type_).filter(|c| c.status == "True").expect("a True condition");
    c.last_transition_time.0
}

fn deployment_available_since(d: &Deployment) -> Timestamp {
    let conditions = d.status.as_ref().and_then(|s| s.conditions.as_ref()).expect("conditions");
    let c = conditions.iter().find(|c| c.type_ == "Available" && c.status == "True").expect("Available");
    c.last_transition_time.as_ref().expect("time").0
}

/// A namespace of a fixed name, owned by the test's own (so it goes with it).
async fn fixed_namespace(env: &Env, name: &str) {
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    for _ in 0..240 {
        if namespaces.get_opt(name).await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // a previous run's, terminating
    }
    let owner = namespaces.get(&env.ns).await.unwrap().controller_owner_ref(&()).unwrap();
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bosun.dev/e2e": "true"}, "ownerReferences": [owner]}
    }))
    .unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// The Prometheus operator's ServiceMonitor CRD, as far as a ServiceMonitor needs.
fn service_monitor_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor", "listKind": "ServiceMonitorList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn the_production_store_converges_in_order_and_monitoring_follows_its_crd() {
    e2e("stack-production", |env| async move {
        let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
        let _ = crds.delete("servicemonitors.monitoring.coreos.com", &DeleteParams::default()).await;
        fixed_namespace(&env, "ecommerce-prod").await;
        let bosun = env.start_bosun(&[BOTH, "--namespaces=ecommerce-prod"]).await;
        let started = std::time::Instant::now();
        let file = std::env::temp_dir().join(format!("{}-production-store.yaml", env.ns));
        std::fs::write(&file, PRODUCTION_STORE).unwrap();
        // As the user would: `kubectl apply -f`, the namespace the manifest names.
        let (ok, out) = env.kubectl(&["apply", "--namespace=ecommerce-prod", "-f", file.to_str().unwrap()]);
        assert!(ok, "{out}");
        let platforms: Api<EcommercePlatform> = Api::namespaced(env.client.clone(), "ecommerce-prod");
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        let p = loop {
            let p = platforms.get("production-store").await.unwrap();
            if platform_condition(&p, "Ready").is_some_and(|c| c.status == "True") {
                break p;
            }
            assert!(std::time::Instant::now() < deadline, "not Ready: {:?}\n{}", p.status, bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        eprintln!("production-store: apply → Ready {:.1} s", started.elapsed().as_secs_f64());
        let status = p.status.clone().unwrap();
        assert_eq!(status.phase, Some(Phase::Running));
        let names: Vec<&str> = status.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["database", "cache", "backend", "frontend"]);
        let effective = status.effective.clone().unwrap();
        assert_eq!((effective.database_replicas, effective.database_storage.as_str()), (3, "500Gi"));
        assert!(effective.backup.enabled && effective.cache && effective.monitoring);

        let pgs: Api<PostgreSQL> = Api::namespaced(env.client.clone(), "ecommerce-prod");
        let db = pgs.get("production-store-db").await.expect("the PostgreSQL in ecommerce-prod");
        assert_eq!((db.spec.version.as_str(), db.spec.storage.as_str(), db.spec.replicas), ("14", "500Gi", 3));
        let backup = db.spec.backup.clone().unwrap();
        assert!(backup.enabled);
        assert_eq!((backup.schedule.as_deref(), backup.retention.as_deref()), (Some("0 2 * * *"), Some("30d")));
        assert_eq!(db.labels().get("platform").map(String::as_str), Some("production-store"));

        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "ecommerce-prod");
        let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
        let cache = deployments.get("production-store-cache").await.expect("the cache in ecommerce-prod");
        let backend = deployments.get("production-store-backend").await.unwrap();
        let frontend = deployments.get("production-store-frontend").await.unwrap();
        assert_eq!((replicas(&backend), replicas(&frontend)), (Some(3), Some(5)));
        for d in [&cache, &backend, &frontend] {
            assert_eq!(d.labels().get("platform").map(String::as_str), Some("production-store"));
        }
        let ingress = Api::<Ingress>::namespaced(env.client.clone(), "ecommerce-prod")
            .get("production-store")
            .await
            .expect("the Ingress in ecommerce-prod");
        let rule = &ingress.spec.unwrap().rules.unwrap()[0];
        let to = rule.http.as_ref().unwrap().paths[0].backend.service.as_ref().unwrap();
        assert_eq!(to.name, "production-store-frontend");

        // Order: the backend after the database was Ready, the frontend after the backend.
        let db_ready = became_true(&db.status.as_ref().unwrap().conditions, "Ready");
        assert!(created(&backend.metadata) >= db_ready, "the backend came before the database was Ready");
        assert!(created(&cache.metadata) >= db_ready, "the cache came before the database was Ready");
        let backend_ready = deployment_available_since(&backend);
        assert!(created(&frontend.metadata) >= backend_ready, "the frontend came before the backend was Ready");

        // Credentials only by reference: no Deployment holds the password.
        let secret = Api::<Secret>::namespaced(env.client.clone(), "ecommerce-prod")
            .get("production-store-db-credentials")
            .await
            .unwrap();
        let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
        for d in deployments.list(&ListParams::default()).await.unwrap() {
            let text = serde_json::to_string(&d.spec).unwrap();
            assert!(!text.contains(&password), "Deployment {} holds the database password", d.name_any());
        }
        let env_of = |d: &Deployment| d.spec.clone().unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
        let pw = env_of(&backend).into_iter().find(|e| e.name == "DATABASE_PASSWORD").unwrap();
        assert_eq!(pw.value_from.unwrap().secret_key_ref.unwrap().name, "production-store-db-credentials");

        // Monitoring: explained without the CRD, made once it is installed.
        let mc = platform_condition(&p, "MonitoringAvailable").unwrap();
        assert_eq!((mc.status.as_str(), mc.reason.as_str()), ("False", "CRDNotInstalled"));
        crds.create(&PostParams::default(), &service_monitor_crd()).await.unwrap();
        let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor");
        let monitors: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            "ecommerce-prod",
            &ApiResource::from_gvk_with_plural(&gvk, "servicemonitors"),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let p = platforms.get("production-store").await.unwrap();
            let available = platform_condition(&p, "MonitoringAvailable").is_some_and(|c| c.status == "True");
            if available && monitors.get_opt("production-store").await.ok().flatten().is_some() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no ServiceMonitor after the CRD came\n{}",
                bosun.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        // A hand edit of the platform's ServiceMonitor is put back (it is watched once
        // its CRD is there, like every other child).
        let edit = json!({"spec": {"endpoints": [{"port": "backend", "path": "/edited"}]}});
        monitors.patch("production-store", &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let m = monitors.get("production-store").await.unwrap();
            let paths: Vec<_> = m.data["spec"]["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["path"].as_str().unwrap_or_default().to_owned())
                .collect();
            if paths == ["/metrics", "/metrics"] {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the edited ServiceMonitor was not put back: {paths:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // Monitoring off: the platform's own ServiceMonitor goes.
        let monitoring = |enabled: bool| json!({"spec": {"monitoring": {"enabled": enabled}}});
        platforms.patch("production-store", &PatchParams::default(), &Patch::Merge(&monitoring(false))).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while monitors.get_opt("production-store").await.unwrap().is_some() {
            assert!(std::time::Instant::now() < deadline, "the ServiceMonitor stayed after monitoring was turned off");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // A ServiceMonitor of that name that someone else made is not taken over.
        let theirs: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "production-store", "labels": {"team": "observability"}},
            "spec": {"selector": {"matchLabels": {"app": "theirs"}}, "endpoints": [{"port": "web"}]},
        }))
        .unwrap();
        monitors.create(&PostParams::default(), &theirs).await.unwrap();
        platforms.patch("production-store", &PatchParams::default(), &Patch::Merge(&monitoring(true))).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let p = loop {
            let p = platforms.get("production-store").await.unwrap();
            if platform_condition(&p, "MonitoringAvailable").is_some_and(|c| c.reason == "NameConflict") {
                break p;
            }
            assert!(std::time::Instant::now() < deadline, "no MonitoringAvailable=False NameConflict: {:?}", p.status);
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert!(platform_condition(&p, "MonitoringAvailable").unwrap().message.contains("not this platform's"));
        let kept = monitors.get("production-store").await.unwrap();
        assert_eq!(
            kept.data["spec"]["selector"]["matchLabels"]["app"], "theirs",
            "the user's ServiceMonitor was changed"
        );
        assert!(kept.metadata.owner_references.is_none(), "the user's ServiceMonitor was taken over");
        let _ = crds.delete("servicemonitors.monitoring.coreos.com", &DeleteParams::default()).await;
    })
    .await;
}

#[tokio::test]
async fn environments_fill_in_defaults_mysql_runs_and_a_type_change_is_refused() {
    e2e("stack-environments", |env| async move {
        let _bosun = env.start_bosun(&[BOTH]).await;
        for (name, environment, database) in [
            ("dev", "development", "postgresql"),
            ("stage", "staging", "postgresql"),
            ("my", "development", "mysql"),
            ("mys", "staging", "mysql"),
        ] {
            let (ok, out) = env.kubectl_apply(&platform(name, environment, database));
            assert!(ok, "{out}");
        }
        for name in ["dev", "stage", "my", "mys"] {
            env.wait_for_within::<EcommercePlatform>(
                name,
                "Ready=True",
                Duration::from_secs(180),
                platform_is("Ready", "True", "AllComponentsReady"),
            )
            .await;
        }
        let dev = env.api::<PostgreSQL>().get("dev-db").await.unwrap();
        assert_eq!((dev.spec.replicas, dev.spec.storage.as_str()), (1, "10Gi"));
        assert!(dev.spec.backup.as_ref().is_none_or(|b| !b.enabled), "development takes no backups");
        let stage = env.api::<PostgreSQL>().get("stage-db").await.unwrap();
        assert_eq!((stage.spec.replicas, stage.spec.storage.as_str()), (2, "50Gi"));
        assert!(stage.spec.backup.as_ref().is_some_and(|b| b.enabled));
        let effective = env.api::<EcommercePlatform>().get("stage").await.unwrap().status.unwrap().effective.unwrap();
        assert_eq!((effective.database_replicas, effective.database_storage.as_str()), (2, "50Gi"));
        assert_eq!(effective.backup.schedule.as_deref(), Some("0 2 * * *"));

        // MySQL: a StatefulSet of the official image, its Secret and Service; no PostgreSQL.
        let sts = env.api::<StatefulSet>().get("my-db").await.unwrap();
        let image = sts.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("mysql:8.4"));
        env.api::<Secret>().get("my-db-credentials").await.unwrap();
        env.api::<Service>().get("my-db").await.unwrap();
        assert!(env.api::<PostgreSQL>().get_opt("my-db").await.unwrap().is_none());
        let kept = env.api::<Secret>().get("my-db-credentials").await.unwrap().data;
        // Backups of MySQL as of PostgreSQL: staging has them, into a claim that is kept.
        assert!(env.api::<Backup>().get_opt("my-db-backup").await.unwrap().is_none());
        let backup = env.api::<Backup>().get("mys-db-backup").await.unwrap();
        assert_eq!((backup.spec.source.type_.as_str(), backup.spec.schedule.as_str()), ("mysql", "0 2 * * *"));
        let claim = env.api::<PersistentVolumeClaim>().get("mys-db-backups").await.unwrap();
        assert!(claim.owner_references().is_empty());

        // Changing the type is refused; nothing of the other type appears.
        let patch = json!({"spec": {"database": {"type": "postgresql"}}});
        env.api::<EcommercePlatform>().patch("my", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        let refused = env
            .wait_for::<EcommercePlatform>(
                "my",
                "DatabaseTypeChangeRefused",
                platform_is("Ready", "False", "DatabaseTypeChangeRefused"),
            )
            .await;
        let message = platform_condition(&refused, "Ready").unwrap().message;
        assert!(message.contains("spec.database.type"), "{message}");
        assert_eq!(refused.status.unwrap().phase, Some(Phase::Failed));
        assert!(env.api::<PostgreSQL>().get_opt("my-db").await.unwrap().is_none());
        assert!(env.api::<StatefulSet>().get_opt("my-db").await.unwrap().is_some());
        assert_eq!(env.api::<Secret>().get("my-db-credentials").await.unwrap().data, kept);
    })
    .await;
}

#[tokio::test]
async fn the_app_stack_example_converges_in_order() {
    e2e("stack-appstack", |env| async move {
        let _bosun = env.start_bosun(&[BOTH]).await;
        let (ok, out) = env.kubectl_apply(SHOP);
        assert!(ok, "{out}");
        let stack = env
            .wait_for_within::<AppStack>("shop", "Ready=True", Duration::from_secs(180), |s| {
                s.status.as_ref().is_some_and(|st| {
                    st.observed_generation == s.metadata.generation
                        && condition(&st.conditions, "Ready").is_some_and(|c| c.status == "True")
                })
            })
            .await;
        let status = stack.status.unwrap();
        assert_eq!(status.phase, Some(Phase::Running));
        assert!(status.components.iter().all(|c| c.ready));
        assert_eq!(status.endpoints.get("database").map(String::as_str), Some("shop-db:5432"));
        let db = env.api::<PostgreSQL>().get("shop-db").await.unwrap();
        let db_ready = became_true(&db.status.as_ref().unwrap().conditions, "Ready");
        let backend = env.api::<Deployment>().get("shop-backend").await.unwrap();
        let frontend = env.api::<Deployment>().get("shop-frontend").await.unwrap();
        let cache = env.api::<Deployment>().get("shop-cache").await.unwrap();
        assert!(created(&backend.metadata) >= db_ready && created(&cache.metadata) >= db_ready);
        assert!(created(&frontend.metadata) >= deployment_available_since(&backend));
        assert_eq!(frontend.labels().get("app.example.com/stack").map(String::as_str), Some("shop"));
        let port = env.api::<Service>().get("shop-frontend").await.unwrap().spec.unwrap().ports.unwrap()[0].port;
        assert_eq!(port, 80);

        // A change touches only its component: more frontends, nothing else written.
        let versions = || async {
            let mut v = vec![env.api::<PostgreSQL>().get("shop-db").await.unwrap().metadata.generation];
            for name in ["shop-cache", "shop-backend"] {
                v.push(env.api::<Deployment>().get(name).await.unwrap().metadata.generation);
            }
            v
        };
        let before = versions().await;
        let patch = json!({"spec": {"frontend": {"replicas": 3}}});
        env.api::<AppStack>().patch("shop", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        env.wait_for::<Deployment>("shop-frontend", "3 replicas", |d| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(3)
        })
        .await;
        env.wait_for::<AppStack>("shop", "Ready=True at generation 2", |s| {
            s.status.as_ref().is_some_and(|st| {
                st.observed_generation == Some(2)
                    && condition(&st.conditions, "Ready").is_some_and(|c| c.status == "True")
            })
        })
        .await;
        assert_eq!(versions().await, before, "a frontend change rewrote another component");
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field() {
    e2e("stack-bad-input", |env| async move {
        let good = platform("shop", "development", "postgresql");
        for (bad, field) in [
            (good.replace("environment: development", "environment: prod"), "spec.environment"),
            (good.replace("frontend: {image: web}", "frontend: {image: web, replicas: 0}"), "spec.frontend.replicas"),
            (good.replace("type: postgresql", "type: oracle"), "spec.database.type"),
            (good.replace("type: postgresql", "type: postgresql, version: \"9\""), "spec.database.version"),
            (good.replace("type: postgresql", "type: postgresql, storage: 10GB"), "spec.database.storage"),
        ] {
            let (ok, out) = env.kubectl_apply(&bad);
            assert!(!ok, "accepted: {bad}");
            assert!(out.contains(field), "the error does not name {field}: {out}");
        }
        let (ok, out) = env.kubectl_apply(&SHOP.replace("type: postgresql", "type: mysql"));
        assert!(!ok && out.contains("spec.database.version"), "mysql 15 accepted: {out}");
    })
    .await;
}

/// The "backend" of the real-node stack: psql in a loop, configured only by the
/// environment the stack gives it.
const PROBE: &str = "localhost/bosun-runner-base:trixie";

#[tokio::test]
async fn on_the_real_node_the_backend_reaches_the_database_with_what_the_stack_gives_it() {
    e2e("stack-real", |env| async move {
        env.use_real_node().await;
        let bosun = env
            .start_bosun(&[
                BOTH,
                "--postgres-image=localhost/postgres:15",
                "--postgres-volume-permissions",
                &format!("--redis-image={}", images::REDIS),
            ])
            .await;
        let yaml = SHOP
            .replace("ghcr.io/example/api:1.0", PROBE)
            .replace("ghcr.io/example/web:1.0", images::TOOLBOX)
            .replace("replicas: 2", "replicas: 1");
        let (ok, out) = env.kubectl_apply(&yaml);
        assert!(ok, "{out}");
        // The images' default command is a shell: the backend's loop is given as its
        // command by a patch of the Deployment, which bosun leaves alone (it owns the
        // fields it applies, not `command`).
        let deployments = env.api::<Deployment>();
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        while deployments.get_opt("shop-backend").await.unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "no backend\n{}", bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let script = "while :; do psql -X -tAc \"select 'connected to ' || current_database() || ' as ' || current_user\" \
                      && sleep 3600; sleep 1; done";
        let frontend = "while :; do sleep 3600; done";
        for (name, container, command) in
            [("shop-backend", "backend", script), ("shop-frontend", "frontend", frontend)]
        {
            while deployments.get_opt(name).await.unwrap().is_none() {
                assert!(std::time::Instant::now() < deadline, "no {name}\n{}", bosun.log_tail(30));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let patch = json!({"spec": {"template": {"spec": {"containers": [
                {"name": container, "command": ["sh", "-c", command]}
            ]}}}});
            // The frontend appears once the patched backend is Ready.
            deployments.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
        }
        env.wait_for_within::<AppStack>("shop", "Ready=True", Duration::from_secs(240), |s| {
            s.status.as_ref().is_some_and(|st| condition(&st.conditions, "Ready").is_some_and(|c| c.status == "True"))
        })
        .await;
        let pods = env.api::<Pod>().list(&ListParams::default().labels("app.kubernetes.io/component=backend")).await.unwrap();
        let pod = pods.items.iter().find(|p| p.spec.as_ref().is_some_and(|s| s.containers[0].command.is_some())).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let (_, logs) = env.kubectl(&["logs", &pod.name_any()]);
            if logs.contains("connected to postgres as postgres") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the backend never connected: {logs}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }

        // Issue 30: a frontend image that the node cannot get is named in the stack's
        // status (the old pod serves on); the right image again makes it Ready.
        let image = |image: &str| json!({"spec": {"frontend": {"image": image}}});
        let stacks = env.api::<AppStack>();
        stacks.patch("shop", &PatchParams::default(), &Patch::Merge(image("localhost/no-such-web:1"))).await.unwrap();
        let stuck = env
            .wait_for_within::<AppStack>("shop", "the image named", Duration::from_secs(90), |s| {
                s.status.as_ref().is_some_and(|st| {
                    condition(&st.conditions, "Ready")
                        .is_some_and(|c| c.status == "False" && c.message.contains("localhost/no-such-web:1"))
                })
            })
            .await;
        let message = &condition(&stuck.status.as_ref().unwrap().conditions, "Ready").unwrap().message;
        assert!(message.contains("container frontend cannot pull its image"), "{message}");
        stacks.patch("shop", &PatchParams::default(), &Patch::Merge(image(images::TOOLBOX))).await.unwrap();
        env.wait_for_within::<AppStack>("shop", "Ready=True again", Duration::from_secs(120), |s| {
            s.status.as_ref().is_some_and(|st| condition(&st.conditions, "Ready").is_some_and(|c| c.status == "True"))
        })
        .await;
    })
    .await;
}
