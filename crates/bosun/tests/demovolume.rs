//! DemoVolume end to end, on the local control plane, whose default StorageClass
//! allows expansion and whose claims kwok binds (without ever resizing the volumes).
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::time::Duration;

use bosun_api::demovolume::DemoVolume;
use bosun_testing::{Bosun, e2e};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;

fn volume(name: &str, size: i32) -> DemoVolume {
    serde_json::from_value(json!({
        "apiVersion": "demo.example.com/v1",
        "kind": "DemoVolume",
        "metadata": {"name": name},
        "spec": {"name": name, "size": size},
    }))
    .expect("demovolume")
}

fn condition<'a>(
    v: &'a DemoVolume,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    v.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// The status describes the current generation and Ready has `status` and `reason`.
fn ready_is(status: &'static str, reason: &'static str) -> impl Fn(&DemoVolume) -> bool {
    move |v| {
        v.status.as_ref().is_some_and(|s| s.observed_generation == v.metadata.generation)
            && condition(v, "Ready").is_some_and(|c| c.status == status && c.reason == reason)
    }
}

fn request(claim: &PersistentVolumeClaim) -> Option<String> {
    Some(claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")?.0.clone())
}

fn phase(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.status.as_ref()?.phase.as_deref()
}

/// How many reconciles of DemoVolumes the operator has logged so far.
fn reconciles(bosun: &Bosun) -> usize {
    let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
    log.lines().filter(|l| l.contains("controller=\"demovolume\"") && l.contains("reconcile")).count()
}

#[tokio::test]
async fn claim_binds_grows_and_refuses_to_shrink() {
    e2e("demovolume", |env| async move {
        let bosun = env.start_bosun(&["--controllers=demovolume"]).await;
        let claims = env.api::<PersistentVolumeClaim>();

        // 1 GiB: the claim is created in the default StorageClass and gets bound.
        env.apply(&volume("data", 1)).await;
        let claim = env
            .wait_for::<PersistentVolumeClaim>("data", "a bound claim of 1Gi", |c| {
                phase(c) == Some("Bound") && request(c).as_deref() == Some("1Gi")
            })
            .await;
        let spec = claim.spec.clone().expect("claim spec");
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        assert_eq!(spec.storage_class_name.as_deref(), Some("kwok-volume"), "the default StorageClass");
        let owner = &claim.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("DemoVolume", "data", Some(true)));
        assert_eq!(claim.labels()["app.kubernetes.io/managed-by"], "bosun");
        assert_eq!(claim.labels()["app.kubernetes.io/name"], "demovolume");
        assert_eq!(claim.labels()["app.kubernetes.io/instance"], "data");

        let v = env.wait_for::<DemoVolume>("data", "Ready=True (Bound)", ready_is("True", "Bound")).await;
        let status = v.status.expect("status");
        assert_eq!(status.name.as_deref(), Some("data"));
        assert_eq!(status.capacity.as_deref(), Some("1Gi"));
        assert_eq!(status.phase.as_deref(), Some("Bound"));
        let (ok, out) = env.kubectl(&["wait", "--for=condition=Ready", "demovolume/data", "--timeout=10s"]);
        assert!(ok, "kubectl wait failed: {out}");

        // Grow to 2 GiB: the claim's request follows (kwok never resizes the volume,
        // so the capacity stays 1Gi and Progressing says the resize is pending).
        env.apply(&volume("data", 2)).await;
        env.wait_for::<PersistentVolumeClaim>("data", "a request of 2Gi", |c| request(c).as_deref() == Some("2Gi"))
            .await;
        let v = env.wait_for::<DemoVolume>("data", "Ready=True at generation 2", ready_is("True", "Bound")).await;
        let progressing = condition(&v, "Progressing").expect("Progressing");
        assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("True", "Resizing"));

        // Shrink to 1 GiB: refused, the claim stays as it is, no retries.
        let before = claims.get("data").await.expect("claim");
        let reconciles_before = reconciles(&bosun);
        env.apply(&volume("data", 1)).await;
        let v =
            env.wait_for::<DemoVolume>("data", "Ready=False (ShrinkRefused)", ready_is("False", "ShrinkRefused")).await;
        let ready = condition(&v, "Ready").expect("Ready");
        assert!(ready.message.contains("cannot shrink"), "{}", ready.message);
        assert!(ready.message.contains("2Gi"), "the message names the current size: {}", ready.message);
        assert_eq!(v.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Bound"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = claims.get("data").await.expect("claim");
        assert_eq!(request(&after).as_deref(), Some("2Gi"));
        let bosun_wrote_claim = |c: &PersistentVolumeClaim| {
            c.managed_fields()
                .iter()
                .find(|f| f.manager.as_deref() == Some("bosun-demovolume.demo.example.com"))
                .and_then(|f| f.time.clone())
        };
        assert_eq!(bosun_wrote_claim(&after), bosun_wrote_claim(&before), "bosun wrote the claim");
        let refused_reconciles = reconciles(&bosun) - reconciles_before;
        assert!(
            (1..=3).contains(&refused_reconciles),
            "{refused_reconciles} reconciles after the shrink; log tail:\n{}",
            bosun.log_tail(20)
        );
        let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
        assert!(!log.contains("reconcile failed"), "reconciles failed:\n{}", bosun.log_tail(20));

        // Back to the claim's size: Ready again.
        env.apply(&volume("data", 2)).await;
        env.wait_for::<DemoVolume>("data", "Ready=True after the size is restored", ready_is("True", "Bound")).await;

        // Deleting the DemoVolume garbage-collects the claim (once no pod uses it).
        env.api::<DemoVolume>().delete("data", &DeleteParams::default()).await.expect("delete the DemoVolume");
        env.wait_gone::<PersistentVolumeClaim>("data").await;
    })
    .await;
}

#[tokio::test]
async fn a_deleted_claim_is_put_back() {
    e2e("demovolume-drift", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=demovolume"]).await;
        env.apply(&volume("scratch", 1)).await;
        env.wait_for::<DemoVolume>("scratch", "Ready=True", ready_is("True", "Bound")).await;
        let claims = env.api::<PersistentVolumeClaim>();
        let old_uid = claims.get("scratch").await.expect("claim").uid();
        // Deleted as soon as the DemoVolume is Ready: kwok may still be playing its
        // binding steps for this claim; they must not land on the one bosun puts back
        // (hack/controlplane/stages/pvc-provision.yaml).
        claims.delete("scratch", &DeleteParams::default()).await.expect("delete the claim");
        env.wait_for::<PersistentVolumeClaim>("scratch", "a new bound claim", |c| {
            c.uid() != old_uid && phase(c) == Some("Bound")
        })
        .await;
        env.wait_for::<DemoVolume>("scratch", "Ready=True", ready_is("True", "Bound")).await;
    })
    .await;
}

#[tokio::test]
async fn the_schema_refuses_bad_sizes_and_a_missing_name() {
    e2e("demovolume-schema", |env| async move {
        let refused = |spec: serde_json::Value| {
            let env = env.clone();
            async move {
                let object = json!({"metadata": {"name": "bad"}, "spec": spec.clone()});
                match env.create_raw::<DemoVolume>(object).await {
                    Ok(_) => panic!("DemoVolume with spec {spec} was accepted"),
                    Err(err) => err.to_string(),
                }
            }
        };
        let err = refused(json!({"name": "bad", "size": 0})).await;
        assert!(err.contains("spec.size") && err.contains("greater than or equal to 1"), "{err}");
        let err = refused(json!({"name": "bad", "size": -3})).await;
        assert!(err.contains("spec.size"), "{err}");
        let err = refused(json!({"size": 1})).await;
        assert!(err.contains("spec.name") && err.contains("Required"), "{err}");
        let err = refused(json!({"name": "", "size": 1})).await;
        assert!(err.contains("spec.name"), "{err}");
        let err = refused(json!({"name": "bad"})).await;
        assert!(err.contains("spec.size") && err.contains("Required"), "{err}");
        let err = refused(json!({"name": "bad", "size": "1Gi"})).await;
        assert!(err.contains("spec.size"), "{err}");
    })
    .await;
}
