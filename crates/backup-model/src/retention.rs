//! Which dumps a good run may delete: pure, so every rule is unit-tested.
//!
//! - Only after a good run (the caller's duty): a failed run deletes nothing.
//! - A good backup older than `retention` goes, unless it is one of the newest
//!   `keep_last` — and the newest good backup is always kept, even when every
//!   backup is older than the retention.
//! - A dump without a manifest (a run that died after its upload) is never a good
//!   backup; it goes once it is older than the retention.
//! - Without a retention nothing is deleted.

use jiff::{SignedDuration, Timestamp};

/// A stored dump as the catalogue sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub key: String,
    /// When it was made (its manifest's start, or the object's modification time).
    pub at: Timestamp,
    /// Whether it has a manifest (a verified, complete backup).
    pub good: bool,
}

/// Parse a retention like `30d`, `12h`, `2w`, `90m` or `1d12h`; `flag` names the
/// option or field in the error.
pub fn parse_retention(flag: &str, text: &str) -> Result<SignedDuration, String> {
    let bad = || format!("{flag} {text:?}: not a duration; use a number and a unit m, h, d or w, e.g. 30d, 12h, 1d12h");
    let mut total: i64 = 0;
    let mut digits = String::new();
    for ch in text.trim().chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit: i64 = match ch {
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        let n: i64 = digits.parse().map_err(|_| bad())?;
        total = n.checked_mul(unit).and_then(|s| total.checked_add(s)).ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() || total <= 0 {
        return Err(bad());
    }
    Ok(SignedDuration::from_secs(total))
}

/// The keys to delete, given every stored dump of one Backup.
pub fn expired(stored: &[Stored], now: Timestamp, retention: Option<SignedDuration>, keep_last: usize) -> Vec<String> {
    let Some(retention) = retention else { return Vec::new() };
    let cutoff = now - retention;
    let mut good: Vec<&Stored> = stored.iter().filter(|s| s.good).collect();
    good.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| b.key.cmp(&a.key)));
    let keep = keep_last.max(1);
    let mut doomed: Vec<String> = good.iter().skip(keep).filter(|s| s.at < cutoff).map(|s| s.key.clone()).collect();
    doomed.extend(stored.iter().filter(|s| !s.good && s.at < cutoff).map(|s| s.key.clone()));
    doomed.sort();
    doomed
}

/// The base backups to delete under a recovery window (`window` back from `now`):
/// every base backup that ended in the window stays, and so does the newest one that
/// ended before it (a recovery to the window's start begins there), and the newest
/// `keep_last`. `stored[].at` is when each base backup ended. The WAL a kept base
/// backup needs is the caller's to keep (from the oldest kept one's start on).
pub fn window_expired(
    stored: &[Stored],
    now: Timestamp,
    window: Option<SignedDuration>,
    keep_last: usize,
) -> Vec<String> {
    let mut doomed = expired(stored, now, window, keep_last);
    let Some(window) = window else { return doomed };
    let start = now - window;
    let base_of_start = stored.iter().filter(|s| s.good && s.at <= start).max_by(|a, b| a.at.cmp(&b.at));
    if let Some(base) = base_of_start {
        doomed.retain(|k| *k != base.key);
    }
    doomed
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-23T02:00:00Z".parse().unwrap()
    }

    fn days_ago(key: &str, days: i64, good: bool) -> Stored {
        Stored { key: key.into(), at: now() - SignedDuration::from_hours(24 * days), good }
    }

    #[test]
    fn retention_durations() {
        assert_eq!(parse_retention("--retention", "30d").unwrap(), SignedDuration::from_hours(720));
        assert_eq!(parse_retention("--retention", "12h").unwrap(), SignedDuration::from_hours(12));
        assert_eq!(parse_retention("--retention", "1d12h").unwrap(), SignedDuration::from_hours(36));
        assert_eq!(parse_retention("--retention", "2w").unwrap(), SignedDuration::from_hours(336));
        assert_eq!(parse_retention("--retention", "90m").unwrap(), SignedDuration::from_mins(90));
        for bad in ["forever", "30", "d", "0d", "-1d", "30 days", "", "1.5d", "99999999999999999999d"] {
            let err = parse_retention("spec.retention", bad).unwrap_err().to_string();
            assert!(err.contains("spec.retention"), "{bad}: {err}");
        }
    }

    #[test]
    fn old_backups_go_but_the_newest_keep_last_stay() {
        let stored = [
            days_ago("a", 40, true),
            days_ago("b", 35, true),
            days_ago("c", 31, true),
            days_ago("d", 10, true),
            days_ago("e", 1, true),
        ];
        let month = Some(SignedDuration::from_hours(720));
        assert_eq!(expired(&stored, now(), month, 0), ["a", "b", "c"]);
        assert_eq!(expired(&stored, now(), month, 3), ["a", "b"]);
        assert_eq!(expired(&stored, now(), month, 10), Vec::<String>::new());
        assert_eq!(expired(&stored, now(), None, 0), Vec::<String>::new(), "no retention, no deletes");
    }

    #[test]
    fn the_newest_good_backup_stays_even_when_all_are_old() {
        let stored = [days_ago("a", 90, true), days_ago("b", 60, true), days_ago("c", 45, true)];
        assert_eq!(expired(&stored, now(), Some(SignedDuration::from_hours(720)), 0), ["a", "b"]);
        // A newer dump without a manifest is not a good backup and protects nothing.
        let with_broken = [days_ago("a", 90, true), days_ago("b", 60, true), days_ago("z", 1, false)];
        assert_eq!(expired(&with_broken, now(), Some(SignedDuration::from_hours(720)), 1), ["a"]);
    }

    #[test]
    fn dumps_without_a_manifest_go_only_once_past_retention() {
        let stored =
            [days_ago("good", 40, true), days_ago("old-partial", 40, false), days_ago("new-partial", 0, false)];
        assert_eq!(expired(&stored, now(), Some(SignedDuration::from_hours(720)), 1), ["old-partial"]);
    }

    #[test]
    fn a_recovery_window_keeps_the_base_backup_its_start_needs() {
        let stored = [
            days_ago("base-9", 9, true),
            days_ago("base-8", 8, true),
            days_ago("base-6", 6, true),
            days_ago("base-2", 2, true),
            days_ago("partial-8", 8, false),
        ];
        let week = Some(SignedDuration::from_hours(24 * 7));
        // base-8 is the newest that ended before the window's start (7 days ago).
        assert_eq!(window_expired(&stored, now(), week, 1), ["base-9", "partial-8"]);
        assert_eq!(window_expired(&stored, now(), week, 4), ["partial-8"]);
        assert!(window_expired(&stored, now(), None, 1).is_empty());
        // Every base backup inside the window: nothing older is needed, nothing goes.
        let young = [days_ago("base-2", 2, true), days_ago("base-1", 1, true)];
        assert!(window_expired(&young, now(), week, 1).is_empty());
    }
}
