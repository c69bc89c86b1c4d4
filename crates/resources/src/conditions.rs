//! Building `metav1.Condition` lists that only change when the facts change.
//!
//! A condition's `lastTransitionTime` moves only when its `status` flips; reason and
//! message updates keep the old time. With an unchanged world the computed list is
//! identical to the stored one, which is what keeps steady state free of writes.

use bosun_api::conditions::{Condition, reasons, types};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A condition as a controller wants it, before times are filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Desired {
    pub fn new(type_: &'static str, status: bool, reason: &'static str, message: impl Into<String>) -> Self {
        Self { type_, status: if status { "True" } else { "False" }, reason, message: message.into() }
    }

    /// A condition whose status is `Unknown`: the fact is not known yet.
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self { type_, status: "Unknown", reason, message: message.into() }
    }
}

/// Why a resource's spec is not served: the Ready condition's reason and a message
/// that names what to fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused<'a> {
    pub reason: &'static str,
    pub message: &'a str,
}

impl<'a> Refused<'a> {
    /// The apiserver refused a child because of the spec; `message` is its own.
    pub fn invalid_spec(message: &'a str) -> Self {
        Self { reason: bosun_api::conditions::reasons::INVALID_SPEC, message }
    }

    /// A child's name is held by someone else's object.
    pub fn name_conflict(message: &'a str) -> Self {
        Self { reason: bosun_api::conditions::reasons::NAME_CONFLICT, message }
    }
}

/// The full condition list for `desired`, carrying `lastTransitionTime` over from
/// `previous` wherever the status did not flip; with the kstatus condition
/// [`kstatus`] derives from `Ready`, so every kind has one the same way, riding on
/// the status write `Ready` makes anyway.
pub fn merge(previous: &[Condition], desired: Vec<Desired>, generation: Option<i64>, now: Timestamp) -> Vec<Condition> {
    let derived = desired.iter().find(|d| d.type_ == types::READY).and_then(kstatus);
    desired
        .into_iter()
        .chain(derived)
        .map(|d| {
            let status = d.status.to_owned();
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == d.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: d.type_.to_owned(),
                status,
                reason: d.reason.to_owned(),
                message: d.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// The kstatus condition of a resource whose `Ready` is `ready`: none when Ready;
/// `Stalled` when only the user can end the wait ([`reasons::STALLED`]); else
/// `Reconciling`. Its reason and message are Ready's, which say what to do or what is
/// awaited. (kstatus also reads `status.observedGeneration` and each condition's, which
/// every status carries.)
pub fn kstatus(ready: &Desired) -> Option<Desired> {
    if ready.status == "True" {
        return None;
    }
    let type_ = if reasons::STALLED.contains(&ready.reason) { types::STALLED } else { types::RECONCILING };
    Some(Desired { type_, status: "True", reason: ready.reason, message: ready.message.clone() })
}

/// The condition `type_` as stored in `previous`, carried over unchanged where nothing
/// new is known of it: its reason if it is one of `reasons` (the last is the fallback),
/// else `default`'s; `default` when it is not stored.
pub fn carried(previous: &[Condition], type_: &'static str, reasons: &[&'static str], default: Desired) -> Desired {
    let Some(c) = previous.iter().find(|c| c.type_ == type_) else { return default };
    Desired {
        type_,
        status: match c.status.as_str() {
            "True" => "True",
            "False" => "False",
            _ => "Unknown",
        },
        reason: reasons.iter().copied().find(|r| *r == c.reason).unwrap_or(default.reason),
        message: c.message.clone(),
    }
}

/// Whether `conditions` has `type_` with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn new_condition_gets_now() {
        let out = merge(&[], vec![Desired::new("Ready", true, "Available", "ok")], Some(3), at(100));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, "True");
        assert_eq!(out[0].last_transition_time, Time(at(100)));
        assert_eq!(out[0].observed_generation, Some(3));
    }

    #[test]
    fn unchanged_status_keeps_transition_time_even_if_message_changes() {
        let first = merge(&[], vec![Desired::new("Ready", false, "RollingOut", "1/3")], Some(1), at(100));
        let second = merge(&first, vec![Desired::new("Ready", false, "RollingOut", "2/3")], Some(1), at(200));
        assert_eq!(second[0].last_transition_time, Time(at(100)));
        assert_eq!(second[0].message, "2/3");
    }

    #[test]
    fn kstatus_reads_reconciling_until_ready_and_stalled_when_only_the_user_can_help() {
        let pending = merge(&[], vec![Desired::new("Ready", false, "RollingOut", "1/3 available")], Some(2), at(100));
        let reconciling = pending.iter().find(|c| c.type_ == "Reconciling").expect("Reconciling while not Ready");
        assert_eq!((reconciling.status.as_str(), reconciling.reason.as_str()), ("True", "RollingOut"));
        assert_eq!((reconciling.message.as_str(), reconciling.observed_generation), ("1/3 available", Some(2)));
        assert!(!pending.iter().any(|c| c.type_ == "Stalled"));

        let refused =
            merge(&pending, vec![Desired::new("Ready", false, "InvalidSpec", "spec.port: 0")], Some(3), at(200));
        let stalled = refused.iter().find(|c| c.type_ == "Stalled").expect("Stalled on a refusal");
        assert_eq!((stalled.reason.as_str(), stalled.message.as_str()), ("InvalidSpec", "spec.port: 0"));
        assert!(!refused.iter().any(|c| c.type_ == "Reconciling"), "one or the other");

        let ready = merge(&refused, vec![Desired::new("Ready", true, "Available", "3/3")], Some(3), at(300));
        assert_eq!(ready.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), ["Ready"], "Current: neither");
        // Without a Ready (a condition list of other types), nothing is derived.
        assert_eq!(merge(&[], vec![Desired::new("Degraded", false, "AsExpected", "")], None, at(1)).len(), 1);
    }

    #[test]
    fn a_stalled_reason_is_a_refusal_never_progress() {
        for reason in reasons::STALLED {
            let d = kstatus(&Desired::new("Ready", false, reason, "x")).unwrap();
            assert_eq!(d.type_, types::STALLED, "{reason}");
        }
        for reason in
            [reasons::PENDING, reasons::ROLLING_OUT, reasons::RUN_STUCK, reasons::INSTANCE_STUCK, reasons::DEPLOYING]
        {
            assert_eq!(
                kstatus(&Desired::new("Ready", false, reason, "x")).unwrap().type_,
                types::RECONCILING,
                "{reason}"
            );
        }
        assert_eq!(kstatus(&Desired::unknown("Ready", reasons::PENDING, "x")).unwrap().type_, types::RECONCILING);
    }

    #[test]
    fn flipped_status_moves_transition_time() {
        let first = merge(&[], vec![Desired::new("Ready", false, "RollingOut", "")], Some(1), at(100));
        let second = merge(&first, vec![Desired::new("Ready", true, "Available", "")], Some(1), at(200));
        assert_eq!(second[0].last_transition_time, Time(at(200)));
        assert!(is_true(&second, "Ready"));
        assert!(!is_true(&first, "Ready"));
    }
}
