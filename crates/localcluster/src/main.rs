//! `localcluster`: the CLI of the local cluster's supervisor.
//!
//! ```text
//! localcluster backends up|down|env|status|check   (hack/backends.sh VERB)
//! ```

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use bosun_localcluster::backends;
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
    let Set::Backends { verb } = Cli::parse().set;
    match run(verb) {
        Ok(code) => code,
        Err(e) => {
            bosun_localcluster::log(&format!("{e:#}"));
            ExitCode::FAILURE
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
