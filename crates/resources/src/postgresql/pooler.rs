//! The pooler (`spec.pooler`): PgBouncer pods run by `bosun pooler`
//! (`bosun_instance::pooler`) in a Deployment `<name>-pooler` behind the Service
//! `<name>-pooler`, and with `readOnly` the same again in front of the standbys
//! (`<name>-pooler-ro`); the Secret `<name>-pooler` with the password of the role it
//! looks clients' passwords up as. The pods mount the instance Secret (the certificate
//! PostgreSQL serves, which names the pooler's Services too; the CAs; the API's
//! certificate and token), so clients see the database's own certificate and bosun
//! reaches the pooler's API as it reaches the instances'.
//!
//! ```text
//!  PostgreSQL ──▶ Secret <name>-pooler (made once; a new one if deleted: the primary sets it)
//!             ──▶ Deployment + Service <name>-pooler [and <name>-pooler-ro]
//!  Deployments ──status──▶ status.pooler, condition PoolerReady
//! ```

use crate::slim::SlimDeployment;
use bosun_api::postgresql::PoolMode;
use bosun_instance::pooler::{self as program, env as pooler_env};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{KeyToPath, Pod, SecretVolumeSource};

use super::*;

/// `app.kubernetes.io/name` of the pooler's pods (not [`APP_NAME`]: the instances'
/// selectors must never take them for instances).
pub const POOLER_APP_NAME: &str = "postgresql-pooler";
/// `rw` or `ro`, on the pooler's pods: which Service selects them.
pub const POOLER_LABEL: &str = "database.example.com/pooler";
/// The pooler container's name, and its API port's.
pub const POOLER_CONTAINER: &str = "pgbouncer";
pub const POOLER_API_PORT_NAME: &str = "pooler-api";
/// `--pooler-image`'s default: PgBouncer and psql, from Debian (`hack/images.sh`).
pub const DEFAULT_POOLER_IMAGE: &str = "localhost/pgbouncer:trixie";
/// `spec.pooler`'s defaults.
pub const DEFAULT_POOLER_INSTANCES: i32 = 2;
pub const DEFAULT_MAX_PAUSE: &str = "10s";
/// The key of the pooler Secret, and where the pods mount it.
pub const POOLER_PASSWORD_KEY: &str = "password";
const POOLER_SECRET_MOUNT: &str = "/etc/bosun-pooler";
const POOLER_SECRET_VOLUME: &str = "pooler-secret";
const POOLER_RUN_DIR: &str = "/var/run/pgbouncer";

/// The pooler's Deployment and Service: `<name>-pooler`, or `<name>-pooler-ro`.
pub fn pooler_name(db: &PostgreSQL, read_only: bool) -> String {
    if read_only { format!("{}-pooler-ro", db.name_any()) } else { format!("{}-pooler", db.name_any()) }
}

/// The Secret of the pooler's role's password: `<name>-pooler`.
pub fn pooler_secret_name(db: &PostgreSQL) -> String {
    format!("{}-pooler", db.name_any())
}

/// `<name>-pooler.<namespace>.svc:5432`.
pub fn pooler_endpoint(db: &PostgreSQL) -> String {
    format!("{}.{}.svc:{PORT}", pooler_name(db, false), db.namespace().unwrap_or_default())
}

/// The sides the spec asks for: read-write always, read-only with `readOnly`.
pub fn pooler_sides(db: &PostgreSQL) -> Vec<bool> {
    match &db.spec.pooler {
        None => vec![],
        Some(p) if p.read_only.unwrap_or(false) => vec![false, true],
        Some(_) => vec![false],
    }
}

/// The longest pause of a change of primary (`spec.pooler.maxPause`).
pub fn max_pause(db: &PostgreSQL) -> Option<std::time::Duration> {
    let pooler = db.spec.pooler.as_ref()?;
    crate::duration::parse_duration(pooler.max_pause.as_deref().unwrap_or(DEFAULT_MAX_PAUSE)).ok()
}

/// The names the pooler's Services answer to, for the serving certificate.
pub fn pooler_names(db: &PostgreSQL) -> Vec<String> {
    let ns = db.namespace().unwrap_or_default();
    let mut names = Vec::new();
    for service in pooler_sides(db).into_iter().map(|ro| pooler_name(db, ro)) {
        names.extend([format!("{service}.{ns}.svc"), format!("{service}.{ns}.svc.cluster.local"), service]);
    }
    names
}

/// The name bosun checks a pooler pod's API certificate against.
pub fn pooler_server_name(db: &PostgreSQL) -> String {
    format!("{}.{}.svc", pooler_name(db, false), db.namespace().unwrap_or_default())
}

/// `<name>-pooler`, owned by the database: the pooler's role's password. Made when
/// missing; the primary sets whatever it holds.
pub fn desired_pooler_secret(db: &PostgreSQL, password: &str) -> Secret {
    Secret {
        metadata: child_meta(db, pooler_secret_name(db), labels(db)),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(POOLER_PASSWORD_KEY.to_owned(), ByteString(password.as_bytes().to_vec()))])),
        ..Secret::default()
    }
}

/// The pods' labels of one side (the Deployment's selector, the Service's).
pub fn pooler_labels(db: &PostgreSQL, read_only: bool) -> BTreeMap<String, String> {
    let mut labels = standard_labels(POOLER_APP_NAME, &db.name_any());
    labels.insert(POOLER_LABEL.to_owned(), if read_only { "ro" } else { "rw" }.to_owned());
    labels
}

/// The Deployment of one side of the pooler, run as `settings` say.
pub fn desired_pooler_deployment(db: &PostgreSQL, settings: &Settings, read_only: bool) -> Option<Deployment> {
    let spec = db.spec.pooler.as_ref()?;
    let name = pooler_name(db, read_only);
    let server = if read_only { read_only_name(db) } else { db.name_any() };
    let server_host = format!("{server}.{}.svc", db.namespace().unwrap_or_default());
    let pod_labels = pooler_labels(db, read_only);
    let mut env = vec![
        self::env(pooler_env::SERVER_HOST, server_host),
        self::env(pooler_env::SERVER_PORT, PORT.to_string()),
        self::env(pooler_env::MODE, spec.mode.unwrap_or_default().as_str()),
        self::env(pooler_env::API_DIR, crate::instances::MOUNT),
        self::env(pooler_env::API_PORT, API_PORT.to_string()),
        self::env(pooler_env::PASSWORD_FILE, format!("{POOLER_SECRET_MOUNT}/{POOLER_PASSWORD_KEY}")),
        self::env(pooler_env::RUN_DIR, POOLER_RUN_DIR),
        self::env("HOME", "/tmp"),
    ];
    if let Some(size) = spec.default_pool_size {
        env.push(self::env(pooler_env::DEFAULT_POOL_SIZE, size.to_string()));
    }
    if let Some(clients) = spec.max_client_connections {
        env.push(self::env(pooler_env::MAX_CLIENT_CONN, clients.to_string()));
    }
    if read_only {
        env.push(self::env(pooler_env::READ_ONLY, "true"));
    }
    let writable = |name: &str, path: &str| {
        (
            Volume { name: name.to_owned(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
            VolumeMount { name: name.to_owned(), mount_path: path.to_owned(), ..VolumeMount::default() },
        )
    };
    let (run_volume, run_mount) = writable("run", POOLER_RUN_DIR);
    let (tmp_volume, tmp_mount) = writable("tmp", "/tmp");
    let container = Container {
        name: POOLER_CONTAINER.to_owned(),
        image: Some(settings.pooler_image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec![format!("{RUNNER_MOUNT}/bosun"), "pooler".to_owned()]),
        env: Some(env),
        ports: Some(vec![
            ContainerPort {
                name: Some("pgbouncer".to_owned()),
                container_port: i32::from(program::PORT),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some(POOLER_API_PORT_NAME.to_owned()),
                container_port: API_PORT,
                ..ContainerPort::default()
            },
        ]),
        volume_mounts: Some(vec![
            runner_mount(true),
            crate::instances::mount(),
            VolumeMount {
                name: POOLER_SECRET_VOLUME.to_owned(),
                mount_path: POOLER_SECRET_MOUNT.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            run_mount,
            tmp_mount,
        ]),
        startup_probe: Some(Probe {
            initial_delay_seconds: Some(1),
            ..api_probe_on(POOLER_API_PORT_NAME, bosun_instance::api::paths::HEALTH, 1, 120)
        }),
        readiness_probe: Some(api_probe_on(POOLER_API_PORT_NAME, bosun_instance::api::paths::READY, 2, 2)),
        liveness_probe: Some(api_probe_on(POOLER_API_PORT_NAME, bosun_instance::api::paths::HEALTH, 10, 6)),
        resources: Some(crate::meta::requests("50m", "32Mi")),
        security_context: Some(locked_down()),
        ..Container::default()
    };
    let init = runner_container(&settings.runner_image, &container);
    let pooler_secret = Volume {
        name: POOLER_SECRET_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(pooler_secret_name(db)),
            items: Some(vec![KeyToPath {
                key: POOLER_PASSWORD_KEY.to_owned(),
                path: POOLER_PASSWORD_KEY.to_owned(),
                mode: None,
            }]),
            default_mode: Some(0o440),
            optional: None,
        }),
        ..Volume::default()
    };
    let runner_volume = Volume {
        name: RUNNER_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let apart = PodAffinityTerm {
        label_selector: Some(LabelSelector { match_labels: Some(pod_labels.clone()), ..LabelSelector::default() }),
        topology_key: DEFAULT_TOPOLOGY_KEY.to_owned(),
        ..PodAffinityTerm::default()
    };
    let mut meta_labels = labels(db);
    meta_labels.insert(POOLER_LABEL.to_owned(), pod_labels[POOLER_LABEL].clone());
    Some(Deployment {
        metadata: child_meta(db, name, meta_labels),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.instances.unwrap_or(DEFAULT_POOLER_INSTANCES)),
            selector: LabelSelector { match_labels: Some(pod_labels.clone()), ..LabelSelector::default() },
            // A new pod is ready before an old one goes: the pooler keeps its capacity.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                                weight: 100,
                                pod_affinity_term: apart,
                            }]),
                            ..PodAntiAffinity::default()
                        }),
                        ..Affinity::default()
                    }),
                    init_containers: Some(vec![init]),
                    containers: vec![container],
                    volumes: Some(vec![
                        runner_volume,
                        crate::instances::volume(db),
                        pooler_secret,
                        run_volume,
                        tmp_volume,
                    ]),
                    security_context: Some(as_postgres()),
                    termination_grace_period_seconds: Some(30),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// The Service of one side: port 5432, as the database's, to PgBouncer's port.
pub fn desired_pooler_service(db: &PostgreSQL, read_only: bool) -> Service {
    Service {
        metadata: child_meta(db, pooler_name(db, read_only), labels(db)),
        spec: Some(ServiceSpec {
            selector: Some(pooler_labels(db, read_only)),
            ports: Some(vec![ServicePort {
                name: Some("postgres".to_owned()),
                port: PORT,
                target_port: Some(IntOrString::String("pgbouncer".to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `status.pooler` from the pooler's Deployments as they are (`None` without
/// `spec.pooler`).
pub fn pooler_status(db: &PostgreSQL, deployments: &[Option<&SlimDeployment>]) -> Option<PoolerStatus> {
    db.spec.pooler.as_ref()?;
    let ready =
        |d: Option<&&SlimDeployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.ready_replicas).unwrap_or(0);
    Some(PoolerStatus {
        endpoint: pooler_endpoint(db),
        ready_instances: ready(deployments.first().and_then(Option::as_ref)),
        read_only_ready_instances: pooler_sides(db)
            .contains(&true)
            .then(|| ready(deployments.get(1).and_then(Option::as_ref))),
    })
}

/// `PoolerReady`: every pooler pod asked for is ready (none without `spec.pooler`).
/// Whether the primary's pod `pod` holds the pooler's password: its setup (at start,
/// or at its promotion) made the pooler's role, which the pooler logs in as. A pooler
/// added to a running database waits for the rolling change that gives the instances
/// the password (standbys first, then a switchover).
pub fn holds_pooler_password(db: &PostgreSQL, pod: &Pod) -> bool {
    let secret = pooler_secret_name(db);
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| {
        let projected = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(secret.as_str())
            || projected.into_iter().flatten().any(|s| s.secret.as_ref().is_some_and(|s| s.name == secret))
    })
}

/// `PoolerReady`: every pod asked for ready, and the primary knows the pooler's role
/// (`role_known`, [`holds_pooler_password`]).
pub fn pooler_condition(db: &PostgreSQL, status: Option<&PoolerStatus>, role_known: bool) -> Option<Desired> {
    let spec = db.spec.pooler.as_ref()?;
    let status = status?;
    let wanted = spec.instances.unwrap_or(DEFAULT_POOLER_INSTANCES);
    let ro_short = status.read_only_ready_instances.is_some_and(|r| r < wanted);
    Some(if status.ready_instances >= wanted && !ro_short && role_known {
        Desired::new(
            postgresql_types::POOLER_READY,
            true,
            reasons::RUNNING_READY,
            format!(
                "{wanted} of {wanted} pooler instances ready ({} mode); clients connect to {}",
                spec.mode.unwrap_or(PoolMode::Transaction).as_str(),
                pooler_endpoint(db)
            ),
        )
    } else {
        let role = if role_known {
            ""
        } else {
            "; the primary does not have the pooler's role yet: it comes with the instances' restart on the new \
             pod template (standbys first, then a switchover)"
        };
        Desired::new(
            postgresql_types::POOLER_READY,
            false,
            reasons::PROVISIONING,
            format!("{} of {wanted} pooler instances ready{role}", status.ready_instances),
        )
    })
}
