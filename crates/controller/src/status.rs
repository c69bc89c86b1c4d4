//! Writing status: only when it changed, and noting when a resource first becomes Ready.

use std::fmt::Debug;

pub use bosun_api::conditions::Conditioned;
use bosun_api::conditions::{Condition, types};
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::apply::apply_status;
use crate::context::Context;
use crate::error::Error;

fn ready(conditions: &[Condition]) -> bool {
    bosun_resources::conditions::is_true(conditions, types::READY)
}

/// Apply `status` to `owner` unless it equals `previous` (returns whether it wrote); an
/// unchanged status is never re-written, which keeps steady state silent. The first time a resource becomes Ready
/// (generation 1, not Ready before), the time since its creation is recorded.
pub async fn update_status<K, S>(
    ctx: &Context,
    controller: &'static str,
    owner: &K,
    previous: Option<&S>,
    status: &S,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
    S: Serialize + PartialEq + Conditioned,
{
    if previous == Some(status) {
        return Ok(false);
    }
    apply_status(&ctx.client, owner, status).await?;
    let was_ready = previous.is_some_and(|p| ready(p.conditions()));
    let first_ready = !was_ready && ready(status.conditions()) && owner.meta().generation == Some(1);
    if let (true, Some(created)) = (first_ready, &owner.meta().creation_timestamp) {
        let seconds = ctx.now().duration_since(created.0).as_secs_f64();
        ctx.metrics.became_ready(controller, seconds.max(0.0));
    }
    Ok(true)
}
