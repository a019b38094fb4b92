//! `sluice events show|list|ledger`: the offline answers to "where is my event", from the data
//! dir's logs (`wal::events`), printed as text or JSON. Read-only and lock-free, so safe while
//! the server runs. Exit codes: 2 for a malformed id or filter, 1 for an id no retained log
//! holds (the message says whether retention may have deleted it) or a failed read.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;

use crate::dispatch::dlq::bulk::parse_since;
use crate::wal::read::events::{self, EventReport, Fate, ListFilter, ShowError};

/// Why a command failed, with its exit code.
#[derive(Debug, PartialEq, Eq)]
pub struct ToolError {
    pub code: u8,
    pub msg: String,
}

fn err(code: u8, msg: impl Into<String>) -> ToolError {
    ToolError {
        code,
        msg: msg.into(),
    }
}

fn io(e: std::io::Error) -> ToolError {
    err(1, format!("writing the output failed: {e}"))
}

/// Statuses `list --status` accepts (those the files can tell).
pub const STATUSES: [&str; 6] = [
    "pending",
    "retrying",
    "delivered",
    "dead_lettered",
    "skipped",
    "no_handler",
];

/// Most events `list` prints at once.
pub const MAX_LIMIT: usize = 1000;

/// `sluice events show ID`.
pub fn show(data_dir: &Path, id: &str, json: bool, out: &mut dyn Write) -> Result<(), ToolError> {
    let report = match events::show(data_dir, id) {
        Ok(r) => r,
        Err(ShowError::BadId(id)) => {
            return Err(err(
                2,
                format!(
                    "`{id}` is not an event id (26 characters of Crockford base32, upper case)"
                ),
            ))
        }
        Err(ShowError::NotFound { maybe_retired }) => {
            let why = if maybe_retired {
                "it is older than the oldest retained event of its log: retention may have retired it"
            } else {
                "no retained log holds it, and it is not older than what they retain"
            };
            return Err(err(1, format!("event {id} not found: {why}")));
        }
        Err(ShowError::Wal(e)) => return Err(err(1, format!("reading the WAL failed: {e}"))),
    };
    if json {
        let v = events::report_json(&report, false);
        writeln!(out, "{v}").map_err(io)
    } else {
        write_text(&report, out).map_err(io)
    }
}

fn write_text(r: &EventReport, out: &mut dyn Write) -> std::io::Result<()> {
    let ev = &r.event;
    writeln!(
        out,
        "{} trigger={} source={} received_at={} bytes={} log={} lsn={}",
        ev.event_id,
        ev.trigger_id,
        ev.source,
        ev.received_at_ms,
        ev.body.len(),
        r.log,
        r.lsn
    )?;
    match r.fate {
        Fate::Retrying { next_attempt_at_ms } => {
            writeln!(out, "status retrying next_attempt_at={next_attempt_at_ms}")?
        }
        Fate::DeadLettered { reason: Some(why) } | Fate::Skipped { reason: Some(why) } => {
            writeln!(out, "status {} reason={why}", r.fate.as_str())?
        }
        f => writeln!(out, "status {}", f.as_str())?,
    }
    for a in &r.attempts {
        let result = match a.outcome {
            crate::wal::AttemptOutcome::Status(code) => code.to_string(),
            o => o.error().unwrap_or("?").to_owned(),
        };
        writeln!(
            out,
            "attempt {} at={} destination={} result={result} latency_ms={:.3}",
            a.attempt,
            a.at_ms,
            a.destination,
            f64::from(a.latency_us) / 1000.0
        )?;
    }
    Ok(())
}

/// The filter of `sluice events list` and `GET /api/v1/events`, unchecked.
#[derive(Debug, Clone, Default)]
pub struct ListArgs<'a> {
    pub trigger: Option<String>,
    pub status: Option<String>,
    /// Unix milliseconds or RFC 3339.
    pub since: Option<&'a str>,
    pub until: Option<&'a str>,
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before (an event id).
    pub cursor: Option<&'a str>,
}

/// The query string of `GET /api/v1/events` (`trigger`, `status`, `since`, `until`, `limit`,
/// `cursor`; `%XX` and `+` decoded) as a checked filter: code 2 for an unknown or repeated
/// key, a bad escape, or any value [`list_filter`] refuses.
pub fn parse_list_query(query: &str) -> Result<ListFilter, ToolError> {
    let mut values: [Option<String>; 6] = Default::default();
    const KEYS: [&str; 6] = ["trigger", "status", "since", "until", "limit", "cursor"];
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(i) = KEYS.iter().position(|key| *key == k) else {
            let k = k.chars().take(32).collect::<String>();
            return Err(err(
                2,
                format!("unknown parameter {k:?}: use {}", KEYS.join(", ")),
            ));
        };
        let v = crate::dispatch::dlq::bulk::percent_decode(v)
            .ok_or_else(|| err(2, format!("{k}: bad %-escape or not UTF-8")))?;
        if values[i].replace(v).is_some() {
            return Err(err(2, format!("{k}: given twice")));
        }
    }
    let [trigger, status, since, until, limit, cursor] = values;
    let limit = match limit.as_deref() {
        None => None,
        Some(l) if !l.is_empty() && l.len() <= 9 && l.bytes().all(|b| b.is_ascii_digit()) => {
            l.parse().ok()
        }
        Some(l) => {
            let l = l.chars().take(32).collect::<String>();
            return Err(err(2, format!("limit {l:?}: must be 1..={MAX_LIMIT}")));
        }
    };
    list_filter(ListArgs {
        trigger,
        status,
        since: since.as_deref(),
        until: until.as_deref(),
        limit,
        cursor: cursor.as_deref(),
    })
}

/// The filter of `sluice events list`, checked: 2 for a bad value (a limit out of 1..=1000 is
/// refused, not clamped).
pub fn list_filter(args: ListArgs<'_>) -> Result<ListFilter, ToolError> {
    let ListArgs {
        trigger,
        status,
        since,
        until,
        limit,
        cursor,
    } = args;
    if let Some(s) = &status {
        if !STATUSES.contains(&s.as_str()) {
            return Err(err(
                2,
                format!("--status {s}: not one of {}", STATUSES.join(", ")),
            ));
        }
    }
    let limit = limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(err(2, format!("--limit {limit}: must be 1..={MAX_LIMIT}")));
    }
    let since_ms = since.map(parse_since).transpose().map_err(|e| err(2, e))?;
    let until_ms = until
        .map(parse_since)
        .transpose()
        .map_err(|e| err(2, e.replacen("since", "until", 1)))?;
    if let Some(c) = cursor {
        if crate::wal::event_id::parse(c).is_none() {
            let c = c.chars().take(32).collect::<String>();
            return Err(err(
                2,
                format!("cursor {c:?}: not a cursor this server gave"),
            ));
        }
    }
    Ok(ListFilter {
        trigger,
        status,
        since_ms,
        until_ms,
        before: cursor.map(str::to_owned),
        limit,
    })
}

/// `sluice events list`: newest first, one line (or JSON object) per event.
pub fn list(
    data_dir: &Path,
    filter: &ListFilter,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let found = events::list(data_dir, filter)
        .map_err(|e| err(1, format!("reading the WAL failed: {e}")))?;
    for r in &found {
        if json {
            writeln!(out, "{}", events::report_json(r, false)).map_err(io)?;
        } else {
            let ev = &r.event;
            writeln!(
                out,
                "{} {} {} attempts={} received_at={}",
                ev.event_id,
                ev.trigger_id,
                r.fate.as_str(),
                r.attempts.len(),
                ev.received_at_ms
            )
            .map_err(io)?;
        }
    }
    Ok(())
}

/// `sluice events ledger`: per trigger, `accepted = delivered + dead_lettered + skipped +
/// no_handler + pending` over the logs' lives; `retired` of `accepted` were deleted by retention.
pub fn ledger(data_dir: &Path, json: bool, out: &mut dyn Write) -> Result<(), ToolError> {
    let l = events::ledger(data_dir).map_err(|e| err(1, format!("reading the WAL failed: {e}")))?;
    if json {
        let v = serde_json::json!({ "triggers": l.triggers, "since": l.since_ms });
        return writeln!(out, "{v}").map_err(io);
    }
    writeln!(
        out,
        "trigger accepted delivered dead_lettered skipped no_handler pending retired"
    )
    .map_err(io)?;
    for (t, r) in &l.triggers {
        writeln!(
            out,
            "{t} {} {} {} {} {} {} {}",
            r.accepted, r.delivered, r.dead_lettered, r.skipped, r.no_handler, r.pending, r.retired
        )
        .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_ids_are_checked_with_exit_code_2() {
        let args = |status: Option<&str>, since: Option<&'static str>, limit| ListArgs {
            status: status.map(str::to_owned),
            since,
            limit,
            ..ListArgs::default()
        };
        assert_eq!(
            list_filter(args(Some("lost"), None, None))
                .unwrap_err()
                .code,
            2
        );
        assert_eq!(list_filter(args(None, None, Some(0))).unwrap_err().code, 2);
        assert_eq!(
            list_filter(args(None, None, Some(1001))).unwrap_err().code,
            2
        );
        assert_eq!(
            list_filter(args(None, Some("yesterday"), None))
                .unwrap_err()
                .code,
            2
        );
        let f = list_filter(args(None, Some("2026-12-01T00:00:00Z"), None)).unwrap();
        assert_eq!((f.limit, f.since_ms.is_some()), (100, true));
        let dir = tempfile::tempdir().unwrap();
        let e = show(dir.path(), "not-an-id", true, &mut Vec::new()).unwrap_err();
        assert_eq!(e.code, 2, "{e:?}");
        let missing = "01HZX3K9V7Q2W8E5R4T6Y1V0AB";
        let e = show(dir.path(), missing, true, &mut Vec::new()).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("not found"), "{}", e.msg);
    }

    #[test]
    fn the_list_query_string_is_parsed_strictly_and_never_panics() {
        let id = "01HZX3K9V7Q2W8E5R4T6Y1V0AB";
        let q = format!("trigger=a%2Fb+c&status=delivered&since=5&until=2026-12-01T00:00:00Z&limit=1000&cursor={id}");
        let f = parse_list_query(&q).unwrap();
        assert_eq!(f.trigger.as_deref(), Some("a/b c"));
        assert_eq!((f.since_ms, f.limit), (Some(5), 1000));
        assert_eq!(f.until_ms, Some(1_796_083_200_000));
        assert_eq!(f.before.as_deref(), Some(id));
        assert_eq!(parse_list_query("").unwrap().limit, 100, "the default");
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=99999999999999999999",
            "limit=",
            "limit=1&limit=2",
            "status=held",
            "since=never",
            "until=%ZZ",
            "cursor=abc",
            "cursor=%FF",
            "nope=1",
            "trigger=%",
        ] {
            let e = parse_list_query(bad).unwrap_err();
            assert_eq!(e.code, 2, "{bad}: {e:?}");
        }
        // Arbitrary bytes: an answer, never a panic.
        let mut x = 0x9E37_79B9u32;
        for _ in 0..2000 {
            let s: String = (0..(x % 40))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    char::from(b"=&%+az09ZX\\u{0}"[x as usize % 14])
                })
                .collect();
            let _ = parse_list_query(&s);
        }
    }
}
