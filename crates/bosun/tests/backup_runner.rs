//! `bosun backup run|list` and `bosun restore run` as a person runs them: the real
//! binary against real servers (`hack/backends.sh`: PostgreSQL, MariaDB, FerretDB for
//! MongoDB; MinIO, fake-gcs-server, Azurite and a directory for storage). What is
//! stored is checked by reading the bucket with the test's own clients.
//!
//! Every test has its own databases (dropped at the end) and its own prefix, so they
//! run in parallel. The backends are started if they are not running, and a test
//! fails (never skips) when they cannot be.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bosun_runner::manifest::{self, manifest_key_of};
use bosun_testing::backends::{Backends, Outcome, backends, unique};
use jiff::{SignedDuration, Timestamp};
use object_store::ObjectStoreExt;
use support::{Db, Dest, Engine, EngineExt, Place, Timed, backup_args, bosun_ok, days, listed, psql};

/// Back up a 10,000-row dataset from `engine` into `dest`, check what is stored,
/// drop the database, restore the latest backup and compare every row.
async fn round_trip(engine: Engine, dest: Dest) {
    let b = backends();
    let name = unique(&format!("rt_{}_{}", engine.short(), dest.short()));
    let db = Db::create(&b, engine, &name).await;
    db.load_dataset().await;
    let before = db.checksum().await;
    let place = Place::new(&b, dest, &format!("bosun-tests/{name}"));
    let folder = format!("roundtrip/{name}");

    let result = bosun_ok(&b, &backup_args(&db, &place, "roundtrip", &name, &[])).await;
    let key = place.relative(result["key"].as_str().expect("the result names the key"));
    let (stamp_key, manifest_key) =
        manifest::keys(&folder, result["started"].as_str().unwrap().parse().unwrap(), engine.extension());
    assert_eq!(key, stamp_key, "the dump is <namespace>/<name>/<stamp>.<ext>.zst under the prefix: {result}");

    // The object and its manifest are there, and nothing else.
    assert_eq!(place.keys(&folder).await, BTreeSet::from([key.clone(), manifest_key.clone()]));
    let m = place.manifest(&manifest_key).await.expect("a manifest beside the dump");
    let (size, sha256) = place.sha256(&key).await;
    assert_eq!(sha256, m.sha256, "the stored object's sha256 is the manifest's");
    assert_eq!(result["sha256"], sha256.as_str(), "… and the result's");
    assert_eq!((size, m.size), (result["size"].as_u64().unwrap(), size));
    assert_eq!(m.key, key);
    assert_eq!(m.engine, engine.as_str());
    assert_eq!(m.compression, "zstd");
    assert_eq!(m.uncompressed_size, result["uncompressedSize"].as_u64().unwrap());
    assert!(m.uncompressed_size > size, "compressed: {m:?}");
    assert!(result["durationSeconds"].as_f64().unwrap() > 0.0);
    assert_eq!(result["deleted"], serde_json::json!([]));

    db.recreate_empty().await;
    let mut restore: Vec<String> =
        ["restore", "run", "--latest", "--namespace", "roundtrip", "--name", &name, "--target", &db.url()]
            .map(str::to_owned)
            .to_vec();
    restore.extend(place.args());
    if engine == Engine::Mongodb {
        // The runner cannot count a MongoDB target's collections (no mongo shell), so
        // it restores into one only when told to; the database was just emptied.
        restore.push("--overwrite".into());
    }
    let restored = bosun_ok(&b, &restore).await;
    assert_eq!(restored["key"], result["key"]);
    assert_eq!(db.checksum().await, before, "{name}: the restored data is the data backed up");

    place.clear().await;
}

macro_rules! round_trips {
    ($($test:ident: $engine:ident, $dest:ident;)*) => {$(
        #[tokio::test]
        async fn $test() {
            let _timed = Timed::start(stringify!($test));
            round_trip(Engine::$engine, Dest::$dest).await;
        }
    )*};
}

round_trips! {
    round_trip_postgresql_s3: Postgresql, S3;
    round_trip_postgresql_gcs: Postgresql, Gcs;
    round_trip_postgresql_azure: Postgresql, Azure;
    round_trip_postgresql_file: Postgresql, File;
    round_trip_mysql_s3: Mysql, S3;
    round_trip_mysql_gcs: Mysql, Gcs;
    round_trip_mysql_azure: Mysql, Azure;
    round_trip_mysql_file: Mysql, File;
    round_trip_mongodb_s3: Mongodb, S3;
    round_trip_mongodb_gcs: Mongodb, Gcs;
    round_trip_mongodb_azure: Mongodb, Azure;
    round_trip_mongodb_file: Mongodb, File;
}

// --- failures -----------------------------------------------------------------------

/// A folder with three good backups older than 30 days: a run with `--retention 30d`
/// that went on to retention would delete every one of them.
struct Seeded {
    place: Place,
    namespace: String,
    name: String,
    folder: String,
    keys: Vec<String>,
}

async fn seeded(b: &Backends, engine: Engine, dest: Dest, name: &str) -> Seeded {
    let place = Place::new(b, dest, &format!("bosun-tests/{name}"));
    let folder = format!("failures/{name}");
    let keys = place.seed(&folder, engine, b"an older good backup", &[days(40), days(35), days(31)]).await;
    Seeded { place, namespace: "failures".into(), name: name.into(), folder, keys }
}

impl Seeded {
    /// `bosun backup run` of `source` into the seeded folder, with the retention that
    /// would delete the seeds, and a result file.
    fn args(&self, source: &str, result_file: &std::path::Path) -> Vec<String> {
        let mut args: Vec<String> = ["backup", "run", "--source", source].map(str::to_owned).to_vec();
        args.extend(self.place.args());
        args.extend(
            ["--namespace", &self.namespace, "--name", &self.name, "--retention", "30d", "--keep-last", "1"]
                .map(str::to_owned),
        );
        args.extend(["--result-file".to_owned(), result_file.display().to_string()]);
        args
    }

    /// The run failed with exit 1 and a message holding each of `expect`; the result
    /// file says the same; nothing was stored and nothing deleted.
    async fn assert_failed_cleanly(&self, b: &Backends, out: &Outcome, result_file: &std::path::Path, expect: &[&str]) {
        assert_failed(out, result_file, expect);
        let keys = self.place.keys(&self.folder).await;
        let seeds: BTreeSet<String> = self.keys.iter().flat_map(|k| [k.clone(), manifest_key_of(k).unwrap()]).collect();
        assert_eq!(keys, seeds, "a failed run stores nothing and deletes nothing:\n{out}");
        assert_eq!(
            listed(b, &self.place, &self.namespace, &self.name).await,
            self.keys,
            "backup list shows only the seeds"
        );
    }
}

/// Exit 1, `error: …` naming each of `expect` on stderr, no result line on stdout, and
/// `{"error": …}` in the result file.
fn assert_failed(out: &Outcome, result_file: &std::path::Path, expect: &[&str]) {
    assert_eq!(out.code, Some(1), "a failed run exits 1 (not a panic's 101):\n{out}");
    assert!(out.stdout.trim().is_empty(), "no result line for a failed run:\n{out}");
    // The last thing on stderr (after any log lines); a tool's message may span lines.
    let at = out.stderr.find("\nerror: ").map(|i| i + 1).or(out.stderr.starts_with("error: ").then_some(0));
    let message = out.stderr[at.unwrap_or_else(|| panic!("no `error: ` line:\n{out}"))..].trim_end();
    for e in expect {
        assert!(message.contains(e), "the message names {e:?}: {message}");
    }
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(result_file).expect("the result file is written"))
            .expect("the result file is JSON");
    assert_eq!(written["error"].as_str(), message.strip_prefix("error: "), "the result file holds the same error");
    assert!(written["durationSeconds"].as_f64().is_some_and(|s| s >= 0.0), "a failure says how long: {written}");
    let _ = std::fs::remove_file(result_file);
}

fn result_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{name}.result.json"))
}

#[tokio::test]
async fn wrong_password_fails_before_anything_is_stored() {
    let _timed = Timed::start("wrong_password_fails_before_anything_is_stored");
    let b = backends();
    for (engine, dest, server_says) in [
        (Engine::Postgresql, Dest::S3, "password authentication failed"),
        (Engine::Mysql, Dest::Gcs, "Access denied"),
        (Engine::Mongodb, Dest::Azure, "Authentication failed"),
    ] {
        let name = unique(&format!("pw_{}", engine.short()));
        let db = Db::create(&b, engine, &name).await;
        db.load_dataset().await;
        let s = seeded(&b, engine, dest, &name).await;
        let file = result_file(&name);
        let out = b
            .bosun_with(&as_strs(&s.args(&db.url(), &file)), &[(engine.password_variable(), "not-the-password")])
            .await;
        // PostgreSQL and MariaDB are asked for their version first; MongoDB's first
        // contact is mongodump itself.
        let step = if engine == Engine::Mongodb { "mongodump failed" } else { "connecting to the source" };
        s.assert_failed_cleanly(&b, &out, &file, &[step, server_says]).await;
        s.place.clear().await;
    }
}

#[tokio::test]
async fn unreachable_database_fails_naming_it() {
    let _timed = Timed::start("unreachable_database_fails_naming_it");
    let b = backends();
    let name = unique("unreach");
    let s = seeded(&b, Engine::Postgresql, Dest::File, &name).await;
    let file = result_file(&name);
    let out = b.bosun(&as_strs(&s.args("postgresql://postgres@127.0.0.1:1/nothing", &file))).await;
    s.assert_failed_cleanly(
        &b,
        &out,
        &file,
        &["connecting to the source postgresql://postgres@127.0.0.1:1/nothing", "Connection refused"],
    )
    .await;
    let out = b.bosun(&as_strs(&s.args("mysql://root@127.0.0.1:1/nothing", &file))).await;
    s.assert_failed_cleanly(
        &b,
        &out,
        &file,
        &["connecting to the source mysql://root@127.0.0.1:1/nothing", "Can't connect"],
    )
    .await;
    s.place.clear().await;
}

#[tokio::test]
async fn missing_bucket_fails_the_upload() {
    let _timed = Timed::start("missing_bucket_fails_the_upload");
    let b = backends();
    let name = unique("nobucket");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let file = result_file(&name);
    let mut args: Vec<String> = ["backup", "run", "--source", &db.url(), "--destination", "s3://no-such-bucket-xyz/p"]
        .map(str::to_owned)
        .to_vec();
    args.extend(["--endpoint", b.var("S3_ENDPOINT"), "--retention", "30d", "--result-file"].map(str::to_owned));
    args.push(file.display().to_string());
    let out = b.bosun(&as_strs(&args)).await;
    assert_failed(&out, &file, &["upload failed", "no-such-bucket-xyz", "NoSuchBucket"]);
}

/// An explicit `--endpoint` is where the dumps go, even when the environment also
/// turns on the Azure emulator mode (`AZURE_STORAGE_USE_EMULATOR`, which
/// `hack/backends.sh env` exports): nothing may be stored elsewhere.
#[tokio::test]
async fn azure_endpoint_is_obeyed() {
    let _timed = Timed::start("azure_endpoint_is_obeyed");
    let b = backends();
    let name = unique("azendpoint");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let s = seeded(&b, Engine::Postgresql, Dest::Azure, &name).await;
    let file = result_file(&name);
    let mut args = s.args(&db.url(), &file);
    let at = args.iter().position(|a| a == "--endpoint").unwrap();
    args[at + 1] = "http://127.0.0.1:1/devstoreaccount1".into();
    assert_eq!(b.var("AZURE_STORAGE_USE_EMULATOR"), "true");
    let out = b.bosun(&as_strs(&args)).await;
    s.assert_failed_cleanly(&b, &out, &file, &["upload failed", "127.0.0.1:1"]).await;
    s.place.clear().await;
}

/// pg_dump killed with SIGKILL while it streams: the run fails naming pg_dump, its
/// partial upload never becomes an object, and retention does not run.
#[tokio::test]
async fn dump_killed_mid_stream() {
    let _timed = Timed::start("dump_killed_mid_stream");
    let b = backends();
    let name = unique("killed");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_big(200).await;
    let s = seeded(&b, Engine::Postgresql, Dest::S3, &name).await;
    let file = result_file(&name);
    let bosun = b.spawn_bosun(&as_strs(&s.args(&db.url(), &file)), &[]);
    let pattern = format!("pg_dump .*{name}");
    let pid = wait_for_process(&b, &pattern, Duration::from_secs(60)).await;
    // Let it stream for a moment: the upload is under way (8 MiB parts) when it dies.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = b.run("kill", &["-KILL", &pid]).await;
    assert!(killed.ok, "pg_dump {pid} was still running 1.5 s in (make the table bigger?): {killed}");
    let out = finish(bosun).await;
    s.assert_failed_cleanly(&b, &out, &file, &["pg_dump failed", "killed by signal 9"]).await;
    s.place.clear().await;
}

/// The pid of the process whose command line matches `pattern` (pgrep -f).
async fn wait_for_process(b: &Backends, pattern: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let out = b.run("pgrep", &["-f", pattern]).await;
        if let Some(pid) = out.stdout.lines().next() {
            return pid.to_owned();
        }
        assert!(Instant::now() < deadline, "no process matching {pattern:?} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn finish(child: tokio::process::Child) -> Outcome {
    let out = tokio::time::timeout(bosun_testing::backends::RUN_TIMEOUT, child.wait_with_output())
        .await
        .expect("bosun did not exit: the runner hangs")
        .expect("waiting for bosun");
    Outcome {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

// --- retention ------------------------------------------------------------------------

/// Real dumps copied under older stamps (their manifests rewritten): a failed run
/// deletes nothing; a good run with `--retention 30d --keep-last 2` deletes exactly
/// the good backups past 30 days beyond the newest two — dump and manifest — and keeps
/// the newest and a fresh dump without a manifest.
#[tokio::test]
async fn retention_deletes_exactly_the_expired_backups() {
    let _timed = Timed::start("retention_deletes_exactly_the_expired_backups");
    let b = backends();
    let name = unique("retention");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let folder = format!("ret/{name}");
    let run = |extra: &[&str]| backup_args(&db, &place, "ret", &name, extra);
    let retention = ["--retention", "30d", "--keep-last", "2"];

    let first = bosun_ok(&b, &run(&[])).await;
    let first_key = place.relative(first["key"].as_str().unwrap());
    let dump = place.get(&first_key).await;
    for k in [first_key.clone(), manifest_key_of(&first_key).unwrap()] {
        place.store.objects.delete(&place.store.path(&k)).await.unwrap();
    }
    let old = place.seed(&folder, Engine::Postgresql, &dump, &[days(90), days(60), days(45), days(31)]).await;
    // A run that died after its upload: a dump without a manifest, an hour old.
    let (partial, _) = manifest::keys(&folder, Timestamp::now() - SignedDuration::from_hours(1), "pgdump");
    place.put(&partial, dump[..100].to_vec()).await;
    let stored = place.keys(&folder).await;
    assert_eq!(stored.len(), 9);

    let file = result_file(&name);
    let mut failing = run(&retention);
    failing.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun_with(&as_strs(&failing), &[("PGPASSWORD", "wrong")]).await;
    assert_failed(&out, &file, &["password authentication failed"]);
    assert_eq!(place.keys(&folder).await, stored, "a failed run deletes nothing");

    let second = bosun_ok(&b, &run(&retention)).await;
    let second_key = place.relative(second["key"].as_str().unwrap());
    let deleted: BTreeSet<String> =
        second["deleted"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()).collect();
    let expired: BTreeSet<String> = old[..3].iter().map(|k| place.store.full_key(k)).collect();
    assert_eq!(deleted, expired, "the 90, 60 and 45 days old; the 31 days old is the second newest: {second}");
    let kept = |dumps: &[&String]| -> BTreeSet<String> {
        dumps.iter().flat_map(|k| [(*k).clone(), manifest_key_of(k).unwrap()]).chain([partial.clone()]).collect()
    };
    assert_eq!(
        place.keys(&folder).await,
        kept(&[&old[3], &second_key]),
        "dumps and their manifests went; the partial stays"
    );
    assert_eq!(listed(&b, &place, "ret", &name).await, [old[3].clone(), second_key.clone()]);

    let third = bosun_ok(&b, &run(&retention)).await;
    let third_key = place.relative(third["key"].as_str().unwrap());
    assert_eq!(third["deleted"], serde_json::json!([place.store.full_key(&old[3])]));
    assert_eq!(place.keys(&folder).await, kept(&[&second_key, &third_key]));
    assert_eq!(listed(&b, &place, "ret", &name).await, [second_key, third_key]);
    place.clear().await;
}

/// Grandfather-father-son: two months of nightly dumps made with set times (2026-01-01
/// to 2026-03-02, 02:00 UTC) and a dump without a manifest among them. A failed run
/// deletes nothing; a good run with `--keep-daily 7 --keep-weekly 4 --keep-monthly 2`
/// keeps exactly its own dump, the six newest days (Feb 25 to Mar 2), the newest of the
/// two ISO weeks before (Mar 1, a Sunday, and Feb 22) and the newest of March; it says
/// which rule keeps each, and deletes everything else (the partial dump too).
#[tokio::test]
async fn tiered_retention_keeps_the_newest_of_each_day_week_and_month() {
    let _timed = Timed::start("tiered_retention");
    let b = backends();
    let name = unique("tiers");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let folder = format!("gfs/{name}");
    let first: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
    let nights: Vec<Timestamp> = (0..61).map(|d| first + SignedDuration::from_hours(24 * d)).collect();
    let seeded = place.seed_at(&folder, Engine::Postgresql, b"a nightly dump", &nights).await;
    let (partial, _) = manifest::keys(&folder, "2026-02-10T14:00:00Z".parse().unwrap(), "pgdump");
    place.put(&partial, b"a run that died after its upload".to_vec()).await;
    let stored = place.keys(&folder).await;
    let tiers = ["--keep-daily", "7", "--keep-weekly", "4", "--keep-monthly", "2"];

    let file = result_file(&name);
    let mut failing = backup_args(&db, &place, "gfs", &name, &tiers);
    failing.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun_with(&as_strs(&failing), &[("PGPASSWORD", "wrong")]).await;
    assert_failed(&out, &file, &["password authentication failed"]);
    assert_eq!(place.keys(&folder).await, stored, "a failed run deletes nothing");

    let run = bosun_ok(&b, &backup_args(&db, &place, "gfs", &name, &tiers)).await;
    let own = place.relative(run["key"].as_str().unwrap());
    let night = |date: &str| seeded.iter().find(|k| k.contains(&format!("/{date}T020000.000Z."))).unwrap().clone();
    let kept = [
        own.clone(),
        night("20260302"),
        night("20260301"),
        night("20260228"),
        night("20260227"),
        night("20260226"),
        night("20260225"),
        night("20260222"),
    ];
    let mut want: Vec<String> = kept.to_vec();
    want.sort();
    assert_eq!(listed(&b, &place, "gfs", &name).await, want, "exactly these are left: {run}");
    let left: BTreeSet<String> = place.keys(&folder).await;
    let pairs: BTreeSet<String> = kept.iter().flat_map(|k| [k.clone(), manifest_key_of(k).unwrap()]).collect();
    assert_eq!(left, pairs, "the partial dump and every other night went, dump and manifest");
    assert_eq!(run["deleted"].as_array().unwrap().len(), 61 - 7 + 1, "54 nights and the partial: {run}");

    let why: Vec<(String, Vec<String>)> = run["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let at = k["at"].as_str().unwrap().to_owned();
            (at, k["why"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect())
        })
        .collect();
    let reasons = |i: usize| why[i].1.join(",");
    assert_eq!(why.len(), 8, "{why:?}");
    assert_eq!(reasons(0), "last,daily,weekly,monthly", "its own dump: {why:?}");
    assert_eq!((why[1].0.as_str(), reasons(1).as_str()), ("2026-03-02T02:00:00Z", "daily,weekly,monthly"));
    assert_eq!((why[2].0.as_str(), reasons(2).as_str()), ("2026-03-01T02:00:00Z", "daily,weekly"));
    assert_eq!((why[6].0.as_str(), reasons(6).as_str()), ("2026-02-25T02:00:00Z", "daily"));
    assert_eq!((why[7].0.as_str(), reasons(7).as_str()), ("2026-02-22T02:00:00Z", "weekly"));
    place.clear().await;
}

// --- list and restore -----------------------------------------------------------------

/// `backup list` shows every good backup, oldest first, as the runs reported them;
/// `restore --key` loads that one (not the latest), with or without the prefix.
#[tokio::test]
async fn list_and_restore_by_key() {
    let _timed = Timed::start("list_and_restore_by_key");
    let b = backends();
    let name = unique("bykey");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::Gcs, &format!("bosun-tests/{name}"));
    let first_sum = db.checksum().await;
    let first = bosun_ok(&b, &backup_args(&db, &place, "bykey", &name, &[])).await;
    psql(&b, &name, "DELETE FROM t WHERE id > 5000").await;
    let second_sum = db.checksum().await;
    assert!(second_sum.starts_with("5000 "));
    let second = bosun_ok(&b, &backup_args(&db, &place, "bykey", &name, &[])).await;

    let mut args: Vec<String> = ["backup", "list", "--namespace", "bykey", "--name", &name].map(str::to_owned).to_vec();
    args.extend(place.args());
    let list = bosun_ok(&b, &args).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    for (m, run) in list.iter().zip([&first, &second]) {
        assert_eq!(place.store.full_key(m["key"].as_str().unwrap()), run["key"].as_str().unwrap());
        for field in ["sha256", "size", "uncompressedSize", "started", "finished"] {
            assert_eq!(m[field], run[field], "{field}");
        }
        assert_eq!(m["engine"], "postgresql");
        assert_eq!(m["source"], db.url());
    }

    let target = Db::create(&b, Engine::Postgresql, &unique("bykey_target")).await;
    let restore = |key: &str, overwrite: bool| {
        let mut args: Vec<String> =
            ["restore", "run", "--key", key, "--target", &target.url()].map(str::to_owned).to_vec();
        args.extend(place.args());
        if overwrite {
            args.push("--overwrite".into());
        }
        args
    };
    // The key as printed (with the prefix) …
    let restored = bosun_ok(&b, &restore(first["key"].as_str().unwrap(), false)).await;
    assert_eq!(restored["key"], first["key"]);
    assert_eq!(target.checksum().await, first_sum, "the first backup, not the latest");
    // … or relative to it, as `backup list` shows it.
    bosun_ok(&b, &restore(list[1]["key"].as_str().unwrap(), true)).await;
    assert_eq!(target.checksum().await, second_sum);
    place.clear().await;
}

/// A target holding tables is refused without `--overwrite` (naming how many, and
/// left as it was); with it, the dump's tables are replaced.
async fn refuses_a_target_with_tables(engine: Engine, dest: Dest) {
    let b = backends();
    let name = unique(&format!("refuse_{}", engine.short()));
    let db = Db::create(&b, engine, &name).await;
    db.load_dataset().await;
    let source_sum = db.checksum().await;
    let place = Place::new(&b, dest, &format!("bosun-tests/{name}"));
    bosun_ok(&b, &backup_args(&db, &place, "refuse", &name, &[])).await;

    let target = Db::create(&b, engine, &format!("{name}_target")).await;
    let (tables, rows) = match engine {
        Engine::Postgresql => {
            psql(&b, &target.name, "CREATE TABLE t (id int PRIMARY KEY, txt text, bin bytea, num numeric, at timestamptz); INSERT INTO t (id) VALUES (1), (2), (3); CREATE TABLE other (x int)").await;
            ("2", "3")
        }
        Engine::Mysql => {
            support::mariadb(&b, &target.name, "CREATE TABLE t (id INT PRIMARY KEY, txt TEXT, bin VARBINARY(64), num DECIMAL(12,2)); INSERT INTO t (id) VALUES (1), (2), (3); CREATE TABLE other (x INT)").await;
            ("2", "3")
        }
        Engine::Mongodb => unreachable!("MongoDB targets are never counted"),
    };
    let before = target.checksum().await;
    assert!(before.starts_with(&format!("{rows} ")));
    let mut args: Vec<String> =
        ["restore", "run", "--latest", "--namespace", "refuse", "--name", &name, "--target", &target.url()]
            .map(str::to_owned)
            .to_vec();
    args.extend(place.args());
    let file = result_file(&name);
    let mut refused = args.clone();
    refused.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&refused)).await;
    assert_failed(&out, &file, &["refused", &format!("already holds {tables} tables"), "--overwrite"]);
    assert_eq!(target.checksum().await, before, "the refused target is untouched");

    args.push("--overwrite".into());
    bosun_ok(&b, &args).await;
    assert_eq!(target.checksum().await, source_sum, "--overwrite replaces the dump's tables");
    place.clear().await;
}

#[tokio::test]
async fn restore_refuses_a_postgresql_target_with_tables_unless_overwrite() {
    let _timed = Timed::start("restore_refuses_a_postgresql_target_with_tables_unless_overwrite");
    refuses_a_target_with_tables(Engine::Postgresql, Dest::File).await;
}

#[tokio::test]
async fn restore_refuses_a_mysql_target_with_tables_unless_overwrite() {
    let _timed = Timed::start("restore_refuses_a_mysql_target_with_tables_unless_overwrite");
    refuses_a_target_with_tables(Engine::Mysql, Dest::S3).await;
}

/// A MongoDB dump restored by key into a database of another name lands there
/// (mongorestore would otherwise filter the archive by the target's name and load
/// nothing), and the source is untouched.
#[tokio::test]
async fn mongodb_restore_by_key_into_another_database() {
    let _timed = Timed::start("mongodb_restore_by_key_into_another_database");
    let b = backends();
    let name = unique("mgcopy");
    let db = Db::create(&b, Engine::Mongodb, &name).await;
    db.load_dataset().await;
    let sum = db.checksum().await;
    let place = Place::new(&b, Dest::Azure, &format!("bosun-tests/{name}"));
    let result = bosun_ok(&b, &backup_args(&db, &place, "mgcopy", &name, &[])).await;
    let copy = Db::create(&b, Engine::Mongodb, &format!("{name}_copy")).await;
    let mut args: Vec<String> =
        ["restore", "run", "--key", result["key"].as_str().unwrap(), "--target", &copy.url(), "--overwrite"]
            .map(str::to_owned)
            .to_vec();
    args.extend(place.args());
    bosun_ok(&b, &args).await;
    assert_eq!(copy.checksum().await, sum, "the copy holds every document");
    assert_eq!(db.checksum().await, sum, "the source is untouched");
    place.clear().await;
}

/// A stored dump corrupted after the fact (same size, so it still looks good): the
/// restore fails naming the dump as changed (both checksums), not the tool it was
/// feeding; without its manifest, naming the download that broke.
#[tokio::test]
async fn corrupted_dump_fails_the_restore() {
    let _timed = Timed::start("corrupted_dump_fails_the_restore");
    let b = backends();
    let name = unique("corrupt");
    let db = Db::create(&b, Engine::Mysql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let result = bosun_ok(&b, &backup_args(&db, &place, "corrupt", &name, &[])).await;
    let key = place.relative(result["key"].as_str().unwrap());
    let mut dump = place.get(&key).await;
    let middle = dump.len() / 2;
    dump[middle] ^= 0xff;
    place.put(&key, dump).await;

    let target = Db::create(&b, Engine::Mysql, &format!("{name}_target")).await;
    let mut args: Vec<String> =
        ["restore", "run", "--latest", "--namespace", "corrupt", "--name", &name, "--target", &target.url()]
            .map(str::to_owned)
            .to_vec();
    args.extend(place.args());
    let file = result_file(&name);
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&args)).await;
    let recorded = place.manifest(&manifest_key_of(&key).unwrap()).await.unwrap().sha256;
    let found = place.sha256(&key).await.1;
    let told = ["does not match its manifest", &recorded, &found, "the target may hold a partial restore"];
    assert_failed(&out, &file, &told);

    // With no manifest to say what it was, the step that broke is what is told.
    place.delete(&manifest_key_of(&key).unwrap()).await;
    let mut args: Vec<String> =
        ["restore", "run", "--key", &key, "--target", &target.url(), "--overwrite"].map(str::to_owned).to_vec();
    args.extend(place.args());
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&args)).await;
    assert_failed(&out, &file, &["downloading the dump failed"]);
    place.clear().await;
}

// --- verification ---------------------------------------------------------------------

/// `bosun verify run` of `<namespace>/<name>` in `place` into a new empty database
/// (the throwaway server's), with `extra` flags: its outcome, result file and target.
async fn verify(
    b: &Backends,
    engine: Engine,
    place: &Place,
    name: &str,
    extra: &[&str],
) -> (Outcome, std::path::PathBuf, Db) {
    let target = Db::create(b, engine, &unique("verify_target")).await;
    let mut args: Vec<String> =
        ["verify", "run", "--namespace", "verify", "--name", name, "--target", &target.url(), "--wait-seconds", "5"]
            .map(str::to_owned)
            .to_vec();
    args.extend(place.args());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let file = result_file(&unique("verify"));
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    (b.bosun(&as_strs(&args)).await, file, target)
}

/// A verification restores the newest good dump and passes only when it holds tables
/// and the query finds rows; a dump changed in the bucket fails it, naming the dump;
/// nothing in the bucket changes either way.
async fn verification(engine: Engine) {
    let b = backends();
    let name = unique("verified");
    let db = Db::create(&b, engine, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    bosun_ok(&b, &backup_args(&db, &place, "verify", &name, &[])).await;
    let newest = bosun_ok(&b, &backup_args(&db, &place, "verify", &name, &[])).await;
    let key = newest["key"].as_str().unwrap().to_owned();
    let stored = place.keys("verify").await;

    let (out, file, target) = verify(&b, engine, &place, &name, &["--query", "SELECT id FROM t WHERE id = 42;"]).await;
    assert!(out.ok, "a good dump verifies:\n{out}");
    let report = out.json();
    assert_eq!(report["key"], key.as_str(), "the newest good dump: {report}");
    assert_eq!((report["tables"].as_u64(), report["queryRows"].as_u64()), (Some(1), Some(1)), "{report}");
    assert!(db.checksum().await.starts_with(&format!("{} ", report["rows"])), "every row counted: {report}");
    assert_eq!(target.checksum().await, db.checksum().await, "the throwaway holds exactly the data");
    let _ = std::fs::remove_file(file);

    // A query that finds nothing: the restore was fine, the check is not.
    let (out, file, _) = verify(&b, engine, &place, &name, &["--query", "SELECT id FROM t WHERE id < 0"]).await;
    assert_failed(&out, &file, &["the query returned no rows", &key]);

    // One byte flipped in the bucket (same size): the restore finds it.
    let relative = place.relative(&key);
    let original = place.get(&relative).await;
    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0xff;
    place.put(&relative, flipped).await;
    let (out, file, _) = verify(&b, engine, &place, &name, &[]).await;
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written["key"], key.as_str(), "the result names the dump: {written}");
    let found = place.sha256(&relative).await.1;
    let recorded = place.manifest(&manifest_key_of(&relative).unwrap()).await.unwrap().sha256;
    assert_failed(&out, &file, &[&format!("{key} does not match its manifest"), &found, &recorded]);

    // Cut short: no longer what its manifest vouches for; not skipped for the older one.
    place.put(&relative, original[..original.len() - 100].to_vec()).await;
    let (out, file, _) = verify(&b, engine, &place, &name, &[]).await;
    assert_failed(&out, &file, &[&format!("{key} does not match its manifest"), "the bucket holds", &recorded]);
    assert_eq!(place.keys("verify").await, stored, "verification deletes nothing");
    place.clear().await;
}

#[tokio::test]
async fn verification_of_postgresql_dumps_passes_on_good_ones_and_fails_on_a_changed_one() {
    let _timed = Timed::start("verification_of_postgresql_dumps");
    verification(Engine::Postgresql).await;
}

#[tokio::test]
async fn verification_of_mysql_dumps_passes_on_good_ones_and_fails_on_a_changed_one() {
    let _timed = Timed::start("verification_of_mysql_dumps");
    verification(Engine::Mysql).await;
}

// --- encryption -----------------------------------------------------------------------

/// An age identity file holding `identities`, first to last, as age-keygen writes one.
fn key_file(name: &str, identities: &[&age::x25519::Identity]) -> std::path::PathBuf {
    use age::secrecy::ExposeSecret;
    let mut text = String::new();
    for i in identities {
        text.push_str(&format!("# public key: {}\n{}\n", i.to_public(), i.to_string().expose_secret()));
    }
    let path = std::env::temp_dir().join(format!("{name}.agekey"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Dumps made with `--encryption-key-file`: the bucket holds only ciphertext (a row
/// written in clear in the database is nowhere in the object, which a plain dump's
/// decompressed bytes show it would be), the manifest names the key, and a restore
/// with the key gives the data back. Rotation: with the new key first and the old one
/// below, new dumps use the new key and the dump from before (and one from before
/// encryption) still restore. A wrong key or none fails naming the key file's Secret
/// and the key the dump needs, before the target is touched.
#[tokio::test]
async fn encrypted_dumps_hold_only_ciphertext_and_restore_with_their_key_across_a_rotation() {
    let _timed = Timed::start("encrypted_dumps_hold_only_ciphertext");
    let b = backends();
    let name = unique("sealed");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let canary = "canary-row-in-clear-7e3f";
    psql(&b, &name, &format!("INSERT INTO t (id, txt) VALUES (100001, '{canary}')")).await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let (old, new, stranger) =
        (age::x25519::Identity::generate(), age::x25519::Identity::generate(), age::x25519::Identity::generate());
    let keys = |file: &std::path::Path, secret: &str| {
        [
            "--encryption-key-file".to_owned(),
            file.display().to_string(),
            "--encryption-key-name".to_owned(),
            format!("Secret {secret} (key identities)"),
        ]
    };
    let before_rotation = key_file(&format!("{name}-old"), &[&old]);
    let rotated = key_file(&format!("{name}-rotated"), &[&new, &old]);
    let wrong = key_file(&format!("{name}-wrong"), &[&stranger]);

    // Before encryption was turned on, then with the old key, then after the rotation,
    // each of a different state of the data.
    let mut sums = vec![db.checksum().await];
    let plain = bosun_ok(&b, &backup_args(&db, &place, "sealed", &name, &[])).await;
    psql(&b, &name, "DELETE FROM t WHERE id BETWEEN 1 AND 1000").await;
    sums.push(db.checksum().await);
    let with_old =
        bosun_ok(&b, &backup_args(&db, &place, "sealed", &name, &as_strs(&keys(&before_rotation, "backup-key")))).await;
    psql(&b, &name, "DELETE FROM t WHERE id BETWEEN 1001 AND 2000").await;
    sums.push(db.checksum().await);
    let with_new =
        bosun_ok(&b, &backup_args(&db, &place, "sealed", &name, &as_strs(&keys(&rotated, "backup-key")))).await;

    let plain_bytes = zstd::decode_all(&place.get(&place.relative(plain["key"].as_str().unwrap())).await[..]).unwrap();
    assert!(contains(&plain_bytes, canary.as_bytes()), "the control: a plain dump holds the row in clear");
    for (run, identity) in [(&with_old, &old), (&with_new, &new)] {
        let key = place.relative(run["key"].as_str().unwrap());
        assert!(key.ends_with(".pgdump.zst.age"), "{key}");
        let raw = place.get(&key).await;
        assert!(raw.starts_with(b"age-encryption.org/v1\n-> X25519 "), "{key} is an age file");
        assert!(!contains(&raw, canary.as_bytes()) && zstd::decode_all(&raw[..]).is_err(), "{key}: ciphertext only");
        let m = place.manifest(&manifest_key_of(&key).unwrap()).await.expect("a manifest");
        let e = m.encryption.expect("the manifest records the encryption");
        assert_eq!((e.scheme.as_str(), e.recipient), ("age", identity.to_public().to_string()));
        assert_eq!(m.sha256, place.sha256(&key).await.1, "the checksum is of the stored ciphertext");
    }
    assert_eq!(listed(&b, &place, "sealed", &name).await.len(), 3, "all three are good backups");

    let target = Db::create(&b, Engine::Postgresql, &unique("sealed_target")).await;
    let empty = target.checksum().await;
    let restore = |key: &str, extra: &[String]| {
        let mut args: Vec<String> =
            ["restore", "run", "--key", key, "--target", &target.url(), "--overwrite"].map(str::to_owned).to_vec();
        args.extend(place.args());
        args.extend(extra.iter().cloned());
        args
    };
    // A wrong key, and no key: refused, naming the Secret and the key needed; the
    // target is as it was.
    let file = result_file(&format!("{name}-wrong"));
    let mut args = restore(with_new["key"].as_str().unwrap(), &keys(&wrong, "wrong-key"));
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&args)).await;
    let needed = new.to_public().to_string();
    assert_failed(&out, &file, &["Secret wrong-key (key identities)", &needed, "not that one"]);
    let mut args = restore(with_new["key"].as_str().unwrap(), &[]);
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&args)).await;
    assert_failed(&out, &file, &["is encrypted", &needed]);
    assert_eq!(target.checksum().await, empty, "a refused restore leaves the target as it was");

    // With the rotated file: all three, each giving back the data it was made of.
    for (run, sum) in [(&plain, &sums[0]), (&with_old, &sums[1]), (&with_new, &sums[2])] {
        let restored = bosun_ok(&b, &restore(run["key"].as_str().unwrap(), &keys(&rotated, "backup-key"))).await;
        assert_eq!(restored["key"], run["key"]);
        assert_eq!(&target.checksum().await, sum, "{} restored with the rotated keys", run["key"]);
    }

    // The newest dump changed in the bucket (one byte, same size), the right key in
    // place: told as changed, naming it and both checksums, not as a key problem.
    let changed_key = place.relative(with_new["key"].as_str().unwrap());
    let recorded = place.manifest(&manifest_key_of(&changed_key).unwrap()).await.unwrap().sha256;
    let mut changed = place.get(&changed_key).await;
    let middle = changed.len() / 2;
    changed[middle] ^= 0xff;
    place.put(&changed_key, changed).await;
    let found = place.sha256(&changed_key).await.1;
    assert_ne!(found, recorded);
    let file = result_file(&format!("{name}-changed"));
    let mut args = restore(with_new["key"].as_str().unwrap(), &keys(&rotated, "backup-key"));
    args.extend(["--result-file".to_owned(), file.display().to_string()]);
    let out = b.bosun(&as_strs(&args)).await;
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written["key"], with_new["key"], "the result names the dump: {written}");
    let dump = with_new["key"].as_str().unwrap();
    assert_failed(&out, &file, &[&format!("{dump} does not match its manifest"), &recorded, &found]);
    assert!(!out.stderr.contains("decrypt"), "not told as a key problem:\n{out}");
    for f in [before_rotation, rotated, wrong] {
        let _ = std::fs::remove_file(f);
    }
    place.clear().await;
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// --- WAL archiving ------------------------------------------------------------------

/// `bosun wal push` and `bosun wal fetch` against `dest`'s real server: a segment
/// round-trips byte for byte, an identical re-push succeeds, a different one under the
/// same name is refused and the archive keeps the first, a missing file exits 1 without
/// writing, and a timeline history file goes the same way.
async fn wal_round_trip(dest: Dest) {
    let b = backends();
    let name = unique(&format!("wal_{}", dest.short()));
    let place = Place::new(&b, dest, &format!("bosun-tests/{name}"));
    let dir = std::env::temp_dir().join(format!("bosun-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let wal = |verb: &str, files: &[&std::path::Path]| -> Vec<String> {
        let mut args: Vec<String> = ["wal", verb].map(str::to_owned).to_vec();
        args.extend(files.iter().map(|f| f.display().to_string()));
        args.extend(place.args());
        args.extend(["--namespace", "shop", "--name", "orders"].map(str::to_owned));
        args
    };
    let segment = dir.join("000000010000000A000000FF");
    let mut bytes: Vec<u8> = (0..16 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&segment, &bytes).unwrap();

    let pushed = bosun_ok(&b, &wal("push", &[&segment])).await;
    let key = place.relative(pushed["key"].as_str().unwrap());
    assert_eq!(key, "shop/orders/wal/000000010000000A000000FF.zst", "{pushed}");
    assert!(pushed["stored"].as_u64().unwrap() < pushed["size"].as_u64().unwrap(), "{pushed}");
    let again = bosun_ok(&b, &wal("push", &[&segment])).await;
    assert_eq!(again["alreadyArchived"], true, "{again}");

    bytes[0] ^= 1;
    std::fs::write(&segment, &bytes).unwrap();
    let error_file = dir.join("error");
    let mut args = wal("push", &[&segment]);
    args.extend(["--error-file".to_owned(), error_file.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = b.bosun(&args).await;
    assert!(!refused.ok && refused.stderr.contains("different contents"), "{refused}");
    assert!(std::fs::read_to_string(&error_file).unwrap().contains("different contents"));

    let restored = dir.join("RECOVERYXLOG");
    bosun_ok(&b, &wal("fetch", &[std::path::Path::new("000000010000000A000000FF"), &restored])).await;
    bytes[0] ^= 1;
    assert!(std::fs::read(&restored).unwrap() == bytes, "the archive keeps the first bytes");

    let args = wal("fetch", &[std::path::Path::new("000000010000000A00000100"), &dir.join("missing")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let missing = b.bosun(&args).await;
    // Exit 1, as PostgreSQL's restore_command expects for a file past the archive's end
    // (above 125 it would abort the recovery).
    assert!(missing.code == Some(1) && missing.stderr.contains("not archived"), "{missing}");
    assert!(!dir.join("missing").exists());

    let history = dir.join("00000002.history");
    std::fs::write(&history, "1\t0/A0000000\tbefore a failover\n").unwrap();
    bosun_ok(&b, &wal("push", &[&history])).await;
    // A good push keeps the error the refused one left: the status tells it beside
    // that failure even when the next push succeeded before bosun looked.
    let mut args = wal("push", &[&history]);
    args.extend(["--error-file".to_owned(), error_file.display().to_string()]);
    bosun_ok(&b, &args).await;
    assert!(std::fs::read_to_string(&error_file).unwrap().contains("different contents"));
    bosun_ok(&b, &wal("fetch", &[std::path::Path::new("00000002.history"), &restored])).await;
    assert_eq!(std::fs::read_to_string(&restored).unwrap(), "1\t0/A0000000\tbefore a failover\n");

    std::fs::remove_dir_all(&dir).unwrap();
    place.clear().await;
}

macro_rules! wal_round_trips {
    ($($test:ident: $dest:ident;)*) => {$(
        #[tokio::test]
        async fn $test() {
            let _timed = Timed::start(stringify!($test));
            wal_round_trip(Dest::$dest).await;
        }
    )*};
}

wal_round_trips! {
    wal_is_written_once_s3: S3;
    wal_is_written_once_gcs: Gcs;
    wal_is_written_once_azure: Azure;
    wal_is_written_once_file: File;
}

// --- base backups -------------------------------------------------------------------

/// `bosun backup run --method base` of the real PostgreSQL into `dest`: a tar of the
/// data directory (with the WAL from its start to its end) under
/// `<namespace>/<name>/base/`, a manifest naming that WAL, and a backup that
/// PostgreSQL's own `pg_verifybackup` accepts, WAL included.
/// A base backup with keys is stored encrypted; `bosun recover` makes a data directory
/// of it only with the key (one pg_verifybackup accepts), and its restore_command
/// passes the key on to `wal fetch`; without the key it refuses, naming what it needs.
#[tokio::test]
async fn an_encrypted_base_backup_recovers_only_with_its_key() {
    let _timed = Timed::start("an_encrypted_base_backup_recovers_only_with_its_key");
    let b = backends();
    let name = unique("sealed_base");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let identity = age::x25519::Identity::generate();
    let file = key_file(&name, &[&identity]);
    let keys = ["--encryption-key-file".to_owned(), file.display().to_string()];
    let base = ["--method", "base", keys[0].as_str(), keys[1].as_str()];
    let result = bosun_ok(&b, &backup_args(&db, &place, "physical", &name, &base)).await;
    let key = place.relative(result["key"].as_str().unwrap());
    assert!(key.ends_with(".base.tar.zst.age"), "{result}");
    let raw = place.get(&key).await;
    assert!(raw.starts_with(b"age-encryption.org/v1\n") && zstd::decode_all(&raw[..]).is_err(), "ciphertext only");

    let dir = std::env::temp_dir().join(format!("bosun-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let recover = |extra: &[String]| {
        let mut args: Vec<String> = ["recover", "--namespace", "physical", "--name", &name].map(str::to_owned).to_vec();
        args.extend(["--pgdata".to_owned(), dir.join("data").display().to_string()]);
        args.extend(["--settings-file".to_owned(), dir.join("recovery.conf").display().to_string()]);
        args.extend(place.args());
        args.extend(extra.iter().cloned());
        args
    };
    let refused = b.bosun(&as_strs(&recover(&[]))).await;
    assert!(!refused.ok && refused.stderr.contains("is encrypted"), "{refused}");
    bosun_ok(&b, &recover(&keys)).await;
    let verified = b.run("/usr/lib/postgresql/15/bin/pg_verifybackup", &[dir.join("data").to_str().unwrap()]).await;
    assert!(verified.ok, "pg_verifybackup refuses the recovered data: {verified}");
    let settings = std::fs::read_to_string(dir.join("recovery.conf")).unwrap();
    assert!(settings.contains("--encryption-key-file") && settings.contains(&file.display().to_string()), "{settings}");
    std::fs::remove_dir_all(&dir).unwrap();
    place.clear().await;
}

async fn base_backup(dest: Dest) {
    let b = backends();
    let name = unique(&format!("base_{}", dest.short()));
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_dataset().await;
    let place = Place::new(&b, dest, &format!("bosun-tests/{name}"));
    let result = bosun_ok(&b, &backup_args(&db, &place, "physical", &name, &["--method", "base"])).await;
    let key = place.relative(result["key"].as_str().unwrap());
    assert!(key.starts_with(&format!("physical/{name}/base/")) && key.ends_with(".base.tar.zst"), "{result}");
    let m = place.manifest(&manifest_key_of(&key).unwrap()).await.expect("a manifest beside the base backup");
    let wal = m.wal.clone().expect("the manifest names the WAL range");
    assert!(wal.timeline >= 1 && wal.start_wal <= wal.end_wal, "{wal:?}");
    assert_eq!(result["wal"]["startWal"], wal.start_wal.as_str());

    let dir = std::env::temp_dir().join(format!("bosun-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join("base.tar");
    std::fs::write(&tar, zstd::stream::decode_all(place.get(&key).await.as_slice()).unwrap()).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    b.ok("tar", &["-xf", tar.to_str().unwrap(), "-C", data.to_str().unwrap()]).await;
    for file in ["PG_VERSION", "backup_label", "backup_manifest"] {
        assert!(data.join(file).exists(), "{file} is not in the base backup");
    }
    let first_wal = data.join("pg_wal").join(&wal.start_wal);
    assert!(first_wal.exists(), "the WAL from the start point ({}) is inside", wal.start_wal);
    let verified = b.run("/usr/lib/postgresql/15/bin/pg_verifybackup", &[data.to_str().unwrap()]).await;
    assert!(verified.ok, "pg_verifybackup refuses the base backup: {verified}");
    std::fs::remove_dir_all(&dir).unwrap();
    place.clear().await;
}

#[tokio::test]
async fn a_base_backup_to_s3_is_what_pg_verifybackup_accepts() {
    let _timed = Timed::start("a_base_backup_to_s3_is_what_pg_verifybackup_accepts");
    base_backup(Dest::S3).await;
}

#[tokio::test]
async fn a_base_backup_to_a_directory_is_what_pg_verifybackup_accepts() {
    let _timed = Timed::start("a_base_backup_to_a_directory_is_what_pg_verifybackup_accepts");
    base_backup(Dest::File).await;
}

#[tokio::test]
async fn a_base_backup_of_anything_but_postgresql_is_refused_naming_the_flag() {
    let b = backends();
    let args = [
        "backup",
        "run",
        "--source",
        "mysql://root@127.0.0.1/shop",
        "--destination",
        "file:///tmp/never",
        "--method",
        "base",
    ];
    let out = b.bosun(&args).await;
    assert!(!out.ok && out.stderr.contains("--method base") && out.stderr.contains("mysql"), "{out}");
    assert!(!std::path::Path::new("/tmp/never/shop").exists(), "nothing was written");
}

/// The temporary replication slot a base backup holds the server's WAL with exists
/// while it is held, and is gone with its session: nothing is left to retain WAL.
#[tokio::test]
async fn a_base_backup_holds_the_servers_wal_only_while_it_runs() {
    use bosun_runner::location::Database;
    use bosun_runner::tool::{Password, hold_wal};
    let b = backends();
    let name = unique("hold");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    let file = std::env::temp_dir().join(format!("bosun-{name}-password"));
    std::fs::write(&file, b.var("PGPASSWORD")).unwrap();
    let password = Password::resolve(bosun_runner::location::Engine::Postgresql, Some(&file)).unwrap();
    let source = Database::parse("--source", &db.url()).unwrap();
    let slots = "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bosun_base_%' AND temporary AND restart_lsn IS NOT NULL";
    let hold = hold_wal(&source, &password).await.unwrap();
    assert_eq!(psql(&b, &name, slots).await.trim(), "1");
    drop(hold);
    let start = std::time::Instant::now();
    while psql(&b, &name, slots).await.trim() != "0" {
        assert!(start.elapsed() < Duration::from_secs(10), "the slot outlived its session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&file).unwrap();
}

/// Base backups are kept by recovery window: a run with `--retention 7d` after base
/// backups that ended 9, 8 and 6 days ago deletes the 9-day one only (the 8-day one is
/// where a recovery to the window's start begins) and the WAL from before the 8-day
/// one's start, keeping the timeline history; what remains recovers to the window's
/// start and no earlier.
#[tokio::test]
async fn base_backups_are_kept_by_recovery_window_with_the_wal_they_need() {
    use bosun_runner::base::WalRange;
    use bosun_runner::recover::{Recovery, Target};
    let _timed = Timed::start("base_backups_are_kept_by_recovery_window_with_the_wal_they_need");
    let b = backends();
    let name = unique("window");
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let folder = format!("win/{name}");
    let mut seeded = Vec::new();
    for (days_ago, start) in [(9, 1u32), (8, 3), (6, 5)] {
        let finished = Timestamp::now() - days(days_ago);
        let (key, manifest_key) = manifest::keys(&format!("{folder}/base"), finished, "base.tar");
        place.put(&key, b"seeded".to_vec()).await;
        let wal = format!("{:08X}{:08X}{:08X}", 1, 0, start);
        let m = manifest::Manifest {
            key: key.clone(),
            size: 6,
            sha256: String::new(),
            uncompressed_size: 6,
            compression: "zstd".into(),
            engine: "postgresql".into(),
            source: "postgresql://seed@127.0.0.1/seed".into(),
            tool_version: "seeded by the test".into(),
            server_version: "seeded by the test".into(),
            started: finished - SignedDuration::from_secs(60),
            finished,
            wal: Some(WalRange {
                timeline: 1,
                start_lsn: format!("0/{start}000028"),
                end_lsn: format!("0/{start}000100"),
                start_wal: wal.clone(),
                end_wal: wal,
            }),
            encryption: None,
        };
        place.put(&manifest_key, serde_json::to_vec(&m).unwrap()).await;
        seeded.push(key);
    }
    let wal = |file: &str| format!("{folder}/wal/{file}.zst");
    let files = [
        "000000010000000000000001",
        "000000010000000000000002",
        "000000010000000000000002.partial",
        "000000010000000000000003",
        "00000002.history",
        "000000020000000000000004",
        "000000020000000000000005",
    ];
    for file in files {
        place.put(&wal(file), b"seeded".to_vec()).await;
    }

    let run = bosun_ok(&b, &backup_args(&db, &place, "win", &name, &["--method", "base", "--retention", "7d"])).await;
    let deleted: BTreeSet<String> =
        run["deleted"].as_array().unwrap().iter().map(|k| place.relative(k.as_str().unwrap())).collect();
    let expected: BTreeSet<String> = [seeded[0].clone()].into_iter().chain(files[..3].iter().map(|f| wal(f))).collect();
    assert_eq!(deleted, expected, "{run}");
    let oldest: Timestamp = run["oldestKept"].as_str().unwrap().parse().unwrap();
    let base_8 = place.manifest(&manifest_key_of(&seeded[1]).unwrap()).await.unwrap();
    assert_eq!(oldest, base_8.finished, "the first recoverable point is the 8-day base backup's end");
    let left = place.keys(&format!("{folder}/wal")).await;
    for file in &files[3..] {
        assert!(left.contains(&wal(file)), "{file} is needed and kept: {left:?}");
    }

    // What is left recovers to the window's start, and refuses anything before it.
    let recovery = Recovery {
        store: place.store.clone(),
        folder: folder.clone(),
        target: Target::Latest,
        pgdata: std::env::temp_dir().join(format!("bosun-{name}-never")),
        settings_file: std::env::temp_dir().join(format!("bosun-{name}-never.conf")),
        restore_command: String::new(),
        keys: None,
    };
    let archived = recovery.archived().await.unwrap();
    let window_start = Timestamp::now() - days(7);
    assert_eq!(archived.plan(&Target::Time(window_start), &folder).unwrap().key, seeded[1]);
    let before = archived.plan(&Target::Time(base_8.finished - SignedDuration::from_secs(1)), &folder);
    assert!(before.unwrap_err().to_string().contains("before the end of the oldest base backup"));
    place.clear().await;
}
