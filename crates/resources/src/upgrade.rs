//! Major-version upgrades of a PostgreSQL, in place: what bosun decides (pure) and the
//! Jobs it runs.
//!
//! Raising `spec.version` above the data's major (the `VERSION_LABEL` of the
//! StatefulSet) starts an upgrade, recorded step by step in `status.upgrade`:
//! `BackingUp` (a run of the database's Backup, awaited, when backups are on) →
//! `SwitchingOver` (to the first instance, which the StatefulSet starts first, when
//! another is the primary) → `Stopping` (the StatefulSet at 0 replicas) → `Upgrading`
//! (a Job on the primary's claim: the old major's binaries copied in by an init
//! container of the old image, `pg_upgrade --link` in the new image, both `bosun
//! upgrade` from the runner's binary; see `bosun_instance::upgrade`) → `Starting` (the new image; the standbys clone the
//! primary again) → `Analyzing` (`vacuumdb --all --analyze-in-stages` by the primary's
//! setup) → `Succeeded`. A step that fails ends in `Failed` with the step and why: the
//! database starts again on the old major, its data directory as it was, and the
//! upgrade is not tried again until the spec changes. Several majors at once are one
//! `pg_upgrade` (it upgrades from any major since 9.2). Lowering `spec.version` is
//! refused.
//!
//! `--link` rather than `--copy`: the new cluster's files are hard links to the old
//! one's, so the upgrade takes seconds whatever the size and needs no second copy of
//! the data on the claim. Until the new server first starts, the old directory is
//! intact (pg_upgrade renames one control file, which a failure puts back); afterwards
//! it is kept as `pgdata.v<old>` but cannot be started again — the backup of
//! `BackingUp` is the way back.

use std::collections::BTreeMap;

use bosun_api::postgresql::{MajorUpgrade, PostgreSQL, UpgradeStep, Version};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use bosun_instance::settings::env as contract;

use crate::postgresql::{
    CONTAINER, DATA_MOUNT, DATA_VOLUME, RUNNER_CONTAINER, RUNNER_MOUNT, RUNNER_VOLUME, VERSION_LABEL,
};

/// The marker the upgrade leaves in the new data directory; the primary's setup runs
/// `vacuumdb --all --analyze-in-stages` while it exists, then removes it.
pub use bosun_instance::setup::ANALYZE_MARKER;
/// Where the init container puts the old major's binaries.
const OLD_MOUNT: &str = bosun_instance::settings::defaults::UPGRADE_OLD;
const OLD_VOLUME: &str = "old-binaries";
/// The `app.kubernetes.io/name` of the upgrade Job's pod.
pub const UPGRADE_APP: &str = "postgresql-upgrade";
/// How long the upgrade Job may take: `--link` takes seconds to minutes; the old
/// server's crash recovery, if it was killed, may take longer.
const DEADLINE_SECONDS: i64 = 6 * 3600;

/// The major version of the data: the label bosun puts on the StatefulSet and the data
/// claims (the claims' when there is no StatefulSet: the database is created again on
/// kept claims). Claims of several majors: the lowest (the one not upgraded yet).
pub fn data_version(sts: Option<&StatefulSet>, claims: &[&PersistentVolumeClaim]) -> Option<Version> {
    let label = |labels: &BTreeMap<String, String>| labels.get(VERSION_LABEL).and_then(|v| Version::parse(v));
    match sts {
        Some(sts) => label(sts.labels()),
        None => claims.iter().filter_map(|c| label(c.labels())).min(),
    }
}

/// What to do about the major version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing: the data is of `spec.version` (or there is none yet).
    None,
    /// `spec.version` is below the data's major.
    Downgrade { data: Version },
    /// An upgrade, in progress or ended (`status.upgrade` as it should be now, before
    /// this look's steps).
    Upgrade(MajorUpgrade),
}

/// The upgrade `db` is in, from its status and its data's major.
///
/// An upgrade in progress goes on to its end; before its `Upgrading` step a
/// `spec.version` set back to the data's major abandons it. A failed upgrade stays
/// failed until the spec changes (a new `metadata.generation`).
pub fn plan(db: &PostgreSQL, data: Option<Version>, now: Timestamp) -> Plan {
    let wanted = db.spec.version;
    let generation = db.meta().generation.unwrap_or_default();
    let last = db.status.as_ref().and_then(|s| s.upgrade.as_ref());
    if let Some(last) = last.filter(|u| !u.step.ended()) {
        let before_the_data_changed =
            matches!(last.step, UpgradeStep::BackingUp | UpgradeStep::SwitchingOver | UpgradeStep::Stopping);
        if !(before_the_data_changed && data.is_some_and(|d| d >= wanted)) {
            return Plan::Upgrade(last.clone());
        }
        // Abandoned: back to serving the data as it is.
        return Plan::None;
    }
    let Some(data) = data else { return Plan::None };
    if wanted < data {
        return Plan::Downgrade { data };
    }
    if wanted == data {
        return Plan::None;
    }
    match last {
        Some(failed)
            if failed.step == UpgradeStep::Failed
                && failed.generation == generation
                && failed.to == wanted.as_str() =>
        {
            Plan::Upgrade(failed.clone())
        }
        _ => Plan::Upgrade(MajorUpgrade {
            from: data.as_str().to_owned(),
            to: wanted.as_str().to_owned(),
            step: UpgradeStep::BackingUp,
            failed_step: None,
            message: None,
            started: now.to_string(),
            finished: None,
            backup_job: None,
            generation,
        }),
    }
}

/// The major the instances run during `upgrade`: the old one until the data is
/// upgraded (and after a failure), the new one from `Starting` on.
pub fn running_version(upgrade: &MajorUpgrade) -> Option<Version> {
    let version = match upgrade.step {
        UpgradeStep::Starting | UpgradeStep::Analyzing | UpgradeStep::Succeeded => &upgrade.to,
        _ => &upgrade.from,
    };
    Version::parse(version)
}

/// How the instances run: the major, and whether they are stopped (an upgrade's
/// steps); what the StatefulSet's builder is given, not a copy of the resource with
/// its version rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub version: Version,
    pub stopped: bool,
}

impl Running {
    /// As `upgrade` says while there is one, else as the spec says.
    pub fn of(db: &PostgreSQL, upgrade: Option<&MajorUpgrade>) -> Running {
        match upgrade {
            Some(u) => Running { version: running_version(u).unwrap_or(db.spec.version), stopped: stopped(u) },
            None => Running { version: db.spec.version, stopped: false },
        }
    }
}

/// Whether the instances are stopped in this step.
pub fn stopped(upgrade: &MajorUpgrade) -> bool {
    matches!(upgrade.step, UpgradeStep::Stopping | UpgradeStep::Upgrading)
}

/// `upgrade` moved on to `step`.
pub fn next(upgrade: &MajorUpgrade, step: UpgradeStep, now: Timestamp) -> MajorUpgrade {
    MajorUpgrade {
        step,
        finished: step.ended().then(|| now.to_string()),
        message: (step == UpgradeStep::Succeeded).then(|| {
            format!("PostgreSQL {} → {}: upgraded with pg_upgrade --link and analyzed", upgrade.from, upgrade.to)
        }),
        ..upgrade.clone()
    }
}

/// `upgrade` failed in its current step, for `why`.
pub fn failed(upgrade: &MajorUpgrade, why: &str, now: Timestamp) -> MajorUpgrade {
    MajorUpgrade {
        step: UpgradeStep::Failed,
        failed_step: Some(upgrade.step),
        message: Some(why.to_owned()),
        finished: Some(now.to_string()),
        ..upgrade.clone()
    }
}

/// A step in words, for events and conditions.
pub fn describe(upgrade: &MajorUpgrade) -> String {
    let (from, to) = (&upgrade.from, &upgrade.to);
    match upgrade.step {
        UpgradeStep::BackingUp => format!("upgrading PostgreSQL {from} → {to}: taking a backup first"),
        UpgradeStep::SwitchingOver => {
            format!("upgrading PostgreSQL {from} → {to}: switching over to the first instance")
        }
        UpgradeStep::Stopping => format!("upgrading PostgreSQL {from} → {to}: stopping every instance"),
        UpgradeStep::Upgrading => {
            format!("upgrading PostgreSQL {from} → {to}: pg_upgrade --link on the primary's data")
        }
        UpgradeStep::Starting => {
            format!("upgrading PostgreSQL {from} → {to}: starting on {to}; the standbys clone the primary again")
        }
        UpgradeStep::Analyzing => format!("upgrading PostgreSQL {from} → {to}: vacuumdb --analyze-in-stages"),
        UpgradeStep::Succeeded => format!("upgraded PostgreSQL {from} → {to}"),
        UpgradeStep::Failed => format!(
            "the upgrade of PostgreSQL {from} → {to} failed in step {}: {}; the database runs on PostgreSQL {from}, \
             its data as before. Fix the cause and change the spec (e.g. an annotation) to try again, or set \
             spec.version back to \"{from}\"",
            upgrade.failed_step.map(|s| format!("{s:?}")).unwrap_or_default(),
            upgrade.message.as_deref().unwrap_or("no reason given")
        ),
    }
}

/// What the upgrade Job's pod said when it failed: the termination message of its
/// container (or of the init container that failed), `<step> failed: <why>`.
pub fn termination_message(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let statuses = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    statuses
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .filter(|t| t.exit_code != 0)
        .find_map(|t| t.message.as_deref().map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned))
}

/// The name of the upgrade Job of `db` for `upgrade`: one per attempt (its major and
/// generation), so that a retry never finds an earlier attempt's Job.
pub fn job_name(db: &PostgreSQL, upgrade: &MajorUpgrade) -> String {
    format!("{}-upgrade-{}-{}", db.name_any(), upgrade.to, upgrade.generation)
}

/// The name of the backup run taken before `upgrade`, by the CronJob `cronjob`.
pub fn backup_job_name(cronjob: &str, upgrade: &MajorUpgrade) -> String {
    format!("{}-up{}-{}", cronjob.trim_end_matches("-cronjob"), upgrade.to, upgrade.generation)
}

/// A run of a Backup's CronJob now, as `kubectl create job --from=cronjob/...` makes
/// one: its Job template, owned by the CronJob (whose Backup reports it like any run).
pub fn backup_run(cronjob: &CronJob, name: String) -> Option<Job> {
    let template = cronjob.spec.as_ref()?.job_template.clone();
    let owner = crate::meta::controller_ref(cronjob)?;
    let mut meta = template.metadata.unwrap_or_default();
    meta.name = Some(name);
    meta.namespace = cronjob.namespace();
    meta.owner_references = Some(vec![owner]);
    Some(Job { metadata: meta, spec: template.spec, status: None })
}

/// The Job that upgrades the data on `claim` from `upgrade.from` to `upgrade.to`: the
/// instances' pod spec (`pod`: their security context, the postgres container's
/// credentials and `PGDATA`, the runner's init container that brings `bosun`), an init
/// container of the old image copying its binaries, the new image running
/// pg_upgrade (`bosun upgrade copy|run`). Never retried by the Job controller: a failure is
/// reported, and the database started again on the old major.
/// `None` when `upgrade` names a major bosun does not know (a status edited by hand).
pub fn desired_job(
    db: &PostgreSQL,
    image_template: &str,
    pod: &PodSpec,
    upgrade: &MajorUpgrade,
    claim: &str,
) -> Option<Job> {
    let (Some(from), Some(to)) = (Version::parse(&upgrade.from), Version::parse(&upgrade.to)) else {
        return None;
    };
    let postgres = pod.containers.iter().find(|c| c.name == CONTAINER).cloned().unwrap_or_default();
    let keep = [contract::SUPERUSER, contract::PASSWORD, contract::PGDATA];
    let mut env: Vec<EnvVar> =
        postgres.env.iter().flatten().filter(|e| keep.contains(&e.name.as_str())).cloned().collect();
    for (name, value) in [
        (contract::UPGRADE_FROM, &upgrade.from),
        (contract::UPGRADE_TO, &upgrade.to),
        (contract::UPGRADE_OLD, &OLD_MOUNT.to_owned()),
    ] {
        env.push(EnvVar { name: name.to_owned(), value: Some(value.clone()), ..EnvVar::default() });
    }
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: (name == RUNNER_VOLUME).then_some(true),
        ..VolumeMount::default()
    };
    let (old, data, bosun) =
        (mount(OLD_VOLUME, OLD_MOUNT), mount(DATA_VOLUME, DATA_MOUNT), mount(RUNNER_VOLUME, RUNNER_MOUNT));
    // The root file system is read-only, as the instances': the socket and /tmp are not.
    let (writable_volumes, writable_mounts) = crate::postgresql::writable();
    let with_writable = |mut mounts: Vec<VolumeMount>| {
        mounts.extend(writable_mounts.iter().cloned());
        mounts
    };
    let step = |name: &str, version: Version, verb: &str, mounts: Vec<VolumeMount>| Container {
        name: name.to_owned(),
        image: Some(crate::postgresql::image(image_template, version)),
        image_pull_policy: postgres.image_pull_policy.clone(),
        command: Some(vec![format!("{RUNNER_MOUNT}/bosun"), "upgrade".to_owned(), verb.to_owned()]),
        env: Some(env.clone()),
        volume_mounts: Some(mounts),
        security_context: postgres.security_context.clone(),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    // The volume-permissions init container, if the instances have one, first (with
    // the data volume alone: the Job has no other of the instances' volumes), and the
    // runner's, which brings `bosun`.
    let mut init: Vec<Container> = pod
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.name == "volume-permissions")
        .map(|c| Container { volume_mounts: Some(vec![data.clone()]), ..c.clone() })
        .collect();
    init.extend(pod.init_containers.iter().flatten().filter(|c| c.name == RUNNER_CONTAINER).cloned());
    init.push(step("copy-old-binaries", from, "copy", with_writable(vec![old.clone(), bosun.clone()])));
    let runner = pod.volumes.iter().flatten().filter(|v| v.name == RUNNER_VOLUME).cloned();
    let volumes = vec![
        Volume {
            name: DATA_VOLUME.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_owned(),
                read_only: None,
            }),
            ..Volume::default()
        },
        Volume { name: OLD_VOLUME.to_owned(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
    ]
    .into_iter()
    .chain(runner)
    .chain(writable_volumes)
    .collect();
    // The Job carries the database's labels (its watch maps it back); its pod not:
    // the instances are the pods with them.
    let job_labels = crate::meta::standard_labels(crate::postgresql::APP_NAME, &db.name_any());
    let pod_labels = crate::meta::standard_labels(UPGRADE_APP, &db.name_any());
    Some(Job {
        metadata: crate::meta::child_meta(db, job_name(db, upgrade), job_labels),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            // Kept a week for its logs (`kubectl logs job/...`).
            ttl_seconds_after_finished: Some(7 * 24 * 3600),
            active_deadline_seconds: Some(DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    init_containers: Some(init),
                    containers: vec![step("upgrade", to, "run", with_writable(vec![data, old, bosun]))],
                    volumes: Some(volumes),
                    restart_policy: Some("Never".to_owned()),
                    security_context: pod.security_context.clone(),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use bosun_api::postgresql::{PostgreSQLSpec, PostgreSQLStatus};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus};

    use super::*;
    use crate::postgresql::{Settings, desired_statefulset};

    fn db(version: &str, generation: i64, upgrade: Option<MajorUpgrade>) -> PostgreSQL {
        let spec: PostgreSQLSpec =
            serde_yaml_ng::from_str(&format!(r#"{{version: "{version}", storage: 1Gi, replicas: 2}}"#)).expect("spec");
        let mut db = PostgreSQL::new("test-db", spec);
        db.metadata.namespace = Some("shop".into());
        db.metadata.uid = Some("uid-1".into());
        db.metadata.generation = Some(generation);
        db.status = Some(PostgreSQLStatus { upgrade, ..PostgreSQLStatus::default() });
        db
    }

    fn now() -> Timestamp {
        "2026-11-26T12:00:00Z".parse().expect("time")
    }

    fn planned(db: &PostgreSQL, data: Version) -> MajorUpgrade {
        match plan(db, Some(data), now()) {
            Plan::Upgrade(u) => u,
            other => panic!("expected an upgrade, got {other:?}"),
        }
    }

    #[test]
    fn a_raised_version_starts_an_upgrade_a_lowered_one_is_a_downgrade() {
        let u = planned(&db("15", 3, None), Version::V13);
        assert_eq!((u.from.as_str(), u.to.as_str(), u.step, u.generation), ("13", "15", UpgradeStep::BackingUp, 3));
        assert_eq!(plan(&db("13", 1, None), Some(Version::V15), now()), Plan::Downgrade { data: Version::V15 });
        assert_eq!(plan(&db("15", 1, None), Some(Version::V15), now()), Plan::None);
        assert_eq!(plan(&db("15", 1, None), None, now()), Plan::None, "no data yet: nothing to upgrade");
        // Two majors at once: one pg_upgrade.
        assert_eq!(planned(&db("17", 1, None), Version::V13).to, "17");
    }

    #[test]
    fn an_upgrade_in_progress_goes_on_and_a_failed_one_waits_for_a_new_generation() {
        let started = planned(&db("15", 3, None), Version::V13);
        let upgrading = next(&started, UpgradeStep::Upgrading, now());
        // Set back to 13 while pg_upgrade may run: it goes on to its end.
        assert_eq!(planned(&db("13", 4, Some(upgrading.clone())), Version::V13), upgrading);
        // Set back before the data was touched: abandoned.
        let stopping = next(&started, UpgradeStep::Stopping, now());
        assert_eq!(plan(&db("13", 4, Some(stopping)), Some(Version::V13), now()), Plan::None);
        let failed = failed(&upgrading, "Check failed: reg* columns", now());
        assert_eq!(failed.failed_step, Some(UpgradeStep::Upgrading));
        assert_eq!(planned(&db("15", 3, Some(failed.clone())), Version::V13), failed, "not tried again");
        let retry = planned(&db("15", 4, Some(failed)), Version::V13);
        assert_eq!((retry.step, retry.generation), (UpgradeStep::BackingUp, 4), "a changed spec tries again");
    }

    #[test]
    fn the_instances_run_the_old_major_until_the_data_is_upgraded() {
        let u = planned(&db("17", 1, None), Version::V13);
        let at = |step| running_version(&next(&u, step, now()));
        assert_eq!(at(UpgradeStep::Stopping), Some(Version::V13));
        assert!(stopped(&next(&u, UpgradeStep::Upgrading, now())));
        assert_eq!(at(UpgradeStep::Starting), Some(Version::V17));
        assert!(!stopped(&next(&u, UpgradeStep::Starting, now())));
        assert_eq!(running_version(&failed(&u, "x", now())), Some(Version::V13));
        assert!(describe(&failed(&u, "Check failed: x", now())).contains("runs on PostgreSQL 13"));
    }

    #[test]
    fn the_job_copies_the_old_binaries_with_the_old_image_and_upgrades_with_the_new_on_the_claim() {
        let database = db("17", 2, None);
        let pod = desired_statefulset(
            &database,
            &Settings::default(),
            None,
            "d",
            crate::upgrade::Running::of(&database, None),
        )
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
        let u = planned(&database, Version::V13);
        let job = desired_job(&database, "localhost/postgres:{version}", &pod, &u, "data-test-db-0").expect("job");
        assert_eq!(job.name_any(), "test-db-upgrade-17-2");
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        let pod = spec.template.spec.unwrap();
        let init = pod.init_containers.unwrap();
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [RUNNER_CONTAINER, "copy-old-binaries"], "bosun first: the next two run it");
        assert_eq!(init.last().unwrap().image.as_deref(), Some("localhost/postgres:13"));
        assert_eq!(init.last().unwrap().command.as_ref().unwrap(), &["/opt/bosun/bin/bosun", "upgrade", "copy"]);
        assert_eq!(pod.containers[0].image.as_deref(), Some("localhost/postgres:17"));
        assert_eq!(pod.containers[0].command.as_ref().unwrap(), &["/opt/bosun/bin/bosun", "upgrade", "run"]);
        let env = |name: &str| pod.containers[0].env.iter().flatten().find(|e| e.name == name).cloned();
        assert_eq!(env("BOSUN_FROM").and_then(|e| e.value).as_deref(), Some("13"));
        assert_eq!(env("BOSUN_TO").and_then(|e| e.value).as_deref(), Some("17"));
        let volumes: Vec<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert!(volumes.contains(&"bosun-runner"), "{volumes:?}");
        let claim = pod.volumes.clone().unwrap().into_iter().find_map(|v| v.persistent_volume_claim).unwrap();
        assert_eq!(claim.claim_name, "data-test-db-0");
        let labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels.get("app.kubernetes.io/name").map(String::as_str), Some(UPGRADE_APP), "not an instance");
        assert!(pod.containers[0].env.as_ref().unwrap().iter().any(|e| e.name == "POSTGRES_PASSWORD"));
    }

    #[test]
    fn a_failed_pod_says_which_step_failed() {
        let terminated = |code, message: &str| ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    message: Some(message.into()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        let pod = Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![terminated(0, "")]),
                container_statuses: Some(vec![terminated(1, "Check failed: pg_upgrade --check: reg* columns\n")]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert_eq!(termination_message(&pod).as_deref(), Some("Check failed: pg_upgrade --check: reg* columns"));
    }
}
