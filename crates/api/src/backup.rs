//! Backup and Restore (`backup.example.com/v1`): scheduled logical dumps of a database
//! into object storage, and loading one back.
//!
//! ```yaml
//! apiVersion: backup.example.com/v1
//! kind: Backup
//! metadata: {name: nightly}
//! spec:
//!   source: {type: postgresql, connection: {host: test-db, port: 5432, database: app, secretRef: {name: test-db-credentials}}}
//!   destination: {type: s3, bucket: backups}
//!   schedule: "0 2 * * *"
//!   retention: 30d
//! ```
//!
//! The schema refuses what a pattern can tell: a schedule that is not five cron fields
//! with values in range (or a macro like `@daily`), a retention that is not a
//! duration. The controller checks the rest (a range whose start is after its end).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The database engines a dump can be taken of.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceType {
    Postgresql,
    Mysql,
    Mongodb,
}

impl SourceType {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceType::Postgresql => "postgresql",
            SourceType::Mysql => "mysql",
            SourceType::Mongodb => "mongodb",
        }
    }

    /// The server's usual port, used when `connection.port` is not given.
    pub fn default_port(self) -> i32 {
        match self {
            SourceType::Postgresql => 5432,
            SourceType::Mysql => 3306,
            SourceType::Mongodb => 27017,
        }
    }
}

/// A Secret in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
}

/// How to reach a database.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// The server's host name (a Service name, or a DNS name or IP address).
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$"))]
    pub host: String,
    /// The server's port; default: the engine's (5432, 3306, 27017).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// The database to dump (or to load into).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[^/\s]+$"))]
    pub database: String,
    /// A Secret with the keys `username` and `password`. Passwords are never inline.
    pub secret_ref: SecretRef,
}

/// A database: its engine and how to reach it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `postgresql`, `mysql` or `mongodb`.
    #[serde(rename = "type")]
    pub type_: SourceType,
    pub connection: Connection,
}

/// Where dumps are stored.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DestinationType {
    S3,
    Gcs,
    Azure,
    Pvc,
}

/// A bucket (or a claim) and a prefix in it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// `s3`, `gcs`, `azure`, or `pvc` (a PersistentVolumeClaim in the Backup's namespace).
    #[serde(rename = "type")]
    pub type_: DestinationType,
    /// The bucket (the container, for `azure`); for `pvc`, the name of the claim. The
    /// claim is the user's: bosun mounts it but never creates or deletes it, so the
    /// dumps outlive the Backup.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"))]
    pub bucket: String,
    /// A folder in the bucket; dumps go under `<prefix>/<namespace>/<backup name>/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512), regex(pattern = r"^[^\s]*$"))]
    pub prefix: Option<String>,
    /// The storage server, when not the provider's own (an S3-compatible server, an emulator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), regex(pattern = r"^https?://[^\s/]+(/[^\s]*)?$"))]
    pub endpoint: Option<String>,
    /// The bucket's region (S3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[a-z0-9-]+$"))]
    pub region: Option<String>,
    /// A Secret whose keys are the provider's standard variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`,
    /// `GOOGLE_SERVICE_ACCOUNT_KEY`, ...): they become the runner's environment, and the
    /// Secret is also mounted at `/var/run/secrets/bosun/destination` for key files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Client-side encryption: what is stored is encrypted before it leaves the run's
    /// pod (or, for a PostgreSQL's continuous backup, its instance), so the bucket holds
    /// only ciphertext: dumps, base backups and archived WAL alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
}

/// The key Secret's key that holds the age identities.
pub const ENCRYPTION_KEY: &str = "identities";

/// `destination.encryption`: age (X25519) with keys from a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// A Secret in the same namespace whose key `identities` is an age identity file
    /// (`age-keygen` writes one: a line `AGE-SECRET-KEY-1…` per key). New backups are
    /// encrypted to the first identity; a restore tries every one. To rotate, put the
    /// new identity first and keep the old ones below it as long as backups made with
    /// them are kept. Losing the Secret loses the backups: keep a copy elsewhere.
    pub secret_ref: SecretRef,
}

/// Values of the five cron fields, as Kubernetes' CronJob (robfig/cron) accepts them.
const MINUTE: &str = "[0-5]?[0-9]";
const HOUR: &str = "[01]?[0-9]|2[0-3]";
const DAY_OF_MONTH: &str = "0?[1-9]|[12][0-9]|3[01]";
const MONTH: &str = "0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)";
const DAY_OF_WEEK: &str = "[0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)";
/// The macros a CronJob accepts instead of five fields.
pub const SCHEDULE_MACROS: &[&str] = &["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

/// One field: a comma-separated list of `*` or a value or a range, each with an
/// optional positive step; `?` too where cron allows it.
fn cron_field(values: &str, question_mark: bool) -> String {
    let any = if question_mark { r"\*|\?" } else { r"\*" };
    let item = format!(r"({any}|({values})(-({values}))?)(/[1-9][0-9]*)?");
    format!("{item}(,{item})*")
}

/// The regular expression a schedule must match (RE2, as CEL's `matches`; also valid
/// for Rust's `regex`).
pub fn schedule_pattern() -> String {
    let fields = [
        cron_field(MINUTE, false),
        cron_field(HOUR, false),
        cron_field(DAY_OF_MONTH, true),
        cron_field(MONTH, false),
        cron_field(DAY_OF_WEEK, true),
    ]
    .map(|f| format!("({f})"));
    let macros = SCHEDULE_MACROS.iter().map(|m| &m[1..]).collect::<Vec<_>>().join("|");
    format!(r"^(@({macros})|{})$", fields.join(r"[ \t]+"))
}

/// The rule a cron schedule at `field` (e.g. `spec.schedule`) must follow.
pub fn schedule_rule(field: &str) -> Rule {
    Rule::new(format!("self.matches('{}')", schedule_pattern().replace('\\', "\\\\")))
        .message(kube::core::Message::Message(format!("{field} must be a cron expression of five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-6 or SUN-SAT; each *, a value, a range a-b or a list, with an optional /step), e.g. \"0 2 * * *\", or one of @hourly, @daily, @weekly, @monthly, @yearly")))
}

/// The regular expression a retention must match: what `bosun backup run --retention` takes.
pub const RETENTION_PATTERN: &str = "^([0-9]+[mhdw])+$";

/// The rule a retention at `field` (e.g. `spec.retention`) must follow.
pub fn retention_rule(field: &str) -> Rule {
    Rule::new(format!("self.matches('{RETENTION_PATTERN}')")).message(kube::core::Message::Message(format!(
        "{field} must be a duration: a number and a unit m, h, d or w, e.g. 30d, 12h, 2w or 1d12h"
    )))
}

/// What a Backup's runs store.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// A logical dump (`pg_dump`, `mysqldump`, `mongodump`), restorable into any
    /// server of the engine (a Restore loads it).
    #[default]
    Dump,
    /// A physical base backup of a PostgreSQL server (`pg_basebackup`), under
    /// `<prefix>/<namespace>/<name>/base/`: with the WAL archived beside it, the start
    /// of a point-in-time recovery (`spec.bootstrap.recovery` of a PostgreSQL). The
    /// user needs the REPLICATION attribute and a `replication` line in `pg_hba.conf`.
    Base,
}

/// Scheduled dumps of a database into object storage, pruned by age.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "backup.example.com",
    version = "v1",
    kind = "Backup",
    plural = "backups",
    namespaced,
    status = "BackupStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.type"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Suspend","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessfulBackup.time"}"#,
    printcolumn = r#"{"name":"Verified","type":"string","jsonPath":".status.lastVerified.outcome","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 44")
        .message("metadata.name may have at most 44 characters: the CronJob <name>-cronjob may have at most 52"),
    validation = Rule::new("!has(self.spec.method) || self.spec.method != 'base' || self.spec.source.type == 'postgresql'")
        .message("spec.method base is a physical base backup of a PostgreSQL server: spec.source.type must be postgresql"),
    validation = Rule::new("!has(self.spec.method) || self.spec.method != 'base' || !(has(self.spec.keepDaily) || has(self.spec.keepWeekly) || has(self.spec.keepMonthly))")
        .message("spec.keepDaily, keepWeekly, keepMonthly are for dumps: base backups are kept by their recovery window (spec.retention), which needs every base backup and WAL file in it"),
    validation = Rule::new("!has(self.spec.verify) || !has(self.spec.method) || self.spec.method != 'base'")
        .message("spec.verify restores dumps: a base backup is verified by a recovery (spec.bootstrap.recovery of a PostgreSQL), not by this"),
    validation = Rule::new("!has(self.spec.verify) || self.spec.source.type != 'mongodb'")
        .message("spec.verify: dumps of postgresql and mysql can be verified; mongodb dumps cannot yet"),
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The database to dump.
    pub source: Source,
    /// Where the dumps go.
    pub destination: Destination,
    /// When to run, as a cron expression in UTC (the CronJob's schedule, with
    /// `timeZone: Etc/UTC`), e.g. `0 2 * * *`.
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = schedule_rule("spec.schedule"))]
    pub schedule: String,
    /// Delete dumps older than this after a good run, e.g. `30d`; the newest good dump
    /// is always kept. None: keep every dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32))]
    #[x_kube(validation = retention_rule("spec.retention"))]
    pub retention: Option<String>,
    /// Also keep at least this many newest good dumps, whatever their age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub keep_last: Option<i32>,
    /// Keep the newest good dump of each of the newest this many days (UTC) that have
    /// one. With `keepWeekly` and `keepMonthly`, a grandfather-father-son rotation: a
    /// dump is kept when any rule keeps it (these, `retention`, `keepLast`), and goes
    /// when none does. Dumps only (`spec.method: dump`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub keep_daily: Option<i32>,
    /// Keep the newest good dump of each of the newest this many ISO weeks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub keep_weekly: Option<i32>,
    /// Keep the newest good dump of each of the newest this many months (UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub keep_monthly: Option<i32>,
    /// Stop scheduling new runs; nothing is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// How long one run may take, in seconds, before it is stopped and counted as
    /// failed (its Job's `activeDeadlineSeconds`). Default: the shortest interval between
    /// two runs of the schedule, at most 24 hours, so a run that cannot start or hangs
    /// never holds back the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 604800))]
    pub active_deadline_seconds: Option<i64>,
    /// `dump` (default): a logical dump. `base`: a physical base backup (PostgreSQL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// Prove the dumps restore: on its own schedule, the newest good dump is restored
    /// into a throwaway server in a pod of its own and checked. Dumps of PostgreSQL and
    /// MySQL only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
}

/// `spec.verify`: scheduled restore verification.
///
/// Each verification runs in a pod of the CronJob `<name>-verify`: the database
/// server (listening only on the pod's loopback address, its data in an `emptyDir`
/// that goes with the pod) beside `bosun verify run`, which restores the newest good
/// dump into it (checking its checksum as every restore does), counts the tables and
/// their rows, and runs the query. It passes when the dump restores, holds at least
/// one table, and the query returns at least one row. It reads the bucket and never
/// deletes anything; the database the dumps are taken of is not touched.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// When to verify, as a cron expression in UTC, e.g. `0 6 * * 0` (Sundays at six,
    /// after that night's dump).
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = schedule_rule("spec.verify.schedule"))]
    pub schedule: String,
    /// SQL (one SELECT) that must return at least one row in the restored database,
    /// e.g. `SELECT 1 FROM orders WHERE created_at > now() - interval '2 days'`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub query: Option<String>,
    /// The throwaway server's image, one with the official `postgres` or `mysql`
    /// image's interface (`POSTGRES_PASSWORD`, `MYSQL_ROOT_PASSWORD`, ...). Default:
    /// the operator's PostgreSQL 17 image (`--postgres-image`), or its MySQL image
    /// (`--mysql-image`, version 8.4). It must be able to load the dumps: a PostgreSQL
    /// at least as new as the runner's `pg_dump` (17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), regex(pattern = r"^[^\s]+$"))]
    pub image: Option<String>,
    /// How long one verification may take, in seconds. Default: the shortest interval
    /// between two verifications of the schedule, at most 24 hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 604800))]
    pub active_deadline_seconds: Option<i64>,
}

/// `Succeeded` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum VerifyOutcome {
    Succeeded,
    Failed,
}

/// The newest finished verification.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedBackup {
    /// When it finished.
    pub time: Time,
    pub outcome: VerifyOutcome,
    /// The dump it restored (with the destination's prefix), when it got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// How long it took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    /// Tables in the restored database, and their rows together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    /// The verification's Job.
    pub job: String,
}

/// The newest dump known to be good.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuccessfulBackup {
    /// When the run finished.
    pub time: Time,
    /// The dump's object key, with the destination's prefix.
    pub key: String,
    /// Its stored (compressed) size in bytes.
    pub size: i64,
    /// The Job that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The oldest good backup kept after its retention: when it was made (for base
    /// backups, when it ended: the first point a recovery can reach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_kept: Option<Time>,
}

/// What the last good run's retention kept, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionStatus {
    /// How many good dumps are kept.
    pub kept: i64,
    /// The kept dumps, newest first (the newest that fit in a run's result when there
    /// are many), each with the rules that keep it.
    #[serde(default)]
    pub backups: Vec<RetainedBackup>,
    /// Deletes the store refused (an object lock, a bucket policy): those dumps are
    /// kept, and the next good run tries again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How far a running backup is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunningBackup {
    /// The run's Job.
    pub job: String,
    /// Bytes the dump tool has written so far (uncompressed).
    pub read_bytes: i64,
    /// Bytes stored so far (compressed, and encrypted when it is).
    pub stored_bytes: i64,
    /// When the run told these counts.
    pub updated: Time,
}

/// A dump retention keeps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct RetainedBackup {
    /// When the run that made it started (its key's stamp).
    pub time: Time,
    /// `last` (one of the newest `keepLast`), `age` (younger than `retention`),
    /// `daily`, `weekly`, `monthly`, or `unpruned` (no rule deletes anything).
    pub rules: Vec<String>,
}

/// Observed state, from the CronJob, its Jobs and their results.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the CronJob last started a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<SuccessfulBackup>,
    /// What the last good run's retention kept (runs of `spec.method: dump`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionStatus>,
    /// The newest finished verification (`spec.verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<VerifiedBackup>,
    /// When a verification last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_verification: Option<Time>,
    /// The run in progress, as it last told how far it is (every few seconds); absent
    /// when no run is going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningBackup>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for BackupStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

/// A Backup whose latest good dump to load.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BackupRef {
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// A dump named by its bucket and key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RestoreSource {
    pub destination: Destination,
    /// The dump's object key, as `bosun backup list` or a Backup's status shows it.
    #[schemars(length(min = 1, max = 1024))]
    pub key: String,
}

/// Load one dump into a database, once.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "backup.example.com",
    version = "v1",
    kind = "Restore",
    plural = "restores",
    namespaced,
    status = "RestoreStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Key","type":"string","jsonPath":".status.key","priority":1}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 55")
        .message("metadata.name may have at most 55 characters: the Job <name>-restore may have at most 63"),
    validation = Rule::new("has(self.spec.backupRef) != has(self.spec.source)")
        .message("set exactly one of spec.backupRef (a Backup's latest good dump) and spec.source (a destination and key)"),
    validation = Rule::new("self.spec == oldSelf.spec")
        .message("spec is immutable: a Restore runs once; create another Restore to load another dump"),
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// A Backup in this namespace: its destination and its latest good dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<BackupRef>,
    /// Or a destination and the key of a dump in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RestoreSource>,
    /// The database to load it into.
    pub target: Source,
    /// Load into a database that already holds tables, replacing what the dump contains.
    /// Without it such a target is refused and left untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
}

/// `Pending`, `Running`, `Succeeded` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum RestorePhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl RestorePhase {
    /// Whether the restore is over (it runs once).
    pub fn finished(self) -> bool {
        matches!(self, RestorePhase::Succeeded | RestorePhase::Failed)
    }
}

/// Observed state, from the Job and its result.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// The object key restored (or being restored, once known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The Job that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for RestoreStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
