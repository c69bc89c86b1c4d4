//! PostgreSQL's instance manager, `bosun instance`: the first process of every
//! database pod, in the binary the pod already has (`bosun install`). No Kubernetes
//! client in it: bosun gives the instance its role through the pod's role label,
//! which the kubelet shows as a file.
//!
//! ```text
//! settings ── the typed contract of the program and of the StatefulSet's builder
//! role ────── the role: the label's file, or what bosun told ahead of it
//! data ────── what the data directory holds, and what to do about it (pure)
//! commands ── the PostgreSQL programs it runs (a trait, faked in the tests)
//! access ──── who may connect and how: pg_hba.conf, TLS, the way to the primary
//! setup ───── the primary's passwords and replication role
//! status ──── what an instance says of itself (shared with the controller)
//! ping ────── whether the server accepts connections (the probes), without a process
//! api ─────── the status and control API over HTTPS, for bosun only
//! client ──── asking an instance's API (bosun does; a silent primary asks its standbys)
//! manager ─── wait for a role → prepare the data → serve → follow the role
//! upgrade ─── `bosun upgrade`: a major upgrade's Job (pg_upgrade --link)
//! ```

pub mod access;
pub mod api;
pub mod client;
pub mod commands;
pub mod data;
pub mod fence;
pub mod manager;
pub mod ping;
pub mod pooler;
pub mod role;
pub mod scram;
pub mod settings;
pub mod setup;
pub mod status;
pub mod upgrade;

pub use settings::InstanceArgs;

/// `bosun instance`: run until the server ends or a signal asks to stop; the exit
/// status is the container's.
pub async fn run(args: &InstanceArgs) -> std::process::ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let stop = tokio_util::sync::CancellationToken::new();
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        match signal(kind) {
            Ok(mut signals) => {
                let stop = stop.clone();
                tokio::spawn(async move {
                    signals.recv().await;
                    stop.cancel();
                });
            }
            Err(e) => tracing::warn!("signal {kind:?} cannot be handled: {e}"),
        }
    }
    let shared = std::sync::Arc::new(api::Shared::default());
    if let Some(dir) = &args.api_dir {
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], args.api_port));
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let api = std::sync::Arc::new(api::Api { args: args.clone(), shared: shared.clone() });
                tokio::spawn(api::serve(listener, dir.clone(), api, stop.clone()));
            }
            // bosun cannot ask or tell it anything; the label still works.
            Err(e) => tracing::error!(%addr, "the API cannot listen: {e}"),
        }
    }
    let outcome = manager::run(args, &commands::Commands { args }, &shared, &stop).await;
    std::process::ExitCode::from(outcome.exit_code())
}

#[cfg(test)]
mod tests;
