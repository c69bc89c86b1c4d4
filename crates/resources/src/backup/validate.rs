//! What refuses a Backup or Restore before anything is applied, and the Secrets a run needs.

use super::*;

/// Why a Backup is not Ready: its CronJob is not (or could not be) applied, or its
/// runs cannot start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The spec is not valid; the message names the field.
    InvalidSpec(String),
    /// The child's name is held by an object this resource does not control.
    NameConflict(String),
    /// A Secret (or a key of it) the runs need does not exist; the CronJob is in place,
    /// and this is looked at again until it does.
    CredentialsMissing(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
            Refusal::NameConflict(_) => reasons::NAME_CONFLICT,
            Refusal::CredentialsMissing(_) => reasons::CREDENTIALS_MISSING,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::InvalidSpec(m) | Refusal::NameConflict(m) | Refusal::CredentialsMissing(m) => m.clone(),
        }
    }
}

/// A Secret a run reads, and the keys it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretNeed {
    /// The field that names it, e.g. `spec.source.connection.secretRef`.
    pub field: String,
    pub name: String,
    /// Keys it must hold (none: any, as for a destination's provider variables).
    pub keys: &'static [&'static str],
}

/// The Secrets a run with `source` (under `source_field`) and `destination` (the
/// field `destination_field`) reads: the database's `username` and `password`, the
/// destination's credentials when it names a Secret, and its encryption keys.
pub fn secrets_needed(
    source: &Source,
    source_field: &str,
    destination: &Destination,
    destination_field: &str,
) -> Vec<SecretNeed> {
    let mut needs = vec![SecretNeed {
        field: source_field.to_owned(),
        name: source.connection.secret_ref.name.clone(),
        keys: &["username", "password"],
    }];
    needs.extend(destination.secret_ref.as_ref().map(|s| SecretNeed {
        field: format!("{destination_field}.secretRef"),
        name: s.name.clone(),
        keys: &[],
    }));
    needs.extend(destination.encryption.as_ref().map(|e| SecretNeed {
        field: format!("{destination_field}.encryption.secretRef"),
        name: e.secret_ref.name.clone(),
        keys: &[ENCRYPTION_KEY],
    }));
    needs
}

/// The first need that `keys_of` (a Secret's name → its keys, `None`: no such Secret)
/// does not meet, as a message naming the field, the Secret and the key.
pub fn missing_credentials(
    needs: &[SecretNeed],
    namespace: &str,
    keys_of: impl Fn(&str) -> Option<Vec<String>>,
) -> Option<String> {
    needs.iter().find_map(|need| {
        let SecretNeed { field, name, keys } = need;
        let Some(present) = keys_of(name) else {
            return Some(format!(
                "{field}: Secret {name} does not exist in namespace {namespace}; runs cannot start until it does"
            ));
        };
        let missing: Vec<&str> = keys.iter().copied().filter(|k| !present.iter().any(|p| p == k)).collect();
        (!missing.is_empty()).then(|| {
            format!("{field}: Secret {name} has no key {}; runs cannot start until it does", missing.join(" or "))
        })
    })
}

/// How long one run of `backup` may take before its Job stops it and counts it as
/// failed: `spec.activeDeadlineSeconds`, else the shortest interval between two runs
/// of the schedule (at most [`MAX_RUN_DEADLINE_SECONDS`]). A stuck run is then over
/// before the next one is due, which starts once it is (the CronJob's starting deadline
/// lets a run that `Forbid` held back start late).
pub fn run_deadline_seconds(backup: &Backup) -> i64 {
    backup.spec.active_deadline_seconds.unwrap_or_else(|| shortest_interval(&backup.spec.schedule))
}

/// The shortest time between two consecutive runs of `schedule` (UTC), in seconds, at
/// most [`MAX_RUN_DEADLINE_SECONDS`]; that maximum for a schedule that does not parse.
pub(super) fn shortest_interval(schedule: &str) -> i64 {
    run_gaps(schedule, 512)
        .and_then(|gaps| gaps.into_iter().min())
        .unwrap_or(MAX_RUN_DEADLINE_SECONDS)
        .min(MAX_RUN_DEADLINE_SECONDS)
}

/// The longest time between two consecutive runs of `schedule` (UTC), in seconds (a
/// weekday schedule's weekend); `None` for a schedule that does not parse.
pub fn longest_interval(schedule: &str) -> Option<i64> {
    run_gaps(schedule, 2048)?.into_iter().max()
}

/// The gaps between the first `runs` runs of `schedule`, in seconds, from a fixed
/// start, so the answer is the same on every reconcile: 2001-01-01 (a Monday of a
/// year before a leap year) shows every pattern's gaps below a day in 512 runs, and a
/// weekday schedule's weekend within a few thousand.
pub(super) fn run_gaps(schedule: &str, runs: usize) -> Option<Vec<i64>> {
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build();
    let cron = parser.parse(schedule).ok()?;
    let start = Timestamp::from_second(978_307_200).unwrap_or(Timestamp::UNIX_EPOCH).to_zoned(jiff::tz::TimeZone::UTC);
    let times: Vec<i64> = cron.iter_after(start).take(runs).map(|t| t.timestamp().as_second()).collect();
    Some(times.windows(2).map(|w| w[1] - w[0]).collect())
}

/// What the schema cannot check: cron values (a range whose start is after its end,
/// a day that no month has) and the retention's arithmetic. The schema's patterns are
/// checked again too, for objects stored before the CRD had them.
pub fn validate(backup: &Backup) -> Result<(), Refusal> {
    validate_schedule("spec.schedule", &backup.spec.schedule)?;
    if let Some(verify) = &backup.spec.verify {
        validate_schedule("spec.verify.schedule", &verify.schedule)?;
    }
    if let Some(retention) = &backup.spec.retention {
        bosun_backup_model::retention::parse_retention("spec.retention", retention).map_err(Refusal::InvalidSpec)?;
    }
    Ok(())
}

/// Check a cron schedule as a CronJob would, naming its `field`.
pub fn validate_schedule(field: &str, schedule: &str) -> Result<(), Refusal> {
    let bad = |why: String| Refusal::InvalidSpec(format!("{field} {schedule:?}: {why}"));
    let pattern = regex::Regex::new(&schedule_pattern()).map_err(|e| bad(e.to_string()))?;
    if !pattern.is_match(schedule) {
        return Err(bad("not a cron expression of five fields (minute hour day-of-month month day-of-week, \
             e.g. \"0 2 * * *\") or one of @hourly, @daily, @weekly, @monthly, @yearly"
            .to_owned()));
    }
    // Ranges must run forwards: robfig/cron (the CronJob controller's parser) refuses `5-1`.
    for item in schedule.split([' ', '\t', ',']).filter(|f| !f.is_empty()) {
        let range = item.split('/').next().unwrap_or_default();
        if let Some((from, to)) = range.split_once('-')
            && let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>())
            && from > to
        {
            return Err(bad(format!("the range {range} runs backwards")));
        }
    }
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build();
    parser.parse(schedule).map(|_| ()).map_err(|e| bad(e.to_string()))
}

/// The runner's engine for a source type: it names the password variable.
pub(super) fn engine_of(source: SourceType) -> Engine {
    match source {
        SourceType::Postgresql => Engine::Postgresql,
        SourceType::Mysql => Engine::Mysql,
        SourceType::Mongodb => Engine::Mongodb,
    }
}
