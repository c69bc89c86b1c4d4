//! `make bench-tls`: what TLS costs a PostgreSQL as bosun configures it (TLS 1.3, the
//! certificate bosun issues, scram passwords), measured on one server of Debian's
//! PostgreSQL 15 on this machine, over TCP on the loopback, TLS off and on in the same
//! run, alternately (the best of `--runs` each):
//!
//! * a connection's set-up: `pgbench -C -S` (a new connection per transaction),
//!   libpq's average connection time (TCP, TLS handshake, scram) and transactions/s;
//! * bulk reads: `pg_dump` of a pgbench database of `--scale` to /dev/null, and a base
//!   backup (`pg_basebackup -Ft -D -`, the replication protocol a clone uses), in MiB/s.
//!
//! Prints a table and writes JSON to `target/bench/tls.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use bosun_bench::runner::print_report;
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// pgbench's scale of the database read in bulk (20 ≈ 300 MiB).
    #[arg(long, default_value_t = 20)]
    scale: u32,
    /// Runs of each measurement, TLS off and on alternately; the best is kept.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// How long each connection benchmark runs, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u32,
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const PASSWORD: &str = "bench-tls-password";
fn root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n")
}

/// `path` (and what is in it) handed to the postgres user when the server runs as it.
fn give_to_postgres(path: &Path) -> anyhow::Result<()> {
    if root() {
        let mut chown = Command::new("chown");
        chown.args(["-R", "postgres:postgres"]).arg(path);
        run(chown, "chown")?;
    }
    Ok(())
}

/// Run as the postgres user when root: the server refuses root.
fn as_postgres(program: &str) -> Command {
    if root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

fn run(mut command: Command, what: &str) -> anyhow::Result<String> {
    let out = command.stdin(Stdio::null()).output().with_context(|| format!("{what} could not run"))?;
    ensure!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// A client program on the server at `port`, TLS as `sslmode` says.
fn client(program: &str, port: u16, sslmode: &str) -> Command {
    let mut command = Command::new(Path::new(PG_BIN).join(program));
    command
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", "postgres")
        .env("PGPASSWORD", PASSWORD)
        .env("PGDATABASE", "postgres")
        .env("PGSSLMODE", sslmode);
    command
}

struct Server {
    dir: PathBuf,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut stop = as_postgres(&format!("{PG_BIN}/pg_ctl"));
        stop.args(["stop", "-m", "immediate", "-D"]).arg(self.dir.join("data"));
        let _ = stop.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server with bosun's TLS settings and certificate, which also takes plaintext
/// connections from the loopback (for the comparison; a database bosun runs does not).
fn start() -> anyhow::Result<Server> {
    let dir = std::env::temp_dir().join(format!("bosun-bench-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let server = Server { dir: dir.clone(), port };
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let life = bosun_resources::pki::Lifetimes::default();
    let data = bosun_resources::pki::apply(
        &bosun_resources::pki::Plan::Create,
        &Default::default(),
        &names,
        jiff::Timestamp::now(),
        &life,
    )
    .map_err(anyhow::Error::msg)?;
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let path = dir.join(key);
        std::fs::write(&path, &data[key])?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    }
    let pwfile = dir.join("pw");
    std::fs::write(&pwfile, PASSWORD)?;
    give_to_postgres(&dir)?;
    let mut initdb = as_postgres(&format!("{PG_BIN}/initdb"));
    initdb.arg("-D").arg(dir.join("data")).args(["-U", "postgres", "--auth=scram-sha-256", "--no-sync"]);
    initdb.arg(format!("--pwfile={}", pwfile.display()));
    run(initdb, "initdb")?;
    std::fs::write(
        dir.join("hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 scram-sha-256\n\
         hostssl replication all 127.0.0.1/32 scram-sha-256\nhostnossl replication all 127.0.0.1/32 scram-sha-256\n",
    )?;
    give_to_postgres(&dir.join("hba.conf"))?;
    let settings = [
        format!("port={port}"),
        "listen_addresses=127.0.0.1".to_owned(),
        format!("unix_socket_directories={}", dir.display()),
        format!("hba_file={}", dir.join("hba.conf").display()),
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", dir.join("tls.crt").display()),
        format!("ssl_key_file={}", dir.join("tls.key").display()),
        "ssl_min_protocol_version=TLSv1.3".to_owned(),
        "fsync=off".to_owned(),
    ];
    let options: Vec<String> = settings.iter().map(|s| format!("-c {s}")).collect();
    let mut pg_ctl = as_postgres(&format!("{PG_BIN}/pg_ctl"));
    pg_ctl.args(["start", "-w", "-D"]).arg(dir.join("data")).arg("-l").arg(dir.join("log"));
    pg_ctl.args(["-o", &options.join(" ")]);
    run(pg_ctl, "pg_ctl start")?;
    Ok(server)
}

/// pgbench's "average connection time" (ms) and tps of `-C -S` for `seconds`.
fn connections(port: u16, sslmode: &str, seconds: u32) -> anyhow::Result<(f64, f64)> {
    let mut pgbench = client("pgbench", port, sslmode);
    pgbench.args(["-n", "-C", "-S", "-c", "1", "-T", &seconds.to_string()]);
    let out = run(pgbench, "pgbench -C")?;
    let number = |label: &str| -> anyhow::Result<f64> {
        let line = out.lines().find(|l| l.contains(label)).with_context(|| format!("no '{label}' in:\n{out}"))?;
        let value = line.split('=').nth(1).unwrap_or_default().split_whitespace().next().unwrap_or_default();
        value.parse().with_context(|| format!("'{line}'"))
    };
    Ok((number("average connection time")?, number("tps")?))
}

/// MiB/s of `command`'s output (written to /dev/null), `bytes` being what it reads.
fn throughput(mut command: Command, bytes: u64, what: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let status = command.stdout(Stdio::null()).stderr(Stdio::null()).status().with_context(|| what.to_owned())?;
    ensure!(status.success(), "{what} failed");
    Ok(bytes as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

fn best(values: &[f64], higher_is_better: bool) -> f64 {
    let pick = |a: f64, b: f64| if higher_is_better { a.max(b) } else { a.min(b) };
    values.iter().copied().reduce(pick).unwrap_or(0.0)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !Path::new(PG_BIN).join("postgres").exists() {
        bail!("PostgreSQL 15 is not installed at {PG_BIN} (hack/prerequisites.sh installs it)");
    }
    let server = start()?;
    let port = server.port;
    let mut init = client("pgbench", port, "disable");
    init.args(["-i", "-q", "-s", &args.scale.to_string()]);
    run(init, "pgbench -i")?;
    let mut size = client("psql", port, "disable");
    size.args(["-X", "-tAc", "SELECT pg_database_size('postgres')"]);
    let bytes: u64 = run(size, "the database's size")?.trim().parse()?;
    let mut ssl = client("psql", port, "require");
    ssl.args(["-X", "-tAc", "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"]);
    let protocol = run(ssl, "the TLS version")?.trim().to_owned();
    ensure!(protocol == "TLSv1.3", "the connection is {protocol}, not TLSv1.3");

    let (mut connect, mut tps, mut dump, mut base) =
        ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()], [Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for run_no in 0..args.runs {
        for (i, sslmode) in ["disable", "require"].into_iter().enumerate() {
            eprintln!("run {}/{}: sslmode={sslmode}", run_no + 1, args.runs);
            let (ms, t) = connections(port, sslmode, args.seconds)?;
            connect[i].push(ms);
            tps[i].push(t);
            let mut pg_dump = client("pg_dump", port, sslmode);
            pg_dump.args(["-Fp", "postgres"]);
            dump[i].push(throughput(pg_dump, bytes, "pg_dump")?);
            let mut backup = client("pg_basebackup", port, sslmode);
            backup.args(["-D", "-", "-Ft", "-X", "none", "-c", "fast"]);
            base[i].push(throughput(backup, bytes, "pg_basebackup")?);
        }
    }
    let ratio = |v: &[Vec<f64>; 2], higher: bool| best(&v[1], higher) / best(&v[0], higher).max(1e-9);
    let report = serde_json::json!({
        "database_mib": bytes as f64 / (1 << 20) as f64,
        "runs": args.runs,
        "tls_version": protocol,
        "connect_ms_plain": best(&connect[0], false),
        "connect_ms_tls": best(&connect[1], false),
        "connect_ms_tls_over_plain": ratio(&connect, false),
        "connect_tps_plain": best(&tps[0], true),
        "connect_tps_tls": best(&tps[1], true),
        "pg_dump_mib_s_plain": best(&dump[0], true),
        "pg_dump_mib_s_tls": best(&dump[1], true),
        "pg_dump_tls_over_plain": ratio(&dump, true),
        "base_backup_mib_s_plain": best(&base[0], true),
        "base_backup_mib_s_tls": best(&base[1], true),
        "base_backup_tls_over_plain": ratio(&base, true),
    });
    drop(server);
    std::thread::sleep(Duration::from_millis(10));
    print_report(&report, "target/bench/tls.json")
}
