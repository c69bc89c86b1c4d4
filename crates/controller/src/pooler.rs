//! The PostgreSQL controller's pooler stage (`spec.pooler`): the pooler's Secret
//! (made once), its Deployments and Services applied, or removed when the spec no
//! longer asks for them; and what they report, for the status.

use bosun_api::postgresql::{PoolerStatus, PostgreSQL};
use bosun_resources::postgresql as build;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::ResourceExt;

use crate::apply::{apply_child, create_if_absent, delete_child};
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;

/// The caches the stage reads.
#[derive(Clone, Copy, Debug)]
pub struct Caches<'a> {
    pub deployments: &'a Owned<Deployment>,
    pub services: &'a Owned<Service>,
    pub secrets: &'a Owned<Secret>,
}

/// Bring the pooler to `db`'s spec; its status (`None` without `spec.pooler`).
pub async fn serve(db: &PostgreSQL, ctx: &Context, caches: Caches<'_>) -> Result<Option<PoolerStatus>, Error> {
    let ns = db.namespace().unwrap_or_default();
    let sides = build::pooler_sides(db);
    for read_only in [false, true].into_iter().filter(|ro| !sides.contains(ro)) {
        let name = build::pooler_name(db, read_only);
        delete_child(ctx, db, caches.deployments, &ns, &name).await?;
        delete_child(ctx, db, caches.services, &ns, &name).await?;
    }
    if sides.is_empty() {
        return Ok(None);
    }
    // The role's password: made when missing (the primary sets whatever it holds).
    let secret = build::pooler_secret_name(db);
    if crate::read::cached_or_get(&ctx.client, caches.secrets, &ns, &secret).await?.is_none() {
        create_if_absent(ctx, db, &build::desired_pooler_secret(db, &crate::postgresql::new_password())).await?;
    }
    let mut deployments = Vec::new();
    for read_only in sides {
        let Some(desired) = build::desired_pooler_deployment(db, &ctx.settings.postgres, read_only) else { continue };
        let applied = apply_child(ctx, db, caches.deployments, desired).await?;
        apply_child(ctx, db, caches.services, build::desired_pooler_service(db, read_only)).await?;
        // The applied object's status is the one it had: the cache's is as fresh.
        let seen = caches.deployments.get(&ns, &applied.name_any()).filter(|d| controlled_by(d.as_ref(), db));
        deployments.push(Some(seen.map(|d| (*d).clone()).unwrap_or(applied)));
    }
    let refs: Vec<Option<&Deployment>> = deployments.iter().map(Option::as_ref).collect();
    Ok(build::pooler_status(db, &refs))
}
