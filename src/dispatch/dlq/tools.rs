//! Offline tools behind `sluice dlq list|show|discard|replay`. They take the *data* directory.
//!
//! `list`, `show` and `discard` work beside a running server (they create nothing and delete no
//! temporary file; a running server notices a discard before refusing a new entry as full).
//! `replay` appends to the WAL, so it needs the server stopped: it takes the WAL's lock and fails
//! with [`crate::wal::WalError::Locked`] otherwise.
//!
//! `replay` appends a `ReplayEvent` (a new event id, the same trigger, source, headers and body,
//! `replay_of` = the entry id), syncs it, and only then deletes the entry. A crash between the
//! two leaves both: replaying again would deliver a second copy (at least once, as everywhere).
#![forbid(unsafe_code)]

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore, DlqSummary};
use crate::sync::clock::unix_millis;
use crate::wal::event_id::EventIdGen;
use crate::wal::segment::list_segments;
use crate::wal::{
    self, Durability, Lsn, Record, WalConfig, WalError, WritePath, DEFAULT_SEGMENT_BYTES,
    MAX_BODY_BYTES, MAX_RECORD_BYTES, MIN_SEGMENT_BYTES,
};
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Name of the DLQ directory under the data directory.
pub const DLQ_SUBDIR: &str = "dlq";

/// Worker slot used in event ids generated offline (server workers use 0..workers).
pub const OFFLINE_ID_WORKER: usize = 255;

/// Errors of the offline DLQ tools.
#[derive(Debug)]
pub enum DlqToolError {
    Dlq(DlqError),
    Wal(WalError),
    /// Writing the output failed.
    Output(io::Error),
}

impl DlqToolError {
    /// The exit code of `sluice dlq`: 4 not found, 2 malformed id (usage), 3 the entry file is
    /// damaged (corrupt), 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            DlqToolError::Dlq(DlqError::NotFound { .. }) => 4,
            DlqToolError::Dlq(DlqError::InvalidId { .. }) => 2,
            DlqToolError::Dlq(DlqError::Corrupt { .. }) => 3,
            _ => 1,
        }
    }
}

impl fmt::Display for DlqToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DlqToolError::Dlq(e) => e.fmt(f),
            DlqToolError::Wal(e @ WalError::Locked { .. }) => {
                write!(f, "{e}; stop the server before `dlq replay`")
            }
            DlqToolError::Wal(e) => e.fmt(f),
            DlqToolError::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl std::error::Error for DlqToolError {}

impl From<DlqError> for DlqToolError {
    fn from(e: DlqError) -> Self {
        DlqToolError::Dlq(e)
    }
}

impl From<WalError> for DlqToolError {
    fn from(e: WalError) -> Self {
        DlqToolError::Wal(e)
    }
}

impl From<io::Error> for DlqToolError {
    fn from(e: io::Error) -> Self {
        DlqToolError::Output(e)
    }
}

fn store(data_dir: &Path) -> Result<DlqStore, DlqToolError> {
    Ok(DlqStore::open_existing(&data_dir.join(DLQ_SUBDIR))?)
}

#[derive(serde::Serialize)]
struct ListLine<'a> {
    id: &'a str,
    reason: &'a str,
    attempts: u32,
    destination: &'a str,
    trigger_id: &'a str,
    dead_lettered_at: u64,
    last_error: &'a str,
    event_lsn: Lsn,
    source: &'a str,
    received_at: u64,
    body_len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_of: Option<&'a str>,
}

impl<'a> From<&'a DlqSummary> for ListLine<'a> {
    fn from(s: &'a DlqSummary) -> Self {
        ListLine {
            id: &s.id,
            reason: s.reason.as_str(),
            attempts: s.attempts,
            destination: &s.destination,
            trigger_id: &s.trigger_id,
            dead_lettered_at: s.dead_lettered_at_ms,
            last_error: &s.last_error,
            event_lsn: s.event_lsn,
            source: &s.source,
            received_at: s.received_at_ms,
            body_len: s.body_len,
            replay_of: s.replay_of.as_deref(),
        }
    }
}

#[derive(serde::Serialize)]
struct UnreadableLine<'a> {
    id: &'a str,
    unreadable: bool,
    problem: &'a str,
}

/// What [`list`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// Readable entries listed.
    pub entries: usize,
    /// Entry files listed as unreadable (`sluice dlq list` then exits 3).
    pub unreadable: usize,
}

/// Writes one line per entry, oldest dead-lettered first: a JSON object (`json`) with `id`,
/// `reason`, `attempts`, `destination`, `trigger_id`, `dead_lettered_at` (Unix ms),
/// `last_error`, `event_lsn`, `source`, `received_at`, `body_len` (+ `replay_of`), or text:
/// `ID REASON attempts=N destination=D trigger=T dead_lettered_at=MS last_error="E"`.
/// Then one line per entry that cannot be read, by id (or `B-<seq>.dlq@<offset>` for damage in
/// a batch file that names no entry):
/// `{"id","unreadable":true,"problem"}` or `ID unreadable problem="P"`; the other entries are
/// listed all the same.
/// Event id → DLQ reason of every entry (empty when the DLQ cannot be read), for `wal inspect`.
pub fn reasons(data_dir: &Path) -> std::collections::HashMap<String, &'static str> {
    let Ok(listing) = store(data_dir).and_then(|s| Ok(s.list()?)) else {
        return Default::default();
    };
    listing
        .entries
        .iter()
        .map(|s| (s.id.clone(), s.reason.as_str()))
        .collect()
}

pub fn list(data_dir: &Path, json: bool, out: &mut dyn Write) -> Result<Listed, DlqToolError> {
    let listing = store(data_dir)?.list()?;
    for s in &listing.entries {
        if json {
            serde_json::to_writer(&mut *out, &ListLine::from(s)).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(
                out,
                "{} {} attempts={} destination={} trigger={} dead_lettered_at={} last_error={:?}",
                s.id,
                s.reason.as_str(),
                s.attempts,
                s.destination,
                s.trigger_id,
                s.dead_lettered_at_ms,
                s.last_error
            )?;
        }
    }
    for u in &listing.unreadable {
        if json {
            let line = UnreadableLine {
                id: &u.id,
                unreadable: true,
                problem: &u.problem,
            };
            serde_json::to_writer(&mut *out, &line).map_err(io::Error::from)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{} unreadable problem={:?}", u.id, u.problem)?;
        }
    }
    out.flush()?;
    Ok(Listed {
        entries: listing.entries.len(),
        unreadable: listing.unreadable.len(),
    })
}

#[derive(serde::Serialize)]
struct Header<'a> {
    name: &'a str,
    value: String,
    encoding: &'static str,
}

#[derive(serde::Serialize)]
struct ShowEntry<'a> {
    id: &'a str,
    reason: &'a str,
    attempts: u32,
    destination: &'a str,
    dead_lettered_at: u64,
    last_error: &'a str,
    event_lsn: Lsn,
    event_id: &'a str,
    trigger_id: &'a str,
    source: &'a str,
    received_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_of: Option<&'a str>,
    headers: Vec<Header<'a>>,
    body: String,
    body_encoding: &'static str,
}

/// `bytes` as UTF-8 text if valid, else base64; with the encoding's name.
fn text_or_base64(bytes: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), "utf8"),
        Err(_) => (base64(bytes), "base64"),
    }
}

/// Standard base64 (RFC 4648 §4, with padding).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes the entry `id` as one JSON object: the entry fields, the event's fields, `headers`
/// (`[{name, value, encoding}]`) and `body`, each value UTF-8 text when valid, else base64
/// (`encoding` / `body_encoding`: `"utf8"` or `"base64"`).
pub fn show_json(data_dir: &Path, id: &str, out: &mut dyn Write) -> Result<(), DlqToolError> {
    let e = store(data_dir)?.get(id)?;
    let (body, body_encoding) = text_or_base64(&e.event.body);
    let headers = e
        .event
        .headers
        .iter()
        .map(|(name, value)| {
            let (value, encoding) = text_or_base64(value);
            Header {
                name,
                value,
                encoding,
            }
        })
        .collect();
    let show = ShowEntry {
        id: &e.id,
        reason: e.reason.as_str(),
        attempts: e.attempts,
        destination: &e.destination,
        dead_lettered_at: e.dead_lettered_at_ms,
        last_error: &e.last_error,
        event_lsn: e.event_lsn,
        event_id: &e.event.event_id,
        trigger_id: &e.event.trigger_id,
        source: &e.event.source,
        received_at: e.event.received_at_ms,
        replay_of: e.event.replay_of.as_deref(),
        headers,
        body,
        body_encoding,
    };
    serde_json::to_writer(&mut *out, &show).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Deletes the entry `id`.
pub fn discard(data_dir: &Path, id: &str) -> Result<(), DlqToolError> {
    Ok(store(data_dir)?.remove(id)?)
}

/// What [`replay`] appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub event_id: String,
    pub lsn: Lsn,
}

/// Settings to append to an existing WAL offline: its segments' size (so a rollover creates a
/// segment like the server's), the largest body such a segment holds, `Fsync`.
fn offline_wal_config(wal_dir: &Path) -> Result<WalConfig, WalError> {
    let segment_bytes = match list_segments(wal_dir) {
        Ok(segs) => match segs.last() {
            Some((_, path)) => std::fs::metadata(path)
                .map_err(|e| WalError::Io {
                    path: path.clone(),
                    source: e,
                })?
                .len(),
            None => DEFAULT_SEGMENT_BYTES,
        },
        Err(_) => DEFAULT_SEGMENT_BYTES, // no WAL yet: `open` creates it
    };
    // A record's head and its commit marker (`wal::min_segment_bytes_for`).
    let overhead =
        (MAX_RECORD_BYTES - MAX_BODY_BYTES + wal::format::marker::MARKER_RECORD_BYTES) as u64;
    let max_body = segment_bytes
        .saturating_sub(overhead)
        .clamp(1, MAX_BODY_BYTES as u64) as usize;
    let cfg = WalConfig {
        segment_bytes: segment_bytes.max(MIN_SEGMENT_BYTES),
        max_body_bytes: max_body,
        durability: Durability::Fsync,
        write_path: WritePath::Pwrite,
        ..WalConfig::new(wal_dir)
    };
    Ok(cfg)
}

/// Re-delivers the entry `id`: appends it to core 0's log as a new event (see the module docs),
/// syncs, then deletes the entry. Needs the server stopped ([`WalError::Locked`] otherwise).
pub fn replay(data_dir: &Path, id: &str) -> Result<Replayed, DlqToolError> {
    let store = store(data_dir)?;
    let entry = store.get(id)?;
    // Core 0's log: its lock is the one a running server always holds.
    let wal_dir: PathBuf = wal::core_log_dir(&data_dir.join(wal::tools::WAL_SUBDIR), 0);
    let (mut log, _) = wal::open(&offline_wal_config(&wal_dir)?)?;
    let event = replay_event(
        &entry,
        &mut EventIdGen::new(OFFLINE_ID_WORKER),
        unix_millis(),
    );
    let event_id = event.event_id.clone();
    let lsn = log.append(&[Record::Event(event)])?;
    log.sync()?;
    drop(log);
    store.remove(id)?;
    Ok(Replayed { event_id, lsn })
}

/// What [`replay_all`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BulkReplayed {
    /// Entries appended as new events (and removed from the DLQ).
    pub replayed: usize,
    /// Matching entries left in the DLQ (over `limit`).
    pub remaining: usize,
    /// Entry files that could not be read (left in place; `dlq list` names them).
    pub unreadable: usize,
}

/// Entries appended per sync by [`replay_all`].
pub const OFFLINE_BATCH: usize = 256;

/// Replays every entry `filter` selects, oldest first, at most `limit` (server stopped, as
/// [`replay`]): batches of [`OFFLINE_BATCH`] events are appended to core 0's log and synced,
/// then their entries are deleted, so a crash leaves at most one batch both replayed and still
/// in the DLQ (at least once). An entry removed or damaged since the listing is skipped.
pub fn replay_all(
    data_dir: &Path,
    filter: &crate::dispatch::dlq::bulk::ReplayFilter,
    limit: Option<usize>,
) -> Result<BulkReplayed, DlqToolError> {
    replay_all_with(data_dir, filter, limit, &mut crate::tools::progress::Silent)
}

/// [`replay_all`], reporting the entries replayed (after each synced batch) to `progress`.
pub fn replay_all_with(
    data_dir: &Path,
    filter: &crate::dispatch::dlq::bulk::ReplayFilter,
    limit: Option<usize>,
    progress: &mut dyn crate::tools::progress::Progress,
) -> Result<BulkReplayed, DlqToolError> {
    let store = store(data_dir)?;
    let listing = store.list()?;
    let mut done = BulkReplayed {
        unreadable: listing.unreadable.len(),
        ..BulkReplayed::default()
    };
    let selected: Vec<&DlqSummary> = listing
        .entries
        .iter()
        .filter(|s| filter.matches(s))
        .collect();
    let take = limit.unwrap_or(usize::MAX).min(selected.len());
    done.remaining = selected.len() - take;
    if take == 0 {
        return Ok(done);
    }
    let wal_dir: PathBuf = wal::core_log_dir(&data_dir.join(wal::tools::WAL_SUBDIR), 0);
    let (mut log, _) = wal::open(&offline_wal_config(&wal_dir)?)?;
    let mut ids = EventIdGen::new(OFFLINE_ID_WORKER);
    progress.begin("dlq replay", Some(take as u64));
    for chunk in selected[..take].chunks(OFFLINE_BATCH) {
        let mut records = Vec::with_capacity(chunk.len());
        let mut replayed_ids = Vec::with_capacity(chunk.len());
        for s in chunk {
            match store.get(&s.id) {
                Ok(entry) => {
                    records.push(Record::Event(replay_event(&entry, &mut ids, unix_millis())));
                    replayed_ids.push(entry.id);
                }
                Err(DlqError::NotFound { .. }) => {}
                Err(DlqError::Corrupt { .. }) => done.unreadable += 1,
                Err(e) => return Err(e.into()),
            }
        }
        if records.is_empty() {
            progress.advance(chunk.len() as u64);
            continue;
        }
        log.append(&records)?;
        log.sync()?;
        for id in &replayed_ids {
            store.remove(id)?;
        }
        done.replayed += replayed_ids.len();
        progress.advance(chunk.len() as u64);
    }
    progress.end();
    Ok(done)
}

/// The new event a replay of `entry` appends.
fn replay_event(entry: &DlqEntry, ids: &mut EventIdGen, now_ms: u64) -> wal::EventRecord {
    wal::EventRecord {
        event_id: ids.next(now_ms),
        received_at_ms: now_ms,
        replay_of: Some(entry.id.clone()),
        ..entry.event.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::dlq::entry::tests::sample_entry;
    use crate::dispatch::dlq::{valid_id, DlqReason};
    use crate::wal::{recover_dispatch, WalReader};

    fn setup() -> (tempfile::TempDir, Vec<DlqEntry>) {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(&tmp.path().join(DLQ_SUBDIR), 100).unwrap();
        let mut entries: Vec<_> = (0..2).map(sample_entry).collect();
        entries[1].reason = DlqReason::PermanentFailure;
        entries[1].event.body = vec![0xFF, 0xFE, b'a'];
        entries[1]
            .event
            .headers
            .push(("x-bin".to_owned(), vec![0x80]));
        for e in &entries {
            store.put(e).unwrap();
        }
        (tmp, entries)
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
        assert_eq!(base64(&[0xFF, 0xFE, 0xFD]), "//79");
    }

    #[test]
    fn list_and_show() {
        let (tmp, entries) = setup();
        let mut out = Vec::new();
        assert_eq!(list(tmp.path(), true, &mut out).unwrap().entries, 2);
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // Oldest dead-lettered first: sample_entry(1).
        assert_eq!(lines[0]["id"], entries[1].id.as_str());
        assert_eq!(lines[0]["reason"], "permanent_failure");
        assert_eq!(lines[1]["reason"], "retry_exhausted");
        assert_eq!(lines[1]["attempts"], 5);
        assert_eq!(lines[1]["destination"], "http:https://example.com/hook");
        assert_eq!(lines[1]["trigger_id"], "github-push");
        assert_eq!(lines[1]["dead_lettered_at"], entries[0].dead_lettered_at_ms);
        assert_eq!(lines[1]["last_error"], "HTTP 500 Internal Server Error");
        let mut out = Vec::new();
        list(tmp.path(), false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(&format!("{} permanent_failure attempts=5 ", entries[1].id)));
        let mut out = Vec::new();
        show_json(tmp.path(), &entries[0].id, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["body"].as_str(), v["body_encoding"].as_str()),
            (Some("{\"n\":0}"), Some("utf8"))
        );
        assert_eq!(v["headers"][0]["value"], "application/json");
        let mut out = Vec::new();
        show_json(tmp.path(), &entries[1].id, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["body"].as_str(), v["body_encoding"].as_str()),
            (Some("//5h"), Some("base64"))
        );
        assert_eq!(v["headers"][1]["encoding"], "base64");
        let missing = sample_entry(7).id;
        let err = show_json(tmp.path(), &missing, &mut Vec::new()).unwrap_err();
        assert_eq!(err.exit_code(), 4);
        assert_eq!(
            show_json(tmp.path(), "nope", &mut Vec::new())
                .unwrap_err()
                .exit_code(),
            2
        );
        // No DLQ directory at all: an empty listing.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            list(empty.path(), true, &mut Vec::new()).unwrap(),
            Listed {
                entries: 0,
                unreadable: 0
            }
        );
    }

    #[test]
    fn a_corrupt_entry_is_listed_as_unreadable_and_show_names_the_problem() {
        let (tmp, entries) = setup();
        // Damage inside entry 0's record of its batch file.
        let dir = tmp.path().join(DLQ_SUBDIR);
        let name = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with("B-"))
            .unwrap();
        let path = dir.join(name);
        let mut bytes = std::fs::read(&path).unwrap();
        let scanned = crate::dispatch::dlq::batch::scan(&bytes, crate::dispatch::dlq::check_record);
        let at = scanned
            .records
            .iter()
            .find(|f| f.id == entries[0].id)
            .unwrap()
            .offset;
        bytes[at as usize + 60] ^= 0x40; // inside `destination`
        std::fs::write(&path, bytes).unwrap();
        let mut out = Vec::new();
        let listed = list(tmp.path(), true, &mut out).unwrap();
        assert_eq!(
            listed,
            Listed {
                entries: 1,
                unreadable: 1
            }
        );
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["id"], entries[1].id.as_str());
        assert_eq!(lines[1]["id"], entries[0].id.as_str());
        assert_eq!(lines[1]["unreadable"], true);
        let problem = lines[1]["problem"].as_str().unwrap();
        assert!(
            problem.contains("corrupt") && problem.contains(&entries[0].id),
            "{problem}"
        );
        let mut out = Vec::new();
        list(tmp.path(), false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(&format!("{} unreadable problem=", entries[0].id)),
            "{text}"
        );
        let err = show_json(tmp.path(), &entries[0].id, &mut Vec::new()).unwrap_err();
        assert_eq!(err.exit_code(), 3);
        assert!(err.to_string().contains(&entries[0].id), "{err}");
    }

    #[test]
    fn discard_removes_and_reports_missing() {
        let (tmp, entries) = setup();
        discard(tmp.path(), &entries[0].id).unwrap();
        assert_eq!(
            discard(tmp.path(), &entries[0].id).unwrap_err().exit_code(),
            4
        );
        assert_eq!(list(tmp.path(), true, &mut Vec::new()).unwrap().entries, 1);
    }

    #[test]
    fn replay_appends_a_replay_event_then_removes_the_entry() {
        let (tmp, entries) = setup();
        let wal_cfg = WalConfig {
            segment_bytes: wal::min_segment_bytes_for(MAX_BODY_BYTES),
            ..WalConfig::new(wal::core_log_dir(&tmp.path().join("wal"), 0))
        };
        let (mut log, _) = wal::open(&wal_cfg).unwrap();
        log.append(&[Record::Event(crate::wal::format::tests::sample_event(
            1, 10,
        ))])
        .unwrap();
        // While the "server" holds the WAL, replay refuses and leaves the entry.
        let err = replay(tmp.path(), &entries[1].id).unwrap_err();
        assert!(
            matches!(err, DlqToolError::Wal(WalError::Locked { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("stop the server"));
        drop(log);
        let r = replay(tmp.path(), &entries[1].id).unwrap();
        assert!(valid_id(&r.event_id) && r.event_id != entries[1].id);
        assert_eq!(r.lsn, 2);
        assert_eq!(WalReader::open(&wal_cfg.dir).unwrap().count(), 2);
        let mut reader = WalReader::open(&wal_cfg.dir).unwrap();
        reader.next_event().unwrap().unwrap();
        let (lsn, ev) = reader.next_event().unwrap().unwrap();
        assert_eq!(lsn, 2);
        assert_eq!(ev.replay_of.as_deref(), Some(entries[1].id.as_str()));
        assert_eq!(ev.event_id, r.event_id);
        let orig = &entries[1].event;
        assert_eq!(
            (&ev.trigger_id, &ev.source, &ev.headers, &ev.body),
            (&orig.trigger_id, &orig.source, &orig.headers, &orig.body)
        );
        // The segment kept the server's size; the entry is gone; the replay is pending.
        assert_eq!(
            std::fs::metadata(wal::segment::segment_path(&wal_cfg.dir, 1))
                .unwrap()
                .len(),
            wal::min_segment_bytes_for(MAX_BODY_BYTES)
        );
        assert_eq!(
            replay(tmp.path(), &entries[1].id).unwrap_err().exit_code(),
            4
        );
        assert_eq!(list(tmp.path(), true, &mut Vec::new()).unwrap().entries, 1);
        let state = recover_dispatch(&wal_cfg.dir).unwrap();
        assert_eq!(state.pending.keys().copied().collect::<Vec<_>>(), [1, 2]);
    }
}
