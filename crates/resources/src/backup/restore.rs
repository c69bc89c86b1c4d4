//! A Restore → its Job (`bosun restore run`) and RestoreStatus.

use super::*;

/// Which dump a Restore loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump<'a> {
    pub destination: &'a Destination,
    /// The key; `None`: the newest good dump of the Backup `backup`.
    pub key: Option<String>,
    /// The Backup (in the Restore's namespace) whose folder holds the dumps: for `--latest`.
    pub backup: Option<String>,
}

/// The Job a Restore runs, once: `bosun restore run` in `runner_image`, no retries (a
/// second attempt would find the tables the first one loaded).
pub fn desired_job(restore: &bosun_api::backup::Restore, dump: &Dump<'_>, runner_image: &str) -> Job {
    let name = restore.name_any();
    let labels = standard_labels(RESTORE_APP, &name);
    let mut env = database_env(&restore.spec.target, contract::RESTORE_TARGET);
    match &dump.key {
        Some(key) => env.push(value(contract::RESTORE_KEY, key.clone())),
        None => env.push(value(contract::RESTORE_LATEST, "true")),
    }
    if restore.spec.overwrite == Some(true) {
        env.push(value(contract::RESTORE_OVERWRITE, "true"));
    }
    let folder = dump.backup.clone().unwrap_or_else(|| name.clone());
    let pod = run_pod(RESTORE_CONTAINER, runner_image, &["restore", "run"], dump.destination, env, &folder, "Never");
    let template_meta = Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() });
    Job {
        metadata: child_meta(restore, restore_job_name(&name), labels),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(RESTORE_DEADLINE_SECONDS),
            template: PodTemplateSpec { metadata: template_meta, spec: Some(pod) },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// What the Restore status computation sees.
#[derive(Clone, Copy, Debug, Default)]
pub struct RestoreObserved<'a> {
    /// The Job, as applied or cached (`None`: none exists).
    pub job: Option<&'a Job>,
    /// The key the Job was asked for (`None`: the latest good dump).
    pub requested_key: Option<&'a str>,
    /// What the run reported, once the Job finished.
    pub result: Option<&'a RunResult>,
    /// Why the Job was not created (e.g. the Backup does not exist).
    pub refusal: Option<(&'static str, &'a str)>,
    /// Why the running Job cannot start or make progress ([`crate::pods`]).
    pub stuck: Option<&'a str>,
}

/// The status a Restore should have. Once Succeeded or Failed it never changes again:
/// a Restore runs once.
pub fn restore_status(
    restore: &bosun_api::backup::Restore,
    observed: RestoreObserved<'_>,
    now: Timestamp,
) -> RestoreStatus {
    let generation = restore.meta().generation;
    let previous = restore.status.clone().unwrap_or_default();
    if previous.phase.is_some_and(RestorePhase::finished) {
        return previous;
    }
    let job = observed.job;
    let job_status = job.and_then(|j| j.status.as_ref());
    let finished = job.and_then(finish);
    let result = observed.result.cloned().unwrap_or_default();
    let (phase, ready) = match (observed.refusal, job, &finished) {
        (Some((reason, message)), _, _) => (RestorePhase::Pending, Desired::new(types::READY, false, reason, message)),
        (None, None, _) if previous.job.is_some() => (
            RestorePhase::Failed,
            Desired::new(
                types::READY,
                false,
                reasons::RESTORE_FAILED,
                format!("Job {} was deleted before it finished", previous.job.clone().unwrap_or_default()),
            ),
        ),
        (None, None, _) => (
            RestorePhase::Pending,
            Desired::new(types::READY, false, reasons::PENDING, "the Job has not been created yet"),
        ),
        (None, Some(j), None | Some(Finish::Retrying | Finish::Stuck(_))) => {
            let started = job_status.and_then(|s| s.start_time.as_ref()).is_some();
            let phase = if started { RestorePhase::Running } else { RestorePhase::Pending };
            let ready = match observed.stuck {
                Some(cause) => Desired::new(
                    types::READY,
                    false,
                    reasons::RUN_STUCK,
                    format!(
                        "Job {} {CANNOT_RUN}{cause}{UNTIL_DEADLINE} ({RESTORE_DEADLINE_SECONDS}s after it started) and the Restore fails",
                        j.name_any()
                    ),
                ),
                None => Desired::new(
                    types::READY,
                    false,
                    reasons::RUNNING,
                    format!("Job {} is loading the dump", j.name_any()),
                ),
            };
            (phase, ready)
        }
        (None, Some(j), Some(Finish::Succeeded(_))) if result.simulated => (
            RestorePhase::Succeeded,
            Desired::new(
                types::READY,
                true,
                reasons::SIMULATED,
                format!("Job {} {SIMULATED_RUN}, so nothing was loaded", j.name_any()),
            ),
        ),
        (None, Some(j), Some(Finish::Succeeded(_))) => (
            RestorePhase::Succeeded,
            Desired::new(
                types::READY,
                true,
                reasons::RESTORED,
                format!(
                    "Job {} loaded {}",
                    j.name_any(),
                    result.key.as_deref().or(observed.requested_key).unwrap_or("the latest good dump")
                ),
            ),
        ),
        (None, Some(j), Some(Finish::Failed(_, why))) => (
            RestorePhase::Failed,
            Desired::new(
                types::READY,
                false,
                reasons::RESTORE_FAILED,
                format!(
                    "Job {} failed: {}",
                    j.name_any(),
                    // A run that never started: what kept it from starting, as told while it waited.
                    result.error.clone().unwrap_or_else(|| {
                        previous_cause(&previous.conditions).map_or_else(|| why.clone(), |c| format!("{c} ({why})"))
                    })
                ),
            ),
        ),
    };
    RestoreStatus {
        observed_generation: generation,
        phase: Some(phase),
        key: result.key.clone().or(observed.requested_key.map(str::to_owned)).or(previous.key),
        job: job.map(|j| j.name_any()).or(previous.job),
        start_time: job_status.and_then(|s| s.start_time.clone()).or(previous.start_time),
        completion_time: finished.as_ref().and_then(|f| f.time().cloned()).or(previous.completion_time),
        conditions: conditions::merge(&previous.conditions, vec![ready], generation, now),
    }
}

/// The cause a stuck run's Ready condition told, to carry it into the failure.
pub(super) fn previous_cause(conditions: &[bosun_api::conditions::Condition]) -> Option<String> {
    let c = conditions.iter().find(|c| c.type_ == types::READY && c.reason == reasons::RUN_STUCK)?;
    let cause = c.message.split_once(CANNOT_RUN)?.1;
    Some(cause.rsplit_once(UNTIL_DEADLINE).map_or(cause, |(c, _)| c).to_owned())
}
