//! PostgreSQL → credentials Secret, StatefulSet, Services, Backup; the checks that
//! protect a running database; and the world → PostgreSQL status.
//!
//! ```text
//!  PostgreSQL + claims + StatefulSet ──check──▶ Refusal (nothing applied, the database runs on)
//!                                        └──▶ ok ──▶ Secret (created once, never written again)
//!                                                  ─▶ StatefulSet ─▶ Services ─▶ claims grown
//!                                                  ─▶ Backup, once Ready (and a claim for its dumps)
//!  StatefulSet + Backup + refusal ──status──▶ PostgreSQLStatus
//! ```
//!
//! Replication and roles: every instance runs `bosun instance` (the `bosun-instance`
//! crate) as its first process, copied in by the runner's init container: an
//! instance manager that takes its role from its pod's label
//! [`ROLE_LABEL`] (set by bosun, read through a downward-API file, which the kubelet
//! refreshes within a fraction of a second of a change) and acts on it: a primary
//! starts (out of recovery if it was a standby), a replica with no data clones the
//! primary, a former primary is rewound with `pg_rewind` (or kept aside whole and
//! cloned afresh when that is impossible) and follows it; a running primary relabelled
//! replica stops and rejoins, a standby relabelled primary promotes itself. A new pod
//! has no label and starts nothing until bosun gives it one, so a replaced primary
//! never accepts a write on its own, whether bosun runs or not. The read-write Service
//! selects the label `primary`, which bosun moves only after taking it from the old
//! primary. Each time it starts the server, the instance manager sets it up beside it
//! (passwords and the replication role, on the primary only). Its settings are the
//! variables of `bosun_instance::settings`, named here through that contract.

use std::collections::BTreeMap;

use bosun_api::backup::{
    Backup, BackupSpec, Connection, Destination, DestinationType, Method, SecretRef, Source, SourceType,
};
use bosun_api::conditions::{Condition, postgresql_types, reasons, types};
use bosun_api::postgresql::{
    DeletionPolicy, MajorUpgrade, Phase, PostgreSQL, PostgreSQLStatus, PrimaryChange, Recovery, UpgradeStep, Version,
    WalArchiving,
};
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    PersistentVolumeClaim, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    Secret, SecretKeySelector, SecurityContext, Service, ServicePort, ServiceSpec, VolumeMount,
};
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, DownwardAPIVolumeSource, ObjectFieldSelector, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use bosun_backup_model::contract;
use bosun_instance::settings::env as instance;

use crate::claims;
use crate::conditions::{self, Desired};
use crate::meta::{child_meta, standard_labels};
use crate::quantity;

/// `app.kubernetes.io/name` of PostgreSQL children.
pub const APP_NAME: &str = "postgresql";
/// The port every instance serves on, and every Service's.
pub const PORT: i32 = 5432;
/// The port of every instance's status and control API (`bosun_instance::api`), for
/// bosun only; no Service selects it.
pub const API_PORT: i32 = bosun_instance::api::PORT as i32;
pub const API_PORT_NAME: &str = "instance-api";
/// `--postgres-image`'s default: the official image of the major version.
pub const DEFAULT_IMAGE: &str = "postgres:{version}";
/// The superuser bosun creates, and the database clients are given.
pub const SUPERUSER: &str = "postgres";
pub const DATABASE: &str = "postgres";
/// The role standbys stream as.
pub const REPLICATION_USER: &str = "replicator";
/// Where the data volume is mounted; `PGDATA` is a subdirectory, as the image asks
/// for mount points (a file system's `lost+found` would make initdb refuse).
pub const DATA_MOUNT: &str = "/var/lib/postgresql/data";
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// The volumeClaimTemplate's name: claims are `data-<name>-<ordinal>`.
pub const DATA_VOLUME: &str = "data";
/// The postgres user of the official image (and of Debian's packages).
pub const RUN_AS: i64 = 999;
/// The container's name.
pub const CONTAINER: &str = "postgres";
/// The major version a StatefulSet and its claims were made for (claims keep it after
/// the StatefulSet is gone).
pub const VERSION_LABEL: &str = "database.example.com/major-version";
/// `primary` or `replica`, on each instance's pod, set by bosun: the instance acts on
/// it, `<name>` selects the primary and `<name>-ro` the replicas.
pub const ROLE_LABEL: &str = "database.example.com/role";
pub const ROLE_PRIMARY: &str = "primary";
pub const ROLE_REPLICA: &str = "replica";
/// A digest of the passwords in the pod template: a password edited in the Secret
/// restarts the instances, whose setup hook then sets it in the database.
pub const CREDENTIALS_DIGEST: &str = "database.example.com/credentials-digest";
/// Where an instance reads its role (the downward-API volume's mount and file).
pub const PODINFO_MOUNT: &str = "/etc/bosun";
pub const ROLE_FILE: &str = "/etc/bosun/role";
/// `spec.failoverDelay`'s default: long enough for a primary restarting in place (a
/// container restart and crash recovery take seconds; the readiness probe needs ~6 s
/// to call it not Ready) to come back without a failover, which would also force the
/// old primary to rewind; as short as Patroni's leader TTL.
pub const DEFAULT_FAILOVER_DELAY: &str = "30s";
/// Backups without a schedule or retention of their own.
pub const DEFAULT_BACKUP_SCHEDULE: &str = "0 2 * * *";
pub const DEFAULT_BACKUP_RETENTION: &str = "7d";
/// The length of a generated password.
pub const PASSWORD_LENGTH: usize = 32;
/// `spec.backup.continuous.archiveTimeout`'s default: a minute of transactions is
/// the most a loss of every instance can take, at the cost of one (mostly empty,
/// compressed to a few KiB) WAL file a minute on an idle database.
pub const DEFAULT_ARCHIVE_TIMEOUT: &str = "60s";
/// Where the runner's binary is put for the server's `archive_command`: an emptyDir
/// the init container [`RUNNER_CONTAINER`] fills, so the PostgreSQL image is unchanged.
pub const RUNNER_MOUNT: &str = "/opt/bosun/bin";
pub const RUNNER_CONTAINER: &str = "bosun-runner";
pub const RUNNER_VOLUME: &str = "bosun-runner";
/// Where `bosun wal push` leaves its last failure's error for bosun to read (kept after
/// a good push, shown only beside a failure).
pub const WAL_ERROR_FILE: &str = "/tmp/bosun-wal-error";
/// The most PostgreSQL takes as `archive_timeout`, in seconds (INT_MAX / 2).
const MAX_ARCHIVE_TIMEOUT: u64 = 1_073_741_823;

/// The keys of the credentials Secret.
pub mod keys {
    pub const USERNAME: &str = "username";
    pub const PASSWORD: &str = "password";
    pub const HOST: &str = "host";
    pub const PORT: &str = "port";
    pub const DATABASE: &str = "database";
    pub const URI: &str = "uri";
    pub const PGPASS: &str = "pgpass";
    /// The replication role's password (not a key of the spec's list: bosun's own).
    pub const REPLICATION_PASSWORD: &str = "replication-password";
}

/// The image of `version`: `{version}` in `template` replaced by the major version; a
/// template without it is used for every version.
pub fn image(template: &str, version: Version) -> String {
    crate::meta::versioned_image(template, version.as_str())
}

pub fn secret_name(db: &PostgreSQL) -> String {
    format!("{}-credentials", db.name_any())
}

pub fn headless_name(db: &PostgreSQL) -> String {
    format!("{}-headless", db.name_any())
}

pub fn read_only_name(db: &PostgreSQL) -> String {
    format!("{}-ro", db.name_any())
}

pub fn backup_name(db: &PostgreSQL) -> String {
    backup_name_of(&db.name_any())
}

/// The Backup of the PostgreSQL named `name`, whose folder holds its base backups and WAL.
pub fn backup_name_of(name: &str) -> String {
    format!("{name}-backup")
}

pub fn backup_claim_name(db: &PostgreSQL) -> String {
    format!("{}-backups", db.name_any())
}

/// The data claim of instance `ordinal`, as the StatefulSet controller names it.
pub fn claim_name(db: &PostgreSQL, ordinal: i32) -> String {
    format!("{DATA_VOLUME}-{}-{ordinal}", db.name_any())
}

/// The pod of instance `ordinal`.
pub fn pod_name(db: &PostgreSQL, ordinal: i32) -> String {
    format!("{}-{ordinal}", db.name_any())
}

/// The primary's address inside the cluster.
pub fn host(db: &PostgreSQL) -> String {
    format!("{}.{}.svc", db.name_any(), db.namespace().unwrap_or_default())
}

/// `status.endpoint`: `<name>.<namespace>.svc:5432`.
pub fn endpoint(db: &PostgreSQL) -> String {
    format!("{}:{PORT}", host(db))
}

/// The labels of every child, and the selector of the instances.
fn labels(db: &PostgreSQL) -> BTreeMap<String, String> {
    standard_labels(APP_NAME, &db.name_any())
}

/// Metadata of a child that outlives the PostgreSQL (the Secret, the claims of
/// dumps): bosun's labels, no owner, so deleting the PostgreSQL never takes them.
fn kept_meta(db: &PostgreSQL, name: String) -> ObjectMeta {
    ObjectMeta { name: Some(name), namespace: db.namespace(), labels: Some(labels(db)), ..ObjectMeta::default() }
}

/// A password of [`PASSWORD_LENGTH`] characters from `random` bytes, which must come
/// from a CSPRNG: letters and digits only (the 62 of them; bytes that would bias the
/// choice are skipped), so it needs no quoting in a URI, a pgpass line or a shell.
pub fn password(random: impl IntoIterator<Item = u8>) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    // 248 = 4 × 62: bytes below it map uniformly.
    random
        .into_iter()
        .filter(|b| *b < 248)
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .take(PASSWORD_LENGTH)
        .collect()
}

/// The credentials Secret, created once with `password` and `replication_password`
/// and never written again.
pub fn desired_secret(db: &PostgreSQL, password: &str, replication_password: &str) -> Secret {
    let host = host(db);
    let pgpass = format!("{host}:{PORT}:*:{SUPERUSER}:{password}\n");
    let uri = format!("postgresql://{SUPERUSER}:{password}@{host}:{PORT}/{DATABASE}");
    let data = [
        (keys::USERNAME, SUPERUSER.to_owned()),
        (keys::PASSWORD, password.to_owned()),
        (keys::HOST, host.clone()),
        (keys::PORT, PORT.to_string()),
        (keys::DATABASE, DATABASE.to_owned()),
        (keys::URI, uri),
        (keys::PGPASS, pgpass),
        (keys::REPLICATION_PASSWORD, replication_password.to_owned()),
    ];
    Secret {
        metadata: kept_meta(db, secret_name(db)),
        type_: Some("Opaque".to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes()))).collect()),
        ..Secret::default()
    }
}

/// What the credentials Secret lacks for `db` (`None`: nothing).
pub fn missing_key(db: &PostgreSQL, secret: &Secret) -> Option<&'static str> {
    let has = |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).is_some_and(|v| !v.0.is_empty());
    let needed: &[&str] = if db.spec.replicas > 1 {
        &[keys::USERNAME, keys::PASSWORD, keys::REPLICATION_PASSWORD]
    } else {
        &[keys::USERNAME, keys::PASSWORD]
    };
    needed.iter().copied().find(|k| !has(k))
}

/// A digest of a Secret's passwords: it changes when either changes, and tells
/// nothing about them.
pub fn credentials_digest(secret: &Secret) -> String {
    let mut h = Sha256::new();
    for key in [keys::USERNAME, keys::PASSWORD, keys::REPLICATION_PASSWORD] {
        let value = secret.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.as_slice()).unwrap_or_default();
        h.update((value.len() as u64).to_be_bytes());
        h.update(value);
    }
    hex::encode(&h.finalize()[..16])
}

fn secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), ..EnvVar::default() }
}

/// A probe of the instance manager's API (HTTPS; the kubelet does not verify a
/// probe's certificate, and the health paths need no token): `path` answers 200 or 503
/// from the server's answer to a connection, as `pg_isready` would, and forks nothing.
fn api_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(API_PORT_NAME.to_owned()),
            scheme: Some("HTTPS".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// Accepting connections over TCP, as a client would connect.
const READY: &str = bosun_instance::api::paths::HEALTH;
/// Ready to serve: up, and not recovering from an archive (`spec.bootstrap.recovery`):
/// until it reaches its target and is promoted, what it answers is not yet the data.
const SERVING: &str = bosun_instance::api::paths::READY;

/// The server settings every instance starts with: WAL kept for standbys that fall
/// behind (the setting's name changed in 13), hint bits WAL-logged so a former
/// primary can be rewound, and the synchronous standbys of `spec.synchronous` (any
/// `number` of them; a standby ignores it until promoted).
pub fn server_args(db: &PostgreSQL) -> Vec<String> {
    let keep = if db.spec.version < Version::V13 { "wal_keep_segments=64" } else { "wal_keep_size=1GB" };
    let mut args: Vec<String> =
        ["-c", keep, "-c", "hot_standby=on", "-c", "wal_log_hints=on"].map(str::to_owned).to_vec();
    if let Some(sync) = db.spec.synchronous.as_ref().filter(|_| db.spec.replicas > 1) {
        args.extend(["-c".to_owned(), format!("synchronous_standby_names=ANY {} (*)", sync.number)]);
    }
    if let Some(timeout) = archive_timeout(db) {
        // Only the primary archives (`on`, not `always`); a promoted standby takes over,
        // its new timeline's history file first.
        for setting in [
            "archive_mode=on".to_owned(),
            format!("archive_command={RUNNER_MOUNT}/bosun wal push %p"),
            format!("archive_timeout={timeout}"),
        ] {
            args.extend(["-c".to_owned(), setting]);
        }
    }
    args
}

/// What the primary's archiver said: `pg_stat_archiver` and the runner's last error.
#[derive(Clone, Debug, PartialEq)]
pub struct ArchiverSeen {
    /// As `status.walArchiving` holds it, `lastError` not yet decided ([`observe_archiver`]).
    pub archiving: WalArchiving,
    /// `bosun wal push`'s last failure's message, if it left one.
    pub error: Option<String>,
}

/// What the primary's instance said of its archiver (its API's status); `None` when
/// it did not say (not a primary, or its server did not answer).
pub fn archiver_seen(instance: &bosun_instance::status::Status) -> Option<ArchiverSeen> {
    let a = instance.server.as_ref().filter(|s| !s.in_recovery)?.archiver.as_ref()?;
    let rfc3339 = |t: Option<i64>| t.and_then(|t| Timestamp::from_second(t).ok()).map(|t| t.to_string());
    let archiving = WalArchiving {
        last_archived_wal: a.last_archived_wal.clone(),
        last_archived_time: rfc3339(a.last_archived_time),
        last_failed_wal: a.last_failed_wal.clone(),
        last_failed_time: rfc3339(a.last_failed_time),
        failed_count: Some(a.failed_count),
        recent_failures: None,
        last_error: None,
    };
    Some(ArchiverSeen { archiving, error: instance.archive_error.clone() })
}

/// How many WAL files failed to archive between the `previous` look (the status) and
/// `now`: the counter's growth; after a reset of it (a restart, another primary) what
/// it counts now, at least one when the last failure's time moved. A first look counts
/// nothing: what failed before bosun watched was told by no one it could count.
pub fn failures_between(previous: Option<&WalArchiving>, now: &WalArchiving) -> u64 {
    let Some(previous) = previous else { return 0 };
    let moved = now.last_failed_time.is_some() && now.last_failed_time != previous.last_failed_time;
    match (previous.failed_count, now.failed_count) {
        (Some(before), Some(after)) if after > before => (after - before) as u64,
        (Some(before), Some(after)) if after < before && moved => after.max(1) as u64,
        _ => u64::from(moved),
    }
}

/// `status.walArchiving` from what the archiver said on this look (`seen`), the
/// status's before it (`previous`): the failures between the two looks are counted, and
/// the runner's error kept while the archiver fails or failed since the last look.
pub fn observe_archiver(previous: Option<&WalArchiving>, seen: &ArchiverSeen) -> WalArchiving {
    let mut archiving = seen.archiving.clone();
    let between = failures_between(previous, &archiving);
    archiving.recent_failures = (between > 0).then_some(between as i64);
    if archiving_fails(&archiving) || between > 0 {
        archiving.last_error = seen.error.clone();
    }
    archiving
}

/// Whether the last WAL file the primary tried to archive failed.
pub fn archiving_fails(a: &WalArchiving) -> bool {
    match (&a.last_failed_time, &a.last_archived_time) {
        (Some(failed), Some(archived)) => failed >= archived,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The `WALArchiving` condition, with continuous archiving only. False while the last
/// file failed, and on the look after failures that a later push made good (so a short
/// outage between two looks is told, with a Warning, and not missed).
fn wal_archiving_condition(db: &PostgreSQL, archiving: Option<&WalArchiving>) -> Option<Desired> {
    const TYPE: &str = postgresql_types::WAL_ARCHIVING;
    let destination = crate::backup::destination_url(continuous_destination(db)?);
    let timeout = archive_timeout(db).unwrap_or_default();
    let error =
        |a: &WalArchiving| a.last_error.clone().unwrap_or_else(|| "see the primary's log (bosun wal push)".into());
    Some(match archiving {
        None => Desired::unknown(
            TYPE,
            reasons::ARCHIVER_UNKNOWN,
            "the primary's archiver is asked once the primary is Ready",
        ),
        Some(a) if archiving_fails(a) => Desired::new(
            TYPE,
            false,
            reasons::ARCHIVING_FAILED,
            format!(
                "archiving {} to {destination} failed: {}; the primary keeps every WAL file until it is archived, so pg_wal grows meanwhile",
                a.last_failed_wal.as_deref().unwrap_or("a WAL file"),
                error(a),
            ),
        ),
        Some(a @ WalArchiving { recent_failures: Some(n), .. }) => Desired::new(
            TYPE,
            false,
            reasons::ARCHIVING_FAILED,
            format!(
                "{n} WAL file(s) failed to archive to {destination} since the last look, the last {} at {}: {}; \
                 archiving goes on ({} archived at {})",
                a.last_failed_wal.as_deref().unwrap_or("a WAL file"),
                a.last_failed_time.as_deref().unwrap_or_default(),
                error(a),
                a.last_archived_wal.as_deref().unwrap_or_default(),
                a.last_archived_time.as_deref().unwrap_or_default(),
            ),
        ),
        Some(WalArchiving { last_archived_wal: Some(wal), last_archived_time, .. }) => Desired::new(
            TYPE,
            true,
            reasons::ARCHIVING,
            format!(
                "{wal} archived to {destination} at {}; a WAL file is archived at most {timeout}s after it began",
                last_archived_time.as_deref().unwrap_or_default()
            ),
        ),
        Some(_) => Desired::unknown(
            TYPE,
            reasons::ARCHIVER_UNKNOWN,
            format!("no WAL file archived since the primary started; the first goes within {timeout}s"),
        ),
    })
}

/// The destination WAL is archived to, when continuous archiving is asked for (and
/// backups are enabled).
pub fn continuous_destination(db: &PostgreSQL) -> Option<&Destination> {
    let backup = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    backup.continuous.as_ref()?;
    backup.destination.as_ref()
}

/// The server's `archive_timeout` in seconds, when continuous archiving is asked for.
pub fn archive_timeout(db: &PostgreSQL) -> Option<u64> {
    continuous_destination(db)?;
    let given = db.spec.backup.as_ref()?.continuous.as_ref()?.archive_timeout.as_deref();
    let seconds = crate::duration::parse_duration(given.unwrap_or(DEFAULT_ARCHIVE_TIMEOUT))
        .map_or(MAX_ARCHIVE_TIMEOUT, |d| d.as_secs());
    Some(seconds.clamp(1, MAX_ARCHIVE_TIMEOUT))
}

/// The recovery `db` is made by, and the destination of its archive.
pub fn recovery(db: &PostgreSQL) -> Option<(&Recovery, &Destination)> {
    let recovery = db.spec.bootstrap.as_ref()?.recovery.as_ref()?;
    let destination =
        recovery.destination.as_ref().or_else(|| db.spec.backup.as_ref().and_then(|b| b.destination.as_ref()))?;
    Some((recovery, destination))
}

/// Where the instance manager finds the settings of a recovering start (outside the
/// data directory, so a standby cloned later never has them).
pub const RECOVERY_SETTINGS: &str = "/var/lib/postgresql/data/bosun-recovery.conf";

/// The variables of `bosun recover` (run by the instance manager on a first start as
/// the primary with no data).
fn recovery_env(recovery: &Recovery, destination: &Destination) -> Vec<EnvVar> {
    let mut vars = vec![
        crate::backup::namespace_env(instance::RECOVERY_NAMESPACE),
        env(instance::RECOVERY_DESTINATION, crate::backup::destination_url(destination)),
        env(instance::RECOVERY_NAME, backup_name_of(&recovery.source)),
        env(contract::RECOVERY_SETTINGS, RECOVERY_SETTINGS),
    ];
    let optional = [
        (instance::RECOVERY_ENDPOINT, &destination.endpoint),
        (instance::RECOVERY_REGION, &destination.region),
        (contract::RECOVERY_TARGET_TIME, &recovery.target_time),
        (contract::RECOVERY_TARGET_LSN, &recovery.target_lsn),
        (contract::RECOVERY_TARGET_NAME, &recovery.target_name),
    ];
    vars.extend(optional.into_iter().filter_map(|(name, value)| value.as_ref().map(|v| env(name, v.clone()))));
    vars
}

/// Why a recovery cannot start: data is already there, or its archive needs another
/// Secret or claim than the one this database archives to.
fn recovery_refusal(db: &PostgreSQL, sts: Option<&StatefulSet>, claims: &[&PersistentVolumeClaim]) -> Option<String> {
    let (recovery, from) = recovery(db)?;
    let started = sts.is_some() || previous_status(db).is_some_and(|s| s.current_primary.is_some());
    if let (false, Some(claim)) = (started, claims.first()) {
        return Some(format!(
            "spec.bootstrap.recovery: the data claim {} already exists (kept from an earlier PostgreSQL named {}): \
             recovery never writes over data, so nothing is started; delete the claim, or recover under another name",
            claim.name_any(),
            db.name_any()
        ));
    }
    let own = continuous_destination(db)?;
    let same_claim = (own.type_ == DestinationType::Pvc) == (from.type_ == DestinationType::Pvc)
        && (from.type_ != DestinationType::Pvc || own.bucket == from.bucket);
    (own.secret_ref != from.secret_ref || own.encryption != from.encryption || !same_claim).then(|| {
        format!(
            "spec.bootstrap.recovery.destination: recovering from {} (of {}) while archiving to {} needs the same \
             secretRef, encryption (and claim) for both: an instance reaches one archive's credentials and keys",
            crate::backup::destination_url(from),
            recovery.source,
            crate::backup::destination_url(own)
        )
    })
}

/// The init container that puts the runner's `bosun` into [`RUNNER_MOUNT`].
fn runner_container(image: &str, postgres: &Container) -> Container {
    Container {
        name: RUNNER_CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["bosun".to_owned(), "install".to_owned(), format!("{RUNNER_MOUNT}/bosun")]),
        volume_mounts: Some(vec![runner_mount(false)]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("16Mi".to_owned())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: postgres.security_context.clone(),
        ..Container::default()
    }
}

fn runner_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: RUNNER_VOLUME.to_owned(),
        mount_path: RUNNER_MOUNT.to_owned(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// The StatefulSet of `db`, run as `settings` say. `existing` is the StatefulSet as
/// it is, `None` for a new one: its claim template is immutable, so its storage (grown
/// claims are patched one by one) and its major-version label (the claims are
/// relabelled after an upgrade, [`relabel`]) stay. `digest` is
/// [`credentials_digest`] of the Secret.
pub fn desired_statefulset(
    db: &PostgreSQL,
    settings: &Settings,
    existing: Option<&StatefulSet>,
    digest: &str,
) -> StatefulSet {
    let claim_storage = existing.and_then(template_storage);
    let name = db.name_any();
    let secret = secret_name(db);
    let version = db.spec.version;
    let mut pod_labels = labels(db);
    let mut claim_labels = labels(db);
    claim_labels.insert(VERSION_LABEL.to_owned(), version.as_str().to_owned());
    let meta = child_meta(db, name.clone(), claim_labels.clone());
    if let Some(first) = existing.and_then(template_version) {
        claim_labels.insert(VERSION_LABEL.to_owned(), first.to_owned());
    }
    pod_labels.insert(VERSION_LABEL.to_owned(), version.as_str().to_owned());
    // The instance manager (`bosun instance`, copied in by the runner's init
    // container) runs the image's own entrypoint and server as its child.
    let mut command = vec![format!("{RUNNER_MOUNT}/bosun"), "instance".to_owned(), "--".to_owned()];
    command.extend(["docker-entrypoint.sh".to_owned(), "postgres".to_owned()]);
    command.extend(server_args(db));
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image(&settings.image, version)),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(command),
        env: Some(vec![
            secret_env(instance::SUPERUSER, &secret, keys::USERNAME, false),
            secret_env(instance::PASSWORD, &secret, keys::PASSWORD, false),
            env(instance::REPLICATION_USER, REPLICATION_USER),
            secret_env(instance::REPLICATION_PASSWORD, &secret, keys::REPLICATION_PASSWORD, true),
            env(instance::PGDATA, PGDATA),
            env(instance::PORT, PORT.to_string()),
            env(instance::PRIMARY_HOST, name.clone()),
            env(instance::PRIMARY_PORT, PORT.to_string()),
            env(instance::ROLE_FILE, ROLE_FILE),
            env(instance::API_DIR, crate::instances::MOUNT),
            env(instance::API_PORT, API_PORT.to_string()),
        ]),
        ports: Some(vec![
            ContainerPort { name: Some("postgres".to_owned()), container_port: PORT, ..ContainerPort::default() },
            ContainerPort {
                name: Some(API_PORT_NAME.to_owned()),
                container_port: API_PORT,
                ..ContainerPort::default()
            },
        ]),
        volume_mounts: Some(vec![
            VolumeMount { name: DATA_VOLUME.to_owned(), mount_path: DATA_MOUNT.to_owned(), ..VolumeMount::default() },
            VolumeMount {
                name: PODINFO_VOLUME.to_owned(),
                mount_path: PODINFO_MOUNT.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            runner_mount(true),
            crate::instances::mount(),
        ]),
        // Cloning a large primary or replaying WAL takes as long as it takes: up to an
        // hour before liveness may restart an instance.
        startup_probe: Some(Probe { initial_delay_seconds: Some(1), ..api_probe(READY, 2, 1800) }),
        readiness_probe: Some(api_probe(SERVING, 2, 3)),
        liveness_probe: Some(api_probe(READY, 10, 6)),
        resources: Some(crate::meta::requests(crate::meta::SERVER_CPU, crate::meta::SERVER_MEMORY)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), ..Capabilities::default() }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let mut init_containers: Vec<Container> =
        settings.volume_permissions.then(|| volume_permissions(&container)).into_iter().collect();
    init_containers.push(runner_container(&settings.runner_image, &container));
    let runner_volume = Volume {
        name: RUNNER_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let mut volumes = vec![podinfo_volume(), runner_volume, crate::instances::volume(db)];
    let mut container = container;
    let (continuous, recovery) = (continuous_destination(db), recovery(db));
    // The runner reaches the archive as a Backup's run does: the same variables, the
    // Secret's keys, the same mounts; its folder is the database's Backup's. A recovery
    // from another archive has variables of its own (the Secret and claim are the
    // same: `check` refuses others).
    let archive = continuous.or(recovery.map(|(_, d)| d));
    if let Some(destination) = archive {
        // With the archive's encryption keys (its Secret's `identities`, mounted
        // read-only): WAL and base backups are encrypted as the dumps are.
        let reach = crate::backup::reach(destination, &backup_name(db));
        volumes.extend(reach.volumes);
        container.env_from = reach.env_from;
        container.volume_mounts.get_or_insert_with(Vec::new).extend(reach.mounts);
        let env = container.env.get_or_insert_with(Vec::new);
        if continuous.is_some() {
            env.extend(reach.env);
            env.push(self::env(instance::WAL_ERROR_FILE, WAL_ERROR_FILE));
        } else if destination.encryption.is_some() {
            // A recovery only: its keys, named as the runs name them.
            env.push(crate::backup::namespace_env(contract::BACKUP_NAMESPACE));
            env.extend(crate::backup::encryption_env(destination));
        }
    }
    if let Some((recovery, destination)) = recovery {
        container.env.get_or_insert_with(Vec::new).extend(recovery_env(recovery, destination));
    }
    let storage = claim_storage.map(str::to_owned).unwrap_or_else(|| db.spec.storage.clone());
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_owned()),
            labels: Some(claim_labels),
            ..ObjectMeta::default()
        },
        spec: Some(claims::spec(Quantity(storage))),
        status: None,
    };
    let when_deleted = match db.spec.deletion_policy.unwrap_or_default() {
        DeletionPolicy::Retain => "Retain",
        DeletionPolicy::Delete => "Delete",
    };
    StatefulSet {
        metadata: meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(crate::failover::kept_replicas(db)),
            service_name: Some(headless_name(db)),
            selector: LabelSelector { match_labels: Some(labels(db)), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(CREDENTIALS_DIGEST.to_owned(), digest.to_owned())])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    init_containers: (!init_containers.is_empty()).then_some(init_containers),
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(PodSecurityContext {
                        run_as_user: Some(RUN_AS),
                        run_as_group: Some(RUN_AS),
                        fs_group: Some(RUN_AS),
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    termination_grace_period_seconds: Some(30),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![claim]),
            // bosun restarts the instances itself, standbys first and the primary
            // after a switchover (`failover::roll`); the StatefulSet only recreates.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(when_deleted.to_owned()),
                when_scaled: Some("Retain".to_owned()),
            }),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Operator configuration of PostgreSQL instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The image; `{version}` stands for the major version (`--postgres-image`).
    pub image: String,
    /// Hand the data volume to the postgres user before the server starts, for storage
    /// that ignores `fsGroup` (hostPath volumes, as the local cluster's)
    /// (`--postgres-volume-permissions`).
    pub volume_permissions: bool,
    /// The image whose `bosun` archives WAL, copied into each instance with
    /// continuous archiving (`--runner-image`).
    pub runner_image: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            volume_permissions: false,
            runner_image: crate::backup::DEFAULT_RUNNER_IMAGE.to_owned(),
        }
    }
}

/// The init container of [`Settings::volume_permissions`]: the one step that runs as
/// root, with no capability but `CHOWN`, changing the owner of the volume's root only.
fn volume_permissions(postgres: &Container) -> Container {
    Container {
        name: "volume-permissions".to_owned(),
        image: postgres.image.clone(),
        image_pull_policy: postgres.image_pull_policy.clone(),
        command: Some(vec!["chown".to_owned(), format!("{RUN_AS}:{RUN_AS}"), DATA_MOUNT.to_owned()]),
        volume_mounts: postgres.volume_mounts.clone(),
        security_context: Some(SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: Some(vec!["CHOWN".to_owned()]),
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

const PODINFO_VOLUME: &str = "podinfo";

/// The downward-API volume with the pod's role label as the file `role` (empty until
/// bosun sets it).
fn podinfo_volume() -> Volume {
    Volume {
        name: PODINFO_VOLUME.to_owned(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "role".to_owned(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.labels['{ROLE_LABEL}']"),
                    ..ObjectFieldSelector::default()
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
            ..DownwardAPIVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn claim_template(sts: &StatefulSet) -> Option<&PersistentVolumeClaim> {
    sts.spec.as_ref()?.volume_claim_templates.as_ref()?.iter().find(|c| c.name_any() == DATA_VOLUME)
}

/// The storage a StatefulSet's data claim template requests.
pub fn template_storage(sts: &StatefulSet) -> Option<&str> {
    requested(claim_template(sts)?)
}

/// The major-version label of a StatefulSet's data claim template (the major its
/// first claims were made with).
fn template_version(sts: &StatefulSet) -> Option<&str> {
    claim_template(sts)?.labels().get(VERSION_LABEL).map(String::as_str)
}

/// The label patch of a data claim whose major-version label is not `version`: a
/// claim made from the template before an upgrade, or the claims of the upgraded data.
pub fn relabel(claim: &PersistentVolumeClaim, version: Version) -> Option<serde_json::Value> {
    (claim.labels().get(VERSION_LABEL).map(String::as_str) != Some(version.as_str()))
        .then(|| serde_json::json!({"metadata": {"labels": {VERSION_LABEL: version.as_str()}}}))
}

fn service(db: &PostgreSQL, name: String, selector: BTreeMap<String, String>, headless: bool) -> Service {
    Service {
        metadata: child_meta(db, name, labels(db)),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("postgres".to_owned()),
                port: PORT,
                target_port: Some(IntOrString::Int(PORT)),
                ..ServicePort::default()
            }]),
            cluster_ip: headless.then(|| "None".to_owned()),
            publish_not_ready_addresses: headless.then_some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Services of `db`: `<name>` (the pod labelled primary), `<name>-headless` (the
/// StatefulSet's) and, with more than one replica, `<name>-ro` (the standbys).
pub fn desired_services(db: &PostgreSQL) -> Vec<Service> {
    let with = |key: &str, value: String| {
        let mut selector = labels(db);
        selector.insert(key.to_owned(), value);
        selector
    };
    let mut services = vec![
        service(db, db.name_any(), with(ROLE_LABEL, ROLE_PRIMARY.to_owned()), false),
        service(db, headless_name(db), labels(db), true),
    ];
    if db.spec.replicas > 1 {
        services.push(service(db, read_only_name(db), with(ROLE_LABEL, ROLE_REPLICA.to_owned()), false));
    }
    services
}

/// Where the dumps go: the spec's destination, or the claim `<name>-backups`.
fn backup_destination(db: &PostgreSQL) -> Destination {
    let given = db.spec.backup.as_ref().and_then(|b| b.destination.clone());
    given.unwrap_or_else(|| Destination {
        type_: DestinationType::Pvc,
        bucket: backup_claim_name(db),
        prefix: None,
        endpoint: None,
        region: None,
        secret_ref: None,
        encryption: None,
    })
}

/// Whether backups are asked for.
pub fn backups_enabled(db: &PostgreSQL) -> bool {
    db.spec.backup.as_ref().is_some_and(|b| b.enabled)
}

/// The Backup `<name>-backup` of the database through its Service and credentials
/// Secret, when backups are enabled.
pub fn desired_backup(db: &PostgreSQL) -> Option<Backup> {
    let settings = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    // With continuous archiving, base backups (beside the WAL, in the Backup's folder),
    // taken from the standbys' Service while a standby is ready, sparing the primary.
    let continuous = continuous_destination(db).is_some();
    let standby_ready = db.spec.replicas > 1 && previous_status(db).and_then(|s| s.ready_replicas).unwrap_or(0) >= 2;
    let host = if continuous && standby_ready { read_only_name(db) } else { db.name_any() };
    let spec = BackupSpec {
        method: continuous.then_some(Method::Base),
        source: Source {
            type_: SourceType::Postgresql,
            connection: Connection {
                host,
                port: Some(PORT),
                database: DATABASE.to_owned(),
                secret_ref: SecretRef { name: secret_name(db) },
            },
        },
        destination: backup_destination(db),
        schedule: settings.schedule.clone().unwrap_or_else(|| DEFAULT_BACKUP_SCHEDULE.to_owned()),
        retention: Some(settings.retention.clone().unwrap_or_else(|| DEFAULT_BACKUP_RETENTION.to_owned())),
        keep_last: None,
        keep_daily: None,
        keep_weekly: None,
        keep_monthly: None,
        suspend: None,
        active_deadline_seconds: None,
        verify: None,
    };
    let mut backup = Backup::new(&backup_name(db), spec);
    backup.metadata = child_meta(db, backup_name(db), labels(db));
    Some(backup)
}

/// The claim the dumps go to when backups are enabled without a destination: as large
/// as a data volume, and kept when the PostgreSQL is deleted (the dumps are the
/// user's).
pub fn desired_backup_claim(db: &PostgreSQL) -> Option<PersistentVolumeClaim> {
    let settings = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    if settings.destination.is_some() {
        return None;
    }
    Some(PersistentVolumeClaim {
        metadata: kept_meta(db, backup_claim_name(db)),
        spec: Some(claims::spec(Quantity(db.spec.storage.clone()))),
        status: None,
    })
}

/// Why a PostgreSQL's spec is not (or could not be) applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `spec.storage` is below what a data claim already requests.
    Shrink { storage: String, claim: String, current: String },
    /// `spec.version` is below the major version of the data (a downgrade).
    VersionChange { wanted: Version, data: String, holder: String },
    /// The credentials Secret is gone (or lacks a key) while the data exists.
    CredentialsMissing(String),
    /// The apiserver refused a child; its message names the field.
    InvalidSpec(String),
    /// A child's name is held by an object this PostgreSQL does not control.
    NameConflict(String),
    /// `spec.bootstrap.recovery` cannot be done as asked.
    Recovery(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Shrink { .. } => reasons::SHRINK_REFUSED,
            Refusal::VersionChange { .. } => reasons::VERSION_CHANGE_REFUSED,
            Refusal::CredentialsMissing(_) => reasons::CREDENTIALS_MISSING,
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
            Refusal::NameConflict(_) => reasons::NAME_CONFLICT,
            Refusal::Recovery(_) => reasons::RECOVERY_REFUSED,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Shrink { storage, claim, current } => format!(
                "spec.storage {storage} is less than the {current} claim {claim} already requests: Kubernetes \
                 cannot shrink a PersistentVolumeClaim, so nothing is changed and the database runs on; set \
                 spec.storage to {current} or more"
            ),
            Refusal::VersionChange { wanted, data, holder } => format!(
                "spec.version \"{}\" is below the major version \"{data}\" of the existing data ({holder}): \
                 PostgreSQL cannot be downgraded in place (pg_upgrade only goes up), so nothing is changed and \
                 the database runs on; set spec.version back to \"{data}\", or restore a dump into a new \
                 database of the older major",
                wanted.as_str()
            ),
            Refusal::CredentialsMissing(message)
            | Refusal::InvalidSpec(message)
            | Refusal::NameConflict(message)
            | Refusal::Recovery(message) => message.clone(),
        }
    }

    /// Whether the database is left running as it was (the refusal is about a change).
    fn keeps_running(&self) -> bool {
        matches!(self, Refusal::Shrink { .. } | Refusal::VersionChange { .. })
    }
}

/// Whether `db` may change what runs: its major version no lower than the data's (the
/// `VERSION_LABEL` of its claims and StatefulSet: a higher one is an upgrade,
/// [`crate::upgrade`]), and its storage no less than any data claim requests. `claims`
/// are the data claims of `db`.
pub fn check(db: &PostgreSQL, sts: Option<&StatefulSet>, claims: &[&PersistentVolumeClaim]) -> Result<(), Refusal> {
    if let Some(why) = recovery_refusal(db, sts, claims) {
        return Err(Refusal::Recovery(why));
    }
    let wanted = db.spec.version;
    let labelled = sts
        .map(|s| (format!("StatefulSet {}", s.name_any()), s.labels().get(VERSION_LABEL)))
        .into_iter()
        .chain(claims.iter().map(|c| (format!("claim {}", c.name_any()), c.labels().get(VERSION_LABEL))));
    for (holder, version) in labelled {
        if let Some(data) = version.filter(|v| Version::parse(v).is_some_and(|v| v > wanted)) {
            return Err(Refusal::VersionChange { wanted, data: data.clone(), holder });
        }
    }
    let want = quantity::to_units(&db.spec.storage);
    for claim in claims {
        let Some(current) = requested(claim) else { continue };
        if let (Some(want), Some(have)) = (want, quantity::to_units(current))
            && want < have
        {
            return Err(Refusal::Shrink {
                storage: db.spec.storage.clone(),
                claim: claim.name_any(),
                current: current.to_owned(),
            });
        }
    }
    Ok(())
}

/// The storage a claim requests.
pub fn requested(claim: &PersistentVolumeClaim) -> Option<&str> {
    claims::requested(claim).map(|q| q.0.as_str())
}

/// Whether `claim` is a data claim of `db` (`data-<name>-<ordinal>`, labelled for it).
pub fn is_data_claim(db: &PostgreSQL, claim: &PersistentVolumeClaim) -> bool {
    let prefix = format!("{DATA_VOLUME}-{}-", db.name_any());
    claim.namespace() == db.namespace()
        && claim.labels().get("app.kubernetes.io/instance") == Some(&db.name_any())
        && claim.labels().get("app.kubernetes.io/name").map(String::as_str) == Some(APP_NAME)
        && claim
            .name_any()
            .strip_prefix(&prefix)
            .is_some_and(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `claim` requests less than `spec.storage`: it is to be expanded.
pub fn needs_growth(db: &PostgreSQL, claim: &PersistentVolumeClaim) -> bool {
    match (quantity::to_units(&db.spec.storage), requested(claim).and_then(quantity::to_units)) {
        (Some(want), Some(have)) => want > have,
        _ => false,
    }
}

/// Whether every instance of the StatefulSet runs the current spec and is ready.
fn all_ready(db: &PostgreSQL, sts: &StatefulSet) -> bool {
    let Some(status) = sts.status.as_ref() else { return false };
    let wanted = db.spec.replicas;
    let current = status.observed_generation.is_some_and(|g| Some(g) >= sts.metadata.generation);
    current
        && status.ready_replicas.unwrap_or(0) >= wanted
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.replicas <= wanted
}

/// Whether the database is ready: the StatefulSet as observed has every instance ready.
pub fn ready(db: &PostgreSQL, sts: Option<&StatefulSet>) -> bool {
    sts.is_some_and(|s| all_ready(db, s))
}

/// What the world looks like to the status computation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    /// The StatefulSet as applied, or as it is when it was not applied.
    pub statefulset: Option<&'a StatefulSet>,
    pub refusal: Option<&'a Refusal>,
    /// The Backup child, if there is one.
    pub backup: Option<&'a Backup>,
    /// Why the Backup could not be created: its name is someone else's.
    pub backup_conflict: Option<&'a str>,
    /// Why an instance cannot start ([`crate::pods`]), when one cannot.
    pub stuck: Option<&'a str>,
    /// An instance pod that runs on a simulated node ([`crate::pods::simulated`]),
    /// when one does: nothing really runs.
    pub simulated: Option<&'a str>,
    /// The primary ([`crate::failover`]) and the last change of primary.
    pub primary: Option<&'a str>,
    pub last_change: Option<&'a PrimaryChange>,
    /// The primary's archiver, when it was asked (continuous archiving only).
    pub archiving: Option<&'a ArchiverSeen>,
    /// The major upgrade ([`crate::upgrade`]) as it stands after this look, if one is
    /// in progress or failed for the current spec.
    pub upgrade: Option<&'a MajorUpgrade>,
}

/// The status a PostgreSQL should have.
pub fn status(db: &PostgreSQL, observed: Observed<'_>, now: Timestamp) -> PostgreSQLStatus {
    let generation = db.meta().generation;
    let sts = observed.statefulset;
    let ready_replicas = sts.map(|s| s.status.as_ref().and_then(|st| st.ready_replicas).unwrap_or(0));
    let running = ready(db, sts);
    let phase = match (observed.refusal, sts) {
        (Some(r), _) if !r.keeps_running() => Phase::Failed,
        (_, None) => Phase::Pending,
        _ if running => Phase::Running,
        _ => Phase::Provisioning,
    };
    let wanted = db.spec.replicas;
    let upgrade = observed.upgrade.filter(|u| u.step != UpgradeStep::Succeeded);
    let ready = match (observed.refusal, upgrade) {
        (Some(refusal), _) => Desired::new(types::READY, false, refusal.reason(), refusal.message()),
        (None, Some(u)) => {
            let reason = if u.step == UpgradeStep::Failed { reasons::UPGRADE_FAILED } else { reasons::UPGRADING };
            Desired::new(types::READY, false, reason, crate::upgrade::describe(u))
        }
        _ if running => match observed.simulated {
            Some(pod) => Desired::new(
                types::READY,
                true,
                reasons::SIMULATED,
                format!(
                    "{wanted} of {wanted} instances report ready, but on simulated nodes: no container runs (pod {pod} \
                     has none), so no database answers at {}; put the namespace's pods on a real node",
                    endpoint(db)
                ),
            ),
            None => Desired::new(
                types::READY,
                true,
                reasons::RUNNING_READY,
                format!("{wanted} of {wanted} instances ready; clients connect to {}", endpoint(db)),
            ),
        },
        _ if sts.is_none() => Desired::new(types::READY, false, reasons::PENDING, "the StatefulSet is not created yet"),
        _ => match observed.stuck {
            Some(cause) => Desired::new(
                types::READY,
                false,
                reasons::INSTANCE_STUCK,
                format!("{} of {wanted} instances ready; {cause}", ready_replicas.unwrap_or(0)),
            ),
            None => Desired::new(
                types::READY,
                false,
                reasons::PROVISIONING,
                format!("{} of {wanted} instances ready", ready_replicas.unwrap_or(0)),
            ),
        },
    };
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    // Asked on most looks; between them (the primary not Ready, bosun restarted) the
    // last answer stands.
    let before = previous_status(db).and_then(|s| s.wal_archiving.as_ref());
    let wal_archiving = continuous_destination(db)
        .and_then(|_| observed.archiving.map(|seen| observe_archiver(before, seen)).or_else(|| before.cloned()));
    let archiving_condition = wal_archiving_condition(db, wal_archiving.as_ref());
    let (first_recoverable_point, last_recoverable_point) = recoverable(db, observed.backup, wal_archiving.as_ref());
    PostgreSQLStatus {
        first_recoverable_point,
        last_recoverable_point,
        observed_generation: generation,
        phase: Some(phase),
        ready_replicas,
        endpoint: Some(endpoint(db)),
        current_primary: observed.primary.map(str::to_owned).or_else(|| previous_status(db)?.current_primary.clone()),
        last_primary_change: observed.last_change.cloned().or_else(|| previous_status(db)?.last_primary_change.clone()),
        wal_archiving,
        secret_name: Some(secret_name(db)),
        upgrade: observed.upgrade.cloned().or_else(|| previous_status(db)?.upgrade.clone()),
        conditions: conditions::merge(
            previous,
            [Some(ready), Some(backup_configured(db, observed.backup, observed.backup_conflict)), archiving_condition]
                .into_iter()
                .flatten()
                .collect(),
            generation,
            now,
        ),
    }
}

/// The first and last points a recovery can reach, with continuous archiving: the
/// end of the oldest base backup its Backup's last run kept, and the newest archived
/// WAL (each the last known when not known now).
fn recoverable(
    db: &PostgreSQL,
    backup: Option<&Backup>,
    archiving: Option<&WalArchiving>,
) -> (Option<String>, Option<String>) {
    if continuous_destination(db).is_none() {
        return (None, None);
    }
    let previous = previous_status(db);
    let success = backup.and_then(|b| b.status.as_ref()?.last_successful_backup.as_ref());
    let first = success
        .filter(|_| backup.is_some_and(|b| b.spec.method == Some(Method::Base)))
        .and_then(|s| s.oldest_kept.as_ref().map(|t| t.0.to_string()))
        .or_else(|| previous?.first_recoverable_point.clone());
    let last =
        archiving.and_then(|a| a.last_archived_time.clone()).or_else(|| previous?.last_recoverable_point.clone());
    // Nothing is recoverable before a base backup exists, and a base backup alone
    // recovers to its end.
    let at = |t: &Option<String>| t.as_deref().and_then(|t| t.parse::<Timestamp>().ok());
    let last = match (at(&first), at(&last)) {
        (Some(f), Some(l)) if l < f => first.clone(),
        (Some(_), _) => last.or_else(|| first.clone()),
        (None, _) => None,
    };
    (first, last)
}

fn previous_status(db: &PostgreSQL) -> Option<&PostgreSQLStatus> {
    db.status.as_ref()
}

fn backup_configured(db: &PostgreSQL, backup: Option<&Backup>, conflict: Option<&str>) -> Desired {
    const TYPE: &str = postgresql_types::BACKUP_CONFIGURED;
    if !backups_enabled(db) {
        return Desired::new(TYPE, false, reasons::BACKUP_DISABLED, "spec.backup.enabled is not true");
    }
    if let Some(message) = conflict {
        return Desired::new(TYPE, false, reasons::NAME_CONFLICT, message);
    }
    let Some(backup) = backup else {
        return Desired::new(
            TYPE,
            false,
            reasons::WAITING_FOR_DATABASE,
            "the Backup is created once the database is Ready",
        );
    };
    let name = backup.name_any();
    let ready: Option<&Condition> =
        backup.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY));
    match ready {
        Some(c) if c.status == "True" => Desired::new(
            TYPE,
            true,
            reasons::SCHEDULED,
            format!("Backup {name} runs on schedule \"{}\"", backup.spec.schedule),
        ),
        Some(c) => Desired::new(TYPE, false, reasons::BACKUP_NOT_READY, format!("Backup {name}: {}", c.message)),
        None => Desired::new(TYPE, false, reasons::BACKUP_NOT_READY, format!("Backup {name} has no status yet")),
    }
}

#[cfg(test)]
mod tests {
    use bosun_api::postgresql::{BackupSettings, PostgreSQLSpec};
    use k8s_openapi::api::apps::v1::StatefulSetStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn db(yaml: &str) -> PostgreSQL {
        let spec: PostgreSQLSpec = serde_yaml_ng::from_str(yaml).expect("spec");
        let mut db = PostgreSQL::new("test-db", spec);
        db.metadata.namespace = Some("shop".into());
        db.metadata.uid = Some("uid-1".into());
        db.metadata.generation = Some(1);
        db
    }

    fn example() -> PostgreSQL {
        db(r#"{version: "14", storage: 1Gi, replicas: 1}"#)
    }

    fn claim(name: &str, storage: &str, version: &str) -> PersistentVolumeClaim {
        let mut labels = standard_labels(APP_NAME, "test-db");
        labels.insert(VERSION_LABEL.into(), version.into());
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(claims::spec(Quantity(storage.into()))),
            status: None,
        }
    }

    #[test]
    fn the_image_is_the_official_one_of_the_major_version_unless_configured() {
        assert_eq!(image(DEFAULT_IMAGE, Version::V14), "postgres:14");
        assert_eq!(image("registry.local/pg:{version}-alpine", Version::V17), "registry.local/pg:17-alpine");
        assert_eq!(image("localhost/postgres:15", Version::V14), "localhost/postgres:15");
    }

    #[test]
    fn generated_passwords_are_32_unbiased_alphanumerics() {
        let random: Vec<u8> = (0..=255u8).cycle().take(512).collect();
        let p = password(random);
        assert_eq!(p.len(), PASSWORD_LENGTH);
        assert!(p.bytes().all(|b| b.is_ascii_alphanumeric()), "{p}");
        // Bytes of 248 and above would favour the first eight letters: skipped.
        assert_eq!(password([248u8, 255, 0, 61, 62]), "A9A");
    }

    #[test]
    fn the_secret_holds_everything_a_client_needs_and_outlives_the_database() {
        let s = desired_secret(&example(), "p4ss", "r3pl");
        let get = |k: &str| String::from_utf8(s.data.as_ref().unwrap()[k].0.clone()).unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("test-db-credentials"));
        assert_eq!(get(keys::USERNAME), "postgres");
        assert_eq!(get(keys::HOST), "test-db.shop.svc");
        assert_eq!(get(keys::PORT), "5432");
        assert_eq!(get(keys::URI), "postgresql://postgres:p4ss@test-db.shop.svc:5432/postgres");
        assert_eq!(get(keys::PGPASS), "test-db.shop.svc:5432:*:postgres:p4ss\n");
        assert_eq!(get(keys::REPLICATION_PASSWORD), "r3pl");
        assert_eq!(s.metadata.owner_references, None, "deleting the PostgreSQL must not take the password");
        assert_eq!(missing_key(&example(), &s), None);
    }

    #[test]
    fn a_secret_without_the_replication_password_serves_one_replica_only() {
        let mut s = desired_secret(&example(), "p4ss", "r3pl");
        s.data.as_mut().unwrap().remove(keys::REPLICATION_PASSWORD);
        assert_eq!(missing_key(&example(), &s), None);
        let three = db(r#"{version: "14", storage: 1Gi, replicas: 3}"#);
        assert_eq!(missing_key(&three, &s), Some(keys::REPLICATION_PASSWORD));
    }

    #[test]
    fn the_digest_follows_the_passwords_only() {
        let a = desired_secret(&example(), "p4ss", "r3pl");
        let mut b = a.clone();
        b.data.as_mut().unwrap().insert(keys::URI.into(), ByteString(b"other".to_vec()));
        assert_eq!(credentials_digest(&a), credentials_digest(&b));
        b.data.as_mut().unwrap().insert(keys::PASSWORD.into(), ByteString(b"edited".to_vec()));
        assert_ne!(credentials_digest(&a), credentials_digest(&b));
        assert!(!credentials_digest(&a).contains("p4ss"));
    }

    #[test]
    fn the_statefulset_runs_the_image_non_root_with_pgdata_in_a_subdirectory() {
        let sts = desired_statefulset(&example(), &Settings::default(), None, "d1");
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(sts.metadata.name.as_deref(), Some("test-db"));
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.service_name.as_deref(), Some("test-db-headless"));
        let pod = spec.template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("postgres:14"));
        let env = |n: &str| c.env.as_ref().unwrap().iter().find(|e| e.name == n).cloned().unwrap();
        assert_eq!(env("PGDATA").value.as_deref(), Some("/var/lib/postgresql/data/pgdata"));
        assert!(PGDATA.starts_with(&format!("{DATA_MOUNT}/")));
        let pw = env("POSTGRES_PASSWORD").value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!((pw.name.as_str(), pw.key.as_str()), ("test-db-credentials", "password"));
        assert!(c.env.as_ref().unwrap().iter().all(|e| !e.name.contains("PASSWORD") || e.value.is_none()));
        let sc = pod.security_context.as_ref().unwrap();
        assert_eq!((sc.run_as_user, sc.run_as_non_root, sc.fs_group), (Some(999), Some(true), Some(999)));
        let ready = c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(
            (ready.scheme.as_deref(), &ready.port),
            (Some("HTTPS"), &IntOrString::String("instance-api".into()))
        );
        assert!(c.ports.iter().flatten().any(|p| p.name.as_deref() == Some("instance-api")), "the port it names");
        assert!(c.liveness_probe.is_some() && c.startup_probe.is_some());
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(requested(claim), Some("1Gi"));
        assert_eq!(claim.labels().get(VERSION_LABEL).map(String::as_str), Some("14"));
        let policy = spec.persistent_volume_claim_retention_policy.as_ref().unwrap();
        assert_eq!(policy.when_deleted.as_deref(), Some("Retain"));
        let template = spec.template.metadata.as_ref().unwrap();
        assert_eq!(template.annotations.as_ref().unwrap()[CREDENTIALS_DIGEST], "d1");
        let root = |c: &Container| c.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0);
        assert!(!pod.init_containers.iter().flatten().any(root), "nothing runs as root unless configured");
    }

    #[test]
    fn volume_permissions_are_one_chown_of_the_volume_root() {
        let settings =
            Settings { image: "localhost/postgres:15".into(), volume_permissions: true, ..Settings::default() };
        let sts = desired_statefulset(&example(), &settings, None, "d");
        let pod = sts.spec.unwrap().template.spec.unwrap();
        let init = &pod.init_containers.unwrap()[0];
        assert_eq!(init.command.as_ref().unwrap(), &["chown", "999:999", DATA_MOUNT]);
        assert_eq!(init.image.as_deref(), Some("localhost/postgres:15"));
        let caps = init.security_context.as_ref().unwrap().capabilities.as_ref().unwrap();
        assert_eq!(
            (caps.drop.as_deref(), caps.add.as_deref()),
            (Some(&["ALL".to_owned()][..]), Some(&["CHOWN".to_owned()][..]))
        );
    }

    #[test]
    fn the_claim_template_keeps_its_first_size_and_deletion_is_asked_for() {
        let first = desired_statefulset(&db(r#"{version: "13", storage: 1Gi}"#), &Settings::default(), None, "d");
        let db = db(r#"{version: "14", storage: 5Gi, replicas: 1, deletionPolicy: Delete}"#);
        let sts = desired_statefulset(&db, &Settings::default(), Some(&first), "d");
        assert_eq!(sts.labels().get(VERSION_LABEL).map(String::as_str), Some("14"));
        let spec = sts.spec.unwrap();
        let template = &spec.volume_claim_templates.unwrap()[0];
        assert_eq!(requested(template), Some("1Gi"));
        assert_eq!(template.labels().get(VERSION_LABEL).map(String::as_str), Some("13"), "immutable: as it was");
        assert_eq!(spec.persistent_volume_claim_retention_policy.unwrap().when_deleted.as_deref(), Some("Delete"));
    }

    #[test]
    fn wal_is_kept_with_the_setting_of_the_version_and_synchronous_standbys_as_asked() {
        let args = |spec: &str| server_args(&db(spec));
        assert!(args(r#"{version: "12", storage: 1Gi}"#).contains(&"wal_keep_segments=64".to_owned()));
        let thirteen = args(r#"{version: "13", storage: 1Gi}"#);
        assert!(thirteen.contains(&"wal_keep_size=1GB".to_owned()));
        assert!(thirteen.contains(&"wal_log_hints=on".to_owned()), "a former primary can be rewound");
        assert!(!thirteen.iter().any(|a| a.starts_with("synchronous_standby_names")));
        let sync = args(r#"{version: "15", storage: 1Gi, replicas: 3, synchronous: {number: 1}}"#);
        assert!(sync.contains(&"synchronous_standby_names=ANY 1 (*)".to_owned()), "{sync:?}");
        let alone = args(r#"{version: "15", storage: 1Gi, replicas: 1, synchronous: {number: 1}}"#);
        assert!(!alone.iter().any(|a| a.starts_with("synchronous_standby_names")), "no standby to wait for");
    }

    #[test]
    fn continuous_archiving_puts_the_runner_beside_the_server_and_reaches_the_destination() {
        const CONTINUOUS: &str = r#"{version: "15", storage: 1Gi, replicas: 2, backup: {enabled: true,
            destination: {type: s3, bucket: wal, prefix: team, endpoint: "http://minio:9000", secretRef: {name: s3}},
            continuous: {archiveTimeout: 2m}}}"#;
        let plain = desired_statefulset(&example(), &Settings::default(), None, "d");
        let spec = plain.spec.unwrap().template.spec.unwrap();
        let init: Vec<&str> = spec.init_containers.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(init, [RUNNER_CONTAINER], "every instance gets bosun, for its instance manager");
        let postgres = &spec.containers[0];
        assert_eq!(
            postgres.command.as_ref().unwrap()[..5],
            ["/opt/bosun/bin/bosun", "instance", "--", "docker-entrypoint.sh", "postgres"]
        );
        assert!(!postgres.env_from.iter().flatten().any(|e| e.secret_ref.is_some()), "no archive: no credentials");
        assert!(!server_args(&example()).iter().any(|a| a.starts_with("archive")));

        let db = db(CONTINUOUS);
        let settings = Settings { runner_image: "runner:1".into(), ..Settings::default() };
        let sts = desired_statefulset(&db, &settings, None, "d");
        let spec = sts.spec.unwrap().template.spec.unwrap();
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!((init.name.as_str(), init.image.as_deref()), (RUNNER_CONTAINER, Some("runner:1")));
        assert_eq!(init.command.as_ref().unwrap(), &["bosun", "install", "/opt/bosun/bin/bosun"]);
        let postgres = &spec.containers[0];
        let args = postgres.command.as_ref().unwrap();
        for setting in ["archive_mode=on", "archive_command=/opt/bosun/bin/bosun wal push %p", "archive_timeout=120"] {
            assert!(args.contains(&setting.to_owned()), "{setting}: {args:?}");
        }
        let env: BTreeMap<&str, Option<&str>> =
            postgres.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e.value.as_deref())).collect();
        assert_eq!(env["BOSUN_BACKUP_DESTINATION"], Some("s3://wal/team"));
        assert_eq!(env["BOSUN_BACKUP_ENDPOINT"], Some("http://minio:9000"));
        assert_eq!(
            env["BOSUN_BACKUP_NAME"],
            Some("test-db-backup"),
            "the WAL goes under <namespace>/<name>-backup/wal, beside the base backups"
        );
        assert_eq!(env["BOSUN_WAL_ERROR_FILE"], Some(WAL_ERROR_FILE));
        assert_eq!(env["BOSUN_API_DIR"], Some("/etc/bosun-instance"));
        let from = postgres.env_from.as_ref().unwrap()[0].secret_ref.as_ref().unwrap();
        assert_eq!(from.name, "s3");
        let mounts: Vec<&str> =
            postgres.volume_mounts.as_ref().unwrap().iter().map(|m| m.mount_path.as_str()).collect();
        assert!(mounts.contains(&RUNNER_MOUNT), "{mounts:?}");
        let volumes: Vec<&str> = spec.volumes.as_ref().unwrap().iter().map(|v| v.name.as_str()).collect();
        assert!(volumes.contains(&"bosun-runner") && volumes.contains(&"destination-credentials"), "{volumes:?}");

        // Off while backups are off; the default timeout; absurd ones clamped to PostgreSQL's limit.
        let mut off = db.clone();
        off.spec.backup.as_mut().unwrap().enabled = false;
        assert_eq!(archive_timeout(&off), None);
        let mut default = db.clone();
        default.spec.backup.as_mut().unwrap().continuous = Some(Default::default());
        assert_eq!(archive_timeout(&default), Some(60));
        let mut huge = db.clone();
        huge.spec.backup.as_mut().unwrap().continuous.as_mut().unwrap().archive_timeout = Some("99999999h".into());
        assert_eq!(archive_timeout(&huge), Some(MAX_ARCHIVE_TIMEOUT));

        // Its scheduled backups are base backups, from the standbys once one is ready.
        let backup = desired_backup(&db).unwrap();
        assert_eq!(backup.spec.method, Some(Method::Base));
        assert_eq!(backup.spec.source.connection.host, "test-db", "no standby ready yet");
        let mut running = db.clone();
        running.status = Some(PostgreSQLStatus { ready_replicas: Some(2), ..Default::default() });
        assert_eq!(desired_backup(&running).unwrap().spec.source.connection.host, "test-db-ro");
        assert_eq!(desired_backup(&off), None);
        let mut dumps = db.clone();
        dumps.spec.backup.as_mut().unwrap().continuous = None;
        assert_eq!(desired_backup(&dumps).unwrap().spec.method, None, "logical dumps without continuous archiving");
    }

    const RECOVERED: &str = r#"{version: "15", storage: 1Gi, bootstrap: {recovery: {source: orders,
        destination: {type: s3, bucket: wal, endpoint: "http://minio:9000", secretRef: {name: s3}},
        targetTime: "2026-11-26T14:03:00Z"}}}"#;

    #[test]
    fn a_recovered_database_gets_the_runner_and_its_archive_without_archiving_itself() {
        let db = db(RECOVERED);
        let spec = desired_statefulset(&db, &Settings::default(), None, "d").spec.unwrap().template.spec.unwrap();
        assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, RUNNER_CONTAINER);
        let postgres = &spec.containers[0];
        let env: BTreeMap<&str, Option<&str>> =
            postgres.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e.value.as_deref())).collect();
        assert_eq!(env["BOSUN_RECOVERY_DESTINATION"], Some("s3://wal"));
        assert_eq!(env["BOSUN_RECOVERY_ENDPOINT"], Some("http://minio:9000"));
        assert_eq!(env["BOSUN_RECOVERY_NAME"], Some("orders-backup"));
        assert_eq!(env["BOSUN_RECOVERY_TARGET_TIME"], Some("2026-11-26T14:03:00Z"));
        assert_eq!(env["BOSUN_RECOVERY_SETTINGS"], Some(RECOVERY_SETTINGS));
        assert!(!env.contains_key("BOSUN_BACKUP_DESTINATION"), "it does not archive: no continuous backup asked");
        assert_eq!(postgres.env_from.as_ref().unwrap()[0].secret_ref.as_ref().unwrap().name, "s3");
        assert!(!server_args(&db).iter().any(|a| a.starts_with("archive")));
        // Readiness waits for the promotion; liveness does not (a recovery takes its time).
        let probe = |p: &Option<Probe>| p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone().unwrap();
        assert_eq!(probe(&postgres.readiness_probe), "/readyz");
        assert_eq!(probe(&postgres.liveness_probe), "/healthz");
        assert_eq!(probe(&postgres.startup_probe), "/healthz");
    }

    #[test]
    fn an_encrypted_archive_gives_the_server_and_the_recovery_the_key_and_nothing_else_of_the_secret() {
        let env_of = |db: &PostgreSQL| {
            let spec = desired_statefulset(db, &Settings::default(), None, "d").spec.unwrap().template.spec.unwrap();
            let postgres = spec.containers[0].clone();
            let env: BTreeMap<String, Option<String>> =
                postgres.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone())).collect();
            (env, spec, postgres)
        };
        let sealed = r#"{version: "15", storage: 1Gi, replicas: 2, backup: {enabled: true,
            destination: {type: s3, bucket: wal, secretRef: {name: s3}, encryption: {secretRef: {name: archive-key}}},
            continuous: {}}}"#;
        let (env, spec, postgres) = env_of(&db(sealed));
        assert_eq!(
            env["BOSUN_BACKUP_ENCRYPTION_KEY_FILE"].as_deref(),
            Some("/var/run/secrets/bosun/encryption/identities")
        );
        assert_eq!(
            env["BOSUN_BACKUP_ENCRYPTION_KEY_NAME"].as_deref(),
            Some("Secret $(BOSUN_BACKUP_NAMESPACE)/archive-key (key identities)")
        );
        let key = spec.volumes.iter().flatten().find(|v| v.name == "encryption-key").expect("the key's volume");
        let items = key.secret.as_ref().unwrap().items.clone().unwrap();
        assert_eq!((items.len(), items[0].key.as_str()), (1, "identities"), "only the identities are mounted");
        assert!(
            postgres.volume_mounts.iter().flatten().any(|m| m.name == "encryption-key" && m.read_only == Some(true))
        );

        // A recovery only: the same key, and the namespace its name refers to.
        let recovered = RECOVERED
            .replace("secretRef: {name: s3}}", "secretRef: {name: s3}, encryption: {secretRef: {name: archive-key}}}");
        let (env, _, _) = env_of(&db(&recovered));
        assert!(env.contains_key("BOSUN_BACKUP_ENCRYPTION_KEY_FILE") && env.contains_key("BOSUN_BACKUP_NAMESPACE"));
        // Without encryption, nothing of it: the pods of existing databases do not change.
        let (env, _, _) = env_of(&db(RECOVERED));
        assert!(!env.contains_key("BOSUN_BACKUP_ENCRYPTION_KEY_FILE") && !env.contains_key("BOSUN_BACKUP_NAMESPACE"));

        // Recovering from one archive while archiving to another needs the same keys.
        let mut both = db(&recovered);
        both.spec.backup = Some(
            serde_yaml_ng::from_str(
                r#"{enabled: true, destination: {type: s3, bucket: mine, secretRef: {name: s3}}, continuous: {}}"#,
            )
            .unwrap(),
        );
        let refused = check(&both, None, &[]).unwrap_err();
        assert!(refused.message().contains("encryption"), "{}", refused.message());
    }

    #[test]
    fn a_recovery_onto_existing_data_or_through_another_secret_is_refused() {
        let db = db(RECOVERED);
        let kept = claim("data-test-db-0", "1Gi", "15");
        let refused = check(&db, None, &[&kept]).unwrap_err();
        assert_eq!(refused.reason(), reasons::RECOVERY_REFUSED);
        assert!(refused.message().contains("data-test-db-0 already exists"), "{}", refused.message());
        assert!(check(&db, None, &[]).is_ok());
        let sts = desired_statefulset(&db, &Settings::default(), None, "d");
        assert!(check(&db, Some(&sts), &[&kept]).is_ok(), "its own claims, once it runs");

        let mut both = db.clone();
        both.spec.backup = Some(
            serde_yaml_ng::from_str(
                r#"{enabled: true, destination: {type: s3, bucket: mine, secretRef: {name: other}}, continuous: {}}"#,
            )
            .unwrap(),
        );
        let refused = check(&both, None, &[]).unwrap_err();
        assert!(refused.message().starts_with("spec.bootstrap.recovery.destination"), "{}", refused.message());
        both.spec.backup.as_mut().unwrap().destination.as_mut().unwrap().secret_ref =
            Some(bosun_api::backup::SecretRef { name: "s3".into() });
        assert!(check(&both, None, &[]).is_ok(), "one Secret for both archives");
    }

    #[test]
    fn the_archivers_answer_becomes_the_status_and_the_condition() {
        let db = db(r#"{version: "15", storage: 1Gi, backup: {enabled: true,
            destination: {type: s3, bucket: wal}, continuous: {}}}"#);
        // What one look saw, as the status keeps it after a look before it (`previous`):
        // the primary's instance's status, from `pg_stat_archiver`'s row and the
        // runner's error (`row\nerror`).
        let instance = |output: &str| {
            let (row, error) = output.split_once('\n').unwrap_or((output, ""));
            let server = bosun_instance::status::Server {
                archiver: Some(bosun_instance::status::parse_archiver(row).unwrap()),
                ..Default::default()
            };
            let error = Some(error.trim().to_owned()).filter(|e| !e.is_empty());
            bosun_instance::status::Status { server: Some(server), archive_error: error, ..Default::default() }
        };
        let wal_archiving = |output: &str| archiver_seen(&instance(output));
        let look =
            |output: &str, previous: Option<&WalArchiving>| observe_archiver(previous, &wal_archiving(output).unwrap());
        let healthy_seen = wal_archiving("000000010000000000000007|1764158400|||0\n").unwrap();
        let healthy = look("000000010000000000000007|1764158400|||0\n", None);
        assert_eq!(healthy.last_archived_wal.as_deref(), Some("000000010000000000000007"));
        assert_eq!(healthy.last_archived_time.as_deref(), Some("2025-11-26T12:00:00Z"));
        assert_eq!((healthy.failed_count, healthy.recent_failures), (Some(0), None));
        assert!(!archiving_fails(&healthy) && healthy.last_error.is_none());
        let c = wal_archiving_condition(&db, Some(&healthy)).unwrap();
        assert_eq!((c.status, c.reason), ("True", reasons::ARCHIVING));

        // A failure newer than the last success is the state, with the runner's words.
        let failing = look(
            "000000010000000000000007|1764158400|000000010000000000000008|1764158460|3\nupload failed: connection refused\n",
            Some(&healthy),
        );
        assert!(archiving_fails(&failing));
        assert_eq!(failing.recent_failures, Some(3), "three failed pushes since the last look");
        let c = wal_archiving_condition(&db, Some(&failing)).unwrap();
        assert_eq!((c.status, c.reason), ("False", reasons::ARCHIVING_FAILED));
        assert!(
            c.message.contains("000000010000000000000008") && c.message.contains("connection refused"),
            "{}",
            c.message
        );
        // Failures a later push made good between two looks: False on this look, with
        // the runner's words and how many; True on the next, which saw none.
        let between =
            "000000010000000000000009|1764158520|000000010000000000000008|1764158460|2\nupload failed: timeout\n";
        let outage = look(between, Some(&healthy));
        assert!(!archiving_fails(&outage));
        assert_eq!((outage.recent_failures, outage.last_error.as_deref()), (Some(2), Some("upload failed: timeout")));
        let c = wal_archiving_condition(&db, Some(&outage)).unwrap();
        assert_eq!((c.status, c.reason), ("False", reasons::ARCHIVING_FAILED));
        for part in ["2 WAL file(s) failed", "000000010000000000000008", "upload failed: timeout", "archiving goes on"]
        {
            assert!(c.message.contains(part), "{part:?} not in {}", c.message);
        }
        let next = look(between, Some(&outage));
        assert_eq!((next.recent_failures, next.last_error.as_deref()), (None, None), "{next:?}");
        assert_eq!(wal_archiving_condition(&db, Some(&next)).unwrap().status, "True");
        // Counted across a reset of the counter (a restart, another primary) when the
        // last failure moved; a first look counts nothing it did not see happen.
        let mut reset = wal_archiving(between).unwrap().archiving;
        reset.last_failed_time = Some("2025-11-26T12:30:00Z".into());
        reset.failed_count = Some(0);
        assert_eq!(failures_between(Some(&outage), &reset), 1);
        reset.failed_count = Some(4);
        assert_eq!(failures_between(Some(&outage), &reset), 2, "the counter's growth");
        assert_eq!(failures_between(None, &reset), 0);
        // An older failure, since overtaken and already seen, is history: no error, True.
        let recovered =
            look("000000010000000000000009|1764158520|000000010000000000000008|1764158460|2\nold\n", Some(&outage));
        assert!(!archiving_fails(&recovered) && recovered.last_error.is_none());
        // Nothing archived yet, or not asked: Unknown. Without continuous archiving: none.
        let fresh = look("||||0\n", None);
        assert_eq!(wal_archiving_condition(&db, Some(&fresh)).unwrap().status, "Unknown");
        assert_eq!(wal_archiving_condition(&db, None).unwrap().status, "Unknown");

        // The recoverable range: from the oldest base backup kept to the newest WAL.
        let now: Timestamp = "2025-11-26T13:00:00Z".parse().unwrap();
        let seen = Observed { archiving: Some(&healthy_seen), ..Default::default() };
        let s = status(&db, seen, now);
        assert_eq!((s.first_recoverable_point, s.last_recoverable_point), (None, None), "no base backup yet");
        let mut backup = desired_backup(&db).unwrap();
        backup.status = Some(bosun_api::backup::BackupStatus {
            last_successful_backup: Some(bosun_api::backup::SuccessfulBackup {
                time: Time("2025-11-26T02:00:09Z".parse().unwrap()),
                key: "ns/test-db-backup/base/x.base.tar.zst".into(),
                size: 1,
                job: None,
                oldest_kept: Some(Time("2025-11-20T02:00:07Z".parse().unwrap())),
            }),
            ..Default::default()
        });
        let seen = Observed { archiving: Some(&healthy_seen), backup: Some(&backup), ..Default::default() };
        let s = status(&db, seen, now);
        assert_eq!(s.first_recoverable_point.as_deref(), Some("2025-11-20T02:00:07Z"));
        assert_eq!(s.last_recoverable_point.as_deref(), Some("2025-11-26T12:00:00Z"));
        // WAL archived before the oldest base backup ended does not end the range before it.
        let old = wal_archiving("000000010000000000000007|1763604000|||0\n").unwrap();
        let seen = Observed { archiving: Some(&old), backup: Some(&backup), ..Default::default() };
        assert_eq!(status(&db, seen, now).last_recoverable_point.as_deref(), Some("2025-11-20T02:00:07Z"));
        assert_eq!(wal_archiving_condition(&example(), Some(&healthy)), None);
        // A standby's or a silent server's status: nothing.
        let mut standby = instance("||||0\n");
        standby.server.as_mut().unwrap().in_recovery = true;
        assert_eq!(archiver_seen(&standby), None);
        assert_eq!(archiver_seen(&bosun_instance::status::Status::default()), None);

        // The status keeps the last answer while the archiver cannot be asked.
        let mut asked = db.clone();
        asked.status =
            Some(status(&db, Observed { archiving: Some(&healthy_seen), ..Default::default() }, Timestamp::UNIX_EPOCH));
        let later = status(&asked, Observed::default(), Timestamp::UNIX_EPOCH);
        assert_eq!(later.wal_archiving.as_ref(), Some(&healthy));
        assert_eq!(
            status(
                &example(),
                Observed { archiving: Some(&healthy_seen), ..Default::default() },
                Timestamp::UNIX_EPOCH
            )
            .wal_archiving,
            None
        );
    }

    #[test]
    fn services_select_the_primary_all_and_the_standbys() {
        let one = desired_services(&example());
        assert_eq!(one.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["test-db", "test-db-headless"]);
        let selector = |s: &Service| s.spec.as_ref().unwrap().selector.clone().unwrap();
        assert_eq!(selector(&one[0])[ROLE_LABEL], ROLE_PRIMARY, "whichever instance bosun made the primary");
        assert_eq!(one[1].spec.as_ref().unwrap().cluster_ip.as_deref(), Some("None"));
        let three = desired_services(&db(r#"{version: "14", storage: 1Gi, replicas: 3}"#));
        assert_eq!(three[2].name_any(), "test-db-ro");
        assert_eq!(selector(&three[2])[ROLE_LABEL], ROLE_REPLICA);
    }

    #[test]
    fn backups_point_at_the_service_and_secret_and_default_to_a_claim() {
        assert!(desired_backup(&example()).is_none());
        let db = db(r#"{version: "14", storage: 3Gi, replicas: 1, backup: {enabled: true}}"#);
        let b = desired_backup(&db).unwrap();
        assert_eq!(b.metadata.name.as_deref(), Some("test-db-backup"));
        assert_eq!(b.spec.source.connection.host, "test-db");
        assert_eq!(b.spec.source.connection.secret_ref.name, "test-db-credentials");
        assert_eq!(
            (b.spec.destination.type_, b.spec.destination.bucket.as_str()),
            (DestinationType::Pvc, "test-db-backups")
        );
        assert_eq!((b.spec.schedule.as_str(), b.spec.retention.as_deref()), ("0 2 * * *", Some("7d")));
        assert_eq!(b.metadata.owner_references.as_ref().unwrap()[0].kind, "PostgreSQL");
        let claim = desired_backup_claim(&db).unwrap();
        assert_eq!((claim.name_any(), requested(&claim)), ("test-db-backups".to_owned(), Some("3Gi")));
        assert_eq!(claim.metadata.owner_references, None, "the dumps outlive the database");
        let mut given = db.clone();
        given.spec.backup = Some(BackupSettings {
            enabled: true,
            schedule: Some("0 3 * * *".into()),
            retention: Some("30d".into()),
            destination: Some(Destination {
                type_: DestinationType::S3,
                bucket: "dumps".into(),
                prefix: None,
                endpoint: None,
                region: None,
                secret_ref: None,
                encryption: None,
            }),
            continuous: None,
        });
        assert!(desired_backup_claim(&given).is_none());
        let b = desired_backup(&given).unwrap();
        assert_eq!((b.spec.destination.bucket.as_str(), b.spec.retention.as_deref()), ("dumps", Some("30d")));
    }

    #[test]
    fn a_smaller_storage_or_a_lower_major_version_is_refused() {
        let grown = db(r#"{version: "14", storage: 2Gi, replicas: 1}"#);
        let c = claim("data-test-db-0", "1Gi", "14");
        assert_eq!(check(&grown, None, &[&c]), Ok(()));
        assert!(needs_growth(&grown, &c));
        assert!(is_data_claim(&grown, &c));
        assert!(!is_data_claim(&grown, &claim("test-db-backups", "1Gi", "14")));
        let c2 = claim("data-test-db-0", "2Gi", "14");
        let Err(r) = check(&example(), None, &[&c2]) else { panic!("a shrink was accepted") };
        assert_eq!(r.reason(), "ShrinkRefused");
        assert!(r.message().contains("spec.storage 1Gi") && r.message().contains("2Gi"), "{}", r.message());
        let fifteen = db(r#"{version: "15", storage: 1Gi, replicas: 1}"#);
        assert_eq!(check(&fifteen, None, &[&claim("data-test-db-0", "1Gi", "14")]), Ok(()), "an upgrade");
        let thirteen = db(r#"{version: "13", storage: 1Gi, replicas: 1}"#);
        let Err(r) = check(&thirteen, None, &[&claim("data-test-db-0", "1Gi", "14")]) else {
            panic!("a downgrade was accepted")
        };
        assert_eq!(r.reason(), "VersionChangeRefused");
        assert!(
            r.message().contains("spec.version \"13\" is below") && r.message().contains("\"14\""),
            "{}",
            r.message()
        );
    }

    fn sts(ready: i32, replicas: i32) -> StatefulSet {
        let mut s = desired_statefulset(&example(), &Settings::default(), None, "d");
        s.metadata.generation = Some(1);
        s.status = Some(StatefulSetStatus {
            observed_generation: Some(1),
            replicas,
            ready_replicas: Some(ready),
            updated_replicas: Some(replicas),
            ..Default::default()
        });
        s
    }

    fn cond<'a>(s: &'a PostgreSQLStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn status_goes_pending_provisioning_running() {
        let db = example();
        let now = Timestamp::UNIX_EPOCH;
        let s = status(&db, Observed::default(), now);
        assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Pending), None));
        assert_eq!(s.endpoint.as_deref(), Some("test-db.shop.svc:5432"));
        assert_eq!(s.secret_name.as_deref(), Some("test-db-credentials"));
        let starting = sts(0, 1);
        let s = status(&db, Observed { statefulset: Some(&starting), ..Default::default() }, now);
        assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Provisioning), Some(0)));
        assert_eq!(cond(&s, "Ready").status, "False");
        // An instance that cannot start is named, with its cause.
        let cause = "pod test-db-0: container postgres cannot get its image localhost/postgres:17 (ErrImageNeverPull)";
        let s = status(&db, Observed { statefulset: Some(&starting), stuck: Some(cause), ..Default::default() }, now);
        assert_eq!(s.phase, Some(Phase::Provisioning));
        assert_eq!(cond(&s, "Ready").reason, "InstanceStuck");
        assert_eq!(cond(&s, "Ready").message, format!("0 of 1 instances ready; {cause}"));
        let running = sts(1, 1);
        let s = status(&db, Observed { statefulset: Some(&running), ..Default::default() }, now);
        assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Running), Some(1)));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Ready").reason, "AllReplicasReady");
        assert_eq!(
            (cond(&s, "BackupConfigured").status.as_str(), cond(&s, "BackupConfigured").reason.as_str()),
            ("False", "BackupDisabled")
        );
        // On a fake node: ready as far as waiting goes, but said to run nothing.
        let s = status(
            &db,
            Observed { statefulset: Some(&running), simulated: Some("test-db-0"), ..Default::default() },
            now,
        );
        assert_eq!(
            (cond(&s, "Ready").status.as_str(), cond(&s, "Ready").reason.as_str()),
            ("True", "SimulatedOnFakeNodes")
        );
        let message = &cond(&s, "Ready").message;
        assert!(message.contains("no container runs (pod test-db-0 has none)"), "{message}");
    }

    #[test]
    fn a_refused_change_leaves_the_phase_of_what_runs() {
        let running = sts(1, 1);
        let refusal = Refusal::Shrink { storage: "1Gi".into(), claim: "data-test-db-0".into(), current: "2Gi".into() };
        let s = status(
            &example(),
            Observed { statefulset: Some(&running), refusal: Some(&refusal), ..Default::default() },
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(s.phase, Some(Phase::Running));
        assert_eq!((cond(&s, "Ready").status.as_str(), cond(&s, "Ready").reason.as_str()), ("False", "ShrinkRefused"));
        let conflict = Refusal::NameConflict("taken".into());
        let s = status(&example(), Observed { refusal: Some(&conflict), ..Default::default() }, Timestamp::UNIX_EPOCH);
        assert_eq!(s.phase, Some(Phase::Failed));
    }

    #[test]
    fn backup_configured_follows_the_backup() {
        let db = db(r#"{version: "14", storage: 1Gi, replicas: 1, backup: {enabled: true}}"#);
        let now = Timestamp::UNIX_EPOCH;
        let s = status(&db, Observed::default(), now);
        assert_eq!(cond(&s, "BackupConfigured").reason, "WaitingForDatabase");
        let mut b = desired_backup(&db).unwrap();
        b.status = Some(bosun_api::backup::BackupStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Scheduled".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
                observed_generation: None,
            }],
            ..Default::default()
        });
        let s = status(&db, Observed { backup: Some(&b), ..Default::default() }, now);
        assert_eq!(
            (cond(&s, "BackupConfigured").status.as_str(), cond(&s, "BackupConfigured").reason.as_str()),
            ("True", "Scheduled")
        );
    }
}
