//! PostgreSQL's instance manager (`bosun instance`, installed as a pod installs it),
//! run on the host against Debian's PostgreSQL 15 binaries, each instance with its
//! role in a file (as the pod's downward-API file) and a TCP forwarder standing for the
//! read-write Service: a primary set up by its manager, a standby cloned from it, rows
//! streamed; then the primary killed, the standby made primary (it promotes
//! itself), the old primary started again as a replica (rewound, it follows the new
//! timeline); then a switchover back (the running primary made a replica stops and
//! rejoins); then a promotion the label did not ask for undone, and a role told over
//! the instance API obeyed until the label's file is refreshed — real streaming
//! replication, no cluster needed. The API is asked with the controller's own client
//! (`bosun_controller::instances`) and the credentials bosun's builder makes: the
//! status it decides from, and callers without the token, with a wrong CA or a
//! malformed request, refused with nothing changed.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use bosun_api::postgresql::PostgreSQL;
use bosun_controller::instances::{AskError, Instances, Target};
use bosun_instance::fence::{Heartbeat, read_terms, terms_path};
use bosun_resources::instances::{self as credentials, Access};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const PASSWORD: &str = "Sup3r-secret";
const REPLICATION_PASSWORD: &str = "r3pl1cation";
const APP_PASSWORD: &str = "app-s3cret";

/// A port below the kernel's range for outgoing connections: the instances connect to
/// each other (and probe TLS) every second, and a port taken from that range could be
/// the source port of one before its server binds it.
fn free_port() -> u16 {
    bosun_testing::free_port()
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n")
}

/// `program args…` as the postgres user when this test runs as root (PostgreSQL
/// refuses to run as root), as it is otherwise.
fn command(program: &str) -> Command {
    if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

fn path_env() -> String {
    format!("{BIN}:{}", std::env::var("PATH").unwrap_or_default())
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A server on `port` with its socket in `dir`, logging to `dir/log`.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

/// `bosun` installed in `dir` as a pod's init container installs it (`bosun install`),
/// where the postgres user can run it.
fn install(dir: &Path) -> PathBuf {
    let path = dir.join("bosun");
    ok(Command::new(env!("CARGO_BIN_EXE_bosun")).arg("install").arg(&path).output().unwrap(), "bosun install");
    path
}

/// An instance on `port` under the instance manager, reading its role from
/// `dir/role-<port>`, its primary behind `service`.
fn start(dir: &Path, pgdata: &Path, (port, api): (u16, u16), service: u16) -> Server {
    let log = dir.join(format!("server-{port}.log"));
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    let postgres = format!("{BIN}/postgres");
    let port_s = port.to_string();
    let server_args = [
        "-D",
        pgdata.to_str().unwrap(),
        "-p",
        &port_s,
        "-k",
        dir.to_str().unwrap(),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "wal_log_hints=on",
        "-c",
        "wal_keep_size=1GB",
    ];
    let child = command(dir.join("bosun").to_str().unwrap())
        .args(["instance", "--name", &format!("instance-{port}"), "--socket-dir", dir.to_str().unwrap()])
        .args(["--port", &port_s, "--api-port", &api.to_string(), "--api-dir", dir.join("api").to_str().unwrap()])
        .args(["--hba-file", dir.join(format!("pg_hba-{port}.conf")).to_str().unwrap()])
        .args(["--credentials-dir", dir.join("credentials").to_str().unwrap(), "--app-user", "shop"])
        .args(["--app-database", "orders"])
        // As spec.enableSuperuserAccess: false (the default path is the e2e tests'):
        // the instances' own connections to the primary go as the replication role.
        .args(["--superuser-network", "false"])
        .args(["--", &postgres])
        .args(server_args)
        .env("PATH", path_env())
        // The user's home, as a pod's (libpq looks there for a client certificate).
        .env("HOME", dir)
        .env("PGDATA", pgdata)
        .env("BOSUN_ROLE_FILE", role_file(dir, port))
        .env("BOSUN_ROLE_TOLD", told_file(dir, port))
        .env("BOSUN_PGPASS", dir.join(format!("pgpass-{port}")))
        .envs([("POSTGRES_USER", "postgres"), ("POSTGRES_PASSWORD", PASSWORD), ("REPLICATION_USER", "replicator")])
        // The primary by the Service's name (its certificate's), at the forwarder.
        .envs([("REPLICATION_PASSWORD", REPLICATION_PASSWORD), ("PRIMARY_HOST", "host")])
        .env("PRIMARY_HOSTADDR", "127.0.0.1")
        .env("PRIMARY_PORT", service.to_string())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("start the instance");
    Server { child, log }
}

/// The instance's role file, laid out as the kubelet writes a downward-API volume:
/// `role -> ..data/role`, `..data -> ..<generation>`.
fn role_file(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("podinfo-{port}/role"))
}

/// Give the instance on `port` its role, as bosun's label would: a new generation of
/// the volume, swapped in atomically, as the kubelet does.
fn set_role(dir: &Path, port: u16, role: &str) {
    use std::sync::atomic::AtomicU32;
    static GENERATION: AtomicU32 = AtomicU32::new(0);
    let volume = dir.join(format!("podinfo-{port}"));
    let generation = format!("..gen{}", GENERATION.fetch_add(1, Ordering::SeqCst));
    std::fs::create_dir_all(volume.join(&generation)).unwrap();
    std::fs::write(volume.join(&generation).join("role"), role).unwrap();
    let _ = std::fs::remove_file(volume.join("..data.tmp"));
    std::os::unix::fs::symlink(&generation, volume.join("..data.tmp")).unwrap();
    std::fs::rename(volume.join("..data.tmp"), volume.join("..data")).unwrap();
    if std::fs::symlink_metadata(volume.join("role")).is_err() {
        std::os::unix::fs::symlink("..data/role", volume.join("role")).unwrap();
    }
}

fn told_file(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("told-{port}"))
}

/// The database the instances' credentials are made for, as bosun makes them.
fn database() -> PostgreSQL {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
        "metadata": {"name": "host", "namespace": "test"},
        "spec": {"version": "15", "storage": "1Gi"},
    }))
    .unwrap()
}

/// The instance API's files in `dir/api`, from the Secret bosun would make: the
/// access they give.
fn api_credentials(dir: &Path) -> Access {
    let now = jiff::Timestamp::now();
    let data = credentials::desired_data(
        &database(),
        None,
        now,
        &Default::default(),
        || "t0ken-of-the-secret".into(),
        credentials::Server::Own,
    )
    .unwrap()
    .unwrap();
    std::fs::create_dir_all(dir.join("api")).unwrap();
    for key in ["tls.crt", "tls.key", "ca-bundle.crt", "token"] {
        let path = dir.join("api").join(key);
        std::fs::write(&path, &data[key]).unwrap();
        // PostgreSQL takes a key its user alone may read (or root's, read by its group).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        if running_as_root() {
            ok(Command::new("chown").args(["postgres", path.to_str().unwrap()]).output().unwrap(), "chown");
        }
    }
    credentials::access(&credentials::desired_secret(&database(), &data)).unwrap()
}

/// The controller's client of the instances on `ports` (`(postgres, api)`), with `access`.
fn client(access: &Access, ports: &[(u16, u16)]) -> Instances {
    let targets = ports
        .iter()
        .map(|(port, api)| {
            let name = format!("instance-{port}");
            let server_name = credentials::server_name(&database(), &name);
            (name, Target { ip: "127.0.0.1".parse().unwrap(), port: *api, server_name })
        })
        .collect();
    Instances::with_targets(Some(access), targets, String::new)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

const ASK: Duration = Duration::from_secs(10);

/// A TCP forwarder on a free port to whichever port `target` holds: the read-write
/// Service, moved by the test as bosun moves the primary label.
fn service(target: Arc<AtomicU16>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target.load(Ordering::SeqCst))) else { continue };
            for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    port
}

/// `psql` over TCP with a password, as a client in another pod would connect.
/// A kubelet's HTTPS probe of the API at `path`: its status code.
fn probe(api: u16, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"])
        .arg(format!("https://127.0.0.1:{api}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The instances' socket directory (the superuser logs in there only).
static SOCKETS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// `query` as `user` on the server at `port`: the superuser through the socket,
/// anyone else over TCP.
fn sql(port: u16, user: &str, password: &str, query: &str) -> Output {
    match SOCKETS.get().filter(|_| user == "postgres") {
        Some(dir) => psql_at(dir.to_str().unwrap(), port, user, password, query),
        None => sql_tcp(port, user, password, query),
    }
}

fn sql_tcp(port: u16, user: &str, password: &str, query: &str) -> Output {
    psql_at("127.0.0.1", port, user, password, query)
}

fn psql_at(host: &str, port: u16, user: &str, password: &str, query: &str) -> Output {
    Command::new(format!("{BIN}/psql"))
        .args(["-X", "-h", host, "-p", &port.to_string(), "-U", user, "-d", "postgres"])
        .args(["-v", "ON_ERROR_STOP=1", "-tAc", query])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "3")
        .output()
        .expect("psql")
}

/// `psql` with a connection string, as a client that chose its TLS would connect.
fn psql_dsn(dsn: &str) -> Output {
    Command::new(format!("{BIN}/psql"))
        .args(["-X", "-d", &format!("{dsn} user=shop dbname=orders connect_timeout=3"), "-tAc", "SELECT 1"])
        .env("PGPASSWORD", APP_PASSWORD)
        .output()
        .expect("psql")
}

fn wait_until(what: &str, server: &Server, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for {what}; server log:\n{}",
            std::fs::read_to_string(&server.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `t` or `f`; empty while the server does not answer (stopped to rejoin).
fn in_recovery(port: u16) -> String {
    String::from_utf8_lossy(&sql(port, "postgres", PASSWORD, "SELECT pg_is_in_recovery()").stdout).trim().to_owned()
}

#[test]
fn a_standby_clones_streams_takes_over_and_the_old_primary_rejoins() {
    assert!(
        Path::new(BIN).join("pg_rewind").exists(),
        "PostgreSQL 15 is not installed at {BIN} (hack/prerequisites.sh installs it)"
    );
    let dir = std::env::temp_dir().join(format!("bosun-replication-{}", std::process::id()));
    SOCKETS.set(dir.clone()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if running_as_root() {
        ok(Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]).output().unwrap(), "chown");
    }
    let a_data = dir.join("a/pgdata");
    let b_data = dir.join("b/pgdata");
    ok(
        command("mkdir")
            .args(["-p", dir.join("a").to_str().unwrap(), dir.join("b").to_str().unwrap()])
            .output()
            .unwrap(),
        "mkdir",
    );

    // Instance a, the first primary, as the image's entrypoint makes it: local
    // connections trusted, TCP by password — and no password yet: setup sets it.
    let init = command(&format!("{BIN}/initdb"))
        .args(["-D", a_data.to_str().unwrap(), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256"])
        .args(["--no-sync", "-E", "UTF8", "--locale=C"])
        .output()
        .unwrap();
    ok(init, "initdb");
    let (pa, pb) = (free_port(), free_port());
    let target = Arc::new(AtomicU16::new(pa));
    let svc = service(target.clone());
    set_role(&dir, pa, "primary");
    install(&dir);
    let access = api_credentials(&dir);
    // The application's password, as the projected Secret volume holds it.
    std::fs::create_dir_all(dir.join("credentials")).unwrap();
    std::fs::write(dir.join("credentials/app-password"), APP_PASSWORD).unwrap();
    let (qa, qb) = (free_port(), free_port());
    let api = client(&access, &[(pa, qa), (pb, qb)]);
    let a = start(&dir, &a_data, (pa, qa), svc);

    // The manager sets the primary up beside its server: the superuser's password,
    // the replication role, pg_hba.conf.
    wait_until("the primary's setup", &a, Duration::from_secs(60), || {
        std::fs::read_to_string(&a.log).unwrap_or_default().contains("passwords and the replication role are set")
    });
    // Without superuser access from the network, its password opens nothing over TCP
    // (the rule turns it away before any password); the socket still lets it in.
    let turned_away = sql_tcp(pa, "postgres", PASSWORD, "SELECT 1");
    let why = String::from_utf8_lossy(&turned_away.stderr);
    assert!(!turned_away.status.success() && why.contains("pg_hba.conf rejects connection"), "{why}");
    assert_eq!(ok(sql(pa, "postgres", PASSWORD, "SELECT 1"), "the superuser through the socket"), "1");
    assert!(!sql_tcp(pa, "shop", "wrong", "SELECT 1").status.success(), "a wrong password was accepted");
    // Stored as scram verifiers, made by the manager: the server never saw a password.
    let stored =
        "SELECT string_agg(left(rolpassword, 19), ',' ORDER BY rolname) FROM pg_authid WHERE rolpassword IS NOT NULL";
    assert_eq!(ok(sql(pa, "postgres", PASSWORD, stored), "stored"), ["SCRAM-SHA-256$4096:"; 3].join(","));
    // The application's role logs in to its own database, which it owns.
    let owner =
        "SELECT current_user || ' ' || pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()";
    let app = Command::new(format!("{BIN}/psql"))
        .args(["-X", "-h", "127.0.0.1", "-p", &pa.to_string(), "-U", "shop", "-d", "orders", "-tAc", owner])
        .env("PGPASSWORD", APP_PASSWORD)
        .output()
        .unwrap();
    assert_eq!(ok(app, "the application's login"), "shop shop");
    ok(
        sql(
            pa,
            "postgres",
            PASSWORD,
            "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'before')",
        ),
        "write",
    );

    // Instance b: no role yet (a new pod) starts nothing; then a replica, it clones
    // the primary behind the Service.
    let mut b = start(&dir, &b_data, (pb, qb), svc);
    std::thread::sleep(Duration::from_millis(600));
    assert!(!b_data.exists(), "an instance without a role started something");
    // The kubelet's probes (no token, the certificate not verified): b has no server yet.
    assert_eq!(probe(qb, "/healthz"), "503");
    set_role(&dir, pb, "replica");
    wait_until("the standby to accept connections", &b, Duration::from_secs(60), || {
        sql(pb, "postgres", PASSWORD, "SELECT 1").status.success()
    });
    assert_eq!(in_recovery(pb), "t");
    assert!(!dir.join("b/pgdata.partial").exists());

    // Streaming: a row written on the primary after the clone shows on the standby.
    ok(sql(pa, "postgres", PASSWORD, "INSERT INTO t VALUES (2, 'after')"), "write after the clone");
    wait_until("the row on the standby", &b, Duration::from_secs(30), || {
        sql(pb, "postgres", PASSWORD, "SELECT v FROM t WHERE id = 2").stdout == b"after\n"
    });
    assert!(!sql(pb, "postgres", PASSWORD, "INSERT INTO t VALUES (9, 'x')").status.success(), "a standby wrote");
    let senders = ok(
        sql(pa, "postgres", PASSWORD, "SELECT usename, state, application_name FROM pg_stat_replication"),
        "senders",
    );
    assert!(senders.starts_with("replicator|streaming|"), "{senders}");
    // Over TLS only: the standby streams over TLS 1.3; a client verifying the server
    // by the Service's name with the CAs connects; a plaintext one is refused with
    // PostgreSQL's own message; no rule lets anyone in from the network otherwise.
    let streams = "SELECT s.ssl, s.version FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)";
    assert_eq!(ok(sql(pa, "postgres", PASSWORD, streams), "replication over TLS"), "t|TLSv1.3");
    let bundle = dir.join("api/ca-bundle.crt");
    let verified = psql_dsn(&format!(
        "host=host hostaddr=127.0.0.1 port={pa} sslmode=verify-full sslrootcert={}",
        bundle.display()
    ));
    assert_eq!(ok(verified, "verify-full by the Service's name"), "1");
    let plain = psql_dsn(&format!("host=127.0.0.1 port={pa} sslmode=disable"));
    let refused = String::from_utf8_lossy(&plain.stderr);
    assert!(
        !plain.status.success() && refused.contains("no pg_hba.conf entry") && refused.contains("no encryption"),
        "{refused}"
    );
    let rules = ok(
        sql(pa, "postgres", PASSWORD, "SELECT type || ' ' || auth_method FROM pg_hba_file_rules WHERE type <> 'local'"),
        "the rules",
    );
    let rules: Vec<&str> = rules.lines().collect();
    assert_eq!(rules, ["hostssl reject", "hostssl reject", "hostssl scram-sha-256", "hostssl scram-sha-256"]);
    // The probes answer from a connection to the server, as pg_isready would, and
    // leave nothing in its log.
    for port in [qa, qb] {
        assert_eq!((probe(port, "/healthz"), probe(port, "/readyz")), ("200".into(), "200".into()), "{port}");
    }
    let log = std::fs::read_to_string(&a.log).unwrap();
    for noise in ["incomplete startup packet", "could not receive data", "unexpected EOF", "could not accept SSL"] {
        assert!(!log.contains(noise), "the probes leave '{noise}' in the server's log:\n{log}");
    }
    // The instance API: what bosun decides from, asked with its client.
    let (name_a, name_b) = (format!("instance-{pa}"), format!("instance-{pb}"));
    let primary = block_on(api.status(&name_a, ASK)).unwrap();
    assert_eq!((primary.role.as_deref(), primary.role_source.as_str()), (Some("primary"), "label"));
    let server = primary.server.as_ref().unwrap();
    assert!(!server.in_recovery && server.current_lsn.is_some(), "{primary:?}");
    assert_eq!((server.timeline, server.streaming.clone()), (Some(1), vec![name_b.clone()]), "{primary:?}");
    assert!(server.archiver.is_some() && server.version.starts_with("15."), "{primary:?}");
    let standby = block_on(api.status(&name_b, ASK)).unwrap();
    let server = standby.server.as_ref().unwrap();
    assert!(server.in_recovery && server.receive_lsn.is_some() && server.replay_lsn.is_some(), "{standby:?}");
    assert!(server.receiving, "a streaming standby's WAL receiver: {standby:?}");
    assert!(!primary.server.as_ref().unwrap().receiving, "a primary receives nothing");
    assert!(standby.standby_signal && !standby.analyze_pending && standby.data_major.as_deref() == Some("15"));
    let shown = serde_json::to_string(&primary).unwrap();
    assert!(!shown.contains(PASSWORD) && !shown.contains(REPLICATION_PASSWORD), "no password in a status");
    // bosun's heartbeat: its terms are kept beside the data directory; then bosun goes
    // silent, and the standby's replies (read from the real pg_stat_replication) keep
    // the primary serving past the fencing time.
    let terms = Heartbeat { standbys: 1, fence_after_ms: 3000, quorum: 1 };
    let answer = block_on(api.heartbeat(&name_a, &terms, ASK)).unwrap();
    assert!(!answer.fenced, "{answer:?}");
    assert_eq!(read_terms(&terms_path(&a_data)), Some(terms));
    std::thread::sleep(Duration::from_secs(6));
    let log = std::fs::read_to_string(&a.log).unwrap();
    assert_eq!(in_recovery(pa), "f", "a primary whose standby replies does not fence itself:\n{log}");
    assert!(!block_on(api.status(&name_a, ASK)).unwrap().fenced);
    // The rest of this test has no bosun, and stops each instance in turn: terms
    // without standbys, as bosun gives a database of one instance, never fence.
    let alone = Heartbeat { standbys: 0, fence_after_ms: 3000, quorum: 1 };
    block_on(api.heartbeat(&name_a, &alone, ASK)).unwrap();
    assert_eq!(read_terms(&terms_path(&a_data)), Some(alone));
    // Callers without the token, or that do not trust the database's CA, get nothing
    // and change nothing; a malformed request is refused with a message.
    let wrong = Access { token: "guessed".into(), ..access.clone() };
    let denied = block_on(client(&wrong, &[(pa, qa)]).tell(&name_a, "replica", ASK)).unwrap_err();
    assert!(matches!(&denied, AskError::Unreachable(m) if m.starts_with("401")), "{denied:?}");
    let other_ca = credentials::access(&credentials::desired_secret(
        &database(),
        &credentials::desired_data(
            &database(),
            None,
            jiff::Timestamp::now(),
            &Default::default(),
            || "x".into(),
            credentials::Server::Own,
        )
        .unwrap()
        .unwrap(),
    ))
    .unwrap();
    let stranger = Access { token: access.token.clone(), ..other_ca };
    let refused = block_on(client(&stranger, &[(pa, qa)]).status(&name_a, ASK)).unwrap_err();
    assert!(matches!(&refused, AskError::Unreachable(m) if m.contains("certificate")), "{refused:?}");
    let malformed = block_on(api.tell(&name_a, "boss", ASK)).unwrap_err();
    assert!(matches!(&malformed, AskError::Refused(m) if m.starts_with("400") && m.contains("role")), "{malformed:?}");
    assert_eq!(in_recovery(pa), "f", "the primary is still the primary");
    assert!(!dir.join(format!("told-{pa}")).exists(), "nothing was recorded");

    // A standby has nothing to set up, and says nothing of it.
    let log = std::fs::read_to_string(&b.log).unwrap();
    assert!(!log.contains("passwords and the replication role are set"), "{log}");

    // Failover: a's postmaster killed (its instance manager exits, as its container
    // would); b made the primary promotes itself; the Service moves to it.
    let postmaster = std::fs::read_to_string(a_data.join("postmaster.pid")).unwrap();
    let postmaster = postmaster.lines().next().unwrap().to_owned();
    ok(Command::new("kill").args(["-9", &postmaster]).output().unwrap(), "kill -9");
    drop(a);
    set_role(&dir, pb, "primary");
    wait_until("b to promote itself", &b, Duration::from_secs(30), || in_recovery(pb) == "f");
    target.store(pb, Ordering::SeqCst);
    ok(sql(pb, "postgres", PASSWORD, "INSERT INTO t VALUES (3, 'on b')"), "write on the new primary");

    // The old primary returns as a replica: rewound onto b's timeline, it streams.
    set_role(&dir, pa, "replica");
    let a = start(&dir, &a_data, (pa, qa), svc);
    wait_until("a to stream from b", &a, Duration::from_secs(60), || {
        sql(pa, "postgres", PASSWORD, "SELECT v FROM t WHERE id = 3").stdout == b"on b\n"
    });
    assert_eq!(in_recovery(pa), "t", "the old primary accepts writes");
    let log = std::fs::read_to_string(&a.log).unwrap();
    assert!(log.contains("rewinding it with pg_rewind") && log.contains("rewound; starting as a hot standby"), "{log}");

    // Switchover back: b made a replica stops and waits for a primary; a made the
    // primary promotes; the Service moves; b rejoins a.
    set_role(&dir, pb, "replica");
    wait_until("b to stop as the primary", &b, Duration::from_secs(30), || {
        !sql(pb, "postgres", PASSWORD, "SELECT 1").status.success()
    });
    set_role(&dir, pa, "primary");
    wait_until("a to promote itself", &a, Duration::from_secs(30), || in_recovery(pa) == "f");
    target.store(pa, Ordering::SeqCst);
    ok(sql(pa, "postgres", PASSWORD, "INSERT INTO t VALUES (4, 'on a again')"), "write after the switchover");
    wait_until("b to stream from a", &b, Duration::from_secs(60), || {
        sql(pb, "postgres", PASSWORD, "SELECT v FROM t WHERE id = 4").stdout == b"on a again\n"
    });
    assert_eq!(in_recovery(pb), "t");
    assert_eq!(ok(sql(pb, "postgres", PASSWORD, "SELECT count(*) FROM t"), "count"), "4", "every row survives");
    assert!(b.child.try_wait().unwrap().is_none(), "b's instance manager ran on through its demotion");

    // The label is the only authority: b promoted behind bosun's back (by hand), its
    // label still `replica`, does not stay a primary: it stops and rejoins a.
    let promote = command(&format!("{BIN}/pg_ctl")).args(["promote", "--no-wait", "-D"]).arg(&b_data).output().unwrap();
    ok(promote, "pg_ctl promote by hand");
    wait_until("b to rejoin after a promotion its label did not ask for", &b, Duration::from_secs(60), || {
        in_recovery(pb) == "t"
    });
    ok(sql(pa, "postgres", PASSWORD, "INSERT INTO t VALUES (5, 'after the stray promotion')"), "write on a");
    wait_until("b to stream from a again", &b, Duration::from_secs(60), || {
        sql(pb, "postgres", PASSWORD, "SELECT count(*) FROM t").stdout == b"5\n"
    });
    let log = std::fs::read_to_string(&b.log).unwrap();
    assert_eq!(log.matches("bosun made this instance a standby: stopping the primary").count(), 2, "{log}");

    // Told directly, before the label's file shows it: b promotes at once; the file
    // then refreshed with another role (a label that moved on) wins over what b was
    // told: b stops and rejoins. A tell never outlives a refresh of the file.
    ok(sql(pa, "postgres", PASSWORD, "CHECKPOINT"), "checkpoint");
    block_on(api.tell(&name_b, "primary", ASK)).unwrap();
    wait_until("b to promote on what it was told", &b, Duration::from_secs(30), || in_recovery(pb) == "f");
    set_role(&dir, pb, "replica");
    wait_until("b to follow its refreshed file and rejoin", &b, Duration::from_secs(60), || in_recovery(pb) == "t");
    ok(sql(pa, "postgres", PASSWORD, "INSERT INTO t VALUES (6, 'after the tell')"), "write on a");
    wait_until("b to stream from a after the tell", &b, Duration::from_secs(60), || {
        sql(pb, "postgres", PASSWORD, "SELECT count(*) FROM t").stdout == b"6\n"
    });
    drop(b);
    drop(a);
    // No password in either instance's log (the managers' and the servers').
    for port in [pa, pb] {
        let log = std::fs::read_to_string(dir.join(format!("server-{port}.log"))).unwrap();
        for password in [PASSWORD, REPLICATION_PASSWORD, APP_PASSWORD] {
            assert!(!log.contains(password), "a password in the log of {port}");
        }
    }
    // Who may connect is the manager's file, written at each start; the data's own is
    // not read (a clone copied it, initdb wrote it with a rule for any host).
    let hba = std::fs::read_to_string(dir.join(format!("pg_hba-{pa}.conf"))).unwrap();
    assert!(hba.contains("hostssl all          \"postgres\"  all  reject\n"), "{hba}");
    let others: String = hba
        .lines()
        .filter(|l| !l.contains("reject") && !l.contains("enableSuperuserAccess"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(others, bosun_instance::access::HBA);
    let _ = std::fs::remove_dir_all(&dir);
}
