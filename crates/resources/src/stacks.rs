//! AppStack and EcommercePlatform → the values in effect ([`Plan`]) → each
//! component's children. Both kinds reduce to one [`Plan`]; everything after it is
//! shared.
//!
//! ```text
//!  AppStack ──────────app_stack──┐
//!  EcommercePlatform ──platform──┴▶ Plan ─▶ database (PostgreSQL <name>-db | MySQL StatefulSet, Secret, Service)
//!                                        ─▶ cache (Redis Deployment + Service)
//!                                        ─▶ backend, frontend (Deployment + Service)
//!                                        ─▶ Ingress, ServiceMonitor (EcommercePlatform)
//! ```

use crate::slim::SlimDeployment;
use std::collections::BTreeMap;

use bosun_api::backup::{Backup, BackupSpec, Connection, Destination, DestinationType, SecretRef, Source, SourceType};
use bosun_api::conditions::reasons;
use bosun_api::monitoring::{Endpoint, ServiceMonitor, ServiceMonitorSpec};
use bosun_api::postgresql::{BackupSettings, PostgreSQL, PostgreSQLSpec};
use bosun_api::stack::{
    AppStack, ComponentStatus, DatabaseType, EcommercePlatform, Effective, EffectiveBackup, Environment,
    IngressSettings, Tier,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, ExecAction, PersistentVolumeClaim, PodSpec, PodTemplateSpec, Probe,
    Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, TCPSocketAction, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::meta::{child_meta, standard_labels};
use crate::teardown::{Progress, Step};

/// `app.kubernetes.io/name` of a stack's children.
pub const APP_NAME: &str = "stack";
/// The label every child of an EcommercePlatform carries, naming it (the spec's).
pub const PLATFORM_LABEL: &str = "platform";
/// The label every child of an AppStack carries, naming it.
pub const STACK_LABEL: &str = "app.example.com/stack";
/// The label naming the component a child belongs to.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";

/// The backup schedule and retention of environments with backups.
pub const BACKUP_SCHEDULE: &str = "0 2 * * *";
pub const BACKUP_RETENTION: &str = "30d";

pub const MYSQL_PORT: i32 = 3306;
pub const POSTGRES_PORT: i32 = 5432;
pub const REDIS_PORT: i32 = 6379;
pub const BACKEND_PORT: i32 = 8080;
pub const FRONTEND_PORT: i32 = 80;
/// The database the application uses, in either engine.
pub const DATABASE: &str = "app";
/// The application's user in a MySQL database (PostgreSQL's Secret names its own).
pub const MYSQL_USER: &str = "app";

/// The components, in dependency order: what each starts after.
pub const DATABASE_COMPONENT: &str = "database";
pub const CACHE_COMPONENT: &str = "cache";
pub const BACKEND_COMPONENT: &str = "backend";
pub const FRONTEND_COMPONENT: &str = "frontend";
pub const CACHE_AFTER: &[&str] = &[DATABASE_COMPONENT];
pub const BACKEND_AFTER: &[&str] = &[DATABASE_COMPONENT];
pub const FRONTEND_AFTER: &[&str] = &[BACKEND_COMPONENT];
/// The components in the order a stack's deletion takes them: the reverse of the order
/// they start in, each gone before the next.
pub const DELETION_ORDER: [&str; 4] = [FRONTEND_COMPONENT, BACKEND_COMPONENT, CACHE_COMPONENT, DATABASE_COMPONENT];

/// The images the operator runs for the parts the spec does not choose (flags, so a
/// cluster without a registry can use local ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    /// `{version}` is replaced by the database version, e.g. `mysql:{version}`.
    pub mysql: String,
    pub redis: String,
}

impl Default for Images {
    fn default() -> Self {
        Self { mysql: "mysql:{version}".to_owned(), redis: "redis:7".to_owned() }
    }
}

/// A tier in effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierPlan {
    pub image: String,
    pub replicas: i32,
    pub port: i32,
}

/// The database in effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabasePlan {
    pub type_: DatabaseType,
    pub version: String,
    pub replicas: i32,
    pub storage: String,
    pub backup: EffectiveBackup,
}

/// Everything a stack runs, with every default filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    /// The label (key, value) every child carries besides the standard ones.
    pub owner_label: (&'static str, String),
    pub database: DatabasePlan,
    pub cache: bool,
    pub backend: TierPlan,
    pub frontend: TierPlan,
    pub monitoring: bool,
    /// The Ingress to the frontend (EcommercePlatform only).
    pub ingress: Option<IngressSettings>,
}

fn tier(t: &Tier, port: i32, replicas: i32) -> TierPlan {
    TierPlan { image: t.image.clone(), replicas: t.replicas.unwrap_or(replicas), port: t.port.unwrap_or(port) }
}

/// An AppStack's plan: one database instance of 1Gi unless given, no backups, no
/// monitoring, a cache only when enabled.
pub fn app_stack(stack: &AppStack) -> Plan {
    let s = &stack.spec;
    let type_ = s.database.type_;
    Plan {
        name: stack.name_any(),
        owner_label: (STACK_LABEL, stack.name_any()),
        database: DatabasePlan {
            type_,
            version: s.database.version.clone().unwrap_or_else(|| type_.default_version().to_owned()),
            replicas: s.database.replicas.unwrap_or(1),
            storage: s.database.storage.clone().unwrap_or_else(|| "1Gi".to_owned()),
            backup: EffectiveBackup::default(),
        },
        cache: s.cache.as_ref().is_some_and(|c| c.enabled),
        backend: tier(&s.backend, BACKEND_PORT, 1),
        frontend: tier(&s.frontend, FRONTEND_PORT, 1),
        monitoring: false,
        ingress: None,
    }
}

/// The database defaults of an environment: (replicas, storage, backups).
pub fn environment_defaults(environment: Environment) -> (i32, &'static str, bool) {
    match environment {
        Environment::Production => (3, "100Gi", true),
        Environment::Staging => (2, "50Gi", true),
        Environment::Development => (1, "10Gi", false),
    }
}

/// An EcommercePlatform's plan: the spec's values, the environment's defaults where
/// the spec leaves them out.
pub fn platform(p: &EcommercePlatform) -> Plan {
    let s = &p.spec;
    let (replicas, storage, backups) = environment_defaults(s.environment);
    let type_ = s.database.type_;
    let backup = if backups {
        EffectiveBackup {
            enabled: true,
            schedule: Some(BACKUP_SCHEDULE.to_owned()),
            retention: Some(BACKUP_RETENTION.to_owned()),
        }
    } else {
        EffectiveBackup::default()
    };
    Plan {
        name: p.name_any(),
        owner_label: (PLATFORM_LABEL, p.name_any()),
        database: DatabasePlan {
            type_,
            version: s.database.version.clone().unwrap_or_else(|| type_.default_version().to_owned()),
            replicas: s.database.replicas.unwrap_or(replicas),
            storage: s.database.storage.clone().unwrap_or_else(|| storage.to_owned()),
            backup,
        },
        cache: s.cache.as_ref().is_none_or(|c| c.enabled),
        backend: tier(&s.backend, BACKEND_PORT, 1),
        frontend: tier(&s.frontend, FRONTEND_PORT, 1),
        monitoring: s.monitoring.as_ref().is_none_or(|m| m.enabled),
        ingress: Some(s.ingress.clone().unwrap_or_default()),
    }
}

impl Plan {
    /// The values in effect, as the status shows them.
    pub fn effective(&self) -> Effective {
        Effective {
            database_type: self.database.type_.as_str().to_owned(),
            database_version: self.database.version.clone(),
            // MySQL runs one instance (no replication): `replicas` is PostgreSQL's.
            database_replicas: match self.database.type_ {
                DatabaseType::Postgresql => self.database.replicas,
                DatabaseType::Mysql => 1,
            },
            database_storage: self.database.storage.clone(),
            backup: self.database.backup.clone(),
            backend_replicas: self.backend.replicas,
            frontend_replicas: self.frontend.replicas,
            cache: self.cache,
            monitoring: self.monitoring,
        }
    }

    pub fn database_name(&self) -> String {
        format!("{}-db", self.name)
    }

    /// The Secret with the database's credentials (PostgreSQL's own, or the MySQL one).
    pub fn credentials_name(&self) -> String {
        format!("{}-db-credentials", self.name)
    }

    pub fn cache_name(&self) -> String {
        format!("{}-cache", self.name)
    }

    pub fn tier_name(&self, component: &str) -> String {
        format!("{}-{component}", self.name)
    }

    pub fn database_port(&self) -> i32 {
        match self.database.type_ {
            DatabaseType::Postgresql => POSTGRES_PORT,
            DatabaseType::Mysql => MYSQL_PORT,
        }
    }

    /// Where each component is reached inside the namespace (`host:port`).
    pub fn endpoints(&self) -> BTreeMap<String, String> {
        let mut endpoints = BTreeMap::from([
            (DATABASE_COMPONENT.to_owned(), format!("{}:{}", self.database_name(), self.database_port())),
            (BACKEND_COMPONENT.to_owned(), format!("{}:{}", self.tier_name(BACKEND_COMPONENT), self.backend.port)),
            (FRONTEND_COMPONENT.to_owned(), format!("{}:{}", self.tier_name(FRONTEND_COMPONENT), self.frontend.port)),
        ]);
        if self.cache {
            endpoints.insert(CACHE_COMPONENT.to_owned(), format!("{}:{REDIS_PORT}", self.cache_name()));
        }
        endpoints
    }

    /// The labels of `component`'s children.
    pub fn labels(&self, component: &str) -> BTreeMap<String, String> {
        let mut labels = standard_labels(APP_NAME, &self.name);
        labels.insert(self.owner_label.0.to_owned(), self.owner_label.1.clone());
        labels.insert(COMPONENT_LABEL.to_owned(), component.to_owned());
        labels
    }

    /// The labels selecting `component`'s pods (stable: a selector is immutable).
    pub fn selector(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/instance".to_owned(), self.name.clone()),
            (self.owner_label.0.to_owned(), self.owner_label.1.clone()),
            (COMPONENT_LABEL.to_owned(), component.to_owned()),
        ])
    }
}

fn meta<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan, name: String, component: &str) -> ObjectMeta {
    child_meta(owner, name, plan.labels(component))
}

/// The PostgreSQL `<name>-db` of a stack whose database is postgresql.
pub fn desired_postgresql<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan) -> Option<PostgreSQL> {
    if plan.database.type_ != DatabaseType::Postgresql {
        return None;
    }
    let db = &plan.database;
    let version = serde_json::from_value(serde_json::Value::String(db.version.clone())).ok()?;
    let backup = db.backup.enabled.then(|| BackupSettings {
        enabled: true,
        schedule: db.backup.schedule.clone(),
        retention: db.backup.retention.clone(),
        destination: None,
        continuous: None,
    });
    let mut pg = PostgreSQL::new(
        &plan.database_name(),
        PostgreSQLSpec {
            bootstrap: None,
            version,
            storage: db.storage.clone(),
            storage_class_name: None,
            replicas: db.replicas,
            failover_delay: None,
            synchronous: None,
            backup,
            owner: None,
            database: None,
            certificates: None,
            affinity: None,
            enable_superuser_access: None,
            deletion_policy: None,
            pooler: None,
        },
    );
    pg.metadata = meta(owner, plan, plan.database_name(), DATABASE_COMPONENT);
    Some(pg)
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

fn service<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan, name: String, component: &str, port: i32) -> Service {
    Service {
        metadata: meta(owner, plan, name, component),
        spec: Some(ServiceSpec {
            selector: Some(plan.selector(component)),
            ports: Some(vec![ServicePort {
                name: Some(component.to_owned()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: secret.to_owned(), key: key.to_owned(), optional: None }),
            ..Default::default()
        }),
        value: None,
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), value_from: None }
}

/// The MySQL credentials Secret: created once (with passwords the controller draws),
/// never rewritten.
pub fn desired_mysql_secret<K: Resource<DynamicType = ()>>(
    owner: &K,
    plan: &Plan,
    password: &str,
    root_password: &str,
) -> Secret {
    // Kept when the stack is deleted, like a PostgreSQL's: its data claims stay too.
    let mut metadata = meta(owner, plan, plan.credentials_name(), DATABASE_COMPONENT);
    metadata.owner_references = None;
    Secret {
        metadata,
        string_data: Some(BTreeMap::from([
            ("username".to_owned(), MYSQL_USER.to_owned()),
            ("password".to_owned(), password.to_owned()),
            ("root-password".to_owned(), root_password.to_owned()),
            ("database".to_owned(), DATABASE.to_owned()),
            ("host".to_owned(), plan.database_name()),
            ("port".to_owned(), MYSQL_PORT.to_string()),
        ])),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

/// The MySQL StatefulSet: the official image, credentials from the Secret, a
/// `mysqladmin ping` readiness probe, one data claim per instance.
pub fn desired_mysql_statefulset<K: Resource<DynamicType = ()>>(
    owner: &K,
    plan: &Plan,
    images: &Images,
) -> Option<StatefulSet> {
    if plan.database.type_ != DatabaseType::Mysql {
        return None;
    }
    let secret = plan.credentials_name();
    let ping = Probe {
        exec: Some(ExecAction {
            command: Some(
                ["sh", "-c", "mysqladmin ping -h 127.0.0.1 -uroot -p\"$MYSQL_ROOT_PASSWORD\" --silent"]
                    .map(str::to_owned)
                    .to_vec(),
            ),
        }),
        period_seconds: Some(5),
        timeout_seconds: Some(5),
        ..Default::default()
    };
    let container = Container {
        name: "mysql".to_owned(),
        image: Some(crate::meta::versioned_image(&images.mysql, &plan.database.version)),
        ports: Some(vec![port("mysql", MYSQL_PORT)]),
        env: Some(vec![
            secret_env("MYSQL_ROOT_PASSWORD", &secret, "root-password"),
            secret_env("MYSQL_USER", &secret, "username"),
            secret_env("MYSQL_PASSWORD", &secret, "password"),
            secret_env("MYSQL_DATABASE", &secret, "database"),
        ]),
        readiness_probe: Some(ping.clone()),
        liveness_probe: Some(Probe { initial_delay_seconds: Some(60), period_seconds: Some(10), ..ping }),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".to_owned(),
            mount_path: "/var/lib/mysql".to_owned(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let name = plan.database_name();
    let mut claim_meta = ObjectMeta { name: Some("data".to_owned()), ..Default::default() };
    claim_meta.labels = Some(plan.labels(DATABASE_COMPONENT));
    Some(StatefulSet {
        metadata: meta(owner, plan, name.clone(), DATABASE_COMPONENT),
        spec: Some(StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(name),
            selector: LabelSelector { match_labels: Some(plan.selector(DATABASE_COMPONENT)), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(plan.labels(DATABASE_COMPONENT)), ..Default::default() }),
                spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
            },
            volume_claim_templates: Some(vec![PersistentVolumeClaim {
                metadata: claim_meta,
                spec: Some(crate::claims::spec(Quantity(plan.database.storage.clone()))),
                status: None,
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The MySQL database's Backup `<name>-db-backup` (when the plan takes backups) into
/// the claim `<name>-db-backups`, which has no owner: the dumps outlive the stack.
/// (A PostgreSQL database's Backup is its PostgreSQL's own.)
pub fn desired_mysql_backup<K: Resource<DynamicType = ()>>(
    owner: &K,
    plan: &Plan,
) -> Option<(Backup, PersistentVolumeClaim)> {
    if plan.database.type_ != DatabaseType::Mysql || !plan.database.backup.enabled {
        return None;
    }
    let claim_name = format!("{}-backups", plan.database_name());
    let spec = BackupSpec {
        source: Source {
            type_: SourceType::Mysql,
            connection: Connection {
                host: plan.database_name(),
                port: Some(MYSQL_PORT),
                database: DATABASE.to_owned(),
                secret_ref: SecretRef { name: plan.credentials_name() },
            },
        },
        destination: Destination {
            type_: DestinationType::Pvc,
            bucket: claim_name.clone(),
            prefix: None,
            endpoint: None,
            region: None,
            secret_ref: None,
            encryption: None,
        },
        schedule: plan.database.backup.schedule.clone().unwrap_or_else(|| BACKUP_SCHEDULE.to_owned()),
        retention: plan.database.backup.retention.clone(),
        method: None,
        keep_last: None,
        keep_daily: None,
        keep_weekly: None,
        keep_monthly: None,
        suspend: None,
        active_deadline_seconds: None,
        verify: None,
    };
    let name = format!("{}-backup", plan.database_name());
    let mut backup = Backup::new(&name, spec);
    backup.metadata = meta(owner, plan, name, DATABASE_COMPONENT);
    let mut claim_meta = meta(owner, plan, claim_name, DATABASE_COMPONENT);
    claim_meta.owner_references = None;
    let claim = PersistentVolumeClaim {
        metadata: claim_meta,
        spec: Some(crate::claims::spec(Quantity(plan.database.storage.clone()))),
        status: None,
    };
    Some((backup, claim))
}

/// The MySQL Service `<name>-db`.
pub fn desired_mysql_service<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan) -> Option<Service> {
    (plan.database.type_ == DatabaseType::Mysql)
        .then(|| service(owner, plan, plan.database_name(), DATABASE_COMPONENT, MYSQL_PORT))
}

fn deployment<K: Resource<DynamicType = ()>>(
    owner: &K,
    plan: &Plan,
    component: &str,
    replicas: i32,
    container: Container,
) -> Deployment {
    Deployment {
        metadata: meta(owner, plan, plan.tier_name(component), component),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(plan.selector(component)), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(plan.labels(component)), ..Default::default() }),
                spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The Redis cache: Deployment `<name>-cache` and its Service (when enabled).
pub fn desired_cache<K: Resource<DynamicType = ()>>(
    owner: &K,
    plan: &Plan,
    images: &Images,
) -> Option<(Deployment, Service)> {
    if !plan.cache {
        return None;
    }
    let probe = Probe {
        tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(REDIS_PORT), host: None }),
        period_seconds: Some(5),
        ..Default::default()
    };
    let container = Container {
        name: "redis".to_owned(),
        image: Some(images.redis.clone()),
        ports: Some(vec![port("redis", REDIS_PORT)]),
        readiness_probe: Some(probe),
        ..Default::default()
    };
    let mut deployment = deployment(owner, plan, CACHE_COMPONENT, 1, container);
    deployment.metadata.name = Some(plan.cache_name());
    Some((deployment, service(owner, plan, plan.cache_name(), CACHE_COMPONENT, REDIS_PORT)))
}

/// The backend's environment: where the database and the cache are, the credentials
/// by reference to the Secret (never a literal), and libpq's or MySQL's own variables
/// so a stock client connects as it is.
pub fn backend_env(plan: &Plan) -> Vec<EnvVar> {
    let secret = plan.credentials_name();
    let host = plan.database_name();
    let port = plan.database_port().to_string();
    let mut vars = vec![
        env("DATABASE_TYPE", plan.database.type_.as_str()),
        env("DATABASE_HOST", host.clone()),
        env("DATABASE_PORT", port.clone()),
        secret_env("DATABASE_NAME", &secret, "database"),
        secret_env("DATABASE_USER", &secret, "username"),
        secret_env("DATABASE_PASSWORD", &secret, "password"),
    ];
    vars.extend(match plan.database.type_ {
        DatabaseType::Postgresql => vec![
            env("PGHOST", host),
            env("PGPORT", port),
            secret_env("PGDATABASE", &secret, "database"),
            secret_env("PGUSER", &secret, "username"),
            secret_env("PGPASSWORD", &secret, "password"),
        ],
        DatabaseType::Mysql => vec![env("MYSQL_HOST", host), env("MYSQL_TCP_PORT", port)],
    });
    if plan.cache {
        vars.push(env("CACHE_HOST", plan.cache_name()));
        vars.push(env("CACHE_PORT", REDIS_PORT.to_string()));
        vars.push(env("REDIS_URL", format!("redis://{}:{REDIS_PORT}", plan.cache_name())));
    }
    vars
}

/// The backend or the frontend: a Deployment and a Service `<name>-<component>`.
pub fn desired_tier<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan, component: &str) -> (Deployment, Service) {
    let (tier, env_vars) = if component == BACKEND_COMPONENT {
        (&plan.backend, backend_env(plan))
    } else {
        let backend = plan.tier_name(BACKEND_COMPONENT);
        (&plan.frontend, vec![env("BACKEND_URL", format!("http://{backend}:{}", plan.backend.port))])
    };
    let container = Container {
        name: component.to_owned(),
        image: Some(tier.image.clone()),
        ports: Some(vec![port("http", tier.port)]),
        env: Some(env_vars),
        ..Default::default()
    };
    (
        deployment(owner, plan, component, tier.replicas, container),
        service(owner, plan, plan.tier_name(component), component, tier.port),
    )
}

/// The Ingress `<name>` to the frontend's Service (EcommercePlatform).
pub fn desired_ingress<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan) -> Option<Ingress> {
    let settings = plan.ingress.as_ref()?;
    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: plan.tier_name(FRONTEND_COMPONENT),
            port: Some(ServiceBackendPort { number: Some(plan.frontend.port), name: None }),
        }),
        resource: None,
    };
    Some(Ingress {
        metadata: meta(owner, plan, plan.name.clone(), FRONTEND_COMPONENT),
        spec: Some(IngressSpec {
            ingress_class_name: settings.class_name.clone(),
            rules: Some(vec![IngressRule {
                host: settings.host.clone(),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_owned()),
                        path_type: "Prefix".to_owned(),
                        backend,
                    }],
                }),
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The ServiceMonitor `<name>` (monitoring.coreos.com/v1) scraping `/metrics` on the
/// backend's and the frontend's Services.
pub fn desired_service_monitor<K: Resource<DynamicType = ()>>(owner: &K, plan: &Plan) -> Option<ServiceMonitor> {
    if !plan.monitoring {
        return None;
    }
    let scraped = |component: &str| Endpoint { port: Some(component.to_owned()), path: Some("/metrics".to_owned()) };
    Some(ServiceMonitor {
        metadata: meta(owner, plan, plan.name.clone(), "monitoring"),
        spec: ServiceMonitorSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(plan.owner_label.0.to_owned(), plan.owner_label.1.clone())])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: COMPONENT_LABEL.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![BACKEND_COMPONENT.to_owned(), FRONTEND_COMPONENT.to_owned()]),
                }]),
            },
            endpoints: vec![scraped(BACKEND_COMPONENT), scraped(FRONTEND_COMPONENT)],
        },
    })
}

/// Whether a Deployment has `want` replicas updated and available, and no others left
/// (a rollout whose new pods cannot start keeps the old ones: not done), as kstatus
/// judges one (the cache keeps no spec: the count comes from the plan).
pub fn deployment_ready(d: &SlimDeployment, want: i32) -> Result<(), String> {
    let Some(status) = d.status.as_ref() else { return Err("starting".to_owned()) };
    let current = status.observed_generation >= d.metadata.generation;
    let available = status.available_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let all = status.replicas.unwrap_or(0);
    if !current || available < want {
        Err(format!("{available}/{want} replicas available"))
    } else if updated < want || all > want {
        Err(format!("rolling out: {updated}/{want} replicas updated, {} old ones left", (all - updated).max(0)))
    } else {
        Ok(())
    }
}

/// Whether a StatefulSet has `want` instances ready.
pub fn statefulset_ready(s: &StatefulSet, want: i32) -> Result<(), String> {
    let ready = s.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    if ready >= want { Ok(()) } else { Err(format!("{ready}/{want} instances ready")) }
}

/// Whether a PostgreSQL is Ready, and if not its Ready condition's message.
pub fn postgresql_ready(db: &PostgreSQL) -> Result<(), String> {
    let status = db.status.as_ref().filter(|s| s.observed_generation == db.metadata.generation);
    let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(format!("PostgreSQL {}: {}", db.name_any(), c.message)),
        None => Err(format!("PostgreSQL {} has not reported yet", db.name_any())),
    }
}

/// A stack's components and the Ready condition's (reason, message) while its deletion
/// is at `progress` of `steps` (in [`DELETION_ORDER`]). The components are listed in
/// dependency order, as ever: those the status listed before (`previous`) and any that
/// still has something left. Before the step under way each is `deleted`; the one under
/// way says since when, what is left of it and what holds that; after it each waits,
/// keeping the readiness it had.
pub fn deletion_status(
    steps: &[Step],
    progress: &Progress,
    previous: &[ComponentStatus],
) -> (Vec<ComponentStatus>, &'static str, String) {
    let current = steps.get(progress.step).map_or("", |s| s.name);
    let left = progress.left(steps);
    let release_at = progress.release_at;
    let components = steps
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, step)| {
            let before = previous.iter().find(|c| c.name == step.name);
            if before.is_none() && step.left.is_empty() {
                return None;
            }
            let (ready, message) = match i.cmp(&progress.step) {
                std::cmp::Ordering::Less => (false, "deleted".to_owned()),
                std::cmp::Ordering::Equal => (false, format!("being deleted since {}: {left}", progress.since)),
                std::cmp::Ordering::Greater => {
                    (before.is_some_and(|c| c.ready), format!("waits for {current} to be deleted"))
                }
            };
            Some(ComponentStatus { name: step.name.to_owned(), ready, message: Some(message) })
        })
        .collect();
    let (reason, message) = if progress.stuck {
        (
            reasons::DELETION_STUCK,
            format!(
                "the {current} is stuck: being deleted since {}: {left}; at {release_at} bosun stops waiting, \
                 removes its finalizer and leaves the rest to the garbage collector",
                progress.since
            ),
        )
    } else {
        (
            reasons::DELETING,
            format!(
                "deleting in reverse dependency order: the {current} since {}: {left}; bosun stops waiting at \
                 {release_at}",
                progress.since
            ),
        )
    };
    (components, reason, message)
}

/// The database type the stack's existing children hold, when it differs from the
/// spec's: changing it is refused (the data is in the old one).
pub fn type_change(plan: &Plan, has_postgresql: bool, has_mysql: bool) -> Option<String> {
    let (running, wanted) = match plan.database.type_ {
        DatabaseType::Postgresql if has_mysql => ("mysql", "postgresql"),
        DatabaseType::Mysql if has_postgresql => ("postgresql", "mysql"),
        _ => return None,
    };
    Some(format!(
        "spec.database.type is {wanted} but this stack's data is in {running} database {}: changing the type \
         would start an empty database, so it is refused; set spec.database.type back to {running} (to move, \
         back the data up, delete the stack's database and restore into the new one)",
        plan.database_name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform_of(yaml: &str) -> EcommercePlatform {
        let mut p: EcommercePlatform = serde_yaml_ng::from_str(yaml).expect("EcommercePlatform");
        p.metadata.uid = Some("u1".to_owned());
        p
    }

    /// The spec's example (the sample, which leaves its namespace out).
    fn production_store() -> EcommercePlatform {
        let path = format!(
            "{}/../../config/samples/platform.example.com_v1_ecommerceplatform.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        platform_of(&std::fs::read_to_string(path).expect("the sample"))
    }

    fn minimal(environment: &str, database: &str) -> EcommercePlatform {
        platform_of(&format!(
            "apiVersion: platform.example.com/v1\nkind: EcommercePlatform\nmetadata: {{name: shop, namespace: ns}}\n\
             spec:\n  environment: {environment}\n  frontend: {{image: web}}\n  backend: {{image: api}}\n  \
             database: {{type: {database}}}\n"
        ))
    }

    #[test]
    fn the_environment_fills_in_what_the_spec_leaves_out() {
        let effective = |env: &str| {
            let e = platform(&minimal(env, "postgresql")).effective();
            (e.database_replicas, e.database_storage, e.backup.enabled, e.backup.schedule, e.backup.retention)
        };
        let on = (Some(BACKUP_SCHEDULE.to_owned()), Some(BACKUP_RETENTION.to_owned()));
        assert_eq!(effective("development"), (1, "10Gi".to_owned(), false, None, None));
        assert_eq!(effective("staging"), (2, "50Gi".to_owned(), true, on.0.clone(), on.1.clone()));
        assert_eq!(effective("production"), (3, "100Gi".to_owned(), true, on.0, on.1));
        let e = platform(&minimal("development", "mysql")).effective();
        assert_eq!((e.database_version.as_str(), e.cache, e.monitoring), ("8.4", true, true));
        assert_eq!((e.backend_replicas, e.frontend_replicas), (1, 1));
        let e = platform(&minimal("production", "mysql")).effective();
        assert_eq!(e.database_replicas, 1, "MySQL runs one instance, whatever the environment");
    }

    #[test]
    fn the_production_store_gets_its_given_values_and_the_production_defaults() {
        let p = production_store();
        let plan = platform(&p);
        let pg = desired_postgresql(&p, &plan).expect("a PostgreSQL");
        assert_eq!(pg.name_any(), "production-store-db");
        assert_eq!((pg.spec.version.as_str(), pg.spec.storage.as_str(), pg.spec.replicas), ("14", "500Gi", 3));
        let backup = pg.spec.backup.clone().expect("backups");
        assert_eq!((backup.schedule.as_deref(), backup.retention.as_deref()), (Some("0 2 * * *"), Some("30d")));
        assert_eq!(pg.labels().get(PLATFORM_LABEL).map(String::as_str), Some("production-store"));
        assert_eq!(pg.owner_references()[0].kind, "EcommercePlatform");
        let (backend, _) = desired_tier(&p, &plan, BACKEND_COMPONENT);
        let (frontend, service) = desired_tier(&p, &plan, FRONTEND_COMPONENT);
        assert_eq!(backend.spec.as_ref().and_then(|s| s.replicas), Some(3));
        assert_eq!(frontend.spec.as_ref().and_then(|s| s.replicas), Some(5));
        assert_eq!(service.name_any(), "production-store-frontend");
        assert!(desired_mysql_statefulset(&p, &plan, &Images::default()).is_none());
        assert!(desired_cache(&p, &plan, &Images::default()).is_some());
        let ingress = desired_ingress(&p, &plan).expect("an Ingress");
        let rule = &ingress.spec.unwrap().rules.unwrap()[0];
        let to = rule.http.as_ref().unwrap().paths[0].backend.service.as_ref().unwrap();
        assert_eq!((to.name.as_str(), to.port.as_ref().unwrap().number), ("production-store-frontend", Some(80)));
        let monitor = serde_json::to_value(desired_service_monitor(&p, &plan)).unwrap();
        assert_eq!(monitor["spec"]["selector"]["matchLabels"][PLATFORM_LABEL], "production-store");
        assert_eq!(monitor["spec"]["endpoints"][1], serde_json::json!({"port": "frontend", "path": "/metrics"}));
        assert_eq!(
            (monitor["apiVersion"].as_str(), monitor["kind"].as_str()),
            (Some("monitoring.coreos.com/v1"), Some("ServiceMonitor"))
        );
    }

    #[test]
    fn the_backend_gets_addresses_as_values_and_credentials_only_by_reference() {
        for database in ["postgresql", "mysql"] {
            let p = minimal("staging", database);
            let plan = platform(&p);
            let (backend, _) = desired_tier(&p, &plan, BACKEND_COMPONENT);
            let env = backend.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
            let value = |name: &str| env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
            let port = if database == "mysql" { "3306" } else { "5432" };
            assert_eq!(value("DATABASE_HOST").as_deref(), Some("shop-db"));
            assert_eq!(value("DATABASE_PORT").as_deref(), Some(port));
            assert_eq!(value("CACHE_HOST").as_deref(), Some("shop-cache"));
            for e in &env {
                if e.name.contains("PASSWORD") || e.name.contains("USER") {
                    assert_eq!(e.value, None, "{} is a literal", e.name);
                    let secret = e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).expect("by reference");
                    assert_eq!(secret.name, "shop-db-credentials");
                }
            }
            let (frontend, _) = desired_tier(&p, &plan, FRONTEND_COMPONENT);
            let env = frontend.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
            assert_eq!(env[0].value.as_deref(), Some("http://shop-backend:8080"));
        }
    }

    #[test]
    fn mysql_is_a_statefulset_of_the_official_image_with_a_kept_secret_and_a_ping_probe() {
        let p = minimal("development", "mysql");
        let plan = platform(&p);
        assert!(desired_postgresql(&p, &plan).is_none());
        let sts = desired_mysql_statefulset(&p, &plan, &Images::default()).expect("a StatefulSet");
        let spec = sts.spec.unwrap();
        let container = &spec.template.spec.unwrap().containers[0];
        assert_eq!(container.image.as_deref(), Some("mysql:8.4"));
        let probe = container.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap().command.clone().unwrap();
        assert!(probe[2].starts_with("mysqladmin ping"), "{probe:?}");
        let claim = &spec.volume_claim_templates.unwrap()[0];
        assert_eq!(crate::claims::requested(claim).map(|q| q.0.as_str()), Some("10Gi"));
        assert!(desired_mysql_backup(&p, &plan).is_none(), "development takes no backups");
        let staging = minimal("staging", "mysql");
        let (backup, claim) = desired_mysql_backup(&staging, &platform(&staging)).expect("backups in staging");
        assert_eq!((backup.name_any(), backup.spec.source.type_.as_str()), ("shop-db-backup".to_owned(), "mysql"));
        assert_eq!((backup.spec.schedule.as_str(), backup.spec.retention.as_deref()), ("0 2 * * *", Some("30d")));
        assert_eq!(backup.spec.destination.bucket, claim.name_any());
        assert!(claim.metadata.owner_references.is_none(), "the dumps must outlive the platform");
        let secret = desired_mysql_secret(&p, &plan, "pw", "root");
        assert!(secret.metadata.owner_references.is_none(), "the password must outlive the platform");
        assert_eq!(secret.labels().get(PLATFORM_LABEL).map(String::as_str), Some("shop"));
        assert_eq!(desired_mysql_service(&p, &plan).unwrap().name_any(), "shop-db");
    }

    #[test]
    fn an_app_stack_has_no_backups_no_monitoring_and_a_cache_only_when_asked() {
        let stack: AppStack = serde_yaml_ng::from_str(
            "apiVersion: app.example.com/v1\nkind: AppStack\nmetadata: {name: shop}\nspec:\n  \
             database: {type: postgresql, version: \"15\", storage: 1Gi}\n  cache: {enabled: true}\n  \
             backend: {image: \"ghcr.io/example/api:1.0\", replicas: 2, port: 8080}\n  \
             frontend: {image: \"ghcr.io/example/web:1.0\", replicas: 2, port: 80}\n",
        )
        .unwrap();
        let plan = app_stack(&stack);
        assert!(plan.cache && !plan.monitoring && plan.ingress.is_none() && !plan.database.backup.enabled);
        assert_eq!(plan.owner_label, (STACK_LABEL, "shop".to_owned()));
        let pg = desired_postgresql(&stack, &plan).unwrap();
        assert_eq!((pg.spec.version.as_str(), pg.spec.replicas, pg.spec.backup), ("15", 1, None));
        let mut without = stack.clone();
        without.spec.cache = None;
        assert!(desired_cache(&without, &app_stack(&without), &Images::default()).is_none());
        assert_eq!(
            plan.endpoints().get(CACHE_COMPONENT).map(String::as_str),
            Some("shop-cache:6379"),
            "{:?}",
            plan.endpoints()
        );
    }

    #[test]
    fn a_deployment_is_ready_once_its_rollout_is_done() {
        let d = |generation: i64, observed: i64, (all, updated, available): (i32, i32, i32)| SlimDeployment {
            metadata: ObjectMeta { generation: Some(generation), ..Default::default() },
            status: Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                observed_generation: Some(observed),
                replicas: Some(all),
                updated_replicas: Some(updated),
                available_replicas: Some(available),
                ..Default::default()
            }),
        };
        assert_eq!(deployment_ready(&d(2, 2, (2, 2, 2)), 2), Ok(()));
        assert_eq!(deployment_ready(&d(2, 2, (2, 2, 1)), 2), Err("1/2 replicas available".to_owned()));
        assert_eq!(deployment_ready(&d(2, 1, (2, 2, 2)), 2), Err("2/2 replicas available".to_owned()), "not seen yet");
        // A new pod that cannot start: the old one still serves, the rollout is not done.
        assert_eq!(
            deployment_ready(&d(2, 2, (2, 1, 1)), 1),
            Err("rolling out: 1/1 replicas updated, 1 old ones left".to_owned())
        );
        assert!(deployment_ready(&d(2, 2, (1, 0, 1)), 1).is_err());
    }

    #[test]
    fn while_a_stack_is_deleted_each_component_says_where_it_stands() {
        use crate::teardown::{self, Bound, Left, Next, Owner};
        let at = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
        let left = |kind: &str, name: &str, since: Option<i64>, finalizers: &[&str]| {
            let finalizers: Vec<String> = finalizers.iter().map(|f| (*f).to_owned()).collect();
            Left::new(kind, name, since.map(at), &finalizers)
        };
        let steps = |frontend: Vec<Left>| {
            DELETION_ORDER
                .iter()
                .map(|name| teardown::Step {
                    name,
                    left: match *name {
                        FRONTEND_COMPONENT => frontend.clone(),
                        BACKEND_COMPONENT => vec![left("Deployment", "shop-backend", None, &[])],
                        DATABASE_COMPONENT => vec![left("PostgreSQL", "shop-db", None, &[])],
                        _ => vec![],
                    },
                })
                .collect::<Vec<_>>()
        };
        let previous: Vec<ComponentStatus> = ["database", "backend", "frontend"]
            .iter()
            .map(|n| ComponentStatus { name: (*n).to_owned(), ready: true, message: None })
            .collect();
        let owner = Owner { namespace_terminating: false, finalizers: &[] };
        let held =
            steps(vec![left("Deployment", "shop-frontend", Some(0), &["foregroundDeletion", "example.com/hold"])]);
        let Next::Wait(progress) = teardown::next(&held, owner, at(5), Bound::default()) else { panic!("waits") };
        let (components, reason, message) = deletion_status(&held, &progress, &previous);
        let shown: Vec<(&str, bool, &str)> =
            components.iter().map(|c| (c.name.as_str(), c.ready, c.message.as_deref().unwrap_or_default())).collect();
        assert_eq!(
            shown,
            [
                ("database", true, "waits for frontend to be deleted"),
                ("backend", true, "waits for frontend to be deleted"),
                (
                    "frontend",
                    false,
                    "being deleted since 2027-01-15T08:00:00Z: Deployment shop-frontend (held by finalizer example.com/hold)"
                ),
            ],
            "no cache: it never was, and nothing of it is left"
        );
        assert_eq!(reason, "Deleting");
        assert!(
            message.contains("the frontend since 2027-01-15T08:00:00Z") && message.contains("08:05:00Z"),
            "{message}"
        );

        let Next::Wait(stuck) = teardown::next(&held, owner, at(30), Bound::default()) else { panic!("waits") };
        let (_, reason, message) = deletion_status(&held, &stuck, &previous);
        assert_eq!(reason, "DeletionStuck");
        assert!(message.starts_with("the frontend is stuck: being deleted since 2027-01-15T08:00:00Z"), "{message}");
        assert!(message.contains("example.com/hold") && message.contains("at 2027-01-15T08:05:00Z"), "{message}");

        // The frontend is gone; the backend is under way.
        let next = steps(vec![]);
        let Next::Wait(progress) = teardown::next(&next, owner, at(40), Bound::default()) else { panic!("waits") };
        let (components, _, _) = deletion_status(&next, &progress, &previous);
        let frontend = components.iter().find(|c| c.name == "frontend").unwrap();
        assert_eq!((frontend.ready, frontend.message.as_deref()), (false, Some("deleted")));
        let database = components.iter().find(|c| c.name == "database").unwrap();
        assert_eq!(database.message.as_deref(), Some("waits for backend to be deleted"));
    }

    #[test]
    fn a_database_type_change_is_refused_naming_the_field() {
        let plan = platform(&minimal("production", "mysql"));
        let message = type_change(&plan, true, false).expect("refused");
        assert!(message.starts_with("spec.database.type is mysql but"), "{message}");
        assert_eq!(type_change(&plan, false, true), None);
        assert_eq!(type_change(&plan, false, false), None);
    }
}
