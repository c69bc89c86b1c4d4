//! PersistentVolumeClaims as every builder makes and reads them: ReadWriteOnce in the
//! default StorageClass (no `storageClassName`: admission fills it in), a storage request.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The resource a claim requests.
pub const STORAGE: &str = "storage";

/// A ReadWriteOnce claim spec requesting `storage`.
pub fn spec(storage: Quantity) -> PersistentVolumeClaimSpec {
    PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(STORAGE.to_owned(), storage)])),
            ..VolumeResourceRequirements::default()
        }),
        ..PersistentVolumeClaimSpec::default()
    }
}

/// The storage a claim requests.
pub fn requested(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get(STORAGE)
}

/// The storage a claim's volume provides.
pub fn capacity(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    claim.status.as_ref()?.capacity.as_ref()?.get(STORAGE)
}
