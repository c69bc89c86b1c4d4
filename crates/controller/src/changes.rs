//! Whether a child needs an apply, and what an apply did to it: pure decisions from
//! three views of one child.
//!
//! ```text
//!  desired (built now) ── fingerprint ─┐
//!  recorded (what bosun last applied:  ├─▶ drift() ─▶ None: skip, no request
//!    uid, fingerprint, version)        │              Some(why): apply
//!  observed (the watch cache)  ────────┘
//!  observed before + stored after the apply ─▶ change() ─▶ Created / Updated / Unchanged
//! ```
//!
//! A child's *version* is its `metadata.generation` when its kind keeps one (every spec
//! change bumps it, status writes do not) and its `resourceVersion` otherwise (Services,
//! ConfigMaps, claims: any write moves it). A hand edit therefore always shows as a
//! newer version — or as changed labels, annotations or controller reference, which do
//! not bump a generation — and a deletion as a child missing from the cache. Anything
//! bosun cannot vouch for (no record: a child it never applied, or one whose record
//! was lost with its checkpoint, [`crate::checkpoint`]) is applied, so drift
//! correction is as strong as re-applying every time.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::events::ChildChange;

/// What bosun last applied to one child, as the apiserver stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub uid: String,
    /// [`fingerprint`] of the desired object that was applied.
    pub fingerprint: u64,
    pub version: Version,
}

impl Applied {
    /// The record of applying an object with `fingerprint`, from the stored metadata.
    pub fn of(stored: &ObjectMeta, fingerprint: u64) -> Self {
        Self { uid: stored.uid.clone().unwrap_or_default(), fingerprint, version: Version::of(stored) }
    }
}

/// Where a stored object stands in its history; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Version {
    Generation(i64),
    Resource(String),
}

impl Version {
    pub fn of(meta: &ObjectMeta) -> Self {
        match meta.generation {
            Some(generation) if generation > 0 => Version::Generation(generation),
            _ => Version::Resource(meta.resource_version.clone().unwrap_or_default()),
        }
    }

    /// Whether `self` is older than `other`. Resource versions are compared as the
    /// numbers the apiserver issues; one that is not a number is never "older", so an
    /// unknown order means "apply".
    fn older_than(&self, other: &Version) -> bool {
        match (self, other) {
            (Version::Generation(a), Version::Generation(b)) => a < b,
            (Version::Resource(a), Version::Resource(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(a), Ok(b)) => a < b,
                _ => false,
            },
            _ => false,
        }
    }
}

/// A stable hash of `desired` as it would be sent.
pub fn fingerprint<T: Serialize>(desired: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_vec(desired).unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

/// Why a child must be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drift {
    /// bosun has no record of applying it (none since it started, and none in the
    /// checkpoint it read then).
    Unrecorded,
    /// The desired object differs from what bosun last applied.
    Desired,
    /// Not in the cache: deleted (or not seen yet).
    Missing,
    /// Deleted and re-created by someone: another uid.
    Replaced,
    /// Someone else wrote it after bosun: a newer generation or resourceVersion.
    Edited,
    /// A label, annotation or the controller reference bosun sets was changed.
    Metadata,
}

/// Whether the child built as `desired` (fingerprint `print`) must be applied, given
/// bosun's `record` of its last apply and the `cached` object; `None` means it already
/// holds the desired state.
pub fn drift(desired: &ObjectMeta, print: u64, record: Option<&Applied>, cached: Option<&ObjectMeta>) -> Option<Drift> {
    let Some(record) = record else { return Some(Drift::Unrecorded) };
    if record.fingerprint != print {
        return Some(Drift::Desired);
    }
    let Some(cached) = cached else { return Some(Drift::Missing) };
    if cached.uid.as_deref() != Some(record.uid.as_str()) {
        return Some(Drift::Replaced);
    }
    let version = Version::of(cached);
    if version.older_than(&record.version) {
        // The watch has not delivered bosun's own write yet; it triggers again when it does.
        return None;
    }
    if version != record.version {
        return Some(Drift::Edited);
    }
    (!metadata_holds(desired, cached)).then_some(Drift::Metadata)
}

/// Whether `observed` carries every label and annotation of `desired` with the same
/// value, and the same controller reference. Labels others add are theirs to keep.
pub fn metadata_holds(desired: &ObjectMeta, observed: &ObjectMeta) -> bool {
    let subset = |want: &Option<std::collections::BTreeMap<String, String>>,
                  have: &Option<std::collections::BTreeMap<String, String>>| {
        want.iter().flatten().all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let controller = |m: &ObjectMeta| {
        m.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| r.uid.clone())
    };
    subset(&desired.labels, &observed.labels)
        && subset(&desired.annotations, &observed.annotations)
        && (controller(desired).is_none() || controller(desired) == controller(observed))
}

/// What an apply did, from the child as known `before` it (the cache; `None` when only
/// bosun's `record` knew it) and as `stored` after it. `created` when the apply was a
/// create. Only a version bosun's write moved is a change — never a clock.
pub fn change(
    created: bool,
    desired: &ObjectMeta,
    before: Option<&ObjectMeta>,
    record: Option<&Applied>,
    stored: &ObjectMeta,
) -> ChildChange {
    if created {
        return ChildChange::Created;
    }
    let Some(known) = before.map(Version::of).or_else(|| record.map(|r| r.version.clone())) else {
        return ChildChange::Unchanged;
    };
    let after = Version::of(stored);
    // Labels and annotations do not bump a generation: a metadata fix shows as a
    // moved resourceVersion on an object whose metadata did not hold.
    let metadata_fixed =
        before.is_some_and(|b| !metadata_holds(desired, b) && b.resource_version != stored.resource_version);
    if known != after || metadata_fixed { ChildChange::Updated } else { ChildChange::Unchanged }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    fn owner(uid: &str) -> Option<Vec<OwnerReference>> {
        Some(vec![OwnerReference {
            api_version: "apps.example.com/v1".into(),
            kind: "WebApp".into(),
            name: "web".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    }

    fn desired() -> ObjectMeta {
        ObjectMeta { labels: labels(&[("app", "web")]), owner_references: owner("parent"), ..Default::default() }
    }

    /// A stored Deployment-like object (with a generation) or, with `generation: None`,
    /// a Service-like one.
    fn stored(uid: &str, generation: Option<i64>, rv: &str) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            generation,
            resource_version: Some(rv.into()),
            labels: labels(&[("app", "web"), ("added-by-someone", "x")]),
            owner_references: owner("parent"),
            ..Default::default()
        }
    }

    const PRINT: u64 = 42;

    fn record(meta: &ObjectMeta) -> Applied {
        Applied::of(meta, PRINT)
    }

    #[test]
    fn a_child_as_last_applied_is_skipped() {
        let s = stored("u1", Some(3), "100");
        assert_eq!(drift(&desired(), PRINT, Some(&record(&s)), Some(&s)), None);
        // Status writes move the resourceVersion of a kind with a generation: still skipped.
        let status_only = stored("u1", Some(3), "150");
        assert_eq!(drift(&desired(), PRINT, Some(&record(&s)), Some(&status_only)), None);
    }

    #[test]
    fn everything_bosun_cannot_vouch_for_is_applied() {
        let s = stored("u1", Some(3), "100");
        let r = record(&s);
        assert_eq!(drift(&desired(), PRINT, None, Some(&s)), Some(Drift::Unrecorded));
        assert_eq!(drift(&desired(), PRINT + 1, Some(&r), Some(&s)), Some(Drift::Desired));
        assert_eq!(drift(&desired(), PRINT, Some(&r), None), Some(Drift::Missing));
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&stored("u2", Some(1), "200"))), Some(Drift::Replaced));
        // kubectl scale / edit: a newer generation.
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&stored("u1", Some(4), "160"))), Some(Drift::Edited));
    }

    #[test]
    fn kinds_without_a_generation_are_judged_by_resource_version() {
        let s = stored("u1", None, "100");
        let r = record(&s);
        assert_eq!(r.version, Version::Resource("100".into()));
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&s)), None);
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&stored("u1", None, "101"))), Some(Drift::Edited));
        // An opaque resourceVersion cannot be ordered: apply.
        let opaque = stored("u1", None, "abc");
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&opaque)), Some(Drift::Edited));
    }

    #[test]
    fn a_cache_behind_bosuns_own_write_is_not_drift() {
        let after_apply = stored("u1", Some(4), "200");
        let r = record(&after_apply);
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&stored("u1", Some(3), "150"))), None);
        let r = record(&stored("u1", None, "200"));
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&stored("u1", None, "150"))), None);
    }

    #[test]
    fn metadata_bosun_sets_is_watched_and_others_labels_are_not() {
        let s = stored("u1", Some(3), "100");
        let r = record(&s);
        let mut relabelled = s.clone();
        relabelled.labels = labels(&[("app", "other")]);
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&relabelled)), Some(Drift::Metadata));
        let mut unlabelled = s.clone();
        unlabelled.labels = None;
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&unlabelled)), Some(Drift::Metadata));
        let mut disowned = s.clone();
        disowned.owner_references = None;
        assert_eq!(drift(&desired(), PRINT, Some(&r), Some(&disowned)), Some(Drift::Metadata));
        // A label someone added beside bosun's is theirs: no drift (s carries one).
        assert!(metadata_holds(&desired(), &s));
    }

    #[test]
    fn events_come_from_versions_bosuns_write_moved() {
        let d = desired();
        let before = stored("u1", Some(3), "100");
        let r = record(&before);
        assert_eq!(change(true, &d, None, None, &before), ChildChange::Created);
        // A no-op apply (even long after kube-controller-manager wrote status).
        assert_eq!(change(false, &d, Some(&before), Some(&r), &stored("u1", Some(3), "180")), ChildChange::Unchanged);
        // A hand-scaled Deployment set back: bosun's write bumped the generation.
        let scaled = stored("u1", Some(4), "170");
        assert_eq!(change(false, &d, Some(&scaled), Some(&r), &stored("u1", Some(5), "190")), ChildChange::Updated);
        // A removed label put back: only the resourceVersion moves.
        let mut unlabelled = before.clone();
        unlabelled.labels = None;
        assert_eq!(change(false, &d, Some(&unlabelled), Some(&r), &stored("u1", Some(3), "190")), ChildChange::Updated);
        // Known only from the record (the cache has not seen it yet).
        assert_eq!(change(false, &d, None, Some(&r), &before), ChildChange::Unchanged);
        // A Service changed by hand and set back.
        let svc = stored("s1", None, "100");
        assert_eq!(change(false, &d, Some(&svc), None, &stored("s1", None, "120")), ChildChange::Updated);
        assert_eq!(change(false, &d, Some(&svc), None, &svc), ChildChange::Unchanged);
    }

    #[test]
    fn fingerprints_follow_content() {
        let a = desired();
        let mut b = desired();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        b.labels = labels(&[("app", "other")]);
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }
}
