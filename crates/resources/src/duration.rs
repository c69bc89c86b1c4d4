//! Durations as people write them in flags and specs: `15s`, `500ms`, `2m`, `7h`.

/// `15s`, `500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 15s, 500ms or 2m"))?;
    let too_long = || format!("invalid duration {s:?}: too long");
    match unit {
        "ms" => Ok(std::time::Duration::from_millis(n)),
        "s" => Ok(std::time::Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(std::time::Duration::from_secs).ok_or_else(too_long),
        "h" => n.checked_mul(3600).map(std::time::Duration::from_secs).ok_or_else(too_long),
        _ => Err(format!("invalid duration {s:?}: unit must be ms, s, m or h")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(std::time::Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(std::time::Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(std::time::Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(std::time::Duration::from_secs(7)));
        assert_eq!(parse_duration("7h"), Ok(std::time::Duration::from_secs(7 * 3600)));
        assert!(parse_duration("7d").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("9999999999999999h").is_err(), "an overflow is an error, not a panic");
    }
}
