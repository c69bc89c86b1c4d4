//! `/metrics`, `/healthz` and `/readyz` on one listener (default :8080).
//!
//! * `/healthz`: the process is alive and serving.
//! * `/readyz`: the API server answered recently, every watch is flowing (none has
//!   failed in the last seconds without delivering since), and — on the leader —
//!   every controller's cache has synced. A standby has no caches to sync and is ready as
//!   soon as the API answers, so a rollout can proceed while it waits for the lease.
//!   A replica serving webhooks is not ready before its serving certificate is loaded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use bosun_controller::Context;

use crate::leader::Leadership;
use crate::process;

/// What the endpoints report on.
pub struct Health {
    pub registry: Registry,
    pub api_reachable: AtomicBool,
    pub leadership: Arc<Leadership>,
    pub ctx: Arc<Context>,
    /// With --shards, the shards this replica holds, each with its own caches.
    pub shards: Arc<crate::shards::ShardStatus>,
    /// The webhook server's certificate, when it serves webhooks.
    pub webhook_certificate: Option<Arc<crate::webhook::server::Certificate>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("api_reachable", &self.api_reachable).finish_non_exhaustive()
    }
}

impl Health {
    fn ready(&self) -> Result<(), String> {
        if !self.api_reachable.load(Ordering::SeqCst) {
            return Err("the Kubernetes API is not reachable".into());
        }
        if self.webhook_certificate.as_ref().is_some_and(|c| !c.loaded()) {
            return Err("the webhook server has no serving certificate yet".into());
        }
        caches_ready(&self.ctx, self.leadership.is_leader())?;
        self.shards.ready()
    }
}

/// A context's part of /readyz: its caches synced (when its controllers run), its
/// watches flowing.
pub fn caches_ready(ctx: &Context, running: bool) -> Result<(), String> {
    if running && !ctx.caches.all_synced() {
        let (synced, expected) = ctx.caches.counts();
        return Err(format!("caches have not synced yet ({synced} of {expected})"));
    }
    let (failing, watches) = ctx.watches.counts();
    if failing > 0 {
        return Err(format!("{failing} of {watches} watches are failing"));
    }
    Ok(())
}

/// Bind `addr` (fails fast when the port is taken) and serve until `shutdown`.
pub async fn serve(addr: SocketAddr, health: Arc<Health>, shutdown: CancellationToken) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    });
    Ok(bound)
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    match health.ready() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    let mut body = String::new();
    if prometheus_client::encoding::text::encode_registry(&mut body, &health.registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], String::new());
    }
    process::encode(&mut body);
    body.push_str("# EOF\n");
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
}
