//! WebApp: a container image served as a Deployment plus a Service.
//!
//! Served under two API groups with slightly different schemas:
//!
//! | group              | `replicas`              | `port` default |
//! |--------------------|-------------------------|----------------|
//! | `apps.example.com` | optional, ≥ 1, default 1 | 80             |
//! | `example.com`      | required, 1–10          | 8080           |
//!
//! Both share the status type and are reconciled by one controller through the
//! [`WebAppKind`] view.

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements, SecurityContext};
use kube::{KubeSchema, Resource};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// Where a WebApp is in its life, as shown by `kubectl get webapps`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Phase {
    /// The Deployment does not exist or has not been observed yet.
    Pending,
    /// The Deployment is rolling out.
    Deploying,
    /// Ready replicas equal the desired count.
    Running,
    /// The spec cannot be served or the rollout failed.
    Failed,
}

/// Observed state, computed from the Deployment bosun applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the current Deployment that are available.
    #[serde(default)]
    pub available_replicas: i32,
    /// Pods of the current Deployment that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The fields both groups share, borrowed from either spec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WebAppSettings<'a> {
    pub image: &'a str,
    pub replicas: i32,
    pub port: i32,
    pub env: Option<&'a [EnvVar]>,
    pub resources: Option<&'a ResourceRequirements>,
    pub security_context: Option<&'a SecurityContext>,
}

/// One controller serves both groups through this view.
pub trait WebAppKind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + kube::core::object::HasStatus<Status = WebAppStatus>
    + Clone
    + std::fmt::Debug
    + Serialize
    + for<'de> Deserialize<'de>
    + Send
    + Sync
    + 'static
{
    fn settings(&self) -> WebAppSettings<'_>;
    fn current_status(&self) -> Option<&WebAppStatus>;
}

/// A Service is created with the WebApp's name, so it must be a DNS-1035 label;
/// the CRD says so up front instead of failing later when the Service is applied.
macro_rules! webapp_kind {
    ($group:literal, $port_default:literal, $( #[$replicas_attr:meta] )* replicas: $replicas_ty:ty, $replicas_get:expr) => {
        use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements, SecurityContext};
        use kube::{CustomResource, KubeSchema};
        use serde::{Deserialize, Serialize};

        pub use super::{Phase, WebAppStatus};
        use super::{WebAppKind, WebAppSettings};

        #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
        #[kube(
            group = $group,
            version = "v1",
            kind = "WebApp",
            plural = "webapps",
            namespaced,
            status = "WebAppStatus",
            derive = "PartialEq",
            scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.readyReplicas"}"#,
            printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
            printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
            printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas"}"#,
            printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            validation = kube::core::Rule::new(
                "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63"
            ).message("metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters): the Service is named after the WebApp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct WebAppSpec {
            /// Container image to run, e.g. `nginx:1.25`.
            #[schemars(length(min = 1), regex(pattern = r"^\S+$"))]
            pub image: String,
            /// Number of pods.
            $( #[$replicas_attr] )*
            pub replicas: $replicas_ty,
            /// Container port, also the Service's port and targetPort.
            #[serde(default = $port_default)]
            #[schemars(range(min = 1, max = 65535))]
            pub port: i32,
            /// Environment variables for the container. A list-map keyed by `name`, so a
            /// duplicate name is refused at admission (the Deployment would refuse it later).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["name".into()]))]
            pub env: Option<Vec<EnvVar>>,
            /// Compute resources for the container.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub resources: Option<ResourceRequirements>,
            /// Container security context.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub security_context: Option<SecurityContext>,
        }

        impl WebAppKind for WebApp {
            fn settings(&self) -> WebAppSettings<'_> {
                let spec = &self.spec;
                WebAppSettings {
                    image: &spec.image,
                    replicas: $replicas_get(spec),
                    port: spec.port,
                    env: spec.env.as_deref(),
                    resources: spec.resources.as_ref(),
                    security_context: spec.security_context.as_ref(),
                }
            }

            fn current_status(&self) -> Option<&WebAppStatus> {
                self.status.as_ref()
            }
        }
    };
}

/// `apps.example.com/v1`: replicas optional (default 1, minimum 1), port default 80.
pub mod apps_v1 {
    webapp_kind!(
        "apps.example.com",
        "default_port",
        #[serde(default = "default_replicas")]
        #[schemars(range(min = 1))]
        replicas: i32,
        |spec: &WebAppSpec| spec.replicas
    );

    fn default_replicas() -> i32 {
        1
    }

    fn default_port() -> i32 {
        80
    }
}

/// `example.com/v1`: replicas required (1–10), port default 8080.
pub mod example_v1 {
    webapp_kind!(
        "example.com",
        "default_port",
        #[schemars(range(min = 1, max = 10))]
        replicas: i32,
        |spec: &WebAppSpec| spec.replicas
    );

    fn default_port() -> i32 {
        8080
    }
}

impl crate::conditions::Conditioned for WebAppStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}
