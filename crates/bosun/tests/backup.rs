//! Backup and Restore end to end: the controllers on the local control plane, and real
//! runs on its real node — the runner image dumping a PostgreSQL pod into an S3 server
//! and loading the dump into a fresh database pod.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::time::Duration;

/// The runner tests' databases; this file uses a few.
mod support;

use bosun_api::backup::{Backup, Restore, RestorePhase, VerifyOutcome};
use bosun_testing::backends::{Minio, bosun_binary};
use bosun_testing::node::{BRIDGE_IP, images, import_runner_image};
use bosun_testing::{Env, e2e};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The spec's example, verbatim.
const NIGHTLY: &str = r#"apiVersion: backup.example.com/v1
kind: Backup
metadata: {name: nightly}
spec:
  source: {type: postgresql, connection: {host: test-db, port: 5432, database: app, secretRef: {name: test-db-credentials}}}
  destination: {type: s3, bucket: backups}
  schedule: "0 2 * * *"
  retention: 30d
"#;

const PASSWORD: &str = "s3cret-Pa55";

/// Pods on the real node start in seconds; leave room for a loaded machine.
const START: Duration = Duration::from_secs(120);

fn object<K: serde::de::DeserializeOwned>(manifest: Value) -> K {
    serde_json::from_value(manifest).unwrap_or_else(|e| panic!("manifest: {e}"))
}

fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn backup_condition(b: &Backup, type_: &str) -> Option<(String, String)> {
    let s = b.status.as_ref()?;
    (s.observed_generation == b.metadata.generation)
        .then(|| condition(&s.conditions, type_).map(|c| (c.status.clone(), c.reason.clone())))?
}

async fn credentials(env: &Env, name: &str, pairs: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = pairs.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    env.apply(&object::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data,
    })))
    .await;
}

#[tokio::test]
async fn the_nightly_example_schedules_a_cronjob_with_credentials_by_reference_only() {
    e2e("backup-cronjob", |env| async move {
        let bosun = env.start_bosun(&["--controllers=backup,restore"]).await;
        credentials(&env, "test-db-credentials", &[("username", "app"), ("password", PASSWORD)]).await;
        let (ok, out) = env.kubectl_apply(NIGHTLY);
        assert!(ok, "the spec's example was refused: {out}");

        let cj = env
            .wait_for::<CronJob>("nightly-cronjob", "the CronJob", |c| {
                c.spec.as_ref().is_some_and(|s| !s.schedule.is_empty())
            })
            .await;
        let spec = cj.spec.clone().expect("spec");
        assert_eq!(spec.schedule, "0 2 * * *");
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        assert_eq!(spec.suspend, Some(false));
        assert!(spec.successful_jobs_history_limit.is_some() && spec.failed_jobs_history_limit.is_some());
        let pod = spec.job_template.spec.expect("job").template.spec.expect("pod");
        assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(pod.containers[0].name, "backup");
        assert_eq!(pod.containers[0].image.as_deref(), Some(bosun_testing::node::RUNNER_IMAGE));
        let owner = &cj.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Backup", "nightly", Some(true)));

        // No secret value anywhere: not in the CronJob, not in the Backup.
        let b = env
            .wait_for::<Backup>("nightly", "Ready=True", |b| {
                backup_condition(b, "Ready") == Some(("True".into(), "Scheduled".into()))
            })
            .await;
        for (what, text) in
            [("CronJob", serde_json::to_string(&cj).unwrap()), ("Backup", serde_json::to_string(&b).unwrap())]
        {
            assert!(!text.contains(PASSWORD), "the password is in the {what}: {text}");
        }
        let password = pod.containers[0].env.iter().flatten().find(|e| e.name == "PGPASSWORD").expect("PGPASSWORD");
        let reference = password.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).expect("secretKeyRef");
        assert_eq!((reference.name.as_str(), reference.key.as_str()), ("test-db-credentials", "password"));
        let (ok, out) = env.kubectl(&["wait", "--for=condition=Ready", "backup/nightly", "--timeout=20s"]);
        assert!(ok, "kubectl wait: {out}");
        let c = b.status.as_ref().and_then(|s| condition(&s.conditions, "LastBackupSucceeded")).expect("condition");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("Unknown", "NoRunYet"));

        // Bad input is refused at admission, naming the field; the Backup stays as it was.
        for (bad, field) in [
            (r#"schedule: "61 * * * *""#, "spec.schedule"),
            (r#"schedule: "every day""#, "spec.schedule"),
            ("retention: forever", "spec.retention"),
        ] {
            let key = bad.split(':').next().unwrap();
            let yaml = NIGHTLY
                .lines()
                .map(|l| if l.trim_start().starts_with(&format!("{key}:")) { format!("  {bad}") } else { l.to_owned() })
                .collect::<Vec<_>>()
                .join("\n");
            let (ok, out) = env.kubectl_apply(&yaml);
            assert!(!ok, "{bad} was accepted");
            assert!(out.contains(field), "the refusal of {bad} does not name {field}: {out}");
        }
        let cj = env.api::<CronJob>().get("nightly-cronjob").await.expect("cronjob");
        assert_eq!(cj.spec.expect("spec").schedule, "0 2 * * *");

        // What only the controller can tell (a range that runs backwards) is Ready=False.
        let backups = env.api::<Backup>();
        let patch = |v: Value| Patch::Merge(v);
        backups
            .patch("nightly", &PatchParams::default(), &patch(json!({"spec": {"schedule": "0 5-1 * * *"}})))
            .await
            .expect("patch");
        let b = env
            .wait_for::<Backup>("nightly", "Ready=False InvalidSpec", |b| {
                backup_condition(b, "Ready") == Some(("False".into(), "InvalidSpec".into()))
            })
            .await;
        let message = &condition(&b.status.as_ref().unwrap().conditions, "Ready").unwrap().message;
        assert!(message.contains("spec.schedule"), "{message}");
        let cj = env.api::<CronJob>().get("nightly-cronjob").await.expect("cronjob");
        assert_eq!(cj.spec.expect("spec").schedule, "0 2 * * *", "the CronJob keeps its last good schedule");

        // Suspend: the CronJob follows, Ready says so.
        backups
            .patch(
                "nightly",
                &PatchParams::default(),
                &patch(json!({"spec": {"schedule": "30 1 * * *", "suspend": true}})),
            )
            .await
            .expect("patch");
        env.wait_for::<CronJob>("nightly-cronjob", "suspended at 30 1", |c| {
            c.spec.as_ref().is_some_and(|s| s.suspend == Some(true) && s.schedule == "30 1 * * *")
        })
        .await;
        env.wait_for::<Backup>("nightly", "Ready=True Suspended", |b| {
            backup_condition(b, "Ready") == Some(("True".into(), "Suspended".into()))
        })
        .await;

        // Drift: a hand edit of the CronJob is put back.
        env.api::<CronJob>()
            .patch("nightly-cronjob", &PatchParams::default(), &patch(json!({"spec": {"schedule": "* * * * *"}})))
            .await
            .expect("edit");
        env.wait_for::<CronJob>("nightly-cronjob", "the schedule put back", |c| {
            c.spec.as_ref().is_some_and(|s| s.schedule == "30 1 * * *")
        })
        .await;

        // A run on the fake nodes (this namespace's) "completes" without running: the
        // status says so, and records no dump.
        run_now(&env, "nightly-cronjob", "simulated-1");
        let b = wait_backup_condition(&env, "nightly", "LastBackupSucceeded", "SimulatedOnFakeNodes", START, |_| true)
            .await;
        let status = b.status.expect("status");
        let c = condition(&status.conditions, "LastBackupSucceeded").expect("condition");
        assert_eq!(
            (c.status.as_str(), c.message.as_str()),
            ("True", "Job simulated-1 completed on a simulated node: no container ran, so no dump was stored")
        );
        assert!(status.last_successful_backup.is_none(), "{:?}", status.last_successful_backup);

        let log = std::fs::read_to_string(&bosun.log).unwrap_or_default();
        assert!(!log.contains("reconcile failed"), "reconciles failed:\n{}", bosun.log_tail(30));
    })
    .await;
}

/// A PostgreSQL 15 pod and its Service `name`, with the superuser's password from the
/// Secret `secret` and an empty database `app`.
async fn postgres(env: &Env, name: &str, secret: &str) {
    env.apply(&object::<Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"db": name}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "postgres",
                "image": images::POSTGRES,
                "imagePullPolicy": "IfNotPresent",
                "env": [
                    {"name": "POSTGRES_USER", "valueFrom": {"secretKeyRef": {"name": secret, "key": "username"}}},
                    {"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}},
                    {"name": "POSTGRES_DB", "value": "app"},
                ],
                "ports": [{"containerPort": 5432}],
                "readinessProbe": {"exec": {"command": ["pg_isready", "-h", "127.0.0.1", "-U", "app"]}, "periodSeconds": 1},
                // The namespace enforces the restricted Pod Security Standard.
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    })))
    .await;
    env.apply(&object::<Service>(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"db": name}, "ports": [{"port": 5432, "targetPort": 5432}]},
    })))
    .await;
    env.wait_pod_ready(name, START).await;
    // The Service's ClusterIP answers only once the node's kube-proxy has its rules;
    // on a loaded machine that can trail the pod's readiness by seconds.
    let started = std::time::Instant::now();
    while !env.exec(name, &["pg_isready", "-q", "-h", name, "-p", "5432"]).0 {
        assert!(started.elapsed() < START, "Service {name} never reached its pod");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn psql(env: &Env, pod: &str, sql: &str) -> String {
    env.exec_ok(pod, &["psql", "-U", "app", "-d", "app", "-v", "ON_ERROR_STOP=1", "-tAc", sql]).trim().to_owned()
}

/// 10,000 rows with unicode, NULLs and binary data.
const DATASET: &str = "CREATE TABLE items (id int PRIMARY KEY, name text, note text, blob bytea); \
    INSERT INTO items SELECT i, 'Grüße ✓ ' || i, CASE WHEN i % 7 = 0 THEN NULL ELSE repeat('x', i % 50) END, \
    decode(md5(i::text), 'hex') FROM generate_series(1, 10000) i;";
const CHECKSUM: &str = "SELECT count(*) || ':' || md5(string_agg(id || '|' || coalesce(name, '∅') || '|' || \
    coalesce(note, '∅') || '|' || encode(blob, 'hex'), ',' ORDER BY id)) FROM items";

/// What `bosun backup list` shows of the Backup `name`'s dumps in `s3`.
async fn listed(env: &Env, s3: &Minio, name: &str) -> String {
    let out = tokio::process::Command::new(bosun_binary())
        .args(["backup", "list", "--destination", &format!("s3://{}", s3.bucket), "--endpoint", &s3.endpoint])
        .args(["--namespace", &env.ns, "--name", name])
        .env_clear()
        .envs(s3.env())
        .output()
        .await
        .expect("bosun backup list");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// What a backup test on the real node starts from, in a namespace that enforces the
/// restricted Pod Security Standard: the runner image there, a MinIO
/// it reaches, bosun's Backup and Restore controllers, the Secrets of the database
/// (`test-db-credentials`) and of the bucket (`s3-credentials`), and the PostgreSQL
/// `test-db` with its empty database `app`.
async fn backups_on_the_real_node(env: &Env) -> (Minio, bosun_testing::Bosun) {
    env.use_real_node().await;
    // Every run's pod (backup, restore, verification) passes the restricted Pod
    // Security Standard, or the apiserver refuses it and the test fails.
    env.use_restricted().await;
    import_runner_image();
    let s3 = Minio::start(BRIDGE_IP);
    // The images of the local cluster, for the throwaway servers of verifications.
    let images = ["--postgres-image=localhost/postgres:{version}", "--mysql-image=localhost/mariadb:10.11"];
    let bosun = env.start_bosun(&["--controllers=backup,restore", images[0], images[1]]).await;
    credentials(env, "test-db-credentials", &[("username", "app"), ("password", PASSWORD)]).await;
    let s3_env = s3.env();
    credentials(env, "s3-credentials", &s3_env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
    postgres(env, "test-db", "test-db-credentials").await;
    (s3, bosun)
}

#[tokio::test]
async fn a_run_of_the_cronjob_lands_in_s3_and_a_restore_loads_it_into_a_fresh_database() {
    e2e("backup-node", |env| async move {
        let (s3, bosun) = backups_on_the_real_node(&env).await;
        psql(&env, "test-db", DATASET);
        let original = psql(&env, "test-db", CHECKSUM);
        assert!(original.starts_with("10000:"), "{original}");

        let backup = NIGHTLY.replace(
            "destination: {type: s3, bucket: backups}",
            &format!(
                "destination: {{type: s3, bucket: {}, endpoint: \"{}\", secretRef: {{name: s3-credentials}}}}",
                s3.bucket, s3.endpoint
            ),
        );
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");
        env.wait_for::<CronJob>("nightly-cronjob", "the CronJob", |_| true).await;
        run_now(&env, "nightly-cronjob", "manual-1");

        let b = env
            .wait_for_within::<Backup>("nightly", "a successful backup in its status", START, |b| {
                b.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).is_some()
            })
            .await;
        let status = b.status.clone().unwrap();
        let good = status.last_successful_backup.clone().unwrap();
        assert_eq!(good.job.as_deref(), Some("manual-1"));
        assert!(
            good.key.starts_with(&format!("{}/nightly/", env.ns)) && good.key.ends_with(".pgdump.zst"),
            "{}",
            good.key
        );
        assert!(good.size > 0);
        let c = condition(&status.conditions, "LastBackupSucceeded").expect("condition");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "BackupSucceeded"), "{}", c.message);

        // The dump and its manifest are in the bucket, as the runner lists them.
        let text = listed(&env, &s3, "nightly").await;
        assert!(text.contains(&good.key), "backup list does not show {}: {text}", good.key);

        // A run with a wrong password fails; its status says why while the Job retries,
        // and nothing is stored.
        credentials(&env, "wrong-credentials", &[("username", "app"), ("password", "not-it")]).await;
        let broken =
            backup.replace("name: nightly}", "name: broken}").replace("test-db-credentials", "wrong-credentials");
        let (ok, out) = env.kubectl_apply(&broken);
        assert!(ok, "{out}");
        env.wait_for::<CronJob>("broken-cronjob", "the CronJob", |_| true).await;
        run_now(&env, "broken-cronjob", "broken-1");
        let b = env
            .wait_for_within::<Backup>("broken", "LastBackupSucceeded=False", START, |b| {
                b.status
                    .as_ref()
                    .and_then(|s| condition(&s.conditions, "LastBackupSucceeded"))
                    .is_some_and(|c| c.status == "False")
            })
            .await;
        let status = b.status.unwrap();
        let c = condition(&status.conditions, "LastBackupSucceeded").unwrap();
        assert!(
            c.message.contains("broken-1") && c.message.contains("password authentication failed"),
            "{}",
            c.message
        );
        assert!(status.last_successful_backup.is_none());
        assert_eq!(listed(&env, &s3, "broken").await.trim(), "[]", "a failed run stored something");

        // The alerts' gauges (exported every 10 s): when each Backup last succeeded, and which fails.
        let series =
            |name: &str, backup: &str| format!("{name}{{backup_namespace=\"{}\",backup=\"{backup}\"}} ", env.ns);
        let wanted = [
            (series("bosun_backup_last_success_timestamp_seconds", "nightly"), good.time.0.as_second() as f64),
            (series("bosun_backup_failing", "nightly"), 0.0),
            (series("bosun_backup_failing", "broken"), 1.0),
        ];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, metrics) = bosun.http_get("/metrics").await;
            let value = |prefix: &str| {
                metrics.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|v| v.trim().parse::<f64>().ok())
            };
            if wanted.iter().all(|(prefix, want)| value(prefix) == Some(*want)) {
                assert!(value(&series("bosun_backup_last_success_timestamp_seconds", "broken")).is_none());
                break;
            }
            assert!(std::time::Instant::now() < deadline, "backup gauges: want {wanted:?}\n{metrics}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }

        credentials(&env, "fresh-db-credentials", &[("username", "app"), ("password", "an0ther")]).await;
        postgres(&env, "fresh-db", "fresh-db-credentials").await;
        let restore = r#"apiVersion: backup.example.com/v1
kind: Restore
metadata: {name: back}
spec:
  backupRef: {name: nightly}
  target: {type: postgresql, connection: {host: fresh-db, database: app, secretRef: {name: fresh-db-credentials}}}
"#;
        let rs = restore_to_its_end(&env, restore, "back").await;
        assert_eq!(rs.phase, Some(RestorePhase::Succeeded), "{:?}\n{}", rs.conditions, bosun.log_tail(20));
        assert_eq!(rs.key.as_deref(), Some(good.key.as_str()));
        assert!(rs.start_time.is_some() && rs.completion_time.is_some());
        assert_eq!(psql(&env, "fresh-db", CHECKSUM), original, "the restored data differs");
        let (ok, out) = env.kubectl(&["wait", "--for=condition=Ready", "restore/back", "--timeout=10s"]);
        assert!(ok, "{out}");

        // A Restore into a database that holds tables is refused, and it is left alone.
        let again = restore.replace("name: back}", "name: again}");
        let rs = restore_to_its_end(&env, &again, "again").await;
        assert_eq!(rs.phase, Some(RestorePhase::Failed));
        let message = &condition(&rs.conditions, "Ready").unwrap().message;
        assert!(message.contains("overwrite") || message.contains("tables"), "{message}");
        assert_eq!(psql(&env, "fresh-db", CHECKSUM), original);

        // Deleting the Backup leaves the dump where it is.
        env.api::<Backup>().delete("nightly", &DeleteParams::default()).await.expect("delete");
        env.wait_gone::<Backup>("nightly").await;
        assert!(listed(&env, &s3, "nightly").await.contains(&good.key), "the dump went with the Backup");
    })
    .await;
}

/// Apply the Restore `manifest` (named `name`) and wait until it is over; its status.
async fn restore_to_its_end(env: &Env, manifest: &str, name: &str) -> bosun_api::backup::RestoreStatus {
    let (ok, out) = env.kubectl_apply(manifest);
    assert!(ok, "{out}");
    let r = env
        .wait_for_within::<Restore>(name, "phase Succeeded or Failed", START, |r| {
            r.status.as_ref().and_then(|s| s.phase).is_some_and(RestorePhase::finished)
        })
        .await;
    r.status.expect("the status of a Restore that is over")
}

/// The object `key` of `s3`'s bucket, as stored.
async fn raw_object(s3: &Minio, key: &str) -> Vec<u8> {
    use object_store::ObjectStoreExt;
    let got = s3.store().get(&object_store::path::Path::from(key)).await.expect("the object");
    got.bytes().await.expect("its bytes").to_vec()
}

/// An age identity file of `identities`, first to last, as age-keygen writes one.
fn identities(identities: &[&age::x25519::Identity]) -> String {
    use age::secrecy::ExposeSecret;
    identities.iter().map(|i| format!("# public key: {}\n{}\n", i.to_public(), i.to_string().expose_secret())).collect()
}

/// `destination.encryption` on the real node: a Backup whose key Secret is missing says
/// so naming the field; once it exists, a run (held back by its store, and telling its
/// progress in the status meanwhile) stores an age file that holds no row in
/// clear, with the key in its name and manifest, and its status tells what retention
/// kept and by which rules; a Restore whose Secret holds another
/// key fails naming that Secret and the key the dump needs, and leaves the target as it
/// was; a Restore through the Backup (its destination, its key) gives the data back.
#[tokio::test]
async fn an_encrypted_backup_stores_only_ciphertext_and_restores_only_with_its_key() {
    e2e("backup-sealed", |env| async move {
        let (s3, bosun) = backups_on_the_real_node(&env).await;
        let canary = "canary-row-in-clear-5d1c";
        psql(&env, "test-db", &format!("{DATASET} INSERT INTO items VALUES (10001, '{canary}', NULL, '\\x00');"));
        let original = psql(&env, "test-db", CHECKSUM);

        let destination = format!(
            "{{type: s3, bucket: {}, endpoint: \"{}\", secretRef: {{name: s3-credentials}}, encryption: {{secretRef: {{name: backup-key}}}}}}",
            s3.bucket, s3.endpoint
        );
        let backup = NIGHTLY
            .replace("name: nightly}", "name: sealed}")
            .replace("destination: {type: s3, bucket: backups}", &format!("destination: {destination}"))
            .replace("retention: 30d", "retention: 30d\n  keepDaily: 7\n  keepMonthly: 12");
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");
        let b = wait_backup_condition(&env, "sealed", "Ready", "CredentialsMissing", START, |_| true).await;
        let message = message_of(&b, "Ready");
        assert!(message.starts_with("spec.destination.encryption.secretRef: Secret backup-key does not exist"), "{message}");

        let (key, stranger) = (age::x25519::Identity::generate(), age::x25519::Identity::generate());
        credentials(&env, "backup-key", &[("identities", &identities(&[&key]))]).await;
        credentials(&env, "wrong-key", &[("identities", &identities(&[&stranger]))]).await;
        wait_backup_condition(&env, "sealed", "Ready", "Scheduled", START, |_| true).await;
        // The store stops answering while the run goes: the dump is read and its
        // upload waits, and the status tells how far the run is, again every few
        // seconds.
        s3.pause();
        run_now(&env, "sealed-cronjob", "sealed-1");
        let running = |b: &Backup| b.status.as_ref().and_then(|s| s.running.clone());
        let b = env
            .wait_for_within::<Backup>("sealed", "status.running with bytes read and stored", START, |b| {
                running(b).is_some_and(|r| r.job == "sealed-1" && r.read_bytes > 0 && r.stored_bytes > 0)
            })
            .await;
        let first = running(&b).unwrap();
        let b = env
            .wait_for_within::<Backup>("sealed", "status.running told again", Duration::from_secs(30), |b| {
                running(b).is_some_and(|r| r.updated.0 > first.updated.0)
            })
            .await;
        let last = running(&b).unwrap();
        assert!(last.read_bytes >= first.read_bytes && last.stored_bytes >= first.stored_bytes);
        s3.resume();
        let b = env
            .wait_for_within::<Backup>("sealed", "a successful backup in its status", START, |b| {
                b.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).is_some()
            })
            .await;
        let status = b.status.unwrap();
        assert_eq!(status.running, None, "no run in progress any more");
        let good = status.last_successful_backup.unwrap();
        assert!(good.key.ends_with(".pgdump.zst.age"), "{}", good.key);
        // What retention kept, and why, from the run's own report (keepDaily and
        // keepMonthly reached the run through the CronJob).
        let retention = status.retention.expect("status.retention");
        assert_eq!(retention.kept, 1);
        assert_eq!(retention.backups[0].rules, ["last", "age", "daily", "monthly"]);
        let raw = raw_object(&s3, &good.key).await;
        assert!(raw.starts_with(b"age-encryption.org/v1\n-> X25519 "), "an age file");
        assert!(!raw.windows(canary.len()).any(|w| w == canary.as_bytes()), "the row in clear in the bucket");
        assert!(zstd::decode_all(&raw[..]).is_err(), "not a plain zstd dump either");
        let list = listed(&env, &s3, "sealed").await;
        assert!(list.contains(&key.to_public().to_string()), "the manifest names the key: {list}");
        // The dump (small) was read whole before the upload waited: the progress told
        // then is the whole dump, as its manifest counts it.
        let manifests: Value = serde_json::from_str(&list).expect("backup list prints JSON");
        assert_eq!(manifests[0]["uncompressedSize"].as_i64(), Some(last.read_bytes), "{list}");
        assert_eq!(manifests[0]["size"].as_i64(), Some(last.stored_bytes), "{list}");

        credentials(&env, "fresh-db-credentials", &[("username", "app"), ("password", "an0ther")]).await;
        postgres(&env, "fresh-db", "fresh-db-credentials").await;
        let empty = psql(&env, "fresh-db", "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
        let wrong = format!(
            "apiVersion: backup.example.com/v1
kind: Restore
metadata: {{name: wrong}}
spec:
  source: {{destination: {}, key: \"{}\"}}
  target: {{type: postgresql, connection: {{host: fresh-db, database: app, secretRef: {{name: fresh-db-credentials}}}}}}
",
            destination.replace("backup-key", "wrong-key"),
            good.key
        );
        let rs = restore_to_its_end(&env, &wrong, "wrong").await;
        assert_eq!(rs.phase, Some(RestorePhase::Failed));
        let message = &condition(&rs.conditions, "Ready").unwrap().message;
        let named = format!("Secret {}/wrong-key (key identities)", env.ns);
        assert!(message.contains(&named) && message.contains(&key.to_public().to_string()), "{message}");
        assert_eq!(psql(&env, "fresh-db", "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), empty);

        let back = "apiVersion: backup.example.com/v1
kind: Restore
metadata: {name: back}
spec:
  backupRef: {name: sealed}
  target: {type: postgresql, connection: {host: fresh-db, database: app, secretRef: {name: fresh-db-credentials}}}
";
        let rs = restore_to_its_end(&env, back, "back").await;
        assert_eq!(rs.phase, Some(RestorePhase::Succeeded), "{:?}\n{}", rs.conditions, bosun.log_tail(20));
        assert_eq!(psql(&env, "fresh-db", CHECKSUM), original, "the restored data differs");
    })
    .await;
}

/// `spec.verify` on the real node: a verification's pod restores the newest good dump
/// into its own throwaway PostgreSQL (a native sidecar), counts its tables and rows and
/// runs the query; the status, the gauges and the condition say so; the pod's data
/// goes with the pod. With one byte of that dump changed in the bucket, the next
/// verification fails loudly (condition, Warning event, gauge), naming the dump, and
/// nothing is deleted.
#[tokio::test]
async fn a_verification_restores_the_newest_dump_into_a_throwaway_server_and_fails_loudly_on_a_changed_one() {
    e2e("backup-verify", |env| async move {
        let (s3, bosun) = backups_on_the_real_node(&env).await;
        psql(&env, "test-db", DATASET);
        let backup = NIGHTLY.replace(
            "destination: {type: s3, bucket: backups}",
            &format!(
                "destination: {{type: s3, bucket: {}, endpoint: \"{}\", secretRef: {{name: s3-credentials}}}}\n  \
                 verify: {{schedule: \"0 6 * * 0\", query: \"SELECT id FROM items WHERE id = 4242\"}}",
                s3.bucket, s3.endpoint
            ),
        );
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");
        env.wait_for::<CronJob>("nightly-verify", "the verification CronJob", |_| true).await;
        wait_backup_condition(&env, "nightly", "LastVerificationSucceeded", "NoRunYet", START, |_| true).await;
        // The runs of this test are the on-call person's: `kubectl bosun backup` and
        // `verify` start them now, show their progress and wait for the result.
        let (ok, out, err) = env.kubectl_bosun(&["backup", "nightly", "--timeout", "5m"]);
        assert!(ok, "kubectl bosun backup: {out}{err}");
        let good = good_backup(&env, "nightly").await;
        assert!(out.contains(&format!("stored {}", good.key)), "{out}");

        let (ok, out, err) = env.kubectl_bosun(&["verify", "nightly", "--timeout", "5m"]);
        assert!(ok && out.contains("succeeded (1 tables, 10000 rows"), "kubectl bosun verify: {out}{err}");
        let b = wait_backup_condition(&env, "nightly", "LastVerificationSucceeded", "Verified", START, |_| true).await;
        let status = b.status.clone().unwrap();
        let verified = status.last_verified.clone().expect("lastVerified");
        assert!(verified.job.starts_with("nightly-verify-now-"), "{verified:?}");
        assert_eq!(
            (verified.outcome, verified.key.as_deref(), verified.tables, verified.rows),
            (VerifyOutcome::Succeeded, Some(good.key.as_str()), Some(1), Some(10000)),
            "{verified:?}"
        );
        assert!(verified.duration_seconds.is_some());
        assert_eq!(status.last_successful_verification.as_ref(), Some(&verified.time));
        let message = message_of(&b, "LastVerificationSucceeded");
        assert!(message.contains(&good.key) && message.contains("the query returned 1 rows"), "{message}");

        // The throwaway server's data went with its pod: the kubelet removed the volume.
        let selector = format!("job-name={}", verified.job);
        let pods = env.api::<Pod>().list(&kube::api::ListParams::default().labels(&selector)).await.unwrap();
        let uid = pods.items[0].metadata.uid.clone().unwrap();
        let data = bosun_testing::cluster_dir()
            .join(format!("node/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/verify-data"));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while data.exists() {
            assert!(std::time::Instant::now() < deadline, "{} is still there", data.display());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }

        // One byte of the dump changed in the bucket (same size).
        let mut changed = raw_object(&s3, &good.key).await;
        let recorded = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(&changed))
        };
        let middle = changed.len() / 2;
        changed[middle] ^= 0xff;
        put_object(&s3, &good.key, changed.clone()).await;
        let (ok, out, err) = env.kubectl_bosun(&["verify", "nightly", "--timeout", "5m"]);
        assert!(
            !ok && err.starts_with("error: verification of nightly failed") && err.contains(&good.key),
            "{out}{err}"
        );
        let b =
            wait_backup_condition(&env, "nightly", "LastVerificationSucceeded", "VerificationFailed", START, |_| true)
                .await;
        let status = b.status.clone().unwrap();
        let failed = status.last_verified.clone().unwrap();
        assert!(failed.job.starts_with("nightly-verify-now-") && failed.job != verified.job, "{failed:?}");
        assert_eq!((failed.outcome, failed.key.as_deref()), (VerifyOutcome::Failed, Some(good.key.as_str())));
        assert_eq!(status.last_successful_verification.as_ref(), Some(&verified.time), "the last good one is kept");
        let message = message_of(&b, "LastVerificationSucceeded");
        // Told as a changed dump: its key, and the checksum its manifest vouches for.
        let told = [good.key.as_str(), "does not match its manifest", recorded.as_str(), "nothing was deleted"];
        assert!(told.iter().all(|part| message.contains(part)), "{message}");
        assert!(failed.duration_seconds.is_some(), "a failed verification says how long it took: {failed:?}");
        env.wait_warning("nightly", "VerificationFailed", &good.key).await;
        let failing =
            format!("bosun_backup_verification_failing{{backup_namespace=\"{}\",backup=\"nightly\"}} 1", env.ns);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !bosun.http_get("/metrics").await.1.contains(&failing) {
            assert!(std::time::Instant::now() < deadline, "no {failing}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(raw_object(&s3, &good.key).await, changed, "the dump is where it was, as it was");
        assert!(listed(&env, &s3, "nightly").await.contains(&good.key), "its manifest too");

        // Without spec.verify, its CronJob goes; the Backup's own stays.
        let (ok, out) = env.kubectl(&[
            "patch",
            "backup",
            "nightly",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/verify"}]"#,
        ]);
        assert!(ok, "{out}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while env.api::<CronJob>().get_opt("nightly-verify").await.unwrap().is_some() {
            assert!(std::time::Instant::now() < deadline, "the verification CronJob stays:\n{}", bosun.log_tail(40));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        env.api::<CronJob>().get("nightly-cronjob").await.expect("the backup CronJob stays");
    })
    .await;
}

/// A MySQL dump's verification on the real node: its pod's throwaway server is the
/// MariaDB image. The dump is made here, of the test backends' MariaDB, into the
/// folder of a Backup of type mysql (whose own runs are not needed for this).
#[tokio::test]
async fn a_verification_of_mysql_dumps_restores_into_a_throwaway_mariadb() {
    e2e("backup-verify-mysql", |env| async move {
        let (s3, _bosun) = backups_on_the_real_node(&env).await;
        let b = bosun_testing::backends();
        let db =
            support::Db::create(&b, support::Engine::Mysql, &bosun_testing::backends::unique("verify_source")).await;
        db.load_dataset().await;
        let destination = format!("s3://{}", s3.bucket);
        let dumped = b
            .bosun_with(
                &["backup", "run", "--source", &db.url(), "--destination", &destination, "--endpoint", &s3.endpoint]
                    .into_iter()
                    .chain(["--namespace", &env.ns, "--name", "shop"])
                    .collect::<Vec<_>>(),
                &s3.env().iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(),
            )
            .await;
        assert!(dumped.ok, "{dumped}");
        let key = dumped.json()["key"].as_str().unwrap().to_owned();
        let backup = format!(
            r#"apiVersion: backup.example.com/v1
kind: Backup
metadata: {{name: shop}}
spec:
  source: {{type: mysql, connection: {{host: shop-db, database: shop, secretRef: {{name: test-db-credentials}}}}}}
  destination: {{type: s3, bucket: {}, endpoint: "{}", secretRef: {{name: s3-credentials}}}}
  schedule: "0 2 * * *"
  verify: {{schedule: "@weekly", query: "SELECT id FROM t WHERE id = 42"}}
"#,
            s3.bucket, s3.endpoint
        );
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");
        env.wait_for::<CronJob>("shop-verify", "the verification CronJob", |_| true).await;
        run_now(&env, "shop-verify", "verify-mysql");
        let b = wait_backup_condition(&env, "shop", "LastVerificationSucceeded", "Verified", START, |_| true).await;
        let verified = b.status.unwrap().last_verified.unwrap();
        assert_eq!(
            (verified.key.as_deref(), verified.tables, verified.rows),
            (Some(key.as_str()), Some(1), Some(support::ROWS as i64)),
            "{verified:?}"
        );
    })
    .await;
}

/// `kubectl create job --from=cronjob/<cronjob> <job>`: a run now.
fn run_now(env: &Env, cronjob: &str, job: &str) {
    let (ok, out) = env.kubectl(&["create", "job", &format!("--from=cronjob/{cronjob}"), job]);
    assert!(ok, "kubectl create job: {out}");
}

/// Wait until the Backup `name` has a good dump in its status; that dump.
async fn good_backup(env: &Env, name: &str) -> bosun_api::backup::SuccessfulBackup {
    let b = env
        .wait_for_within::<Backup>(name, "a successful backup in its status", START, |b| {
            b.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).is_some()
        })
        .await;
    b.status.and_then(|s| s.last_successful_backup).expect("a good dump")
}

/// Put `body` at `key` of `s3`'s bucket.
async fn put_object(s3: &Minio, key: &str, body: Vec<u8>) {
    use object_store::ObjectStoreExt;
    s3.store().put(&object_store::path::Path::from(key), body.into()).await.expect("putting the object");
}

/// Wait until the Backup `name`'s condition `type_` has `reason` and a message that
/// `matches`; the Backup as then.
async fn wait_backup_condition(
    env: &Env,
    name: &str,
    type_: &str,
    reason: &str,
    within: Duration,
    matches: impl Fn(&str) -> bool,
) -> Backup {
    let what = format!("{type_} with reason {reason}");
    env.wait_for_within::<Backup>(name, &what, within, |b| {
        b.status
            .as_ref()
            .and_then(|s| condition(&s.conditions, type_))
            .is_some_and(|c| c.reason == reason && matches(&c.message))
    })
    .await
}

fn message_of(b: &Backup, type_: &str) -> String {
    b.status.as_ref().and_then(|s| condition(&s.conditions, type_)).map(|c| c.message.clone()).unwrap_or_default()
}

/// Issue 30, a missing Secret: told at once on the Backup, and within a minute of its
/// run's start as a failed run; the run's deadline (the schedule's interval, 60 s here)
/// ends it and the next scheduled run starts; once the Secret exists a scheduled run
/// stores a dump.
#[tokio::test]
async fn a_run_without_its_secret_says_so_ends_at_its_deadline_and_the_next_run_goes_ahead() {
    e2e("backup-stuck-secret", |env| async move {
        env.use_real_node().await;
        import_runner_image();
        let s3 = Minio::start(BRIDGE_IP);
        let bosun = env.start_bosun(&["--controllers=backup"]).await;
        credentials(&env, "test-db-credentials", &[("username", "app"), ("password", PASSWORD)]).await;
        postgres(&env, "test-db", "test-db-credentials").await;
        psql(&env, "test-db", "CREATE TABLE t (id int); INSERT INTO t VALUES (1);");

        let backup = NIGHTLY.replace("name: nightly}", "name: every}").replace("0 2 * * *", "* * * * *").replace(
            "destination: {type: s3, bucket: backups}",
            &format!(
                "destination: {{type: s3, bucket: {}, endpoint: \"{}\", secretRef: {{name: s3-credentials}}}}",
                s3.bucket, s3.endpoint
            ),
        );
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");

        // Told at once, before any run: the field and the Secret.
        let b = wait_backup_condition(&env, "every", "Ready", "CredentialsMissing", START, |_| true).await;
        let message = message_of(&b, "Ready");
        assert!(message.contains("spec.destination.secretRef") && message.contains("s3-credentials"), "{message}");
        env.wait_warning("every", "CredentialsMissing", "s3-credentials").await;
        let cj = env.wait_for::<CronJob>("every-cronjob", "the CronJob", |_| true).await;
        let job_spec = cj.spec.unwrap().job_template.spec.unwrap();
        assert_eq!(job_spec.active_deadline_seconds, Some(60), "the deadline of a run every minute");

        // The first scheduled run cannot mount the Secret: a failed run, naming it, with
        // a Warning and the failing gauge.
        let b =
            wait_backup_condition(&env, "every", "LastBackupSucceeded", "RunStuck", Duration::from_secs(180), |_| true)
                .await;
        let stuck = message_of(&b, "LastBackupSucceeded");
        assert!(stuck.contains("secret \"s3-credentials\" not found"), "{stuck}");
        let first = stuck.split_whitespace().nth(1).unwrap().to_owned();
        assert!(first.starts_with("every-cronjob-"), "{stuck}");
        env.wait_warning("every", "RunStuck", "s3-credentials").await;
        let failing = format!("bosun_backup_failing{{backup_namespace=\"{}\",backup=\"every\"}} 1", env.ns);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !bosun.http_get("/metrics").await.1.contains(&failing) {
            assert!(std::time::Instant::now() < deadline, "{failing} not exported");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }

        // Its deadline ends it; the failure still says why.
        let b =
            wait_backup_condition(&env, "every", "LastBackupSucceeded", "BackupFailed", START, |m| m.contains(&first))
                .await;
        let failed = message_of(&b, "LastBackupSucceeded");
        assert!(failed.contains("DeadlineExceeded") && failed.contains("s3-credentials"), "{failed}");

        // The next scheduled run is not held back by it (it is stuck the same way).
        let b = wait_backup_condition(&env, "every", "LastBackupSucceeded", "RunStuck", START, |m| !m.contains(&first))
            .await;
        let second = message_of(&b, "LastBackupSucceeded");
        assert!(second.contains("s3-credentials"), "{second}");

        // The Secret appears: Ready again by itself, and a scheduled run stores a dump.
        let s3_env = s3.env();
        credentials(&env, "s3-credentials", &s3_env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
        wait_backup_condition(&env, "every", "Ready", "Scheduled", Duration::from_secs(60), |_| true).await;
        let b = env
            .wait_for_within::<Backup>("every", "a successful scheduled backup", Duration::from_secs(240), |b| {
                b.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).is_some()
            })
            .await;
        let good = b.status.unwrap().last_successful_backup.unwrap();
        assert!(good.job.as_deref().is_some_and(|j| j.starts_with("every-cronjob-") && j != first), "{good:?}");
        assert!(listed(&env, &s3, "every").await.contains(&good.key));
        // Runs every minute go on: stop them before the namespace goes.
        env.api::<Backup>().delete("every", &DeleteParams::default()).await.expect("delete");
    })
    .await;
}

/// Issue 30, the other causes one at a time, each named in the status with a Warning:
/// a runner image that cannot be pulled, a pod that no node can take, a container that
/// crashes before it writes its result; a Restore whose target's Secret does not exist
/// waits, creating no Job, and runs once it does. Correcting each makes the next run
/// succeed, and the dump stored before them all is still there.
#[tokio::test]
async fn runs_that_cannot_start_name_the_image_the_scheduler_or_the_crash_and_recover() {
    e2e("backup-stuck-causes", |env| async move {
        env.use_real_node().await;
        import_runner_image();
        let s3 = Minio::start(BRIDGE_IP);
        let mut bosun = env.start_bosun(&["--controllers=backup,restore"]).await;
        credentials(&env, "test-db-credentials", &[("username", "app"), ("password", PASSWORD)]).await;
        let s3_env = s3.env();
        credentials(&env, "s3-credentials", &s3_env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await;
        postgres(&env, "test-db", "test-db-credentials").await;
        psql(&env, "test-db", DATASET);
        let original = psql(&env, "test-db", CHECKSUM);
        let backup = NIGHTLY.replace(
            "destination: {type: s3, bucket: backups}",
            &format!(
                "destination: {{type: s3, bucket: {}, endpoint: \"{}\", secretRef: {{name: s3-credentials}}}}",
                s3.bucket, s3.endpoint
            ),
        );
        let (ok, out) = env.kubectl_apply(&backup);
        assert!(ok, "{out}");
        let image_is = |image: &'static str| {
            move |c: &CronJob| {
                let pod =
                    c.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()).and_then(|j| j.template.spec.as_ref());
                pod.is_some_and(|p| p.containers[0].image.as_deref() == Some(image))
            }
        };
        env.wait_for::<CronJob>("nightly-cronjob", "the CronJob", image_is("localhost/bosun-runner:dev")).await;
        let run = |job: &str| {
            let (ok, out) = env.kubectl(&["create", "job", "--from=cronjob/nightly-cronjob", job]);
            assert!(ok, "kubectl create job: {out}");
        };
        run("good-1");
        let b = env
            .wait_for_within::<Backup>("nightly", "a successful backup", START, |b| {
                b.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).is_some()
            })
            .await;
        let kept = b.status.unwrap().last_successful_backup.unwrap();

        // An image the node does not have and cannot pull.
        drop(bosun);
        bosun = env.start_bosun(&["--controllers=backup,restore", "--runner-image=localhost/no-such-runner:dev"]).await;
        env.wait_for::<CronJob>("nightly-cronjob", "the new image", image_is("localhost/no-such-runner:dev")).await;
        run("pull-1");
        let b =
            wait_backup_condition(&env, "nightly", "LastBackupSucceeded", "RunStuck", START, |m| m.contains("pull-1"))
                .await;
        let message = message_of(&b, "LastBackupSucceeded");
        assert!(message.contains("localhost/no-such-runner:dev"), "{message}");
        env.wait_warning("nightly", "RunStuck", "localhost/no-such-runner:dev").await;
        env.kubectl(&["delete", "job", "pull-1", "--wait=false"]);

        // A container that exits before it writes its result: the runner base has no bosun.
        drop(bosun);
        bosun = env.start_bosun(&["--controllers=backup,restore", &format!("--runner-image={}", images::BASE)]).await;
        env.wait_for::<CronJob>("nightly-cronjob", "the new image", image_is(images::BASE)).await;
        run("crash-1");
        let b = wait_backup_condition(&env, "nightly", "LastBackupSucceeded", "BackupFailed", START, |m| {
            m.contains("crash-1")
        })
        .await;
        let message = message_of(&b, "LastBackupSucceeded");
        assert!(message.contains("bosun") && message.contains("not found"), "{message}");
        env.wait_warning("nightly", "BackupFailed", "crash-1").await;

        // The right image again; then a pod no node takes (the namespace's node selector
        // names no node): the scheduler's words.
        drop(bosun);
        bosun = env.start_bosun(&["--controllers=backup,restore"]).await;
        env.wait_for::<CronJob>("nightly-cronjob", "the runner image", image_is("localhost/bosun-runner:dev")).await;
        let selector = "scheduler.alpha.kubernetes.io/node-selector";
        let (ok, out) = env.kubectl(&[
            "annotate",
            "--overwrite",
            "namespace",
            &env.ns,
            &format!("{selector}=bosun.dev/real-node=nowhere"),
        ]);
        assert!(ok, "{out}");
        run("unschedulable-1");
        let b = wait_backup_condition(&env, "nightly", "LastBackupSucceeded", "RunStuck", START, |m| {
            m.contains("unschedulable-1")
        })
        .await;
        let message = message_of(&b, "LastBackupSucceeded");
        assert!(message.contains("cannot be scheduled") && message.contains("node"), "{message}");
        env.kubectl(&["delete", "job", "unschedulable-1", "--wait=false"]);
        env.use_real_node().await;

        // Corrected: the next run succeeds, and the dump from before is still there.
        run("good-2");
        let b = wait_backup_condition(&env, "nightly", "LastBackupSucceeded", "BackupSucceeded", START, |m| {
            m.contains("good-2")
        })
        .await;
        let newest = b.status.unwrap().last_successful_backup.unwrap();
        assert_eq!(newest.job.as_deref(), Some("good-2"));
        let text = listed(&env, &s3, "nightly").await;
        assert!(text.contains(&kept.key) && text.contains(&newest.key), "{text}");

        // A Restore whose target Secret does not exist: it waits, makes no Job, and
        // runs once the Secret exists.
        let restore = r#"apiVersion: backup.example.com/v1
kind: Restore
metadata: {name: back}
spec:
  backupRef: {name: nightly}
  overwrite: true
  target: {type: postgresql, connection: {host: test-db, database: app, secretRef: {name: restore-credentials}}}
"#;
        let (ok, out) = env.kubectl_apply(restore);
        assert!(ok, "{out}");
        let r = env
            .wait_for_within::<Restore>("back", "Ready=False CredentialsMissing", START, |r| {
                r.status
                    .as_ref()
                    .and_then(|s| condition(&s.conditions, "Ready"))
                    .is_some_and(|c| c.reason == "CredentialsMissing")
            })
            .await;
        let rs = r.status.unwrap();
        let message = &condition(&rs.conditions, "Ready").unwrap().message;
        assert!(
            message.contains("spec.target.connection.secretRef") && message.contains("restore-credentials"),
            "{message}"
        );
        assert_eq!(rs.phase, Some(RestorePhase::Pending));
        assert!(
            env.kubectl(&["get", "job", "back-restore"]).1.contains("NotFound"),
            "a Job was made without its Secret"
        );
        credentials(&env, "restore-credentials", &[("username", "app"), ("password", PASSWORD)]).await;
        let r = env
            .wait_for_within::<Restore>("back", "phase Succeeded or Failed", START, |r| {
                r.status.as_ref().and_then(|s| s.phase).is_some_and(RestorePhase::finished)
            })
            .await;
        let rs = r.status.unwrap();
        assert_eq!(rs.phase, Some(RestorePhase::Succeeded), "{:?}\n{}", rs.conditions, bosun.log_tail(20));
        assert_eq!(psql(&env, "test-db", CHECKSUM), original);
    })
    .await;
}
