//! The WebApp controller: one implementation serving `apps.example.com/v1` and
//! `example.com/v1`.
//!
//! Pipeline: build the Deployment and Service (pure) → apply those that drifted from
//! what bosun last applied (concurrently, once the Deployment exists) → compute status
//! from the Deployment as applied or cached → write it only if it changed.

use bosun_resources::slim::{SlimDeployment, SlimService};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bosun_api::conditions::reasons;
use bosun_api::webapp::Phase;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use bosun_resources::conditions::Refused;
use bosun_resources::webapp::{self as build, Observed};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::apply::apply_child;
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::guard::Guarded;
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "webapp";

/// What this controller does with the API: both WebApp groups, their Deployments
/// and Services.
pub const PERMISSIONS: &[Permission] = &{
    let [a0, a1, a2] = permissions::reconciled("apps.example.com", "webapps");
    let [e0, e1, e2] = permissions::reconciled("example.com", "webapps");
    [
        a0,
        a1,
        a2,
        e0,
        e1,
        e2,
        Permission::new("apps", "deployments", permissions::OWN),
        Permission::new("", "services", permissions::OWN),
    ]
};

/// The webapp controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::of::<apps_v1::WebApp>(), Type::of::<example_v1::WebApp>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the WebApp controllers of both groups in `namespace` (or cluster-wide). They
/// share one watch and cache of Deployments and one of Services.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = futures::FutureExt::shared(shutdown);
    let ns = namespace.as_deref();
    let (deployments, [d_apps, d_example]) = shared::<SlimDeployment>(&ctx, ns);
    let (services, [s_apps, s_example]) = shared::<SlimService>(&ctx, ns);
    let children = Children { deployments, services };
    futures::join!(
        run_group::<apps_v1::WebApp>(ctx.clone(), ns, concurrency, shutdown.clone(), children.clone(), d_apps, s_apps),
        run_group::<example_v1::WebApp>(ctx.clone(), ns, concurrency, shutdown, children, d_example, s_example),
    );
}

/// One watch of `C` for the two groups.
fn shared<C: crate::children::Child>(ctx: &Context, ns: Option<&str>) -> (Owned<C>, [Changes<C>; 2]) {
    let owners = [
        (&*apps_v1::WebApp::kind(&()), &*apps_v1::WebApp::api_version(&())),
        (&*example_v1::WebApp::kind(&()), &*example_v1::WebApp::api_version(&())),
    ];
    let (owned, changes) = wiring::watch_children::<C>(ctx, ns, &owners);
    let [apps, example]: [Changes<C>; 2] = match changes.try_into() {
        Ok(pair) => pair,
        Err(_) => unreachable!("watch_children returns one stream per consumer"),
    };
    (owned, [apps, example])
}

type Changes<C> = futures::channel::mpsc::UnboundedReceiver<C>;

async fn run_group<K: WebAppKind>(
    ctx: Arc<Context>,
    ns: Option<&str>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    children: Children,
    deployments: Changes<SlimDeployment>,
    services: Changes<SlimService>,
) {
    let (woken, wakes) = futures::channel::mpsc::unbounded();
    let ctrl = wiring::controller_for::<K>(CONTROLLER, &ctx, ns);
    let ctrl = wiring::owns::<K, SlimDeployment>(ctrl, deployments);
    let ctrl = wiring::owns::<K, SlimService>(ctrl, services);
    let ctrl = ctrl.reconcile_on(wakes);
    wiring::drive(CONTROLLER, ctrl, concurrency, ctx, shutdown, move |webapp, ctx| {
        reconcile(webapp, ctx, children.clone(), woken.clone())
    })
    .await;
}

/// Where a WebApp waiting for a rollout slot is woken: its controller's queue.
type Woken<K> = futures::channel::mpsc::UnboundedSender<ObjectRef<Guarded<K>>>;

/// The caches of a WebApp's children.
#[derive(Clone, Debug)]
struct Children {
    deployments: Owned<SlimDeployment>,
    services: Owned<SlimService>,
}

async fn reconcile<K: WebAppKind>(
    webapp: Arc<K>,
    ctx: Arc<Context>,
    children: Children,
    woken: Woken<K>,
) -> Result<Outcome, Error> {
    let webapp = webapp.as_ref();
    let (deployment, refused) = match apply_children(webapp, &ctx, &children, woken).await {
        Ok(Step::Applied(deployment)) => (Some(*deployment), None),
        Ok(Step::Created) => return Ok(Outcome::Yielded),
        Ok(Step::Waiting) => return Ok(Outcome::Waiting(ctx.rollouts.recheck())),
        Err(Error::NameConflict(message)) => (None, Some((reasons::NAME_CONFLICT, message))),
        Err(err) if err.is_invalid_spec() => {
            // What still runs of the last good spec, if this WebApp's.
            let ns = webapp.namespace().unwrap_or_default();
            let current = children.deployments.get(&ns, &webapp.name_any()).map(|d| (*d).clone());
            (current.filter(|d| controlled_by(d, webapp)), Some((reasons::INVALID_SPEC, err.user_message())))
        }
        Err(err) => return Err(err),
    };
    let observed = Observed {
        deployment: deployment.as_ref(),
        refused: refused.as_ref().map(|(reason, message)| Refused { reason, message }),
    };
    let status = build::status(webapp, observed, ctx.now());
    if status.phase != Some(Phase::Deploying) {
        // Running, failed, or never created: no first rollout of this WebApp's holds a slot.
        ctx.rollouts.release(&rollout_key(webapp), Instant::now());
    }
    let announce = update_status(&ctx, CONTROLLER, webapp, &status).await?;
    Ok(Outcome::of(refused, announce))
}

/// What [`apply_children`] did.
enum Step {
    /// The Deployment (as applied) and the Service are as desired.
    Applied(Box<SlimDeployment>),
    /// This reconcile created the Deployment; the Service follows in the next one.
    Created,
    /// The Deployment is not created yet: too many first rollouts are in flight.
    Waiting,
}

/// The key of a WebApp's first rollout in the window: its Deployment's namespace and name.
fn rollout_key<K: WebAppKind>(webapp: &K) -> String {
    format!("{}/{}", webapp.namespace().unwrap_or_default(), webapp.name_any())
}

/// Bring the Deployment and the Service to their desired state.
///
/// Once the Deployment is this WebApp's, both are applied at once. A Deployment bosun
/// does not know yet goes first and alone: a name someone else holds stops the WebApp
/// before a Service selecting their pods is created, and a new WebApp's pods start
/// without waiting for its Service's ClusterIP (allocated one at a time by the
/// apiserver) — nor for the Services of WebApps created before it. And it is created
/// only when the process's window of first rollouts in flight has room
/// ([`crate::window`]): otherwise the WebApp waits in line and `woken` brings it back.
async fn apply_children<K: WebAppKind>(
    webapp: &K,
    ctx: &Context,
    children: &Children,
    woken: Woken<K>,
) -> Result<Step, Error> {
    let deployment = build::desired_deployment(webapp);
    let service = build::desired_service(webapp);
    let ns = webapp.namespace().unwrap_or_default();
    let known =
        children.deployments.get(&ns, &deployment.name_any()).is_some_and(|d| controlled_by(d.as_ref(), webapp));
    if !known {
        let key = rollout_key(webapp);
        let me = ObjectRef::new(&webapp.name_any()).within(&ns);
        if !ctx.rollouts.admit(&key, Instant::now(), move || drop(woken.unbounded_send(me))) {
            return Ok(Step::Waiting);
        }
        let deployment = apply_child(ctx, webapp, &children.deployments, deployment)
            .await
            .inspect_err(|_| ctx.rollouts.release(&key, Instant::now()))?;
        if children.services.get(&ns, &service.name_any()).is_none() {
            return Ok(Step::Created);
        }
        // The Service exists (the Deployment was deleted, or is being adopted after
        // --cascade=orphan): nothing slow to wait for.
        apply_child(ctx, webapp, &children.services, service).await?;
        return Ok(Step::Applied(Box::new(deployment)));
    }
    let (deployment, _) = futures::try_join!(
        apply_child(ctx, webapp, &children.deployments, deployment),
        apply_child(ctx, webapp, &children.services, service),
    )?;
    Ok(Step::Applied(Box::new(deployment)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mock;

    fn webapp() -> Arc<apps_v1::WebApp> {
        let w = json!({
            "apiVersion": "apps.example.com/v1", "kind": "WebApp",
            "metadata": {"name": "web", "namespace": "shop", "uid": "uid-webapp", "generation": 1},
            "spec": {"image": "nginx:1.25", "replicas": 2, "port": 80},
        });
        Arc::new(serde_json::from_value(w).unwrap())
    }

    /// What bosun's own watch holds of a child it applied to this WebApp.
    fn ours<C: crate::children::Child>(mut child: C) -> C {
        child.meta_mut().uid = Some(format!("uid-{}", child.name_any()));
        child.meta_mut().resource_version = Some("5".to_owned());
        child
    }

    /// A queue nobody reads: where a WebApp in line would be woken.
    fn woken() -> Woken<apps_v1::WebApp> {
        futures::channel::mpsc::unbounded().0
    }

    const DEPLOYMENT: &str = "PATCH /apis/apps/v1/namespaces/shop/deployments/web";
    const SERVICE: &str = "PATCH /api/v1/namespaces/shop/services/web";
    const STATUS: &str = "PATCH /apis/apps.example.com/v1/namespaces/shop/webapps/web/status";

    #[tokio::test]
    async fn a_new_webapps_deployment_goes_first_and_alone() {
        let (ctx, calls) = mock::context(mock::answer(webapp().as_ref()));
        let children = Children { deployments: mock::cache([]), services: mock::cache([]) };
        let outcome = reconcile(webapp(), ctx, children, woken()).await.unwrap();
        assert_eq!(outcome, Outcome::Yielded);
        assert_eq!(calls.writes(), [DEPLOYMENT], "the Service and the status wait for the next reconcile");
        let applied = calls.body(DEPLOYMENT).unwrap();
        assert_eq!(applied["metadata"]["resourceVersion"], "9223372036854775807", "create only: the name was free");
    }

    #[tokio::test]
    async fn once_the_deployment_is_its_own_both_children_and_the_status_are_written() {
        let (ctx, calls) = mock::context(mock::answer(webapp().as_ref()));
        let w = webapp();
        let children = Children {
            deployments: mock::cache([ours(SlimDeployment::from(build::desired_deployment(w.as_ref())))]),
            services: mock::cache([]),
        };
        let outcome = reconcile(w, ctx, children, woken()).await.unwrap();
        assert_eq!(outcome, Outcome::Applied);
        let mut writes = calls.writes();
        assert_eq!(writes.pop().as_deref(), Some(STATUS), "the status comes from what was applied");
        writes.sort();
        assert_eq!(writes, [SERVICE, DEPLOYMENT], "both at once");
        let applied = calls.body(DEPLOYMENT).unwrap();
        assert_eq!(applied["metadata"]["uid"], "uid-web", "only that very Deployment");
    }

    #[tokio::test]
    async fn a_deployment_of_someone_elses_is_a_name_conflict_and_nothing_is_written_but_status() {
        let (ctx, calls) = mock::context(mock::answer(webapp().as_ref()));
        let w = webapp();
        let mut theirs = ours(SlimDeployment::from(build::desired_deployment(w.as_ref())));
        theirs.metadata.owner_references = None;
        let children = Children { deployments: mock::cache([theirs]), services: mock::cache([]) };
        let outcome = reconcile(w, ctx, children, woken()).await.unwrap();
        assert!(matches!(outcome, Outcome::Refused { reason: reasons::NAME_CONFLICT, .. }), "{outcome:?}");
        assert_eq!(calls.writes(), [STATUS]);
        assert_eq!(mock::condition(&calls, "Ready"), "False/NameConflict");
    }

    #[tokio::test]
    async fn a_full_window_holds_a_new_deployment_back_until_a_first_rollout_ends() {
        use crate::window::{DEFAULT_HOLD, Window};
        let (mut ctx, calls) = mock::context(mock::answer(webapp().as_ref()));
        Arc::get_mut(&mut ctx).unwrap().rollouts = Arc::new(Window::new(1, DEFAULT_HOLD));
        assert!(ctx.rollouts.admit("shop/other", Instant::now(), || {}));
        let (woken, mut wakes) = futures::channel::mpsc::unbounded();
        let children = Children { deployments: mock::cache([]), services: mock::cache([]) };

        let outcome = reconcile(webapp(), ctx.clone(), children.clone(), woken.clone()).await.unwrap();
        assert_eq!(outcome, Outcome::Waiting(DEFAULT_HOLD));
        assert!(calls.writes().is_empty(), "nothing created and no status written while in line");
        assert!(wakes.try_recv().is_err(), "not woken while the window is full");

        // The other WebApp's rollout ended: this one is woken, and creates its Deployment.
        ctx.rollouts.release("shop/other", Instant::now());
        assert_eq!(wakes.try_recv().unwrap(), ObjectRef::new("web").within("shop"));
        let outcome = reconcile(webapp(), ctx.clone(), children, woken).await.unwrap();
        assert_eq!(outcome, Outcome::Yielded);
        assert_eq!(calls.writes(), [DEPLOYMENT]);
        assert_eq!(ctx.rollouts.gauges().0.get(), 1, "its creation holds the slot");
    }

    #[tokio::test]
    async fn a_webapp_whose_deployment_is_available_gives_its_slot_back() {
        let answer = mock::answer(webapp().as_ref());
        // The apiserver answers the Deployment's apply with its rollout done.
        let (ctx, calls) = mock::context(move |call| {
            let (code, mut body) = answer(call);
            if call.path.contains("/deployments/") {
                body["status"] = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                    "readyReplicas": 2, "availableReplicas": 2});
            }
            (code, body)
        });
        let w = webapp();
        assert!(ctx.rollouts.admit("shop/web", Instant::now(), || {}));
        let deployment = ours(SlimDeployment::from(build::desired_deployment(w.as_ref())));
        let children = Children { deployments: mock::cache([deployment]), services: mock::cache([]) };
        reconcile(w, ctx.clone(), children, woken()).await.unwrap();
        assert_eq!(mock::condition(&calls, "Ready"), "True/Available");
        assert_eq!(ctx.rollouts.gauges().0.get(), 0);
    }
}
