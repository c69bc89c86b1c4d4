//! The WebApp controller: one implementation serving `apps.example.com/v1` and
//! `example.com/v1`.
//!
//! Pipeline: read the WebApp's stored status → build the Deployment and Service (pure)
//! → apply both → compute status from the applied Deployment → write it only if it
//! changed.

use std::future::Future;
use std::sync::Arc;

use bosun_api::webapp::WebAppKind;
use bosun_resources::webapp::{self as build, Observed};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller;

use crate::apply::apply_child;
use crate::context::Context;
use crate::error::Error;
use crate::rbac::{self, Permission};
use crate::read;
use crate::runner::{self, Outcome};
use crate::status::update_status;

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "webapp";

/// What this controller does with the API: both WebApp groups, their Deployments
/// (also read when a new one is refused) and Services.
pub const PERMISSIONS: &[Permission] = &{
    let [a0, a1, a2] = rbac::reconciled("apps.example.com", "webapps");
    let [e0, e1, e2] = rbac::reconciled("example.com", "webapps");
    [
        a0,
        a1,
        a2,
        e0,
        e1,
        e2,
        Permission::new("apps", "deployments", &["create", "get", "list", "patch", "watch"]),
        Permission::new("", "services", rbac::OWN),
    ]
};

/// Run the WebApp controller for kind `K` in `namespace` (or cluster-wide).
pub async fn run<K: WebAppKind>(
    ctx: Arc<Context>,
    namespace: Option<String>,
    config: controller::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let ctrl = runner::controller_for::<K>(CONTROLLER, &ctx, ns);
    let ctrl = runner::owns::<K, Deployment>(ctrl, &ctx, ns);
    let ctrl = runner::owns::<K, Service>(ctrl, &ctx, ns);
    runner::drive(ctrl, config, ctx, shutdown, |webapp, ctx| {
        runner::instrumented(CONTROLLER, webapp.clone(), ctx.clone(), reconcile(webapp, ctx))
    })
    .await;
}

async fn reconcile<K: WebAppKind>(webapp: Arc<K>, ctx: Arc<Context>) -> Result<Outcome, Error> {
    // The stored status, not the cached one: condition times are carried over from it.
    let webapp = &read::latest(&ctx.client, webapp.as_ref()).await?;
    let (deployment, invalid) = match apply_children(webapp, &ctx).await {
        Ok(deployment) => (Some(deployment), None),
        Err(err) if err.is_invalid_spec() => {
            let ns = webapp.namespace().unwrap_or_default();
            (read::current::<Deployment>(&ctx.client, &ns, &webapp.name_any()).await?, Some(err.user_message()))
        }
        Err(err) => return Err(err),
    };
    let observed = Observed { deployment: deployment.as_ref(), invalid_spec: invalid.as_deref() };
    let status = build::status(webapp, observed, ctx.now());
    update_status(&ctx, CONTROLLER, webapp, webapp.current_status(), &status).await?;
    Ok(match invalid {
        Some(message) => Outcome::Refused { reason: bosun_api::conditions::reasons::INVALID_SPEC, message },
        None => Outcome::Applied,
    })
}

/// Apply the Deployment, then the Service; returns the Deployment as stored.
async fn apply_children<K: WebAppKind>(webapp: &K, ctx: &Context) -> Result<Deployment, Error> {
    let deployment = apply_child(ctx, webapp, &build::desired_deployment(webapp)).await?;
    apply_child(ctx, webapp, &build::desired_service(webapp)).await?;
    Ok(deployment)
}
