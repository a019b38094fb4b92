//! The dead-letter queue: events that will not be delivered without an operator, kept durably
//! (full event, reason, attempts, last error) until discarded or replayed.
//!
//! # Files
//!
//! `DATA_DIR/dlq/` holds one file per entry, named by the entry id: the dead-lettered event's
//! `event_id`, 26 characters `[0-9A-Z]` (validated before any use as a file name, so no id can
//! name a path outside the directory). A file is written atomically: `ID.tmp` is written and
//! `fsync`ed, renamed to `ID`, and the directory is `fsync`ed. A crash leaves either the old
//! state or the new one, plus at most a stray `*.tmp`, which [`DlqStore::open`] deletes. Putting
//! an id that exists replaces the entry (the same event dead-lettered again after a crash
//! re-delivered it).
//!
//! # Entry format
//!
//! One WAL-framed record (see the `wal` module header), so damage is detected by the CRC:
//!
//! ```text
//! offset  size  field
//!      0     4  len    u32  file length (= 17 + payload); a file of any other length is corrupt
//!      4     4  crc    u32  CRC32C over [0,4) then [8,len), as in the WAL
//!      8     8  lsn    u64  event_lsn: the LSN of the event in the WAL
//!     16     1  kind   u8   4 (DlqEntry; never found in the WAL itself)
//!     17        payload, all integers little-endian:
//!   u16 n, n bytes   id           26 bytes [0-9A-Z]
//!   u16 n, n bytes   destination  UTF-8, n <= 2048
//!   u8               reason       1 retry_exhausted, 2 circuit_open, 3 permanent_failure
//!   u32              attempts
//!   u64              dead_lettered_at  Unix milliseconds
//!   u16 n, n bytes   last_error   UTF-8, n <= 1024 (MAX_ERROR_BYTES)
//!   u8               event kind   1 (event) or 5 (replayed event)
//!   rest             the event payload of that kind, exactly as in the WAL
//! ```
//!
//! # Bounds
//!
//! At most `max_entries` files: past it [`DlqStore::put`] refuses with [`DlqError::Full`] and the
//! caller keeps the event pending (never loses it). Each file is at most
//! [`MAX_DLQ_RECORD_BYTES`]; reads hold one entry in memory at a time.
#![forbid(unsafe_code)]

use crate::storage::{std_fs, OpenMode, Storage};
use crate::wal::format::{
    append_record, encode_event_into, parse_event, parse_record_max, EncodeError, EventView,
    Parsed, RecordKind, MAX_ERROR_BYTES, RECORD_HEADER_BYTES,
};
use crate::wal::{EventRecord, Lsn, MAX_RECORD_BYTES};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Length of an entry id (an event id).
pub const ID_LEN: usize = 26;
/// Longest destination (`kind:uri`), in bytes.
pub const MAX_DESTINATION_BYTES: usize = 2048;
/// Largest entry file: the largest WAL record plus the entry fields.
pub const MAX_DLQ_RECORD_BYTES: usize = MAX_RECORD_BYTES
    + (2 + ID_LEN)
    + (2 + MAX_DESTINATION_BYTES)
    + 1
    + 4
    + 8
    + (2 + MAX_ERROR_BYTES)
    + 1;

const TMP_SUFFIX: &str = ".tmp";

/// True for a well-formed entry id: exactly 26 characters `[0-9A-Z]`.
pub fn valid_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

/// Why an event was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DlqReason {
    RetryExhausted = 1,
    CircuitOpen = 2,
    PermanentFailure = 3,
}

impl DlqReason {
    pub fn from_u8(b: u8) -> Option<DlqReason> {
        Some(match b {
            1 => DlqReason::RetryExhausted,
            2 => DlqReason::CircuitOpen,
            3 => DlqReason::PermanentFailure,
            _ => return None,
        })
    }

    /// `retry_exhausted`, `circuit_open` or `permanent_failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            DlqReason::RetryExhausted => "retry_exhausted",
            DlqReason::CircuitOpen => "circuit_open",
            DlqReason::PermanentFailure => "permanent_failure",
        }
    }
}

/// One dead-lettered event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqEntry {
    /// The event's `event_id` (26 characters `[0-9A-Z]`); names the file.
    pub id: String,
    pub event: EventRecord,
    /// Where the event is in the WAL.
    pub event_lsn: Lsn,
    /// The destination that failed (`kind:uri`), at most [`MAX_DESTINATION_BYTES`].
    pub destination: String,
    pub reason: DlqReason,
    pub attempts: u32,
    /// At most [`MAX_ERROR_BYTES`] (truncate with [`crate::wal::truncate_utf8`]).
    pub last_error: String,
    /// Unix milliseconds.
    pub dead_lettered_at_ms: u64,
}

/// An entry without its headers and body, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqSummary {
    pub id: String,
    pub event_lsn: Lsn,
    pub trigger_id: String,
    pub source: String,
    pub destination: String,
    pub reason: DlqReason,
    pub attempts: u32,
    pub last_error: String,
    pub dead_lettered_at_ms: u64,
    pub received_at_ms: u64,
    pub body_len: usize,
    pub replay_of: Option<String>,
}

/// Errors of the DLQ store.
#[derive(Debug)]
pub enum DlqError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    /// The entry file at `path` is damaged (bad length, CRC, or fields).
    Corrupt {
        path: PathBuf,
        reason: String,
    },
    /// `id` is not 26 characters `[0-9A-Z]`.
    InvalidId {
        id: String,
    },
    NotFound {
        id: String,
    },
    /// The store holds `max_entries` entries; the caller keeps the event pending.
    Full {
        max_entries: usize,
    },
    /// A field exceeds its bound.
    Encode(EncodeError),
}

impl fmt::Display for DlqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DlqError::Io { path, source } => {
                write!(f, "DLQ I/O error on {}: {source}", path.display())
            }
            DlqError::Corrupt { path, reason } => {
                write!(f, "DLQ entry {} is corrupt: {reason}", path.display())
            }
            DlqError::InvalidId { id } => {
                write!(f, "invalid DLQ id {id:?} (expected 26 characters [0-9A-Z])")
            }
            DlqError::NotFound { id } => write!(f, "no DLQ entry {id}"),
            DlqError::Full { max_entries } => {
                write!(f, "the DLQ is full ({max_entries} entries)")
            }
            DlqError::Encode(e) => write!(f, "cannot store DLQ entry: {e}"),
        }
    }
}

impl std::error::Error for DlqError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DlqError::Io { source, .. } => Some(source),
            DlqError::Encode(e) => Some(e),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DlqError + '_ {
    move |source| DlqError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Encodes `e` as a complete entry file (see the module header).
pub fn encode_entry(e: &DlqEntry) -> Result<Vec<u8>, DlqError> {
    if !valid_id(&e.id) {
        return Err(DlqError::InvalidId { id: e.id.clone() });
    }
    let too_long = |field, len, max| DlqError::Encode(EncodeError::TooLong { field, len, max });
    if e.destination.len() > MAX_DESTINATION_BYTES {
        return Err(too_long(
            "destination",
            e.destination.len(),
            MAX_DESTINATION_BYTES,
        ));
    }
    if e.last_error.len() > MAX_ERROR_BYTES {
        return Err(too_long("last_error", e.last_error.len(), MAX_ERROR_BYTES));
    }
    let mut out = Vec::new();
    append_record(&mut out, e.event_lsn, RecordKind::DlqEntry, |o| {
        for s in [&e.id, &e.destination] {
            o.extend_from_slice(&(s.len() as u16).to_le_bytes());
            o.extend_from_slice(s.as_bytes());
        }
        o.push(e.reason as u8);
        o.extend_from_slice(&e.attempts.to_le_bytes());
        o.extend_from_slice(&e.dead_lettered_at_ms.to_le_bytes());
        o.extend_from_slice(&(e.last_error.len() as u16).to_le_bytes());
        o.extend_from_slice(e.last_error.as_bytes());
        o.push(e.event.kind() as u8);
        encode_event_into(&e.event, o)
    })
    .map_err(DlqError::Encode)?;
    Ok(out)
}

/// An entry parsed in place from its file bytes.
struct EntryView<'a> {
    id: &'a str,
    event_lsn: Lsn,
    destination: &'a str,
    reason: DlqReason,
    attempts: u32,
    dead_lettered_at_ms: u64,
    last_error: &'a str,
    event: EventView<'a>,
}

/// Little-endian field reader for the entry payload; every failure is a reason string.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated in `{field}`"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn int<const N: usize>(&mut self, field: &str) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }
    fn str(&mut self, max: usize, field: &str) -> Result<&'a str, String> {
        let n = u16::from_le_bytes(self.int(field)?) as usize;
        if n > max {
            return Err(format!("`{field}` length {n} above bound {max}"));
        }
        std::str::from_utf8(self.take(n, field)?).map_err(|_| format!("`{field}` is not UTF-8"))
    }
}

/// Parses a whole entry file. Never panics.
fn parse_entry(bytes: &[u8]) -> Result<EntryView<'_>, String> {
    let r = match parse_record_max(bytes, MAX_DLQ_RECORD_BYTES) {
        Parsed::Record(r) => r,
        Parsed::End => return Err("empty entry file".to_owned()),
        Parsed::Bad(reason) => return Err(reason.to_owned()),
    };
    if r.len != bytes.len() {
        return Err(format!(
            "{} bytes after the entry record",
            bytes.len() - r.len
        ));
    }
    if r.kind != RecordKind::DlqEntry {
        return Err(format!("record kind {:?}, expected DlqEntry", r.kind));
    }
    let mut f = Fields(r.payload);
    let id = f.str(ID_LEN, "id")?;
    if !valid_id(id) {
        return Err(format!("invalid id {id:?}"));
    }
    let destination = f.str(MAX_DESTINATION_BYTES, "destination")?;
    let [code] = f.int("reason")?;
    let reason = DlqReason::from_u8(code).ok_or_else(|| format!("unknown reason code {code}"))?;
    let attempts = u32::from_le_bytes(f.int("attempts")?);
    let dead_lettered_at_ms = u64::from_le_bytes(f.int("dead_lettered_at")?);
    let last_error = f.str(MAX_ERROR_BYTES, "last_error")?;
    let [kind] = f.int("event kind")?;
    let kind = RecordKind::from_u8(kind)
        .filter(|k| matches!(k, RecordKind::Event | RecordKind::ReplayEvent))
        .ok_or_else(|| format!("event kind {kind} is not an event"))?;
    let event = parse_event(kind, f.0).map_err(|e| format!("event: {e}"))?;
    Ok(EntryView {
        id,
        event_lsn: r.lsn,
        destination,
        reason,
        attempts,
        dead_lettered_at_ms,
        last_error,
        event,
    })
}

/// Decodes a whole entry file. Never panics; damage is `Err(reason)`.
pub fn decode_entry(bytes: &[u8]) -> Result<DlqEntry, String> {
    let v = parse_entry(bytes)?;
    Ok(DlqEntry {
        id: v.id.to_owned(),
        event: v.event.to_record(),
        event_lsn: v.event_lsn,
        destination: v.destination.to_owned(),
        reason: v.reason,
        attempts: v.attempts,
        last_error: v.last_error.to_owned(),
        dead_lettered_at_ms: v.dead_lettered_at_ms,
    })
}

/// The DLQ directory. `put` and `remove` serialize on an internal lock (cold path).
#[derive(Debug)]
pub struct DlqStore {
    /// Every file operation goes through it (`crate::storage`).
    fs: Arc<dyn Storage>,
    dir: PathBuf,
    max_entries: usize,
    /// Entries in the directory, as far as this process knows (recounted before refusing).
    count: Mutex<usize>,
}

impl DlqStore {
    /// Opens (creating if absent) the DLQ directory `dir` for the server: deletes leftover
    /// `*.tmp` files of interrupted writes and counts the entries.
    pub fn open(dir: &Path, max_entries: usize) -> Result<DlqStore, DlqError> {
        Self::open_in(std_fs(), dir, max_entries)
    }

    /// [`DlqStore::open`] on `fs`.
    pub fn open_in(
        fs: Arc<dyn Storage>,
        dir: &Path,
        max_entries: usize,
    ) -> Result<DlqStore, DlqError> {
        if !fs.is_dir(dir) {
            fs.create_dir_all(dir).map_err(io_err(dir))?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).map_err(io_err(parent))?;
            }
        }
        let mut removed = false;
        for name in read_names(&*fs, dir)? {
            if name.ends_with(TMP_SUFFIX) {
                let path = dir.join(&name);
                fs.remove(&path).map_err(io_err(&path))?;
                removed = true;
            }
        }
        if removed {
            fs.sync_dir(dir).map_err(io_err(dir))?;
        }
        Self::with_count(fs, dir, max_entries)
    }

    /// Opens an existing DLQ directory for the offline tools: creates nothing and deletes no
    /// temporary file (a running server may be writing one). A missing directory is empty.
    pub fn open_existing(dir: &Path) -> Result<DlqStore, DlqError> {
        let fs = std_fs();
        if !dir.exists() {
            return Ok(DlqStore {
                fs,
                dir: dir.to_owned(),
                max_entries: usize::MAX,
                count: Mutex::new(0),
            });
        }
        Self::with_count(fs, dir, usize::MAX)
    }

    fn with_count(
        fs: Arc<dyn Storage>,
        dir: &Path,
        max_entries: usize,
    ) -> Result<DlqStore, DlqError> {
        let count = count_entries(&*fs, dir)?;
        Ok(DlqStore {
            fs,
            dir: dir.to_owned(),
            max_entries,
            count: Mutex::new(count),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        *self.count.lock()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn path_of(&self, id: &str) -> Result<PathBuf, DlqError> {
        if !valid_id(id) {
            return Err(DlqError::InvalidId { id: id.to_owned() });
        }
        Ok(self.dir.join(id))
    }

    /// Stores `entry` durably (replacing an entry with the same id). Refuses with
    /// [`DlqError::Full`] when `max_entries` are stored and this id is new.
    pub fn put(&self, entry: &DlqEntry) -> Result<(), DlqError> {
        let path = self.path_of(&entry.id)?;
        let bytes = encode_entry(entry)?;
        let mut count = self.count.lock();
        let new = self.fs.len(&path).is_err();
        if new && *count >= self.max_entries {
            // Another process (the offline `dlq discard`) may have removed some.
            *count = count_entries(&*self.fs, &self.dir)?;
            if *count >= self.max_entries {
                return Err(DlqError::Full {
                    max_entries: self.max_entries,
                });
            }
        }
        let tmp = self.dir.join(format!("{}{TMP_SUFFIX}", entry.id));
        write_synced(&*self.fs, &tmp, &bytes)?;
        self.fs.rename(&tmp, &path).map_err(io_err(&path))?;
        self.fs.sync_dir(&self.dir).map_err(io_err(&self.dir))?;
        if new {
            *count += 1;
        }
        Ok(())
    }

    /// The entry `id`; [`DlqError::NotFound`] if absent, [`DlqError::Corrupt`] if damaged.
    pub fn get(&self, id: &str) -> Result<DlqEntry, DlqError> {
        let path = self.path_of(id)?;
        let bytes = read_entry_file(&*self.fs, &path, id)?;
        match decode_entry(&bytes) {
            Ok(e) if e.id == id => Ok(e),
            Ok(e) => {
                let reason = format!("holds entry {} under another name", e.id);
                Err(DlqError::Corrupt { path, reason })
            }
            Err(reason) => Err(DlqError::Corrupt { path, reason }),
        }
    }

    /// Deletes the entry `id` durably; [`DlqError::NotFound`] if absent.
    pub fn remove(&self, id: &str) -> Result<(), DlqError> {
        let path = self.path_of(id)?;
        let mut count = self.count.lock();
        match self.fs.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DlqError::NotFound { id: id.to_owned() })
            }
            Err(e) => return Err(io_err(&path)(e)),
        }
        self.fs.sync_dir(&self.dir).map_err(io_err(&self.dir))?;
        *count = count.saturating_sub(1);
        Ok(())
    }

    /// Every entry, sorted by `dead_lettered_at_ms` (then id), and every entry file that cannot
    /// be read (damaged: bad length, CRC or fields; stored under another id's name; or an I/O
    /// error reading it), sorted by id. One damaged file never hides the others. `Err` only when
    /// the directory itself cannot be read. Holds one entry file in memory at a time; the listing
    /// holds one summary (or one [`Unreadable`]) per file, at most `max_entries` of them.
    pub fn list(&self) -> Result<DlqListing, DlqError> {
        let mut listing = DlqListing::default();
        if !self.fs.is_dir(&self.dir) {
            return Ok(listing);
        }
        for name in read_names(&*self.fs, &self.dir)? {
            if !valid_id(&name) {
                continue;
            }
            match self.summary(&name) {
                Ok(s) => listing.entries.push(s),
                Err(DlqError::NotFound { .. }) => {} // removed while listing
                Err(e) => listing.unreadable.push(Unreadable {
                    id: name,
                    problem: e.to_string(),
                }),
            }
        }
        listing
            .entries
            .sort_by(|a, b| (a.dead_lettered_at_ms, &a.id).cmp(&(b.dead_lettered_at_ms, &b.id)));
        listing.unreadable.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(listing)
    }

    /// The summary of the entry file `name` (a valid id).
    fn summary(&self, name: &str) -> Result<DlqSummary, DlqError> {
        let path = self.dir.join(name);
        let bytes = read_entry_file(&*self.fs, &path, name)?;
        let v = parse_entry(&bytes).map_err(|reason| DlqError::Corrupt {
            path: path.clone(),
            reason,
        })?;
        if v.id != name {
            let reason = format!("holds entry {} under another name", v.id);
            return Err(DlqError::Corrupt { path, reason });
        }
        Ok(DlqSummary {
            id: v.id.to_owned(),
            event_lsn: v.event_lsn,
            trigger_id: v.event.trigger_id.to_owned(),
            source: v.event.source.to_owned(),
            destination: v.destination.to_owned(),
            reason: v.reason,
            attempts: v.attempts,
            last_error: v.last_error.to_owned(),
            dead_lettered_at_ms: v.dead_lettered_at_ms,
            received_at_ms: v.event.received_at_ms,
            body_len: v.event.body.len(),
            replay_of: v.event.replay_of.map(str::to_owned),
        })
    }
}

/// What [`DlqStore::list`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqListing {
    /// Readable entries, oldest dead-lettered first.
    pub entries: Vec<DlqSummary>,
    /// Entry files that could not be read, by id.
    pub unreadable: Vec<Unreadable>,
}

/// An entry file [`DlqStore::list`] could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The file's name: a well-formed entry id.
    pub id: String,
    /// What is wrong, naming the file (the [`DlqError`] text: corrupt and why, or the I/O error).
    pub problem: String,
}

fn read_names(fs: &dyn Storage, dir: &Path) -> Result<Vec<String>, DlqError> {
    fs.list(dir).map_err(io_err(dir))
}

fn count_entries(fs: &dyn Storage, dir: &Path) -> Result<usize, DlqError> {
    Ok(read_names(fs, dir)?.iter().filter(|n| valid_id(n)).count())
}

fn read_entry_file(fs: &dyn Storage, path: &Path, id: &str) -> Result<Vec<u8>, DlqError> {
    let not_found = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => DlqError::NotFound { id: id.to_owned() },
        _ => io_err(path)(e),
    };
    let len = fs.len(path).map_err(not_found)?;
    if len > MAX_DLQ_RECORD_BYTES as u64 || len < RECORD_HEADER_BYTES as u64 {
        return Err(DlqError::Corrupt {
            path: path.to_owned(),
            reason: format!("file length {len} outside a valid entry's"),
        });
    }
    fs.read(path).map_err(not_found)
}

fn write_synced(fs: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<(), DlqError> {
    let mut f = fs.open(path, OpenMode::REPLACE).map_err(io_err(path))?;
    f.write_at(0, bytes).map_err(io_err(path))?;
    f.sync_data().map_err(io_err(path))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_entry(n: u64) -> DlqEntry {
        let id =
            crate::ingest::event_id::encode(0x0123_4567_89AB_CDEF_0000_0000_0000_0000 + n as u128);
        DlqEntry {
            event: EventRecord {
                event_id: id.clone(),
                trigger_id: "github-push".to_owned(),
                source: "github".to_owned(),
                received_at_ms: 1_700_000_000_000 + n,
                headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
                body: format!("{{\"n\":{n}}}").into_bytes(),
                replay_of: None,
            },
            id,
            event_lsn: 10 + n,
            destination: "http:https://example.com/hook".to_owned(),
            reason: DlqReason::RetryExhausted,
            attempts: 5,
            last_error: "HTTP 500 Internal Server Error".to_owned(),
            dead_lettered_at_ms: 1_700_000_100_000 - n,
        }
    }

    #[test]
    fn put_get_list_remove_round_trip_and_survive_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dlq");
        let store = DlqStore::open(&dir, 10).unwrap();
        assert!(store.is_empty());
        let mut entries: Vec<_> = (0..3).map(sample_entry).collect();
        entries[1].reason = DlqReason::CircuitOpen;
        entries[2].event.replay_of = Some(sample_entry(9).id);
        entries[2].event.body = vec![0xFF, 0x00, 0x80];
        for e in &entries {
            store.put(e).unwrap();
        }
        assert_eq!(store.len(), 3);
        for e in &entries {
            assert_eq!(&store.get(&e.id).unwrap(), e);
        }
        // Sorted by dead_lettered_at: sample_entry(2) died first.
        let list = store.list().unwrap().entries;
        let ids: Vec<_> = list.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, [&entries[2].id, &entries[1].id, &entries[0].id]);
        assert_eq!(list[1].reason, DlqReason::CircuitOpen);
        assert_eq!(list[0].replay_of, entries[2].event.replay_of);
        assert_eq!(
            (list[2].trigger_id.as_str(), list[2].body_len),
            ("github-push", 7)
        );
        // Replacing an entry does not count twice.
        let mut again = entries[0].clone();
        again.attempts = 9;
        store.put(&again).unwrap();
        assert_eq!(store.len(), 3);
        drop(store);
        let store = DlqStore::open(&dir, 10).unwrap();
        assert_eq!(store.len(), 3);
        assert_eq!(store.get(&again.id).unwrap().attempts, 9);
        store.remove(&entries[1].id).unwrap();
        assert!(matches!(
            store.get(&entries[1].id),
            Err(DlqError::NotFound { .. })
        ));
        assert!(matches!(
            store.remove(&entries[1].id),
            Err(DlqError::NotFound { .. })
        ));
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn full_store_refuses_new_ids_until_one_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(tmp.path(), 2).unwrap();
        store.put(&sample_entry(0)).unwrap();
        store.put(&sample_entry(1)).unwrap();
        assert!(matches!(
            store.put(&sample_entry(2)),
            Err(DlqError::Full { max_entries: 2 })
        ));
        store.put(&sample_entry(1)).unwrap(); // a replacement is not a new entry
                                              // Removed behind the store's back (offline `dlq discard`): noticed before refusing.
        DlqStore::open_existing(tmp.path())
            .unwrap()
            .remove(&sample_entry(0).id)
            .unwrap();
        store.put(&sample_entry(2)).unwrap();
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn ids_are_validated_before_touching_files() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(&tmp.path().join("dlq"), 10).unwrap();
        for bad in [
            "../../etc/passwd",
            "",
            "01HZX3K9V7Q2W8E5R4T6Y1U0a",
            "01HZX3K9V7Q2W8E5R4T6Y1U0AB/",
            "01HZX3K9V7Q2W8E5R4T6Y1U0A.tmp",
        ] {
            assert!(
                matches!(store.get(bad), Err(DlqError::InvalidId { .. })),
                "{bad}"
            );
            assert!(matches!(store.remove(bad), Err(DlqError::InvalidId { .. })));
            let mut e = sample_entry(0);
            e.id = bad.to_owned();
            assert!(matches!(store.put(&e), Err(DlqError::InvalidId { .. })));
        }
        assert!(valid_id("01HZX3K9V7Q2W8E5R4T6Y1U0AB"));
        let mut e = sample_entry(0);
        e.last_error = "x".repeat(MAX_ERROR_BYTES + 1);
        assert!(matches!(store.put(&e), Err(DlqError::Encode(_))));
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 0);
    }

    #[test]
    fn leftover_tmp_files_are_ignored_and_cleaned_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let store = DlqStore::open(dir, 10).unwrap();
        let e = sample_entry(0);
        store.put(&e).unwrap();
        // A crash mid-put: the tmp file of a newer version (half written) is left behind.
        let leftover = dir.join(format!("{}.tmp", e.id));
        std::fs::write(&leftover, &encode_entry(&sample_entry(1)).unwrap()[..30]).unwrap();
        let other = dir.join(format!("{}.tmp", sample_entry(5).id));
        std::fs::write(&other, b"junk").unwrap();
        let offline = DlqStore::open_existing(dir).unwrap();
        assert_eq!(offline.len(), 1);
        assert_eq!(
            offline.list().unwrap().entries.len(),
            1,
            "tmp files are not entries"
        );
        assert!(leftover.exists(), "offline tools never delete");
        let store = DlqStore::open(dir, 10).unwrap();
        assert!(!leftover.exists() && !other.exists());
        assert_eq!(store.get(&e.id).unwrap(), e, "the old version is intact");
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn corrupt_entries_are_reported_with_their_path() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DlqStore::open(tmp.path(), 10).unwrap();
        let e = sample_entry(3);
        store.put(&e).unwrap();
        store.put(&sample_entry(4)).unwrap();
        let path = tmp.path().join(&e.id);
        let pristine = std::fs::read(&path).unwrap();
        let check = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            assert!(
                matches!(store.get(&e.id), Err(DlqError::Corrupt { path: p, .. }) if p == path),
                "{bytes:?}"
            );
            let listing = store.list().unwrap();
            assert_eq!(listing.entries.len(), 1, "the good entry is still listed");
            assert_eq!(listing.unreadable.len(), 1);
            assert_eq!(listing.unreadable[0].id, e.id);
            assert!(listing.unreadable[0].problem.contains(&e.id), "{listing:?}");
        };
        let mut flipped = pristine.clone();
        flipped[40] ^= 1;
        check(&flipped);
        check(&pristine[..pristine.len() - 1]);
        let mut longer = pristine.clone();
        longer.push(0);
        check(&longer);
        check(b"");
        // A valid entry stored under another id's name.
        std::fs::write(&path, encode_entry(&sample_entry(4)).unwrap()).unwrap();
        let listing = store.list().unwrap();
        assert_eq!(listing.unreadable[0].id, e.id);
        assert!(
            listing.unreadable[0].problem.contains("another name"),
            "{listing:?}"
        );
        assert!(matches!(store.get(&e.id), Err(DlqError::Corrupt { .. })));
        // Discarding the damaged entry by id clears the listing.
        store.remove(&e.id).unwrap();
        let listing = store.list().unwrap();
        assert_eq!((listing.entries.len(), listing.unreadable.len()), (1, 0));
    }

    #[test]
    fn decode_never_panics_on_mutations() {
        let bytes = encode_entry(&sample_entry(1)).unwrap();
        let mut rng = crate::wal::format::tests::Rng(0xD1_0D1_0D1);
        for cut in 0..bytes.len() {
            assert!(decode_entry(&bytes[..cut]).is_err());
        }
        for round in 0..3000 {
            let mut b = bytes.clone();
            let i = (rng.next() as usize) % b.len();
            b[i] = rng.next() as u8;
            if round % 2 == 0 && i >= RECORD_HEADER_BYTES {
                // Re-seal the CRC so the field parser, not the CRC, meets the damage.
                let crc = crate::wal::format::record_crc([b[0], b[1], b[2], b[3]], &b[8..]);
                b[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            let _ = decode_entry(&b);
        }
    }
}
