//! The primary of a PostgreSQL: which instance it is, failover when it is lost, and
//! the role labels the instances act on.
//!
//! Stage of the PostgreSQL pipeline: assess the pods ([`build::assess`]) → when the
//! primary is lost, ask each Ready standby for its WAL position (its instance API,
//! [`crate::instances`]) → persist the decision (`status.currentPrimary`, before any
//! label moves) → move the labels, the old primary's first → await the promotion,
//! which the new primary's instance does itself when its label reaches it (bosun also
//! tells it at once over its API, which stands only until the kubelet refreshes the
//! label's file) → event and metrics. The
//! role label is the only authority on an instance's role, so an instance never holds
//! a role its label does not say for longer than the kubelet takes to show it, and a
//! bosun that dies after the labels has done enough. Every
//! step after the decision is idempotent, so a restarted bosun finishes it.
//!
//! A switchover (the annotation [`SWITCHOVER_ANNOTATION`]) is the same with the old
//! primary alive: decision → the old primary's label goes (the Service has no endpoint,
//! its instance stops with a fast shutdown, which sends every WAL record to the
//! connected standbys) → proof that it no longer serves (else the switchover is
//! undone: labels and `status.currentPrimary` back, the attempt in
//! `status.lastPrimaryChange`, a `SwitchoverFailed` event, and bosun's own next
//! switchover [`build::SWITCHOVER_RETRY`] later) → the target's label →
//! its promotion → the annotation removed. A switchover interrupted before the old
//! primary lost its label is abandoned (its label holder is Ready) and, the
//! annotation still being there, started again.
//!
//! After a change of primary, a standby that does not stream from the new primary and
//! is on an older timeline holds WAL the new primary never had: it is told to rewind
//! on its next start and restarted ([`build::followers`]).
//!
//! A rolling change (a new pod template; the StatefulSet is `OnDelete`) is the last
//! step, when nothing else changed the primary: one instance at a time, standbys
//! first, then a switchover, then the old primary as a standby ([`build::roll`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_api::postgresql::{PostgreSQL, PrimaryChange, SWITCHOVER_ANNOTATION};
use bosun_resources::failover::{self as build, Position};
use bosun_resources::postgresql::ROLE_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::apply::{delete_as_seen, delete_exactly, merge_into};
use crate::children::Owned;
use crate::context::Context;
use crate::error::Error;
use crate::instances::{AskError, Connector, Instances};
use crate::status::update_status;
use bosun_resources::instances::Access;

/// How long a standby may take to say where it is in the WAL.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long telling an instance its role may take (it has its label anyway).
const TELL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long bosun waits for a promotion it asked for before recording it anyway (the
/// instance promotes itself whenever its label reaches it; this bounds the reconcile).
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(15);

/// The primary after this stage.
#[derive(Clone, Debug, Default)]
pub struct Primary {
    pub name: String,
    /// When to look again: a primary not ready, not yet for `spec.failoverDelay`.
    pub recheck: Option<Duration>,
    /// The change of primary this stage made, if it made one.
    pub change: Option<PrimaryChange>,
}

/// The pods of `db`'s instances.
pub fn instance_pods(db: &PostgreSQL, pods: &Owned<Pod>) -> Vec<Arc<Pod>> {
    let instance = db.name_any();
    let mut mine = pods.matching(|p| {
        p.namespace() == db.namespace() && p.labels().get("app.kubernetes.io/instance") == Some(&instance)
    });
    mine.sort_by_key(|p| p.name_any());
    mine
}

/// Keep `db`'s primary, or replace it when it is lost; label every instance's role.
pub async fn ensure(
    controller: &'static str,
    db: &PostgreSQL,
    ctx: &Context,
    (sts, pods): (&StatefulSet, &Owned<Pod>),
    (reach, silences): (&Instances, &Silences),
    now: Timestamp,
) -> Result<Primary, Error> {
    let mine = instance_pods(db, pods);
    let refs: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).collect();
    let recorded = db.status.as_ref().and_then(|s| s.current_primary.as_deref());
    let silence = mine.iter().find(|p| Some(p.name_any().as_str()) == recorded).and_then(|p| silences.of(p));
    let limit = ctx.settings.postgres.unanswered_failover;
    let mut assessment = build::assess_heard(db, &refs, now, silence.map(|since| build::Silence { since, limit }));
    if let Some(intended) = &assessment.abandoned {
        info!(db = %db.name_any(), intended, kept = %assessment.primary, "a change of primary that moved no label is abandoned: the labelled primary is ready");
    }
    let mut primary = Primary { name: assessment.primary.clone(), recheck: assessment.recheck, change: None };
    // Standbys the watchdog has not heard for a while (cut off with the primary, say)
    // are not asked: each would hold the decision for its whole timeout, three times.
    let heard = |name: &String| {
        mine.iter().find(|p| p.name_any() == *name).and_then(|p| silences.of(p)).is_none_or(|s| s < SILENT_CANDIDATE)
    };
    assessment.candidates.retain(heard);
    if assessment.unanswered && !standbys_lost_it(reach, &assessment.candidates).await {
        // Not lost, as far as anyone can tell: everything else goes on as usual (a
        // rolling change, a switchover asked for). Looked at again each second while a
        // standby may still be letting go of a lost primary (its 5 s receiver
        // timeout), then at the usual pace (bosun's own way to it may be what is cut).
        let reason = assessment.lost.take().unwrap_or_default();
        let fresh = silence.is_some_and(|since| since < limit + CONFIRM_WINDOW);
        if fresh {
            warn!(db = %db.name_any(), reason, "the primary does not answer bosun, but no standby has lost it: no failover");
            primary.recheck = Some(PROBE_EVERY);
        } else {
            tracing::debug!(db = %db.name_any(), reason, "the primary still does not answer bosun; its standbys still receive");
        }
    }
    if let Some(reason) = &assessment.lost {
        match most_advanced(db, reach, &assessment.candidates).await {
            Some(to) => {
                let pair = (primary.name.as_str(), to.as_str());
                primary.change =
                    change_primary(controller, db, (ctx, reach), &refs, Kind::Failover, pair, reason, now).await?;
                primary.name = to;
            }
            None => warn!(db = %db.name_any(), reason, "the primary is lost and no standby can take its place"),
        }
    }
    // bosun's own switchovers (scale-down, rolling change) wait a while after one it undid.
    let backoff = build::switchover_backoff(db, now);
    if let Some(wait) = backoff {
        primary.recheck = Some(primary.recheck.map_or(wait, |r| r.min(wait)));
    }
    let scale_down = build::scale_down_switchover(db, &assessment).filter(|_| backoff.is_none());
    if let (None, Some((to, why))) = (&assessment.lost, scale_down) {
        if !streams(db, reach, &to).await {
            primary.recheck = Some(primary.recheck.map_or(STREAM_RECHECK, |r| r.min(STREAM_RECHECK)));
        } else {
            let pair = (primary.name.as_str(), to.as_str());
            primary.change =
                change_primary(controller, db, (ctx, reach), &refs, Kind::Switchover, pair, &why, now).await?;
            if primary.change.is_some() {
                primary.name = to;
            }
        }
    } else if let (None, Some(to)) = (&assessment.lost, switchover_target(db)) {
        match build::switchover(&assessment, to) {
            build::Switchover::Go if !streams(db, reach, to).await => {
                primary.recheck = Some(primary.recheck.map_or(STREAM_RECHECK, |r| r.min(STREAM_RECHECK)));
            }
            build::Switchover::Go => {
                let why = format!("asked for by the annotation {SWITCHOVER_ANNOTATION}");
                let pair = (primary.name.as_str(), to);
                primary.change =
                    change_primary(controller, db, (ctx, reach), &refs, Kind::Switchover, pair, &why, now).await?;
                if primary.change.is_some() {
                    primary.name = to.to_owned();
                }
                forget_switchover(db, ctx).await?;
            }
            build::Switchover::Wait(why) => info!(db = %db.name_any(), why, "a switchover waits"),
            build::Switchover::Refuse(why) => {
                ctx.events.refused(&db.object_ref(&()), "SwitchoverRefused", &why);
                forget_switchover(db, ctx).await?;
            }
        }
    }
    // (A change of primary labelled every instance already, from the pods as labelled.)
    if primary.change.is_none() {
        let labelled = label((ctx, reach), &refs, &primary.name).await?;
        lift_fences(reach, silences, &labelled).await;
    }
    if assessment.lost.is_none() && primary.change.is_none() && switchover_target(db).is_none() {
        let (rewinding, look_again) = follow(db, (ctx, reach), &refs, &primary.name, now).await?;
        if let Some(wait) = look_again {
            primary.recheck = Some(primary.recheck.map_or(wait, |r| r.min(wait)));
        }
        if rewinding {
            return Ok(primary);
        }
        let rolled = roll(controller, db, (ctx, reach), (sts, &refs), &assessment, backoff.is_none(), now).await?;
        match rolled {
            Rolled::Changed(change) => {
                primary.name = change.to.clone();
                primary.change = Some(change);
            }
            Rolled::WaitForStreaming => {
                primary.recheck = Some(primary.recheck.map_or(STREAM_RECHECK, |r| r.min(STREAM_RECHECK)));
            }
            Rolled::Nothing => {}
        }
    }
    Ok(primary)
}

/// Standbys that cannot follow the primary after a change of it ([`build::followers`]):
/// one that does not stream from the primary and is on an older timeline is told to
/// rewind on its next start (its API's rewind request) and restarted. Returns whether
/// one was restarted, and when to look again.
async fn follow(
    db: &PostgreSQL,
    (ctx, reach): (&Context, &Instances),
    pods: &[&Pod],
    primary: &str,
    now: Timestamp,
) -> Result<(bool, Option<Duration>), Error> {
    let standbys = match build::followers(db, pods, primary, now) {
        build::Follow::Nothing => return Ok((false, None)),
        build::Follow::Later(wait) => return Ok((false, Some(wait))),
        build::Follow::Look(standbys) => standbys,
    };
    let answer = reach.status(primary, ASK_TIMEOUT).await;
    let server = answer.as_ref().ok().and_then(|s| s.server.as_ref()).filter(|s| !s.in_recovery);
    let Some((Some(timeline), streaming)) = server.map(|s| (s.timeline, &s.streaming)) else {
        info!(db = %db.name_any(), primary, ?answer, "the primary did not say who streams from it");
        return Ok((false, Some(build::FOLLOW_RECHECK)));
    };
    // A primary that just restarted in place (a killed postgres, a container restart)
    // has its standbys reconnecting: one that does not stream yet is not behind.
    let up = server.and_then(|s| s.started).map(|started| (now.as_second() - started).max(0).unsigned_abs());
    if let Some(wait) =
        up.and_then(|up| build::FOLLOW_GRACE.checked_sub(Duration::from_secs(up))).filter(|w| !w.is_zero())
    {
        return Ok((false, Some(wait)));
    }
    let behind: Vec<&String> = standbys.iter().filter(|s| !streaming.contains(s)).collect();
    let mut rewinding = false;
    for standby in &behind {
        let theirs = reach.status(standby, ASK_TIMEOUT).await;
        let Some(theirs) = theirs.ok().and_then(|s| s.server?.timeline) else { continue };
        let Some(pod) = pods.iter().find(|p| p.name_any() == **standby) else { continue };
        if theirs >= timeline {
            continue;
        }
        if let Err(err) = reach.rewind_on_start(standby, TELL_TIMEOUT).await {
            info!(db = %db.name_any(), pod = %standby, %err, "a standby that cannot follow could not be told to rewind");
            continue;
        }
        if delete_as_seen(ctx, *pod).await? {
            let why = format!(
                "{standby} (a standby) does not stream from the primary {primary} and is on timeline {theirs}, \
                 the primary on {timeline}: it holds WAL the primary does not have, and is restarted to rewind it \
                 (pg_rewind) and follow"
            );
            warn!(db = %db.name_any(), pod = %standby, why, "rewinding a standby");
            ctx.events.instance_rewound(&db.object_ref(&()), pod.object_ref(&()), why);
            rewinding = true;
        }
    }
    Ok((rewinding, (!behind.is_empty()).then_some(build::FOLLOW_RECHECK)))
}

/// What a look at a rolling change did.
enum Rolled {
    Nothing,
    /// The primary was handed over.
    Changed(PrimaryChange),
    /// The standby to hand it to does not stream yet.
    WaitForStreaming,
}

/// How soon a switchover waiting for its standby to stream looks again.
const STREAM_RECHECK: Duration = Duration::from_secs(2);

/// Whether the standby `to` streams from the primary now (its WAL receiver says so).
/// A switchover goes only to one that does: the old primary's fast shutdown sends
/// every WAL record to the standbys connected then, and only to those, so one still
/// catching up (just restarted, say) would be promoted without the last commits.
async fn streams(db: &PostgreSQL, reach: &Instances, to: &str) -> bool {
    let receiving = reach.status(to, ASK_TIMEOUT).await.is_ok_and(|s| s.server.is_some_and(|s| s.receiving));
    if !receiving {
        info!(db = %db.name_any(), to, "a switchover waits: the standby does not stream from the primary yet");
    }
    receiving
}

/// The next step of rolling a new pod template out ([`build::roll`]): restart a
/// standby, or hand the primary over so that its old pod restarts as a standby's.
async fn roll(
    controller: &'static str,
    db: &PostgreSQL,
    (ctx, reach): (&Context, &Instances),
    (sts, pods): (&StatefulSet, &[&Pod]),
    assessment: &build::Assessment,
    may_switch_over: bool,
    now: Timestamp,
) -> Result<Rolled, Error> {
    match build::roll(sts, pods, assessment) {
        build::Roll::Done => Ok(Rolled::Nothing),
        build::Roll::Wait(why) => {
            info!(db = %db.name_any(), why, "a rolling change waits");
            Ok(Rolled::Nothing)
        }
        build::Roll::Restart(name, why) => {
            let Some(pod) = pods.iter().find(|p| p.name_any() == name) else { return Ok(Rolled::Nothing) };
            if delete_as_seen(ctx, *pod).await? {
                info!(db = %db.name_any(), pod = name, why, "restarting an instance");
                ctx.events.instance_restarted(&db.object_ref(&()), pod.object_ref(&()), &why);
            }
            Ok(Rolled::Nothing)
        }
        build::Roll::Switchover(_) if !may_switch_over => {
            info!(db = %db.name_any(), "a rolling change waits: the last switchover was undone a moment ago");
            Ok(Rolled::Nothing)
        }
        build::Roll::Switchover(to) if !streams(db, reach, &to).await => Ok(Rolled::WaitForStreaming),
        build::Roll::Switchover(to) => {
            let why =
                "a rolling change: every standby runs the new pod template, the primary restarts last, as a standby";
            let pair = (assessment.primary.as_str(), to.as_str());
            let change = change_primary(controller, db, (ctx, reach), pods, Kind::Switchover, pair, why, now).await?;
            Ok(change.map_or(Rolled::Nothing, Rolled::Changed))
        }
    }
}

/// The instance a switchover is asked to, if one is.
fn switchover_target(db: &PostgreSQL) -> Option<&str> {
    db.annotations().get(SWITCHOVER_ANNOTATION).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// The switchover asked for is done (or refused): its annotation goes.
async fn forget_switchover(db: &PostgreSQL, ctx: &Context) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: null}}});
    merge_into::<PostgreSQL, _>(ctx, db, patch).await.map(drop)
}

/// How often the watchdog's heartbeat goes to each instance, and how long it waits.
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a standby may leave the watchdog's heartbeats unanswered and still be asked
/// to take a lost primary's place: two heartbeats.
const SILENT_CANDIDATE: Duration = Duration::from_secs(2);
/// How long a standby may take to say whether it still receives the primary's WAL.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after the limit the standbys are asked each second whether they lost a
/// silent primary: three times their receiver's timeout (5 s).
const CONFIRM_WINDOW: Duration = Duration::from_secs(15);

/// How long an instance may go on saying it is fenced after its role was told
/// (triggered) before it is told again.
const RETELL_FENCED: Duration = Duration::from_secs(5);

/// What the watchdog ([`watch_instances`]) heard: Ready instances that stopped
/// answering, and instances that fenced themselves.
#[derive(Clone, Debug, Default)]
pub struct Silences(Arc<std::sync::Mutex<Heard>>);

/// A pod by (namespace, name).
type PodKey = (String, String);

#[derive(Debug, Default)]
struct Heard {
    silent: std::collections::HashMap<PodKey, Silent>,
    /// Fenced instances, by key: their uid, and when their database's reconcile was
    /// last triggered for it.
    fenced: std::collections::HashMap<PodKey, (String, Instant)>,
}

/// One pod's silence: the pod (its uid), since when, and whether its database's
/// reconcile was triggered for it.
#[derive(Clone, Debug)]
struct Silent {
    uid: String,
    since: Instant,
    /// The same, by the wall clock (for the status).
    at: Timestamp,
    triggered: bool,
}

fn key_of(pod: &Pod) -> PodKey {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

impl Silences {
    fn lock(&self) -> std::sync::MutexGuard<'_, Heard> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long `pod` (this very pod: its uid) has not answered.
    pub fn of(&self, pod: &Pod) -> Option<Duration> {
        let heard = self.lock();
        let silent = heard.silent.get(&key_of(pod))?;
        (Some(&silent.uid) == pod.metadata.uid.as_ref()).then(|| silent.since.elapsed())
    }

    /// Since when `pod` has not answered, once that lasted `limit`.
    pub fn unanswered_since(&self, pod: &Pod, limit: Duration) -> Option<Timestamp> {
        let heard = self.lock();
        let silent = heard.silent.get(&key_of(pod))?;
        (Some(&silent.uid) == pod.metadata.uid.as_ref() && silent.since.elapsed() >= limit).then_some(silent.at)
    }

    /// `pod` silent since `since` (a test's past).
    #[cfg(test)]
    fn silent_since(&self, pod: &Pod, since: Instant) {
        let silent =
            Silent { uid: pod.metadata.uid.clone().unwrap_or_default(), since, at: Timestamp::now(), triggered: true };
        self.lock().silent.insert(key_of(pod), silent);
    }

    /// Whether `pod` (this very pod) said it fenced itself.
    pub fn fenced(&self, pod: &Pod) -> bool {
        self.lock().fenced.get(&key_of(pod)).map(|(uid, _)| uid) == pod.metadata.uid.as_ref()
    }

    /// Records one round of answers of Ready instances; returns the pods that have just
    /// been silent for `limit` (each once), and those whose such silence just ended. Pods
    /// not asked this round are forgotten.
    fn record(&self, answers: Vec<(Arc<Pod>, bool)>, limit: Duration) -> Vec<Arc<Pod>> {
        let mut heard = self.lock();
        let mut crossed = Vec::new();
        let mut kept = std::collections::HashMap::new();
        for (pod, answered) in answers {
            let key = key_of(&pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if answered {
                // A silence that was reported ends: reported too.
                if heard.silent.remove(&key).is_some_and(|seen| seen.triggered && seen.uid == uid) {
                    crossed.push(pod.clone());
                }
                continue;
            }
            let mut silent = match heard.silent.remove(&key) {
                Some(seen) if seen.uid == uid => seen,
                _ => Silent { uid, since: Instant::now(), at: Timestamp::now(), triggered: false },
            };
            if silent.since.elapsed() >= limit && !silent.triggered {
                silent.triggered = true;
                crossed.push(pod.clone());
            }
            kept.insert(key, silent);
        }
        heard.silent = kept;
        crossed
    }

    /// Records the instances that said they are fenced this round; returns those that
    /// were not before, and those still fenced [`RETELL_FENCED`] after they were last
    /// returned (a tell can be lost: the instance was not reached in time).
    fn record_fenced(&self, fenced: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
        self.record_fenced_at(fenced, Instant::now())
    }

    fn record_fenced_at(&self, fenced: Vec<Arc<Pod>>, now: Instant) -> Vec<Arc<Pod>> {
        let mut heard = self.lock();
        let mut kept = std::collections::HashMap::new();
        let mut due = Vec::new();
        for pod in fenced {
            let (key, uid) = (key_of(&pod), pod.metadata.uid.clone().unwrap_or_default());
            let triggered = match heard.fenced.remove(&key) {
                Some((seen, at)) if seen == uid && now.saturating_duration_since(at) < RETELL_FENCED => at,
                _ => {
                    due.push(pod);
                    now
                }
            };
            kept.insert(key, (uid, triggered));
        }
        heard.fenced = kept;
        due
    }
}

/// What the watchdog needs of the controller's caches.
pub(crate) struct Watched {
    pub(crate) databases: kube::runtime::reflector::Store<crate::guard::Guarded<PostgreSQL>>,
    pub(crate) pods: Owned<Pod>,
    pub(crate) secrets: Owned<k8s_openapi::api::core::v1::Secret>,
}

/// The watchdog: each second, bosun's heartbeat goes to every instance that serves the
/// API (its instance API, with the database's token), saying how many standbys the
/// database has and how long a primary that hears no one may go on before it fences
/// itself ([`bosun_instance::fence`]). A Ready instance that does not answer for
/// `limit` triggers its database's reconcile, which reports it (`status.instances`)
/// and, for the primary, fails over once the standbys have lost it too ([`ensure`]):
/// the loss of a node, which Kubernetes declares only after its node monitor's grace
/// period. An instance that answers that it fenced itself triggers it too: the
/// reconcile tells it its role, which lifts its fence.
pub(crate) async fn watch_instances(
    watched: Watched,
    silences: Silences,
    limit: Duration,
    trigger: futures::channel::mpsc::UnboundedSender<Pod>,
) {
    let terms_after = bosun_instance::fence::fence_after(limit, PROBE_EVERY);
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Each database's TLS connector, made again only when its Secret's access changes.
    let mut connectors: std::collections::HashMap<PodKey, (Access, Result<Connector, String>)> = Default::default();
    loop {
        tick.tick().await;
        let mut kept = std::collections::HashMap::new();
        let mut databases = Vec::new();
        for db in watched.databases.state().into_iter().filter_map(|g| g.0.as_ref().ok().cloned()) {
            let key = (db.namespace().unwrap_or_default(), db.name_any());
            let secret = watched.secrets.get(&key.0, &bosun_resources::instances::secret_name(&db));
            let Some(access) = secret.as_deref().and_then(bosun_resources::instances::access) else { continue };
            let made = match connectors.remove(&key) {
                Some((seen, made)) if seen == access => made,
                _ => crate::instances::connector(&access),
            };
            databases.push((db, made.clone()));
            kept.insert(key, (access, made));
        }
        connectors = kept;
        let rounds = databases.into_iter().map(|(db, connector)| {
            let pods = &watched.pods;
            async move { heartbeat(&db, pods, connector, terms_after).await }
        });
        let (mut ready, mut fenced) = (Vec::new(), Vec::new());
        for (ready_here, fenced_here) in futures::future::join_all(rounds).await {
            ready.extend(ready_here);
            fenced.extend(fenced_here);
        }
        for pod in silences.record(ready, limit) {
            match silences.of(&pod) {
                Some(_) => {
                    warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), ?limit, "an instance whose pod looks Ready has not answered")
                }
                None => {
                    info!(pod = %pod.name_any(), namespace = ?pod.namespace(), "an instance that had not answered answers again")
                }
            }
            let _ = trigger.unbounded_send((*pod).clone());
        }
        for pod in silences.record_fenced(fenced) {
            warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), "an instance says it is fenced: its role is told again");
            let _ = trigger.unbounded_send((*pod).clone());
        }
    }
}

/// One round of `db`'s heartbeats: whether each Ready instance answered, and the
/// instances that say they are fenced.
async fn heartbeat(
    db: &PostgreSQL,
    pods: &Owned<Pod>,
    connector: Result<Connector, String>,
    fence_after: Duration,
) -> (Vec<(Arc<Pod>, bool)>, Vec<Arc<Pod>>) {
    let mine = instance_pods(db, pods);
    let refs: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).collect();
    let reach = Instances::with_connector(db, &refs, connector);
    let pods: Vec<&Arc<Pod>> =
        mine.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && reach.reaches(&p.name_any())).collect();
    let terms = bosun_instance::fence::Heartbeat {
        standbys: u32::try_from(db.spec.replicas.saturating_sub(1)).unwrap_or(0),
        fence_after_ms: u64::try_from(fence_after.as_millis()).unwrap_or(u64::MAX),
        quorum: u32::try_from(build::promotion_quorum(db)).unwrap_or(u32::MAX),
    };
    let beats = pods.iter().map(|pod| {
        let reach = &reach;
        async move { ((*pod).clone(), reach.heartbeat(&pod.name_any(), &terms, PROBE_TIMEOUT).await) }
    });
    let answers = futures::future::join_all(beats).await;
    let ready = answers
        .iter()
        .filter(|(pod, _)| build::pod_ready(pod))
        // An instance that refuses the heartbeat (one of before it) answered all the same.
        .map(|(pod, answer)| (pod.clone(), !matches!(answer, Err(AskError::Unreachable(_)))))
        .collect();
    let fenced = answers.into_iter().filter(|(_, a)| a.as_ref().is_ok_and(|a| a.fenced)).map(|(p, _)| p).collect();
    (ready, fenced)
}

/// Whether the standbys confirm a primary that stopped answering bosun is lost: at
/// least one of `candidates` answers, and none still receives its WAL. A primary
/// only bosun cannot reach (bosun's own network) is not failed over.
async fn standbys_lost_it(reach: &Instances, candidates: &[String]) -> bool {
    let asks = candidates.iter().map(|name| reach.status(name, CONFIRM_TIMEOUT));
    let answers: Vec<bool> = futures::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(|a| a.ok().map(|s| s.server.is_some_and(|s| s.receiving)))
        .collect();
    !answers.is_empty() && answers.iter().all(|receiving| !receiving)
}

/// Ask each candidate where it is in the WAL and pick the one with the most. One that
/// does not answer is asked again (three times in all): promoting another while it has
/// more WAL would leave it unable to follow. One that never answers is not a candidate.
/// None promoted unless [`build::promotion_quorum`] standbys answered: with
/// synchronous replication, fewer may all lack a commit that was acknowledged.
async fn most_advanced(db: &PostgreSQL, reach: &Instances, candidates: &[String]) -> Option<String> {
    let mut positions = Vec::new();
    let mut unanswered: Vec<String> = candidates.to_vec();
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let asks = unanswered.iter().map(|name| async move { (name.clone(), reach.status(name, ASK_TIMEOUT).await) });
        let mut again = Vec::new();
        for (name, answer) in futures::future::join_all(asks).await {
            let position = answer.and_then(|status| match &status.server {
                Some(server) => Ok(Position::of(server)),
                None => Err(AskError::Refused(status.server_error.unwrap_or_default())),
            });
            match position {
                Ok(position) => positions.push((name, position)),
                Err(err) => {
                    warn!(standby = %name, %err, attempt, "a standby did not say where it is in the WAL");
                    again.push(name);
                }
            }
        }
        unanswered = again;
        if unanswered.is_empty() {
            break;
        }
    }
    info!(db = %db.name_any(), ?positions, ?unanswered, "the standbys' WAL positions");
    let quorum = build::promotion_quorum(db);
    if positions.len() < quorum && quorum > 1 {
        warn!(
            db = %db.name_any(), answered = positions.len(), quorum,
            "too few standbys answer to be sure one holds every acknowledged commit (spec.synchronous): none is promoted"
        );
        return None;
    }
    // (None answered: the caller says so.)
    build::most_advanced(&positions).map(str::to_owned)
}

/// What a change of primary is: a failover (the primary is lost) or a switchover
/// (the primary runs and hands over).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Failover,
    Switchover,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Failover => "Failover",
            Kind::Switchover => "Switchover",
        }
    }
}

/// Make the standby `to` the primary in place of `from`, because `why`: the decision
/// persisted first (whatever happens next, a restarted bosun finishes it); for a
/// switchover, the old primary's label taken and its stop proved (or the switchover
/// undone when it still serves); then the label given, and the promotion that the
/// instance does on it awaited; the record. `None`: a switchover undone.
#[allow(clippy::too_many_arguments)] // the steps of one decision, all of it needed
async fn change_primary(
    controller: &'static str,
    db: &PostgreSQL,
    (ctx, reach): (&Context, &Instances),
    pods: &[&Pod],
    kind: Kind,
    (from, to): (&str, &str),
    why: &str,
    now: Timestamp,
) -> Result<Option<PrimaryChange>, Error> {
    let clock = Instant::now();
    let ns = db.namespace().unwrap_or_default();
    let mut change = PrimaryChange {
        from: from.to_owned(),
        to: to.to_owned(),
        kind: kind.name().to_owned(),
        reason: why.to_owned(),
        started: now.to_string(),
        seconds: None,
    };
    let before = db.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.current_primary = Some(to.to_owned());
    status.last_primary_change = Some(change.clone());
    update_status(ctx, controller, db, &status).await?;
    // The pooler's clients wait from here until the new primary serves (a switchover:
    // once their transactions in flight ended, before the old primary stops).
    let paused = crate::pooler::pause(db, ctx, reach, kind == Kind::Switchover).await;
    // The pods as labelled so far (this look saw them before).
    let mut current: Vec<Pod> = pods.iter().map(|p| (*p).clone()).collect();
    if kind == Kind::Switchover {
        // The old primary's label first: no endpoint, and its instance stops.
        let others: Vec<&Pod> = pods.iter().copied().filter(|p| p.name_any() != to).collect();
        current = label((ctx, reach), &others, to).await?;
        current.extend(pods.iter().filter(|p| p.name_any() == to).map(|p| (*p).clone()));
        let pods: Vec<&Pod> = current.iter().collect();
        let stopped = match pods.iter().find(|p| p.name_any() == from) {
            // An instance of the previous release cannot say it stopped: its pod goes,
            // which proves it, and comes back on the new template (a rolling change's
            // next step anyway) — once its own demotion (a fast shutdown on the label)
            // has sent its last WAL to the standby.
            Some(old) if !bosun_resources::instances::serves_api(old) => {
                await_shutdown_seen_by(reach, to, reach.demote_timeout).await;
                stop_by_deleting(ctx, old, reach.demote_timeout).await?
            }
            _ => await_serving(reach, from, false, reach.demote_timeout).await,
        };
        if !stopped {
            // Never two primaries: it keeps the role it still holds.
            let note = format!(
                "the switchover from {from} to {to} is undone: {from} still served writes {}s after it was made a standby (or could not be asked)",
                reach.demote_timeout.as_secs_f64()
            );
            warn!(db = %db.name_any(), from, to, "{note}");
            label((ctx, reach), &pods, from).await?;
            let mut db = db.clone();
            db.status = Some(status);
            let mut undone = before;
            change.reason = format!("{why}; {note}");
            undone.last_primary_change = Some(change);
            update_status(ctx, controller, &db, &undone).await?;
            ctx.events.refused(&db.object_ref(&()), "SwitchoverFailed", &note);
            if let Some(paused) = paused {
                crate::pooler::resume(&db, ctx, paused).await;
            }
            return Ok(None);
        }
    }
    let pods: Vec<&Pod> = current.iter().collect();
    label((ctx, reach), &pods, to).await?;
    if !await_serving(reach, to, true, PROMOTE_TIMEOUT).await {
        // Its instance promotes itself when its label reaches it; nothing to undo.
        warn!(db = %db.name_any(), primary = to, "the new primary does not serve writes yet");
    }
    let seconds = (clock.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    change.seconds = Some(seconds);
    ctx.metrics.primary_changed(controller, kind.name(), seconds);
    // A failover is a Warning (an instance was lost), a switchover Normal (asked for).
    let (reason, verb, warning) = match kind {
        Kind::Failover => ("FailedOver", "failed over", true),
        Kind::Switchover => ("SwitchedOver", "switched over", false),
    };
    let pod = ObjectRef::<Pod>::new(to).within(&ns).into();
    let note = format!("{verb} from {from} to {to} in {seconds:.1}s: {why}");
    ctx.events.primary_changed(&db.object_ref(&()), pod, (reason, warning), note);
    info!(db = %db.name_any(), from, to, why, seconds, "{verb}");
    if let Some(paused) = paused {
        crate::pooler::resume(db, ctx, paused).await;
    }
    Ok(Some(change))
}

/// Wait, up to `timeout`, until the standby `to` no longer streams: its primary's WAL
/// senders end only at the end of a shutdown, after its sessions are ended and its last
/// WAL record is sent. (Whether or not it comes, the pod is deleted next; a primary that
/// did not shut down by itself is then stopped by the kubelet.)
async fn await_shutdown_seen_by(reach: &Instances, to: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match reach.status(to, ASK_TIMEOUT).await {
            Ok(status) if !status.server.as_ref().is_some_and(|s| s.receiving) => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    warn!(to, "the old primary did not shut down by itself: its pod is deleted anyway");
}

/// Delete the pod `old` (that very one) and wait, up to `timeout`, until it is gone: the
/// kubelet removes a pod only once its containers have stopped.
async fn stop_by_deleting(ctx: &Context, old: &Pod, timeout: Duration) -> Result<bool, Error> {
    let (ns, name, uid) = (old.namespace().unwrap_or_default(), old.name_any(), old.uid());
    info!(pod = name, "the old primary runs an instance manager without the API: its pod is deleted to stop it");
    delete_exactly(ctx, old).await?;
    let pods = kube::Api::<Pod>::namespaced(ctx.client.clone(), &ns);
    let deadline = Instant::now() + timeout;
    loop {
        let now =
            pods.get_opt(&name).await.map_err(|source| Error::Read { what: format!("Pod {ns}/{name}"), source })?;
        if now.is_none_or(|p| p.uid() != uid) {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wait until instance `pod` serves writes (`serving`), or provably does not (its
/// instance answers that its server is in recovery, or does not answer: down or
/// shutting down), up to `timeout`. An instance that cannot be asked proves nothing.
async fn await_serving(reach: &Instances, pod: &str, serving: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let now = match reach.status(pod, ASK_TIMEOUT).await {
            Ok(status) => Some(status.server.is_some_and(|s| !s.in_recovery)),
            Err(AskError::Refused(_)) => Some(false),
            Err(AskError::Unreachable(_)) => None,
        };
        if now == Some(serving) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Label each instance's role so that `primary` alone is the primary, the others'
/// labels first. A pod replaced meanwhile is left to its successor's event. Returns
/// `pods` labelled as they are now.
async fn label((ctx, reach): (&Context, &Instances), pods: &[&Pod], primary: &str) -> Result<Vec<Pod>, Error> {
    let mut now: Vec<Pod> = pods.iter().map(|p| (*p).clone()).collect();
    let mut told = Vec::new();
    for (pod, role) in build::relabels(pods, primary) {
        let patch = json!({"metadata": {"labels": {ROLE_LABEL: role}}});
        match merge_into::<PostgreSQL, _>(ctx, pod, patch).await {
            Err(err) if err.is_precondition_failed() => {}
            Ok(_) => {
                if let Some(now) = now.iter_mut().find(|p| p.name_any() == pod.name_any()) {
                    now.labels_mut().insert(ROLE_LABEL.to_owned(), role.to_owned());
                }
                told.push(tell(reach, pod, role));
            }
            Err(err) => return Err(err),
        }
    }
    // The instances are also told at once (the label's file may take seconds); what
    // they were told only stands until the file is refreshed, so the label decides.
    futures::future::join_all(told).await;
    Ok(now)
}

/// Tell each instance that fenced itself its role, as labelled now (after this
/// reconcile's own decisions): that lifts its fence, and it starts as what it is.
async fn lift_fences(reach: &Instances, silences: &Silences, labelled: &[Pod]) {
    let fenced = labelled.iter().filter(|p| silences.fenced(p));
    let tells = fenced.filter_map(|pod| {
        let role = pod.labels().get(ROLE_LABEL)?;
        info!(pod = %pod.name_any(), role, "an instance that fenced itself is told its role");
        Some(tell(reach, pod, role))
    });
    futures::future::join_all(tells).await;
}

/// Tell `pod`'s instance its new `role` directly (its API); best effort: a pod that
/// cannot be reached goes by its label's file.
async fn tell(reach: &Instances, pod: &Pod, role: &str) {
    let name = pod.name_any();
    if let Err(err) = reach.tell(&name, role, TELL_TIMEOUT).await {
        info!(pod = name, role, %err, "the instance could not be told its role: it goes by its label");
    }
}

#[cfg(test)]
mod tests {
    //! The decisions of a change of primary against the mocked apiserver and the
    //! instances' APIs in memory ([`crate::instances::fake`]): who is chosen, what is
    //! written in which order, what each instance is told.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::{Value, json};

    use super::*;
    use crate::instances::fake::{self, FakeInstances};
    use crate::mock;

    const NOW: &str = "2026-11-28T12:00:00Z";

    fn db(annotations: Value) -> PostgreSQL {
        serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "ns", "uid": "uid-db", "annotations": annotations},
            "spec": {"version": "15", "storage": "1Gi", "replicas": 3},
            "status": {"currentPrimary": "db-0"},
        }))
        .unwrap()
    }

    /// An instance's pod: its role label, Ready or not, being deleted or not.
    fn pod(name: &str, role: &str, ready: bool, deleting: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1",
                         "labels": {"app.kubernetes.io/instance": "db", ROLE_LABEL: role}},
            "spec": {"containers": [{"name": "postgres", "ports": [{"name": "instance-api", "containerPort": 8000}]}]},
            "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                       "lastTransitionTime": "2026-11-28T11:00:00Z"}]},
        }))
        .unwrap();
        if deleting {
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(NOW.parse().unwrap()));
        }
        pod
    }

    /// Run the stage on `pods` with the instances `fake` answers for.
    async fn ensure_with(db: &PostgreSQL, pods: Vec<Pod>, fake: &FakeInstances) -> (Primary, mock::Calls) {
        ensure_rolling(db, pods, fake, None, &Silences::default()).await
    }

    /// The same, the StatefulSet's pod template at `revision` (a rolling change).
    async fn ensure_rolling(
        db: &PostgreSQL,
        pods: Vec<Pod>,
        fake: &FakeInstances,
        revision: Option<&str>,
        silences: &Silences,
    ) -> (Primary, mock::Calls) {
        // A merge patch of the PostgreSQL (the switchover's annotation removed) returns it.
        let (answer, stored) = (mock::answer(db), serde_json::to_value(db).unwrap());
        let (ctx, calls) = mock::context(move |call| match call.path.split('?').next() {
            Some(path) if call.method == "PATCH" && path.ends_with("/postgresqls/db") => (200, stored.clone()),
            _ => answer(call),
        });
        let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let reach = fake.reach(db, &names);
        let mut sts = bosun_resources::postgresql::desired_statefulset(
            db,
            &Default::default(),
            None,
            "d",
            bosun_resources::upgrade::Running::of(db, None),
        );
        sts.status = revision.map(|r| k8s_openapi::api::apps::v1::StatefulSetStatus {
            update_revision: Some(r.to_owned()),
            ..Default::default()
        });
        let primary =
            ensure("postgresql", db, &ctx, (&sts, &mock::cache(pods)), (&reach, silences), NOW.parse().unwrap())
                .await
                .unwrap();
        (primary, calls)
    }

    fn position(writes: &[String], line: &str) -> usize {
        writes.iter().position(|w| w == line).unwrap_or_else(|| panic!("{line}: {writes:?}"))
    }

    #[tokio::test]
    async fn a_lost_primary_is_replaced_by_the_standby_with_the_most_wal_decision_first() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::standby("db-1", "0/3000148"));
        fake.set(fake::standby("db-2", "0/3000200"));
        let pods = vec![
            pod("db-0", "primary", false, true),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let (primary, calls) = ensure_with(&db, pods, &fake).await;
        assert_eq!(primary.name, "db-2", "the most WAL received");
        let change = primary.change.unwrap();
        assert_eq!((change.from.as_str(), change.to.as_str(), change.kind.as_str()), ("db-0", "db-2", "Failover"));
        let writes = calls.writes();
        let decided = position(&writes, "PATCH /apis/database.example.com/v1/namespaces/ns/postgresqls/db/status");
        let labelled = position(&writes, "PATCH /api/v1/namespaces/ns/pods/db-2");
        assert!(decided < labelled, "the decision is persisted before any label moves: {writes:?}");
        let status = calls.body("/postgresqls/db/status").unwrap();
        assert_eq!(status["status"]["currentPrimary"], "db-2");
        assert_eq!(calls.body("/pods/db-2").unwrap()["metadata"]["labels"][ROLE_LABEL], "primary");
        assert!(!writes.iter().any(|w| w.ends_with("/pods/db-0")), "a pod being deleted is not relabelled: {writes:?}");
        let told = fake.told();
        assert!(told.contains(&("db-2".into(), "/v1/role".into(), r#"{"role":"primary"}"#.into())), "{told:?}");
        assert!(!told.iter().any(|(pod, _, body)| pod == "db-1" && body.contains("primary")), "{told:?}");
    }

    #[tokio::test]
    async fn a_ready_primary_that_stopped_answering_is_replaced_once_the_standbys_lost_it_too() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        let pods = || {
            vec![
                pod("db-0", "primary", true, false),
                pod("db-1", "replica", true, false),
                pod("db-2", "replica", true, false),
            ]
        };
        let silences = Silences::default();
        let silent = Silent {
            uid: "uid-db-0".into(),
            since: Instant::now() - Duration::from_secs(10),
            at: Timestamp::now(),
            triggered: true,
        };
        silences.lock().silent.insert(("ns".into(), "db-0".into()), silent);
        // The standbys still receive its WAL: only bosun cannot reach it.
        fake.set(fake::standby("db-1", "0/3000148"));
        fake.set(fake::standby("db-2", "0/3000200"));
        let (primary, calls) = ensure_rolling(&db, pods(), &fake, None, &silences).await;
        assert_eq!((primary.name.as_str(), primary.change, primary.recheck), ("db-0", None, Some(PROBE_EVERY)));
        assert!(calls.writes().is_empty(), "nothing written: {:?}", calls.writes());
        // Both lost it too: the one with the most WAL takes its place.
        for (name, lsn) in [("db-1", "0/3000148"), ("db-2", "0/3000200")] {
            let mut lost = fake::standby(name, lsn);
            lost.server.as_mut().unwrap().receiving = false;
            fake.set(lost);
        }
        let (primary, _) = ensure_rolling(&db, pods(), &fake, None, &silences).await;
        let change = primary.change.unwrap();
        assert_eq!((primary.name.as_str(), change.kind.as_str()), ("db-2", "Failover"));
        assert!(change.reason.contains("has not answered for 10s"), "{}", change.reason);
        // Another pod of the same name (a new uid) is not the silent one.
        assert_eq!(silences.of(&pod("db-1", "replica", true, false)), None);
    }

    #[test]
    fn a_silence_triggers_once_when_it_reaches_the_limit_and_ends_with_an_answer() {
        let silences = Silences::default();
        let p = Arc::new(pod("db-0", "primary", true, false));
        let limit = Duration::from_millis(50);
        assert!(silences.record(vec![(p.clone(), false)], limit).is_empty(), "not yet");
        assert!(silences.of(&p).is_some());
        std::thread::sleep(limit);
        assert_eq!(silences.record(vec![(p.clone(), false)], limit).len(), 1, "the limit reached");
        assert!(silences.record(vec![(p.clone(), false)], limit).is_empty(), "triggered once");
        assert!(silences.unanswered_since(&p, limit).is_some());
        assert_eq!(silences.record(vec![(p.clone(), true)], limit).len(), 1, "its end is reported");
        assert_eq!(silences.of(&p), None, "an answer ends it");
        assert!(silences.record(vec![(p.clone(), true)], limit).is_empty());
    }

    #[tokio::test]
    async fn an_instance_that_fenced_itself_is_told_its_role_as_labelled_once_heard_again() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::primary("db-0"));
        fake.set(fake::standby("db-1", "0/3000148"));
        fake.set(fake::standby("db-2", "0/3000148"));
        let pods = vec![
            pod("db-0", "primary", true, false),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let silences = Silences::default();
        // The primary fenced itself (its partition healed before any failover), and so
        // did an old primary since labelled replica.
        let fenced = vec![Arc::new(pods[0].clone()), Arc::new(pods[2].clone())];
        assert_eq!(silences.record_fenced(fenced.clone()).len(), 2);
        assert!(silences.record_fenced(fenced.clone()).is_empty(), "reported once");
        // Still fenced a while after (the tell was lost): reported again.
        let later = Instant::now() + RETELL_FENCED;
        assert_eq!(silences.record_fenced_at(fenced.clone(), later).len(), 2);
        assert!(silences.record_fenced_at(fenced, later + Duration::from_secs(1)).is_empty());
        assert!(silences.fenced(&pods[0]) && !silences.fenced(&pods[1]));
        let (primary, _) = ensure_rolling(&db, pods, &fake, None, &silences).await;
        assert_eq!((primary.name.as_str(), primary.change), ("db-0", None));
        let told = fake.told();
        assert!(told.contains(&("db-0".into(), "/v1/role".into(), r#"{"role":"primary"}"#.into())), "{told:?}");
        assert!(told.contains(&("db-2".into(), "/v1/role".into(), r#"{"role":"replica"}"#.into())), "{told:?}");
        assert!(!told.iter().any(|(pod, _, _)| pod == "db-1"), "{told:?}");
        // No longer fenced: forgotten.
        assert!(silences.record_fenced(vec![]).is_empty());
        assert!(!silences.fenced(&pod("db-0", "primary", true, false)));
    }

    #[tokio::test]
    async fn without_a_standby_that_answers_nothing_moves_so_never_two_primaries() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        // db-1's instance answers without a server; db-2's does not answer at all.
        fake.set(bosun_instance::status::Status { name: "db-1".into(), ..Default::default() });
        let pods = vec![
            pod("db-0", "primary", false, true),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let (primary, calls) = ensure_with(&db, pods, &fake).await;
        assert_eq!((primary.name.as_str(), primary.change), ("db-0", None));
        let writes = calls.writes();
        assert!(!writes.iter().any(|w| w.contains("/status") || w.contains("/pods/")), "nothing written: {writes:?}");
        assert!(fake.told().is_empty(), "{:?}", fake.told());
    }

    /// A standby the watchdog has not heard for a while (cut off with the primary) is
    /// not asked for its WAL position: asked, it would hold the failover for three
    /// timeouts of 10 s.
    #[tokio::test]
    async fn a_standby_silent_to_the_heartbeat_is_not_waited_for() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::standby("db-1", "0/3000148"));
        fake.set(fake::standby("db-2", "0/3000150"));
        // db-2's instance answers nothing (cut off): its pod still looks Ready.
        fake.lock().silent.insert("db-2".into());
        let pods = vec![
            pod("db-0", "primary", false, true),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let silences = Silences::default();
        silences.silent_since(&pods[2], Instant::now() - Duration::from_secs(6));
        let started = Instant::now();
        let (primary, _) = ensure_rolling(&db, pods, &fake, None, &silences).await;
        assert_eq!(primary.name, "db-1");
        assert!(started.elapsed() < Duration::from_secs(5), "waited {:?} for the silent standby", started.elapsed());
    }

    /// `ANY 1` of two standbys: a commit may be on one of them only, so the one that
    /// answers is promoted only when the other answers too (the other may be the one
    /// that has the last acknowledged commits, cut off with the primary).
    #[tokio::test]
    async fn a_synchronous_database_promotes_no_standby_while_one_that_may_hold_the_last_commits_is_silent() {
        let mut db = db(json!({}));
        db.spec.synchronous = Some(bosun_api::postgresql::Synchronous { number: 1 });
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::standby("db-1", "0/3000148"));
        let pods = vec![
            pod("db-0", "primary", false, true),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let (primary, calls) = ensure_with(&db, pods.clone(), &fake).await;
        assert_eq!((primary.name.as_str(), primary.change), ("db-0", None));
        let writes = calls.writes();
        assert!(!writes.iter().any(|w| w.contains("/status") || w.contains("/pods/")), "nothing written: {writes:?}");
        // Both answer: the most advanced is promoted.
        fake.set(fake::standby("db-2", "0/3000150"));
        let (primary, _) = ensure_with(&db, pods, &fake).await;
        assert_eq!(primary.name, "db-2");
        assert!(primary.change.is_some());
    }

    #[tokio::test]
    async fn a_switchover_takes_the_old_primarys_label_first_and_waits_for_it_to_stop() {
        let db = db(json!({SWITCHOVER_ANNOTATION: "db-1"}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::primary("db-0"));
        fake.set(fake::standby("db-1", "0/5000000"));
        fake.set(fake::standby("db-2", "0/5000000"));
        let pods = vec![
            pod("db-0", "primary", true, false),
            pod("db-1", "replica", true, false),
            pod("db-2", "replica", true, false),
        ];
        let (primary, calls) = ensure_with(&db, pods, &fake).await;
        assert_eq!(primary.name, "db-1");
        assert_eq!(primary.change.unwrap().kind, "Switchover");
        let writes = calls.writes();
        let decided = position(&writes, "PATCH /apis/database.example.com/v1/namespaces/ns/postgresqls/db/status");
        let old = position(&writes, "PATCH /api/v1/namespaces/ns/pods/db-0");
        let new = position(&writes, "PATCH /api/v1/namespaces/ns/pods/db-1");
        let forgotten = position(&writes, "PATCH /apis/database.example.com/v1/namespaces/ns/postgresqls/db");
        assert!(decided < old && old < new && new < forgotten, "{writes:?}");
        let told: Vec<(String, String)> = fake.told().into_iter().map(|(pod, _, body)| (pod, body)).collect();
        let first_primary = told.iter().position(|(_, body)| body.contains("primary")).unwrap();
        let demoted = told.iter().position(|t| t == &("db-0".to_owned(), r#"{"role":"replica"}"#.to_owned())).unwrap();
        assert!(demoted < first_primary, "the old primary is told first: {told:?}");
        assert_eq!(told[first_primary].0, "db-1");
    }

    #[tokio::test]
    async fn a_switchover_whose_old_primary_goes_on_serving_is_undone_never_two_primaries() {
        let db = db(json!({SWITCHOVER_ANNOTATION: "db-1"}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::primary("db-0"));
        fake.set(fake::standby("db-1", "0/5000000"));
        fake.lock().stubborn.insert("db-0".into());
        let pods = vec![pod("db-0", "primary", true, false), pod("db-1", "replica", true, false)];
        let (primary, calls) = ensure_with(&db, pods, &fake).await;
        assert_eq!((primary.name.as_str(), primary.change), ("db-0", None), "it keeps the role it still holds");
        let writes = calls.writes();
        let status = "PATCH /apis/database.example.com/v1/namespaces/ns/postgresqls/db/status";
        assert_eq!(writes.iter().filter(|w| *w == status).count(), 2, "decided, then undone: {writes:?}");
        let undone = calls.bodies("/postgresqls/db/status").pop().unwrap();
        assert_eq!(undone["status"]["currentPrimary"], "db-0");
        let change = &undone["status"]["lastPrimaryChange"];
        assert_eq!((change["from"].as_str(), change["to"].as_str()), (Some("db-0"), Some("db-1")));
        assert!(change["reason"].as_str().unwrap().contains("is undone: db-0 still served writes"), "{change}");
        // db-0 labelled a replica, then the primary again; db-1 never the primary.
        let labels: Vec<Value> =
            calls.bodies("/pods/db-0").iter().map(|b| b["metadata"]["labels"][ROLE_LABEL].clone()).collect();
        assert_eq!(labels, [json!("replica"), json!("primary")]);
        assert!(calls.bodies("/pods/db-1").iter().all(|b| b["metadata"]["labels"][ROLE_LABEL] != "primary"));
        assert!(
            !fake.told().iter().any(|(pod, _, body)| pod == "db-1" && body.contains("primary")),
            "{:?}",
            fake.told()
        );
        // The annotation is consumed: not tried again at once.
        assert!(writes.iter().any(|w| w == "PATCH /apis/database.example.com/v1/namespaces/ns/postgresqls/db"));
    }

    /// An instance's pod at pod-template `revision`.
    fn at(mut pod: Pod, revision: &str) -> Pod {
        pod.labels_mut().insert("controller-revision-hash".into(), revision.into());
        pod
    }

    #[tokio::test]
    async fn a_rolling_change_restarts_the_standbys_then_hands_the_primary_over() {
        let db = db(json!({}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::primary("db-0"));
        fake.set(fake::standby("db-1", "0/5000000"));
        fake.set(fake::standby("db-2", "0/5000000"));
        let old = |name, role| at(pod(name, role, true, false), "rev-1");
        let new = |name, role| at(pod(name, role, true, false), "rev-2");

        // Every instance on the old template: the highest standby restarts first.
        let pods = vec![old("db-0", "primary"), old("db-1", "replica"), old("db-2", "replica")];
        let (primary, calls) = ensure_rolling(&db, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert_eq!((primary.name.as_str(), primary.change), ("db-0", None));
        assert_eq!(calls.writes(), ["DELETE /api/v1/namespaces/ns/pods/db-2"], "one at a time, never the primary");

        // A restarted standby not ready yet: nothing else restarts meanwhile.
        let pods =
            vec![old("db-0", "primary"), old("db-1", "replica"), at(pod("db-2", "replica", false, false), "rev-2")];
        let (_, calls) = ensure_rolling(&db, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());

        // Only the primary left on the old template, but the standby to take over does
        // not stream yet (it just restarted): the hand-over waits, and looks again soon.
        let mut catching_up = fake::standby("db-1", "0/5000000");
        catching_up.server.as_mut().unwrap().receiving = false;
        fake.set(catching_up);
        let pods = vec![old("db-0", "primary"), new("db-1", "replica"), new("db-2", "replica")];
        let (primary, calls) = ensure_rolling(&db, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert_eq!((primary.name.as_str(), primary.change.is_none()), ("db-0", true));
        assert_eq!(primary.recheck, Some(STREAM_RECHECK));
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());
        fake.set(fake::standby("db-1", "0/5000000"));

        // Streaming now: a switchover, the primary restarting later as a standby; no pod
        // is deleted by this look.
        let pods = vec![old("db-0", "primary"), new("db-1", "replica"), new("db-2", "replica")];
        let (primary, calls) = ensure_rolling(&db, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert_eq!(primary.name, "db-1", "the lowest ready standby");
        let change = primary.change.unwrap();
        assert_eq!((change.kind.as_str(), change.from.as_str()), ("Switchover", "db-0"));
        assert!(change.reason.contains("rolling change"), "{change:?}");
        assert!(!calls.writes().iter().any(|w| w.starts_with("DELETE")), "{:?}", calls.writes());

        // The old primary, now a standby on the old template, restarts; then all is done.
        let pods = vec![old("db-0", "replica"), new("db-1", "primary"), new("db-2", "replica")];
        let db1 = serde_json::from_value::<PostgreSQL>(json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "ns", "uid": "uid-db"},
            "spec": {"version": "15", "storage": "1Gi", "replicas": 3},
            "status": {"currentPrimary": "db-1"},
        }))
        .unwrap();
        fake.set(fake::primary("db-1"));
        fake.set(fake::standby("db-0", "0/5000000"));
        let (_, calls) = ensure_rolling(&db1, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert_eq!(calls.writes(), ["DELETE /api/v1/namespaces/ns/pods/db-0"]);
        let pods = vec![new("db-0", "replica"), new("db-1", "primary"), new("db-2", "replica")];
        let (_, calls) = ensure_rolling(&db1, pods, &fake, Some("rev-2"), &Silences::default()).await;
        assert!(calls.writes().is_empty(), "{:?}", calls.writes());
    }

    #[tokio::test]
    async fn a_primary_of_the_previous_release_is_stopped_by_deleting_its_pod_then_the_standby_takes_over() {
        // Its instance manager has no API: it cannot say it stopped, so the switchover
        // of a rolling change (the move to the new instance manager) proves it by
        // deleting the pod, and promotes the standby once the pod is gone.
        let db = db(json!({SWITCHOVER_ANNOTATION: "db-1"}));
        let fake = FakeInstances::start(&db).await;
        fake.set(fake::standby("db-1", "0/5000000"));
        let mut legacy = pod("db-0", "primary", true, false);
        legacy.spec = None;
        let (primary, calls) = ensure_with(&db, vec![legacy, pod("db-1", "replica", true, false)], &fake).await;
        assert_eq!(primary.name, "db-1");
        assert_eq!(primary.change.unwrap().kind, "Switchover");
        let writes = calls.writes();
        let unlabelled = position(&writes, "PATCH /api/v1/namespaces/ns/pods/db-0");
        let deleted = position(&writes, "DELETE /api/v1/namespaces/ns/pods/db-0");
        let gone = position(&writes, "GET /api/v1/namespaces/ns/pods/db-0");
        let promoted = position(&writes, "PATCH /api/v1/namespaces/ns/pods/db-1");
        assert!(unlabelled < deleted && deleted < gone && gone < promoted, "{writes:?}");
        assert_eq!(
            writes.iter().filter(|w| w.starts_with("PATCH /api/v1/namespaces/ns/pods/")).count(),
            2,
            "{writes:?}"
        );
    }
}
