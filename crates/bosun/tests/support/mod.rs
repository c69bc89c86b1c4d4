//! Shared by `backup_runner.rs` and `backup_runner_faults.rs`: the three databases
//! with a known dataset, the four destinations, and reading and writing a bucket
//! without bosun (the tests open their own object_store clients, configured from
//! `hack/backends.sh env` by hand, so nothing they check goes through the runner's
//! store code).

#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use bosun_runner::location::{Destination, StoreKind};
use bosun_runner::manifest::{self, Manifest};
use bosun_runner::store::Store;
use bosun_testing::backends::Backends;
use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};

pub const ROWS: usize = 10_000;

/// Prints how long a test took when it ends (run with `--nocapture` to see it).
#[derive(Debug)]
pub struct Timed(pub &'static str, pub std::time::Instant);

impl Timed {
    pub fn start(name: &'static str) -> Timed {
        Timed(name, std::time::Instant::now())
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() { "FAILED" } else { "ok" };
        eprintln!("timing: {:<62} {outcome:<6} {:6.1}s", self.0, self.1.elapsed().as_secs_f64());
    }
}

pub use bosun_runner::location::Engine;

/// What the tests name an engine by, beside the runner's own names.
pub trait EngineExt {
    /// A short tag for database and key names.
    fn short(self) -> &'static str;
}

impl EngineExt for Engine {
    fn short(self) -> &'static str {
        match self {
            Engine::Postgresql => "pg",
            Engine::Mysql => "my",
            Engine::Mongodb => "mg",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    S3,
    Gcs,
    Azure,
    File,
}

impl Dest {
    pub fn short(self) -> &'static str {
        match self {
            Dest::S3 => "s3",
            Dest::Gcs => "gcs",
            Dest::Azure => "az",
            Dest::File => "file",
        }
    }
}

/// One test's own place in a destination: what bosun is told (`--destination`,
/// `--endpoint`) and a store the test opened itself, at the same prefix.
#[derive(Debug)]
pub struct Place {
    pub dest: Dest,
    pub url: String,
    pub endpoint: Option<String>,
    pub store: Store,
    file_dir: Option<PathBuf>,
}

impl Place {
    /// `prefix` inside the bucket, or a fresh directory for `file://`.
    pub fn new(b: &Backends, dest: Dest, prefix: &str) -> Place {
        let http = || ClientOptions::new().with_allow_http(true);
        let (url, endpoint, objects, file_dir): (String, Option<String>, Arc<dyn ObjectStore>, _) = match dest {
            Dest::S3 => {
                let s3 = AmazonS3Builder::new()
                    .with_bucket_name(b.var("S3_BUCKET"))
                    .with_endpoint(b.var("S3_ENDPOINT"))
                    .with_region(b.var("AWS_REGION"))
                    .with_access_key_id(b.var("AWS_ACCESS_KEY_ID"))
                    .with_secret_access_key(b.var("AWS_SECRET_ACCESS_KEY"))
                    .with_client_options(http())
                    .build()
                    .expect("s3 client");
                (
                    format!("s3://{}/{prefix}", b.var("S3_BUCKET")),
                    Some(b.var("S3_ENDPOINT").to_owned()),
                    Arc::new(s3),
                    None,
                )
            }
            Dest::Gcs => {
                // The emulator's key file names its URL and turns OAuth off.
                let gcs = GoogleCloudStorageBuilder::new()
                    .with_bucket_name(b.var("GCS_BUCKET"))
                    .with_service_account_path(b.var("GOOGLE_SERVICE_ACCOUNT"))
                    .with_client_options(http())
                    .build()
                    .expect("gcs client");
                (
                    format!("gs://{}/{prefix}", b.var("GCS_BUCKET")),
                    Some(b.var("GCS_ENDPOINT").to_owned()),
                    Arc::new(gcs),
                    None,
                )
            }
            Dest::Azure => {
                let azure = MicrosoftAzureBuilder::new()
                    .with_account(b.var("AZURE_STORAGE_ACCOUNT_NAME"))
                    .with_access_key(b.var("AZURE_STORAGE_ACCOUNT_KEY"))
                    .with_container_name(b.var("AZURE_CONTAINER"))
                    .with_endpoint(b.var("AZURE_ENDPOINT").to_owned())
                    .with_allow_http(true)
                    .build()
                    .expect("azure client");
                (
                    format!("azure://{}/{prefix}", b.var("AZURE_CONTAINER")),
                    Some(b.var("AZURE_ENDPOINT").to_owned()),
                    Arc::new(azure),
                    None,
                )
            }
            Dest::File => {
                let dir = std::env::temp_dir().join("bosun-tests").join(prefix.replace('/', "-"));
                std::fs::create_dir_all(&dir).expect("destination directory");
                let fs = LocalFileSystem::new_with_prefix(&dir).expect("local store");
                (format!("file://{}", dir.display()), None, Arc::new(fs), Some(dir))
            }
        };
        let destination = Destination::parse(&url).expect("destination URL");
        assert!(dest != Dest::File || destination.kind == StoreKind::File);
        Place { dest, url, endpoint, store: Store { objects, destination }, file_dir }
    }

    /// `--destination URL [--endpoint URL]`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["--destination".to_owned(), self.url.clone()];
        if let Some(e) = &self.endpoint {
            args.extend(["--endpoint".to_owned(), e.clone()]);
        }
        args
    }

    /// A key as bosun prints it (with the prefix) made relative to the prefix.
    pub fn relative(&self, full_key: &str) -> String {
        match self.store.destination.prefix.as_str() {
            "" => full_key.to_owned(),
            p => full_key
                .strip_prefix(&format!("{p}/"))
                .unwrap_or_else(|| panic!("{full_key} is not under {p}/"))
                .to_owned(),
        }
    }

    /// Every key under `folder` (relative to the prefix).
    pub async fn keys(&self, folder: &str) -> BTreeSet<String> {
        let prefix = self.store.path(folder);
        let metas: Vec<_> = self.store.objects.list(Some(&prefix)).try_collect().await.expect("listing the bucket");
        metas.iter().map(|m| self.relative(m.location.as_ref())).collect()
    }

    /// Size and sha256 of what is stored at `key`, read back by the test.
    pub async fn sha256(&self, key: &str) -> (u64, String) {
        let got = self.store.objects.get(&self.store.path(key)).await.unwrap_or_else(|e| panic!("reading {key}: {e}"));
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut body = got.into_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.expect("reading the object");
            size += chunk.len() as u64;
            hasher.update(&chunk);
        }
        (size, hex::encode(hasher.finalize()))
    }

    pub async fn get(&self, key: &str) -> Vec<u8> {
        let got = self.store.objects.get(&self.store.path(key)).await.unwrap_or_else(|e| panic!("reading {key}: {e}"));
        got.bytes().await.expect("reading the object").to_vec()
    }

    pub async fn put(&self, key: &str, body: Vec<u8>) {
        self.store
            .objects
            .put(&self.store.path(key), PutPayload::from(body))
            .await
            .unwrap_or_else(|e| panic!("writing {key}: {e}"));
    }

    pub async fn delete(&self, key: &str) {
        self.store.objects.delete(&self.store.path(key)).await.unwrap_or_else(|e| panic!("deleting {key}: {e}"));
    }

    /// The manifest at `key`, parsed; `None` when there is none.
    pub async fn manifest(&self, key: &str) -> Option<Manifest> {
        match self.store.objects.get(&self.store.path(key)).await {
            Ok(got) => {
                Some(serde_json::from_slice(&got.bytes().await.expect("reading a manifest")).expect("manifest JSON"))
            }
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("reading {key}: {e}"),
        }
    }

    /// Good backups as if made `ages` ago: `body` stored under each age's stamp with a
    /// manifest vouching for it. Returns the dump keys, oldest first.
    pub async fn seed(&self, folder: &str, engine: Engine, body: &[u8], ages: &[SignedDuration]) -> Vec<String> {
        let now = Timestamp::now();
        let times: Vec<Timestamp> = ages.iter().map(|age| now - *age).collect();
        self.seed_at(folder, engine, body, &times).await
    }

    /// [`Place::seed`] with the times the dumps were made.
    pub async fn seed_at(&self, folder: &str, engine: Engine, body: &[u8], times: &[Timestamp]) -> Vec<String> {
        let sha256 = hex::encode(Sha256::digest(body));
        let mut keys = Vec::new();
        for started in times.iter().copied() {
            let (key, manifest_key) = manifest::keys(folder, started, engine.extension());
            self.put(&key, body.to_vec()).await;
            let m = Manifest {
                key: key.clone(),
                size: body.len() as u64,
                sha256: sha256.clone(),
                uncompressed_size: body.len() as u64 * 3,
                compression: "zstd".into(),
                engine: engine.as_str().into(),
                source: format!("{}://seed@127.0.0.1/seed", engine.as_str()),
                tool_version: "seeded by the test".into(),
                server_version: "seeded by the test".into(),
                started,
                finished: started + SignedDuration::from_secs(1),
                wal: None,
                encryption: None,
            };
            self.put(&manifest_key, serde_json::to_vec_pretty(&m).expect("manifest")).await;
            keys.push(key);
        }
        keys.sort();
        keys
    }

    /// Remove everything the test stored.
    pub async fn clear(&self) {
        if let Some(dir) = &self.file_dir {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        let prefix = self.store.path("");
        let metas: Vec<_> = self.store.objects.list(Some(&prefix)).try_collect().await.unwrap_or_default();
        for m in metas {
            let _ = self.store.objects.delete(&m.location).await;
        }
    }
}

/// Days, as a retention age.
pub fn days(n: i64) -> SignedDuration {
    SignedDuration::from_hours(24 * n)
}

/// A database of the test's own, dropped when the test ends (also when it fails).
#[derive(Debug)]
pub struct Db {
    pub engine: Engine,
    pub name: String,
    b: Backends,
}

impl Db {
    /// Create `name`, empty.
    pub async fn create(b: &Backends, engine: Engine, name: &str) -> Db {
        let db = Db { engine, name: name.to_owned(), b: b.clone() };
        db.create_empty().await;
        db
    }

    /// The URL bosun is given (`--source`, `--target`).
    pub fn url(&self) -> String {
        match self.engine {
            Engine::Postgresql => self.b.postgres_url(&self.name),
            Engine::Mysql => self.b.mysql_url(&self.name),
            Engine::Mongodb => self.b.mongodb_url(&self.name),
        }
    }

    async fn create_empty(&self) {
        match self.engine {
            Engine::Postgresql => {
                psql(&self.b, "postgres", &format!("CREATE DATABASE \"{}\"", self.name)).await;
            }
            Engine::Mysql => {
                mariadb(&self.b, "", &format!("CREATE DATABASE `{}` CHARACTER SET utf8mb4", self.name)).await;
            }
            // A MongoDB database exists once it has a collection.
            Engine::Mongodb => {}
        }
    }

    /// Drop it and create it again, empty.
    pub async fn recreate_empty(&self) {
        match self.engine {
            Engine::Postgresql => {
                psql(&self.b, "postgres", &format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name)).await;
            }
            Engine::Mysql => {
                mariadb(&self.b, "", &format!("DROP DATABASE `{}`", self.name)).await;
            }
            // No dropDatabase without a mongo shell: drop its one collection (an empty
            // import with --drop), which leaves a database without collections.
            Engine::Mongodb => {
                self.b
                    .ok(
                        "mongoimport",
                        &[
                            &mongo_uri(&self.b),
                            "--quiet",
                            "--drop",
                            "--db",
                            &self.name,
                            "--collection",
                            "docs",
                            "--file",
                            "/dev/null",
                        ],
                    )
                    .await;
            }
        }
        self.create_empty().await;
        assert_eq!(self.checksum().await, self.empty_checksum(), "{} is empty again", self.name);
    }

    /// 10,000 rows (documents) with unicode text, NULLs and binary values.
    pub async fn load_dataset(&self) {
        match self.engine {
            Engine::Postgresql => {
                psql(
                    &self.b,
                    &self.name,
                    &format!(
                        "CREATE TABLE t (id int PRIMARY KEY, txt text, bin bytea, num numeric, at timestamptz);
                         INSERT INTO t SELECT g,
                           CASE WHEN g % 7 = 0 THEN NULL ELSE 'ünïcødé ✓ 日本語 😀 «' || g || '»' || repeat(' ', g % 3) END,
                           CASE WHEN g % 11 = 0 THEN NULL ELSE decode('00ff' || md5(g::text), 'hex') END,
                           CASE WHEN g % 13 = 0 THEN NULL ELSE g * 1.5 END,
                           '2024-01-01T00:00:00Z'::timestamptz + g * interval '1 minute'
                         FROM generate_series(1, {ROWS}) g;
                         CREATE INDEX t_txt ON t (txt);"
                    ),
                )
                .await;
            }
            Engine::Mysql => {
                mariadb(
                    &self.b,
                    &self.name,
                    &format!(
                        "CREATE TABLE t (id INT PRIMARY KEY, txt TEXT CHARACTER SET utf8mb4, bin VARBINARY(64), num DECIMAL(12,2), KEY (txt(20)));
                         INSERT INTO t SELECT seq,
                           IF(seq % 7 = 0, NULL, CONCAT('ünïcødé ✓ 日本語 😀 «', seq, '»')),
                           IF(seq % 11 = 0, NULL, CONCAT(X'00FF', UNHEX(MD5(seq)))),
                           IF(seq % 13 = 0, NULL, seq * 1.5)
                         FROM seq_1_to_{ROWS};"
                    ),
                )
                .await;
            }
            Engine::Mongodb => {
                let file = std::env::temp_dir().join(format!("{}.json", self.name));
                std::fs::write(&file, mongo_documents()).expect("writing the documents");
                let path = file.to_str().expect("utf-8 path");
                let out = self
                    .b
                    .run(
                        "mongoimport",
                        &[&mongo_uri(&self.b), "--quiet", "--db", &self.name, "--collection", "docs", "--file", path],
                    )
                    .await;
                let _ = std::fs::remove_file(&file);
                assert!(out.ok, "mongoimport failed: {out}");
            }
        }
        let sum = self.checksum().await;
        assert!(sum.starts_with(&format!("{ROWS} ")), "{} holds the dataset: {sum}", self.name);
    }

    /// `<rows> <digest of every row in id order>`.
    pub async fn checksum(&self) -> String {
        match self.engine {
            Engine::Postgresql => {
                let tables = psql(
                    &self.b,
                    &self.name,
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 't'",
                )
                .await;
                if tables.trim() == "0" {
                    return self.empty_checksum();
                }
                psql(&self.b, &self.name, "SELECT count(*) || ' ' || md5(string_agg(t::text, ',' ORDER BY id)) FROM t")
                    .await
                    .trim()
                    .to_owned()
            }
            Engine::Mysql => {
                let tables = mariadb(
                    &self.b,
                    &self.name,
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 't'",
                )
                .await;
                if tables.trim() == "0" {
                    return self.empty_checksum();
                }
                mariadb(
                    &self.b,
                    &self.name,
                    "SET SESSION group_concat_max_len = 1073741824;
                     SELECT CONCAT(COUNT(*), ' ', MD5(GROUP_CONCAT(CONCAT_WS('|', id, IFNULL(txt, '<null>'), IFNULL(HEX(bin), '<null>'),
                       IFNULL(num, '<null>')) ORDER BY id SEPARATOR ','))) FROM t",
                )
                .await
                .trim()
                .to_owned()
            }
            Engine::Mongodb => {
                let out = self
                    .b
                    .ok(
                        "mongoexport",
                        &[
                            &mongo_uri(&self.b),
                            "--quiet",
                            "--db",
                            &self.name,
                            "--collection",
                            "docs",
                            "--sort",
                            r#"{"_id": 1}"#,
                        ],
                    )
                    .await;
                if out.is_empty() {
                    return self.empty_checksum();
                }
                format!("{} {}", out.lines().count(), hex::encode(Sha256::digest(out.as_bytes())))
            }
        }
    }

    fn empty_checksum(&self) -> String {
        "0 (no table)".to_owned()
    }

    /// A table of about `mib` MiB of random text (PostgreSQL): a dump that takes a while.
    pub async fn load_big(&self, mib: usize) {
        assert_eq!(self.engine, Engine::Postgresql);
        // ~220 random characters a row (base64 and hex of a sha512 of a random value):
        // about half of it is left after zstd. Unlogged: no WAL, built in seconds.
        let rows = mib * 1024 * 1024 / 230;
        psql(
            &self.b,
            &self.name,
            &format!(
                "CREATE UNLOGGED TABLE big AS SELECT g AS id,
                   encode(sha512(int8send(g) || float8send(random())), 'base64')
                   || encode(sha512(int8send(g) || float8send(random())), 'hex') AS txt
                 FROM generate_series(1, {rows}) g"
            ),
        )
        .await;
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let out = match self.engine {
            Engine::Postgresql => self
                .b
                .blocking_command("psql")
                .args([
                    "-X",
                    "-qAt",
                    "-d",
                    "postgres",
                    "-c",
                    &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
                ])
                .output(),
            Engine::Mysql => self
                .b
                .blocking_command("mariadb")
                .args(mariadb_args(&self.b))
                .args(["-e", &format!("DROP DATABASE IF EXISTS `{}`", self.name)])
                .output(),
            Engine::Mongodb => self
                .b
                .blocking_command("mongoimport")
                .args([
                    &mongo_uri(&self.b),
                    "--quiet",
                    "--drop",
                    "--db",
                    &self.name,
                    "--collection",
                    "docs",
                    "--file",
                    "/dev/null",
                ])
                .output(),
        };
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("dropping {}: {}", self.name, String::from_utf8_lossy(&o.stderr)),
            Err(e) => eprintln!("dropping {}: {e}", self.name),
        }
    }
}

/// Run SQL in PostgreSQL database `db`; its unaligned output.
pub async fn psql(b: &Backends, db: &str, sql: &str) -> String {
    b.ok("psql", &["-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql]).await
}

fn mariadb_args(b: &Backends) -> Vec<String> {
    [
        "--no-defaults",
        "--protocol=TCP",
        "--host",
        b.var("MYSQL_HOST"),
        "--port",
        b.var("MYSQL_PORT"),
        "--user",
        b.var("MYSQL_USER"),
        "--default-character-set=utf8mb4",
        "--batch",
        "--skip-column-names",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Run SQL in MariaDB database `db` (none: `""`); its tab-separated output.
pub async fn mariadb(b: &Backends, db: &str, sql: &str) -> String {
    let mut args = mariadb_args(b);
    args.extend(["--execute".to_owned(), sql.to_owned()]);
    if !db.is_empty() {
        args.push(db.to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    b.ok("mariadb", &args).await
}

/// `--uri=…` for the mongo tools (the test's own connection, password included).
pub fn mongo_uri(b: &Backends) -> String {
    format!("--uri={}", b.var("MONGODB_URI"))
}

/// Extended JSON lines: unicode, nulls, binary, nested values; deterministic.
fn mongo_documents() -> String {
    let mut out = String::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 1..=ROWS {
        let mut bytes = [0u8; 16];
        for b in &mut bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let doc = serde_json::json!({
            "_id": i,
            "txt": if i % 7 == 0 { serde_json::Value::Null } else { format!("ünïcødé ✓ 日本語 😀 «{i}»").into() },
            "num": if i % 13 == 0 { serde_json::Value::Null } else { (i as f64 * 1.5).into() },
            "bin": {"$binary": {"base64": base64(&bytes), "subType": "00"}},
            "nested": {"tags": ["a", i.to_string()], "even": i % 2 == 0},
        });
        out.push_str(&doc.to_string());
        out.push('\n');
    }
    out
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Run `bosun args…` and return its JSON result, panicking with its output on failure.
pub async fn bosun_ok(b: &Backends, args: &[String]) -> serde_json::Value {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = b.bosun(&args).await;
    assert!(out.ok, "bosun {args:?} failed: {out}");
    out.json()
}

/// `bosun backup run` of `db` into `place`'s folder `<namespace>/<name>`, with `extra` flags.
pub fn backup_args(db: &Db, place: &Place, namespace: &str, name: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["backup", "run", "--source", &db.url()].map(str::to_owned).to_vec();
    args.extend(place.args());
    args.extend(["--namespace", namespace, "--name", name].map(str::to_owned));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// `bosun backup list` of `<namespace>/<name>`: the dump keys it shows (relative).
pub async fn listed(b: &Backends, place: &Place, namespace: &str, name: &str) -> Vec<String> {
    let mut args: Vec<String> = ["backup", "list"].map(str::to_owned).to_vec();
    args.extend(place.args());
    args.extend(["--namespace", namespace, "--name", name].map(str::to_owned));
    let list = bosun_ok(b, &args).await;
    list.as_array()
        .unwrap_or_else(|| panic!("backup list prints an array: {list}"))
        .iter()
        .map(|m| m["key"].as_str().expect("a manifest's key").to_owned())
        .collect()
}
