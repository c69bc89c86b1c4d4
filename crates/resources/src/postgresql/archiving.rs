//! Continuous archiving: the server settings it needs and what the instances say of it (the
//! WalArchiving status and condition).

use super::*;

/// The most PostgreSQL takes as `archive_timeout`, in seconds (INT_MAX / 2).
pub(super) const MAX_ARCHIVE_TIMEOUT: u64 = 1_073_741_823;

/// What the primary's archiver said: `pg_stat_archiver` and the runner's last error.
#[derive(Clone, Debug, PartialEq)]
pub struct ArchiverSeen {
    /// As `status.walArchiving` holds it, `lastError` not yet decided ([`observe_archiver`]).
    pub archiving: WalArchiving,
    /// `bosun wal push`'s last failure's message, if it left one.
    pub error: Option<String>,
}

/// What the primary's instance said of its archiver (its API's status); `None` when
/// it did not say (not a primary, or its server did not answer).
pub fn archiver_seen(instance: &bosun_instance::status::Status) -> Option<ArchiverSeen> {
    let a = instance.server.as_ref().filter(|s| !s.in_recovery)?.archiver.as_ref()?;
    let rfc3339 = |t: Option<i64>| t.and_then(|t| Timestamp::from_second(t).ok()).map(|t| t.to_string());
    let archiving = WalArchiving {
        last_archived_wal: a.last_archived_wal.clone(),
        last_archived_time: rfc3339(a.last_archived_time),
        last_failed_wal: a.last_failed_wal.clone(),
        last_failed_time: rfc3339(a.last_failed_time),
        failed_count: Some(a.failed_count),
        recent_failures: None,
        last_error: None,
    };
    Some(ArchiverSeen { archiving, error: instance.archive_error.clone() })
}

/// How many WAL files failed to archive between the `previous` look (the status) and
/// `now`: the counter's growth; after a reset of it (a restart, another primary) what
/// it counts now, at least one when the last failure's time moved. A first look counts
/// nothing: what failed before bosun watched was told by no one it could count.
pub fn failures_between(previous: Option<&WalArchiving>, now: &WalArchiving) -> u64 {
    let Some(previous) = previous else { return 0 };
    let moved = now.last_failed_time.is_some() && now.last_failed_time != previous.last_failed_time;
    match (previous.failed_count, now.failed_count) {
        (Some(before), Some(after)) if after > before => (after - before) as u64,
        (Some(before), Some(after)) if after < before && moved => after.max(1) as u64,
        _ => u64::from(moved),
    }
}

/// `status.walArchiving` from what the archiver said on this look (`seen`), the
/// status's before it (`previous`): the failures between the two looks are counted, and
/// the runner's error kept while the archiver fails or failed since the last look.
pub fn observe_archiver(previous: Option<&WalArchiving>, seen: &ArchiverSeen) -> WalArchiving {
    let mut archiving = seen.archiving.clone();
    let between = failures_between(previous, &archiving);
    archiving.recent_failures = (between > 0).then_some(between as i64);
    if archiving_fails(&archiving) || between > 0 {
        archiving.last_error = seen.error.clone();
    }
    archiving
}

/// Whether the last WAL file the primary tried to archive failed.
pub fn archiving_fails(a: &WalArchiving) -> bool {
    match (&a.last_failed_time, &a.last_archived_time) {
        (Some(failed), Some(archived)) => failed >= archived,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The `WALArchiving` condition, with continuous archiving only. False while the last
/// file failed, and on the look after failures that a later push made good (so a short
/// outage between two looks is told, with a Warning, and not missed).
pub(super) fn wal_archiving_condition(db: &PostgreSQL, archiving: Option<&WalArchiving>) -> Option<Desired> {
    const TYPE: &str = postgresql_types::WAL_ARCHIVING;
    let destination = crate::backup::destination_url(continuous_destination(db)?);
    let timeout = archive_timeout(db).unwrap_or_default();
    let error =
        |a: &WalArchiving| a.last_error.clone().unwrap_or_else(|| "see the primary's log (bosun wal push)".into());
    Some(match archiving {
        None => Desired::unknown(
            TYPE,
            reasons::ARCHIVER_UNKNOWN,
            "the primary's archiver is asked once the primary is Ready",
        ),
        Some(a) if archiving_fails(a) => Desired::new(
            TYPE,
            false,
            reasons::ARCHIVING_FAILED,
            format!(
                "archiving {} to {destination} failed: {}; the primary keeps every WAL file until it is archived, so pg_wal grows meanwhile",
                a.last_failed_wal.as_deref().unwrap_or("a WAL file"),
                error(a),
            ),
        ),
        Some(a @ WalArchiving { recent_failures: Some(n), .. }) => Desired::new(
            TYPE,
            false,
            reasons::ARCHIVING_FAILED,
            format!(
                "{n} WAL file(s) failed to archive to {destination} since the last look, the last {} at {}: {}; \
                 archiving goes on ({} archived at {})",
                a.last_failed_wal.as_deref().unwrap_or("a WAL file"),
                a.last_failed_time.as_deref().unwrap_or_default(),
                error(a),
                a.last_archived_wal.as_deref().unwrap_or_default(),
                a.last_archived_time.as_deref().unwrap_or_default(),
            ),
        ),
        Some(WalArchiving { last_archived_wal: Some(wal), last_archived_time, .. }) => Desired::new(
            TYPE,
            true,
            reasons::ARCHIVING,
            format!(
                "{wal} archived to {destination} at {}; a WAL file is archived at most {timeout}s after it began",
                last_archived_time.as_deref().unwrap_or_default()
            ),
        ),
        Some(_) => Desired::unknown(
            TYPE,
            reasons::ARCHIVER_UNKNOWN,
            format!("no WAL file archived since the primary started; the first goes within {timeout}s"),
        ),
    })
}

/// The destination WAL is archived to, when continuous archiving is asked for (and
/// backups are enabled).
pub fn continuous_destination(db: &PostgreSQL) -> Option<&Destination> {
    let backup = db.spec.backup.as_ref().filter(|b| b.enabled)?;
    backup.continuous.as_ref()?;
    backup.destination.as_ref()
}

/// The server's `archive_timeout` in seconds, when continuous archiving is asked for.
pub fn archive_timeout(db: &PostgreSQL) -> Option<u64> {
    continuous_destination(db)?;
    let given = db.spec.backup.as_ref()?.continuous.as_ref()?.archive_timeout.as_deref();
    let seconds = crate::duration::parse_duration(given.unwrap_or(DEFAULT_ARCHIVE_TIMEOUT))
        .map_or(MAX_ARCHIVE_TIMEOUT, |d| d.as_secs());
    Some(seconds.clamp(1, MAX_ARCHIVE_TIMEOUT))
}
