//! The instance manager's transitions against a fake of the PostgreSQL programs: the
//! fake changes the data directory as the program would (a clone makes a cluster, a
//! promotion removes `standby.signal`) and records what was run; the server is a real
//! process (`sleep`) that a fast shutdown (SIGINT) ends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::commands::Postgres;
use crate::manager::{self, Outcome};
use crate::role::tests::{set_label, temp_dir};
use crate::settings::InstanceArgs;

struct Fake {
    pgdata: PathBuf,
    calls: RefCell<Vec<String>>,
    /// The primary's major, when it answers.
    primary: Cell<Option<u32>>,
    /// The major a clone is of.
    clone_major: &'static str,
    rewind_works: Cell<bool>,
    recover_says: RefCell<Result<String, String>>,
    /// The server: `sleep` unless told otherwise.
    server: RefCell<Vec<String>>,
    started_with: RefCell<Vec<Vec<String>>>,
    /// What the standbys' replies are at each look: a count of them when they reply.
    standbys_reply: Cell<bool>,
}

impl Fake {
    fn new(pgdata: &Path) -> Fake {
        Fake {
            pgdata: pgdata.to_owned(),
            calls: RefCell::default(),
            primary: Cell::new(Some(17)),
            clone_major: "17",
            rewind_works: Cell::new(true),
            recover_says: RefCell::new(Ok("recovered".into())),
            server: RefCell::new(vec!["sleep".into(), "30".into()]),
            started_with: RefCell::default(),
            standbys_reply: Cell::new(false),
        }
    }

    fn call(&self, what: &str) {
        self.calls.borrow_mut().push(what.to_owned());
    }

    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn count(&self, what: &str) -> usize {
        self.calls.borrow().iter().filter(|c| *c == what).count()
    }
}

fn cluster(dir: &Path, major: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("PG_VERSION"), format!("{major}\n")).unwrap();
}

impl Postgres for Fake {
    async fn primary(&self) -> Option<u32> {
        self.call("primary");
        self.primary.get()
    }
    async fn base_backup(&self, into: &Path) -> Result<(), String> {
        self.call("base_backup");
        assert!(!into.exists(), "pg_basebackup refuses a directory that is not empty");
        cluster(into, self.clone_major);
        Ok(())
    }
    async fn crash_recovery(&self) -> Result<(), String> {
        self.call("crash_recovery");
        Ok(())
    }
    async fn checkpoint_primary(&self) -> Result<(), String> {
        self.call("checkpoint_primary");
        Ok(())
    }
    async fn rewind(&self) -> Result<(), String> {
        self.call("rewind");
        if self.rewind_works.get() { Ok(()) } else { Err("could not find common ancestor".into()) }
    }
    async fn recover(&self) -> Result<String, String> {
        self.call("recover");
        let said = self.recover_says.borrow().clone();
        if said.is_ok() {
            cluster(&self.pgdata, "17");
            std::fs::write(self.pgdata.join("recovery.signal"), "").unwrap();
        }
        said
    }
    async fn promote(&self) -> Result<(), String> {
        self.call("promote");
        let _ = std::fs::remove_file(self.pgdata.join("standby.signal"));
        Ok(())
    }
    fn start(&self, command: &[String]) -> std::io::Result<Child> {
        self.call("start");
        self.started_with.borrow_mut().push(command.to_vec());
        let server = self.server.borrow().clone();
        Command::new(&server[0]).args(&server[1..]).kill_on_drop(true).spawn()
    }
    async fn setup(&self) {
        self.call("setup");
    }
    async fn standby_replies(&self) -> Option<String> {
        self.call("standby_replies");
        let looks = self.count("standby_replies");
        Some(if self.standbys_reply.get() { format!("db-2|10.0.0.2|reply {looks}") } else { String::new() })
    }
}

/// An instance in `dir`: data in `dir/pgdata`, its label's volume `dir/podinfo`.
fn instance(dir: &Path, extra: &[&str]) -> InstanceArgs {
    std::fs::create_dir_all(dir.join("podinfo")).unwrap();
    let (pgdata, role, told, pass, term) =
        (dir.join("pgdata"), dir.join("podinfo/role"), dir.join("told"), dir.join("pgpass"), dir.join("term"));
    let mut argv: Vec<String> = ["bosun", "--password", "su:per", "--replication-password", "r3pl"]
        .into_iter()
        .chain(["--primary-host", "db-rw", "--major", "17", "--name", "db-1"])
        .map(str::to_owned)
        .collect();
    for (flag, path) in [
        ("--pgdata", &pgdata),
        ("--role-file", &role),
        ("--role-told", &told),
        ("--passfile", &pass),
        ("--termination-log", &term),
        ("--hba-file", &dir.join("pg_hba.conf")),
        ("--socket-dir", &dir.to_path_buf()),
    ] {
        argv.extend([flag.to_owned(), path.to_string_lossy().into_owned()]);
    }
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    argv.extend(["--", "postgres", "-c", "wal_log_hints=on"].map(str::to_owned));
    crate::settings::tests::parse(argv)
}

/// Wait (up to 10 s) until `done`.
async fn until(what: &str, fake: &Fake, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "timed out waiting for {what}; calls: {:?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The manager run beside `script`, which ends by asking it to stop (or not):
/// what the manager ended with.
async fn drive(args: &InstanceArgs, fake: &Fake, script: impl AsyncFnOnce(&CancellationToken)) -> Outcome {
    drive_with(args, fake, &crate::api::Shared::default(), script).await
}

/// [`drive`], with what the manager shares with the API.
async fn drive_with(
    args: &InstanceArgs,
    fake: &Fake,
    shared: &crate::api::Shared,
    script: impl AsyncFnOnce(&CancellationToken),
) -> Outcome {
    let stop = CancellationToken::new();
    let (outcome, ()) = tokio::join!(manager::run(args, fake, shared, &stop), script(&stop));
    outcome
}

#[tokio::test]
async fn without_a_role_nothing_starts_and_a_signal_ends_the_wait() {
    let dir = temp_dir("no-role");
    let args = instance(&dir, &[]);
    let fake = Fake::new(&args.pgdata);
    let outcome = drive(&args, &fake, async |stop| {
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());
        set_label(&dir.join("podinfo"), 1, "");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(fake.calls().is_empty(), "an empty label is no role: {:?}", fake.calls());
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    assert!(!args.pgdata.exists());
    // The passfile: the instance's connections' passwords, escaped, for its user only.
    use std::os::unix::fs::PermissionsExt;
    let passfile = std::fs::metadata(&args.passfile).unwrap();
    assert_eq!(passfile.permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&args.passfile).unwrap();
    assert_eq!(text, "*:*:*:replicator:r3pl\n*:*:*:postgres:su\\:per\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_replica_clones_streams_is_promoted_then_demoted_and_rejoins() {
    let dir = temp_dir("replica");
    let args = instance(&dir, &[]);
    let fake = Fake::new(&args.pgdata);
    fake.primary.set(None);
    let podinfo = dir.join("podinfo");
    set_label(&podinfo, 1, "replica");
    let outcome = drive(&args, &fake, async |stop| {
        // No primary yet: the clone waits for one.
        until("the standby to ask for its primary", &fake, || fake.count("primary") >= 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(fake.count("base_backup"), 0);
        fake.primary.set(Some(17));
        until("the standby to start", &fake, || fake.count("start") == 1).await;
        let calls: Vec<String> = fake.calls().into_iter().filter(|c| c != "setup").collect();
        assert_eq!(calls[calls.len() - 2..], ["base_backup", "start"]);
        assert_eq!(std::fs::read_to_string(dir.join("pg_hba.conf")).unwrap(), crate::access::HBA);
        assert!(args.pgdata.join("standby.signal").exists() && !dir.join("pgdata.partial").exists());
        let command = fake.started_with.borrow()[0].join(" ");
        assert!(
            command.starts_with(&format!(
                "postgres -c wal_log_hints=on -c hba_file={} -c password_encryption=scram-sha-256 \
                 -c wal_receiver_timeout=5s -c wal_sender_timeout=5s -c wal_receiver_status_interval=1s \
                 -c wal_retrieve_retry_interval=1s \
                 -c primary_conninfo=host=db-rw port=5432 sslmode=prefer user=replicator passfile=",
                dir.join("pg_hba.conf").display()
            )),
            "{command}"
        );
        assert!(command.ends_with("application_name=db-1"), "{command}");
        until("the setup beside the server", &fake, || fake.count("setup") == 1).await;

        // Made the primary: promoted in place, not restarted.
        set_label(&podinfo, 2, "primary");
        until("the promotion", &fake, || fake.count("promote") == 1).await;
        // Then the primary's setup, which the standby skipped.
        until("the setup after the promotion", &fake, || fake.count("setup") == 2).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!((fake.count("promote"), fake.count("start")), (1, 1), "{:?}", fake.calls());
        let calls = fake.calls();
        let promoted = calls.iter().rposition(|c| c == "promote").unwrap();
        assert_eq!(calls[promoted + 1..].iter().filter(|c| *c == "setup").count(), 1, "{calls:?}");

        // Made a replica again: stopped, rewound, started as a standby.
        set_label(&podinfo, 3, "replica");
        until("the restart as a standby", &fake, || fake.count("start") == 2).await;
        let calls: Vec<String> = fake.calls().into_iter().filter(|c| c != "setup").collect();
        let rejoin = &calls[calls.len() - 5..];
        assert_eq!(rejoin, ["primary", "crash_recovery", "checkpoint_primary", "rewind", "start"], "{calls:?}");
        assert!(args.pgdata.join("standby.signal").exists());
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_role_told_ahead_of_the_label_is_obeyed_until_the_file_is_refreshed() {
    let dir = temp_dir("told");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    std::fs::write(args.pgdata.join("standby.signal"), "").unwrap();
    let fake = Fake::new(&args.pgdata);
    let podinfo = dir.join("podinfo");
    set_label(&podinfo, 1, "replica");
    let roles = crate::role::RoleSource { label_file: args.role_file.clone(), told_file: args.role_told.clone() };
    drive(&args, &fake, async |stop| {
        until("the standby to start", &fake, || fake.count("start") == 1).await;
        roles.tell(crate::role::Role::Primary).unwrap();
        until("the promotion it was told", &fake, || fake.count("promote") == 1).await;
        set_label(&podinfo, 2, "replica");
        until("the label's word again", &fake, || fake.count("start") == 2).await;
        assert_eq!(fake.count("rewind"), 1);
        stop.cancel();
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn data_that_cannot_be_rewound_is_kept_whole_and_the_primary_cloned_afresh() {
    let dir = temp_dir("diverged");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    std::fs::write(args.pgdata.join("only-here"), "rows the new primary never had").unwrap();
    let fake = Fake::new(&args.pgdata);
    fake.rewind_works.set(false);
    set_label(&dir.join("podinfo"), 1, "replica");
    drive(&args, &fake, async |stop| {
        until("the fresh clone to start", &fake, || fake.count("start") == 1).await;
        stop.cancel();
    })
    .await;
    let kept: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("pgdata.diverged-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(kept[0].join("only-here")).unwrap(), "rows the new primary never had");
    assert!(args.pgdata.join("standby.signal").exists() && !args.pgdata.join("only-here").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_directory_that_holds_no_cluster_is_left_as_it_is() {
    let dir = temp_dir("stray");
    let args = instance(&dir, &[]);
    std::fs::create_dir_all(&args.pgdata).unwrap();
    std::fs::write(args.pgdata.join("notes.txt"), "someone's").unwrap();
    let fake = Fake::new(&args.pgdata);
    set_label(&dir.join("podinfo"), 1, "replica");
    let outcome = drive(&args, &fake, async |_| {}).await;
    let Outcome::Failed(why) = &outcome else { panic!("{outcome:?}") };
    assert!(why.contains("is not empty but holds no cluster"), "{why}");
    assert_eq!(outcome.exit_code(), 1);
    assert!(args.pgdata.join("notes.txt").exists());
    assert_eq!(fake.count("base_backup"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_clone_cut_short_by_a_kill_is_made_again_whole() {
    let dir = temp_dir("partial");
    let args = instance(&dir, &[]);
    // What a manager killed during pg_basebackup leaves: half a copy beside no data.
    cluster(&dir.join("pgdata.partial"), "17");
    std::fs::write(dir.join("pgdata.partial/half"), "").unwrap();
    let fake = Fake::new(&args.pgdata);
    set_label(&dir.join("podinfo"), 1, "replica");
    drive(&args, &fake, async |stop| {
        until("the standby to start", &fake, || fake.count("start") == 1).await;
        stop.cancel();
    })
    .await;
    assert!(!args.pgdata.join("half").exists() && args.pgdata.join("standby.signal").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_standby_of_an_older_major_reclones_only_from_a_primary_on_this_one() {
    let dir = temp_dir("reclone");
    let args = instance(&dir, &[]);
    let old = || {
        cluster(&args.pgdata, "13");
        std::fs::write(args.pgdata.join("standby.signal"), "").unwrap();
    };
    old();
    let fake = Fake::new(&args.pgdata);
    fake.primary.set(Some(15));
    set_label(&dir.join("podinfo"), 1, "replica");
    let outcome = drive(&args, &fake, async |_| {}).await;
    let Outcome::Failed(why) = outcome else { panic!() };
    assert!(why.contains("PostgreSQL 13 and the primary runs 15, not 17: left as it is"), "{why}");
    assert_eq!(std::fs::read_to_string(args.pgdata.join("PG_VERSION")).unwrap(), "13\n");

    fake.primary.set(Some(17));
    drive(&args, &fake, async |stop| {
        until("the new clone to start", &fake, || fake.count("start") == 1).await;
        stop.cancel();
    })
    .await;
    assert_eq!(std::fs::read_to_string(args.pgdata.join("PG_VERSION")).unwrap(), "17\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_refused_recovery_is_the_termination_message_and_a_good_one_starts_recovering() {
    let dir = temp_dir("recover");
    let settings = dir.join("recovery.conf");
    std::fs::write(&settings, "restore_command=bosun wal fetch %f %p\nrecovery_target_action=promote\n").unwrap();
    let destination = ["--recovery-destination", "s3://b/p", "--recovery-name", "db-backup"];
    let mut extra = destination.to_vec();
    let settings_s = settings.to_string_lossy().into_owned();
    extra.extend(["--recovery-settings", &settings_s]);
    let args = instance(&dir, &extra);
    let fake = Fake::new(&args.pgdata);
    *fake.recover_says.borrow_mut() = Err("{\"result\":\"failed\"}\nthe target time is after the archive's end".into());
    set_label(&dir.join("podinfo"), 1, "primary");
    let outcome = drive(&args, &fake, async |_| {}).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    let message = std::fs::read_to_string(&args.termination_log).unwrap();
    assert_eq!(message, "the target time is after the archive's end");

    *fake.recover_says.borrow_mut() = Ok("recovered".into());
    drive(&args, &fake, async |stop| {
        until("the recovering start", &fake, || fake.count("start") == 1).await;
        stop.cancel();
    })
    .await;
    let command = fake.started_with.borrow()[0].join(" ");
    assert!(
        command.ends_with("-c restore_command=bosun wal fetch %f %p -c recovery_target_action=promote"),
        "{command}"
    );
    // Data now: never recovered over.
    drive(&args, &fake, async |stop| {
        until("the second start", &fake, || fake.count("start") == 2).await;
        stop.cancel();
    })
    .await;
    assert_eq!(fake.count("recover"), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_server_that_ends_on_its_own_ends_the_manager_with_its_status() {
    let dir = temp_dir("exit");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    let fake = Fake::new(&args.pgdata);
    *fake.server.borrow_mut() = vec!["sh".into(), "-c".into(), "exit 3".into()];
    set_label(&dir.join("podinfo"), 1, "primary");
    let outcome = drive(&args, &fake, async |_| {}).await;
    assert_eq!((outcome.clone(), outcome.exit_code()), (Outcome::ServerExited(3), 3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_signal_stops_the_server_fast_and_ends_the_manager() {
    let dir = temp_dir("signal");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    let fake = Fake::new(&args.pgdata);
    set_label(&dir.join("podinfo"), 1, "primary");
    let started = std::time::Instant::now();
    let outcome = drive(&args, &fake, async |stop| {
        until("the server", &fake, || fake.count("start") == 1).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    assert!(started.elapsed() < Duration::from_secs(20), "the server (sleep 30) was stopped, not waited for");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_password_edited_in_the_secret_is_set_again_without_a_restart() {
    let dir = temp_dir("rotate");
    let creds = dir.join("credentials");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(creds.join("password"), "from-the-secret").unwrap();
    let args = instance(&dir, &["--credentials-dir", creds.to_str().unwrap()]);
    cluster(&args.pgdata, "17");
    let fake = Fake::new(&args.pgdata);
    set_label(&dir.join("podinfo"), 1, "primary");
    let outcome = drive(&args, &fake, async |stop| {
        until("the setup beside the server", &fake, || fake.count("setup") == 1).await;
        // The file wins over the variable ("su:per").
        let passfile = std::fs::read_to_string(&args.passfile).unwrap();
        assert!(passfile.contains("postgres:from-the-secret"), "{passfile}");
        // The kubelet refreshes the file: within a look of the files, the setup runs
        // again and the passfile follows; the server is not restarted.
        std::fs::write(creds.join("password"), "rotated").unwrap();
        let start = std::time::Instant::now();
        while fake.count("setup") < 2 && start.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!((fake.count("setup"), fake.count("start")), (2, 1), "{:?}", fake.calls());
        assert!(std::fs::read_to_string(&args.passfile).unwrap().contains("postgres:rotated"));
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_an_earlier_container_left_in_the_emptydirs_is_cleared_before_a_start() {
    let dir = temp_dir("leftovers");
    let args = instance(&dir, &[]);
    // A server killed with its container: the socket's lock names a process id that may
    // now be another process's; and a role told to that container, beside the label's
    // file as it still is.
    std::fs::write(dir.join(".s.PGSQL.5432.lock"), "7\n").unwrap();
    std::fs::write(dir.join(".s.PGSQL.5432"), "").unwrap();
    set_label(&dir.join("podinfo"), 1, "replica");
    let roles = crate::role::RoleSource { label_file: args.role_file.clone(), told_file: args.role_told.clone() };
    roles.tell(crate::role::Role::Primary).unwrap();
    assert_eq!(roles.read_with_source(), (Some(crate::role::Role::Primary), "told"));
    manager::clear_leftovers(&args).unwrap();
    assert_eq!(
        roles.read_with_source(),
        (Some(crate::role::Role::Replica), "label"),
        "a told role outlived its container"
    );
    assert!(!dir.join(".s.PGSQL.5432.lock").exists() && !dir.join(".s.PGSQL.5432").exists());
    manager::clear_leftovers(&args).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A primary's data with the terms of a heartbeat before this container (one standby,
/// fenced after `fence_after_ms`) and, when given, the time it last heard anyone; its
/// label says primary, its standby replies. (directory, settings, programs, shared.)
fn kept_primary(
    name: &str,
    fence_after_ms: u64,
    heard: Option<std::time::SystemTime>,
) -> (PathBuf, InstanceArgs, Fake, crate::api::Shared) {
    use crate::fence::{Heartbeat, heard_path, terms_path, write_heard, write_terms};
    let dir = temp_dir(name);
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    write_terms(&terms_path(&args.pgdata), &Heartbeat { standbys: 1, fence_after_ms, quorum: 1 }).unwrap();
    if let Some(at) = heard {
        write_heard(&heard_path(&args.pgdata), at).unwrap();
    }
    let fake = Fake::new(&args.pgdata);
    fake.standbys_reply.set(true);
    set_label(&dir.join("podinfo"), 1, "primary");
    (dir, args, fake, crate::api::Shared::default())
}

/// The instance fences (after `starts` starts of its server), starts nothing more for a
/// second, then starts its server once bosun is heard and tells it it is the primary.
async fn fenced_until_told(args: &InstanceArgs, fake: &Fake, shared: &crate::api::Shared, starts: usize) {
    use std::sync::atomic::Ordering;
    until("the fence", fake, || shared.fenced.load(Ordering::Relaxed)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(fake.count("start"), starts, "a server started while fenced: {:?}", fake.calls());
    let roles = crate::role::RoleSource { label_file: args.role_file.clone(), told_file: args.role_told.clone() };
    shared.heard(shared.bosun().terms.unwrap());
    roles.tell(crate::role::Role::Primary).unwrap();
    shared.told.fetch_add(1, Ordering::Relaxed);
    until("the start bosun allowed", fake, || fake.count("start") == starts + 1).await;
    assert!(!shared.fenced.load(Ordering::Relaxed));
}

#[tokio::test]
async fn a_primary_that_hears_neither_bosun_nor_a_standby_fences_itself_until_told_its_role() {
    use std::sync::atomic::Ordering;
    let (dir, args, fake, shared) = kept_primary("fence", 400, None);
    let outcome = drive_with(&args, &fake, &shared, async |stop| {
        until("the primary to start", &fake, || fake.count("start") == 1).await;
        // bosun away, a standby replying: it serves on.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(fake.count("standby_replies") >= 2, "{:?}", fake.calls());
        assert!(!shared.fenced.load(Ordering::Relaxed));
        // No one heard: fenced, and it stays so (no start) until told its role.
        fake.standbys_reply.set(false);
        fenced_until_told(&args, &fake, &shared, 1).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

/// bosun tells a fenced primary its role as soon as the primary says it fenced, which
/// it says from its decision on, while its server is still shutting down: that tell
/// lifts the fence too (it was lost, and the fence held until bosun's next tell).
#[tokio::test]
async fn a_tell_that_comes_while_the_fenced_server_shuts_down_lifts_the_fence() {
    use std::sync::atomic::Ordering;
    let (dir, args, fake, shared) = kept_primary("fence-told-early", 400, None);
    fake.standbys_reply.set(false);
    // A server whose fast shutdown takes a second.
    *fake.server.borrow_mut() =
        ["sh", "-c", "sleep 30 & pid=$!; trap 'sleep 1; kill $pid; exit 0' INT; wait"].map(str::to_owned).to_vec();
    let outcome = drive_with(&args, &fake, &shared, async |stop| {
        until("the fence", &fake, || shared.fenced.load(Ordering::Relaxed)).await;
        assert_eq!(fake.count("start"), 1, "{:?}", fake.calls());
        let roles = crate::role::RoleSource { label_file: args.role_file.clone(), told_file: args.role_told.clone() };
        shared.heard(shared.bosun().terms.unwrap());
        roles.tell(crate::role::Role::Primary).unwrap();
        shared.told.fetch_add(1, Ordering::Relaxed);
        until("the start bosun allowed", &fake, || fake.count("start") == 2).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_primary_restarted_after_its_fencing_time_unheard_starts_fenced_until_told_its_role() {
    // The container before this one last heard anyone 5 s ago, its fencing time 1 s.
    let heard = std::time::SystemTime::now() - Duration::from_secs(5);
    let (dir, args, fake, shared) = kept_primary("fenced-start", 1000, Some(heard));
    let outcome = drive_with(&args, &fake, &shared, async |stop| {
        fenced_until_told(&args, &fake, &shared, 0).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome, Outcome::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_primary_restarted_soon_after_it_last_heard_anyone_serves_and_keeps_hearing() {
    use crate::fence::{heard_path, read_heard};
    use std::sync::atomic::Ordering;
    let before = std::time::SystemTime::now() - Duration::from_millis(500);
    let (dir, args, fake, shared) = kept_primary("served-start", 3000, Some(before));
    drive_with(&args, &fake, &shared, async |stop| {
        until("the primary to start", &fake, || fake.count("start") == 1).await;
        // bosun away, its standby replying: it serves on, and keeps the time it heard it.
        tokio::time::sleep(Duration::from_millis(4000)).await;
        assert!(!shared.fenced.load(Ordering::Relaxed), "{:?}", fake.calls());
        let kept = read_heard(&heard_path(&args.pgdata)).unwrap();
        assert!(kept > before, "the standby's replies were not kept as heard");
        stop.cancel();
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_fenced_primary_whose_label_says_replica_rejoins() {
    use crate::fence::{Heartbeat, terms_path, write_terms};
    use std::sync::atomic::Ordering;
    let dir = temp_dir("fence-rejoin");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    write_terms(&terms_path(&args.pgdata), &Heartbeat { standbys: 2, fence_after_ms: 300, quorum: 1 }).unwrap();
    let fake = Fake::new(&args.pgdata);
    let podinfo = dir.join("podinfo");
    set_label(&podinfo, 1, "primary");
    let shared = crate::api::Shared::default();
    drive_with(&args, &fake, &shared, async |stop| {
        until("the fence", &fake, || shared.fenced.load(Ordering::Relaxed)).await;
        set_label(&podinfo, 2, "replica");
        until("the rejoin", &fake, || fake.count("start") == 2).await;
        assert_eq!(fake.count("rewind"), 1, "{:?}", fake.calls());
        stop.cancel();
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_single_instance_never_fences() {
    use crate::fence::{Heartbeat, terms_path, write_terms};
    let dir = temp_dir("fence-single");
    let args = instance(&dir, &[]);
    cluster(&args.pgdata, "17");
    write_terms(&terms_path(&args.pgdata), &Heartbeat { standbys: 0, fence_after_ms: 300, quorum: 1 }).unwrap();
    let fake = Fake::new(&args.pgdata);
    set_label(&dir.join("podinfo"), 1, "primary");
    let shared = crate::api::Shared::default();
    drive_with(&args, &fake, &shared, async |stop| {
        until("the primary to start", &fake, || fake.count("start") == 1).await;
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert_eq!(fake.count("standby_replies"), 0);
        assert!(!shared.fenced.load(std::sync::atomic::Ordering::Relaxed));
        stop.cancel();
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
