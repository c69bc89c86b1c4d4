//! DemoVolume: a PersistentVolumeClaim of a given size that may grow but never shrink.
//!
//! ```yaml
//! apiVersion: demo.example.com/v1
//! kind: DemoVolume
//! metadata: {name: data}
//! spec: {name: data, size: 1}
//! ```

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The largest `spec.size` accepted: 1 PiB. The spec sets no upper bound; this one is
/// far above any single volume a demo needs and well inside `i32`.
pub const MAX_SIZE_GIB: i32 = 1 << 20;

/// A volume of `size` GiB, served by a claim named after the DemoVolume.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "demo.example.com",
    version = "v1",
    kind = "DemoVolume",
    plural = "demovolumes",
    namespaced,
    status = "DemoVolumeStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Volume","type":"string","jsonPath":".spec.name","description":"the display name in spec.name"}"#,
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size","description":"requested size in GiB"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".status.capacity"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name may have at most 63 characters: the app.kubernetes.io/instance label of the PersistentVolumeClaim holds the name, and a label value has at most 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct DemoVolumeSpec {
    /// A display name for the volume, copied to `status.name`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Size in GiB, 1 to 1048576 (1 PiB). It may grow (the claim is expanded) but not shrink.
    #[schemars(range(min = 1, max = MAX_SIZE_GIB))]
    pub size: i32,
}

/// Observed state, computed from the claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DemoVolumeStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `spec.name`, as last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The capacity of the bound volume (the claim's `status.capacity.storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// The claim's phase: `Pending`, `Bound` or `Lost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for DemoVolumeStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
