//! The primary's setup, beside each start of the server and never blocking it: once
//! the server accepts connections on its socket, the superuser's password from the
//! Secret (so a password edited there takes effect on the next start) and the
//! replication role with its password (who may connect is [`crate::access`]'s); a
//! standby has nothing to set up. After a major upgrade, the indexes of
//! databases whose collation version changed are rebuilt and every database is
//! analyzed. Idempotent; retried until the setup timeout, then given up with a
//! message, never stopping the server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tracing::{info, warn};

use crate::commands::output;
use crate::data::files;
use crate::settings::InstanceArgs;

/// The marker a major upgrade leaves in the data directory: statistics to gather.
pub const ANALYZE_MARKER: &str = "bosun-analyze-pending";

/// How the setup's own commits go: with synchronous standbys configured, they must
/// not wait for a standby that cannot connect before the setup is done.
const LOCAL_COMMIT: &str = "-c synchronous_commit=local";

/// Run the setup until done or given up.
pub async fn run(args: &InstanceArgs) {
    let deadline = Instant::now() + args.setup_timeout();
    let standby = loop {
        match attempt(args).await {
            Ok(standby) => break standby,
            // A recovery takes as long as its WAL takes to replay.
            Err(why) if Instant::now() >= deadline && !args.pgdata.join(files::RECOVERY).exists() => {
                warn!(%why, "the server did not accept the setup in time: passwords and replication role not updated");
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    };
    if !standby {
        info!("passwords and the replication role are set");
        analyze_after_upgrade(args).await;
    }
}

/// One try: `Ok(true)` for a standby, `Ok(false)` for a primary set up; `Err` to
/// try again.
async fn attempt(args: &InstanceArgs) -> Result<bool, String> {
    if query(args, "SELECT pg_is_in_recovery()").await?.trim() == "t" {
        // A server recovering from an archive (recovery.signal) becomes the primary:
        // waited for.
        let datadir = PathBuf::from(query(args, "SHOW data_directory").await?.trim());
        if !datadir.join(files::STANDBY).exists() {
            return Err("recovering from the archive".into());
        }
        return Ok(true);
    }
    let stored = stored_verifiers(&query(args, STORED_VERIFIERS_SQL).await?);
    script(args, &roles_sql(args, &stored)).await?;
    Ok(false)
}

/// Every role's stored password (its verifier), one `name|verifier` a line.
const STORED_VERIFIERS_SQL: &str = "SELECT rolname || '|' || rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL";

/// The stored verifiers of [`STORED_VERIFIERS_SQL`]'s answer, by role.
fn stored_verifiers(answer: &str) -> BTreeMap<String, String> {
    answer
        .lines()
        .filter_map(|line| line.rsplit_once('|'))
        .map(|(role, verifier)| (role.to_owned(), verifier.to_owned()))
        .collect()
}

/// The superuser's password, and the replication role (created when missing) with
/// its password: SQL read by psql from its input, never from a command line. Each
/// password goes as its scram verifier ([`crate::scram`]), so the server never sees
/// it; a password that is not ASCII goes as it is, with this session's statements and
/// their errors kept out of the server's log. A password set already keeps its
/// verifier (`stored`, by role): the setup runs at every start and promotion, and a
/// new salt would fail the logins a pooler makes with the verifier it looked up.
pub fn roles_sql(args: &InstanceArgs, stored: &BTreeMap<String, String>) -> String {
    let mut sql = String::from(
        "SET standard_conforming_strings = on;\nSET log_statement = 'none';\nSET log_min_error_statement = 'panic';\n",
    );
    let hashed = |role: &str, password: &str| {
        let verifier = crate::scram::verifier_keeping(password, stored.get(role).map(String::as_str));
        literal(&verifier.unwrap_or_else(|| password.to_owned()))
    };
    sql.push_str(&format!(
        "ALTER ROLE {} WITH PASSWORD {};\n",
        ident(&args.superuser),
        hashed(&args.superuser, &args.superuser_password())
    ));
    if let Some(password) = args.replication_password() {
        let user = &args.replication_user;
        sql.push_str(&format!(
            "SELECT format('CREATE ROLE %I', {0}) WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {0}) \\gexec\n",
            literal(user)
        ));
        sql.push_str(&format!(
            "ALTER ROLE {} WITH REPLICATION LOGIN PASSWORD {};\n",
            ident(user),
            hashed(user, &password)
        ));
        // What pg_rewind reads of the primary, and CHECKPOINT (a role of its own from
        // PostgreSQL 15): the instances' own connections go as this role when the
        // superuser may not log in over the network. It may copy every file already.
        sql.push_str(&format!(
            "GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean), \
             pg_catalog.pg_stat_file(text, boolean), pg_catalog.pg_read_binary_file(text), \
             pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO {};\n",
            ident(user)
        ));
        sql.push_str(&format!(
            "SELECT format('GRANT pg_checkpoint TO %I', {}) WHERE EXISTS (SELECT FROM pg_roles WHERE rolname = \
             'pg_checkpoint') \\gexec\n",
            literal(user)
        ));
    }
    if let Some(password) = args.pooler_password() {
        sql.push_str(&pooler_sql(&args.superuser, &hashed(crate::pooler::AUTH_USER, &password)));
    }
    // The application's role, and its database (made once, never dropped; one that
    // exists keeps its owner).
    if let Some((user, database, password)) = args.application() {
        sql.push_str(&format!(
            "SELECT format('CREATE ROLE %I', {0}) WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {0}) \\gexec\n",
            literal(user)
        ));
        sql.push_str(&format!("ALTER ROLE {} WITH LOGIN PASSWORD {};\n", ident(user), hashed(user, &password)));
        sql.push_str(&format!(
            "SELECT format('CREATE DATABASE %I OWNER %I', {0}, {1}) \
             WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = {0}) \\gexec\n",
            literal(database),
            literal(user)
        ));
    }
    sql
}

/// The pooler's role (`spec.pooler`) with its password (`hashed`, a quoted literal),
/// and the one thing it may do: look up, through a function that runs as the
/// superuser, the password verifier of a role that logs in through the pooler, so
/// that PgBouncer checks clients against the database's own roles (`auth_query`)
/// without a copy of their passwords. Superusers and replication roles are not
/// looked up: they do not log in through the pooler. In the database `postgres`
/// (PgBouncer's `auth_dbname`), where the setup runs.
fn pooler_sql(superuser: &str, hashed: &str) -> String {
    use crate::pooler::{AUTH_SCHEMA, AUTH_USER, LOOKUP_FUNCTION};
    let user = ident(AUTH_USER);
    format!(
        "SELECT format('CREATE ROLE %I', {role}) WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {role}) \\gexec\n\
         ALTER ROLE {user} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD {hashed};\n\
         CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {owner};\n\
         CREATE OR REPLACE FUNCTION {schema}.{function}(i_username text, OUT usename name, OUT passwd text) \
         RETURNS record LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS \
         $$SELECT usename, passwd FROM pg_catalog.pg_shadow WHERE usename = i_username AND NOT usesuper AND NOT userepl$$;\n\
         REVOKE ALL ON FUNCTION {schema}.{function}(text) FROM PUBLIC;\n\
         GRANT USAGE ON SCHEMA {schema} TO {user};\n\
         GRANT EXECUTE ON FUNCTION {schema}.{function}(text) TO {user};\n",
        role = literal(AUTH_USER),
        schema = ident(AUTH_SCHEMA),
        function = ident(LOOKUP_FUNCTION),
        owner = ident(superuser),
    )
}

/// After a major upgrade (pg_upgrade carries no planner statistics): the indexes of
/// databases whose collation version changed rebuilt (the new image's C library may
/// sort text differently; PostgreSQL 15 and later record the version, on older ones
/// there is nothing to do), then every database analyzed, the cheapest statistics
/// first; the marker goes when done. A failure leaves it for the next start.
async fn analyze_after_upgrade(args: &InstanceArgs) {
    let Ok(datadir) = query(args, "SHOW data_directory").await else { return };
    let marker = PathBuf::from(datadir.trim()).join(ANALYZE_MARKER);
    if !marker.exists() {
        return;
    }
    let stale = query(
        args,
        "SELECT datname FROM pg_database WHERE datallowconn \
         AND datcollversion IS DISTINCT FROM pg_database_collation_actual_version(oid)",
    )
    .await
    .unwrap_or_default();
    for db in stale.lines().map(str::trim).filter(|d| !d.is_empty()) {
        info!(database = db, "the collation version of the database changed: rebuilding its indexes (reindexdb)");
        if let Err(why) = output(client(args, "reindexdb").args(["-d", db]), "reindexdb").await {
            warn!(database = db, %why, "reindexdb failed; it runs again at the next start");
            return;
        }
        let refresh = format!("ALTER DATABASE {} REFRESH COLLATION VERSION", ident(db));
        if let Err(why) = query(args, &refresh).await {
            warn!(database = db, %why, "the collation version could not be refreshed");
        }
    }
    info!("analyzing every database after the major upgrade (vacuumdb --all --analyze-in-stages)");
    match output(client(args, "vacuumdb").args(["--all", "--analyze-in-stages"]), "vacuumdb").await {
        Ok(_) => match std::fs::remove_file(&marker) {
            Ok(()) => info!("analyzed"),
            Err(e) => warn!(marker = %marker.display(), "analyzed, but the marker could not be removed: {e}"),
        },
        Err(why) => warn!(%why, "vacuumdb --analyze-in-stages failed; it runs again at the next start"),
    }
}

/// A client program connected to the local server as the superuser, on its socket.
fn client(args: &InstanceArgs, program: &str) -> Command {
    let mut command = crate::commands::pg(program);
    command
        .arg("-h")
        .arg(&args.socket_dir)
        .args(["-p", &args.port.to_string(), "-U", &args.superuser])
        .env("PGOPTIONS", LOCAL_COMMIT)
        .kill_on_drop(true);
    command
}

/// One statement on the local server: its rows, unaligned.
pub async fn query(args: &InstanceArgs, sql: &str) -> Result<String, String> {
    let mut command = client(args, "psql");
    command.args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c", sql]);
    output(&mut command, "psql").await
}

/// `sql` read by psql from its input.
async fn script(args: &InstanceArgs, sql: &str) -> Result<(), String> {
    let mut command = client(args, "psql");
    command.args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", "postgres"]);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("psql could not run: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(sql.as_bytes()).await.map_err(|e| format!("writing to psql: {e}"))?;
    }
    let out = child.wait_with_output().await.map_err(|e| format!("psql: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    // psql's error names the statement's line, never its text.
    Err(format!("psql failed ({}): {}", out.status, crate::commands::tail(&String::from_utf8_lossy(&out.stderr), 500)))
}

/// `name` as an SQL identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal (standard_conforming_strings on: backslashes are
/// plain characters).
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> InstanceArgs {
        let mut argv = vec!["bosun", "--pgdata", "/d", "--primary-host", "db"];
        argv.extend(extra);
        argv.extend(["--", "postgres"]);
        crate::settings::tests::parse(argv)
    }

    #[test]
    fn a_pooler_password_gives_the_pooler_its_role_and_its_one_lookup() {
        let dir = crate::role::tests::temp_dir("pooler-password");
        let dirs = dir.to_str().unwrap().to_owned();
        std::fs::write(dir.join(crate::settings::env::POOLER_PASSWORD_FILE), "p'w").unwrap();
        let sql = roles_sql(&args(&["--password", "su", "--credentials-dir", &dirs]), &BTreeMap::new());
        assert!(sql.contains(r#"ALTER ROLE "bosun_pooler" WITH LOGIN NOSUPERUSER"#), "{sql}");
        assert!(sql.contains("SECURITY DEFINER SET search_path = pg_catalog"), "{sql}");
        assert!(sql.contains("AND NOT usesuper AND NOT userepl"), "{sql}");
        assert!(sql.contains(r#"REVOKE ALL ON FUNCTION "bosun_pooler"."lookup"(text) FROM PUBLIC"#), "{sql}");
        assert!(!sql.contains("p'w"), "the password goes as its verifier: {sql}");
        assert!(!roles_sql(&args(&["--password", "su"]), &BTreeMap::new()).contains("bosun_pooler"));
    }

    #[test]
    fn passwords_and_names_are_quoted_whatever_they_hold() {
        let a = args(&["--password", r"it's\a; DROP", "--superuser", "su\"per", "--replication-password", "r'1"]);
        let sql = roles_sql(&a, &BTreeMap::new());
        assert!(sql.contains(r#"ALTER ROLE "su""per" WITH PASSWORD 'SCRAM-SHA-256$4096:"#), "{sql}");
        assert!(sql.contains("SELECT format('CREATE ROLE %I', 'replicator') WHERE NOT EXISTS"), "{sql}");
        assert!(sql.contains(r#"ALTER ROLE "replicator" WITH REPLICATION LOGIN PASSWORD 'SCRAM-SHA-256$"#), "{sql}");
        assert!(sql.starts_with("SET standard_conforming_strings = on;"), "{sql}");
        assert!(sql.contains(r#"pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO "replicator";"#));
        assert!(sql.contains("SELECT format('GRANT pg_checkpoint TO %I', 'replicator') WHERE EXISTS"), "{sql}");
        assert!(!sql.contains("DROP") && !sql.contains("r'1"), "no password reaches the server: {sql}");
        // Not ASCII: as it is, quoted, with the session's logging off.
        let sql = roles_sql(&args(&["--password", "pä'ss"]), &BTreeMap::new());
        assert!(sql.contains("WITH PASSWORD 'pä''ss';") && sql.contains("SET log_min_error_statement = 'panic';"));
    }

    #[test]
    fn without_a_replication_password_there_is_no_replication_role() {
        let sql = roles_sql(&args(&["--password", "p", "--replication-password", ""]), &BTreeMap::new());
        assert!(!sql.contains("replicator"), "{sql}");
    }

    #[test]
    fn a_password_set_already_keeps_its_verifier() {
        let a = args(&["--password", "su", "--replication-password", "r"]);
        let kept = crate::scram::verifier("su").unwrap();
        let old = crate::scram::verifier("before").unwrap();
        let answer = format!("postgres|{kept}\nreplicator|{old}\nweird|name|md5abc\n");
        let stored = stored_verifiers(&answer);
        assert_eq!(stored.get("weird|name").map(String::as_str), Some("md5abc"));
        let sql = roles_sql(&a, &stored);
        assert!(sql.contains(&format!(r#"ALTER ROLE "postgres" WITH PASSWORD '{kept}';"#)), "{sql}");
        assert!(!sql.contains(&old), "a changed password gets a new verifier: {sql}");
    }
}
