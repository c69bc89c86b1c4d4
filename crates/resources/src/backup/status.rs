//! A Backup's runs → BackupStatus.

use super::*;

/// What the Backup status computation sees.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    pub cronjob: Option<&'a CronJob>,
    pub refusal: Option<&'a Refusal>,
    /// The newest finished run, unless the status already reports it.
    pub last_run: Option<&'a LastRun>,
    /// The run in progress, as far as it told.
    pub running: Option<&'a RunningBackup>,
    /// The newest finished verification, unless the status already tells of it.
    pub verification: Option<&'a Verification>,
}

/// The status a Backup should have.
///
/// Ready when its CronJob is in place as specified (suspended or not).
/// `LastBackupSucceeded` tells of the newest finished run; `lastSuccessfulBackup`
/// keeps the newest good dump, whatever failed after it.
pub fn backup_status(backup: &Backup, observed: Observed<'_>, now: Timestamp) -> BackupStatus {
    let generation = backup.meta().generation;
    let previous = backup.status.clone().unwrap_or_default();
    let ready = match (observed.refusal, observed.cronjob) {
        (Some(refusal), _) => Desired::new(types::READY, false, refusal.reason(), refusal.message()),
        (None, None) => Desired::new(types::READY, false, reasons::PENDING, "the CronJob has not been created yet"),
        (None, Some(cj)) if backup.spec.suspend == Some(true) => Desired::new(
            types::READY,
            true,
            reasons::SUSPENDED,
            format!("CronJob {} is suspended: no runs start, no dump is deleted", cj.name_any()),
        ),
        (None, Some(cj)) => Desired::new(
            types::READY,
            true,
            reasons::SCHEDULED,
            format!("CronJob {} runs on the schedule {:?} (UTC)", cj.name_any(), backup.spec.schedule),
        ),
    };
    let mut last_successful = previous.last_successful_backup.clone();
    let mut retention = previous.retention.clone();
    let previous_run = previous.conditions.iter().find(|c| c.type_ == backup_types::LAST_BACKUP_SUCCEEDED);
    let run = match observed.last_run {
        Some(run) => {
            let (condition, success) = describe_run(run, previous_run.map(|c| c.message.as_str()));
            if success.is_some() {
                last_successful = success;
                retention = run.result.as_ref().and_then(RunResult::retention).or(retention);
            }
            condition
        }
        None => conditions::carried(
            &previous.conditions,
            backup_types::LAST_BACKUP_SUCCEEDED,
            &[
                reasons::BACKUP_SUCCEEDED,
                reasons::BACKUP_FAILED,
                reasons::BACKUP_RETRYING,
                reasons::RUN_STUCK,
                reasons::NO_RUN_YET,
            ],
            Desired::unknown(backup_types::LAST_BACKUP_SUCCEEDED, reasons::NO_RUN_YET, "no run has finished yet"),
        ),
    };
    let last_schedule_time =
        observed.cronjob.and_then(|cj| cj.status.as_ref()?.last_schedule_time.clone()).or(previous.last_schedule_time);
    let mut last_verified = previous.last_verified.clone();
    let mut last_successful_verification = previous.last_successful_verification.clone();
    let mut desired = vec![ready, run];
    if backup.spec.verify.is_some() {
        desired.push(match observed.verification {
            Some(run) => {
                let (condition, verified) = describe_verification(run);
                if verified.outcome == VerifyOutcome::Succeeded {
                    last_successful_verification = Some(verified.time.clone());
                }
                last_verified = Some(verified);
                condition
            }
            None => conditions::carried(
                &previous.conditions,
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                &[reasons::VERIFIED, reasons::VERIFICATION_FAILED, reasons::NO_RUN_YET],
                Desired::unknown(
                    backup_types::LAST_VERIFICATION_SUCCEEDED,
                    reasons::NO_RUN_YET,
                    "no verification has finished yet",
                ),
            ),
        });
    }
    BackupStatus {
        observed_generation: generation,
        last_schedule_time,
        last_successful_backup: last_successful,
        retention,
        last_verified,
        last_successful_verification,
        running: observed.running.cloned(),
        conditions: conditions::merge(&previous.conditions, desired, generation, now),
    }
}

/// What a run that a simulated node "completed" says after its Job's name (its
/// condition is `True`, as with the other kinds on the fake nodes, which are there
/// for scale tests: the reason and message say nothing ran).
pub(super) const SIMULATED_RUN: &str = "completed on a simulated node: no container ran";

/// What a retrying run's condition message says before the error.
pub(super) const ATTEMPT_FAILED: &str = "an attempt failed: ";

/// What it says after it.
pub(super) const RETRYING: &str = "; retrying";

/// What a stuck run's condition message says before the cause.
pub(super) const CANNOT_RUN: &str = "cannot run: ";

/// What it says after it.
pub(super) const UNTIL_DEADLINE: &str = "; it is stopped at its deadline";

/// `LastBackupSucceeded` for `run`, and the good dump it made. `previous` is the
/// condition's last message: when a failed run's pod is gone, the error an earlier
/// attempt reported there is kept.
pub(super) fn describe_run(run: &LastRun, previous: Option<&str>) -> (Desired, Option<SuccessfulBackup>) {
    let prefix = job_prefix(&run.job);
    let result = run.result.clone().unwrap_or_default();
    let attempt_error = || {
        let rest = previous?.strip_prefix(&prefix)?;
        if let Some((_, error)) = rest.split_once(ATTEMPT_FAILED) {
            return Some(error.rsplit_once(RETRYING).map_or(error, |(e, _)| e).to_owned());
        }
        let cause = rest.split_once(CANNOT_RUN)?.1;
        Some(cause.rsplit_once(UNTIL_DEADLINE).map_or(cause, |(c, _)| c).to_owned())
    };
    match &run.finish {
        Finish::Succeeded(_) if result.simulated => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                true,
                reasons::SIMULATED,
                format!("{prefix}{SIMULATED_RUN}, so no dump was stored"),
            ),
            None,
        ),
        Finish::Succeeded(at) => match (&result.key, result.size) {
            (Some(key), Some(size)) => (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    true,
                    reasons::BACKUP_SUCCEEDED,
                    match &result.retention_error {
                        None => format!("{prefix}stored {key} ({size} bytes, verified)"),
                        Some(e) => format!("{prefix}stored {key} ({size} bytes, verified); retention: {e}"),
                    },
                ),
                Some(SuccessfulBackup {
                    time: at.clone(),
                    key: key.clone(),
                    size,
                    job: Some(run.job.clone()),
                    oldest_kept: result.oldest_kept.as_deref().and_then(|t| t.parse().ok()).map(Time),
                }),
            ),
            // Complete, but its result is gone (the pod was deleted): a good run whose
            // key only the bucket knows.
            _ => (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    true,
                    reasons::BACKUP_SUCCEEDED,
                    format!("{prefix}succeeded; its result was not readable (pod gone), see `bosun backup list`"),
                ),
                None,
            ),
        },
        Finish::Retrying => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                false,
                reasons::BACKUP_RETRYING,
                format!("{prefix}{ATTEMPT_FAILED}{}{RETRYING}", result.error.unwrap_or_default()),
            ),
            None,
        ),
        Finish::Stuck(cause) => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                false,
                reasons::RUN_STUCK,
                format!(
                    "{prefix}{CANNOT_RUN}{cause}{UNTIL_DEADLINE} and the next scheduled run goes ahead; nothing was deleted"
                ),
            ),
            None,
        ),
        Finish::Failed(_, why) => {
            let detail = result.error.or_else(attempt_error).map_or_else(|| why.clone(), |e| format!("{e} ({why})"));
            (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    false,
                    reasons::BACKUP_FAILED,
                    format!("{prefix}failed: {detail}; nothing was deleted"),
                ),
                None,
            )
        }
    }
}
