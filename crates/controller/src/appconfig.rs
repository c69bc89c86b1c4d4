//! The AppConfig controller.
//!
//! Pipeline: render (pure) → apply the ConfigMap → its consumers, from the index →
//! plan (pure: roll now, wait, or nothing) → roll the stale consumers → compute status
//! → write it only if it changed.
//!
//! ```text
//!  watch(Deployment|StatefulSet|DaemonSet, all of the namespace) ─▶ Consumers index
//!       (per workload that reads a ConfigMap or carries a hash annotation: which, and those)
//!       ─ a workload starts/stops reading a ConfigMap, or its annotation moves ─▶ the AppConfig
//!  watch(ConfigMap, managed-by=bosun) ─ changed or deleted ─▶ every AppConfig rendering into it
//! ```
//!
//! The index keeps only what the decision reads, never whole workloads, and is kept
//! up to date by the watches, so a reconcile lists nothing. A rollout is one
//! server-side apply of one pod-template annotation, under a field manager per
//! ConfigMap and with the workload's uid as precondition: kubectl, Helm and GitOps
//! tools keep owning every other field, and a workload replaced in the meantime is
//! not touched.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bosun_api::appconfig::AppConfig;
use bosun_resources::appconfig::{self as build, Consumer, Observed, Plan, Refusal};
use futures::StreamExt;
use futures::channel::mpsc;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tracing::debug;

use crate::apply::{apply_child, apply_fields};
use crate::children::Owned;
use crate::context::{Context, api};
use crate::error::Error;
use crate::guard::Guarded;
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "appconfig";

/// What this controller does with the API: AppConfigs, their ConfigMaps, and the
/// workloads that may consume them — watched, and patched (one annotation) to roll.
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("config.example.com", "appconfigs");
    const WORKLOADS: &[&str] = &["list", "patch", "watch"];
    [
        a,
        b,
        c,
        Permission::new("", "configmaps", permissions::OWN),
        Permission::new("apps", "deployments", WORKLOADS),
        Permission::new("apps", "statefulsets", WORKLOADS),
        Permission::new("apps", "daemonsets", WORKLOADS),
    ]
};

/// A workload as the index keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    uid: String,
    created: Option<Timestamp>,
    /// The ConfigMaps its pod template reads.
    reads: BTreeSet<String>,
    /// Its pod template's `config.example.com/*` annotations.
    hashes: BTreeMap<String, String>,
}

/// (kind, namespace, name).
type Key = (&'static str, String, String);

/// Which workloads read which ConfigMaps, kept by the workload watches.
#[derive(Debug, Default)]
struct Consumers {
    entries: Mutex<HashMap<Key, Entry>>,
    /// Watches whose initial list is in.
    listed: AtomicUsize,
}

/// The workload kinds that consume ConfigMaps.
const KINDS: usize = 3;

impl Consumers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ready(&self) -> bool {
        self.listed.load(Ordering::SeqCst) >= KINDS
    }

    /// The consumers of `namespace/config_map`, sorted.
    fn of(&self, namespace: &str, config_map: &str) -> Vec<Consumer> {
        let key = build::annotation_key(config_map);
        let mut found: Vec<Consumer> = self
            .lock()
            .iter()
            .filter(|((_, ns, _), e)| ns == namespace && e.reads.contains(config_map))
            .map(|((kind, _, name), e)| Consumer {
                kind,
                name: name.clone(),
                uid: e.uid.clone(),
                created: e.created,
                hash: e.hashes.get(&key).cloned(),
            })
            .collect();
        found.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        found
    }

    /// Record `entry` (`None`: gone) for `key`; the ConfigMaps whose consumers changed.
    fn update(&self, key: Key, entry: Option<Entry>) -> BTreeSet<String> {
        let mut entries = self.lock();
        let old = match &entry {
            Some(e) => entries.insert(key, e.clone()),
            None => entries.remove(&key),
        };
        if old == entry {
            return BTreeSet::new();
        }
        let reads = |e: &Option<Entry>| e.as_ref().map(|e| e.reads.clone()).unwrap_or_default();
        let (before, after) = (reads(&old), reads(&entry));
        let hashes_moved = old.as_ref().map(|e| &e.hashes) != entry.as_ref().map(|e| &e.hashes);
        // Reading a ConfigMap or not, and its annotation, matter; a replaced workload too.
        before
            .symmetric_difference(&after)
            .cloned()
            .chain(if hashes_moved || old.as_ref().map(|e| &e.uid) != entry.as_ref().map(|e| &e.uid) {
                before.union(&after).cloned().collect::<Vec<_>>()
            } else {
                vec![]
            })
            .collect()
    }
}

/// A workload kind whose pod template may read ConfigMaps.
trait Workload: wiring::Reconciled {
    const KIND: &'static str;
    fn template(&self) -> Option<&PodTemplateSpec>;
}

impl Workload for Deployment {
    const KIND: &'static str = "Deployment";
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl Workload for StatefulSet {
    const KIND: &'static str = "StatefulSet";
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

impl Workload for DaemonSet {
    const KIND: &'static str = "DaemonSet";
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
}

/// What the index keeps of `w`: nothing when its pod template reads no ConfigMap and
/// carries no hash annotation, as most workloads of a cluster (a WebApp's Deployment):
/// such a workload can start no rollout, and the index holding only consumers keeps it
/// from growing with every workload of the cluster.
fn entry_of<W: Workload>(w: &W) -> Option<Entry> {
    let template = w.template();
    let hashes: BTreeMap<String, String> = template
        .and_then(|t| t.metadata.as_ref()?.annotations.as_ref())
        .map(|a| a.iter().filter(|(k, _)| k.starts_with("config.example.com/")).map(|(k, v)| (k.clone(), v.clone())))
        .into_iter()
        .flatten()
        .collect();
    let reads: BTreeSet<String> = template.and_then(|t| t.spec.as_ref()).map(build::references).unwrap_or_default();
    (!reads.is_empty() || !hashes.is_empty()).then(|| Entry {
        uid: w.meta().uid.clone().unwrap_or_default(),
        created: w.meta().creation_timestamp.as_ref().map(|t| t.0),
        reads,
        hashes,
    })
}

/// Watch every `W` of `namespace` into `index`; send `(namespace, config map)` for
/// each ConfigMap whose consumers changed.
fn watch_workloads<W: Workload>(
    ctx: &Context,
    namespace: Option<&str>,
    index: Arc<Consumers>,
    changed: mpsc::UnboundedSender<(String, String)>,
) {
    let watch = wiring::watched(ctx, watcher(api::<W>(&ctx.client, namespace), wiring::list_config()));
    tokio::spawn(async move {
        tokio::pin!(watch);
        // Objects of a re-list, to drop the ones that went away meanwhile.
        let mut relisted: Option<BTreeSet<Key>> = None;
        let mut first_list = true;
        while let Some(event) = watch.next().await {
            let Ok(event) = event else { continue };
            let mut touched = Vec::new();
            match event {
                watcher::Event::Init => relisted = Some(BTreeSet::new()),
                watcher::Event::InitApply(w) | watcher::Event::Apply(w) => {
                    let key = (W::KIND, w.namespace().unwrap_or_default(), w.name_any());
                    if let Some(seen) = relisted.as_mut() {
                        seen.insert(key.clone());
                    }
                    touched.extend(index.update(key.clone(), entry_of(&w)).into_iter().map(|cm| (key.1.clone(), cm)));
                }
                watcher::Event::Delete(w) => {
                    let key = (W::KIND, w.namespace().unwrap_or_default(), w.name_any());
                    touched.extend(index.update(key.clone(), None).into_iter().map(|cm| (key.1.clone(), cm)));
                }
                watcher::Event::InitDone => {
                    let seen = relisted.take().unwrap_or_default();
                    let gone: Vec<Key> =
                        index.lock().keys().filter(|k| k.0 == W::KIND && !seen.contains(*k)).cloned().collect();
                    for key in gone {
                        touched.extend(index.update(key.clone(), None).into_iter().map(|cm| (key.1.clone(), cm)));
                    }
                    if first_list {
                        first_list = false;
                        index.listed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            for change in touched {
                if changed.unbounded_send(change).is_err() {
                    return;
                }
            }
        }
    });
}

/// The AppConfigs of `namespace` that render into `config_map`.
fn rendering_into(
    store: &Store<Guarded<AppConfig>>,
    namespace: &str,
    config_map: &str,
) -> Vec<ObjectRef<Guarded<AppConfig>>> {
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|a| {
            a.namespace().as_deref() == Some(namespace) && build::config_map_name(&a.spec.application) == config_map
        })
        .map(|a| ObjectRef::new(&a.name_any()).within(namespace))
        .collect()
}

/// The appconfig controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::of::<AppConfig>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the AppConfig controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let (config_maps, mut cm_changes) =
        wiring::watch_children::<ConfigMap>(&ctx, ns, &[(&AppConfig::kind(&()), &AppConfig::api_version(&()))]);
    let Some(cm_changes) = cm_changes.pop() else { return };
    let ctrl = wiring::controller_for::<AppConfig>(CONTROLLER, &ctx, ns);
    let store = ctrl.store();
    // A ConfigMap's change or deletion concerns every AppConfig rendering into it: a
    // refused second one takes over when the first one's ConfigMap goes.
    let by_name = store.clone();
    let ctrl = wiring::triggered_by::<AppConfig, ConfigMap>(ctrl, cm_changes, move |cm| {
        rendering_into(&by_name, &cm.namespace().unwrap_or_default(), &cm.name_any())
            .into_iter()
            .map(|r| r.name)
            .collect()
    });
    let index = Arc::new(Consumers::default());
    let (tx, rx) = mpsc::unbounded();
    watch_workloads::<Deployment>(&ctx, ns, index.clone(), tx.clone());
    watch_workloads::<StatefulSet>(&ctx, ns, index.clone(), tx.clone());
    watch_workloads::<DaemonSet>(&ctx, ns, index.clone(), tx);
    let triggers =
        rx.flat_map(move |(ns, cm): (String, String)| futures::stream::iter(rendering_into(&store, &ns, &cm)));
    let ctrl = ctrl.reconcile_on(triggers);
    wiring::drive(CONTROLLER, ctrl, concurrency, ctx, shutdown, move |app, ctx| {
        reconcile(app, ctx, config_maps.clone(), index.clone())
    })
    .await;
}

/// How long a reconcile waits for the workload watches' first lists.
const INDEX_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

async fn reconcile(
    app: Arc<AppConfig>,
    ctx: Arc<Context>,
    config_maps: Owned<ConfigMap>,
    index: Arc<Consumers>,
) -> Result<Outcome, Error> {
    if !index.ready() {
        return Ok(Outcome::Requeue(INDEX_WAIT));
    }
    let app = app.as_ref();
    let ns = app.namespace().unwrap_or_default();
    let previous = app.status.clone().unwrap_or_default();
    let now = ctx.now();
    let published = match build::render(app) {
        Err(refusal) => Err(refusal),
        Ok(data) => {
            let hash = build::hash(&data);
            match apply_child(&ctx, app, &config_maps, build::desired_config_map(app, data)).await {
                Ok(_) => Ok(hash),
                Err(Error::NameConflict(message)) => Err(Refusal::Conflict(message)),
                Err(err) if err.is_invalid_spec() => Err(Refusal::InvalidSpec(err.user_message())),
                Err(err) => return Err(err),
            }
        }
    };
    let (hash, refusal) = match published {
        Ok(hash) => (Some(hash), None),
        Err(refusal) => (None, Some(refusal)),
    };
    let cm = build::config_map_name(&app.spec.application);
    let consumers = index.of(&ns, &cm);
    let plan = hash.as_deref().map(|hash| {
        let changed = build::changed_time(&previous, hash, now);
        build::plan(&previous, &consumers, hash, changed.as_ref(), ctx.settings.rollout_pace, now)
    });
    debug!(?plan, hash = ?hash, pending_since = ?previous.rollout_pending_since, last_rollout = ?previous.last_rollout_time, stored_hash = ?previous.config_hash, "rollout plan");
    if let (Some(Plan::Roll(stale)), Some(hash)) = (&plan, &hash) {
        // A few at a time: the rollout of many consumers is not held up by one slow write.
        let mut rolled = Vec::new();
        for chunk in stale.chunks(ROLLOUT_PARALLELISM) {
            let mut writes = Vec::with_capacity(chunk.len());
            for consumer in chunk {
                writes.push(roll(&ctx, app, &cm, consumer, hash));
            }
            for result in futures::future::join_all(writes).await {
                rolled.extend(result?);
            }
        }
        ctx.events.rolled_out(&app.object_ref(&()), &rolled);
    }
    let observed =
        Observed { hash: hash.as_deref(), refusal: refusal.as_ref(), plan: plan.as_ref(), consumers: consumers.len() };
    let status = build::status(app, observed, now);
    let announce = update_status(&ctx, CONTROLLER, app, &status).await?;
    Ok(match (refusal, plan) {
        (Some(r), _) => Outcome::of(Some((r.reason(), r.message())), announce),
        (None, Some(Plan::Wait(after))) => Outcome::Requeue(after),
        (None, _) => Outcome::Applied,
    })
}

/// Consumers rolled at once.
const ROLLOUT_PARALLELISM: usize = 8;

/// Set `consumer`'s hash annotation for `cm` to `hash`: one field, under the
/// ConfigMap's own field manager, only on the workload with the uid the index saw.
async fn roll(
    ctx: &Context,
    app: &AppConfig,
    cm: &str,
    consumer: &Consumer,
    hash: &str,
) -> Result<Option<String>, Error> {
    let ns = app.namespace().unwrap_or_default();
    let fields = serde_json::json!({
        "spec": {"template": {"metadata": {"annotations": {build::annotation_key(cm): hash}}}},
    });
    let manager = build::rollout_manager(cm);
    let target = (ns.as_str(), consumer.name.as_str(), consumer.uid.as_str());
    let rolled = match consumer.kind {
        "Deployment" => apply_fields::<Deployment>(ctx, &manager, target, fields).await?,
        "StatefulSet" => apply_fields::<StatefulSet>(ctx, &manager, target, fields).await?,
        _ => apply_fields::<DaemonSet>(ctx, &manager, target, fields).await?,
    };
    if !rolled {
        // Deleted or replaced since the index saw it: nothing to roll.
        debug!(kind = consumer.kind, name = %consumer.name, "consumer gone before its rollout");
    }
    Ok(rolled.then(|| consumer.id()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mock;

    fn app(config: serde_json::Value) -> Arc<AppConfig> {
        let a = json!({
            "apiVersion": "config.example.com/v1", "kind": "AppConfig",
            "metadata": {"name": "myapp", "namespace": "shop", "uid": "uid-app", "generation": 1},
            "spec": {"application": "myapp", "environment": "prod", "config": config},
        });
        Arc::new(serde_json::from_value(a).unwrap())
    }

    fn listed() -> Arc<Consumers> {
        let index = Consumers::default();
        index.listed.store(KINDS, Ordering::SeqCst);
        Arc::new(index)
    }

    fn deployment(name: &str, uid: &str, env_from: Option<&str>) -> Deployment {
        let env_from = env_from.map(|cm| json!([{"configMapRef": {"name": cm}}])).unwrap_or(json!([]));
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "shop", "uid": uid},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx", "envFrom": env_from}]},
            }},
        }))
        .unwrap()
    }

    #[test]
    fn the_index_keeps_only_workloads_that_read_a_config_map() {
        let index = Consumers::default();
        let key = |name: &str| ("Deployment", "shop".to_string(), name.to_string());
        // A workload that reads no ConfigMap is not kept, and touches nothing.
        let plain = deployment("web", "uid-web", None);
        assert_eq!(entry_of(&plain), None);
        assert!(index.update(key("web"), entry_of(&plain)).is_empty());
        assert!(index.lock().is_empty());
        // One that reads `myapp-config` is, and is its consumer.
        let reader = deployment("api", "uid-api", Some("myapp-config"));
        let touched = index.update(key("api"), entry_of(&reader));
        assert_eq!(touched, BTreeSet::from(["myapp-config".to_string()]));
        assert_eq!(index.of("shop", "myapp-config").iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["api"]);
        // It stops reading it: gone from the index, and the ConfigMap's AppConfig is told.
        let stopped = deployment("api", "uid-api", None);
        let touched = index.update(key("api"), entry_of(&stopped));
        assert_eq!(touched, BTreeSet::from(["myapp-config".to_string()]));
        assert!(index.lock().is_empty());
        assert!(index.of("shop", "myapp-config").is_empty());
    }

    #[tokio::test]
    async fn nothing_is_written_before_every_consumer_watch_listed() {
        let a = app(json!({"HOST": "db.{{ environment }}"}));
        let (ctx, calls) = mock::context(mock::answer(a.as_ref()));
        let outcome = reconcile(a, ctx, mock::cache([]), Arc::new(Consumers::default())).await.unwrap();
        assert_eq!(outcome, Outcome::Requeue(INDEX_WAIT));
        assert_eq!(calls.writes(), Vec::<String>::new(), "a rollout decided on half an index could miss consumers");
    }

    #[tokio::test]
    async fn a_template_error_publishes_nothing_and_names_the_key() {
        let a = app(json!({"HOST": "db.{{ environment }}", "BAD": "{{ nosuchvar }}"}));
        let (ctx, calls) = mock::context(mock::answer(a.as_ref()));
        let outcome = reconcile(a, ctx, mock::cache([]), listed()).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason: "TemplateError", message, .. } if message.contains("spec.config.BAD")),
            "{outcome:?}"
        );
        assert_eq!(calls.writes(), ["PATCH /apis/config.example.com/v1/namespaces/shop/appconfigs/myapp/status"]);
    }

    #[tokio::test]
    async fn a_good_config_is_published_as_its_config_map() {
        let a = app(json!({"HOST": "db.{{ environment }}.internal"}));
        let (ctx, calls) = mock::context(mock::answer(a.as_ref()));
        reconcile(a, ctx, mock::cache([]), listed()).await.unwrap();
        let published = calls.body("/configmaps/myapp-config").expect("the ConfigMap applied");
        assert_eq!(published["data"]["HOST"], "db.prod.internal");
    }
}
