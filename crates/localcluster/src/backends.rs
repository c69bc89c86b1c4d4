//! The real database and storage servers the backup runner's tests run against, on
//! this machine and without Kubernetes (`hack/backends.sh up|down|env|status|check`):
//!
//! | server | what |
//! |---|---|
//! | `postgres` | PostgreSQL 15 (Debian's `postgresql-15`), scram-sha-256 everywhere |
//! | `mariadb` | MariaDB (Debian's `mariadb-server`), `root@127.0.0.1` with a password |
//! | `minio` | S3 (MinIO, built from the Go module proxy) |
//! | `fake-gcs-server` | GCS emulator (Go module proxy, with the XML API uploads object_store uses) |
//! | `azurite` | Azure Blob emulator (Azurite, from npm) |
//! | `ferretdb` | MongoDB's wire protocol over the PostgreSQL above (FerretDB v1), SCRAM, with mongo-tools; left out, with the reason, when those cannot be built |
//!
//! Builds are `hack/backends/build.sh`'s recipes, cached per pinned version: the first
//! `up` on a machine builds them all (~11 minutes on 2 cores), later ones start in
//! seconds. Everything listens on 127.0.0.1 only, on free ports picked at `up`, with
//! random credentials, and lives in one state directory
//! (`$BOSUN_BACKENDS_DIR`, default `<repo>/.backends`):
//!
//! ```text
//! bosun-backends      marker: this directory is ours and may be deleted
//! servers.json        [Servers]: ports, credentials, build directories, why no MongoDB (mode 600)
//! postgres/ mariadb/ minio/ gcs/ azurite/ ferretdb/   each server's data
//! logs/<server>.log   pids/<server>.pid   launches/<server>.json (how it was started)
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

pub use crate::supervise::Component;
use crate::supervise::{Launch, StateDir, Unhealthy, Waiting, http_status, waiting, write_private};
use crate::{log, repo_root, run};

const MARKER: &str = "bosun-backends";
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const PG_USER: &str = "postgres";
const BUCKET: &str = "bosun-test";
/// Azurite's well-known development account (public, in every Azure SDK's docs).
const AZURE_ACCOUNT: &str = "devstoreaccount1";
const AZURE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub const POSTGRES: Component = Component::named("postgres");
pub const MARIADB: Component = Component { name: "mariadb", exe: "mariadbd", cmdline_has: None };
pub const MINIO: Component = Component::named("minio");
pub const GCS: Component = Component::named("fake-gcs-server");
pub const AZURITE: Component = Component { name: "azurite", exe: "node", cmdline_has: Some("azurite") };
pub const FERRETDB: Component = Component::named("ferretdb");
const ALL: [Component; 6] = [POSTGRES, MARIADB, MINIO, GCS, AZURITE, FERRETDB];

/// The ports of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    pub postgres: u16,
    pub mysql: u16,
    pub minio: u16,
    pub gcs: u16,
    pub azurite: u16,
    pub mongo: u16,
    pub ferretdb_debug: u16,
}

/// The random credentials of a set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Secrets {
    pub postgres_password: String,
    pub mysql_password: String,
    pub mongo_password: String,
    pub s3_access_key: String,
    pub s3_secret_key: String,
}

/// The build directories the servers were started from (`hack/backends/build.sh`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bins {
    pub minio: PathBuf,
    pub fake_gcs_server: PathBuf,
    pub azurite: PathBuf,
    /// None when FerretDB or mongo-tools could not be built (then no MongoDB).
    pub ferretdb: Option<PathBuf>,
    pub mongo_tools: Option<PathBuf>,
}

/// A set of servers as `up` started it (`servers.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Servers {
    pub dir: PathBuf,
    pub ports: Ports,
    pub secrets: Secrets,
    pub bins: Bins,
    /// Why this set runs no MongoDB (absent when it does).
    pub mongo_missing: Option<String>,
}

/// The state directory of a set: `dir`, else `$BOSUN_BACKENDS_DIR`, else `<repo>/.backends`.
pub fn state_dir(dir: Option<&Path>) -> Result<StateDir> {
    let path = dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("BOSUN_BACKENDS_DIR").map(PathBuf::from))
        .unwrap_or_else(|| repo_root().join(".backends"));
    StateDir::new(&path, MARKER)
}

impl Servers {
    /// What a client needs, as variables: besides the ones the tests read, those the
    /// clients themselves read: libpq (`PG*`), the mariadb client (`MYSQL_HOST`,
    /// `MYSQL_TCP_PORT`, `MYSQL_PWD`), AWS SDKs (`AWS_ENDPOINT_URL`), Google client
    /// libraries (`STORAGE_EMULATOR_HOST`), and object_store's `from_env` builders
    /// (`AWS_ENDPOINT`/`AWS_ALLOW_HTTP`, `AWS_BUCKET`, `GOOGLE_BUCKET`,
    /// `AZURE_CONTAINER_NAME`, `AZURE_STORAGE_USE_EMULATOR` with
    /// `AZURITE_BLOB_STORAGE_URL`, `GOOGLE_SERVICE_ACCOUNT`: a key file pointing the
    /// GCS client at the emulator without OAuth).
    pub fn variables(&self) -> Vec<(&'static str, String)> {
        let p = &self.ports;
        let s = &self.secrets;
        let minio = format!("http://127.0.0.1:{}", p.minio);
        let gcs = format!("http://127.0.0.1:{}", p.gcs);
        let azurite = format!("http://127.0.0.1:{}", p.azurite);
        let mut v = vec![
            ("BOSUN_BACKENDS_DIR", self.dir.display().to_string()),
            ("PGHOST", "127.0.0.1".to_owned()),
            ("PGPORT", p.postgres.to_string()),
            ("PGUSER", PG_USER.to_owned()),
            ("PGPASSWORD", s.postgres_password.clone()),
            ("PGDATABASE", "postgres".to_owned()),
            ("MYSQL_HOST", "127.0.0.1".to_owned()),
            ("MYSQL_PORT", p.mysql.to_string()),
            ("MYSQL_TCP_PORT", p.mysql.to_string()),
            ("MYSQL_USER", "root".to_owned()),
            ("MYSQL_PWD", s.mysql_password.clone()),
            ("S3_ENDPOINT", minio.clone()),
            ("S3_BUCKET", BUCKET.to_owned()),
            ("AWS_BUCKET", BUCKET.to_owned()),
            ("AWS_ACCESS_KEY_ID", s.s3_access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", s.s3_secret_key.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
            ("AWS_ENDPOINT_URL", minio.clone()),
            ("AWS_ENDPOINT", minio),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
            ("GCS_ENDPOINT", gcs.clone()),
            ("GCS_BUCKET", BUCKET.to_owned()),
            ("GOOGLE_BUCKET", BUCKET.to_owned()),
            ("STORAGE_EMULATOR_HOST", gcs),
            ("GOOGLE_SERVICE_ACCOUNT", self.dir.join("gcs/service-account.json").display().to_string()),
            ("AZURE_ENDPOINT", format!("{azurite}/{AZURE_ACCOUNT}")),
            ("AZURE_CONTAINER", BUCKET.to_owned()),
            ("AZURE_CONTAINER_NAME", BUCKET.to_owned()),
            ("AZURE_STORAGE_ACCOUNT_NAME", AZURE_ACCOUNT.to_owned()),
            ("AZURE_STORAGE_ACCOUNT_KEY", AZURE_KEY.to_owned()),
            ("AZURE_STORAGE_USE_EMULATOR", "true".to_owned()),
            ("AZURITE_BLOB_STORAGE_URL", azurite.clone()),
            ("AZURE_ALLOW_HTTP", "true".to_owned()),
            (
                "AZURE_STORAGE_CONNECTION_STRING",
                format!(
                    "DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};BlobEndpoint={azurite}/{AZURE_ACCOUNT};"
                ),
            ),
        ];
        if let (None, Some(tools)) = (&self.mongo_missing, &self.bins.mongo_tools) {
            v.extend([
                ("MONGODB_URI", format!("mongodb://root:{}@127.0.0.1:{}/?authSource=admin", s.mongo_password, p.mongo)),
                ("MONGODB_HOST", "127.0.0.1".to_owned()),
                ("MONGODB_PORT", p.mongo.to_string()),
                ("MONGODB_USER", "root".to_owned()),
                ("MONGODB_PASSWORD", s.mongo_password.clone()),
                ("MONGODB_TOOLS_DIR", tools.display().to_string()),
            ]);
        }
        v
    }

    /// The directory to put first on `PATH` (mongodump, mongorestore), if any.
    pub fn tools(&self) -> Option<&Path> {
        self.mongo_missing.is_none().then_some(self.bins.mongo_tools.as_deref()).flatten()
    }

    /// `PATH` with the tools first.
    pub fn path(&self, path: &str) -> String {
        match self.tools() {
            Some(tools) => format!("{}:{path}", tools.display()),
            None => path.to_owned(),
        }
    }

    /// The export lines `hack/backends.sh env` prints, for `eval`.
    pub fn export_lines(&self) -> String {
        let mut out = format!("# hack/backends.sh: servers in {}\n", self.dir.display());
        for (k, v) in self.variables() {
            let _ = writeln!(out, "export {k}={}", shell_quote(&v));
        }
        match (&self.mongo_missing, self.tools()) {
            (Some(why), _) => {
                let _ = writeln!(out, "# no MongoDB: {why}");
            }
            (None, Some(tools)) => {
                // mongodump and mongorestore on PATH, once however often this is eval'd.
                let t = shell_quote(&tools.display().to_string());
                let _ = writeln!(out, "case \":$PATH:\" in *:{t}:*) ;; *) export PATH={t}:\"$PATH\" ;; esac");
            }
            (None, None) => {}
        }
        out
    }

    fn components(&self) -> Vec<Component> {
        ALL.into_iter().filter(|c| *c != FERRETDB || self.mongo_missing.is_none()).collect()
    }
}

/// Quoted for a POSIX shell, only where needed.
/// `s` quoted for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c));
    if plain { s.to_owned() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

fn secret(bytes: usize) -> String {
    use rand::RngCore as _;
    let mut b = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `command` as `user` when running as root (setpriv execs: the pid stays the
/// server's), as is otherwise. PostgreSQL refuses to run as root.
fn as_user(user: &str, program: &Path, args: Vec<String>) -> (PathBuf, Vec<String>) {
    if !root() {
        return (program.to_owned(), args);
    }
    let mut a = vec![format!("--reuid={user}"), format!("--regid={user}"), "--init-groups".into(), "--".into()];
    a.push(program.display().to_string());
    a.extend(args);
    ("setpriv".into(), a)
}

fn chown(user: &str, path: &Path) -> Result<()> {
    if root() {
        run(Command::new("chown").arg("-R").arg(format!("{user}:{user}")).arg(path))?;
    }
    Ok(())
}

fn load(dir: &StateDir) -> Option<Servers> {
    serde_json::from_slice(&std::fs::read(dir.join("servers.json")).ok()?).ok()
}

// --- builds -----------------------------------------------------------------

/// Builds (or finds in the cache) every server, side by side: downloads and npm
/// overlap with compiling. A failed MongoDB build only means no MongoDB (the
/// second value says why); any other failure is fatal.
fn build_all() -> Result<(Bins, Option<String>)> {
    let script = repo_root().join("hack/backends/build.sh");
    let names = ["minio", "fake-gcs-server", "azurite", "ferretdb", "mongo-tools"];
    let handles: Vec<_> = names
        .iter()
        .map(|name| {
            let mut cmd = Command::new(&script);
            cmd.arg(name).stdin(Stdio::null());
            std::thread::spawn(move || cmd.output())
        })
        .collect();
    let mut dirs: BTreeMap<&str, PathBuf> = BTreeMap::new();
    let mut mongo_missing = None;
    for (name, handle) in names.iter().zip(handles) {
        let out = handle.join().map_err(|_| anyhow!("building {name} panicked"))??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if matches!(*name, "ferretdb" | "mongo-tools") {
                let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
                let why = format!("building {name} failed: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" "));
                log(&why);
                mongo_missing = Some(why);
                continue;
            }
            bail!("building {name} failed:\n{stderr}");
        }
        for line in stderr.lines().filter(|l| !l.is_empty() && !l.starts_with("go: downloading ")) {
            eprintln!("{line}");
        }
        dirs.insert(name, PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    let required = |name: &str| dirs.get(name).cloned().ok_or_else(|| anyhow!("no build directory for {name}"));
    let bins = Bins {
        minio: required("minio")?,
        fake_gcs_server: required("fake-gcs-server")?,
        azurite: required("azurite")?,
        ferretdb: mongo_missing.is_none().then(|| dirs.get("ferretdb").cloned()).flatten(),
        mongo_tools: mongo_missing.is_none().then(|| dirs.get("mongo-tools").cloned()).flatten(),
    };
    Ok((bins, mongo_missing))
}

// --- set-up and start ------------------------------------------------------------

fn start_all(dir: &StateDir, bins: &Bins, mongo_missing: Option<String>) -> Result<Servers> {
    dir.create()?;
    let path = dir.path();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let (program, args) = as_user("postgres", Path::new("test"), vec!["-x".into(), path.display().to_string()]);
    if !Command::new(program).args(args).status()?.success() {
        bail!(
            "the postgres user cannot reach {} (a parent directory is not world-searchable); set BOSUN_BACKENDS_DIR elsewhere",
            path.display()
        );
    }
    // Unix socket paths are limited to 107 bytes.
    if path.as_os_str().len() > 70 {
        bail!(
            "{} is too long a path for the servers' unix sockets (at most 70 characters); set BOSUN_BACKENDS_DIR to a shorter one",
            path.display()
        );
    }
    let p = crate::ports::free_ports(7)?;
    let ports =
        Ports { postgres: p[0], mysql: p[1], minio: p[2], gcs: p[3], azurite: p[4], mongo: p[5], ferretdb_debug: p[6] };
    let secrets = Secrets {
        postgres_password: secret(16),
        mysql_password: secret(16),
        mongo_password: secret(16),
        s3_access_key: secret(10),
        s3_secret_key: secret(20),
    };
    let servers = Servers { dir: path.to_owned(), ports, secrets, bins: bins.clone(), mongo_missing };
    write_private(&dir.join("servers.json"), &serde_json::to_vec_pretty(&servers)?)?;
    let (ports, secrets) = (&servers.ports, &servers.secrets);

    // MinIO makes a bucket of each top-level directory of a fresh drive.
    std::fs::create_dir_all(dir.join("minio/data").join(BUCKET))?;
    dir.start(
        &MINIO,
        &Launch {
            program: bins.minio.join("minio"),
            args: ["server", "--quiet", "--address", &format!("127.0.0.1:{}", ports.minio)]
                .map(str::to_owned)
                .into_iter()
                .chain([dir.join("minio/data").display().to_string()])
                .collect(),
            env: [
                ("MINIO_ROOT_USER", secrets.s3_access_key.as_str()),
                ("MINIO_ROOT_PASSWORD", secrets.s3_secret_key.as_str()),
                ("MINIO_SITE_REGION", "us-east-1"),
                ("MINIO_BROWSER", "off"),
                ("MINIO_UPDATE", "off"),
                ("MINIO_CALLHOME_ENABLE", "off"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .to_vec(),
        },
    )?;

    // fake-gcs-server makes a bucket of each directory under -data at start.
    std::fs::create_dir_all(dir.join("gcs/seed").join(BUCKET))?;
    std::fs::create_dir_all(dir.join("gcs/storage"))?;
    let gcs = format!("127.0.0.1:{}", ports.gcs);
    dir.start(
        &GCS,
        &Launch {
            program: bins.fake_gcs_server.join("fake-gcs-server"),
            args: vec![
                "-scheme".into(),
                "http".into(),
                "-host".into(),
                "127.0.0.1".into(),
                "-port".into(),
                ports.gcs.to_string(),
                "-public-host".into(),
                gcs.clone(),
                "-external-url".into(),
                format!("http://{gcs}"),
                "-backend".into(),
                "filesystem".into(),
                "-filesystem-root".into(),
                dir.join("gcs/storage").display().to_string(),
                "-data".into(),
                dir.join("gcs/seed").display().to_string(),
                "-location".into(),
                "US".into(),
                "-log-level".into(),
                "warn".into(),
            ],
            env: vec![],
        },
    )?;
    std::fs::write(
        dir.join("gcs/service-account.json"),
        serde_json::json!({"gcs_base_url": format!("http://{gcs}"), "disable_oauth": true,
            "client_email": "", "private_key": "", "private_key_id": ""})
        .to_string(),
    )?;

    std::fs::create_dir_all(dir.join("azurite"))?;
    let azurite = std::fs::canonicalize(bins.azurite.join("azurite-blob")).context("azurite-blob")?;
    dir.start(
        &AZURITE,
        &Launch {
            program: "node".into(),
            args: vec![
                azurite.display().to_string(),
                "--blobHost".into(),
                "127.0.0.1".into(),
                "--blobPort".into(),
                ports.azurite.to_string(),
                "--location".into(),
                dir.join("azurite").display().to_string(),
                "--skipApiVersionCheck".into(),
                "--loose".into(),
                "--disableTelemetry".into(),
                "--silent".into(),
            ],
            env: vec![],
        },
    )?;

    // The databases' set-up steps (a few seconds each) run side by side, and while
    // the storage servers above start.
    std::thread::scope(|s| -> Result<()> {
        let pg = s.spawn(|| setup_postgres(dir, &servers));
        let my = s.spawn(|| setup_mariadb(dir, &servers));
        for (name, h) in [("PostgreSQL", pg), ("MariaDB", my)] {
            h.join()
                .map_err(|_| anyhow!("setting up {name} panicked"))?
                .with_context(|| format!("setting up {name} failed (logs in {})", dir.join("logs").display()))?;
        }
        Ok(())
    })?;

    let (program, args) = as_user(
        "postgres",
        &Path::new(PG_BIN).join("postgres"),
        vec![
            "-D".into(),
            dir.join("postgres/data").display().to_string(),
            "-c".into(),
            format!("config_file={}", dir.join("postgres/postgresql.conf").display()),
        ],
    );
    dir.start(&POSTGRES, &Launch { program, args, env: vec![] })?;
    let d = dir.join("mariadb");
    dir.start(
        &MARIADB,
        &Launch {
            program: "/usr/sbin/mariadbd".into(),
            args: vec![
                "--no-defaults".into(),
                format!("--user={}", mysql_user()),
                format!("--datadir={}", d.join("data").display()),
                format!("--socket={}", d.join("run/mysqld.sock").display()),
                format!("--pid-file={}", d.join("run/mysqld.pid").display()),
                format!("--tmpdir={}", d.join("tmp").display()),
                "--bind-address=127.0.0.1".into(),
                format!("--port={}", ports.mysql),
                "--skip-name-resolve".into(),
                format!("--init-file={}", d.join("init.sql").display()),
                "--character-set-server=utf8mb4".into(),
                "--collation-server=utf8mb4_unicode_ci".into(),
                "--skip-log-bin".into(),
                "--innodb-flush-log-at-trx-commit=0".into(),
                "--innodb-doublewrite=0".into(),
                "--innodb-buffer-pool-size=128M".into(),
                "--log-warnings=1".into(),
            ],
            env: vec![],
        },
    )?;
    Ok(servers)
}

/// The user MariaDB runs as: Debian's `mysql` when running as root (mariadbd
/// drops to it), else whoever runs this.
fn mysql_user() -> String {
    if root() { "mysql".to_owned() } else { std::env::var("USER").unwrap_or_else(|_| "root".to_owned()) }
}

fn setup_postgres(dir: &StateDir, s: &Servers) -> Result<()> {
    let d = dir.join("postgres");
    std::fs::create_dir_all(d.join("data"))?;
    std::fs::create_dir_all(d.join("run"))?;
    write_private(&d.join("pwfile"), format!("{}\n", s.secrets.postgres_password).as_bytes())?;
    chown("postgres", &d)?;
    let (program, args) = as_user(
        "postgres",
        &Path::new(PG_BIN).join("initdb"),
        [
            "-D",
            &d.join("data").display().to_string(),
            "-U",
            PG_USER,
            &format!("--pwfile={}", d.join("pwfile").display()),
            "--auth-local=scram-sha-256",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    let out = run(Command::new(program).args(args));
    std::fs::write(dir.log("postgres-initdb"), format!("{out:?}"))?;
    out?;
    std::fs::remove_file(d.join("pwfile"))?;
    // No trust anywhere: every connection, socket or TCP, needs the password.
    std::fs::write(
        d.join("pg_hba.conf"),
        "local all         all                scram-sha-256\n\
         host  all         all  127.0.0.1/32  scram-sha-256\n\
         host  replication all  127.0.0.1/32  scram-sha-256\n",
    )?;
    // Durability off: the data is disposable and fsync dominates.
    let conf = format!(
        "data_directory = '{data}'\n\
         hba_file = '{d}/pg_hba.conf'\n\
         ident_file = '{data}/pg_ident.conf'\n\
         listen_addresses = '127.0.0.1'\n\
         port = {port}\n\
         unix_socket_directories = '{d}/run'\n\
         password_encryption = 'scram-sha-256'\n\
         max_connections = 100\n\
         fsync = off\n\
         synchronous_commit = off\n\
         full_page_writes = off\n\
         wal_level = replica\n\
         logging_collector = off\n\
         log_min_messages = warning\n\
         log_connections = off\n\
         log_timezone = 'UTC'\n\
         timezone = 'UTC'\n\
         datestyle = 'iso, mdy'\n\
         lc_messages = 'C.UTF-8'\n\
         dynamic_shared_memory_type = posix\n",
        data = d.join("data").display(),
        d = d.display(),
        port = s.ports.postgres,
    );
    std::fs::write(d.join("postgresql.conf"), conf)?;
    chown("postgres", &d)
}

fn setup_mariadb(dir: &StateDir, s: &Servers) -> Result<()> {
    let d = dir.join("mariadb");
    for sub in ["data", "run", "tmp"] {
        std::fs::create_dir_all(d.join(sub))?;
    }
    chown("mysql", &d)?;
    // root@localhost (the socket) keeps unix_socket authentication for the
    // machine's root; TCP clients are root@127.0.0.1 (no name resolution), which
    // the init file creates with the password on every start. Its own tmpdir: a
    // bootstrap clears #sql* files from its tmpdir, so two sets set up at once in a
    // shared /tmp would break each other's install.
    let out = run(Command::new("/usr/bin/mariadb-install-db").args([
        "--no-defaults",
        &format!("--user={}", mysql_user()),
        &format!("--datadir={}", d.join("data").display()),
        &format!("--tmpdir={}", d.join("tmp").display()),
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
        "--skip-name-resolve",
    ]));
    std::fs::write(dir.log("mariadb-install-db"), format!("{out:?}"))?;
    out?;
    let pw = &s.secrets.mysql_password;
    write_private(
        &d.join("init.sql"),
        format!(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '{pw}';\n\
             ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '{pw}';\n\
             GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
        )
        .as_bytes(),
    )?;
    chown("mysql", &d)
}

/// FerretDB keeps its data in a database of its own in the PostgreSQL above,
/// connecting as its superuser. Clients authenticate with SCRAM as MongoDB's do
/// (FerretDB v1's "new authentication"): user root in admin, created at first start.
fn start_ferretdb(dir: &StateDir, s: &Servers) -> Result<()> {
    let Some(bin) = &s.bins.ferretdb else { return Ok(()) };
    psql(s, "CREATE DATABASE ferretdb", &s.secrets.postgres_password)?;
    std::fs::create_dir_all(dir.join("ferretdb"))?;
    let (p, sec) = (&s.ports, &s.secrets);
    dir.start(
        &FERRETDB,
        &Launch {
            program: bin.join("ferretdb"),
            args: vec![
                "--handler=postgresql".into(),
                format!("--listen-addr=127.0.0.1:{}", p.mongo),
                format!("--debug-addr=127.0.0.1:{}", p.ferretdb_debug),
                format!("--state-dir={}", dir.join("ferretdb").display()),
                "--telemetry=disable".into(),
                "--log-level=warn".into(),
                "--test-enable-new-auth".into(),
                "--setup-database=admin".into(),
                "--setup-username=root".into(),
            ],
            // Secrets through the environment rather than the command line (ps).
            env: vec![
                (
                    "FERRETDB_POSTGRESQL_URL".into(),
                    format!("postgres://{PG_USER}:{}@127.0.0.1:{}/ferretdb", sec.postgres_password, p.postgres),
                ),
                ("FERRETDB_SETUP_PASSWORD".into(), sec.mongo_password.clone()),
            ],
        },
    )?;
    Ok(())
}

// --- health ------------------------------------------------------------------

fn psql(s: &Servers, sql: &str, password: &str) -> Result<String> {
    run(Command::new(Path::new(PG_BIN).join("psql"))
        .args(["-X", "-qAt", "-h", "127.0.0.1", "-p", &s.ports.postgres.to_string(), "-U", PG_USER, "-d", "postgres"])
        .args(["-c", sql])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "3"))
}

fn mariadb(s: &Servers, password: &str) -> Result<String> {
    run(Command::new("mariadb")
        .args(["--no-defaults", "--connect-timeout=3", "-h", "127.0.0.1", "-P", &s.ports.mysql.to_string()])
        .args(["-u", "root", "-e", "SELECT 1"])
        .env("MYSQL_PWD", password))
}

/// One round of checks. FerretDB starts here, once PostgreSQL answers.
fn health(dir: &StateDir, s: &Servers) -> Result<(), Waiting> {
    let p = &s.ports;
    psql(s, "SELECT 1", &s.secrets.postgres_password)
        .map_err(|_| waiting("postgres to accept the superuser's password", "postgres"))?;
    mariadb(s, &s.secrets.mysql_password)
        .map_err(|_| waiting("mariadb to accept root@127.0.0.1's password", "mariadb"))?;
    if http_status(&format!("http://127.0.0.1:{}/minio/health/ready", p.minio)) != Some(200) {
        return Err(waiting("minio /minio/health/ready", "minio"));
    }
    if http_status(&format!("http://127.0.0.1:{}/storage/v1/b/{BUCKET}", p.gcs)) != Some(200) {
        return Err(waiting(format!("fake-gcs-server bucket {BUCKET}"), "fake-gcs-server"));
    }
    if http_status(&format!("http://127.0.0.1:{}/{AZURE_ACCOUNT}?comp=list", p.azurite)).is_none() {
        return Err(waiting("azurite to answer", "azurite"));
    }
    if s.mongo_missing.is_none() {
        if !dir.join("pids/ferretdb.pid").exists() {
            start_ferretdb(dir, s).map_err(|e| waiting(format!("ferretdb to start: {e:#}"), "ferretdb"))?;
        }
        if http_status(&format!("http://127.0.0.1:{}/debug/readyz", p.ferretdb_debug)) != Some(200) {
            return Err(waiting("ferretdb /debug/readyz", "ferretdb"));
        }
    }
    Ok(())
}

/// Waits until the set is healthy (FerretDB counts once it has started).
fn wait_healthy(dir: &StateDir, s: &Servers, started: Instant, timeout: Duration) -> Result<(), Unhealthy> {
    let components = || {
        let ferretdb_started = dir.join("pids/ferretdb.pid").exists();
        s.components().into_iter().filter(|c| *c != FERRETDB || ferretdb_started).collect()
    };
    dir.wait_healthy(components, || health(dir, s), started, timeout, log, |_| String::new())
}

/// The bucket and container, made once all servers answer (MinIO's comes from its
/// data directory; checked through the S3 API all the same).
fn make_buckets(s: &Servers) -> Result<()> {
    for verb in ["s3-mkbucket", "azure-mkcontainer"] {
        objstore(s, verb)?;
    }
    Ok(())
}

/// `hack/backends/objstore.py VERB` with the set's variables: the object stores'
/// own Python clients, a second opinion beside object_store.
fn objstore(s: &Servers, verb: &str) -> Result<String> {
    run(Command::new("python3").arg(repo_root().join("hack/backends/objstore.py")).arg(verb).envs(s.variables()))
}

fn stop_all(dir: &StateDir) -> Result<()> {
    // FerretDB first: it holds connections to PostgreSQL.
    dir.stop(&[FERRETDB], |_| Signal::SIGTERM, Duration::from_secs(3))?;
    // PostgreSQL gets SIGINT (fast shutdown: SIGTERM waits for clients to leave).
    dir.stop(&ALL, |c| if *c == POSTGRES { Signal::SIGINT } else { Signal::SIGTERM }, Duration::from_secs(10))
}

// --- verbs ------------------------------------------------------------------------

/// Starts the set in `dir` (a no-op when it runs and is healthy) and waits for its
/// health; returns what reaches it.
pub fn up(dir: &StateDir, timeout: Duration) -> Result<Servers> {
    let started = Instant::now();
    let _lock = dir.lock()?;
    let (bins, mongo_missing) = build_all()?;
    if let Some(s) = load(dir) {
        let components = s.components();
        if dir.alive(&components) == components.len() && health(dir, &s).is_ok() {
            if s.bins != bins {
                log("warning: the running servers were built from other pins; run down and up to switch");
            }
            log(&format!("already running and healthy ({}; 'eval \"$(hack/backends.sh env)\"')", dir.path().display()));
            return Ok(s);
        }
    }
    dir.clear(&ALL, stop_all, log)?;
    log(&format!("starting servers in {}", dir.path().display()));
    for attempt in 1..=2 {
        let s = start_all(dir, &bins, mongo_missing.clone())?;
        match wait_healthy(dir, &s, started, timeout) {
            Ok(()) => {
                make_buckets(&s).context("creating the bucket and container failed")?;
                let p = &s.ports;
                let mongo = match &s.mongo_missing {
                    Some(why) => format!("no MongoDB ({why})"),
                    None => format!("ferretdb :{}", p.mongo),
                };
                log(&format!(
                    "healthy after {:.1}s: postgres :{}, mariadb :{}, minio :{}, fake-gcs-server :{}, azurite :{}, {mongo}",
                    started.elapsed().as_secs_f64(),
                    p.postgres,
                    p.mysql,
                    p.minio,
                    p.gcs,
                    p.azurite
                ));
                return Ok(s);
            }
            Err(e) if e.port_conflict() && attempt == 1 => {
                log("port conflict; restarting with other ports");
                stop_all(dir)?;
                dir.remove()?;
            }
            Err(Unhealthy::Exited { name, log: tail }) => bail!(
                "{name} exited; last lines of {}:\n{tail}\nservers failed to start ('down' cleans up)",
                dir.log(name).display()
            ),
            Err(Unhealthy::TimedOut(why)) => bail!("{why}\nservers left running for inspection; 'down' stops them"),
        }
    }
    unreachable!("the second attempt returns")
}

/// Stops every server of the set and removes its directory.
pub fn down(dir: &StateDir) -> Result<()> {
    dir.tear_down(&ALL, stop_all, log)
}

/// The running set in `dir`, or an error saying how to start it.
pub fn running(dir: &StateDir) -> Result<Servers> {
    let s = load(dir).filter(|s| {
        let c = s.components();
        dir.alive(&c) == c.len()
    });
    s.ok_or_else(|| {
        anyhow!("backends are not running in {}; start them with 'hack/backends.sh up'", dir.path().display())
    })
}

/// Starts a server of a running set again exactly as `up` started it (after a
/// test killed it), and waits until the set is healthy again.
pub fn restart(dir: &StateDir, c: &Component, timeout: Duration) -> Result<()> {
    let s = load(dir).ok_or_else(|| anyhow!("no backends in {}", dir.path().display()))?;
    dir.restart(c)?;
    wait_healthy(dir, &s, Instant::now(), timeout).map_err(|e| anyhow!("{e}"))
}

/// The servers, pids and ports; Ok(true) when all run and are healthy.
pub fn status(dir: &StateDir) -> Result<(String, bool)> {
    let mut out = format!("state directory: {}\n", dir.path().display());
    let s = load(dir);
    let port = |f: fn(&Ports) -> String| s.as_ref().map_or("?".to_owned(), |s| f(&s.ports));
    let mut ok = true;
    for c in ALL {
        let port = match c.name {
            "postgres" => port(|p| p.postgres.to_string()),
            "mariadb" => port(|p| p.mysql.to_string()),
            "minio" => port(|p| p.minio.to_string()),
            "fake-gcs-server" => port(|p| p.gcs.to_string()),
            "azurite" => port(|p| p.azurite.to_string()),
            _ => port(|p| format!("{} (debug {})", p.mongo, p.ferretdb_debug)),
        };
        match (s.as_ref().and_then(|s| s.mongo_missing.as_ref()), dir.pid(&c)) {
            (Some(why), _) if c == FERRETDB => {
                let _ = writeln!(out, "{:<16} missing  {why}", c.name);
            }
            (_, Some(pid)) => {
                let _ = writeln!(out, "{:<16} running  pid {pid:<8} port {port}", c.name);
            }
            (_, None) => {
                let _ = writeln!(out, "{:<16} stopped", c.name);
                ok = false;
            }
        }
    }
    if ok && let Some(s) = &s {
        match health(dir, s) {
            Ok(()) => out.push_str("healthy\n"),
            Err(w) => {
                let _ = writeln!(out, "unhealthy: waiting for {}", w.what);
                ok = false;
            }
        }
    }
    Ok((out, ok && s.is_some()))
}

/// Proves what the tests rely on, with the real clients: the right password works
/// and a wrong one fails (PostgreSQL, MariaDB, MongoDB), each storage server takes a
/// multipart upload and lists it, mongo-tools dump and restore. One line each.
pub fn check(dir: &StateDir) -> Result<(String, usize)> {
    let s = running(dir)?;
    let mut out = String::new();
    let mut fails = 0;
    let mut line = |ok: bool, text: &str| {
        let _ = writeln!(out, "{}  {text}", if ok { "ok  " } else { "FAIL" });
        fails += usize::from(!ok);
    };
    let pw = &s.secrets.postgres_password;
    line(psql(&s, "SELECT 1", pw).is_ok(), "postgres: postgres with the password");
    line(psql(&s, "SELECT 1", "wrong").is_err(), "postgres: a wrong password is refused");
    line(mariadb(&s, &s.secrets.mysql_password).is_ok(), "mariadb: root with the password");
    line(mariadb(&s, "wrong").is_err(), "mariadb: a wrong password is refused");
    for t in ["s3", "gcs", "azure"] {
        match objstore(&s, &format!("check-{t}")) {
            Ok(text) if !text.contains("FAILS") => line(true, text.trim()),
            Ok(text) => line(false, text.trim()),
            Err(e) => line(false, &format!("{e:#}")),
        }
    }
    match &s.mongo_missing {
        Some(why) => {
            let _ = writeln!(out, "skip  mongodb: {why}");
        }
        None => match check_mongo(&s) {
            Ok(text) => line(true, &format!("mongodb: {text}")),
            Err(e) => line(false, &format!("mongodb: {e:#}")),
        },
    }
    Ok((out, fails))
}

/// Documents written with mongoimport, dumped, restored under another database name
/// and exported again must match; a wrong password must be refused.
fn check_mongo(s: &Servers) -> Result<String> {
    let tmp = std::env::temp_dir().join(format!("bosun-mongo-check-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let result = (|| -> Result<String> {
        let docs = [
            r#"{"_id": 1, "s": "a", "n": 1.5, "a": [1, 2], "o": {"k": "v"}}"#,
            r#"{"_id": 2, "s": "b", "t": {"$date": "2024-01-02T03:04:05Z"}}"#,
        ];
        std::fs::write(tmp.join("in.json"), docs.join("\n") + "\n")?;
        let uri = format!("mongodb://root:{}@127.0.0.1:{}/?authSource=admin", s.secrets.mongo_password, s.ports.mongo);
        let path = s.path(&std::env::var("PATH").unwrap_or_default());
        let tool = |name: &str, args: &[&str], uri: &str| {
            run(Command::new(name).arg(format!("--uri={uri}")).args(args).env("PATH", &path))
        };
        let file = |name: &str| tmp.join(name).display().to_string();
        tool(
            "mongoimport",
            &["--quiet", "--drop", "--db=bosuncheck", "--collection=docs", &format!("--file={}", file("in.json"))],
            &uri,
        )?;
        tool(
            "mongodump",
            &["--quiet", "--db=bosuncheck", &format!("--archive={}", file("dump.archive")), "--gzip"],
            &uri,
        )?;
        tool(
            "mongorestore",
            &[
                "--quiet",
                "--drop",
                "--gzip",
                &format!("--archive={}", file("dump.archive")),
                "--nsFrom=bosuncheck.*",
                "--nsTo=bosuncheck_restored.*",
            ],
            &uri,
        )?;
        tool(
            "mongoexport",
            &[
                "--quiet",
                "--db=bosuncheck_restored",
                "--collection=docs",
                "--sort={\"_id\": 1}",
                &format!("--out={}", file("out.json")),
            ],
            &uri,
        )?;
        let parse = |name: &str| -> Result<Vec<serde_json::Value>> {
            std::fs::read_to_string(tmp.join(name))?.lines().map(|l| Ok(serde_json::from_str(l)?)).collect()
        };
        if parse("in.json")? != parse("out.json")? {
            bail!("restored documents differ: {}", std::fs::read_to_string(tmp.join("out.json"))?);
        }
        let wrong = format!("mongodb://root:wrong@127.0.0.1:{}/?authSource=admin", s.ports.mongo);
        if tool("mongodump", &["--db=bosuncheck", "--archive=/dev/null"], &wrong).is_ok() {
            bail!("a wrong password was accepted");
        }
        Ok("mongoimport, mongodump --archive --gzip, mongorestore (renamed), mongoexport round trip ok; a wrong password is refused".to_owned())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn servers(mongo_missing: Option<&str>) -> Servers {
        Servers {
            dir: "/tmp/b".into(),
            ports: Ports { postgres: 1, mysql: 2, minio: 3, gcs: 4, azurite: 5, mongo: 6, ferretdb_debug: 7 },
            secrets: Secrets {
                postgres_password: "p'g".into(),
                mysql_password: "m".into(),
                mongo_password: "mo".into(),
                s3_access_key: "ak".into(),
                s3_secret_key: "sk".into(),
            },
            bins: Bins {
                minio: "/c/minio".into(),
                fake_gcs_server: "/c/gcs".into(),
                azurite: "/c/az".into(),
                ferretdb: Some("/c/f".into()),
                mongo_tools: Some("/c/mongo tools".into()),
            },
            mongo_missing: mongo_missing.map(str::to_owned),
        }
    }

    /// What `eval` of the export lines sets, read back by bash itself.
    fn evaluated(s: &Servers) -> BTreeMap<String, String> {
        let script = format!("export PATH=/usr/bin:/bin\n{}\nenv -0", s.export_lines());
        let out = Command::new("bash").args(["-c", &script]).env_clear().output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn the_export_lines_set_exactly_the_variables_and_put_the_tools_first_once() {
        let s = servers(None);
        let env = evaluated(&s);
        for (k, v) in s.variables() {
            assert_eq!(env.get(k), Some(&v), "{k}");
        }
        assert_eq!(env["PGPASSWORD"], "p'g", "quoted through the shell");
        assert_eq!(env["PATH"], "/c/mongo tools:/usr/bin:/bin");
        assert_eq!(s.path("/usr/bin:/bin"), env["PATH"]);
        // Evaluated twice, the tools are still on PATH once.
        let twice = format!("PATH=/usr/bin\n{}{}echo \"$PATH\"", s.export_lines(), s.export_lines());
        let out = Command::new("bash").args(["-c", &twice]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/c/mongo tools:/usr/bin");
    }

    #[test]
    fn without_mongodb_nothing_of_it_is_exported_and_the_reason_is_said() {
        let s = servers(Some("building ferretdb failed: x"));
        let env = evaluated(&s);
        assert!(!env.contains_key("MONGODB_URI"));
        assert_eq!(env["PATH"], "/usr/bin:/bin");
        assert!(s.export_lines().contains("# no MongoDB: building ferretdb failed: x"));
        assert!(!s.components().contains(&FERRETDB));
        assert!(servers(None).components().contains(&FERRETDB));
    }

    #[test]
    fn the_state_file_round_trips() {
        let s = servers(None);
        let back: Servers = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back.ports, s.ports);
        assert_eq!(back.bins, s.bins);
        assert_eq!(back.secrets.postgres_password, "p'g");
    }
}
