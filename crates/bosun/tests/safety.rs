//! Safety first: bosun never takes over, changes or deletes what is not its own, and
//! never reconciles a parent that is being deleted into its children.
//!
//! Each test reproduces a fault a careless user hit: a name already in use by a
//! hand-made object, `kubectl delete --cascade=orphan`, two WebApps of the two groups
//! with one name.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use std::fmt::Debug;
use std::time::Duration;

use bosun_api::conditions::Condition;
use bosun_api::demovolume::DemoVolume;
use bosun_api::voteconfig::VoteConfig;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use bosun_testing::{Env, e2e};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
use kube::api::DeleteParams;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

fn webapp<K: WebAppKind>(name: &str, spec: serde_json::Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": K::api_version(&()), "kind": "WebApp", "metadata": {"name": name}, "spec": spec,
    }))
    .expect("webapp")
}

fn ready<'a>(conditions: impl IntoIterator<Item = &'a Condition>) -> Option<&'a Condition> {
    conditions.into_iter().find(|c| c.type_ == "Ready")
}

/// Ready=False with reason NameConflict and a message that names `object`, and the
/// kstatus condition a GitOps tool fails on at once: Stalled (not Reconciling).
fn refused_naming<'a>(conditions: impl IntoIterator<Item = &'a Condition> + Clone, object: &str) -> bool {
    let of = |type_: &str| conditions.clone().into_iter().find(|c| c.type_ == type_);
    ready(conditions.clone())
        .is_some_and(|c| c.status == "False" && c.reason == "NameConflict" && c.message.contains(object))
        && of("Stalled").is_some_and(|c| c.status == "True" && c.reason == "NameConflict")
        && of("Reconciling").is_none()
}

fn webapp_ready<K: WebAppKind>(w: &K) -> bool {
    w.current_status().is_some_and(|s| {
        s.observed_generation == w.meta().generation && ready(&s.conditions).is_some_and(|c| c.status == "True")
    })
}

/// The object exactly as stored: every field, resourceVersion and managedFields included.
async fn stored<K>(env: &Env, name: &str) -> serde_json::Value
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize,
{
    let obj = env.api::<K>().get(name).await.unwrap_or_else(|e| panic!("reading {} {name}: {e}", K::kind(&())));
    serde_json::to_value(obj).expect("json")
}

fn kubectl_ok(env: &Env, args: &[&str]) {
    let (ok, out) = env.kubectl(args);
    assert!(ok, "kubectl {args:?} failed: {out}");
}

/// A user's own Deployment, Service, claim and ConfigMap, made before bosun's resources
/// of the same names: each resource is refused with NameConflict naming the object,
/// and every one of those objects is byte-for-byte unchanged — while the resources
/// exist and after they are deleted. Once the name is free, the resource converges.
#[tokio::test]
async fn objects_bosun_does_not_control_are_never_taken_changed_or_deleted() {
    e2e("not-ours", |env| async move {
        let _bosun = env.start_bosun(&[]).await;

        kubectl_ok(&env, &["create", "deployment", "web", "--image=httpd"]);
        kubectl_ok(&env, &["create", "service", "clusterip", "web", "--tcp=8080:8080"]);
        // Copied from `bosun render` and applied by hand: labelled as bosun's, not bosun's.
        let copied: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "copied", "labels": {
                "app.kubernetes.io/managed-by": "bosun", "app.kubernetes.io/instance": "copied",
                "app.kubernetes.io/name": "webapp", "app": "copied"}},
            "spec": {"selector": {"app": "copied"}, "ports": [{"port": 9090}]}
        }))
        .unwrap();
        env.apply(&copied).await;
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .unwrap();
        env.apply(&claim).await;
        kubectl_ok(&env, &["create", "configmap", "pets-config", "--from-literal=OPTION_A=mine"]);
        // Let the claim bind and the Deployment roll out: their own controllers' writes
        // are not what this test is about.
        env.wait_for::<PersistentVolumeClaim>("data", "the user's claim bound", |c| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        })
        .await;
        env.wait_for::<Deployment>("web", "the user's Deployment available", |d| {
            d.status.as_ref().and_then(|s| s.available_replicas) == Some(1)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let snapshot = || async {
            vec![
                stored::<Deployment>(&env, "web").await,
                stored::<Service>(&env, "web").await,
                stored::<Service>(&env, "copied").await,
                stored::<PersistentVolumeClaim>(&env, "data").await,
            ]
        };
        let before = snapshot().await;

        env.apply(&webapp::<apps_v1::WebApp>("web", json!({"image": "nginx", "replicas": 1}))).await;
        env.apply(&webapp::<apps_v1::WebApp>("copied", json!({"image": "nginx", "port": 9090}))).await;
        let volume: DemoVolume = serde_json::from_value(json!({
            "apiVersion": "demo.example.com/v1", "kind": "DemoVolume", "metadata": {"name": "data"},
            "spec": {"name": "data", "size": 5}
        }))
        .unwrap();
        env.apply(&volume).await;
        let vote: VoteConfig = serde_json::from_value(json!({
            "apiVersion": "voting.schoolofdevops.com/v1", "kind": "VoteConfig", "metadata": {"name": "pets"},
            "spec": {"options": [{"id": "a", "label": "Cats"}, {"id": "b", "label": "Dogs"}]}
        }))
        .unwrap();
        env.apply(&vote).await;

        let w = env
            .wait_for::<apps_v1::WebApp>("web", "Ready=False NameConflict naming Deployment web", |w| {
                w.status.as_ref().is_some_and(|s| refused_naming(&s.conditions, "Deployment web"))
            })
            .await;
        let message = &ready(&w.status.as_ref().unwrap().conditions).unwrap().message;
        assert!(message.contains("kubectl-create"), "the message does not say who holds the name: {message}");
        assert_eq!(w.status.unwrap().available_replicas, 0, "the user's pods were reported as the WebApp's");
        env.wait_for::<apps_v1::WebApp>("copied", "Ready=False NameConflict naming Service copied", |w| {
            w.status.as_ref().is_some_and(|s| refused_naming(&s.conditions, "Service copied"))
        })
        .await;
        env.wait_for::<DemoVolume>("data", "Ready=False NameConflict naming the claim", |v| {
            v.status.as_ref().is_some_and(|s| refused_naming(&s.conditions, "PersistentVolumeClaim data"))
        })
        .await;
        env.wait_for::<VoteConfig>("pets", "Ready=False NameConflict naming the ConfigMap", |v| {
            v.status.as_ref().is_some_and(|s| refused_naming(&s.conditions, "ConfigMap pets-config"))
        })
        .await;
        let (_, events) = env.kubectl(&["get", "events", "--field-selector=reason=NameConflict", "-o", "name"]);
        assert!(events.lines().count() >= 4, "expected a NameConflict event per resource, got:\n{events}");

        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(snapshot().await, before, "an object bosun does not control was changed");
        let cm = env.api::<ConfigMap>().get("pets-config").await.expect("configmap");
        assert_eq!(cm.data.unwrap_or_default().get("OPTION_A").map(String::as_str), Some("mine"));

        // The name frees up: the VoteConfig converges on its own (it looks again).
        env.api::<ConfigMap>().delete("pets-config", &DeleteParams::default()).await.expect("delete configmap");
        env.wait_for_within::<VoteConfig>("pets", "Ready=True once the name is free", Duration::from_secs(90), |v| {
            v.status.as_ref().is_some_and(|s| ready(&s.conditions).is_some_and(|c| c.status == "True"))
        })
        .await;

        // Deleting the resources deletes nothing of the user's.
        for name in ["web", "copied"] {
            env.api::<apps_v1::WebApp>().delete(name, &DeleteParams::default()).await.expect("delete webapp");
            env.wait_gone::<apps_v1::WebApp>(name).await;
        }
        env.api::<DemoVolume>().delete("data", &DeleteParams::default()).await.expect("delete demovolume");
        env.wait_gone::<DemoVolume>("data").await;
        // bosun's own Deployment of `copied` is collected; give the collector that long.
        env.wait_gone::<Deployment>("copied").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(snapshot().await, before, "deleting bosun's resources changed or deleted the user's objects");
    })
    .await;
}

/// `kubectl delete --cascade=orphan` keeps the children, every time (it is a race, so
/// several rounds); re-creating the WebApp adopts them, the same objects.
#[tokio::test]
async fn cascade_orphan_keeps_the_children_and_a_new_parent_adopts_them() {
    e2e("orphan", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        let mut first: Option<(String, String)> = None;
        for round in 1..=4 {
            env.apply(&webapp::<apps_v1::WebApp>("keep", json!({"image": "nginx", "replicas": 2}))).await;
            let w: apps_v1::WebApp = env.wait_for("keep", "Ready=True", webapp_ready::<apps_v1::WebApp>).await;
            let d: Deployment = env
                .wait_for("keep", "controlled by the current WebApp", |d: &Deployment| {
                    d.owner_references().iter().any(|r| r.controller == Some(true) && Some(&r.uid) == w.uid().as_ref())
                })
                .await;
            let s: Service = env.api().get("keep").await.expect("service");
            let uids = (d.uid().unwrap(), s.uid().unwrap());
            match &first {
                None => first = Some(uids.clone()),
                Some(first) => assert_eq!(&uids, first, "round {round}: the children were re-created, not adopted"),
            }

            kubectl_ok(&env, &["delete", "webapp.apps.example.com", "keep", "--cascade=orphan", "--wait=true"]);
            env.wait_gone::<apps_v1::WebApp>("keep").await;
            // Long enough for a reconcile of the terminating WebApp and for the collector.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let d: Deployment = env.api().get("keep").await.unwrap_or_else(|e| panic!("round {round}: {e}"));
            let s: Service = env.api().get("keep").await.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!((d.uid().unwrap(), s.uid().unwrap()), uids, "round {round}: a child was replaced");
            assert!(d.owner_references().is_empty(), "round {round}: the Deployment still has an owner");
            assert!(s.owner_references().is_empty(), "round {round}: the Service still has an owner");
        }
        // A plain delete of the (re-created) WebApp collects them.
        env.apply(&webapp::<apps_v1::WebApp>("keep", json!({"image": "nginx", "replicas": 2}))).await;
        env.wait_for::<apps_v1::WebApp>("keep", "Ready=True", webapp_ready::<apps_v1::WebApp>).await;
        env.wait_for::<Service>("keep", "adopted", |s| !s.owner_references().is_empty()).await;
        env.api::<apps_v1::WebApp>().delete("keep", &DeleteParams::default()).await.expect("delete");
        env.wait_gone::<Deployment>("keep").await;
        env.wait_gone::<Service>("keep").await;
    })
    .await;
}

/// Two WebApps of the two groups with one name: the second is refused, the first keeps
/// its children exactly as they were, and stays Running.
#[tokio::test]
async fn a_twin_in_the_other_group_is_refused_and_the_first_keeps_its_children() {
    e2e("twins", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        env.apply(&webapp::<apps_v1::WebApp>("twin", json!({"image": "nginx:1.25", "replicas": 2}))).await;
        let first: apps_v1::WebApp = env.wait_for("twin", "Ready=True", webapp_ready::<apps_v1::WebApp>).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = (stored::<Deployment>(&env, "twin").await, stored::<Service>(&env, "twin").await);

        env.apply(&webapp::<example_v1::WebApp>("twin", json!({"image": "httpd", "replicas": 3}))).await;
        let second: example_v1::WebApp = env
            .wait_for("twin", "Ready=False NameConflict naming the first WebApp", |w: &example_v1::WebApp| {
                w.status.as_ref().is_some_and(|s| refused_naming(&s.conditions, "controlled by WebApp twin"))
            })
            .await;
        assert_eq!(second.status.unwrap().phase, Some(bosun_api::webapp::Phase::Failed));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            (stored::<Deployment>(&env, "twin").await, stored::<Service>(&env, "twin").await),
            before,
            "the twin changed the first WebApp's children"
        );
        let again: apps_v1::WebApp = env.api().get("twin").await.expect("first twin");
        assert!(webapp_ready(&again), "the first WebApp is no longer Ready");
        assert_eq!(again.resource_version(), first.resource_version(), "the first WebApp's status was rewritten");

        // Deleting the twin leaves the first one's children alone.
        env.api::<example_v1::WebApp>().delete("twin", &DeleteParams::default()).await.expect("delete twin");
        env.wait_gone::<example_v1::WebApp>("twin").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            (stored::<Deployment>(&env, "twin").await, stored::<Service>(&env, "twin").await),
            before,
            "deleting the twin changed the first WebApp's children"
        );
    })
    .await;
}
