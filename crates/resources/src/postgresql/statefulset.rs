//! The StatefulSet: the instances' pod template (the instance manager, its contract's
//! variables, probes, volumes) and its claims.

use super::*;

pub(super) fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), ..EnvVar::default() }
}

/// A probe of the instance manager's API (HTTPS; the kubelet does not verify a
/// probe's certificate, and the health paths need no token): `path` answers 200 or 503
/// from the server's answer to a connection, as `pg_isready` would, and forks nothing.
pub(super) fn api_probe(path: &str, period: i32, failures: i32) -> Probe {
    api_probe_on(API_PORT_NAME, path, period, failures)
}

/// An HTTPS probe of `path` on the container port named `port`.
pub(super) fn api_probe_on(port: &str, path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(port.to_owned()),
            scheme: Some("HTTPS".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// Accepting connections over TCP, as a client would connect.
pub(super) const READY: &str = bosun_instance::api::paths::HEALTH;

/// Ready to serve: up, and not recovering from an archive (`spec.bootstrap.recovery`):
/// until it reaches its target and is promoted, what it answers is not yet the data.
pub(super) const SERVING: &str = bosun_instance::api::paths::READY;

/// The server settings every instance starts with: WAL kept for standbys that fall
/// behind (the setting's name changed in 13), hint bits WAL-logged so a former
/// primary can be rewound, and the synchronous standbys of `spec.synchronous` (any
/// `number` of them; a standby ignores it until promoted).
pub fn server_args(db: &PostgreSQL, version: Version) -> Vec<String> {
    let keep = if version < Version::V13 { "wal_keep_segments=64" } else { "wal_keep_size=1GB" };
    let mut args: Vec<String> =
        ["-c", keep, "-c", "hot_standby=on", "-c", "wal_log_hints=on"].map(str::to_owned).to_vec();
    if let Some(sync) = db.spec.synchronous.as_ref().filter(|_| db.spec.replicas > 1) {
        args.extend(["-c".to_owned(), format!("synchronous_standby_names=ANY {} (*)", sync.number)]);
    }
    if let Some(timeout) = archive_timeout(db) {
        // Only the primary archives (`on`, not `always`); a promoted standby takes over,
        // its new timeline's history file first.
        for setting in [
            "archive_mode=on".to_owned(),
            format!("archive_command={RUNNER_MOUNT}/bosun wal push %p"),
            format!("archive_timeout={timeout}"),
        ] {
            args.extend(["-c".to_owned(), setting]);
        }
    }
    args
}

/// The init container that puts the runner's `bosun` into [`RUNNER_MOUNT`].
pub(super) fn runner_container(image: &str, postgres: &Container) -> Container {
    Container {
        name: RUNNER_CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["bosun".to_owned(), "install".to_owned(), format!("{RUNNER_MOUNT}/bosun")]),
        volume_mounts: Some(vec![runner_mount(false)]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("16Mi".to_owned())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: postgres.security_context.clone(),
        ..Container::default()
    }
}

pub(super) fn runner_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: RUNNER_VOLUME.to_owned(),
        mount_path: RUNNER_MOUNT.to_owned(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// The StatefulSet of `db`, run as `settings` say. `existing` is the StatefulSet as
/// it is, `None` for a new one: its claim template is immutable, so its storage (grown
/// claims are patched one by one) and its major-version label (the claims are
/// relabelled after an upgrade, [`relabel`]) stay. `digest` is
/// [`credentials_digest`] of the Secret. `running`: the major the instances run and
/// whether they are stopped (both as the spec says, but during a major upgrade).
/// The node label instances are kept apart by, unless `spec.affinity.topologyKey` says.
pub const DEFAULT_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// The instances kept apart (`spec.affinity`): no two of this database's on nodes with
/// the same topology label, preferred (default) or required; none when turned off.
pub fn anti_affinity(db: &PostgreSQL) -> Option<Affinity> {
    let spec = db.spec.affinity.clone().unwrap_or_default();
    if !spec.enable_pod_anti_affinity.unwrap_or(true) {
        return None;
    }
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector { match_labels: Some(labels(db)), ..LabelSelector::default() }),
        topology_key: spec.topology_key.unwrap_or_else(|| DEFAULT_TOPOLOGY_KEY.to_owned()),
        ..PodAffinityTerm::default()
    };
    let apart = match spec.pod_anti_affinity_type.unwrap_or_default() {
        AntiAffinityType::Preferred => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: term,
            }]),
            ..PodAntiAffinity::default()
        },
        AntiAffinityType::Required => PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..PodAntiAffinity::default()
        },
    };
    Some(Affinity { pod_anti_affinity: Some(apart), ..Affinity::default() })
}

pub fn desired_statefulset(
    db: &PostgreSQL,
    settings: &Settings,
    existing: Option<&StatefulSet>,
    digest: &str,
    running: crate::upgrade::Running,
) -> StatefulSet {
    let claim_storage = existing.and_then(template_storage);
    let name = db.name_any();
    let secret = secret_name(db);
    let version = running.version;
    let mut pod_labels = labels(db);
    let mut claim_labels = labels(db);
    claim_labels.insert(VERSION_LABEL.to_owned(), version.as_str().to_owned());
    let meta = child_meta(db, name.clone(), claim_labels.clone());
    if let Some(first) = existing.and_then(template_version) {
        claim_labels.insert(VERSION_LABEL.to_owned(), first.to_owned());
    }
    pod_labels.insert(VERSION_LABEL.to_owned(), version.as_str().to_owned());
    // The instance manager (`bosun instance`, copied in by the runner's init
    // container) runs the image's own entrypoint and server as its child.
    let mut command = vec![format!("{RUNNER_MOUNT}/bosun"), "instance".to_owned(), "--".to_owned()];
    command.extend(["docker-entrypoint.sh".to_owned(), "postgres".to_owned()]);
    command.extend(server_args(db, version));
    let (writable_volumes, writable_mounts) = writable();
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image(&settings.image, version)),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(command),
        env: Some(
            vec![
                secret_env(instance::SUPERUSER, &secret, keys::USERNAME, false),
                secret_env(instance::PASSWORD, &secret, keys::PASSWORD, false),
                env(instance::REPLICATION_USER, REPLICATION_USER),
                secret_env(instance::REPLICATION_PASSWORD, &secret, keys::REPLICATION_PASSWORD, true),
                env(instance::PGDATA, PGDATA),
                env(instance::PORT, PORT.to_string()),
                env(instance::PRIMARY_HOST, name.clone()),
                env(instance::PRIMARY_PORT, PORT.to_string()),
                env(instance::ROLE_FILE, ROLE_FILE),
                env(instance::API_DIR, crate::instances::MOUNT),
                env(instance::API_PORT, API_PORT.to_string()),
                env(instance::CREDENTIALS_DIR, CREDENTIALS_MOUNT),
                env(instance::APP_USER, owner(db)),
                env(instance::APP_DATABASE, app_database(db)),
            ]
            .into_iter()
            .chain((!superuser_access(db)).then(|| env(instance::SUPERUSER_NETWORK, "false")))
            .collect(),
        ),
        ports: Some(vec![
            ContainerPort { name: Some("postgres".to_owned()), container_port: PORT, ..ContainerPort::default() },
            ContainerPort {
                name: Some(API_PORT_NAME.to_owned()),
                container_port: API_PORT,
                ..ContainerPort::default()
            },
        ]),
        volume_mounts: Some(
            vec![
                VolumeMount {
                    name: DATA_VOLUME.to_owned(),
                    mount_path: DATA_MOUNT.to_owned(),
                    ..VolumeMount::default()
                },
                VolumeMount {
                    name: PODINFO_VOLUME.to_owned(),
                    mount_path: PODINFO_MOUNT.to_owned(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
                runner_mount(true),
                crate::instances::mount(),
                VolumeMount {
                    name: CREDENTIALS_VOLUME.to_owned(),
                    mount_path: CREDENTIALS_MOUNT.to_owned(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
            ]
            .into_iter()
            .chain(writable_mounts)
            .collect(),
        ),
        // Cloning a large primary or replaying WAL takes as long as it takes: up to an
        // hour before liveness may restart an instance.
        startup_probe: Some(Probe { initial_delay_seconds: Some(1), ..api_probe(READY, 2, 1800) }),
        readiness_probe: Some(api_probe(SERVING, 2, 3)),
        liveness_probe: Some(api_probe(READY, 10, 6)),
        resources: Some(crate::meta::requests(crate::meta::SERVER_CPU, crate::meta::SERVER_MEMORY)),
        security_context: Some(locked_down()),
        ..Container::default()
    };
    let mut init_containers: Vec<Container> =
        settings.volume_permissions.then(|| volume_permissions(&container)).into_iter().collect();
    init_containers.push(runner_container(&settings.runner_image, &container));
    let runner_volume = Volume {
        name: RUNNER_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let mut volumes = vec![podinfo_volume(), runner_volume, crate::instances::volume(db), credentials_volume(db)];
    volumes.extend(writable_volumes);
    let mut container = container;
    let (continuous, recovery) = (continuous_destination(db), recovery(db));
    // The runner reaches the archive as a Backup's run does: the same variables, the
    // Secret's keys, the same mounts; its folder is the database's Backup's. A recovery
    // from another archive has variables of its own (the Secret and claim are the
    // same: `check` refuses others).
    let archive = continuous.or(recovery.map(|(_, d)| d));
    if let Some(destination) = archive {
        // With the archive's encryption keys (its Secret's `identities`, mounted
        // read-only): WAL and base backups are encrypted as the dumps are.
        let reach = crate::backup::reach(destination, &backup_name(db));
        volumes.extend(reach.volumes);
        container.env_from = reach.env_from;
        container.volume_mounts.get_or_insert_with(Vec::new).extend(reach.mounts);
        let env = container.env.get_or_insert_with(Vec::new);
        if continuous.is_some() {
            env.extend(reach.env);
            env.push(self::env(instance::WAL_ERROR_FILE, WAL_ERROR_FILE));
        } else if destination.encryption.is_some() {
            // A recovery only: its keys, named as the runs name them.
            env.push(crate::backup::namespace_env(contract::BACKUP_NAMESPACE));
            env.extend(crate::backup::encryption_env(destination));
        }
    }
    if let Some((recovery, destination)) = recovery {
        container.env.get_or_insert_with(Vec::new).extend(recovery_env(recovery, destination));
    }
    let storage = claim_storage.map(str::to_owned).unwrap_or_else(|| db.spec.storage.clone());
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.to_owned()),
            labels: Some(claim_labels),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            // A StatefulSet's claim template is fixed: the class it was made with stays.
            storage_class_name: match existing.and_then(claim_template) {
                Some(template) => template.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
                None => db.spec.storage_class_name.clone(),
            },
            ..claims::spec(Quantity(storage))
        }),
        status: None,
    };
    let when_deleted = match db.spec.deletion_policy.unwrap_or_default() {
        DeletionPolicy::Retain => "Retain",
        DeletionPolicy::Delete => "Delete",
    };
    StatefulSet {
        metadata: meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(if running.stopped { 0 } else { crate::failover::kept_replicas(db) }),
            service_name: Some(headless_name(db)),
            selector: LabelSelector { match_labels: Some(labels(db)), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(CREDENTIALS_DIGEST.to_owned(), digest.to_owned())])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    affinity: anti_affinity(db),
                    init_containers: (!init_containers.is_empty()).then_some(init_containers),
                    containers: vec![container],
                    volumes: Some(volumes),
                    security_context: Some(as_postgres()),
                    termination_grace_period_seconds: Some(30),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![claim]),
            // bosun restarts the instances itself, standbys first and the primary
            // after a switchover (`failover::roll`); the StatefulSet only recreates.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(when_deleted.to_owned()),
                when_scaled: Some("Retain".to_owned()),
            }),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Operator configuration of PostgreSQL instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The image; `{version}` stands for the major version (`--postgres-image`).
    pub image: String,
    /// Hand the data volume to the postgres user before the server starts, for storage
    /// that ignores `fsGroup` (hostPath volumes, as the local cluster's)
    /// (`--postgres-volume-permissions`).
    pub volume_permissions: bool,
    /// The image whose `bosun` archives WAL, copied into each instance with
    /// continuous archiving (`--runner-image`).
    pub runner_image: String,
    /// The image of the pooler's pods (`spec.pooler`): PgBouncer and psql
    /// (`--pooler-image`).
    pub pooler_image: String,
    /// How long each database's CA and server certificate live, and when they are
    /// replaced (`--postgres-cert-validity` and the others).
    pub certificates: crate::pki::Lifetimes,
    /// How long a primary whose pod looks Ready may not answer before it is taken for
    /// lost (`--postgres-unanswered-failover`).
    pub unanswered_failover: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            volume_permissions: false,
            runner_image: crate::backup::DEFAULT_RUNNER_IMAGE.to_owned(),
            pooler_image: super::DEFAULT_POOLER_IMAGE.to_owned(),
            certificates: crate::pki::Lifetimes::default(),
            unanswered_failover: std::time::Duration::from_secs(5),
        }
    }
}

/// The init container of [`Settings::volume_permissions`]: the one step that runs as
/// root, with no capability but `CHOWN`, changing the owner of the volume's root only.
pub(super) fn volume_permissions(postgres: &Container) -> Container {
    Container {
        name: "volume-permissions".to_owned(),
        image: postgres.image.clone(),
        image_pull_policy: postgres.image_pull_policy.clone(),
        command: Some(vec!["chown".to_owned(), format!("{RUN_AS}:{RUN_AS}"), DATA_MOUNT.to_owned()]),
        volume_mounts: postgres.volume_mounts.clone(),
        security_context: Some(SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: Some(vec!["CHOWN".to_owned()]),
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

pub(super) const PODINFO_VOLUME: &str = "podinfo";

/// The downward-API volume with the pod's role label as the file `role` (empty until
/// bosun sets it).
/// The passwords, as files the kubelet refreshes when a Secret is edited: the
/// instance manager sets a new password without a restart. The credentials Secret's
/// `password` and `replication-password`, and the application Secret's `password` as
/// `app-password`. Optional: the variables from the credentials Secret are what a
/// first start needs, and the application's role waits for its Secret.
pub(super) const CREDENTIALS_VOLUME: &str = "credentials";
pub(super) const CREDENTIALS_MOUNT: &str = "/etc/bosun-credentials";

pub(super) fn credentials_volume(db: &PostgreSQL) -> Volume {
    use k8s_openapi::api::core::v1::{KeyToPath, ProjectedVolumeSource, SecretProjection, VolumeProjection};
    let item = |key: &str, path: &str| KeyToPath { key: key.to_owned(), path: path.to_owned(), mode: None };
    let secret = |name: String, items: Vec<KeyToPath>| VolumeProjection {
        secret: Some(SecretProjection { name, items: Some(items), optional: Some(true) }),
        ..VolumeProjection::default()
    };
    let superuser =
        vec![item(keys::PASSWORD, keys::PASSWORD), item(keys::REPLICATION_PASSWORD, keys::REPLICATION_PASSWORD)];
    Volume {
        name: CREDENTIALS_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(
                [
                    Some(secret(secret_name(db), superuser)),
                    Some(secret(app_secret_name(db), vec![item(keys::PASSWORD, instance::APP_PASSWORD_FILE)])),
                    // Only with a pooler: an instance template without it is the one of
                    // before pools existed, and does not restart the instances.
                    db.spec.pooler.as_ref().map(|_| {
                        secret(pooler_secret_name(db), vec![item(POOLER_PASSWORD_KEY, instance::POOLER_PASSWORD_FILE)])
                    }),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
            default_mode: Some(0o440),
        }),
        ..Volume::default()
    }
}

pub(super) fn podinfo_volume() -> Volume {
    Volume {
        name: PODINFO_VOLUME.to_owned(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "role".to_owned(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.labels['{ROLE_LABEL}']"),
                    ..ObjectFieldSelector::default()
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
            ..DownwardAPIVolumeSource::default()
        }),
        ..Volume::default()
    }
}

pub(super) fn claim_template(sts: &StatefulSet) -> Option<&PersistentVolumeClaim> {
    sts.spec.as_ref()?.volume_claim_templates.as_ref()?.iter().find(|c| c.name_any() == DATA_VOLUME)
}

/// The storage a StatefulSet's data claim template requests.
pub fn template_storage(sts: &StatefulSet) -> Option<&str> {
    requested(claim_template(sts)?)
}

/// The major-version label of a StatefulSet's data claim template (the major its
/// first claims were made with).
pub(super) fn template_version(sts: &StatefulSet) -> Option<&str> {
    claim_template(sts)?.labels().get(VERSION_LABEL).map(String::as_str)
}

/// The label patch of a data claim whose major-version label is not `version`: a
/// claim made from the template before an upgrade, or the claims of the upgraded data.
pub fn relabel(claim: &PersistentVolumeClaim, version: Version) -> Option<serde_json::Value> {
    (claim.labels().get(VERSION_LABEL).map(String::as_str) != Some(version.as_str()))
        .then(|| serde_json::json!({"metadata": {"labels": {VERSION_LABEL: version.as_str()}}}))
}
