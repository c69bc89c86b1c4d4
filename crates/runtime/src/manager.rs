//! Starting the controllers, leading, and stopping cleanly.
//!
//! ```text
//!  connect ─▶ serve /metrics /healthz /readyz (every replica)
//!          ─▶ controllers: watches and caches (every replica; a standby's stay warm)
//!          ─▶ [leader election: wait for the Lease] ─▶ reconciles start
//!  SIGTERM ─▶ stop taking work ─▶ in-flight reconciles finish (bounded) ─▶ release Lease ─▶ exit 0
//!  Lease lost or not renewable ─▶ exit 1 at once (never run leaderless)
//! ```

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bosun_controller::checkpoint;
use bosun_controller::kinds::{self, Task};
use bosun_controller::metrics::Metrics;
use bosun_controller::{Context, Scope};
use kube::Client;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::args::RunArgs;
use crate::http::{self, Health};
use crate::leader::{self, Leadership, LeaseConfig, LeaseError};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to Kubernetes (set KUBECONFIG or run in a cluster): {0}")]
    Client(#[source] kube::Error),
    #[error("the Kubernetes API is not reachable: {0}")]
    Unreachable(#[source] kube::Error),
    #[error("installing signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error("serving metrics and health on {addr}: {source}")]
    Http {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid flags: {0}")]
    Flags(String),
    #[error("admission webhooks: {0}")]
    Webhooks(String),
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// Run the controller manager until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let started = std::time::Instant::now();
    let requests = crate::client::Requests::default();
    let client = crate::client::counted(requests.clone()).await.map_err(Error::Client)?;
    let version = client.apiserver_version().await.map_err(Error::Unreachable)?;
    info!(server = %version.git_version, "connected to Kubernetes");

    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let lease = lease_config(&args, &client, &identity)?;

    let metrics = Arc::new(Metrics::default());
    let leadership = Arc::new(Leadership::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    leadership.register(&mut registry);
    crate::client::register(&requests, &mut registry);
    let webhook_metrics = Arc::new(crate::webhook::server::Metrics::default());
    // A bad policy file stops bosun before it serves anything, naming the key.
    let policy = if crate::webhook::enabled(&args) {
        webhook_metrics.register(&mut registry);
        Some(crate::webhook::load_policy(&args).map_err(Error::Flags)?)
    } else {
        None
    };
    let shard_status = Arc::new(crate::shards::ShardStatus::default());
    if args.shards.is_some() {
        shard_status.register(&mut registry);
    }
    let mut settings =
        bosun_controller::Settings { runner_image: args.runner_image.clone(), ..bosun_controller::Settings::default() };
    settings.postgres.image = args.postgres_image.clone();
    settings.postgres.pooler_image = args.pooler_image.clone();
    settings.postgres.volume_permissions = args.postgres_volume_permissions;
    settings.postgres.unanswered_failover = args.postgres_unanswered_failover;
    settings.postgres.runner_image = args.runner_image.clone();
    settings.postgres.certificates = postgres_certificates(&args).map_err(Error::Flags)?;
    settings.stack =
        bosun_resources::stacks::Images { mysql: args.mysql_image.clone(), redis: args.redis_image.clone() };
    settings.rollout_pace.settle = args.appconfig_settle;
    settings.rollout_pace.min_interval = args.appconfig_min_interval;
    settings.stack_deletion.timeout = args.stack_deletion_timeout;
    let rollouts = Arc::new(bosun_controller::window::Window::new(
        args.max_rollouts_in_flight,
        bosun_controller::window::DEFAULT_HOLD,
    ));
    rollouts.register(&mut registry);
    // One context per set of controllers: the manager's, and with --shards one per
    // shard held (its own caches, queues, gate and checkpoints; the metrics and the
    // window of first rollouts in flight shared).
    let make_ctx = {
        let (client, identity, metrics) = (client.clone(), identity.clone(), metrics.clone());
        move |shard: Option<String>| {
            let mut ctx = Context::new(client.clone(), &identity, metrics.clone());
            ctx.settings = settings.clone();
            ctx.shard = shard;
            ctx.rollouts = rollouts.clone();
            ctx
        }
    };
    let ctx = Arc::new(make_ctx(None));

    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;
    // The webhook's serving certificate: until one is loaded, this replica is not Ready
    // (its Service sends it no admission) and its server accepts no connection.
    let certificate = policy.as_ref().map(|_| Arc::new(crate::webhook::server::Certificate::default()));
    let health = Arc::new(Health {
        registry,
        api_reachable: true.into(),
        leadership: leadership.clone(),
        ctx: ctx.clone(),
        shards: shard_status.clone(),
        webhook_certificate: certificate.clone(),
    });
    let addr = http::serve(args.metrics_bind_address, health.clone(), shutdown.clone())
        .await
        .map_err(|source| Error::Http { addr: args.metrics_bind_address, source })?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    let mut withdraw = None;
    if let (Some(policy), Some(certificate)) = (policy, certificate) {
        // Every replica serves admissions; only the leader writes the CA bundle.
        let own = own_namespace(&args, &client);
        let serving = crate::webhook::Serving { certificate, metrics: webhook_metrics };
        (_, withdraw) =
            crate::webhook::start(&args, policy, client.clone(), own, ctx.clone(), serving, shutdown.clone())
                .await
                .map_err(Error::Webhooks)?;
    }
    spawn_api_probe(client.clone(), health, shutdown.clone());
    let ended = match (args.shards, lease) {
        (Some(shards), Some(lease)) => {
            let make_ctx = move |selector: String| make_ctx(Some(selector));
            crate::shards::run(ctx, make_ctx, &args, &client, lease, shards, shard_status, shutdown)
                .await
                .map_err(Error::from)
        }
        (_, lease) => reconcile(ctx, &args, &client, lease, leadership, started, shutdown).await,
    };
    if let Some(withdraw) = withdraw {
        // Bounded: an unreachable apiserver must not keep a stopped bosun alive.
        if tokio::time::timeout(std::time::Duration::from_secs(10), withdraw.run()).await.is_err() {
            warn!("the webhook configurations were not withdrawn within 10 s");
        }
    }
    ended
}

/// Run the controllers, leading when there is no lease or once it is held, until
/// shutdown (or, with a lease, until it is lost).
async fn reconcile(
    ctx: Arc<Context>,
    args: &RunArgs,
    client: &Client,
    lease: Option<LeaseConfig>,
    leadership: Arc<Leadership>,
    started: std::time::Instant,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    // Controllers start on every replica: a standby's watches and caches run (and
    // /readyz reflects them), its reconciles wait at the gate until it leads.
    let controllers = run_controllers(ctx.clone(), args, shutdown.clone());
    tokio::pin!(controllers);
    // bosun's records of its last applies, from before this start: with them the
    // first reconciles skip the children that are as bosun left them.
    let place =
        checkpoint::Place { namespace: own_namespace(args, client), lease: args.leader_elect_lease_name.clone() };
    let Some(lease) = lease else {
        ctx.checkpoints.load_bounded(client, &place).await;
        leadership.set(true);
        ctx.leader.open();
        info!(startup_ms = started.elapsed().as_millis() as u64, "leader election disabled; reconciling");
        ctx.checkpoints.keep(client, &place, &mut controllers).await;
        ctx.checkpoints.flush(client, &place).await;
        return Ok(());
    };

    let mgr = tokio::select! {
        mgr = leader::acquire(client, &lease) => mgr,
        () = &mut controllers => return Ok(()),
    };
    ctx.checkpoints.load_bounded(client, &place).await;
    leadership.set(true);
    ctx.leader.open();
    info!(startup_ms = started.elapsed().as_millis() as u64, "leading; reconciling");
    tokio::select! {
        () = ctx.checkpoints.keep(client, &place, &mut controllers) => {
            // Only a shutdown ends the controllers; they have finished their work.
            ctx.checkpoints.flush(client, &place).await;
            leadership.set(false);
            if let Err(err) = mgr.release().await {
                warn!(%err, "could not release the leader lease; a standby takes over when it expires");
            } else {
                info!(lease = %lease.name, "released the leader lease");
            }
            Ok(())
        }
        lost = leader::hold(&mgr, &lease) => {
            // Stop writing at once: returning ends the process and every in-flight reconcile.
            ctx.leader.shut();
            leadership.set(false);
            error!(error = %lost, "leadership lost; exiting");
            Err(lost.into())
        }
    }
}

/// The Lease settings, or `None` when leader election is off (default: off outside a cluster).
fn lease_config(args: &RunArgs, client: &Client, identity: &str) -> Result<Option<LeaseConfig>, Error> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    if args.shards.is_some() && args.leader_elect == Some(false) {
        return Err(Error::Flags(
            "--shards divides the objects with leases: it cannot run with --leader-elect=false".into(),
        ));
    }
    if !args.leader_elect.unwrap_or(in_cluster || args.shards.is_some()) {
        return Ok(None);
    }
    let namespace = own_namespace(args, client);
    let cfg = LeaseConfig {
        name: args.leader_elect_lease_name.clone(),
        namespace,
        identity: identity.to_owned(),
        duration: args.leader_elect_lease_duration,
        renew: args.leader_elect_renew_deadline,
        retry: args.leader_elect_retry_period,
    };
    cfg.validate().map_err(Error::Flags)?;
    Ok(Some(cfg))
}

/// bosun's own namespace: the pod's (`POD_NAMESPACE`, or the service account's), else
/// the kubeconfig's.
fn own_namespace(args: &RunArgs, client: &Client) -> String {
    args.leader_elect_namespace
        .clone()
        .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
        .map(|ns| ns.trim().to_owned())
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "bosun".to_owned());
    format!("{host}-{:06x}", rand_suffix())
}

fn rand_suffix() -> u32 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (nanos ^ std::process::id().rotate_left(16)) & 0xff_ffff
}

/// Run the enabled controllers until `shutdown` is cancelled, then let in-flight
/// reconciles finish (bounded by `--shutdown-grace`).
pub async fn run_controllers(ctx: Arc<Context>, args: &RunArgs, shutdown: CancellationToken) {
    let scope = Scope { namespaces: args.namespaces.clone() };
    let concurrency = args.concurrency;
    let controllers = args.enabled_controllers();
    for name in &controllers {
        ctx.metrics.init(name);
    }
    info!(?controllers, namespaces = ?scope.namespaces, "starting controllers");

    let stop = futures::FutureExt::shared(futures::FutureExt::boxed(shutdown.clone().cancelled_owned()));
    let tasks: Vec<Task> = kinds::ALL
        .iter()
        .filter(|served| served.controllers.iter().any(|c| controllers.contains(c)))
        .map(|served| {
            (served.start)(kinds::Start {
                ctx: ctx.clone(),
                targets: scope.targets(),
                concurrency,
                shutdown: stop.clone(),
                enabled: controllers.clone(),
            })
        })
        .collect();
    let all = futures::future::join_all(tasks);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        () = shutdown.cancelled() => {
            // Reconciles not yet started (a standby's all) do not start any more.
            ctx.leader.shut();
            info!(grace = ?args.shutdown_grace, "shutting down: finishing in-flight reconciles");
            if tokio::time::timeout(args.shutdown_grace, &mut all).await.is_err() {
                warn!("in-flight reconciles did not finish within the shutdown grace period");
            }
        }
    }
    info!("controllers stopped");
}

/// Keep `/readyz` honest about the API: ask for its version every 3 s.
fn spawn_api_probe(client: Client, health: Arc<Health>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(3)) => {}
                () = shutdown.cancelled() => return,
            }
            let ok =
                tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await.is_ok_and(|r| r.is_ok());
            health.api_reachable.store(ok, Ordering::SeqCst);
        }
    });
}

fn spawn_signal_handler(token: CancellationToken) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::Signals)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => info!("received SIGTERM"),
            _ = int.recv() => info!("received SIGINT"),
        }
        token.cancel();
    });
    Ok(())
}

/// The PostgreSQL certificates' lifetimes of the flags, when they make a plan that
/// works: each renewal before its expiry, the CA's rotation long enough for both of
/// its overlaps.
fn postgres_certificates(args: &RunArgs) -> Result<bosun_resources::pki::Lifetimes, String> {
    let life = bosun_resources::pki::Lifetimes {
        serving: args.postgres_cert_validity,
        serving_renew_before: args.postgres_cert_renew_before,
        ca: args.postgres_ca_validity,
        ca_renew_before: args.postgres_ca_renew_before,
        overlap: args.postgres_ca_overlap,
    };
    if life.serving_renew_before >= life.serving {
        return Err("--postgres-cert-renew-before must be shorter than --postgres-cert-validity".to_owned());
    }
    if life.ca_renew_before >= life.ca {
        return Err("--postgres-ca-renew-before must be shorter than --postgres-ca-validity".to_owned());
    }
    if life.ca_renew_before <= 2 * life.overlap {
        return Err("--postgres-ca-renew-before must be longer than twice --postgres-ca-overlap".to_owned());
    }
    Ok(life)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn lifetimes(flags: &[&str]) -> Result<bosun_resources::pki::Lifetimes, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("bosun").chain(flags.iter().copied())).map_err(|e| e.to_string())?;
        postgres_certificates(&cli.run)
    }

    #[test]
    fn postgres_certificate_lifetimes_that_cannot_work_are_refused_naming_the_flag() {
        let defaults = lifetimes(&[]).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(defaults, bosun_resources::pki::Lifetimes::default());
        let short = ["--postgres-cert-validity=4m", "--postgres-cert-renew-before=3m", "--postgres-ca-validity=20m"];
        let short = [&short[..], &["--postgres-ca-renew-before=19m", "--postgres-ca-overlap=2m"]].concat();
        assert_eq!(lifetimes(&short).map(|l| l.overlap.as_secs()), Ok(120));
        let renew = lifetimes(&["--postgres-cert-validity=1h", "--postgres-cert-renew-before=2h"]).unwrap_err();
        assert!(renew.contains("--postgres-cert-renew-before"), "{renew}");
        let overlap = lifetimes(&["--postgres-ca-overlap=5000h"]).unwrap_err();
        assert!(overlap.contains("--postgres-ca-overlap"), "{overlap}");
    }
}
