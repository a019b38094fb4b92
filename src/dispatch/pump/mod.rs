//! The pump's decisions, per core: turns the durable events of the logs a core owns into jobs
//! for their destinations' owner cores, and the jobs' outcomes into durable records in the same
//! logs. A pure core: its inputs are durable events (handed over from memory, or read back
//! through [`PumpEnv::open`]), outcomes and the commit helper's answers, each with a reading of
//! the injected clock; its outputs are jobs, [`Write`]s for the commit helper, the cores to wake
//! and each log's done cursor (retention). No socket, thread, waker or shared state is inside:
//! [`crate::dispatch::pump::shell`] is the shell that moves data between this core and the
//! commit batch, wakers and logs.
//!
//! Cursor semantics (DESIGN.md, "Where sluice goes further"): a log's cursor means *done*, the
//! lowest LSN without a recorded outcome. Nothing is acknowledged at admission: an event is done
//! only once its `Done` record (delivered, dead-lettered, skipped by a flow-control gate, or "no
//! handler") is durable in the log that holds the event. After a crash, recovery rebuilds each
//! log's pending set (events minus `Done` entries, latest `Retry` schedule applied) and the pump
//! delivers those again: at least once, with the same event id.
//!
//! # Where events come from: memory, or the log
//!
//! A core's own log feeds the pump *from memory*: when the commit helper reports an ingest event
//! durable, the loop hands the event (already in memory: it just wrote it) to
//! [`PumpCore::on_durable`], which keeps it in a window of at most [`WINDOW_EVENTS`] events and
//! [`WINDOW_BYTES`] bytes. The log is read back ([`LogTail`]) only when that window overflows —
//! the pump then reads from the first event it has not admitted and switches back to memory once
//! it has caught up with the durable LSN — and after a restart, and for adopted logs. A read-back
//! that cannot be opened leaves the events pending in the log and is retried (`pump_source`).
//! Events of triggers without a handler are marked done straight from memory, with no read-back.
//!
//! # Backpressure
//!
//! At most `max_outstanding` jobs are out across all cores (one shared counter, [`Outstanding`];
//! a job's *dispatch slot*); an event a flow-control gate holds gives its slot back
//! (`JobOutcome::Held`) and holds one again once released (`Resumed`, the slot taken by the
//! dispatcher), and a trigger whose released events wait for slots at `[flow] max_held`
//! (`gate="dispatch"`) is parked like one at its window cap (`dispatch::flow`); a trigger with
//! gates is not parked at its cap but admitted without it (`Job::capless`: it takes the cap once
//! through its gates, so its keys keep their order). When `max_outstanding` is reached no log is
//! read: committed events wait in the window or the log, the durable backlog fills, and ingest
//! refuses with `queue_full`. Parking never stops a log (`pump_parked`): past the in-memory
//! bound an event is parked by reference and read back when its trigger has room, and a turn
//! parks at most [`PARK_PER_TURN`] events per log ([`PumpCore::more_to_read`] asks for the next
//! turn at once).
//!
//! Each turn the pump also reports what it has not yet handed to the gates for the core's order
//! horizon ([`PumpCore::publish_horizon`], `dispatch::horizon`).
//!
//! Bounds: jobs out ≤ `max_outstanding`; the window ≤ [`WINDOW_EVENTS`] / [`WINDOW_BYTES`];
//! parked events in memory ≤ [`WINDOW_EVENTS`] / [`WINDOW_BYTES`] per log, by reference past it
//! ([`REF_BYTES`] each, ≤ the log's pending events); records with the commit helper
//! ≤ [`MAX_RECORDS_IN_FLIGHT`] per log, of which at most one `Done` record (the outcomes that
//! arrive while it is being made durable are queued and go out together in the next one: a
//! `Done` record per commit, not per loop turn); `Done` entries queued ≤ [`MAX_DONE_ENTRIES`] per
//! log (admission stops there); `Retry` records queued ≤ one per outcome received; attempt
//! entries queued ≤ [`MAX_ATTEMPTS_QUEUED`] per log (more are counted, not written); writes
//! waiting for the shell ≤ those of one call (the shell takes them after each); dead letters
//! waiting for room in a full DLQ ≤ the events pending (each stays in its trigger's backlog
//! share, so a full DLQ refuses only the triggers whose events wait for it, but gives its
//! dispatch slot back: other triggers keep being dispatched); terminal outcomes awaiting their
//! `Done` record's commit < [`PumpCore::max_awaiting`] per pump at admission (below).
//!
//! # Redeliveries after a crash
//!
//! A job's dispatch slot comes back when its outcome arrives, not when the outcome's `Done`
//! record is durable: holding it through the group commit would stall dispatch whenever commits
//! are slow. So the events a crash can redeliver — sent, without a durable `Done` — are the
//! jobs out (≤ `max_outstanding`, all cores) plus the terminal outcomes awaiting their commit
//! (`awaiting`). Those have a bound of their own, `A = max(max_outstanding,`
//! [`MIN_AWAITING`]`)`: a pump admits nothing while its own reach `A` (outcomes of jobs already
//! out may still add to them, each moving out of the jobs out). So jobs out plus awaiting
//! outcomes stay below `max_outstanding + cores × A`: the documented bound on redeliveries per
//! crash. Dispatch pauses only when a core's commits fall `A` outcomes behind; the floor keeps a
//! small window (`max_outstanding = 1`) from waiting for each outcome's commit before the next
//! admission.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dispatch::dlq::DlqEntry;
use crate::dispatch::id_map::NumMap;
use crate::dispatch::job::Job;
use crate::dispatch::ledger::{LiveSnapshot, LiveState, PumpLedger};
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::outstanding::Outstanding;
use crate::dispatch::spec::DispatchSpec;
use crate::dispatch::trigger_caps::Slots;
use crate::wal::{
    AttemptEntry, DispatchRecovery, DoneEntry, EventRecord, Lsn, Record, RetryRecord, WalError,
};

pub(crate) mod source;
pub use source::{LogTail, REOPEN_FIRST_DELAY, REOPEN_MAX_DELAY, WINDOW_BYTES, WINDOW_EVENTS};
use source::{Opened, Source};

mod parked;
use parked::Parked;
pub use parked::REF_BYTES;

/// Most entries in one `Done` record.
pub const MAX_DONE_ENTRIES: usize = crate::wal::MAX_DONE_ENTRIES;
/// Most `Done`/`Retry` records per log with the commit helper.
pub const MAX_RECORDS_IN_FLIGHT: usize = 64;
/// Most attempt entries queued per log for its next `Attempts` records (four full records);
/// beyond it an entry is counted (`sluice_pump_attempts_unrecorded_total`) and not written.
pub const MAX_ATTEMPTS_QUEUED: usize = 4 * crate::wal::MAX_ATTEMPT_ENTRIES;
/// How often a DLQ write refused for lack of room is retried (clock nanos).
pub const DLQ_RETRY_EVERY: u64 = 1_000_000_000;
/// The least bound on a pump's outcomes awaiting their commit (module docs, "Redeliveries").
pub const MIN_AWAITING: usize = 64;
/// Most events one turn parks per log (`pump_parked`: parking never stops a log, so this keeps
/// a turn short; the pump asks for another turn at once, [`PumpCore::more_to_read`]).
pub const PARK_PER_TURN: usize = 1024;

/// What the pump reads and moves outside itself, supplied by the shell: the logs (read-back),
/// the durable-queue bound it gives room back to, and whether a trigger's flow-control gates
/// are full. Tests supply fakes. (The dispatch slots and the triggers' caps are dispatch's own:
/// [`Slots`].)
pub trait PumpEnv {
    type Tail: LogTail;
    /// Opens the log in `dir` for reading back from `from` (may fail: the descriptor limit;
    /// the pump then retries).
    fn open(&self, dir: &Path, from: Lsn) -> Result<Self::Tail, WalError>;
    /// Opens the log in `dir` at start-up, from its done cursor (a failure fails the start).
    fn open_at_start(&self, dir: &Path, from: Lsn) -> Result<Self::Tail, WalError> {
        self.open(dir, from)
    }
    /// The backlog slot of `trigger` (its share of the durable-queue bound).
    fn trigger_slot(&self, trigger: &str) -> usize;
    /// The slot the events recovered at start-up are counted in.
    fn recovered_slot(&self) -> usize;
    /// True while trigger `trigger`'s gates hold `[flow] max_held` events.
    fn gates_full(&self, trigger: &str) -> bool;
    /// The flow-gate cells of `trigger`, if it has some: an index that stays the trigger's for
    /// the run, which the pump keeps (`pump_triggers`). `None` (the default): the pump asks
    /// [`PumpEnv::gates_full`] by name.
    fn gate_cells(&self, _trigger: &str) -> Option<usize> {
        None
    }
    /// Whether the trigger of cells `t` ([`PumpEnv::gate_cells`]) has flow gates: then it is
    /// not parked at its dispatch cap (`Job::capless`) and its parked events hold the order
    /// horizon back.
    fn gated(&self, _t: usize) -> bool {
        false
    }
    /// True while the trigger of cells `t` ([`PumpEnv::gate_cells`]) holds `[flow] max_held`
    /// events.
    fn cells_full(&self, _t: usize) -> bool {
        false
    }
    /// `events` events of slot `slot` totalling `bytes` are done: their backlog room goes back.
    fn release_done(&self, slot: usize, events: u64, bytes: u64);
    /// Whether log `index` (its index in the run) accepts writes now: while it does not, the
    /// pump stages no record for it (the log's probe is its only retry, `wal::Wal::tick`), and
    /// its records wait in their queues.
    fn writable(&self, _index: usize) -> bool {
        true
    }
}

/// Where a trigger's events go: each trigger's destination id, each destination's owner core.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Trigger id → destination id (`None`: no handler).
    pub handlers: Vec<(String, Option<usize>)>,
    /// By destination id (every generation's ids, `ops::reload::ids`): owner core and URI.
    pub destinations: Vec<Route>,
    /// The default route's trigger id: its events have no handler by design (not reported).
    pub default_trigger: &'static str,
}

impl Routes {
    /// The routes of a configuration generation's dispatch spec: each trigger's destination
    /// id, each destination's owner core (`placement::owner_core` over `spec.workers`).
    /// `default_trigger` is the default route's trigger id (ingest's; the caller names it).
    pub fn from_spec(spec: &DispatchSpec, default_trigger: &'static str) -> Routes {
        let owner = |uri: &str| crate::dispatch::placement::owner_core(uri, spec.workers);
        Routes {
            handlers: (spec.triggers.iter())
                .map(|t| (t.id.clone(), t.dest))
                .collect(),
            destinations: (spec.destinations.iter())
                .map(|d| Route {
                    owner: owner(&d.handler.uri),
                    uri: d.handler.uri.clone(),
                })
                .collect(),
            default_trigger,
        }
    }
}

/// One destination as the pump sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The core whose dispatcher owns its connections.
    pub owner: usize,
    pub uri: String,
}

/// What the pump asks the commit helper to make durable; each answer comes back by ticket
/// ([`PumpCore::on_record_done`], [`PumpCore::on_dead_letter_done`]).
#[derive(Debug)]
pub enum Write {
    /// A `Done` or `Retry` record for the pump's log at position `log`.
    Record {
        log: usize,
        ticket: u64,
        record: Record,
    },
    /// A dead letter.
    DeadLetter { ticket: u64, entry: DlqEntry },
}

/// A log handed to a core's pump at start-up.
#[derive(Debug)]
pub struct PumpLog {
    /// Index in the run's logs (the key prefix).
    pub index: usize,
    pub name: String,
    pub dir: PathBuf,
    /// Whether new events are appended to it (the core's own log).
    pub own: bool,
    pub durable: Lsn,
    pub recovered: DispatchRecovery,
}

/// An admitted event not yet made done.
#[derive(Debug, Clone)]
struct Live {
    cost: u64,
    /// Its backlog slot (its trigger's, or the recovered events'), released when it is done.
    slot: usize,
    /// The trigger slot whose dispatch-window cap it holds while `outstanding`.
    window: Option<usize>,
    received_at_ms: u64,
    /// It holds a dispatch slot.
    outstanding: bool,
    /// Its trigger's row in the pump's ledger.
    trigger: usize,
    /// The flow gate that holds it (from `Held` until `Resumed`).
    held: Option<&'static str>,
}

/// One log the core owns.
#[derive(Debug)]
struct LogState<T> {
    index: usize,
    name: String,
    /// Its directory, shared with the jobs (a gate may read a held event back from it).
    dir: Arc<Path>,
    own: bool,
    /// Highest LSN known durable in this log.
    durable: Lsn,
    source: Source<T>,
    recovered: DispatchRecovery,
    live: BTreeMap<Lsn, Live>,
    /// Events set aside because their trigger is at its cap (module `pump_parked`).
    parked: Parked,
    /// Where the last read-back of an event parked by reference stopped (`pump_parked`).
    parked_reader: Option<T>,
    /// Clock nanos before which no parked event of this log is admitted (a read-back failed).
    parked_retry_at: u64,
    /// The order time of the last event read back from the log (`dispatch::horizon`): those
    /// not yet read are no older.
    last_read: u64,
    done_queue: Vec<DoneEntry>,
    retry_queue: VecDeque<RetryRecord>,
    /// Attempt entries for the next `Attempts` record (≤ [`MAX_ATTEMPTS_QUEUED`]).
    attempt_queue: Vec<AttemptEntry>,
    records_in_flight: usize,
    /// A `Done` record of this log is with the commit helper: the entries queued meanwhile
    /// wait for it to be durable and go out together in the next one.
    done_in_flight: bool,
}

impl<T> LogState<T> {
    /// A log whose events not yet admitted come from `source`.
    fn new(l: PumpLog, source: Source<T>) -> LogState<T> {
        LogState {
            index: l.index,
            name: l.name,
            dir: l.dir.as_path().into(),
            own: l.own,
            durable: l.durable,
            source,
            recovered: l.recovered,
            live: BTreeMap::new(),
            parked: Parked::default(),
            parked_reader: None,
            parked_retry_at: 0,
            last_read: 0,
            done_queue: Vec::new(),
            retry_queue: VecDeque::new(),
            attempt_queue: Vec::new(),
            records_in_flight: 0,
            done_in_flight: false,
        }
    }
}

impl<T: LogTail> LogState<T> {
    /// The next event not yet admitted, if one is durable.
    /// The next event not yet admitted, with its trigger's row if it has one already (an event
    /// from memory: `PumpCore::on_durable`); one read back gets it at admission.
    fn next_event(&mut self) -> Result<Option<(Lsn, EventRecord, Option<usize>)>, WalError> {
        match &mut self.source {
            Source::Memory { events, bytes } => Ok(events.pop_front().map(|(lsn, ev, row)| {
                *bytes -= crate::wal::event_cost(&ev);
                (lsn, ev, Some(row))
            })),
            Source::Log(tail) => loop {
                match tail.next(self.durable)? {
                    Some((lsn, Record::Event(ev))) => {
                        let at = crate::dispatch::horizon::order_time(&ev.event_id);
                        self.last_read = at.unwrap_or(self.last_read);
                        return Ok(Some((lsn, ev, None)));
                    }
                    Some(_) => continue,
                    None => {
                        if self.own && tail.next_lsn() > self.durable {
                            // Caught up: from now on durable events arrive from memory.
                            self.source = Source::Memory {
                                events: VecDeque::new(),
                                bytes: 0,
                            };
                        }
                        return Ok(None);
                    }
                }
            },
            // Pending in the log until it can be opened (`PumpCore::reopen`).
            Source::Reopen(_) => Ok(None),
        }
    }

    /// The lowest LSN whose record may still be needed: the done cursor.
    fn cursor(&self) -> Lsn {
        let unadmitted = self.source.unadmitted(self.durable);
        let parked = self
            .parked
            .first_lsn()
            .map_or(unadmitted, |p| p.min(unadmitted));
        self.live
            .keys()
            .next()
            .copied()
            .map_or(parked, |l| l.min(parked))
    }

    /// The least order time of the events of this log not yet handed over (`dispatch::horizon`):
    /// in the window, not yet read back, or parked for a gated trigger.
    fn unhanded(&self) -> Option<u64> {
        let source = match &self.source {
            Source::Memory { events, .. } => events
                .front()
                .map(|e| crate::dispatch::horizon::order_time(&e.1.event_id).unwrap_or(0)),
            // Caught up: nothing left to read until the durable LSN moves.
            Source::Log(tail) if tail.next_lsn() > self.durable => None,
            Source::Log(_) | Source::Reopen(_) => Some(self.last_read),
        };
        match (source, self.parked.first_ordered()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every event recovered at start-up has been read (admitted, done or parked).
    fn recovered_read(&self) -> bool {
        match &self.source {
            Source::Memory { .. } => true,
            Source::Log(tail) => tail.next_lsn() >= self.recovered.next_lsn,
            // Its read-back waits for a retry: recovered events from `from` on are unread.
            Source::Reopen(r) => r.from >= self.recovered.next_lsn,
        }
    }
}

#[derive(Debug)]
enum Ticket {
    /// A `Done` (entries) or `Retry` (no entries) record in log slot `slot`.
    Record {
        slot: usize,
        entries: Vec<DoneEntry>,
    },
    /// A dead letter for the event `key`.
    DeadLetter { key: u64, attempts: u32 },
    /// An `Attempts` record of `entries` entries in log slot `slot`.
    Attempts { slot: usize, entries: usize },
}

/// What admitting one event came to.
#[derive(Debug)]
enum Admit {
    /// A job for its destination's owner core (it holds a dispatch slot).
    Job((usize, Job)),
    /// Nothing to dispatch (no handler, or done before a restart).
    Done,
    /// Its trigger is at its cap: set aside, with its trigger's row and cap slot.
    Park(Lsn, EventRecord, usize, usize),
}

/// The pump of one core (module docs).
#[derive(Debug)]
pub struct PumpCore<E: PumpEnv> {
    core: usize,
    env: E,
    metrics: Arc<DispatchMetrics>,
    /// The dispatch slots (`max_outstanding`) and the triggers' caps, shared by every core.
    slots: Slots,
    logs: Vec<LogState<E::Tail>>,
    /// Log index → position in `logs`.
    slot_of: HashMap<usize, usize>,
    /// Each trigger's destination, cap slot, backlog slot and gate cells, by ledger row
    /// (`pump_triggers`).
    triggers: Triggers,
    routes: Routes,
    /// Dead letters the DLQ refused (full, or an I/O error): retried every
    /// [`DLQ_RETRY_EVERY`]; pending in their trigger's backlog share, without a dispatch slot.
    dlq_waiting: VecDeque<(DlqEntry, u32, u64)>,
    /// Clock nanos of the next DLQ retry.
    dlq_retry_at: u64,
    /// The pump's items with the commit helper: ticket → what it carries.
    tickets: NumMap<u64, Ticket>,
    seq: u64,
    /// Terminal outcomes (not `no_handler`) whose `Done` entry is queued or with the commit
    /// helper; admission pauses at [`PumpCore::max_awaiting`] (module docs, "Redeliveries").
    awaiting: usize,
    /// Events made done since the shell last asked ([`PumpCore::take_drained`]).
    drained: u64,
    /// This pump finished its part of `outstanding.handover`.
    handed_over: bool,
    /// The order time of the newest ingest event made durable in the own log.
    last_durable_at: u64,
    /// The horizon this core last published, while it works (`None`: idle, `dispatch::horizon`).
    horizon_floor: Option<u64>,
    /// Parked events by reference and bytes in memory, over this pump's logs, as last added
    /// to the shared gauges (`TriggerCaps::note_parked_memory`).
    parked_published: (usize, u64),
    /// The last turn stopped reading a log at [`PARK_PER_TURN`]: the next turn should come at
    /// once.
    more_to_read: bool,
    /// Writes for the shell to hand to the commit helper ([`PumpCore::take_writes`]).
    writes: Vec<Write>,
    /// Cores to wake (bit `k` = core `k`): they wait for a dispatch slot.
    wake: u64,
    /// The event ledger of this pump's logs (`dispatch::ledger`), published to the metrics.
    ledger: PumpLedger,
}

impl<E: PumpEnv> PumpCore<E> {
    /// The pump of core `core` over `logs`, each read back from its done cursor.
    pub fn new(
        core: usize,
        env: E,
        metrics: Arc<DispatchMetrics>,
        slots: Slots,
        logs: Vec<PumpLog>,
        routes: Routes,
    ) -> Result<PumpCore<E>, WalError> {
        let mut states = Vec::new();
        let mut slot_of = HashMap::new();
        let ledger = PumpLedger::recovered(logs.iter().map(|l| (l.index, &l.recovered.ledger)));
        for (slot, l) in logs.into_iter().enumerate() {
            slot_of.insert(l.index, slot);
            let tail = env.open_at_start(&l.dir, l.recovered.done_cursor)?;
            states.push(LogState::new(l, Source::Log(tail)));
        }
        // A pump whose logs recovered no pending event has nothing to hand over: it does not
        // take part, so a fresh start holds no gate (the flow gates wait only for pumps that
        // registered, before any loop turns).
        let nothing_pending = states.iter().all(|l| l.recovered.pending.is_empty());
        if !nothing_pending {
            slots.window.handover.register();
        }
        let mut pump = PumpCore {
            core,
            env,
            metrics,
            slots,
            logs: states,
            slot_of,
            triggers: Triggers::new(),
            routes: Routes::default(),
            dlq_waiting: VecDeque::new(),
            dlq_retry_at: 0,
            tickets: NumMap::default(),
            seq: 0,
            awaiting: 0,
            drained: 0,
            handed_over: nothing_pending,
            more_to_read: false,
            parked_published: (0, 0),
            last_durable_at: 0,
            horizon_floor: None,
            writes: Vec::new(),
            wake: 0,
            ledger,
        };
        pump.learn_routes(routes);
        // What recovery counted is published now, before the node is ready (the runtime builds
        // the pumps first): a scrape or a ledger read never sees this core's logs missing,
        // which would read as a counter reset.
        let board = &pump.metrics.ledger;
        pump.ledger.publish_if_due(board, core, 0);
        board.publish_live(core, pump.live_snapshot());
        Ok(pump)
    }

    /// A configuration generation's routes (`ops::reload`). A trigger the new generation no
    /// longer names keeps its last destination (whose id and settings the generation keeps,
    /// `ops::reload::ids`), so its events accepted before the reload are still delivered.
    pub fn learn_routes(&mut self, routes: Routes) {
        self.triggers
            .learn(&routes.handlers, routes.default_trigger);
        self.routes = routes;
    }

    /// A log adopted while the node runs (another node's, rebuilt from the replication stream:
    /// `sched::logs::adopt`): read back from its done cursor like a log adopted at start-up, its
    /// recovered tallies added to this pump's ledger. It takes the next position, which is also
    /// its slot with the core's commit helper (`wal::commit::Committer::adopt`). Nothing is
    /// ingested into it. The start-up hand-over is over by then: its events go through the
    /// gates as the pump reads them. A read-back that cannot be opened is retried with backoff
    /// as any (`pump_source`). `now`: clock nanos.
    pub fn adopt(&mut self, l: PumpLog, now: u64) {
        let slot = self.logs.len();
        let from = l.recovered.done_cursor;
        self.ledger.add_log(l.index, &l.recovered.ledger);
        self.slot_of.insert(l.index, slot);
        let empty = Source::Memory {
            events: VecDeque::new(),
            bytes: 0,
        };
        self.logs.push(LogState::new(l, empty));
        let log = &mut self.logs[slot];
        let (env, dir) = (&self.env, &log.dir);
        let opened = log.source.read_back(|f| env.open(dir, f), from, now);
        self.note_read_back(slot, opened);
    }

    /// The environment (the shell's, to follow the logs it adds).
    pub fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }

    /// The bound on this pump's outcomes awaiting their commit: `max(max_outstanding,`
    /// [`MIN_AWAITING`]`)` (module docs, "Redeliveries").
    pub fn max_awaiting(&self) -> usize {
        (self.slots.window.max() as usize).max(MIN_AWAITING)
    }

    /// Terminal outcomes awaiting their commit (bounded by [`PumpCore::max_awaiting`]).
    pub fn awaiting(&self) -> usize {
        self.awaiting
    }

    /// The shared dispatch-slot counter.
    pub fn outstanding(&self) -> &Arc<Outstanding> {
        &self.slots.window
    }

    /// The dispatch slots and the triggers' caps (the dispatchers take from the same).
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The writes for the commit helper produced since the last call, in order.
    pub fn take_writes(&mut self) -> std::vec::Drain<'_, Write> {
        self.writes.drain(..)
    }

    /// The cores to wake (bit `k` = core `k`) since the last call: dispatch slots came back.
    pub fn take_wakes(&mut self) -> u64 {
        std::mem::take(&mut self.wake)
    }

    /// Events made done since the last call (the drain rate).
    pub fn take_drained(&mut self) -> u64 {
        std::mem::take(&mut self.drained)
    }

    /// The pump's logs: (log index, directory, done cursor), by position.
    pub fn cursors(&self) -> impl Iterator<Item = (usize, &Path, Lsn)> + '_ {
        self.logs.iter().map(|l| (l.index, &*l.dir, l.cursor()))
    }

    /// Log `index`'s retired counts, as its commit helper last published them (the ledger's
    /// `retired`; [`PumpLedger::fold_retired`]).
    pub fn fold_retired(&mut self, index: usize, counts: &[(String, u64)]) {
        self.ledger.fold_retired(index, counts);
    }

    /// `received_at_ms` of the oldest event admitted and not yet done.
    pub fn oldest_received_at(&self) -> Option<u64> {
        self.logs
            .iter()
            .filter_map(|l| l.live.first_key_value().map(|(_, v)| v.received_at_ms))
            .min()
    }

    /// An ingest event of the core's own log (position 0) is durable at `lsn`; the loop hands
    /// over the event it wrote. `now`: clock nanos.
    pub fn on_durable(&mut self, lsn: Lsn, event: EventRecord, now: u64) {
        if let Some(at) = crate::dispatch::horizon::order_time(&event.event_id) {
            self.last_durable_at = self.last_durable_at.max(at);
        }
        let trigger = self.ledger.slot(&event.trigger_id);
        self.ledger.accepted(trigger);
        let log = &mut self.logs[0];
        log.durable = log.durable.max(lsn);
        if let Source::Memory { events, bytes } = &mut log.source {
            let cost = crate::wal::event_cost(&event);
            if events.len() < WINDOW_EVENTS && *bytes + cost <= WINDOW_BYTES {
                events.push_back((lsn, event, trigger));
                *bytes += cost;
                return;
            }
            // The window is full: the events not yet admitted are read back from the log.
            self.metrics.window_overflowed();
            let from = events.front().map_or(lsn, |e| e.0);
            let (env, dir) = (&self.env, &log.dir);
            let opened = log.source.read_back(|f| env.open(dir, f), from, now);
            self.note_read_back(0, opened);
        }
    }

    /// Retries the read-backs that could not be opened, when their backoff has passed.
    fn reopen(&mut self, now: u64) {
        for slot in 0..self.logs.len() {
            let log = &mut self.logs[slot];
            let (env, dir) = (&self.env, &log.dir);
            if let Some(opened) = log.source.retry_open(|f| env.open(dir, f), now) {
                self.note_read_back(slot, opened);
            }
        }
    }

    /// Counts a failed read-back open; logs the first failure of a run and its end.
    fn note_read_back(&self, slot: usize, opened: Opened) {
        let dir = &self.logs[slot].dir;
        match opened {
            Opened::No { error, first } => {
                self.metrics.readback_open_failed();
                if first {
                    eprintln!(
                        "sluice: pump: reading {} back: {error} (its events stay pending; \
                         retried with backoff up to every second)",
                        dir.display()
                    );
                }
            }
            Opened::Yes { failures } if failures > 0 => eprintln!(
                "sluice: pump: reading {} back again after {failures} failed opens",
                dir.display()
            ),
            Opened::Yes { .. } => {}
        }
    }

    /// One turn: DLQ retries, read-back retries, admission, records. `now` is the loop turn's
    /// reading of the injected clock (nanos). Jobs admitted are pushed to `jobs` as
    /// `(owner core, job)`; nothing is admitted while `draining`.
    pub fn turn(&mut self, now: u64, draining: bool, jobs: &mut Vec<(usize, Job)>) {
        self.retry_dead_letters(now);
        self.reopen(now);
        if !draining {
            self.admit(jobs, now);
            self.publish_parked();
        }
        self.flush_records();
        let board = &self.metrics.ledger;
        if self.ledger.publish_if_due(board, self.core, now) {
            board.publish_live(self.core, self.live_snapshot());
        }
    }

    /// What this pump's live events are doing, per log: dispatched (`InFlight`) or held by a
    /// gate (`Held`); the others (waiting for their commit, or for room in the DLQ) are left
    /// out.
    fn live_snapshot(&self) -> LiveSnapshot {
        let state = |l: &Live| match (l.outstanding, l.held) {
            (true, _) => Some(LiveState::InFlight),
            (false, Some(gate)) => Some(LiveState::Held(gate)),
            (false, None) => None,
        };
        let per_log = |log: &LogState<E::Tail>| {
            let lsns = log
                .live
                .iter()
                .filter_map(|(lsn, l)| Some((*lsn, state(l)?)));
            (log.name.clone(), lsns.collect())
        };
        self.logs.iter().map(per_log).collect()
    }

    /// This core's order horizon (`dispatch::horizon`) at the end of a turn, published for
    /// every core's gates. `ingest`: what ingest holds — `None` when nothing is staged, in
    /// flight or waiting for room; `Some(0)` while a connection waits for room (the horizon
    /// stays); else the newest durable event's order time, below which none of its events in
    /// flight can be. `links`: the least order time of the jobs still waiting for room in a
    /// ring. Holding nothing, the core publishes `IDLE`.
    pub fn publish_horizon(&mut self, ingest: Option<u64>, links: Option<u64>) {
        let order = &self.slots.window.order;
        let mut least = ingest;
        for l in &self.logs {
            least = match (least, l.unhanded()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        least = match (least, links) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match least {
            None => {
                self.horizon_floor = None;
                order.publish(self.core, crate::dispatch::horizon::IDLE);
            }
            Some(h) => {
                let h = self.horizon_floor.map_or(h, |f| f.max(h));
                self.horizon_floor = Some(h);
                order.publish(self.core, h);
            }
        }
    }

    /// The loop woke: if this core was idle it publishes 0, then reads the clock (`unix_us`,
    /// read by the caller after this returns true) as its new floor ([`PumpCore::set_floor`]).
    pub fn wake_horizon(&mut self) -> bool {
        if self.horizon_floor.is_some() {
            return false;
        }
        self.slots.window.order.publish(self.core, 0);
        true
    }

    /// Every id this core mints from now on is no older than `at` (order time).
    pub fn set_floor(&mut self, at: u64) {
        self.horizon_floor = Some(at);
    }

    /// The order time of the newest ingest event made durable in the core's own log.
    pub fn last_durable_at(&self) -> u64 {
        self.last_durable_at
    }

    /// Moves the shared parked gauges by what this pump's logs changed since the last turn.
    fn publish_parked(&mut self) {
        let refs = self.logs.iter().map(|l| l.parked.refs()).sum::<usize>();
        let bytes = self.logs.iter().map(|l| l.parked.bytes()).sum::<u64>();
        let (r0, b0) = self.parked_published;
        if (refs, bytes) != (r0, b0) {
            let caps = &self.slots.caps;
            caps.note_parked_memory(refs as i64 - r0 as i64, bytes as i64 - b0 as i64);
            self.parked_published = (refs, bytes);
        }
    }

    /// The last turn left events to read that it could have admitted or parked: the loop
    /// should turn again without sleeping.
    pub fn more_to_read(&self) -> bool {
        self.more_to_read
    }

    /// Called once the jobs this pump admitted are in the other cores' rings: when every event
    /// recovered from this pump's logs has been read, finishes this pump's part of the start-up
    /// hand-over, once. True when it was the last pump: every core is to be woken, whose flow
    /// gates then release the recovered waiters in acceptance order (`dispatch::flow`
    /// "Restarts").
    pub fn handed_over(&mut self) -> bool {
        if self.handed_over || !self.logs.iter().all(LogState::recovered_read) {
            return false;
        }
        self.handed_over = true;
        self.slots.window.handover.finish()
    }

    /// True when nothing is queued for or with the commit helper.
    pub fn is_flushed(&self) -> bool {
        self.tickets.is_empty()
            && self.writes.is_empty()
            && self.logs.iter().all(|l| {
                l.done_queue.is_empty() && l.retry_queue.is_empty() && l.attempt_queue.is_empty()
            })
    }

    /// Gives a dispatch slot back; the cores that wait for one are woken by the shell.
    fn release_slot(&mut self) {
        self.wake |= self.slots.window.release();
    }

    fn ticket(&mut self, t: Ticket) -> u64 {
        self.seq += 1;
        // The pump's own numbering: its items are told apart by their owner
        // (`wal::group::Owner::Pump`), not by the ticket.
        let ticket = self.seq;
        self.tickets.insert(ticket, t);
        ticket
    }
}

mod admit;
mod outcome;
mod pump_attempts;
mod triggers;
use triggers::Triggers;

pub mod shell;
#[cfg(all(test, not(sluice_loom)))]
mod tests;
