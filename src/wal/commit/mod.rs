//! A core's commit: the helper thread that does the core's blocking file I/O, one batch per
//! wake-up (BENCHMARKS.md row C1: an fdatasync's cost and its context switches are per batch),
//! or, with `wal.commit = "ring"` on io_uring, the core's own ring for its own log.
//!
//! Between batches (and at least every 100 ms) the helper also ticks each log (`Wal::tick`):
//! the checkpoint of what must exist, retention the pump asked for, and while a log is unhealthy
//! a probe write, so `/readyz` recovers without a request.
//!
//! This room is the commit's machinery: the thread, the rings, the wake and the hand-back
//! ([`Committer`] on the loop's side, `helper.rs` on the helper's). What a batch holds, its
//! bound and the per-batch commit are `wal::group`'s. What the commit needs from the rooms
//! above the WAL comes in through [`Parts`], which the runtime wires (`sched::commit`): the
//! store of the batch's dead letters (dispatch's DLQ, through `wal::group::DeadLetters`), the
//! helper's replication of each batch ([`Mirror`]), the loop's queue of batches that wait before
//! they settle ([`Hold`]), and the loop's io_uring ring ([`FileRing`]). So the WAL names no
//! dispatch, replication or backend type, and the event's way from its staging to the disk
//! stays inside `wal` (DESIGN.md, "An accepted event's way").
//!
//! The core's loop collects what must reach the disk during a loop turn — ingest events, the
//! pump's `Done`/`Retry` records, dead letters — into the *next* batch ([`Committer::staging`]).
//! At the end of the turn, if no batch is with the helper, the next batch is handed over
//! ([`Committer::kick`]: one ring push and one unpark). The helper commits it
//! (`wal::group::process`: one write and one `fdatasync` per log the batch touches, then the
//! dead letters, every item's result filled in), hands the batch back and wakes the loop once
//! (the `wake` it was given: the loop's poll waker). The loop takes it back
//! ([`Committer::take_done`]) and gives it to ingest (the 202s) and the pump.
//!
//! With `[replication]` the helper also frames each committed batch for the mirror thread
//! ([`Mirror`]), and the loop holds a batch back from the helper until JetStream acknowledges it
//! before [`Committer::take_done`] gives it out ([`Hold`]; `sched::replicated`: the bound, the
//! early `503`s).
//!
//! So a request crosses no thread: it is parsed, admitted, staged and answered on its core; the
//! helper only sees whole batches. While a batch is with the helper the next one fills, which is
//! what makes the group commit grow with the load. How the loop waits meanwhile depends on the
//! backend (measured side by side: benches/LOG.md, "Overlapping the commit"):
//! - **io_uring**: it goes on reading, parsing and admitting, so disk and CPU overlap (parking
//!   held the batch smaller);
//! - **mio**: while a batch carrying ingest records is with the helper, it parks on the helper
//!   rather than on the network ([`Committer::wait_done`], at most [`COMMIT_WAIT`];
//!   `sync::handback` says why and how the helper then unparks it instead of waking the poll):
//!   the same throughput as reading on, with fewer switches beyond four per commit.
//!
//! **On the ring** (`wal.commit = "ring"`, io_uring, `fsync`, `pwrite`): the core's own log
//! (slot 0, which takes every ingest record) stays with the loop. [`Committer::kick`] stages its
//! records (`wal::start_batch`; a segment roll, a checkpoint, a scrub or the zeros written ahead
//! run here, blocking) and submits the write linked to an `fdatasync` on the core's ring with
//! the turn's sends; the completion ([`Committer::on_ring_done`], `wal::finish_batch`) settles
//! the batch, and its 202s go out at the end of that turn. The helper keeps the adopted logs and
//! the dead letters. Not the default: measured here, the io-wq worker that runs the sync costs
//! more switches and more latency than the helper (BENCHMARKS.md row E9).
//!
//! Bounds: at most one batch with the helper, one on the ring and one filling. The filling
//! batch holds at most `max_batch` ingest records or [`crate::wal::MAX_BATCH_BYTES`] of them
//! (`wal::group::Staging::has_room`; a refused offer waits for room, then `503 wal_busy`);
//! the pump's records are bounded by the pump (`MAX_RECORDS_IN_FLIGHT` per log) and dead letters
//! by `max_outstanding`. The two rings between loop and helper hold at most one batch each
//! (capacity 2). Batches held back ([`Hold`]) are bounded by the hold ([`Hold::is_full`]: no
//! batch goes to the helper past it).
#![forbid(unsafe_code)]

mod committer;
mod helper;
mod parts;

// This file only declares and re-exports (the files import one another, never this one).
pub use committer::{Committer, COMMIT_WAIT};
pub use parts::{AdoptedOf, BatchOf, FileRing, Hold, Mirror, Parts, StagingOf, Wiring};
