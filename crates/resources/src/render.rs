//! `bosun render`: the children a custom resource would produce, without a cluster.
//!
//! Documents are matched on `apiVersion` and `kind` against the types bosun serves
//! (each a [`Rendered`]; the list is bosun-controller's registry of kinds) and run
//! through the same builders the controllers use, so what is printed is what would be
//! applied (minus the ownerReference, which needs the uid the apiserver assigns).

use bosun_api::appconfig::AppConfig;
use bosun_api::backup::Backup;
use bosun_api::demovolume::DemoVolume;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::stack::{AppStack, EcommercePlatform};
use bosun_api::voteconfig::VoteConfig;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{appconfig, backup, demovolume, postgresql, stacks, voteconfig, webapp};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("document {index}: {kind} in {api_version} is not served by bosun")]
    Unsupported { index: usize, api_version: String, kind: String },
    #[error("document {index} ({kind} {name:?}): {message}")]
    Invalid { index: usize, kind: String, name: String, message: String },
}

/// A custom resource `bosun render` renders: its children, or why it has none.
pub trait Rendered: DeserializeOwned + kube::Resource<DynamicType = ()> {
    fn children(self) -> Result<Vec<Value>, String>;
}

/// Render `doc` (document `index`) if it is a `K`: `None` when it is not.
pub type Renderer = fn(usize, &Value) -> Option<Result<Vec<Value>, RenderError>>;

/// The [`Renderer`] of `K`.
pub fn renderer<K: Rendered>(index: usize, doc: &Value) -> Option<Result<Vec<Value>, RenderError>> {
    let field = |f: &str| doc.get(f).and_then(Value::as_str).unwrap_or_default();
    if field("apiVersion") != K::api_version(&()) || field("kind") != K::kind(&()) {
        return None;
    }
    let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let invalid =
        |message: String| RenderError::Invalid { index, kind: K::kind(&()).into_owned(), name: name.clone(), message };
    if name.is_empty() {
        return Some(Err(invalid("metadata.name is required".into())));
    }
    Some(
        serde_json::from_value::<K>(doc.clone())
            .map_err(|e| invalid(e.to_string()))
            .and_then(|k| k.children().map_err(invalid)),
    )
}

/// Render every document (in order) with the first of `renderers` that takes it;
/// empty documents are skipped.
pub fn render(documents: &[Value], renderers: &[Renderer]) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for (index, doc) in documents.iter().enumerate().filter(|(_, d)| !d.is_null()) {
        match renderers.iter().find_map(|r| r(index, doc)) {
            Some(children) => out.extend(children?),
            None => {
                let field = |f: &str| doc.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
                return Err(RenderError::Unsupported { index, api_version: field("apiVersion"), kind: field("kind") });
            }
        }
    }
    Ok(out)
}

/// The objects, as JSON, leaving out the absent ones.
fn values<T: Serialize>(objects: impl IntoIterator<Item = Option<T>>) -> Vec<Value> {
    objects.into_iter().flatten().filter_map(|o| serde_json::to_value(o).ok()).collect()
}

fn webapp_children<K: WebAppKind>(w: &K) -> Vec<Value> {
    [serde_json::to_value(webapp::desired_deployment(w)), serde_json::to_value(webapp::desired_service(w))]
        .into_iter()
        .flatten()
        .collect()
}

impl Rendered for apps_v1::WebApp {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(webapp_children(&self))
    }
}

impl Rendered for example_v1::WebApp {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(webapp_children(&self))
    }
}

impl Rendered for VoteConfig {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(values([Some(voteconfig::desired_config_map(&self))]))
    }
}

/// The deprecated version renders as what the conversion webhook makes of it.
impl Rendered for bosun_api::voteconfig::v1alpha1::VoteConfig {
    fn children(self) -> Result<Vec<Value>, String> {
        let old = serde_json::to_value(&self).map_err(|e| e.to_string())?;
        let new = bosun_api::voteconfig::convert(&old, bosun_api::voteconfig::V1)?;
        serde_json::from_value::<VoteConfig>(new).map_err(|e| e.to_string())?.children()
    }
}

impl Rendered for DemoVolume {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(values([Some(demovolume::desired_claim(&self))]))
    }
}

impl Rendered for AppConfig {
    /// The namespace variable renders as the document's, else `default`.
    fn children(mut self) -> Result<Vec<Value>, String> {
        let namespace = self.metadata.namespace.clone();
        self.metadata.namespace.get_or_insert_with(|| "default".to_owned());
        let data = appconfig::render(&self).map_err(|r| r.message())?;
        let mut config_map = appconfig::desired_config_map(&self, data);
        config_map.metadata.namespace = namespace;
        Ok(values([Some(config_map)]))
    }
}

impl Rendered for Backup {
    fn children(self) -> Result<Vec<Value>, String> {
        backup::validate(&self).map_err(|r| r.message())?;
        Ok(values([Some(backup::desired_cronjob(&self, backup::DEFAULT_RUNNER_IMAGE))]))
    }
}

impl Rendered for PostgreSQL {
    /// No Secret: its passwords are generated in the cluster, once.
    fn children(self) -> Result<Vec<Value>, String> {
        let settings = postgresql::Settings::default();
        let mut out = values([Some(postgresql::desired_statefulset(
            &self,
            &settings,
            None,
            "",
            crate::upgrade::Running::of(&self, None),
        ))]);
        out.extend(values(postgresql::desired_services(&self).into_iter().map(Some)));
        out.extend(values([postgresql::desired_backup(&self)]));
        // The pooler's sides (`spec.pooler`): its Deployment and Service each. No Secret:
        // its role's password is generated in the cluster, once.
        for read_only in postgresql::pooler_sides(&self) {
            out.extend(values([postgresql::desired_pooler_deployment(&self, &settings, read_only)]));
            out.extend(values([Some(postgresql::desired_pooler_service(&self, read_only))]));
        }
        Ok(out)
    }
}

impl Rendered for AppStack {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(stack_children(&self, &stacks::app_stack(&self)))
    }
}

impl Rendered for EcommercePlatform {
    fn children(self) -> Result<Vec<Value>, String> {
        Ok(stack_children(&self, &stacks::platform(&self)))
    }
}

/// A stack's children, every component at once (in the cluster each waits for what it
/// depends on). No MySQL Secret: its passwords are generated in the cluster, once.
fn stack_children<K: kube::Resource<DynamicType = ()>>(owner: &K, plan: &stacks::Plan) -> Vec<Value> {
    let images = stacks::Images::default();
    let mut out = values([stacks::desired_postgresql(owner, plan)]);
    out.extend(values([stacks::desired_mysql_statefulset(owner, plan, &images)]));
    out.extend(values([stacks::desired_mysql_service(owner, plan)]));
    if let Some((deployment, service)) = stacks::desired_cache(owner, plan, &images) {
        out.extend(values([Some(deployment)]));
        out.extend(values([Some(service)]));
    }
    for component in [stacks::BACKEND_COMPONENT, stacks::FRONTEND_COMPONENT] {
        let (deployment, service) = stacks::desired_tier(owner, plan, component);
        out.extend(values([Some(deployment)]));
        out.extend(values([Some(service)]));
    }
    out.extend(values([stacks::desired_ingress(owner, plan)]));
    out.extend(values([stacks::desired_service_monitor(owner, plan)]));
    out
}
