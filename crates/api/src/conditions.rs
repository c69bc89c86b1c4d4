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
    pub const RECHECKED: &[&str] = &[NAME_CONFLICT, BACKUP_NOT_FOUND, CONFLICT];
}

/// Condition types of Backup.
pub mod backup_types {
    /// Whether the newest finished run stored a good dump.
    pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
}
