use bosun_api::backup::{Restore, RestoreSpec};
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
use serde_json::json;

use super::*;

/// The spec's `nightly` example, as stored (with a uid, so children get an owner).
fn nightly() -> Backup {
    serde_json::from_value(json!({
        "apiVersion": "backup.example.com/v1",
        "kind": "Backup",
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {
            "source": {"type": "postgresql", "connection": {"host": "test-db", "port": 5432, "database": "app", "secretRef": {"name": "test-db-credentials"}}},
            "destination": {"type": "s3", "bucket": "backups"},
            "schedule": "0 2 * * *",
            "retention": "30d"
        }
    }))
    .expect("nightly")
}

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).expect("time"))
}

fn env_of(spec: &PodSpec) -> &[EnvVar] {
    spec.containers[0].env.as_deref().unwrap_or_default()
}

fn env_value<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a str> {
    env_of(spec).iter().find(|e| e.name == name)?.value.as_deref()
}

#[test]
fn schedules_a_cronjob_accepts() {
    for ok in [
        "0 2 * * *",
        "*/15 * * * *",
        "0 9-17 * * MON-FRI",
        "30 3 1,15 * *",
        "0 0 1 jan *",
        "0 0 * * 0",
        "0 0 ? * 6",
        "@daily",
        "@hourly",
        "5 4 * * sun",
    ] {
        assert_eq!(validate_schedule("spec.schedule", ok), Ok(()), "{ok}");
    }
}

#[test]
fn bad_schedules_are_refused_naming_the_field() {
    for bad in [
        "61 * * * *",
        "every day",
        "* * * *",
        "* * * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 7",
        "*/0 * * * *",
        "5-1 * * * *",
        "@every 1h",
        "@sometimes",
        "",
    ] {
        let Err(Refusal::InvalidSpec(message)) = validate_schedule("spec.schedule", bad) else {
            panic!("{bad:?} was accepted")
        };
        assert!(message.starts_with("spec.schedule"), "{message}");
    }
}

#[test]
fn the_crd_pattern_and_the_controller_agree() {
    // The same expression goes into the CRD's CEL rule: Rust's regex must agree with
    // the examples the schema is meant to refuse or let through.
    let re = regex::Regex::new(&schedule_pattern()).expect("pattern compiles");
    assert!(re.is_match("0 2 * * *") && re.is_match("@weekly"));
    assert!(!re.is_match("61 * * * *") && !re.is_match("every day"));
}

#[test]
fn retention_is_checked_naming_the_field() {
    let mut b = nightly();
    assert_eq!(validate(&b), Ok(()));
    for bad in ["forever", "0d", "30"] {
        b.spec.retention = Some(bad.into());
        let Err(Refusal::InvalidSpec(message)) = validate(&b) else { panic!("{bad} accepted") };
        assert!(message.contains("spec.retention"), "{message}");
    }
}

#[test]
fn an_encrypted_destination_mounts_only_the_identities_and_names_the_secret() {
    let plain = desired_cronjob(&nightly(), DEFAULT_RUNNER_IMAGE);
    let mut b = nightly();
    b.spec.destination.encryption =
        Some(bosun_api::backup::Encryption { secret_ref: bosun_api::backup::SecretRef { name: "backup-key".into() } });
    let pod_of = |cj: CronJob| cj.spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
    let pod = pod_of(desired_cronjob(&b, DEFAULT_RUNNER_IMAGE));
    assert_eq!(
        env_value(&pod, "BOSUN_BACKUP_ENCRYPTION_KEY_FILE"),
        Some("/var/run/secrets/bosun/encryption/identities")
    );
    assert_eq!(
        env_value(&pod, "BOSUN_BACKUP_ENCRYPTION_KEY_NAME"),
        Some("Secret $(BOSUN_BACKUP_NAMESPACE)/backup-key (key identities)")
    );
    let names: Vec<&str> = env_of(&pod).iter().map(|e| e.name.as_str()).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(at("BOSUN_BACKUP_NAMESPACE") < at("BOSUN_BACKUP_ENCRYPTION_KEY_NAME"), "expanded: defined before");
    let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "encryption-key").expect("volume");
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("backup-key"));
    let items: Vec<&str> = secret.items.iter().flatten().map(|i| i.key.as_str()).collect();
    assert_eq!(items, ["identities"], "only the identities, nothing else the Secret holds");
    let mount = pod.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "encryption-key");
    assert_eq!(mount.map(|m| (m.mount_path.as_str(), m.read_only)), Some((ENCRYPTION_MOUNT, Some(true))));
    // Without encryption the pod is what it was: nothing of it appears.
    let plain = pod_of(plain);
    assert!(env_of(&plain).iter().all(|e| !e.name.contains("ENCRYPTION")));
    assert!(plain.volumes.iter().flatten().all(|v| v.name != "encryption-key"));

    let needs =
        secrets_needed(&b.spec.source, "spec.source.connection.secretRef", &b.spec.destination, "spec.destination");
    let message = missing_credentials(&needs, "shop", |name| {
        (name == "test-db-credentials").then(|| vec!["username".to_owned(), "password".to_owned()])
    });
    assert_eq!(
        message.as_deref(),
        Some(
            "spec.destination.encryption.secretRef: Secret backup-key does not exist in namespace shop; runs cannot start until it does"
        )
    );
    let message = missing_credentials(&needs, "shop", |name| {
        Some(if name == "backup-key" {
            vec!["age.key".to_owned()]
        } else {
            vec!["username".to_owned(), "password".to_owned()]
        })
    });
    assert!(message.is_some_and(|m| m.contains("Secret backup-key has no key identities")));
}

#[test]
fn the_nightly_example_becomes_a_cronjob_as_the_spec_says() {
    let cj = desired_cronjob(&nightly(), "localhost/bosun-runner:dev");
    assert_eq!(cj.metadata.name.as_deref(), Some("nightly-cronjob"));
    assert_eq!(cj.metadata.namespace.as_deref(), Some("shop"));
    let owner = &cj.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Backup", Some(true)));
    let spec = cj.spec.as_ref().expect("spec");
    assert_eq!(spec.schedule, "0 2 * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(spec.suspend, Some(false));
    assert_eq!((spec.successful_jobs_history_limit, spec.failed_jobs_history_limit), (Some(3), Some(3)));
    let template = spec.job_template.spec.as_ref().expect("job").template.clone();
    let labels = template.metadata.and_then(|m| m.labels).expect("pod labels");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "bosun");
    let pod = template.spec.expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = &pod.containers[0];
    assert_eq!(c.name, "backup");
    assert_eq!(c.image.as_deref(), Some("localhost/bosun-runner:dev"));
    assert_eq!(c.args, Some(vec!["backup".to_owned(), "run".to_owned()]));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_SOURCE"), Some("postgresql://$(BOSUN_DB_USERNAME)@test-db:5432/app"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("s3://backups"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_RETENTION"), Some("30d"));
    let ns = env_of(&pod).iter().find(|e| e.name == "BOSUN_BACKUP_NAMESPACE").and_then(|e| e.value_from.clone());
    assert_eq!(ns.and_then(|v| v.field_ref).map(|f| f.field_path).as_deref(), Some("metadata.namespace"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
    assert_eq!(env_value(&pod, "BOSUN_RESULT_FILE"), Some("/dev/termination-log"));
    // Credentials only by reference.
    for name in ["BOSUN_DB_USERNAME", "PGPASSWORD"] {
        let var = env_of(&pod).iter().find(|e| e.name == name).expect(name);
        assert_eq!(var.value, None);
        let r = var.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).expect("secretKeyRef");
        assert_eq!(r.name, "test-db-credentials");
    }
}

#[test]
fn destinations_map_to_runner_urls_and_mounts() {
    let mut b = nightly();
    b.spec.destination.prefix = Some("/team/db/".into());
    b.spec.destination.endpoint = Some("http://minio:9000".into());
    b.spec.destination.secret_ref = Some(bosun_api::backup::SecretRef { name: "s3-creds".into() });
    b.spec.keep_last = Some(5);
    b.spec.source.type_ = SourceType::Mysql;
    b.spec.source.connection.port = None;
    b.spec.source.connection.database = "my db".into();
    let pod = desired_cronjob(&b, "img").spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("s3://backups/team/db"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_ENDPOINT"), Some("http://minio:9000"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_KEEP_LAST"), Some("5"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_SOURCE"), Some("mysql://$(BOSUN_DB_USERNAME)@test-db:3306/my%20db"));
    assert!(env_of(&pod).iter().any(|e| e.name == "MYSQL_PWD" && e.value_from.is_some()));
    let from = pod.containers[0].env_from.as_ref().expect("envFrom");
    assert_eq!(from[0].secret_ref.as_ref().map(|s| s.name.as_str()), Some("s3-creds"));
    b.spec.destination.type_ = DestinationType::Pvc;
    b.spec.destination.bucket = "dumps".into();
    let pod = desired_cronjob(&b, "img").spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("file:///backups/team/db"));
    let claim = pod.volumes.iter().flatten().find_map(|v| v.persistent_volume_claim.as_ref()).expect("claim");
    assert_eq!(claim.claim_name, "dumps");
}

fn verified(engine: &str, verify: serde_json::Value) -> Backup {
    let mut b = serde_json::to_value(nightly()).unwrap();
    b["spec"]["source"]["type"] = json!(engine);
    b["spec"]["verify"] = verify;
    serde_json::from_value(b).unwrap()
}

const IMAGES: fn() -> VerifyImages = || VerifyImages { postgresql: "postgres:17".into(), mysql: "mysql:8.4".into() };

#[test]
fn a_verification_pod_runs_its_server_beside_the_runner_on_the_loopback_only() {
    assert_eq!(desired_verify_cronjob(&nightly(), "img", &IMAGES()), None, "none without spec.verify");
    let b = verified("postgresql", json!({"schedule": "0 6 * * 0", "query": "SELECT 1 FROM t"}));
    let cj = desired_verify_cronjob(&b, "img", &IMAGES()).expect("a CronJob");
    assert_eq!(cj.metadata.name.as_deref(), Some("nightly-verify"));
    let spec = cj.spec.unwrap();
    assert_eq!((spec.schedule.as_str(), spec.successful_jobs_history_limit), ("0 6 * * 0", Some(1)));
    let job = spec.job_template.spec.unwrap();
    // No retry (a second attempt would meet the first one's tables); a week's deadline at most a day.
    assert_eq!((job.backoff_limit, job.active_deadline_seconds), (Some(0), Some(MAX_RUN_DEADLINE_SECONDS)));
    let pod = job.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let runner = &pod.containers[0];
    assert_eq!(runner.args.as_deref(), Some(&["verify".to_owned(), "run".to_owned()][..]));
    assert_eq!(env_value(&pod, "BOSUN_VERIFY_TARGET"), Some("postgresql://postgres@127.0.0.1:5432/verify"));
    assert_eq!(env_value(&pod, "BOSUN_VERIFY_QUERY"), Some("SELECT 1 FROM t"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
    // Nothing of the source database: not its Secret, not its host.
    let text = serde_json::to_string(&pod).unwrap();
    assert!(!text.contains("test-db"), "the source is not reachable from a verification: {text}");
    let server = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!((server.restart_policy.as_deref(), server.image.as_deref()), (Some("Always"), Some("postgres:17")));
    assert!(server.args.iter().flatten().any(|a| a == "listen_addresses=127.0.0.1"), "{:?}", server.args);
    // One password, the pod's uid, for both; written nowhere.
    let uid = |c: &Container, name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.clone())
    };
    assert_eq!(uid(server, "POSTGRES_PASSWORD").as_deref(), Some("metadata.uid"));
    assert_eq!(uid(runner, "PGPASSWORD").as_deref(), Some("metadata.uid"));
    let data = pod.volumes.iter().flatten().find(|v| v.name == "verify-data").expect("its data volume");
    assert_eq!(data.empty_dir, Some(EmptyDirVolumeSource::default()), "the data goes with the pod");
    // A read-only root: what the server writes outside its data is on emptyDirs.
    let written = |server: &Container| {
        let sc = server.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        server.volume_mounts.iter().flatten().map(|m| m.mount_path.clone()).collect::<Vec<_>>()
    };
    assert_eq!(written(server), ["/var/lib/postgresql/data", "/var/run/postgresql", "/tmp"]);

    let mysql = verified("mysql", json!({"schedule": "@weekly", "image": "mariadb:11", "activeDeadlineSeconds": 3600}));
    let job = desired_verify_cronjob(&mysql, "img", &IMAGES()).unwrap().spec.unwrap().job_template.spec.unwrap();
    assert_eq!(job.active_deadline_seconds, Some(3600));
    let pod = job.template.spec.unwrap();
    let server = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(server.image.as_deref(), Some("mariadb:11"), "spec.verify.image wins");
    assert!(server.args.iter().flatten().any(|a| a == "--bind-address=127.0.0.1"));
    assert_eq!(uid(server, "MYSQL_ROOT_PASSWORD").as_deref(), Some("metadata.uid"));
    assert_eq!(written(server), ["/var/lib/mysql", "/run/mysqld", "/tmp"]);
    assert_eq!(env_value(&pod, "BOSUN_VERIFY_TARGET"), Some("mysql://root@127.0.0.1:3306/verify"));
    assert_eq!(env_value(&pod, "BOSUN_VERIFY_QUERY"), None);
}

#[test]
fn a_bad_verify_schedule_is_refused_naming_its_field() {
    let b = verified("postgresql", json!({"schedule": "0 6-1 * * *"}));
    let Err(Refusal::InvalidSpec(message)) = validate(&b) else { panic!("accepted") };
    assert!(message.starts_with("spec.verify.schedule \"0 6-1 * * *\""), "{message}");
}

#[test]
fn the_longest_interval_of_a_schedule_spans_its_quiet_days() {
    assert_eq!(longest_interval("0 6 * * 0"), Some(7 * 86400));
    assert_eq!(longest_interval("0 2 * * *"), Some(86400));
    assert_eq!(longest_interval("*/5 * * * 1-5"), Some(2 * 86400 + 300), "a weekday schedule's weekend");
    assert_eq!(longest_interval("@monthly"), Some(31 * 86400));
    assert_eq!(longest_interval("not a schedule"), None);
}

#[test]
fn a_verification_is_told_once_and_a_failure_keeps_the_last_good_one() {
    let mut b = verified("postgresql", json!({"schedule": "0 6 * * 0"}));
    let cj = desired_cronjob(&b, "img");
    let now = Timestamp::from_second(1000).unwrap();
    let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
    assert_eq!(condition(&s, "LastVerificationSucceeded").reason, "NoRunYet");
    b.status = Some(s);
    let good = Verification {
        job: "verify-1".into(),
        time: at(300),
        failed: None,
        result: Some(RunResult {
            key: Some("shop/nightly/x.pgdump.zst".into()),
            size: Some(42),
            tables: Some(3),
            rows: Some(1200),
            query_rows: Some(1),
            duration_seconds: Some(12.4),
            ..Default::default()
        }),
    };
    let observed = Observed { cronjob: Some(&cj), verification: Some(&good), ..Observed::default() };
    let s = backup_status(&b, observed, now);
    let v = s.last_verified.clone().unwrap();
    assert_eq!(
        (v.outcome, v.key.as_deref(), v.tables, v.rows, v.duration_seconds, v.job.as_str()),
        (VerifyOutcome::Succeeded, Some("shop/nightly/x.pgdump.zst"), Some(3), Some(1200), Some(12), "verify-1")
    );
    assert_eq!(s.last_successful_verification, Some(at(300)));
    let c = condition(&s, "LastVerificationSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Verified"));
    assert_eq!(
        c.message,
        "Job verify-1 restored shop/nightly/x.pgdump.zst into a throwaway server: 3 tables, 1200 rows; the query returned 1 rows"
    );
    b.status = Some(s.clone());
    assert!(verification_reported(b.status.as_ref(), "verify-1"));
    assert_eq!(backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now), s, "steady");

    let bad = Verification {
        job: "verify-2".into(),
        time: at(900),
        failed: Some("BackoffLimitExceeded".into()),
        result: Some(RunResult {
            key: Some("shop/nightly/x.pgdump.zst".into()),
            error: Some("shop/nightly/x.pgdump.zst: downloading the dump failed: zstd".into()),
            ..Default::default()
        }),
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), verification: Some(&bad), ..Observed::default() }, now);
    let v = s.last_verified.clone().unwrap();
    assert_eq!(
        (v.outcome, v.time.clone(), v.key.as_deref()),
        (VerifyOutcome::Failed, at(900), Some("shop/nightly/x.pgdump.zst"))
    );
    assert_eq!(s.last_successful_verification, Some(at(300)), "the last good verification is kept");
    let c = condition(&s, "LastVerificationSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "VerificationFailed"));
    assert!(c.message.contains("zstd") && c.message.ends_with("nothing was deleted"), "{}", c.message);

    // Without spec.verify: no condition about it.
    b.spec.verify = None;
    let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
    assert!(s.conditions.iter().all(|c| c.type_ != "LastVerificationSucceeded"));
}

fn job(name: &str, finished: Option<(bool, i64)>) -> Job {
    let conditions = finished.map(|(ok, t)| {
        vec![JobCondition {
            type_: if ok { "Complete" } else { "Failed" }.into(),
            status: "True".into(),
            reason: (!ok).then(|| "BackoffLimitExceeded".into()),
            message: (!ok).then(|| "Job has reached the specified backoff limit".into()),
            last_transition_time: Some(at(t)),
            ..JobCondition::default()
        }]
    });
    Job {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: None,
        status: Some(JobStatus {
            start_time: Some(at(10)),
            completion_time: finished.filter(|(ok, _)| *ok).map(|(_, t)| at(t)),
            conditions,
            ..JobStatus::default()
        }),
    }
}

fn condition<'a>(s: &'a BackupStatus, t: &str) -> &'a bosun_api::conditions::Condition {
    s.conditions.iter().find(|c| c.type_ == t).expect(t)
}

#[test]
fn a_good_run_is_kept_through_later_failures() {
    let mut b = nightly();
    let cj = desired_cronjob(&b, "img");
    let now = Timestamp::from_second(1000).unwrap();
    let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
    assert_eq!(condition(&s, "Ready").status, "True");
    assert_eq!(condition(&s, "LastBackupSucceeded").status, "Unknown");
    b.status = Some(s);

    let good = LastRun {
        job: "nightly-cronjob-1".into(),
        finish: Finish::Succeeded(at(100)),
        result: Some(RunResult { key: Some("shop/nightly/x.pgdump.zst".into()), size: Some(42), ..Default::default() }),
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&good), ..Observed::default() }, now);
    let last = s.last_successful_backup.clone().expect("last good");
    assert_eq!((last.key.as_str(), last.size, last.time.clone()), ("shop/nightly/x.pgdump.zst", 42, at(100)));
    assert_eq!(condition(&s, "LastBackupSucceeded").status, "True");
    b.status = Some(s.clone());
    assert!(reported(b.status.as_ref(), "nightly-cronjob-1"));
    // Steady state: nothing new → the same status.
    assert_eq!(backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now), s);

    let bad = LastRun {
        job: "nightly-cronjob-2".into(),
        finish: Finish::Failed(at(200), "BackoffLimitExceeded".into()),
        result: Some(RunResult { error: Some("pg_dump: password authentication failed".into()), ..Default::default() }),
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&bad), ..Observed::default() }, now);
    assert_eq!(s.last_successful_backup, Some(last), "a failure keeps the last good dump");
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupFailed"));
    assert!(c.message.contains("password authentication failed"), "{}", c.message);
    b.status = Some(s);
    assert!(reported(b.status.as_ref(), "nightly-cronjob-2"));
    assert!(!reported(b.status.as_ref(), "nightly-cronjob-3"));
}

#[test]
fn what_retention_kept_is_in_status_from_the_runs_result_and_outlives_failures() {
    let mut b = nightly();
    let cj = desired_cronjob(&b, "img");
    let now = Timestamp::from_second(1000).unwrap();
    // The JSON a run writes to its termination message, cut to what fits.
    let result: RunResult = serde_json::from_value(json!({
        "key": "shop/nightly/x.pgdump.zst", "size": 42,
        "kept": [{"at": "2026-03-02T02:00:00Z", "why": ["last", "daily", "monthly"]},
                 {"at": "2026-02-22T02:00:00Z", "why": ["weekly"]}],
        "keptCount": 9,
        "retentionError": "1 of 3 expired backups could not be deleted and are kept (the next good run tries again): locked"
    }))
    .unwrap();
    let good = LastRun { job: "nightly-cronjob-1".into(), finish: Finish::Succeeded(at(100)), result: Some(result) };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&good), ..Observed::default() }, now);
    let retention = s.retention.clone().expect("retention in status");
    assert_eq!(retention.kept, 9, "the count, not the listed few");
    let listed: Vec<(String, Vec<String>)> =
        retention.backups.iter().map(|r| (r.time.0.to_string(), r.rules.clone())).collect();
    assert_eq!(listed[1], ("2026-02-22T02:00:00Z".to_owned(), vec!["weekly".to_owned()]));
    assert!(retention.error.as_deref().is_some_and(|e| e.contains("could not be deleted")));
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "BackupSucceeded"), "a refused delete is never fatal");
    assert!(c.message.ends_with("verified); retention: 1 of 3 expired backups could not be deleted and are kept (the next good run tries again): locked"), "{}", c.message);
    b.status = Some(s.clone());
    let bad = LastRun {
        job: "nightly-cronjob-2".into(),
        finish: Finish::Failed(at(200), "BackoffLimitExceeded".into()),
        result: Some(RunResult { error: Some("boom".into()), ..Default::default() }),
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&bad), ..Observed::default() }, now);
    assert_eq!(s.retention, Some(retention), "a failed run deletes nothing, so what is kept stays as told");
}

#[test]
fn a_failed_attempt_is_told_at_once_and_its_error_outlives_the_pod() {
    let mut b = nightly();
    let cj = desired_cronjob(&b, "img");
    let now = Timestamp::from_second(1000).unwrap();
    let retrying = LastRun {
        job: "nightly-cronjob-7".into(),
        finish: Finish::Retrying,
        result: Some(RunResult {
            error: Some("password authentication failed for user \"app\"".into()),
            ..Default::default()
        }),
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&retrying), ..Observed::default() }, now);
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupRetrying"));
    assert!(!reported(Some(&s), "nightly-cronjob-7"), "a retry is not the run's end");
    b.status = Some(s);
    // The Job gives up and deletes its pod: no result, the earlier error stays.
    let failed = LastRun {
        job: "nightly-cronjob-7".into(),
        finish: Finish::Failed(at(300), "BackoffLimitExceeded: Job has reached the specified backoff limit".into()),
        result: None,
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&failed), ..Observed::default() }, now);
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!(c.reason, "BackupFailed");
    assert!(
        c.message.contains("password authentication failed") && c.message.contains("BackoffLimitExceeded"),
        "{}",
        c.message
    );
    assert!(!c.message.contains("retrying"), "{}", c.message);
    assert!(reported(Some(&s), "nightly-cronjob-7"));
}

#[test]
fn a_refused_spec_is_not_ready() {
    let b = nightly();
    let refusal = Refusal::InvalidSpec("spec.schedule \"x\": nope".into());
    let s = backup_status(
        &b,
        Observed { refusal: Some(&refusal), ..Observed::default() },
        Timestamp::from_second(5).unwrap(),
    );
    let c = condition(&s, "Ready");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InvalidSpec"));
    assert!(c.message.contains("spec.schedule"));
}

#[test]
fn the_newest_finished_job_is_the_last_run() {
    let jobs = [job("a", Some((true, 100))), job("b", Some((false, 300))), job("c", None), job("d", Some((true, 200)))];
    let (newest, finish) = newest_finished(&jobs).expect("one finished");
    assert_eq!(newest.name_any(), "b");
    assert!(matches!(finish, Finish::Failed(_, ref why) if why.contains("BackoffLimitExceeded")));
}

#[test]
fn a_run_started_while_the_one_before_was_ending_is_the_running_one() {
    let started = |mut j: Job, t: i64| {
        j.status.as_mut().unwrap().start_time = Some(at(t));
        j
    };
    // The one before ends at its deadline (60) the moment the next starts (60).
    let before = started(job("before", Some((false, 61))), 0);
    let jobs = [before.clone(), started(job("next", None), 60), started(job("older", None), 0)];
    let finished = newest_finished(&jobs).map(|(j, _)| j);
    assert_eq!(newest_running(&jobs, finished).map(|j| j.name_any()).as_deref(), Some("next"));
    // A run left over from before the newest finished one is not "in progress".
    assert!(newest_running(&jobs[2..], Some(&before)).is_none());
    assert_eq!(newest_running(&jobs[2..], None).map(|j| j.name_any()).as_deref(), Some("older"));
}

#[test]
fn a_runs_result_is_read_from_its_termination_message() {
    let pod = |message: &str, current: bool| {
        let terminated = Some(ContainerState {
            terminated: Some(ContainerStateTerminated { message: Some(message.into()), ..Default::default() }),
            ..Default::default()
        });
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "backup".into(),
                    state: if current { terminated.clone() } else { None },
                    last_state: if current { None } else { terminated },
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    let ok = run_result(&pod(r#"{"key":"k","size":7,"sha256":"ab"}"#, true), "backup").expect("result");
    assert_eq!((ok.key.as_deref(), ok.size), (Some("k"), Some(7)));
    let failed = run_result(&pod(r#"{"error":"bucket missing"}"#, false), "backup").expect("result");
    assert_eq!(failed.error.as_deref(), Some("bucket missing"));
    let plain = run_result(&pod("killed", true), "backup").expect("result");
    assert_eq!(plain.error.as_deref(), Some("killed"));
    assert_eq!(run_result(&pod("{}", true), "restore"), None);
}

#[test]
fn runs_a_simulated_node_completed_say_that_nothing_ran() {
    // What kwok's pod-complete stage reports: terminated, Completed, no container ID,
    // no termination message; a kubelet's run always has an ID.
    let completed = |id: Option<&str>, message: Option<&str>| Pod {
        status: Some(PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "backup".into(),
                container_id: id.map(Into::into),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        reason: Some("Completed".into()),
                        message: message.map(Into::into),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let simulated = run_result(&completed(None, None), "backup").expect("a result");
    assert!(simulated.simulated && simulated.key.is_none() && simulated.error.is_none(), "{simulated:?}");
    let real = run_result(&completed(Some("containerd://9c1e"), Some(r#"{"key":"k","size":7}"#)), "backup");
    assert!(real.as_ref().is_some_and(|r| !r.simulated && r.key.as_deref() == Some("k")), "{real:?}");
    // A kubelet's run whose pod is gone or wrote nothing is not a simulated one, nor
    // is a container the kubelet lost track of (no ID, exit code 137).
    assert_eq!(run_result(&completed(Some("containerd://9c1e"), None), "backup"), None);
    let lost_with = |message: Option<&str>| {
        let mut pod = completed(None, message);
        if let Some(t) = pod
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c[0].state.as_mut())
            .and_then(|s| s.terminated.as_mut())
        {
            (t.exit_code, t.reason) = (137, Some("ContainerStatusUnknown".into()));
        }
        pod
    };
    assert_eq!(run_result(&lost_with(None), "backup"), None);
    // ... even when the kubelet wrote its own message there (what a run that never
    // started says once its deadline ends the pod): that is no error of the run.
    let told = lost_with(Some("The container could not be located when the pod was terminated"));
    assert_eq!(run_result(&told, "backup"), None);

    let b = verified("postgresql", json!({"schedule": "0 6 * * 0"}));
    let cj = desired_cronjob(&b, "img");
    let now = Timestamp::from_second(1000).unwrap();
    let run = LastRun { job: "nightly-1".into(), finish: Finish::Succeeded(at(100)), result: Some(simulated.clone()) };
    let check = Verification { job: "verify-1".into(), time: at(300), failed: None, result: Some(simulated.clone()) };
    let observed =
        Observed { cronjob: Some(&cj), last_run: Some(&run), verification: Some(&check), ..Observed::default() };
    let s = backup_status(&b, observed, now);
    assert_eq!(s.last_successful_backup, None, "no dump exists");
    for (t, what) in
        [("LastBackupSucceeded", "no dump was stored"), ("LastVerificationSucceeded", "no dump was restored")]
    {
        let c = condition(&s, t);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SimulatedOnFakeNodes"), "{t}");
        assert!(
            c.message.contains("completed on a simulated node: no container ran") && c.message.contains(what),
            "{}",
            c.message
        );
    }

    let r = restore(json!({
        "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
        "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
    }));
    let done = job("back-restore", Some((true, 50)));
    let observed = RestoreObserved {
        job: Some(&done),
        requested_key: Some("k1"),
        result: Some(&simulated),
        refusal: None,
        stuck: None,
    };
    let s = restore_status(&r, observed, now);
    assert_eq!(s.phase, Some(RestorePhase::Succeeded));
    let c = &s.conditions[0];
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SimulatedOnFakeNodes"));
    assert!(c.message.ends_with("no container ran, so nothing was loaded"), "{}", c.message);
}

fn restore(spec: serde_json::Value) -> Restore {
    serde_json::from_value(json!({
        "apiVersion": "backup.example.com/v1", "kind": "Restore",
        "metadata": {"name": "back", "namespace": "shop", "uid": "r-1", "generation": 1},
        "spec": spec,
    }))
    .expect("restore")
}

#[test]
fn a_restore_job_runs_once_with_the_key_or_the_latest() {
    let r = restore(json!({
        "backupRef": {"name": "nightly"},
        "target": {"type": "postgresql", "connection": {"host": "fresh-db", "database": "app", "secretRef": {"name": "fresh"}}},
    }));
    let b = nightly();
    let dump = Dump { destination: &b.spec.destination, key: None, backup: Some("nightly".into()) };
    let j = desired_job(&r, &dump, "img");
    assert_eq!(j.metadata.name.as_deref(), Some("back-restore"));
    let spec = j.spec.expect("spec");
    assert_eq!(spec.backoff_limit, Some(0));
    let pod = spec.template.spec.expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers[0].name, "restore");
    assert_eq!(env_value(&pod, "BOSUN_RESTORE_LATEST"), Some("true"));
    assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
    assert_eq!(env_value(&pod, "BOSUN_RESTORE_TARGET"), Some("postgresql://$(BOSUN_DB_USERNAME)@fresh-db:5432/app"));
    assert_eq!(env_value(&pod, "BOSUN_RESTORE_OVERWRITE"), None);
    let dump = Dump { key: Some("k1".into()), ..dump };
    let pod = desired_job(&r, &dump, "img").spec.unwrap().template.spec.unwrap();
    assert_eq!(env_value(&pod, "BOSUN_RESTORE_KEY"), Some("k1"));
    assert_eq!(env_value(&pod, "BOSUN_RESTORE_LATEST"), None);
    let _: &RestoreSpec = &r.spec;
}

#[test]
fn restore_phases_follow_the_job_and_end_for_good() {
    let mut r = restore(json!({
        "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
        "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
    }));
    let now = Timestamp::from_second(1000).unwrap();
    let seen = |r: &Restore, job: Option<&Job>, result: Option<&RunResult>| {
        restore_status(r, RestoreObserved { job, requested_key: Some("k1"), result, refusal: None, stuck: None }, now)
    };
    assert_eq!(seen(&r, None, None).phase, Some(RestorePhase::Pending));
    let running = job("back-restore", None);
    let s = seen(&r, Some(&running), None);
    assert_eq!(s.phase, Some(RestorePhase::Running));
    assert_eq!(s.start_time, Some(at(10)));
    r.status = Some(s);
    let done = job("back-restore", Some((true, 50)));
    let result = RunResult { key: Some("k1".into()), size: Some(9), ..Default::default() };
    let s = seen(&r, Some(&done), Some(&result));
    assert_eq!(s.phase, Some(RestorePhase::Succeeded));
    assert_eq!((s.key.as_deref(), s.completion_time.clone()), (Some("k1"), Some(at(50))));
    assert_eq!(s.conditions[0].status, "True");
    r.status = Some(s.clone());
    // Over: the Job's later fate (deleted, say) changes nothing.
    assert_eq!(seen(&r, None, None), s);

    // A Job deleted while it ran is a failed restore, not a second run.
    r.status = Some(seen(
        &restore(json!({"source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
        "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}}})),
        Some(&running),
        None,
    ));
    let s = seen(&r, None, None);
    assert_eq!(s.phase, Some(RestorePhase::Failed));
    assert!(s.conditions[0].message.contains("deleted before it finished"));
}

#[test]
fn a_runs_deadline_is_the_schedules_shortest_interval_or_the_field() {
    let with = |schedule: &str, deadline: Option<i64>| {
        let mut b = nightly();
        b.spec.schedule = schedule.to_owned();
        b.spec.active_deadline_seconds = deadline;
        run_deadline_seconds(&b)
    };
    assert_eq!(with("* * * * *", None), 60);
    assert_eq!(with("*/15 * * * *", None), 900);
    assert_eq!(with("@hourly", None), 3600);
    assert_eq!(with("0 9-17 * * MON-FRI", None), 3600, "the shortest gap, not the weekend's");
    assert_eq!(with("0 2,3 * * *", None), 3600);
    assert_eq!(with("0 2 * * *", None), MAX_RUN_DEADLINE_SECONDS);
    assert_eq!(with("0 2 * * 0", None), MAX_RUN_DEADLINE_SECONDS, "weekly: at most a day");
    assert_eq!(with("0 2 * * *", Some(7200)), 7200);
    let cj = desired_cronjob(&nightly(), DEFAULT_RUNNER_IMAGE);
    let job = cj.spec.expect("spec").job_template.spec.expect("job spec");
    assert_eq!(job.active_deadline_seconds, Some(MAX_RUN_DEADLINE_SECONDS));
}

#[test]
fn missing_credentials_name_the_field_the_secret_and_the_key() {
    let b = nightly();
    let mut destination = b.spec.destination.clone();
    destination.secret_ref = Some(bosun_api::backup::SecretRef { name: "s3-credentials".into() });
    let needs = secrets_needed(&b.spec.source, "spec.source.connection.secretRef", &destination, "spec.destination");
    let keys = |pairs: &[(&str, &[&str])]| {
        let pairs: Vec<(String, Vec<String>)> =
            pairs.iter().map(|(n, ks)| ((*n).to_owned(), ks.iter().map(|k| (*k).to_owned()).collect())).collect();
        move |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, ks)| ks.clone())
    };
    let all = keys(&[("test-db-credentials", &["username", "password"]), ("s3-credentials", &["AWS_ACCESS_KEY_ID"])]);
    assert_eq!(missing_credentials(&needs, "shop", all), None);
    let no_s3 = keys(&[("test-db-credentials", &["username", "password"])]);
    assert_eq!(
        missing_credentials(&needs, "shop", no_s3).as_deref(),
        Some(
            "spec.destination.secretRef: Secret s3-credentials does not exist in namespace shop; runs cannot start until it does"
        )
    );
    let no_password = keys(&[("test-db-credentials", &["username"]), ("s3-credentials", &[])]);
    let message = missing_credentials(&needs, "shop", no_password).expect("missing");
    assert!(
        message.starts_with("spec.source.connection.secretRef: Secret test-db-credentials has no key password"),
        "{message}"
    );
}

#[test]
fn a_stuck_run_fails_the_last_backup_and_its_cause_outlives_the_deadline() {
    let mut b = nightly();
    let cj = desired_cronjob(&b, DEFAULT_RUNNER_IMAGE);
    let now = Timestamp::from_second(1000).unwrap();
    let cause = "pod nightly-cronjob-7-x has not started after 61s: FailedMount: secret \"s3\" not found";
    let stuck = LastRun { job: "nightly-cronjob-7".into(), finish: Finish::Stuck(cause.into()), result: None };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&stuck), ..Observed::default() }, now);
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "RunStuck"));
    assert!(c.message.starts_with("Job nightly-cronjob-7 cannot run: pod nightly-cronjob-7-x"), "{}", c.message);
    assert!(c.message.contains("next scheduled run goes ahead"), "{}", c.message);
    b.status = Some(s);
    // The deadline ends it; the failure still names what kept it from starting.
    let over = LastRun {
        job: "nightly-cronjob-7".into(),
        finish: Finish::Failed(at(900), "DeadlineExceeded: Job was active longer than specified deadline".into()),
        result: None,
    };
    let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&over), ..Observed::default() }, now);
    let c = condition(&s, "LastBackupSucceeded");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupFailed"));
    assert!(c.message.contains(cause) && c.message.contains("DeadlineExceeded"), "{}", c.message);
}

#[test]
fn a_stuck_restore_says_why_and_its_failure_keeps_the_cause() {
    let mut r = restore(json!({
        "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
        "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
    }));
    let now = Timestamp::from_second(1000).unwrap();
    let running = job("back-restore", None);
    let cause = "pod back-restore-x: container restore cannot get its image i (ErrImageNeverPull)";
    let observed = RestoreObserved {
        job: Some(&running),
        requested_key: Some("k1"),
        stuck: Some(cause),
        ..RestoreObserved::default()
    };
    let s = restore_status(&r, observed, now);
    assert_eq!(s.conditions[0].reason, "RunStuck");
    assert!(s.conditions[0].message.contains(cause), "{}", s.conditions[0].message);
    r.status = Some(s);
    let mut failed = job("back-restore", None);
    failed.status = Some(JobStatus {
        start_time: Some(at(10)),
        conditions: Some(vec![JobCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("DeadlineExceeded".into()),
            last_transition_time: Some(at(900)),
            ..JobCondition::default()
        }]),
        ..JobStatus::default()
    });
    let observed = RestoreObserved { job: Some(&failed), requested_key: Some("k1"), ..RestoreObserved::default() };
    let s = restore_status(&r, observed, now);
    assert_eq!(s.phase, Some(RestorePhase::Failed));
    assert!(s.conditions[0].message.contains(cause), "{}", s.conditions[0].message);
}
