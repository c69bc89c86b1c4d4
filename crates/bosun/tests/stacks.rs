//! AppStack and EcommercePlatform end to end: the spec's examples on the fake nodes
//! (order of creation against the Ready transitions, the environments' defaults,
//! MySQL, monitoring that follows its CRD, the refusals), and on the real node a stack
//! whose backend is a real client of its real PostgreSQL.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::time::Duration;

use bosun_api::backup::Backup;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::stack::{AppStack, EcommercePlatform, Phase, StackStatus};
use bosun_testing::node::{NODES_LABEL, images};
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

/// A stack's Ready condition (AppStack and EcommercePlatform share their status).
fn ready_of(status: &Option<StackStatus>) -> Option<&Condition> {
    condition(&status.as_ref()?.conditions, "Ready")
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
        "metadata": {"name": name, "labels": {"bosun.dev/e2e": "true", NODES_LABEL: "fake"}, "ownerReferences": [owner]}
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
            // A shell as the container's first process ignores SIGTERM: the pod stops
            // only at its grace period's end, seconds after its Deployment was deleted.
            let patch = json!({"spec": {"template": {"spec": {
                "terminationGracePeriodSeconds": GRACE_SECONDS,
                "containers": [{"name": container, "command": ["sh", "-c", command]}]
            }}}});
            // The frontend appears once the patched backend is Ready.
            deployments.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
        }
        env.wait_for_within::<AppStack>("shop", "Ready=True", Duration::from_secs(240), |s| {
            ready_of(&s.status).is_some_and(|c| c.status == "True")
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
            ready_of(&s.status).is_some_and(|c| c.status == "True")
        })
        .await;

        // Issue 50: deleted, the stack waits for each component's pods, which take
        // seconds to stop here, before it deletes the next component.
        let timeline = Timeline::default();
        let recorders = vec![
            record::<Deployment>(&env, &env.ns, timeline.clone()),
            record::<Service>(&env, &env.ns, timeline.clone()),
            record::<PostgreSQL>(&env, &env.ns, timeline.clone()),
            record::<StatefulSet>(&env, &env.ns, timeline.clone()),
            record::<Pod>(&env, &env.ns, timeline.clone()),
        ];
        tokio::time::sleep(Duration::from_secs(2)).await; // the watches have listed
        let started = std::time::Instant::now();
        env.api::<AppStack>().delete("shop", &DeleteParams::default()).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        while env.api::<AppStack>().get_opt("shop").await.unwrap().is_some() {
            assert!(std::time::Instant::now() < deadline, "the stack is not deleted\n{}", bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("stack-real: deleted in {:.1} s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(1)).await; // the last watch events arrive
        for recorder in recorders {
            recorder.abort();
        }
        assert_deleted_in_order("shop", &timeline, started);
        // The pods really took their time: the order was kept with slow pods, not by luck.
        let slow = timeline
            .lock()
            .unwrap()
            .iter()
            .filter(|((kind, name), _)| kind == "Pod" && name.starts_with("shop-frontend"))
            .filter_map(|(_, seen)| Some(seen.gone?.1.duration_since(seen.deleting?.1)))
            .max()
            .expect("a frontend pod seen stopping");
        assert!(slow >= Duration::from_secs(GRACE_SECONDS - 1), "the frontend's pod stopped in {slow:?}");
        // The database deleted in the foreground is gone only after its instance's pod:
        // its children block their owner's deletion.
        let timeline = timeline.lock().unwrap();
        let gone = |kind: &str, name: &str| timeline[&(kind.to_owned(), name.to_owned())].gone.unwrap().0;
        assert!(gone("Pod", "shop-db-0") < gone("PostgreSQL", "shop-db"), "the database went before its pod");
    })
    .await;
}

/// The grace period of the real-node stack's pods: they ignore SIGTERM, so they stop
/// this long after their deletion.
const GRACE_SECONDS: u64 = 4;

// === Ordered deletion (issue 28 item 4) ===

/// What a watch saw of one object while a stack was being deleted: the etcd revision
/// (resourceVersion) of the first event with a `deletionTimestamp`, and of its deletion,
/// with when each arrived. Revisions are one order across every kind, so "gone before
/// the next step started" is checked without clocks.
#[derive(Clone, Debug, Default)]
struct Seen {
    deleting: Option<(u64, std::time::Instant)>,
    gone: Option<(u64, std::time::Instant)>,
}

type Timeline = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<(String, String), Seen>>>;

fn revision(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|rv| rv.parse().ok()).expect("a numeric resourceVersion")
}

/// Watch every `K` in `ns` into `timeline` until the task is aborted.
fn record<K>(env: &Env, ns: &str, timeline: Timeline) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api: Api<K> = Api::namespaced(env.client.clone(), ns);
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let now = std::time::Instant::now();
            let (obj, gone) = match event {
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => (obj, false),
                Ok(watcher::Event::Delete(obj)) => (obj, true),
                _ => continue,
            };
            let key = (K::kind(&()).into_owned(), obj.name_any());
            let mut timeline = timeline.lock().unwrap();
            let seen = timeline.entry(key).or_default();
            if gone {
                seen.gone.get_or_insert((revision(obj.meta()), now));
            } else if obj.meta().deletion_timestamp.is_some() {
                seen.deleting.get_or_insert((revision(obj.meta()), now));
            }
        }
    })
}

/// The step of a stack `stack`'s deletion an object of that name belongs to: `<stack>`
/// (the Ingress) and `<stack>-frontend…` the frontend, and so on; pods by their prefix.
fn step_of(stack: &str, name: &str) -> Option<usize> {
    if name == stack {
        return Some(0);
    }
    let rest = name.strip_prefix(stack)?.strip_prefix('-')?;
    ["frontend", "backend", "cache", "db"].iter().position(|c| rest.starts_with(c))
}

/// Prove the order of `stack`'s deletion from `timeline`: every object of each step
/// gone (pods included) before anything of the next step was deleted. Prints the
/// timeline, relative to `started`.
fn assert_deleted_in_order(stack: &str, timeline: &Timeline, started: std::time::Instant) {
    const STEPS: [&str; 4] = ["frontend", "backend", "cache", "database"];
    let timeline = timeline.lock().unwrap();
    let mut steps: [Vec<(&(String, String), &Seen)>; 4] = Default::default();
    for (key, seen) in timeline.iter() {
        if let Some(step) = step_of(stack, &key.1) {
            steps[step].push((key, seen));
        }
    }
    let at = |t: std::time::Instant| t.duration_since(started).as_secs_f64();
    for (step, objects) in steps.iter().enumerate() {
        for ((kind, name), seen) in objects {
            let (gone, gone_at) =
                seen.gone.unwrap_or_else(|| panic!("{kind} {name} of the {} was not deleted", STEPS[step]));
            let deleting = seen.deleting.map_or("-".to_owned(), |(rv, t)| format!("rv {rv} at +{:.2}s", at(t)));
            eprintln!(
                "{stack}: {:<8} {kind} {name}: deleting {deleting}, gone rv {gone} at +{:.2}s",
                STEPS[step],
                at(gone_at)
            );
        }
    }
    let present: Vec<usize> = (0..4).filter(|s| !steps[*s].is_empty()).collect();
    assert!(present.contains(&0) && present.contains(&3), "{stack}: no frontend or database seen: {timeline:?}");
    for pair in present.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        let (last_gone, last) = steps[before].iter().map(|(k, s)| (s.gone.unwrap().0, k)).max().unwrap();
        let (first_deleting, first) = steps[after]
            .iter()
            .filter(|((kind, _), _)| kind != "Pod") // pods go with their workload
            // An object with no finalizer (what the garbage collector deletes in the
            // background) goes in one write: its deletion is the revision it went at.
            .map(|(k, s)| {
                let deleted = s.deleting.or(s.gone);
                (deleted.unwrap_or_else(|| panic!("{k:?}: neither deleting nor gone")).0, k)
            })
            .min()
            .unwrap();
        assert!(
            last_gone < first_deleting,
            "{stack}: the {} started (rv {first_deleting}, {first:?}) before the {} was gone (rv {last_gone}, {last:?})",
            STEPS[after],
            STEPS[before]
        );
    }
}

/// The finalizers of a stack, as the API has them.
fn finalizers_of<K: Resource>(obj: &K) -> Vec<String> {
    obj.meta().finalizers.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_deleted_stack_goes_frontend_backend_cache_database_and_keeps_its_data() {
    e2e("stack-delete-order", |env| async move {
        // A platform that exists before bosun runs (as one made under an earlier bosun
        // without the finalizer) gets it on its first reconcile.
        let (ok, out) = env.kubectl_apply(&platform("my", "development", "mysql"));
        assert!(ok, "{out}");
        let bosun = env.start_bosun(&[BOTH]).await;
        let (ok, out) = env.kubectl_apply(SHOP);
        assert!(ok, "{out}");
        let stack = env
            .wait_for_within::<AppStack>("shop", "Ready=True", Duration::from_secs(180), |s| {
                ready_of(&s.status).is_some_and(|c| c.status == "True")
            })
            .await;
        assert_eq!(finalizers_of(&stack), ["app.example.com/ordered-deletion"]);
        let my = env
            .wait_for_within::<EcommercePlatform>(
                "my",
                "Ready=True",
                Duration::from_secs(180),
                platform_is("Ready", "True", "AllComponentsReady"),
            )
            .await;
        assert_eq!(finalizers_of(&my), ["platform.example.com/ordered-deletion"]);
        // The finalizer is one write, once: converged, the stacks stay as they are.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let unchanged = env.api::<AppStack>().get("shop").await.unwrap();
        assert_eq!(unchanged.resource_version(), stack.resource_version(), "a converged AppStack was written again");
        let unchanged = env.api::<EcommercePlatform>().get("my").await.unwrap();
        assert_eq!(unchanged.resource_version(), my.resource_version(), "a converged platform was written again");

        let claims = env.api::<PersistentVolumeClaim>();
        for claim in ["data-shop-db-0", "data-my-db-0"] {
            claims.get(claim).await.unwrap_or_else(|e| panic!("no claim {claim}: {e}"));
        }
        let timeline = Timeline::default();
        let recorders = vec![
            record::<Deployment>(&env, &env.ns, timeline.clone()),
            record::<Service>(&env, &env.ns, timeline.clone()),
            record::<Ingress>(&env, &env.ns, timeline.clone()),
            record::<PostgreSQL>(&env, &env.ns, timeline.clone()),
            record::<StatefulSet>(&env, &env.ns, timeline.clone()),
            record::<Pod>(&env, &env.ns, timeline.clone()),
        ];
        // Every status the AppStack goes through (a deletion on the fake nodes takes
        // about a second: too short to poll for).
        let statuses = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = statuses.clone();
        let stacks = env.api::<AppStack>();
        let status_watch = tokio::spawn(async move {
            use futures::StreamExt;
            let mut events = kube::runtime::watcher(stacks, kube::runtime::watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(s)) = event {
                    seen.lock().unwrap().extend(s.status);
                }
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await; // the watches have listed

        let started = std::time::Instant::now();
        env.api::<AppStack>().delete("shop", &DeleteParams::default()).await.unwrap();
        env.api::<EcommercePlatform>().delete("my", &DeleteParams::default()).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let shop = env.api::<AppStack>().get_opt("shop").await.unwrap();
            let my = env.api::<EcommercePlatform>().get_opt("my").await.unwrap();
            if shop.is_none() && my.is_none() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not deleted: {:?} {:?}\n{}",
                shop.and_then(|s| s.status),
                my.and_then(|p| p.status),
                bosun.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("both stacks deleted in {:.1} s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(1)).await; // the last watch events arrive
        for recorder in recorders {
            recorder.abort();
        }
        status_watch.abort();
        assert_deleted_in_order("shop", &timeline, started);
        assert_deleted_in_order("my", &timeline, started);
        // The status said so meanwhile, component by component.
        let deleting: Vec<String> = statuses
            .lock()
            .unwrap()
            .iter()
            .filter(|st| st.phase == Some(Phase::Deleting))
            .filter_map(|st| condition(&st.conditions, "Ready").filter(|c| c.reason == "Deleting"))
            .map(|c| c.message.clone())
            .collect();
        for component in ["frontend", "backend", "cache", "database"] {
            assert!(
                deleting.iter().any(|m| m.contains(&format!("the {component} since "))),
                "no status said the {component} was being deleted: {deleting:#?}"
            );
        }

        // The data stays: PostgreSQL's deletionPolicy is Retain (the stack sets none), and
        // a MySQL StatefulSet's claims are never deleted; so do the credentials.
        for claim in ["data-shop-db-0", "data-my-db-0"] {
            let kept = claims.get(claim).await.unwrap_or_else(|e| panic!("claim {claim} was deleted: {e}"));
            assert!(kept.metadata.deletion_timestamp.is_none(), "claim {claim} is being deleted");
        }
        for secret in ["shop-db-credentials", "my-db-credentials"] {
            env.api::<Secret>().get(secret).await.unwrap_or_else(|e| panic!("Secret {secret} was deleted: {e}"));
        }
    })
    .await;
}

/// Removes every finalizer of Deployment `.1` when dropped, also when the test fails.
struct Lift<'a>(&'a Env, &'static str);

impl Drop for Lift<'_> {
    fn drop(&mut self) {
        let (ok, out) = self.0.kubectl(&[
            "patch",
            "deployment",
            self.1,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
        if !ok && !out.contains("NotFound") {
            eprintln!("could not lift the hold on {}: {out}", self.1);
        }
    }
}

#[tokio::test]
async fn a_stuck_step_shows_in_the_status_and_is_given_up_after_the_bound() {
    e2e("stack-delete-stuck", |env| async move {
        // Stuck after 10 s (half the bound), given up after 20 s.
        let bosun = env.start_bosun(&[BOTH, "--stack-deletion-timeout=20s"]).await;
        let (ok, out) = env.kubectl_apply(&platform("held", "development", "postgresql"));
        assert!(ok, "{out}");
        env.wait_for_within::<EcommercePlatform>(
            "held",
            "Ready=True",
            Duration::from_secs(180),
            platform_is("Ready", "True", "AllComponentsReady"),
        )
        .await;
        // A finalizer of someone else's that never goes holds the frontend (lifted at the
        // end, or when the test fails: a held Deployment would hold its namespace too).
        const HOLD: &str = "e2e.bosun.dev/hold";
        let deployments = env.api::<Deployment>();
        let patch = json!({"metadata": {"finalizers": [HOLD]}});
        deployments.patch("held-frontend", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        let lift = Lift(&env, "held-frontend");

        let started = std::time::Instant::now();
        env.api::<EcommercePlatform>().delete("held", &DeleteParams::default()).await.unwrap();
        let stuck = env
            .wait_for_within::<EcommercePlatform>("held", "Ready=False DeletionStuck", Duration::from_secs(30), |p| {
                ready_of(&p.status).is_some_and(|c| c.reason == "DeletionStuck")
            })
            .await;
        let stuck_after = started.elapsed();
        let status = stuck.status.unwrap();
        assert_eq!(status.phase, Some(Phase::Deleting));
        let ready = condition(&status.conditions, "Ready").unwrap();
        assert!(
            ready.message.starts_with("the frontend is stuck: being deleted since ")
                && ready.message.contains(&format!("Deployment held-frontend (held by finalizer {HOLD})")),
            "{}",
            ready.message
        );
        let frontend = status.components.iter().find(|c| c.name == "frontend").unwrap();
        assert!(!frontend.ready && frontend.message.as_deref().unwrap().contains(HOLD), "{frontend:?}");
        let backend = status.components.iter().find(|c| c.name == "backend").unwrap();
        assert_eq!(backend.message.as_deref(), Some("waits for frontend to be deleted"));
        env.wait_warning("held", "DeletionStuck", HOLD).await;
        // Nothing after the frontend was touched while it is held.
        let backend = deployments.get("held-backend").await.unwrap();
        assert!(backend.metadata.deletion_timestamp.is_none(), "the backend was deleted before the frontend was gone");
        assert!(env.api::<PostgreSQL>().get("held-db").await.unwrap().metadata.deletion_timestamp.is_none());

        // The bound: bosun removes its finalizer, and the garbage collector takes the rest.
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        while env.api::<EcommercePlatform>().get_opt("held").await.unwrap().is_some() {
            assert!(std::time::Instant::now() < deadline, "the platform was never released\n{}", bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let released_after = started.elapsed();
        eprintln!(
            "held: DeletionStuck after {:.1} s, released after {:.1} s",
            stuck_after.as_secs_f64(),
            released_after.as_secs_f64()
        );
        assert!(released_after >= Duration::from_secs(19), "released before the bound: {released_after:?}");
        env.wait_warning("held", "DeletionTimedOut", "gave up waiting for the frontend").await;
        env.wait_gone::<Deployment>("held-backend").await;
        env.wait_gone::<PostgreSQL>("held-db").await;
        // The hold is someone else's: the frontend goes once it is lifted.
        drop(lift);
        env.wait_gone::<Deployment>("held-frontend").await;
    })
    .await;
}

#[tokio::test]
async fn deleting_the_namespace_of_a_stack_completes() {
    e2e("stack-delete-namespace", |env| async move {
        // A namespace of its own: bosun's ServiceAccount lives in the test's namespace,
        // which must outlive the one deleted here.
        let doomed = env.extra_namespace("doomed").await;
        // Debug lines: a reconcile a terminating namespace refuses is one (CI once saw
        // this stack keep its finalizer with no line in the log to tell why).
        let bosun = env
            .start_bosun_logging(&[BOTH, &format!("--namespaces={doomed}")], "info,bosun_controller=debug,kube=warn")
            .await;
        let file = std::env::temp_dir().join(format!("{doomed}-shop.yaml"));
        std::fs::write(&file, SHOP).unwrap();
        let (ok, out) = env.kubectl(&["apply", &format!("--namespace={doomed}"), "-f", file.to_str().unwrap()]);
        assert!(ok, "{out}");
        let stacks: Api<AppStack> = Api::namespaced(env.client.clone(), &doomed);
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            let s = stacks.get("shop").await.unwrap();
            let ready = s
                .status
                .as_ref()
                .is_some_and(|st| condition(&st.conditions, "Ready").is_some_and(|c| c.status == "True"));
            if ready && finalizers_of(&s) == ["app.example.com/ordered-deletion"] {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "not Ready: {:?}\n{}", s.status, bosun.log_tail(30));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let namespaces: Api<Namespace> = Api::all(env.client.clone());
        let started = std::time::Instant::now();
        namespaces.delete(&doomed, &DeleteParams::default()).await.unwrap();
        // bosun's part: once Kubernetes marks the stack deleted (the namespace
        // controller's first pass, which may itself wait its turn on a busy cluster),
        // bosun lets it go at once.
        let mut marked = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        while let Some(s) = stacks.get_opt("shop").await.unwrap() {
            if s.metadata.deletion_timestamp.is_some() {
                let since = *marked.get_or_insert_with(std::time::Instant::now);
                assert!(
                    since.elapsed() < Duration::from_secs(60),
                    "the stack, deleted with its namespace, still holds {:?} after {:.0} s: {:?}\n{}",
                    s.metadata.finalizers,
                    since.elapsed().as_secs_f64(),
                    s.metadata,
                    bosun.log_tail(60)
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Kubernetes has not deleted the stack of namespace {doomed}: {:?}",
                namespaces.get_opt(&doomed).await.unwrap().and_then(|n| n.status)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let released =
            marked.map_or("within one look (250 ms)".to_owned(), |m| format!("{:.1} s", m.elapsed().as_secs_f64()));
        // Kubernetes' part: the namespace controller removes the rest in its own time.
        while namespaces.get_opt(&doomed).await.unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "namespace {doomed} is still there: {:?}\n{}",
                namespaces.get_opt(&doomed).await.unwrap().and_then(|n| n.status),
                bosun.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("the stack was released {released} after Kubernetes marked it deleted");
        eprintln!("namespace {doomed} with a stack deleted in {:.1} s", started.elapsed().as_secs_f64());
        let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
        assert!(
            log.contains("the namespace is being deleted"),
            "bosun did not release the stack for the namespace's deletion:\n{}",
            bosun.log_tail(60)
        );
    })
    .await;
}
