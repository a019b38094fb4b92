//! What a log's writer publishes to every other thread ([`WalShared`]: the durable LSN, health,
//! counters, retention's request) and the shape of one append and its outcome.
#![forbid(unsafe_code)]

// std atomics on purpose: the WAL is not a loom model, except the durable LSN (see crate::sync).
use crate::metrics::histogram::Histogram;
use crate::metrics::{MetricType, PromWriter};
use crate::wal::format::{Lsn, Record};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// The record is in the log at `lsn`, durable per the configured [`Durability`](crate::wal::Durability).
    Durable { lsn: Lsn },
    /// The record is not in the log: the disk failed or is full (see [`WalShared::healthy`]),
    /// or it exceeds the WAL's field bounds (ingest checks those first).
    Unavailable,
}

/// The `reason` label of `sluice_wal_commit_failures_total`, by index of
/// [`WalShared::commit_failures`]: no space (`ENOSPC`, `EDQUOT`), an I/O error (`EIO`), any
/// other error.
pub const COMMIT_FAILURE_REASONS: [&str; 3] = ["enospc", "eio", "other"];

/// State the writer publishes to every other thread.
///
/// All fields are written by the log's one owner only: its core's commit helper, or the core's
/// loop with `commit = "ring"` (`Wal::attach_shared` hands it over).
#[derive(Debug)]
pub struct WalShared {
    /// Highest LSN whose record is durable (per [`Durability`](crate::wal::Durability)); 0 before any. Stored with
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
    /// Failed commits and segment rolls by reason ([`COMMIT_FAILURE_REASONS`]:
    /// `sluice_wal_commit_failures_total{core,reason}`). While the log is unhealthy nothing but
    /// the probe writes (at most every `PROBE_EVERY`), so these count attempts, not requests.
    /// `Relaxed`: counters.
    pub commit_failures: [AtomicU64; 3],
    /// Latency of each `fdatasync` / `msync`: `sluice_wal_sync_seconds` (one histogram shared
    /// by all the logs of a process: [`WalShared::sharing`]).
    pub sync_seconds: std::sync::Arc<Histogram>,
    /// Retention's request: delete the segments wholly below this LSN (0: none). Written by
    /// whoever runs retention ([`WalShared::request_retire`], `fetch_max`), read by the writer,
    /// which advances the checkpoint's first live LSN *before* it deletes anything.
    /// `Relaxed`: the value is the whole message (the segments are files, not memory).
    pub retire_request: AtomicU64,
    /// Every segment below this LSN is done (the pump's retention, `note_done_below`).
    done_below: AtomicU64,
    /// Missing LSN ranges accepted at start-up with `--accept-wal-loss`, and the LSNs in them
    /// (`sluice_wal_loss_accepted_total`, `sluice_wal_lost_lsns_accepted`). Set once when the
    /// writer attaches; `Relaxed`: counters.
    pub loss_accepted_total: AtomicU64,
    pub lost_lsns_accepted: AtomicU64,
    /// Torn tails recovery truncated over the log's life, and the LSNs they held
    /// (`sluice_wal_torn_tail_truncations_total`, `sluice_wal_torn_tail_lsns_total`; from the
    /// log's `quarantine/TORN` record, `recover::torn`). Set once when the writer attaches.
    pub torn_tails_total: AtomicU64,
    pub torn_tail_lsns_total: AtomicU64,
    /// `os` durability: committed bytes of the active segment not yet synced, which the log
    /// keeps a copy of in memory to rewrite after a failed sync ([`Wal::os_unsynced_bytes`](crate::wal::Wal::os_unsynced_bytes);
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
    /// Events retention deleted from the log, per trigger, cumulative (the `RETIRED` file's
    /// counts): published by the writer at attach and after each retirement, read by the pump
    /// owning the log for its ledger's `retired`.
    pub retired: RetiredCounts,
    /// The log's outcome index (`wal::outcomes`): seeded by recovery, fed each committed batch
    /// by the writer, trimmed by retention; lookups read it (`wal::read::events`).
    pub outcomes: crate::wal::outcomes::SharedIndex,
    /// The log's name (`core-K`, `legacy`; empty outside a run): readers find its index by it.
    pub name: String,
}

/// A log's retired counts, per trigger, as its writer last published them. Bound: one entry
/// per trigger id the log ever retired an event of.
///
/// A `Mutex` around the whole list, replaced at each publication (at most once a second:
/// retention), with a generation number a reader checks first without the lock, so a reader
/// with nothing new takes no lock. Loom model: `loom-tests/tests/retired.rs`.
#[derive(Debug)]
pub struct RetiredCounts {
    /// Publications so far; stored with `Release` under the lock after the list is replaced,
    /// loaded with `Acquire` by [`RetiredCounts::newer`] (which then takes the lock anyway:
    /// the generation is a hint, the list and its generation are read together).
    generation: crate::sync::atomic::AtomicU64,
    counts: crate::sync::Mutex<(u64, RetiredList)>,
}

/// Per trigger id, the events retired (cumulative).
pub type RetiredList = std::sync::Arc<Vec<(String, u64)>>;

impl Default for RetiredCounts {
    fn default() -> Self {
        RetiredCounts {
            generation: crate::sync::atomic::AtomicU64::new(0),
            counts: crate::sync::Mutex::new((0, RetiredList::default())),
        }
    }
}

impl RetiredCounts {
    /// Replaces the published counts with `counts`.
    pub fn publish(&self, counts: Vec<(String, u64)>) {
        let mut cell = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let generation = cell.0 + 1;
        *cell = (generation, std::sync::Arc::new(counts));
        self.generation
            .store(generation, crate::sync::atomic::Ordering::Release);
    }

    /// The counts if published after generation `*seen` (which becomes theirs), else `None`.
    pub fn newer(&self, seen: &mut u64) -> Option<RetiredList> {
        if self.generation.load(crate::sync::atomic::Ordering::Acquire) == *seen {
            return None;
        }
        let cell = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if cell.0 == *seen {
            return None;
        }
        *seen = cell.0;
        Some(cell.1.clone())
    }
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
            commit_failures: Default::default(),
            sync_seconds: std::sync::Arc::new(Histogram::new(SYNC_BOUNDS_NANOS)),
            retire_request: AtomicU64::new(0),
            done_below: AtomicU64::new(0),
            loss_accepted_total: AtomicU64::new(0),
            lost_lsns_accepted: AtomicU64::new(0),
            torn_tails_total: AtomicU64::new(0),
            torn_tail_lsns_total: AtomicU64::new(0),
            os_unsynced_bytes: AtomicU64::new(0),
            checkpoint_failures_total: AtomicU64::new(0),
            checkpoint_stale: AtomicBool::new(false),
            retired: RetiredCounts::default(),
            outcomes: Default::default(),
            name: String::new(),
        }
    }

    /// A log's state whose sync latencies go to `histogram` (shared with the other logs).
    pub fn sharing(histogram: std::sync::Arc<Histogram>) -> Self {
        WalShared {
            sync_seconds: histogram,
            ..WalShared::new()
        }
    }

    /// Every segment below `lsn` is done (the pump's retention found it, whatever the
    /// segments' age): a copy of the log elsewhere may drop what lies below (`replication`).
    pub fn note_done_below(&self, lsn: Lsn) {
        self.done_below.fetch_max(lsn, Ordering::Relaxed);
    }

    /// The highest LSN below which every segment is done (0: none known).
    pub fn done_below(&self) -> Lsn {
        self.done_below.load(Ordering::Relaxed)
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

    /// Counts a failed commit, roll or probe by its reason.
    pub fn count_commit_failure(&self, e: &std::io::Error) {
        let i = match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => 0,
            Some(libc::EIO) => 1,
            _ => 2,
        };
        self.commit_failures[i].fetch_add(1, Ordering::Relaxed);
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
