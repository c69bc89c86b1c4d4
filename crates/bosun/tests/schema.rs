//! What the CRD schemas refuse at admission, on the local control plane: nothing the
//! apiserver stores may fail to deserialize into the Rust types or fail later when a
//! child is applied. No operator runs here: this is the apiserver alone.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

use bosun_api::demovolume::DemoVolume;
use bosun_api::schema::INT64_MAXIMUM;
use bosun_api::voteconfig::VoteConfig;
use bosun_api::webapp::apps_v1;
use bosun_testing::{Env, e2e};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// `result` is a refusal whose message names `field`.
fn refused(result: Result<DynamicObject, kube::Error>, what: &str, field: &str) {
    match result {
        Ok(obj) => panic!("{what} was accepted: {obj:?}"),
        Err(kube::Error::Api(status)) => {
            assert!(
                status.code == 422 || status.code == 400,
                "{what}: expected an Invalid response, got {}: {}",
                status.code,
                status.message
            );
            assert!(status.message.contains(field), "the refusal of {what} does not name {field}: {}", status.message);
        }
        Err(e) => panic!("{what}: expected a refusal by the apiserver, got {e}"),
    }
}

fn accepted(result: Result<DynamicObject, kube::Error>, what: &str) {
    if let Err(e) = result {
        panic!("{what} was refused: {e}");
    }
}

fn webapp(name: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": spec})
}

/// Merge-patch `status` of WebApp `name` through the status subresource.
async fn patch_webapp_status(env: &Env, name: &str, status: Value) -> Result<DynamicObject, kube::Error> {
    let ar = ApiResource::erase::<apps_v1::WebApp>(&());
    Api::<DynamicObject>::namespaced_with(env.client.clone(), &env.ns, &ar)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
}

#[tokio::test]
async fn out_of_range_and_malformed_input_is_refused_naming_the_field() {
    e2e("schema", |env| async move {
        // DemoVolume size: an i32 in the operator, at most 1 PiB in GiB.
        let size = |name: &str, size: i64| json!({"metadata": {"name": name}, "spec": {"name": name, "size": size}});
        refused(env.create_raw::<DemoVolume>(size("huge", 2_147_483_648)).await, "size 2147483648", "spec.size");
        refused(env.create_raw::<DemoVolume>(size("over", 1_048_577)).await, "size 1048577", "spec.size");
        accepted(env.create_raw::<DemoVolume>(size("pib", 1_048_576)).await, "size 1048576 (1 PiB)");

        // Names: the app.kubernetes.io/instance label of the children holds them.
        let long = "n".repeat(64);
        let at_most = "n".repeat(63);
        let volume = |name: &str| json!({"metadata": {"name": name}, "spec": {"name": "v", "size": 1}});
        refused(env.create_raw::<DemoVolume>(volume(&long)).await, "a DemoVolume with a 64-character name", "metadata.name");
        accepted(env.create_raw::<DemoVolume>(volume(&at_most)).await, "a DemoVolume with a 63-character name");
        let vote = |name: &str| {
            json!({"metadata": {"name": name}, "spec": {"options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]}})
        };
        refused(env.create_raw::<VoteConfig>(vote(&long)).await, "a VoteConfig with a 64-character name", "metadata.name");
        accepted(env.create_raw::<VoteConfig>(vote(&at_most)).await, "a VoteConfig with a 63-character name");

        // WebApp env: a list-map keyed by name, so duplicates never reach the Deployment.
        let env_vars = json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]);
        refused(
            env.create_raw::<apps_v1::WebApp>(webapp("dup-env", json!({"image": "nginx", "env": env_vars}))).await,
            "a WebApp with duplicate env names",
            "spec.env",
        );
        let env_vars = json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        accepted(
            env.create_raw::<apps_v1::WebApp>(webapp("env", json!({"image": "nginx", "env": env_vars}))).await,
            "a WebApp with distinct env names",
        );

        // Quantities: the string form must be a Kubernetes quantity; the number form stays valid.
        let resources = |memory: Value| json!({"image": "nginx", "resources": {"limits": {"memory": memory}}});
        refused(
            env.create_raw::<apps_v1::WebApp>(webapp("bad-memory", resources(json!("1.5.5Gi")))).await,
            "a WebApp with memory 1.5.5Gi",
            "spec.resources",
        );
        for (i, good) in [json!("1.5Gi"), json!("512Mi"), json!("100m"), json!("1e3"), json!(1)].into_iter().enumerate() {
            accepted(
                env.create_raw::<apps_v1::WebApp>(webapp(&format!("memory-{i}"), resources(good.clone()))).await,
                &format!("a WebApp with memory {good}"),
            );
        }

        // Status, written through the status subresource: bounded like the Rust types.
        accepted(env.create_raw::<apps_v1::WebApp>(webapp("status", json!({"image": "nginx"}))).await, "WebApp status");
        refused(
            patch_webapp_status(&env, "status", json!({"availableReplicas": 3_000_000_000_i64})).await,
            "status.availableReplicas 3000000000",
            "status.availableReplicas",
        );
        accepted(
            patch_webapp_status(&env, "status", json!({"availableReplicas": i32::MAX})).await,
            "status.availableReplicas 2147483647",
        );
        // i64: up to the largest float64 below 2^63 (see INT64_MAXIMUM), nothing beyond i64.
        for (value, what) in [(json!(i64::MAX), "i64::MAX"), (json!(u64::try_from(i64::MAX).unwrap() + 1), "2^63")] {
            refused(
                patch_webapp_status(&env, "status", json!({"observedGeneration": value})).await,
                &format!("status.observedGeneration {what}"),
                "status.observedGeneration",
            );
        }
        for value in [i64::MIN, INT64_MAXIMUM] {
            accepted(
                patch_webapp_status(&env, "status", json!({"observedGeneration": value})).await,
                &format!("status.observedGeneration {value}"),
            );
        }
        // What was stored still deserializes into the Rust type.
        let stored: apps_v1::WebApp = env.api().get("status").await.expect("the WebApp deserializes");
        let status = stored.status.expect("status");
        assert_eq!((status.available_replicas, status.observed_generation), (i32::MAX, Some(INT64_MAXIMUM)));
    })
    .await;
}

/// `spec.verify`: what a careless user writes is refused naming the field; dumps of
/// PostgreSQL and MySQL are accepted.
#[tokio::test]
async fn verify_is_refused_where_it_cannot_run() {
    use bosun_api::backup::Backup;
    e2e("schema-verify", |env| async move {
        let backup = |name: &str, engine: &str, method: &str, verify: Value| {
            json!({"metadata": {"name": name}, "spec": {
                "source": {"type": engine, "connection": {"host": "db", "database": "app", "secretRef": {"name": "c"}}},
                "destination": {"type": "s3", "bucket": "b"}, "schedule": "0 2 * * *", "method": method, "verify": verify}})
        };
        let weekly = json!({"schedule": "0 6 * * 0"});
        accepted(env.create_raw::<Backup>(backup("pg", "postgresql", "dump", weekly.clone())).await, "PostgreSQL dumps");
        accepted(env.create_raw::<Backup>(backup("my", "mysql", "dump", weekly.clone())).await, "MySQL dumps");
        refused(env.create_raw::<Backup>(backup("base", "postgresql", "base", weekly.clone())).await, "base backups", "spec.verify restores dumps");
        refused(env.create_raw::<Backup>(backup("mongo", "mongodb", "dump", weekly)).await, "mongodb dumps", "spec.verify");
        refused(env.create_raw::<Backup>(backup("empty", "postgresql", "dump", json!({}))).await, "no schedule", "schedule");
        refused(
            env.create_raw::<Backup>(backup("daily", "postgresql", "dump", json!({"schedule": "daily"}))).await,
            "a schedule that is not cron",
            "spec.verify.schedule must be a cron expression",
        );
        refused(
            env.create_raw::<Backup>(backup("quick", "postgresql", "dump", json!({"schedule": "@daily", "activeDeadlineSeconds": 5}))).await,
            "a deadline under a minute",
            "spec.verify.activeDeadlineSeconds",
        );
    })
    .await;
}

/// `destination.encryption` is accepted wherever something is stored or read: dumps,
/// base backups, a PostgreSQL's continuous archive and a recovery from one. The tiers
/// of retention are for logical dumps: a base backup with tiers is refused at
/// admission naming the fields.
#[tokio::test]
async fn encryption_is_accepted_everywhere_and_tiers_only_on_dumps() {
    use bosun_api::backup::Backup;
    use bosun_api::postgresql::PostgreSQL;
    e2e("schema-encryption", |env| async move {
        let sealed = json!({"type": "s3", "bucket": "b", "encryption": {"secretRef": {"name": "backup-key"}}});
        let backup = |name: &str, method: &str| {
            json!({"metadata": {"name": name}, "spec": {
                "source": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "c"}}},
                "destination": sealed, "schedule": "0 2 * * *", "method": method}})
        };
        accepted(env.create_raw::<Backup>(backup("base", "base")).await, "an encrypted base backup");
        accepted(env.create_raw::<Backup>(backup("dump", "dump")).await, "an encrypted dump");
        // The tiers of retention are for dumps too.
        let mut tiered = backup("tiered-base", "base");
        tiered["spec"]["destination"] = json!({"type": "s3", "bucket": "b"});
        tiered["spec"]["keepWeekly"] = json!(4);
        refused(env.create_raw::<Backup>(tiered.clone()).await, "tiers on base backups", "spec.keepDaily, keepWeekly, keepMonthly");
        tiered["metadata"]["name"] = json!("tiered-dump");
        tiered["spec"]["method"] = json!("dump");
        accepted(env.create_raw::<Backup>(tiered.clone()).await, "tiers on dumps");
        tiered["metadata"]["name"] = json!("tiered-zero");
        tiered["spec"]["keepWeekly"] = json!(0);
        refused(env.create_raw::<Backup>(tiered).await, "keepWeekly 0", "spec.keepWeekly");
        let db = |name: &str, backup: Value, bootstrap: Option<Value>| {
            let mut spec = json!({"version": "15", "storage": "1Gi", "backup": backup});
            if let Some(b) = bootstrap {
                spec["bootstrap"] = b;
            }
            json!({"metadata": {"name": name}, "spec": spec})
        };
        accepted(
            env.create_raw::<PostgreSQL>(db("archive", json!({"enabled": true, "destination": sealed, "continuous": {}}), None)).await,
            "an encrypted continuous archive",
        );
        let recovery = json!({"recovery": {"source": "old", "destination": sealed}});
        accepted(
            env.create_raw::<PostgreSQL>(db("recovered", json!({"enabled": false}), Some(recovery))).await,
            "a recovery from an encrypted destination",
        );
        accepted(
            env.create_raw::<PostgreSQL>(db("dumps", json!({"enabled": true, "destination": sealed}), None)).await,
            "a PostgreSQL whose scheduled dumps are encrypted",
        );
    })
    .await;
}
