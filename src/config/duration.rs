//! Human durations in configuration: a positive integer followed by a unit.
//!
//! Accepted units: `ms`, `s`, `m`, `h`, `d` (case-sensitive, no spaces, no fractions).
//! `0` of any unit is rejected: every duration in sluice bounds a wait, and a zero bound is
//! almost always a typo that would turn a timeout into "refuse everything".

use std::time::Duration;

/// Parses `"250ms"`, `"10s"`, `"5m"`, `"2h"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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
    if n == 0 {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
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
    let ms = n
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(ms))
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
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad:?} -> {err}");
        }
    }
}
