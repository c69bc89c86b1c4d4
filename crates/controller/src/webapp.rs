//! The WebApp controller: one implementation serving `apps.example.com/v1` and
//! `example.com/v1`.
//!
//! Pipeline: build the Deployment and Service (pure) → apply both → compute status
//! from the applied Deployment → write it only if it changed.

use std::future::Future;
use std::sync::Arc;

use bosun_api::webapp::WebAppKind;
use bosun_resources::webapp::{self as build, Observed};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller;
use kube::{Api, ResourceExt};

use crate::apply::{apply, apply_status};
use crate::context::Context;
use crate::error::Error;
use crate::runner::{self, Outcome};

/// Run the WebApp controller for kind `K` in `namespace` (or cluster-wide).
pub async fn run<K: WebAppKind>(
    ctx: Arc<Context>,
    namespace: Option<String>,
    config: controller::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let ctrl = runner::controller_for::<K>(&ctx, ns);
    let ctrl = runner::owns::<K, Deployment>(ctrl, &ctx, ns);
    let ctrl = runner::owns::<K, Service>(ctrl, &ctx, ns);
    runner::drive(ctrl, config, ctx, shutdown, |webapp, ctx| {
        runner::instrumented("webapp", webapp.clone(), ctx.clone(), reconcile(webapp, ctx))
    })
    .await;
}

async fn reconcile<K: WebAppKind>(webapp: Arc<K>, ctx: Arc<Context>) -> Result<Outcome, Error> {
    let webapp = webapp.as_ref();
    let (deployment, invalid) = match apply_children(webapp, &ctx).await {
        Ok(deployment) => (Some(deployment), None),
        Err(err) if err.is_invalid_spec() => (current_deployment(webapp, &ctx).await?, Some(err.user_message())),
        Err(err) => return Err(err),
    };
    let observed = Observed { deployment: deployment.as_ref(), invalid_spec: invalid.as_deref() };
    let status = build::status(webapp, observed, ctx.now());
    if webapp.current_status() != Some(&status) {
        apply_status(&ctx.client, webapp, &status).await?;
    }
    Ok(if invalid.is_some() { Outcome::InvalidSpec } else { Outcome::Applied })
}

/// Apply the Deployment, then the Service; returns the Deployment as stored.
async fn apply_children<K: WebAppKind>(webapp: &K, ctx: &Context) -> Result<Deployment, Error> {
    let deployment = apply(&ctx.client, &build::desired_deployment(webapp)).await?;
    apply(&ctx.client, &build::desired_service(webapp)).await?;
    Ok(deployment)
}

/// The Deployment as it is, when a new one could not be applied: what still runs.
async fn current_deployment<K: WebAppKind>(webapp: &K, ctx: &Context) -> Result<Option<Deployment>, Error> {
    let ns = webapp.namespace().unwrap_or_default();
    Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&webapp.name_any())
        .await
        .map_err(|source| Error::Read { what: format!("Deployment {ns}/{}", webapp.name_any()), source })
}
