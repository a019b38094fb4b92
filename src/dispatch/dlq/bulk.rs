//! Bulk DLQ replay: which entries a `POST /admin/dlq/replay?reason=R&trigger=ID&since=T` or a
//! `sluice dlq replay --all [--reason R] [--trigger ID] [--since T]` replays.
//!
//! A [`ReplayFilter`] is the conjunction of its set fields: `reason` (`retry_exhausted`,
//! `circuit_open`, `permanent_failure`), `trigger` (the event's trigger id, exact), `since` (the
//! entry was dead-lettered at or after `T`, given as Unix milliseconds or an RFC 3339 time such
//! as `2026-12-01T02:00:00Z` or `2026-12-01T03:00:00.250+01:00`). No field: every entry.
//!
//! The query string is parsed strictly: an unknown parameter, a parameter given twice, an empty
//! value, an unknown reason or an unparsable time is an error naming the parameter (the route
//! answers `400`), never silently ignored. Values are percent-decoded (`%3A` for `:`, `%2B` for
//! `+`; a literal `+` in a query is a space, so a `+01:00` offset must be written `%2B01:00`).
#![forbid(unsafe_code)]

use crate::dispatch::dlq::claims::{ClaimRefused, ReplayClaim};
use crate::dispatch::dlq::entry::DlqEntry;
use crate::dispatch::dlq::store::DlqStore;
use crate::dispatch::dlq::{DlqError, DlqReason, DlqSummary};

/// Entries the online route replays per call at most (its answer says how many remain).
pub const ONLINE_CHUNK: usize = 1024;
/// Body bytes after which the online route stops picking (what one [`Pick`] holds in memory
/// between the reader that reads the entries and the core that appends them): 64 MiB, so a
/// pick holds at most that plus one entry's body (≤ `max_body_bytes`).
pub const ONLINE_PICK_BYTES: usize = 64 << 20;

/// What one online bulk replay picked, off the core loops (`sched::readers`): the matching
/// entries claimed and read, oldest first, for the core to hand to the WAL.
#[derive(Debug, Default)]
pub struct Pick {
    /// Claimed (in the store's set shared by every core) and read.
    pub entries: Vec<(ReplayClaim, DlqEntry)>,
    /// Matching entries not on their way from another call, when the DLQ was listed.
    pub matching: usize,
    /// Of those, passed over: claimed by another call meanwhile, removed, or unreadable.
    pub skipped: usize,
    /// The claim set was full: nothing more could be claimed (no room).
    pub claims_full: bool,
}

/// Lists the DLQ and claims and reads, oldest first, up to [`ONLINE_CHUNK`] entries matching
/// `filter`, stopping once [`ONLINE_PICK_BYTES`] of bodies are picked. `Err` when the DLQ
/// cannot be listed.
pub fn pick(store: &DlqStore, filter: &ReplayFilter) -> Result<Pick, DlqError> {
    pick_upto(store, filter, ONLINE_PICK_BYTES)
}

/// [`pick`], stopping once `max_bytes` of bodies are picked.
fn pick_upto(store: &DlqStore, filter: &ReplayFilter, max_bytes: usize) -> Result<Pick, DlqError> {
    let listing = store.list()?;
    let claims = store.replays();
    let selected: Vec<String> = listing
        .entries
        .into_iter()
        .filter(|s| filter.matches(s) && !claims.is_claimed(&s.id))
        .map(|s| s.id)
        .collect();
    let mut pick = Pick {
        matching: selected.len(),
        ..Pick::default()
    };
    let mut bytes = 0usize;
    for id in &selected {
        if pick.entries.len() == ONLINE_CHUNK || bytes >= max_bytes {
            break;
        }
        // Claimed before it is read: a replay elsewhere either holds it (skip) or released it
        // after removing the entry (the read finds it gone).
        let claim = match claims.claim(id) {
            Ok(c) => c,
            Err(ClaimRefused::InFlight) => {
                pick.skipped += 1;
                continue;
            }
            Err(ClaimRefused::Full) => {
                pick.claims_full = true;
                break;
            }
        };
        match store.get(id) {
            Ok(entry) => {
                bytes += entry.event.body.len();
                pick.entries.push((claim, entry));
            }
            Err(DlqError::NotFound { .. }) => pick.skipped += 1, // removed meanwhile
            Err(e) => {
                eprintln!("sluice: bulk replay skips DLQ entry {id}: {e}");
                pick.skipped += 1;
            }
        }
    }
    Ok(pick)
}

/// Which DLQ entries to replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayFilter {
    pub reason: Option<DlqReason>,
    pub trigger: Option<String>,
    /// Dead-lettered at or after this Unix millisecond.
    pub since_ms: Option<u64>,
}

impl ReplayFilter {
    /// Whether `s` is selected.
    pub fn matches(&self, s: &DlqSummary) -> bool {
        self.reason.map_or(true, |r| r == s.reason)
            && self.trigger.as_deref().map_or(true, |t| t == s.trigger_id)
            && self.since_ms.map_or(true, |t| s.dead_lettered_at_ms >= t)
    }

    /// From a URL query (`None`: no query, every entry).
    pub fn from_query(query: Option<&str>) -> Result<ReplayFilter, String> {
        let mut f = ReplayFilter::default();
        let Some(q) = query else { return Ok(f) };
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value =
                percent_decode(raw).ok_or_else(|| format!("{name}: bad percent-encoding"))?;
            if value.is_empty() {
                return Err(format!("{name}: empty value"));
            }
            let twice = || format!("{name}: given twice");
            match name {
                "reason" if f.reason.is_none() => f.reason = Some(parse_reason(&value)?),
                "trigger" if f.trigger.is_none() => f.trigger = Some(value),
                "since" if f.since_ms.is_none() => f.since_ms = Some(parse_since(&value)?),
                "reason" | "trigger" | "since" => return Err(twice()),
                other => {
                    return Err(format!(
                        "unknown parameter {other:?} (known: reason, trigger, since)"
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// A DLQ reason by its name.
pub fn parse_reason(text: &str) -> Result<DlqReason, String> {
    [
        DlqReason::RetryExhausted,
        DlqReason::CircuitOpen,
        DlqReason::PermanentFailure,
    ]
    .into_iter()
    .find(|r| r.as_str() == text)
    .ok_or_else(|| {
        format!("reason: {text:?} is not retry_exhausted, circuit_open or permanent_failure")
    })
}

/// `since`: Unix milliseconds (digits only) or an RFC 3339 date-time.
pub fn parse_since(text: &str) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map_err(|_| format!("since: {text:?} is out of range"));
    }
    parse_rfc3339_ms(text).ok_or_else(|| {
        format!(
            "since: {text:?} is neither Unix milliseconds nor an RFC 3339 time \
             (e.g. 2026-12-01T02:00:00Z)"
        )
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (`t`/space separator and `z` accepted, as RFC 3339
/// allows) → Unix milliseconds; `None` for anything else, including times before 1970.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        millis = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_secs = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let text = [*h1, *h2, *m1, *m2];
            if !text.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let h = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let m = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if h > 23 || m > 59 {
                return None;
            }
            let v = h * 3600 + m * 60;
            if *sign == b'+' {
                v
            } else {
                -v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset_secs;
    let ms = secs.checked_mul(1000)?.checked_add(millis)?;
    u64::try_from(ms).ok()
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `%XX` decoding and `+` as a space; `None` for a bad escape or invalid UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entry `n` of trigger `trigger`, dead-lettered at `n` ms (so in the order of `n`).
    fn dead(n: u64, trigger: &str) -> DlqEntry {
        let mut e = crate::dispatch::dlq::entry::tests::sample_entry(n);
        e.event.trigger_id = trigger.into();
        e.dead_lettered_at_ms = n;
        e
    }

    /// The reader's half of an online bulk replay: matching entries, oldest first, claimed and
    /// read; those claimed elsewhere passed over and counted; the claims held until dropped.
    #[test]
    fn a_pick_claims_and_reads_the_matching_entries_oldest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(tmp.path(), 100).unwrap();
        let entries: Vec<DlqEntry> = (1..=4)
            .map(|n| dead(n, if n == 3 { "other" } else { "t" }))
            .collect();
        for e in &entries {
            store.put(e).unwrap();
        }
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let held = store.replays().claim(ids[1]).unwrap();
        let filter = ReplayFilter {
            trigger: Some("t".into()),
            ..ReplayFilter::default()
        };
        let pick = pick(&store, &filter).unwrap();
        let got: Vec<&str> = pick.entries.iter().map(|(_, e)| e.id.as_str()).collect();
        assert_eq!(got, [ids[0], ids[3]], "trigger t, not the one on its way");
        assert_eq!(
            (pick.matching, pick.skipped, pick.claims_full),
            (2, 0, false)
        );
        assert!(store.replays().is_claimed(ids[0]) && store.replays().is_claimed(ids[3]));
        drop(pick);
        assert!(
            !store.replays().is_claimed(ids[0]),
            "a dropped pick gives its claims back"
        );
        drop(held);
        // A full claim set: nothing picked, said so.
        let small = tempfile::tempdir().unwrap();
        let store = DlqStore::open(small.path(), 1).unwrap();
        store.put(&entries[0]).unwrap();
        let _held = store.replays().claim(ids[3]);
        let pick = pick_all(&store);
        assert!(pick.entries.is_empty() && pick.claims_full, "{pick:?}");
    }

    /// The byte bound: picking stops once it is reached (the entry that reaches it is kept);
    /// the rest stay unclaimed and count as remaining.
    #[test]
    fn a_pick_stops_at_its_byte_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(tmp.path(), 100).unwrap();
        let entries: Vec<DlqEntry> = (1..=5).map(|n| dead(n, "t")).collect();
        for e in &entries {
            store.put(e).unwrap();
        }
        let body = entries[0].event.body.len();
        let pick = pick_upto(&store, &ReplayFilter::default(), 2 * body).unwrap();
        assert_eq!((pick.entries.len(), pick.matching), (2, 5));
        assert!(
            !store.replays().is_claimed(&entries[2].id),
            "not picked, not claimed"
        );
        // The first entry is picked whatever its size.
        let pick2 = pick_upto(&store, &ReplayFilter::default(), 1).unwrap();
        assert_eq!(pick2.entries.len(), 1);
        assert_eq!(
            pick2.matching, 3,
            "the two held by the first pick are passed over"
        );
    }

    fn pick_all(store: &DlqStore) -> Pick {
        pick(store, &ReplayFilter::default()).unwrap()
    }

    fn summary(reason: DlqReason, trigger: &str, at: u64) -> DlqSummary {
        DlqSummary {
            id: "01HZX3K9V7Q2W8E5R4T6Y1U0AB".into(),
            event_lsn: 1,
            trigger_id: trigger.into(),
            source: "s".into(),
            destination: "http:http://h/".into(),
            reason,
            attempts: 1,
            last_error: String::new(),
            dead_lettered_at_ms: at,
            received_at_ms: at,
            body_len: 0,
            replay_of: None,
        }
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-12-01T02:00:00Z"),
            Some(1_796_090_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-12-01T03:00:00.25+01:00"),
            Some(1_796_090_400_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-30t20:00:00.123456-06:00"),
            Some(1_796_090_400_123)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T00:00:00Z"),
            Some(1_709_164_800_000)
        );
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T02:00:00",
            "2026-13-01T02:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T02:00:00.Z",
            "2026-12-01T02:00:00+1:00",
            "2026-12-01T02:00:00Zjunk",
            "1969-12-31T23:59:59Z",
            "２026-12-01T02:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn since_takes_millis_or_rfc3339() {
        assert_eq!(parse_since("1796090400000"), Ok(1_796_090_400_000));
        assert_eq!(parse_since("2026-12-01T02:00:00Z"), Ok(1_796_090_400_000));
        assert!(parse_since("99999999999999999999999")
            .unwrap_err()
            .contains("range"));
        assert!(parse_since("yesterday").unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn query_is_parsed_strictly() {
        assert_eq!(ReplayFilter::from_query(None), Ok(ReplayFilter::default()));
        let f = ReplayFilter::from_query(Some(
            "reason=permanent_failure&trigger=gh%2Dpush&since=2026-12-01T03%3A00%3A00%2B01%3A00",
        ))
        .unwrap();
        assert_eq!(f.reason, Some(DlqReason::PermanentFailure));
        assert_eq!(f.trigger.as_deref(), Some("gh-push"));
        assert_eq!(f.since_ms, Some(1_796_090_400_000));
        for (q, needle) in [
            ("reason=nope", "reason: \"nope\""),
            ("reason=", "reason: empty"),
            ("trigger=a&trigger=b", "trigger: given twice"),
            ("limit=5", "unknown parameter \"limit\""),
            ("since=%zz", "since: bad percent"),
            ("since=soon", "since: \"soon\""),
        ] {
            let e = ReplayFilter::from_query(Some(q)).unwrap_err();
            assert!(e.contains(needle), "{q}: {e}");
        }
    }

    #[test]
    fn filter_is_a_conjunction() {
        let s = summary(DlqReason::PermanentFailure, "t", 1000);
        assert!(ReplayFilter::default().matches(&s));
        let by = |reason, trigger: Option<&str>, since| ReplayFilter {
            reason,
            trigger: trigger.map(str::to_owned),
            since_ms: since,
        };
        assert!(by(Some(DlqReason::PermanentFailure), Some("t"), Some(1000)).matches(&s));
        assert!(!by(Some(DlqReason::CircuitOpen), None, None).matches(&s));
        assert!(!by(None, Some("u"), None).matches(&s));
        assert!(!by(None, None, Some(1001)).matches(&s));
    }
}
