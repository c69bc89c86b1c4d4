//! Condition types and reasons shared by every kind.
//!
//! Conditions use the standard `metav1.Condition` shape. The constants here are the
//! vocabulary users filter on (`kubectl wait --for=condition=Ready`, alerts on reasons),
//! so they live in one place.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// A status with standard conditions.
pub trait Conditioned {
    fn conditions(&self) -> &[Condition];
}

/// Condition types.
pub mod types {
    /// Fully converged and serving.
    pub const READY: &str = "Ready";
    /// A change is being rolled out.
    pub const PROGRESSING: &str = "Progressing";
    /// Something is wrong that needs attention (bad spec, failed rollout).
    pub const DEGRADED: &str = "Degraded";
    /// kstatus (sigs.k8s.io/cli-utils, read by Flux, Argo CD, Helm 4 and kpt): bosun is
    /// still working toward the spec. Present (True) only then.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: bosun cannot get to the spec without a change from the user (the
    /// reasons of [`super::reasons::STALLED`]). Present (True) only then.
    pub const STALLED: &str = "Stalled";
}

/// Condition reasons (CamelCase, as Kubernetes requires).
pub mod reasons {
    pub const AVAILABLE: &str = "Available";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const PENDING: &str = "Pending";
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    pub const ROLLOUT_FAILED: &str = "RolloutFailed";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A child's name is held by an object this resource does not control; that
    /// object is left exactly as it is.
    pub const NAME_CONFLICT: &str = "NameConflict";
    pub const AS_EXPECTED: &str = "AsExpected";
    /// The desired configuration is published (e.g. a VoteConfig's ConfigMap).
    pub const PUBLISHED: &str = "Published";
    /// A claim is bound to a volume.
    pub const BOUND: &str = "Bound";
    /// A claim lost its volume.
    pub const CLAIM_LOST: &str = "ClaimLost";
    /// A claim's request grew and its volume has not caught up yet.
    pub const RESIZING: &str = "Resizing";
    /// A smaller size was asked for than a claim already has: Kubernetes cannot shrink
    /// a claim, so the change is not applied.
    pub const SHRINK_REFUSED: &str = "ShrinkRefused";
    /// A PostgreSQL to recover (`spec.bootstrap.recovery`) finds data already there, or
    /// an archive it cannot reach beside its own: nothing is started or written.
    pub const RECOVERY_REFUSED: &str = "RecoveryRefused";
    /// A Backup's CronJob is in place and schedules runs.
    pub const SCHEDULED: &str = "Scheduled";
    /// A Backup's CronJob is in place and suspended: nothing runs, nothing is deleted.
    pub const SUSPENDED: &str = "Suspended";
    /// No backup run has finished yet.
    pub const NO_RUN_YET: &str = "NoRunYet";
    pub const BACKUP_SUCCEEDED: &str = "BackupSucceeded";
    pub const BACKUP_FAILED: &str = "BackupFailed";
    /// An attempt of the running backup failed and the Job retries it.
    pub const BACKUP_RETRYING: &str = "BackupRetrying";
    /// A Backup's newest good dump was restored into a throwaway server and checked.
    pub const VERIFIED: &str = "Verified";
    /// A Backup's verification failed: the dump did not restore, held no tables, or
    /// the query found no rows.
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
    /// A run (a Backup's, a Restore's) cannot start or make progress: an image that
    /// cannot be pulled, a missing Secret, a pod no node takes, a crash loop. Its Job's
    /// deadline ends it.
    pub const RUN_STUCK: &str = "RunStuck";
    /// A Restore's Job is running.
    pub const RUNNING: &str = "Running";
    pub const RESTORED: &str = "Restored";
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// A Restore names a Backup that does not exist (yet): looked for again every 30 s.
    pub const BACKUP_NOT_FOUND: &str = "BackupNotFound";

    /// A value of an AppConfig's template does not render.
    pub const TEMPLATE_ERROR: &str = "TemplateError";
    /// Another AppConfig renders into the same ConfigMap.
    pub const CONFLICT: &str = "Conflict";
    /// Consumers wait for the new configuration (settle time, minimum interval).
    pub const ROLLOUT_PENDING: &str = "RolloutPending";
    /// The configuration is published and every consumer runs it.
    pub const CONFIGURED: &str = "Configured";

    /// Refusals that a later look may find resolved without any change to the
    /// resource itself (someone else's object goes away, a referenced one appears):
    /// looked at again periodically rather than waiting for a spec change.
    /// Every component of a stack is Ready.
    pub const ALL_COMPONENTS_READY: &str = "AllComponentsReady";
    /// A stack's components are starting or waiting for what they depend on.
    pub const DEPLOYING: &str = "Deploying";
    /// A stack is being deleted, component by component: the message names the one
    /// being deleted, since when, and what is left of it.
    pub const DELETING: &str = "Deleting";
    /// A stack's component has been being deleted for longer than bosun expects (30 s,
    /// or half the bound when that is shorter): the message says what holds it and when
    /// bosun stops waiting.
    pub const DELETION_STUCK: &str = "DeletionStuck";
    /// (Event) bosun stopped waiting for a stack's component to be deleted and removed
    /// its finalizer: the garbage collector deletes what is left.
    pub const DELETION_TIMED_OUT: &str = "DeletionTimedOut";
    /// A stack's `spec.database.type` differs from the database its data is in.
    pub const DATABASE_TYPE_CHANGE_REFUSED: &str = "DatabaseTypeChangeRefused";
    /// Monitoring is asked for but the Prometheus operator's CRD is not installed.
    pub const CRD_NOT_INSTALLED: &str = "CRDNotInstalled";
    /// A platform's ServiceMonitor is in place.
    pub const SERVICE_MONITOR_CREATED: &str = "ServiceMonitorCreated";
    /// A PostgreSQL's instances are all ready.
    pub const RUNNING_READY: &str = "AllReplicasReady";
    /// A PostgreSQL's instances are all "ready" on simulated nodes (kwok's fake nodes):
    /// no container runs there and no database answers; or a Backup's, verification's
    /// or Restore's run "completed" there without running. The condition stays `True`
    /// (what waits on it, a stack's gate, goes on, as the fake nodes are there for
    /// scale tests), the reason and message say that nothing really ran.
    pub const SIMULATED: &str = "SimulatedOnFakeNodes";
    /// A PostgreSQL's instances are starting.
    pub const PROVISIONING: &str = "Provisioning";
    /// An instance of a PostgreSQL cannot start: an image that cannot be pulled, a
    /// pod no node takes, a crash loop, a volume that does not mount.
    pub const INSTANCE_STUCK: &str = "InstanceStuck";
    /// A PostgreSQL's `spec.version` is below its data's major version (a downgrade).
    pub const VERSION_CHANGE_REFUSED: &str = "VersionChangeRefused";
    /// A PostgreSQL's data is being upgraded to a new major version.
    pub const UPGRADING: &str = "Upgrading";
    /// A major upgrade failed; the database runs on the old major, its data intact.
    pub const UPGRADE_FAILED: &str = "UpgradeFailed";
    /// A Secret (or a key of it) that a resource's pods need does not exist: a
    /// PostgreSQL's credentials while its data exists, a Backup's or Restore's database
    /// or destination credentials. Looked for again every 30 s.
    pub const CREDENTIALS_MISSING: &str = "CredentialsMissing";
    /// The server certificate a PostgreSQL's `spec.certificates` names is missing,
    /// malformed, not verified by its CA, or expired: the instances keep the one they
    /// have. Looked at again every 30 s.
    pub const CERTIFICATE_INVALID: &str = "CertificateInvalid";
    /// A Warning event: the certificate a user provides expires within
    /// `--postgres-cert-renew-before` and was not renewed.
    pub const CERTIFICATE_EXPIRES_SOON: &str = "CertificateExpiresSoon";
    /// Backups are not asked for.
    pub const BACKUP_DISABLED: &str = "BackupDisabled";
    /// Backups wait for the database to be Ready.
    pub const WAITING_FOR_DATABASE: &str = "WaitingForDatabase";
    /// The Backup exists and is not Ready (yet): its own condition says why.
    pub const BACKUP_NOT_READY: &str = "BackupNotReady";
    /// WAL files reach the archive.
    pub const ARCHIVING: &str = "Archiving";
    /// The last WAL file the primary tried to archive failed.
    pub const ARCHIVING_FAILED: &str = "ArchivingFailed";
    /// Nothing was asked of the primary's archiver yet (it is not Ready).
    pub const ARCHIVER_UNKNOWN: &str = "ArchiverUnknown";

    pub const RECHECKED: &[&str] =
        &[NAME_CONFLICT, BACKUP_NOT_FOUND, CONFLICT, CREDENTIALS_MISSING, CERTIFICATE_INVALID];
    /// The reasons of a `Ready=False` that only the user can end: a GitOps rollout
    /// fails on them at once (kstatus `Stalled`). Every other `Ready=False` is work in
    /// progress (kstatus `Reconciling`), even one that waits long (a pod that cannot
    /// start may yet: an image pushed, a node added).
    pub const STALLED: &[&str] = &[
        INVALID_SPEC,
        NAME_CONFLICT,
        CREDENTIALS_MISSING,
        CERTIFICATE_INVALID,
        TEMPLATE_ERROR,
        CONFLICT,
        SHRINK_REFUSED,
        RECOVERY_REFUSED,
        DATABASE_TYPE_CHANGE_REFUSED,
        VERSION_CHANGE_REFUSED,
        UPGRADE_FAILED,
        BACKUP_NOT_FOUND,
        RESTORE_FAILED,
        ROLLOUT_FAILED,
        CLAIM_LOST,
    ];
}

/// Condition types of Backup.
pub mod backup_types {
    /// Whether the newest finished run stored a good dump.
    pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
    /// Whether the newest finished verification restored the newest good dump and
    /// found it sound (only with `spec.verify`).
    pub const LAST_VERIFICATION_SUCCEEDED: &str = "LastVerificationSucceeded";
}

/// Condition types of PostgreSQL.
pub mod postgresql_types {
    /// Whether the scheduled backups asked for are in place.
    pub const BACKUP_CONFIGURED: &str = "BackupConfigured";
    /// Whether continuous archiving of the WAL works (only with `spec.backup.continuous`).
    pub const WAL_ARCHIVING: &str = "WALArchiving";
    /// Whether every pooler pod asked for is ready (only with `spec.pooler`).
    pub const POOLER_READY: &str = "PoolerReady";
}
