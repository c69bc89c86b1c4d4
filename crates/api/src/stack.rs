//! Whole stacks of components started in dependency order: AppStack
//! (`app.example.com/v1`) and EcommercePlatform (`platform.example.com/v1`).
//!
//! ```yaml
//! apiVersion: app.example.com/v1
//! kind: AppStack
//! metadata: {name: shop}
//! spec:
//!   database: {type: postgresql, version: "15", storage: 1Gi}
//!   cache: {enabled: true}
//!   backend: {image: "ghcr.io/example/api:1.0", replicas: 2, port: 8080}
//!   frontend: {image: "ghcr.io/example/web:1.0", replicas: 2, port: 80}
//! ```
//!
//! Both kinds declare the same components — `database`, `cache`, `backend`,
//! `frontend` — on one engine: the cache and the backend start once the database is
//! Ready, the frontend once the backend is. A component that becomes un-Ready later
//! keeps its dependents running and shows in `status.components`.
//!
//! The schema refuses what a rule can tell: an unknown database type or a version that
//! type does not have, a storage size that is not whole GiB, fewer than one replica, a
//! port outside 1–65535, an unknown environment. Changing the database type of a running
//! stack is refused by the controller (the data is in the old one).
//!
//! Deleting a stack deletes its components in reverse order — frontend, backend, cache,
//! database — each gone before the next starts, under the finalizer
//! `app.example.com/ordered-deletion` (`platform.example.com/ordered-deletion`); a step
//! that does not end is given up after a bound, and a namespace being deleted is never
//! held up (see the controller, `bosun_controller::stacks`).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The database engine of a stack.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseType {
    /// A PostgreSQL resource `<name>-db` (bosun's own PostgreSQL controller runs it).
    Postgresql,
    /// A StatefulSet of the official `mysql` image with its Secret and Service.
    Mysql,
}

impl DatabaseType {
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseType::Postgresql => "postgresql",
            DatabaseType::Mysql => "mysql",
        }
    }

    /// The version used when `spec.database.version` is left out.
    pub fn default_version(self) -> &'static str {
        match self {
            DatabaseType::Postgresql => "16",
            DatabaseType::Mysql => "8.4",
        }
    }
}

/// The versions `spec.database.version` may name, per type.
pub const POSTGRESQL_VERSIONS: &[&str] = &["12", "13", "14", "15", "16", "17"];
pub const MYSQL_VERSIONS: &[&str] = &["8.0", "8.4"];

fn version_rule() -> kube::core::Rule {
    let list = |v: &[&str]| v.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", ");
    kube::core::Rule::new(format!(
        "!has(self.version) || (self.type == 'postgresql' ? self.version in [{}] : self.version in [{}])",
        list(POSTGRESQL_VERSIONS),
        list(MYSQL_VERSIONS)
    ))
    .message(kube::core::Message::Message(format!(
        "spec.database.version must be one of {} for postgresql, or {} for mysql",
        POSTGRESQL_VERSIONS.join(", "),
        MYSQL_VERSIONS.join(", ")
    )))
}

fn storage_rule() -> kube::core::Rule {
    kube::core::Rule::new("!self.matches('^0+Gi$') && size(self) <= 9")
        .message("spec.database.storage must be at least 1Gi and at most 9999999Gi, in whole Gi, e.g. 10Gi")
}

/// The database of a stack.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = version_rule())]
pub struct Database {
    /// `postgresql` or `mysql`. It cannot change once the database exists.
    #[serde(rename = "type")]
    pub type_: DatabaseType,
    /// The version: "12" to "17" for postgresql (default "16"), "8.0" or "8.4" for mysql
    /// (default "8.4").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The data volume's size in whole GiB, e.g. `10Gi`. It may grow, not shrink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+Gi$"))]
    #[x_kube(validation = storage_rule())]
    pub storage: Option<String>,
    /// Instances of a PostgreSQL database (a primary and streaming standbys), 1–5. MySQL
    /// runs one instance, whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5))]
    pub replicas: Option<i32>,
}

/// A cache (Redis) for the backend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Cache {
    /// Run a Redis cache the backend is pointed at.
    #[serde(default)]
    pub enabled: bool,
}

/// A stateless tier: the backend or the frontend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Tier {
    /// The container image.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Pods, at least 1 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: Option<i32>,
    /// The port the container listens on and its Service serves (default: 8080 for
    /// the backend, 80 for the frontend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// A stack of a database, an optional cache, a backend and a frontend, started in
/// dependency order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "app.example.com",
    version = "v1",
    kind = "AppStack",
    plural = "appstacks",
    namespaced,
    status = "StackStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Database","type":"string","jsonPath":".spec.database.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 34")
        .message("metadata.name may have at most 34 characters: it names <name>-frontend and the database's <name>-db-backup"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names the stack's Services, which are DNS labels"),
)]
#[serde(rename_all = "camelCase")]
pub struct AppStackSpec {
    pub database: Database,
    /// A Redis cache; off when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<Cache>,
    pub backend: Tier,
    pub frontend: Tier,
}

/// The environment an EcommercePlatform is for: it chooses the defaults.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    /// Database: 1 replica, 10Gi, no backups.
    Development,
    /// Database: 2 replicas, 50Gi, backups.
    Staging,
    /// Database: 3 replicas, 100Gi, backups.
    Production,
}

/// Monitoring of the platform.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Monitoring {
    /// A ServiceMonitor for the backend and frontend, when the Prometheus operator's
    /// CRD is installed (default true).
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    pub enabled: bool,
}

/// A cache that is on unless turned off (EcommercePlatform's default).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlatformCache {
    /// Run a Redis cache (default true).
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    pub enabled: bool,
}

/// The Ingress to the frontend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IngressSettings {
    /// The host the Ingress answers for; every host when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub host: Option<String>,
    /// The IngressClass; the cluster's default class when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class_name: Option<String>,
}

fn yes() -> bool {
    true
}

/// An online shop for one environment: the spec's values where given, the
/// environment's defaults elsewhere.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "platform.example.com",
    version = "v1",
    kind = "EcommercePlatform",
    plural = "ecommerceplatforms",
    namespaced,
    status = "StackStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Environment","type":"string","jsonPath":".spec.environment"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 34")
        .message("metadata.name may have at most 34 characters: it names <name>-frontend and the database's <name>-db-backup"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names the platform's Services, which are DNS labels"),
)]
#[serde(rename_all = "camelCase")]
pub struct EcommercePlatformSpec {
    /// `development`, `staging` or `production`.
    pub environment: Environment,
    pub frontend: Tier,
    pub backend: Tier,
    pub database: Database,
    /// A Redis cache (on unless `enabled: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<PlatformCache>,
    /// A ServiceMonitor (on unless `enabled: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<Monitoring>,
    /// The Ingress to the frontend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressSettings>,
}

/// `Deploying`, `Running`, `Failed` or `Deleting`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Phase {
    /// Components are starting, waiting for their dependencies, or not all ready.
    Deploying,
    /// Every component is ready.
    Running,
    /// The spec cannot be served (a refused change, a name held by someone else).
    Failed,
    /// The stack is being deleted, component by component in reverse dependency order
    /// (frontend, backend, cache, database), each gone before the next.
    Deleting,
}

/// One component of a stack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// `database`, `cache`, `backend` or `frontend`.
    pub name: String,
    pub ready: bool,
    /// What it waits for, or why it is not ready; while the stack is being deleted,
    /// whether it is deleted, since when it is being deleted and what is left of it, or
    /// what it waits for to be deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A stack's observed state (AppStack and EcommercePlatform).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Every component, in dependency order.
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["name".into()]))]
    pub components: Vec<ComponentStatus>,
    /// Where each component is reached inside the cluster (`host:port`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub endpoints: std::collections::BTreeMap<String, String>,
    /// EcommercePlatform: the values in effect, the spec's or the environment's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<Effective>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The backups in effect for a platform's database.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveBackup {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
}

/// The values in effect, given or defaulted for the environment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Effective {
    pub database_type: String,
    pub database_version: String,
    pub database_replicas: i32,
    pub database_storage: String,
    pub backup: EffectiveBackup,
    pub backend_replicas: i32,
    pub frontend_replicas: i32,
    pub cache: bool,
    pub monitoring: bool,
}

impl crate::conditions::Conditioned for StackStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
