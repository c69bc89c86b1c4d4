//! The WebApp controller: one implementation serving `apps.example.com/v1` and
//! `example.com/v1`.
//!
//! Pipeline: read the WebApp's stored status → build the Deployment and Service (pure)
//! → apply both → compute status from the applied Deployment → write it only if it
//! changed.

use std::future::Future;
use std::sync::Arc;

use bosun_api::conditions::reasons;
use bosun_api::webapp::WebAppKind;
use bosun_resources::conditions::Refused;
use bosun_resources::webapp::{self as build, Observed};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller;

use crate::apply::apply_child;
use crate::children::{Owned, controlled_by};
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
    let (ctrl, deployments) = runner::owns::<K, Deployment>(ctrl, &ctx, ns);
    let (ctrl, services) = runner::owns::<K, Service>(ctrl, &ctx, ns);
    let children = Children { deployments, services };
    runner::drive(CONTROLLER, ctrl, config, ctx, shutdown, move |webapp, ctx| reconcile(webapp, ctx, children.clone()))
        .await;
}

/// The caches of a WebApp's children.
#[derive(Clone, Debug)]
struct Children {
    deployments: Owned<Deployment>,
    services: Owned<Service>,
}

async fn reconcile<K: WebAppKind>(webapp: Arc<K>, ctx: Arc<Context>, children: Children) -> Result<Outcome, Error> {
    // The stored status, not the cached one: condition times are carried over from it.
    let webapp = &read::latest(&ctx.client, webapp.as_ref()).await?;
    let (deployment, refused) = match apply_children(webapp, &ctx, &children).await {
        Ok(deployment) => (Some(deployment), None),
        Err(Error::NameConflict(message)) => (None, Some((reasons::NAME_CONFLICT, message))),
        Err(err) if err.is_invalid_spec() => {
            // What still runs of the last good spec, if this WebApp's.
            let ns = webapp.namespace().unwrap_or_default();
            let current = read::current::<Deployment>(&ctx.client, &ns, &webapp.name_any()).await?;
            (current.filter(|d| controlled_by(d, webapp)), Some((reasons::INVALID_SPEC, err.user_message())))
        }
        Err(err) => return Err(err),
    };
    let observed = Observed {
        deployment: deployment.as_ref(),
        refused: refused.as_ref().map(|(reason, message)| Refused { reason, message }),
    };
    let status = build::status(webapp, observed, ctx.now());
    let announce = update_status(&ctx, CONTROLLER, webapp, webapp.current_status(), &status).await?;
    Ok(Outcome::of(refused, announce))
}

/// Apply the Deployment, then the Service; returns the Deployment as stored.
async fn apply_children<K: WebAppKind>(webapp: &K, ctx: &Context, children: &Children) -> Result<Deployment, Error> {
    let deployment = apply_child(ctx, webapp, &children.deployments, build::desired_deployment(webapp)).await?;
    apply_child(ctx, webapp, &children.services, build::desired_service(webapp)).await?;
    Ok(deployment)
}
