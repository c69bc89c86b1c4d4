//! Physical base backups of PostgreSQL (`bosun backup run --method base`): what
//! `pg_basebackup` says about the WAL a backup needs, and the names of those files.
//!
//! A base backup is `pg_basebackup --format=tar --pgdata=- --wal-method=fetch`: one tar
//! stream of the data directory with the WAL from the backup's start to its end inside,
//! so it restores on its own to its end point; with continuous archiving
//! (`bosun wal push`), the archive's WAL from `startWal` on carries it further. No
//! Kubernetes in here.

use serde::{Deserialize, Serialize};

/// The WAL a base backup starts and ends at (from `pg_basebackup --verbose`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalRange {
    pub timeline: u32,
    /// `0/2000028`, as PostgreSQL writes an LSN.
    pub start_lsn: String,
    pub end_lsn: String,
    /// The WAL file holding the start (the first one a recovery from this backup reads).
    pub start_wal: String,
    /// The WAL file holding the end (recovery is consistent once past it).
    pub end_wal: String,
}

/// Bytes in one WAL file: PostgreSQL's default (`initdb --wal-segsize=16`).
pub const SEGMENT_SIZE: u64 = 16 * 1024 * 1024;

/// An LSN as PostgreSQL writes it (`X/Y`, hexadecimal halves).
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.trim().split_once('/')?;
    let high = u32::from_str_radix(high, 16).ok()?;
    let low = u32::from_str_radix(low, 16).ok()?;
    Some((u64::from(high) << 32) | u64::from(low))
}

/// The name of the WAL file of `timeline` that holds `lsn`.
pub fn wal_file(timeline: u32, lsn: u64) -> String {
    let segment = lsn / SEGMENT_SIZE;
    let per_log = 0x1_0000_0000 / SEGMENT_SIZE;
    format!("{timeline:08X}{:08X}{:08X}", segment / per_log, segment % per_log)
}

/// The range `pg_basebackup --verbose` reports on stderr: `write-ahead log start point:
/// 0/2000028 on timeline 1` and `write-ahead log end point: 0/2000100`.
pub fn wal_range(stderr: &str) -> Option<WalRange> {
    let after = |marker: &str| stderr.lines().find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim()));
    let start = after("write-ahead log start point:")?;
    let (start_lsn, timeline) = start.split_once(" on timeline ")?;
    let timeline: u32 = timeline.trim().parse().ok()?;
    let end_lsn = after("write-ahead log end point:")?;
    let (start, end) = (parse_lsn(start_lsn)?, parse_lsn(end_lsn)?);
    Some(WalRange {
        timeline,
        start_lsn: start_lsn.to_owned(),
        end_lsn: end_lsn.to_owned(),
        start_wal: wal_file(timeline, start),
        end_wal: wal_file(timeline, end),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lsns_name_their_wal_files() {
        assert_eq!(parse_lsn("0/2000028"), Some(0x2000028));
        assert_eq!(parse_lsn("A/FF000000"), Some(0xA_FF00_0000));
        assert_eq!(parse_lsn("nonsense"), None);
        assert_eq!(wal_file(1, 0x2000028), "000000010000000000000002");
        // The last file of a log and the first of the next.
        assert_eq!(wal_file(3, 0xA_FFFF_FFFF), "000000030000000A000000FF");
        assert_eq!(wal_file(3, 0xB_0000_0000), "000000030000000B00000000");
    }

    #[test]
    fn the_range_is_read_from_pg_basebackups_report() {
        let stderr = "pg_basebackup: initiating base backup, waiting for checkpoint to complete\n\
            pg_basebackup: checkpoint completed\n\
            pg_basebackup: write-ahead log start point: 0/5000028 on timeline 2\n\
            pg_basebackup: write-ahead log end point: 0/6000100\n\
            pg_basebackup: base backup completed\n";
        let range = wal_range(stderr).unwrap();
        assert_eq!(range.timeline, 2);
        assert_eq!((range.start_lsn.as_str(), range.end_lsn.as_str()), ("0/5000028", "0/6000100"));
        assert_eq!(
            (range.start_wal.as_str(), range.end_wal.as_str()),
            ("000000020000000000000005", "000000020000000000000006")
        );
        assert_eq!(wal_range("pg_basebackup: error: connection refused"), None);
    }
}
