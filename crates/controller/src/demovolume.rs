//! The DemoVolume controller.
//!
//! Pipeline: the claim as cached → check the resize (pure) → build and apply the claim
//! if it drifted → compute status from the claim → write status only if it changed.
//!
//! A smaller `size` than the claim already requests is refused before anything is
//! applied: the claim stays untouched, `Ready=False` with reason `ShrinkRefused` says
//! why, and the reconcile ends without error so that nothing retries until the spec
//! changes again. The claim is watched (as an owned child), so its binding and
//! resizing show up in the status without polling.

use std::future::Future;
use std::sync::Arc;

use bosun_api::demovolume::DemoVolume;
use bosun_resources::demovolume::{self as build, Observed, Refusal};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use crate::apply::{apply_child, claim_child};
use crate::children::Owned;
use crate::context::Context;
use crate::error::Error;
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "demovolume";

/// What this controller does with the API: DemoVolumes and their claims.
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("demo.example.com", "demovolumes");
    [a, b, c, Permission::new("", "persistentvolumeclaims", permissions::OWN)]
};

/// The demovolume controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::of::<DemoVolume>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the DemoVolume controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    wiring::run_owning::<DemoVolume, PersistentVolumeClaim, _, _>(
        CONTROLLER,
        ctx,
        namespace,
        concurrency,
        shutdown,
        reconcile,
    )
    .await;
}

async fn reconcile(
    volume: Arc<DemoVolume>,
    ctx: Arc<Context>,
    owned: Owned<PersistentVolumeClaim>,
) -> Result<Outcome, Error> {
    let volume = volume.as_ref();
    let ns = volume.namespace().unwrap_or_default();
    let desired = build::desired_claim(volume);
    // A claim bosun's cache does not hold is not bosun's: the apply finds that out.
    let existing = owned.get(&ns, &desired.name_any()).map(|c| (*c).clone());
    // Whose claim it is comes first: a claim that is not this DemoVolume's is neither
    // resized nor judged, nor described in its status.
    let (claim, refusal) = match claim_child(volume, &desired, existing.as_ref().map(|c| &c.metadata)) {
        Err(Error::NameConflict(message)) => (None, Some(Refusal::NameConflict(message))),
        Err(err) => return Err(err),
        Ok(_) => match build::check_resize(volume, existing.as_ref()) {
            Err(refusal) => (existing, Some(refusal)),
            Ok(()) => match apply_child(&ctx, volume, &owned, desired).await {
                Ok(applied) => (Some(applied), None),
                Err(Error::NameConflict(message)) => (None, Some(Refusal::NameConflict(message))),
                Err(err) if err.is_invalid_spec() => (existing, Some(Refusal::InvalidSpec(err.user_message()))),
                Err(err) => return Err(err),
            },
        },
    };
    let status = build::status(volume, Observed { claim: claim.as_ref(), refusal: refusal.as_ref() }, ctx.now());
    let announce = update_status(&ctx, CONTROLLER, volume, &status).await?;
    Ok(Outcome::of(refusal.map(|r| (r.reason(), r.message())), announce))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mock;

    fn volume(size: i32) -> Arc<DemoVolume> {
        let v = json!({
            "apiVersion": "demo.example.com/v1", "kind": "DemoVolume",
            "metadata": {"name": "data", "namespace": "shop", "uid": "uid-volume", "generation": 2},
            "spec": {"name": "data", "size": size},
        });
        Arc::new(serde_json::from_value(v).unwrap())
    }

    /// The volume's claim as bosun made it at `size` GiB, bound.
    fn claim(size: i32) -> PersistentVolumeClaim {
        let mut claim = build::desired_claim(volume(size).as_ref());
        claim.metadata.uid = Some("uid-data".to_owned());
        claim.status = Some(
            serde_json::from_value(json!({"phase": "Bound", "capacity": {"storage": format!("{size}Gi")}})).unwrap(),
        );
        claim
    }

    #[tokio::test]
    async fn a_shrink_is_refused_and_the_claim_is_left_as_it_is() {
        let v = volume(1);
        let (ctx, calls) = mock::context(mock::answer(v.as_ref()));
        let outcome = reconcile(v, ctx, mock::cache([claim(5)])).await.unwrap();
        assert!(matches!(outcome, Outcome::Refused { reason: "ShrinkRefused", .. }), "{outcome:?}");
        assert_eq!(calls.writes(), ["PATCH /apis/demo.example.com/v1/namespaces/shop/demovolumes/data/status"]);
        assert_eq!(mock::condition(&calls, "Ready"), "False/ShrinkRefused");
    }

    #[tokio::test]
    async fn a_growth_is_applied_to_that_very_claim() {
        let v = volume(8);
        let (ctx, calls) = mock::context(mock::answer(v.as_ref()));
        let outcome = reconcile(v, ctx, mock::cache([claim(5)])).await.unwrap();
        assert_eq!(outcome, Outcome::Applied);
        let applied = calls.body("/persistentvolumeclaims/data").expect("the claim applied");
        assert_eq!(applied["spec"]["resources"]["requests"]["storage"], "8Gi");
        assert_eq!(applied["metadata"]["uid"], "uid-data");
    }
}
