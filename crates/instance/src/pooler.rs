//! `bosun pooler`: the first process of a pooler pod (`spec.pooler`). It writes
//! PgBouncer's configuration from its settings and the mounted Secrets, runs
//! `pgbouncer` as its child, reloads it when a certificate or the password changes,
//! and serves bosun's API beside it (the instance API's server, certificate and
//! token): pause before a change of primary, resume after it, the pooler's
//! statistics for Prometheus.
//!
//! ```text
//! GET  /healthz     200: PgBouncer answers its console (startup, liveness, readiness)
//! GET  /readyz      the same
//! GET  /metrics     SHOW STATS and SHOW POOLS, and the pauses, in Prometheus' text format (no token: no secret in it)
//! GET  /v1/status   {"paused": bool, "expiredPauses": n}
//! POST /v1/pause    {"maxMs": n}: clients' new transactions wait (PAUSE) until resumed, or n ms at most
//! POST /v1/resume   once the read-write Service reaches a primary: server connections made anew (RECONNECT), clients let through (RESUME)
//! ```
//!
//! Clients authenticate as the database's own roles: PgBouncer looks their password
//! verifier up in the database ([`AUTH_USER`], through the function the primary's
//! setup keeps, `crate::setup`), over TLS verified against the database's CAs, and
//! passes SCRAM through. Clients must use TLS, with the certificate the database
//! serves. The console is reached only through the pod's own socket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::{self, Reply, health, json, keys, reply};

/// The port PgBouncer listens on (the Services' target port).
pub const PORT: u16 = 6432;
/// The role PgBouncer looks clients' passwords up as, and its schema and function.
pub const AUTH_USER: &str = "bosun_pooler";
pub const AUTH_SCHEMA: &str = "bosun_pooler";
pub const LOOKUP_FUNCTION: &str = "lookup";
/// The database the lookups run in (PgBouncer's `auth_dbname`).
pub const AUTH_DATABASE: &str = "postgres";
/// The console's user: PgBouncer lets it in through the socket, without a password,
/// when it runs as PgBouncer's own uid.
pub const CONSOLE_USER: &str = "pgbouncer";

/// The settings' variables, named for the Deployment's builder.
pub mod env {
    pub const SERVER_HOST: &str = "BOSUN_POOLER_SERVER_HOST";
    pub const SERVER_PORT: &str = "BOSUN_POOLER_SERVER_PORT";
    pub const READ_ONLY: &str = "BOSUN_POOLER_READ_ONLY";
    pub const MODE: &str = "BOSUN_POOLER_MODE";
    pub const DEFAULT_POOL_SIZE: &str = "BOSUN_POOLER_DEFAULT_POOL_SIZE";
    pub const MAX_CLIENT_CONN: &str = "BOSUN_POOLER_MAX_CLIENT_CONN";
    pub const API_DIR: &str = "BOSUN_POOLER_API_DIR";
    pub const API_PORT: &str = "BOSUN_POOLER_API_PORT";
    pub const PASSWORD_FILE: &str = "BOSUN_POOLER_PASSWORD_FILE";
    pub const RUN_DIR: &str = "BOSUN_POOLER_RUN_DIR";
}

pub mod paths {
    pub const METRICS: &str = "/metrics";
    pub const STATUS: &str = "/v1/status";
    pub const PAUSE: &str = "/v1/pause";
    pub const RESUME: &str = "/v1/resume";
}

/// `bosun pooler`'s settings.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct PoolerArgs {
    /// The database's Service the pooler connects to (its certificate names it).
    #[arg(long, env = env::SERVER_HOST)]
    pub server_host: String,
    #[arg(long, env = env::SERVER_PORT, default_value_t = 5432)]
    pub server_port: u16,
    /// In front of the standbys: never paused, and no primary looked for.
    #[arg(long, env = env::READ_ONLY, default_value_t = false)]
    pub read_only: bool,
    /// PgBouncer's `pool_mode`: `transaction` or `session`.
    #[arg(long, env = env::MODE, default_value = "transaction", value_parser = ["transaction", "session"])]
    pub mode: String,
    #[arg(long, env = env::DEFAULT_POOL_SIZE, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub default_pool_size: u32,
    #[arg(long, env = env::MAX_CLIENT_CONN, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100000))]
    pub max_client_conn: u32,
    /// The instance Secret's files: the certificate served to clients and its key,
    /// the CAs the server is verified with, the API's certificate and token.
    #[arg(long, env = env::API_DIR)]
    pub api_dir: PathBuf,
    #[arg(long, env = env::API_PORT, default_value_t = api::PORT)]
    pub api_port: u16,
    /// The file holding [`AUTH_USER`]'s password.
    #[arg(long, env = env::PASSWORD_FILE)]
    pub password_file: PathBuf,
    /// Where the configuration, the socket and the pid file go (an emptyDir).
    #[arg(long, env = env::RUN_DIR, default_value = "/var/run/pgbouncer")]
    pub run_dir: PathBuf,
    /// The PgBouncer program.
    #[arg(long, default_value = "pgbouncer")]
    pub pgbouncer: PathBuf,
    /// The psql program (the console and the look for a primary): a name is looked
    /// for first among the image's PostgreSQL's own programs ([`crate::commands::program`]).
    #[arg(long, default_value = "psql")]
    pub psql: PathBuf,
}

/// The TLS files of the instance Secret the pooler uses: what PostgreSQL serves
/// (clients see the same certificate through the pooler), and the CAs that verify it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Files {
    pub fn of(dir: &Path) -> Files {
        let server =
            Files { cert: dir.join(keys::SERVER_CERT), key: dir.join(keys::SERVER_KEY), ca: dir.join(keys::SERVER_CA) };
        if server.cert.exists() {
            return server;
        }
        Files { cert: dir.join(keys::CERT), key: dir.join(keys::KEY), ca: dir.join(keys::BUNDLE) }
    }

    /// What they and the password hold now: PgBouncer reloads when it changes.
    fn generation(&self, password_file: &Path) -> Vec<u8> {
        [self.cert.as_path(), self.key.as_path(), self.ca.as_path(), password_file]
            .iter()
            .flat_map(|p| std::fs::read(p).unwrap_or_default())
            .collect()
    }
}

/// `pgbouncer.ini`. Every value comes from bosun's settings or fixed names: a
/// host name is checked to be one before it gets here.
pub fn ini(args: &PoolerArgs, files: &Files) -> String {
    let run = args.run_dir.display();
    format!(
        "; Written by bosun pooler at each start: changes made here are lost.\n\
         [databases]\n\
         * = host={host} port={port}\n\
         \n\
         [pgbouncer]\n\
         listen_addr = 0.0.0.0\n\
         listen_port = {PORT}\n\
         unix_socket_dir = {run}\n\
         pidfile = {run}/pgbouncer.pid\n\
         auth_type = hba\n\
         auth_hba_file = {run}/hba.conf\n\
         auth_file = {run}/userlist.txt\n\
         auth_user = {AUTH_USER}\n\
         auth_dbname = {AUTH_DATABASE}\n\
         auth_query = SELECT usename, passwd FROM {AUTH_SCHEMA}.{LOOKUP_FUNCTION}($1)\n\
         pool_mode = {mode}\n\
         default_pool_size = {pool}\n\
         max_client_conn = {clients}\n\
         ignore_startup_parameters = extra_float_digits,options\n\
         client_tls_sslmode = require\n\
         client_tls_cert_file = {cert}\n\
         client_tls_key_file = {key}\n\
         client_tls_protocols = tlsv1.3\n\
         server_tls_sslmode = verify-full\n\
         server_tls_ca_file = {ca}\n\
         server_tls_protocols = tlsv1.3\n\
         server_login_retry = 1\n\
         tcp_user_timeout = 5000\n\
         tcp_keepalive = 1\n\
         tcp_keepidle = 5\n\
         tcp_keepintvl = 1\n\
         tcp_keepcnt = 3\n\
         log_connections = 0\n\
         log_disconnections = 0\n\
         stats_period = 5\n",
        host = args.server_host,
        port = args.server_port,
        mode = args.mode,
        pool = args.default_pool_size,
        clients = args.max_client_conn,
        cert = files.cert.display(),
        key = files.key.display(),
        ca = files.ca.display(),
    )
}

/// Who may connect through the network: over TLS only, with a SCRAM password of the
/// database's roles; never to the console, never as the lookup role or the console's
/// user.
pub const HBA: &str = "\
# Written by bosun pooler at each start: changes made here are lost.
hostssl pgbouncer all       0.0.0.0/0 reject
hostssl pgbouncer all       ::/0      reject
hostssl all       bosun_pooler 0.0.0.0/0 reject
hostssl all       bosun_pooler ::/0      reject
hostssl all       pgbouncer 0.0.0.0/0 reject
hostssl all       pgbouncer ::/0      reject
hostssl all       all       0.0.0.0/0 scram-sha-256
hostssl all       all       ::/0      scram-sha-256
";

/// `userlist.txt`: the lookup role's password only (PgBouncer's quoting: `"` doubled).
pub fn userlist(password: &str) -> String {
    format!("\"{AUTH_USER}\" \"{}\"\n", password.trim_end_matches('\n').replace('"', "\"\""))
}

/// What the API shares with the supervisor.
#[derive(Debug, Default)]
pub struct Shared {
    /// The pause in force: when it started and when it ends at the latest.
    pause: Mutex<Option<Pause>>,
    /// Pauses that outlived their bound and were lifted by the pooler itself.
    expired: AtomicU64,
    /// Whether the last pause was lifted by its bound (answered to the resume).
    last_expired: std::sync::atomic::AtomicBool,
    /// Pauses asked for, and the longest one (ms).
    pauses: AtomicU64,
    longest_pause_ms: AtomicU64,
}

#[derive(Clone, Copy, Debug)]
struct Pause {
    since: Instant,
    until: Instant,
}

impl Shared {
    fn pause(&self) -> Option<Pause> {
        *self.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_pause(&self, pause: Option<Pause>) -> Option<Pause> {
        let mut guard = self.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = *guard;
        *guard = pause;
        if let (Some(ended), None) = (before, pause) {
            let ms = u64::try_from(ended.since.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.longest_pause_ms.fetch_max(ms, Ordering::Relaxed);
        }
        before
    }
}

/// `/v1/pause`'s body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// The longest the pause may last: past it the pooler resumes on its own.
    pub max_ms: u64,
    /// Answer once every server connection is released (the transactions in flight
    /// ended): a switchover stops the old primary only then. Without it the answer
    /// comes at once (a lost primary's connections may never be released).
    #[serde(default)]
    pub drain: bool,
}

/// `/v1/resume`'s answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeAnswer {
    /// The pause had outlived its bound: the pooler had let clients through on its own.
    pub expired: bool,
}

/// `/v1/status`'s answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolerStatus {
    pub paused: bool,
    /// Pauses lifted by the pooler itself since it started (each one bound passed).
    pub expired_pauses: u64,
}

/// The pooler's program: its console, its server.
#[derive(Debug)]
pub struct Pooler {
    pub args: PoolerArgs,
    pub shared: Arc<Shared>,
}

impl Pooler {
    /// A command on the console (through the socket), its rows unaligned, tab-separated,
    /// with the columns' names first.
    async fn console(&self, command: &str, timeout: Duration) -> Result<String, String> {
        let mut psql = Command::new(crate::commands::program(&self.args.psql));
        psql.arg("-h")
            .arg(&self.args.run_dir)
            .args(["-p", &PORT.to_string(), "-U", CONSOLE_USER, "-d", "pgbouncer", "-X", "-q", "-A", "-F", "\t"])
            .args(["-P", "footer=off", "-c", command])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(timeout, psql.output())
            .await
            .map_err(|_| format!("{command}: no answer within {timeout:?}"))?
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("{command}: {}", crate::commands::tail(&String::from_utf8_lossy(&out.stderr), 300)))
        }
    }

    async fn answers(&self) -> bool {
        self.console("SHOW VERSION", Duration::from_secs(3)).await.is_ok()
    }

    /// Whether the read-write Service reaches a primary now, connecting as the lookup
    /// role (verified as PgBouncer verifies it).
    async fn primary_reached(&self, files: &Files) -> bool {
        let password = std::fs::read_to_string(&self.args.password_file).unwrap_or_default();
        let conninfo = format!(
            "host={} port={} dbname={AUTH_DATABASE} user={AUTH_USER} sslmode=verify-full sslrootcert={} connect_timeout=2",
            self.args.server_host,
            self.args.server_port,
            files.ca.display()
        );
        let mut psql = Command::new(crate::commands::program(&self.args.psql));
        psql.args(["-X", "-q", "-tA", "-c", "SELECT pg_is_in_recovery()", &conninfo])
            .env("PGPASSWORD", password.trim_end_matches('\n'))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        matches!(
            tokio::time::timeout(Duration::from_secs(3), psql.output()).await,
            Ok(Ok(out)) if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "f"
        )
    }

    /// PAUSE, waiting at most `max`: `Ok` once every server connection is released
    /// (in-flight transactions finished); the pause then ends at `max` at the latest.
    /// New transactions wait from the moment PgBouncer reads the command.
    async fn pause(&self, max: Duration) -> Result<(), String> {
        let started = Instant::now();
        self.shared.pauses.fetch_add(1, Ordering::Relaxed);
        self.shared.last_expired.store(false, Ordering::Relaxed);
        self.shared.set_pause(Some(Pause { since: started, until: started + max }));
        match self.console("PAUSE", max).await {
            Ok(_) => {
                info!(waited_ms = started.elapsed().as_millis() as u64, "paused: clients' transactions wait");
                Ok(())
            }
            // "already suspended/paused" is a pause in force.
            Err(e) if e.contains("already") => Ok(()),
            // The bound came while transactions were still in flight (or before psql
            // had PgBouncer's answer): new transactions waited all along, and the
            // pause ends as any pause past its bound does, reported as such.
            Err(e) if started.elapsed() >= max => {
                self.lift(true).await;
                Err(e)
            }
            Err(e) => {
                warn!(%e, "the pause did not take hold: resumed");
                self.lift(false).await;
                Err(e)
            }
        }
    }

    /// Server connections made anew, then clients let through.
    async fn lift(&self, expired: bool) {
        for command in ["RECONNECT", "RESUME"] {
            if let Err(e) = self.console(command, Duration::from_secs(5)).await
                && !e.contains("not paused")
            {
                warn!(%e, "{command} failed");
            }
        }
        if let Some(pause) = self.shared.set_pause(None) {
            let ms = pause.since.elapsed().as_millis() as u64;
            if expired {
                self.shared.expired.fetch_add(1, Ordering::Relaxed);
                self.shared.last_expired.store(true, Ordering::Relaxed);
                warn!(paused_ms = ms, "the pause outlived its bound: clients let through without a word from bosun");
            } else {
                info!(paused_ms = ms, "resumed");
            }
        }
    }

    /// Resume once the read-write Service reaches a primary (a standby pooler at once),
    /// or when the pause's bound comes; nothing when no pause is in force.
    async fn resume(&self) {
        let files = Files::of(&self.args.api_dir);
        if !self.args.read_only {
            while let Some(pause) = self.shared.pause() {
                if Instant::now() >= pause.until || self.primary_reached(&files).await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        self.lift(false).await;
    }

    async fn metrics(&self) -> Result<String, String> {
        let stats = self.console("SHOW STATS", Duration::from_secs(3)).await?;
        let pools = self.console("SHOW POOLS", Duration::from_secs(3)).await?;
        let mut out = prometheus_text(&stats, &pools);
        let paused = u8::from(self.shared.pause().is_some());
        for (name, kind, help, value) in [
            (
                "bosun_pooler_paused",
                "gauge",
                "Whether bosun paused the pooler (a change of primary).",
                u64::from(paused),
            ),
            ("bosun_pooler_pauses_total", "counter", "Pauses asked for.", self.shared.pauses.load(Ordering::Relaxed)),
            (
                "bosun_pooler_pause_expired_total",
                "counter",
                "Pauses that outlived their bound and were lifted by the pooler.",
                self.shared.expired.load(Ordering::Relaxed),
            ),
            (
                "bosun_pooler_longest_pause_milliseconds",
                "gauge",
                "The longest pause since the pooler started.",
                self.shared.longest_pause_ms.load(Ordering::Relaxed),
            ),
        ] {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"));
        }
        Ok(out)
    }
}

/// SHOW STATS and SHOW POOLS (psql's unaligned, tab-separated rows, names first) in
/// Prometheus' text format: `pgbouncer_stats_<column>{database}` (counters for the
/// `total_` columns, gauges for the averages) and `pgbouncer_pools_<column>{database,user}`
/// (gauges); columns that are not numbers are labels or left out.
pub fn prometheus_text(stats: &str, pools: &str) -> String {
    let mut out = String::new();
    for (prefix, command, text, labels) in [
        ("pgbouncer_stats", "SHOW STATS", stats, &["database"][..]),
        ("pgbouncer_pools", "SHOW POOLS", pools, &["database", "user"][..]),
    ] {
        let mut lines = text.lines().filter(|l| !l.is_empty());
        let Some(header) = lines.next() else { continue };
        let columns: Vec<&str> = header.split('\t').collect();
        let rows: Vec<Vec<&str>> =
            lines.map(|l| l.split('\t').collect()).filter(|r: &Vec<&str>| r.len() == columns.len()).collect();
        for (i, column) in columns.iter().enumerate() {
            if labels.contains(column)
                || !column.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            let values: Vec<(String, &str)> = rows
                .iter()
                .filter(|r| r[i].parse::<f64>().is_ok())
                .map(|r| {
                    let set: Vec<String> = labels
                        .iter()
                        .filter_map(|l| {
                            columns.iter().position(|c| c == l).map(|j| format!("{l}=\"{}\"", escape(r[j])))
                        })
                        .collect();
                    (set.join(","), r[i])
                })
                .collect();
            if values.is_empty() {
                continue;
            }
            let name = format!("{prefix}_{column}");
            let kind = if prefix == "pgbouncer_stats" && column.starts_with("total_") { "counter" } else { "gauge" };
            out.push_str(&format!("# HELP {name} PgBouncer's {column} ({command}).\n# TYPE {name} {kind}\n"));
            for (labels, value) in values {
                out.push_str(&format!("{name}{{{labels}}} {value}\n"));
            }
        }
    }
    out
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl api::Handler for Pooler {
    async fn handle(&self, token: &str, req: Request<Incoming>) -> Reply {
        let (method, path) = (req.method().clone(), req.uri().path().to_owned());
        if method == Method::GET {
            match path.as_str() {
                api::paths::HEALTH | api::paths::READY => return health(self.answers().await),
                paths::METRICS => {
                    return match self.metrics().await {
                        Ok(text) => {
                            let mut r = reply(StatusCode::OK, text);
                            r.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
                            );
                            r
                        }
                        Err(e) => reply(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
                    };
                }
                _ => {}
            }
        }
        if let Some(refused) = api::unauthorized(&req, token) {
            return refused;
        }
        match (method, path.as_str()) {
            (Method::GET, paths::STATUS) => json(&PoolerStatus {
                paused: self.shared.pause().is_some(),
                expired_pauses: self.shared.expired.load(Ordering::Relaxed),
            }),
            (Method::POST, paths::PAUSE) => {
                let asked = match api::read_json::<PauseRequest>(req).await {
                    Ok(asked) => asked,
                    Err(reply) => return reply,
                };
                if asked.max_ms == 0 || asked.max_ms > 600_000 {
                    return reply(StatusCode::BAD_REQUEST, "maxMs must be between 1 and 600000\n");
                }
                if self.args.read_only {
                    return reply(StatusCode::NO_CONTENT, "");
                }
                // The pause holds (or fails and is lifted) in the background; with
                // `drain` the answer waits for it, half the bound at most: a longer
                // transaction then fails with the old primary, the new ones still wait.
                let max = Duration::from_millis(asked.max_ms);
                let pooler = Pooler { args: self.args.clone(), shared: self.shared.clone() };
                let (done, held) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    let _ = done.send(pooler.pause(max).await);
                });
                if !asked.drain {
                    return reply(StatusCode::ACCEPTED, "");
                }
                match tokio::time::timeout(max / 2, held).await {
                    Ok(Ok(Ok(()))) => reply(StatusCode::NO_CONTENT, ""),
                    Ok(Ok(Err(e))) => reply(StatusCode::GATEWAY_TIMEOUT, format!("not paused: {e}\n")),
                    Ok(Err(_)) => reply(StatusCode::INTERNAL_SERVER_ERROR, "the pause was lost\n"),
                    Err(_) => reply(StatusCode::ACCEPTED, "paused; transactions still in flight\n"),
                }
            }
            (Method::POST, paths::RESUME) => {
                // The body, if any, is not read: resuming takes no terms.
                let _ = req.into_body().collect().await;
                self.resume().await;
                json(&ResumeAnswer { expired: self.shared.last_expired.swap(false, Ordering::Relaxed) })
            }
            (_, paths::STATUS | paths::PAUSE | paths::RESUME) => {
                reply(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
            }
            _ => reply(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

/// Write a file only its owner reads.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, path)
}

/// The files PgBouncer reads, as the settings and the mounted Secrets say now.
fn write_files(args: &PoolerArgs, files: &Files) -> Result<(), String> {
    let password =
        std::fs::read_to_string(&args.password_file).map_err(|e| format!("{}: {e}", args.password_file.display()))?;
    if password.trim().is_empty() {
        return Err(format!("{} is empty", args.password_file.display()));
    }
    for (name, text) in
        [("pgbouncer.ini", ini(args, files)), ("hba.conf", HBA.to_owned()), ("userlist.txt", userlist(&password))]
    {
        write_private(&args.run_dir.join(name), &text).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// `bosun pooler`: run PgBouncer until it ends or a signal asks to stop; the exit
/// status is the container's.
pub async fn run(args: PoolerArgs) -> std::process::ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    if !is_host_name(&args.server_host) {
        warn!(host = %args.server_host, "the server host is not a host name");
        return std::process::ExitCode::from(2);
    }
    let files = Files::of(&args.api_dir);
    if let Err(e) = write_files(&args, &files) {
        warn!("PgBouncer's files cannot be written: {e}");
        return std::process::ExitCode::from(1);
    }
    let mut child =
        match Command::new(&args.pgbouncer).arg(args.run_dir.join("pgbouncer.ini")).kill_on_drop(true).spawn() {
            Ok(child) => child,
            Err(e) => {
                warn!(program = %args.pgbouncer.display(), "PgBouncer cannot start: {e}");
                return std::process::ExitCode::from(1);
            }
        };
    info!(server = %args.server_host, mode = %args.mode, "PgBouncer started");
    let stop = CancellationToken::new();
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        if let Ok(mut signals) = signal(kind) {
            let stop = stop.clone();
            tokio::spawn(async move {
                signals.recv().await;
                stop.cancel();
            });
        }
    }
    let pooler = Arc::new(Pooler { args: args.clone(), shared: Arc::new(Shared::default()) });
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], args.api_port));
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            tokio::spawn(api::serve(listener, args.api_dir.clone(), pooler.clone(), stop.clone()));
        }
        Err(e) => warn!(%addr, "the API cannot listen: {e}"),
    }
    let mut generation = files.generation(&args.password_file);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut looked = Instant::now();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.ok(),
            () = stop.cancelled() => {
                // Safe shutdown: transactions in flight end, then PgBouncer exits.
                if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT);
                }
                break child.wait().await.ok();
            }
            _ = tick.tick() => {
                if pooler.shared.pause().is_some_and(|p| Instant::now() >= p.until) {
                    pooler.lift(true).await;
                }
                if looked.elapsed() >= Duration::from_secs(5) {
                    looked = Instant::now();
                    let files = Files::of(&args.api_dir);
                    let now = files.generation(&args.password_file);
                    if now != generation {
                        match write_files(&args, &files) {
                            Ok(()) => match pooler.console("RELOAD", Duration::from_secs(5)).await {
                                Ok(_) => { info!("a certificate or the password changed: PgBouncer reloaded"); generation = now; }
                                Err(e) => warn!("RELOAD failed: {e}"),
                            },
                            Err(e) => warn!("PgBouncer's files cannot be rewritten: {e}"),
                        }
                    }
                }
            }
        }
    };
    let code = status.and_then(|s| s.code()).unwrap_or(1);
    info!(code, "PgBouncer ended");
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// A DNS name (what goes into `host=` unquoted).
pub fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> PoolerArgs {
        PoolerArgs {
            server_host: "db.shop.svc".into(),
            server_port: 5432,
            read_only: false,
            mode: "transaction".into(),
            default_pool_size: 20,
            max_client_conn: 1000,
            api_dir: "/etc/bosun-instance".into(),
            api_port: 8000,
            password_file: "/etc/bosun-pooler/password".into(),
            run_dir: "/var/run/pgbouncer".into(),
            pgbouncer: "pgbouncer".into(),
            psql: "psql".into(),
        }
    }

    #[test]
    fn the_configuration_verifies_the_server_and_asks_clients_for_tls() {
        let files = Files::of(Path::new("/etc/bosun-instance"));
        let ini = ini(&args(), &files);
        for line in [
            "* = host=db.shop.svc port=5432",
            "pool_mode = transaction",
            "default_pool_size = 20",
            "client_tls_sslmode = require",
            "server_tls_sslmode = verify-full",
            "auth_query = SELECT usename, passwd FROM bosun_pooler.lookup($1)",
            "auth_dbname = postgres",
            "auth_type = hba",
        ] {
            assert!(ini.lines().any(|l| l == line), "{line} missing:\n{ini}");
        }
        // The server's certificate is verified with what verifies the database's own.
        assert!(ini.contains("server_tls_ca_file = /etc/bosun-instance/ca-bundle.crt"), "{ini}");
    }

    #[test]
    fn the_network_reaches_neither_the_console_nor_the_lookup_role() {
        let rules: Vec<Vec<&str>> =
            HBA.lines().filter(|l| !l.starts_with('#')).map(|l| l.split_whitespace().collect()).collect();
        assert!(rules.iter().all(|r| r[0] == "hostssl"), "TLS only");
        let first = |db: &str, user: &str| {
            rules.iter().find(|r| (r[1] == db || r[1] == "all") && (r[2] == user || r[2] == "all")).map(|r| r[4])
        };
        assert_eq!(first("pgbouncer", "app"), Some("reject"));
        assert_eq!(first("app", AUTH_USER), Some("reject"));
        assert_eq!(first("app", CONSOLE_USER), Some("reject"));
        assert_eq!(first("app", "app"), Some("scram-sha-256"));
    }

    #[test]
    fn the_password_is_quoted_as_pgbouncer_reads_it() {
        assert_eq!(userlist("a\"b\n"), "\"bosun_pooler\" \"a\"\"b\"\n");
    }

    #[test]
    fn only_host_names_reach_the_configuration() {
        assert!(is_host_name("db.shop.svc"));
        for bad in ["", "db shop", "db\nport=1", "-db", "db..svc", "db;x"] {
            assert!(!is_host_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn statistics_become_prometheus_series() {
        let stats = "database\ttotal_xact_count\ttotal_query_count\tavg_query_time\n\
                     app\t120\t360\t250\npgbouncer\t1\t1\t0\n";
        let pools = "database\tuser\tcl_active\tcl_waiting\tsv_idle\tpool_mode\napp\tapp\t3\t0\t2\ttransaction\n";
        let text = prometheus_text(stats, pools);
        assert!(text.contains("# TYPE pgbouncer_stats_total_xact_count counter\n"), "{text}");
        assert!(text.contains("pgbouncer_stats_total_xact_count{database=\"app\"} 120\n"), "{text}");
        assert!(text.contains("# TYPE pgbouncer_stats_avg_query_time gauge\n"), "{text}");
        assert!(text.contains("pgbouncer_pools_cl_active{database=\"app\",user=\"app\"} 3\n"), "{text}");
        assert!(!text.contains("pool_mode"), "not a number: {text}");
        assert!(!text.contains("pgbouncer_stats_database"), "a label, not a series: {text}");
    }
}
