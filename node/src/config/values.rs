//! Value parsers of the configuration: numbers with ranges, durations with units, booleans,
//! endpoints; each error names the key and what it accepts.

use std::collections::HashMap;

use super::ConfigError;

pub(super) fn bad(
    key: &str,
    value: &str,
    expected: impl Into<std::borrow::Cow<'static, str>>,
) -> ConfigError {
    ConfigError::Value {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: expected.into(),
    }
}

/// Most ZeroMQ I/O threads accepted (`io_threads`).
pub const MAX_IO_THREADS: u64 = 64;
/// Most worker threads accepted per endpoint (`writer.workers`, `reader.workers`).
pub const MAX_WORKERS: u64 = 256;

pub(super) fn capped(
    map: &HashMap<String, String>,
    key: &str,
    default: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let n = num(map, key, default, 1)?;
    if n > max {
        return Err(ConfigError::Value {
            key: key.to_owned(),
            value: n.to_string(),
            expected: if max == MAX_IO_THREADS {
                "a whole number from 1 to 64"
            } else {
                "a whole number from 1 to 256"
            }
            .into(),
        });
    }
    Ok(n)
}

/// `tcp://host:port` with a port of 0-65535 or `*`, or any `ipc://` / `inproc://` endpoint.
pub(super) fn valid_endpoint(v: &str) -> bool {
    if let Some(rest) = v.strip_prefix("tcp://") {
        return match rest.rsplit_once(':') {
            Some((host, port)) => !host.is_empty() && (port == "*" || port.parse::<u16>().is_ok()),
            None => false,
        };
    }
    (v.starts_with("ipc://") || v.starts_with("inproc://")) && v.len() > "inproc://".len()
}

pub(super) fn num(
    map: &HashMap<String, String>,
    key: &str,
    default: u64,
    min: u64,
) -> Result<u64, ConfigError> {
    let Some(raw) = map.get(key) else {
        return Ok(default);
    };
    let v = raw.trim();
    // i32-sized options (socket options, thread counts) are capped at i32::MAX.
    let max = if key == "segment_size" || key == "memory_budget" {
        u64::MAX
    } else {
        i32::MAX as u64
    };
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            key,
            v,
            match (min, max == u64::MAX) {
                (1, true) => std::borrow::Cow::Borrowed("a whole number of bytes, at least 1"),
                (min, true) => format!("a whole number of bytes, at least {min}").into(),
                (0, false) => "a whole number from 0 to 2147483647".into(),
                (1, false) => "a whole number from 1 to 2147483647".into(),
                (min, false) => format!("a whole number from {min} to 2147483647").into(),
            },
        )),
    }
}

/// A key that is a bare number (read by [`num`], in the key's old unit) or a duration with
/// units that `convert` turns into that unit (`None`: out of range); `expected` is the error's
/// description.
fn number_or_duration(
    map: &HashMap<String, String>,
    key: &str,
    default: u64,
    min: u64,
    convert: impl Fn(std::time::Duration) -> Option<u64>,
    expected: String,
) -> Result<u64, ConfigError> {
    let Some(raw) = map.get(key) else {
        return Ok(default);
    };
    let v = raw.trim();
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return num(map, key, default, min);
    }
    humantime::parse_duration(v)
        .ok()
        .and_then(convert)
        .ok_or_else(|| bad(key, v, expected))
}

/// A duration key in milliseconds: a bare number of ms (ZPER's spelling) or a duration with
/// units (`500ms`, `2s`, `1m 30s`; issue #15), at least `min` ms.
pub(super) fn millis(
    map: &HashMap<String, String>,
    key: &str,
    default: u64,
    min: u64,
) -> Result<u64, ConfigError> {
    number_or_duration(
        map,
        key,
        default,
        min,
        |d| {
            u64::try_from(d.as_millis())
                .ok()
                .filter(|ms| *ms >= min && *ms <= i32::MAX as u64)
        },
        format!("a number of ms or a duration such as 500ms or 2s, at least {min} ms"),
    )
}

/// `retain_hours`: a bare number of hours (ZPER's spelling) or a duration with units that is a
/// whole number of hours (`168h`, `7days`), at least one hour.
pub(super) fn whole_hours(
    map: &HashMap<String, String>,
    key: &str,
    default: u64,
) -> Result<u64, ConfigError> {
    number_or_duration(
        map,
        key,
        default,
        1,
        |d| {
            let whole = d.as_secs() >= 3600 && d.as_secs() % 3600 == 0 && d.subsec_nanos() == 0;
            whole.then_some(d.as_secs() / 3600)
        },
        "a number of hours or a duration in whole hours such as 168h or 7days".to_owned(),
    )
}

pub(super) fn boolean(
    map: &HashMap<String, String>,
    key: &str,
    default: bool,
) -> Result<bool, ConfigError> {
    match map.get(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(bad(key, &v, "true or false")),
    }
}
