//! The VoteConfig controller.
//!
//! Pipeline: build the desired ConfigMap (pure) → apply it if it drifted → compute
//! status from the ConfigMap before (cached) and after the apply → write status only
//! if it changed. `lastUpdated` moves exactly when the data changed: the cached
//! ConfigMap tells whether it did, the status bosun last wrote what the time was if
//! it did not.

use std::future::Future;
use std::sync::Arc;

use bosun_api::conditions::reasons;
use bosun_api::voteconfig::VoteConfig;
use bosun_resources::conditions::Refused;
use bosun_resources::render;
use bosun_resources::voteconfig::{self as build, Observed};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use crate::apply::apply_child;
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "voteconfig";

/// What this controller does with the API: VoteConfigs and their ConfigMaps.
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("voting.schoolofdevops.com", "voteconfigs");
    [a, b, c, Permission::new("", "configmaps", permissions::OWN)]
};

/// The voteconfig controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type {
        crd: bosun_api::voteconfig::crd,
        // Both versions render; the deprecated one as the webhook converts it.
        render: |index, doc| {
            render::renderer::<VoteConfig>(index, doc)
                .or_else(|| render::renderer::<bosun_api::voteconfig::v1alpha1::VoteConfig>(index, doc))
        },
        convert: Some(bosun_api::voteconfig::convert),
    }],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the VoteConfig controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    wiring::run_owning::<VoteConfig, ConfigMap, _, _>(CONTROLLER, ctx, namespace, concurrency, shutdown, reconcile)
        .await;
}

async fn reconcile(vote: Arc<VoteConfig>, ctx: Arc<Context>, owned: Owned<ConfigMap>) -> Result<Outcome, Error> {
    let vote = vote.as_ref();
    let desired = build::desired_config_map(vote);
    let ns = vote.namespace().unwrap_or_default();
    let before = owned.get(&ns, &desired.name_any()).map(|cm| (*cm).clone());
    let (before, applied, refused) = match apply_child(&ctx, vote, &owned, desired).await {
        Ok(applied) => (before, Some(applied), None),
        // Someone else's ConfigMap is not described in this status.
        Err(Error::NameConflict(message)) => (None, None, Some((reasons::NAME_CONFLICT, message))),
        Err(err) if err.is_invalid_spec() => {
            (before.filter(|cm| controlled_by(cm, vote)), None, Some((reasons::INVALID_SPEC, err.user_message())))
        }
        Err(err) => return Err(err),
    };
    let observed = Observed {
        before: before.as_ref(),
        applied: applied.as_ref(),
        refused: refused.as_ref().map(|(reason, message)| Refused { reason, message }),
    };
    let status = build::status(vote, observed, ctx.now());
    let announce = update_status(&ctx, CONTROLLER, vote, &status).await?;
    Ok(Outcome::of(refused, announce))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mock;

    fn vote() -> VoteConfig {
        let v = json!({
            "apiVersion": "voting.schoolofdevops.com/v1", "kind": "VoteConfig",
            "metadata": {"name": "pets", "namespace": "shop", "uid": "uid-vote", "generation": 1},
            "spec": {"question": "Cats or dogs?", "options": [{"id": "a", "label": "Cats"}, {"id": "b", "label": "Dogs"}]},
        });
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn steady_state_writes_nothing() {
        // First reconcile: the ConfigMap and the status are written.
        let v = vote();
        let (ctx, calls) = mock::context(mock::answer(&v));
        let owned: Owned<ConfigMap> = mock::cache([]);
        reconcile(Arc::new(v.clone()), ctx, owned.clone()).await.unwrap();
        let path = "/api/v1/namespaces/shop/configmaps/pets-config";
        assert_eq!(calls.writes().len(), 2, "{:?}", calls.writes());
        // The watch then brings the ConfigMap as stored and the VoteConfig with its
        // status: a reconcile of that writes nothing at all.
        let stored: ConfigMap = serde_json::from_value(mock::stored(&calls.body(path).unwrap())).unwrap();
        let cached: Owned<ConfigMap> = mock::cache([stored]);
        let record = owned.recorded("shop", "pets-config").expect("a record of the apply");
        cached.record("shop", "pets-config", record);
        let mut seen = v;
        seen.status = serde_json::from_value(calls.body("/status").unwrap()["status"].clone()).unwrap();
        let (ctx, calls) = mock::context(mock::answer(&seen));
        let outcome = reconcile(Arc::new(seen), ctx, cached).await.unwrap();
        assert_eq!(outcome, Outcome::Applied);
        assert_eq!(calls.writes(), Vec::<String>::new());
    }
}
