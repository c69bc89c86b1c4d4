//! The replication scripts of the PostgreSQL StatefulSet, run on the host against
//! Debian's PostgreSQL 15 binaries: a primary set up with the generated setup script,
//! a standby bootstrapped with the generated bootstrap script, and a row written on
//! the primary read on the standby — real streaming replication, no cluster needed.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use bosun_resources::postgresql::{bootstrap_script, primary_setup_script};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const PASSWORD: &str = "Sup3r-secret";
const REPLICATION_PASSWORD: &str = "r3pl1cation";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

fn start(dir: &Path, pgdata: &Path, port: u16, via_bootstrap: Option<&[(&str, String)]>) -> Server {
    let log = dir.join(format!("server-{port}.log"));
    let file = std::fs::File::create(&log).unwrap();
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
    ];
    let mut c = match via_bootstrap {
        // The standby starts as in its pod: `bash -c BOOTSTRAP bootstrap postgres …`.
        Some(env) => {
            let mut c = command("bash");
            c.args(["-c", &bootstrap_script(), "bootstrap", &postgres]).args(server_args).envs(env.iter().cloned());
            c
        }
        None => {
            let mut c = command(&postgres);
            c.args(server_args);
            c
        }
    };
    let child = c
        .env("PATH", path_env())
        .env("PGDATA", pgdata)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("start postgres");
    Server { child, log }
}

/// `psql` over TCP with a password, as a client in another pod would connect.
fn sql(port: u16, user: &str, password: &str, query: &str) -> Output {
    Command::new(format!("{BIN}/psql"))
        .args(["-X", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", user, "-d", "postgres"])
        .args(["-v", "ON_ERROR_STOP=1", "-tAc", query])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "3")
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

#[test]
fn a_row_written_on_the_primary_is_read_on_the_standby() {
    assert!(
        Path::new(BIN).join("pg_basebackup").exists(),
        "PostgreSQL 15 is not installed at {BIN} (hack/prerequisites.sh installs it)"
    );
    let dir = std::env::temp_dir().join(format!("bosun-replication-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if running_as_root() {
        ok(Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]).output().unwrap(), "chown");
    }
    let primary_data = dir.join("primary");
    let standby_data = dir.join("standby/pgdata");
    ok(command("mkdir").args(["-p", dir.join("standby").to_str().unwrap()]).output().unwrap(), "mkdir");

    // The primary as the image's entrypoint makes it: local connections trusted, TCP
    // by password — and no password yet: the setup script sets it.
    let init = command(&format!("{BIN}/initdb"))
        .args([
            "-D",
            primary_data.to_str().unwrap(),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .args(["--no-sync", "-E", "UTF8", "--locale=C"])
        .output()
        .unwrap();
    ok(init, "initdb");
    let (p1, p2) = (free_port(), free_port());
    let primary = start(&dir, &primary_data, p1, None);

    let setup = || {
        command("bash")
            .args(["-c", &primary_setup_script()])
            .env("PATH", path_env())
            .envs([
                ("BOSUN_ORDINAL", "0"),
                ("BOSUN_SETUP_LOG", "/dev/stderr"),
                ("BOSUN_SETUP_TIMEOUT", "60"),
                ("POSTGRES_USER", "postgres"),
                ("POSTGRES_PASSWORD", PASSWORD),
                ("REPLICATION_USER", "replicator"),
                ("REPLICATION_PASSWORD", REPLICATION_PASSWORD),
                ("PGHOST", dir.to_str().unwrap()),
                ("PGPORT", &p1.to_string()),
            ])
            .output()
            .unwrap()
    };
    let first = setup();
    let log = String::from_utf8_lossy(&first.stderr).into_owned();
    ok(first, "the primary setup script");
    assert!(log.contains("passwords and the replication role are set"), "{log}");
    // The superuser's password is the one from the environment (the Secret).
    assert_eq!(ok(sql(p1, "postgres", PASSWORD, "SELECT 1"), "login with the password"), "1");
    assert!(!sql(p1, "postgres", "wrong", "SELECT 1").status.success(), "a wrong password was accepted");
    ok(
        sql(
            p1,
            "postgres",
            PASSWORD,
            "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'before')",
        ),
        "write",
    );

    // The standby: an empty data directory, cloned by the bootstrap script.
    let env = [
        ("BOSUN_ORDINAL", "1".to_owned()),
        ("PRIMARY_HOST", "127.0.0.1".to_owned()),
        ("PRIMARY_PORT", p1.to_string()),
        ("REPLICATION_USER", "replicator".to_owned()),
        ("REPLICATION_PASSWORD", REPLICATION_PASSWORD.to_owned()),
    ];
    let standby = start(&dir, &standby_data, p2, Some(&env));
    wait_until("the standby to accept connections", &standby, Duration::from_secs(60), || {
        sql(p2, "postgres", PASSWORD, "SELECT 1").status.success()
    });
    assert_eq!(ok(sql(p2, "postgres", PASSWORD, "SELECT pg_is_in_recovery()"), "recovery"), "t");
    assert!(standby_data.join("standby.signal").exists(), "pg_basebackup -R wrote no standby.signal");
    assert!(!dir.join("standby/pgdata.partial").exists());

    // Streaming: a row written on the primary after the clone shows on the standby.
    ok(sql(p1, "postgres", PASSWORD, "INSERT INTO t VALUES (2, 'after')"), "write after the clone");
    wait_until("the row on the standby", &standby, Duration::from_secs(30), || {
        sql(p2, "postgres", PASSWORD, "SELECT v FROM t WHERE id = 2").stdout == b"after\n"
    });
    // A hot standby is read-only.
    assert!(!sql(p2, "postgres", PASSWORD, "INSERT INTO t VALUES (9, 'x')").status.success());
    let senders = ok(sql(p1, "postgres", PASSWORD, "SELECT usename, state FROM pg_stat_replication"), "senders");
    assert_eq!(senders, "replicator|streaming");

    // Running the setup again (every start of the primary does) changes nothing: the
    // hba line is not added twice, and the standby keeps streaming.
    ok(setup(), "the primary setup script, again");
    ok(sql(p1, "postgres", PASSWORD, "INSERT INTO t VALUES (3, 'again')"), "write after the second setup");
    wait_until("the third row on the standby", &standby, Duration::from_secs(30), || {
        sql(p2, "postgres", PASSWORD, "SELECT v FROM t WHERE id = 3").stdout == b"again\n"
    });
    drop(standby);
    drop(primary);
    let hba = std::fs::read_to_string(primary_data.join("pg_hba.conf")).unwrap();
    assert_eq!(hba.matches("host replication replicator all md5").count(), 1, "{hba}");
    let _ = std::fs::remove_dir_all(&dir);
}
