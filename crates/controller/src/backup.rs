//! The Backup controller.
//!
//! Pipeline: validate (pure) → build and apply the CronJob → the Secrets its runs read
//! exist, with their keys → the newest finished Job of this Backup, from the cache →
//! its pod's result, read only when the status does not tell of that run yet; or the
//! running Job's pod, when it cannot start or make progress, else how far it is (the
//! newest progress line of its log, looked at every [`PROGRESS_RECHECK`]) → compute
//! status → write it only if it changed, with a Warning for a run that newly failed.
//!
//! A run that cannot start (a missing Secret, an image that cannot be pulled, a pod no
//! node takes, a crash loop) is told as a failed run within about a minute
//! ([`bosun_resources::pods`]); its Job's deadline (the schedule's shortest interval by
//! default) ends it before the next run is due, so it never holds back the schedule.
//!
//! The CronJob is a child (controller ownerReference); the Jobs it starts are its
//! children, watched on their own and mapped back to the Backup through the CronJob's
//! name, so a finished run updates the status without polling. A run's result (key,
//! size) is its container's termination message: bosun reads the pod, never the
//! bucket, and holds no storage credentials. Deleting a Backup deletes its CronJob and
//! Jobs, never a dump.

use std::future::Future;
use std::sync::Arc;

use bosun_api::backup::{Backup, RunningBackup};
use bosun_api::conditions::{backup_types, reasons};
use bosun_resources::backup::{self as build, Finish, LastRun, Observed, Refusal, RunResult, Verification};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::apply::{apply_child, claim_child, delete_child};
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::kinds::{Served, Type};
use crate::metrics::{BackupLabels, Gauges};
use crate::permissions::{self, Permission};
use crate::read;
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "backup";

/// How often a run in progress is looked at (its progress, or what keeps it from
/// starting). A run tells its progress every 2 s; the status follows every 5 s.
const PROGRESS_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);
/// The PostgreSQL a verification restores into: the major of the runner's `pg_dump`.
const VERIFY_POSTGRES_VERSION: bosun_api::postgresql::Version = bosun_api::postgresql::Version::V17;
/// The MySQL version of `--mysql-image` a verification restores into.
const VERIFY_MYSQL_VERSION: &str = "8.4";
/// Log lines read for the newest progress line (a run prints little else).
const PROGRESS_LINES: i64 = 20;

/// What this controller does with the API: Backups, their CronJobs (the runs' and the
/// verifications'), the Jobs those start (watched only), the pods of their Jobs
/// (listed, for results and progress), the Warning events of a pod that does not
/// start, and the Secrets the runs read (for their keys).
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("backup.example.com", "backups");
    [
        a,
        b,
        c,
        Permission::new("batch", "cronjobs", permissions::OWN),
        // A verification CronJob no longer asked for (uid-preconditioned: bosun's own).
        Permission::new("batch", "cronjobs", &["delete"]),
        Permission::new("batch", "jobs", permissions::RECONCILED),
        Permission::new("", "pods", &["list"]),
        Permission::new("", "pods/log", &["get"]),
        Permission::new("", "events", &["list"]),
        Permission::new("", "secrets", &["get"]),
    ]
};

/// The backup controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::of::<Backup>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the Backup controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let (cronjobs, mut cronjob_changes) =
        wiring::watch_children::<CronJob>(&ctx, ns, &[(&Backup::kind(&()), &Backup::api_version(&()))]);
    let (jobs, mut job_changes) = wiring::watch_children::<Job>(&ctx, ns, &[("CronJob", "batch/v1")]);
    let (Some(cronjob_changes), Some(job_changes)) = (cronjob_changes.pop(), job_changes.pop()) else { return };
    let ctrl = wiring::controller_for::<Backup>(CONTROLLER, &ctx, ns);
    tokio::spawn(gauges(&ctx).export(ctrl.store()));
    let ctrl = wiring::owns::<Backup, CronJob>(ctrl, cronjob_changes);
    let ctrl = wiring::triggered_by::<Backup, Job>(ctrl, job_changes, |job| backup_of(job).into_iter().collect());
    wiring::drive(CONTROLLER, ctrl, concurrency, ctx, shutdown, move |backup, ctx| {
        reconcile(backup, ctx, cronjobs.clone(), jobs.clone())
    })
    .await;
}

/// The per-Backup gauges ([`read_gauges`]).
fn gauges(ctx: &Context) -> Gauges<Backup, BackupLabels> {
    let m = &ctx.metrics;
    Gauges {
        families: vec![
            m.backup_last_success.clone(),
            m.backup_failing.clone(),
            m.backup_last_verified.clone(),
            m.backup_verification_failing.clone(),
            m.backup_verify_interval.clone(),
        ],
        read: read_gauges,
        gone: None,
    }
}

/// The per-Backup gauges from a Backup's status: last success, failing, and with
/// `spec.verify`, when it was last verified (since its creation, before the first),
/// whether the last verification failed, and the schedule's longest interval.
fn read_gauges(backup: &Backup) -> Option<(BackupLabels, Vec<Option<f64>>)> {
    let labels = BackupLabels { backup_namespace: backup.namespace().unwrap_or_default(), backup: backup.name_any() };
    let status = backup.status.as_ref();
    let good = status.and_then(|s| s.last_successful_backup.as_ref()).map(|good| good.time.0.as_second() as f64);
    let failing = |type_: &str| {
        let condition = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
        f64::from(u8::from(condition.is_some_and(|c| c.status == "False")))
    };
    let (verified, verification_failing, interval) = match &backup.spec.verify {
        Some(verify) => (
            status
                .and_then(|s| s.last_successful_verification.as_ref())
                .or(backup.metadata.creation_timestamp.as_ref())
                .map(|t| t.0.as_second() as f64),
            Some(failing(backup_types::LAST_VERIFICATION_SUCCEEDED)),
            build::longest_interval(&verify.schedule).map(|s| s as f64),
        ),
        None => (None, None, None),
    };
    let values =
        vec![good, Some(failing(backup_types::LAST_BACKUP_SUCCEEDED)), verified, verification_failing, interval];
    Some((labels, values))
}

/// The Backup whose CronJob (of its runs or of its verifications) started `job`.
fn backup_of(job: &Job) -> Option<String> {
    let cronjob = job.owner_references().iter().find(|r| r.controller == Some(true) && r.kind == "CronJob")?;
    let name = &cronjob.name;
    name.strip_suffix("-cronjob").or_else(|| name.strip_suffix("-verify")).map(str::to_owned)
}

async fn reconcile(
    backup: Arc<Backup>,
    ctx: Arc<Context>,
    cronjobs: Owned<CronJob>,
    jobs: Owned<Job>,
) -> Result<Outcome, Error> {
    let backup = backup.as_ref();
    let ns = backup.namespace().unwrap_or_default();
    let desired = build::desired_cronjob(backup, &ctx.settings.runner_image);
    let cached = cronjobs.get(&ns, &desired.name_any()).filter(|c| controlled_by(c.as_ref(), backup));
    let (cronjob, refusal) = match build::validate(backup) {
        // Refused: the CronJob keeps its last good spec.
        Err(refusal) => (cached.map(|c| (*c).clone()), Some(refusal)),
        Ok(()) => match claim_child(backup, &desired, cached.as_ref().map(|c| c.meta())) {
            Err(Error::NameConflict(message)) => (None, Some(Refusal::NameConflict(message))),
            Err(err) => return Err(err),
            Ok(_) => match apply_child(&ctx, backup, &cronjobs, desired).await {
                Ok(applied) => (Some(applied), None),
                Err(Error::NameConflict(message)) => (None, Some(Refusal::NameConflict(message))),
                Err(err) if err.is_invalid_spec() => {
                    (cached.map(|c| (*c).clone()), Some(Refusal::InvalidSpec(err.user_message())))
                }
                Err(err) => return Err(err),
            },
        },
    };
    // The runs' Secrets, told before a run meets them (the CronJob is in place anyway).
    let refusal = match (refusal, &cronjob) {
        (None, Some(_)) => {
            let needs = build::secrets_needed(
                &backup.spec.source,
                "spec.source.connection.secretRef",
                &backup.spec.destination,
                "spec.destination",
            );
            read::credentials_missing(&ctx.client, &ns, &needs).await?.map(Refusal::CredentialsMissing)
        }
        (refusal, _) => refusal,
    };
    let (verify_cronjob, refusal) = match refusal {
        // Refused: the verification CronJob keeps its last good spec too.
        Some(Refusal::InvalidSpec(m)) => (None, Some(Refusal::InvalidSpec(m))),
        refusal => match verify_cronjob(&ctx, backup, &cronjobs).await {
            Ok(cronjob) => (cronjob, refusal),
            Err(Error::NameConflict(message)) => (None, Some(Refusal::NameConflict(message))),
            Err(err) => return Err(err),
        },
    };
    let Runs { last_run, running, progress } = last_run(&ctx, backup, cronjob.as_ref(), &jobs).await?;
    let verification = last_verification(&ctx, backup, verify_cronjob.as_ref(), &jobs).await?;
    let observed = Observed {
        cronjob: cronjob.as_ref(),
        refusal: refusal.as_ref(),
        last_run: last_run.as_ref(),
        running: progress.as_ref(),
        verification: verification.as_ref(),
    };
    let status = build::backup_status(backup, observed, ctx.now());
    let announce = update_status(&ctx, CONTROLLER, backup, &status).await?;
    gauges(&ctx).set(&Backup { status: Some(status.clone()), ..backup.clone() });
    if announce {
        let previous = backup.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let run = last_run.as_ref().map(|r| ObjectRef::<Job>::new(&r.job).within(&ns).into());
        ctx.events.condition_failed(
            &backup.object_ref(&()),
            run,
            backup_types::LAST_BACKUP_SUCCEEDED,
            &[reasons::BACKUP_FAILED, reasons::BACKUP_RETRYING, reasons::RUN_STUCK],
            previous,
            &status.conditions,
        );
        let verification = verification.as_ref().map(|v| ObjectRef::<Job>::new(&v.job).within(&ns).into());
        ctx.events.condition_failed(
            &backup.object_ref(&()),
            verification,
            backup_types::LAST_VERIFICATION_SUCCEEDED,
            &[reasons::VERIFICATION_FAILED],
            previous,
            &status.conditions,
        );
    }
    Ok(match refusal {
        Some(r) if !running => Outcome::of(Some((r.reason(), r.message())), announce),
        // A run in progress is looked at more often than a refusal is rechecked.
        Some(r) => {
            if announce {
                ctx.events.refused(&backup.object_ref(&()), r.reason(), &r.message());
            }
            Outcome::Requeue(PROGRESS_RECHECK)
        }
        None if running => Outcome::Requeue(PROGRESS_RECHECK),
        None => Outcome::Applied,
    })
}

/// The verification CronJob as it should be: applied with `spec.verify`, deleted
/// without it (its Jobs go with it; no dump is touched).
async fn verify_cronjob(ctx: &Context, backup: &Backup, cronjobs: &Owned<CronJob>) -> Result<Option<CronJob>, Error> {
    let ns = backup.namespace().unwrap_or_default();
    let settings = &ctx.settings;
    let images = build::VerifyImages {
        postgresql: bosun_resources::postgresql::image(&settings.postgres.image, VERIFY_POSTGRES_VERSION),
        mysql: bosun_resources::meta::versioned_image(&settings.stack.mysql, VERIFY_MYSQL_VERSION),
    };
    let Some(desired) = build::desired_verify_cronjob(backup, &settings.runner_image, &images) else {
        delete_child(ctx, backup, cronjobs, &ns, &build::verify_cronjob_name(&backup.name_any())).await?;
        return Ok(None);
    };
    let cached = cronjobs.get(&ns, &desired.name_any()).filter(|c| controlled_by(c.as_ref(), backup));
    claim_child(backup, &desired, cached.as_ref().map(|c| c.meta()))?;
    apply_child(ctx, backup, cronjobs, desired).await.map(Some)
}

/// The newest finished verification of `backup` with its result, unless the status
/// already tells of it.
async fn last_verification(
    ctx: &Context,
    backup: &Backup,
    cronjob: Option<&CronJob>,
    jobs: &Owned<Job>,
) -> Result<Option<Verification>, Error> {
    let Some(cronjob) = cronjob else { return Ok(None) };
    let mine = jobs.matching(|j| j.namespace() == cronjob.namespace() && controlled_by(j, cronjob));
    let Some((job, finish)) = build::newest_finished(mine.iter().map(|j| j.as_ref())) else { return Ok(None) };
    let Some((time, failed)) = finish.ended() else { return Ok(None) };
    let job = job.name_any();
    if build::verification_reported(backup.status.as_ref(), &job) {
        return Ok(None);
    }
    let result = run_result(ctx, &backup.namespace().unwrap_or_default(), &job, build::VERIFY_CONTAINER).await?;
    Ok(Some(Verification { job, time, failed, result }))
}

/// What the runs of a Backup tell.
#[derive(Default)]
struct Runs {
    /// The run to tell of in `LastBackupSucceeded`, if any.
    last_run: Option<LastRun>,
    /// Whether a run is in progress.
    running: bool,
    /// How far it is, as it last told.
    progress: Option<RunningBackup>,
}

/// The newest finished run of `backup`'s `cronjob` with its result, unless the status
/// already tells of it (or of a newer good one): then `None`, and no pod is read. Or,
/// while a newer run is in progress, an attempt of it that failed or its cause when it
/// cannot start; else, besides, how far it is.
async fn last_run(ctx: &Context, backup: &Backup, cronjob: Option<&CronJob>, jobs: &Owned<Job>) -> Result<Runs, Error> {
    let Some(cronjob) = cronjob else { return Ok(Runs::default()) };
    let ns = backup.namespace().unwrap_or_default();
    let mine = jobs.matching(|j| j.namespace() == cronjob.namespace() && controlled_by(j, cronjob));
    let finished = build::newest_finished(mine.iter().map(|j| j.as_ref()));
    // A run still going after the newest finished one: tell now of an attempt that
    // failed, or of what keeps it from starting.
    let running = build::newest_running(mine.iter().map(|j| j.as_ref()), finished.as_ref().map(|(j, _)| *j));
    if let Some(running) = running {
        let name = running.name_any();
        let pods = read::job_pods(&ctx.client, &ns, &name).await?;
        if let Some(result) = pods.iter().find_map(|p| build::run_result(p, build::BACKUP_CONTAINER))
            && result.error.is_some()
        {
            let last_run = Some(LastRun { job: name, finish: Finish::Retrying, result: Some(result) });
            return Ok(Runs { last_run, running: true, progress: None });
        }
        if let Some(cause) = read::pod_stuck(&ctx.client, ctx.now(), &ns, pods.first()).await? {
            let last_run = Some(LastRun { job: name, finish: Finish::Stuck(cause), result: None });
            return Ok(Runs { last_run, running: true, progress: None });
        }
        // Nothing to tell of it yet but how far it is; and of the finished run before
        // it, if not yet told.
        let progress = match pods.first().filter(|p| build::container_running(p, build::BACKUP_CONTAINER)) {
            // Progress is told as it comes: a log that cannot be read (the container
            // just ended, say) is no progress this time, not a failed reconcile.
            Some(pod) => {
                match read::log_tail(&ctx.client, &ns, &pod.name_any(), build::BACKUP_CONTAINER, PROGRESS_LINES).await {
                    Ok(log) => build::running_backup(&name, &log),
                    Err(e) => {
                        tracing::debug!(error = %e, job = %name, "no progress read");
                        None
                    }
                }
            }
            None => None,
        };
        return Ok(Runs { last_run: told_run(ctx, backup, finished).await?, running: true, progress });
    }
    Ok(Runs { last_run: told_run(ctx, backup, finished).await?, ..Runs::default() })
}

/// The finished run `finished` with its result, unless the status already tells of it
/// (or of a newer good one).
async fn told_run(ctx: &Context, backup: &Backup, finished: Option<(&Job, Finish)>) -> Result<Option<LastRun>, Error> {
    let ns = backup.namespace().unwrap_or_default();
    let Some((job, finish)) = finished else { return Ok(None) };
    let job_name = job.name_any();
    let status = backup.status.as_ref();
    let older_than_known_good = status
        .and_then(|s| s.last_successful_backup.as_ref())
        .is_some_and(|good| finish.time().is_some_and(|t| t.0 <= good.time.0));
    if build::reported(status, &job_name) || older_than_known_good {
        return Ok(None);
    }
    let result = run_result(ctx, &ns, &job_name, build::BACKUP_CONTAINER).await?;
    Ok(Some(LastRun { job: job_name, finish, result }))
}

/// What the `container` of the Job `job` reported, from its newest pod that did.
async fn run_result(ctx: &Context, ns: &str, job: &str, container: &str) -> Result<Option<RunResult>, Error> {
    let pods = read::job_pods(&ctx.client, ns, job).await?;
    Ok(pods.iter().find_map(|p| build::run_result(p, container)))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::mock;

    fn backup(schedule: &str) -> Arc<Backup> {
        let b = json!({
            "apiVersion": "backup.example.com/v1", "kind": "Backup",
            "metadata": {"name": "nightly", "namespace": "shop", "uid": "uid-backup", "generation": 2},
            "spec": {"schedule": schedule,
                     "source": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "db-credentials"}}},
                     "destination": {"type": "s3", "bucket": "dumps", "secretRef": {"name": "s3-credentials"}}},
        });
        Arc::new(serde_json::from_value(b).unwrap())
    }

    /// The apiserver: the Secrets `present` names hold every key; other Secrets are missing.
    fn api(
        b: &Backup,
        present: &'static [&'static str],
    ) -> impl Fn(&mock::Call) -> (u16, Value) + Send + Sync + 'static {
        let answer = mock::answer(b);
        move |call| match call.path.split_once("/secrets/") {
            Some((_, name)) if call.method == "GET" => {
                let name = name.split('?').next().unwrap_or_default();
                if present.contains(&name) {
                    let keys = ["username", "password", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
                    let data: serde_json::Map<String, Value> =
                        keys.iter().map(|k| ((*k).to_owned(), json!("eA=="))).collect();
                    (
                        200,
                        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "shop"}, "data": data}),
                    )
                } else {
                    mock::not_found(&format!("secrets \"{name}\""))
                }
            }
            _ => answer(call),
        }
    }

    fn ours(cronjob: CronJob) -> CronJob {
        let mut cronjob = cronjob;
        cronjob.metadata.uid = Some("uid-cronjob".to_owned());
        cronjob
    }

    #[tokio::test]
    async fn a_schedule_no_cronjob_can_run_is_refused_and_the_last_good_cronjob_stays() {
        let good = backup("0 2 * * *");
        let cronjob = ours(build::desired_cronjob(good.as_ref(), "runner"));
        let bad = backup("0 5-1 * * *");
        let (ctx, calls) = mock::context(api(bad.as_ref(), &["db-credentials", "s3-credentials"]));
        let outcome = reconcile(bad, ctx, mock::cache([cronjob]), mock::cache([])).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason: "InvalidSpec", message, .. } if message.contains("spec.schedule")),
            "{outcome:?}"
        );
        assert_eq!(calls.writes(), ["PATCH /apis/backup.example.com/v1/namespaces/shop/backups/nightly/status"]);
        assert_eq!(mock::condition(&calls, "Ready"), "False/InvalidSpec");
    }

    #[tokio::test]
    async fn a_missing_secret_is_told_before_any_run_meets_it() {
        let b = backup("0 2 * * *");
        let (ctx, calls) = mock::context(api(b.as_ref(), &["db-credentials"]));
        let outcome = reconcile(b, ctx, mock::cache([]), mock::cache([])).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason: "CredentialsMissing", message, .. } if message.contains("s3-credentials")),
            "{outcome:?}"
        );
        let writes = calls.writes();
        assert!(
            writes.contains(&"PATCH /apis/batch/v1/namespaces/shop/cronjobs/nightly-cronjob".to_owned()),
            "the CronJob is in place anyway: {writes:?}"
        );
        assert_eq!(mock::condition(&calls, "Ready"), "False/CredentialsMissing");
    }
}
