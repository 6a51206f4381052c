//! Durations on the command line: `2s`, `500ms`, `1m` or a bare number of milliseconds.

use std::time::Duration;

/// Parses `2s`, `1500ms`, `1m` or a bare number of milliseconds.
///
/// Errors: anything else, or zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 2s or 500ms"))?;
    let d = match unit {
        "" | "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("invalid duration {s:?}: units are ms, s, m")),
    };
    if d.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_dolly_writes_them() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("750"), Ok(Duration::from_millis(750)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["", "xyz", "2h", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
