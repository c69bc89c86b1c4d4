//! The databases' own tools as child processes: the dump (`pg_dump`, `mysqldump`,
//! `mongodump`) whose stdout is streamed, the restore (`pg_restore`, `mysql`,
//! `mongorestore`) fed on stdin, and the small queries around them (versions, does
//! the target hold tables).
//!
//! Passwords reach the tools the way they expect them, never on a command line
//! (where any process could read them): `PGPASSWORD`, `MYSQL_PWD`, a mongodump
//! config file. `--password-file` fills the same variable.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::Error;
use crate::location::{Database, Engine};

/// How much of a tool's stderr a failure message quotes.
const STDERR_TAIL: usize = 2048;

/// Connection secrets for the tools.
#[derive(Clone, Default)]
pub struct Password(Option<String>);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Password(<redacted>)" } else { "Password(None)" })
    }
}

impl Password {
    /// From `--password-file` if given (trailing newline dropped), else from the
    /// engine's own environment variable, which the child inherits anyway.
    pub fn resolve(engine: Engine, file: Option<&PathBuf>) -> Result<Self, Error> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Usage(format!("--password-file {}: {e}", path.display())))?;
            return Ok(Password(Some(text.trim_end_matches(['\n', '\r']).to_owned())));
        }
        Ok(Password(std::env::var(engine.password_variable()).ok()))
    }
}

/// A database tool invocation.
#[derive(Debug)]
pub struct Tool {
    /// What it is called in messages (the executable, unless a pipeline in bash).
    pub program: &'static str,
    executable: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Files that must live as long as the process (a mongodump config with the password).
    _keep: Option<tempfile_like::TempFile>,
}

impl Tool {
    fn new(program: &'static str, db: &Database, password: &Password) -> Self {
        let mut tool = Tool { program, executable: program, args: Vec::new(), env: Vec::new(), _keep: None };
        if let Some(p) = &password.0 {
            match db.engine {
                Engine::Postgresql => tool.env.push(("PGPASSWORD", p.clone())),
                Engine::Mysql => tool.env.push(("MYSQL_PWD", p.clone())),
                Engine::Mongodb => {}
            }
        }
        tool
    }

    fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(self.executable);
        cmd.args(&self.args).envs(self.env.iter().map(|(k, v)| (k, v))).kill_on_drop(true);
        cmd
    }

    /// Start it with stdout piped (a dump) or stdin piped (a restore); stderr is kept.
    pub fn spawn(&self, stdin: bool, stdout: bool) -> Result<Running, Error> {
        let mut cmd = self.command();
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(if stdout { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::Tool {
            tool: self.program,
            detail: format!("could not start it ({e}); is it installed and on PATH?"),
        })?;
        let tail = Arc::new(Mutex::new(Vec::new()));
        let mut reader = None;
        if let Some(mut stderr) = child.stderr.take() {
            let tail = tail.clone();
            reader = Some(tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut t) = tail.lock() {
                        t.extend_from_slice(&buf[..n]);
                        let excess = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..excess);
                    }
                }
            }));
        }
        Ok(Running { program: self.program, child, stderr: tail, reader })
    }

    /// Run to completion and return its stdout, trimmed; a failure quotes stderr.
    pub async fn output(&self) -> Result<String, Error> {
        let out = self
            .command()
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| Error::Tool { tool: self.program, detail: format!("could not start it ({e})") })?;
        if !out.status.success() {
            return Err(Error::Tool {
                tool: self.program,
                detail: format!("{}: {}", describe(out.status), tail_text(&out.stderr)),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

/// A started tool.
#[derive(Debug)]
pub struct Running {
    pub program: &'static str,
    pub child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The task copying stderr into `stderr`, done once the tool has closed it.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Wait for it; an unsuccessful exit becomes an error quoting its stderr.
    pub async fn finish(self) -> Result<(), Error> {
        self.finish_reporting().await.map(drop)
    }

    /// [`Running::finish`], giving the tail of what it wrote on stderr (its report).
    pub async fn finish_reporting(mut self) -> Result<String, Error> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| Error::Tool { tool: self.program, detail: format!("waiting for it: {e}") })?;
        // Let the stderr reader drain what the process wrote last (the message that
        // says why it failed), but do not hang on a descendant holding stderr open.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), reader).await;
        }
        let stderr = self.stderr.lock().map(|t| tail_text(&t)).unwrap_or_default();
        if status.success() {
            return Ok(stderr);
        }
        Err(Error::Tool { tool: self.program, detail: format!("{}: {stderr}", describe(status)) })
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "failed".to_owned(),
    }
}

fn tail_text(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let text = text.trim();
    if text.is_empty() { "(no error output)".to_owned() } else { text.to_owned() }
}

fn port(db: &Database) -> String {
    db.port.to_string()
}

/// How a libpq tool (pg_dump, pg_restore, pg_basebackup, psql) reaches `db`: never
/// asking for a password (it is in `PGPASSWORD`), host, port, user and, with
/// `database`, the database.
fn libpq(db: &Database, database: bool) -> Vec<String> {
    let mut args =
        ["--no-password", "--host", &db.host, "--port", &port(db), "--username", &db.user].map(String::from).to_vec();
    if database {
        args.extend(["--dbname".to_owned(), db.name.clone()]);
    }
    args
}

/// The dump: stdout is the whole dump, in a format the matching restore reads.
pub fn dump(db: &Database, password: &Password) -> Result<Tool, Error> {
    Ok(match db.engine {
        // Custom format (pg_restore can reorder, clean, pick), uncompressed: zstd does that.
        Engine::Postgresql => {
            Tool::new("pg_dump", db, password).args(["--format=custom", "--compress=0"]).args(libpq(db, true))
        }
        // One consistent snapshot without locking InnoDB tables; no CREATE DATABASE,
        // so the dump loads into a database of any name.
        Engine::Mysql => Tool::new("mysqldump", db, password).args([
            "--single-transaction",
            "--routines",
            "--triggers",
            "--events",
            "--hex-blob",
            "--default-character-set=utf8mb4",
            "--protocol=TCP",
            "--host",
            &db.host,
            "--port",
            &port(db),
            "--user",
            &db.user,
            &db.name,
        ]),
        Engine::Mongodb => mongo_tool("mongodump", db, Some(&db.name), password, vec!["--archive".into()])?,
    })
}

/// A physical base backup of a PostgreSQL server: a tar of its data directory on
/// stdout, with the WAL from start to end inside, and the WAL range on stderr
/// (`crate::base::wal_range`). `db.user` needs the REPLICATION attribute.
pub fn base_backup(db: &Database, password: &Password) -> Tool {
    Tool::new("pg_basebackup", db, password)
        .args(["--pgdata=-", "--format=tar", "--wal-method=fetch", "--checkpoint=fast", "--verbose", "--label=bosun"])
        .args(libpq(db, false))
}

/// pg_restore into a server of an older major than itself, as bash runs it: the
/// arguments are pg_restore's, `--`, then psql's. pg_restore sets, before anything of
/// the dump, every parameter its own major knows — 17's `SET transaction_timeout = 0`
/// is an error on 16 and older, which stops the restore at once. So pg_restore writes
/// the SQL script, that line goes from its preamble (the lines before the first
/// statement that is not a comment, `SET`, `set_config` or `\restrict`: never from the
/// data), and
/// psql runs the rest, stopping at the first error as `--exit-on-error` does.
const PG_RESTORE_TO_OLDER: &str = r#"set -o pipefail
restore=()
while [ "$1" != -- ]; do restore+=("$1"); shift; done
shift
pg_restore "${restore[@]}" --file=- | awk '
  !body && $0 == "SET transaction_timeout = 0;" { next }
  !body && !/^(--|SET |SELECT pg_catalog\.set_config|\\restrict |$)/ { body = 1 }
  { print }' | psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 "$@" >/dev/null"#;

/// The restore, reading a dump made by [`dump`] on stdin. `overwrite` replaces what
/// the dump contains (the caller has checked the target is empty otherwise).
/// `older_server`: the target is a PostgreSQL of an older major than the local
/// pg_restore ([`PG_RESTORE_TO_OLDER`]).
pub fn restore(db: &Database, password: &Password, overwrite: bool, older_server: bool) -> Result<Tool, Error> {
    Ok(match db.engine {
        Engine::Postgresql if older_server => {
            let mut tool = Tool::new("pg_restore | psql", db, password).args([
                "-c",
                PG_RESTORE_TO_OLDER,
                "bosun-restore",
                "--no-owner",
                "--no-privileges",
            ]);
            tool.executable = "bash";
            if overwrite {
                tool = tool.args(["--clean", "--if-exists"]);
            }
            tool.args(["--"]).args(libpq(db, true))
        }
        Engine::Postgresql => {
            let tool = Tool::new("pg_restore", db, password)
                .args(["--no-owner", "--no-privileges", "--exit-on-error"])
                .args(libpq(db, true));
            if overwrite { tool.args(["--clean", "--if-exists"]) } else { tool }
        }
        // mysqldump writes DROP TABLE IF EXISTS before each table: the dump overwrites.
        Engine::Mysql => Tool::new("mysql", db, password).args([
            "--protocol=TCP",
            "--default-character-set=utf8mb4",
            "--host",
            &db.host,
            "--port",
            &port(db),
            "--user",
            &db.user,
            &db.name,
        ]),
        // A database in the URI would act as --db, which filters the archive to the
        // namespaces of that name: a dump of `app` restored into `app_copy` would load
        // nothing and succeed. The dump holds one database; map it onto the target.
        Engine::Mongodb => {
            let mut extra =
                vec!["--archive".to_owned(), "--nsFrom=$db$.$coll$".to_owned(), format!("--nsTo={}.$coll$", db.name)];
            if overwrite {
                extra.push("--drop".into());
            }
            mongo_tool("mongorestore", db, None, password, extra)?
        }
    })
}

/// A session holding a temporary physical replication slot on a PostgreSQL server:
/// the server keeps every WAL file from the slot's creation on while it lives, so a
/// base backup's own WAL (`--wal-method=fetch`, read at its end) cannot be recycled
/// by a checkpoint meanwhile. Dropped with the session — when this is dropped, or the
/// runner dies — so it never holds WAL for longer.
#[derive(Debug)]
pub struct WalHold {
    _session: Child,
}

/// Open a [`WalHold`] on `db` (its user needs REPLICATION).
pub async fn hold_wal(db: &Database, password: &Password) -> Result<WalHold, Error> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let psql = Tool::new("psql", db, password).args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1"]).args(libpq(db, true));
    let failed = |detail: String| Error::Tool { tool: "psql", detail };
    let mut session = psql
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("could not start it ({e})")))?;
    let slot = format!("bosun_base_{}", std::process::id());
    let sql = format!("SELECT lsn FROM pg_create_physical_replication_slot('{slot}', true, true);\n");
    let (Some(stdin), Some(stdout)) = (session.stdin.as_mut(), session.stdout.take()) else {
        return Err(failed("no pipes".into()));
    };
    stdin.write_all(sql.as_bytes()).await.map_err(|e| failed(format!("holding WAL: {e}")))?;
    stdin.flush().await.map_err(|e| failed(format!("holding WAL: {e}")))?;
    // The slot's first LSN, once created; nothing (stdout closed) when it failed.
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line).await;
    if !matches!(read, Ok(n) if n > 0) || line.trim().is_empty() {
        let mut err = String::new();
        if let Some(mut stderr) = session.stderr.take() {
            let _ = stderr.read_to_string(&mut err).await;
        }
        return Err(failed(format!(
            "creating a temporary replication slot to hold WAL: {}",
            tail_text(err.as_bytes())
        )));
    }
    Ok(WalHold { _session: session })
}

/// `tar` unpacking its stdin into `dir` (a base backup's data directory).
pub fn untar(dir: &std::path::Path) -> Tool {
    let tool = Tool { program: "tar", executable: "tar", args: Vec::new(), env: Vec::new(), _keep: None };
    tool.args(["-x", "-f", "-", "-C"]).args([dir.display().to_string()])
}

/// The tool's own version line, e.g. `pg_dump (PostgreSQL) 15.14`.
pub async fn tool_version(program: &'static str) -> String {
    let tool = Tool { program, executable: program, args: vec!["--version".into()], env: Vec::new(), _keep: None };
    tool.output().await.unwrap_or_else(|e| format!("unknown ({e})")).lines().next().unwrap_or_default().to_owned()
}

/// A failed first contact with `db`, as the step it is (`role`: source or target).
pub fn connecting<'a>(role: &'static str, db: &'a Database) -> impl Fn(Error) -> Error + 'a {
    move |e| match e {
        Error::Tool { tool, detail } => {
            Error::Connect { role, database: db.to_string(), detail: format!("{tool} {detail}") }
        }
        other => other,
    }
}

/// The server's version, asked over the same connection the dump uses. Also the
/// first contact with the database, so a wrong password or host fails here, fast.
pub async fn server_version(db: &Database, password: &Password) -> Result<String, Error> {
    match db.engine {
        Engine::Postgresql => query_postgres(db, password, "SHOW server_version").await,
        Engine::Mysql => query_mysql(db, password, "SELECT VERSION()").await,
        // mongodump reports the server version in its log; no shell is needed for it.
        Engine::Mongodb => Ok("unknown".to_owned()),
    }
}

/// The major version of the PostgreSQL server `db` (e.g. 15).
pub async fn postgres_major(db: &Database, password: &Password) -> Result<u32, Error> {
    let number = query_postgres(db, password, "SHOW server_version_num").await?;
    number
        .parse::<u32>()
        .map(|n| n / 10_000)
        .map_err(|_| Error::Tool { tool: "psql", detail: format!("server_version_num is {number:?}, not a number") })
}

/// The major version in a PostgreSQL tool's version line (`pg_restore (PostgreSQL) 17.12
/// (Debian 17.12-0+deb13u1)` → 17; `… 9.6.24` → 9).
pub fn major_of(version_line: &str) -> Option<u32> {
    let mut words = version_line.split_whitespace().skip_while(|w| *w != "(PostgreSQL)");
    words.nth(1)?.split('.').next()?.parse().ok()
}

/// How many tables (collections) the database holds; restores refuse a non-empty one.
pub async fn table_count(db: &Database, password: &Password) -> Result<u64, Error> {
    let text = match db.engine {
        Engine::Postgresql => {
            query_postgres(
                db,
                password,
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
            )
            .await?
        }
        Engine::Mysql => {
            query_mysql(db, password, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()")
                .await?
        }
        Engine::Mongodb => {
            return Err(Error::Refused(
                "the collections of a mongodb target cannot be counted without a mongo shell; \
                 pass --overwrite to restore into it (collections in the dump are replaced)"
                    .to_owned(),
            ));
        }
    };
    text.trim().parse().map_err(|_| Error::Tool { tool: "query", detail: format!("unexpected table count {text:?}") })
}

/// The tables (not views) of the database `db` and the exact number of rows in each,
/// by name (schema-qualified for PostgreSQL), in name order.
pub async fn table_rows(db: &Database, password: &Password) -> Result<Vec<(String, u64)>, Error> {
    let list = match db.engine {
        Engine::Postgresql => {
            "SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables \
             WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE' ORDER BY 1"
        }
        _ => {
            "SELECT CONCAT('`', REPLACE(table_name, '`', '``'), '`') FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY 1"
        }
    };
    let names: Vec<String> = query(db, password, list).await?.lines().map(str::to_owned).collect();
    let mut counted = Vec::with_capacity(names.len());
    // A statement per few hundred tables keeps each command line short; each row
    // carries its table's index, as UNION ALL promises no order.
    for batch in names.chunks(200) {
        let sql = batch
            .iter()
            .enumerate()
            .map(|(i, t)| format!("SELECT {i}, count(*) FROM {t}"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let out = query(db, password, &sql).await?;
        let mut counts = vec![None; batch.len()];
        for line in out.lines() {
            let mut fields = line.split(['|', '\t']).map(str::trim);
            if let (Some(Ok(i)), Some(Ok(rows))) =
                (fields.next().map(str::parse::<usize>), fields.next().map(str::parse))
                && i < counts.len()
            {
                counts[i] = Some(rows);
            }
        }
        for (i, rows) in counts.into_iter().enumerate() {
            let rows = rows.ok_or_else(|| Error::Tool {
                tool: "query",
                detail: format!("no row count for table {} in {out:?}", batch[i]),
            })?;
            counted.push((batch[i].clone(), rows));
        }
    }
    Ok(counted)
}

/// How many rows `sql` (one SELECT, as a user writes it) returns in `db`.
pub async fn query_rows(db: &Database, password: &Password, sql: &str) -> Result<u64, Error> {
    let sql = sql.trim().trim_end_matches(';').trim_end();
    let out = query(db, password, &format!("SELECT count(*) FROM ({sql}\n) AS bosun_verify_query")).await?;
    out.trim().parse().map_err(|_| Error::Tool { tool: "query", detail: format!("unexpected row count {out:?}") })
}

/// The output of `sql` in `db` (PostgreSQL or MySQL), one row a line.
async fn query(db: &Database, password: &Password, sql: &str) -> Result<String, Error> {
    match db.engine {
        Engine::Postgresql => query_postgres(db, password, sql).await,
        Engine::Mysql => query_mysql(db, password, sql).await,
        Engine::Mongodb => Err(Error::Refused("a mongodb database cannot be queried with SQL".into())),
    }
}

async fn query_postgres(db: &Database, password: &Password, sql: &str) -> Result<String, Error> {
    Tool::new("psql", db, password)
        .args(["--no-psqlrc", "--tuples-only", "--no-align"])
        .args(libpq(db, true))
        .args(["--command", sql])
        .output()
        .await
}

async fn query_mysql(db: &Database, password: &Password, sql: &str) -> Result<String, Error> {
    Tool::new("mysql", db, password)
        .args([
            "--protocol=TCP",
            "--batch",
            "--skip-column-names",
            "--host",
            &db.host,
            "--port",
            &port(db),
            "--user",
            &db.user,
            "--execute",
            sql,
            &db.name,
        ])
        .output()
        .await
}

/// mongodump/mongorestore take the password from a config file (YAML `password:`),
/// which keeps it off the command line.
fn mongo_tool(
    program: &'static str,
    db: &Database,
    database: Option<&str>,
    password: &Password,
    extra: Vec<String>,
) -> Result<Tool, Error> {
    let uri =
        format!("mongodb://{}@{}:{}/{}?authSource=admin", db.user, db.host, db.port, database.unwrap_or_default());
    let mut tool = Tool::new(program, db, password).args([format!("--uri={uri}")]).args(extra);
    if let Some(p) = &password.0 {
        let file = tempfile_like::TempFile::with_contents(&format!("password: {}\n", yaml_quote(p)))
            .map_err(|e| Error::Tool { tool: program, detail: format!("writing its config file: {e}") })?;
        tool.args.push(format!("--config={}", file.path.display()));
        tool._keep = Some(file);
    }
    Ok(tool)
}

fn yaml_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A private file removed on drop; enough for one secret, no extra crate.
mod tempfile_like {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;

    #[derive(Debug)]
    pub struct TempFile {
        pub path: PathBuf,
    }

    impl TempFile {
        pub fn with_contents(text: &str) -> std::io::Result<Self> {
            let path = std::env::temp_dir().join(format!("bosun-{}-{}.yaml", std::process::id(), rand_suffix()));
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
            f.write_all(text.as_bytes())?;
            Ok(TempFile { path })
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn db(url: &str) -> Database {
        Database::parse("--source", url).unwrap()
    }

    #[test]
    fn a_major_is_read_from_a_version_line() {
        assert_eq!(major_of("pg_restore (PostgreSQL) 17.12 (Debian 17.12-0+deb13u1)"), Some(17));
        assert_eq!(major_of("pg_restore (PostgreSQL) 17.12"), Some(17));
        assert_eq!(major_of("pg_restore (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(major_of("unknown (no such file)"), None);
    }

    /// Into an older server: the preamble loses `SET transaction_timeout = 0;`, the same
    /// text as a row of the data does not, and psql gets everything else in order.
    #[tokio::test]
    async fn a_restore_into_an_older_server_drops_only_the_preamble_setting_it_does_not_know() {
        let dir = std::env::temp_dir().join(format!("bosun-restore-older-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = "--\n-- PostgreSQL database dump\n--\n\\restrict abc\n\nSET statement_timeout = 0;\n\
                      SET transaction_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\n\n\
                      CREATE TABLE public.t (v text);\nCOPY public.t (v) FROM stdin;\n\
                      SET transaction_timeout = 0;\n\\.\n";
        std::fs::write(dir.join("script.sql"), script).unwrap();
        let fake = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        };
        fake("pg_restore", &format!("cat >/dev/null; cat '{}'", dir.join("script.sql").display()));
        fake("psql", &format!("cat >'{}'", dir.join("got").display()));
        let mut tool = restore(&db("postgresql://u@h/d"), &Password(None), false, true).unwrap();
        tool.env.push(("PATH", format!("{}:/usr/bin:/bin", dir.display())));
        tool.spawn(true, false).unwrap().finish().await.unwrap();
        let got = std::fs::read_to_string(dir.join("got")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got.matches("SET transaction_timeout = 0;").count(), 1, "{got}");
        assert!(got.contains("FROM stdin;\nSET transaction_timeout = 0;\n"), "the row stays: {got}");
        assert!(got.contains("SET statement_timeout = 0;") && got.contains("CREATE TABLE public.t"), "{got}");
    }

    #[test]
    fn no_password_reaches_a_command_line() {
        let password = Password(Some("hunter2".into()));
        for url in ["postgresql://u@h/d", "mysql://u@h/d"] {
            let d = dump(&db(url), &password).unwrap();
            assert!(!d.args.iter().any(|a| a.contains("hunter2")), "{:?}", d.args);
            assert!(d.env.iter().any(|(_, v)| v == "hunter2"), "the tool's own variable carries it");
            for older in [false, true] {
                let r = restore(&db(url), &password, false, older).unwrap();
                assert!(!r.args.iter().any(|a| a.contains("hunter2")));
            }
        }
        let m = dump(&db("mongodb://u@h/d"), &password).unwrap();
        assert!(!m.args.iter().any(|a| a.contains("hunter2")), "{:?}", m.args);
        let config = m._keep.as_ref().unwrap();
        assert!(std::fs::read_to_string(&config.path).unwrap().contains("hunter2"));
        assert!(format!("{password:?}").contains("redacted"));
    }

    #[test]
    fn dumps_are_consistent_and_portable() {
        let pg = dump(&db("postgresql://u@h:6000/app"), &Password::default()).unwrap();
        assert_eq!(pg.program, "pg_dump");
        assert!(pg.args.contains(&"--format=custom".to_owned()) && pg.args.contains(&"6000".to_owned()));
        let my = dump(&db("mysql://u@h/shop"), &Password::default()).unwrap();
        assert!(my.args.contains(&"--single-transaction".to_owned()));
        assert_eq!(my.args.last().map(String::as_str), Some("shop"), "no --databases: no CREATE DATABASE in the dump");
        let restore_over = restore(&db("postgresql://u@h/app"), &Password::default(), true, false).unwrap();
        assert!(restore_over.args.contains(&"--clean".to_owned()));
        let restore_fresh = restore(&db("postgresql://u@h/app"), &Password::default(), false, false).unwrap();
        assert!(!restore_fresh.args.contains(&"--clean".to_owned()));
    }

    #[test]
    fn mongodb_dumps_one_database_and_restores_it_under_the_target_name() {
        let dump = dump(&db("mongodb://u@h:27018/app"), &Password::default()).unwrap();
        assert!(dump.args.contains(&"--uri=mongodb://u@h:27018/app?authSource=admin".to_owned()), "{:?}", dump.args);
        let restore = restore(&db("mongodb://u@h:27018/app_copy"), &Password::default(), false, false).unwrap();
        // No database in the URI: mongorestore would take it as --db and skip the
        // archive's namespaces of any other name.
        assert!(restore.args.contains(&"--uri=mongodb://u@h:27018/?authSource=admin".to_owned()), "{:?}", restore.args);
        assert!(restore.args.contains(&"--nsFrom=$db$.$coll$".to_owned()));
        assert!(restore.args.contains(&"--nsTo=app_copy.$coll$".to_owned()));
        assert!(!restore.args.contains(&"--drop".to_owned()));
    }
}
