//! The storage server failing under a running `bosun backup run`: MinIO killed, and
//! MinIO frozen (SIGSTOP), while a dump is being uploaded.
//!
//! These tests stop a server, so they run on a set of backends of their own
//! (`BOSUN_BACKENDS_DIR` = a temporary directory), started here and torn down with
//! `hack/backends.sh down` at the end; the shared servers in `.backends` are never
//! touched. Each test has a set of its own.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test fails by panicking

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_runner::manifest::manifest_key_of;
use bosun_testing::backends::{Backends, Outcome, RUN_TIMEOUT, unique};
use support::{Db, Dest, Engine, Place, Timed, backup_args, bosun_ok, days, listed};

/// A set of servers of the test's own, taken down (`hack/backends.sh down`) when
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
        let out = self.backends.down();
        if !out.ok {
            eprintln!("hack/backends.sh down for {} failed: {out}", self.backends.state.display());
            assert!(std::thread::panicking(), "hack/backends.sh down failed");
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
    std::fs::read_to_string(b.state.join("pids/minio.pid")).expect("minio's pid file").trim().to_owned()
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
    let minio = Restartable::record(&s.b);
    s.b.ok("kill", &["-KILL", &minio.pid]).await;
    let out = finish(run, RUN_TIMEOUT).await;
    eprintln!("storage_killed_mid_upload: bosun failed {:.1}s after it started", started.elapsed().as_secs_f64());
    assert_upload_failed(&out);
    minio.restart(&s.b).await;
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

/// A killed MinIO, started again exactly as `hack/backends.sh` started it (same
/// executable, arguments, environment, data directory and pid file).
struct Restartable {
    pid: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

impl Restartable {
    fn record(b: &Backends) -> Restartable {
        let pid = minio_pid(b);
        let split = |file: &str| -> Vec<String> {
            let raw =
                std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_else(|e| panic!("/proc/{pid}/{file}: {e}"));
            raw.split(|c| *c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        };
        let argv = split("cmdline");
        assert!(argv[0].ends_with("minio"), "{pid} is minio: {argv:?}");
        let env = split("environ")
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).expect("minio's directory");
        Restartable { pid, argv, env, cwd }
    }

    // The restarted server outlives this call on purpose: `hack/backends.sh down`
    // stops it through its pid file when the test ends.
    #[allow(clippy::zombie_processes)]
    async fn restart(&self, b: &Backends) {
        use std::os::unix::process::CommandExt;
        // Gone (and reaped by init) before its port is taken again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{}", self.pid)).exists() {
            assert!(Instant::now() < deadline, "minio {} is still there 10 s after SIGKILL", self.pid);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::OpenOptions::new().append(true).open(b.state.join("logs/minio.log")).expect("minio's log");
        let child = std::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("starting minio again");
        // hack/backends.sh (status, down) finds it by its pid file.
        std::fs::write(b.state.join("pids/minio.pid"), format!("{}\n", child.id())).expect("minio's pid file");
        wait_healthy(b).await;
    }
}

/// `hack/backends.sh status` for the private set says healthy.
async fn wait_healthy(b: &Backends) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = b
            .run_with(
                bosun_testing::repo_root().join("hack/backends.sh").to_str().unwrap(),
                &["status"],
                &[("BOSUN_BACKENDS_DIR", b.state.to_str().unwrap())],
                Duration::from_secs(30),
            )
            .await;
        if out.ok {
            return;
        }
        assert!(Instant::now() < deadline, "the private backends are not healthy again: {out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
