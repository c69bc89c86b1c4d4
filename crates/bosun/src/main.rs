//! `bosun`: the controller manager, the CRDs it serves, an offline renderer, and the
//! backup and restore runners the Backup and Restore jobs run.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use serde::Deserialize;

#[derive(Parser, Debug)]
#[command(name = "bosun", version, about = "A Kubernetes operator for web apps, databases, config and backups")]
struct Cli {
    /// Log format.
    #[arg(long, env = "BOSUN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller manager against the cluster in KUBECONFIG (or in-cluster config).
    Run(Box<bosun_runtime::RunArgs>),
    /// Print the CustomResourceDefinitions, or write them as config/crd/ is laid out.
    Crd {
        /// Write `bases/<group>_<plural>.yaml` and `kustomization.yaml` into this directory.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Write the generated manifests: `<dir>/crd/` from the types, `<dir>/rbac/` from the
    /// permissions, `<dir>/webhook/`, and the generated parts of the pages in the docs directory.
    Manifests {
        /// The kustomize config directory.
        #[arg(long, default_value = "config")]
        config_dir: PathBuf,
        /// The user documentation: one page per kind, its reference blocks generated.
        #[arg(long, default_value = "docs")]
        docs_dir: PathBuf,
    },
    /// Print the children the custom resources in FILE would produce, without a cluster.
    Render {
        /// A YAML file with one or more custom resources; `-` reads standard input.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// Back up a database into object storage, or list the backups (the Backup CronJob's runner).
    #[command(subcommand)]
    Backup(bosun_runner::cli::BackupCommand),
    /// Load a backup into a database (the Restore Job's runner).
    #[command(subcommand)]
    Restore(bosun_runner::cli::RestoreCommand),
    /// Archive or restore a PostgreSQL's WAL (its archive_command and restore_command).
    #[command(subcommand)]
    Wal(bosun_runner::cli::WalCommand),
    /// Restore a Backup's newest good dump into a throwaway server and check it (the
    /// Backup's verification CronJob's runner).
    #[command(subcommand)]
    Verify(bosun_runner::cli::VerifyCommand),
    /// Make a new PostgreSQL data directory from a base backup and the archived WAL,
    /// set to recover to a target and be promoted there (a new database's first start).
    Recover(bosun_runner::cli::RecoverArgs),
    /// PostgreSQL's instance manager: the first process of a database pod, which runs
    /// the server (the command after `--`) in the role bosun gives the instance.
    Instance(Box<bosun_instance::InstanceArgs>),
    /// PostgreSQL's pooler: the first process of a pooler pod (`spec.pooler`), which
    /// runs PgBouncer and pauses it while the primary changes.
    Pooler(Box<bosun_instance::pooler::PoolerArgs>),
    /// A major upgrade of a PostgreSQL's data with pg_upgrade --link (the upgrade
    /// Job's containers: `copy` in the old major's image, `run` in the new one's).
    #[command(subcommand)]
    Upgrade(bosun_instance::upgrade::UpgradeCommand),
    /// bosun's kubectl plugin (`kubectl bosun …` when this binary is on PATH as
    /// `kubectl-bosun`): status, switchover, backup, verify, psql, logs, report.
    Kubectl(bosun_plugin::PluginCli),
    /// Copy this binary to PATH: how a database pod gets `bosun wal` without a change
    /// to its image (an init container of the runner image runs it).
    Install {
        /// Where to put the copy (made executable).
        path: PathBuf,
    },
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let started = std::time::Instant::now();
    use bosun_runner::cli::{self as runner, BackupCommand, RestoreCommand, VerifyCommand, WalCommand};
    // Run as `kubectl-bosun` (kubectl's plugin), the arguments are the plugin's.
    let called = std::env::args_os().next().map(PathBuf::from);
    if called.as_ref().and_then(|p| p.file_name()).is_some_and(|n| n.to_string_lossy().starts_with("kubectl-bosun")) {
        return Ok(bosun_plugin::main(bosun_plugin::PluginCli::parse()));
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Kubectl(plugin) => return Ok(bosun_plugin::main(plugin)),
        Command::Crd { out_dir: None } => print!("{}", bosun_controller::kinds::crds_yaml()?),
        Command::Crd { out_dir: Some(dir) } => write_crds(&dir)?,
        Command::Manifests { config_dir, docs_dir } => {
            write_crds(&config_dir.join("crd"))?;
            write_files(&config_dir.join("rbac"), bosun_controller::rbac::files()?)?;
            write_files(&config_dir.join("webhook"), bosun_runtime::webhook::files()?)?;
            std::fs::create_dir_all(&docs_dir).with_context(|| format!("creating {}", docs_dir.display()))?;
            for (path, page) in
                bosun_api::docs::pages(&bosun_controller::kinds::crds(), &docs_dir, &config_dir.join("samples"))
                    .map_err(anyhow::Error::msg)?
            {
                std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Command::Render { file } => print!("{}", render(&file)?),
        Command::Run(args) => {
            init_logging(cli.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(usize::from(args.worker_threads))
                .enable_all()
                .build()?;
            runtime.block_on(bosun_runtime::run(*args))?;
        }
        // The runners print one JSON result line on stdout and log to stderr.
        Command::Backup(BackupCommand::Run(args)) => {
            init_logging(cli.log_format);
            let outcome = runner_runtime()?.block_on(runner::backup_run(&args));
            return Ok(runner::report(outcome, args.result_file.as_ref(), started));
        }
        Command::Backup(BackupCommand::List(args)) => {
            let outcome = runner_runtime()?.block_on(runner::backup_list(&args));
            return Ok(runner::report(outcome, None, started));
        }
        Command::Restore(RestoreCommand::Run(args)) => {
            init_logging(cli.log_format);
            let outcome = runner_runtime()?.block_on(runner::restore_run(&args));
            return Ok(runner::report(outcome, args.result_file.as_ref(), started));
        }
        Command::Verify(VerifyCommand::Run(args)) => {
            init_logging(cli.log_format);
            let outcome = runner_runtime()?.block_on(runner::verify_run(&args));
            return Ok(runner::report(outcome, args.result_file.as_ref(), started));
        }
        Command::Wal(WalCommand::Push(args)) => {
            return Ok(runner::report(runner_runtime()?.block_on(runner::wal_push(&args)), None, started));
        }
        Command::Wal(WalCommand::Fetch(args)) => {
            return Ok(runner::report(runner_runtime()?.block_on(runner::wal_fetch(&args)), None, started));
        }
        Command::Recover(args) => {
            init_logging(cli.log_format);
            let outcome = runner_runtime()?.block_on(runner::recover(&args));
            return Ok(runner::report(outcome, args.result_file.as_ref(), started));
        }
        Command::Instance(args) => {
            init_logging(cli.log_format);
            // One thread: it waits on a server, a few files and a few programs.
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            return Ok(runtime.block_on(bosun_instance::run(&args)));
        }
        Command::Pooler(args) => {
            init_logging(cli.log_format);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            return Ok(runtime.block_on(bosun_instance::pooler::run(*args)));
        }
        Command::Upgrade(command) => {
            init_logging(cli.log_format);
            return Ok(bosun_instance::upgrade::main(&command));
        }
        Command::Install { path } => install(&path)?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `bosun install PATH`: this executable copied to PATH, mode 0755, through a
/// temporary name so a reader never runs half a binary.
fn install(path: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let me = std::env::current_exe().context("finding this executable")?;
    let partial = path.with_extension("partial");
    std::fs::copy(&me, &partial).with_context(|| format!("copying {} to {}", me.display(), partial.display()))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("renaming {} to {}", partial.display(), path.display()))?;
    Ok(())
}

/// The runners stream one pipeline: two workers let compression and part uploads
/// overlap while keeping the footprint small.
fn runner_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// Where kube's client logs response bodies it could not decode (at WARN) or parse as
/// an error (at DEBUG): whole objects, env values included. Capped whatever RUST_LOG
/// says, so no object body reaches a log.
const BODY_LOGGING_TARGET: &str = "kube_client::client=error";

fn init_logging(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn,kube_client=warn"));
    if let Ok(cap) = BODY_LOGGING_TARGET.parse() {
        filter = filter.add_directive(cap);
    }
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
}

fn write_crds(dir: &std::path::Path) -> anyhow::Result<()> {
    let bases = dir.join("bases");
    if bases.exists() {
        std::fs::remove_dir_all(&bases).with_context(|| format!("clearing {}", bases.display()))?;
    }
    std::fs::create_dir_all(&bases).with_context(|| format!("creating {}", bases.display()))?;
    write_files(dir, bosun_controller::kinds::crd_files()?)
}

fn write_files(dir: &std::path::Path, files: Vec<(String, String)>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (path, yaml) in files {
        let path = dir.join(path);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn render(file: &PathBuf) -> anyhow::Result<String> {
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    }
    let mut documents = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("{}: document {i} is not valid YAML", file.display()))?;
        documents.push(value);
    }
    let children = bosun_controller::kinds::render(&documents)?;
    let mut out = String::new();
    for child in children {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&child)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// clap's own checks of every subcommand (duplicate names, conflicting flags), which
    /// otherwise fail only when that subcommand is run.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
