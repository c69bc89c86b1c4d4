//! The real database and storage servers of `hack/backends.sh` (supervised by
//! `bosun-localcluster`, called here as a library), for end-to-end tests of the backup
//! runner (`bosun backup run|list`, `bosun restore run`).
//!
//! ```ignore
//! let b = backends();                       // `hack/backends.sh up` once per test binary
//! let out = b.bosun(&["backup", "list", "--destination", "file:///tmp/x", "--name", "db"]).await;
//! assert!(out.ok, "{out}");
//! ```
//!
//! [`backends`] **panics** with the supervisor's error when the servers cannot start:
//! these tests never skip. [`Backends::start`] runs a second, independent set in a
//! state directory of its own (`BOSUN_BACKENDS_DIR`), for tests that stop a server.
//!
//! Every process a test starts gets exactly the variables `hack/backends.sh env`
//! exports (credentials, endpoints, mongo-tools on `PATH`) on top of a minimal
//! environment, never the developer's own cloud credentials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use bosun_localcluster::backends as localcluster;
/// The servers a test may stop and start again.
pub use bosun_localcluster::backends::{Component, MINIO};

use crate::repo_root;

/// How long one `bosun` run may take before the test fails (and the run is killed).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// A running set of servers and the variables that reach them.
#[derive(Clone, Debug)]
pub struct Backends {
    /// The state directory (`BOSUN_BACKENDS_DIR`).
    pub state: PathBuf,
    /// What `hack/backends.sh env` exports, `PATH` included (with mongo-tools).
    pub env: BTreeMap<String, String>,
    /// The set as its supervisor started it.
    pub servers: localcluster::Servers,
}

/// A finished process.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Exit status 0.
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

impl Outcome {
    /// The stdout as JSON (a runner's result line, `backup list`'s array).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }
}

/// The shared servers in `<repo>/.backends` (or `$BOSUN_BACKENDS_DIR`), started on
/// first use in this test binary (a no-op when they run).
pub fn backends() -> Backends {
    static SHARED: OnceLock<Backends> = OnceLock::new();
    SHARED.get_or_init(|| Backends::start(None)).clone()
}

/// The variables every child gets besides the servers' own.
fn base_env() -> Vec<(String, String)> {
    ["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "RUST_BACKTRACE", "RUST_LOG"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_owned(), v)))
        .collect()
}

/// How long the servers may take to become healthy.
const UP_TIMEOUT: Duration = Duration::from_secs(120);

impl Backends {
    /// The servers in `state` (default: the shared directory) started by the local
    /// cluster's supervisor (as `hack/backends.sh up`). Panics with its error if the
    /// servers do not come up.
    pub fn start(state: Option<&Path>) -> Backends {
        let dir = localcluster::state_dir(state).expect("the backends' state directory");
        let servers = match localcluster::up(&dir, UP_TIMEOUT) {
            Ok(servers) => servers,
            Err(e) => {
                let mut message = format!("the backends did not start; the backup runner tests need them: {e:#}");
                // A test's own set is not left running: its logs go into the message
                // instead. (The shared one is, for inspection, as the error says.)
                if state.is_some() {
                    message.push_str(&log_tails(&dir.join("logs")));
                    if let Err(e) = localcluster::down(&dir) {
                        message.push_str(&format!("\nstopping them failed too: {e:#}"));
                    }
                }
                panic!("{message}");
            }
        };
        let path = servers.path(&std::env::var("PATH").unwrap_or_default());
        let mut env: BTreeMap<String, String> =
            servers.variables().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        env.insert("PATH".to_owned(), path);
        if let Some(why) = &servers.mongo_missing {
            panic!("the backends run no MongoDB, which the backup runner tests need: {why}");
        }
        Backends { state: dir.path().to_owned(), env, servers }
    }

    /// This set's state directory, as its supervisor knows it.
    fn dir(&self) -> anyhow::Result<bosun_localcluster::supervise::StateDir> {
        localcluster::state_dir(Some(&self.state))
    }

    /// Stops this set's servers and removes its directory (`hack/backends.sh down`).
    pub fn down(&self) -> Result<(), String> {
        self.dir().and_then(|dir| localcluster::down(&dir)).map_err(|e| format!("{e:#}"))
    }

    /// Starts a server of this set again exactly as it was started (after a test
    /// killed it) and waits until the set is healthy again.
    pub fn restart(&self, server: &localcluster::Component) {
        let dir = self.dir().expect("the backends' state directory");
        localcluster::restart(&dir, server, UP_TIMEOUT)
            .unwrap_or_else(|e| panic!("starting {} again: {e:#}", server.name));
    }

    /// The pid of a running server of this set.
    pub fn pid(&self, server: &localcluster::Component) -> Option<u32> {
        self.dir().ok()?.pid(server)
    }

    /// Whether every server runs and answers (`hack/backends.sh status`).
    pub fn healthy(&self) -> bool {
        self.dir().and_then(|dir| localcluster::status(&dir)).is_ok_and(|(_, ok)| ok)
    }

    /// One of the exported variables; panics naming it when missing.
    pub fn var(&self, name: &str) -> &str {
        self.env.get(name).map(String::as_str).unwrap_or_else(|| panic!("hack/backends.sh env sets no {name}"))
    }

    /// A command with the servers' environment (and nothing of the developer's but
    /// PATH, HOME, locale and RUST_*), stdin closed, killed if dropped.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.env_clear().envs(base_env()).envs(&self.env).stdin(Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// The same as a blocking [`std::process::Command`] (for clean-up in `Drop`).
    pub fn blocking_command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut cmd = std::process::Command::new(program);
        cmd.env_clear().envs(base_env()).envs(&self.env).stdin(Stdio::null());
        cmd
    }

    /// Run `program args…` to completion.
    pub async fn run(&self, program: &str, args: &[&str]) -> Outcome {
        self.run_with(program, args, &[], RUN_TIMEOUT).await
    }

    /// Run `program args…` with extra (overriding) variables, failing the test after `timeout`.
    pub async fn run_with(&self, program: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Outcome {
        let mut cmd = self.command(program);
        cmd.args(args).envs(env.iter().copied());
        let out = tokio::time::timeout(timeout, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within {timeout:?}"))
            .unwrap_or_else(|e| panic!("starting {program}: {e}"));
        outcome(out)
    }

    /// Run `program args…` and panic with its output unless it succeeds; its stdout.
    pub async fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args).await;
        assert!(out.ok, "{program} {args:?} failed: {out}");
        out.stdout
    }

    /// Run the `bosun` binary with the servers' environment.
    pub async fn bosun(&self, args: &[&str]) -> Outcome {
        self.bosun_with(args, &[]).await
    }

    /// Run the `bosun` binary with extra (overriding) variables, e.g. a wrong password.
    pub async fn bosun_with(&self, args: &[&str], env: &[(&str, &str)]) -> Outcome {
        let bin = bosun_binary();
        self.run_with(bin.to_str().expect("utf-8 path"), args, env, RUN_TIMEOUT).await
    }

    /// `bosun <args>` started, not awaited: for tests that act while it runs.
    pub fn spawn_bosun(&self, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Child {
        let mut cmd = self.command(bosun_binary());
        cmd.args(args).envs(env.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().expect("starting bosun")
    }

    /// `postgresql://USER@HOST:PORT/db` (the password is in PGPASSWORD).
    pub fn postgres_url(&self, db: &str) -> String {
        format!("postgresql://{}@{}:{}/{db}", self.var("PGUSER"), self.var("PGHOST"), self.var("PGPORT"))
    }

    /// `mysql://USER@HOST:PORT/db` (the password is in MYSQL_PWD).
    pub fn mysql_url(&self, db: &str) -> String {
        format!("mysql://{}@{}:{}/{db}", self.var("MYSQL_USER"), self.var("MYSQL_HOST"), self.var("MYSQL_PORT"))
    }

    /// `mongodb://USER@HOST:PORT/db` (the password is in MONGODB_PASSWORD).
    pub fn mongodb_url(&self, db: &str) -> String {
        format!("mongodb://{}@{}:{}/{db}", self.var("MONGODB_USER"), self.var("MONGODB_HOST"), self.var("MONGODB_PORT"))
    }
}

/// `$BOSUN_BIN`, else `target/debug/bosun` (cargo builds it for the bosun crate's tests).
pub fn bosun_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("BOSUN_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target"));
    let path = target.join("debug/bosun");
    assert!(path.exists(), "{} does not exist: build it with `cargo build -p bosun`", path.display());
    path
}

/// The last lines of every log in `dir`.
fn log_tails(dir: &Path) -> String {
    let mut text = String::new();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    logs.sort();
    for log in logs {
        let content = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = content.lines().collect();
        text.push_str(&format!("\n--- {} (last 30 lines)\n", log.display()));
        text.push_str(&lines[lines.len().saturating_sub(30)..].join("\n"));
    }
    text
}

fn outcome(out: std::process::Output) -> Outcome {
    Outcome {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A name no other test (or earlier run) uses: `prefix_` and random lowercase hex,
/// valid as a database name in every engine and as a key segment.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// A MinIO of its own for a test, on `ip` (e.g. the real node's bridge address, so
/// pods reach it), a free port and a fresh data directory with one empty bucket;
/// stopped and removed when dropped. The binary is the shared set's (built by
/// `hack/backends.sh`, which [`backends`] runs). It can be stopped and started again
/// on the same address and data, as an outage of the store.
#[derive(Debug)]
pub struct Minio {
    child: Option<std::process::Child>,
    binary: PathBuf,
    address: String,
    /// The console's address (MinIO serves one; nothing here uses it).
    console: String,
    dir: PathBuf,
    /// `http://IP:PORT`.
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
}

impl Minio {
    pub fn start(ip: &str) -> Minio {
        let binary = backends().servers.bins.minio.join("minio");
        // Its console's port too: left to MinIO, it is another ephemeral port, which the
        // kernel may hand out as this one again once released ("--console-address port
        // cannot be same as --address port"). Both held at once, they differ.
        let listen = || {
            std::net::TcpListener::bind((ip, 0))
                .unwrap_or_else(|e| panic!("no free port on {ip} (is the real node up?): {e}"))
        };
        let (api, console) = (listen(), listen());
        let port_of = |l: &std::net::TcpListener| l.local_addr().expect("a bound port").port();
        let (port, console_port) = (port_of(&api), port_of(&console));
        drop((api, console));
        let dir = std::env::temp_dir().join(format!("bosun-minio-{ip}-{port}"));
        let bucket = "backups".to_owned();
        // MinIO makes a bucket of each top-level directory of a fresh drive.
        std::fs::create_dir_all(dir.join("data").join(&bucket)).expect("minio data directory");
        let (access_key, secret_key) = ("bosun-test".to_owned(), "bosun-test-secret".to_owned());
        let address = format!("{ip}:{port}");
        let console = format!("{ip}:{console_port}");
        let endpoint = format!("http://{address}");
        let mut m = Minio { child: None, binary, address, console, dir, endpoint, bucket, access_key, secret_key };
        m.run();
        m
    }

    /// Start the server and wait until it is ready.
    fn run(&mut self) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("minio.log")).expect("minio log");
        let child = std::process::Command::new(&self.binary)
            .args(["server", "--quiet", "--address", &self.address, "--console-address", &self.console])
            .arg(self.dir.join("data"))
            .env_clear()
            .env("HOME", &self.dir)
            .env("MINIO_ROOT_USER", &self.access_key)
            .env("MINIO_ROOT_PASSWORD", &self.secret_key)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        self.child = Some(child);
        let ready = format!("{}/minio/health/ready", self.endpoint);
        for _ in 0..300 {
            let ok = std::process::Command::new("curl")
                .args(["-sf", "--max-time", "2", &ready])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "MinIO on {} did not become ready: {}",
            self.endpoint,
            std::fs::read_to_string(self.dir.join("minio.log")).unwrap_or_default()
        );
    }

    /// Stop the server; its data stays for [`Minio::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freeze the server (SIGSTOP): connections are accepted by the kernel and then
    /// hang, as with a store that stopped answering, until [`Minio::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Let a paused server go on (SIGCONT): the requests that waited are answered.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().map(|c| c.id().to_string()).expect("MinIO is running");
        let ok = std::process::Command::new("kill").args([signal, &pid]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {pid} (MinIO)");
    }

    /// Start a stopped server again, on the same address with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// A client of its bucket, for a test to read what was stored.
    pub fn store(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(&self.bucket)
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(&self.access_key)
            .with_secret_access_key(&self.secret_key)
            .build()
            .expect("an S3 client of the test's MinIO")
    }

    /// The variables that reach it, as the runner reads them.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ]
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
