//! The PostgreSQL controller.
//!
//! Pipeline: check the change against the data (pure: major version, storage) → a
//! major upgrade's next step when `spec.version` was raised ([`crate::upgrade`]: it
//! says which major the instances run, and whether they are stopped) → the
//! credentials Secret (created once, then only read) → the StatefulSet → the Services
//! → grow the data claims → the primary: fail over when it is lost, label the
//! instances' roles ([`crate::failover`]) → the Backup, once Ready → an instance
//! whose only data is on a lost node: reported, replaced when asked ([`crate::lost`])
//! → status from the StatefulSet, the primary and the Backup → write it only if it
//! changed → look again in five minutes (sooner while an instance is not ready).
//!
//! Every child carries `app.kubernetes.io/name=postgresql` and the PostgreSQL's name as
//! `app.kubernetes.io/instance`; one watch per kind selects them and maps each change
//! back by that label, because the children that hold data — the Secret, the data
//! claims (made by the StatefulSet), the claim of dumps — have no owner: deleting the
//! PostgreSQL never deletes them (`spec.deletionPolicy: Delete` lets the StatefulSet
//! take the data claims). Nothing here regenerates a password: a Secret that exists is
//! used as it is, and one that is gone while data exists is a refusal, not a new one.

use bosun_resources::slim::{SlimDeployment, SlimService};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bosun_api::backup::Backup;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::postgresql::ServerCertificate;
use bosun_instance::status::Status;
use bosun_resources::instances as instance_api;
use bosun_resources::postgresql::{self as build, Observed, Refusal};
use bosun_resources::provided;
use bosun_resources::upgrade::{Plan, data_version, plan};
use futures::channel::mpsc::UnboundedReceiver;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apply::{apply_child, create_if_absent, delete_child, merge_into};
use crate::children::{Child, Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::failover;
use crate::instances::Instances;
use crate::kinds::{Served, Type};
use crate::metrics::Gauges;
use crate::permissions::{self, Permission};
use crate::pooler;
use crate::status::update_status;
use crate::upgrade::{self, Running};
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "postgresql";

/// How often a database is looked at without any event: a pod's role label, a claim
/// the storage provider has not grown yet. Writes nothing when nothing changed.
pub const RECHECK: Duration = Duration::from_secs(300);

/// What this controller does with the API.
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("database.example.com", "postgresqls");
    [
        a,
        b,
        c,
        Permission::new("apps", "statefulsets", permissions::OWN),
        // The pooler's (spec.pooler), and deleted when it goes.
        Permission::new("apps", "deployments", permissions::OWN),
        Permission::new("apps", "deployments", &["delete"]),
        Permission::new("", "services", permissions::OWN),
        Permission::new("backup.example.com", "backups", permissions::OWN),
        // A Backup when backups are turned off; the `-ro` Service when one instance is left.
        Permission::new("backup.example.com", "backups", &["delete"]),
        Permission::new("", "services", &["delete"]),
        // The credentials and the application's: created once, read (a user's own Secret
        // is not watched), never updated. The instances' API Secret and the CA's
        // (bosun's own): created, renewed in place.
        Permission::new("", "secrets", &["create", "get", "list", "watch", "patch"]),
        // Data claims grown in place; the claim of dumps created once; the data claim
        // of an instance whose data is only on a lost node, deleted when the user asks
        // (crate::lost).
        Permission::new("", "persistentvolumeclaims", &["create", "delete", "get", "list", "watch", "patch"]),
        // Such an instance found (its volume's node affinity, its node's readiness), and
        // its volume kept (Retain) when it is replaced.
        Permission::new("", "persistentvolumes", &["get", "patch"]),
        Permission::new("", "nodes", &["get"]),
        // The role label of each instance: the instance acts on it, the Services select it.
        // Each instance restarted in turn by a rolling change (the StatefulSet is OnDelete).
        Permission::new("", "pods", &["list", "watch", "patch", "delete"]),
        // Why an instance that does not start waits (a volume that does not mount).
        Permission::new("", "events", &["list"]),
        // A major upgrade: its Job; the backup run before it, from the Backup's CronJob.
        Permission::new("batch", "jobs", permissions::OWN),
        Permission::new("batch", "cronjobs", &["get"]),
    ]
};

/// The caches of a PostgreSQL's children.
#[derive(Clone, Debug)]
struct Children {
    statefulsets: Owned<StatefulSet>,
    deployments: Owned<SlimDeployment>,
    services: Owned<SlimService>,
    secrets: Owned<Secret>,
    claims: Owned<PersistentVolumeClaim>,
    backups: Owned<Backup>,
    pods: Owned<Pod>,
    jobs: Owned<Job>,
    /// What the watchdog heard ([`failover::watch_instances`]): silent and fenced instances.
    silences: failover::Silences,
}

/// The postgresql controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::of::<PostgreSQL>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the PostgreSQL controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let ctrl = wiring::controller_for::<PostgreSQL>(CONTROLLER, &ctx, ns);
    tokio::spawn(gauges(&ctx).export(ctrl.store()));
    let (statefulsets, ctrl) = watched(&ctx, ns, ctrl);
    let (deployments, ctrl) = watched(&ctx, ns, ctrl);
    let (services, ctrl) = watched(&ctx, ns, ctrl);
    let (secrets, ctrl) = watched(&ctx, ns, ctrl);
    let (claims, ctrl) = watched(&ctx, ns, ctrl);
    let (backups, ctrl) = watched(&ctx, ns, ctrl);
    let (pods, ctrl) = watched(&ctx, ns, ctrl);
    let (jobs, ctrl) = watched(&ctx, ns, ctrl);
    let silences = failover::Silences::default();
    let (silent, silent_pods) = futures::channel::mpsc::unbounded();
    let ctrl = wiring::triggered_by::<PostgreSQL, Pod>(ctrl, silent_pods, instance_of);
    let limit = ctx.settings.postgres.unanswered_failover;
    let watched = failover::Watched { databases: ctrl.store(), pods: pods.clone(), secrets: secrets.clone() };
    let watchdog = tokio::spawn(failover::watch_instances(watched, silences.clone(), limit, silent));
    let children = Children { statefulsets, deployments, services, secrets, claims, backups, pods, jobs, silences };
    wiring::drive(CONTROLLER, ctrl, concurrency, ctx, shutdown, move |db, ctx| reconcile(db, ctx, children.clone()))
        .await;
    watchdog.abort();
}

/// The database a child belongs to, by its instance label.
fn instance_of<C: Child>(child: &C) -> Vec<String> {
    child.labels().get("app.kubernetes.io/instance").cloned().into_iter().collect()
}

type Controller = wiring::Triggered<PostgreSQL>;

/// Watch the `C` children of PostgreSQLs and trigger the one each names.
fn watched<C: Child>(ctx: &Context, ns: Option<&str>, ctrl: Controller) -> (Owned<C>, Controller) {
    let (owned, changes): (Owned<C>, UnboundedReceiver<C>) = wiring::watch_app(ctx, ns, build::APP_NAME);
    let ctrl = wiring::triggered_by::<PostgreSQL, C>(ctrl, changes, instance_of);
    (owned, ctrl)
}

async fn reconcile(db: Arc<PostgreSQL>, ctx: Arc<Context>, children: Children) -> Result<Outcome, Error> {
    let db = db.as_ref();
    // When the children were seen: a condition that changes now changed then, before
    // anything this reconcile creates (the Backup comes after Ready, also in time).
    let now = ctx.now();
    let ns = db.namespace().unwrap_or_default();
    let cached = children.statefulsets.get(&ns, &db.name_any()).filter(|s| controlled_by(s.as_ref(), db));
    let claims = children.claims.matching(|c| build::is_data_claim(db, c));
    let claim_refs: Vec<&PersistentVolumeClaim> = claims.iter().map(|c| c.as_ref()).collect();
    let backup = children.backups.get(&ns, &build::backup_name(db)).filter(|b| controlled_by(b.as_ref(), db));
    let instances = failover::instance_pods(db, &children.pods);
    let certificates = instance_access(db, &ctx, &children.secrets, now).await?;
    let refs: Vec<&Pod> = instances.iter().map(|p| p.as_ref()).collect();
    let reach = Instances::new(db, &refs, certificates.access.as_ref());
    // No claim, no data: a new version is simply what the instances will run.
    let data = if claim_refs.is_empty() { None } else { data_version(cached.as_deref(), &claim_refs) };
    let major = match plan(db, data, now) {
        Plan::Upgrade(u) => {
            let seen = upgrade::Seen {
                sts: cached.as_deref(),
                pods: &instances,
                jobs: &children.jobs,
                backups: &children.backups,
                instances: &reach,
            };
            Some(upgrade::advance(db, &ctx, &seen, u, now).await?)
        }
        _ => None,
    };
    let running = Running::of(db, major.as_ref());
    let refused = certificates.refused.clone().map(Refusal::Certificate);
    let served = match refused {
        Some(refusal) => Err(Stop::Refused(refusal)),
        None => serve(db, &ctx, &children, (cached.as_deref(), &claim_refs), running).await,
    };
    let (sts, refusal) = match served {
        Ok(sts) => (Some(sts), None),
        Err(Stop::Refused(refusal)) => (cached.map(|s| (*s).clone()), Some(refusal)),
        Err(Stop::Failed(err)) => return Err(err),
    };
    // Whatever runs keeps a primary, a refused change or not (nothing runs while an
    // upgrade has the instances stopped).
    let primary = match &sts {
        Some(sts) if !running.stopped => Some(
            failover::ensure(CONTROLLER, db, &ctx, (sts, &children.pods), (&reach, &children.silences), now).await?,
        ),
        _ => None,
    };
    let (backup, backup_conflict) = match &refusal {
        Some(_) => (backup.map(|b| (*b).clone()), None),
        None => match backups(db, &ctx, &children, sts.as_ref()).await {
            Ok(backup) => (backup, None),
            Err(Error::NameConflict(message)) => (None, Some(message)),
            Err(err) => return Err(err),
        },
    };
    let pooler = match &refusal {
        Some(_) => None,
        None => {
            let caches = pooler::Caches {
                deployments: &children.deployments,
                services: &children.services,
                secrets: &children.secrets,
            };
            pooler::serve(db, &ctx, caches).await?
        }
    };
    let simulated = instances.iter().find(|p| bosun_resources::pods::simulated(p)).map(|p| p.name_any());
    let primary_says = match &primary {
        Some(p) if asks_primary(db, simulated.as_deref()) => ask_primary(db, &reach, &children.pods, &p.name).await,
        _ => None,
    };
    let archiving = primary_says.as_ref().filter(|_| build::continuous_destination(db).is_some());
    let archiving = archiving.and_then(build::archiver_seen);
    replication_lag(db, &ctx, primary_says.as_ref());
    let stuck = stuck_instance(db, &ctx, &children.pods, now).await?;
    let limit = ctx.settings.postgres.unanswered_failover;
    let lost = crate::lost::find(&ctx, &claim_refs, &instances, |pod| {
        children.silences.unanswered_since(pod, limit).is_some()
    })
    .await;
    let replacing = match (&refusal, &sts) {
        (None, Some(_)) if !running.stopped => {
            let primary = primary.as_ref().map(|p| p.name.as_str());
            crate::lost::replace(db, &ctx, (&instances, &claim_refs), &lost, primary).await?
        }
        _ => None,
    };
    let mut instance_status = build::instances_status(instances.iter().map(|p| p.as_ref()), |pod| {
        children.silences.unanswered_since(pod, limit)
    });
    crate::lost::report(db, &ctx, &mut instance_status, &lost);
    let observed = Observed {
        statefulset: sts.as_ref(),
        refusal: refusal.as_ref(),
        backup: backup.as_ref(),
        backup_conflict: backup_conflict.as_deref(),
        stuck: stuck.as_ref().map(|(_, cause)| cause.as_str()),
        simulated: simulated.as_deref(),
        primary: primary.as_ref().map(|p| p.name.as_str()),
        last_change: primary.as_ref().and_then(|p| p.change.as_ref()),
        archiving: archiving.as_ref(),
        upgrade: major.as_ref(),
        server_certificate: certificates.server.as_ref(),
        pooler: pooler.as_ref(),
        pooler_role: primary
            .as_ref()
            .and_then(|p| children.pods.get(&db.namespace().unwrap_or_default(), &p.name))
            .is_some_and(|pod| build::holds_pooler_password(db, &pod)),
        instances: &instance_status,
    };
    let status = build::status(db, observed, now);
    let announce = update_status(&ctx, CONTROLLER, db, &status).await?;
    gauges(&ctx).set(&PostgreSQL { status: Some(status.clone()), ..db.clone() });
    if let Some(labels) = build::continuous_destination(db).map(|_| database_labels(db)) {
        // The series exists from the first look (at 0), so an alert's increase() sees
        // the first failure too; failures are counted on the look that asked.
        let failures = ctx.metrics.wal_archive_failures.get_or_create(&labels);
        let recent = status.wal_archiving.as_ref().and_then(|a| a.recent_failures).filter(|_| archiving.is_some());
        failures.inc_by(recent.unwrap_or(0).max(0) as u64);
    }
    if announce {
        let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let pod = stuck.map(|(pod, _)| ObjectRef::<Pod>::new(&pod).within(&ns).into());
        use bosun_api::conditions::{postgresql_types, reasons, types};
        for (related, type_, reason) in [
            (pod, types::READY, reasons::INSTANCE_STUCK),
            (None, postgresql_types::WAL_ARCHIVING, reasons::ARCHIVING_FAILED),
        ] {
            ctx.events.condition_failed(&db.object_ref(&()), related, type_, &[reason], previous, &status.conditions);
        }
    }
    expiring_certificate(db, &ctx, certificates.server.as_ref(), now);
    // A look the primary's stage asked for (a failover delay, a standby that may not
    // follow), or the certificates' next step.
    let certificates = certificates
        .due
        .map(|due| Duration::from_secs(u64::try_from((due.as_second() - now.as_second()).max(1)).unwrap_or(1)));
    // A Secret of the user's is not watched: looked at each minute, a renewal reaches
    // the instances within about two (the kubelet's refresh of the volume).
    let certificates = match db.spec.certificates {
        Some(_) => Some(certificates.map_or(PROVIDED_RECHECK, |c| c.min(PROVIDED_RECHECK))),
        None => certificates,
    };
    let soon = |then: Duration| {
        let then = certificates.map_or(then, |c| c.min(then));
        let then = replacing.map_or(then, |r| r.min(then));
        primary.as_ref().and_then(|p| p.recheck).map_or(then, |r| r.min(then))
    };
    Ok(match (refusal, backup_conflict) {
        (Some(r), _) => Outcome::of(Some((r.reason(), r.message())), announce),
        (None, Some(message)) => Outcome::of(Some((bosun_api::conditions::reasons::NAME_CONFLICT, message)), announce),
        (None, None) if major.as_ref().is_some_and(|u| !u.step.ended()) => Outcome::Requeue(upgrade::RECHECK),
        // Not all instances ready: looked at again soon, for one that cannot start, and
        // when the primary's failover delay ends.
        (None, None)
            if !bosun_resources::conditions::is_true(&status.conditions, bosun_api::conditions::types::READY) =>
        {
            Outcome::Requeue(soon(crate::read::POD_RECHECK))
        }
        // The archiver's health and the standbys' lag are asked of the primary on each look.
        (None, None) if asks_primary(db, simulated.as_deref()) => Outcome::Requeue(soon(ARCHIVER_RECHECK)),
        (None, None) => Outcome::Requeue(soon(RECHECK)),
    })
}

/// A Warning on each look while the user's certificate the server serves expires
/// within `--postgres-cert-renew-before` (bosun renews its own by then): cert-manager
/// or whoever provides it has not renewed it.
fn expiring_certificate(db: &PostgreSQL, ctx: &Context, server: Option<&ServerCertificate>, now: Timestamp) {
    let Some(server) = server.filter(|s| s.secret_name != instance_api::secret_name(db)) else { return };
    let Ok(not_after) = server.not_after.parse::<Timestamp>() else { return };
    let left = not_after.as_second() - now.as_second();
    let window = ctx.settings.postgres.certificates.serving_renew_before.as_secs() as i64;
    if left <= window && left > 0 {
        let note = format!(
            "the server's certificate from Secret {} (spec.certificates.serverTLSSecret) expires at {} (in {} h): \
             renew it, or clients that verify it will fail",
            server.secret_name,
            server.not_after,
            left / 3600
        );
        ctx.events.warning(&db.object_ref(&()), bosun_api::conditions::reasons::CERTIFICATE_EXPIRES_SOON, note);
    }
}

/// The gauges of PostgreSQLs ([`read_gauges`]).
fn gauges(ctx: &Context) -> Gauges<PostgreSQL, crate::metrics::DatabaseLabels> {
    let m = &ctx.metrics;
    Gauges {
        families: vec![
            m.server_certificate_expiry.clone(),
            m.wal_last_archived.clone(),
            m.wal_archiving_failing.clone(),
            m.wal_archive_timeout.clone(),
            m.postgresql_instances.clone(),
            m.postgresql_instances_ready.clone(),
        ],
        read: read_gauges,
        gone: Some(m.replication_lag.clone()),
    }
}

/// The gauges of a PostgreSQL from its status: when its server's certificate expires;
/// with continuous archiving, the last archived, failing and archive timeout.
fn read_gauges(db: &PostgreSQL) -> Option<(crate::metrics::DatabaseLabels, Vec<Option<f64>>)> {
    let status = db.status.as_ref();
    let expiry = status
        .and_then(|s| s.server_certificate.as_ref())
        .and_then(|c| c.not_after.parse::<Timestamp>().ok())
        .map(|t| t.as_second() as f64);
    let mut values = vec![expiry];
    values.extend(archiving_gauges(db).unwrap_or_else(|| vec![None; 3]));
    let ready = status.map(|s| s.instances.iter().filter(|i| i.ready).count() as f64);
    values.extend([Some(f64::from(db.spec.replicas)), ready]);
    values.iter().any(Option::is_some).then(|| (database_labels(db), values))
}

/// The continuous-archiving gauges of a PostgreSQL (last archived, failing, archive
/// timeout); none without continuous archiving.
fn archiving_gauges(db: &PostgreSQL) -> Option<Vec<Option<f64>>> {
    let timeout = build::archive_timeout(db)?;
    let archiving = db.status.as_ref().and_then(|s| s.wal_archiving.as_ref());
    let last = archiving
        .and_then(|a| a.last_archived_time.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| t.as_second() as f64);
    // Failing as the condition is: the last file failed, or some since the last look.
    let failing = archiving.is_some_and(|a| build::archiving_fails(a) || a.recent_failures.is_some());
    Some(vec![last, Some(f64::from(u8::from(failing))), Some(timeout as f64)])
}

/// A database's labels on its own series.
fn database_labels(db: &PostgreSQL) -> crate::metrics::DatabaseLabels {
    crate::metrics::DatabaseLabels { database_namespace: db.namespace().unwrap_or_default(), database: db.name_any() }
}

/// How often the Secrets `spec.certificates` names are read.
pub const PROVIDED_RECHECK: Duration = Duration::from_secs(60);

/// How often the primary is asked its archiver's health (continuous archiving) and
/// its standbys' lag (more than one instance).
pub const ARCHIVER_RECHECK: Duration = Duration::from_secs(30);

/// Whether each look asks the primary: for its archiver, or its standbys' lag; never
/// on the fake nodes (`simulated`: an instance there), where nothing runs to ask.
fn asks_primary(db: &PostgreSQL, simulated: Option<&str>) -> bool {
    simulated.is_none() && (build::continuous_destination(db).is_some() || db.spec.replicas > 1)
}

/// The primary as it says it now, when its pod is Ready; `None` when it cannot be
/// asked now (the last archiver's answer in the status stands).
async fn ask_primary(db: &PostgreSQL, reach: &Instances, pods: &Owned<Pod>, primary: &str) -> Option<Status> {
    let pod = pods.get(&db.namespace().unwrap_or_default(), primary)?;
    if !bosun_resources::failover::pod_ready(&pod) {
        return None;
    }
    match reach.status(primary, ARCHIVER_TIMEOUT).await {
        Ok(status) => Some(status),
        Err(why) => {
            tracing::debug!(db = %db.name_any(), primary, %why, "the primary could not be asked");
            None
        }
    }
}

/// The standbys' lag as the primary said it (its series go when it could not say).
fn replication_lag(db: &PostgreSQL, ctx: &Context, primary: Option<&Status>) {
    let lag = primary.and_then(|s| s.server.as_ref()).filter(|s| !s.in_recovery).map(|s| s.standby_lag());
    let lag: Vec<crate::metrics::StandbyLag> = lag
        .unwrap_or_default()
        .into_iter()
        .map(|(name, bytes, seconds)| (name, bytes.map(|b| b as f64), seconds))
        .collect();
    ctx.metrics.replication_lag.set(&database_labels(db), &lag);
}

/// How long asking the archiver may take.
const ARCHIVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why serving stopped: the spec is refused (a condition), or an error to retry.
enum Stop {
    Refused(Refusal),
    Failed(Error),
}

impl From<Error> for Stop {
    /// A name someone else holds and a child the apiserver refuses are the user's to
    /// fix; anything else is retried.
    fn from(err: Error) -> Self {
        match err {
            Error::NameConflict(message) => Stop::Refused(Refusal::NameConflict(message)),
            err if err.is_invalid_spec() => Stop::Refused(Refusal::InvalidSpec(err.user_message())),
            err => Stop::Failed(err),
        }
    }
}

/// Bring the database to its spec, on the major and in the state `running` says:
/// Secret, StatefulSet, Services, claims. Returns the StatefulSet as applied.
async fn serve(
    db: &PostgreSQL,
    ctx: &Context,
    children: &Children,
    (cached, claims): (Option<&StatefulSet>, &[&PersistentVolumeClaim]),
    running: Running,
) -> Result<StatefulSet, Stop> {
    build::check(db, cached, claims).map_err(Stop::Refused)?;
    let secret = credentials(db, ctx, &children.secrets, cached.is_some() || !claims.is_empty()).await?;
    application_credentials(db, ctx, &children.secrets).await?;
    let digest = build::credentials_digest(&secret);
    let desired = build::desired_statefulset(db, &ctx.settings.postgres, cached, &digest, running);
    let sts = apply_child(ctx, db, &children.statefulsets, desired).await?;
    let services = build::desired_services(db);
    futures::future::try_join_all(services.into_iter().map(|s| apply_child(ctx, db, &children.services, s))).await?;
    if db.spec.replicas <= 1 {
        delete_child(ctx, db, &children.services, &db.namespace().unwrap_or_default(), &build::read_only_name(db))
            .await?;
    }
    for claim in claims.iter().filter(|c| build::needs_growth(db, c)) {
        let patch = json!({"spec": {"resources": {"requests": {"storage": db.spec.storage}}}});
        merge_into::<PostgreSQL, _>(ctx, *claim, patch).await?;
    }
    // Each data claim says the major that runs on it: after an upgrade's pg_upgrade,
    // and for claims made later from the (immutable) template, which says the first.
    if !running.stopped {
        for claim in claims {
            if let Some(patch) = build::relabel(claim, running.version) {
                merge_into::<PostgreSQL, _>(ctx, *claim, patch).await?;
            }
        }
    }
    Ok(sts)
}

/// The credentials Secret: bosun's (cached), else the user's (read), else — only when
/// no data exists yet — a new one with generated passwords.
async fn credentials(
    db: &PostgreSQL,
    ctx: &Context,
    secrets: &Owned<Secret>,
    data_exists: bool,
) -> Result<Secret, Stop> {
    let ns = db.namespace().unwrap_or_default();
    let name = build::secret_name(db);
    let secret = match crate::read::cached_or_get(&ctx.client, secrets, &ns, &name).await? {
        Some(secret) => secret,
        None if data_exists => {
            return Err(Stop::Refused(Refusal::CredentialsMissing(format!(
                "Secret {name} is gone while the data of this database exists: its passwords are the ones \
                 stored in the data, so bosun does not make new ones; create Secret {name} again with the keys \
                 username and password (and replication-password for replicas) holding those passwords"
            ))));
        }
        None => {
            let (password, replication) = (new_password(), new_password());
            create_if_absent(ctx, db, &build::desired_secret(db, &password, &replication)).await?
        }
    };
    match build::missing_key(db, &secret) {
        None => Ok(secret),
        Some(key) => Err(Stop::Refused(Refusal::CredentialsMissing(format!(
            "Secret {name} has no (or an empty) key {key}: add it; bosun never writes to an existing Secret"
        )))),
    }
}

/// The application's Secret (`<name>-app`): made when missing, with a new password
/// (which the instances then set on the application's role), else left as it is.
async fn application_credentials(db: &PostgreSQL, ctx: &Context, secrets: &Owned<Secret>) -> Result<(), Error> {
    let (ns, name) = (db.namespace().unwrap_or_default(), build::app_secret_name(db));
    if crate::read::cached_or_get(&ctx.client, secrets, &ns, &name).await?.is_none() {
        create_if_absent(ctx, db, &build::desired_app_secret(db, &new_password())).await?;
    }
    Ok(())
}

/// What the instances' Secret gives: bosun's access to their API, when its
/// certificates are next due, the certificate the server serves with, and why the one
/// `spec.certificates` names is not served (when it is not).
struct InstanceAccess {
    access: Option<instance_api::Access>,
    due: Option<Timestamp>,
    server: Option<ServerCertificate>,
    refused: Option<String>,
}

/// The instances' API Secret ([`bosun_resources::instances`]): made when missing,
/// renewed when its plan says so (an apply of bosun's own child), with the server's
/// certificate (bosun's, or the user's once [`provided::check`] passes: a failing one
/// leaves the instances theirs); `<name>-ca` publishes the CAs that verify it. Read
/// from the apiserver when the cache does not have it, so a cache that lags never
/// makes a second CA.
async fn instance_access(
    db: &PostgreSQL,
    ctx: &Context,
    secrets: &Owned<Secret>,
    now: Timestamp,
) -> Result<InstanceAccess, Error> {
    let (ns, name) = (db.namespace().unwrap_or_default(), instance_api::secret_name(db));
    let existing = crate::read::cached_or_get(&ctx.client, secrets, &ns, &name).await?;
    let existing = existing.filter(|s| controlled_by(s, db));
    let data = existing.as_ref().map(instance_api::data);
    let life = &ctx.settings.postgres.certificates;
    let checked = match provided::secret_names(db) {
        None => None,
        Some((tls, ca)) => {
            let tls = crate::read::cached_or_get(&ctx.client, secrets, &ns, &tls).await?;
            let ca = match ca {
                Some(ca) => crate::read::cached_or_get(&ctx.client, secrets, &ns, &ca).await?,
                None => None,
            };
            Some(provided::check(db, tls.as_ref(), ca.as_ref(), now))
        }
    };
    let server = match &checked {
        None => instance_api::Server::Own,
        Some(Ok(provided)) => instance_api::Server::Provided(provided),
        Some(Err(_)) => instance_api::Server::Kept,
    };
    let secret = match instance_api::desired_data(db, data.as_ref(), now, life, new_password, server) {
        Ok(None) => existing,
        Ok(Some(data)) => Some(apply_child(ctx, db, secrets, instance_api::desired_secret(db, &data)).await?),
        Err(why) => {
            tracing::warn!(db = %db.name_any(), %why, "the instances' certificates could not be made");
            existing
        }
    };
    let data = secret.as_ref().map(instance_api::data).unwrap_or_default();
    let access = secret.as_ref().and_then(instance_api::access);
    // The CAs a client verifies the database with, published as they change.
    if let Some(ca) = instance_api::server_ca(&data).or(access.as_ref().map(|a| &a.ca_bundle)) {
        apply_child(ctx, db, secrets, instance_api::desired_ca_secret(db, ca)).await?;
    }
    // Where the served certificate comes from (the user's of before, when the one
    // named now is refused), as the Secret records it.
    let served = instance_api::server_source(&data).cloned().unwrap_or(name);
    let server = instance_api::server_not_after(&data)
        .map(|not_after| ServerCertificate { secret_name: served, not_after: not_after.to_string() });
    let due = bosun_resources::pki::next_due(&data, life);
    Ok(InstanceAccess { access, due, server, refused: checked.and_then(Result::err) })
}

/// A new password from the operating system's CSPRNG (through `rand`'s thread
/// generator, a ChaCha reseeded from it): for credentials made once, never again.
pub fn new_password() -> String {
    build::password((0..4 * build::PASSWORD_LENGTH).map(|_| rand::random::<u8>()))
}

/// The pod of an instance of `db` that cannot start and why, if one cannot (the first,
/// by name): its pods come from the watch, the events about one only when it has
/// waited long.
async fn stuck_instance(
    db: &PostgreSQL,
    ctx: &Context,
    pods: &Owned<Pod>,
    now: Timestamp,
) -> Result<Option<(String, String)>, Error> {
    let ns = db.namespace().unwrap_or_default();
    let mine = failover::instance_pods(db, pods);
    for pod in mine {
        if let Some(cause) = crate::read::pod_stuck(&ctx.client, now, &ns, Some(pod.as_ref())).await? {
            return Ok(Some((pod.name_any(), cause)));
        }
    }
    Ok(None)
}

/// The Backup, created once the database is Ready (and kept up to date from then
/// on), deleted when backups are turned off — the dumps stay where they are.
async fn backups(
    db: &PostgreSQL,
    ctx: &Context,
    children: &Children,
    sts: Option<&StatefulSet>,
) -> Result<Option<Backup>, Error> {
    let ns = db.namespace().unwrap_or_default();
    let name = build::backup_name(db);
    let existing = children.backups.get(&ns, &name).filter(|b| controlled_by(b.as_ref(), db));
    let Some(desired) = build::desired_backup(db) else {
        delete_child(ctx, db, &children.backups, &ns, &name).await?;
        return Ok(None);
    };
    if existing.is_none() && !build::ready(db, sts) {
        return Ok(None);
    }
    if let Some(claim) = build::desired_backup_claim(db)
        && children.claims.get(&ns, &claim.name_any()).is_none()
    {
        create_if_absent(ctx, db, &claim).await?;
    }
    // A name someone else holds is an Error::NameConflict: BackupConfigured says so.
    apply_child(ctx, db, &children.backups, desired).await.map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::mock;

    fn db() -> Arc<PostgreSQL> {
        let db = json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-db", "generation": 1},
            "spec": {"version": "15", "storage": "1Gi", "replicas": 1},
        });
        Arc::new(serde_json::from_value(db).unwrap())
    }

    /// The apiserver: no Secret, and writes to a path `refuse` names are invalid.
    fn api(refuse: Option<&'static str>) -> impl Fn(&mock::Call) -> (u16, Value) + Send + Sync + 'static {
        let answer = mock::answer(db().as_ref());
        move |call| match call.method.as_str() {
            _ if refuse.is_some_and(|r| call.path.contains(r)) => {
                mock::refused(422, "Invalid", "StatefulSet.apps \"orders\" is invalid: spec: Forbidden")
            }
            _ => answer(call),
        }
    }

    fn children(statefulsets: Vec<StatefulSet>) -> Children {
        Children {
            statefulsets: mock::cache(statefulsets),
            deployments: mock::cache([]),
            services: mock::cache([]),
            secrets: mock::cache([]),
            claims: mock::cache([]),
            backups: mock::cache([]),
            pods: mock::cache([]),
            jobs: mock::cache([]),
            silences: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_new_database_gets_its_credentials_made_once_then_its_statefulset() {
        let (ctx, calls) = mock::context(api(None));
        reconcile(db(), ctx, children(vec![])).await.unwrap();
        let writes = calls.writes();
        let made: Vec<_> = writes.iter().filter(|w| w.starts_with("POST") && w.ends_with("/secrets")).collect();
        assert_eq!(made.len(), 2, "the superuser's and the application's: {writes:?}");
        let secret = calls.body("/secrets").unwrap();
        assert_eq!(secret["metadata"]["name"], "orders-credentials");
        let position =
            |line: &str| writes.iter().position(|w| w == line).unwrap_or_else(|| panic!("{line}: {writes:?}"));
        assert!(
            position("POST /api/v1/namespaces/shop/secrets")
                < position("PATCH /apis/apps/v1/namespaces/shop/statefulsets/orders"),
            "the passwords exist before the pods that read them: {writes:?}"
        );
    }

    #[tokio::test]
    async fn a_lost_secret_while_the_data_exists_is_refused_and_no_password_is_made() {
        let (ctx, calls) = mock::context(api(None));
        let d = db();
        let mut sts = build::desired_statefulset(
            d.as_ref(),
            &Default::default(),
            None,
            "",
            bosun_resources::upgrade::Running::of(d.as_ref(), None),
        );
        sts.metadata.uid = Some("uid-orders".to_owned());
        let outcome = reconcile(d, ctx, children(vec![sts])).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason, .. } if *reason == bosun_api::conditions::reasons::CREDENTIALS_MISSING),
            "{outcome:?}"
        );
        assert_eq!(
            calls.writes(),
            [
                "GET /api/v1/namespaces/shop/secrets/orders-instance",
                "PATCH /api/v1/namespaces/shop/secrets/orders-instance",
                "PATCH /api/v1/namespaces/shop/secrets/orders-ca",
                "GET /api/v1/namespaces/shop/secrets/orders-credentials",
                "PATCH /apis/database.example.com/v1/namespaces/shop/postgresqls/orders/status"
            ],
            "nothing but the instances' API Secret (certificates and a token, no password), the CA's for \
             clients and the status is written: no new passwords, the StatefulSet as it is"
        );
        assert_eq!(mock::condition(&calls, "Ready"), "False/CredentialsMissing");
    }

    #[tokio::test]
    async fn a_statefulset_the_apiserver_refuses_is_an_invalid_spec_not_a_retry() {
        let (ctx, calls) = mock::context(api(Some("/statefulsets/")));
        let outcome = reconcile(db(), ctx, children(vec![])).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason, message, .. }
                if *reason == bosun_api::conditions::reasons::INVALID_SPEC && message.contains("Forbidden")),
            "{outcome:?}"
        );
        assert_eq!(mock::condition(&calls, "Ready"), "False/InvalidSpec");
        assert!(!calls.writes().iter().any(|w| w.contains("/services/")), "no Service for a database refused");
    }
}
