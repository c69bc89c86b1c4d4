//! Backup → CronJob, Restore → Job, and the runs' results → status. Pure.
//!
//! ```text
//!  Backup ──validate──▶ ok ──desired_cronjob──▶ CronJob <name>-cronjob (container `backup`)
//!                  └──▶ Refusal (nothing applied)
//!  Backup + CronJob + newest finished Job (+ its result) ──backup_status──▶ BackupStatus
//!  Restore + dump (destination, key | latest) ──desired_job──▶ Job <name>-restore (container `restore`)
//!  Restore + Job (+ its result) ──restore_status──▶ RestoreStatus
//! ```
//!
//! ```text
//! mod.rs ──────── names, fixed values
//! validate ────── what refuses a spec (Refusal), the Secrets a run needs
//! runner ──────── the runner's variables and pod, shared by every kind of run
//! cronjob ─────── Backup → CronJob
//! verification ── Backup.spec.verify → the verification CronJob, its outcome
//! runs ────────── a run's result and its Job's finish
//! status ──────── runs → BackupStatus
//! restore ─────── Restore → Job → RestoreStatus
//! ```
//!
//! Both children run `bosun backup run` / `bosun restore run` (crate `bosun-runner`),
//! configured wholly by environment variables, so no value of a Secret is ever written
//! into the CronJob or the Job: the database password and the storage credentials are
//! `secretKeyRef` / `envFrom` references, resolved by the kubelet. A run writes its
//! result (key, size, checksum, or the error) as JSON to `/dev/termination-log`, where
//! the controller reads it from the pod's status without bucket credentials.

use std::collections::BTreeMap;

use bosun_api::backup::{
    Backup, BackupStatus, Destination, DestinationType, ENCRYPTION_KEY, RestorePhase, RestoreStatus, RetainedBackup,
    RetentionStatus, RunningBackup, Source, SourceType, SuccessfulBackup, VerifiedBackup, VerifyOutcome,
    schedule_pattern,
};
use bosun_api::conditions::{backup_types, reasons, types};
use bosun_backup_model::contract;
use bosun_backup_model::engine::Engine;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerStatus, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretEnvSource, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};
use serde::Deserialize;

use crate::conditions::{self, Desired};
use crate::meta::{child_meta, standard_labels};

mod cronjob;
mod restore;
mod runner;
mod runs;
mod status;
mod validate;
mod verification;

pub use cronjob::*;
pub use restore::*;
pub use runner::*;
pub use runs::*;
pub use status::*;
pub use validate::*;
pub use verification::*;
/// `app.kubernetes.io/name` of a Backup's CronJob and the Jobs it starts.
pub const BACKUP_APP: &str = "backup";
/// `app.kubernetes.io/name` of a Restore's Job.
pub const RESTORE_APP: &str = "restore";
/// The container of a backup run.
pub const BACKUP_CONTAINER: &str = "backup";
/// The container of a restore run.
pub const RESTORE_CONTAINER: &str = "restore";
/// `app.kubernetes.io/name` of a Backup's verification CronJob and its Jobs.
pub const VERIFY_APP: &str = "backup-verify";
/// The container of a verification run (`bosun verify run`).
pub const VERIFY_CONTAINER: &str = "verify";
/// The throwaway database server of a verification run: a native sidecar.
pub const VERIFY_SERVER_CONTAINER: &str = "database";
/// The database a verification restores into.
pub const VERIFY_DATABASE: &str = "verify";
/// The uid of the `postgres` and `mysql` users of the official images (and Debian's).
pub const DATABASE_UID: i64 = 999;
/// Finished verification Jobs kept, of each outcome: the status tells of the newest.
pub const VERIFY_HISTORY: i32 = 1;
/// Where a `pvc` destination's claim is mounted.
pub const PVC_MOUNT: &str = "/backups";
/// Where the destination's Secret is mounted, for credentials that are files.
pub const CREDENTIALS_MOUNT: &str = "/var/run/secrets/bosun/destination";
/// Where the encryption Secret's identities are mounted.
pub const ENCRYPTION_MOUNT: &str = "/var/run/secrets/bosun/encryption";
/// Where a run writes its result.
pub const RESULT_FILE: &str = "/dev/termination-log";
/// The uid and gid runs use (the runner needs no privileges and writes no files).
pub const RUN_AS: i64 = 65532;
/// Finished Jobs a CronJob keeps, of each outcome.
pub const HISTORY: i32 = 3;
/// How late a missed run may still start (the controller manager was down, say).
pub const STARTING_DEADLINE_SECONDS: i64 = 3600;
/// Attempts of one backup run: the pod restarts in place (`OnFailure`) up to this many times.
pub const BACKUP_BACKOFF_LIMIT: i32 = 2;
/// The longest a backup run may take by default, however rare its schedule.
pub const MAX_RUN_DEADLINE_SECONDS: i64 = 24 * 3600;
/// How long a Restore's run may take before its Job is stopped and the Restore fails.
pub const RESTORE_DEADLINE_SECONDS: i64 = 24 * 3600;
/// The runner image `hack/images.sh runner` builds for the local cluster; `bosun run
/// --runner-image` sets another.
pub const DEFAULT_RUNNER_IMAGE: &str = "localhost/bosun-runner:dev";
/// The CronJob of `backup`.
pub fn cronjob_name(backup: &str) -> String {
    format!("{backup}-cronjob")
}
/// The verification CronJob of `backup`.
pub fn verify_cronjob_name(backup: &str) -> String {
    format!("{backup}-verify")
}
/// The Job of `restore`.
pub fn restore_job_name(restore: &str) -> String {
    format!("{restore}-restore")
}

#[cfg(test)]
mod tests;
