//! The pump's shell, per core: moves data between the pure pump core
//! ([`crate::dispatch::pump`], where admission, the window, read-back, outcomes and records are
//! decided and documented) and the core's world — the logs it reads back (with the failpoint
//! that fails an open), the core's commit batch, the other cores' wakers, the durable-queue
//! bound ([`DurableQueue`]) and the flow gates' counts, the pump gauges and drain rates, and
//! retention (`retain.rs`).
//!
//! The core's loop (`sched`) drives it: it hands over each batch back from its commit
//! ([`CorePump::on_commit`]: the pump's records and dead letters settled, the durable events
//! from memory), the outcomes of the pump's jobs ([`CorePump::on_outcome`]) and once per turn
//! a reading of the injected clock ([`CorePump::turn`]); the shell puts the pump's writes in the
//! core's filling batch ([`Staging`]) and wakes the cores whose dispatch slot came back. Timers
//! here (drain rate, retention) run on that clock, never on the wall clock: a wall clock step
//! must not stall or rush them, nor skew the drain rate.
//!
//! What dispatch puts in a core's group commit: the batch types of `wal::group` over dispatch's
//! dead letters ([`Item`], [`Outcome`], [`Batch`], [`Staging`]), and the DLQ as the batch's
//! dead-letter store ([`DeadLetters`] for [`DlqStore`]): the WAL names no dispatch type.
//!
//! Bounds: the writes handed to the batch per call are those of one call of the pump core
//! (bounded there: `MAX_RECORDS_IN_FLIGHT` per log, dead letters by `max_outstanding`); the
//! shell itself keeps one gauge per log (`disk_bytes`) and no queue.
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore};
use crate::dispatch::job::{Job, JobOutcome};
use crate::dispatch::metrics::{DispatchMetrics, PumpSample};
use crate::dispatch::outstanding::Outstanding;
use crate::dispatch::pump::{PumpCore, PumpEnv, PumpLog, Routes, Write};
use crate::dispatch::spec::DispatchSpec;
use crate::dispatch::trigger_caps::{Slots, TriggerCaps};
use crate::net::io::Waker;
use crate::sync::clock::Clock;
use crate::wal::group::DeadLetters;
use crate::wal::{AppendOutcome, Lsn, Record, WalError, WalShared, WalTail};

/// One thing for the disk in a core's batch: an append, or a dead letter.
pub type Item = crate::wal::group::Item<DlqEntry>;
/// The result of one [`Item`].
pub type Outcome = crate::wal::group::Outcome<DlqError>;
/// A core's batch for its group commit.
pub type Batch = crate::wal::group::Batch<DlqEntry, DlqError>;
/// A core's filling batch.
pub type Staging = crate::wal::group::Staging<DlqEntry, DlqError>;
/// One owner's way into a core's filling batch.
pub type Port<'a> = crate::wal::group::Port<'a, DlqEntry, DlqError>;
pub use crate::wal::group::Owner;

impl DeadLetters for DlqStore {
    type Entry = DlqEntry;
    type Error = DlqError;
    /// The batch's dead letters as one DLQ commit (`dispatch::dlq::store`).
    fn put_dead_letters(
        &self,
        entries: Vec<(usize, &DlqEntry)>,
    ) -> Vec<(usize, Result<(), DlqError>)> {
        self.put_batch(entries)
    }
    /// The batch's replayed dead letters, removed as one group (`dispatch::dlq::store`).
    fn release(&self, ids: Vec<(usize, &str)>) -> Vec<(usize, Result<(), DlqError>)> {
        self.remove_batch(ids)
    }
}

/// How often retention and the disk measurement run (clock nanos).
const RETAIN_EVERY: u64 = 5_000_000_000;
/// How often core 0's pump folds the drained events into the drain rates (clock nanos).
const TICK_EVERY: u64 = 1_000_000_000;

/// The durable-queue bound as the pump sees it: ingest's backlog, which admission reserves and
/// the pump gives back (implemented where the two meet, `sched::pump`: dispatch imports no
/// ingest type). Its drain rates and the WAL's size on disk are measured here.
pub trait DurableQueue: std::fmt::Debug + Send + Sync {
    /// The backlog slot of `trigger` (its share of the bound).
    fn trigger_slot(&self, trigger: &str) -> usize;
    /// The slot the events recovered at start-up are counted in.
    fn recovered_slot(&self) -> usize;
    /// `events` events of slot `slot` totalling `bytes` are done: their room goes back.
    fn release_done(&self, slot: usize, events: u64, bytes: u64);
    /// `events` more events were made done (for the drain rate).
    fn note_drained(&self, events: u64);
    /// Folds the drained events of the last `elapsed_secs` into the drain rate.
    fn update_drain_rate(&self, elapsed_secs: f64);
    /// A log's size on disk went from `old` to `new` bytes (the `max_wal_bytes` bound).
    fn adjust_wal_bytes(&self, old: u64, new: u64);
}

/// What the pump core reads and moves through: the logs on disk, the backlog bound and the flow
/// gates' counts.
#[derive(Debug)]
pub struct LogsEnv {
    queue: Arc<dyn DurableQueue>,
    metrics: Arc<DispatchMetrics>,
    /// Every log's published state, by its index in the run (`None`: a log of another core
    /// adopted after start-up).
    wal: Vec<Option<Arc<WalShared>>>,
}

impl PumpEnv for LogsEnv {
    type Tail = WalTail;

    /// With `--features failpoints`, the control file's `emfile-readback` fails it as the
    /// descriptor limit would.
    fn open(&self, dir: &Path, from: Lsn) -> Result<WalTail, WalError> {
        #[cfg(feature = "failpoints")]
        if let Some(e) = crate::wal::failpoints::readback_open_fault() {
            return Err(WalError::Io {
                path: dir.to_owned(),
                source: e,
            });
        }
        WalTail::open(dir, from)
    }
    /// Without the failpoint: it models the descriptor limit during a run, not at start.
    fn open_at_start(&self, dir: &Path, from: Lsn) -> Result<WalTail, WalError> {
        WalTail::open(dir, from)
    }
    fn trigger_slot(&self, trigger: &str) -> usize {
        self.queue.trigger_slot(trigger)
    }
    fn recovered_slot(&self) -> usize {
        self.queue.recovered_slot()
    }
    fn gates_full(&self, trigger: &str) -> bool {
        self.metrics.flow.full_id(trigger)
    }
    /// Its cells in the flow metrics: a claimed cell keeps its trigger for the run.
    fn gate_cells(&self, trigger: &str) -> Option<usize> {
        self.metrics.flow.index_of(trigger)
    }
    fn cells_full(&self, t: usize) -> bool {
        self.metrics.flow.full(t)
    }
    fn gated(&self, t: usize) -> bool {
        self.metrics.flow.has_gates(t)
    }
    fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        self.queue.release_done(slot, events, bytes)
    }
    fn writable(&self, index: usize) -> bool {
        self.wal
            .get(index)
            .and_then(Option::as_ref)
            .map_or(true, |w| w.is_healthy())
    }
}

/// What a core's pump is built from (the runtime assembles it: `sched::pump::build`).
#[derive(Debug)]
pub struct PumpParts {
    /// The injected clock (nanos).
    pub clock: Arc<dyn Clock>,
    pub queue: Arc<dyn DurableQueue>,
    pub metrics: Arc<DispatchMetrics>,
    /// Each trigger's cap of the dispatch window, shared by every core.
    pub caps: Arc<TriggerCaps>,
    /// The published state of every log of the run, by log index (retention's requests).
    pub wal: Vec<Arc<WalShared>>,
    /// `[dispatch] retention`: how long done segments are kept.
    pub retention: Duration,
    /// Each trigger's destination and each destination's owner (`Routes::from_spec`).
    pub routes: Routes,
}

/// The pump of one core: its core and the loop-side state around it.
#[derive(Debug)]
pub struct CorePump {
    pump: PumpCore<LogsEnv>,
    core: usize,
    clock: Arc<dyn Clock>,
    queue: Arc<dyn DurableQueue>,
    metrics: Arc<DispatchMetrics>,
    /// The published state of each of the pump's logs, by position.
    wal: Vec<Arc<WalShared>>,
    retention: Duration,
    /// The default route's trigger id, for the routes of a reload's spec.
    default_trigger: &'static str,
    /// Every core's waker, by core (cores waiting for a dispatch slot are woken).
    wakers: Vec<Arc<Waker>>,
    /// Bytes of each log's segments on disk at the last measurement, by position.
    disk_bytes: Vec<u64>,
    /// The generation of each log's retired counts last folded into the ledger, by position.
    retired_seen: Vec<u64>,
    tick_at: u64,
    retain_at: u64,
}

impl CorePump {
    /// The pump of core `core` over `logs`; `now` is a reading of `parts.clock` (nanos).
    pub fn new(
        core: usize,
        parts: PumpParts,
        logs: Vec<PumpLog>,
        outstanding: Arc<Outstanding>,
        wakers: Vec<Arc<Waker>>,
        now: u64,
    ) -> Result<CorePump, WalError> {
        let PumpParts {
            clock,
            queue,
            metrics,
            caps,
            wal,
            retention,
            routes,
        } = parts;
        let env = LogsEnv {
            queue: queue.clone(),
            metrics: metrics.clone(),
            wal: wal.iter().cloned().map(Some).collect(),
        };
        let wal = logs.iter().map(|l| wal[l.index].clone()).collect();
        let n = logs.len();
        let default_trigger = routes.default_trigger;
        let slots = Slots {
            window: outstanding,
            caps,
        };
        let pump = PumpCore::new(core, env, metrics.clone(), slots, logs, routes)?;
        Ok(CorePump {
            pump,
            core,
            clock,
            queue,
            metrics,
            wal,
            retention,
            default_trigger,
            wakers,
            disk_bytes: vec![0; n],
            retired_seen: vec![0; n],
            tick_at: now,
            retain_at: 0,
        })
    }

    /// The last turn stopped reading a log at its per-turn bound: turn again without sleeping
    /// (`PumpCore::more_to_read`).
    pub fn more_to_read(&self) -> bool {
        self.pump.more_to_read()
    }

    /// Log `log`, rebuilt from another node's replicated log while this node runs, is this
    /// pump's from now on (`PumpCore::adopt`); `wal` is its published state. Its commit helper
    /// slot is given in the same turn (`wal::commit::Committer::adopt`).
    pub fn adopt(&mut self, log: PumpLog, wal: Arc<WalShared>) {
        let index = log.index;
        let now = self.clock.now_nanos();
        self.pump.adopt(log, now);
        let env = self.pump.env_mut();
        if env.wal.len() <= index {
            env.wal.resize(index + 1, None);
        }
        env.wal[index] = Some(wal.clone());
        self.wal.push(wal);
        self.disk_bytes.push(0);
        self.retired_seen.push(0);
    }

    /// The core's order horizon at the end of a turn (`PumpCore::publish_horizon`).
    pub fn publish_horizon(&mut self, ingest: Option<u64>, links: Option<u64>) {
        self.pump.publish_horizon(ingest, links)
    }

    /// The order time of the newest ingest event made durable in the own log.
    pub fn last_durable_at(&self) -> u64 {
        self.pump.last_durable_at()
    }

    /// The loop woke (`PumpCore::wake_horizon`): from idle, publishes 0, then takes the wall
    /// clock as the floor of its horizon.
    pub fn wake_horizon(&mut self) {
        if self.pump.wake_horizon() {
            let now = crate::sync::clock::unix_micros();
            self.pump
                .set_floor(crate::dispatch::horizon::order_time_of_us(now));
        }
    }

    /// The shared dispatch window (the dispatcher takes slots for gate-released jobs).
    pub fn slots(&self) -> Slots {
        self.pump.slots().clone()
    }

    /// A batch back from its commit (ingest settled its own appends from it first): the
    /// pump's records and dead letters answered, and each event made durable handed to the pump
    /// from memory (it was just written: no read-back). `now_ms` is the wall clock (a dead
    /// letter's time).
    pub fn on_commit(&mut self, batch: Batch, now_ms: u64) {
        let now = self.clock.now_nanos();
        for (item, outcome) in batch.items.into_iter().zip(batch.outcomes) {
            match (item, outcome) {
                (
                    Item::Append {
                        owner: Owner::Pump,
                        ticket,
                        ..
                    },
                    Outcome::Appended(o),
                ) => self.pump.on_record_done(ticket, o),
                (Item::Append { record, .. }, Outcome::Appended(o)) => {
                    if let (AppendOutcome::Durable { lsn }, Record::Event(event)) = (o, record) {
                        self.pump.on_durable(lsn, event, now);
                    }
                }
                (Item::DeadLetter { ticket, entry, .. }, Outcome::DeadLettered(r)) => {
                    self.pump.on_dead_letter_done(ticket, entry, r, now_ms, now);
                    self.wake();
                }
                // A replay's dead letter leaving the DLQ: the loop settled it before this.
                (Item::Release { .. }, Outcome::Released(_)) => {}
                (item, outcome) => {
                    eprintln!("sluice: commit helper answered {item:?} with {outcome:?}")
                }
            }
        }
    }

    /// One turn: the core's turn, its writes to the filling batch, gauges and timers.
    pub fn turn(
        &mut self,
        now: u64,
        draining: bool,
        staging: &mut Staging,
        jobs: &mut Vec<(usize, Job)>,
    ) {
        self.pump.turn(now, draining, jobs);
        self.settle(staging);
        self.tick(now);
        self.retain(now);
    }

    /// Called by the loop once the jobs this pump admitted are in the other cores' rings
    /// (`PumpCore::handed_over`): the last pump to finish wakes every core.
    pub fn handed_over(&mut self) {
        if self.pump.handed_over() {
            for w in &self.wakers {
                let _ = w.wake();
            }
        }
    }

    /// True when nothing is queued for or with the commit helper.
    pub fn is_flushed(&self) -> bool {
        self.pump.is_flushed()
    }

    /// A reload's dispatch spec (`ops::reload`): each trigger's destination id from now on.
    pub fn learn_routes(&mut self, spec: &DispatchSpec) {
        let routes = Routes::from_spec(spec, self.default_trigger);
        self.pump.learn_routes(routes);
    }

    /// An outcome of a job whose event is in one of this core's logs.
    pub fn on_outcome(&mut self, outcome: JobOutcome, now_ms: u64, staging: &mut Staging) {
        self.pump.on_outcome(outcome, now_ms);
        self.settle(staging);
    }

    /// Puts the core's writes in the filling batch and wakes the cores it released slots to.
    fn settle(&mut self, staging: &mut Staging) {
        let mut port = staging.port(Owner::Pump);
        for w in self.pump.take_writes() {
            match w {
                Write::Record {
                    log,
                    ticket,
                    record,
                } => port.record(log, ticket, record),
                Write::DeadLetter { ticket, entry } => port.dead_letter(ticket, entry),
            }
        }
        self.wake();
    }

    /// Wakes the cores waiting for a dispatch slot that one of this pump's releases freed.
    fn wake(&mut self) {
        let marked = self.pump.take_wakes();
        for (core, w) in self.wakers.iter().enumerate().take(64) {
            if marked & (1 << core) != 0 {
                let _ = w.wake();
            }
        }
    }

    /// Live gauges every turn; the drain rate once a second (core 0, for all cores).
    fn tick(&mut self, now: u64) {
        let cursor = self.pump.cursors().next().map_or(0, |c| c.2);
        let sample = PumpSample {
            outstanding: self.pump.outstanding().get(),
            oldest_received_at_ms: self.pump.oldest_received_at(),
            done_cursor: cursor,
            awaiting: self.pump.awaiting() as u64,
            max_awaiting: self.pump.max_awaiting() as u64,
        };
        self.metrics.set_pump_core(self.core, sample);
        let drained = self.pump.take_drained();
        if drained > 0 {
            self.queue.note_drained(drained);
        }
        if now < self.tick_at + TICK_EVERY {
            return;
        }
        if self.core == 0 {
            let elapsed = (now - self.tick_at) as f64 / 1e9;
            self.queue.update_drain_rate(elapsed);
        }
        self.tick_at = now;
    }
}

mod retain;

#[cfg(test)]
mod tests;
