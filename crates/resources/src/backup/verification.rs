//! A Backup with `spec.verify` → the CronJob that restores its newest dump into a throwaway
//! server (`bosun verify run`), and what it reported.

use super::*;

/// The images of the throwaway servers verifications restore into (the operator's
/// flags), when `spec.verify.image` names none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyImages {
    pub postgresql: String,
    pub mysql: String,
}

/// The verification CronJob of `backup` (`None` without `spec.verify`): on its own
/// schedule, one pod a run, in which the throwaway server runs as a native sidecar
/// (listening on the pod's loopback address only, its data in an `emptyDir` that goes
/// with the pod, its password the pod's uid) and `bosun verify run` restores the
/// newest good dump into it and checks it. Nothing of the source database is given
/// to it; no attempt is retried (a second would find the first one's tables).
pub fn desired_verify_cronjob(backup: &Backup, runner_image: &str, images: &VerifyImages) -> Option<CronJob> {
    let verify = backup.spec.verify.as_ref()?;
    let name = backup.name_any();
    let engine = backup.spec.source.type_;
    let password_variable = engine_of(engine).password_variable();
    let (user, port) = match engine {
        SourceType::Mysql => ("root", 3306),
        _ => ("postgres", 5432),
    };
    let mut env = vec![
        value(contract::VERIFY_TARGET, format!("{}://{user}@127.0.0.1:{port}/{VERIFY_DATABASE}", engine.as_str())),
        pod_uid_env(password_variable),
    ];
    env.extend(verify.query.as_ref().map(|q| value(contract::VERIFY_QUERY, q.clone())));
    let mut pod =
        run_pod(VERIFY_CONTAINER, runner_image, &["verify", "run"], &backup.spec.destination, env, &name, "Never");
    let (server, volumes) = verify_server(engine, verify.image.as_deref(), images);
    pod.init_containers = Some(vec![server]);
    pod.volumes.get_or_insert_with(Vec::new).extend(volumes);
    let run = Scheduled {
        app: VERIFY_APP,
        name: verify_cronjob_name(&name),
        schedule: &verify.schedule,
        history: VERIFY_HISTORY,
        backoff_limit: 0,
        deadline: verify.active_deadline_seconds.unwrap_or_else(|| shortest_interval(&verify.schedule)),
    };
    Some(scheduled(backup, run, pod))
}

/// The variable `name` holding the pod's uid (the downward API): the throwaway
/// server's password, new for every run and written nowhere.
pub(super) fn pod_uid_env(name: &str) -> EnvVar {
    let uid = EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: "metadata.uid".to_owned(), api_version: None }),
        ..EnvVarSource::default()
    };
    EnvVar { name: name.to_owned(), value: None, value_from: Some(uid) }
}

/// The throwaway server of a verification of `engine`'s dumps, and its volumes: its
/// data, and the directories it writes outside it (its socket's, `/tmp`), as its root
/// filesystem is read-only.
pub(super) fn verify_server(
    engine: SourceType,
    image: Option<&str>,
    images: &VerifyImages,
) -> (Container, Vec<Volume>) {
    let (default_image, env, args, data, run) = match engine {
        SourceType::Mysql => (
            &images.mysql,
            vec![pod_uid_env("MYSQL_ROOT_PASSWORD"), value("MYSQL_DATABASE", VERIFY_DATABASE)],
            vec!["--bind-address=127.0.0.1", "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0"],
            "/var/lib/mysql",
            "/run/mysqld",
        ),
        _ => (
            &images.postgresql,
            vec![
                pod_uid_env("POSTGRES_PASSWORD"),
                value("POSTGRES_DB", VERIFY_DATABASE),
                value("PGDATA", "/var/lib/postgresql/data/pgdata"),
            ],
            // Only the pod's own containers reach it; what it holds goes with the pod,
            // so it need not survive a crash either.
            vec![
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            "/var/lib/postgresql/data",
            "/var/run/postgresql",
        ),
    };
    let writable = [("verify-data", data), ("verify-run", run), ("verify-tmp", "/tmp")];
    let container = Container {
        name: VERIFY_SERVER_CONTAINER.to_owned(),
        image: Some(image.unwrap_or(default_image).to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        // A native sidecar: started first, stopped once the verification has ended.
        restart_policy: Some("Always".to_owned()),
        args: Some(args.into_iter().map(str::to_owned).collect()),
        env: Some(env),
        volume_mounts: Some(
            writable
                .iter()
                .map(|(name, path)| VolumeMount {
                    name: (*name).to_owned(),
                    mount_path: (*path).to_owned(),
                    ..VolumeMount::default()
                })
                .collect(),
        ),
        resources: Some(crate::meta::requests(crate::meta::SERVER_CPU, crate::meta::SERVER_MEMORY)),
        security_context: Some(SecurityContext {
            run_as_user: Some(DATABASE_UID),
            run_as_group: Some(DATABASE_UID),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), add: None }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let volumes = writable
        .iter()
        .map(|(name, _)| Volume {
            name: (*name).to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        })
        .collect();
    (container, volumes)
}

/// Whether the status already tells of the verification `job`.
pub fn verification_reported(status: Option<&BackupStatus>, job: &str) -> bool {
    status.and_then(|s| s.last_verified.as_ref()).is_some_and(|v| v.job == job)
}

/// A finished verification run.
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    pub job: String,
    /// When it finished.
    pub time: Time,
    /// Why its Job failed; `None`: it succeeded.
    pub failed: Option<String>,
    /// What it reported (`None` when the pod is gone or wrote nothing).
    pub result: Option<RunResult>,
}

/// `LastVerificationSucceeded` for the finished verification `run`, and what the
/// status keeps of it.
pub(super) fn describe_verification(run: &Verification) -> (Desired, VerifiedBackup) {
    let prefix = job_prefix(&run.job);
    let result = run.result.clone().unwrap_or_default();
    let (outcome, condition) = match &run.failed {
        None if result.simulated => (
            VerifyOutcome::Succeeded,
            Desired::new(
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                true,
                reasons::SIMULATED,
                format!("{prefix}{SIMULATED_RUN}, so no dump was restored or checked"),
            ),
        ),
        None => {
            let message = match (&result.key, result.tables, result.rows) {
                (Some(key), Some(tables), Some(rows)) => {
                    let query = result.query_rows.map(|q| format!("; the query returned {q} rows")).unwrap_or_default();
                    format!("{prefix}restored {key} into a throwaway server: {tables} tables, {rows} rows{query}")
                }
                _ => format!("{prefix}succeeded; its result was not readable (pod gone)"),
            };
            (
                VerifyOutcome::Succeeded,
                Desired::new(backup_types::LAST_VERIFICATION_SUCCEEDED, true, reasons::VERIFIED, message),
            )
        }
        Some(why) => {
            let detail = result.error.clone().map_or_else(|| why.clone(), |e| format!("{e} ({why})"));
            let condition = Desired::new(
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                false,
                reasons::VERIFICATION_FAILED,
                format!("{prefix}failed: {detail}; nothing was deleted"),
            );
            (VerifyOutcome::Failed, condition)
        }
    };
    let verified = VerifiedBackup {
        time: run.time.clone(),
        outcome,
        key: result.key,
        duration_seconds: result.duration_seconds.map(|d| d.round() as i64),
        tables: result.tables,
        rows: result.rows,
        job: run.job.clone(),
    };
    (condition, verified)
}
