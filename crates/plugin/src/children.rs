//! What an object made: every object in its namespace that bosun labels as its child
//! (`app.kubernetes.io/instance=NAME`, `app.kubernetes.io/managed-by=bosun`), of the
//! kinds bosun makes, and of bosun's own kinds the children's children (an AppStack's
//! WebApps and databases, and what they made).

use bosun_resources::meta::MANAGED_BY;
use futures::future::join_all;
use k8s_openapi::api::{apps, batch, core, networking, policy};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

use crate::Session;
use crate::kinds::{self, Kind};

/// The kinds of the objects bosun makes, besides its own.
fn made() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<apps::v1::Deployment>(&()),
        ApiResource::erase::<apps::v1::StatefulSet>(&()),
        ApiResource::erase::<core::v1::Service>(&()),
        ApiResource::erase::<core::v1::Pod>(&()),
        ApiResource::erase::<core::v1::ConfigMap>(&()),
        ApiResource::erase::<core::v1::Secret>(&()),
        ApiResource::erase::<core::v1::PersistentVolumeClaim>(&()),
        ApiResource::erase::<core::v1::ServiceAccount>(&()),
        ApiResource::erase::<batch::v1::CronJob>(&()),
        ApiResource::erase::<batch::v1::Job>(&()),
        ApiResource::erase::<networking::v1::Ingress>(&()),
        ApiResource::erase::<networking::v1::NetworkPolicy>(&()),
        ApiResource::erase::<policy::v1::PodDisruptionBudget>(&()),
    ]
}

/// One child.
#[derive(Clone, Debug)]
pub struct Child {
    pub resource: ApiResource,
    pub object: DynamicObject,
    /// The bosun object it belongs to (its `app.kubernetes.io/instance`).
    pub of: String,
}

impl Child {
    pub fn name(&self) -> String {
        self.object.metadata.name.clone().unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        &self.resource.kind
    }
}

/// What could not be read, said once per kind (a kind the user may not list).
pub type Unread = Vec<String>;

/// The children of `name` (and of the bosun objects among them, once more).
pub async fn of(session: &Session, name: &str) -> (Vec<Child>, Unread) {
    let mut resources = made();
    // bosun's kinds, from its CRDs: built once per listing.
    let bosun_kinds = kinds::all();
    let ours: Vec<String> = bosun_kinds.iter().map(|k| k.kind.clone()).collect();
    resources.extend(bosun_kinds.iter().map(Kind::resource));
    let mut children = Vec::new();
    let mut unread = Vec::new();
    let mut owners = vec![name.to_owned()];
    for _depth in 0..2 {
        let mut next = Vec::new();
        for owner in &owners {
            let selector = format!("app.kubernetes.io/instance={owner},app.kubernetes.io/managed-by={MANAGED_BY}");
            let lists = resources.iter().map(|resource| {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(session.client.clone(), &session.namespace, resource);
                let params = ListParams::default().labels(&selector);
                async move { (resource, api.list(&params).await) }
            });
            for (resource, listed) in join_all(lists).await {
                match listed {
                    Ok(list) => {
                        for object in list.items {
                            let child = Child { resource: resource.clone(), object, of: owner.clone() };
                            let is_bosun_kind = ours.contains(&resource.kind);
                            if is_bosun_kind && child.name() != *owner {
                                next.push(child.name());
                            }
                            if child.name() != *owner || !is_bosun_kind {
                                children.push(child);
                            }
                        }
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        let said = format!("{}: {}", resource.plural, crate::status::brief(&e));
                        if !unread.contains(&said) {
                            unread.push(said);
                        }
                    }
                }
            }
        }
        owners = next;
        if owners.is_empty() {
            break;
        }
    }
    children.sort_by(|a, b| (a.of.as_str(), a.kind(), a.name()).cmp(&(b.of.as_str(), b.kind(), b.name())));
    children.dedup_by(|a, b| a.kind() == b.kind() && a.name() == b.name());
    (children, unread)
}
