//! The `Date` response header (RFC 9110 §6.6.1, IMF-fixdate), formatted at most once per second.

/// Formats Unix seconds as `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn imf_fixdate(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month 1..=12, day 1..=31). Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A `Date` value cached per second, owned by one worker.
#[derive(Debug, Default)]
pub struct DateCache {
    secs: u64,
    text: String,
}

impl DateCache {
    /// The header value for `unix_ms`, reformatted only when the second changes.
    pub fn get(&mut self, unix_ms: u64) -> &str {
        let secs = unix_ms / 1000;
        if self.text.is_empty() || secs != self.secs {
            self.secs = secs;
            self.text = imf_fixdate(secs);
        }
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(imf_fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(imf_fixdate(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(imf_fixdate(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(imf_fixdate(1_795_995_045), "Sun, 29 Nov 2026 23:30:45 GMT");
    }

    #[test]
    fn cache_reformats_per_second() {
        let mut c = DateCache::default();
        let a = c.get(1_000).to_string();
        assert_eq!(c.get(1_999), a);
        assert_ne!(c.get(2_000), a);
    }
}
