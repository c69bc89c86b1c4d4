//! A new database made by recovery from an archive (`spec.bootstrap.recovery`): the instance's
//! variables, and what refuses it.

use super::*;

/// The recovery `db` is made by, and the destination of its archive.
pub fn recovery(db: &PostgreSQL) -> Option<(&Recovery, &Destination)> {
    let recovery = db.spec.bootstrap.as_ref()?.recovery.as_ref()?;
    let destination =
        recovery.destination.as_ref().or_else(|| db.spec.backup.as_ref().and_then(|b| b.destination.as_ref()))?;
    Some((recovery, destination))
}

/// Where the instance manager finds the settings of a recovering start (outside the
/// data directory, so a standby cloned later never has them).
pub const RECOVERY_SETTINGS: &str = "/var/lib/postgresql/data/bosun-recovery.conf";

/// The variables of `bosun recover` (run by the instance manager on a first start as
/// the primary with no data).
pub(super) fn recovery_env(recovery: &Recovery, destination: &Destination) -> Vec<EnvVar> {
    let mut vars = vec![
        crate::backup::namespace_env(instance::RECOVERY_NAMESPACE),
        env(instance::RECOVERY_DESTINATION, crate::backup::destination_url(destination)),
        env(instance::RECOVERY_NAME, backup_name_of(&recovery.source)),
        env(contract::RECOVERY_SETTINGS, RECOVERY_SETTINGS),
    ];
    let optional = [
        (instance::RECOVERY_ENDPOINT, &destination.endpoint),
        (instance::RECOVERY_REGION, &destination.region),
        (contract::RECOVERY_TARGET_TIME, &recovery.target_time),
        (contract::RECOVERY_TARGET_LSN, &recovery.target_lsn),
        (contract::RECOVERY_TARGET_NAME, &recovery.target_name),
    ];
    vars.extend(optional.into_iter().filter_map(|(name, value)| value.as_ref().map(|v| env(name, v.clone()))));
    vars
}

/// Why a recovery cannot start: data is already there, or its archive needs another
/// Secret or claim than the one this database archives to.
pub(super) fn recovery_refusal(
    db: &PostgreSQL,
    sts: Option<&StatefulSet>,
    claims: &[&PersistentVolumeClaim],
) -> Option<String> {
    let (recovery, from) = recovery(db)?;
    let started = sts.is_some() || previous_status(db).is_some_and(|s| s.current_primary.is_some());
    if let (false, Some(claim)) = (started, claims.first()) {
        return Some(format!(
            "spec.bootstrap.recovery: the data claim {} already exists (kept from an earlier PostgreSQL named {}): \
             recovery never writes over data, so nothing is started; delete the claim, or recover under another name",
            claim.name_any(),
            db.name_any()
        ));
    }
    let own = continuous_destination(db)?;
    let same_claim = (own.type_ == DestinationType::Pvc) == (from.type_ == DestinationType::Pvc)
        && (from.type_ != DestinationType::Pvc || own.bucket == from.bucket);
    (own.secret_ref != from.secret_ref || own.encryption != from.encryption || !same_claim).then(|| {
        format!(
            "spec.bootstrap.recovery.destination: recovering from {} (of {}) while archiving to {} needs the same \
             secretRef, encryption (and claim) for both: an instance reaches one archive's credentials and keys",
            crate::backup::destination_url(from),
            recovery.source,
            crate::backup::destination_url(own)
        )
    })
}
