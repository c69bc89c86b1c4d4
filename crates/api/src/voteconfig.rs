//! VoteConfig: the options of a voting app, published as a ConfigMap the app consumes.
//!
//! ```yaml
//! apiVersion: voting.schoolofdevops.com/v1alpha1
//! kind: VoteConfig
//! metadata: {name: pets}
//! spec:
//!   title: Cats or dogs?
//!   options: [{id: a, label: Cats}, {id: b, label: Dogs}]
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The most options a VoteConfig may have: one per letter of `OPTION_A` … `OPTION_Z`.
pub const MAX_OPTIONS: usize = 26;

/// The options of a vote.
//
// The ConfigMap is named `<name>-config` and labelled `app.kubernetes.io/instance:
// <name>`; a label value has at most 63 characters, so the name rule says so up front
// (which also leaves room for the suffix within the 253 characters of an object name).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "voting.schoolofdevops.com",
    version = "v1alpha1",
    kind = "VoteConfig",
    plural = "voteconfigs",
    namespaced,
    status = "VoteConfigStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Title","type":"string","jsonPath":".spec.title"}"#,
    printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".status.configMapName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Updated","type":"date","jsonPath":".status.lastUpdated"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name may have at most 63 characters: the app.kubernetes.io/instance label of the ConfigMap holds the name, and a label value has at most 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct VoteConfigSpec {
    /// The question shown above the options; published as `TITLE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The choices, in the order the app shows them: the 1st is published as
    /// `OPTION_A`, the 2nd as `OPTION_B`, and so on.
    #[schemars(length(min = 2, max = 26))]
    #[x_kube(validation = kube::core::Rule::new("self.all(o, self.exists_one(p, p.id == o.id))")
        .message("option ids in spec.options must be unique"))]
    pub options: Vec<VoteOption>,
}

/// One choice of a vote.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct VoteOption {
    /// Stable identifier of the option, a lowercase DNS label (e.g. `a`, `cats`).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub id: String,
    /// What voters see.
    #[schemars(length(min = 1))]
    pub label: String,
}

/// Observed state, computed from the ConfigMap bosun applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VoteConfigStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The ConfigMap holding the options (`<name>-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// When the ConfigMap's data last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for VoteConfigStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
