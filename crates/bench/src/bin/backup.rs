//! `make bench-backup`: back up a PostgreSQL database of a given size (default 1 GiB of
//! dump) to S3 (MinIO), GCS (fake-gcs-server), Azure (Azurite) or a directory — the
//! servers of `hack/backends.sh` — with the release `bosun`, plain and encrypted (age),
//! restore each into an empty database, and report what it cost beside:
//! * the limit: `pg_dump` (the same format) to /dev/null;
//! * the pipeline people build by hand, for S3: `pg_dump | zstd | mc pipe` (the MinIO
//!   client, `hack/backends/build.sh mc`).
//!
//! Measured (each backup case `--repeat` times, the fastest kept; the machine is shared):
//! * backup and restore wall time and throughput, in MiB/s of uncompressed dump;
//! * compressed size and ratio;
//! * the runner's peak RSS (VmHWM, polled every 100 ms) and CPU time, for each run
//!   (the dump and restore tools are separate processes and not counted);
//! * the ratios the goals are stated in: bosun against the hand-made pipeline (≥ 0.95)
//!   and the limit (≥ 0.85), encrypted against plain (≥ 0.9), peak RSS ≤ 64 MiB.
//!
//! Prints a table and writes JSON to `target/bench/backup-<size>[-<destination>].json`
//! (no suffix for S3).

use std::time::Instant;

use anyhow::{Context as _, ensure};
use bosun_bench::runner::{load, measured, measured_pipeline, parse_size, print_report, psql};
use bosun_testing::backends::{Backends, backends};
use clap::Parser;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt};

#[derive(Parser, Debug)]
struct Args {
    /// Uncompressed dump size to aim for: `1GiB`, `256MiB`, `100MB`, or bytes.
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// The bosun binary to measure.
    #[arg(long, default_value = "target/release/bosun")]
    bosun: std::path::PathBuf,
    /// Keep the source database for the next run (it is reused when its size matches).
    #[arg(long)]
    keep_database: bool,
    /// Where the dump goes.
    #[arg(long, value_enum, default_value = "s3")]
    destination: Dest,
    /// Runs of each backup case; the fastest counts.
    #[arg(long, default_value_t = 2)]
    repeat: u32,
    /// The MinIO client for the hand-made pipeline (S3 only); none: not measured.
    #[arg(long, env = "BOSUN_BENCH_MC")]
    mc: Option<std::path::PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    S3,
    Gcs,
    Azure,
    File,
}

/// The runner's `--destination` and `--endpoint`, the store to clean up afterwards,
/// and how the report names it.
type Place = (String, Option<String>, Box<dyn ObjectStore>, &'static str);

/// The [`Place`] of `dest` under `prefix`.
fn place(b: &Backends, dest: Dest, prefix: &str) -> anyhow::Result<Place> {
    let http = || ClientOptions::new().with_allow_http(true);
    Ok(match dest {
        Dest::S3 => (
            format!("s3://{}/{prefix}", b.var("S3_BUCKET")),
            Some(b.var("S3_ENDPOINT").to_owned()),
            Box::new(
                AmazonS3Builder::new()
                    .with_bucket_name(b.var("S3_BUCKET"))
                    .with_endpoint(b.var("S3_ENDPOINT"))
                    .with_region(b.var("AWS_REGION"))
                    .with_access_key_id(b.var("AWS_ACCESS_KEY_ID"))
                    .with_secret_access_key(b.var("AWS_SECRET_ACCESS_KEY"))
                    .with_client_options(http())
                    .build()?,
            ),
            "s3 (MinIO on 127.0.0.1)",
        ),
        Dest::Gcs => (
            format!("gs://{}/{prefix}", b.var("GCS_BUCKET")),
            Some(b.var("GCS_ENDPOINT").to_owned()),
            Box::new(
                GoogleCloudStorageBuilder::new()
                    .with_bucket_name(b.var("GCS_BUCKET"))
                    .with_service_account_path(b.var("GOOGLE_SERVICE_ACCOUNT"))
                    .with_client_options(http())
                    .build()?,
            ),
            "gcs (fake-gcs-server on 127.0.0.1)",
        ),
        Dest::Azure => (
            format!("azure://{}/{prefix}", b.var("AZURE_CONTAINER")),
            Some(b.var("AZURE_ENDPOINT").to_owned()),
            Box::new(
                MicrosoftAzureBuilder::new()
                    .with_account(b.var("AZURE_STORAGE_ACCOUNT_NAME"))
                    .with_access_key(b.var("AZURE_STORAGE_ACCOUNT_KEY"))
                    .with_container_name(b.var("AZURE_CONTAINER"))
                    .with_endpoint(b.var("AZURE_ENDPOINT").to_owned())
                    .with_allow_http(true)
                    .build()?,
            ),
            "azure (Azurite on 127.0.0.1)",
        ),
        Dest::File => {
            let dir = std::env::temp_dir().join("bosun-bench-backup");
            std::fs::create_dir_all(&dir)?;
            (
                format!("file://{}/{prefix}", dir.display()),
                None,
                Box::new(LocalFileSystem::new_with_prefix(&dir)?),
                "file (local disk)",
            )
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let target_bytes = parse_size(&args.size)?;
    ensure!(args.bosun.exists(), "{} does not exist: cargo build --release -p bosun", args.bosun.display());
    let b = backends();
    let label = args.size.replace(['.', ' '], "_");
    let source = format!("bench_backup_{}", label.to_ascii_lowercase());
    let target = format!("{source}_restore");
    let rows = target_bytes / 160;

    let have = psql(&b, "postgres", &format!("SELECT count(*) FROM pg_database WHERE datname = '{source}'")).await?;
    let reuse = have == "1" && psql(&b, &source, "SELECT count(*) FROM orders").await.ok() == Some(rows.to_string());
    if reuse {
        eprintln!("reusing database {source} ({rows} rows)");
    } else {
        eprintln!("loading {rows} rows into {source} …");
        let t = Instant::now();
        load(&b, &source, rows).await?;
        eprintln!("loaded in {:.0}s", t.elapsed().as_secs_f64());
    }
    let checksum = "SELECT count(*) || ' ' || sum(id) || ' ' || sum(amount) || ' ' || sum(length(note)) FROM orders";
    let source_sum = psql(&b, &source, checksum).await?;

    let prefix = format!("bench/backup-{label}-{:08x}", rand::random::<u32>());
    let (destination, endpoint, store, described) = place(&b, args.destination, &prefix)?;
    let endpoint_args: Vec<&str> = endpoint.iter().flat_map(|e| ["--endpoint", e.as_str()]).collect();
    let source_url = b.postgres_url(&source);
    let fastest = |runs: Vec<std::time::Duration>| runs.into_iter().min().unwrap_or_default().as_secs_f64();

    // The limit: the dump tool alone, as the runner runs it, into nothing.
    let mut limit = Vec::new();
    for _ in 0..args.repeat {
        limit.push(
            measured_pipeline(&b, &format!("pg_dump --format=custom --compress=0 -d {source} >/dev/null"), &[]).await?,
        );
    }
    let limit_s = fastest(limit);

    // The hand-made pipeline: the same dump through zstd (its default level, as the
    // runner's) into the bucket with `mc pipe`.
    let hand_s = match (&args.mc, args.destination) {
        (Some(mc), Dest::S3) => {
            let host = format!(
                "{}://{}:{}@{}",
                if b.var("S3_ENDPOINT").starts_with("https") { "https" } else { "http" },
                b.var("AWS_ACCESS_KEY_ID"),
                b.var("AWS_SECRET_ACCESS_KEY"),
                b.var("S3_ENDPOINT").split_once("://").map_or(b.var("S3_ENDPOINT"), |(_, h)| h)
            );
            let config = std::env::temp_dir().join("bosun-bench-mc");
            let env = [("MC_HOST_bench", host.as_str()), ("MC_CONFIG_DIR", config.to_str().unwrap_or("/tmp"))];
            let mut runs = Vec::new();
            for i in 0..args.repeat {
                let script = format!(
                    "pg_dump --format=custom --compress=0 -d {source} | zstd -q -3 | {} pipe --quiet bench/{}/{prefix}/hand-{i}.pgdump.zst",
                    mc.display(),
                    b.var("S3_BUCKET")
                );
                runs.push(measured_pipeline(&b, &script, &env).await?);
            }
            Some(fastest(runs))
        }
        _ => None,
    };

    // bosun, plain and encrypted; each restored into an empty database.
    let key_file = std::env::temp_dir().join(format!("bosun-bench-{label}.agekey"));
    {
        use age::secrecy::ExposeSecret;
        std::fs::write(&key_file, format!("{}\n", age::x25519::Identity::generate().to_string().expose_secret()))?;
    }
    let key_args = ["--encryption-key-file", key_file.to_str().context("key file path")?];
    let target_url = b.postgres_url(&target);
    let mut cases = Vec::new();
    for (case, extra) in [("plain", &[][..]), ("encrypted", &key_args[..])] {
        let name = format!("bench-{case}");
        let backup_args = [
            "backup",
            "run",
            "--source",
            &source_url,
            "--destination",
            &destination,
            "--name",
            &name,
            "--keep-last",
            "1",
        ];
        let mut best: Option<bosun_bench::runner::Run> = None;
        for _ in 0..args.repeat {
            let run = measured(&b, &args.bosun, &[&backup_args[..], &endpoint_args, extra].concat()).await?;
            if best.as_ref().is_none_or(|b| run.wall < b.wall) {
                best = Some(run);
            }
        }
        let backup = best.context("no backup run")?;
        psql(&b, "postgres", &format!("DROP DATABASE IF EXISTS {target} WITH (FORCE)")).await?;
        psql(&b, "postgres", &format!("CREATE DATABASE {target}")).await?;
        let restore_args =
            ["restore", "run", "--latest", "--name", &name, "--target", &target_url, "--destination", &destination];
        let restore = measured(&b, &args.bosun, &[&restore_args[..], &endpoint_args, extra].concat()).await?;
        let restored_sum = psql(&b, &target, checksum).await?;
        ensure!(restored_sum == source_sum, "{case}: the restored table differs: {restored_sum} != {source_sum}");
        cases.push((case, backup, restore));
    }
    let _ = std::fs::remove_file(&key_file);

    // Clean up: the restored copy, the objects, and the source unless kept.
    psql(&b, "postgres", &format!("DROP DATABASE IF EXISTS {target} WITH (FORCE)")).await?;
    if !args.keep_database {
        psql(&b, "postgres", &format!("DROP DATABASE IF EXISTS {source} WITH (FORCE)")).await?;
    }
    let stored: Vec<_> = store.list(Some(&Path::from(prefix.as_str()))).try_collect().await?;
    for object in stored {
        store.delete(&object.location).await?;
    }

    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    let plain = &cases[0].1;
    let uncompressed = plain.result["uncompressedSize"].as_u64().context("uncompressedSize")? as f64;
    let compressed = plain.result["size"].as_u64().context("size")? as f64;
    let mut report = serde_json::json!({
        "size": args.size,
        "rows": rows,
        "destination": described,
        "bosun": args.bosun.display().to_string(),
        "repeat": args.repeat,
        "uncompressed_mib": mib(uncompressed),
        "compressed_mib": mib(compressed),
        "compression_ratio": uncompressed / compressed,
        "limit_pg_dump_s": limit_s,
        "limit_mib_per_s": mib(uncompressed) / limit_s,
        "hand_pipeline_s": hand_s,
        "hand_pipeline_mib_per_s": hand_s.map(|s| mib(uncompressed) / s),
        "peak_rss_goal_mib": 64,
    });
    for (case, backup, restore) in &cases {
        let fields = serde_json::json!({
            format!("{case}_backup_s"): backup.wall.as_secs_f64(),
            format!("{case}_backup_mib_per_s"): mib(uncompressed) / backup.wall.as_secs_f64(),
            format!("{case}_backup_peak_rss_mib"): backup.peak_rss_kib as f64 / 1024.0,
            format!("{case}_backup_cpu_s"): backup.cpu_seconds,
            format!("{case}_restore_s"): restore.wall.as_secs_f64(),
            format!("{case}_restore_mib_per_s"): mib(uncompressed) / restore.wall.as_secs_f64(),
            format!("{case}_restore_peak_rss_mib"): restore.peak_rss_kib as f64 / 1024.0,
            format!("{case}_restore_cpu_s"): restore.cpu_seconds,
        });
        report.as_object_mut().context("report")?.extend(fields.as_object().cloned().unwrap_or_default());
    }
    let (plain_s, encrypted_s) = (cases[0].1.wall.as_secs_f64(), cases[1].1.wall.as_secs_f64());
    let ratios = serde_json::json!({
        "ratio_bosun_vs_hand_pipeline (goal >= 0.95)": hand_s.map(|h| h / plain_s),
        "ratio_bosun_vs_limit (goal >= 0.85)": limit_s / plain_s,
        "ratio_encrypted_vs_plain (goal >= 0.9)": plain_s / encrypted_s,
    });
    report.as_object_mut().context("report")?.extend(ratios.as_object().cloned().unwrap_or_default());
    let suffix = match args.destination {
        Dest::S3 => String::new(),
        other => format!("-{}", format!("{other:?}").to_lowercase()),
    };
    let path = format!("target/bench/backup-{label}{suffix}.json");
    print_report(&report, &path)?;
    Ok(())
}
