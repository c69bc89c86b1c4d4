//! DemoVolume → PersistentVolumeClaim, the resize check, and claim → DemoVolume status.
//!
//! ```text
//!  DemoVolume + existing claim ──check_resize──▶ ok ──desired_claim──▶ claim (applied)
//!                                           └──▶ Refusal (nothing applied)
//!  DemoVolume + claim (applied, or as it is) + refusal ──status──▶ DemoVolumeStatus
//! ```
//!
//! Kubernetes can expand a claim but never shrink it: the apiserver refuses a smaller
//! request. bosun checks before applying so that a smaller `size` leaves the claim
//! untouched and becomes a condition that says why, instead of a failing apply retried
//! forever.

use bosun_api::conditions::{reasons, types};
use bosun_api::demovolume::{DemoVolume, DemoVolumeStatus};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Resource, ResourceExt};

use crate::claims;
pub use crate::claims::{STORAGE, capacity, requested};
use crate::conditions::{self, Desired};
use crate::meta::{child_meta, standard_labels};
use crate::quantity;

/// `app.kubernetes.io/name` of DemoVolume children.
pub const APP_NAME: &str = "demovolume";
/// Bytes in the unit of `spec.size`.
const GIB: u128 = 1 << 30;

/// `<size>Gi`.
pub fn storage_request(size_gib: i32) -> Quantity {
    Quantity(format!("{size_gib}Gi"))
}

/// The claim a DemoVolume should have: named after it, ReadWriteOnce, `<size>Gi`, in
/// the default StorageClass (no `storageClassName`, so admission fills in the default).
pub fn desired_claim(volume: &DemoVolume) -> PersistentVolumeClaim {
    let name = volume.name_any();
    PersistentVolumeClaim {
        metadata: child_meta(volume, name.clone(), standard_labels(APP_NAME, &name)),
        spec: Some(claims::spec(storage_request(volume.spec.size))),
        status: None,
    }
}

/// Why a DemoVolume's claim is not (or could not be) applied as specified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `spec.size` is smaller than what the claim already requests (`current`), which
    /// is `minimum_gib` GiB when rounded up to whole GiB.
    Shrink { size_gib: i32, current: String, minimum_gib: u128 },
    /// The apiserver refused the claim; its message names the field.
    InvalidSpec(String),
    /// The claim's name is held by a claim this DemoVolume does not control.
    NameConflict(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Shrink { .. } => reasons::SHRINK_REFUSED,
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
            Refusal::NameConflict(_) => reasons::NAME_CONFLICT,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Shrink { size_gib, current, minimum_gib } => format!(
                "spec.size {size_gib} asks for {} but the claim already requests {current}: Kubernetes cannot \
                 shrink a PersistentVolumeClaim, so the claim is left as it is; set spec.size to {minimum_gib} or more",
                storage_request(*size_gib).0
            ),
            Refusal::InvalidSpec(message) | Refusal::NameConflict(message) => message.clone(),
        }
    }
}

/// Whether applying the DemoVolume's size to the `existing` claim is allowed: it is,
/// unless the claim already requests more. A request that cannot be parsed is left to
/// the apiserver to judge.
pub fn check_resize(volume: &DemoVolume, existing: Option<&PersistentVolumeClaim>) -> Result<(), Refusal> {
    let Some(current) = existing.and_then(requested) else { return Ok(()) };
    let wanted = quantity::to_units(&storage_request(volume.spec.size).0);
    match (wanted, quantity::to_units(&current.0)) {
        (Some(wanted), Some(have)) if wanted < have => Err(Refusal::Shrink {
            size_gib: volume.spec.size,
            current: current.0.clone(),
            minimum_gib: have.div_ceil(GIB),
        }),
        _ => Ok(()),
    }
}

/// What the world looks like to the status computation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    /// The claim as applied, or as it is when it was not applied (`None`: none exists).
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// Why the spec was not applied.
    pub refusal: Option<&'a Refusal>,
}

/// The status a DemoVolume should have.
///
/// Ready when the claim is Bound and the spec was applied. While a grown request
/// exceeds the volume's capacity, Progressing says the volume is being resized; it
/// stays Ready, since the claim keeps serving at its old size meanwhile.
pub fn status(volume: &DemoVolume, observed: Observed<'_>, now: Timestamp) -> DemoVolumeStatus {
    let generation = volume.meta().generation;
    let claim = observed.claim;
    let phase = claim.and_then(|c| c.status.as_ref()?.phase.clone());
    let conds = match (observed.refusal, claim) {
        (Some(refusal), _) => refused(refusal),
        (None, None) => pending("the claim has not been created yet".to_owned()),
        (None, Some(claim)) => match phase.as_deref() {
            Some("Bound") => bound(claim),
            Some("Lost") => lost(claim),
            _ => pending(format!("waiting for claim {} to be bound to a volume", claim.name_any())),
        },
    };
    let previous = volume.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    DemoVolumeStatus {
        observed_generation: generation,
        name: Some(volume.spec.name.clone()),
        capacity: claim.and_then(capacity).map(|q| q.0.clone()),
        phase,
        conditions: conditions::merge(previous, conds, generation, now),
    }
}

fn bound(claim: &PersistentVolumeClaim) -> Vec<Desired> {
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("its volume");
    let have = capacity(claim).map(|q| q.0.as_str());
    let want = requested(claim).map(|q| q.0.as_str());
    let ready = Desired::new(
        types::READY,
        true,
        reasons::BOUND,
        format!("claim {} is bound to {volume} with capacity {}", claim.name_any(), have.unwrap_or("unknown")),
    );
    let growing = match (have.and_then(quantity::to_units), want.and_then(quantity::to_units)) {
        (Some(have), Some(want)) => have < want,
        _ => false,
    };
    let progressing = if growing {
        let msg = format!(
            "the claim requests {} and its volume has {}: waiting for the storage provider to expand it",
            want.unwrap_or_default(),
            have.unwrap_or_default()
        );
        Desired::new(types::PROGRESSING, true, reasons::RESIZING, msg)
    } else {
        Desired::new(types::PROGRESSING, false, reasons::AS_EXPECTED, "")
    };
    vec![ready, progressing, Desired::new(types::DEGRADED, false, reasons::AS_EXPECTED, "")]
}

fn pending(message: String) -> Vec<Desired> {
    vec![
        Desired::new(types::READY, false, reasons::PENDING, message.clone()),
        Desired::new(types::PROGRESSING, true, reasons::PENDING, message),
        Desired::new(types::DEGRADED, false, reasons::AS_EXPECTED, ""),
    ]
}

fn lost(claim: &PersistentVolumeClaim) -> Vec<Desired> {
    let msg = format!("claim {} lost its volume; its data may be gone", claim.name_any());
    vec![
        Desired::new(types::READY, false, reasons::CLAIM_LOST, msg.clone()),
        Desired::new(types::PROGRESSING, false, reasons::CLAIM_LOST, msg.clone()),
        Desired::new(types::DEGRADED, true, reasons::CLAIM_LOST, msg),
    ]
}

fn refused(refusal: &Refusal) -> Vec<Desired> {
    let (reason, msg) = (refusal.reason(), refusal.message());
    vec![
        Desired::new(types::READY, false, reason, msg.clone()),
        Desired::new(types::PROGRESSING, false, reason, msg.clone()),
        Desired::new(types::DEGRADED, true, reason, msg),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;

    use super::*;

    fn volume(size: i32) -> DemoVolume {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.example.com/v1",
            "kind": "DemoVolume",
            "metadata": {"name": "data", "namespace": "shop", "uid": "u-7", "generation": 3},
            "spec": {"name": "Shop data", "size": size}
        }))
        .unwrap()
    }

    /// A claim as stored: requesting `request`, in `phase`, with `capacity` once bound.
    fn claim(request: &str, phase: Option<&str>, capacity: Option<&str>) -> PersistentVolumeClaim {
        let mut c = desired_claim(&volume(1));
        let requests = c.spec.as_mut().unwrap().resources.as_mut().unwrap().requests.as_mut().unwrap();
        requests.insert(STORAGE.into(), Quantity(request.into()));
        c.spec.as_mut().unwrap().volume_name = capacity.map(|_| "pv-1".to_owned());
        c.status = Some(PersistentVolumeClaimStatus {
            phase: phase.map(str::to_owned),
            capacity: capacity.map(|q| BTreeMap::from([(STORAGE.to_owned(), Quantity(q.into()))])),
            ..PersistentVolumeClaimStatus::default()
        });
        c
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn condition<'a>(s: &'a DemoVolumeStatus, t: &str) -> &'a bosun_api::conditions::Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn claim_is_named_after_the_volume_and_requests_its_size() {
        let c = desired_claim(&volume(5));
        assert_eq!(c.metadata.name.as_deref(), Some("data"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("shop"));
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("DemoVolume", "u-7", Some(true)));
        let labels = c.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "demovolume");
        assert_eq!(labels["app.kubernetes.io/instance"], "data");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "bosun");
        let spec = c.spec.as_ref().unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        assert_eq!(spec.storage_class_name, None, "the default StorageClass is chosen by admission");
        assert_eq!(requested(&c), Some(&Quantity("5Gi".into())));
    }

    #[test]
    fn growing_or_keeping_the_size_is_allowed() {
        assert_eq!(check_resize(&volume(2), None), Ok(()));
        assert_eq!(check_resize(&volume(2), Some(&claim("1Gi", Some("Bound"), Some("1Gi")))), Ok(()));
        assert_eq!(check_resize(&volume(2), Some(&claim("2Gi", Some("Bound"), Some("1Gi")))), Ok(()));
        // The same size written differently is not a shrink.
        assert_eq!(check_resize(&volume(2), Some(&claim("2147483648", Some("Bound"), None))), Ok(()));
        // Unparseable: the apiserver decides.
        assert_eq!(check_resize(&volume(1), Some(&claim("lots", None, None))), Ok(()));
    }

    #[test]
    fn shrinking_is_refused_naming_the_current_size() {
        let err = check_resize(&volume(1), Some(&claim("2Gi", Some("Bound"), Some("2Gi")))).unwrap_err();
        assert_eq!(err, Refusal::Shrink { size_gib: 1, current: "2Gi".into(), minimum_gib: 2 });
        assert_eq!(err.reason(), "ShrinkRefused");
        let msg = err.message();
        assert!(msg.contains("cannot shrink"), "{msg}");
        assert!(msg.contains("already requests 2Gi"), "{msg}");
        assert!(msg.contains("spec.size 1 asks for 1Gi"), "{msg}");
        assert!(msg.ends_with("set spec.size to 2 or more"), "{msg}");
        // 1.5Gi requested, 1Gi asked: still smaller, and 2 is the least size that is not.
        let err = check_resize(&volume(1), Some(&claim("1536Mi", None, None))).unwrap_err();
        assert!(err.message().ends_with("set spec.size to 2 or more"), "{}", err.message());
    }

    #[test]
    fn pending_until_bound() {
        let v = volume(1);
        let s = status(&v, Observed::default(), now());
        assert_eq!((s.phase.as_deref(), s.capacity.as_deref()), (None, None));
        assert_eq!(condition(&s, "Ready").reason, "Pending");
        let c = claim("1Gi", Some("Pending"), None);
        let s = status(&v, Observed { claim: Some(&c), refusal: None }, now());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.name.as_deref(), Some("Shop data"));
        assert_eq!(condition(&s, "Ready").status, "False");
        assert_eq!(condition(&s, "Progressing").status, "True");
    }

    #[test]
    fn ready_when_bound() {
        let c = claim("1Gi", Some("Bound"), Some("1Gi"));
        let s = status(&volume(1), Observed { claim: Some(&c), refusal: None }, now());
        assert_eq!((s.phase.as_deref(), s.capacity.as_deref()), (Some("Bound"), Some("1Gi")));
        assert_eq!(s.observed_generation, Some(3));
        let ready = condition(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Bound"));
        assert!(ready.message.contains("pv-1"), "{}", ready.message);
        assert_eq!(condition(&s, "Progressing").status, "False");
        assert_eq!(condition(&s, "Degraded").status, "False");
    }

    #[test]
    fn grown_claim_stays_ready_while_the_volume_is_resized() {
        let c = claim("2Gi", Some("Bound"), Some("1Gi"));
        let s = status(&volume(2), Observed { claim: Some(&c), refusal: None }, now());
        assert_eq!(condition(&s, "Ready").status, "True");
        let progressing = condition(&s, "Progressing");
        assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("True", "Resizing"));
        assert_eq!(s.capacity.as_deref(), Some("1Gi"));
    }

    #[test]
    fn refused_shrink_is_not_ready_and_shows_the_claim_as_it_is() {
        let c = claim("2Gi", Some("Bound"), Some("2Gi"));
        let refusal = Refusal::Shrink { size_gib: 1, current: "2Gi".into(), minimum_gib: 2 };
        let s = status(&volume(1), Observed { claim: Some(&c), refusal: Some(&refusal) }, now());
        assert_eq!((s.phase.as_deref(), s.capacity.as_deref()), (Some("Bound"), Some("2Gi")));
        let ready = condition(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "ShrinkRefused"));
        assert!(ready.message.contains("cannot shrink"));
        assert_eq!(condition(&s, "Degraded").status, "True");
    }

    #[test]
    fn lost_claim_is_degraded() {
        let c = claim("1Gi", Some("Lost"), None);
        let s = status(&volume(1), Observed { claim: Some(&c), refusal: None }, now());
        assert_eq!(condition(&s, "Ready").reason, "ClaimLost");
        assert_eq!(condition(&s, "Degraded").status, "True");
    }

    #[test]
    fn recomputing_an_unchanged_world_gives_an_identical_status() {
        let c = claim("1Gi", Some("Bound"), Some("1Gi"));
        let mut v = volume(1);
        let first = status(&v, Observed { claim: Some(&c), refusal: None }, now());
        v.status = Some(first.clone());
        let later = now() + jiff::SignedDuration::from_secs(600);
        assert_eq!(status(&v, Observed { claim: Some(&c), refusal: None }, later), first);
    }
}
