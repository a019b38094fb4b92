//! The pump: reads committed events from the WAL, admits at most `max_outstanding` of them to
//! their destinations' owner cores, collects outcomes, and makes them durable.
//!
//! Cursor semantics (DESIGN.md, "Where sluice goes further"): the durable cursor means *done*,
//! the lowest LSN without a recorded outcome. Nothing is ever acknowledged at admission: an
//! event becomes done only when its `Done` record (delivered, dead-lettered, skipped by a
//! flow-control gate, or "no handler") is durable. After a crash, recovery rebuilds the pending
//! set from the log (events minus `Done` entries, with the latest `Retry` schedule applied) and
//! the pump delivers those again: at least once, with the same event id. Events waiting in a
//! flow-control gate are outstanding jobs held by their core, so they count against
//! `max_outstanding` and, after a restart, are pending and evaluated by the gates again.
//!
//! Backpressure: when `max_outstanding` jobs are out, the pump stops reading the WAL; its read
//! position stays, committed events accumulate, the [`Backlog`](crate::sched::backlog::Backlog)
//! fills, and ingest starts refusing with `queue_full`. Bounds: jobs out ≤ `max_outstanding`;
//! outcome records waiting to be written ≤ one `Done` record (≤ 4096 entries) per turn plus one
//! `Retry` record per outcome received; DLQ entries waiting for room (DLQ full) count as
//! outstanding, so a full DLQ also stops the pump.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};
use mio::Waker;

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore};
use crate::dispatch::job::{Job, JobOutcome};
use crate::ring;
use crate::sched::state::{Phase, Shared};
use crate::sched::worker::Completion;
use crate::sync::clock::unix_millis;
use crate::wal::{
    AppendOutcome, AppendRequest, CompletionSink, DispatchRecovery, DoneEntry, DoneRecord,
    DoneStatus, Lsn, Record, RetryRecord, WalTail,
};

/// Most entries in one `Done` record.
pub const MAX_DONE_ENTRIES: usize = crate::wal::MAX_DONE_ENTRIES;
/// How long the pump sleeps when there is nothing to do (it is also woken by every outcome and
/// every durable ingest batch).
const IDLE_PARK: Duration = Duration::from_millis(5);
/// How often a DLQ write refused for lack of room is retried.
const DLQ_RETRY_EVERY_MS: u64 = 1000;

/// The writer's handle on the pump: completions of the pump's own records.
#[derive(Debug)]
pub struct PumpSink {
    pub tx: ring::Sender<Completion>,
    pub unparker: Unparker,
}

impl CompletionSink for PumpSink {
    fn complete(&mut self, ticket: u64, outcome: AppendOutcome) {
        // Cannot be full: the pump never has more records in flight than this ring's capacity.
        let _ = self.tx.try_push(Completion { ticket, outcome });
    }
    fn notify(&mut self) {
        self.unparker.unpark();
    }
}

/// What the pump needs to talk to the rest of the runtime.
#[derive(Debug)]
pub struct PumpLinks {
    /// One job ring per worker (capacity ≥ `max_outstanding`).
    pub job_txs: Vec<ring::Sender<Job>>,
    pub worker_wakers: Vec<Arc<Waker>>,
    pub outcomes: ring::Receiver<JobOutcome>,
    pub wal_tx: ring::Sender<AppendRequest>,
    pub wal_unparker: Unparker,
    pub completions: ring::Receiver<Completion>,
    pub parker: Parker,
    /// Set by the runtime once every worker has exited: flush and stop.
    pub workers_done: Arc<AtomicBool>,
    /// This producer's index in the writer's sinks.
    pub producer: usize,
    /// Capacity of `completions`: the most records the pump has in flight to the WAL.
    pub max_records_in_flight: usize,
}

/// An event the pump admitted and has not yet seen made done.
#[derive(Debug, Clone)]
struct Live {
    cost: u64,
    received_at_ms: u64,
    outstanding: bool,
}

/// The pump thread's state.
#[derive(Debug)]
pub struct Pump {
    shared: Arc<Shared>,
    links: PumpLinks,
    tail: WalTail,
    dlq: DlqStore,
    /// Events pending at start-up (by LSN, up to `recovered_upto`), with their retry schedule.
    recovered: DispatchRecovery,
    live: BTreeMap<Lsn, Live>,
    outstanding: usize,
    max_outstanding: usize,
    /// A job admitted while its core's ring was full (cannot happen with the ring sized to
    /// `max_outstanding`; kept for robustness).
    stashed: Option<(usize, Job)>,
    done_queue: Vec<DoneEntry>,
    retry_queue: VecDeque<RetryRecord>,
    /// Dead letters the DLQ refused (full); retried every second; still outstanding.
    dlq_waiting: VecDeque<(DlqEntry, u32)>,
    dlq_retry_at_ms: u64,
    /// Records written and not yet durable: ticket → the done entries they carry.
    in_flight: HashMap<u64, Vec<DoneEntry>>,
    seq: u64,
    /// Trigger id → destination index (None: no handler).
    handlers: HashMap<String, Option<usize>>,
    drained_since_tick: u64,
    tick_at_ms: u64,
    /// When retention next runs (unix ms).
    retain_at_ms: u64,
}

impl Pump {
    pub fn new(
        shared: Arc<Shared>,
        links: PumpLinks,
        tail: WalTail,
        dlq: DlqStore,
        recovered: DispatchRecovery,
    ) -> Pump {
        let max_outstanding = shared.config.pump.max_outstanding;
        let handlers = shared
            .config
            .triggers
            .iter()
            .map(|t| (t.id.clone(), t.handler))
            .collect();
        Pump {
            shared,
            links,
            tail,
            dlq,
            recovered,
            live: BTreeMap::new(),
            outstanding: 0,
            max_outstanding,
            stashed: None,
            done_queue: Vec::new(),
            retry_queue: VecDeque::new(),
            dlq_waiting: VecDeque::new(),
            dlq_retry_at_ms: 0,
            in_flight: HashMap::new(),
            seq: 0,
            handlers,
            drained_since_tick: 0,
            tick_at_ms: unix_millis(),
            retain_at_ms: 0,
        }
    }

    /// Runs until the runtime says the workers are done and everything is flushed.
    pub fn run(mut self) {
        loop {
            let now_ms = unix_millis();
            let mut busy = self.drain_completions();
            busy |= self.drain_outcomes(now_ms);
            self.retry_dead_letters(now_ms);
            if self.shared.phase() != Phase::Draining {
                busy |= self.admit(now_ms);
            }
            busy |= self.flush_records();
            self.tick(now_ms);
            self.retain(now_ms);
            if self.links.workers_done.load(Ordering::Acquire)
                && self.links.outcomes.is_empty()
                && self.done_queue.is_empty()
                && self.retry_queue.is_empty()
                && self.in_flight.is_empty()
            {
                return;
            }
            if !busy {
                self.links.parker.park_timeout(IDLE_PARK);
            }
        }
    }

    /// The lowest LSN without a durable outcome (the done cursor), as far as the pump knows.
    pub fn done_cursor(&self) -> Lsn {
        self.live
            .keys()
            .next()
            .copied()
            .unwrap_or_else(|| self.tail.next_lsn())
    }

    // ----- admission --------------------------------------------------------------------------

    /// Reads committed events and admits them while there is room. Returns true if it did work.
    fn admit(&mut self, now_ms: u64) -> bool {
        let mut worked = false;
        if let Some((core, job)) = self.stashed.take() {
            if let Err(job) = self.send(core, job) {
                self.stashed = Some((core, job));
                return false;
            }
            worked = true;
        }
        let durable = self.shared.wal.durable_lsn();
        while self.outstanding < self.max_outstanding && self.done_queue.len() < MAX_DONE_ENTRIES {
            let (lsn, record) = match self.tail.next(durable) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    // The log below the durable LSN is unreadable: stop admitting (events stay
                    // pending and are retried after a restart) and say so.
                    eprintln!("sluice: pump: reading the WAL failed: {e}");
                    break;
                }
            };
            worked = true;
            let Record::Event(event) = record else {
                continue;
            };
            let (attempt, due_at_ms) = if lsn < self.recovered.next_lsn {
                match self.recovered.pending.remove(&lsn) {
                    Some(meta) => (meta.next_attempt.max(1), meta.due_at_ms),
                    None => continue, // done before the restart
                }
            } else {
                (1, 0)
            };
            let cost = crate::wal::event_cost(&event);
            let dest = self
                .handlers
                .get(event.trigger_id.as_str())
                .copied()
                .flatten();
            let received_at_ms = event.received_at_ms;
            let Some(dest) = dest else {
                // No handler: stored and done at once.
                self.live.insert(
                    lsn,
                    Live {
                        cost,
                        received_at_ms,
                        outstanding: false,
                    },
                );
                self.done_queue.push(DoneEntry {
                    event_lsn: lsn,
                    status: DoneStatus::NoHandler,
                    attempts: 0,
                });
                continue;
            };
            self.live.insert(
                lsn,
                Live {
                    cost,
                    received_at_ms,
                    outstanding: true,
                },
            );
            self.outstanding += 1;
            let core = crate::sched::placement::owner_core(
                &self.shared.config.destinations[dest].handler.uri,
                self.links.job_txs.len(),
            );
            let job = Job::new(lsn, event, dest, attempt, due_at_ms);
            if let Err(job) = self.send(core, job) {
                self.stashed = Some((core, job));
                break;
            }
        }
        let _ = now_ms;
        worked
    }

    /// Hands `job` to its owner core; gives it back if the core's ring is full.
    #[allow(clippy::result_large_err)] // the job is handed back by value on purpose, like `try_push`
    fn send(&mut self, core: usize, job: Job) -> Result<(), Job> {
        match self.links.job_txs[core].try_push(job) {
            Ok(()) => {
                let _ = self.links.worker_wakers[core].wake();
                Ok(())
            }
            Err(e) => Err(e.into_inner()),
        }
    }

    // ----- outcomes ---------------------------------------------------------------------------

    fn drain_outcomes(&mut self, now_ms: u64) -> bool {
        let mut worked = false;
        while let Some(outcome) = self.links.outcomes.try_pop() {
            worked = true;
            match outcome {
                JobOutcome::Delivered { lsn, attempts, .. } => {
                    self.finish(lsn);
                    self.done_queue.push(DoneEntry {
                        event_lsn: lsn,
                        status: DoneStatus::Delivered,
                        attempts,
                    });
                }
                JobOutcome::Skipped {
                    lsn,
                    reason: _,
                    attempts,
                } => {
                    // The reason is counted by the gate (`sluice_flow_control_total`).
                    self.finish(lsn);
                    self.done_queue.push(DoneEntry {
                        event_lsn: lsn,
                        status: DoneStatus::Skipped,
                        attempts,
                    });
                }
                JobOutcome::RetryScheduled {
                    lsn,
                    next_attempt,
                    due_at_ms,
                    last_error,
                } => {
                    self.retry_queue.push_back(RetryRecord {
                        event_lsn: lsn,
                        next_attempt,
                        due_at_ms,
                        last_error,
                    });
                }
                JobOutcome::DeadLetter {
                    job,
                    reason,
                    attempts,
                    last_error,
                } => {
                    let entry = DlqEntry {
                        id: job.event.event_id.clone(),
                        event_lsn: job.lsn,
                        destination: self.shared.config.destinations[job.dest]
                            .handler
                            .uri
                            .clone(),
                        reason,
                        attempts,
                        last_error,
                        dead_lettered_at_ms: now_ms,
                        event: job.event,
                    };
                    self.dead_letter(entry, attempts, now_ms);
                }
            }
        }
        worked
    }

    /// Writes the DLQ entry (durably), then queues the `Done` entry. A full DLQ keeps the event
    /// outstanding and retries later: never dropped, and it holds back admission.
    fn dead_letter(&mut self, entry: DlqEntry, attempts: u32, now_ms: u64) {
        match self.dlq.put(&entry) {
            Ok(()) => {
                let lsn = entry.event_lsn;
                self.shared.metrics_dispatch.observe_accepted_to_dlq(
                    entry.reason,
                    now_ms.saturating_sub(entry.event.received_at_ms),
                );
                self.finish(lsn);
                self.done_queue.push(DoneEntry {
                    event_lsn: lsn,
                    status: DoneStatus::DeadLettered,
                    attempts,
                });
            }
            Err(DlqError::Full { .. }) => {
                if self.dlq_waiting.is_empty() {
                    self.dlq_retry_at_ms = now_ms + DLQ_RETRY_EVERY_MS;
                }
                self.dlq_waiting.push_back((entry, attempts));
            }
            Err(e) => {
                eprintln!(
                    "sluice: pump: writing DLQ entry {} failed: {e}; retrying",
                    entry.id
                );
                if self.dlq_waiting.is_empty() {
                    self.dlq_retry_at_ms = now_ms + DLQ_RETRY_EVERY_MS;
                }
                self.dlq_waiting.push_back((entry, attempts));
            }
        }
    }

    fn retry_dead_letters(&mut self, now_ms: u64) {
        if self.dlq_waiting.is_empty() || now_ms < self.dlq_retry_at_ms {
            return;
        }
        let waiting = std::mem::take(&mut self.dlq_waiting);
        for (entry, attempts) in waiting {
            self.dead_letter(entry, attempts, now_ms);
        }
        self.dlq_retry_at_ms = now_ms + DLQ_RETRY_EVERY_MS;
    }

    /// A terminal outcome arrived: the job no longer counts against `max_outstanding`.
    fn finish(&mut self, lsn: Lsn) {
        if let Some(l) = self.live.get_mut(&lsn) {
            if std::mem::replace(&mut l.outstanding, false) {
                self.outstanding -= 1;
            }
        }
    }

    // ----- records ----------------------------------------------------------------------------

    /// Sends queued `Done` and `Retry` records to the WAL writer. Returns true if it did work.
    fn flush_records(&mut self) -> bool {
        let mut worked = false;
        while self.in_flight.len() < self.links.max_records_in_flight {
            let (record, entries) = if !self.done_queue.is_empty() {
                let n = self.done_queue.len().min(MAX_DONE_ENTRIES);
                let entries: Vec<DoneEntry> = self.done_queue.drain(..n).collect();
                (
                    Record::Done(DoneRecord {
                        entries: entries.clone(),
                    }),
                    entries,
                )
            } else if let Some(r) = self.retry_queue.pop_front() {
                (Record::Retry(r), Vec::new())
            } else {
                break;
            };
            self.seq += 1;
            let ticket = self.seq;
            let req = AppendRequest {
                worker: self.links.producer,
                ticket,
                record,
            };
            match self.links.wal_tx.try_push(req) {
                Ok(()) => {
                    self.in_flight.insert(ticket, entries);
                    self.links.wal_unparker.unpark();
                    worked = true;
                }
                Err(e) => {
                    // Ring full (ingest is busy) or closed: put it back and try next turn.
                    match e.into_inner().record {
                        Record::Done(d) => {
                            let mut back = d.entries;
                            back.append(&mut self.done_queue);
                            self.done_queue = back;
                        }
                        Record::Retry(r) => self.retry_queue.push_front(r),
                        Record::Event(_) => {}
                    }
                    break;
                }
            }
        }
        worked
    }

    /// Durable records: release the backlog for the events they made done.
    fn drain_completions(&mut self) -> bool {
        let mut worked = false;
        while let Some(c) = self.links.completions.try_pop() {
            worked = true;
            let Some(entries) = self.in_flight.remove(&c.ticket) else {
                continue;
            };
            match c.outcome {
                AppendOutcome::Durable { .. } => {
                    let (mut n, mut bytes) = (0u64, 0u64);
                    for e in &entries {
                        if let Some(l) = self.live.remove(&e.event_lsn) {
                            n += 1;
                            bytes += l.cost;
                        }
                    }
                    self.shared.backlog.release_many(n, bytes);
                    self.drained_since_tick += n;
                }
                AppendOutcome::Unavailable => {
                    // Not durable: write them again (the WAL is retrying its disk).
                    self.done_queue.extend(entries);
                }
            }
        }
        worked
    }

    /// Live gauges every turn; the drain rate once a second.
    fn tick(&mut self, now_ms: u64) {
        // Every turn: the live gauges (three stores). The oldest pending event is the one with
        // the lowest LSN (receipt order), so its age at scrape time is always current.
        let oldest = self.live.first_key_value().map(|(_, l)| l.received_at_ms);
        self.shared
            .metrics_dispatch
            .set_pump(self.outstanding as u64, oldest, self.done_cursor());
        if now_ms < self.tick_at_ms + 1000 {
            return;
        }
        let elapsed = (now_ms - self.tick_at_ms) as f64 / 1000.0;
        self.shared
            .backlog
            .record_drained(std::mem::take(&mut self.drained_since_tick), elapsed);
        self.tick_at_ms = now_ms;
    }
}

/// How often retention and the disk measurement run.
const RETAIN_EVERY_MS: u64 = 5_000;

impl Pump {
    /// Retention: has the WAL writer delete segments wholly below the done cursor whose last
    /// write is older than `retention` (never the active segment; `WalShared::request_retire`),
    /// and measures the WAL's size on disk for
    /// the `max_wal_bytes` bound. DLQ entries live in their own files and are unaffected.
    fn retain(&mut self, now_ms: u64) {
        if now_ms < self.retain_at_ms {
            return;
        }
        self.retain_at_ms = now_ms + RETAIN_EVERY_MS;
        let dir = self.shared.config.wal_dir();
        let segments = match crate::wal::segment::list_segments(&dir) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sluice: retention: listing {}: {e}", dir.display());
                return;
            }
        };
        let cursor = self.done_cursor();
        let retention = self.shared.config.dispatch.retention;
        let mut total = 0u64;
        let mut deleting = true;
        let mut retire_below = None;
        for (i, (_, path)) in segments.iter().enumerate() {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let last_lsn = segments
                .get(i + 1)
                .map(|(first, _)| first.saturating_sub(1));
            let old_enough = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age >= retention);
            deleting = deleting && last_lsn.is_some_and(|l| l < cursor) && old_enough;
            if deleting {
                // The writer deletes it, after checkpointing the new first live LSN.
                retire_below = last_lsn.map(|l| l + 1);
                continue;
            }
            total += meta.len();
        }
        if let Some(lsn) = retire_below {
            self.shared.wal.request_retire(lsn);
        }
        self.shared.backlog.set_wal_bytes(total);
    }
}
