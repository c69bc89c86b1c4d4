//! Every kind bosun serves, declared once: each controller module exports its
//! [`Served`] (its controllers' names, the custom resource types they reconcile, the
//! permissions they use, how they start), and [`ALL`] lists those. Every other list
//! derives from it: `--controllers` and its error, the controllers `bosun run`
//! starts, the CRDs (`bosun crd`, `config/crd/`, the docs), the ClusterRole
//! (`config/rbac/`), and what `bosun render` renders.
//!
//! A new kind touches: its type (`bosun-api`), its builders and [`render::Rendered`]
//! (`bosun-resources`), its controller module with its `SERVED`, and one line of [`ALL`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bosun_resources::render::{self, RenderError, Rendered};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde_json::Value;

use crate::context::Context;
use crate::permissions::Permission;
use crate::{appconfig, backup, demovolume, postgresql, restore, stacks, voteconfig, webapp};

/// Every controller run bosun has, in the order `--controllers` lists them.
pub const ALL: &[Served] = &[
    webapp::SERVED,
    voteconfig::SERVED,
    demovolume::SERVED,
    appconfig::SERVED,
    backup::SERVED,
    restore::SERVED,
    postgresql::SERVED,
    stacks::SERVED,
];

/// One run of controllers: what it serves, what it may do, how it starts.
#[derive(Clone, Copy, Debug)]
pub struct Served {
    /// Its controllers' names: in `--controllers`, and the `controller` label of
    /// metrics and logs. Controllers of one run share watches and caches.
    pub controllers: &'static [&'static str],
    /// The custom resource types its controllers reconcile.
    pub types: &'static [Type],
    /// What it does with the API (the ClusterRole is their union).
    pub permissions: &'static [Permission],
    /// Start it; its controllers among [`Start::enabled`] run.
    pub start: fn(Start) -> Task,
}

/// A custom resource type bosun serves: its CRD, how `bosun render` renders it, and,
/// for a kind served in more than one version, how its objects convert.
#[derive(Clone, Copy, Debug)]
pub struct Type {
    pub crd: fn() -> CustomResourceDefinition,
    pub render: render::Renderer,
    /// Convert an object (JSON, any served version) to an `apiVersion`: what the
    /// conversion webhook answers for this kind. `None`: one version.
    pub convert: Option<Converter>,
}

/// See [`Type::convert`].
pub type Converter = fn(&Value, &str) -> Result<Value, String>;

impl Type {
    pub const fn of<K: CustomResourceExt + Rendered + JsonSchema>() -> Self {
        Self { crd: bosun_api::schema::crd::<K>, render: render::renderer::<K>, convert: None }
    }

    /// A type `bosun render` does not render (a Restore's Job comes from the Backup it
    /// names, in the cluster): it is "not served" there.
    pub const fn unrendered<K: CustomResourceExt + kube::Resource<DynamicType = ()> + JsonSchema>() -> Self {
        Self { crd: bosun_api::schema::crd::<K>, render: |_, _| None, convert: None }
    }
}

/// A kind whose objects the conversion webhook converts.
#[derive(Clone, Debug)]
pub struct Converted {
    /// Its CRD, as shipped.
    pub crd: CustomResourceDefinition,
    pub convert: Converter,
    /// The controllers of its run: a bosun serving none of them leaves its CRD alone.
    pub controllers: &'static [&'static str],
}

impl Converted {
    /// The CRD's name (`<plural>.<group>`).
    pub fn name(&self) -> String {
        self.crd.metadata.name.clone().unwrap_or_default()
    }
}

/// Every kind served in more than one version.
pub fn converted() -> Vec<Converted> {
    ALL.iter()
        .flat_map(|s| s.types.iter().map(move |t| (s, t)))
        .filter_map(|(s, t)| Some(Converted { crd: (t.crd)(), convert: t.convert?, controllers: s.controllers }))
        .collect()
}

/// A running controller: done when its shutdown came and its reconciles finished.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Resolves when the manager shuts down; every run holds a clone.
pub type Shutdown = Shared<BoxFuture<'static, ()>>;

/// What a run starts with.
pub struct Start {
    pub ctx: Arc<Context>,
    /// One per namespace watched; `None` is every namespace.
    pub targets: Vec<Option<String>>,
    /// Most reconciles running at once, per controller and namespace.
    pub concurrency: u16,
    pub shutdown: Shutdown,
    /// The controllers enabled (`--controllers`), of this run and others.
    pub enabled: Vec<&'static str>,
}

/// A controller run of one namespace (`None`: all of them).
pub type RunIn = fn(Arc<Context>, Option<String>, u16, Shutdown) -> Task;

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("targets", &self.targets)
            .field("concurrency", &self.concurrency)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Start {
    /// Start `run` in each namespace watched.
    pub fn in_each_namespace(self, run: RunIn) -> Task {
        let Start { ctx, targets, concurrency, shutdown, .. } = self;
        let runs: Vec<Task> =
            targets.into_iter().map(|ns| run(ctx.clone(), ns, concurrency, shutdown.clone())).collect();
        Box::pin(futures::future::join_all(runs).map(|_| ()))
    }

    /// Whether the controller `name` is enabled.
    pub fn enables(&self, name: &str) -> bool {
        self.enabled.contains(&name)
    }
}

/// Every controller name, in [`ALL`]'s order.
pub fn controllers() -> impl Iterator<Item = &'static str> {
    ALL.iter().flat_map(|s| s.controllers.iter().copied())
}

/// Every CRD bosun serves, in a stable order, with the schema tightening of
/// [`bosun_api::schema::crd`] applied.
pub fn crds() -> Vec<CustomResourceDefinition> {
    ALL.iter().flat_map(|s| s.types).map(|t| (t.crd)()).collect()
}

/// The CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    bosun_api::crds_yaml(&crds())
}

/// The files of `config/crd/` (see [`bosun_api::crd_files`]).
pub fn crd_files() -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    bosun_api::crd_files(&crds())
}

/// The permissions of every controller run.
pub fn permissions() -> Vec<Permission> {
    ALL.iter().flat_map(|s| s.permissions.iter().copied()).collect()
}

/// `bosun render`: the children of every document (see [`bosun_resources::render`]).
pub fn render(documents: &[Value]) -> Result<Vec<Value>, RenderError> {
    let renderers: Vec<render::Renderer> = ALL.iter().flat_map(|s| s.types).map(|t| t.render).collect();
    render::render(documents, &renderers)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn controller_names_are_unique_and_lowercase() {
        let names: Vec<_> = controllers().collect();
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len(), "{names:?}");
        assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase())), "{names:?}");
        assert_eq!(
            names,
            [
                "webapp",
                "voteconfig",
                "demovolume",
                "appconfig",
                "backup",
                "restore",
                "postgresql",
                "appstack",
                "ecommerceplatform"
            ]
        );
    }

    #[test]
    fn every_crd_is_served_once_and_its_status_written_by_its_run() {
        let mut seen = BTreeSet::new();
        for served in ALL {
            for t in served.types {
                let crd = (t.crd)();
                assert!(seen.insert(crd.metadata.name.clone()), "{:?} twice", crd.metadata.name);
                let (group, plural) = (crd.spec.group.as_str(), crd.spec.names.plural.as_str());
                let writes_status = served.permissions.iter().any(|p| {
                    p.group == group
                        && p.resource == plural
                        && p.subresource == Some("status")
                        && p.verbs.contains(&"patch")
                });
                assert!(writes_status, "{group}/{plural}: its controller may not write its status");
            }
        }
        assert_eq!(seen.len(), crds().len());
    }

    #[test]
    fn the_conversion_permissions_name_exactly_the_converted_crds() {
        let names: Vec<_> = converted().iter().map(Converted::name).collect();
        assert_eq!(names, crate::permissions::CONVERTED_CRDS);
        for c in converted() {
            assert!(bosun_api::conversion::by_webhook(&c.crd), "{} converts by webhook", c.name());
            let update = crate::permissions::CONVERSION.iter().any(|p| {
                p.group == c.crd.spec.group && p.resource == c.crd.spec.names.plural && p.verbs.contains(&"update")
            });
            assert!(update, "{}: its objects may be rewritten in the storage version", c.name());
        }
    }
}
