//! Starting the controllers and stopping them cleanly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bosun_api::webapp::{apps_v1, example_v1};
use bosun_controller::{Context, Scope, demovolume, voteconfig, webapp};
use kube::Client;
use kube::runtime::controller;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::args::{ControllerName, RunArgs};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to Kubernetes (set KUBECONFIG or run in a cluster): {0}")]
    Client(#[source] kube::Error),
    #[error("the Kubernetes API is not reachable: {0}")]
    Unreachable(#[source] kube::Error),
    #[error("installing signal handlers: {0}")]
    Signals(#[source] std::io::Error),
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Run the controller manager until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let client = Client::try_default().await.map_err(Error::Client)?;
    let version = client.apiserver_version().await.map_err(Error::Unreachable)?;
    info!(server = %version.git_version, "connected to Kubernetes");

    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;
    run_until(client, &args, shutdown).await;
    Ok(())
}

/// Run the enabled controllers until `shutdown` is cancelled, then let in-flight
/// reconciles finish (bounded by `--shutdown-grace`).
pub async fn run_until(client: Client, args: &RunArgs, shutdown: CancellationToken) {
    let ctx = Arc::new(Context::new(client));
    let scope = Scope { namespaces: args.namespaces.clone() };
    let config = controller::Config::default().concurrency(args.concurrency);
    let controllers = args.enabled_controllers();
    info!(controllers = ?controllers.iter().map(|c| c.as_str()).collect::<Vec<_>>(), namespaces = ?scope.namespaces, "starting controllers");

    let mut tasks: Vec<Task> = Vec::new();
    for name in controllers {
        for ns in scope.targets() {
            let stop = shutdown.clone().cancelled_owned();
            match name {
                ControllerName::WebApp => {
                    tasks.push(Box::pin(webapp::run::<apps_v1::WebApp>(ctx.clone(), ns.clone(), config.clone(), stop)));
                    let stop = shutdown.clone().cancelled_owned();
                    tasks.push(Box::pin(webapp::run::<example_v1::WebApp>(ctx.clone(), ns, config.clone(), stop)));
                }
                ControllerName::VoteConfig => {
                    tasks.push(Box::pin(voteconfig::run(ctx.clone(), ns, config.clone(), stop)));
                }
                ControllerName::DemoVolume => {
                    tasks.push(Box::pin(demovolume::run(ctx.clone(), ns, config.clone(), stop)));
                }
            }
        }
    }
    let all = futures::future::join_all(tasks);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        () = shutdown.cancelled() => {
            info!(grace = ?args.shutdown_grace, "shutting down: finishing in-flight reconciles");
            if tokio::time::timeout(args.shutdown_grace, &mut all).await.is_err() {
                warn!("in-flight reconciles did not finish within the shutdown grace period");
            }
        }
    }
    info!("controllers stopped");
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
