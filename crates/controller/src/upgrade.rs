//! The major-upgrade stage of the PostgreSQL pipeline: one step of
//! [`bosun_resources::upgrade`] per look, each idempotent (the Jobs have fixed names,
//! every wait reads what is), so a bosun restarted mid-upgrade carries on from what
//! `status.upgrade` and the cluster say. The step is written with the status at the
//! end of the look, with an event per step.

use std::time::Duration;

use bosun_api::backup::Backup;
use bosun_api::postgresql::{MajorUpgrade, PostgreSQL, SWITCHOVER_ANNOTATION, UpgradeStep, Version};
use bosun_resources::backup::{Finish, cronjob_name, finish};
use bosun_resources::postgresql as pg;
use bosun_resources::upgrade as build;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::apply::{create_if_absent, merge_into};
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;

/// How soon an upgrade in progress is looked at again.
pub const RECHECK: Duration = Duration::from_secs(3);
/// How long asking the primary whether it has analyzed may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the upgrade stage needs of the PostgreSQL's children.
#[derive(Debug)]
pub struct Seen<'a> {
    pub sts: Option<&'a StatefulSet>,
    pub pods: &'a [std::sync::Arc<Pod>],
    pub jobs: &'a Owned<Job>,
    pub backups: &'a Owned<Backup>,
    /// The instances' APIs.
    pub instances: &'a crate::instances::Instances,
}

pub use build::Running;

/// Take `upgrade` one step on, if its step is done: the upgrade as it stands now.
pub async fn advance(
    db: &PostgreSQL,
    ctx: &Context,
    seen: &Seen<'_>,
    upgrade: MajorUpgrade,
    now: Timestamp,
) -> Result<MajorUpgrade, Error> {
    let next = |step| build::next(&upgrade, step, now);
    let advanced = match upgrade.step {
        UpgradeStep::BackingUp => match backed_up(db, ctx, seen, &upgrade).await? {
            Backed::Done => next(UpgradeStep::SwitchingOver),
            Backed::Started(job) => MajorUpgrade { backup_job: Some(job), ..upgrade.clone() },
            Backed::Waiting => upgrade.clone(),
            Backed::Failed(why) => build::failed(&upgrade, &why, now),
        },
        UpgradeStep::SwitchingOver => {
            let first = pg::pod_name(db, 0);
            let primary = db.status.as_ref().and_then(|s| s.current_primary.as_deref());
            if db.spec.replicas <= 1 || primary.is_none_or(|p| p == first) {
                next(UpgradeStep::Stopping)
            } else {
                // The StatefulSet starts its pods in order and each waits for the one
                // before to be Ready: the upgraded primary must be the first.
                if db.annotations().get(SWITCHOVER_ANNOTATION) != Some(&first) {
                    merge_into::<PostgreSQL, _>(
                        ctx,
                        db,
                        json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: first}}}),
                    )
                    .await?;
                }
                upgrade.clone()
            }
        }
        UpgradeStep::Stopping if seen.pods.is_empty() => next(UpgradeStep::Upgrading),
        UpgradeStep::Stopping => upgrade.clone(),
        UpgradeStep::Upgrading => match upgraded(db, ctx, seen, &upgrade).await? {
            Some(Ok(())) => next(UpgradeStep::Starting),
            Some(Err(why)) => build::failed(&upgrade, &why, now),
            None => upgrade.clone(),
        },
        // (The claims are relabelled by the StatefulSet's stage, to the major that runs.)
        UpgradeStep::Starting => {
            let to = build::running_version(&upgrade).unwrap_or(db.spec.version);
            match primary_pod(db, seen) {
                Some(pod) if bosun_resources::failover::pod_ready(pod) && on(pod, to) => next(UpgradeStep::Analyzing),
                _ => upgrade.clone(),
            }
        }
        // Done when the primary's instance says its statistics are gathered (the
        // setup removed the upgrade's marker, [`build::ANALYZE_MARKER`]).
        UpgradeStep::Analyzing => match primary_pod(db, seen) {
            Some(pod) if bosun_resources::failover::pod_ready(pod) => {
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                match seen.instances.status(name, ASK_TIMEOUT).await {
                    Ok(status) if !status.analyze_pending => next(UpgradeStep::Succeeded),
                    _ => upgrade.clone(),
                }
            }
            _ => upgrade.clone(),
        },
        UpgradeStep::Succeeded | UpgradeStep::Failed => upgrade.clone(),
    };
    if advanced.step != upgrade.step || is_new(db, &upgrade) {
        announce(db, ctx, &advanced);
    }
    Ok(advanced)
}

/// Whether `upgrade` is not in the status yet (it starts with this look).
fn is_new(db: &PostgreSQL, upgrade: &MajorUpgrade) -> bool {
    db.status.as_ref().and_then(|s| s.upgrade.as_ref()) != Some(upgrade)
}

/// An event for the step `upgrade` is now in: a Warning when it failed.
fn announce(db: &PostgreSQL, ctx: &Context, upgrade: &MajorUpgrade) {
    let note = build::describe(upgrade);
    // One reason per step: events of one reason about one object are one series.
    let reason = match upgrade.step {
        UpgradeStep::BackingUp => "UpgradeBackingUp",
        UpgradeStep::SwitchingOver => "UpgradeSwitchingOver",
        UpgradeStep::Stopping => "UpgradeStopping",
        UpgradeStep::Upgrading => "UpgradeRunningPgUpgrade",
        UpgradeStep::Starting => "UpgradeStarting",
        UpgradeStep::Analyzing => "UpgradeAnalyzing",
        UpgradeStep::Succeeded => "Upgraded",
        UpgradeStep::Failed => bosun_api::conditions::reasons::UPGRADE_FAILED,
    };
    ctx.events.upgrade_step(&db.object_ref(&()), reason, upgrade.step == UpgradeStep::Failed, note);
}

/// The primary's pod (`status.currentPrimary`).
fn primary_pod<'a>(db: &PostgreSQL, seen: &'a Seen<'_>) -> Option<&'a Pod> {
    let primary = db.status.as_ref()?.current_primary.as_deref()?;
    seen.pods.iter().map(|p| p.as_ref()).find(|p| p.metadata.name.as_deref() == Some(primary))
}

/// Whether `pod` runs the major `version`.
fn on(pod: &Pod, version: Version) -> bool {
    pod.labels().get(pg::VERSION_LABEL).map(String::as_str) == Some(version.as_str())
}

enum Backed {
    Done,
    Started(String),
    Waiting,
    Failed(String),
}

/// The backup before the upgrade: a run of the database's Backup (as `kubectl create
/// job --from=cronjob/...`), done when the Backup reports it as its last success.
/// Without backups (or before the Backup was ever made) there is nothing to wait for.
async fn backed_up(db: &PostgreSQL, ctx: &Context, seen: &Seen<'_>, upgrade: &MajorUpgrade) -> Result<Backed, Error> {
    let ns = db.namespace().unwrap_or_default();
    let backup = seen.backups.get(&ns, &pg::backup_name(db)).filter(|b| controlled_by(b.as_ref(), db));
    let Some(backup) = backup.filter(|_| pg::backups_enabled(db)) else { return Ok(Backed::Done) };
    let cronjob = cronjob_name(&backup.name_any());
    let name = build::backup_job_name(&cronjob, upgrade);
    let reported =
        backup.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).and_then(|s| s.job.as_deref());
    if reported == Some(name.as_str()) {
        return Ok(Backed::Done);
    }
    let Some(started) = upgrade.backup_job.as_deref() else {
        let Some(cronjob) = Api::<CronJob>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&cronjob)
            .await
            .map_err(|source| Error::Read { what: format!("CronJob {ns}/{cronjob}"), source })?
        else {
            return Ok(Backed::Waiting);
        };
        let Some(job) = build::backup_run(&cronjob, name.clone()) else { return Ok(Backed::Waiting) };
        create_if_absent(ctx, backup.as_ref(), &job).await?;
        return Ok(Backed::Started(name));
    };
    let job = Api::<Job>::namespaced(ctx.client.clone(), &ns)
        .get_opt(started)
        .await
        .map_err(|source| Error::Read { what: format!("Job {ns}/{started}"), source })?;
    Ok(match job.as_ref().and_then(finish) {
        Some(Finish::Failed(_, why)) => {
            let said = backup
                .status
                .as_ref()
                .and_then(|s| {
                    s.conditions.iter().find(|c| c.type_ == bosun_api::conditions::backup_types::LAST_BACKUP_SUCCEEDED)
                })
                .filter(|c| c.status == "False")
                .map(|c| c.message.clone())
                .unwrap_or(why);
            Backed::Failed(format!("the backup before the upgrade (Job {started}) failed: {said}"))
        }
        None if job.is_none() => Backed::Failed(format!("the backup before the upgrade (Job {started}) is gone")),
        _ => Backed::Waiting,
    })
}

/// The upgrade Job on the primary's claim: created once, then its outcome (`None`
/// while it runs); a failure is what its pod said.
async fn upgraded(
    db: &PostgreSQL,
    ctx: &Context,
    seen: &Seen<'_>,
    upgrade: &MajorUpgrade,
) -> Result<Option<Result<(), String>>, Error> {
    let ns = db.namespace().unwrap_or_default();
    let name = build::job_name(db, upgrade);
    let job = match seen.jobs.get(&ns, &name).filter(|j| controlled_by(j.as_ref(), db)) {
        Some(job) => (*job).clone(),
        None => {
            let primary =
                db.status.as_ref().and_then(|s| s.current_primary.clone()).unwrap_or_else(|| pg::pod_name(db, 0));
            let claim = format!("{}-{primary}", pg::DATA_VOLUME);
            let Some(pod) = seen.sts.and_then(|s| s.spec.as_ref()?.template.spec.clone()) else { return Ok(None) };
            let Some(job) = build::desired_job(db, &ctx.settings.postgres.image, &pod, upgrade, &claim) else {
                return Ok(Some(Err(format!(
                    "status.upgrade names an unknown major: {} → {}",
                    upgrade.from, upgrade.to
                ))));
            };
            match create_if_absent(ctx, db, &job).await {
                Ok(job) => job,
                Err(err) if err.is_invalid_spec() => {
                    return Ok(Some(Err(format!("the upgrade Job was refused: {}", err.user_message()))));
                }
                Err(err) => return Err(err),
            }
        }
    };
    Ok(match finish(&job) {
        Some(Finish::Succeeded(_)) => Some(Ok(())),
        Some(Finish::Failed(_, why)) => {
            let pods = crate::read::job_pods(&ctx.client, &ns, &name).await?;
            let said = pods.iter().find_map(build::termination_message);
            Some(Err(said.unwrap_or(why)))
        }
        _ => {
            // A pod that cannot start (an image of the old or new major missing) would
            // hold the upgrade, and the database, stopped: the attempt ends, and its
            // Job goes first, so that it never starts beside the restarted instances.
            let pods = crate::read::job_pods(&ctx.client, &ns, &name).await?;
            match crate::read::pod_stuck(&ctx.client, ctx.now(), &ns, pods.first()).await? {
                Some(cause) => {
                    crate::apply::delete_exactly(ctx, &job).await?;
                    Some(Err(format!("the upgrade Job {name} cannot run: {cause}")))
                }
                None => None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    //! Each step of an upgrade against the mocked apiserver and the instances' APIs in
    //! memory: what it waits for, what it writes, where a failure leaves the database.
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::instances::fake::{self, FakeInstances};
    use crate::mock;

    fn db() -> PostgreSQL {
        serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "ns", "uid": "uid-db", "generation": 2},
            "spec": {"version": "17", "storage": "1Gi", "replicas": 2},
            "status": {"currentPrimary": "db-0"},
        }))
        .unwrap()
    }

    fn primary_pod() -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "db-0", "namespace": "ns", "labels": {pg::VERSION_LABEL: "17"}},
                "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    }

    fn analyzing() -> MajorUpgrade {
        serde_json::from_value(json!({"from": "13", "to": "17", "step": "Analyzing",
                                      "started": "2026-11-28T12:00:00Z", "generation": 2}))
        .unwrap()
    }

    /// The step after one look, with the primary's instance answering `status` (none:
    /// it cannot be asked).
    async fn look(status: Option<bosun_instance::status::Status>) -> UpgradeStep {
        let db = db();
        let fake = FakeInstances::start(&db).await;
        let reachable: &[&str] = if status.is_some() { &["db-0"] } else { &[] };
        if let Some(status) = status {
            fake.set(status);
        }
        let reach = fake.reach(&db, reachable);
        let (ctx, _calls) = mock::context(mock::answer(&db));
        let pods = [primary_pod()];
        let (jobs, backups) = (mock::cache::<Job>([]), mock::cache::<Backup>([]));
        let seen = Seen { sts: None, pods: &pods, jobs: &jobs, backups: &backups, instances: &reach };
        advance(&db, &ctx, &seen, analyzing(), "2026-11-28T12:05:00Z".parse().unwrap()).await.unwrap().step
    }

    #[tokio::test]
    async fn the_upgrade_ends_when_the_primarys_instance_has_gathered_its_statistics() {
        let mut pending = fake::primary("db-0");
        pending.analyze_pending = true;
        assert_eq!(look(Some(pending)).await, UpgradeStep::Analyzing, "still analyzing");
        assert_eq!(look(None).await, UpgradeStep::Analyzing, "an instance that cannot be asked proves nothing");
        assert_eq!(look(Some(fake::primary("db-0"))).await, UpgradeStep::Succeeded);
    }

    fn upgrade_at(step: &str) -> MajorUpgrade {
        serde_json::from_value(json!({"from": "13", "to": "17", "step": step,
                                      "started": "2026-11-28T12:00:00Z", "generation": 2}))
        .unwrap()
    }

    fn with_primary(primary: &str, replicas: i32) -> PostgreSQL {
        let mut db = db();
        db.spec.replicas = replicas;
        db.status.as_mut().unwrap().current_primary = Some(primary.into());
        db
    }

    fn pod_at(name: &str, major: &str, ready: bool) -> Arc<Pod> {
        let ready = if ready { "True" } else { "False" };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "labels": {pg::VERSION_LABEL: major}},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap(),
        )
    }

    /// The upgrade Job of `db` as the Job controller left it: `condition` True.
    fn job(db: &PostgreSQL, condition: &str) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": build::job_name(db, &upgrade_at("Upgrading")), "namespace": "ns",
                         "ownerReferences": [{"apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
                                              "name": "db", "uid": "uid-db", "controller": true}]},
            "status": {"conditions": [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded",
                                       "lastTransitionTime": "2026-11-28T12:04:00Z"}],
                       "completionTime": "2026-11-28T12:04:00Z"},
        }))
        .unwrap()
    }

    /// One look at `upgrade` of `db` with these pods and Jobs; the apiserver answers
    /// with `respond`.
    async fn step(
        db: &PostgreSQL,
        upgrade: MajorUpgrade,
        (pods, jobs): (&[Arc<Pod>], Vec<Job>),
        respond: impl Fn(&mock::Call) -> (u16, serde_json::Value) + Send + Sync + 'static,
    ) -> (MajorUpgrade, mock::Calls) {
        let fake = FakeInstances::start(db).await;
        let reach = fake.reach(db, &[]);
        let (ctx, calls) = mock::context(respond);
        let (jobs, backups) = (mock::cache::<Job>(jobs), mock::cache::<Backup>([]));
        let sts = pg::desired_statefulset(
            db,
            &pg::Settings::default(),
            None,
            "d",
            bosun_resources::upgrade::Running::of(db, None),
        );
        let seen = Seen { sts: Some(&sts), pods, jobs: &jobs, backups: &backups, instances: &reach };
        let now = "2026-11-28T12:05:00Z".parse().unwrap();
        (advance(db, &ctx, &seen, upgrade, now).await.unwrap(), calls)
    }

    #[tokio::test]
    async fn without_backups_the_upgrade_goes_to_the_switchover_and_the_first_instance_becomes_the_primary() {
        let db = with_primary("db-0", 2);
        let (u, _) = step(&db, upgrade_at("BackingUp"), (&[], vec![]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::SwitchingOver, "no Backup: nothing to wait for");

        // db-1 is the primary: a switchover to db-0 is asked (the annotation), and awaited.
        let db = with_primary("db-1", 2);
        let (answer, stored) = (mock::answer(&db), serde_json::to_value(&db).unwrap());
        let respond = move |call: &mock::Call| match call.method.as_str() {
            "PATCH" => (200, stored.clone()),
            _ => answer(call),
        };
        let (u, calls) = step(&db, upgrade_at("SwitchingOver"), (&[], vec![]), respond).await;
        assert_eq!(u.step, UpgradeStep::SwitchingOver);
        let patch = calls.body("/postgresqls/db").unwrap();
        assert_eq!(patch["metadata"]["annotations"][SWITCHOVER_ANNOTATION], "db-0");
        let db = with_primary("db-0", 2);
        let (u, calls) = step(&db, upgrade_at("SwitchingOver"), (&[], vec![]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::Stopping);
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());
    }

    #[tokio::test]
    async fn pg_upgrade_runs_once_every_instance_is_stopped_and_its_job_decides() {
        let db = with_primary("db-0", 2);
        let running = [pod_at("db-0", "13", true)];
        let (u, _) = step(&db, upgrade_at("Stopping"), (&running, vec![]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::Stopping, "an instance still runs");
        let (u, _) = step(&db, upgrade_at("Stopping"), (&[], vec![]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::Upgrading);

        // The Job, created on the primary's claim, once.
        let (u, calls) = step(&db, upgrade_at("Upgrading"), (&[], vec![]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::Upgrading);
        let writes: Vec<String> = calls.writes().into_iter().filter(|w| !w.starts_with("GET")).collect();
        assert_eq!(writes, ["POST /apis/batch/v1/namespaces/ns/jobs"]);
        let created = calls.body("/jobs").unwrap();
        let volumes = created["spec"]["template"]["spec"]["volumes"].as_array().unwrap().clone();
        assert!(volumes.iter().any(|v| v["persistentVolumeClaim"]["claimName"] == "data-db-0"), "{volumes:?}");

        let (u, _) = step(&db, upgrade_at("Upgrading"), (&[], vec![job(&db, "Complete")]), mock::answer(&db)).await;
        assert_eq!(u.step, UpgradeStep::Starting);
    }

    #[tokio::test]
    async fn a_failed_pg_upgrade_says_its_pods_message_and_the_database_runs_the_old_major_again() {
        let db = with_primary("db-0", 2);
        // The Job's pod, listed by its job-name label: its termination message.
        let pod = json!({"metadata": {"name": "db-upgrade-17-2-x", "namespace": "ns"},
                         "status": {"containerStatuses": [{"name": "upgrade", "image": "p", "imageID": "", "ready": false,
                                    "restartCount": 0, "state": {"terminated": {"exitCode": 1,
                                    "message": "Check failed: pg_upgrade --check failed (exit status: 1): reg* columns"}}}]}});
        let answer = mock::answer(&db);
        let respond = move |call: &mock::Call| {
            if call.method == "GET" && call.path.contains("/pods") {
                return (200, json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod.clone()]}));
            }
            answer(call)
        };
        let (u, _) = step(&db, upgrade_at("Upgrading"), (&[], vec![job(&db, "Failed")]), respond).await;
        assert_eq!((u.step, u.failed_step), (UpgradeStep::Failed, Some(UpgradeStep::Upgrading)));
        assert!(u.message.as_deref().unwrap().starts_with("Check failed: pg_upgrade --check"), "{u:?}");
        // The rollback: the instances start again, on the old major (the data as it was).
        assert_eq!(Running::of(&db, Some(&u)), Running { version: Version::V13, stopped: false });
        assert_eq!(Running::of(&db, Some(&upgrade_at("Upgrading"))), Running { version: Version::V13, stopped: true });
        assert_eq!(Running::of(&db, Some(&upgrade_at("Starting"))), Running { version: Version::V17, stopped: false });
        // A failed upgrade stays failed: no further step, no write.
        let (again, calls) = step(&db, u.clone(), (&[], vec![]), mock::answer(&db)).await;
        assert_eq!(again, u);
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());
    }

    #[tokio::test]
    async fn the_new_major_starts_when_the_primary_is_ready_on_it() {
        let db = with_primary("db-0", 2);
        for (pods, expected) in [
            (vec![pod_at("db-0", "17", false)], UpgradeStep::Starting),
            (vec![pod_at("db-0", "13", true)], UpgradeStep::Starting),
            (vec![pod_at("db-0", "17", true)], UpgradeStep::Analyzing),
        ] {
            let (u, _) = step(&db, upgrade_at("Starting"), (&pods, vec![]), mock::answer(&db)).await;
            assert_eq!(u.step, expected, "{pods:?}");
        }
    }
}
