//! The write-ahead log: the durable queue of accepted events.
//!
//! Each core owns one log (`DATA_DIR/wal/core-K/`, see `sched::logs`); its commit helper
//! (`sched::commit`) appends a loop turn's records to fixed-size, preallocated segment files
//! with *group commit* ([`commit_batch`]: one `fdatasync` per batch, however many records the
//! batch holds) and publishes the log's durable LSN. [`open`] recovers the log at startup; [`WalReader`] iterates it (offline,
//! through read-only maps); [`WalTail`] follows it while the writer appends (`pread` up to the
//! durable LSN); [`recover_dispatch`] rebuilds the pump's pending set; [`tools`] holds the
//! offline `sluice wal verify|inspect` implementations.
//!
//! # API used by the rest of the crate (sched, main)
//!
//! ```ignore
//! pub type Lsn = u64;
//! pub struct EventRecord { pub event_id: String, pub trigger_id: String, pub source: String,
//!                          pub received_at_ms: u64, pub headers: Vec<(String, Vec<u8>)>, pub body: Vec<u8>,
//!                          pub replay_of: Option<String> }
//! pub enum Record { Event(EventRecord), Done(DoneRecord), Retry(RetryRecord) }
//! pub struct DoneRecord { pub entries: Vec<DoneEntry> }          // <= MAX_DONE_ENTRIES (4096)
//! pub struct DoneEntry { pub event_lsn: Lsn, pub status: DoneStatus, pub attempts: u32 }
//! pub enum DoneStatus { Delivered = 1, DeadLettered = 2, Skipped = 3, NoHandler = 4,
//!     SkippedRateLimited = 5, SkippedDebounced = 6, SkippedSingletonActive = 7 }
//! pub struct RetryRecord { pub event_lsn: Lsn, pub next_attempt: u32, pub due_at_ms: u64,
//!                          pub last_error: String /* <= MAX_ERROR_BYTES (1024) */ }
//! pub enum Durability { Fsync /* default */, Os }        // serde and FromStr: "fsync" | "os"
//! pub enum WritePath { Pwrite /* default */, Mmap }      // serde and FromStr: "pwrite" | "mmap"
//! pub enum CommitPath { Helper /* default */, Ring }     // FromStr: "helper" | "ring"
//! pub struct WalConfig { pub dir: PathBuf /* DATA_DIR/wal */, pub segment_bytes: u64, pub durability: Durability,
//!                        pub write_path: WritePath, pub max_batch: usize,
//!                        pub accept_loss: bool }                              // WalConfig::new(dir) = defaults
//! pub struct AppendRequest { pub log: usize, pub ticket: u64, pub record: Record }
//! pub enum AppendOutcome { Durable { lsn: Lsn }, Unavailable }
//! pub struct WalShared { pub durable_lsn: AtomicU64, pub healthy: AtomicBool, pub appends_total: AtomicU64,
//!                        pub sync_seconds: metrics::histogram::Histogram }
//! impl WalShared { fn new() -> Self; fn durable_lsn(&self) -> Lsn; fn is_healthy(&self) -> bool;
//!                  fn render_prometheus(&self, out: &mut String) }
//! pub fn open(cfg: &WalConfig) -> Result<(Wal, RecoveryReport), WalError>;
//! pub struct RecoveryReport { pub segments: usize, pub records: u64, pub last_lsn: Lsn,
//!                             pub truncated_tail: Option<(PathBuf, u64)>, pub lost: Vec<LostRange> }
//! pub fn commit_batch(wal: &mut Wal, shared: &WalShared, records: impl IntoIterator<Item = &Record>,
//!                     outcomes: &mut Vec<AppendOutcome>);   // one group commit, one outcome per record
//! pub enum WalError { Io { path, source }, Corrupt { segment: PathBuf, offset: u64, reason: String },
//!                     InvalidConfig { reason }, Encode(EncodeError), Locked { path },
//!                     Lost { dir, ranges: Vec<LostRange> }, CheckpointDamaged(checkpoint::Damaged) }
//! impl Wal { fn tick(&mut self, now_ns); fn checkpoint_if_due(&mut self, now_ns) -> io::Result<bool>;
//!            fn probe(&mut self) -> io::Result<()>; fn retire_below(&mut self, Lsn) -> io::Result<usize> }
//! impl WalShared { fn request_retire(&self, Lsn) }   // retention's request to the writer
//! pub struct WalReader;  // open(dir) / open_from(dir, lsn); Iterator<Item = Result<RawRecord, WalError>>;
//!                        // skipping() goes on past damage and missing segments, skipped() names them;
//!                        // next_event() -> Option<Result<(Lsn, EventRecord), WalError>>
//! impl Wal { fn append(&mut self, &[Record]) -> Result<Lsn, WalError>;     // offline / tests
//!            fn append_events(&mut self, &[EventRecord]) -> Result<Lsn, WalError>; fn sync(..) }
//! pub struct WalTail;    // open(wal_dir, from_lsn); next(durable_lsn) -> Result<Option<(Lsn, Record)>, WalError>
//! pub fn recover_dispatch(wal_dir: &Path) -> Result<DispatchRecovery, WalError>;
//! pub struct DispatchRecovery { pub pending: BTreeMap<Lsn, PendingMeta>, pub done_cursor: Lsn, pub next_lsn: Lsn }
//! pub struct PendingMeta { pub bytes: u64, pub received_at_ms: u64, pub trigger_id: String,
//!                          pub next_attempt: u32, pub due_at_ms: u64 }
//! pub fn encode_event(&EventRecord) -> Result<Vec<u8>, EncodeError>;   // kind 1, or 5 with replay_of
//! pub fn decode_event(&[u8]) -> Result<EventRecord, DecodeError>;      // kind 1
//! pub fn encode_payload_into(&Record, &mut Vec<u8>) -> Result<(), EncodeError>;
//! pub fn decode_payload(RecordKind, &[u8]) -> Result<Record, DecodeError>;
//! pub mod tools { pub fn verify(data_dir: &Path) -> Result<VerifyReport, WalError>;
//!                 pub fn inspect_json(data_dir: &Path, out: &mut dyn Write) -> Result<(), WalError>; }
//! ```
//!
//! # Files
//!
//! `DATA_DIR/wal/` ([`WalConfig::dir`]) holds segments named by the LSN of their first record,
//! zero-padded to 20 digits so lexical order is numeric order: `00000000000000000001.seg`.
//! A segment has no header. Each is preallocated to [`WalConfig::segment_bytes`] (default
//! 64 MiB) with `fallocate` (falling back to `set_len`), so the unused tail reads as zeros.
//! `segment_bytes` must be at least [`MAX_RECORD_BYTES`] (33 825 959 bytes, the largest record
//! the field bounds below allow: a replayed event with every field at its bound) plus a commit
//! marker (42 bytes): 33 826 001 bytes, [`min_segment_bytes_for`], so that every record fits in an
//! empty segment with its marker; [`open`] refuses smaller values. A record never spans segments: when it does not fit in the space left, the
//! writer creates (and, in `Fsync` mode, `fsync`s the directory entry of) the next segment.
//! LSNs start at 1 and are consecutive across segments.
//!
//! Beside the segments: `LOCK` (held with `flock` by the process that has the log open) and
//! `CHECKPOINT`, what must exist (first live LSN, highest synced LSN), spelled out byte by byte
//! in [`checkpoint`]. Other files are ignored. `DATA_DIR/wal/MANIFEST` lists the data dir's logs,
//! so a deleted log or checkpoint refuses the start instead of coming back empty ([`manifest`]).
//!
//! # Record format (all integers little-endian)
//!
//! ```text
//! offset  size  field
//!      0     4  len    u32  total record length in bytes, header included (= 17 + payload).
//!                           0 marks the end of written data (preallocated zeros).
//!      4     4  crc    u32  CRC32C (Castagnoli) over bytes [0,4) (len) then [8,len) (lsn, kind,
//!                           payload); so a corrupted length is caught too.
//!      8     8  lsn    u64  log sequence number, consecutive from the segment name's LSN.
//!     16     1  kind   u8   1 = event, 2 = done, 3 = retry, 5 = replayed event,
//!                           6 = commit marker, 7 = lost range (framing: below).
//!                           4 = DLQ entry is the framing of `DATA_DIR/dlq/` files only
//!                           (`dispatch::dlq`): a kind-4 record in the WAL does not decode
//!                           (`wal verify` reports it as corrupt). Other values are corruption.
//!     17   len-17  payload
//! ```
//!
//! Every commit (one write: a batch, or the part of a batch in one segment) ends with a commit
//! marker (kind 6, 42 bytes) in the same write; its header LSN is the LSN *after* the batch, and it
//! consumes none. `--accept-wal-loss` writes a lost-range record (kind 7, 25 bytes or more) over
//! damaged bytes it gives up. Both payloads are spelled out in [`format::marker`]:
//!
//! ```text
//! kind 6: u64 batch_seq, u64 first_lsn, u32 batch_bytes, u32 batch_crc (CRC32C of the batch's
//!         record bytes, which end where the marker starts), u8 flags (bit 0 ORDERED: `fsync`
//!         mode, nothing after it is written before the batch's sync returned)
//! kind 7: u64 last_lsn (LSNs header.lsn..=last_lsn given up), then zero padding to `len`
//! ```
//!
//! Versions: logs written before markers have none; they read unchanged (a scan checks a
//! marker only where it finds one), and their damage is decided by the earlier rule (below).
//!
//! Event payload (kind 1), fields in order, no padding:
//!
//! ```text
//! u16 n, n bytes   event_id    UTF-8, n <= 256
//! u16 n, n bytes   trigger_id  UTF-8, n <= 256
//! u16 n, n bytes   source      UTF-8, n <= 256
//! u64              received_at Unix milliseconds
//! u16 h            header count, h <= 32; then h times:
//!   u16 n, n bytes   name      UTF-8, n <= 256
//!   u16 n, n bytes   value     n <= 8192
//! u32 n, n bytes   body        n <= 32 MiB
//! (nothing after the body)
//! ```
//!
//! Replayed-event payload (kind 5): an event re-delivered from the dead-letter queue
//! ([`EventRecord::replay_of`] set). Kind 1 stays exactly as it was, so logs written before kind 5
//! existed read unchanged.
//!
//! ```text
//! u16 n, n bytes   replay_of   UTF-8, n <= 256: the DLQ entry id (the original event id)
//! ...              the kind-1 payload above, field for field
//! ```
//!
//! Done payload (kind 2): outcomes of events that are finished and must never be delivered
//! again (the pump's done cursor is the lowest event LSN without one).
//!
//! ```text
//! u16 n            entry count, n <= 4096 (MAX_DONE_ENTRIES; encoders refuse more); n times:
//!   u64              event_lsn  LSN of an event record (kind 1 or 5), below this record's LSN
//!   u8               status     1 delivered, 2 dead_lettered, 3 skipped, 4 no_handler;
//!                               other values are corruption
//!   u32              attempts   delivery attempts made
//! (nothing after the last entry; at most 2 + 4096 * 13 = 53 250 bytes)
//! ```
//!
//! Retry payload (kind 3): a durable retry schedule; the latest one for an event wins.
//!
//! ```text
//! u64              event_lsn     LSN of an event record, below this record's LSN
//! u32              next_attempt  the attempt to make next (the first attempt is 1)
//! u64              due_at        Unix milliseconds
//! u16 n, n bytes   last_error    UTF-8, n <= 1024 (MAX_ERROR_BYTES; the caller truncates)
//! (nothing after last_error)
//! ```
//!
//! Decoding ([`decode_payload`], [`decode_event`], [`format::parse_record`]) bounds-checks every
//! length and never panics; malformed bytes are a [`DecodeError`] / a corruption finding.
//! [`open`] checks framing (length, CRC, kind, LSN); `sluice wal verify`, [`recover_dispatch`],
//! [`WalReader::next_record`] and [`WalTail`] also decode every payload.
//!
//! # Recovery
//!
//! [`open`] scans every segment in order, checking length bounds, CRC, kind, LSN continuity
//! (within a segment and from one segment's last record to the next segment's name) and every
//! commit marker against its batch. A scan of a segment stops at the first zero `len` field;
//! everything after it must be zero. At damage (a bad record, a marker that does not match, an
//! LSN gap, non-zero bytes after the end) one rule decides (`wal::damage`): only an incomplete
//! final batch that was never acknowledged may be dropped.
//!
//! * **Damage to acknowledged data** — in a segment the log rolled past; at or below the
//!   checkpoint's durable LSN; with anything written after its batch (an ORDERED marker of a
//!   later batch, or any byte after its own ORDERED marker: in `fsync` mode a batch is written
//!   only after the previous one's sync returned); or, in the final batch of an ORDERED log, a
//!   changed byte inside sectors that were all written. [`open`] fails with
//!   [`WalError::Corrupt`] naming the segment, offset and the LSN range that cannot be read;
//!   nothing is truncated.
//! * **Torn final batch** — in the final batch of an ORDERED log, a 512-byte sector it covers
//!   reads as zeros, or only a prefix reached the disk (what a power cut leaves). Zeroed from the
//!   offset, `fsync`ed, reported in [`RecoveryReport::truncated_tail`]; startup continues.
//! * Not ORDERED (`os` durability, whose batches reach the disk in any order, or a log written
//!   before markers): the earlier rule — in the last segment, damage above the checkpoint's
//!   durable LSN is a torn tail; at or below it acknowledged data; without a checkpoint, torn
//!   when no CRC-valid record with a plausible LSN follows.
//! * **Missing segment files** — a gap between segment names (a deleted middle segment), or LSNs
//!   the checkpoint promises (`first_live_lsn..=durable_lsn`) that no segment holds (the oldest
//!   deleted, the newest truncated or deleted): [`WalError::Lost`] with the ranges.
//!
//! With [`WalConfig::accept_loss`] (`serve --accept-wal-loss`) each range is logged
//! (`ACCEPTING LOSS`), reported ([`RecoveryReport::lost`]), counted, and recorded in the log: a
//! lost-range record is written over the damaged bytes (up to the next valid record, which is
//! kept, with everything after it), or a small segment holding one replaces a deleted middle
//! segment; a scan passes over them, so the next start does not ask again. Records that end the
//! last segment without a marker (a torn batch whose marker did not land, an older version's
//! records) are closed with one before anything is written after them. After recovery the
//! active segment and the directory are synced (what the scan read may have been in the page
//! cache only) and the checkpoint is written with what exists; a log without a checkpoint
//! (older versions) gets one then.
//!
//! # Write paths and the measured choice
//!
//! Both write paths implement [`segment::SegmentFile`] (`write_at`, `sync`, `allocate`):
//! [`WritePath::Pwrite`] (`pwrite` + `fdatasync`) and [`WritePath::Mmap`] (copy into a
//! `MmapMut` of the preallocated segment + `msync` of the batch's range). The map is advised
//! `MADV_RANDOM` because without it `msync` write-back of a 1 KiB record was measured at
//! 17–978 KiB (read-around / fault-around dirtying neighbouring pages; DESIGN.md "Storage").
//!
//! Measured with `benches/wal_append.rs` (criterion `iter_custom`, 10 samples × 3 s per
//! configuration; 1 KiB records, header included; `Durability::Fsync`, one sync per batch;
//! 64 MiB fallocate'd segments in `target/tmp` on ext4 over a virtio disk, /dev/vda; 2 vCPUs
//! shared with other builds), 2026-11-30. The disk is shared and its flush latency swings, so
//! the two paths were run *interleaved*: 4 rounds, each running every configuration once
//! (`cargo bench --bench wal_append -- '/Pwrite/16$'` etc.), alternating which path goes first;
//! the table gives the median over rounds of criterion's median, records/s:
//!
//! ```text
//! batch     Pwrite       Mmap     Pwrite ahead in
//!     1     16 400     13 900     4 of 4 rounds
//!    16    170 800    140 000     4 of 4 rounds
//!   128    319 500    291 300     3 of 4 rounds
//! ```
//!
//! While other engineers' builds were writing heavily (load ~6), each flush took ~3.3 ms for
//! both paths (a bare `pwrite`+`fdatasync` loop measured the same on fallocate'd, zero-written
//! and sparse files) and throughput collapsed to batch size / 3.3 ms: 300 / 4 800 / 34 600
//! (Pwrite) vs 330 / 4 600 / 32 100 (Mmap) records/s for batches of 1 / 16 / 128. Group commit
//! is what scales; the path is secondary. **`Pwrite` is the default**: faster in 11 of 12
//! interleaved pairs (the mmap path pays a page fault per first-touched page and `msync`'s page
//! walk), I/O errors surface as `write`/`fdatasync` errors rather than `SIGBUS`, and it needs no
//! map of the active segment.
//!
//! # Durability
//!
//! [`Durability::Fsync`] (default): a request completes `Durable` only after the batch holding
//! it was written and synced; its commit marker is ORDERED (on both write paths: the mmap path's
//! next batch is copied only after the previous `msync` returned). [`Durability::Os`]: it
//! completes once the write reached the page cache (survives a process crash, not a power loss);
//! the writer syncs at segment rollover, every `OS_SYNC_EVERY_BYTES` and at shutdown; its marker
//! proves only that a batch was written whole, not that it was synced.
//!
//! # Failure handling
//!
//! A write or sync error fails the batch (chunk) in flight: its requests complete
//! `Unavailable`, nothing in it is reported durable, [`WalShared::healthy`] turns false, and the
//! LSNs are reused by the next batch. Bytes the failed write may have left past the last good
//! offset are zeroed (and synced) before the next write, so recovery can never find a stale,
//! CRC-valid record from a failed batch. The next successful batch turns `healthy` back on, and
//! so does a successful probe ([`Wal::probe`], at most every [`PROBE_EVERY`] from [`Wal::tick`]
//! while unhealthy: the failed roll retried, or the dirty bytes zeroed, or 4 KiB of zeros written
//! at the log end, then synced — no record committed), so health returns without a request.
// `unsafe` is confined to `sys.rs` (maps and `fallocate`), which alone opts back in.
#![deny(unsafe_code)]

mod appender;
pub mod checkpoint;
pub(crate) mod damage;
pub mod event_id;
#[cfg(feature = "failpoints")]
pub mod failpoints;
pub mod format;
pub mod layout;
#[cfg(test)]
mod loss_tests;
pub mod manifest;
mod reader;
pub(crate) mod recovery;
pub mod retention;
pub mod segment;
pub mod state;
pub(crate) mod sys;
pub mod tail;
pub mod tools;
mod writer;

pub use appender::{FileWrapper, Submission, Wal, CHECKPOINT_EVERY, PROBE_EVERY};
pub use checkpoint::{Checkpoint, LostRange};
pub use format::{
    decode_event, decode_payload, encode_event, encode_payload_into, truncate_utf8, DecodeError,
    DoneEntry, DoneRecord, DoneStatus, EncodeError, EventRecord, Record, RecordKind, RetryRecord,
    MAX_BODY_BYTES, MAX_DONE_ENTRIES, MAX_ERROR_BYTES, MAX_RECORD_BYTES,
};
pub use format::{event_cost, max_record_bytes_for, MAX_HEADERS, MAX_HEADER_VALUE_BYTES};
pub use layout::{core_log_dir, log_dirs, LogDir};
pub use recovery::LOCK_FILE;
pub use recovery::{open, open_in, RawRecord, RecoveryReport, WalReader};
pub use state::{recover_dispatch, recover_dispatch_in, DispatchRecovery, PendingMeta};
pub use tail::WalTail;
pub use writer::{commit_batch, finish_batch, start_batch, PendingChunk};

// std atomics on purpose: the WAL runs on its own thread and is not a loom model (see crate::sync).
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::metrics::histogram::Histogram;
use crate::metrics::{MetricType, PromWriter};

/// Log sequence number: 1 for the first record ever written, consecutive after that.
pub type Lsn = u64;

/// Smallest segment size accepted: 1 MiB.
pub const MIN_SEGMENT_BYTES: u64 = 1 << 20;

/// The smallest valid `segment_bytes` when bodies are at most `max_body` bytes: the largest
/// record plus its commit marker (one commit) must fit in an empty segment, and at least
/// [`MIN_SEGMENT_BYTES`].
pub const fn min_segment_bytes_for(max_body: usize) -> u64 {
    let commit = (max_record_bytes_for(max_body) + format::marker::MARKER_RECORD_BYTES) as u64;
    if commit > MIN_SEGMENT_BYTES {
        commit
    } else {
        MIN_SEGMENT_BYTES
    }
}

/// Default segment size: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Default most requests per group commit.
pub const DEFAULT_MAX_BATCH: usize = 1024;
/// A batch also stops growing once its requests' bodies reach this many bytes.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// When a request is reported durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// After the batch is `fdatasync`ed / `msync`ed (default).
    #[default]
    Fsync,
    /// After the write reached the page cache.
    Os,
}

/// How records reach the segment file (see the module docs for the measured choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WritePath {
    /// `pwrite` + `fdatasync` (default).
    #[default]
    Pwrite,
    /// Copy into a `MmapMut` of the segment + `msync`.
    Mmap,
}

/// Who writes and syncs a core's own log (`[wal] commit`; `sched::commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitPath {
    /// The core's commit helper thread: `pwrite` + `fdatasync`, woken once per batch (default).
    #[default]
    Helper,
    /// The core's own io_uring ring: the write linked to an `fdatasync`, submitted with the
    /// turn's sends, the 202s sent on its completion (io_uring, `fsync`, `pwrite` only).
    Ring,
}

/// The names `helper`, `ring`.
impl std::str::FromStr for CommitPath {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "helper" => Ok(CommitPath::Helper),
            "ring" => Ok(CommitPath::Ring),
            other => Err(UnknownVariant {
                expected: "\"helper\" or \"ring\"",
                got: other.to_string(),
            }),
        }
    }
}

/// A name that is not one of an enum's variants (`"sometimes"` for [`Durability`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariant {
    /// The accepted names, e.g. `"fsync" or "os"`.
    pub expected: &'static str,
    pub got: String,
}

impl fmt::Display for UnknownVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "must be {}, got {:?}", self.expected, self.got)
    }
}

impl std::error::Error for UnknownVariant {}

/// The serde names (`fsync`, `os`), for command-line and environment overrides.
impl std::str::FromStr for Durability {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "fsync" => Ok(Durability::Fsync),
            "os" => Ok(Durability::Os),
            other => Err(UnknownVariant {
                expected: "\"fsync\" or \"os\"",
                got: other.to_string(),
            }),
        }
    }
}

/// The serde names (`pwrite`, `mmap`).
impl std::str::FromStr for WritePath {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "pwrite" => Ok(WritePath::Pwrite),
            "mmap" => Ok(WritePath::Mmap),
            other => Err(UnknownVariant {
                expected: "\"pwrite\" or \"mmap\"",
                got: other.to_string(),
            }),
        }
    }
}

/// WAL settings, validated by [`open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// The WAL directory, `DATA_DIR/wal`. Created if absent.
    pub dir: PathBuf,
    /// Size of each segment file. Default: 64 MiB. Range:
    /// `min_segment_bytes_for(max_body_bytes) ..= 2^40`, so that the largest record this log
    /// accepts, with its commit marker, fits in an empty segment.
    pub segment_bytes: u64,
    /// Largest event body this log accepts (larger: the request completes `Unavailable`).
    /// Default and maximum: [`MAX_BODY_BYTES`]. Ingest enforces the same limit first (413).
    pub max_body_bytes: usize,
    /// Default: `Fsync`.
    pub durability: Durability,
    /// Default: `Pwrite`.
    pub write_path: WritePath,
    /// Most requests per group commit. Default: 1024. Range: `1..=65536`.
    pub max_batch: usize,
    /// Open even when the checkpoint says records are missing (`serve --accept-wal-loss`):
    /// the missing ranges are logged, reported in [`RecoveryReport::lost`] and counted; the
    /// checkpoint is then rewritten to what exists. Default: false ([`WalError::Lost`]).
    pub accept_loss: bool,
}

impl WalConfig {
    /// Defaults for everything but the directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        WalConfig {
            dir: dir.into(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_body_bytes: MAX_BODY_BYTES,
            durability: Durability::default(),
            write_path: WritePath::default(),
            max_batch: DEFAULT_MAX_BATCH,
            accept_loss: false,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), WalError> {
        let bad = |reason: String| Err(WalError::InvalidConfig { reason });
        if self.max_body_bytes == 0 || self.max_body_bytes > MAX_BODY_BYTES {
            return bad(format!(
                "wal max_body_bytes {} outside 1..={MAX_BODY_BYTES}",
                self.max_body_bytes
            ));
        }
        let min = min_segment_bytes_for(self.max_body_bytes);
        if self.segment_bytes < min || self.segment_bytes > 1 << 40 {
            return bad(format!(
                "wal segment_bytes {} outside {}..={} (a segment must hold the largest record: \
                 bodies up to {} bytes)",
                self.segment_bytes,
                min,
                1u64 << 40,
                self.max_body_bytes
            ));
        }
        if self.max_batch == 0 || self.max_batch > 65536 {
            return bad(format!(
                "wal max_batch {} outside 1..=65536",
                self.max_batch
            ));
        }
        Ok(())
    }
}

/// One record to append; `ticket` is echoed back in the completion.
#[derive(Debug)]
pub struct AppendRequest {
    /// The log to append to, as the core's slot (0 = the core's own log).
    pub log: usize,
    pub ticket: u64,
    pub record: Record,
}

/// The result of one [`AppendRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The record is in the log at `lsn`, durable per the configured [`Durability`].
    Durable { lsn: Lsn },
    /// The record is not in the log: the disk failed or is full (see [`WalShared::healthy`]),
    /// or it exceeds the WAL's field bounds (ingest checks those first).
    Unavailable,
}

/// State the writer publishes to every other thread.
///
/// All fields are written by the writer thread only.
#[derive(Debug)]
pub struct WalShared {
    /// Highest LSN whose record is durable (per [`Durability`]); 0 before any. Stored with
    /// `Release` after the write/sync that made it durable and before the completions are sent;
    /// pairs with the `Acquire` load in [`WalShared::durable_lsn`] (the pump reads the log up
    /// to it, so the record bytes must be visible once the LSN is).
    ///
    /// The one field of the WAL behind the `crate::sync` shim: the publication is modelled under
    /// loom (`loom-tests/tests/durable.rs`).
    pub durable_lsn: crate::sync::atomic::AtomicU64,
    /// False while the last write or sync failed (`/readyz` reports `wal_unavailable`).
    /// `Relaxed`: a status flag; it publishes no other memory.
    pub healthy: AtomicBool,
    /// Records appended successfully (`Relaxed`: a counter).
    pub appends_total: std::sync::atomic::AtomicU64,
    /// Latency of each `fdatasync` / `msync`: `sluice_wal_sync_seconds` (one histogram shared
    /// by all the logs of a process: [`WalShared::sharing`]).
    pub sync_seconds: std::sync::Arc<Histogram>,
    /// Retention's request: delete the segments wholly below this LSN (0: none). Written by
    /// whoever runs retention ([`WalShared::request_retire`], `fetch_max`), read by the writer,
    /// which advances the checkpoint's first live LSN *before* it deletes anything.
    /// `Relaxed`: the value is the whole message (the segments are files, not memory).
    pub retire_request: AtomicU64,
    /// Missing LSN ranges accepted at start-up with `--accept-wal-loss`, and the LSNs in them
    /// (`sluice_wal_loss_accepted_total`, `sluice_wal_lost_lsns_accepted`). Set once when the
    /// writer attaches; `Relaxed`: counters.
    pub loss_accepted_total: AtomicU64,
    pub lost_lsns_accepted: AtomicU64,
    /// `os` durability: committed bytes of the active segment not yet synced, which the log
    /// keeps a copy of in memory to rewrite after a failed sync ([`Wal::os_unsynced_bytes`];
    /// bounded by `OS_SYNC_EVERY_BYTES`, 4 MiB, plus one batch; always 0 in `fsync` mode).
    /// `sluice_wal_os_unsynced_bytes{log}`. Stored by the writer after every commit, sync and
    /// roll; `Relaxed`: a gauge for display, it publishes no other memory.
    pub os_unsynced_bytes: AtomicU64,
    /// Checkpoint writes that failed (`sluice_wal_checkpoint_failures_total`); each is retried
    /// a second later. `Relaxed`: a counter.
    pub checkpoint_failures_total: AtomicU64,
    /// True while checkpoint writes have failed for `checkpoint::STALE_AFTER` (10 s) without a
    /// success: `/readyz` reports `wal_checkpoint_failing`. Written by the writer; `Relaxed`: a
    /// status flag, it publishes no other memory.
    pub checkpoint_stale: AtomicBool,
}

/// `sluice_wal_sync_seconds` buckets (ns; 0.0001 s .. 1 s).
pub const SYNC_BOUNDS_NANOS: &[u64] = &[
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

impl Default for WalShared {
    fn default() -> Self {
        Self::new()
    }
}

impl WalShared {
    pub fn new() -> Self {
        WalShared {
            durable_lsn: crate::sync::atomic::AtomicU64::new(0),
            healthy: AtomicBool::new(true),
            appends_total: std::sync::atomic::AtomicU64::new(0),
            sync_seconds: std::sync::Arc::new(Histogram::new(SYNC_BOUNDS_NANOS)),
            retire_request: AtomicU64::new(0),
            loss_accepted_total: AtomicU64::new(0),
            lost_lsns_accepted: AtomicU64::new(0),
            os_unsynced_bytes: AtomicU64::new(0),
            checkpoint_failures_total: AtomicU64::new(0),
            checkpoint_stale: AtomicBool::new(false),
        }
    }

    /// A log's state whose sync latencies go to `histogram` (shared with the other logs).
    pub fn sharing(histogram: std::sync::Arc<Histogram>) -> Self {
        WalShared {
            sync_seconds: histogram,
            ..WalShared::new()
        }
    }

    /// Asks the writer to delete the segments wholly below `lsn` (a segment's first LSN; never
    /// the active segment). It checkpoints the new first live LSN, then unlinks them.
    pub fn request_retire(&self, lsn: Lsn) {
        self.retire_request.fetch_max(lsn, Ordering::Relaxed);
    }

    /// The durable LSN (`Acquire`; see the field).
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn.load(Ordering::Acquire)
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Appends the Prometheus text of the WAL metrics (`sluice_wal_sync_seconds`).
    pub fn render_prometheus(&self, out: &mut String) {
        let mut w = PromWriter::appending(std::mem::take(out));
        w.header(
            "sluice_wal_sync_seconds",
            "Duration of each WAL fdatasync (or msync).",
            MetricType::Histogram,
        );
        self.sync_seconds
            .render(&mut w, "sluice_wal_sync_seconds", &[]);
        *out = w.finish();
    }
}

/// Errors of the WAL, sized to the caller's decision.
#[derive(Debug)]
pub enum WalError {
    /// An I/O error on `path`.
    Io { path: PathBuf, source: io::Error },
    /// The log is damaged at `offset` of `segment` (not a torn tail): startup must stop.
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
    /// [`WalConfig`] is out of range.
    InvalidConfig { reason: String },
    /// Another process holds the WAL directory's lock file (`LOCK`): two writers on one log
    /// would interleave LSNs and destroy acknowledged events.
    Locked { path: PathBuf },
    /// A record exceeds the WAL's field bounds.
    Encode(EncodeError),
    /// The checkpoint of log directory `dir` promises LSNs the segments do not hold (segment
    /// files deleted or truncated). Startup stops unless `--accept-wal-loss`.
    Lost {
        dir: PathBuf,
        ranges: Vec<LostRange>,
    },
    /// The checkpoint file exists but no slot of it is valid.
    CheckpointDamaged(checkpoint::Damaged),
    /// The data dir's manifest of logs is damaged, or lists a log or checkpoint that is gone.
    Manifest(manifest::ManifestError),
}

impl WalError {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        WalError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Io { path, source } => {
                write!(f, "WAL I/O error on {}: {source}", path.display())
            }
            WalError::Corrupt {
                segment,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "WAL corrupt: {} at offset {offset}: {reason}",
                    segment.display()
                )
            }
            WalError::InvalidConfig { reason } => write!(f, "invalid WAL config: {reason}"),
            WalError::Locked { path } => write!(
                f,
                "WAL directory is in use by another process (lock {} is held)",
                path.display()
            ),
            WalError::Encode(e) => write!(f, "cannot append record: {e}"),
            WalError::Lost { dir, ranges } => {
                write!(f, "WAL records lost in {}:", dir.display())?;
                for r in ranges {
                    write!(f, " {r};")?;
                }
                write!(
                    f,
                    " start with --accept-wal-loss to run without them (they cannot be recovered)"
                )
            }
            WalError::CheckpointDamaged(d) => write!(
                f,
                "{d}; start with --accept-wal-loss to rebuild it from the segments"
            ),
            WalError::Manifest(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { source, .. } => Some(source),
            WalError::Encode(e) => Some(e),
            WalError::Manifest(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_serde_names_and_name_the_choices_otherwise() {
        assert_eq!("fsync".parse(), Ok(Durability::Fsync));
        assert_eq!("os".parse(), Ok(Durability::Os));
        assert_eq!("pwrite".parse(), Ok(WritePath::Pwrite));
        assert_eq!("mmap".parse(), Ok(WritePath::Mmap));
        let e = "Fsync".parse::<Durability>().unwrap_err();
        assert_eq!(e.to_string(), r#"must be "fsync" or "os", got "Fsync""#);
        let e = "mmap2".parse::<WritePath>().unwrap_err();
        assert_eq!(e.to_string(), r#"must be "pwrite" or "mmap", got "mmap2""#);
    }

    #[test]
    fn sync_histogram_keeps_its_name_and_bucket_bounds() {
        let shared = WalShared::new();
        shared.sync_seconds.observe_nanos(3_000_000);
        let mut text = String::from("before\n");
        shared.render_prometheus(&mut text);
        assert!(
            text.starts_with("before\n# HELP sluice_wal_sync_seconds "),
            "{text}"
        );
        let les: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("sluice_wal_sync_seconds_bucket{le=\""))
            .map(|l| l.split('"').next().unwrap())
            .collect();
        let want = [
            "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
            "0.1", "0.25", "0.5", "1", "+Inf",
        ];
        assert_eq!(les, want);
        assert!(text.contains("sluice_wal_sync_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("sluice_wal_sync_seconds_sum 0.003\n"));
        assert!(text.contains("sluice_wal_sync_seconds_count 1\n"));
    }
}
