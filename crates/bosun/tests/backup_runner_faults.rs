//! The storage server failing under a running `bosun backup run`: MinIO killed, and
//! MinIO frozen (SIGSTOP), while a dump is being uploaded.
//!
//! These tests stop a server, so they run on a set of backends of their own
//! (a temporary directory), started here and torn down by the supervisor (as
//! `hack/backends.sh down`) at the end; the shared servers in `.backends` are never
//! touched. Each test has a set of its own.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_runner::manifest::manifest_key_of;
use bosun_testing::backends::{Backends, MINIO, Outcome, RUN_TIMEOUT, unique};
use support::{Db, Dest, Engine, Place, Timed, backup_args, bosun_ok, days, listed};

/// A set of servers of the test's own, taken down (as `hack/backends.sh down`) when
/// the test ends, passed or failed.
struct Private {
    backends: Backends,
}

impl Private {
    fn start(label: &str) -> Private {
        // Short (unix socket paths) and world-searchable (the postgres user).
        let dir = std::env::temp_dir().join(unique(label));
        Private { backends: Backends::start(Some(&dir)) }
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if let Err(e) = self.backends.down() {
            eprintln!("stopping the backends in {} failed: {e}", self.backends.state.display());
            assert!(std::thread::panicking(), "stopping the private backends failed");
        }
    }
}

/// What a test needs: a ~200 MiB database, a folder with two good backups a month
/// old (a run with `--retention 30d` that reached retention would delete both).
struct Setup {
    b: Backends,
    db: Db,
    place: Place,
    name: String,
    seeds: Vec<String>,
}

async fn setup(private: &Private, label: &str) -> Setup {
    let b = private.backends.clone();
    let name = unique(label);
    let db = Db::create(&b, Engine::Postgresql, &name).await;
    db.load_big(200).await;
    let place = Place::new(&b, Dest::S3, &format!("bosun-tests/{name}"));
    let seeds =
        place.seed(&format!("faults/{name}"), Engine::Postgresql, b"an older good backup", &[days(40), days(35)]).await;
    Setup { b, db, place, name, seeds }
}

impl Setup {
    fn args(&self) -> Vec<String> {
        backup_args(&self.db, &self.place, "faults", &self.name, &["--retention", "30d", "--keep-last", "1"])
    }

    /// Once the server is back: no new object, no manifest, the seeds all there.
    async fn assert_nothing_stored_nothing_deleted(&self, out: &Outcome) {
        let keys = self.place.keys(&format!("faults/{}", self.name)).await;
        let seeds: BTreeSet<String> =
            self.seeds.iter().flat_map(|k| [k.clone(), manifest_key_of(k).unwrap()]).collect();
        assert_eq!(keys, seeds, "a failed run stores nothing and deletes nothing:\n{out}");
        assert_eq!(listed(&self.b, &self.place, "faults", &self.name).await, self.seeds);
        let dumps = self.b.run("pgrep", &["-f", &format!("pg_dump .*{}", self.name)]).await;
        assert!(dumps.stdout.trim().is_empty(), "pg_dump was stopped with the run: {dumps}");
    }

    /// With the server healthy again, a run succeeds and its retention removes the seeds.
    async fn assert_recovers(&self) {
        let result = bosun_ok(&self.b, &self.args()).await;
        let deleted: Vec<&str> = result["deleted"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
        let seeds: Vec<String> = self.seeds.iter().map(|k| self.place.store.full_key(k)).collect();
        assert_eq!(deleted, seeds, "{result}");
    }
}

fn minio_pid(b: &Backends) -> String {
    b.pid(&MINIO).expect("MinIO runs").to_string()
}

/// Wait until the first part of a multipart upload has reached MinIO's disk.
async fn wait_for_upload(b: &Backends, timeout: Duration) {
    let dir = b.state.join("minio/data/.minio.sys/multipart");
    let deadline = Instant::now() + timeout;
    while !has_part(&dir) {
        assert!(Instant::now() < deadline, "no multipart upload reached {} within {timeout:?}", dir.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has_part(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        (name.starts_with("part.") && !name.ends_with(".meta")) || (e.path().is_dir() && has_part(&e.path()))
    })
}

async fn finish(child: tokio::process::Child, limit: Duration) -> Outcome {
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("bosun did not exit within {limit:?}: the runner hangs"))
        .expect("waiting for bosun");
    Outcome {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn assert_upload_failed(out: &Outcome) {
    assert_eq!(out.code, Some(1), "a failed run exits 1:\n{out}");
    assert!(out.stdout.trim().is_empty(), "no result line:\n{out}");
    assert!(out.stderr.contains("error: upload failed: uploading "), "the message names the upload:\n{out}");
}

/// MinIO killed (SIGKILL) while parts are uploading: the run fails naming the upload
/// (it does not hang with pg_dump blocked on a pipe nobody reads), and once MinIO is
/// back there is no dump, no manifest, and every older backup is still there.
#[tokio::test]
async fn storage_killed_mid_upload() {
    let _timed = Timed::start("storage_killed_mid_upload");
    let private = Private::start("bosun-faults");
    let s = setup(&private, "minio_killed").await;
    let started = Instant::now();
    let run = s.b.spawn_bosun(&support_args(&s.args()), &[]);
    wait_for_upload(&s.b, Duration::from_secs(60)).await;
    s.b.ok("kill", &["-KILL", &minio_pid(&s.b)]).await;
    let out = finish(run, RUN_TIMEOUT).await;
    eprintln!("storage_killed_mid_upload: bosun failed {:.1}s after it started", started.elapsed().as_secs_f64());
    assert_upload_failed(&out);
    // Started again exactly as the supervisor first started it (same executable,
    // arguments, environment and data directory), which waits until the set is healthy.
    let b = s.b.clone();
    tokio::task::spawn_blocking(move || b.restart(&MINIO)).await.expect("restarting MinIO");
    s.assert_nothing_stored_nothing_deleted(&out).await;
    s.assert_recovers().await;
}

/// MinIO frozen (SIGSTOP) while parts are uploading: requests time out (here after
/// 2 s each, `AWS_TIMEOUT`, rather than object_store's default 30 s) and the run fails
/// once object_store's retries are spent, instead of waiting for ever. After SIGCONT:
/// nothing stored, nothing deleted.
#[tokio::test]
async fn storage_frozen_mid_upload() {
    let _timed = Timed::start("storage_frozen_mid_upload");
    let private = Private::start("bosun-faults");
    let s = setup(&private, "minio_frozen").await;
    let started = Instant::now();
    let run = s.b.spawn_bosun(&support_args(&s.args()), &[("AWS_TIMEOUT", "2s")]);
    wait_for_upload(&s.b, Duration::from_secs(60)).await;
    let pid = minio_pid(&s.b);
    s.b.ok("kill", &["-STOP", &pid]).await;
    let out = finish(run, RUN_TIMEOUT).await;
    s.b.ok("kill", &["-CONT", &pid]).await;
    eprintln!("storage_frozen_mid_upload: bosun failed {:.1}s after it started", started.elapsed().as_secs_f64());
    assert_upload_failed(&out);
    wait_healthy(&s.b).await;
    s.assert_nothing_stored_nothing_deleted(&out).await;
    s.assert_recovers().await;
}

fn support_args(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The private set's servers all run and answer again (as `hack/backends.sh status`).
async fn wait_healthy(b: &Backends) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe = b.clone();
        if tokio::task::spawn_blocking(move || probe.healthy()).await.expect("the health check") {
            return;
        }
        assert!(Instant::now() < deadline, "the private backends are not healthy again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
