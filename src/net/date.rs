//! HTTP dates (RFC 9110 §5.6.7): the `Date` response header (IMF-fixdate), formatted at most once
//! per second, and a parser for all three accepted forms (used for `Retry-After` on responses
//! from destinations).

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

const DAY_NAMES: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const DAY_NAMES_LONG: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];
const MONTH_NAMES: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Parses an HTTP-date into Unix seconds. Accepts the three forms of RFC 9110 §5.6.7:
///
/// ```text
/// IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
/// RFC 850      Sunday, 06-Nov-94 08:49:37 GMT
/// asctime      Sun Nov  6 08:49:37 1994
/// ```
///
/// Names are case-sensitive, as in the grammar. The day name must be a valid name but is not
/// checked against the date. Two-digit RFC 850 years are read as 1970–2069 (the RFC's "more than
/// 50 years in the future" rule needs a clock; this fixed window agrees with it until 2019+50).
/// Second 60 (a leap second) is accepted. Dates before 1970 and invalid calendar dates are `None`.
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let comma = value.iter().position(|&b| b == b',');
    match comma {
        Some(3) => parse_imf_fixdate(value),
        Some(_) => parse_rfc850(value),
        None => parse_asctime(value),
    }
}

fn parse_imf_fixdate(v: &[u8]) -> Option<u64> {
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    if v.len() != 29 || !DAY_NAMES.contains(&&v[..3]) || &v[3..5] != b", " {
        return None;
    }
    if v[7] != b' ' || v[11] != b' ' || v[16] != b' ' || &v[25..] != b" GMT" {
        return None;
    }
    let day = digits(&v[5..7])?;
    let month = month(&v[8..11])?;
    let year = digits(&v[12..16])?;
    let secs = time_of_day(&v[17..25])?;
    to_unix(year, month, day, secs)
}

fn parse_rfc850(v: &[u8]) -> Option<u64> {
    // "Sunday, 06-Nov-94 08:49:37 GMT"
    let comma = v.iter().position(|&b| b == b',')?;
    if !DAY_NAMES_LONG.contains(&&v[..comma]) {
        return None;
    }
    let v = &v[comma..];
    if v.len() != 24 || &v[..2] != b", " || v[4] != b'-' || v[8] != b'-' || v[11] != b' ' {
        return None;
    }
    if &v[20..] != b" GMT" {
        return None;
    }
    let day = digits(&v[2..4])?;
    let month = month(&v[5..8])?;
    let yy = digits(&v[9..11])?;
    let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
    let secs = time_of_day(&v[12..20])?;
    to_unix(year, month, day, secs)
}

fn parse_asctime(v: &[u8]) -> Option<u64> {
    // "Sun Nov  6 08:49:37 1994"
    if v.len() != 24 || !DAY_NAMES.contains(&&v[..3]) || v[3] != b' ' || v[7] != b' ' {
        return None;
    }
    if v[10] != b' ' || v[19] != b' ' {
        return None;
    }
    let month = month(&v[4..7])?;
    let day = match v[8] {
        b' ' => digits(&v[9..10])?,
        _ => digits(&v[8..10])?,
    };
    let secs = time_of_day(&v[11..19])?;
    let year = digits(&v[20..24])?;
    to_unix(year, month, day, secs)
}

/// ASCII digits → number; `None` if empty or any byte is not a digit (at most 4 digits here).
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &b| n * 10 + u64::from(b - b'0')))
}

fn month(s: &[u8]) -> Option<u64> {
    MONTH_NAMES
        .iter()
        .position(|&m| m == s)
        .map(|i| i as u64 + 1)
}

/// "HH:MM:SS" → seconds since midnight.
fn time_of_day(s: &[u8]) -> Option<u64> {
    if s.len() != 8 || s[2] != b':' || s[5] != b':' {
        return None;
    }
    let (h, m, sec) = (digits(&s[..2])?, digits(&s[3..5])?, digits(&s[6..])?);
    (h < 24 && m < 60 && sec <= 60).then_some(h * 3600 + m * 60 + sec)
}

fn to_unix(year: u64, month: u64, day: u64, secs: u64) -> Option<u64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if year < 1970 || day == 0 || day > month_days {
        return None;
    }
    let days = days_from_civil(year as i64, month as u32, day as u32);
    Some(days as u64 * 86_400 + secs)
}

/// (year, month 1..=12, day 1..=31) → days since 1970-01-01. Howard Hinnant's algorithm, the
/// inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    #[test]
    fn parses_the_three_forms() {
        let t = Some(784_111_777);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), t);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), t);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), t);
        assert_eq!(parse_http_date(b"Thu Jan 01 00:00:00 1970"), Some(0));
        assert_eq!(
            parse_http_date(b"Tuesday, 01-Jan-30 00:00:00 GMT"),
            Some(1_893_456_000)
        );
        assert_eq!(
            parse_http_date(b"Tue, 29 Feb 2000 23:59:60 GMT"),
            Some(951_868_800)
        );
    }

    #[test]
    fn round_trips_with_the_formatter() {
        // Every day from 1970 to ~2106 at a varying time of day, plus the extremes.
        let mut secs = 0u64;
        while secs < 4_300_000_000 {
            let text = imf_fixdate(secs);
            assert_eq!(parse_http_date(text.as_bytes()), Some(secs), "{text}");
            secs += 86_400 + 3_607;
        }
        for secs in [0, 59, 86_399, 951_782_400, 253_402_300_799] {
            assert_eq!(parse_http_date(imf_fixdate(secs).as_bytes()), Some(secs));
        }
    }

    #[test]
    fn rejects_malformed_dates() {
        let cases: &[&[u8]] = &[
            b"",
            b"Sun, 06 Nov 1994 08:49:37",      // no zone
            b"Sun, 06 Nov 1994 08:49:37 UTC",  // wrong zone
            b"Sun, 6 Nov 1994 08:49:37 GMT",   // one-digit day
            b"sun, 06 Nov 1994 08:49:37 GMT",  // case
            b"Sun, 06 nov 1994 08:49:37 GMT",  // case
            b"Sun, 31 Nov 1994 08:49:37 GMT",  // no such day
            b"Sun, 29 Feb 1900 08:49:37 GMT",  // not a leap year
            b"Sun, 00 Nov 1994 08:49:37 GMT",  // day zero
            b"Sun, 06 Nov 1994 24:00:00 GMT",  // hour
            b"Sun, 06 Nov 1994 08:60:00 GMT",  // minute
            b"Sun, 06 Nov 1969 08:49:37 GMT",  // before the epoch
            b"Sun, 06 Nov +994 08:49:37 GMT",  // sign
            b"Sun, 06 Nov 1994 08:49:37 GMT ", // trailing byte
            b"Sunday, 06-Nov-1994 08:49:37 GMT",
            b"Sundae, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov 6 08:49:37 1994",
            b"Sun Nov  6 08:49:37 94",
            b"120",
            "Sun, 06 Nov 1994 08:49:3\u{e9} GMT".as_bytes(),
        ];
        for &c in cases {
            assert_eq!(parse_http_date(c), None, "{:?}", String::from_utf8_lossy(c));
        }
    }
}
