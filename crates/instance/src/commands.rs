//! The few PostgreSQL programs the instance manager runs, behind a trait so that its
//! decisions are tested against a fake ([`Postgres`]), and the programs themselves
//! against real servers (`crates/bosun/tests/instance.rs`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use tokio::process::{Child, Command};

use crate::settings::{InstanceArgs, env};

/// What the instance manager asks of PostgreSQL.
pub trait Postgres {
    /// The primary behind the read-write Service: its major when it answers and is
    /// out of recovery; `None` otherwise.
    fn primary(&self) -> impl Future<Output = Option<u32>>;
    /// A copy of the primary (`pg_basebackup`) into `into`, which does not exist.
    fn base_backup(&self, into: &Path) -> impl Future<Output = Result<(), String>>;
    /// Crash recovery of the data directory (single-user mode): pg_rewind needs a
    /// clean shutdown recorded.
    fn crash_recovery(&self) -> impl Future<Output = Result<(), String>>;
    /// A checkpoint on the primary: a just-promoted primary's control file names its
    /// new timeline only after one, and pg_rewind reads it there.
    fn checkpoint_primary(&self) -> impl Future<Output = Result<(), String>>;
    /// The data directory rewound to follow the primary (`pg_rewind`).
    fn rewind(&self) -> impl Future<Output = Result<(), String>>;
    /// A new data directory from the archive (`bosun recover`): what it said.
    fn recover(&self) -> impl Future<Output = Result<String, String>>;
    /// A standby promoted (`pg_ctl promote`, which waits for it).
    fn promote(&self) -> impl Future<Output = Result<(), String>>;
    /// The server started with `command`.
    fn start(&self, command: &[String]) -> std::io::Result<Child>;
    /// The primary's setup beside a started server ([`crate::setup`]).
    fn setup(&self) -> impl Future<Output = ()>;
    /// The standbys' last replies to this server ([`crate::fence::REPLIES_SQL`]); none
    /// when it does not answer.
    fn standby_replies(&self) -> impl Future<Output = Option<String>>;
}

/// The real programs, the image's PostgreSQL's ([`program`]).
#[derive(Debug)]
pub struct Commands<'a> {
    pub args: &'a InstanceArgs,
}

impl Commands<'_> {
    /// A connection string to the primary as `user`, with the passfile's password,
    /// over TLS as [`crate::access::to_primary`] says.
    /// The role of this instance's own connections to its primary's databases: the
    /// superuser, or the replication role when the superuser may not log in over the
    /// network (it is granted what pg_rewind reads, and CHECKPOINT from PostgreSQL 15).
    fn own_user(&self) -> &str {
        if self.args.superuser_network { &self.args.superuser } else { &self.args.replication_user }
    }

    async fn to_primary(&self, user: &str) -> String {
        let a = self.args;
        let (passfile, primary) = (a.passfile.to_string_lossy(), crate::access::to_primary(a).await.pairs(a));
        let mut pairs: Vec<(&str, &str)> = primary.iter().map(|(k, v)| (*k, v.as_str())).collect();
        pairs.extend([("user", user), ("passfile", &passfile)]);
        conninfo(&pairs)
    }
}

impl Postgres for Commands<'_> {
    async fn primary(&self) -> Option<u32> {
        let dsn = format!("{} dbname=postgres connect_timeout=3", self.to_primary(self.own_user()).await);
        let sql = "SELECT pg_is_in_recovery()::text || ' ' || current_setting('server_version_num')::int / 10000";
        let out = output(pg("psql").args(["-X", "-q", "-tA", "-d", &dsn, "-c", sql]), "psql").await.ok()?;
        match out.trim().split_once(' ')? {
            ("false", major) => major.parse().ok(),
            _ => None,
        }
    }

    async fn base_backup(&self, into: &Path) -> Result<(), String> {
        let dsn = self.to_primary(&self.args.replication_user).await;
        let mut command = pg("pg_basebackup");
        command.args(["--no-password", "-d", &dsn, "-D"]).arg(into).args(["-X", "stream", "-c", "fast"]);
        output(&mut command, "pg_basebackup").await.map(drop)
    }

    async fn crash_recovery(&self) -> Result<(), String> {
        let mut command = pg("postgres");
        command.arg("--single").arg("-D").arg(&self.args.pgdata);
        for setting in self.args.server_settings() {
            command.args(["-c", &setting]);
        }
        command.args(["-c", "wal_log_hints=on", "postgres"]);
        output(&mut command, "postgres --single").await.map(drop)
    }

    async fn checkpoint_primary(&self) -> Result<(), String> {
        let dsn = format!("{} dbname=postgres connect_timeout=5", self.to_primary(self.own_user()).await);
        output(pg("psql").args(["-X", "-q", "-d", &dsn, "-c", "CHECKPOINT"]), "CHECKPOINT").await.map(drop)
    }

    async fn rewind(&self) -> Result<(), String> {
        let source = format!("{} dbname=postgres", self.to_primary(self.own_user()).await);
        let mut command = pg("pg_rewind");
        command.arg(format!("--target-pgdata={}", self.args.pgdata.display()));
        command.arg(format!("--source-server={source}"));
        output(&mut command, "pg_rewind").await.map(drop)
    }

    async fn recover(&self) -> Result<String, String> {
        let r = &self.args.recovery;
        let runner = match &r.runner {
            Some(runner) => runner.clone(),
            None => std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?,
        };
        let mut command = Command::new(runner);
        command.arg("recover").arg("--pgdata").arg(&self.args.pgdata);
        let named = [
            ("--destination", &r.destination),
            ("--endpoint", &r.endpoint),
            ("--region", &r.region),
            ("--namespace", &r.namespace),
            ("--name", &r.name),
        ];
        for (flag, value) in named {
            if let Some(value) = value {
                command.args([flag, value]);
            }
        }
        // The archive a Backup's run would name is not the one recovered from.
        for name in env::ARCHIVE_ONLY {
            command.env_remove(name);
        }
        let out = command.stdin(Stdio::null()).output().await.map_err(|e| format!("bosun recover: {e}"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        if out.status.success() { Ok(text.trim().to_owned()) } else { Err(text.trim().to_owned()) }
    }

    async fn promote(&self) -> Result<(), String> {
        let mut command = pg("pg_ctl");
        command.args(["promote", "-D"]).arg(&self.args.pgdata);
        output(&mut command, "pg_ctl promote").await.map(drop)
    }

    fn start(&self, command: &[String]) -> std::io::Result<Child> {
        let (program, args) = command.split_first().ok_or_else(|| std::io::Error::other("no server command"))?;
        Command::new(program).args(args).stdin(Stdio::null()).spawn()
    }

    async fn setup(&self) {
        crate::setup::run(self.args).await;
    }

    async fn standby_replies(&self) -> Option<String> {
        crate::setup::query(self.args, crate::fence::REPLIES_SQL).await.ok().map(|r| r.trim().to_owned())
    }
}

/// Where Debian installs each PostgreSQL major's programs (`<major>/bin`).
const PG_LIB: &str = "/usr/lib/postgresql";

/// The PostgreSQL program `name` (or a path, as given): the image's PostgreSQL's own
/// when it has it, else `name` from PATH. On Debian, `psql`, `pg_basebackup` and the
/// other client programs on PATH are `pg_wrapper`, a Perl script that picks a version
/// and runs it: about 65 ms a run against 15 ms for `psql` itself (measured on this
/// project's machines), and the instance runs psql at each status bosun asks for and
/// five times a second while its fence watch samples, the pooler at each probe.
pub fn program(name: impl AsRef<Path>) -> PathBuf {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let name = name.as_ref();
    let bin = BIN.get_or_init(|| bin_dir(Path::new(PG_LIB), std::env::var(env::MAJOR).ok().as_deref()));
    match bin {
        Some(bin) if name.components().count() == 1 && bin.join(name).is_file() => bin.join(name),
        _ => name.to_owned(),
    }
}

/// A command of the PostgreSQL program `name` ([`program`]).
pub fn pg(name: &str) -> Command {
    Command::new(program(name))
}

/// The directory of `major`'s programs under `lib` when it has one, else the newest
/// major's; `None` when `lib` holds none (then PATH says).
fn bin_dir(lib: &Path, major: Option<&str>) -> Option<PathBuf> {
    if let Some(bin) = major.map(|m| lib.join(m).join("bin")).filter(|b| b.is_dir()) {
        return Some(bin);
    }
    let majors = std::fs::read_dir(lib).ok()?.flatten();
    let newest = majors
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.is_dir())
        .max_by_key(|(major, _)| *major)?;
    Some(newest.1)
}

/// A libpq connection string of `pairs`, each value quoted when it must be.
pub fn conninfo(pairs: &[(&str, &str)]) -> String {
    let quote = |v: &str| {
        if !v.is_empty() && !v.contains([' ', '\'', '\\']) {
            v.to_owned()
        } else {
            format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
        }
    };
    pairs.iter().map(|(k, v)| format!("{k}={}", quote(v))).collect::<Vec<_>>().join(" ")
}

/// Run `command` (no input): its standard output, or why it failed, its standard
/// error's end included.
pub async fn output(command: &mut Command, what: &str) -> Result<String, String> {
    let out = command.stdin(Stdio::null()).output().await.map_err(|e| format!("{what} could not run: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(format!("{what} failed ({}): {}", out.status, tail(&String::from_utf8_lossy(&out.stderr), 2000)))
}

/// The last `max` bytes of `text` (at a character boundary), trimmed.
pub fn tail(text: &str, max: usize) -> &str {
    let text = text.trim();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first `max` bytes of `text` (at a character boundary), trimmed.
pub fn head(text: &str, max: usize) -> &str {
    let text = text.trim();
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_are_the_images_postgresqls_own_not_the_perl_wrapper() {
        let lib = std::env::temp_dir().join(format!("bosun-pg-lib-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&lib);
        assert_eq!(bin_dir(&lib, Some("17")), None, "no PostgreSQL: PATH says");
        for major in ["13", "9", "17"] {
            std::fs::create_dir_all(lib.join(major).join("bin")).unwrap();
        }
        std::fs::create_dir_all(lib.join("notes")).unwrap();
        assert_eq!(bin_dir(&lib, Some("13")), Some(lib.join("13/bin")), "PG_MAJOR's first");
        assert_eq!(bin_dir(&lib, None), Some(lib.join("17/bin")), "else the newest, by number");
        assert_eq!(bin_dir(&lib, Some("16")), Some(lib.join("17/bin")), "a PG_MAJOR not there: the newest");
        std::fs::remove_dir_all(&lib).unwrap();
        assert_eq!(program("/opt/psql"), PathBuf::from("/opt/psql"), "a path stays as given");
    }

    #[test]
    fn connection_values_are_quoted_only_when_they_must_be() {
        assert_eq!(conninfo(&[("host", "db"), ("port", "5432")]), "host=db port=5432");
        assert_eq!(conninfo(&[("passfile", "/tmp/my file"), ("user", "")]), r"passfile='/tmp/my file' user=''");
        assert_eq!(conninfo(&[("x", r"a'b\c")]), r"x='a\'b\\c'");
    }

    #[test]
    fn a_tail_keeps_the_end_whole() {
        assert_eq!(tail("  abcdef \n", 3), "def");
        assert_eq!(tail("é-x", 2), "-x");
        assert_eq!(tail("short", 100), "short");
        assert_eq!(head(" abcdef", 3), "abc");
        assert_eq!(head("x-é", 3), "x-");
    }
}
