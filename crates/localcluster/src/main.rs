//! `localcluster`: the CLI of the local cluster's supervisor.
//!
//! ```text
//! localcluster cluster up|down|status|kubeconfig|env|sa-kubeconfig|restart-apiserver
//!                                                   (hack/controlplane/cluster.sh VERB)
//! localcluster backends up|down|env|status|check   (hack/backends.sh VERB)
//! ```

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use bosun_localcluster::{backends, controlplane};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "localcluster", about = "The local cluster's supervisor")]
struct Cli {
    #[command(subcommand)]
    set: Set,
}

#[derive(Debug, Subcommand)]
enum Set {
    /// The local control plane and its real node, in $BOSUN_CLUSTER_DIR (default
    /// <repo>/.cluster).
    Cluster {
        #[command(subcommand)]
        verb: ClusterVerb,
    },
    /// The backup tests' servers (PostgreSQL, MariaDB, MinIO, fake-gcs-server,
    /// Azurite, FerretDB), in $BOSUN_BACKENDS_DIR (default <repo>/.backends).
    Backends {
        #[command(subcommand)]
        verb: Verb,
    },
}

#[derive(Debug, Subcommand)]
enum ClusterVerb {
    /// Build if needed, start the local cluster (no-op if healthy), wait for health.
    Up,
    /// Stop all components and remove the state directory.
    Down,
    /// Show components, pids and ports (exit 1 unless all run).
    Status,
    /// Print the admin kubeconfig's path.
    Kubeconfig,
    /// Print an 'export KUBECONFIG=...' line.
    Env,
    /// Print a kubeconfig for ServiceAccount NAMESPACE/SERVICEACCOUNT.
    SaKubeconfig {
        namespace: String,
        service_account: String,
        /// How long its token is valid (24h, 90m, 1h30m).
        #[arg(default_value = "24h", value_parser = duration)]
        duration: Duration,
    },
    /// Stop kube-apiserver, wait OUTAGE_SECONDS, start it again with the same
    /// arguments and wait until it is ready (chaos tests).
    RestartApiserver {
        #[arg(default_value = "0", value_parser = seconds)]
        outage_seconds: Duration,
    },
    /// Break or mend a real node (tests of losing one): stop kills its kubelet,
    /// containerd and containers at once (power loss), start brings them back;
    /// partition cuts bosun-node-2 off the network, heal undoes it. Start and heal
    /// wait until the cluster is healthy again.
    Node {
        action: NodeVerb,
        /// bosun-node or bosun-node-2.
        name: String,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NodeVerb {
    Stop,
    Start,
    Partition,
    Heal,
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("'{text}' is no duration like 24h or 90m: {e}"))
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("OUTAGE_SECONDS must be a number of seconds, not '{text}'"))
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Build what is missing (cached), start the servers (no-op if healthy), wait for health.
    Up {
        /// Seconds to wait for health.
        #[arg(long, env = "BOSUN_BACKENDS_TIMEOUT", default_value_t = 120)]
        timeout: u64,
    },
    /// Stop every server and remove the state directory.
    Down,
    /// Print export lines for the servers (eval "$(hack/backends.sh env)").
    Env,
    /// Show servers, pids and ports (exit 1 unless all run and are healthy).
    Status,
    /// Prove passwords, uploads, listing and dumps work with the real clients.
    Check,
}

fn main() -> ExitCode {
    let result = match Cli::parse().set {
        Set::Cluster { verb } => cluster(verb),
        Set::Backends { verb } => run(verb),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("localcluster: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a status; exit 1 unless all is well.
fn report((text, ok): (String, bool)) -> ExitCode {
    print!("{text}");
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn cluster(verb: ClusterVerb) -> Result<ExitCode> {
    let dir = controlplane::state_dir(None)?;
    match verb {
        ClusterVerb::Up => {
            controlplane::up(&dir)?;
        }
        ClusterVerb::Down => controlplane::down(&dir)?,
        ClusterVerb::Status => return controlplane::status(&dir).map(report),
        ClusterVerb::Kubeconfig => {
            controlplane::running(&dir)?;
            println!("{}", dir.join("kubeconfig").display());
        }
        ClusterVerb::Env => {
            controlplane::running(&dir)?;
            println!("export KUBECONFIG={}", backends::shell_quote(&dir.join("kubeconfig").display().to_string()));
        }
        ClusterVerb::SaKubeconfig { namespace, service_account, duration } => {
            print!("{}", controlplane::sa_kubeconfig(&dir, &namespace, &service_account, duration)?);
        }
        ClusterVerb::RestartApiserver { outage_seconds } => controlplane::restart_apiserver(&dir, outage_seconds)?,
        ClusterVerb::Node { action, name } => {
            let action = match action {
                NodeVerb::Stop => controlplane::NodeAction::Stop,
                NodeVerb::Start => controlplane::NodeAction::Start,
                NodeVerb::Partition => controlplane::NodeAction::Partition,
                NodeVerb::Heal => controlplane::NodeAction::Heal,
            };
            controlplane::node(&dir, action, &name)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run(verb: Verb) -> Result<ExitCode> {
    let dir = backends::state_dir(None)?;
    match verb {
        Verb::Up { timeout } => {
            backends::up(&dir, Duration::from_secs(timeout))?;
            bosun_localcluster::log("use: eval \"$(hack/backends.sh env)\"");
        }
        Verb::Down => backends::down(&dir)?,
        Verb::Env => print!("{}", backends::running(&dir)?.export_lines()),
        Verb::Status => return backends::status(&dir).map(report),
        Verb::Check => {
            let (text, fails) = backends::check(&dir)?;
            print!("{text}");
            if fails > 0 {
                bail!("{fails} check(s) failed");
            }
            bosun_localcluster::log("all checks passed");
        }
    }
    Ok(ExitCode::SUCCESS)
}
