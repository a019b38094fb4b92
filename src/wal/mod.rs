//! The write-ahead log: the durable queue of accepted events.
//!
//! Each core owns one log (`DATA_DIR/wal/core-K/`, see `sched::logs`); a loop turn's records
//! are gathered into one batch ([`group`]: the batch, its bound and its per-log commit), which
//! its commit helper thread (`wal::commit`, or the core's own io_uring ring with
//! `commit = "ring"`) appends to fixed-size, preallocated segment files with *group commit*
//! ([`commit_batch`]: one `fdatasync` per batch, however many records the batch holds) and
//! publishes the log's durable LSN. [`open`] recovers the log at startup; [`WalReader`]
//! iterates it (offline, through read-only maps); [`WalTail`] follows it while the log is
//! appended to (`pread` up to the durable LSN); [`recover_dispatch`] rebuilds the pump's pending
//! set; [`tools`] holds the offline `sluice wal verify|inspect` implementations.
//!
//! # API used by the rest of the crate (sched, dispatch, ops, main)
//!
//! Re-exported here from the file named on the right; signatures abridged.
//!
//! ```ignore
//! pub type Lsn = u64;                                                    // format/record.rs
//! pub struct EventRecord { pub event_id: String, pub trigger_id: String, pub source: String,
//!                          pub received_at_ms: u64, pub headers: Vec<(String, Vec<u8>)>, pub body: Vec<u8>,
//!                          pub replay_of: Option<String>, pub body_json: BodyJson }
//! pub enum BodyJson { Undecided /* default */, Json, NotJson }   // decide(body), is_json(body)
//! pub enum Record { Event(EventRecord), Done(DoneRecord), Retry(RetryRecord), Attempts(AttemptsRecord) }
//! pub struct DoneRecord { pub entries: Vec<DoneEntry> }          // <= MAX_DONE_ENTRIES (4096)
//! pub struct DoneEntry { pub event_lsn: Lsn, pub status: DoneStatus, pub attempts: u32 }
//! pub enum DoneStatus { Delivered = 1, DeadLettered = 2, Skipped = 3, NoHandler = 4,
//!     SkippedRateLimited = 5, SkippedDebounced = 6, SkippedSingletonActive = 7 }
//! pub struct RetryRecord { pub event_lsn: Lsn, pub next_attempt: u32, pub due_at_ms: u64,
//!                          pub last_error: String /* <= MAX_ERROR_BYTES (1024) */ }
//! pub struct AttemptsRecord { pub entries: Vec<AttemptEntry> }   // <= MAX_ATTEMPT_ENTRIES (1024)
//! pub struct AttemptEntry { pub event_lsn: Lsn, pub attempt: u32, pub at_ms: u64, pub destination: u32,
//!     pub outcome: AttemptOutcome, pub latency_us: u32, pub retry_after_ms: Option<u32>,
//!     pub response_prefix: Vec<u8> /* <= MAX_RESPONSE_PREFIX_BYTES (512) */ }
//! pub fn encode_event(&EventRecord) -> Result<Vec<u8>, EncodeError>;   // kind 1, 5, 9 or 10
//! pub fn decode_event(&[u8]) -> Result<EventRecord, DecodeError>;      // kind 1
//! pub fn encode_payload_into(&Record, &mut Vec<u8>) -> Result<(), EncodeError>;
//! pub fn decode_payload(RecordKind, &[u8]) -> Result<Record, DecodeError>;   // format/mod.rs, format/decode.rs
//!
//! pub enum Durability { Fsync /* default */, Os }        // serde and FromStr: "fsync" | "os"
//! pub enum WritePath { Pwrite /* default */, Mmap }      // serde and FromStr: "pwrite" | "mmap" (storage)
//! pub enum CommitPath { Helper /* default */, Ring }     // FromStr: "helper" | "ring"
//! pub struct WalConfig { pub dir: PathBuf, pub segment_bytes: u64, pub max_body_bytes: usize,
//!                        pub durability: Durability, pub write_path: WritePath, pub max_batch: usize,
//!                        pub accept_loss: bool }         // WalConfig::new(dir) = defaults; config.rs
//! pub const fn min_segment_bytes_for(max_body: usize) -> u64;
//!
//! pub fn open(cfg: &WalConfig) -> Result<(Wal, RecoveryReport), WalError>;   // recovery.rs;
//!                                                        // open_in(storage, cfg) on any storage
//! pub struct RecoveryReport { pub segments: usize, pub records: u64, pub last_lsn: Lsn,
//!                             pub truncated_tail: Option<(PathBuf, u64)>, pub lost: Vec<LostRange>,
//!                             pub skipped: Option<LostRange> /* above the high-water reservation */ }
//! impl Wal {                                             // appender.rs, appender_checkpoint.rs
//!     fn attach_shared(&mut self, Arc<WalShared>); fn set_file_wrapper(&mut self, FileWrapper);
//!     fn next_lsn(&self) -> Lsn; fn last_lsn(&self) -> Lsn; fn os_unsynced_bytes(&self) -> usize;
//!     fn tick(&mut self, now_ns); fn probe(&mut self) -> io::Result<()>;
//!     fn checkpoint_if_due(&mut self, now_ns) -> io::Result<bool>;
//!     fn retire_below(&mut self, Lsn) -> io::Result<usize>;   // counts into RETIRED first
//!     fn append(&mut self, &[Record]) -> Result<Lsn, WalError>;   // offline / tests, as
//!     fn append_events(&mut self, &[EventRecord]) -> Result<Lsn, WalError>; fn sync(&mut self) }
//!
//! pub mod group { pub enum Owner { Ingest, Pump, Replay }   // who staged an item, who settles it
//!     pub enum Item<D> { Append { owner, log, ticket, record }, DeadLetter { owner, ticket, entry: D },
//!                        Release { owner, ticket, id } }
//!     pub enum Outcome<E> { Appended(AppendOutcome), DeadLettered(Result<(), E>), Released(..) }
//!     pub struct Batch<D, E> { pub items, pub outcomes, .. }   // a loop turn's writes, in order
//!     pub struct Staging<D, E>;  // the filling batch: new(max_batch), has_room, port(owner),
//!                                // take_batch(keep_own), take_own, put_back
//!     pub struct Port<'a, D, E>; // one owner's way in: event, record, dead_letter, release
//!     pub struct Log { pub wal: Wal, pub shared: Arc<WalShared> }
//!     pub trait DeadLetters { fn put_dead_letters(..) }   // dispatch's DLQ implements it
//!     pub fn process(logs: &mut [Log], first_slot, &mut Batch, &impl DeadLetters, scratch) }
//! pub mod commit { pub trait Parts { type Entry; type Error; type Dead: DeadLetters; type Mirror; type Hold;
//!                                     fn helper_started(); }   // what the runtime wires in (sched::commit)
//!     pub trait Mirror<D, E> { fn committed(..); fn between(..); fn adopt(..) }   // on the helper
//!     pub trait Hold<D, E> { fn push(batch); fn pop() -> Option<Batch>; fn is_full(); .. } // on the loop
//!     pub trait FileRing { fn file_busy(); fn write_file(fd, offset, buf, sync) }   // the loop's ring
//!     pub struct Committer<P: Parts>;   // start(core, logs, Wiring, max_batch, on_ring), staging(),
//!         // kick(ring), take_done(), on_ring_done(results), wait_for_commit(t), adopt(log, link), close()
//!     pub const COMMIT_WAIT: Duration; }   // the loop's longest park on its helper (mio)
//! pub fn commit_batch(wal: &mut Wal, shared: &WalShared, records: impl IntoIterator<Item = &Record>,
//!                     outcomes: &mut Vec<AppendOutcome>);   // one group commit, one outcome per record
//! pub fn start_batch(..) -> Option<(Submission, PendingChunk)>;   // the same commit, its last write
//! pub fn finish_batch(.., PendingChunk, (buf, written, synced));  // and sync on the caller's ring; writer.rs
//! pub struct AppendRequest { pub log: usize, pub ticket: u64, pub record: Record }     // shared.rs
//! pub enum AppendOutcome { Durable { lsn: Lsn }, Unavailable }
//! pub struct WalShared { pub durable_lsn, pub healthy, pub appends_total, pub sync_seconds: Arc<Histogram>,
//!                        pub retire_request, pub loss_accepted_total, pub lost_lsns_accepted,
//!                        pub os_unsynced_bytes, pub checkpoint_failures_total, pub checkpoint_stale,
//!                        pub retired: RetiredCounts }   // publish(Vec<(trigger, n)>), newer(&mut gen)
//! impl WalShared { fn new() -> Self; fn sharing(Arc<Histogram>) -> Self; fn durable_lsn(&self) -> Lsn;
//!                  fn is_healthy(&self) -> bool; fn request_retire(&self, Lsn);  // retention's request
//!                  fn render_prometheus(&self, out: &mut String) }
//! pub enum WalError { Io { path, source }, Corrupt { segment, offset, reason }, InvalidConfig { reason },
//!                     Locked { path }, Encode(EncodeError), Lost { dir, ranges: Vec<LostRange> },
//!                     CheckpointDamaged(checkpoint::Damaged), Manifest(manifest::ManifestError),
//!                     Retired { path, reason }, HighWaterDamaged(checkpoint::Damaged),
//!                     CheckpointLost { checkpoint, high_water, copied_at_ms } }  // error.rs
//! pub mod high_water { pub const STEP: Lsn = 65_536; pub fn path_of(dir) -> Option<PathBuf>;
//!                      pub fn read_in(fs, path) -> Result<Option<Result<HighWater, Damaged>>, WalError> }
//! pub mod retired { pub struct Retired { pub covered: Lsn, pub tallies, pub owed };   // the RETIRED file
//!                   pub fn load(fs, dir) -> Result<Retired, WalError>; .. }
//!
//! pub struct WalReader;  // reader.rs: open(dir) / open_from(dir, lsn) / open_in(storage, ..);
//!                        // Iterator<Item = Result<RawRecord, WalError>>; next_event(), next_record();
//!                        // skipping() goes on past damage and missing segments, skipped() names them
//! pub struct WalTail;    // tail.rs: open(wal_dir, from_lsn); next(durable_lsn) -> Result<Option<(Lsn, Record)>, WalError>
//! pub fn recover_dispatch(wal_dir: &Path) -> Result<DispatchRecovery, WalError>;   // state.rs
//! pub struct DispatchRecovery { pub pending: BTreeMap<Lsn, PendingMeta>, pub done_cursor: Lsn, pub next_lsn: Lsn,
//!                              pub ledger: BTreeMap<String, TriggerTally> }   // over the log's life, RETIRED included:
//!                                                    // TriggerTally { accepted, done: [u64; 8], retired }
//! pub struct PendingMeta { pub bytes: u64, pub received_at_ms: u64, pub trigger_id: String,
//!                          pub next_attempt: u32, pub due_at_ms: u64, pub replay_of: Option<String> }
//! pub fn core_log_dir(wal_dir: &Path, core: usize) -> PathBuf;   // layout.rs: DATA_DIR/wal/core-K
//! pub fn log_dirs(wal_dir: &Path) -> Result<Vec<LogDir>, WalError>;
//! pub mod manifest { pub fn check(wal_dir: &Path) -> Result<CheckReport, ManifestError>; .. }
//! pub mod events { pub fn show(data_dir, id) -> Result<EventReport, ShowError>;   // issue 27: one event's
//!                  pub fn show_bounded(..); pub fn list(data_dir, &ListFilter);      // attempts and fate,
//!                  pub fn ledger(data_dir) -> Result<Ledger, WalError>; .. }          // from the files
//! pub mod tools { pub fn verify_all(data_dir: &Path) -> Result<Vec<VerifyReport>, WalError>;
//!                 pub fn verify_log(dir: &Path) -> Result<VerifyReport, WalError>;
//!                 pub fn inspect_json(data_dir: &Path, out: &mut dyn Write) -> Result<(), WalError>;
//!                 /* *_with variants take a progress reporter */ }
//! ```
//!
//! # Files
//!
//! `DATA_DIR/wal/` ([`WalConfig::dir`]) holds segments named by the LSN of their first record,
//! zero-padded to 20 digits so lexical order is numeric order: `00000000000000000001.seg`.
//! A segment has no header. Each is preallocated to [`WalConfig::segment_bytes`] (default
//! 64 MiB) with `fallocate` (falling back to `set_len`), so the unused tail reads as zeros.
//! `segment_bytes` must be at least [`MAX_RECORD_BYTES`] (33 825 960 bytes, the largest record
//! the field bounds below allow: a replayed event with its flags byte and every field at its
//! bound, kind 10) plus a commit marker (42 bytes): 33 826 002 bytes, [`min_segment_bytes_for`], so that every record fits in an
//! empty segment with its marker; [`open`] refuses smaller values. A record never spans segments: when it does not fit in the space left, the
//! writer creates (and, in `Fsync` mode, `fsync`s the directory entry of) the next segment.
//! LSNs start at 1 and are consecutive across segments.
//!
//! Beside the segments: `LOCK` (held with `flock` by the process that has the log open),
//! `CHECKPOINT`, what must exist (first live LSN, highest synced LSN), spelled out byte by byte
//! in [`checkpoint`], and, once retention deleted segments, `RETIRED`: per trigger, the events
//! it deleted and their outcomes, and the LSN below which every event is counted there (written
//! before each deletion; versioned, CRC'd, spelled out byte by byte in [`retire::retired`]). Other files are ignored. `DATA_DIR/wal/MANIFEST` lists the data dir's logs,
//! so a deleted log or checkpoint refuses the start instead of coming back empty ([`manifest`]).
//! Outside each log's directory, its high-water record (`wal/core-K.hw`, [`high_water`]): the
//! highest LSN it may hand out, reserved before any record above it is written, and a copy of
//! its checkpoint, so a lost checkpoint or log is checked against the copy and a log that gave
//! anything up continues above every LSN it may have handed out.
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
//!                           6 = commit marker, 7 = lost range (framing: below),
//!                           8 = attempts (issue 27; layout in `format/attempt.rs`),
//!                           9 = event with flags, 10 = replayed event with flags (issue 43).
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
//! Flagged event payloads (kinds 9 and 10, issue 43): whether the body is one JSON value
//! ([`BodyJson`]), decided once at ingest so that a batch copies the body without parsing it.
//! One flags byte, then exactly the kind-1 (for 9) or kind-5 (for 10) payload above:
//!
//! ```text
//! u8               flags       bits 0-1: 0 not decided, 1 one JSON value, 2 not one JSON
//!                              value; 3, and any of bits 2-7 set, are corruption
//! ...              the kind-1 payload (kind 9), or the kind-5 payload (kind 10)
//! ```
//!
//! Writers use kinds 9 and 10 only for a decided event; one nobody decided for is kind 1 or 5,
//! byte for byte as before, so a log written before kinds 9 and 10 existed reads unchanged (its
//! events are "not decided", and a batch parses their bodies as it always did), and an older
//! binary refuses kinds 9 and 10 as an unknown kind rather than misread them. A kind-9 or -10
//! record with flags 0 is well formed and reads as not decided.
//!
//! Done payload (kind 2): outcomes of events that are finished and must never be delivered
//! again (the pump's done cursor is the lowest event LSN without one).
//!
//! ```text
//! u16 n            entry count, n <= 4096 (MAX_DONE_ENTRIES; encoders refuse more); n times:
//!   u64              event_lsn  LSN of an event record (kind 1, 5, 9 or 10), below this
//!                               record's LSN
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
//! Attempts payload (kind 8, issue 27): each delivery attempt of an event (time, destination,
//! HTTP status or error class, latency, `Retry-After`, the first ≤ 512 bytes of the response
//! body), and each skip by a flow gate or dead-lettering with its reason, written by the pump
//! in the same group commit as its `Done` and `Retry` records. Byte layout in
//! `format/attempt.rs`; at most 2 + 1024 × (37 + 512) bytes. Recovery checks them (the event
//! LSN below the record's own) and otherwise passes over them; logs written before kind 8 read
//! unchanged.
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
//! (older versions) gets one then. After an accepted loss the log then skips to above its
//! high-water reservation with one more lost-range record ([`high_water`]).
//!
//! # Write paths and the measured choice
//!
//! Both write paths implement [`segment::SegmentFile`] (`write_at`, `sync`, `allocate`):
//! [`WritePath::Pwrite`] (`pwrite` + `fdatasync`) and [`WritePath::Mmap`] (copy into a
//! `MmapMut` of the preallocated segment + `msync` of the batch's range). The map is advised
//! `MADV_RANDOM` because without it `msync` write-back of a 1 KiB record was measured at
//! 17–978 KiB (read-around / fault-around dirtying neighbouring pages; DESIGN.md "Storage").
//!
//! Measured with `benches/wal_append.rs` (`cargo bench --bench wal_append`), the two paths run
//! interleaved because the disk's flush latency swings: BENCHMARKS.md row M5 (the runs and the
//! loaded-disk figures: benches/LOG.md, "WAL append"). Under a loaded disk each flush costs the
//! same on both paths and throughput falls to batch size ÷ flush time: group commit is what
//! scales; the path is secondary. **`Pwrite` is the default**: faster in nearly every
//! interleaved pair (the mmap path pays a page fault per first-touched page and `msync`'s page
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
//! CRC-valid record from a failed batch. While `healthy` is false no batch is written (each
//! record of one completes `Unavailable` at once): the only retry is the probe ([`Wal::probe`],
//! at most every [`PROBE_EVERY`] from [`Wal::tick`]: the failed roll retried, or the dirty bytes
//! zeroed, or 4 KiB of zeros written at the log end, then synced — no record committed), whose
//! success turns `healthy` back on. So a full or failing disk costs one probe a second, not a
//! roll or a commit per batch (`sluice_wal_commit_failures_total{core,reason}` counts them).
// The WAL has no `unsafe`: maps, `fallocate` and `flock` are storage's (`storage/sys.rs`).
#![forbid(unsafe_code)]

pub(crate) mod append;
pub mod checkpoint;
pub mod commit;
mod config;
mod error;
pub mod event_id;
#[cfg(feature = "failpoints")]
pub mod failpoints;
pub mod format;
pub mod high_water;
pub mod key;
pub mod layout;
#[cfg(test)]
mod loss_tests;
pub mod manifest;
pub mod outcomes;
pub mod read;
pub(crate) mod recover;
pub mod retire;
pub mod segment;
pub mod tools;

// This file only declares and re-exports: the files above import one another directly (or
// through these re-exports) and never a definition of this file, so no import runs back here.

/// The group commit as data (a log's batch, its bound, its per-log commit): [`append::group`].
pub use append::group;
pub use append::shared::{
    AppendOutcome, AppendRequest, RetiredCounts, RetiredList, WalShared, COMMIT_FAILURE_REASONS,
    SYNC_BOUNDS_NANOS,
};
pub use append::writer::{commit_batch, finish_batch, start_batch, PendingChunk};
pub use append::{FileWrapper, Submission, Wal, CHECKPOINT_EVERY, PROBE_EVERY};
pub use checkpoint::Checkpoint;
pub use config::{
    min_segment_bytes_for, CommitPath, Durability, UnknownVariant, WalConfig, DEFAULT_MAX_BATCH,
    DEFAULT_SEGMENT_BYTES, MAX_BATCH_BYTES, MIN_SEGMENT_BYTES,
};
pub use error::{LostRange, WalError};
/// Finished event records kept per thread for reuse by ingest: [`format::shelf`].
pub use format::shelf;
pub use format::{
    decode_event, decode_payload, encode_event, encode_payload_into, truncate_utf8, BodyJson,
    DecodeError, DoneEntry, DoneRecord, DoneStatus, EncodeError, EventRecord, Lsn, Record,
    RecordKind, RetryRecord, MAX_BODY_BYTES, MAX_DONE_ENTRIES, MAX_ERROR_BYTES, MAX_RECORD_BYTES,
};
pub use format::{event_cost, max_record_bytes_for, MAX_HEADERS, MAX_HEADER_VALUE_BYTES};
pub use format::{
    AttemptEntry, AttemptOutcome, AttemptsRecord, MAX_ATTEMPT_ENTRIES, MAX_RESPONSE_PREFIX_BYTES,
};
pub use layout::{core_log_dir, log_dirs, LogDir};
pub use read::reader::{RawRecord, WalReader};
pub use read::tail::WalTail;
/// Dispatch state after a restart: [`recover::state`].
pub use recover::state;
pub use recover::state::{recover_dispatch, recover_dispatch_in, DispatchRecovery, PendingMeta};
pub use recover::torn::TornTail;
pub use recover::LOCK_FILE;
pub use recover::{begin_at, open, open_in, RecoveryReport};
pub use retire::retired::TriggerTally;
pub use segment::WritePath;

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
