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
//! ```text
//! mod.rs ──────── names, labels, the fixed values
//! check ───────── what refuses a spec before anything is applied (Refusal)
//! secret ──────── the credentials Secret
//! statefulset ─── the instances: pod template, the instance manager's variables, probes, claims
//! services ────── read-write, read-only, headless
//! archiving ───── continuous archiving: server settings, the archiver's status and condition
//! recovery ────── a new database made from an archive (spec.bootstrap.recovery)
//! backups ─────── the Backup spec.backup asks for
//! lost ────────── an instance whose data is only on a lost node: found, replaced when asked
//! status ──────── the world → PostgreSQLStatus
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
    AntiAffinityType, DeletionPolicy, InstanceStatus, MajorUpgrade, Phase, PoolerStatus, PostgreSQL, PostgreSQLStatus,
    PrimaryChange, Recovery, ServerCertificate, UpgradeStep, Version, WalArchiving,
};
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm};
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

mod archiving;
mod backups;
mod check;
pub mod lost;
mod pooler;
mod recovery;
mod secret;
mod services;
mod statefulset;
mod status;

pub use archiving::*;
pub use backups::*;
pub use check::*;
pub use pooler::*;
pub use recovery::*;
pub use secret::*;
pub use services::*;
pub use statefulset::*;
pub use status::*;
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
/// What the server and its instance manager write outside the data: the socket
/// directory (and its lock files), and `/tmp` (the passfile, `pg_hba.conf`, a role
/// told directly, an upgrade's private socket). emptyDirs, so that the root file
/// system is read-only.
pub const WRITABLE: [(&str, &str); 2] = [("run", "/var/run/postgresql"), ("tmp", "/tmp")];

/// Every database pod's (the instances', the pooler's): as the postgres user, never
/// root, with the runtime's default seccomp profile (the `restricted` standard).
fn as_postgres() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), ..SeccompProfile::default() }),
        ..PodSecurityContext::default()
    }
}

/// Their main containers': no capability, no escalation, a read-only root.
fn locked_down() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), ..Capabilities::default() }),
        ..SecurityContext::default()
    }
}

/// The volumes of [`WRITABLE`] and their mounts.
pub fn writable() -> (Vec<Volume>, Vec<VolumeMount>) {
    WRITABLE
        .iter()
        .map(|(name, path)| {
            let volume = Volume {
                name: (*name).to_owned(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            };
            let mount =
                VolumeMount { name: (*name).to_owned(), mount_path: (*path).to_owned(), ..VolumeMount::default() };
            (volume, mount)
        })
        .unzip()
}

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
    /// The application Secret's (`<name>-app`) own keys, beside username, password,
    /// host, port, uri and pgpass.
    pub const DBNAME: &str = "dbname";
    pub const JDBC_URI: &str = "jdbc-uri";
    /// The Secret whose `ca.crt` verifies the server (`<name>-ca`).
    pub const CA_SECRET: &str = "ca-secret";
}
/// `spec.owner`'s and `spec.database`'s default.
pub const DEFAULT_APPLICATION: &str = "app";
/// The application's role: `spec.owner`, or [`DEFAULT_APPLICATION`].
pub fn owner(db: &PostgreSQL) -> &str {
    db.spec.owner.as_deref().unwrap_or(DEFAULT_APPLICATION)
}
/// The application's database: `spec.database`, or [`DEFAULT_APPLICATION`].
pub fn app_database(db: &PostgreSQL) -> &str {
    db.spec.database.as_deref().unwrap_or(DEFAULT_APPLICATION)
}
/// The application's credentials: `<name>-app`.
pub fn app_secret_name(db: &PostgreSQL) -> String {
    format!("{}-app", db.name_any())
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
    claim_of_pod(&pod_name(db, ordinal))
}
/// The data claim of the instance whose pod is `pod`.
pub fn claim_of_pod(pod: &str) -> String {
    format!("{DATA_VOLUME}-{pod}")
}
/// The pod of instance `ordinal`.
pub fn pod_name(db: &PostgreSQL, ordinal: i32) -> String {
    format!("{}-{ordinal}", db.name_any())
}
/// The primary's address inside the cluster.
/// Whether the superuser may log in over the network (`spec.enableSuperuserAccess`,
/// default true: the contract's `<name>-credentials` is for clients).
pub fn superuser_access(db: &PostgreSQL) -> bool {
    db.spec.enable_superuser_access.unwrap_or(true)
}

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

#[cfg(test)]
mod tests;
