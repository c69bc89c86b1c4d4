//! PostgreSQL (`database.example.com/v1`): a database per resource — a StatefulSet of
//! the official image, its credentials, its Services and, once it is Ready, its backups.
//!
//! ```yaml
//! apiVersion: database.example.com/v1
//! kind: PostgreSQL
//! metadata: {name: test-db}
//! spec: {version: "14", storage: 1Gi, replicas: 1}
//! ```
//!
//! The schema refuses what a rule can tell: an unknown major version, a storage size
//! that is not whole GiB or is zero, a replica count outside 1–5, a backup schedule or
//! retention that does not parse. The controller refuses what only the running
//! database tells: a smaller storage than the claims have, another major version than
//! the data directory's.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::backup::{Destination, retention_rule, schedule_rule};
use crate::conditions::Condition;

/// The annotation that asks for a switchover: its value names the standby (its pod,
/// e.g. `test-db-1`) to become the primary. bosun removes it once done or refused;
/// the outcome is in `status.lastPrimaryChange` and an event.
pub const SWITCHOVER_ANNOTATION: &str = "database.example.com/switchover-to";

/// The annotation that allows bosun to replace an instance whose data lives only on
/// a lost node (a local volume; `status.instances[].dataOnLostNode` names the node):
/// its value names the instance (its pod, e.g. `test-db-1`). bosun keeps the lost
/// volume (its PersistentVolume is set to `Retain`), deletes the claim and the pod,
/// and the StatefulSet makes both again where a node can take them; the new
/// instance clones the primary. It waits while Kubernetes still holds the node
/// Ready, refuses the primary (fail over first) and an instance whose data is not on
/// a lost node, and removes the annotation once done or refused (an event says which).
pub const REPLACE_ANNOTATION: &str = "database.example.com/replace-instance";

/// A major version of PostgreSQL.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub enum Version {
    #[serde(rename = "12")]
    V12,
    #[serde(rename = "13")]
    V13,
    #[serde(rename = "14")]
    V14,
    #[serde(rename = "15")]
    V15,
    #[serde(rename = "16")]
    V16,
    #[serde(rename = "17")]
    V17,
}

impl Version {
    /// The major version number, as the image tag and the data directory name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V12 => "12",
            Version::V13 => "13",
            Version::V14 => "14",
            Version::V15 => "15",
            Version::V16 => "16",
            Version::V17 => "17",
        }
    }

    /// The version named `text` ("12" to "17").
    pub fn parse(text: &str) -> Option<Version> {
        [Version::V12, Version::V13, Version::V14, Version::V15, Version::V16, Version::V17]
            .into_iter()
            .find(|v| v.as_str() == text)
    }
}

/// What happens to the data when the PostgreSQL is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum DeletionPolicy {
    /// Keep the data claims and the credentials Secret: a PostgreSQL created again
    /// under the same name finds its data and its password.
    #[default]
    Retain,
    /// Delete the data claims with the StatefulSet. Dumps already taken and the
    /// credentials Secret are kept.
    Delete,
}

/// Scheduled logical dumps of the database, through a Backup `<name>-backup`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSettings {
    /// Take backups (once the database is Ready).
    #[serde(default)]
    pub enabled: bool,
    /// When to run, as a cron expression; default `0 2 * * *`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = schedule_rule("spec.backup.schedule"))]
    pub schedule: Option<String>,
    /// Delete dumps older than this, e.g. `30d`; default `7d`. The newest good dump is
    /// always kept. With `continuous`, the recovery window: base backups that ended in
    /// it are kept, and the newest one before it with the WAL it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32))]
    #[x_kube(validation = retention_rule("spec.backup.retention"))]
    pub retention: Option<String>,
    /// Where the dumps go (as a Backup's `destination`); default: a claim
    /// `<name>-backups` of the size of `spec.storage`, kept when the PostgreSQL is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
    /// Continuous archiving of the write-ahead log to `destination`, under
    /// `<prefix>/<namespace>/<name>-backup/wal/`: every finished WAL file is shipped as
    /// soon as the server completes it, and the scheduled backups become physical base
    /// backups beside it (`base/`), kept by `retention` as a recovery window. Needs a
    /// `destination` (an object store, or a claim every instance can mount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<Continuous>,
}

/// `spec.backup.continuous`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Continuous {
    /// The server's `archive_timeout`: a WAL file that is not full is archived anyway
    /// after this long, e.g. `60s` (the default) or `5m`. It bounds what a loss of
    /// every instance and its volume can take: the transactions of at most this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16), regex(pattern = r"^[1-9][0-9]*(s|m|h)$"))]
    pub archive_timeout: Option<String>,
}

/// A PostgreSQL database of one major version: a primary and, with `replicas > 1`,
/// streaming hot standbys.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "database.example.com",
    version = "v1",
    kind = "PostgreSQL",
    plural = "postgresqls",
    namespaced,
    status = "PostgreSQLStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 37")
        .message("metadata.name may have at most 37 characters: its Backup <name>-backup may have at most 44"),
    validation = Rule::new("!has(self.spec.synchronous) || self.spec.synchronous.number < self.spec.replicas")
        .message("spec.synchronous.number must be less than spec.replicas: each synchronous standby is an instance besides the primary"),
    validation = Rule::new("!has(self.spec.backup) || !has(self.spec.backup.continuous) || has(self.spec.backup.destination)")
        .message("spec.backup.continuous needs spec.backup.destination: every instance archives WAL there, and the default claim <name>-backups can be mounted by one pod only"),
    validation = Rule::new("!has(self.spec.bootstrap) || !has(self.spec.bootstrap.recovery) || has(self.spec.bootstrap.recovery.destination) || (has(self.spec.backup) && has(self.spec.backup.destination))")
        .message("spec.bootstrap.recovery needs a destination: spec.bootstrap.recovery.destination, or spec.backup.destination when the archive is there"),
    validation = Rule::new("has(self.spec.bootstrap) == has(oldSelf.spec.bootstrap) && (!has(self.spec.bootstrap) || self.spec.bootstrap == oldSelf.spec.bootstrap)")
        .message("spec.bootstrap is immutable: it says how the database was first made; create a new PostgreSQL to recover again"),
    validation = Rule::new("!has(self.spec.enableSuperuserAccess) || self.spec.enableSuperuserAccess || !has(self.spec.backup) || !self.spec.backup.enabled")
        .message("spec.enableSuperuserAccess: false cannot go with spec.backup.enabled: true: the backups (dumps and base backups) connect as the superuser over the network; keep the superuser's access, or turn backups off"),
    validation = Rule::new("!has(self.spec.pooler) || !has(self.spec.pooler.readOnly) || !self.spec.pooler.readOnly || self.spec.replicas > 1")
        .message("spec.pooler.readOnly needs spec.replicas of 2 or more: it pools connections to the standbys (the Service <name>-ro), and one instance has none"),
    validation = Rule::new("has(self.spec.storageClassName) == has(oldSelf.spec.storageClassName) && (!has(self.spec.storageClassName) || self.spec.storageClassName == oldSelf.spec.storageClassName)")
        .message("spec.storageClassName is immutable: the data claims are made in it; create a new PostgreSQL (or restore a backup into one) to move to another class"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names the database's Services, which are DNS labels"),
)]
#[serde(rename_all = "camelCase")]
pub struct PostgreSQLSpec {
    /// The major version: "12" to "17". Raised, the data is upgraded in place
    /// (`pg_upgrade --link`, `status.upgrade`); lowered, it is refused.
    pub version: Version,
    /// The size of each replica's data volume, in whole GiB (e.g. `10Gi`), at least
    /// `1Gi`. It may grow (the claims are expanded) but not shrink.
    #[schemars(regex(pattern = r"^[0-9]+Gi$"))]
    #[x_kube(validation = Rule::new("!self.matches('^0+Gi$') && size(self) <= 9").message("spec.storage must be at least 1Gi and at most 9999999Gi, in whole Gi, e.g. 10Gi"))]
    pub storage: String,
    /// The StorageClass of the data volumes (default: the cluster's default class).
    /// With a class of local volumes (a node's own disk), an instance can run only on
    /// the node that holds its data: when that node is lost, the instance is reported
    /// (`status.instances[].dataOnLostNode`) and replaced from a fresh copy of the
    /// primary once the annotation `database.example.com/replace-instance` names it.
    /// Fixed once the database is made (its claims are made in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// The number of instances: 1 to 5. One is the primary (`status.currentPrimary`),
    /// the others stream from it as read-only hot standbys, and any of them can take
    /// its place.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 5), default = "one")]
    pub replicas: i32,
    /// How long the primary's pod may be not Ready before bosun promotes a standby,
    /// e.g. `30s` (the default) or `2m`. A primary whose pod is deleted is replaced
    /// at once; a killed postgres restarts in place within seconds, without a failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16), regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub failover_delay: Option<String>,
    /// Synchronous replication: a commit is acknowledged only once `number` standbys
    /// (any of them) have it on disk, so a failover loses no acknowledged
    /// transaction. Writes wait while fewer standbys are connected. Without it,
    /// replication is asynchronous: a failover can lose the last transactions the
    /// primary acknowledged but had not yet sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous: Option<Synchronous>,
    /// Scheduled backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSettings>,
    /// The application's role (default `app`): it owns `spec.database` and logs in,
    /// over TLS only, with the password of Secret `<name>-app`, which bosun makes once
    /// (delete it to have a new password made and set). The superuser stays the one of
    /// `<name>-credentials`. A new name makes a new role; the old one is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z_][a-z0-9_]*$"))]
    #[x_kube(validation = Rule::new("!self.startsWith('pg_') && !(self in ['postgres', 'replicator', 'bosun_pooler'])").message("spec.owner must not be postgres, replicator or bosun_pooler, nor start with pg_: PostgreSQL and bosun keep those names"))]
    pub owner: Option<String>,
    /// The application's database (default `app`), owned by `spec.owner`; made when it
    /// does not exist, never dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z_][a-z0-9_]*$"))]
    #[x_kube(validation = Rule::new("!(self in ['postgres', 'template0', 'template1'])").message("spec.database must not be postgres, template0 or template1"))]
    pub database: Option<String>,
    /// Where the instances go: apart from one another (on different nodes) by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Whether the superuser of `<name>-credentials` may log in over the network (with
    /// its password, over TLS). Default `true`: the PostgreSQL contract gives clients
    /// that Secret, and backups (dumps) connect with it. `false`: it logs in through
    /// the instances' socket only (`kubectl exec … psql`); the instances' own
    /// connections go as the replication role; `spec.backup.enabled` is refused, as
    /// dumps need it. Applications should use `<name>-app` either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_superuser_access: Option<bool>,
    /// The server's TLS certificate. Without it bosun issues one from a CA of its own
    /// per database (published in `<name>-ca`) and renews it before it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<Certificates>,
    /// How the database is first made: empty (`initdb`, without this), or recovered
    /// from another PostgreSQL's base backups and archived WAL. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// `Retain` (default): deleting the PostgreSQL keeps its data claims. `Delete`:
    /// they go with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// A connection pooler (PgBouncer) in front of the primary: clients connect to the
    /// Service `<name>-pooler` (port 5432, TLS, the same roles and passwords), and
    /// bosun pauses it while the primary changes, so that they wait instead of
    /// failing. Setting or removing it restarts the instances once (they learn the
    /// pooler's own role), standbys first, then a switchover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler: Option<Pooler>,
}

/// `spec.pooler`: PgBouncer instances (a Deployment `<name>-pooler`) behind the
/// Service `<name>-pooler`, and with `readOnly` a second set (`<name>-pooler-ro`) in
/// front of the standbys.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Pooler {
    /// How many PgBouncer pods: 1 to 10, default 2 (on different nodes when there are
    /// enough); a lost one's clients reconnect to the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub instances: Option<i32>,
    /// `transaction` (default): a server connection is a client's for one transaction
    /// (session state such as `SET` or prepared statements outside a transaction is not
    /// kept); `session`: for the client's whole connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PoolMode>,
    /// Server connections per user and database in each pod (PgBouncer's
    /// `default_pool_size`): 1 to 1000, default 20. Keep `instances` × this under the
    /// server's `max_connections` (100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub default_pool_size: Option<i32>,
    /// Client connections each pod accepts (`max_client_conn`): 1 to 100000, default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_client_connections: Option<i32>,
    /// Also pool connections to the standbys, behind `<name>-pooler-ro` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The longest a change of primary may keep the pooler's clients waiting, e.g. `10s`
    /// (the default): past it, the pooler lets them through again on its own and bosun
    /// reports it with a Warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16), regex(pattern = r"^[0-9]+(ms|s|m)$"))]
    pub max_pause: Option<String>,
}

/// `spec.pooler.mode`: how long a server connection is a client's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PoolMode {
    #[default]
    Transaction,
    Session,
}

impl PoolMode {
    /// PgBouncer's word for it (`pool_mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Transaction => "transaction",
            PoolMode::Session => "session",
        }
    }
}

/// `spec.affinity`: the instances kept apart, so that losing one node loses one instance.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    /// Keep the instances apart (default `true`): no two on nodes with the same
    /// `topologyKey` label when it can be helped (`podAntiAffinityType`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_pod_anti_affinity: Option<bool>,
    /// `preferred` (default): apart while there are enough nodes, together rather
    /// than not running; `required`: an instance with no node of its own waits
    /// (Pending, named in the status) — for databases that must survive a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity_type: Option<AntiAffinityType>,
    /// The node label that tells nodes apart: `kubernetes.io/hostname` (default), or
    /// e.g. `topology.kubernetes.io/zone` to keep instances in different zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub topology_key: Option<String>,
}

/// `spec.affinity.podAntiAffinityType`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AntiAffinityType {
    #[default]
    Preferred,
    Required,
}

/// `spec.certificates`: the server's certificate from a Secret of the user's (e.g.
/// cert-manager's), instead of bosun's CA.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Certificates {
    /// A Secret of type `kubernetes.io/tls` in the database's namespace: `tls.crt`
    /// (the certificate, then any intermediates) and `tls.key`. The certificate must
    /// name the Service `<name>` (the standbys verify the primary by it); clients need
    /// the names they connect with (`<name>-ro`, `<name>.<namespace>.svc`, …). bosun
    /// checks it and copies it to the instances, which reload it without a restart; a
    /// Secret that is missing, malformed or expired is refused (`Ready=False`), and the
    /// instances keep the certificate they have.
    #[schemars(length(min = 1, max = 253))]
    #[serde(rename = "serverTLSSecret")]
    pub server_tls_secret: String,
    /// A Secret whose `ca.crt` is the CA that signs the certificate: what the
    /// standbys and clients trust (published in `<name>-ca`). Default: the `ca.crt`
    /// of `serverTLSSecret`, as cert-manager writes it.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "serverCASecret")]
    #[schemars(length(min = 1, max = 253))]
    pub server_ca_secret: Option<String>,
}

/// `spec.bootstrap`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// Recover the database from a continuous backup (`spec.backup.continuous` of the
    /// PostgreSQL it comes from), to a point in time or to the end of its archive, then
    /// promote it. Only a database whose data does not exist yet is recovered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// `spec.bootstrap.recovery`: at most one of `targetTime`, `targetLSN` and
/// `targetName`; none of them recovers everything archived.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.targetTime), has(self.targetLSN), has(self.targetName)].filter(t, t).size() <= 1").message("spec.bootstrap.recovery: set at most one of targetTime, targetLSN and targetName"))]
pub struct Recovery {
    /// The name of the PostgreSQL (in this namespace) whose archive to recover from; it
    /// may be gone. Its base backups and WAL are under
    /// `<prefix>/<namespace>/<source>-backup/` of the destination.
    #[schemars(length(min = 1, max = 37), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub source: String,
    /// Where that archive is; default: `spec.backup.destination`. When this database
    /// also archives (`spec.backup.continuous`), both must use the same Secret (and
    /// claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
    /// Recover up to the last transaction committed at or before this time (RFC 3339,
    /// e.g. `2026-11-26T14:03:00Z`). It must lie between the end of the oldest base
    /// backup and the last archived WAL, and a transaction must have been committed
    /// after it (else recovery cannot tell it got there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
    ))]
    pub target_time: Option<String>,
    /// Recover up to this WAL position (`pg_current_wal_lsn()`, e.g. `0/5000028`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "targetLSN")]
    #[schemars(regex(pattern = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"))]
    pub target_lsn: Option<String>,
    /// Recover up to this restore point (`SELECT pg_create_restore_point('name')`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub target_name: Option<String>,
}

fn one() -> i32 {
    1
}

/// `spec.synchronous`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Synchronous {
    /// How many standbys must confirm each commit (`ANY number` of them): 1 to 4, and
    /// fewer than `spec.replicas`.
    #[schemars(range(min = 1, max = 4))]
    pub number: i32,
}

/// The last change of primary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryChange {
    /// The instance that was the primary.
    pub from: String,
    /// The instance bosun promoted.
    pub to: String,
    /// `Failover` (the primary was lost) or `Switchover` (asked for).
    pub kind: String,
    /// Why, in words.
    pub reason: String,
    /// When bosun decided it (RFC 3339).
    pub started: String,
    /// Seconds from the decision until the new primary accepted writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// `Pending`, `Provisioning`, `Running` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Phase {
    /// Nothing runs yet.
    Pending,
    /// Instances are starting (or restarting) and not all are ready.
    Provisioning,
    /// Every instance is ready.
    Running,
    /// The spec cannot be served (a name is taken, the credentials are missing).
    Failed,
}

/// Observed state, from the StatefulSet, the claims and the Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgreSQLStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Instances ready to serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Where clients connect: `<name>.<namespace>.svc:5432` (the primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The instance that is the primary (its pod's name): the read-write Service
    /// `<name>` selects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// The last failover or switchover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_primary_change: Option<PrimaryChange>,
    /// Continuous archiving of the WAL (with `spec.backup.continuous`), as the
    /// primary's archiver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_archiving: Option<WalArchiving>,
    /// With continuous archiving: the earliest point a recovery
    /// (`spec.bootstrap.recovery` of a new PostgreSQL) can reach — the end of the
    /// oldest base backup kept (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_recoverable_point: Option<String>,
    /// The latest point a recovery can reach: when the newest WAL file was archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recoverable_point: Option<String>,
    /// The Secret with the credentials: `username`, `password`, `host`, `port`,
    /// `database`, `uri`, `pgpass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The last major-version upgrade (a raise of `spec.version`), step by step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<MajorUpgrade>,
    /// The certificate the instances serve clients with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_certificate: Option<ServerCertificate>,
    /// Each instance: its node, its role and whether it is ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// The pooler (`spec.pooler`), as its Deployments report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooler: Option<PoolerStatus>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for PostgreSQLStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

/// An instance of `status.instances`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// Its pod.
    pub name: String,
    /// The node it runs on (none while it waits for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `primary` or `replica`, as its role label says (none before bosun labels it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub ready: bool,
    /// Since when its pod, Ready in the API, has left bosun's heartbeat unanswered
    /// (RFC 3339; shown once that lasted `--postgres-unanswered-failover`): its node
    /// lost or cut off, which Kubernetes shows only after its node monitor's grace
    /// period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered_since: Option<String>,
    /// The node that holds the only copy of its data (a volume usable on that node
    /// alone), while that node is lost: not Ready in the API, or the instance
    /// unanswered. The instance comes back with the node, or is replaced from a fresh
    /// copy of the primary once the annotation `database.example.com/replace-instance`
    /// names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_on_lost_node: Option<String>,
}

/// `status.pooler`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolerStatus {
    /// Where the pooler's clients connect: `<name>-pooler.<namespace>.svc:5432`.
    pub endpoint: String,
    /// Its pods ready to serve (of `spec.pooler.instances`).
    pub ready_instances: i32,
    /// With `readOnly`: the standbys' pooler pods ready to serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_ready_instances: Option<i32>,
}

/// `status.serverCertificate`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerCertificate {
    /// The Secret it comes from: `<name>-instance` (bosun's CA) or
    /// `spec.certificates.serverTLSSecret`.
    pub secret_name: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
}

/// `status.upgrade`: an in-place major upgrade with `pg_upgrade --link`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MajorUpgrade {
    /// The major version of the data before.
    pub from: String,
    /// The major version `spec.version` asks for.
    pub to: String,
    /// Where it is: `BackingUp`, `SwitchingOver`, `Stopping`, `Upgrading`, `Starting`,
    /// `Analyzing`, then `Succeeded` or `Failed`.
    pub step: UpgradeStep,
    /// The step that failed (with `step: Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<UpgradeStep>,
    /// What happened, in words (why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it started and ended (RFC 3339).
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// The backup run taken before it (a Job of the database's Backup), when backups
    /// are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_job: Option<String>,
    /// The `metadata.generation` it was started for: a failed upgrade is tried again
    /// only after the spec changes.
    pub generation: i64,
}

/// The steps of a major upgrade.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum UpgradeStep {
    /// A backup run of the database's Backup, awaited (when backups are on).
    BackingUp,
    /// A switchover to the first instance, whose claim the StatefulSet starts first.
    SwitchingOver,
    /// Every instance stopped (the StatefulSet at 0 replicas).
    Stopping,
    /// `pg_upgrade --link` on the primary's data, in a Job.
    Upgrading,
    /// The instances started on the new major; the standbys clone the primary again.
    Starting,
    /// `vacuumdb --all --analyze-in-stages` on the primary.
    Analyzing,
    Succeeded,
    /// The database runs on the old major, its data as before.
    Failed,
}

impl UpgradeStep {
    /// Whether the upgrade has ended, one way or the other.
    pub fn ended(self) -> bool {
        matches!(self, UpgradeStep::Succeeded | UpgradeStep::Failed)
    }
}

/// `status.walArchiving`: the primary's `pg_stat_archiver`, and the archiver's last
/// error in its own words.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalArchiving {
    /// The newest WAL file archived (since the primary's server started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_wal: Option<String>,
    /// When it was archived (RFC 3339): the newest point a recovery can reach is at
    /// most this old plus `archiveTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_time: Option<String>,
    /// The last WAL file that failed to archive, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_wal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_time: Option<String>,
    /// How many WAL files failed to archive since the primary's statistics began
    /// (`pg_stat_archiver.failed_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_count: Option<i64>,
    /// How many failed between bosun's last two looks at the archiver, when any did:
    /// `WALArchiving` is False on that look even when a later push succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_failures: Option<i64>,
    /// Why, as `bosun wal push` said it (while the archiver fails, or failed since
    /// the last look).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
