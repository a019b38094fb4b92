//! The pump's shell, per core: moves data between the pure pump core
//! ([`crate::dispatch::pump`], where admission, the window, read-back, outcomes and records are
//! decided and documented) and the loop's world — the logs it reads back (with the failpoint
//! that fails an open), the commit helper, the other cores' wakers, the durable-queue bound
//! and the flow gates' counts, the pump gauges and drain rates, and retention.
//!
//! The loop calls it with a reading of the injected clock (`Shared::clock`, nanos) and, after
//! each call, the shell hands the core's writes to the commit helper and wakes the cores whose
//! dispatch slot came back. Timers here (drain rate, retention) run on that clock, never on the
//! wall clock: a wall clock step must not stall or rush them, nor skew the drain rate.

use std::path::Path;
use std::sync::Arc;

use crate::dispatch::dlq::{DlqEntry, DlqError};
use crate::dispatch::job::{Job, JobOutcome};
use crate::dispatch::metrics::{DispatchMetrics, PumpSample};
pub use crate::dispatch::outstanding::Outstanding;
use crate::dispatch::pump::{PumpCore, PumpEnv, Route, Routes, Write};
pub use crate::dispatch::pump::{PumpLog, PUMP_TICKET};
use crate::dispatch::trigger_caps::Slots;
use crate::ingest::backlog::Backlog;
use crate::sched::commit::{Committer, Item};
use crate::sched::state::Shared;
use crate::wal::{AppendOutcome, EventRecord, Lsn, WalError, WalTail};

/// How often retention and the disk measurement run (clock nanos).
const RETAIN_EVERY: u64 = 5_000_000_000;
/// How often core 0's pump folds the drained events into the drain rates (clock nanos).
const TICK_EVERY: u64 = 1_000_000_000;

/// What the pump core reads and moves through: the logs on disk, the backlog bound and the flow
/// gates' counts.
#[derive(Debug)]
pub struct LogsEnv {
    backlog: Arc<Backlog>,
    metrics: Arc<DispatchMetrics>,
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
        self.backlog.slot(trigger)
    }
    fn recovered_slot(&self) -> usize {
        self.backlog.recovered_slot()
    }
    fn gates_full(&self, trigger: &str) -> bool {
        self.metrics.flow.full_id(trigger)
    }
    fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        self.backlog.release_done(slot, events, bytes)
    }
}

/// The pump of one core: its core and the loop-side state around it.
#[derive(Debug)]
pub struct CorePump {
    pump: PumpCore<LogsEnv>,
    core: usize,
    workers: usize,
    shared: Arc<Shared>,
    /// Every core's waker, by core (cores waiting for a dispatch slot are woken).
    wakers: Vec<Arc<mio::Waker>>,
    /// Bytes of each log's segments on disk at the last measurement, by position.
    disk_bytes: Vec<u64>,
    tick_at: u64,
    retain_at: u64,
}

/// The routes of configuration `config` (`workers`: the run's cores, for owner placement).
fn routes(config: &crate::config::Config, workers: usize) -> Routes {
    let owner = |uri: &str| crate::dispatch::placement::owner_core(uri, workers);
    Routes {
        handlers: config
            .triggers
            .iter()
            .map(|t| (t.id.clone(), t.handler))
            .collect(),
        destinations: config
            .destinations
            .iter()
            .map(|d| Route {
                owner: owner(&d.handler.uri),
                uri: d.handler.uri.clone(),
            })
            .collect(),
        default_trigger: crate::ingest::router::DEFAULT_TRIGGER_ID,
    }
}

impl CorePump {
    /// The pump of core `core` over `logs`; `now` is a reading of `shared.clock` (nanos).
    pub fn new(
        core: usize,
        shared: Arc<Shared>,
        logs: Vec<PumpLog>,
        outstanding: Arc<Outstanding>,
        wakers: Vec<Arc<mio::Waker>>,
        now: u64,
    ) -> Result<CorePump, WalError> {
        let workers = shared.config.server.workers;
        let env = LogsEnv {
            backlog: shared.dispatch().backlog.clone(),
            metrics: shared.dispatch().metrics.clone(),
        };
        let n = logs.len();
        let routes = routes(&shared.config, workers);
        let metrics = shared.dispatch().metrics.clone();
        let slots = Slots {
            window: outstanding,
            caps: shared.dispatch().caps.clone(),
        };
        let pump = PumpCore::new(core, env, metrics, slots, logs, routes)?;
        Ok(CorePump {
            pump,
            core,
            workers,
            shared,
            wakers,
            disk_bytes: vec![0; n],
            tick_at: now,
            retain_at: 0,
        })
    }

    /// The shared dispatch window (the dispatcher takes slots for gate-released jobs).
    pub fn slots(&self) -> Slots {
        self.pump.slots().clone()
    }

    /// An ingest event of the core's own log is durable at `lsn`; the loop hands over the
    /// event it wrote.
    pub fn on_durable(&mut self, lsn: Lsn, event: EventRecord) {
        let now = self.shared.clock.now_nanos();
        self.pump.on_durable(lsn, event, now);
    }

    /// One turn: the core's turn, its writes to the commit helper, gauges and timers.
    pub fn turn(
        &mut self,
        now: u64,
        draining: bool,
        committer: &mut Committer,
        jobs: &mut Vec<(usize, Job)>,
    ) {
        self.pump.turn(now, draining, jobs);
        self.settle(committer);
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

    /// A reload's configuration (`ops::reload`): each trigger's destination id from now on.
    pub fn learn_handlers(&mut self, config: &Arc<crate::config::Config>) {
        self.pump.learn_routes(routes(config, self.workers));
    }

    /// An outcome of a job whose event is in one of this core's logs.
    pub fn on_outcome(&mut self, outcome: JobOutcome, now_ms: u64, committer: &mut Committer) {
        self.pump.on_outcome(outcome, now_ms);
        self.settle(committer);
    }

    /// The commit helper's answer for one of the pump's records.
    pub fn on_record_done(&mut self, ticket: u64, outcome: AppendOutcome) {
        self.pump.on_record_done(ticket, outcome);
    }

    /// The commit helper's answer for one of the pump's dead letters.
    pub fn on_dead_letter_done(
        &mut self,
        ticket: u64,
        entry: DlqEntry,
        result: Result<(), DlqError>,
        now_ms: u64,
    ) {
        let now = self.shared.clock.now_nanos();
        self.pump
            .on_dead_letter_done(ticket, entry, result, now_ms, now);
        self.wake();
    }

    /// Hands the core's writes to the commit helper and wakes the cores it released slots to.
    fn settle(&mut self, committer: &mut Committer) {
        for w in self.pump.take_writes() {
            committer.staging().push(match w {
                Write::Record {
                    log,
                    ticket,
                    record,
                } => Item::Append {
                    log,
                    ticket,
                    record,
                },
                Write::DeadLetter { ticket, entry } => Item::DeadLetter { ticket, entry },
            });
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
        self.shared
            .dispatch()
            .metrics
            .set_pump_core(self.core, sample);
        let drained = self.pump.take_drained();
        if drained > 0 {
            self.shared.dispatch().backlog.note_drained(drained);
        }
        if now < self.tick_at + TICK_EVERY {
            return;
        }
        if self.core == 0 {
            let elapsed = (now - self.tick_at) as f64 / 1e9;
            self.shared.dispatch().backlog.update_drain_rate(elapsed);
        }
        self.tick_at = now;
    }
}

#[path = "pump_retain.rs"]
mod retain;
