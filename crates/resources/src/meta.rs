//! Metadata every child carries: name, namespace, standard labels, controller owner.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

/// The value of `app.kubernetes.io/managed-by` on everything bosun creates.
pub const MANAGED_BY: &str = "bosun";

/// `app.kubernetes.io/{name,instance,managed-by}` for a child of `owner`.
///
/// `name` is the kind of application (e.g. `webapp`), `instance` the owner's name.
pub fn standard_labels(app_name: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), app_name.to_owned()),
        ("app.kubernetes.io/instance".to_owned(), instance.to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// Metadata for a child named `name` in the owner's namespace, with a controller
/// ownerReference so deleting the owner garbage-collects the child.
///
/// The ownerReference needs the owner's uid; an owner that was never stored (as in
/// `bosun render`) yields a child without one. A child carries its owner's shard
/// bucket ([`crate::shard::BUCKET_LABEL`]), so the replica that reconciles the owner
/// also watches the child.
pub fn child_meta<K>(owner: &K, name: String, mut labels: BTreeMap<String, String>) -> ObjectMeta
where
    K: Resource<DynamicType = ()>,
{
    if let Some(bucket) = owner.labels().get(crate::shard::BUCKET_LABEL) {
        labels.insert(crate::shard::BUCKET_LABEL.to_owned(), bucket.clone());
    }
    ObjectMeta {
        name: Some(name),
        namespace: owner.namespace(),
        labels: Some(labels),
        owner_references: controller_ref(owner).map(|r| vec![r]),
        ..ObjectMeta::default()
    }
}

/// The controller ownerReference to `owner` that every child carries, blocking: an
/// owner deleted in the foreground (`kubectl delete --cascade=foreground`, an
/// AppStack's ordered deletion) is gone only once the child is, as controller-runtime's
/// SetControllerReference does; without it the owner goes at once and its pods outlive
/// it. `None` for an owner that was never stored (no uid).
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    owner.controller_owner_ref(&()).map(|r| OwnerReference { block_owner_deletion: Some(true), ..r })
}

/// What a database server (a PostgreSQL instance, a verification's throwaway server)
/// requests of a node.
pub const SERVER_CPU: &str = "100m";
pub const SERVER_MEMORY: &str = "256Mi";

/// What `{version}` in an image template (`--postgres-image`, `--mysql-image`) stands for.
pub const VERSION_PLACEHOLDER: &str = "{version}";

/// The image of `version` from a template such as `postgres:{version}`.
pub fn versioned_image(template: &str, version: &str) -> String {
    template.replace(VERSION_PLACEHOLDER, version)
}

/// Resource requests of `cpu` and `memory` and no limits (a database server's: it
/// may use what the node has).
pub fn requests(cpu: &str, memory: &str) -> k8s_openapi::api::core::v1::ResourceRequirements {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    k8s_openapi::api::core::v1::ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn a_child_blocks_its_owners_foreground_deletion() {
        let owner = ConfigMap {
            metadata: ObjectMeta {
                name: Some("owner".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        let meta = child_meta(&owner, "child".into(), BTreeMap::new());
        let refs = meta.owner_references.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (refs[0].uid.as_str(), refs[0].controller, refs[0].block_owner_deletion),
            ("uid-1", Some(true), Some(true))
        );
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
    }
}
