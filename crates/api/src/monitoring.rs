//! The Prometheus operator's ServiceMonitor, as far as bosun writes it: an
//! EcommercePlatform's monitoring. bosun does not serve this kind (it is not among
//! [`crate::crds`]); it applies one when the CRD is installed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which Services Prometheus scrapes, and where. Fields bosun does not set are not
/// modelled; every field has a default, so a ServiceMonitor written by someone else
/// still decodes.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "monitoring.coreos.com",
    version = "v1",
    kind = "ServiceMonitor",
    plural = "servicemonitors",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// The Services scraped, by label.
    #[serde(default)]
    pub selector: LabelSelector,
    /// The ports of those Services scraped, and the path on each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
}

/// One scraped port of the selected Services.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The Service port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// The HTTP path of the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}
