//! `localcluster`: the CLI of the local cluster's supervisor.
//!
//! ```text
//! localcluster backends up|down|env|status|check   (hack/backends.sh VERB)
//! localcluster ports N                              free ports, one line
//! localcluster pki control-plane|node …            the cluster's certificates
//! localcluster kubeconfig …                         a kubeconfig of the local apiserver
//! ```
//!
//! The last three are what `hack/controlplane/cluster.sh` asks of it.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use bosun_localcluster::kubeconfig::{self, Credentials};
use bosun_localcluster::pki::{self, Pki};
use bosun_localcluster::{backends, ports};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "localcluster", about = "The local cluster's supervisor")]
struct Cli {
    #[command(subcommand)]
    set: Set,
}

#[derive(Debug, Subcommand)]
enum Set {
    /// The backup tests' servers (PostgreSQL, MariaDB, MinIO, fake-gcs-server,
    /// Azurite, FerretDB), in $BOSUN_BACKENDS_DIR (default <repo>/.backends).
    Backends {
        #[command(subcommand)]
        verb: Verb,
    },
    /// N distinct free ports on 127.0.0.1, below the ephemeral range, space-separated.
    Ports { n: usize },
    /// The local cluster's certificates and keys.
    Pki {
        #[command(subcommand)]
        part: PkiPart,
    },
    /// A kubeconfig of the local apiserver, as a client certificate of the PKI or a
    /// token read from stdin.
    Kubeconfig {
        /// The PKI's directory (its ca.crt is the cluster's CA).
        #[arg(long)]
        certs: PathBuf,
        /// The apiserver's port on 127.0.0.1.
        #[arg(long)]
        port: u16,
        /// The identity whose certificate the user presents (<certs>/<identity>.crt).
        #[arg(long, conflicts_with = "token_stdin", required_unless_present = "token_stdin")]
        identity: Option<String>,
        /// Authenticate with the token on stdin instead.
        #[arg(long, requires = "user")]
        token_stdin: bool,
        /// The user's name in the kubeconfig (default: the identity).
        #[arg(long)]
        user: Option<String>,
        /// The context's namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Write here (mode 600) instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PkiPart {
    /// A new CA, the apiserver's serving certificate, the control plane's client
    /// certificates and the ServiceAccount key pair.
    ControlPlane {
        #[arg(long)]
        dir: PathBuf,
        /// A name of the apiserver (IP address or DNS name), repeated.
        #[arg(long = "name", required = true)]
        names: Vec<String>,
    },
    /// The real node's client certificates, signed by the directory's CA.
    Node {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        node_name: String,
    },
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
        Set::Backends { verb } => run(verb),
        Set::Ports { n } => ports::free_ports(n).map(|p| {
            println!("{}", p.iter().map(u16::to_string).collect::<Vec<_>>().join(" "));
            ExitCode::SUCCESS
        }),
        Set::Pki { part } => make_pki(part).map(|()| ExitCode::SUCCESS),
        Set::Kubeconfig { certs, port, identity, token_stdin, user, namespace, out } => {
            write_kubeconfig(&certs, port, identity, token_stdin, user, namespace, out).map(|()| ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            bosun_localcluster::log(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn make_pki(part: PkiPart) -> Result<()> {
    match part {
        PkiPart::ControlPlane { dir, names } => Pki::create(&dir, &names).map(|_| ()),
        PkiPart::Node { dir, node_name } => Pki::at(&dir).clients(&pki::node(&node_name)),
    }
}

fn write_kubeconfig(
    certs: &std::path::Path,
    port: u16,
    identity: Option<String>,
    token_stdin: bool,
    user: Option<String>,
    namespace: Option<String>,
    out: Option<PathBuf>,
) -> Result<()> {
    let credentials = match identity.clone() {
        Some(name) if !token_stdin => Credentials::Certificate(name),
        _ => {
            let mut token = String::new();
            std::io::stdin().read_to_string(&mut token).context("reading the token from stdin")?;
            Credentials::Token(token.trim().to_owned())
        }
    };
    let user = user.or(identity).unwrap_or_default();
    let config = kubeconfig::kubeconfig(&Pki::at(certs), port, &user, &credentials, namespace.as_deref())?;
    match out {
        Some(path) => kubeconfig::write(&path, &config),
        None => {
            print!("{}", kubeconfig::to_yaml(&config)?);
            Ok(())
        }
    }
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
        Verb::Status => {
            let (text, ok) = backends::status(&dir)?;
            print!("{text}");
            if !ok {
                return Ok(ExitCode::FAILURE);
            }
        }
        Verb::Check => {
            let (text, fails) = backends::check(&dir)?;
            print!("{text}");
            if fails > 0 {
                anyhow::bail!("{fails} check(s) failed");
            }
            bosun_localcluster::log("all checks passed");
        }
    }
    Ok(ExitCode::SUCCESS)
}
