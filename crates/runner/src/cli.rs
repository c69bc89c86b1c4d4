//! The flags of `bosun backup run|list` and `bosun restore run`: each also an
//! environment variable (the Backup's CronJob sets those), in URL form so a person
//! can run the same thing by hand. Secrets are never flags.

use std::path::PathBuf;

use bosun_backup_model::contract;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::Error;
use crate::backup::{Backup, Method};
use crate::catalogue::Catalogue;
use crate::location::{Database, Destination};
use crate::manifest::{Manifest, folder};
use crate::restore::{Pick, Restore};
use crate::retention::parse_retention;
use crate::seal::Keys;
use crate::store::{Endpoint, Store};
use crate::tool::Password;
use crate::wal::{self, Archive};

#[derive(Subcommand, Debug)]
pub enum BackupCommand {
    /// Dump a database, compressed, into object storage; then apply retention.
    Run(BackupRunArgs),
    /// List the good backups of one Backup, oldest first.
    List(BackupListArgs),
}

/// A PostgreSQL's continuous archiving: its `archive_command` and `restore_command`.
#[derive(Subcommand, Debug)]
pub enum WalCommand {
    /// Archive one WAL file (`archive_command = 'bosun wal push %p'`).
    Push(WalPushArgs),
    /// Restore one archived WAL file (`restore_command = 'bosun wal fetch %f %p'`).
    Fetch(WalFetchArgs),
}

#[derive(Args, Debug)]
pub struct WalPushArgs {
    /// The WAL file (the server's `%p`).
    pub path: PathBuf,
    #[command(flatten)]
    pub destination: DestinationArgs,
    #[command(flatten)]
    pub folder: FolderArgs,
    #[command(flatten)]
    pub encryption: EncryptionArgs,
    /// Leave a failed push's error in this file (removed by the next good push), for
    /// whoever watches the server: its own statistics name only the file that failed.
    #[arg(long, env = contract::WAL_ERROR_FILE)]
    pub error_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct WalFetchArgs {
    /// The WAL file's name (the server's `%f`).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Where to write it (the server's `%p`).
    pub dest: PathBuf,
    #[command(flatten)]
    pub destination: DestinationArgs,
    #[command(flatten)]
    pub folder: FolderArgs,
    #[command(flatten)]
    pub encryption: EncryptionArgs,
}

/// `bosun recover`: a new data directory from a PostgreSQL's base backups and WAL.
#[derive(Args, Debug)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub destination: DestinationArgs,
    /// `--name`: the database whose archive to recover from (its folder `<namespace>/<name>`).
    #[command(flatten)]
    pub folder: FolderArgs,
    /// The keys of an encrypted archive (base backups and WAL).
    #[command(flatten)]
    pub encryption: EncryptionArgs,
    /// The data directory to create: it must not exist or be empty.
    #[arg(long, env = "PGDATA")]
    pub pgdata: PathBuf,
    /// Where to write the server's settings for its recovering start (`name=value` lines).
    #[arg(long, env = contract::RECOVERY_SETTINGS)]
    pub settings_file: PathBuf,
    /// Stop at the last transaction committed at or before this time (RFC 3339, e.g.
    /// `2026-11-26T14:03:00Z`); none of the three: recover everything archived.
    #[arg(long, env = contract::RECOVERY_TARGET_TIME, group = "target")]
    pub target_time: Option<String>,
    /// Stop at this WAL position (`0/5000028`).
    #[arg(long, env = contract::RECOVERY_TARGET_LSN, group = "target")]
    pub target_lsn: Option<String>,
    /// Stop at this restore point (`pg_create_restore_point`).
    #[arg(long, env = contract::RECOVERY_TARGET_NAME, group = "target")]
    pub target_name: Option<String>,
    #[arg(long, env = contract::RESULT_FILE)]
    pub result_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum VerifyCommand {
    /// Restore a Backup's newest good dump into a throwaway server and check it.
    Run(VerifyRunArgs),
}

#[derive(Args, Debug)]
pub struct VerifyRunArgs {
    #[command(flatten)]
    pub destination: DestinationArgs,
    /// `--namespace`, `--name`: the Backup whose newest good dump to verify.
    #[command(flatten)]
    pub folder: FolderArgs,
    #[command(flatten)]
    pub encryption: EncryptionArgs,
    /// The throwaway server's empty database (same URL form as `--source`): it is
    /// loaded with the dump, so never name a database that matters.
    #[arg(long, env = contract::VERIFY_TARGET)]
    pub target: String,
    /// SQL (one SELECT) that must return at least one row in the restored database.
    #[arg(long, env = contract::VERIFY_QUERY)]
    pub query: Option<String>,
    /// How long to wait for the target to accept connections, in seconds.
    #[arg(long, env = contract::VERIFY_WAIT_SECONDS, default_value_t = 600)]
    pub wait_seconds: u64,
    #[arg(long, env = contract::PASSWORD_FILE)]
    pub password_file: Option<PathBuf>,
    #[arg(long, env = contract::RESULT_FILE)]
    pub result_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum RestoreCommand {
    /// Load a dump (a key, or the latest good one) into a database.
    Run(RestoreRunArgs),
}

/// Where the dumps live.
#[derive(Args, Debug, Clone)]
pub struct DestinationArgs {
    /// `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`, `azure://CONTAINER/PREFIX` or `file:///DIR`.
    #[arg(long, env = contract::BACKUP_DESTINATION)]
    pub destination: String,
    /// The storage server, when not the provider's own (an S3-compatible server, an emulator).
    #[arg(long, env = contract::BACKUP_ENDPOINT)]
    pub endpoint: Option<String>,
    /// The bucket's region, when the provider's variables (`AWS_REGION`) do not say.
    #[arg(long, env = contract::BACKUP_REGION)]
    pub region: Option<String>,
}

/// Client-side encryption of the dumps (age).
#[derive(Args, Debug, Clone)]
pub struct EncryptionArgs {
    /// An age identity file (`age-keygen`'s `AGE-SECRET-KEY-1…` lines): new dumps are
    /// encrypted to its first identity; a restore tries each. Rotate a key by putting
    /// the new identity first and keeping the old ones below it.
    #[arg(long, env = contract::BACKUP_ENCRYPTION_KEY_FILE)]
    pub encryption_key_file: Option<PathBuf>,
    /// What messages call that file (the Secret it comes from); default: its path.
    #[arg(long, env = contract::BACKUP_ENCRYPTION_KEY_NAME, requires = "encryption_key_file")]
    pub encryption_key_name: Option<String>,
}

impl EncryptionArgs {
    fn keys(&self) -> Result<Option<Keys>, Error> {
        self.encryption_key_file.as_deref().map(|f| Keys::read(f, self.encryption_key_name.as_deref())).transpose()
    }
}

/// Which Backup's dumps: the folder `<namespace>/<name>` under the prefix.
#[derive(Args, Debug, Clone)]
pub struct FolderArgs {
    /// The Backup's namespace.
    #[arg(long = "namespace", env = contract::BACKUP_NAMESPACE, default_value = "default")]
    pub namespace: String,
    /// The Backup's name (default for `backup run`: the database's name).
    #[arg(long = "name", env = contract::BACKUP_NAME)]
    pub name: Option<String>,
}

#[derive(Args, Debug)]
pub struct BackupRunArgs {
    /// `postgresql://USER@HOST:PORT/DB`, `mysql://…` or `mongodb://…`; the password comes from
    /// `PGPASSWORD` / `MYSQL_PWD` / `MONGODB_PASSWORD` or `--password-file`.
    #[arg(long, env = contract::BACKUP_SOURCE)]
    pub source: String,
    #[command(flatten)]
    pub destination: DestinationArgs,
    #[command(flatten)]
    pub folder: FolderArgs,
    #[command(flatten)]
    pub encryption: EncryptionArgs,
    /// Delete dumps older than this after a good run (`30d`, `12h`, `1d12h`); none: keep all.
    #[arg(long, env = contract::BACKUP_RETENTION)]
    pub retention: Option<String>,
    /// Keep at least this many newest good dumps whatever their age (the newest is always kept).
    #[arg(long, env = contract::BACKUP_KEEP_LAST, default_value_t = 1)]
    pub keep_last: usize,
    /// Keep the newest good dump of each of the newest this many days (UTC) that have one.
    #[arg(long, env = contract::BACKUP_KEEP_DAILY, default_value_t = 0)]
    pub keep_daily: usize,
    /// … of each of the newest this many ISO weeks.
    #[arg(long, env = contract::BACKUP_KEEP_WEEKLY, default_value_t = 0)]
    pub keep_weekly: usize,
    /// … of each of the newest this many months. Every rule keeps what it keeps: a dump
    /// goes only when none keeps it (`--retention`, `--keep-last` and these).
    #[arg(long, env = contract::BACKUP_KEEP_MONTHLY, default_value_t = 0)]
    pub keep_monthly: usize,
    /// A file holding the database password.
    #[arg(long, env = contract::PASSWORD_FILE)]
    pub password_file: Option<PathBuf>,
    /// Also write the result (or the error) as JSON here, e.g. /dev/termination-log.
    #[arg(long, env = contract::RESULT_FILE)]
    pub result_file: Option<PathBuf>,
    /// `dump` (a logical dump, the default) or `base` (a physical base backup of a
    /// PostgreSQL server, into `<namespace>/<name>/base/`; the user needs REPLICATION).
    #[arg(long, env = contract::BACKUP_METHOD, value_enum, default_value_t = Method::Dump)]
    pub method: Method,
}

#[derive(Args, Debug)]
pub struct BackupListArgs {
    #[command(flatten)]
    pub destination: DestinationArgs,
    #[command(flatten)]
    pub folder: FolderArgs,
}

#[derive(Args, Debug)]
pub struct RestoreRunArgs {
    #[command(flatten)]
    pub destination: DestinationArgs,
    #[command(flatten)]
    pub folder: FolderArgs,
    #[command(flatten)]
    pub encryption: EncryptionArgs,
    /// The dump to load: its key in the bucket.
    #[arg(long, env = contract::RESTORE_KEY, conflicts_with = "latest", required_unless_present = "latest")]
    pub key: Option<String>,
    /// Load the newest good backup of `--namespace`/`--name`.
    #[arg(long, env = contract::RESTORE_LATEST)]
    pub latest: bool,
    /// The database to load it into (same URL form as `--source`).
    #[arg(long, env = contract::RESTORE_TARGET)]
    pub target: String,
    /// Restore into a database that already holds tables, replacing what the dump contains.
    #[arg(long, env = contract::RESTORE_OVERWRITE)]
    pub overwrite: bool,
    #[arg(long, env = contract::PASSWORD_FILE)]
    pub password_file: Option<PathBuf>,
    #[arg(long, env = contract::RESULT_FILE)]
    pub result_file: Option<PathBuf>,
}

impl DestinationArgs {
    fn open(&self) -> Result<Store, Error> {
        let destination = Destination::parse(&self.destination)?;
        Store::open(&destination, &Endpoint { url: self.endpoint.clone(), region: self.region.clone() })
    }
}

impl FolderArgs {
    fn folder(&self, default_name: Option<&str>) -> Result<String, Error> {
        let name = self.name.as_deref().or(default_name).ok_or_else(|| Error::Usage("--name is required".into()))?;
        for (flag, value) in [("--namespace", self.namespace.as_str()), ("--name", name)] {
            if value.is_empty() || value.contains('/') || value == "." || value == ".." {
                return Err(Error::Usage(format!("{flag} {value:?}: must be one path segment")));
            }
        }
        Ok(folder(&self.namespace, name))
    }
}

/// `bosun backup run`.
pub async fn backup_run(args: &BackupRunArgs) -> Result<crate::backup::Report, Error> {
    let source = Database::parse("--source", &args.source)?;
    let retention =
        args.retention.as_deref().map(|r| parse_retention("--retention", r).map_err(Error::Usage)).transpose()?;
    if args.method == Method::Base && source.engine != crate::location::Engine::Postgresql {
        return Err(Error::Usage(format!(
            "--method base: a physical base backup is for postgresql:// sources only, not {}",
            source.engine.as_str()
        )));
    }
    let tiers =
        crate::retention::Tiers { daily: args.keep_daily, weekly: args.keep_weekly, monthly: args.keep_monthly };
    if args.method == Method::Base && tiers.any() {
        return Err(Error::Usage(
            "--keep-daily, --keep-weekly, --keep-monthly: base backups are kept by their recovery window \
             (--retention), which needs every base backup and WAL file in it"
                .into(),
        ));
    }
    let keys = args.encryption.keys()?;
    let mut folder = args.folder.folder(Some(&source.name))?;
    if args.method == Method::Base {
        // Beside the database's archived WAL (`<namespace>/<name>/wal`).
        folder.push_str("/base");
    }
    let backup = Backup {
        password: Password::resolve(source.engine, args.password_file.as_ref())?,
        store: args.destination.open()?,
        folder,
        source,
        retention,
        keep_last: args.keep_last,
        tiers,
        method: args.method,
        keys,
    };
    backup.run().await
}

/// `bosun backup list`.
pub async fn backup_list(args: &BackupListArgs) -> Result<Vec<Manifest>, Error> {
    let store = args.destination.open()?;
    Ok(Catalogue::read(&store, &args.folder.folder(None)?).await?.good)
}

/// `bosun restore run`.
pub async fn restore_run(args: &RestoreRunArgs) -> Result<crate::restore::Report, Error> {
    let target = Database::parse("--target", &args.target)?;
    let pick = match &args.key {
        Some(key) => Pick::Key(key.clone()),
        None => Pick::Latest { folder: args.folder.folder(None)? },
    };
    let restore = Restore {
        store: args.destination.open()?,
        pick,
        password: Password::resolve(target.engine, args.password_file.as_ref())?,
        target,
        overwrite: args.overwrite,
        keys: args.encryption.keys()?,
    };
    restore.run().await
}

/// `bosun verify run`.
pub async fn verify_run(args: &VerifyRunArgs) -> Result<crate::verify::Report, Error> {
    let target = Database::parse("--target", &args.target)?;
    if target.engine == crate::location::Engine::Mongodb {
        return Err(Error::Usage("--target: verification restores postgresql:// and mysql:// dumps".into()));
    }
    let verification = crate::verify::Verification {
        store: args.destination.open()?,
        folder: args.folder.folder(None)?,
        password: Password::resolve(target.engine, args.password_file.as_ref())?,
        target,
        keys: args.encryption.keys()?,
        query: args.query.clone().filter(|q| !q.trim().is_empty()),
        wait: std::time::Duration::from_secs(args.wait_seconds),
    };
    verification.run().await
}

impl FolderArgs {
    /// The database's WAL folder, `<namespace>/<name>/wal` (`--name` names the database).
    fn archive(&self, destination: &DestinationArgs, encryption: &EncryptionArgs) -> Result<Archive, Error> {
        Ok(Archive { store: destination.open()?, folder: wal::folder(&self.folder(None)?), keys: encryption.keys()? })
    }
}

/// `bosun wal push`.
pub async fn wal_push(args: &WalPushArgs) -> Result<wal::Report, Error> {
    let pushed = match args.folder.archive(&args.destination, &args.encryption) {
        Ok(archive) => archive.push(&args.path).await,
        Err(e) => Err(e),
    };
    // The last failure's message, kept after a success: a failure between two of
    // bosun's looks at the archiver is still told in its own words (the status shows
    // it only beside a failure pg_stat_archiver reports). Best effort: the push's own
    // outcome is what the server acts on.
    if let (Some(file), Err(e)) = (&args.error_file, &pushed) {
        let _ = tokio::fs::write(file, e.to_string()).await;
    }
    pushed
}

/// `bosun wal fetch`.
pub async fn wal_fetch(args: &WalFetchArgs) -> Result<wal::Report, Error> {
    args.folder.archive(&args.destination, &args.encryption)?.fetch(&args.file, &args.dest).await
}

/// `bosun recover`.
pub async fn recover(args: &RecoverArgs) -> Result<crate::recover::Report, Error> {
    use crate::recover::{Recovery, Target};
    let target = match (&args.target_time, &args.target_lsn, &args.target_name) {
        (Some(t), _, _) => Target::Time(t.parse().map_err(|e| {
            Error::Usage(format!("--target-time {t:?}: not an RFC 3339 time such as 2026-11-26T14:03:00Z ({e})"))
        })?),
        (_, Some(lsn), _) => Target::Lsn(lsn.clone()),
        (_, _, Some(name)) if !name.is_empty() && !name.contains(['\n', '\0']) => Target::Name(name.clone()),
        (_, _, Some(name)) => return Err(Error::Usage(format!("--target-name {name:?}: not a restore point's name"))),
        (None, None, None) => Target::Latest,
    };
    let folder = args.folder.folder(None)?;
    let recovery = Recovery {
        store: args.destination.open()?,
        restore_command: restore_command(
            &args.destination,
            &args.encryption,
            &args.folder.namespace,
            args.folder.name.as_deref(),
        )?,
        keys: args.encryption.keys()?,
        folder,
        target,
        pgdata: args.pgdata.clone(),
        settings_file: args.settings_file.clone(),
    };
    recovery.run().await
}

/// The server's `restore_command`: this executable's `wal fetch` of the same archive.
fn restore_command(
    destination: &DestinationArgs,
    encryption: &EncryptionArgs,
    namespace: &str,
    name: Option<&str>,
) -> Result<String, Error> {
    let me = std::env::current_exe().map_err(|e| Error::Usage(format!("finding this executable: {e}")))?;
    let mut words = vec![me.display().to_string(), "wal".into(), "fetch".into()];
    let flags = [
        ("--destination", Some(destination.destination.as_str())),
        ("--endpoint", destination.endpoint.as_deref()),
        ("--region", destination.region.as_deref()),
        ("--namespace", Some(namespace)),
        ("--name", name),
    ];
    let key_file = encryption.encryption_key_file.as_ref().map(|f| f.display().to_string());
    let keys = [
        ("--encryption-key-file", key_file.as_deref()),
        ("--encryption-key-name", encryption.encryption_key_name.as_deref()),
    ];
    let flags = flags.into_iter().chain(keys);
    for (flag, value) in flags {
        if let Some(value) = value {
            words.extend([flag.to_owned(), value.to_owned()]);
        }
    }
    // The server runs it with sh, after replacing %f, %p and %% (so a value's own % is doubled).
    let quoted: Vec<String> =
        words.iter().map(|w| format!("'{}'", w.replace('\'', "'\\''").replace('%', "%%"))).collect();
    Ok(format!("{} %f %p", quoted.join(" ")))
}

/// The most a result file holds: a container's termination message is cut at 4 KiB,
/// and a cut one is no longer JSON.
const RESULT_LIMIT: usize = 3072;

/// `json` made to fit [`RESULT_LIMIT`]: a long list of deleted keys (a retention that
/// removed much WAL) becomes its first few and a count, and then the list of kept
/// dumps (newest first) its newest as many as fit, and a count.
fn compact(mut json: serde_json::Value) -> serde_json::Value {
    if json.to_string().len() <= RESULT_LIMIT {
        return json;
    }
    for (list, keep, count) in [("deleted", 3, "deletedCount"), ("kept", 0, "keptCount")] {
        let Some(len) = json.get(list).and_then(|d| d.as_array()).map(Vec::len) else { continue };
        json[count] = serde_json::json!(len);
        let mut fits = len;
        while fits > keep && json.to_string().len() > RESULT_LIMIT {
            fits = if list == "deleted" { keep } else { fits - 1 };
            if let Some(items) = json.get_mut(list).and_then(|d| d.as_array_mut()) {
                items.truncate(fits);
            }
        }
        if fits == len {
            json.as_object_mut().map(|o| o.remove(count));
        }
        if json.to_string().len() <= RESULT_LIMIT {
            break;
        }
    }
    json
}

/// Print a run's outcome as one JSON line on stdout (success) or a message on stderr
/// (failure), and write it to `result_file` for whoever started the run; the exit code.
/// A failure's result says how long the run took (since `started`) too.
pub fn report<T: Serialize>(
    outcome: Result<T, Error>,
    result_file: Option<&PathBuf>,
    started: std::time::Instant,
) -> std::process::ExitCode {
    let (json, code) = match &outcome {
        Ok(value) => (serde_json::to_value(value).unwrap_or_default(), std::process::ExitCode::SUCCESS),
        Err(e) => {
            let mut error = e.to_string();
            if error.len() > RESULT_LIMIT - 64 {
                let mut end = RESULT_LIMIT - 64;
                while !error.is_char_boundary(end) {
                    end -= 1;
                }
                error.truncate(end);
            }
            let seconds = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
            let mut json = serde_json::json!({"error": error, "durationSeconds": seconds});
            if let Some(key) = e.dump() {
                json["key"] = serde_json::json!(key);
            }
            (json, std::process::ExitCode::FAILURE)
        }
    };
    match &outcome {
        Ok(_) => println!("{json}"),
        Err(e) => eprintln!("error: {e}"),
    }
    if let Some(path) = result_file
        && let Err(e) = std::fs::write(path, compact(json).to_string())
    {
        eprintln!("warning: could not write the result to {}: {e}", path.display());
    }
    code
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_result_fits_a_termination_message_and_stays_json() {
        let small = serde_json::json!({"key": "k", "deleted": ["a", "b"]});
        assert_eq!(compact(small.clone()), small);
        let keys: Vec<String> = (0..500).map(|i| format!("backups/ns/db-backup/wal/{i:024X}.zst")).collect();
        let big = compact(serde_json::json!({"key": "k", "deleted": keys}));
        assert!(big.to_string().len() <= RESULT_LIMIT, "{}", big.to_string().len());
        assert_eq!((big["deleted"].as_array().unwrap().len(), big["deletedCount"].as_u64()), (3, Some(500)));
        // A year of tiers: the newest kept dumps that fit, and how many there are.
        let kept: Vec<_> = (0..400)
            .map(|d| serde_json::json!({"at": format!("2026-01-01T02:00:{:02}Z", d % 60), "why": ["daily", "weekly"]}))
            .collect();
        let tiers = compact(serde_json::json!({"key": "k", "deleted": ["a"], "kept": kept.clone()}));
        assert!(tiers.to_string().len() <= RESULT_LIMIT, "{}", tiers.to_string().len());
        let listed = tiers["kept"].as_array().unwrap();
        assert!(listed.len() > 20 && listed.len() < 400 && listed[..] == kept[..listed.len()], "{}", listed.len());
        assert_eq!((tiers["keptCount"].as_u64(), tiers["deleted"].as_array().unwrap().len()), (Some(400), 1));
        assert_eq!(tiers.get("deletedCount"), None, "a short list is left whole");
    }
}
