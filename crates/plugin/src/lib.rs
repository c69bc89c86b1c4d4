//! `kubectl bosun`: what the people on call type. The bosun binary, run as
//! `kubectl-bosun` (kubectl finds it on PATH) or as `bosun kubectl …`.
//!
//! Every command reads the cluster with the user's own kubeconfig and rights, never
//! the operator's. A database's instances are asked through a port-forward to their
//! instance manager's API (the certificate checked against the database's CA, the
//! token from its instance Secret), so `status` needs no exec and no route to the pod
//! network. Errors are one line on stderr and a non-zero exit.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod actions;
mod children;
mod kinds;
mod logs;
mod postgres;
mod render;
mod report;
mod status;

pub use kinds::Target;

/// `kubectl bosun …`, as kubectl runs it.
#[derive(Parser, Debug)]
#[command(name = "kubectl-bosun", bin_name = "kubectl bosun", version, about = "bosun's kubectl plugin")]
pub struct PluginCli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// The flags every command takes, as kubectl spells them.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    pub context: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One screen for a person: colour when on a terminal.
    #[default]
    Text,
    /// The same facts as one JSON document, for scripts.
    Json,
}

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// A database on one screen (instances, roles, nodes, lag, archiving, backups,
    /// recoverability, certificate, events), or any bosun object's conditions and
    /// children: `status NAME` (a PostgreSQL) or `status KIND/NAME`.
    Status {
        /// `NAME` (a PostgreSQL), `KIND/NAME` or `KIND NAME`.
        #[arg(required = true, num_args = 1..=2)]
        target: Vec<String>,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Make INSTANCE the primary of the PostgreSQL, and wait until it is.
    Switchover {
        postgresql: String,
        instance: String,
        /// How long to wait for the new primary.
        #[arg(long, default_value = "2m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Run a Backup now (a Backup's name, or a PostgreSQL with backups enabled), show
    /// its progress and wait for the result.
    Backup {
        name: String,
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Run a Backup's verification now (`spec.verify`) and wait for the result.
    Verify {
        backup: String,
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// psql on the PostgreSQL's primary (or a standby), as its superuser over the
    /// instance's socket (kubectl exec): `psql NAME [--replica] [-- PSQL ARGS]`.
    Psql {
        postgresql: String,
        /// A Ready standby instead of the primary.
        #[arg(long)]
        replica: bool,
        /// psql's own arguments.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Every instance's log, interleaved by time, each line after its pod's name.
    Logs {
        postgresql: String,
        /// Keep following.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the lines of the last DURATION (e.g. 10m).
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// The last N lines of each instance.
        #[arg(long)]
        tail: Option<i64>,
    },
    /// A tarball for a bug report: the object, its children, their events and the
    /// pods' logs, every Secret's values redacted: `report KIND/NAME` (or a
    /// PostgreSQL's NAME).
    Report {
        #[arg(required = true, num_args = 1..=2)]
        target: Vec<String>,
        /// The file to write (default: `bosun-report-KIND-NAME-TIME.tar.gz`).
        #[arg(short = 'f', long = "file")]
        file: Option<std::path::PathBuf>,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.trim().split_at(text.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 90s, 10m or 2h"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?} is not a duration like 90s, 10m or 2h")),
    };
    Ok(Duration::from_secs(seconds))
}

/// What a command needs: a client and the namespace.
pub struct Session {
    pub client: kube::Client,
    pub namespace: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

async fn session(global: &Global) -> anyhow::Result<Session> {
    let options = kube::config::KubeConfigOptions { context: global.context.clone(), ..Default::default() };
    let config = match &global.context {
        Some(_) => {
            kube::Config::from_kubeconfig(&options).await.map_err(|e| anyhow::anyhow!("no cluster access: {e}"))?
        }
        None => kube::Config::infer().await.map_err(|e| anyhow::anyhow!("no cluster access: {e}"))?,
    };
    let namespace = global.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| anyhow::anyhow!("no cluster access: {e}"))?;
    Ok(Session { client, namespace })
}

/// Run `cli`: what it printed went to stdout; an error is one line on stderr.
pub fn main(cli: PluginCli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each said once.
fn one_line(e: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
    }
    said.join(": ")
}

async fn run(cli: PluginCli) -> anyhow::Result<ExitCode> {
    let session = session(&cli.global).await?;
    match cli.command {
        PluginCommand::Status { target, output } => {
            let target = Target::parse(&target)?;
            status::run(&session, &target, output).await
        }
        PluginCommand::Switchover { postgresql, instance, timeout } => {
            actions::switchover(&session, &postgresql, &instance, timeout).await
        }
        PluginCommand::Backup { name, timeout } => actions::backup(&session, &name, timeout).await,
        PluginCommand::Verify { backup, timeout } => actions::verify(&session, &backup, timeout).await,
        PluginCommand::Psql { postgresql, replica, args } => {
            actions::psql(&session, &cli.global, &postgresql, replica, &args).await
        }
        PluginCommand::Logs { postgresql, follow, since, tail } => {
            logs::run(&session, &postgresql, follow, since, tail).await
        }
        PluginCommand::Report { target, file } => {
            let target = Target::parse(&target)?;
            report::run(&session, &target, file).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("ten minutes").unwrap_err().contains("is not a duration"));
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn an_error_and_its_causes_fit_one_line() {
        let e = anyhow::anyhow!("connection refused\n(os error 111)").context("the cluster's API did not answer");
        assert_eq!(one_line(&e), "the cluster's API did not answer: connection refused (os error 111)");
    }

    #[test]
    fn the_cli_parses_what_the_on_call_types() {
        let cli = PluginCli::try_parse_from(["kubectl-bosun", "-n", "shop", "status", "test-db", "-o", "json"]);
        let cli = cli.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.global.namespace.as_deref(), Some("shop"));
        assert!(matches!(cli.command, PluginCommand::Status { output: Output::Json, .. }));
        let psql = PluginCli::try_parse_from(["kubectl-bosun", "psql", "db", "--replica", "--", "-c", "select 1"]);
        match psql.map(|c| c.command) {
            Ok(PluginCommand::Psql { replica: true, args, .. }) => assert_eq!(args, ["-c", "select 1"]),
            other => panic!("{other:?}"),
        }
        assert!(PluginCli::try_parse_from(["kubectl-bosun", "status"]).is_err());
    }
}
