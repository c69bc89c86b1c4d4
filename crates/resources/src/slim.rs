//! What bosun's caches keep of the children there are most of: one Deployment and one
//! Service per WebApp.
//!
//! A cached `k8s_openapi` object costs its whole struct even when the spec is dropped
//! (a Deployment's empty spec is 1,968 of its 2,424 bytes, a Service's about 700): the
//! types here are the same kinds, read from the same API paths, with only the fields
//! bosun reads back — the metadata and what a status shows. The spec is never parsed,
//! and bosun applies the full kinds ([`k8s_openapi`]'s), whose stored form it reads
//! back through these.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A Deployment as cached: its metadata and its status (counters and conditions).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct SlimDeployment {
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeploymentStatus>,
}

/// A Service as cached: its metadata (nothing reads its spec or status back).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct SlimService {
    pub metadata: ObjectMeta,
}

impl From<Deployment> for SlimDeployment {
    fn from(d: Deployment) -> Self {
        Self { metadata: d.metadata, status: d.status }
    }
}

impl From<Service> for SlimService {
    fn from(s: Service) -> Self {
        Self { metadata: s.metadata }
    }
}

/// The slim type is the kind `$full` for the API: same group, version, kind and path.
macro_rules! same_kind {
    ($slim:ty, $full:ty) => {
        impl k8s_openapi::Resource for $slim {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $slim {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

same_kind!(SlimDeployment, Deployment);
same_kind!(SlimService, Service);

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_slim_kinds_are_the_api_kinds() {
        assert_eq!(SlimDeployment::url_path(&(), Some("shop")), Deployment::url_path(&(), Some("shop")));
        assert_eq!(SlimService::url_path(&(), Some("shop")), Service::url_path(&(), Some("shop")));
        assert_eq!(SlimDeployment::api_version(&()), "apps/v1");
        assert_eq!(SlimService::kind(&()), "Service");
    }

    #[test]
    fn a_stored_deployment_is_read_without_its_spec() {
        let stored = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            "status": {"readyReplicas": 2, "observedGeneration": 2},
        });
        let slim: SlimDeployment = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(slim.metadata.name.as_deref(), Some("web"));
        assert_eq!(slim.status.as_ref().and_then(|s| s.ready_replicas), Some(2));
        let full: Deployment = serde_json::from_value(stored).unwrap();
        assert_eq!(SlimDeployment::from(full), slim);
        assert!(std::mem::size_of::<SlimDeployment>() * 3 < std::mem::size_of::<Deployment>());
        assert!(std::mem::size_of::<SlimService>() * 2 < std::mem::size_of::<Service>());
    }
}
