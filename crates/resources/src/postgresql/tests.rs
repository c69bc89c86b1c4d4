use bosun_api::postgresql::{BackupSettings, PostgreSQLSpec};
use k8s_openapi::api::apps::v1::StatefulSetStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

fn db(yaml: &str) -> PostgreSQL {
    let spec: PostgreSQLSpec = serde_yaml_ng::from_str(yaml).expect("spec");
    let mut db = PostgreSQL::new("test-db", spec);
    db.metadata.namespace = Some("shop".into());
    db.metadata.uid = Some("uid-1".into());
    db.metadata.generation = Some(1);
    db
}

fn example() -> PostgreSQL {
    db(r#"{version: "14", storage: 1Gi, replicas: 1}"#)
}

fn claim(name: &str, storage: &str, version: &str) -> PersistentVolumeClaim {
    let mut labels = standard_labels(APP_NAME, "test-db");
    labels.insert(VERSION_LABEL.into(), version.into());
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(claims::spec(Quantity(storage.into()))),
        status: None,
    }
}

#[test]
fn the_image_is_the_official_one_of_the_major_version_unless_configured() {
    assert_eq!(image(DEFAULT_IMAGE, Version::V14), "postgres:14");
    assert_eq!(image("registry.local/pg:{version}-alpine", Version::V17), "registry.local/pg:17-alpine");
    assert_eq!(image("localhost/postgres:15", Version::V14), "localhost/postgres:15");
}

#[test]
fn generated_passwords_are_32_unbiased_alphanumerics() {
    let random: Vec<u8> = (0..=255u8).cycle().take(512).collect();
    let p = password(random);
    assert_eq!(p.len(), PASSWORD_LENGTH);
    assert!(p.bytes().all(|b| b.is_ascii_alphanumeric()), "{p}");
    // Bytes of 248 and above would favour the first eight letters: skipped.
    assert_eq!(password([248u8, 255, 0, 61, 62]), "A9A");
}

#[test]
fn the_secret_holds_everything_a_client_needs_and_outlives_the_database() {
    let s = desired_secret(&example(), "p4ss", "r3pl");
    let get = |k: &str| String::from_utf8(s.data.as_ref().unwrap()[k].0.clone()).unwrap();
    assert_eq!(s.metadata.name.as_deref(), Some("test-db-credentials"));
    assert_eq!(get(keys::USERNAME), "postgres");
    assert_eq!(get(keys::HOST), "test-db.shop.svc");
    assert_eq!(get(keys::PORT), "5432");
    assert_eq!(get(keys::URI), "postgresql://postgres:p4ss@test-db.shop.svc:5432/postgres?sslmode=require");
    assert_eq!(get(keys::PGPASS), "test-db.shop.svc:5432:*:postgres:p4ss\n");
    assert_eq!(get(keys::REPLICATION_PASSWORD), "r3pl");
    assert_eq!(s.metadata.owner_references, None, "deleting the PostgreSQL must not take the password");
    assert_eq!(missing_key(&example(), &s), None);
}

#[test]
fn a_secret_without_the_replication_password_serves_one_replica_only() {
    let mut s = desired_secret(&example(), "p4ss", "r3pl");
    s.data.as_mut().unwrap().remove(keys::REPLICATION_PASSWORD);
    assert_eq!(missing_key(&example(), &s), None);
    let three = db(r#"{version: "14", storage: 1Gi, replicas: 3}"#);
    assert_eq!(missing_key(&three, &s), Some(keys::REPLICATION_PASSWORD));
}

#[test]
fn the_digest_follows_the_superuser_name_only_passwords_are_set_live() {
    let a = desired_secret(&example(), "p4ss", "r3pl");
    let mut b = a.clone();
    b.data.as_mut().unwrap().insert(keys::URI.into(), ByteString(b"other".to_vec()));
    b.data.as_mut().unwrap().insert(keys::PASSWORD.into(), ByteString(b"edited".to_vec()));
    assert_eq!(credentials_digest(&a), credentials_digest(&b), "an edited password restarts nothing");
    b.data.as_mut().unwrap().insert(keys::USERNAME.into(), ByteString(b"admin".to_vec()));
    assert_ne!(credentials_digest(&a), credentials_digest(&b));
    // The instances read the passwords from the Secret's volume, which the kubelet
    // refreshes; never the CA's or anything else.
    let sts =
        desired_statefulset(&example(), &Settings::default(), None, "d", crate::upgrade::Running::of(&example(), None));
    let pod = sts.spec.unwrap().template.spec.unwrap();
    let volume = pod.volumes.iter().flatten().find(|v| v.name == "credentials").unwrap();
    let sources = volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let secret = sources[0].secret.as_ref().unwrap();
    let items: Vec<&str> = secret.items.iter().flatten().map(|i| i.key.as_str()).collect();
    assert_eq!((secret.name.as_str(), items), ("test-db-credentials", vec!["password", "replication-password"]));
    // The application's password beside them, from its own Secret.
    let app = sources[1].secret.as_ref().unwrap();
    let paths: Vec<&str> = app.items.iter().flatten().map(|i| i.path.as_str()).collect();
    assert_eq!((app.name.as_str(), paths), ("test-db-app", vec!["app-password"]));
    let env = |name: &str| {
        let var = pod.containers[0].env.iter().flatten().find(|e| e.name == name).unwrap();
        var.value.clone().unwrap()
    };
    assert_eq!(env("BOSUN_CREDENTIALS_DIR"), "/etc/bosun-credentials");
    assert_eq!((env("BOSUN_APP_USER"), env("BOSUN_APP_DATABASE")), ("app".to_owned(), "app".to_owned()));
}

#[test]
fn the_application_secret_verifies_the_server_and_names_its_ca() {
    let mut db = example();
    db.spec.owner = Some("shop".into());
    let secret = desired_app_secret(&db, "s3cret");
    assert_eq!(secret.metadata.name.as_deref(), Some("test-db-app"));
    assert!(secret.metadata.owner_references.is_none(), "it outlives the database, as the data does");
    let data = secret.data.unwrap();
    let get = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!((get("username"), get("dbname"), get("port")), ("shop".into(), "app".into(), "5432".into()));
    assert_eq!(get("uri"), "postgresql://shop:s3cret@test-db.shop.svc:5432/app?sslmode=verify-full");
    assert_eq!(
        get("jdbc-uri"),
        "jdbc:postgresql://test-db.shop.svc:5432/app?user=shop&password=s3cret&sslmode=verify-full"
    );
    assert_eq!(get("pgpass"), "test-db.shop.svc:5432:app:shop:s3cret\n");
    assert_eq!(get("ca-secret"), "test-db-ca");
}

#[test]
fn the_statefulset_runs_the_image_non_root_with_pgdata_in_a_subdirectory() {
    let sts = desired_statefulset(
        &example(),
        &Settings::default(),
        None,
        "d1",
        crate::upgrade::Running::of(&example(), None),
    );
    let spec = sts.spec.as_ref().unwrap();
    assert_eq!(sts.metadata.name.as_deref(), Some("test-db"));
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.service_name.as_deref(), Some("test-db-headless"));
    let pod = spec.template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("postgres:14"));
    let env = |n: &str| c.env.as_ref().unwrap().iter().find(|e| e.name == n).cloned().unwrap();
    assert_eq!(env("PGDATA").value.as_deref(), Some("/var/lib/postgresql/data/pgdata"));
    assert!(PGDATA.starts_with(&format!("{DATA_MOUNT}/")));
    let pw = env("POSTGRES_PASSWORD").value_from.unwrap().secret_key_ref.unwrap();
    assert_eq!((pw.name.as_str(), pw.key.as_str()), ("test-db-credentials", "password"));
    assert!(c.env.as_ref().unwrap().iter().all(|e| !e.name.contains("PASSWORD") || e.value.is_none()));
    let sc = pod.security_context.as_ref().unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_non_root, sc.fs_group), (Some(999), Some(true), Some(999)));
    let ready = c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!((ready.scheme.as_deref(), &ready.port), (Some("HTTPS"), &IntOrString::String("instance-api".into())));
    assert!(c.ports.iter().flatten().any(|p| p.name.as_deref() == Some("instance-api")), "the port it names");
    assert!(c.liveness_probe.is_some() && c.startup_probe.is_some());
    let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
    assert_eq!(requested(claim), Some("1Gi"));
    assert_eq!(claim.labels().get(VERSION_LABEL).map(String::as_str), Some("14"));
    let policy = spec.persistent_volume_claim_retention_policy.as_ref().unwrap();
    assert_eq!(policy.when_deleted.as_deref(), Some("Retain"));
    let template = spec.template.metadata.as_ref().unwrap();
    assert_eq!(template.annotations.as_ref().unwrap()[CREDENTIALS_DIGEST], "d1");
    let root = |c: &Container| c.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0);
    assert!(!pod.init_containers.iter().flatten().any(root), "nothing runs as root unless configured");
    // The restricted Pod Security Standard, and a read-only root file system: what the
    // server writes outside its data goes to emptyDirs.
    assert_eq!(sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()), Some("RuntimeDefault"));
    for container in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
        let sc = container.security_context.as_ref().unwrap();
        assert_eq!(
            (sc.allow_privilege_escalation, sc.read_only_root_filesystem),
            (Some(false), Some(true)),
            "{}",
            container.name
        );
        assert_eq!(sc.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_owned()][..]));
    }
    let mounted: Vec<&str> = c.volume_mounts.iter().flatten().map(|m| m.mount_path.as_str()).collect();
    for (name, path) in WRITABLE {
        assert!(mounted.contains(&path), "{path}: {mounted:?}");
        let volume = pod.volumes.iter().flatten().find(|v| v.name == name).unwrap();
        assert!(volume.empty_dir.is_some(), "{name}");
    }
}

#[test]
fn volume_permissions_are_one_chown_of_the_volume_root() {
    let settings = Settings { image: "localhost/postgres:15".into(), volume_permissions: true, ..Settings::default() };
    let sts = desired_statefulset(&example(), &settings, None, "d", crate::upgrade::Running::of(&example(), None));
    let pod = sts.spec.unwrap().template.spec.unwrap();
    let init = &pod.init_containers.unwrap()[0];
    assert_eq!(init.command.as_ref().unwrap(), &["chown", "999:999", DATA_MOUNT]);
    assert_eq!(init.image.as_deref(), Some("localhost/postgres:15"));
    let caps = init.security_context.as_ref().unwrap().capabilities.as_ref().unwrap();
    assert_eq!(
        (caps.drop.as_deref(), caps.add.as_deref()),
        (Some(&["ALL".to_owned()][..]), Some(&["CHOWN".to_owned()][..]))
    );
}

#[test]
fn the_claim_template_keeps_its_first_size_and_deletion_is_asked_for() {
    let first = desired_statefulset(
        &db(r#"{version: "13", storage: 1Gi}"#),
        &Settings::default(),
        None,
        "d",
        crate::upgrade::Running::of(&db(r#"{version: "13", storage: 1Gi}"#), None),
    );
    let db = db(r#"{version: "14", storage: 5Gi, replicas: 1, deletionPolicy: Delete}"#);
    let sts = desired_statefulset(&db, &Settings::default(), Some(&first), "d", crate::upgrade::Running::of(&db, None));
    assert_eq!(sts.labels().get(VERSION_LABEL).map(String::as_str), Some("14"));
    let spec = sts.spec.unwrap();
    let template = &spec.volume_claim_templates.unwrap()[0];
    assert_eq!(requested(template), Some("1Gi"));
    assert_eq!(template.labels().get(VERSION_LABEL).map(String::as_str), Some("13"), "immutable: as it was");
    assert_eq!(spec.persistent_volume_claim_retention_policy.unwrap().when_deleted.as_deref(), Some("Delete"));
}

#[test]
fn wal_is_kept_with_the_setting_of_the_version_and_synchronous_standbys_as_asked() {
    let args = |spec: &str| {
        let d = db(spec);
        server_args(&d, d.spec.version)
    };
    assert!(args(r#"{version: "12", storage: 1Gi}"#).contains(&"wal_keep_segments=64".to_owned()));
    let thirteen = args(r#"{version: "13", storage: 1Gi}"#);
    assert!(thirteen.contains(&"wal_keep_size=1GB".to_owned()));
    assert!(thirteen.contains(&"wal_log_hints=on".to_owned()), "a former primary can be rewound");
    assert!(!thirteen.iter().any(|a| a.starts_with("synchronous_standby_names")));
    let sync = args(r#"{version: "15", storage: 1Gi, replicas: 3, synchronous: {number: 1}}"#);
    assert!(sync.contains(&"synchronous_standby_names=ANY 1 (*)".to_owned()), "{sync:?}");
    let alone = args(r#"{version: "15", storage: 1Gi, replicas: 1, synchronous: {number: 1}}"#);
    assert!(!alone.iter().any(|a| a.starts_with("synchronous_standby_names")), "no standby to wait for");
}

#[test]
fn continuous_archiving_puts_the_runner_beside_the_server_and_reaches_the_destination() {
    const CONTINUOUS: &str = r#"{version: "15", storage: 1Gi, replicas: 2, backup: {enabled: true,
        destination: {type: s3, bucket: wal, prefix: team, endpoint: "http://minio:9000", secretRef: {name: s3}},
        continuous: {archiveTimeout: 2m}}}"#;
    let plain =
        desired_statefulset(&example(), &Settings::default(), None, "d", crate::upgrade::Running::of(&example(), None));
    let spec = plain.spec.unwrap().template.spec.unwrap();
    let init: Vec<&str> = spec.init_containers.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(init, [RUNNER_CONTAINER], "every instance gets bosun, for its instance manager");
    let postgres = &spec.containers[0];
    assert_eq!(
        postgres.command.as_ref().unwrap()[..5],
        ["/opt/bosun/bin/bosun", "instance", "--", "docker-entrypoint.sh", "postgres"]
    );
    assert!(!postgres.env_from.iter().flatten().any(|e| e.secret_ref.is_some()), "no archive: no credentials");
    assert!(!server_args(&example(), example().spec.version).iter().any(|a| a.starts_with("archive")));

    let db = db(CONTINUOUS);
    let settings = Settings { runner_image: "runner:1".into(), ..Settings::default() };
    let sts = desired_statefulset(&db, &settings, None, "d", crate::upgrade::Running::of(&db, None));
    let spec = sts.spec.unwrap().template.spec.unwrap();
    let init = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!((init.name.as_str(), init.image.as_deref()), (RUNNER_CONTAINER, Some("runner:1")));
    assert_eq!(init.command.as_ref().unwrap(), &["bosun", "install", "/opt/bosun/bin/bosun"]);
    let postgres = &spec.containers[0];
    let args = postgres.command.as_ref().unwrap();
    for setting in ["archive_mode=on", "archive_command=/opt/bosun/bin/bosun wal push %p", "archive_timeout=120"] {
        assert!(args.contains(&setting.to_owned()), "{setting}: {args:?}");
    }
    let env: BTreeMap<&str, Option<&str>> =
        postgres.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e.value.as_deref())).collect();
    assert_eq!(env["BOSUN_BACKUP_DESTINATION"], Some("s3://wal/team"));
    assert_eq!(env["BOSUN_BACKUP_ENDPOINT"], Some("http://minio:9000"));
    assert_eq!(
        env["BOSUN_BACKUP_NAME"],
        Some("test-db-backup"),
        "the WAL goes under <namespace>/<name>-backup/wal, beside the base backups"
    );
    assert_eq!(env["BOSUN_WAL_ERROR_FILE"], Some(WAL_ERROR_FILE));
    assert_eq!(env["BOSUN_API_DIR"], Some("/etc/bosun-instance"));
    let from = postgres.env_from.as_ref().unwrap()[0].secret_ref.as_ref().unwrap();
    assert_eq!(from.name, "s3");
    let mounts: Vec<&str> = postgres.volume_mounts.as_ref().unwrap().iter().map(|m| m.mount_path.as_str()).collect();
    assert!(mounts.contains(&RUNNER_MOUNT), "{mounts:?}");
    let volumes: Vec<&str> = spec.volumes.as_ref().unwrap().iter().map(|v| v.name.as_str()).collect();
    assert!(volumes.contains(&"bosun-runner") && volumes.contains(&"destination-credentials"), "{volumes:?}");

    // Off while backups are off; the default timeout; absurd ones clamped to PostgreSQL's limit.
    let mut off = db.clone();
    off.spec.backup.as_mut().unwrap().enabled = false;
    assert_eq!(archive_timeout(&off), None);
    let mut default = db.clone();
    default.spec.backup.as_mut().unwrap().continuous = Some(Default::default());
    assert_eq!(archive_timeout(&default), Some(60));
    let mut huge = db.clone();
    huge.spec.backup.as_mut().unwrap().continuous.as_mut().unwrap().archive_timeout = Some("99999999h".into());
    assert_eq!(archive_timeout(&huge), Some(MAX_ARCHIVE_TIMEOUT));

    // Its scheduled backups are base backups, from the standbys once one is ready.
    let backup = desired_backup(&db).unwrap();
    assert_eq!(backup.spec.method, Some(Method::Base));
    assert_eq!(backup.spec.source.connection.host, "test-db", "no standby ready yet");
    let mut running = db.clone();
    running.status = Some(PostgreSQLStatus { ready_replicas: Some(2), ..Default::default() });
    assert_eq!(desired_backup(&running).unwrap().spec.source.connection.host, "test-db-ro");
    assert_eq!(desired_backup(&off), None);
    let mut dumps = db.clone();
    dumps.spec.backup.as_mut().unwrap().continuous = None;
    assert_eq!(desired_backup(&dumps).unwrap().spec.method, None, "logical dumps without continuous archiving");
}

const RECOVERED: &str = r#"{version: "15", storage: 1Gi, bootstrap: {recovery: {source: orders,
    destination: {type: s3, bucket: wal, endpoint: "http://minio:9000", secretRef: {name: s3}},
    targetTime: "2026-11-26T14:03:00Z"}}}"#;

#[test]
fn a_recovered_database_gets_the_runner_and_its_archive_without_archiving_itself() {
    let db = db(RECOVERED);
    let spec = desired_statefulset(&db, &Settings::default(), None, "d", crate::upgrade::Running::of(&db, None))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, RUNNER_CONTAINER);
    let postgres = &spec.containers[0];
    let env: BTreeMap<&str, Option<&str>> =
        postgres.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e.value.as_deref())).collect();
    assert_eq!(env["BOSUN_RECOVERY_DESTINATION"], Some("s3://wal"));
    assert_eq!(env["BOSUN_RECOVERY_ENDPOINT"], Some("http://minio:9000"));
    assert_eq!(env["BOSUN_RECOVERY_NAME"], Some("orders-backup"));
    assert_eq!(env["BOSUN_RECOVERY_TARGET_TIME"], Some("2026-11-26T14:03:00Z"));
    assert_eq!(env["BOSUN_RECOVERY_SETTINGS"], Some(RECOVERY_SETTINGS));
    assert!(!env.contains_key("BOSUN_BACKUP_DESTINATION"), "it does not archive: no continuous backup asked");
    assert_eq!(postgres.env_from.as_ref().unwrap()[0].secret_ref.as_ref().unwrap().name, "s3");
    assert!(!server_args(&db, db.spec.version).iter().any(|a| a.starts_with("archive")));
    // Readiness waits for the promotion; liveness does not (a recovery takes its time).
    let probe = |p: &Option<Probe>| p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone().unwrap();
    assert_eq!(probe(&postgres.readiness_probe), "/readyz");
    assert_eq!(probe(&postgres.liveness_probe), "/healthz");
    assert_eq!(probe(&postgres.startup_probe), "/healthz");
}

#[test]
fn an_encrypted_archive_gives_the_server_and_the_recovery_the_key_and_nothing_else_of_the_secret() {
    let env_of = |db: &PostgreSQL| {
        let spec = desired_statefulset(db, &Settings::default(), None, "d", crate::upgrade::Running::of(db, None))
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let postgres = spec.containers[0].clone();
        let env: BTreeMap<String, Option<String>> =
            postgres.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone())).collect();
        (env, spec, postgres)
    };
    let sealed = r#"{version: "15", storage: 1Gi, replicas: 2, backup: {enabled: true,
        destination: {type: s3, bucket: wal, secretRef: {name: s3}, encryption: {secretRef: {name: archive-key}}},
        continuous: {}}}"#;
    let (env, spec, postgres) = env_of(&db(sealed));
    assert_eq!(
        env["BOSUN_BACKUP_ENCRYPTION_KEY_FILE"].as_deref(),
        Some("/var/run/secrets/bosun/encryption/identities")
    );
    assert_eq!(
        env["BOSUN_BACKUP_ENCRYPTION_KEY_NAME"].as_deref(),
        Some("Secret $(BOSUN_BACKUP_NAMESPACE)/archive-key (key identities)")
    );
    let key = spec.volumes.iter().flatten().find(|v| v.name == "encryption-key").expect("the key's volume");
    let items = key.secret.as_ref().unwrap().items.clone().unwrap();
    assert_eq!((items.len(), items[0].key.as_str()), (1, "identities"), "only the identities are mounted");
    assert!(postgres.volume_mounts.iter().flatten().any(|m| m.name == "encryption-key" && m.read_only == Some(true)));

    // A recovery only: the same key, and the namespace its name refers to.
    let recovered = RECOVERED
        .replace("secretRef: {name: s3}}", "secretRef: {name: s3}, encryption: {secretRef: {name: archive-key}}}");
    let (env, _, _) = env_of(&db(&recovered));
    assert!(env.contains_key("BOSUN_BACKUP_ENCRYPTION_KEY_FILE") && env.contains_key("BOSUN_BACKUP_NAMESPACE"));
    // Without encryption, nothing of it: the pods of existing databases do not change.
    let (env, _, _) = env_of(&db(RECOVERED));
    assert!(!env.contains_key("BOSUN_BACKUP_ENCRYPTION_KEY_FILE") && !env.contains_key("BOSUN_BACKUP_NAMESPACE"));

    // Recovering from one archive while archiving to another needs the same keys.
    let mut both = db(&recovered);
    both.spec.backup = Some(
        serde_yaml_ng::from_str(
            r#"{enabled: true, destination: {type: s3, bucket: mine, secretRef: {name: s3}}, continuous: {}}"#,
        )
        .unwrap(),
    );
    let refused = check(&both, None, &[]).unwrap_err();
    assert!(refused.message().contains("encryption"), "{}", refused.message());
}

#[test]
fn a_recovery_onto_existing_data_or_through_another_secret_is_refused() {
    let db = db(RECOVERED);
    let kept = claim("data-test-db-0", "1Gi", "15");
    let refused = check(&db, None, &[&kept]).unwrap_err();
    assert_eq!(refused.reason(), reasons::RECOVERY_REFUSED);
    assert!(refused.message().contains("data-test-db-0 already exists"), "{}", refused.message());
    assert!(check(&db, None, &[]).is_ok());
    let sts = desired_statefulset(&db, &Settings::default(), None, "d", crate::upgrade::Running::of(&db, None));
    assert!(check(&db, Some(&sts), &[&kept]).is_ok(), "its own claims, once it runs");

    let mut both = db.clone();
    both.spec.backup = Some(
        serde_yaml_ng::from_str(
            r#"{enabled: true, destination: {type: s3, bucket: mine, secretRef: {name: other}}, continuous: {}}"#,
        )
        .unwrap(),
    );
    let refused = check(&both, None, &[]).unwrap_err();
    assert!(refused.message().starts_with("spec.bootstrap.recovery.destination"), "{}", refused.message());
    both.spec.backup.as_mut().unwrap().destination.as_mut().unwrap().secret_ref =
        Some(bosun_api::backup::SecretRef { name: "s3".into() });
    assert!(check(&both, None, &[]).is_ok(), "one Secret for both archives");
}

#[test]
fn the_archivers_answer_becomes_the_status_and_the_condition() {
    let db = db(r#"{version: "15", storage: 1Gi, backup: {enabled: true,
        destination: {type: s3, bucket: wal}, continuous: {}}}"#);
    // What one look saw, as the status keeps it after a look before it (`previous`):
    // the primary's instance's status, from `pg_stat_archiver`'s row and the
    // runner's error (`row\nerror`).
    let instance = |output: &str| {
        let (row, error) = output.split_once('\n').unwrap_or((output, ""));
        let server = bosun_instance::status::Server {
            archiver: Some(bosun_instance::status::parse_primary(row).unwrap().0),
            ..Default::default()
        };
        let error = Some(error.trim().to_owned()).filter(|e| !e.is_empty());
        bosun_instance::status::Status { server: Some(server), archive_error: error, ..Default::default() }
    };
    let wal_archiving = |output: &str| archiver_seen(&instance(output));
    let look =
        |output: &str, previous: Option<&WalArchiving>| observe_archiver(previous, &wal_archiving(output).unwrap());
    let healthy_seen = wal_archiving("000000010000000000000007|1764158400|||0\n").unwrap();
    let healthy = look("000000010000000000000007|1764158400|||0\n", None);
    assert_eq!(healthy.last_archived_wal.as_deref(), Some("000000010000000000000007"));
    assert_eq!(healthy.last_archived_time.as_deref(), Some("2025-11-26T12:00:00Z"));
    assert_eq!((healthy.failed_count, healthy.recent_failures), (Some(0), None));
    assert!(!archiving_fails(&healthy) && healthy.last_error.is_none());
    let c = wal_archiving_condition(&db, Some(&healthy)).unwrap();
    assert_eq!((c.status, c.reason), ("True", reasons::ARCHIVING));

    // A failure newer than the last success is the state, with the runner's words.
    let failing = look(
        "000000010000000000000007|1764158400|000000010000000000000008|1764158460|3\nupload failed: connection refused\n",
        Some(&healthy),
    );
    assert!(archiving_fails(&failing));
    assert_eq!(failing.recent_failures, Some(3), "three failed pushes since the last look");
    let c = wal_archiving_condition(&db, Some(&failing)).unwrap();
    assert_eq!((c.status, c.reason), ("False", reasons::ARCHIVING_FAILED));
    assert!(
        c.message.contains("000000010000000000000008") && c.message.contains("connection refused"),
        "{}",
        c.message
    );
    // Failures a later push made good between two looks: False on this look, with
    // the runner's words and how many; True on the next, which saw none.
    let between = "000000010000000000000009|1764158520|000000010000000000000008|1764158460|2\nupload failed: timeout\n";
    let outage = look(between, Some(&healthy));
    assert!(!archiving_fails(&outage));
    assert_eq!((outage.recent_failures, outage.last_error.as_deref()), (Some(2), Some("upload failed: timeout")));
    let c = wal_archiving_condition(&db, Some(&outage)).unwrap();
    assert_eq!((c.status, c.reason), ("False", reasons::ARCHIVING_FAILED));
    for part in ["2 WAL file(s) failed", "000000010000000000000008", "upload failed: timeout", "archiving goes on"] {
        assert!(c.message.contains(part), "{part:?} not in {}", c.message);
    }
    let next = look(between, Some(&outage));
    assert_eq!((next.recent_failures, next.last_error.as_deref()), (None, None), "{next:?}");
    assert_eq!(wal_archiving_condition(&db, Some(&next)).unwrap().status, "True");
    // Counted across a reset of the counter (a restart, another primary) when the
    // last failure moved; a first look counts nothing it did not see happen.
    let mut reset = wal_archiving(between).unwrap().archiving;
    reset.last_failed_time = Some("2025-11-26T12:30:00Z".into());
    reset.failed_count = Some(0);
    assert_eq!(failures_between(Some(&outage), &reset), 1);
    reset.failed_count = Some(4);
    assert_eq!(failures_between(Some(&outage), &reset), 2, "the counter's growth");
    assert_eq!(failures_between(None, &reset), 0);
    // An older failure, since overtaken and already seen, is history: no error, True.
    let recovered =
        look("000000010000000000000009|1764158520|000000010000000000000008|1764158460|2\nold\n", Some(&outage));
    assert!(!archiving_fails(&recovered) && recovered.last_error.is_none());
    // Nothing archived yet, or not asked: Unknown. Without continuous archiving: none.
    let fresh = look("||||0\n", None);
    assert_eq!(wal_archiving_condition(&db, Some(&fresh)).unwrap().status, "Unknown");
    assert_eq!(wal_archiving_condition(&db, None).unwrap().status, "Unknown");

    // The recoverable range: from the oldest base backup kept to the newest WAL.
    let now: Timestamp = "2025-11-26T13:00:00Z".parse().unwrap();
    let seen = Observed { archiving: Some(&healthy_seen), ..Default::default() };
    let s = status(&db, seen, now);
    assert_eq!((s.first_recoverable_point, s.last_recoverable_point), (None, None), "no base backup yet");
    let mut backup = desired_backup(&db).unwrap();
    backup.status = Some(bosun_api::backup::BackupStatus {
        last_successful_backup: Some(bosun_api::backup::SuccessfulBackup {
            time: Time("2025-11-26T02:00:09Z".parse().unwrap()),
            key: "ns/test-db-backup/base/x.base.tar.zst".into(),
            size: 1,
            job: None,
            oldest_kept: Some(Time("2025-11-20T02:00:07Z".parse().unwrap())),
        }),
        ..Default::default()
    });
    let seen = Observed { archiving: Some(&healthy_seen), backup: Some(&backup), ..Default::default() };
    let s = status(&db, seen, now);
    assert_eq!(s.first_recoverable_point.as_deref(), Some("2025-11-20T02:00:07Z"));
    assert_eq!(s.last_recoverable_point.as_deref(), Some("2025-11-26T12:00:00Z"));
    // WAL archived before the oldest base backup ended does not end the range before it.
    let old = wal_archiving("000000010000000000000007|1763604000|||0\n").unwrap();
    let seen = Observed { archiving: Some(&old), backup: Some(&backup), ..Default::default() };
    assert_eq!(status(&db, seen, now).last_recoverable_point.as_deref(), Some("2025-11-20T02:00:07Z"));
    assert_eq!(wal_archiving_condition(&example(), Some(&healthy)), None);
    // A standby's or a silent server's status: nothing.
    let mut standby = instance("||||0\n");
    standby.server.as_mut().unwrap().in_recovery = true;
    assert_eq!(archiver_seen(&standby), None);
    assert_eq!(archiver_seen(&bosun_instance::status::Status::default()), None);

    // The status keeps the last answer while the archiver cannot be asked.
    let mut asked = db.clone();
    asked.status =
        Some(status(&db, Observed { archiving: Some(&healthy_seen), ..Default::default() }, Timestamp::UNIX_EPOCH));
    let later = status(&asked, Observed::default(), Timestamp::UNIX_EPOCH);
    assert_eq!(later.wal_archiving.as_ref(), Some(&healthy));
    assert_eq!(
        status(&example(), Observed { archiving: Some(&healthy_seen), ..Default::default() }, Timestamp::UNIX_EPOCH)
            .wal_archiving,
        None
    );
}

#[test]
fn services_select_the_primary_all_and_the_standbys() {
    let one = desired_services(&example());
    assert_eq!(one.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["test-db", "test-db-headless"]);
    let selector = |s: &Service| s.spec.as_ref().unwrap().selector.clone().unwrap();
    assert_eq!(selector(&one[0])[ROLE_LABEL], ROLE_PRIMARY, "whichever instance bosun made the primary");
    assert_eq!(one[1].spec.as_ref().unwrap().cluster_ip.as_deref(), Some("None"));
    let three = desired_services(&db(r#"{version: "14", storage: 1Gi, replicas: 3}"#));
    assert_eq!(three[2].name_any(), "test-db-ro");
    assert_eq!(selector(&three[2])[ROLE_LABEL], ROLE_REPLICA);
}

#[test]
fn backups_point_at_the_service_and_secret_and_default_to_a_claim() {
    assert!(desired_backup(&example()).is_none());
    let db = db(r#"{version: "14", storage: 3Gi, replicas: 1, backup: {enabled: true}}"#);
    let b = desired_backup(&db).unwrap();
    assert_eq!(b.metadata.name.as_deref(), Some("test-db-backup"));
    assert_eq!(b.spec.source.connection.host, "test-db");
    assert_eq!(b.spec.source.connection.secret_ref.name, "test-db-credentials");
    assert_eq!(
        (b.spec.destination.type_, b.spec.destination.bucket.as_str()),
        (DestinationType::Pvc, "test-db-backups")
    );
    assert_eq!((b.spec.schedule.as_str(), b.spec.retention.as_deref()), ("0 2 * * *", Some("7d")));
    assert_eq!(b.metadata.owner_references.as_ref().unwrap()[0].kind, "PostgreSQL");
    let claim = desired_backup_claim(&db).unwrap();
    assert_eq!((claim.name_any(), requested(&claim)), ("test-db-backups".to_owned(), Some("3Gi")));
    assert_eq!(claim.metadata.owner_references, None, "the dumps outlive the database");
    let mut given = db.clone();
    given.spec.backup = Some(BackupSettings {
        enabled: true,
        schedule: Some("0 3 * * *".into()),
        retention: Some("30d".into()),
        destination: Some(Destination {
            type_: DestinationType::S3,
            bucket: "dumps".into(),
            prefix: None,
            endpoint: None,
            region: None,
            secret_ref: None,
            encryption: None,
        }),
        continuous: None,
    });
    assert!(desired_backup_claim(&given).is_none());
    let b = desired_backup(&given).unwrap();
    assert_eq!((b.spec.destination.bucket.as_str(), b.spec.retention.as_deref()), ("dumps", Some("30d")));
}

#[test]
fn a_smaller_storage_or_a_lower_major_version_is_refused() {
    let grown = db(r#"{version: "14", storage: 2Gi, replicas: 1}"#);
    let c = claim("data-test-db-0", "1Gi", "14");
    assert_eq!(check(&grown, None, &[&c]), Ok(()));
    assert!(needs_growth(&grown, &c));
    assert!(is_data_claim(&grown, &c));
    assert!(!is_data_claim(&grown, &claim("test-db-backups", "1Gi", "14")));
    let c2 = claim("data-test-db-0", "2Gi", "14");
    let Err(r) = check(&example(), None, &[&c2]) else { panic!("a shrink was accepted") };
    assert_eq!(r.reason(), "ShrinkRefused");
    assert!(r.message().contains("spec.storage 1Gi") && r.message().contains("2Gi"), "{}", r.message());
    let fifteen = db(r#"{version: "15", storage: 1Gi, replicas: 1}"#);
    assert_eq!(check(&fifteen, None, &[&claim("data-test-db-0", "1Gi", "14")]), Ok(()), "an upgrade");
    let thirteen = db(r#"{version: "13", storage: 1Gi, replicas: 1}"#);
    let Err(r) = check(&thirteen, None, &[&claim("data-test-db-0", "1Gi", "14")]) else {
        panic!("a downgrade was accepted")
    };
    assert_eq!(r.reason(), "VersionChangeRefused");
    assert!(r.message().contains("spec.version \"13\" is below") && r.message().contains("\"14\""), "{}", r.message());
}

fn sts(ready: i32, replicas: i32) -> StatefulSet {
    let mut s =
        desired_statefulset(&example(), &Settings::default(), None, "d", crate::upgrade::Running::of(&example(), None));
    s.metadata.generation = Some(1);
    s.status = Some(StatefulSetStatus {
        observed_generation: Some(1),
        replicas,
        ready_replicas: Some(ready),
        updated_replicas: Some(replicas),
        ..Default::default()
    });
    s
}

fn cond<'a>(s: &'a PostgreSQLStatus, t: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn status_goes_pending_provisioning_running() {
    let db = example();
    let now = Timestamp::UNIX_EPOCH;
    let s = status(&db, Observed::default(), now);
    assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Pending), None));
    assert_eq!(s.endpoint.as_deref(), Some("test-db.shop.svc:5432"));
    assert_eq!(s.secret_name.as_deref(), Some("test-db-credentials"));
    let starting = sts(0, 1);
    let s = status(&db, Observed { statefulset: Some(&starting), ..Default::default() }, now);
    assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Provisioning), Some(0)));
    assert_eq!(cond(&s, "Ready").status, "False");
    // An instance that cannot start is named, with its cause.
    let cause = "pod test-db-0: container postgres cannot get its image localhost/postgres:17 (ErrImageNeverPull)";
    let s = status(&db, Observed { statefulset: Some(&starting), stuck: Some(cause), ..Default::default() }, now);
    assert_eq!(s.phase, Some(Phase::Provisioning));
    assert_eq!(cond(&s, "Ready").reason, "InstanceStuck");
    assert_eq!(cond(&s, "Ready").message, format!("0 of 1 instances ready; {cause}"));
    let running = sts(1, 1);
    let s = status(&db, Observed { statefulset: Some(&running), ..Default::default() }, now);
    assert_eq!((s.phase, s.ready_replicas), (Some(Phase::Running), Some(1)));
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(cond(&s, "Ready").reason, "AllReplicasReady");
    assert_eq!(
        (cond(&s, "BackupConfigured").status.as_str(), cond(&s, "BackupConfigured").reason.as_str()),
        ("False", "BackupDisabled")
    );
    // On a fake node: ready as far as waiting goes, but said to run nothing.
    let s =
        status(&db, Observed { statefulset: Some(&running), simulated: Some("test-db-0"), ..Default::default() }, now);
    assert_eq!(
        (cond(&s, "Ready").status.as_str(), cond(&s, "Ready").reason.as_str()),
        ("True", "SimulatedOnFakeNodes")
    );
    let message = &cond(&s, "Ready").message;
    assert!(message.contains("no container runs (pod test-db-0 has none)"), "{message}");
}

#[test]
fn a_refused_change_leaves_the_phase_of_what_runs() {
    let running = sts(1, 1);
    let refusal = Refusal::Shrink { storage: "1Gi".into(), claim: "data-test-db-0".into(), current: "2Gi".into() };
    let s = status(
        &example(),
        Observed { statefulset: Some(&running), refusal: Some(&refusal), ..Default::default() },
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(s.phase, Some(Phase::Running));
    assert_eq!((cond(&s, "Ready").status.as_str(), cond(&s, "Ready").reason.as_str()), ("False", "ShrinkRefused"));
    let conflict = Refusal::NameConflict("taken".into());
    let s = status(&example(), Observed { refusal: Some(&conflict), ..Default::default() }, Timestamp::UNIX_EPOCH);
    assert_eq!(s.phase, Some(Phase::Failed));
}

#[test]
fn backup_configured_follows_the_backup() {
    let db = db(r#"{version: "14", storage: 1Gi, replicas: 1, backup: {enabled: true}}"#);
    let now = Timestamp::UNIX_EPOCH;
    let s = status(&db, Observed::default(), now);
    assert_eq!(cond(&s, "BackupConfigured").reason, "WaitingForDatabase");
    let mut b = desired_backup(&db).unwrap();
    b.status = Some(bosun_api::backup::BackupStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
            observed_generation: None,
        }],
        ..Default::default()
    });
    let s = status(&db, Observed { backup: Some(&b), ..Default::default() }, now);
    assert_eq!(
        (cond(&s, "BackupConfigured").status.as_str(), cond(&s, "BackupConfigured").reason.as_str()),
        ("True", "Scheduled")
    );
}

#[test]
fn the_statefulset_runs_the_major_and_the_state_it_is_given_not_the_specs() {
    use crate::upgrade::Running;
    // During an upgrade 12 → 15: stopped on 12, then started on the new major.
    let db = db(r#"{version: "15", storage: 1Gi, replicas: 2}"#);
    let stopped =
        desired_statefulset(&db, &Settings::default(), None, "d", Running { version: Version::V12, stopped: true });
    let spec = stopped.spec.unwrap();
    assert_eq!(spec.replicas, Some(0));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("postgres:12"));
    assert!(pod.containers[0].command.iter().flatten().any(|a| a == "wal_keep_segments=64"), "12's setting");
    let started = desired_statefulset(&db, &Settings::default(), None, "d", Running::of(&db, None));
    let spec = started.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.template.spec.unwrap().containers[0].image.as_deref(), Some("postgres:15"));
}

#[test]
fn the_instances_are_told_when_the_superuser_may_not_log_in_over_the_network() {
    let told = |db: &PostgreSQL| {
        let sts = desired_statefulset(db, &Settings::default(), None, "d", crate::upgrade::Running::of(db, None));
        let pod = sts.spec.unwrap().template.spec.unwrap();
        let env = pod.containers[0].env.clone().unwrap_or_default();
        env.iter().find(|e| e.name == instance::SUPERUSER_NETWORK).and_then(|e| e.value.clone())
    };
    assert_eq!(told(&example()), None, "the default (network access) changes nothing in the pod");
    let off = db(r#"{version: "14", storage: 1Gi, enableSuperuserAccess: false}"#);
    assert!(!superuser_access(&off));
    assert_eq!(told(&off).as_deref(), Some("false"));
}

#[test]
fn the_instances_are_kept_apart_preferred_by_default_required_on_request() {
    let pod_affinity = |db: &PostgreSQL| {
        let sts = desired_statefulset(db, &Settings::default(), None, "d", crate::upgrade::Running::of(db, None));
        sts.spec.unwrap().template.spec.unwrap().affinity
    };
    let preferred = pod_affinity(&example()).unwrap().pod_anti_affinity.unwrap();
    let weighted = &preferred.preferred_during_scheduling_ignored_during_execution.unwrap()[0];
    assert_eq!(weighted.weight, 100);
    assert_eq!(weighted.pod_affinity_term.topology_key, "kubernetes.io/hostname");
    let selector = weighted.pod_affinity_term.label_selector.clone().unwrap().match_labels.unwrap();
    assert_eq!(selector, labels(&example()), "this database's instances only");
    assert!(preferred.required_during_scheduling_ignored_during_execution.is_none());
    let zones = db(
        r#"{version: "14", storage: 1Gi, affinity: {podAntiAffinityType: required, topologyKey: topology.kubernetes.io/zone}}"#,
    );
    let required = pod_affinity(&zones).unwrap().pod_anti_affinity.unwrap();
    let term = &required.required_during_scheduling_ignored_during_execution.unwrap()[0];
    assert_eq!(term.topology_key, "topology.kubernetes.io/zone");
    assert!(required.preferred_during_scheduling_ignored_during_execution.is_none());
    let together = db(r#"{version: "14", storage: 1Gi, affinity: {enablePodAntiAffinity: false}}"#);
    assert_eq!(pod_affinity(&together), None);
}

#[test]
fn the_pooler_runs_restricted_pods_that_no_instance_selector_takes() {
    let pooled =
        db(r#"{version: "15", storage: 1Gi, replicas: 2, pooler: {instances: 3, mode: session, readOnly: true}}"#);
    assert_eq!(pooler_sides(&pooled), [false, true]);
    let deployment = desired_pooler_deployment(&pooled, &Settings::default(), false).expect("a Deployment");
    assert_eq!(deployment.metadata.name.as_deref(), Some("test-db-pooler"));
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let pod_labels = spec.template.metadata.as_ref().unwrap().labels.clone().unwrap();
    // The instances' selector (the StatefulSet's, the Services', the anti-affinity)
    // must not match a pooler pod.
    assert!(labels(&pooled).iter().any(|(k, v)| pod_labels.get(k) != Some(v)), "{pod_labels:?}");
    let pod = spec.template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.command.as_deref(), Some(&[format!("{RUNNER_MOUNT}/bosun"), "pooler".to_owned()][..]));
    assert_eq!(container.image.as_deref(), Some(DEFAULT_POOLER_IMAGE));
    let env: BTreeMap<_, _> =
        container.env.iter().flatten().map(|e| (e.name.as_str(), e.value.clone().unwrap_or_default())).collect();
    assert_eq!(env[bosun_instance::pooler::env::SERVER_HOST], "test-db.shop.svc");
    assert_eq!(env[bosun_instance::pooler::env::MODE], "session");
    let security = container.security_context.as_ref().unwrap();
    assert_eq!((security.read_only_root_filesystem, security.allow_privilege_escalation), (Some(true), Some(false)));
    assert_eq!(pod.security_context.as_ref().unwrap().run_as_non_root, Some(true));
    let ro = desired_pooler_deployment(&pooled, &Settings::default(), true).unwrap();
    let ro_env = ro.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
    assert!(ro_env.iter().any(
        |e| e.name == bosun_instance::pooler::env::SERVER_HOST && e.value.as_deref() == Some("test-db-ro.shop.svc")
    ));
    let service = desired_pooler_service(&pooled, false);
    assert_eq!(service.spec.unwrap().selector, Some(pooler_labels(&pooled, false)));
    // The certificate the pooler serves names its Services.
    let names = crate::instances::names(&pooled);
    for name in ["test-db-pooler.shop.svc", "test-db-pooler-ro.shop.svc"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    assert!(!crate::instances::names(&example()).iter().any(|n| n.contains("pooler")));
}

#[test]
fn only_a_database_with_a_pooler_gives_its_instances_the_pooler_password() {
    let projected = |db: &PostgreSQL| {
        let sts = desired_statefulset(db, &Settings::default(), None, "d", crate::upgrade::Running::of(db, None));
        let volumes = sts.spec.unwrap().template.spec.unwrap().volumes.unwrap();
        let credentials = volumes.into_iter().find(|v| v.projected.is_some()).unwrap();
        credentials.projected.unwrap().sources.unwrap().len()
    };
    // Unchanged without one: a release with pools restarts no database of before.
    assert_eq!(projected(&example()), 2);
    assert_eq!(projected(&db(r#"{version: "14", storage: 1Gi, replicas: 1, pooler: {}}"#)), 3);
}

#[test]
fn the_pooler_is_ready_when_every_pod_asked_for_is() {
    let pooled = db(r#"{version: "14", storage: 1Gi, replicas: 2, pooler: {readOnly: true}}"#);
    let status = |rw: i32, ro: i32| PoolerStatus {
        endpoint: pooler_endpoint(&pooled),
        ready_instances: rw,
        read_only_ready_instances: Some(ro),
    };
    let ready = |s: &PoolerStatus| pooler_condition(&pooled, Some(s), true).unwrap().status;
    assert_eq!(ready(&status(2, 2)), "True");
    assert_eq!(ready(&status(2, 1)), "False");
    assert_eq!(ready(&status(1, 2)), "False");
    assert!(pooler_condition(&example(), None, true).is_none());
    // Every pod ready, but the primary without the pooler's role (a pooler added to a
    // running database, before the switchover of its rolling change).
    let waiting = pooler_condition(&pooled, Some(&status(2, 2)), false).unwrap();
    assert_eq!((waiting.status, waiting.reason), ("False", reasons::PROVISIONING));
    assert!(waiting.message.contains("does not have the pooler's role yet"), "{}", waiting.message);
}

#[test]
fn the_primary_knows_the_poolers_role_once_its_pod_holds_the_password() {
    let pooled = db(r#"{version: "14", storage: 1Gi, replicas: 2, pooler: {}}"#);
    let pod_of = |db: &PostgreSQL| Pod {
        spec: desired_statefulset(db, &Settings::default(), None, "", crate::upgrade::Running::of(db, None))
            .spec
            .and_then(|s| s.template.spec),
        ..Pod::default()
    };
    assert!(holds_pooler_password(&pooled, &pod_of(&pooled)));
    // As bosun's cache of pods keeps them.
    let mut slim = pod_of(&pooled);
    if let Some(spec) = slim.spec.as_mut() {
        spec.volumes = spec.volumes.take().map(|v| v.into_iter().map(crate::pods::slim_volume).collect());
    }
    assert!(holds_pooler_password(&pooled, &slim));
    let kept = serde_json::to_string(&slim.spec.as_ref().unwrap().volumes).unwrap();
    assert!(!kept.contains("\"items\""), "only the Secrets' names are kept: {kept}");
    // A pod of the template from before the pooler.
    let before = db(r#"{version: "14", storage: 1Gi, replicas: 2}"#);
    assert!(!holds_pooler_password(&pooled, &pod_of(&before)));
}

#[test]
fn the_data_claims_are_made_in_the_class_asked_for_and_keep_the_class_they_were_made_with() {
    let local = db(r#"{version: "14", storage: 1Gi, replicas: 2, storageClassName: bosun-local}"#);
    let build = |db: &PostgreSQL, existing: Option<&StatefulSet>| {
        desired_statefulset(db, &Settings::default(), existing, "d", crate::upgrade::Running::of(db, None))
    };
    let class = |sts: &StatefulSet| claim_template(sts).and_then(|c| c.spec.as_ref()?.storage_class_name.clone());
    let made = build(&local, None);
    assert_eq!(class(&made).as_deref(), Some("bosun-local"));
    // Without a class: the cluster's default (no storageClassName, admission fills it in).
    assert_eq!(class(&build(&example(), None)), None);
    // A StatefulSet's claim template cannot change: the class it was made with stays.
    let made_default = build(&example(), None);
    assert_eq!(class(&build(&local, Some(&made_default))), None);
    assert_eq!(class(&build(&example(), Some(&made))).as_deref(), Some("bosun-local"));
}
