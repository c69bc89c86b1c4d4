//! VoteConfig end to end, on the local control plane.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_api::voteconfig::VoteConfig;
use bosun_testing::{Env, e2e, free_port};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

fn vote(name: &str, spec: serde_json::Value) -> VoteConfig {
    serde_json::from_value(json!({
        "apiVersion": "voting.schoolofdevops.com/v1",
        "kind": "VoteConfig",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("voteconfig")
}

/// The example of the spec, in `v1`.
fn pets(dogs: &str) -> VoteConfig {
    vote(
        "pets",
        json!({"question": "Cats or dogs?", "options": [{"id": "a", "label": "Cats"}, {"id": "b", "label": dogs}]}),
    )
}

fn is_ready(v: &VoteConfig) -> bool {
    v.status.as_ref().is_some_and(|s| {
        s.observed_generation == v.metadata.generation
            && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

fn has_option(key: &'static str, label: &'static str) -> impl Fn(&ConfigMap) -> bool {
    move |cm| data(cm).get(key).map(String::as_str) == Some(label)
}

/// Apply the example and wait until it is published.
async fn publish_pets(env: &Env) -> (VoteConfig, ConfigMap) {
    env.apply(&pets("Dogs")).await;
    let v = env.wait_for::<VoteConfig>("pets", "Ready=True", is_ready).await;
    let cm = env.api::<ConfigMap>().get("pets-config").await.expect("ConfigMap pets-config");
    (v, cm)
}

#[tokio::test]
async fn example_is_published_and_follows_changes() {
    e2e("vote-example", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=voteconfig"]).await;
        let (v, cm) = publish_pets(&env).await;

        let status = v.status.clone().expect("status");
        assert_eq!(status.config_map_name.as_deref(), Some("pets-config"));
        let first_update = status.last_updated.clone().expect("lastUpdated");
        let expected = BTreeMap::from([
            ("OPTION_A".to_owned(), "Cats".to_owned()),
            ("OPTION_B".to_owned(), "Dogs".to_owned()),
            ("TITLE".to_owned(), "Cats or dogs?".to_owned()),
            ("options.json".to_owned(), r#"[{"id":"a","label":"Cats"},{"id":"b","label":"Dogs"}]"#.to_owned()),
        ]);
        assert_eq!(data(&cm), expected);
        let owner = &cm.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("VoteConfig", "pets", Some(true)));
        let labels = cm.labels();
        assert_eq!(labels["app.kubernetes.io/name"], "voteconfig");
        assert_eq!(labels["app.kubernetes.io/instance"], "pets");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "bosun");
        let (ok, out) = env.kubectl(&["wait", "--for=condition=Ready", "voteconfig/pets", "--timeout=10s"]);
        assert!(ok, "kubectl wait failed: {out}");
        let (ok, out) = env.kubectl(&["get", "voteconfigs"]);
        assert!(ok && out.contains("pets-config") && out.contains("Cats or dogs?"), "kubectl get voteconfigs:\n{out}");

        // lastUpdated has a resolution of one second; make a change visible in it.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        env.apply(&pets("Hamsters")).await;
        let cm =
            env.wait_for::<ConfigMap>("pets-config", "OPTION_B=Hamsters", has_option("OPTION_B", "Hamsters")).await;
        assert_eq!(data(&cm)["options.json"], r#"[{"id":"a","label":"Cats"},{"id":"b","label":"Hamsters"}]"#);
        let v = env.wait_for::<VoteConfig>("pets", "Ready=True for generation 2", is_ready).await;
        let second_update = v.status.as_ref().and_then(|s| s.last_updated.clone()).expect("lastUpdated");
        assert!(second_update.0 > first_update.0, "lastUpdated did not move: {first_update:?} → {second_update:?}");

        // Applying the same spec again changes nothing: no write to the ConfigMap or the status.
        env.apply(&pets("Hamsters")).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cm_after = env.api::<ConfigMap>().get("pets-config").await.expect("ConfigMap");
        let v_after = env.api::<VoteConfig>().get("pets").await.expect("VoteConfig");
        assert_eq!(cm_after.resource_version(), cm.resource_version(), "the ConfigMap was written");
        assert_eq!(v_after.resource_version(), v.resource_version(), "the VoteConfig was written");
        assert_eq!(v_after.status.and_then(|s| s.last_updated), Some(second_update));
    })
    .await;
}

#[tokio::test]
async fn drift_is_corrected_and_deletion_collects_the_config_map() {
    e2e("vote-drift", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=voteconfig"]).await;
        let (_, cm) = publish_pets(&env).await;
        let config_maps = env.api::<ConfigMap>();

        // Someone else edits a value: bosun puts it back.
        let edit = json!({"data": {"OPTION_A": "Mice"}});
        let edited = config_maps
            .patch(
                "pets-config",
                &PatchParams { field_manager: Some("someone".into()), ..Default::default() },
                &Patch::Merge(&edit),
            )
            .await
            .expect("edit the ConfigMap");
        assert_eq!(data(&edited)["OPTION_A"], "Mice");
        let edited_version = edited.resource_version();
        env.wait_for::<ConfigMap>("pets-config", "OPTION_A put back to Cats", |c| {
            c.resource_version() != edited_version && has_option("OPTION_A", "Cats")(c)
        })
        .await;

        // Someone deletes it: it comes back with the same data.
        config_maps.delete("pets-config", &DeleteParams::default()).await.expect("delete the ConfigMap");
        let old_uid = cm.uid();
        let back =
            env.wait_for::<ConfigMap>("pets-config", "the ConfigMap to be recreated", |c| c.uid() != old_uid).await;
        assert_eq!(data(&back), data(&cm));

        // Deleting the VoteConfig garbage-collects the ConfigMap.
        env.api::<VoteConfig>().delete("pets", &DeleteParams::default()).await.expect("delete the VoteConfig");
        env.wait_gone::<ConfigMap>("pets-config").await;
    })
    .await;
}

#[tokio::test]
async fn a_deployment_reads_the_options_with_env_from() {
    e2e("vote-envfrom", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=voteconfig"]).await;
        publish_pets(&env).await;

        let labels = json!({"app": "vote"});
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "vote"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{
                        "name": "vote",
                        "image": "schoolofdevops/vote:v1",
                        "envFrom": [{"configMapRef": {"name": "pets-config"}}],
                    }]},
                },
            },
        }))
        .expect("deployment");
        let applied = env.apply(&deployment).await;
        let template = applied.spec.expect("spec").template.spec.expect("pod spec");
        let source = template.containers[0].env_from.as_ref().expect("envFrom")[0].config_map_ref.clone();
        assert_eq!(source.map(|r| r.name), Some("pets-config".to_owned()));

        env.wait_for::<Deployment>("vote", "1 available replica", |d| {
            d.status.as_ref().and_then(|s| s.available_replicas) == Some(1)
        })
        .await;
        let pods = env.api::<Pod>().list(&ListParams::default().labels("app=vote")).await.expect("pods");
        let phases: Vec<_> = pods.items.iter().map(|p| p.status.as_ref().and_then(|s| s.phase.clone())).collect();
        assert_eq!(phases, [Some("Running".to_owned())]);
    })
    .await;
}

/// Create a VoteConfig with `options` as given; returns the apiserver's refusal.
async fn refusal(env: &Env, name: &str, options: serde_json::Value) -> String {
    let object = json!({"metadata": {"name": name}, "spec": {"options": options}});
    match env.create_raw::<VoteConfig>(object).await {
        Ok(_) => panic!("VoteConfig {name} with options {options} was accepted"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test]
async fn the_schema_refuses_bad_options_naming_the_field() {
    e2e("vote-schema", |env| async move {
        let option = |id: &str, label: &str| json!({"id": id, "label": label});

        let err = refusal(&env, "one", json!([option("a", "Cats")])).await;
        assert!(err.contains("spec.options") && err.contains("at least 2 items"), "{err}");

        let many: Vec<_> = (0..27).map(|i| option(&format!("o{i}"), "x")).collect();
        let err = refusal(&env, "many", json!(many)).await;
        assert!(err.contains("spec.options") && err.contains("at most 26 items"), "{err}");

        let err = refusal(&env, "dup", json!([option("a", "Cats"), option("a", "Dogs")])).await;
        assert!(err.contains("option ids in spec.options must be unique"), "{err}");

        let err = refusal(&env, "upper", json!([option("A", "Cats"), option("b", "Dogs")])).await;
        assert!(err.contains("spec.options[0].id"), "{err}");

        let err = refusal(&env, "empty", json!([option("a", "Cats"), option("b", "")])).await;
        assert!(err.contains("spec.options[1].label"), "{err}");

        // The limits themselves are fine.
        let most: Vec<_> = (0..26).map(|i| option(&format!("o{i}"), "x")).collect();
        let object = json!({"metadata": {"name": "most"}, "spec": {"options": most}});
        env.create_raw::<VoteConfig>(object).await.expect("26 options are accepted");

        // The name is the ConfigMap's `app.kubernetes.io/instance` label: 63 at most.
        let long_name = "a".repeat(64);
        let object =
            json!({"metadata": {"name": long_name}, "spec": {"options": [option("a", "x"), option("b", "y")]}});
        let err = env.create_raw::<VoteConfig>(object).await.expect_err("a name too long for a label").to_string();
        assert!(err.contains("metadata.name"), "{err}");
    })
    .await;
}

/// The spec's manifest, exactly as the voting-app tutorial writes it.
const SPEC_EXAMPLE: &str = "apiVersion: voting.schoolofdevops.com/v1alpha1
kind: VoteConfig
metadata: {name: pets}
spec:
  title: Cats or dogs?
  options: [{id: a, label: Cats}, {id: b, label: Dogs}]
";

#[tokio::test]
async fn both_versions_are_served_and_convert_losslessly_through_bosuns_webhook() {
    e2e("vote-versions", |env| async move {
        use bosun_api::voteconfig::{DESCRIPTIONS_ANNOTATION, v1alpha1};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

        // The conversion webhook is served by bosun at a URL (no Service reaches this
        // host), with the certificate it makes; its admission webhooks select only this
        // test's namespace.
        let port = free_port();
        let mut bosun = env
            .start_bosun(&[
                "--controllers=voteconfig",
                &format!("--namespaces={}", env.ns),
                &format!("--webhook-port={port}"),
                &format!("--webhook-url=https://127.0.0.1:{port}"),
                &format!("--webhook-configuration-prefix={}-", env.ns),
                // As make run: what points at the URL is withdrawn when bosun stops.
                "--webhook-remove-on-exit",
            ])
            .await;
        let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(env.client.clone());
        let url = format!("https://127.0.0.1:{port}/convert");
        let mut pointed = false;
        for _ in 0..120 {
            let crd = crds.get("voteconfigs.voting.schoolofdevops.com").await.unwrap();
            let config = crd.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).unwrap();
            if config.url.as_deref() == Some(url.as_str()) && config.ca_bundle.is_some() && config.service.is_none() {
                pointed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(pointed, "bosun did not point the CRD's conversion at {url}");

        // The tutorial's manifest applies unchanged, with the deprecation warning…
        let (ok, out) = env.kubectl_apply(SPEC_EXAMPLE);
        assert!(ok, "kubectl apply of the v1alpha1 example: {out}");
        assert!(out.contains("v1alpha1 VoteConfig is deprecated"), "no deprecation warning: {out}");
        // …and is served in v1, where bosun reconciles it.
        let v = env.wait_for::<VoteConfig>("pets", "Ready=True", is_ready).await;
        assert_eq!(v.spec.question.as_deref(), Some("Cats or dogs?"));
        let cm = env.api::<ConfigMap>().get("pets-config").await.unwrap();
        assert_eq!(data(&cm)["TITLE"], "Cats or dogs?");
        let old = env.api::<v1alpha1::VoteConfig>().get("pets").await.unwrap();
        assert_eq!(old.spec.title.as_deref(), Some("Cats or dogs?"));
        assert_eq!(old.status, v.status, "the status reads the same in both versions");

        // A v1 object with what only v1 has, read as v1alpha1 and written back by an old
        // client (a changed title): its descriptions survive.
        let described = vote(
            "described",
            json!({"question": "Tea or coffee?", "options": [
                {"id": "tea", "label": "Tea", "description": "Steeped, never stirred"},
                {"id": "coffee", "label": "Coffee"}]}),
        );
        env.apply(&described).await;
        // (Read once bosun wrote its status, so that the write back meets no newer version.)
        env.wait_for::<VoteConfig>("described", "Ready=True", is_ready).await;
        let mut old = env.api::<v1alpha1::VoteConfig>().get("described").await.unwrap();
        assert_eq!(old.spec.title.as_deref(), Some("Tea or coffee?"));
        assert_eq!(old.annotations()[DESCRIPTIONS_ANNOTATION], r#"{"tea":"Steeped, never stirred"}"#);
        old.spec.title = Some("Tea, or coffee?".into());
        let params = kube::api::PostParams { field_manager: Some("old-client".into()), ..Default::default() };
        env.api::<v1alpha1::VoteConfig>().replace("described", &params, &old).await.expect("the old client's write");
        let new = env.api::<VoteConfig>().get("described").await.unwrap();
        assert_eq!(new.spec.question.as_deref(), Some("Tea, or coffee?"));
        let descriptions: Vec<_> = new.spec.options.iter().map(|o| o.description.as_deref()).collect();
        assert_eq!(descriptions, [Some("Steeped, never stirred"), None]);
        assert!(!new.annotations().contains_key(DESCRIPTIONS_ANNOTATION), "the annotation is only for v1alpha1 readers");
        let cm = env
            .wait_for::<ConfigMap>("described-config", "the new question", |cm| {
                data(cm).get("TITLE").map(String::as_str) == Some("Tea, or coffee?")
            })
            .await;
        let published: serde_json::Value = serde_json::from_str(&data(&cm)["options.json"]).unwrap();
        assert_eq!(
            published,
            json!([{"id": "tea", "label": "Tea", "description": "Steeped, never stirred"}, {"id": "coffee", "label": "Coffee"}])
        );
        // An old client's merge patch of the title alone keeps them too.
        let patch = json!({"spec": {"title": "Which?"}});
        env.api::<v1alpha1::VoteConfig>().patch("described", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let new = env.api::<VoteConfig>().get("described").await.unwrap();
        assert_eq!(new.spec.question.as_deref(), Some("Which?"));
        assert_eq!(new.spec.options[0].description.as_deref(), Some("Steeped, never stirred"));

        // bosun stops (Ctrl-C, as make run is stopped): its webhook configurations go,
        // and the CRD names the webhook Service again, as config/crd ships it, so a
        // later make deploy's apply is not refused for naming both.
        use k8s_openapi::api::admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        };
        let validating: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(env.client.clone());
        let mutating: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(env.client.clone());
        let prefix = format!("{}-", env.ns);
        assert!(validating.get_opt(&format!("{prefix}validating-webhook-configuration")).await.unwrap().is_some());
        bosun.signal("INT");
        assert!(bosun.wait_exit(Duration::from_secs(30)).await.is_some_and(|s| s.success()), "{}", bosun.log_tail(20));
        let crd = crds.get("voteconfigs.voting.schoolofdevops.com").await.unwrap();
        let config = crd.spec.conversion.and_then(|c| c.webhook).and_then(|w| w.client_config).unwrap();
        let service = config.service.expect("the Service again");
        assert_eq!((service.namespace.as_str(), service.name.as_str()), ("bosun-system", "bosun-webhook-service"));
        assert_eq!((config.url, config.ca_bundle), (None, None), "nothing of the run is left");
        let left = validating.get_opt(&format!("{prefix}validating-webhook-configuration")).await.unwrap();
        assert!(left.is_none(), "{left:?}\n{}", bosun.log_tail(20));
        assert!(mutating.get_opt(&format!("{prefix}mutating-webhook-configuration")).await.unwrap().is_none());
        // The served version needs no converter: kubectl keeps working without bosun.
        let options = json!([{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}]);
        env.apply(&vote("after-run", json!({"question": "Still there?", "options": options}))).await;
    })
    .await;
}
