//! `make bench-pitr`: continuous backup of the PostgreSQL of `hack/backends.sh` through
//! the release `bosun`, into S3 (MinIO), and a recovery from it.
//!
//! Measured:
//! * a base backup (`bosun backup run --method base`) in MiB/s of the uncompressed tar,
//!   beside the limit: `pg_basebackup -D - -Ft` (same flags) to /dev/null on the same
//!   machine, the faster of a run before and one after bosun's (goal ≥ 0.9×), and
//!   beside `pg_basebackup | zstd -3` (the compression alone, one thread);
//! * `bosun wal push` of every WAL file written after it (about `--wal` of them, real
//!   WAL of UPDATEs, held on the server by a replication slot meanwhile): latency per
//!   file, p50 and p99, as the server's `archive_command` sees it (process start
//!   included), and the runner's peak RSS;
//! * the recovery of all of it: `bosun recover` (the base backup into a new data
//!   directory) and the replay of the archived WAL by a server started on it, until it
//!   promotes; the recovered table's checksum must be the source's.
//!
//! Prints a table and writes JSON to `target/bench/pitr-<size>.json`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bosun_bench::runner::{Run, load, measured, parse_size, print_report, psql};
use bosun_testing::backends::backends;
use clap::Parser;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt};

#[derive(Parser, Debug)]
struct Args {
    /// The database's size (its order table, as a dump would be).
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// How much WAL to write after the base backup (and to archive, and to replay).
    #[arg(long, default_value = "1GiB")]
    wal: String,
    /// The bosun binary to measure.
    #[arg(long, default_value = "target/release/bosun")]
    bosun: std::path::PathBuf,
    /// Keep the source database for the next run (it is reused when its size matches).
    #[arg(long)]
    keep_database: bool,
}

const SLOT: &str = "bosun_bench_pitr";
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// Run as the postgres user: the server refuses root, and owns what `bosun recover` writes.
const AS_POSTGRES: [&str; 5] = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"];

/// The `q`-quantile of `values` (sorted in place), nearest rank.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len().max(1));
    values.get(rank - 1).copied().unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (target_bytes, wal_bytes) = (parse_size(&args.size)?, parse_size(&args.wal)?);
    let bosun = std::fs::canonicalize(&args.bosun)
        .with_context(|| format!("{}: cargo build --release -p bosun", args.bosun.display()))?;
    let b = backends();
    let label = args.size.replace(['.', ' '], "_");
    let db = format!("bench_pitr_{}", label.to_ascii_lowercase());
    let rows = target_bytes / 160;
    let reuse = psql(&b, "postgres", &format!("SELECT count(*) FROM pg_database WHERE datname = '{db}'")).await? == "1"
        && psql(&b, &db, "SELECT count(*) FROM orders").await.ok() == Some(rows.to_string());
    if !reuse {
        eprintln!("loading {rows} rows into {db} …");
        load(&b, &db, rows).await?;
    }
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);

    // The limit: the server's own base backup, read and thrown away.
    let limit = |filter: &'static str| {
        let b = b.clone();
        async move {
            let started = Instant::now();
            let script =
                format!("{PG_BIN}/pg_basebackup -D - -Ft -X fetch --checkpoint=fast --no-password {filter}| wc -c");
            let out = b.run("sh", &["-c", &script]).await;
            ensure!(out.ok, "pg_basebackup: {out}");
            let bytes: f64 = out.stdout.trim().parse().context("pg_basebackup's size")?;
            anyhow::Ok(mib(bytes) / started.elapsed().as_secs_f64())
        }
    };
    let limit_before = limit("").await?;

    // Every WAL file from here on stays on the server until the end.
    let _ = psql(&b, "postgres", &format!("SELECT pg_drop_replication_slot('{SLOT}')")).await;
    psql(&b, "postgres", &format!("SELECT pg_create_physical_replication_slot('{SLOT}', true)")).await?;

    let prefix = format!("bench/pitr-{label}-{:08x}", rand::random::<u32>());
    let destination = format!("s3://{}/{prefix}", b.var("S3_BUCKET"));
    let endpoint = b.var("S3_ENDPOINT").to_owned();
    let place = ["--destination", &destination, "--endpoint", &endpoint, "--namespace", "bench", "--name", "pitr"];
    let source = b.postgres_url(&db);
    let base_args = [&["backup", "run", "--method", "base", "--source", &source][..], &place].concat();
    let base = measured(&b, &bosun, &base_args).await?;
    let limit_after = limit("").await?;
    // What the same compression costs on its own: zstd's command at bosun's level, one thread.
    let zstd_only = limit("| zstd -3 -T1 -q ").await?;
    let limit_mib_s = limit_before.max(limit_after);
    let base_mib = mib(base.result["uncompressedSize"].as_f64().context("uncompressedSize")?);
    let base_mib_s = base_mib / base.wall.as_secs_f64();
    let start_wal = base.result["wal"]["startWal"].as_str().context("the base backup's WAL")?.to_owned();

    // WAL: rounds of UPDATEs until `--wal` was written since the base backup.
    let lsn = |sql: &'static str| {
        let b = b.clone();
        async move { psql(&b, "postgres", sql).await?.parse::<f64>().context("an LSN difference") }
    };
    let written_since =
        "SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots WHERE slot_name = 'bosun_bench_pitr'";
    let mut round = 0;
    while lsn(written_since).await? < wal_bytes as f64 {
        psql(&b, &db, &format!("UPDATE orders SET amount = amount + 1 WHERE id % 8 = {}", round % 8)).await?;
        round += 1;
    }
    let checksum = "SELECT count(*) || ' ' || sum(id) || ' ' || sum(amount) || ' ' || sum(length(note)) FROM orders";
    let source_sum = psql(&b, &db, checksum).await?;
    psql(&b, "postgres", "SELECT pg_switch_wal()").await?;
    psql(&b, "postgres", "CHECKPOINT").await?;

    // Archive every finished WAL file since the base backup's start, as the server would.
    let data_dir = psql(&b, "postgres", "SHOW data_directory").await?;
    let current = psql(&b, "postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())").await?;
    let mut files: Vec<String> = std::fs::read_dir(format!("{data_dir}/pg_wal"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.len() == 24 && n.as_str() >= start_wal.as_str() && n.as_str() < current.as_str())
        .collect();
    files.sort();
    let (mut latencies, mut push_peak_kib) = (Vec::new(), 0u64);
    for file in &files {
        let path = format!("{data_dir}/pg_wal/{file}");
        let push: Run = measured(&b, &bosun, &[&["wal", "push", &path][..], &place].concat()).await?;
        latencies.push(push.wall.as_secs_f64() * 1000.0);
        push_peak_kib = push_peak_kib.max(push.peak_rss_kib);
    }
    let archived_mib = files.len() as f64 * 16.0;
    let _ = psql(&b, "postgres", &format!("SELECT pg_drop_replication_slot('{SLOT}')")).await;

    // Recovery: a new data directory from the archive, then a server replaying it.
    let dir = std::env::temp_dir().join(format!("bosun-bench-pitr-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir)?;
    b.ok("chown", &["postgres:postgres", &dir.display().to_string()]).await;
    let pgdata = dir.join("data").display().to_string();
    let settings = dir.join("recovery.conf").display().to_string();
    let recover_args = [
        &AS_POSTGRES[..],
        &[bosun.to_str().context("utf-8 path")?, "recover", "--pgdata", &pgdata, "--settings-file", &settings],
        &place,
    ]
    .concat();
    let recover = measured(&b, std::path::Path::new("setpriv"), &recover_args[1..]).await?;
    let mut server_args: Vec<String> = AS_POSTGRES[1..].iter().map(|s| (*s).to_owned()).collect();
    server_args.push(format!("{PG_BIN}/postgres"));
    let socket = dir.display().to_string();
    for setting in [
        "port=54329".to_owned(),
        "listen_addresses=".to_owned(),
        format!("unix_socket_directories={socket}"),
        "archive_mode=off".to_owned(),
    ] {
        server_args.extend(["-c".to_owned(), setting]);
    }
    for line in std::fs::read_to_string(&settings)?.lines().filter(|l| !l.is_empty()) {
        server_args.extend(["-c".to_owned(), line.to_owned()]);
    }
    server_args.extend(["-D".to_owned(), pgdata.clone()]);
    let replay_started = Instant::now();
    let mut server = b
        .command("setpriv")
        .args(&server_args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("server.log"))?)
        .spawn()?;
    let on_recovered = |sql: &str| {
        let sql = sql.to_owned();
        let (b, socket, db) = (b.clone(), socket.clone(), db.clone());
        async move {
            let out = b.run("psql", &["-X", "-qAt", "-h", &socket, "-p", "54329", "-d", &db, "-c", &sql]).await;
            out.ok.then(|| out.stdout.trim().to_owned())
        }
    };
    loop {
        if on_recovered("SELECT pg_is_in_recovery()").await.as_deref() == Some("f") {
            break;
        }
        ensure!(
            server.try_wait()?.is_none(),
            "the recovering server stopped; see {}",
            dir.join("server.log").display()
        );
        ensure!(replay_started.elapsed() < Duration::from_secs(3600), "no promotion within an hour");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let replay = replay_started.elapsed();
    let recovered_sum = on_recovered(checksum).await.context("the recovered table")?;
    ensure!(recovered_sum == source_sum, "the recovered table differs: {recovered_sum} != {source_sum}");

    // Clean up: the server, its directory, the objects, and the source unless kept.
    if let Some(pid) = server.id() {
        b.ok("kill", &["-INT", &pid.to_string()]).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(60), server.wait()).await;
    std::fs::remove_dir_all(&dir)?;
    if !args.keep_database {
        psql(&b, "postgres", &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await?;
    }
    let store = AmazonS3Builder::new()
        .with_bucket_name(b.var("S3_BUCKET"))
        .with_endpoint(&endpoint)
        .with_region(b.var("AWS_REGION"))
        .with_access_key_id(b.var("AWS_ACCESS_KEY_ID"))
        .with_secret_access_key(b.var("AWS_SECRET_ACCESS_KEY"))
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()?;
    let stored: Vec<_> = store.list(Some(&Path::from(prefix.as_str()))).try_collect().await?;
    for object in stored {
        store.delete(&object.location).await?;
    }

    let mut sorted = latencies.clone();
    let report = serde_json::json!({
        "size": args.size,
        "rows": rows,
        "destination": "s3 (MinIO on 127.0.0.1)",
        "bosun": bosun.display().to_string(),
        "base_backup_mib": base_mib,
        "base_backup_s": base.wall.as_secs_f64(),
        "base_backup_mib_per_s": base_mib_s,
        "limit_pg_basebackup_mib_per_s": limit_mib_s,
        "base_backup_vs_limit": base_mib_s / limit_mib_s,
        "base_backup_vs_limit_goal": 0.9,
        "pg_basebackup_zstd3_mib_per_s": zstd_only,
        "base_backup_vs_pg_basebackup_zstd3": base_mib_s / zstd_only,
        "base_backup_peak_rss_mib": base.peak_rss_kib as f64 / 1024.0,
        "wal_files_pushed": files.len(),
        "wal_push_p50_ms": quantile(&mut sorted, 0.5),
        "wal_push_p99_ms": quantile(&mut sorted, 0.99),
        "wal_push_peak_rss_mib": push_peak_kib as f64 / 1024.0,
        "wal_replayed_mib": archived_mib,
        "recover_restore_base_s": recover.wall.as_secs_f64(),
        "recover_replay_to_promotion_s": replay.as_secs_f64(),
        "recovery_total_s": recover.wall.as_secs_f64() + replay.as_secs_f64(),
        "recover_peak_rss_mib": recover.peak_rss_kib as f64 / 1024.0,
    });
    let path = format!("target/bench/pitr-{label}.json");
    print_report(&report, &path)?;
    Ok(())
}
