//! Which dumps a good run may delete: pure, so every rule is unit-tested.
//!
//! - Only after a good run (the caller's duty): a failed run deletes nothing.
//! - A good backup is kept when any rule keeps it (as restic's and K8up's `forget`
//!   combine them): it is one of the newest `keep_last` (the newest good backup is
//!   always kept, even when every backup is older than the retention); it is younger
//!   than `retention`; or it is the newest of its day, ISO week or month (UTC) among
//!   the newest `daily`, `weekly`, `monthly` such periods that have a good backup.
//!   Every other good backup goes.
//! - A dump without a manifest (a run that died after its upload) is never a good
//!   backup; it goes once it is older than the retention (without one: once a newer
//!   good backup exists).
//! - Without a retention and without tiers nothing is deleted.

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

/// The grandfather-father-son tiers: how many days, ISO weeks and months (UTC) keep
/// their newest good backup. Zero: that tier keeps nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    pub daily: usize,
    pub weekly: usize,
    pub monthly: usize,
}

impl Tiers {
    pub fn any(&self) -> bool {
        self.daily + self.weekly + self.monthly > 0
    }
}

/// Every rule of one Backup's retention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Keep what is younger than this; `None`: no age rule.
    pub retention: Option<SignedDuration>,
    /// Keep the newest this many (at least one).
    pub keep_last: usize,
    pub tiers: Tiers,
}

impl Policy {
    /// Whether the policy deletes anything at all.
    pub fn prunes(&self) -> bool {
        self.retention.is_some() || self.tiers.any()
    }
}

/// Why a good backup is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// One of the newest `keep_last`.
    Last,
    /// Younger than the retention.
    Age,
    Daily,
    Weekly,
    Monthly,
    /// No rule deletes anything.
    Unpruned,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Last => "last",
            Why::Age => "age",
            Why::Daily => "daily",
            Why::Weekly => "weekly",
            Why::Monthly => "monthly",
            Why::Unpruned => "unpruned",
        }
    }
}

/// A good backup the policy keeps, and every rule that keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub key: String,
    pub at: Timestamp,
    pub why: Vec<Why>,
}

/// What a good run's retention does: the good backups it keeps (newest first) and
/// the keys it deletes (sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub kept: Vec<Kept>,
    pub doomed: Vec<String>,
}

/// The plan for every stored dump of one Backup under `policy`, at `now`.
pub fn plan(stored: &[Stored], now: Timestamp, policy: &Policy) -> Plan {
    let mut good: Vec<&Stored> = stored.iter().filter(|s| s.good).collect();
    good.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| b.key.cmp(&a.key)));
    let mut why: Vec<Vec<Why>> = vec![Vec::new(); good.len()];
    if !policy.prunes() {
        why.iter_mut().for_each(|w| w.push(Why::Unpruned));
    }
    for w in why.iter_mut().take(policy.keep_last.max(1)) {
        w.push(Why::Last);
    }
    if let Some(retention) = policy.retention {
        let cutoff = now - retention;
        for (w, s) in why.iter_mut().zip(&good) {
            if s.at >= cutoff {
                w.push(Why::Age);
            }
        }
    }
    let tiers = [
        (policy.tiers.daily, Why::Daily, Period::Day),
        (policy.tiers.weekly, Why::Weekly, Period::Week),
        (policy.tiers.monthly, Why::Monthly, Period::Month),
    ];
    for (count, reason, period) in tiers {
        let mut last_period = None;
        let mut periods = 0;
        for (w, s) in why.iter_mut().zip(&good) {
            if periods == count {
                break;
            }
            let this = period.of(s.at);
            if last_period != Some(this) {
                // The newest good backup of a period not seen yet (newest first).
                last_period = Some(this);
                periods += 1;
                w.push(reason);
            }
        }
    }
    let mut plan = Plan::default();
    for (mut w, s) in why.into_iter().zip(good) {
        if w.is_empty() {
            plan.doomed.push(s.key.clone());
        } else {
            w.sort();
            plan.kept.push(Kept { key: s.key.clone(), at: s.at, why: w });
        }
    }
    let newest_good = plan.kept.first().map(|k| k.at);
    let partial_cutoff = match policy.retention {
        Some(retention) => Some(now - retention),
        None if policy.tiers.any() => newest_good,
        None => None,
    };
    if let Some(cutoff) = partial_cutoff {
        plan.doomed.extend(stored.iter().filter(|s| !s.good && s.at < cutoff).map(|s| s.key.clone()));
    }
    plan.doomed.sort();
    plan
}

/// The calendar periods of the tiers, in UTC.
#[derive(Clone, Copy)]
enum Period {
    Day,
    /// An ISO week, Monday to Sunday.
    Week,
    Month,
}

impl Period {
    /// Which period `t` falls in: equal for two times in the same one.
    fn of(self, t: Timestamp) -> (i16, i8, i8) {
        let date = t.to_zoned(jiff::tz::TimeZone::UTC).date();
        match self {
            Period::Day => (date.year(), date.month(), date.day()),
            Period::Week => (date.iso_week_date().year(), date.iso_week_date().week(), 0),
            Period::Month => (date.year(), date.month(), 0),
        }
    }
}

/// The keys to delete, given every stored dump of one Backup, by age and `keep_last` alone.
pub fn expired(stored: &[Stored], now: Timestamp, retention: Option<SignedDuration>, keep_last: usize) -> Vec<String> {
    plan(stored, now, &Policy { retention, keep_last, tiers: Tiers::default() }).doomed
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

    /// A good backup every day at 02:00 for `days` days up to `now`'s day.
    fn daily_for(days: i64) -> Vec<Stored> {
        (0..days).map(|d| days_ago(&format!("d{d:03}"), d, true)).collect()
    }

    fn tiered(daily: usize, weekly: usize, monthly: usize) -> Policy {
        Policy { retention: None, keep_last: 1, tiers: Tiers { daily, weekly, monthly } }
    }

    fn kept_keys(plan: &Plan) -> Vec<&str> {
        plan.kept.iter().map(|k| k.key.as_str()).collect()
    }

    #[test]
    fn tiers_keep_the_newest_of_each_day_week_and_month() {
        // now() is Monday 2026-11-23 02:00 UTC; d000 is today's, d001 yesterday's, ...
        // A simulated quarter of nightly dumps.
        let stored = daily_for(92);
        let plan = plan(&stored, now(), &tiered(7, 4, 3));
        // 7 days: d000..d006. 4 ISO weeks, newest of each: this week's Monday d000,
        // then the Sundays d001, d008, d015. 3 months: Nov's d000, Oct 31st d023, Sep 30th d054.
        assert_eq!(
            kept_keys(&plan),
            ["d000", "d001", "d002", "d003", "d004", "d005", "d006", "d008", "d015", "d023", "d054"]
        );
        let why = |key: &str| plan.kept.iter().find(|k| k.key == key).map(|k| k.why.clone()).unwrap();
        assert_eq!(why("d000"), [Why::Last, Why::Daily, Why::Weekly, Why::Monthly]);
        assert_eq!(why("d001"), [Why::Daily, Why::Weekly]);
        assert_eq!(why("d023"), [Why::Monthly]);
        assert_eq!(plan.doomed.len(), 92 - 11);
        assert!(!plan.doomed.contains(&"d000".to_owned()));
    }

    #[test]
    fn tiers_and_age_and_keep_last_combine_as_a_union() {
        let stored = daily_for(40);
        let policy = Policy {
            retention: Some(SignedDuration::from_hours(24 * 10)),
            keep_last: 12,
            tiers: Tiers { daily: 0, weekly: 0, monthly: 2 },
        };
        let plan = plan(&stored, now(), &policy);
        // Age keeps d000..d010 (ten days back, d010 at the cutoff itself), keep_last
        // d000..d011, monthly Nov d000 and Oct 31st d023.
        let mut want: Vec<String> = (0..=11).map(|d| format!("d{d:03}")).collect();
        want.push("d023".into());
        assert_eq!(kept_keys(&plan), want);
        // Without tiers, the same as before tiers existed.
        let legacy = Policy { tiers: Tiers::default(), ..policy };
        assert_eq!(super::plan(&stored, now(), &legacy).doomed, expired(&stored, now(), policy.retention, 12));
    }

    #[test]
    fn the_last_good_backup_survives_a_month_of_failed_runs() {
        // Good dumps until 40 days ago; since then only dumps without a manifest.
        let mut stored: Vec<Stored> = (40..60).map(|d| days_ago(&format!("g{d:03}"), d, true)).collect();
        stored.extend((0..40).map(|d| days_ago(&format!("p{d:03}"), d, false)));
        let plan = plan(&stored, now(), &tiered(7, 4, 0));
        assert_eq!(kept_keys(&plan).first(), Some(&"g040"), "the newest good backup is kept");
        // Partials older than the newest good one go; the newer ones are kept until a
        // good backup is newer than they are (without a retention).
        assert!(plan.doomed.iter().all(|k| k.starts_with('g')), "{:?}", plan.doomed);
        let with_age = Policy { retention: Some(SignedDuration::from_hours(24 * 7)), ..tiered(7, 4, 0) };
        let plan = super::plan(&stored, now(), &with_age);
        assert_eq!(kept_keys(&plan).first(), Some(&"g040"));
        assert!(plan.doomed.contains(&"p010".to_owned()) && !plan.doomed.contains(&"p003".to_owned()));
    }

    #[test]
    fn no_rule_deletes_nothing_and_says_so() {
        let stored = daily_for(3);
        let plan = plan(&stored, now(), &Policy { retention: None, keep_last: 1, tiers: Tiers::default() });
        assert!(plan.doomed.is_empty());
        assert_eq!(plan.kept[2].why, [Why::Unpruned]);
        assert_eq!(plan.kept[0].why, [Why::Last, Why::Unpruned]);
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
