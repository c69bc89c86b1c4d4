//! A Backup → its CronJob of `bosun backup run`.

use super::*;

/// The CronJob a Backup should have: on its schedule (UTC), never two runs at once,
/// the last [`HISTORY`] Jobs of each outcome kept, each run `bosun backup run` in
/// `runner_image`.
pub fn desired_cronjob(backup: &Backup, runner_image: &str) -> CronJob {
    let name = backup.name_any();
    let spec = &backup.spec;
    let mut env = database_env(&spec.source, contract::BACKUP_SOURCE);
    env.extend(spec.retention.as_ref().map(|r| value(contract::BACKUP_RETENTION, r.clone())));
    env.extend(spec.keep_last.map(|n| value(contract::BACKUP_KEEP_LAST, n.to_string())));
    env.extend(spec.keep_daily.map(|n| value(contract::BACKUP_KEEP_DAILY, n.to_string())));
    env.extend(spec.keep_weekly.map(|n| value(contract::BACKUP_KEEP_WEEKLY, n.to_string())));
    env.extend(spec.keep_monthly.map(|n| value(contract::BACKUP_KEEP_MONTHLY, n.to_string())));
    if spec.method == Some(bosun_api::backup::Method::Base) {
        env.push(value(contract::BACKUP_METHOD, "base"));
    }
    let pod = run_pod(BACKUP_CONTAINER, runner_image, &["backup", "run"], &spec.destination, env, &name, "OnFailure");
    let run = Scheduled {
        app: BACKUP_APP,
        name: cronjob_name(&name),
        schedule: &spec.schedule,
        history: HISTORY,
        backoff_limit: BACKUP_BACKOFF_LIMIT,
        deadline: run_deadline_seconds(backup),
    };
    scheduled(backup, run, pod)
}

/// A CronJob of a Backup.
pub(super) struct Scheduled<'a> {
    pub(super) app: &'static str,
    pub(super) name: String,
    pub(super) schedule: &'a str,
    /// Finished Jobs kept, of each outcome.
    pub(super) history: i32,
    pub(super) backoff_limit: i32,
    pub(super) deadline: i64,
}

/// The CronJob `run` of `backup`, starting `pod`: on its schedule (UTC), suspended
/// with the Backup, never two runs at once.
pub(super) fn scheduled(backup: &Backup, run: Scheduled<'_>, pod: PodSpec) -> CronJob {
    let labels = standard_labels(run.app, &backup.name_any());
    let template_meta = Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() });
    CronJob {
        metadata: child_meta(backup, run.name, labels),
        spec: Some(CronJobSpec {
            schedule: run.schedule.to_owned(),
            time_zone: Some("Etc/UTC".to_owned()),
            suspend: Some(backup.spec.suspend.unwrap_or(false)),
            concurrency_policy: Some("Forbid".to_owned()),
            starting_deadline_seconds: Some(STARTING_DEADLINE_SECONDS),
            successful_jobs_history_limit: Some(run.history),
            failed_jobs_history_limit: Some(run.history),
            job_template: JobTemplateSpec {
                metadata: template_meta.clone(),
                spec: Some(JobSpec {
                    backoff_limit: Some(run.backoff_limit),
                    active_deadline_seconds: Some(run.deadline),
                    template: PodTemplateSpec { metadata: template_meta, spec: Some(pod) },
                    ..JobSpec::default()
                }),
            },
        }),
        status: None,
    }
}
