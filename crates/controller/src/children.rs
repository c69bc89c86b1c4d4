//! Which objects a parent may write: the ownership rule every child apply goes through,
//! and the cache it is decided from.
//!
//! ```text
//!  cache (slimmed, managed-by=bosun)       ─▶ claim(existing, parent) ─┬─ Create       → apply, create only
//!                                                                      ├─ Ours { uid } → apply over that object only
//!                                                                      └─ Conflict     → refuse: NameConflict
//! ```
//!
//! A name held by an object this parent does not control is never written: not with
//! `force`, not partly. A parent controls an object whose controller ownerReference
//! carries its uid; it may adopt one that has no controller at all and was written by
//! its own field manager before (a child left behind by `kubectl delete
//! --cascade=orphan`, or one whose labels someone removed). Anything else — a
//! Deployment made with `kubectl create`, the child of a same-named parent of another
//! group, an object copied from bosun's output and applied by hand — is someone
//! else's.
//!
//! The decision is enforced by the apiserver, not only by the cache, through the
//! preconditions an apply can carry. [`Claim::Ours`] applies with the `metadata.uid` of
//! the object the decision was made on: a replacement made in the meantime is refused
//! (the uid is immutable), and so is a re-creation of one that was deleted.
//! [`Claim::Create`] applies with a `resourceVersion` no object has: the apiserver
//! ignores it when the apply creates the object and refuses the apply when anything
//! holds the name. So an object the cache has not seen yet — or never sees, because it
//! lacks bosun's label — is never modified: the apply fails, and the object is read
//! and judged as it is. (Creating with POST instead would leave bosun's fields owned
//! by an `Update` entry that later applies cannot remove.)

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PersistentVolumeClaim, Pod, PodSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::changes::Applied;
use crate::checkpoint::{Changes, Checkpointed, Entry};

use bosun_resources::meta::MANAGED_BY;
use bosun_resources::slim::{SlimDeployment, SlimService};

/// What a parent may do with the name of one of its children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Nothing holds the name: create the child, and only create it.
    Create,
    /// The object with this uid is the parent's (or adoptable): apply over it.
    Ours { uid: String },
    /// Someone else holds the name; the message names the object and its holder.
    Conflict(String),
}

/// The parent a claim is made for.
#[derive(Clone, Debug)]
pub struct Parent<'a> {
    pub kind: Cow<'a, str>,
    pub name: &'a str,
    pub uid: &'a str,
    /// The field manager this parent's controller writes with.
    pub manager: &'a str,
}

impl<'a> Parent<'a> {
    pub fn of<K: Resource<DynamicType = ()>>(owner: &'a K, manager: &'a str) -> Self {
        let meta = owner.meta();
        Parent {
            kind: K::kind(&()),
            name: meta.name.as_deref().unwrap_or_default(),
            uid: meta.uid.as_deref().unwrap_or_default(),
            manager,
        }
    }
}

/// Decide what `parent` may do with the child `kind`/`name` whose stored metadata is
/// `existing` (`None`: no such object).
pub fn claim(kind: &str, name: &str, existing: Option<&ObjectMeta>, parent: Parent<'_>) -> Claim {
    let Some(meta) = existing else {
        return Claim::Create;
    };
    let uid = meta.uid.clone().unwrap_or_default();
    let controller = meta.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    match controller {
        Some(owner) if owner.uid == parent.uid && !parent.uid.is_empty() => Claim::Ours { uid },
        Some(owner) => Claim::Conflict(format!(
            "{kind} {name} already exists and is controlled by {} {} (uid {}), not by this {}: \
             rename one of them or delete the {kind}",
            owner.kind, owner.name, owner.uid, parent.kind
        )),
        // An orphan is adopted only while it still says it is bosun's: removing the label
        // from an orphaned child is how a user keeps it for themselves.
        None if written_by(meta, parent.manager) && managed_by_bosun(meta) => Claim::Ours { uid },
        None => Claim::Conflict(format!(
            "{kind} {name} already exists and is not managed by bosun{}: it is left as it is; \
             delete or rename it, or give this {} another name",
            created_by(meta).map(|m| format!(" (written by {m})")).unwrap_or_default(),
            parent.kind
        )),
    }
}

/// Whether `child` has `owner` as its controller.
pub fn controlled_by<C: Resource, K: Resource>(child: &C, owner: &K) -> bool {
    let uid = owner.meta().uid.as_deref();
    child.meta().owner_references.iter().flatten().any(|r| r.controller == Some(true) && Some(r.uid.as_str()) == uid)
}

fn managed_by_bosun(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|v| v == MANAGED_BY)
}

/// Whether `manager` has applied fields of the object.
fn written_by(meta: &ObjectMeta, manager: &str) -> bool {
    meta.managed_fields.iter().flatten().any(|m| m.manager.as_deref() == Some(manager))
}

/// The managers that wrote the object, for the conflict message.
fn created_by(meta: &ObjectMeta) -> Option<String> {
    let managers: Vec<&str> = meta.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref()).collect();
    (!managers.is_empty()).then(|| managers.join(", "))
}

/// A kind bosun creates as a child: what its cache keeps of each object.
pub trait Child: crate::guard::Reconciled + serde::Serialize {
    /// The kind as bosun builds and applies it; the cache may keep a type of its own
    /// with fewer fields ([`bosun_resources::slim`]), read from the same API.
    type Desired: crate::guard::Reconciled + serde::Serialize;

    /// Drop what neither the ownership rule, change detection nor a status reads, so
    /// the cache stays small and a change to what was dropped triggers nothing.
    fn slim(&mut self);

    /// Whether bosun writes this kind with its owner's shard bucket
    /// ([`bosun_resources::meta::child_meta`]), so a sharded replica watches only its
    /// shard's; `false` for a kind another controller creates from a template.
    const BUCKETED: bool = true;
}

impl Child for SlimDeployment {
    type Desired = Deployment;

    /// A WebApp's status reads the Deployment's counters and its conditions' types,
    /// statuses and reasons; the spec is known from bosun's own record (and not even
    /// read: the slim type has none). The Deployment controller's revision annotation
    /// is never one bosun sets: without it, most Deployments cache no annotation map.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        drop_annotation(&mut self.metadata, "deployment.kubernetes.io/revision");
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            for c in conditions {
                (c.message, c.last_update_time, c.last_transition_time) = (None, None, None);
            }
        }
    }
}

impl Child for SlimService {
    type Desired = Service;

    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for ConfigMap {
    type Desired = Self;

    /// The data stays: a VoteConfig's status tells when it changed.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for PersistentVolumeClaim {
    type Desired = Self;

    /// Spec and status stay: a DemoVolume refuses a shrink and reports binding from them.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for CronJob {
    type Desired = Self;

    /// A Backup's status reads the CronJob's `lastScheduleTime`; the spec is known
    /// from bosun's own record.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        self.spec = None;
        if let Some(status) = self.status.as_mut() {
            // The running Jobs are watched on their own.
            status.active = None;
        }
    }
}

impl Child for Job {
    type Desired = Self;
    /// A CronJob's Jobs come from its template, without the bucket.
    const BUCKETED: bool = false;

    /// Backup and Restore statuses read a Job's start, finish and conditions; the pod
    /// template is never read back.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        self.spec = None;
        if let Some(status) = self.status.as_mut() {
            // Counters no status shows. `ready` stays: it drops when an attempt fails
            // (restartPolicy OnFailure restarts in place), which is when a Backup
            // reads the attempt's error.
            (status.terminating, status.uncounted_terminated_pods) = (None, None);
        }
    }
}

impl Child for StatefulSet {
    type Desired = Self;

    /// A PostgreSQL keeps its claim template's size (immutable once created) and
    /// reads the instance counters: only the managers' field sets go.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for Secret {
    type Desired = Self;

    /// Only PostgreSQL credentials are watched: their passwords' digest goes into the
    /// pod template, so the data stays.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for Pod {
    type Desired = Self;

    /// A PostgreSQL labels each instance's pod with its role, names one that cannot
    /// start and calls its instance's API: names, labels, what tells whether it starts,
    /// its address, its node (`status.instances`), its containers' ports (whether it
    /// serves the instance API, which a pod of the previous release does not), and the
    /// Secrets its volumes hold (whether the primary has the pooler's password) are read.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        self.spec = self.spec.take().map(|spec| PodSpec {
            node_name: spec.node_name,
            volumes: spec.volumes.map(|volumes| volumes.into_iter().map(bosun_resources::pods::slim_volume).collect()),
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container { name: c.name, ports: c.ports, ..Container::default() })
                .collect(),
            ..PodSpec::default()
        });
        bosun_resources::pods::slim_status(self);
    }
}

impl Child for bosun_api::postgresql::PostgreSQL {
    type Desired = Self;

    /// A stack's database: its status tells whether it is Ready.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

impl Child for k8s_openapi::api::networking::v1::Ingress {
    type Desired = Self;

    /// A platform's Ingress: nothing reads it back but its identity.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        (self.spec, self.status) = (None, None);
    }
}

impl Child for bosun_api::monitoring::ServiceMonitor {
    type Desired = Self;

    /// A platform's ServiceMonitor: its spec is known from bosun's own record.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
        self.spec = Default::default();
    }
}

impl Child for bosun_api::backup::Backup {
    type Desired = Self;

    /// A PostgreSQL's status reads its Backup's Ready condition.
    fn slim(&mut self) {
        slim_meta(&mut self.metadata);
    }
}

/// The cache of one child kind (objects labelled managed-by=bosun, slimmed by
/// [`Child::slim`]), and bosun's record of what it last applied to each.
pub struct Owned<C: Child> {
    store: Store<C>,
    records: Arc<Mutex<HashMap<ObjectRef<C>, Applied>>>,
    /// Moves with every change of `records`: the checkpoint is written when it moved.
    changes: Changes,
}

impl<C: Child> Clone for Owned<C> {
    fn clone(&self) -> Self {
        Self { store: self.store.clone(), records: self.records.clone(), changes: self.changes.clone() }
    }
}

impl<C: Child> std::fmt::Debug for Owned<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owned").field("kind", &C::kind(&())).field("cached", &self.store.state().len()).finish()
    }
}

impl<C: Child> Owned<C> {
    pub fn new(store: Store<C>) -> Self {
        Self { store, records: Arc::default(), changes: Changes::default() }
    }

    /// Whether the watch has listed everything once: until then, an object the cache
    /// lacks may exist all the same.
    pub fn synced(&self) -> bool {
        synced(&self.store)
    }

    /// Wait (at most 10 s) until the watch has listed everything once. Until then a
    /// child missing from the cache may exist all the same: the first reconciles after
    /// a start would apply, as missing, children that bosun's records vouch for. Past
    /// the bound, decisions go on from what is cached (an apply, at worst).
    pub async fn listed(&self) {
        let start = std::time::Instant::now();
        while !self.synced() && start.elapsed() < std::time::Duration::from_secs(10) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The cached `namespace/name`, if bosun's watch has it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<C>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// Every cached object for which `keep` holds.
    pub fn matching(&self, keep: impl Fn(&C) -> bool) -> Vec<Arc<C>> {
        self.store.state().into_iter().filter(|c| keep(c)).collect()
    }

    /// What bosun last applied to `namespace/name`, since it started.
    pub fn recorded(&self, namespace: &str, name: &str) -> Option<Applied> {
        self.lock().get(&ObjectRef::new(name).within(namespace)).cloned()
    }

    /// Note what an apply to `namespace/name` stored.
    pub fn record(&self, namespace: &str, name: &str, applied: Applied) {
        let before = self.lock().insert(ObjectRef::new(name).within(namespace), applied.clone());
        if before.as_ref() != Some(&applied) {
            self.changes.bump();
        }
    }

    /// Forget `object`: it was deleted.
    pub fn forget(&self, object: &ObjectRef<C>) {
        if self.lock().remove(object).is_some() {
            self.changes.bump();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<C>, Applied>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The records are kept across restarts ([`crate::checkpoint`]).
impl<C: Child> Checkpointed for Owned<C> {
    fn changes(&self) -> u64 {
        self.changes.get()
    }

    /// Once the cache has listed everything, the records of objects it no longer holds
    /// (deleted while nobody watched) are left out: they would only ever say "apply".
    fn export(&self) -> Vec<Entry> {
        let synced = self.synced();
        let records = self.lock();
        records
            .iter()
            .filter(|(key, _)| !synced || self.store.get(key).is_some())
            .map(|(key, applied)| Entry::new(key.namespace.as_deref().unwrap_or_default(), &key.name, applied))
            .collect()
    }

    fn import(&self, entries: Vec<Entry>) -> usize {
        let mut records = self.lock();
        let mut taken = 0;
        for (namespace, name, applied) in entries.into_iter().filter_map(Entry::record) {
            if let std::collections::hash_map::Entry::Vacant(slot) =
                records.entry(ObjectRef::new(&name).within(&namespace))
            {
                slot.insert(applied);
                taken += 1;
            }
        }
        taken
    }
}

/// Whether `store`'s watch has listed everything once (its readiness is kept once set).
pub fn synced<K: kube::Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|ready| ready.is_ok())
}

/// Keep of a child's metadata only what the ownership rule, change detection and the
/// owner mapping read: identity, versions, labels, annotations (less kubectl's copy
/// of the whole object), ownerReferences and — for an object without a controller,
/// which only they can make adoptable or name in a conflict ([`claim`]) — the names of
/// the managers that wrote it (their field sets are most of an object's metadata by
/// size). An object with a controller is judged by that reference alone.
pub fn slim_meta(meta: &mut ObjectMeta) {
    drop_annotation(meta, "kubectl.kubernetes.io/last-applied-configuration");
    if meta.owner_references.iter().flatten().any(|r| r.controller == Some(true)) {
        meta.managed_fields = None;
        return;
    }
    for entry in meta.managed_fields.iter_mut().flatten() {
        *entry = ManagedFieldsEntry { manager: entry.manager.take(), ..ManagedFieldsEntry::default() };
    }
}

/// Remove the annotation `key`, and the map with its last entry.
fn drop_annotation(meta: &mut ObjectMeta, key: &str) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(key);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// A parent's metadata as its cache keeps it: as a child's ([`slim_meta`]), and no
/// managers at all, which nothing reads of a parent (their list costs as much as the
/// rest of a small object).
pub fn slim_parent_meta(meta: &mut ObjectMeta) {
    slim_meta(meta);
    meta.managed_fields = None;
}

const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};

    use super::*;

    const MANAGER: &str = "bosun-webapp.apps.example.com";

    fn parent() -> Parent<'static> {
        Parent { kind: "WebApp".into(), name: "web", uid: "parent-uid", manager: MANAGER }
    }

    fn meta(controller: Option<(&str, &str)>, managers: &[&str], labelled: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            uid: Some("child-uid".into()),
            owner_references: controller.map(|(kind, uid)| {
                vec![OwnerReference {
                    api_version: "apps.example.com/v1".into(),
                    kind: kind.into(),
                    name: "web".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            managed_fields: Some(
                managers
                    .iter()
                    .map(|m| ManagedFieldsEntry { manager: Some((*m).into()), ..Default::default() })
                    .collect(),
            ),
            labels: labelled.then(|| [("app.kubernetes.io/managed-by".to_owned(), "bosun".to_owned())].into()),
            ..Default::default()
        }
    }

    fn decide(existing: Option<&ObjectMeta>) -> Claim {
        claim("Deployment", "web", existing, parent())
    }

    #[test]
    fn a_free_name_is_created() {
        assert_eq!(decide(None), Claim::Create);
    }

    #[test]
    fn the_parents_own_child_is_applied_over_by_uid() {
        let m = meta(Some(("WebApp", "parent-uid")), &[MANAGER], true);
        assert_eq!(decide(Some(&m)), Claim::Ours { uid: "child-uid".into() });
    }

    #[test]
    fn a_hand_made_object_is_refused_naming_who_wrote_it() {
        let m = meta(None, &["kubectl-create"], false);
        let Claim::Conflict(message) = decide(Some(&m)) else { panic!("a kubectl-created Deployment was claimed") };
        assert!(message.contains("Deployment web") && message.contains("kubectl-create"), "{message}");
    }

    #[test]
    fn another_parents_child_is_refused_naming_that_parent() {
        // The twin of another group: same kind and name, another uid.
        let m = meta(Some(("WebApp", "twin-uid")), &["bosun-webapp.example.com"], true);
        let Claim::Conflict(message) = decide(Some(&m)) else { panic!("the twin's Deployment was claimed") };
        assert!(message.contains("twin-uid") && message.contains("controlled by WebApp web"), "{message}");
    }

    #[test]
    fn an_orphan_this_controller_wrote_is_adopted() {
        // After `kubectl delete --cascade=orphan` and re-creating the parent (new uid).
        let m = meta(None, &[MANAGER, "kube-controller-manager"], true);
        assert_eq!(decide(Some(&m)), Claim::Ours { uid: "child-uid".into() });
    }

    #[test]
    fn slimming_for_the_cache_keeps_every_decision() {
        let cases = [
            meta(Some(("WebApp", "parent-uid")), &[MANAGER], true),
            meta(None, &[MANAGER, "kube-controller-manager"], true),
            meta(None, &["kubectl-create"], false),
            meta(Some(("WebApp", "twin-uid")), &["bosun-webapp.example.com"], true),
        ];
        for m in cases {
            let mut cached = SlimService { metadata: m.clone() };
            cached.metadata.annotations = Some(
                [("kubectl.kubernetes.io/last-applied-configuration".into(), "{...}".into()), ("a".into(), "b".into())]
                    .into(),
            );
            cached.slim();
            assert_eq!(cached.metadata.annotations, Some([("a".into(), "b".into())].into()));
            assert_eq!(decide(Some(&cached.metadata)), decide(Some(&m)));
            assert_eq!(cached.metadata.owner_references, m.owner_references);
            assert_eq!(cached.metadata.labels, m.labels);
            // Managers are kept (names only) where a decision reads them: without a controller.
            let controlled = m.owner_references.is_some();
            let managers = |meta: &ObjectMeta| meta.managed_fields.as_ref().map(|f| f.len());
            assert_eq!(managers(&cached.metadata), if controlled { None } else { managers(&m) });
        }
        let mut parent = meta(None, &["kubectl", MANAGER], false);
        slim_parent_meta(&mut parent);
        assert_eq!(parent.managed_fields, None, "nothing reads a parent's managers");
    }

    #[test]
    fn a_cached_deployment_keeps_what_its_status_and_drift_read() {
        let annotations = [("deployment.kubernetes.io/revision".to_owned(), "3".to_owned())];
        let mut cached = SlimDeployment {
            metadata: ObjectMeta { annotations: Some(annotations.into()), ..meta(None, &[], true) },
            status: Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                ready_replicas: Some(2),
                conditions: Some(vec![k8s_openapi::api::apps::v1::DeploymentCondition {
                    type_: "Progressing".into(),
                    status: "False".into(),
                    reason: Some("ProgressDeadlineExceeded".into()),
                    message: Some("ReplicaSet \"web-1\" has timed out progressing.".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let labels = cached.metadata.labels.clone();
        cached.slim();
        assert_eq!(cached.metadata.annotations, None, "the revision is not bosun's: no map left");
        assert_eq!(cached.metadata.labels, labels, "labels are compared with the desired ones");
        let status = cached.status.unwrap();
        assert_eq!(status.ready_replicas, Some(2));
        let condition = &status.conditions.unwrap()[0];
        assert_eq!(condition.reason.as_deref(), Some("ProgressDeadlineExceeded"));
        assert_eq!(condition.message, None);
    }

    #[test]
    fn a_slimmed_instance_pod_still_says_whether_it_serves_the_instance_api() {
        let db: bosun_api::postgresql::PostgreSQL = serde_json::from_value(serde_json::json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "ns", "uid": "u"}, "spec": {"version": "15", "storage": "1Gi"},
        }))
        .unwrap();
        let running = bosun_resources::upgrade::Running::of(&db, None);
        let sts = bosun_resources::postgresql::desired_statefulset(&db, &Default::default(), None, "d", running);
        let template = sts.spec.unwrap().template;
        let mut pod = Pod { metadata: template.metadata.unwrap_or_default(), spec: template.spec, status: None };
        assert!(bosun_resources::instances::serves_api(&pod));
        pod.slim();
        assert!(bosun_resources::instances::serves_api(&pod), "the cache must not make every pod look old");
        let spec = pod.spec.unwrap();
        assert!(spec.init_containers.is_none() && spec.containers[0].env.is_none());
        // Volumes: their names and the Secrets they hold (whether the primary has the
        // pooler's password), nothing else.
        let volumes = serde_json::to_value(&spec.volumes).unwrap();
        let text = volumes.to_string();
        assert!(text.contains("\"db-credentials\"") || text.contains("db-app"), "{text}");
        assert!(!text.contains("\"items\"") && !text.contains("hostPath") && !text.contains("emptyDir"), "{text}");
    }

    #[test]
    fn an_orphan_whose_bosun_label_was_removed_is_the_users() {
        let m = meta(None, &[MANAGER], false);
        assert!(matches!(decide(Some(&m)), Claim::Conflict(_)));
    }

    #[test]
    fn bosun_labels_alone_do_not_make_an_object_adoptable() {
        // Copied from `bosun render` and applied by hand: labelled, but not bosun's writing.
        let m = meta(None, &["kubectl-client-side-apply"], true);
        assert!(matches!(decide(Some(&m)), Claim::Conflict(_)));
        // An orphan of another controller (the other WebApp group) is not this one's.
        let m = meta(None, &["bosun-webapp.example.com"], true);
        assert!(matches!(decide(Some(&m)), Claim::Conflict(_)));
    }
}
