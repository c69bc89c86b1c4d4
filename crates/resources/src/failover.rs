//! Which instance of a PostgreSQL is its primary, when that primary is lost, and
//! which standby takes its place: pure decisions from the pods and from the WAL
//! positions the controller asks of each standby.
//!
//! ```text
//!  status.currentPrimary (the intent) + pods ──assess──▶ primary, lost?, candidates, recheck
//!  candidates' (in recovery, received, replayed) ──most_advanced──▶ the one to promote
//!  primary + pods ──relabels──▶ role labels to patch, the old primary's first
//!  StatefulSet revision + pods ──roll──▶ the next instance to restart, or a switchover
//! ```
//!
//! The role label is what instances act on and what the read-write Service selects;
//! `status.currentPrimary` is bosun's decision, written before any label moves, so a
//! bosun restarted in the middle of a change finishes it. A change whose labels never
//! moved (the old primary still holds its label and is Ready again) is abandoned in
//! favour of the instance that holds the label: a label once given is only ever taken
//! away by bosun, so that instance has been the one primary all along.

use std::time::Duration;

use bosun_api::postgresql::PostgreSQL;
use bosun_instance::status::Server;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::postgresql::{DEFAULT_FAILOVER_DELAY, ROLE_LABEL, ROLE_PRIMARY, ROLE_REPLICA, pod_name};

/// `spec.failoverDelay` (the schema admits only `<digits>(ms|s|m|h)`), or its default.
pub fn failover_delay(db: &PostgreSQL) -> Duration {
    let text = db.spec.failover_delay.as_deref().unwrap_or(DEFAULT_FAILOVER_DELAY);
    crate::duration::parse_duration(text).unwrap_or(Duration::from_secs(30))
}

/// What the pods say about the primary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assessment {
    /// The instance that is (or is to be) the primary, before any failover.
    pub primary: String,
    /// Why that primary is lost, when it is.
    pub lost: Option<String>,
    /// Standbys that may take its place: Ready, labelled replica, not being deleted.
    pub candidates: Vec<String>,
    /// When to look again without an event: the primary is not Ready, not for long
    /// enough yet.
    pub recheck: Option<Duration>,
    /// `status.currentPrimary` named another instance whose change never moved a
    /// label; the instance holding the label stays.
    pub abandoned: Option<String>,
    /// Every instance's pod, by name.
    pub pods: Vec<String>,
    /// The primary is lost because it stopped answering while its pod still looks
    /// Ready (its machine lost or cut off): a standby must confirm it before one
    /// takes its place.
    pub unanswered: bool,
}

/// How long a primary whose pod the API still shows Ready has not answered bosun's
/// probes, and how long bosun lets that go (`--postgres-unanswered-failover`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Silence {
    pub since: Duration,
    pub limit: Duration,
}

fn role(pod: &Pod) -> Option<&str> {
    pod.labels().get(ROLE_LABEL).map(String::as_str)
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The pod's Ready condition: whether it is True and since when it has been what it is.
fn readiness(pod: &Pod) -> (bool, Option<Timestamp>) {
    let ready =
        pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) => (c.status == "True", c.last_transition_time.as_ref().map(|t| t.0)),
        None => (false, pod.metadata.creation_timestamp.as_ref().map(|t| t.0)),
    }
}

/// Whether the pod is Ready.
pub fn pod_ready(pod: &Pod) -> bool {
    readiness(pod).0
}

/// Assess the primary of `db` among `pods` (its instances' pods) at `now`, from the
/// pods alone.
pub fn assess(db: &PostgreSQL, pods: &[&Pod], now: Timestamp) -> Assessment {
    assess_heard(db, pods, now, None)
}

/// Assess the primary of `db` among `pods` at `now`, and by how long it has not
/// answered (`silence`): a Ready pod that stopped answering is how the loss of its
/// machine looks until Kubernetes declares the node dead (minutes).
pub fn assess_heard(db: &PostgreSQL, pods: &[&Pod], now: Timestamp, silence: Option<Silence>) -> Assessment {
    let recorded = db.status.as_ref().and_then(|s| s.current_primary.clone());
    let mut primary = recorded.clone().unwrap_or_else(|| pod_name(db, 0));
    let mut abandoned = None;
    let holder = pods.iter().find(|p| role(p) == Some(ROLE_PRIMARY) && !deleting(p) && readiness(p).0);
    if let Some(holder) = holder
        && holder.name_any() != primary
    {
        abandoned = Some(std::mem::replace(&mut primary, holder.name_any()));
    }
    let candidates = pods
        .iter()
        .filter(|p| p.name_any() != primary && role(p) == Some(ROLE_REPLICA) && !deleting(p) && readiness(p).0)
        .map(|p| p.name_any())
        .collect();
    let names = pods.iter().map(|p| p.name_any()).collect();
    let mut assessment = Assessment { primary, candidates, abandoned, pods: names, ..Assessment::default() };
    if db.spec.replicas <= 1 || recorded.is_none() {
        // Nothing to fail over to, or no primary chosen yet (a new database).
        return assessment;
    }
    let name = assessment.primary.clone();
    let Some(pod) = pods.iter().find(|p| p.name_any() == name) else {
        assessment.lost = Some(format!("the pod of the primary {name} was deleted (it is gone)"));
        return assessment;
    };
    if deleting(pod) {
        assessment.lost = Some(format!("the pod of the primary {name} is being deleted"));
        return assessment;
    }
    if role(pod).is_none() {
        // A pod is labelled as soon as bosun sees it: one without a label is a new pod
        // of the same name, the primary's old pod was deleted.
        assessment.lost = Some(format!("the pod of the primary {name} was deleted and replaced"));
        return assessment;
    }
    let (ready, since) = readiness(pod);
    if !ready {
        let delay = failover_delay(db);
        let waited = since.map_or(Duration::ZERO, |s| now.duration_since(s).unsigned_abs());
        if waited >= delay {
            assessment.lost = Some(format!(
                "the primary {name} has not been ready for {}s (spec.failoverDelay {})",
                waited.as_secs(),
                db.spec.failover_delay.as_deref().unwrap_or(DEFAULT_FAILOVER_DELAY)
            ));
        } else {
            assessment.recheck = Some(delay - waited + Duration::from_millis(200));
        }
    } else if let Some(silence) = silence {
        if silence.since >= silence.limit {
            assessment.lost = Some(format!(
                "the primary {name} has not answered for {}s, though its pod looks Ready (its node lost or cut off; \
                 --postgres-unanswered-failover {}s)",
                silence.since.as_secs(),
                silence.limit.as_secs()
            ));
            assessment.unanswered = true;
        } else {
            assessment.recheck = Some(silence.limit - silence.since + Duration::from_millis(200));
        }
    }
    assessment
}

/// The ordinal of an instance's pod (`<name>-<ordinal>`).
pub fn ordinal(db: &PostgreSQL, pod: &str) -> Option<i32> {
    pod.strip_prefix(&format!("{}-", db.name_any()))?.parse().ok()
}

/// How many instances the StatefulSet keeps: `spec.replicas`, or more while the
/// primary's ordinal is beyond it (scaling down never removes the primary; it is
/// switched over to a lower instance first).
pub fn kept_replicas(db: &PostgreSQL) -> i32 {
    let primary = db.status.as_ref().and_then(|s| s.current_primary.as_deref());
    let needed = primary.and_then(|p| ordinal(db, p)).map_or(0, |o| o + 1);
    db.spec.replicas.max(needed)
}

/// When `spec.replicas` leaves the primary out: the standby to switch over to first
/// (the lowest kept one that is Ready), and why.
pub fn scale_down_switchover(db: &PostgreSQL, assessment: &Assessment) -> Option<(String, String)> {
    let primary = ordinal(db, &assessment.primary)?;
    if primary < db.spec.replicas {
        return None;
    }
    let to = assessment.candidates.iter().filter(|c| ordinal(db, c).is_some_and(|o| o < db.spec.replicas)).min()?;
    let why = format!(
        "spec.replicas {} removes the primary {}: it hands over to {to} first",
        db.spec.replicas, assessment.primary
    );
    Some((to.clone(), why))
}

/// How long after a switchover bosun had to undo (the old primary did not stop
/// serving) it waits before starting another of its own (a rolling change, a
/// scale-down); one asked for by annotation goes at once.
pub const SWITCHOVER_RETRY: Duration = Duration::from_secs(120);

/// How much longer bosun's own switchovers wait: `Some` within [`SWITCHOVER_RETRY`] of
/// an undone one (`status.lastPrimaryChange` a switchover away from the primary that
/// `status.currentPrimary` still names).
pub fn switchover_backoff(db: &PostgreSQL, now: Timestamp) -> Option<Duration> {
    let status = db.status.as_ref()?;
    let last = status.last_primary_change.as_ref()?;
    let current = status.current_primary.as_deref()?;
    if last.kind != "Switchover" || last.from != current || last.to == current {
        return None;
    }
    let started: Timestamp = last.started.parse().ok()?;
    let since = now.duration_since(started).unsigned_abs();
    SWITCHOVER_RETRY.checked_sub(since).filter(|d| !d.is_zero())
}

/// What becomes of a switchover asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switchover {
    /// It can go ahead now.
    Go,
    /// The target is an instance but not a Ready standby yet: the request waits.
    Wait(String),
    /// It cannot be done (the target is the primary, or no instance): the request goes.
    Refuse(String),
}

/// Whether a switchover to `to` can go ahead now, waits, or is refused, and why.
pub fn switchover(assessment: &Assessment, to: &str) -> Switchover {
    let primary = &assessment.primary;
    if to == primary {
        return Switchover::Refuse(format!("{to} is already the primary: nothing to switch over"));
    }
    if !assessment.pods.iter().any(|p| p == to) {
        return Switchover::Refuse(format!(
            "{to} is not an instance of this database (its instances: {}): name a standby's pod",
            assessment.pods.join(", ")
        ));
    }
    if !assessment.candidates.iter().any(|c| c == to) {
        return Switchover::Wait(format!("{to} is not a Ready standby yet: the switchover waits for it"));
    }
    Switchover::Go
}

/// Where a standby is in the WAL, as its instance says ([`Position::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub in_recovery: bool,
    /// The last WAL received and flushed to its disk (`None`: it never streamed).
    pub received: Option<u64>,
    pub replayed: Option<u64>,
}

/// An LSN as PostgreSQL prints it (`16/B374D848`).
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.trim().split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

impl Position {
    /// Where an instance's server says it is.
    pub fn of(server: &Server) -> Position {
        let lsn = |l: &Option<String>| l.as_deref().and_then(parse_lsn);
        Position {
            in_recovery: server.in_recovery,
            received: lsn(&server.receive_lsn),
            replayed: lsn(&server.replay_lsn),
        }
    }

    /// How far its WAL goes: what it received (or, never having streamed, replayed).
    fn reach(&self) -> u64 {
        self.received.max(self.replayed).unwrap_or(0)
    }
}

/// The standby to promote: in recovery, with the most WAL (then the most replayed,
/// then the lowest name, so the choice is stable).
pub fn most_advanced(positions: &[(String, Position)]) -> Option<&str> {
    positions
        .iter()
        .filter(|(_, p)| p.in_recovery)
        .max_by(|(a, pa), (b, pb)| {
            pa.reach().cmp(&pb.reach()).then(pa.replayed.cmp(&pb.replayed)).then_with(|| b.cmp(a))
        })
        .map(|(name, _)| name.as_str())
}

/// How many standbys must say where they are in the WAL before one of them may be
/// promoted. With `spec.synchronous` (`ANY k` of its `n` standbys), a commit was
/// confirmed once `k` of them had it, so it may be missing from any `n − k`: only
/// `n − k + 1` standbys are sure to hold every acknowledged commit between them, and
/// the most advanced of them holds them all. Without it, one (asynchronous replication
/// may lose the last commits at a failover, by its nature).
pub fn promotion_quorum(db: &PostgreSQL) -> usize {
    let standbys = usize::try_from(db.spec.replicas.saturating_sub(1)).unwrap_or(0);
    match &db.spec.synchronous {
        Some(sync) => standbys.saturating_sub(usize::try_from(sync.number).unwrap_or(0)) + 1,
        None => 1,
    }
}

/// The role labels to set so that `primary` alone is labelled primary: every other
/// pod first (the old primary loses its label before the new one gets it, so the
/// read-write Service never selects two), the primary last.
pub fn relabels<'a>(pods: &[&'a Pod], primary: &str) -> Vec<(&'a Pod, &'static str)> {
    let mut changes: Vec<(&Pod, &'static str)> = pods
        .iter()
        .filter(|p| !deleting(p))
        .map(|p| (*p, if p.name_any() == primary { ROLE_PRIMARY } else { ROLE_REPLICA }))
        .filter(|(p, want)| role(p) != Some(*want))
        .collect();
    changes.sort_by_key(|(_, want)| *want == ROLE_PRIMARY);
    changes
}

/// The label the StatefulSet controller puts on each pod: the revision it runs.
const REVISION_LABEL: &str = "controller-revision-hash";

/// The next step of a rolling change of the instances (a new pod template: image,
/// resources, settings). The StatefulSet is `OnDelete`: bosun restarts each instance
/// itself, so that the primary restarts once, last, and never while it is the primary
/// (unless it is the only instance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roll {
    /// Every instance runs the StatefulSet's revision (or the revision is not known yet).
    Done,
    /// Restart this instance (delete its pod; the StatefulSet recreates it on the new
    /// revision), because of the second field.
    Restart(String, String),
    /// Every standby runs the new revision: hand the primary over to this one, whose
    /// old pod is then a standby's.
    Switchover(String),
    /// An instance is not back yet: the next step waits for it.
    Wait(String),
}

/// The next step of rolling `sts`'s revision out to `pods` (the instances' pods),
/// `assessment` saying which is the primary and which standbys are Ready.
pub fn roll(sts: &StatefulSet, pods: &[&Pod], assessment: &Assessment) -> Roll {
    let status = sts.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation) == sts.metadata.generation;
    let Some(revision) = status.and_then(|s| s.update_revision.as_deref()).filter(|_| observed) else {
        return Roll::Done;
    };
    let outdated = |p: &&&Pod| p.labels().get(REVISION_LABEL).map(String::as_str) != Some(revision);
    if !pods.iter().any(|p| outdated(&p)) {
        return Roll::Done;
    }
    if let Some(p) = pods.iter().find(|p| deleting(p)) {
        return Roll::Wait(format!("{} is restarting", p.name_any()));
    }
    let wanted = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if (pods.len() as i32) < wanted {
        return Roll::Wait(format!("{} of {wanted} instances exist", pods.len()));
    }
    let primary = assessment.primary.as_str();
    let why = |p: &str, role: &str| format!("{p} ({role}) runs an old revision of the pod template, not {revision}");
    let mut standbys: Vec<&&Pod> = pods.iter().filter(|p| p.name_any() != primary && outdated(p)).collect();
    // Highest ordinal first, as a StatefulSet would.
    standbys.sort_by_key(|p| std::cmp::Reverse(p.name_any()));
    // A standby that is down anyway restarts at once; a serving one when all serve.
    if let Some(p) = standbys.iter().find(|p| !readiness(p).0) {
        return Roll::Restart(p.name_any(), why(&p.name_any(), "a standby, not ready"));
    }
    if let Some(p) = pods.iter().find(|p| !readiness(p).0) {
        return Roll::Wait(format!("{} is not ready", p.name_any()));
    }
    if let Some(p) = standbys.first() {
        return Roll::Restart(p.name_any(), why(&p.name_any(), "a standby"));
    }
    // Only the primary is left on the old revision.
    if pods.len() == 1 {
        return Roll::Restart(primary.to_owned(), why(primary, "the only instance"));
    }
    match assessment.candidates.iter().min() {
        Some(to) => Roll::Switchover(to.clone()),
        None => Roll::Wait("no standby is ready to take the primary's place".to_owned()),
    }
}

/// How long after a change of primary bosun looks for standbys that cannot follow
/// the new primary (see [`followers`]).
pub const FOLLOW_WINDOW: Duration = Duration::from_secs(600);
/// How long a standby may go without streaming from a new primary before it is
/// looked at: a restart and a reconnect take seconds.
pub const FOLLOW_GRACE: Duration = Duration::from_secs(30);
/// How often the standbys are looked at again while one does not stream.
pub const FOLLOW_RECHECK: Duration = Duration::from_secs(10);

/// What to do about standbys that may not follow the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Nothing: no recent change of primary (or it is too long ago).
    Nothing,
    /// Look again after this long: the change is too recent to judge.
    Later(Duration),
    /// Ask the primary who streams from it; these standbys (Ready, labelled replica,
    /// not being deleted) should.
    Look(Vec<String>),
}

/// After a change of primary, every standby should stream from the new one. One that
/// does not may hold WAL past the point where the new primary's timeline forked off —
/// the old primary wrote on for a moment after the standbys' positions were compared
/// (a force-deleted pod runs until its kubelet stops it), or the standby did not
/// answer then — and would wait forever for WAL that never comes: such a standby is
/// rewound (bosun looks for [`FOLLOW_WINDOW`] after the change, from [`FOLLOW_GRACE`]).
pub fn followers(db: &PostgreSQL, pods: &[&Pod], primary: &str, now: Timestamp) -> Follow {
    let Some(change) = db.status.as_ref().and_then(|s| s.last_primary_change.as_ref()) else {
        return Follow::Nothing;
    };
    let Ok(started) = change.started.parse::<Timestamp>() else { return Follow::Nothing };
    let since = now.duration_since(started).unsigned_abs();
    if since >= FOLLOW_WINDOW {
        return Follow::Nothing;
    }
    if let Some(wait) = FOLLOW_GRACE.checked_sub(since).filter(|d| !d.is_zero()) {
        return Follow::Later(wait);
    }
    let standbys = pods
        .iter()
        .filter(|p| p.name_any() != primary && role(p) == Some(ROLE_REPLICA) && !deleting(p) && readiness(p).0)
        .map(|p| p.name_any())
        .collect();
    Follow::Look(standbys)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn db(replicas: i32, current: Option<&str>) -> PostgreSQL {
        let mut value = json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"version": "15", "storage": "1Gi", "replicas": replicas, "failoverDelay": "10s"},
        });
        if let Some(c) = current {
            value["status"] = json!({"currentPrimary": c});
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_synchronous_database_promotes_only_among_enough_standbys_to_hold_every_acknowledged_commit() {
        let mut three = db(3, Some("db-0"));
        assert_eq!(promotion_quorum(&three), 1, "asynchronous: any standby");
        three.spec.synchronous = Some(bosun_api::postgresql::Synchronous { number: 1 });
        assert_eq!(promotion_quorum(&three), 2, "ANY 1 of 2: both");
        let mut five = db(5, Some("db-0"));
        five.spec.synchronous = Some(bosun_api::postgresql::Synchronous { number: 2 });
        assert_eq!(promotion_quorum(&five), 3, "ANY 2 of 4: three");
        five.spec.synchronous = Some(bosun_api::postgresql::Synchronous { number: 4 });
        assert_eq!(promotion_quorum(&five), 1, "ANY 4 of 4: every standby has every commit");
    }

    fn pod(name: &str, role: Option<&str>, ready: bool, since: &str) -> Pod {
        let mut labels = json!({});
        if let Some(r) = role {
            labels[ROLE_LABEL] = json!(r);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": since}]},
        }))
        .unwrap()
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    const T0: &str = "2026-11-25T10:00:00Z";

    #[test]
    fn standbys_are_looked_at_from_the_grace_until_the_window_after_a_change_of_primary() {
        let mut d = db(3, Some("db-1"));
        let (p0, p1) = (pod("db-0", Some("replica"), true, T0), pod("db-1", Some("primary"), true, T0));
        let (p2, mut gone) = (pod("db-2", Some("replica"), false, T0), pod("db-3", Some("replica"), true, T0));
        gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(T0)));
        let pods = [&p0, &p1, &p2, &gone];
        assert_eq!(followers(&d, &pods, "db-1", at(T0)), Follow::Nothing, "no change of primary");
        let change = json!({"from": "db-0", "to": "db-1", "kind": "Failover", "reason": "x", "started": T0});
        d.status.as_mut().unwrap().last_primary_change = Some(serde_json::from_value(change).unwrap());
        assert_eq!(followers(&d, &pods, "db-1", at("2026-11-25T10:00:10Z")), Follow::Later(Duration::from_secs(20)));
        // Ready standbys only: one not ready is restarting anyway, one deleted goes.
        assert_eq!(followers(&d, &pods, "db-1", at("2026-11-25T10:00:30Z")), Follow::Look(vec!["db-0".into()]));
        assert_eq!(followers(&d, &pods, "db-1", at("2026-11-25T10:10:00Z")), Follow::Nothing, "too long ago");
    }

    #[test]
    fn a_new_database_starts_with_instance_0_and_never_fails_over() {
        let p0 = pod("db-0", None, false, T0);
        let a = assess(&db(3, None), &[&p0], at("2026-11-25T11:00:00Z"));
        assert_eq!(a.primary, "db-0");
        assert_eq!(a.lost, None);
    }

    #[test]
    fn a_primary_gone_deleted_or_replaced_is_lost_at_once() {
        let (p1, p2) = (pod("db-1", Some("replica"), true, T0), pod("db-2", Some("replica"), true, T0));
        let d = db(3, Some("db-0"));
        let gone = assess(&d, &[&p1, &p2], at(T0));
        assert_eq!(gone.lost.as_deref(), Some("the pod of the primary db-0 was deleted (it is gone)"));
        assert_eq!(gone.candidates, ["db-1", "db-2"]);
        let mut deleting = pod("db-0", Some("primary"), true, T0);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(T0)));
        assert!(assess(&d, &[&deleting, &p1], at(T0)).lost.unwrap().contains("being deleted"));
        let replaced = pod("db-0", None, false, T0);
        assert!(assess(&d, &[&replaced, &p1], at(T0)).lost.unwrap().contains("replaced"));
        // One instance: nothing to fail over to, the pod restarts in place.
        assert_eq!(assess(&db(1, Some("db-0")), &[&replaced], at(T0)).lost, None);
    }

    #[test]
    fn a_primary_not_ready_is_lost_after_the_failover_delay_and_looked_at_again_then() {
        let d = db(2, Some("db-0"));
        let p0 = pod("db-0", Some("primary"), false, T0);
        let p1 = pod("db-1", Some("replica"), true, T0);
        let early = assess(&d, &[&p0, &p1], at("2026-11-25T10:00:04Z"));
        assert_eq!(early.lost, None);
        assert_eq!(early.recheck, Some(Duration::from_millis(6200)));
        let late = assess(&d, &[&p0, &p1], at("2026-11-25T10:00:10Z"));
        assert_eq!(late.lost.as_deref(), Some("the primary db-0 has not been ready for 10s (spec.failoverDelay 10s)"));
        let ready = pod("db-0", Some("primary"), true, T0);
        assert_eq!(
            assess(&d, &[&ready, &p1], at("2026-11-25T12:00:00Z")),
            Assessment {
                primary: "db-0".into(),
                candidates: vec!["db-1".into()],
                pods: vec!["db-0".into(), "db-1".into()],
                ..Assessment::default()
            }
        );
    }

    #[test]
    fn a_ready_primary_that_stopped_answering_is_lost_after_the_limit_and_only_then() {
        let d = db(2, Some("db-0"));
        let (p0, p1) = (pod("db-0", Some("primary"), true, T0), pod("db-1", Some("replica"), true, T0));
        let silent = |since: u64| Some(Silence { since: Duration::from_secs(since), limit: Duration::from_secs(5) });
        let early = assess_heard(&d, &[&p0, &p1], at(T0), silent(2));
        assert_eq!((early.lost, early.unanswered), (None, false));
        assert_eq!(early.recheck, Some(Duration::from_millis(3200)), "looked at again when the limit is reached");
        let late = assess_heard(&d, &[&p0, &p1], at(T0), silent(5));
        assert!(late.unanswered, "{late:?}");
        assert!(late.lost.unwrap().starts_with("the primary db-0 has not answered for 5s, though its pod looks Ready"));
        assert_eq!(late.candidates, ["db-1"]);
        // A pod not Ready is the failover delay's (the kubelet still reports on it).
        let not_ready = pod("db-0", Some("primary"), false, T0);
        let a = assess_heard(&d, &[&not_ready, &p1], at("2026-11-25T10:00:04Z"), silent(60));
        assert_eq!((a.lost, a.unanswered), (None, false));
        // One instance: nothing to fail over to.
        assert_eq!(assess_heard(&db(1, Some("db-0")), &[&p0], at(T0), silent(60)).lost, None);
    }

    #[test]
    fn a_change_that_moved_no_label_gives_way_to_the_ready_holder_of_the_label() {
        let p0 = pod("db-0", Some("primary"), true, T0);
        let p1 = pod("db-1", Some("replica"), true, T0);
        let a = assess(&db(2, Some("db-1")), &[&p0, &p1], at(T0));
        assert_eq!((a.primary.as_str(), a.abandoned.as_deref(), a.lost), ("db-0", Some("db-1"), None));
        // Once the old primary lost its label, the change goes on.
        let p0 = pod("db-0", Some("replica"), false, T0);
        let a = assess(&db(2, Some("db-1")), &[&p0, &p1], at(T0));
        assert_eq!((a.primary.as_str(), a.abandoned), ("db-1", None));
    }

    #[test]
    fn the_most_advanced_standby_is_promoted() {
        let p = |answer: &str| Position::of(&bosun_instance::status::parse_server(answer).unwrap());
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(p("t|2|not an lsn|0/1|||17").received, None);
        let positions = vec![
            ("db-1".to_owned(), p("t|1|0/3000148|0/3000100|||17")),
            ("db-2".to_owned(), p("t|1|0/3000200|0/3000000|||17")),
            ("db-3".to_owned(), p("f|1|0/9000000|0/9000000|||17")),
            ("db-4".to_owned(), p("t|1||0/3000100|||17")),
        ];
        assert_eq!(most_advanced(&positions), Some("db-2"), "the most received, not replayed; never a primary");
        let tie = vec![("db-2".to_owned(), p("t|1|0/5|0/5|||17")), ("db-1".to_owned(), p("t|1|0/5|0/5|||17"))];
        assert_eq!(most_advanced(&tie), Some("db-1"));
        assert_eq!(most_advanced(&[]), None);
    }

    #[test]
    fn the_old_primary_loses_its_label_before_the_new_one_gets_it() {
        let p0 = pod("db-0", Some("primary"), false, T0);
        let p1 = pod("db-1", Some("replica"), true, T0);
        let p2 = pod("db-2", None, false, T0);
        let changes: Vec<_> = relabels(&[&p1, &p0, &p2], "db-1").into_iter().map(|(p, r)| (p.name_any(), r)).collect();
        assert_eq!(changes, [("db-0".into(), "replica"), ("db-2".into(), "replica"), ("db-1".into(), "primary")]);
        assert!(relabels(&[&p0, &p1], "db-0").is_empty());
    }

    #[test]
    fn a_switchover_goes_to_a_ready_standby_only() {
        let p0 = pod("db-0", Some("primary"), true, T0);
        let p1 = pod("db-1", Some("replica"), true, T0);
        let p2 = pod("db-2", Some("replica"), false, T0);
        let a = assess(&db(3, Some("db-0")), &[&p0, &p1, &p2], at(T0));
        assert_eq!(switchover(&a, "db-1"), Switchover::Go);
        let refused = |to: &str| match switchover(&a, to) {
            Switchover::Refuse(why) | Switchover::Wait(why) => why,
            Switchover::Go => String::new(),
        };
        assert!(refused("db-0").contains("already the primary"));
        assert!(matches!(switchover(&a, "db-2"), Switchover::Wait(why) if why.contains("not a Ready standby yet")));
        assert!(refused("other-1").contains("instances: db-0, db-1, db-2"));
    }

    #[test]
    fn scaling_down_never_removes_the_primary_it_hands_over_first() {
        let p0 = pod("db-0", Some("replica"), true, T0);
        let p1 = pod("db-1", Some("replica"), true, T0);
        let p2 = pod("db-2", Some("primary"), true, T0);
        let mut d = db(1, Some("db-2"));
        assert_eq!(kept_replicas(&d), 3, "instance 2 is the primary: it stays");
        let a = assess(&d, &[&p0, &p1, &p2], at(T0));
        let (to, why) = scale_down_switchover(&d, &a).unwrap();
        assert_eq!(to, "db-0");
        assert!(why.contains("spec.replicas 1 removes the primary db-2"), "{why}");
        d.spec.replicas = 3;
        assert_eq!(scale_down_switchover(&d, &assess(&d, &[&p0, &p1, &p2], at(T0))), None);
        let d = db(2, Some("db-0"));
        assert_eq!(kept_replicas(&d), 2);
    }

    #[test]
    fn the_failover_delay_reads_every_unit() {
        let mut d = db(2, None);
        assert_eq!(failover_delay(&d), Duration::from_secs(10));
        for (text, want) in [("500ms", 500), ("2m", 120_000), ("1h", 3_600_000), ("45s", 45_000)] {
            d.spec.failover_delay = Some(text.to_owned());
            assert_eq!(failover_delay(&d), Duration::from_millis(want), "{text}");
        }
        d.spec.failover_delay = None;
        assert_eq!(failover_delay(&d), Duration::from_secs(30));
    }
    fn sts(replicas: i32, revision: &str, observed: bool) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns", "generation": 2},
            "spec": {"replicas": replicas, "serviceName": "db", "selector": {}, "template": {}},
            "status": {"replicas": replicas, "observedGeneration": if observed {2} else {1}, "updateRevision": revision},
        }))
        .unwrap()
    }

    fn on(mut pod: Pod, revision: &str) -> Pod {
        pod.labels_mut().insert(REVISION_LABEL.to_owned(), revision.to_owned());
        pod
    }

    /// The steps of a rolling change of three instances, db-1 the primary: each
    /// returned step is carried out (a restart: the pod on the new revision, Ready; a
    /// switchover: the roles swapped) until the roll is done.
    #[test]
    fn a_roll_restarts_the_standbys_highest_first_then_switches_over_then_restarts_the_old_primary() {
        let set = sts(3, "new", true);
        let mut pods = vec![
            on(pod("db-0", Some(ROLE_REPLICA), true, T0), "old"),
            on(pod("db-1", Some(ROLE_PRIMARY), true, T0), "old"),
            on(pod("db-2", Some(ROLE_REPLICA), true, T0), "old"),
        ];
        let mut primary = "db-1".to_owned();
        let mut steps = Vec::new();
        loop {
            let d = db(3, Some(&primary));
            let refs: Vec<&Pod> = pods.iter().collect();
            let a = assess(&d, &refs, at(T0));
            match roll(&set, &refs, &a) {
                Roll::Done => break,
                Roll::Restart(name, why) => {
                    assert!(why.contains("not new"), "{why}");
                    assert_ne!(name, primary, "the primary restarted while primary");
                    steps.push(format!("restart {name}"));
                    let p = pods.iter_mut().find(|p| p.name_any() == name).unwrap();
                    p.labels_mut().insert(REVISION_LABEL.to_owned(), "new".to_owned());
                }
                Roll::Switchover(to) => {
                    steps.push(format!("switchover to {to}"));
                    for p in &mut pods {
                        let role = if p.name_any() == to { ROLE_PRIMARY } else { ROLE_REPLICA };
                        p.labels_mut().insert(ROLE_LABEL.to_owned(), role.to_owned());
                    }
                    primary = to;
                }
                Roll::Wait(why) => panic!("nothing to wait for: {why}"),
            }
            assert!(steps.len() < 10, "{steps:?}");
        }
        assert_eq!(steps, ["restart db-2", "restart db-0", "switchover to db-0", "restart db-1"]);
    }

    #[test]
    fn a_roll_waits_for_a_restarted_instance_and_restarts_a_down_standby_at_once() {
        let set = sts(3, "new", true);
        let d = db(3, Some("db-0"));
        let p0 = on(pod("db-0", Some(ROLE_PRIMARY), true, T0), "old");
        let p1 = on(pod("db-1", Some(ROLE_REPLICA), true, T0), "old");
        let p2 = on(pod("db-2", Some(ROLE_REPLICA), false, T0), "new");
        let refs = [&p0, &p1, &p2];
        let a = assess(&d, &refs, at(T0));
        assert_eq!(roll(&set, &refs, &a), Roll::Wait("db-2 is not ready".to_owned()));
        // A standby already down (crash-looping on the old template) is not waited for.
        let p1_down = on(pod("db-1", Some(ROLE_REPLICA), false, T0), "old");
        let refs = [&p0, &p1_down, &p2];
        let a = assess(&d, &refs, at(T0));
        assert!(matches!(roll(&set, &refs, &a), Roll::Restart(n, _) if n == "db-1"));
        // A missing instance (the StatefulSet recreating it) is waited for.
        let refs = [&p0, &p1];
        let a = assess(&d, &refs, at(T0));
        assert_eq!(roll(&set, &refs, &a), Roll::Wait("2 of 3 instances exist".to_owned()));
    }

    #[test]
    fn a_roll_of_one_instance_restarts_it_and_an_unobserved_revision_rolls_nothing() {
        let d = db(1, Some("db-0"));
        let p0 = on(pod("db-0", Some(ROLE_PRIMARY), true, T0), "old");
        let a = assess(&d, &[&p0], at(T0));
        assert!(
            matches!(roll(&sts(1, "new", true), &[&p0], &a), Roll::Restart(n, why) if n == "db-0" && why.contains("only instance"))
        );
        assert_eq!(roll(&sts(1, "new", false), &[&p0], &a), Roll::Done, "the revision of an older generation");
        let current = on(pod("db-0", Some(ROLE_PRIMARY), true, T0), "new");
        assert_eq!(roll(&sts(1, "new", true), &[&current], &a), Roll::Done);
    }

    #[test]
    fn a_roll_never_switches_over_to_a_standby_that_is_not_ready() {
        let set = sts(2, "new", true);
        let d = db(2, Some("db-0"));
        let p0 = on(pod("db-0", Some(ROLE_PRIMARY), true, T0), "old");
        let p1 = on(pod("db-1", Some(ROLE_REPLICA), false, T0), "new");
        let a = assess(&d, &[&p0, &p1], at(T0));
        assert_eq!(roll(&set, &[&p0, &p1], &a), Roll::Wait("db-1 is not ready".to_owned()));
    }

    #[test]
    fn after_an_undone_switchover_bosun_waits_before_its_own_next_one() {
        let mut d = db(3, Some("db-0"));
        let change = |to: &str| bosun_api::postgresql::PrimaryChange {
            from: "db-0".into(),
            to: to.into(),
            kind: "Switchover".into(),
            reason: "a rolling change; undone".into(),
            started: T0.into(),
            seconds: None,
        };
        d.status.as_mut().unwrap().last_primary_change = Some(change("db-1"));
        assert_eq!(switchover_backoff(&d, at("2026-11-25T10:00:30Z")), Some(Duration::from_secs(90)));
        assert_eq!(switchover_backoff(&d, at("2026-11-25T10:02:00Z")), None, "retried after SWITCHOVER_RETRY");
        // A switchover that happened (the status names its target) holds nothing back.
        d.status.as_mut().unwrap().current_primary = Some("db-1".into());
        assert_eq!(switchover_backoff(&d, at("2026-11-25T10:00:30Z")), None);
    }
}
