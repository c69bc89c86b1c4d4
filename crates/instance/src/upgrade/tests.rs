//! The upgrade's steps against a fake of its programs that changes the files as the
//! real ones do (initdb makes the new cluster, `pg_upgrade --link` sets the old
//! control file aside); the real programs are proven by the e2e upgrades
//! (`crates/bosun/tests/postgresql.rs`), 13 → 15 → 17 and one that pg_upgrade refuses.

use std::cell::RefCell;
use std::fs;

use super::*;
use crate::role::tests::temp_dir;

#[derive(Default)]
struct Fake {
    calls: RefCell<Vec<String>>,
    start_fails: bool,
    check_fails: bool,
    /// `pg_upgrade --link` sets the control file aside, then fails.
    link_fails: bool,
}

impl Fake {
    fn call(&self, what: &str) {
        self.calls.borrow_mut().push(what.to_owned());
    }

    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl Upgrader for Fake {
    fn start_old(&self) -> Result<(), String> {
        self.call("start");
        if self.start_fails { Err("the old PostgreSQL 13 server did not start: no space".into()) } else { Ok(()) }
    }

    fn old_sql(&self, sql: &str) -> Result<String, String> {
        self.call("sql");
        Ok(match sql {
            s if s.contains("encoding") => "UTF8",
            s if s.contains("checksums") => "on",
            _ => "en_US.utf8",
        }
        .to_owned())
    }

    fn stop_old(&self) -> Result<(), String> {
        self.call("stop");
        Ok(())
    }

    fn initdb(&self, args: &[String]) -> Result<(), String> {
        self.call(&format!("initdb {}", args[2..].join(" ")));
        let dir = PathBuf::from(&args[1]);
        fs::create_dir_all(dir.join("global")).map_err(|e| e.to_string())?;
        fs::write(dir.join("PG_VERSION"), "15\n").map_err(|e| e.to_string())?;
        fs::write(dir.join("global/pg_control"), "new").map_err(|e| e.to_string())
    }

    fn pg_upgrade(&self, link: bool) -> Result<String, String> {
        if !link {
            self.call("check");
            return if self.check_fails {
                Err("pg_upgrade --check failed (exit status: 1): Checking for reg* data types  fatal".into())
            } else {
                Ok("Clusters are compatible".into())
            };
        }
        self.call("link");
        Ok(String::new())
    }

    fn image_libraries(&self) -> Result<BTreeSet<String>, String> {
        Ok(BTreeSet::from(["libz.so.1".to_owned()]))
    }
}

/// A fake whose `pg_upgrade --link` works on `layout`'s files.
struct Linking<'a> {
    fake: Fake,
    layout: &'a Layout,
}

impl Upgrader for Linking<'_> {
    fn start_old(&self) -> Result<(), String> {
        self.fake.start_old()
    }
    fn old_sql(&self, sql: &str) -> Result<String, String> {
        self.fake.old_sql(sql)
    }
    fn stop_old(&self) -> Result<(), String> {
        self.fake.stop_old()
    }
    fn initdb(&self, args: &[String]) -> Result<(), String> {
        self.fake.initdb(args)
    }
    fn pg_upgrade(&self, link: bool) -> Result<String, String> {
        self.fake.pg_upgrade(link)?;
        if link {
            let data = &self.layout.pgdata;
            fs::rename(data.join("global/pg_control"), data.join("global/pg_control.old"))
                .map_err(|e| e.to_string())?;
            if self.fake.link_fails {
                return Err("pg_upgrade --link failed (exit status: 1): could not link file: No space left".into());
            }
            fs::write(self.layout.new.join("base"), "linked").map_err(|e| e.to_string())?;
        }
        Ok("Upgrade Complete".into())
    }
    fn image_libraries(&self) -> Result<BTreeSet<String>, String> {
        self.fake.image_libraries()
    }
}

/// The data of a PostgreSQL 13 primary, stopped, in a Job's volumes.
fn layout(name: &str) -> Layout {
    let root = temp_dir(&format!("upgrade-{name}"));
    let args = RunArgs {
        copy: CopyArgs {
            from: 13,
            old: root.join("old"),
            termination_log: root.join("termination-log"),
            root: root.join("image"),
        },
        to: 15,
        pgdata: root.join("data/pgdata"),
        superuser: "postgres".into(),
        password: "secret".into(),
    };
    let l = Layout::of(&args);
    fs::create_dir_all(l.pgdata.join("global")).unwrap();
    fs::write(l.pgdata.join("PG_VERSION"), "13\n").unwrap();
    fs::write(l.pgdata.join("global/pg_control"), "old").unwrap();
    fs::write(l.pgdata.join("rows"), "500 rows").unwrap();
    fs::write(l.pgdata.join("pg_hba.conf"), "host replication replicator all md5\n").unwrap();
    fs::write(l.pgdata.join("pg_ident.conf"), "").unwrap();
    fs::create_dir_all(&l.old_bin).unwrap();
    fs::write(l.old_bin.join("postgres"), "").unwrap();
    fs::create_dir_all(&l.old_lib).unwrap();
    for lib in ["libz.so.1", "libicuuc.so.67"] {
        fs::write(l.old_lib.join(lib), "").unwrap();
    }
    l
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn the_old_cluster_is_whole(l: &Layout) {
    assert_eq!(read(&l.pgdata.join("PG_VERSION")), "13\n");
    assert_eq!(read(&l.pgdata.join("global/pg_control")), "old");
    assert!(!l.pgdata.join("global/pg_control.old").exists());
    assert_eq!(read(&l.pgdata.join("rows")), "500 rows");
}

#[test]
fn the_new_cluster_takes_the_datas_place_and_the_old_one_is_kept() {
    let l = layout("ok");
    let earlier = PathBuf::from(format!("{}.v12", l.pgdata.display()));
    fs::create_dir_all(&earlier).unwrap();
    let programs = Linking { fake: Fake::default(), layout: &l };
    assert_eq!(run(&l, &programs), Ok(Done::Upgraded { kept: l.kept.clone() }));
    assert_eq!(
        programs.fake.calls(),
        [
            "start",
            "sql",
            "sql",
            "sql",
            "sql",
            "stop",
            "initdb --encoding=UTF8 --lc-collate=en_US.utf8 --lc-ctype=en_US.utf8 --auth-local=trust \
             --auth-host=scram-sha-256 --data-checksums",
            "check",
            "link"
        ]
    );
    assert_eq!(read(&l.pgdata.join("PG_VERSION")), "15\n");
    assert_eq!(read(&l.pgdata.join("base")), "linked");
    assert_eq!(read(&l.pgdata.join("pg_hba.conf")), "host replication replicator all md5\n", "the old rules");
    assert!(l.pgdata.join(crate::setup::ANALYZE_MARKER).exists(), "the first primary analyzes");
    assert_eq!(read(&l.kept.join("PG_VERSION")), "13\n");
    assert!(!earlier.exists(), "an earlier upgrade's directory shares no file with a database any more");
    assert!(!l.new.exists() && !l.work.exists());
    // The image's own libraries are used, the old major's copies of the others.
    assert!(!l.old_lib.join("libz.so.1").exists());
    assert!(l.old_lib.join("libicuuc.so.67").exists());

    // Run again (the Job's pod started twice): nothing to do.
    let again = Fake::default();
    assert_eq!(run(&l, &again), Ok(Done::Already));
    assert!(again.calls().is_empty());
}

#[test]
fn a_refused_check_leaves_the_old_cluster_as_it_was() {
    let l = layout("check");
    let programs = Linking { fake: Fake { check_fails: true, ..Fake::default() }, layout: &l };
    let failure = run(&l, &programs).unwrap_err();
    assert_eq!(failure.step, Step::Check);
    assert_eq!(
        failure.to_string(),
        "Check failed: pg_upgrade --check failed (exit status: 1): Checking for reg* data types  fatal"
    );
    the_old_cluster_is_whole(&l);
    assert!(!l.new.exists(), "nothing of the new cluster is kept");
}

#[test]
fn a_failed_link_puts_the_control_file_back() {
    let l = layout("link");
    let programs = Linking { fake: Fake { link_fails: true, ..Fake::default() }, layout: &l };
    let failure = run(&l, &programs).unwrap_err();
    assert_eq!(failure.step, Step::Upgrade);
    assert!(failure.why.contains("No space left"), "{failure}");
    the_old_cluster_is_whole(&l);
    assert!(!l.new.exists());
}

#[test]
fn an_old_server_that_does_not_start_is_stopped_nowhere_and_named() {
    let l = layout("start");
    let fake = Fake { start_fails: true, ..Fake::default() };
    let failure = run(&l, &fake).unwrap_err();
    assert_eq!(
        (failure.step, failure.why.as_str()),
        (Step::Check, "the old PostgreSQL 13 server did not start: no space")
    );
    assert_eq!(fake.calls(), ["start"], "not stopped: it never ran");
    the_old_cluster_is_whole(&l);
}

#[test]
fn data_of_another_major_or_a_standbys_is_refused_before_anything_runs() {
    let l = layout("other");
    fs::write(l.pgdata.join("PG_VERSION"), "12\n").unwrap();
    let fake = Fake::default();
    assert_eq!(run(&l, &fake).unwrap_err().why, format!("{} holds PostgreSQL '12', not 13", l.pgdata.display()));
    fs::write(l.pgdata.join("PG_VERSION"), "13\n").unwrap();
    fs::write(l.pgdata.join("standby.signal"), "").unwrap();
    assert!(run(&l, &fake).unwrap_err().why.contains("bosun upgrades the primary's"));
    fs::remove_file(l.pgdata.join("standby.signal")).unwrap();
    fs::remove_file(l.old_bin.join("postgres")).unwrap();
    assert!(run(&l, &fake).unwrap_err().why.contains("programs were not copied"));
    assert!(fake.calls().is_empty());
    the_old_cluster_is_whole(&l);
}

/// Killed with -9 in each step, the Job's pod run again (or the instance started on
/// the old major) loses nothing.
#[test]
fn a_run_killed_in_any_step_resumes_without_losing_data() {
    // Killed while pg_upgrade linked: the control file is set aside, the new cluster
    // half made and never started. The next run starts over from the old cluster.
    let l = layout("killed-link");
    fs::rename(l.pgdata.join("global/pg_control"), l.pgdata.join("global/pg_control.old")).unwrap();
    fs::create_dir_all(&l.new).unwrap();
    fs::write(l.new.join("PG_VERSION"), "15\n").unwrap();
    let programs = Linking { fake: Fake::default(), layout: &l };
    assert_eq!(run(&l, &programs), Ok(Done::Upgraded { kept: l.kept.clone() }));
    assert_eq!(programs.fake.calls()[0], "start", "the old server started again: its control file is back");
    assert_eq!(read(&l.kept.join("global/pg_control.old")), "old", "set aside by the link that finished");

    // The same, but the upgrade given up: the instance starts on the old major and
    // finds its control file (the manager's first step, `data::Step::RestoreControl`).
    let l = layout("killed-given-up");
    fs::rename(l.pgdata.join("global/pg_control"), l.pgdata.join("global/pg_control.old")).unwrap();
    assert!(data::restore_control(&l.pgdata).unwrap());
    the_old_cluster_is_whole(&l);

    // Killed after pg_upgrade ended, before the switch: only the switch is left.
    let l = layout("killed-before-switch");
    fs::rename(l.pgdata.join("global/pg_control"), l.pgdata.join("global/pg_control.old")).unwrap();
    fs::create_dir_all(&l.new).unwrap();
    fs::write(l.new.join("PG_VERSION"), "15\n").unwrap();
    fs::write(l.new.join(UPGRADED_MARKER), "").unwrap();
    let fake = Fake::default();
    assert_eq!(run(&l, &fake), Ok(Done::Upgraded { kept: l.kept.clone() }));
    assert!(fake.calls().is_empty(), "no program runs: {:?}", fake.calls());
    assert_eq!(read(&l.pgdata.join("PG_VERSION")), "15\n");
    assert!(l.kept.join("global/pg_control.old").exists(), "the old cluster cannot be started by mistake");

    // Killed between the switch's two renames: the data directory is missing.
    let l = layout("killed-in-switch");
    fs::rename(&l.pgdata, &l.kept).unwrap();
    fs::create_dir_all(&l.new).unwrap();
    fs::write(l.new.join("PG_VERSION"), "15\n").unwrap();
    fs::write(l.new.join(UPGRADED_MARKER), "").unwrap();
    assert_eq!(run(&l, &Fake::default()), Ok(Done::Upgraded { kept: l.kept.clone() }));
    assert_eq!(read(&l.pgdata.join("PG_VERSION")), "15\n");
    assert_eq!(read(&l.kept.join("rows")), "500 rows");
}

#[test]
fn the_libraries_to_copy_are_those_ldd_finds_without_the_c_librarys() {
    let ldd = "/opt/old/usr/lib/postgresql/13/bin/postgres:\n\
        \tlinux-vdso.so.1 (0x00007ffd)\n\
        \tlibpq.so.5 => /usr/lib/x86_64-linux-gnu/libpq.so.5 (0x00007f)\n\
        \tlibicuuc.so.67 => /usr/lib/x86_64-linux-gnu/libicuuc.so.67 (0x00007f)\n\
        \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
        \tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f)\n\
        \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\
        \tlibgone.so.1 => not found\n\
        /opt/old/usr/lib/postgresql/13/lib/plpgsql.so:\n\
        \tlibpq.so.5 => /usr/lib/x86_64-linux-gnu/libpq.so.5 (0x00007f)\n";
    let found = libraries(ldd);
    assert_eq!(found.keys().collect::<Vec<_>>(), ["libicuuc.so.67", "libpq.so.5"]);
    assert_eq!(found["libpq.so.5"], Path::new("/usr/lib/x86_64-linux-gnu/libpq.so.5"));

    let ldconfig = "123 libs found in cache `/etc/ld.so.cache'\n\
        \tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n\
        \tlibpq.so.5 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libpq.so.5\n";
    assert_eq!(cached_libraries(ldconfig), BTreeSet::from(["libpq.so.5".to_owned(), "libz.so.1".to_owned()]));
}

#[test]
fn programs_are_copied_with_their_modes_and_links() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("upgrade-copy");
    let bin = dir.join("from/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("postgres"), "elf").unwrap();
    fs::set_permissions(bin.join("postgres"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("postgres", bin.join("postmaster")).unwrap();
    fs::create_dir_all(dir.join("from/lib")).unwrap();
    fs::write(dir.join("from/lib/plpgsql.so"), "so").unwrap();
    fs::write(dir.join("from/lib/README"), "text").unwrap();
    copy_tree(&dir.join("from"), &dir.join("to")).unwrap();
    let copied = dir.join("to/bin/postgres");
    assert_eq!(fs::metadata(&copied).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(fs::read_link(dir.join("to/bin/postmaster")).unwrap(), Path::new("postgres"));
    let mut loading = Vec::new();
    files(&dir.join("to"), &mut loading).unwrap();
    loading.sort();
    assert_eq!(loading, [dir.join("to/bin/postgres"), dir.join("to/lib/plpgsql.so")], "not the link, not README");
}

#[test]
fn a_refusal_quotes_the_reports_pg_upgrade_points_to() {
    let dir = temp_dir("upgrade-details");
    let report = dir.join("tables_using_reg.txt");
    fs::write(&report, "In database: postgres\n  public.blocker.f\n").unwrap();
    let said = format!(
        "Performing Consistency Checks\n\nChecking for reg* data types in user tables  fatal\n\
         Your installation contains one of the reg* data types in user tables.\n\
         A list of the problem columns is in the file:\n    {}\n\nFailure, exiting\n",
        report.display()
    );
    let out = details(&said);
    assert!(out.starts_with("Performing Consistency Checks\nChecking for reg*"), "{out}");
    assert!(out.ends_with("In database: postgres\n  public.blocker.f"), "{out}");
}

#[test]
fn an_answer_is_the_standard_output_and_a_failure_says_both() {
    // psql's warning of a collation version mismatch (a newer C library) is no part
    // of the encoding it was asked.
    let answer =
        said(Command::new("sh").args(["-c", "echo UTF8; echo 'WARNING:  collation version mismatch' >&2"]), "psql");
    assert_eq!(answer.as_deref(), Ok("UTF8\n"));
    let failure =
        said(Command::new("sh").args(["-c", "echo checking; echo 'fatal: no' >&2; exit 3"]), "pg_upgrade --check");
    assert_eq!(failure, Err("pg_upgrade --check failed (exit status: 3): checking\nfatal: no".to_owned()));
}
