//! The CRDs whose versions bosun converts: their conversion pointed at this bosun with
//! the CA bundle it serves, and their objects moved to the storage version.
//!
//! * The leader writes `spec.conversion.webhook.clientConfig` (the Service of its own
//!   namespace, or `--webhook-url`) and the bundle with a JSON merge patch, which also
//!   removes the other of `service` and `url` (server-side apply could not: another
//!   manager's `service` would stay beside bosun's `url`, and the apiserver refuses both).
//! * Once the CRD points at bosun and lists more stored versions than its storage
//!   version (objects written before an upgrade of bosun), the leader reads every
//!   object and writes it back unchanged — the apiserver stores it in the storage
//!   version, through the webhook — then trims `status.storedVersions`, as
//!   kube-storage-version-migrator does. A write that meets a newer version (409) needs
//!   none: whoever wrote it stored it in the storage version.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::info;

use bosun_api::conversion::{Target, client_config};

/// The storage version of `crd`.
fn storage(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.as_str())
}

/// The API of `crd`'s objects in its storage version, for dynamic clients.
pub fn storage_resource(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    let version = storage(crd)?;
    Some(ApiResource {
        group: crd.spec.group.clone(),
        version: version.to_owned(),
        api_version: format!("{}/{version}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    })
}

/// The client configuration `crd` holds, when it converts by webhook.
fn held(crd: &CustomResourceDefinition) -> Option<&WebhookClientConfig> {
    crd.spec
        .conversion
        .as_ref()
        .filter(|c| c.strategy == "Webhook")
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref())
}

/// The merge patch pointing `crd` at `target` with `bundle`, or `None` when it already
/// does. A CRD that does not convert by webhook (an older release's, of one version)
/// is left as it is.
pub fn patch(crd: &CustomResourceDefinition, target: &Target, bundle: &str) -> Option<Value> {
    let held = held(crd)?;
    let want = client_config(target, Some(bundle));
    if *held == want {
        return None;
    }
    Some(json!({"spec": {"conversion": {"webhook": {"clientConfig": {
        "service": want.service,
        "url": want.url,
        "caBundle": want.ca_bundle,
    }}}}}))
}

/// Whether `crd` still lists a stored version other than its storage version, while
/// pointing at `target` with `bundle` (so the rewrite's conversions reach bosun).
pub fn needs_migration(crd: &CustomResourceDefinition, target: &Target, bundle: &str) -> bool {
    let Some(storage) = storage(crd) else { return false };
    let stored = crd.status.as_ref().and_then(|s| s.stored_versions.as_ref());
    let other = stored.is_some_and(|v| v.iter().any(|s| s != storage));
    other && patch(crd, target, bundle).is_none()
}

/// Rewrite every object of `crd` in its storage version, then trim `storedVersions`.
/// Returns how many objects were written.
pub async fn migrate(client: &Client, crd: &CustomResourceDefinition, manager: &str) -> Result<usize, String> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let Some(resource) = storage_resource(crd) else { return Ok(0) };
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut written = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = all.list(&params).await.map_err(|e| format!("listing {name}: {e}"))?;
        for object in &page.items {
            let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
            let object_name = object.metadata.name.as_deref().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
            let post = PostParams { field_manager: Some(manager.to_owned()), ..PostParams::default() };
            let mut object = object.clone();
            object.types =
                Some(kube::api::TypeMeta { api_version: resource.api_version.clone(), kind: resource.kind.clone() });
            match api.replace(object_name, &post, &object).await {
                Ok(_) => written += 1,
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                Err(e) => return Err(format!("rewriting {} {namespace}/{object_name}: {e}", resource.kind)),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => break,
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let version = resource.version.as_str();
    let trimmed = json!({"status": {"storedVersions": [version]}});
    crds.patch_status(&name, &PatchParams::default(), &Patch::Merge(&trimmed))
        .await
        .map_err(|e| format!("trimming the stored versions of {name}: {e}"))?;
    info!(crd = %name, objects = written, storage = version, "objects rewritten in the storage version; stored versions trimmed");
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target::Url("https://127.0.0.1:9443".into())
    }

    #[test]
    fn the_crd_is_patched_until_it_points_at_bosun_with_its_bundle() {
        let mut crd = bosun_api::voteconfig::crd();
        let patch = patch(&crd, &target(), "PEM").expect("the shipped CRD points at the Service");
        let config = &patch["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(config["url"], "https://127.0.0.1:9443/convert");
        assert!(config["service"].is_null(), "the Service goes: {patch}");
        assert_eq!(config["caBundle"], "UEVN");
        let held = crd.spec.conversion.as_mut().unwrap().webhook.as_mut().unwrap();
        held.client_config = Some(client_config(&target(), Some("PEM")));
        assert_eq!(super::patch(&crd, &target(), "PEM"), None);
        assert!(super::patch(&crd, &target(), "OTHER").is_some(), "a new bundle is written");
        // Another namespace's Service.
        let service = Target::Service { namespace: "ops".into(), name: "bosun-webhook-service".into() };
        let patch = super::patch(&crd, &service, "PEM").unwrap();
        assert_eq!(patch["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"], "ops");
        assert!(patch["spec"]["conversion"]["webhook"]["clientConfig"]["url"].is_null());
        // An older release's CRD of one version is not bosun's to convert.
        crd.spec.conversion = None;
        assert_eq!(super::patch(&crd, &target(), "PEM"), None);
    }

    #[test]
    fn migration_waits_for_the_conversion_and_for_an_older_stored_version() {
        let mut crd = bosun_api::voteconfig::crd();
        crd.status = Some(serde_json::from_value(json!({"storedVersions": ["v1alpha1", "v1"]})).unwrap());
        assert!(!needs_migration(&crd, &target(), "PEM"), "not before the CRD points at bosun");
        let held = crd.spec.conversion.as_mut().unwrap().webhook.as_mut().unwrap();
        held.client_config = Some(client_config(&target(), Some("PEM")));
        assert!(needs_migration(&crd, &target(), "PEM"));
        crd.status = Some(serde_json::from_value(json!({"storedVersions": ["v1"]})).unwrap());
        assert!(!needs_migration(&crd, &target(), "PEM"));
    }
}
