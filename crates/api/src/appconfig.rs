//! AppConfig (`config.example.com/v1`): templated configuration rendered into a
//! ConfigMap, and the workloads that consume it rolled when — and only when — the
//! rendered data changes.
//!
//! ```yaml
//! apiVersion: config.example.com/v1
//! kind: AppConfig
//! metadata: {name: myapp}
//! spec:
//!   application: myapp
//!   environment: staging
//!   config: {DB_HOST: "db.{{ environment }}.internal", APP_ID: "{{ application }}-{{ namespace }}"}
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The environments a configuration is rendered for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Dev,
    Staging,
    Prod,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Dev => "dev",
            Environment::Staging => "staging",
            Environment::Prod => "prod",
        }
    }
}

/// Configuration of one application in one environment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "config.example.com",
    version = "v1",
    kind = "AppConfig",
    plural = "appconfigs",
    namespaced,
    status = "AppConfigStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Application","type":"string","jsonPath":".spec.application"}"#,
    printcolumn = r#"{"name":"Environment","type":"string","jsonPath":".spec.environment"}"#,
    printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".status.configMapName"}"#,
    printcolumn = r#"{"name":"Hash","type":"string","jsonPath":".status.configHash"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name may have at most 63 characters: the app.kubernetes.io/instance label of the ConfigMap holds the name, and a label value has at most 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct AppConfigSpec {
    /// The application, a DNS label of at most 51 characters: the ConfigMap is
    /// `<application>-config`, and consumers get the pod-template annotation
    /// `config.example.com/<application>-config-hash` (a name part of at most 63).
    #[schemars(length(min = 1, max = 51), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub application: String,
    /// `dev`, `staging` or `prod`.
    pub environment: Environment,
    /// The ConfigMap's data. Each value is a template (minijinja) with the variables
    /// `application`, `environment`, `namespace` and `name`; an unknown variable is an error.
    #[serde(default)]
    #[x_kube(validation = kube::core::Rule::new("self.all(k, k.matches('^[-._a-zA-Z0-9]+$') && size(k) <= 253)")
        .message("spec.config keys must be valid ConfigMap keys: letters, digits, '-', '_' and '.', at most 253 characters"))]
    pub config: BTreeMap<String, String>,
}

/// Observed state: what was rendered and which workloads were rolled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The ConfigMap the configuration is rendered into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// sha256 of the rendered data, as the consumers' annotation carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// When the rendered data last changed (its first rendering does not count: nothing
    /// consumed an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_changed_time: Option<Time>,
    /// Since when consumers wait for a rollout (changes within the settle time roll once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_pending_since: Option<Time>,
    /// The workloads last restarted, as `Kind/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_out: Vec<String>,
    /// When they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rollout_time: Option<Time>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for AppConfigStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
