//! Building `metav1.Condition` lists that only change when the facts change.
//!
//! A condition's `lastTransitionTime` moves only when its `status` flips; reason and
//! message updates keep the old time. With an unchanged world the computed list is
//! identical to the stored one, which is what keeps steady state free of writes.

use bosun_api::conditions::Condition;
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
/// `previous` wherever the status did not flip.
pub fn merge(previous: &[Condition], desired: Vec<Desired>, generation: Option<i64>, now: Timestamp) -> Vec<Condition> {
    desired
        .into_iter()
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
    fn flipped_status_moves_transition_time() {
        let first = merge(&[], vec![Desired::new("Ready", false, "RollingOut", "")], Some(1), at(100));
        let second = merge(&first, vec![Desired::new("Ready", true, "Available", "")], Some(1), at(200));
        assert_eq!(second[0].last_transition_time, Time(at(200)));
        assert!(is_true(&second, "Ready"));
        assert!(!is_true(&first, "Ready"));
    }
}
