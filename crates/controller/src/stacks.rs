//! The AppStack and EcommercePlatform controllers: two thin layers on the dependency
//! engine ([`crate::dependencies`]).
//!
//! Pipeline: the values in effect (pure: [`build::app_stack`], [`build::platform`]) →
//! refuse a database type change → the components in order (database; cache and
//! backend after it; frontend and its Ingress after the backend) → the ServiceMonitor
//! when its CRD is installed → status → write it only if it changed.
//!
//! Children carry `app.kubernetes.io/name=stack` and their stack's label (`platform:
//! <name>`, or `app.example.com/stack: <name>`); one watch per kind serves both
//! controllers and maps each change back by that label — the MySQL credentials have no
//! owner (a password outlives the stack, as its data does).
//!
//! Deletion, under the finalizer `app.example.com/ordered-deletion`
//! (`platform.example.com/ordered-deletion`), added on a stack's first reconcile
//! ([`crate::finalizers`]): the components go in reverse dependency order
//! ([`build::DELETION_ORDER`]: frontend with its Ingress and ServiceMonitor, backend,
//! cache, database), each deleted in the foreground and gone from the API — with its
//! pods, which the garbage collector lets outlive their Deployment while they stop
//! (one list of the stack's pods per look while it deletes) — before the next is deleted. The decision is [`bosun_resources::teardown`]'s:
//!
//! ```text
//!  stack deleted ─▶ namespace terminating, or --cascade=orphan/foreground ─▶ finalizer removed at once
//!               ─▶ frontend ─gone─▶ backend ─gone─▶ cache ─gone─▶ database ─gone─▶ finalizer removed
//!                     └ a step lasting --stack-deletion-timeout (5m) ─▶ Warning DeletionTimedOut, finalizer removed
//! ```
//!
//! Each step shows in the status (phase `Deleting`, `Ready=False Deleting` naming the
//! component, since when and what is left of it; `DeletionStuck` and a Warning event
//! once it has lasted 30 s). The data stays as it would without the finalizer: the
//! PostgreSQL keeps its claims unless its `deletionPolicy` says `Delete`, a MySQL
//! StatefulSet's claims are never deleted, and the credentials and the dumps' claim
//! have no owner.

use bosun_resources::slim::{SlimDeployment, SlimService};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bosun_api::backup::Backup;
use bosun_api::conditions::{Condition, Conditioned};
use bosun_api::conditions::{reasons, types};
use bosun_api::monitoring::ServiceMonitor;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::stack::{AppStack, EcommercePlatform, StackStatus};
use bosun_resources::conditions::{self as conds, Desired};
use bosun_resources::stacks::{self as build, Plan};
use bosun_resources::teardown::{self, Left, Next, Owner, Release, Step};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::object::HasStatus;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::apply::{apply_child, create_if_absent, delete_child, delete_in_foreground};
use crate::children::{Child, Owned, controlled_by};
use crate::context::Context;
use crate::dependencies::{Component, Health, Pass, converge};
use crate::error::Error;
use crate::finalizers::{self, Cleanup};
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of these controllers in metrics and logs.
const APPSTACK: &str = "appstack";
const PLATFORM: &str = "ecommerceplatform";

/// The CRD whose presence turns ServiceMonitors on.
pub const SERVICE_MONITOR_CRD: &str = "servicemonitors.monitoring.coreos.com";

/// `MonitoringAvailable`: whether the platform's ServiceMonitor exists.
pub const MONITORING_AVAILABLE: &str = "MonitoringAvailable";

/// What these controllers do with the API.
pub const PERMISSIONS: &[Permission] = &{
    let [a0, a1, a2] = permissions::reconciled("app.example.com", "appstacks");
    let [e0, e1, e2] = permissions::reconciled("platform.example.com", "ecommerceplatforms");
    [
        a0,
        a1,
        a2,
        e0,
        e1,
        e2,
        // The ordered-deletion finalizer, added once and removed when the stack is gone;
        // whether the namespace is being deleted (then the finalizer goes at once).
        finalizers::permission("app.example.com", "appstacks"),
        finalizers::permission("platform.example.com", "ecommerceplatforms"),
        finalizers::NAMESPACES,
        // The children a deletion takes, one component at a time.
        Permission::new("database.example.com", "postgresqls", &["delete"]),
        Permission::new("apps", "statefulsets", &["delete"]),
        Permission::new("networking.k8s.io", "ingresses", &["delete"]),
        Permission::new("database.example.com", "postgresqls", permissions::OWN),
        Permission::new("apps", "statefulsets", permissions::OWN),
        Permission::new("apps", "deployments", permissions::OWN),
        Permission::new("", "services", permissions::OWN),
        Permission::new("networking.k8s.io", "ingresses", permissions::OWN),
        // The cache when it is turned off, and every tier when the stack is deleted.
        Permission::new("apps", "deployments", &["delete"]),
        Permission::new("", "services", &["delete"]),
        // A MySQL database's Backup, deleted when backups are off; its claim of dumps,
        // created once.
        Permission::new("backup.example.com", "backups", permissions::OWN),
        Permission::new("backup.example.com", "backups", &["delete"]),
        Permission::new("", "persistentvolumeclaims", &["create", "get"]),
        // The pods of a workload that is not ready, and the Warning events of one that
        // waits: to name why it cannot start.
        Permission::new("", "pods", &["list"]),
        Permission::new("", "events", &["list"]),
        // MySQL credentials: created once, never updated.
        Permission::new("", "secrets", &["create", "get", "list", "watch"]),
        // Whether the Prometheus operator's CRD is installed, and its ServiceMonitors.
        Permission::new("apiextensions.k8s.io", "customresourcedefinitions", &["list", "watch"]),
        Permission::new("monitoring.coreos.com", "servicemonitors", permissions::OWN),
        Permission::new("monitoring.coreos.com", "servicemonitors", &["delete"]),
    ]
};

/// How often a stack is looked at without any event. Writes nothing when nothing changed.
const RECHECK: Duration = Duration::from_secs(300);

/// The caches of the stacks' children, shared by both kinds.
#[derive(Clone)]
struct Children {
    postgresqls: Owned<PostgreSQL>,
    statefulsets: Owned<StatefulSet>,
    deployments: Owned<SlimDeployment>,
    services: Owned<SlimService>,
    secrets: Owned<Secret>,
    ingresses: Owned<Ingress>,
    backups: Owned<Backup>,
    /// The platforms' ServiceMonitors, watched once their CRD is installed.
    monitors: Owned<ServiceMonitor>,
    /// The ServiceMonitor CRD, when installed.
    monitor_crd: Store<CustomResourceDefinition>,
}

impl Children {
    /// Whether every cache a deletion reads has listed once: before that, "nothing
    /// left" may only mean "not seen yet" (right after bosun started).
    fn synced(&self) -> bool {
        let monitors = crate::children::synced(&self.monitor_crd)
            && (self.monitor_crd.state().is_empty() || self.monitors.synced());
        monitors
            && self.postgresqls.synced()
            && self.statefulsets.synced()
            && self.deployments.synced()
            && self.services.synced()
            && self.ingresses.synced()
            && self.backups.synced()
    }
}

/// The finalizer under which an AppStack's components are deleted in order.
pub const APPSTACK_FINALIZER: &str = "app.example.com/ordered-deletion";
/// The finalizer under which an EcommercePlatform's components are deleted in order.
pub const PLATFORM_FINALIZER: &str = "platform.example.com/ordered-deletion";

/// A stack kind: how it reduces to a [`Plan`], and the label naming it on its children.
trait StackKind: wiring::Reconciled + HasStatus<Status = StackStatus> {
    const CONTROLLER: &'static str;
    const LABEL: &'static str;
    /// Whether it fills in defaults, which `status.effective` then shows.
    const DEFAULTS: bool;
    /// The finalizer its ordered deletion runs under.
    const FINALIZER: &'static str;
    fn plan(&self) -> Plan;
}

impl StackKind for AppStack {
    const CONTROLLER: &'static str = APPSTACK;
    const LABEL: &'static str = build::STACK_LABEL;
    const DEFAULTS: bool = false;
    const FINALIZER: &'static str = APPSTACK_FINALIZER;

    fn plan(&self) -> Plan {
        build::app_stack(self)
    }
}

impl StackKind for EcommercePlatform {
    const CONTROLLER: &'static str = PLATFORM;
    const LABEL: &'static str = build::PLATFORM_LABEL;
    const DEFAULTS: bool = true;
    const FINALIZER: &'static str = PLATFORM_FINALIZER;

    fn plan(&self) -> Plan {
        build::platform(self)
    }
}

/// The status of a stack after `pass`: the values in effect only where the kind has
/// defaults to show (EcommercePlatform).
fn desired_status<K: StackKind>(stack: &K, plan: &Plan, pass: &Pass, conditions: Vec<Condition>) -> StackStatus {
    StackStatus {
        observed_generation: stack.meta().generation,
        phase: Some(pass.phase()),
        components: pass.components.clone(),
        endpoints: plan.endpoints(),
        effective: K::DEFAULTS.then(|| plan.effective()),
        conditions,
    }
}

type Changes<C> = UnboundedReceiver<C>;

/// One watch of `C` for both kinds, routed by which stack label a child carries.
fn shared<C: Child>(ctx: &Context, ns: Option<&str>) -> (Owned<C>, [Changes<C>; 2]) {
    let (owned, changes) =
        wiring::watch_app_routed::<C>(ctx, ns, build::APP_NAME, &[build::STACK_LABEL, build::PLATFORM_LABEL]);
    match changes.try_into() {
        Ok(pair) => (owned, pair),
        Err(_) => unreachable!("watch_app_routed returns one stream per label"),
    }
}

/// The AppStack and EcommercePlatform controllers, for the registry of kinds: one run
/// serves those of them enabled.
pub const SERVED: Served = Served {
    controllers: &[APPSTACK, PLATFORM],
    types: &[Type::of::<AppStack>(), Type::of::<EcommercePlatform>()],
    permissions: PERMISSIONS,
    start: |start| {
        let kinds = Kinds { app_stack: start.enables(APPSTACK), platform: start.enables(PLATFORM) };
        Box::pin(run(start.ctx, start.targets, start.concurrency, start.shutdown, kinds))
    },
};

/// Which of the two kinds to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub app_stack: bool,
    pub platform: bool,
}

/// Run the AppStack and EcommercePlatform controllers (those `kinds` names) in each
/// of `namespaces` (`None`: cluster-wide), sharing their children's watches within a
/// namespace and the ServiceMonitor CRD's watch across all of them.
pub async fn run(
    ctx: Arc<Context>,
    namespaces: Vec<Option<String>>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    kinds: Kinds,
) {
    let shutdown = futures::FutureExt::shared(shutdown);
    let (monitor_crd, crd_changes) = watch_monitor_crd(&ctx, namespaces.len());
    let runs = namespaces.iter().zip(crd_changes).map(|(ns, crd_changes)| {
        run_in(ctx.clone(), ns.as_deref(), concurrency, shutdown.clone(), kinds, monitor_crd.clone(), crd_changes)
    });
    futures::future::join_all(runs).await;
}

async fn run_in(
    ctx: Arc<Context>,
    ns: Option<&str>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    kinds: Kinds,
    monitor_crd: Store<CustomResourceDefinition>,
    crd_changes: UnboundedReceiver<()>,
) {
    let (postgresqls, [pg_a, pg_p]) = shared::<PostgreSQL>(&ctx, ns);
    let (statefulsets, [st_a, st_p]) = shared::<StatefulSet>(&ctx, ns);
    let (deployments, [d_a, d_p]) = shared::<SlimDeployment>(&ctx, ns);
    let (services, [s_a, s_p]) = shared::<SlimService>(&ctx, ns);
    let (secrets, [se_a, se_p]) = shared::<Secret>(&ctx, ns);
    let (ingresses, [i_a, i_p]) = shared::<Ingress>(&ctx, ns);
    let (backups, [b_a, b_p]) = shared::<Backup>(&ctx, ns);
    let (monitors, monitor_changes) = platform_monitors(&ctx, ns, monitor_crd.clone());
    let children = Children {
        postgresqls,
        statefulsets,
        deployments,
        services,
        secrets,
        ingresses,
        backups,
        monitors,
        monitor_crd,
    };
    let app_stacks = async {
        if kinds.app_stack {
            let changes = (pg_a, st_a, d_a, s_a, se_a, i_a, b_a);
            run_kind::<AppStack>(ctx.clone(), ns, concurrency, shutdown.clone(), children.clone(), changes, None).await;
        }
    };
    let platforms = async {
        if kinds.platform {
            let changes = (pg_p, st_p, d_p, s_p, se_p, i_p, b_p);
            run_kind::<EcommercePlatform>(
                ctx.clone(),
                ns,
                concurrency,
                shutdown.clone(),
                children.clone(),
                changes,
                Some((crd_changes, monitor_changes)),
            )
            .await;
        }
    };
    futures::join!(app_stacks, platforms);
}

/// The ServiceMonitor CRD, watched by name, once: the cache says whether it is
/// installed, and each change reconciles every platform of the `runs` namespaces'
/// controllers (installing it later works at once).
fn watch_monitor_crd(ctx: &Context, runs: usize) -> (Store<CustomResourceDefinition>, Vec<UnboundedReceiver<()>>) {
    let (reader, writer) = reflector::store();
    let (mut senders, receivers): (Vec<_>, Vec<_>) = (0..runs).map(|_| futures::channel::mpsc::unbounded()).unzip();
    let api = Api::<CustomResourceDefinition>::all(ctx.client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={SERVICE_MONITOR_CRD}"));
    let stream = wiring::watched(ctx, watcher(api, config)).modify(|crd: &mut CustomResourceDefinition| {
        crate::children::slim_meta(&mut crd.metadata);
        crd.spec.versions.iter_mut().for_each(|v| v.schema = None);
    });
    let stream = stream.reflect(writer);
    tokio::spawn(async move {
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            if matches!(event, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) {
                senders.retain(|tx| tx.unbounded_send(()).is_ok());
                if senders.is_empty() {
                    return;
                }
            }
        }
    });
    (reader, receivers)
}

/// The platforms' ServiceMonitors in `ns`, watched once `crd` holds their CRD, and
/// their relevant changes (only platforms make them).
fn platform_monitors(
    ctx: &Context,
    ns: Option<&str>,
    crd: Store<CustomResourceDefinition>,
) -> (Owned<ServiceMonitor>, Changes<ServiceMonitor>) {
    let installed = async move {
        while crd.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let (owned, mut changes) =
        wiring::watch_app_routed_when(ctx, ns, build::APP_NAME, &[build::PLATFORM_LABEL], Box::pin(installed));
    match changes.pop() {
        Some(changes) => (owned, changes),
        None => unreachable!("watch_app_routed_when returns one stream per label"),
    }
}

type AllChanges = (
    Changes<PostgreSQL>,
    Changes<StatefulSet>,
    Changes<SlimDeployment>,
    Changes<SlimService>,
    Changes<Secret>,
    Changes<Ingress>,
    Changes<Backup>,
);

async fn run_kind<K>(
    ctx: Arc<Context>,
    ns: Option<&str>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    children: Children,
    changes: AllChanges,
    monitoring: Option<(UnboundedReceiver<()>, Changes<ServiceMonitor>)>,
) where
    K: StackKind,
{
    let ctrl = wiring::controller_for::<K>(K::CONTROLLER, &ctx, ns);
    let (pg, st, d, s, se, i, b) = changes;
    let ctrl = by_stack_label::<K, _>(ctrl, pg);
    let ctrl = by_stack_label::<K, _>(ctrl, st);
    let ctrl = by_stack_label::<K, _>(ctrl, d);
    let ctrl = by_stack_label::<K, _>(ctrl, s);
    let ctrl = by_stack_label::<K, _>(ctrl, se);
    let ctrl = by_stack_label::<K, _>(ctrl, i);
    let ctrl = by_stack_label::<K, _>(ctrl, b);
    let ctrl = match monitoring {
        Some((crd_changes, monitors)) => by_stack_label::<K, _>(ctrl.reconcile_all_on(crd_changes), monitors),
        None => ctrl,
    };
    wiring::drive_finalized(K::CONTROLLER, ctrl, concurrency, ctx, shutdown, Some(K::FINALIZER), move |stack, ctx| {
        reconcile(stack, ctx, children.clone())
    })
    .await;
}

fn by_stack_label<K: StackKind, C: Child>(ctrl: wiring::Triggered<K>, changes: Changes<C>) -> wiring::Triggered<K> {
    wiring::triggered_by::<K, C>(ctrl, changes, |child| child.labels().get(K::LABEL).cloned().into_iter().collect())
}

async fn reconcile<K>(stack: Arc<K>, ctx: Arc<Context>, children: Children) -> Result<Outcome, Error>
where
    K: StackKind,
{
    let (stack, ctx, children) = (stack.as_ref(), ctx.as_ref(), &children);
    finalizers::finalized(
        ctx,
        K::FINALIZER,
        stack,
        || converge_stack(stack, ctx, children),
        || delete_in_order(stack, ctx, children),
    )
    .await
}

/// A living stack: its components brought to the spec, in dependency order.
async fn converge_stack<K>(stack: &K, ctx: &Context, children: &Children) -> Result<Outcome, Error>
where
    K: StackKind,
{
    let now = ctx.now();
    let ns = stack.namespace().unwrap_or_default();
    let plan = stack.plan();
    let db_name = plan.database_name();
    let has_pg = children.postgresqls.get(&ns, &db_name).is_some_and(|p| controlled_by(p.as_ref(), stack));
    let has_mysql = children.statefulsets.get(&ns, &db_name).is_some_and(|s| controlled_by(s.as_ref(), stack));
    let previous = stack.status().map(|s| s.conditions().to_vec()).unwrap_or_default();

    if let Some(message) = build::type_change(&plan, has_pg, has_mysql) {
        let pass = Pass { components: vec![], refused: Some((reasons::DATABASE_TYPE_CHANGE_REFUSED, message.clone())) };
        let desired = vec![Desired::new(types::READY, false, reasons::DATABASE_TYPE_CHANGE_REFUSED, message.clone())];
        let status =
            desired_status(stack, &plan, &pass, conds::merge(&previous, desired, stack.meta().generation, now));
        let announce = update_status(ctx, K::CONTROLLER, stack, &status).await?;
        return Ok(Outcome::of(Some((reasons::DATABASE_TYPE_CHANGE_REFUSED, message)), announce));
    }

    let pass = converge(components(stack, ctx, children, &plan)).await?;
    if !plan.cache {
        drop_cache(stack, ctx, children, &plan).await?;
    }
    let monitoring = monitoring(stack, ctx, children, &plan).await?;

    let status_ready = pass.phase() == bosun_api::stack::Phase::Running;
    let ready = Desired::new(
        types::READY,
        status_ready,
        match (&pass.refused, pass.phase()) {
            (Some((reason, _)), _) => reason,
            (None, bosun_api::stack::Phase::Running) => reasons::ALL_COMPONENTS_READY,
            _ => reasons::DEPLOYING,
        },
        pass.summary(),
    );
    let mut desired = vec![ready];
    desired.extend(monitoring);
    let status = desired_status(stack, &plan, &pass, conds::merge(&previous, desired, stack.meta().generation, now));
    let announce = update_status(ctx, K::CONTROLLER, stack, &status).await?;
    Ok(match pass.refused {
        Some((reason, message)) => Outcome::of(Some((reason, message)), announce),
        // Not all ready: looked at again soon, for a pod that cannot start.
        None if !status_ready => Outcome::Requeue(crate::read::POD_RECHECK),
        None => Outcome::Requeue(RECHECK),
    })
}

/// The components of `plan`, in dependency order.
fn components<'a, K: StackKind>(
    stack: &'a K,
    ctx: &'a Context,
    children: &'a Children,
    plan: &'a Plan,
) -> Vec<Component<'a>> {
    let ns = stack.namespace().unwrap_or_default();
    let exists = |name: &str| children.deployments.get(&ns, name).is_some_and(|d| controlled_by(d.as_ref(), stack));
    let db_started = children.postgresqls.get(&ns, &plan.database_name()).is_some()
        || children.statefulsets.get(&ns, &plan.database_name()).is_some();
    let mut components = vec![Component {
        name: build::DATABASE_COMPONENT,
        after: &[],
        started: db_started,
        apply: Box::pin(database(stack, ctx, children, plan)),
    }];
    if plan.cache {
        components.push(Component {
            name: build::CACHE_COMPONENT,
            after: build::CACHE_AFTER,
            started: exists(&plan.cache_name()),
            apply: Box::pin(cache(stack, ctx, children, plan)),
        });
    }
    for (name, after) in
        [(build::BACKEND_COMPONENT, build::BACKEND_AFTER), (build::FRONTEND_COMPONENT, build::FRONTEND_AFTER)]
    {
        components.push(Component {
            name,
            after,
            started: exists(&plan.tier_name(name)),
            apply: Box::pin(tier(stack, ctx, children, plan, name)),
        });
    }
    components
}

async fn database<K: StackKind>(stack: &K, ctx: &Context, children: &Children, plan: &Plan) -> Result<Health, Error> {
    if let Some(pg) = build::desired_postgresql(stack, plan) {
        // The PostgreSQL's own status names an instance that cannot start.
        let applied = apply_child(ctx, stack, &children.postgresqls, pg).await?;
        return Ok(build::postgresql_ready(&applied).map_or_else(Health::not_ready, |()| Health::ready()));
    }
    let ns = stack.namespace().unwrap_or_default();
    let secret_name = plan.credentials_name();
    // Created once; a Secret that exists (bosun's or the user's) is never written.
    if crate::read::cached_or_get(&ctx.client, &children.secrets, &ns, &secret_name).await?.is_none() {
        let password = crate::postgresql::new_password();
        let root = crate::postgresql::new_password();
        create_if_absent(ctx, stack, &build::desired_mysql_secret(stack, plan, &password, &root)).await?;
    }
    let Some(sts) = build::desired_mysql_statefulset(stack, plan, &ctx.settings.stack) else {
        return Ok(Health::not_ready("no database"));
    };
    let labels = pod_labels(sts.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    let sts = apply_child(ctx, stack, &children.statefulsets, sts).await?;
    if let Some(service) = build::desired_mysql_service(stack, plan) {
        apply_child(ctx, stack, &children.services, service).await?;
    }
    let ready = build::statefulset_ready(&sts, 1);
    mysql_backup(stack, ctx, children, plan, ready.is_ok()).await?;
    health(ctx, &ns, &sts.name_any(), &labels, ready).await
}

/// A MySQL database's Backup, made once the database is Ready (with its claim of
/// dumps, created once), deleted when the plan takes no backups — the dumps stay.
async fn mysql_backup<K: StackKind>(
    stack: &K,
    ctx: &Context,
    children: &Children,
    plan: &Plan,
    ready: bool,
) -> Result<(), Error> {
    let ns = stack.namespace().unwrap_or_default();
    let name = format!("{}-backup", plan.database_name());
    let existing = children.backups.get(&ns, &name).filter(|b| controlled_by(b.as_ref(), stack));
    match build::desired_mysql_backup(stack, plan) {
        None => delete_child(ctx, stack, &children.backups, &ns, &name).await,
        Some(_) if existing.is_none() && !ready => Ok(()),
        Some((backup, claim)) => {
            if existing.is_none() {
                create_if_absent(ctx, stack, &claim).await?;
            }
            apply_child(ctx, stack, &children.backups, backup).await.map(|_| ())
        }
    }
}

async fn cache<K: StackKind>(stack: &K, ctx: &Context, children: &Children, plan: &Plan) -> Result<Health, Error> {
    let Some((deployment, service)) = build::desired_cache(stack, plan, &ctx.settings.stack) else {
        return Ok(Health::ready());
    };
    let labels = pod_labels(deployment.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    let (deployment, _) = futures::try_join!(
        apply_child(ctx, stack, &children.deployments, deployment),
        apply_child(ctx, stack, &children.services, service),
    )?;
    let ns = stack.namespace().unwrap_or_default();
    health(ctx, &ns, &deployment.name_any(), &labels, build::deployment_ready(&deployment, 1)).await
}

async fn tier<K: StackKind>(
    stack: &K,
    ctx: &Context,
    children: &Children,
    plan: &Plan,
    component: &'static str,
) -> Result<Health, Error> {
    let (deployment, service) = build::desired_tier(stack, plan, component);
    let labels = pod_labels(deployment.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    let want = if component == build::BACKEND_COMPONENT { plan.backend.replicas } else { plan.frontend.replicas };
    let (deployment, _) = futures::try_join!(
        apply_child(ctx, stack, &children.deployments, deployment),
        apply_child(ctx, stack, &children.services, service),
    )?;
    if component == build::FRONTEND_COMPONENT
        && let Some(ingress) = build::desired_ingress(stack, plan)
    {
        apply_child(ctx, stack, &children.ingresses, ingress).await?;
    }
    let ns = stack.namespace().unwrap_or_default();
    health(ctx, &ns, &deployment.name_any(), &labels, build::deployment_ready(&deployment, want)).await
}

/// The labels of a workload's pod template.
fn pod_labels(template: Option<&ObjectMeta>) -> BTreeMap<String, String> {
    template.and_then(|m| m.labels.clone()).unwrap_or_default()
}

/// A workload's health; when it is not ready, with why a pod of it (by its pod
/// `labels`) cannot start, if one cannot.
async fn health(
    ctx: &Context,
    ns: &str,
    workload: &str,
    labels: &BTreeMap<String, String>,
    ready: Result<(), String>,
) -> Result<Health, Error> {
    match ready {
        Ok(()) => Ok(Health::ready()),
        Err(message) => match crate::read::workload_stuck(&ctx.client, ctx.now(), ns, workload, labels).await? {
            Some(cause) => Ok(Health::not_ready(format!("{message}; {cause}"))),
            None => Ok(Health::not_ready(message)),
        },
    }
}

/// The ServiceMonitor, when monitoring is on and its CRD installed; the
/// `MonitoringAvailable` condition of a platform that asks for monitoring. A
/// ServiceMonitor of that name that is not this platform's is left alone (and
/// reported); turning monitoring off deletes only the platform's own.
async fn monitoring<K: StackKind>(
    stack: &K,
    ctx: &Context,
    children: &Children,
    plan: &Plan,
) -> Result<Option<Desired>, Error> {
    let installed = !children.monitor_crd.state().is_empty();
    let ns = stack.namespace().unwrap_or_default();
    let Some(monitor) = build::desired_service_monitor(stack, plan) else {
        if installed {
            delete_child(ctx, stack, &children.monitors, &ns, &plan.name).await?;
        }
        return Ok(None);
    };
    if !installed {
        return Ok(Some(Desired::new(
            MONITORING_AVAILABLE,
            false,
            reasons::CRD_NOT_INSTALLED,
            format!(
                "the CRD {SERVICE_MONITOR_CRD} (Prometheus operator) is not installed: no ServiceMonitor is made; \
                 the rest of the platform runs, and the ServiceMonitor follows as soon as the CRD is installed"
            ),
        )));
    }
    Ok(Some(match apply_child(ctx, stack, &children.monitors, monitor).await {
        Err(Error::NameConflict(_)) => Desired::new(
            MONITORING_AVAILABLE,
            false,
            reasons::NAME_CONFLICT,
            format!(
                "ServiceMonitor {} exists and is not this platform's: bosun leaves it alone; \
                 rename or delete it to have bosun make its own",
                plan.name
            ),
        ),
        Err(err) => return Err(err),
        Ok(_) => Desired::new(
            MONITORING_AVAILABLE,
            true,
            reasons::SERVICE_MONITOR_CREATED,
            format!("ServiceMonitor {} scrapes the backend and the frontend", plan.name),
        ),
    }))
}

/// The cache when it is turned off: its Deployment and Service go.
async fn drop_cache<K: StackKind>(stack: &K, ctx: &Context, children: &Children, plan: &Plan) -> Result<(), Error> {
    let ns = stack.namespace().unwrap_or_default();
    delete_child(ctx, stack, &children.deployments, &ns, &plan.cache_name()).await?;
    delete_child(ctx, stack, &children.services, &ns, &plan.cache_name()).await
}

/// A lazy deletion of one child: run only for the step under way.
type Delete<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// The child `name` of kind `C`, when the stack controls it: what the teardown knows of
/// it, and its deletion (in the foreground, that very object).
fn held<'a, K: StackKind, C: Child>(
    ctx: &'a Context,
    stack: &'a K,
    owned: &Owned<C>,
    name: &str,
) -> Option<(Left, Delete<'a>)> {
    let ns = stack.namespace().unwrap_or_default();
    let child = owned.get(&ns, name).filter(|c| controlled_by(c.as_ref(), stack))?;
    let meta = child.meta();
    let since = meta.deletion_timestamp.as_ref().map(|t| t.0);
    let left = Left::new(C::kind(&()), name, since, meta.finalizers.as_deref().unwrap_or_default());
    Some((left, Box::pin(async move { delete_in_foreground(ctx, stack, child.as_ref()).await })))
}

/// What is left of each component of `stack`, in [`build::DELETION_ORDER`]: the
/// frontend with the Ingress and the ServiceMonitor in front of it, the backend, the
/// cache (whatever the spec says now: it may have been turned off and not yet
/// deleted), and the database — the PostgreSQL (whose StatefulSet, Services and Backup
/// go with it), or MySQL's Backup, StatefulSet and Service.
fn what_is_left<'a, K: StackKind>(
    stack: &'a K,
    ctx: &'a Context,
    children: &Children,
) -> Vec<(&'static str, Vec<(Left, Delete<'a>)>)> {
    let plan = stack.plan();
    let tier = |component: &str| {
        let name = plan.tier_name(component);
        vec![held(ctx, stack, &children.deployments, &name), held(ctx, stack, &children.services, &name)]
    };
    build::DELETION_ORDER
        .iter()
        .map(|&component| {
            let held: Vec<Option<(Left, Delete<'a>)>> = match component {
                build::FRONTEND_COMPONENT => {
                    let mut front = vec![
                        held(ctx, stack, &children.ingresses, &plan.name),
                        held(ctx, stack, &children.monitors, &plan.name),
                    ];
                    front.extend(tier(component));
                    front
                }
                build::DATABASE_COMPONENT => {
                    let db = plan.database_name();
                    vec![
                        held(ctx, stack, &children.postgresqls, &db),
                        held(ctx, stack, &children.backups, &format!("{db}-backup")),
                        held(ctx, stack, &children.statefulsets, &db),
                        held(ctx, stack, &children.services, &db),
                    ]
                }
                _ => tier(component),
            };
            (component, held.into_iter().flatten().collect())
        })
        .collect()
}

/// A stack being deleted: the next step of its ordered deletion (see the module docs).
async fn delete_in_order<K: StackKind>(stack: &K, ctx: &Context, children: &Children) -> Result<Cleanup, Error> {
    if !children.synced() {
        return Ok(Cleanup::Pending(Duration::from_secs(1)));
    }
    let ns = stack.namespace().unwrap_or_default();
    let mut left = what_is_left(stack, ctx, children);
    let steps_of = |left: &[(&'static str, Vec<(Left, Delete<'_>)>)]| -> Vec<Step> {
        left.iter().map(|(name, held)| Step { name, left: held.iter().map(|(l, _)| l.clone()).collect() }).collect()
    };
    let owner = Owner {
        namespace_terminating: finalizers::namespace_terminating(ctx, &ns).await,
        finalizers: stack.meta().finalizers.as_deref().unwrap_or_default(),
    };
    // Released whatever is left (a terminating namespace, the user's propagation): no
    // pods to look at. Else the pods still stopping belong to their component's step.
    let now = ctx.now();
    if let Next::Release(why @ (Release::NamespaceTerminating | Release::Propagation(_))) =
        teardown::next(&steps_of(&left), owner, now, ctx.settings.stack_deletion)
    {
        released(stack, ctx, &steps_of(&left), why);
        return Ok(Cleanup::Done);
    }
    let pods = stopping_pods(stack, ctx).await?;
    for (component, held) in &mut left {
        held.extend(pods.iter().filter(|(c, _)| c == component).map(|(_, pod)| (pod.clone(), waited())));
    }
    let steps = steps_of(&left);
    let progress = match teardown::next(&steps, owner, now, ctx.settings.stack_deletion) {
        Next::Wait(progress) => progress,
        Next::Release(why) => {
            released(stack, ctx, &steps, why);
            return Ok(Cleanup::Done);
        }
    };
    if let Some((_, held)) = left.get_mut(progress.step) {
        let deletes = held.drain(..).enumerate().filter(|(i, _)| progress.delete.contains(i)).map(|(_, (_, d))| d);
        futures::future::try_join_all(deletes).await?;
    }
    let previous = stack.status().cloned().unwrap_or_default();
    let (components, reason, message) = build::deletion_status(&steps, &progress, &previous.components);
    let generation = stack.meta().generation;
    let mut conditions = conds::merge(
        &previous.conditions,
        vec![Desired::new(types::READY, false, reason, message)],
        generation,
        ctx.now(),
    );
    // The others (MonitoringAvailable) stay as they were.
    let kept: Vec<Condition> =
        previous.conditions.iter().filter(|c| !conditions.iter().any(|n| n.type_ == c.type_)).cloned().collect();
    conditions.extend(kept.into_iter().filter(|c| c.type_ != types::RECONCILING && c.type_ != types::STALLED));
    let status = StackStatus {
        observed_generation: generation,
        phase: Some(bosun_api::stack::Phase::Deleting),
        components,
        conditions,
        ..previous.clone()
    };
    if update_status(ctx, K::CONTROLLER, stack, &status).await? {
        let owner = stack.object_ref(&());
        let stuck = [reasons::DELETION_STUCK];
        ctx.events.condition_failed(&owner, None, types::READY, &stuck, &previous.conditions, &status.conditions);
    }
    // No watch tells of pods: while the step waits for some, look again each second.
    let waits_for_pods = steps.get(progress.step).is_some_and(|s| s.left.iter().any(|l| l.kind == "Pod"));
    Ok(Cleanup::Pending(if waits_for_pods { progress.look_again.min(POD_LOOK) } else { progress.look_again }))
}

/// How often a step that waits for pods to stop is looked at.
const POD_LOOK: Duration = Duration::from_secs(1);

/// The pods of `stack`'s components that are still there, with their component: a
/// Deployment deleted in the foreground is gone once its ReplicaSets are, while their
/// pods may still be stopping (a grace period of seconds on a real node).
async fn stopping_pods<K: StackKind>(stack: &K, ctx: &Context) -> Result<Vec<(&'static str, Left)>, Error> {
    let ns = stack.namespace().unwrap_or_default();
    let plan = stack.plan();
    let mut labels = plan.selector(build::FRONTEND_COMPONENT);
    labels.remove(build::COMPONENT_LABEL);
    let pods =
        crate::read::pods_labelled(&ctx.client, &ns, &labels, &format!("the pods of stack {ns}/{}", plan.name)).await?;
    Ok(pods
        .iter()
        .filter_map(|pod| {
            let component = pod.labels().get(build::COMPONENT_LABEL)?;
            let step = build::DELETION_ORDER.iter().find(|c| *c == component)?;
            let meta = &pod.metadata;
            let since = meta.deletion_timestamp.as_ref().map(|t| t.0);
            Some((*step, Left::new("Pod", pod.name_any(), since, meta.finalizers.as_deref().unwrap_or_default())))
        })
        .collect())
}

/// A pod is not bosun's to delete: its workload's deletion takes it; the step waits.
fn waited<'a>() -> Delete<'a> {
    Box::pin(async { Ok(()) })
}

/// The ordered deletion of `stack` ends (`why`): said in the log, and in a Warning
/// event when a step was given up.
fn released<K: StackKind>(stack: &K, ctx: &Context, steps: &[Step], why: Release) {
    let (ns, name) = (stack.namespace().unwrap_or_default(), stack.name_any());
    match why {
        Release::Done => info!(controller = K::CONTROLLER, namespace = ns, object = name, "deleted in order"),
        Release::NamespaceTerminating => info!(
            controller = K::CONTROLLER,
            namespace = ns,
            object = name,
            "the namespace is being deleted: Kubernetes deletes everything in it at once; finalizer removed"
        ),
        Release::Propagation(policy) => info!(
            controller = K::CONTROLLER,
            namespace = ns,
            object = name,
            policy,
            "deleted with a propagation of the user's choice: finalizer removed, the garbage collector goes on"
        ),
        Release::TimedOut(progress) => {
            let component = steps.get(progress.step).map_or("", |s| s.name);
            let note = format!(
                "gave up waiting for the {component} after {}s: being deleted since {}: {}; the finalizer is \
                 removed, and the garbage collector deletes the rest of the stack",
                ctx.settings.stack_deletion.timeout.as_secs(),
                progress.since,
                progress.left(steps),
            );
            warn!(controller = K::CONTROLLER, namespace = ns, object = name, %note, "ordered deletion given up");
            ctx.events.deletion_given_up(&stack.object_ref(&()), reasons::DELETION_TIMED_OUT, note);
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use serde_json::{Value, json};

    use super::*;
    use crate::mock;

    fn platform(database: &str) -> Arc<EcommercePlatform> {
        let p = json!({
            "apiVersion": "platform.example.com/v1", "kind": "EcommercePlatform",
            "metadata": {"name": "store", "namespace": "shop", "uid": "uid-store", "generation": 1,
                         "finalizers": [PLATFORM_FINALIZER]},
            "spec": {"environment": "production",
                     "frontend": {"replicas": 2, "image": "shop/frontend:1"}, "backend": {"replicas": 2, "image": "shop/backend:1"},
                     "database": {"type": database, "version": if database == "mysql" { "8.0" } else { "15" }, "storage": "1Gi"},
                     "cache": {"enabled": false}, "monitoring": {"enabled": true}},
        });
        Arc::new(serde_json::from_value(p).unwrap())
    }

    /// The stack's caches; the ServiceMonitor CRD installed when `monitoring`.
    fn children(postgresqls: Vec<PostgreSQL>, monitoring: bool) -> Children {
        let (monitor_crd, mut writer): (_, Writer<CustomResourceDefinition>) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        if monitoring {
            let crd = json!({"metadata": {"name": SERVICE_MONITOR_CRD},
                             "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced", "versions": [],
                                      "names": {"kind": "ServiceMonitor", "plural": "servicemonitors"}}});
            writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(crd).unwrap()));
        }
        Children {
            postgresqls: mock::cache(postgresqls),
            statefulsets: mock::cache([]),
            deployments: mock::cache([]),
            services: mock::cache([]),
            secrets: mock::cache([]),
            ingresses: mock::cache([]),
            backups: mock::cache([]),
            monitors: mock::cache([]),
            monitor_crd,
        }
    }

    #[tokio::test]
    async fn a_database_type_change_is_refused_and_nothing_but_status_is_written() {
        let p = platform("mysql");
        let pg = build::desired_postgresql(p.as_ref(), &platform("postgresql").plan()).unwrap();
        let (ctx, calls) = mock::context(mock::answer(p.as_ref()));
        let outcome = reconcile(p, ctx, children(vec![pg], false)).await.unwrap();
        assert!(
            matches!(outcome, Outcome::Refused { reason: reasons::DATABASE_TYPE_CHANGE_REFUSED, .. }),
            "{outcome:?}"
        );
        assert_eq!(
            calls.writes(),
            ["PATCH /apis/platform.example.com/v1/namespaces/shop/ecommerceplatforms/store/status"]
        );
    }

    #[tokio::test]
    async fn someone_elses_service_monitor_is_reported_and_left_alone() {
        let p = platform("postgresql");
        let answer = mock::answer(p.as_ref());
        let api = move |call: &mock::Call| -> (u16, Value) {
            if !call.path.contains("/servicemonitors/") {
                return answer(call);
            }
            if call.method == "GET" {
                let theirs = json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                                    "metadata": {"name": "store", "namespace": "shop", "uid": "uid-theirs"}});
                return (200, theirs);
            }
            // The create-only apply finds the name taken.
            mock::refused(409, "Conflict", "the object has been modified")
        };
        let (ctx, calls) = mock::context(api);
        reconcile(p, ctx, children(vec![], true)).await.unwrap();
        assert_eq!(mock::condition(&calls, "MonitoringAvailable"), "False/NameConflict");
        let monitor_writes: Vec<_> = calls.writes().into_iter().filter(|w| w.contains("servicemonitors")).collect();
        assert_eq!(
            monitor_writes,
            [
                "PATCH /apis/monitoring.coreos.com/v1/namespaces/shop/servicemonitors/store",
                "GET /apis/monitoring.coreos.com/v1/namespaces/shop/servicemonitors/store"
            ],
            "one create-only apply, refused, then a look at whose it is: nothing written over theirs"
        );
    }

    /// A child of the platform `store` (controlled by it, uid `uid-<name>`), as the
    /// cache holds it; being deleted since `deleting` with `finalizers`.
    fn child<C: Child>(kind: &str, api_version: &str, name: &str, deleting: Option<&str>, finalizers: &[&str]) -> C {
        serde_json::from_value(json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                         "deletionTimestamp": deleting, "finalizers": finalizers,
                         "ownerReferences": [{"apiVersion": "platform.example.com/v1", "kind": "EcommercePlatform",
                                              "name": "store", "uid": "uid-store", "controller": true}]},
        }))
        .unwrap()
    }

    fn deployment(name: &str, deleting: Option<&str>, finalizers: &[&str]) -> SlimDeployment {
        child("Deployment", "apps/v1", name, deleting, finalizers)
    }

    fn service(name: &str) -> SlimService {
        child("Service", "v1", name, None, &[])
    }

    /// The whole platform `store` (PostgreSQL, no cache): what a deletion finds.
    fn running_platform(children: &mut Children) {
        let p = platform("postgresql");
        let mut pg = build::desired_postgresql(p.as_ref(), &p.plan()).unwrap();
        pg.metadata.uid = Some("uid-store-db".to_owned());
        children.postgresqls = mock::cache([pg]);
        children.deployments = mock::cache(["store-frontend", "store-backend"].map(|n| deployment(n, None, &[])));
        children.services = mock::cache(["store-frontend", "store-backend"].map(service));
    }

    /// The platform, being deleted since 08:00:00.
    fn deleted(p: &EcommercePlatform, finalizers: &[&str]) -> Arc<EcommercePlatform> {
        let mut p = p.clone();
        p.metadata.deletion_timestamp = serde_json::from_value(json!("2027-01-15T08:00:00Z")).unwrap();
        p.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
        p.metadata.generation = Some(2);
        Arc::new(p)
    }

    fn at(time: &'static str) -> fn() -> jiff::Timestamp {
        match time {
            "08:00:05" => || "2027-01-15T08:00:05Z".parse().unwrap(),
            "08:06:00" => || "2027-01-15T08:06:00Z".parse().unwrap(),
            _ => unreachable!(),
        }
    }

    /// The apiserver for a stack being deleted: deletes succeed, the finalizer's JSON
    /// patch returns the stack, anything else as [`mock::answer`].
    fn apiserver(p: &EcommercePlatform) -> impl Fn(&mock::Call) -> (u16, Value) + Send + Sync + 'static {
        let answer = mock::answer(p);
        let stored = serde_json::to_value(p).unwrap();
        move |call| {
            if call.method == "DELETE" {
                return (200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}));
            }
            // No pod of the stack is left, unless a test says so.
            if call.method == "GET" && call.path.starts_with("/api/v1/namespaces/shop/pods") {
                return (200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}));
            }
            // The finalizer's apply or JSON patch of the stack itself answers with the stack.
            if call.method == "PATCH" && call.path.split('?').next().is_some_and(|p| p.ends_with("/store")) {
                return (200, stored.clone());
            }
            answer(call)
        }
    }

    fn with_clock(ctx: Arc<Context>, clock: fn() -> jiff::Timestamp) -> Arc<Context> {
        let mut ctx = Arc::into_inner(ctx).unwrap();
        ctx.clock = clock;
        Arc::new(ctx)
    }

    #[tokio::test]
    async fn a_stack_without_the_finalizer_gets_it_in_one_patch_before_any_child() {
        let mut p = (*platform("postgresql")).clone();
        p.metadata.finalizers = None;
        let (ctx, calls) = mock::context(apiserver(&p));
        reconcile(Arc::new(p), ctx, children(vec![], false)).await.unwrap();
        let writes = calls.writes();
        assert_eq!(writes[0], "PATCH /apis/platform.example.com/v1/namespaces/shop/ecommerceplatforms/store");
        let body = calls.body("/ecommerceplatforms/store").unwrap();
        assert_eq!(body["metadata"]["finalizers"], json!([PLATFORM_FINALIZER]));
        assert_eq!(body["metadata"]["uid"], "uid-store", "that very object only");
        assert_eq!(body.get("spec"), None, "the finalizer alone");
        assert!(writes[1].contains("/postgresqls/store-db"), "then the children: {writes:?}");

        // With the finalizer, the stack itself is never written again.
        let (ctx, calls) = mock::context(mock::answer(platform("postgresql").as_ref()));
        reconcile(platform("postgresql"), ctx, children(vec![], false)).await.unwrap();
        assert!(!calls.writes().iter().any(|w| w.ends_with("/ecommerceplatforms/store")), "{:?}", calls.writes());
    }

    #[tokio::test]
    async fn a_deleted_stack_deletes_its_frontend_first_in_the_foreground_and_says_so() {
        let p = deleted(&platform("postgresql"), &[PLATFORM_FINALIZER]);
        let (ctx, calls) = mock::context(apiserver(p.as_ref()));
        let ctx = with_clock(ctx, at("08:00:05"));
        let mut children = children(vec![], false);
        running_platform(&mut children);
        let outcome = reconcile(p, ctx, children).await.unwrap();
        assert!(matches!(outcome, Outcome::Requeue(_)), "{outcome:?}");
        let mut writes = calls.writes();
        // The deletes of one step go together, in any order.
        writes[2..4].sort();
        assert_eq!(
            writes,
            [
                "GET /api/v1/namespaces/shop",
                "GET /api/v1/namespaces/shop/pods",
                "DELETE /api/v1/namespaces/shop/services/store-frontend",
                "DELETE /apis/apps/v1/namespaces/shop/deployments/store-frontend",
                "PATCH /apis/platform.example.com/v1/namespaces/shop/ecommerceplatforms/store/status",
            ],
            "the frontend alone; the backend and the database wait"
        );
        let delete = calls.body("/deployments/store-frontend").unwrap();
        assert_eq!(delete["propagationPolicy"], "Foreground", "gone means gone with its pods");
        assert_eq!(delete["preconditions"]["uid"], "uid-store-frontend");
        let status = calls.body("/status").unwrap()["status"].clone();
        assert_eq!(status["phase"], "Deleting");
        assert_eq!(mock::condition(&calls, "Ready"), "False/Deleting");
        let components = status["components"].as_array().unwrap();
        let frontend = components.iter().find(|c| c["name"] == "frontend").unwrap();
        assert_eq!(
            frontend["message"],
            "being deleted since 2027-01-15T08:00:05Z: Deployment store-frontend, Service store-frontend"
        );
    }

    #[tokio::test]
    async fn a_frontend_being_deleted_holds_the_backend_back_and_is_given_up_after_the_bound() {
        let p = deleted(&platform("postgresql"), &[PLATFORM_FINALIZER]);
        let mut children = children(vec![], false);
        running_platform(&mut children);
        let held =
            deployment("store-frontend", Some("2027-01-15T08:00:01Z"), &["foregroundDeletion", "example.com/hold"]);
        children.deployments = mock::cache([held, deployment("store-backend", None, &[])]);
        children.services = mock::cache([service("store-backend")]);

        let (ctx, calls) = mock::context(apiserver(p.as_ref()));
        reconcile(p.clone(), with_clock(ctx, at("08:00:05")), children.clone()).await.unwrap();
        assert!(!calls.writes().iter().any(|w| w.starts_with("DELETE")), "nothing deleted twice, nothing after it");
        let status = calls.body("/status").unwrap()["status"].clone();
        let frontend = status["components"].as_array().unwrap().iter().find(|c| c["name"] == "frontend").cloned();
        assert_eq!(
            frontend.unwrap()["message"],
            "being deleted since 2027-01-15T08:00:01Z: Deployment store-frontend (held by finalizer example.com/hold)"
        );

        // Five minutes on: the finalizer goes, exactly it, and nothing else is deleted.
        let (ctx, calls) = mock::context(apiserver(p.as_ref()));
        reconcile(p, with_clock(ctx, at("08:06:00")), children).await.unwrap();
        assert_eq!(
            calls.writes(),
            [
                "GET /api/v1/namespaces/shop",
                "GET /api/v1/namespaces/shop/pods",
                "PATCH /apis/platform.example.com/v1/namespaces/shop/ecommerceplatforms/store"
            ]
        );
        let patch = calls.body("/ecommerceplatforms/store").unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-store"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": PLATFORM_FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[tokio::test]
    async fn a_frontend_whose_pods_still_stop_holds_the_backend_back_and_is_looked_at_each_second() {
        let p = deleted(&platform("postgresql"), &[PLATFORM_FINALIZER]);
        let mut children = children(vec![], false);
        running_platform(&mut children);
        // The frontend's Deployment and Service are gone; one of its pods still stops.
        children.deployments = mock::cache([deployment("store-backend", None, &[])]);
        children.services = mock::cache([service("store-backend")]);
        let answer = apiserver(p.as_ref());
        let api = move |call: &mock::Call| {
            if call.method == "GET" && call.path.starts_with("/api/v1/namespaces/shop/pods") {
                assert!(call.path.contains("labelSelector="), "the stack's pods only: {}", call.path);
                let pod = json!({"metadata": {"name": "store-frontend-7d9f-abcde", "namespace": "shop",
                    "deletionTimestamp": "2027-01-15T08:00:02Z",
                    "labels": {"app.kubernetes.io/component": "frontend"}}});
                return (200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod]}));
            }
            answer(call)
        };
        let (ctx, calls) = mock::context(api);
        let outcome = reconcile(p, with_clock(ctx, at("08:00:05")), children).await.unwrap();
        assert_eq!(outcome, Outcome::Requeue(Duration::from_secs(1)), "no watch tells of pods");
        assert!(!calls.writes().iter().any(|w| w.starts_with("DELETE")), "{:?}", calls.writes());
        let status = calls.body("/status").unwrap()["status"].clone();
        let frontend = status["components"].as_array().unwrap().iter().find(|c| c["name"] == "frontend").cloned();
        assert_eq!(
            frontend.unwrap()["message"],
            "being deleted since 2027-01-15T08:00:02Z: Pod store-frontend-7d9f-abcde (stopping)"
        );
    }

    #[tokio::test]
    async fn nothing_is_decided_before_the_caches_have_listed() {
        let p = deleted(&platform("postgresql"), &[PLATFORM_FINALIZER]);
        let (ctx, calls) = mock::context(apiserver(p.as_ref()));
        let mut children = children(vec![], false);
        // Empty, but not listed yet: nothing says the children are gone.
        children.deployments = Owned::new(reflector::store().0);
        let outcome = reconcile(p, with_clock(ctx, at("08:00:05")), children).await.unwrap();
        assert_eq!(outcome, Outcome::Requeue(Duration::from_secs(1)));
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());
    }

    #[tokio::test]
    async fn once_everything_is_gone_the_finalizer_goes() {
        let p = deleted(&platform("postgresql"), &["example.com/theirs", PLATFORM_FINALIZER]);
        let (ctx, calls) = mock::context(apiserver(p.as_ref()));
        reconcile(p, with_clock(ctx, at("08:00:05")), children(vec![], false)).await.unwrap();
        let patch = calls.body("/ecommerceplatforms/store").unwrap();
        assert_eq!(patch[2], json!({"op": "remove", "path": "/metadata/finalizers/1"}), "theirs stays");
        assert!(!calls.writes().iter().any(|w| w.ends_with("/status")), "no status for a stack that goes");
    }

    #[tokio::test]
    async fn a_terminating_namespace_or_an_orphaning_delete_releases_at_once() {
        let terminating = |call: &mock::Call| -> Option<(u16, Value)> {
            (call.method == "GET" && call.path.starts_with("/api/v1/namespaces/shop")).then(|| {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"},
                             "status": {"phase": "Terminating"}}),
                )
            })
        };
        for (finalizers, namespace_terminating) in
            [(vec![PLATFORM_FINALIZER], true), (vec!["orphan", PLATFORM_FINALIZER], false)]
        {
            let p = deleted(&platform("postgresql"), &finalizers);
            let answer = apiserver(p.as_ref());
            let api = move |call: &mock::Call| {
                namespace_terminating.then(|| terminating(call)).flatten().unwrap_or_else(|| answer(call))
            };
            let (ctx, calls) = mock::context(api);
            let mut children = children(vec![], false);
            running_platform(&mut children);
            reconcile(p, with_clock(ctx, at("08:00:05")), children).await.unwrap();
            let writes = calls.writes();
            assert!(!writes.iter().any(|w| w.starts_with("DELETE")), "{writes:?}");
            assert_eq!(
                writes.last().map(String::as_str),
                Some("PATCH /apis/platform.example.com/v1/namespaces/shop/ecommerceplatforms/store")
            );
        }
    }
}
