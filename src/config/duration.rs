//! Human durations in configuration: a positive integer followed by a unit.
//!
//! Accepted units: `ms`, `s`, `m`, `h`, `d` (case-sensitive, no spaces, no fractions).
//! `0` of any unit is rejected: every duration in sluice bounds a wait, and a zero bound is
//! almost always a typo that would turn a timeout into "refuse everything" (the few keys where
//! zero means "none", such as `server.drain_grace`, use [`parse_duration_or_zero`]).
//!
//! Every duration is at most [`MAX_DURATION`] (365 days): a bound far beyond any sensible wait,
//! whose nanoseconds fit in a `u64` with room for `now + d` on the monotonic clock. Larger
//! values are refused, never wrapped or clamped (`"18446744074s"` would otherwise overflow the
//! nanosecond arithmetic of the timeouts and behave as a fraction of a second).

use std::time::Duration;

/// The largest duration any key accepts: 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// Parses `"250ms"`, `"10s"`, `"5m"`, `"2h"`, `"7d"` (1ms..=365d).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(text)?;
    if d.is_zero() {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
    Ok(d)
}

/// As [`parse_duration`], but `0` of any unit is allowed (for keys where zero means "none").
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit (use ms, s, m, h or d)"))?;
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "duration {text:?} must start with a positive integer"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("duration {text:?}: {digits:?} is not a valid integer"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "duration {text:?} has unknown unit {other:?} (use ms, s, m, h or d)"
            ))
        }
    };
    let max_ms = MAX_DURATION.as_millis() as u64;
    match n.checked_mul(unit_ms) {
        Some(ms) if ms <= max_ms => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "duration {text:?} is too large (at most 365d = {}s)",
            MAX_DURATION.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
    }

    #[test]
    fn the_maximum_is_365_days_and_fits_in_u64_nanoseconds() {
        assert_eq!(parse_duration("365d").unwrap(), MAX_DURATION);
        assert_eq!(parse_duration("31536000s").unwrap(), MAX_DURATION);
        assert!(u64::try_from(MAX_DURATION.as_nanos()).unwrap() < u64::MAX / 4);
        let e = parse_duration("18446744074s").unwrap_err();
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn zero_only_where_allowed() {
        assert_eq!(parse_duration_or_zero("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration_or_zero("0ms").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_duration_or_zero("2s").unwrap(),
            Duration::from_secs(2)
        );
        assert!(parse_duration("0s")
            .unwrap_err()
            .contains("greater than zero"));
        assert!(parse_duration_or_zero("-1s").is_err());
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        for bad in [
            "",
            "10",
            "s",
            "0s",
            "-1s",
            "1.5s",
            "10 s",
            "10sec",
            "99999999999999999999d",
            "18446744074s",
            "366d",
            "31536001s",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad:?} -> {err}");
        }
    }
}
