//! Durations on the command line: anything humantime reads (`2s`, `500ms`, `1m 30s`, `1h`), or
//! a bare number of milliseconds as the first versions of the CLI took.

use std::time::Duration;

/// Parses `2s`, `1500ms`, `1m`, `1m 30s` or a bare number of milliseconds.
///
/// Errors: anything else (the message gives examples), or zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let ms: u64 = s
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: too large"))?;
        Duration::from_millis(ms)
    } else {
        humantime::parse_duration(s)
            .map_err(|e| format!("invalid duration {s:?} ({e}): write e.g. 500ms, 2s or 1m"))?
    };
    if d.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    Ok(d)
}

/// As [`parse_duration`], but `0` (or `0s`) is allowed: for options where zero means "off".
///
/// Errors: anything that is not a duration.
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.bytes().all(|b| b == b'0') && !t.is_empty() {
        return Ok(Duration::ZERO);
    }
    match humantime::parse_duration(t) {
        Ok(d) if d.is_zero() => Ok(Duration::ZERO),
        _ => parse_duration(s),
    }
}

/// Hours for `--retain-hours`: a bare number of hours, or a duration in whole hours (`7days`,
/// `36h`), as the `retain_hours` config key takes.
///
/// Errors: zero, a part of an hour, more than 2^32-1 hours, or not a duration.
pub fn parse_hours(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let hours = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>()
            .map_err(|_| format!("{s:?}: too many hours"))?
    } else {
        let d = humantime::parse_duration(s)
            .map_err(|e| format!("invalid hours {s:?} ({e}): write e.g. 168, 36h or 7days"))?;
        if d.as_secs() % 3600 != 0 || d.subsec_nanos() != 0 {
            return Err(format!("{s:?} is not a whole number of hours"));
        }
        d.as_secs() / 3600
    };
    match u32::try_from(hours) {
        Ok(0) => Err("at least 1 hour".into()),
        Ok(h) => Ok(h),
        Err(_) => Err(format!("{s:?}: too many hours")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_or_as_bare_milliseconds() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("750"), Ok(Duration::from_millis(750)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "xyz", "0s", "0", "-1s", "2 parsecs"] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains("duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn hours_as_numbers_or_durations_in_whole_hours() {
        assert_eq!(parse_hours("168"), Ok(168));
        assert_eq!(parse_hours("7days"), Ok(168));
        assert_eq!(parse_hours("36h"), Ok(36));
        for bad in ["0", "90m", "soon", "99999999999"] {
            assert!(parse_hours(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_is_allowed_where_it_means_off() {
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_zero("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration_or_zero("250"),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(parse_duration_or_zero("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration_or_zero("soon").is_err());
    }
}
