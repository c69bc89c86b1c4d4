//! The Backup a PostgreSQL's `spec.backup` asks for, and the claim of its dumps.

use super::*;

/// Where the dumps go: the spec's destination, or the claim `<name>-backups`.
pub(super) fn backup_destination(db: &PostgreSQL) -> Destination {
    let given = db.spec.backup.as_ref().and_then(|b| b.destination.clone());
    given.unwrap_or_else(|| Destination {
        type_: DestinationType::Pvc,
        bucket: backup_claim_name(db),
        prefix: None,
        endpoint: None,
        region: None,
        secret_ref: None,
        encryption: None,
    })
}

/// Whether backups are asked for.
pub fn backups_enabled(db: &PostgreSQL) -> bool {
    db.spec.backup.as_ref().is_some_and(|b| b.enabled)
}

/// The Backup `<name>-backup` of the database through its Service and credentials
/// Secret, when backups are enabled.
pub fn desired_backup(db: &PostgreSQL) -> Option<Backup> {
    let settings = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    // With continuous archiving, base backups (beside the WAL, in the Backup's folder),
    // taken from the standbys' Service while a standby is ready, sparing the primary.
    let continuous = continuous_destination(db).is_some();
    let standby_ready = db.spec.replicas > 1 && previous_status(db).and_then(|s| s.ready_replicas).unwrap_or(0) >= 2;
    let host = if continuous && standby_ready { read_only_name(db) } else { db.name_any() };
    let spec = BackupSpec {
        method: continuous.then_some(Method::Base),
        source: Source {
            type_: SourceType::Postgresql,
            connection: Connection {
                host,
                port: Some(PORT),
                database: DATABASE.to_owned(),
                secret_ref: SecretRef { name: secret_name(db) },
            },
        },
        destination: backup_destination(db),
        schedule: settings.schedule.clone().unwrap_or_else(|| DEFAULT_BACKUP_SCHEDULE.to_owned()),
        retention: Some(settings.retention.clone().unwrap_or_else(|| DEFAULT_BACKUP_RETENTION.to_owned())),
        keep_last: None,
        keep_daily: None,
        keep_weekly: None,
        keep_monthly: None,
        suspend: None,
        active_deadline_seconds: None,
        verify: None,
    };
    let mut backup = Backup::new(&backup_name(db), spec);
    backup.metadata = child_meta(db, backup_name(db), labels(db));
    Some(backup)
}

/// The claim the dumps go to when backups are enabled without a destination: as large
/// as a data volume, and kept when the PostgreSQL is deleted (the dumps are the
/// user's).
pub fn desired_backup_claim(db: &PostgreSQL) -> Option<PersistentVolumeClaim> {
    let settings = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    if settings.destination.is_some() {
        return None;
    }
    Some(PersistentVolumeClaim {
        metadata: kept_meta(db, backup_claim_name(db)),
        spec: Some(claims::spec(Quantity(db.spec.storage.clone()))),
        status: None,
    })
}
