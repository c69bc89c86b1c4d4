//! Ordered teardown: the decision behind a finalizer that deletes a resource's children
//! in steps, each step gone from the API before the next one starts (a stack: frontend,
//! backend, cache, database). Pure: what of each step is still there, how the owner is
//! being deleted and the time go in; what to do comes out.
//!
//! ```text
//!  owner being deleted ─▶ its namespace is terminating ─────────────▶ Release(NamespaceTerminating)
//!                       ─▶ deleted with propagation orphan/foreground ─▶ Release(Propagation)
//!                       ─▶ the first step with something left: none ──▶ Release(Done)
//!                            │ it has lasted the timeout ─────────────▶ Release(TimedOut)
//!                            └▶ Wait: delete what of it is not being deleted yet; look again
//! ```
//!
//! A step's time runs from the earliest `deletionTimestamp` of what is left of it — the
//! apiserver's record of when bosun deleted it, so a restart of bosun neither resets nor
//! loses the count — or from now when nothing of it is being deleted yet. A step that
//! has lasted [`Bound::stuck_after`] is reported stuck; one that has lasted
//! [`Bound::timeout`] releases the owner: its finalizer goes, and the garbage collector
//! deletes what is left, all at once. So a bug, a foreign finalizer or a node that never
//! confirms a pod's end holds a deletion up for a bounded time, never for ever.

use std::time::Duration;

use jiff::{RoundMode, Timestamp, TimestampRound, Unit};

/// The finalizers of Kubernetes' garbage collector: they say how an object is being
/// deleted, not that something holds it for a cleanup of its own.
pub const GC_FINALIZERS: &[&str] = &[FOREGROUND, ORPHAN];
/// `propagationPolicy: Foreground`: the garbage collector deletes every dependent at once
/// and the owner goes when they are gone.
pub const FOREGROUND: &str = "foregroundDeletion";
/// `propagationPolicy: Orphan` (`kubectl delete --cascade=orphan`): the dependents stay.
pub const ORPHAN: &str = "orphan";

/// How long a step may last before it is reported stuck, at most (see [`Bound::stuck_after`]).
pub const STUCK_AFTER: Duration = Duration::from_secs(30);
/// How long a step may last before bosun stops waiting for it, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a step under way is looked at again without a watch event, at most.
pub const LOOK_AGAIN: Duration = Duration::from_secs(10);

/// An object of a step that still exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    pub kind: String,
    pub name: String,
    /// When its deletion began (its `deletionTimestamp`), if it has.
    pub deleting_since: Option<Timestamp>,
    /// The finalizers holding it, other than the garbage collector's own.
    pub held_by: Vec<String>,
}

impl Left {
    /// `kind`/`name` as the API shows it: its `deletionTimestamp` and finalizers.
    pub fn new(
        kind: impl Into<String>,
        name: impl Into<String>,
        deleting_since: Option<Timestamp>,
        finalizers: &[String],
    ) -> Self {
        let held_by = finalizers.iter().filter(|f| !GC_FINALIZERS.contains(&f.as_str())).cloned().collect();
        Self { kind: kind.into(), name: name.into(), deleting_since, held_by }
    }

    /// `Deployment shop-frontend`, with what holds it once it is being deleted.
    pub fn describe(&self) -> String {
        let what = format!("{} {}", self.kind, self.name);
        match (self.deleting_since, self.held_by.as_slice()) {
            (None, _) => what,
            // A pod owns nothing: it is stopping (its grace period).
            (Some(_), []) if self.kind == "Pod" => format!("{what} (stopping)"),
            (Some(_), []) => format!("{what} (being deleted: waits for what it owns to go)"),
            (Some(_), held) => format!("{what} (held by finalizer {})", held.join(", ")),
        }
    }
}

/// One step of a teardown: its name and what of it is still there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub name: &'static str,
    pub left: Vec<Left>,
}

/// How long a step may last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// After this, the owner is released and the garbage collector takes the rest.
    pub timeout: Duration,
}

impl Default for Bound {
    fn default() -> Self {
        Self { timeout: DEFAULT_TIMEOUT }
    }
}

impl Bound {
    /// When a step is reported stuck: after [`STUCK_AFTER`], or half the timeout when
    /// that is shorter (so it is reported before it is given up).
    pub fn stuck_after(&self) -> Duration {
        STUCK_AFTER.min(self.timeout / 2)
    }
}

/// The owner as its deletion finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    /// Its namespace is being deleted: Kubernetes deletes everything in it at once.
    pub namespace_terminating: bool,
    /// Its finalizers (the garbage collector's say how it is being deleted).
    pub finalizers: &'a [String],
}

/// A step under way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The step's index in the steps.
    pub step: usize,
    /// When it began.
    pub since: Timestamp,
    /// It has lasted [`Bound::stuck_after`].
    pub stuck: bool,
    /// When the owner is released if the step is not done by then.
    pub release_at: Timestamp,
    /// What of the step to delete now (indices into its `left`): what is not being deleted yet.
    pub delete: Vec<usize>,
    /// When to look again if no watch event comes first.
    pub look_again: Duration,
}

impl Progress {
    /// What is left of the step, e.g. `Deployment shop-frontend (held by finalizer …)`.
    pub fn left(&self, steps: &[Step]) -> String {
        let left = steps.get(self.step).map(|s| s.left.as_slice()).unwrap_or_default();
        left.iter().map(Left::describe).collect::<Vec<_>>().join(", ")
    }
}

/// Why the owner's finalizer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// Every step is gone.
    Done,
    /// The namespace is being deleted: Kubernetes deletes what is in it at once, so an
    /// order cannot be kept and waiting would only hold the namespace up.
    NamespaceTerminating,
    /// The owner was deleted with this propagation ([`ORPHAN`]: its dependents stay;
    /// [`FOREGROUND`]: the garbage collector deletes them all at once): the user's choice.
    Propagation(String),
    /// The step has lasted the timeout.
    TimedOut(Progress),
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Remove the finalizer.
    Release(Release),
    /// Delete what [`Progress::delete`] names, and wait for the step to be gone.
    Wait(Progress),
}

/// The next move of a teardown of `steps` (in deletion order) at `now`.
pub fn next(steps: &[Step], owner: Owner<'_>, now: Timestamp, bound: Bound) -> Next {
    if owner.namespace_terminating {
        return Next::Release(Release::NamespaceTerminating);
    }
    if let Some(policy) = owner.finalizers.iter().find(|f| GC_FINALIZERS.contains(&f.as_str())) {
        return Next::Release(Release::Propagation(policy.clone()));
    }
    let Some((step, current)) = steps.iter().enumerate().find(|(_, s)| !s.left.is_empty()) else {
        return Next::Release(Release::Done);
    };
    // Whole seconds, as a deletionTimestamp is: the status written now does not change
    // when the next look finds the apiserver's timestamp instead.
    let now_s = now.round(TimestampRound::new().smallest(Unit::Second).mode(RoundMode::Trunc)).unwrap_or(now);
    let since = current.left.iter().filter_map(|l| l.deleting_since).min().unwrap_or(now_s).min(now_s);
    let lasted = now.duration_since(since).unsigned_abs();
    let release_at = since.checked_add(bound.timeout).unwrap_or(Timestamp::MAX);
    let stuck_after = bound.stuck_after();
    let delete = current.left.iter().enumerate().filter(|(_, l)| l.deleting_since.is_none()).map(|(i, _)| i).collect();
    let progress = Progress {
        step,
        since,
        stuck: lasted >= stuck_after,
        release_at,
        delete,
        look_again: if lasted < stuck_after { stuck_after - lasted } else { bound.timeout.saturating_sub(lasted) }
            .clamp(Duration::from_secs(1), LOOK_AGAIN),
    };
    if lasted >= bound.timeout { Next::Release(Release::TimedOut(progress)) } else { Next::Wait(progress) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn left(name: &str, deleting_since: Option<i64>, finalizers: &[&str]) -> Left {
        let finalizers: Vec<String> = finalizers.iter().map(|f| (*f).to_owned()).collect();
        Left::new("Deployment", name, deleting_since.map(at), &finalizers)
    }

    /// A stack's steps: frontend, backend, cache, database, with what is left of each.
    fn stack(frontend: Vec<Left>, backend: Vec<Left>, cache: Vec<Left>, database: Vec<Left>) -> Vec<Step> {
        vec![
            Step { name: "frontend", left: frontend },
            Step { name: "backend", left: backend },
            Step { name: "cache", left: cache },
            Step { name: "database", left: database },
        ]
    }

    fn owner(finalizers: &[String]) -> Owner<'_> {
        Owner { namespace_terminating: false, finalizers }
    }

    const FIVE_MINUTES: Bound = Bound { timeout: Duration::from_secs(300) };

    fn wait(next: Next) -> Progress {
        match next {
            Next::Wait(progress) => progress,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    #[test]
    fn the_first_step_with_something_left_goes_first_and_only_it() {
        let steps = stack(
            vec![left("shop-frontend", None, &[]), left("shop-frontend-svc", None, &[])],
            vec![left("shop-backend", None, &[])],
            vec![],
            vec![left("shop-db", None, &[])],
        );
        let progress = wait(next(&steps, owner(&[]), at(0), FIVE_MINUTES));
        assert_eq!((progress.step, progress.delete.clone()), (0, vec![0, 1]), "the whole frontend, nothing else");
        assert_eq!(progress.since, at(0));
        assert!(!progress.stuck);

        // The frontend is gone: the backend next; the cache, which has nothing, is skipped after it.
        let steps = stack(vec![], vec![left("shop-backend", None, &[])], vec![], vec![left("shop-db", None, &[])]);
        assert_eq!(wait(next(&steps, owner(&[]), at(5), FIVE_MINUTES)).step, 1);
        let steps = stack(vec![], vec![], vec![], vec![left("shop-db", None, &[])]);
        assert_eq!(wait(next(&steps, owner(&[]), at(9), FIVE_MINUTES)).step, 3);
        assert_eq!(
            next(&stack(vec![], vec![], vec![], vec![]), owner(&[]), at(9), FIVE_MINUTES),
            Next::Release(Release::Done)
        );
    }

    #[test]
    fn a_step_being_deleted_is_not_deleted_again_and_waits_until_gone() {
        // The Deployment is deleted (foreground: it waits for its pods); its Service is gone.
        let steps = stack(
            vec![left("shop-frontend", Some(2), &[FOREGROUND])],
            vec![left("shop-backend", None, &[])],
            vec![],
            vec![],
        );
        let progress = wait(next(&steps, owner(&[]), at(4), FIVE_MINUTES));
        assert_eq!(progress.step, 0, "the backend waits for the frontend to be gone");
        assert!(progress.delete.is_empty(), "nothing to delete again");
        assert_eq!(progress.since, at(2), "the step's time runs from the apiserver's deletionTimestamp");
        assert_eq!(progress.left(&steps), "Deployment shop-frontend (being deleted: waits for what it owns to go)");
        // Only what is not being deleted yet is deleted; the step's time is its earliest deletion.
        let steps =
            stack(vec![left("a", Some(3), &[]), left("b", None, &[]), left("c", Some(1), &[])], vec![], vec![], vec![]);
        let progress = wait(next(&steps, owner(&[]), at(4), FIVE_MINUTES));
        assert_eq!((progress.delete.clone(), progress.since), (vec![1], at(1)));
    }

    #[test]
    fn a_step_is_stuck_after_thirty_seconds_and_released_after_the_timeout() {
        let held =
            |since| stack(vec![left("shop-frontend", Some(since), &["example.com/hold"])], vec![], vec![], vec![]);
        let progress = wait(next(&held(0), owner(&[]), at(29), FIVE_MINUTES));
        assert!(!progress.stuck);
        assert_eq!(progress.look_again, Duration::from_secs(1), "looks again when it would be stuck");
        assert_eq!(progress.left(&held(0)), "Deployment shop-frontend (held by finalizer example.com/hold)");
        let progress = wait(next(&held(0), owner(&[]), at(30), FIVE_MINUTES));
        assert!(progress.stuck);
        assert_eq!(progress.release_at, at(300));
        assert_eq!(progress.look_again, LOOK_AGAIN);
        let progress = wait(next(&held(0), owner(&[]), at(295), FIVE_MINUTES));
        assert_eq!(progress.look_again, Duration::from_secs(5), "looks again when it is released");
        match next(&held(0), owner(&[]), at(300), FIVE_MINUTES) {
            Next::Release(Release::TimedOut(progress)) => assert_eq!((progress.step, progress.since), (0, at(0))),
            other => panic!("not released at the timeout: {other:?}"),
        }
        // A short timeout reports the step stuck at half of it, before it is given up.
        let short = Bound { timeout: Duration::from_secs(20) };
        assert!(!wait(next(&held(0), owner(&[]), at(9), short)).stuck);
        assert!(wait(next(&held(0), owner(&[]), at(10), short)).stuck);
        assert!(matches!(next(&held(0), owner(&[]), at(20), short), Next::Release(Release::TimedOut(_))));
    }

    #[test]
    fn each_step_has_its_own_time() {
        // The frontend took four minutes; the backend's time starts when it is deleted.
        let steps = stack(vec![], vec![left("shop-backend", None, &[])], vec![], vec![]);
        let progress = wait(next(&steps, owner(&[]), at(240), FIVE_MINUTES));
        assert_eq!((progress.since, progress.release_at, progress.stuck), (at(240), at(540), false));
    }

    #[test]
    fn a_terminating_namespace_or_the_users_propagation_releases_at_once() {
        let steps = stack(vec![left("shop-frontend", None, &[])], vec![], vec![], vec![]);
        let terminating = Owner { namespace_terminating: true, finalizers: &[] };
        assert_eq!(next(&steps, terminating, at(0), FIVE_MINUTES), Next::Release(Release::NamespaceTerminating));
        for policy in [ORPHAN, FOREGROUND] {
            let finalizers = vec![policy.to_owned(), "app.example.com/ordered-deletion".to_owned()];
            assert_eq!(
                next(&steps, owner(&finalizers), at(0), FIVE_MINUTES),
                Next::Release(Release::Propagation(policy.to_owned()))
            );
        }
    }

    #[test]
    fn a_clock_behind_the_apiserver_counts_nothing_negative() {
        let steps = stack(vec![left("shop-frontend", Some(10), &[])], vec![], vec![], vec![]);
        let progress = wait(next(&steps, owner(&[]), at(8), FIVE_MINUTES));
        assert_eq!((progress.since, progress.stuck), (at(8), false));
    }
}
