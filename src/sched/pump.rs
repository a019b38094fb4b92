//! The pump, per core: turns the durable events of the logs a core owns into jobs for their
//! destinations' owner cores, and the jobs' outcomes into durable records in the same logs.
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
//! durable, the loop hands the event (already in memory: it just wrote it) to [`CorePump::
//! on_durable`], which keeps it in a window of at most [`WINDOW_EVENTS`] events and
//! [`WINDOW_BYTES`] bytes. The log is read back ([`WalTail`]) only when that window overflows —
//! the pump then reads from the first event it has not admitted and switches back to memory once
//! it has caught up with the durable LSN — and after a restart, and for adopted logs. Events of
//! triggers without a handler are marked done straight from memory, with no read-back.
//!
//! # Backpressure
//!
//! At most `max_outstanding` jobs are out across all cores (one shared counter, [`Outstanding`]);
//! an event a flow-control gate holds gives its slot back (`JobOutcome::Held`) and holds one
//! again once released (`Resumed`, the slot taken by the dispatcher), and a trigger whose gates
//! hold `[flow] max_held` events is parked like one at its window cap (`dispatch::flow`).
//! When it is reached no log is read: committed events wait in the window or the log, the
//! [`Backlog`](crate::ingest::backlog::Backlog) fills, and ingest refuses with `queue_full`.
//!
//! Bounds: jobs out ≤ `max_outstanding`; the window ≤ [`WINDOW_EVENTS`] / [`WINDOW_BYTES`];
//! records with the commit helper ≤ [`MAX_RECORDS_IN_FLIGHT`] per log, of which at most one
//! `Done` record (the outcomes that arrive while it is being made durable are queued and go out
//! together in the next one: a `Done` record per commit, not per loop turn); `Done` entries
//! queued ≤ [`MAX_DONE_ENTRIES`] per log (admission stops there); `Retry` records queued ≤ one per outcome
//! received; dead letters waiting for room in a full DLQ ≤ the events pending (each stays in its
//! trigger's backlog share, so a full DLQ refuses only the triggers whose events wait for it,
//! but gives its `max_outstanding` slot back: other triggers keep being dispatched).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use crate::dispatch::dlq::{DlqEntry, DlqError};
use crate::dispatch::job::{Job, JobOutcome};
pub use crate::dispatch::outstanding::Outstanding;
use crate::sched::commit::{Committer, Item};
use crate::sched::logs::{event_key, split_key};
use crate::sched::pump_source::{Opened, Source};
use crate::sched::state::Shared;
use crate::wal::{
    AppendOutcome, DispatchRecovery, DoneEntry, DoneRecord, DoneStatus, EventRecord, Lsn, Record,
    RetryRecord, WalError, WalTail,
};

/// Most entries in one `Done` record.
pub const MAX_DONE_ENTRIES: usize = crate::wal::MAX_DONE_ENTRIES;
/// Most durable events of a core's own log kept in memory for dispatch.
pub const WINDOW_EVENTS: usize = 4096;
/// Most bytes (record cost) of the events in the window.
pub const WINDOW_BYTES: u64 = 64 << 20;
/// Most `Done`/`Retry` records per log with the commit helper.
pub const MAX_RECORDS_IN_FLIGHT: usize = 64;
/// How often a DLQ write refused for lack of room is retried (clock nanos).
const DLQ_RETRY_EVERY: u64 = 1_000_000_000;
/// How often retention and the disk measurement run (clock nanos).
const RETAIN_EVERY: u64 = 5_000_000_000;
/// How often core 0's pump folds the drained events into the drain rates (clock nanos).
const TICK_EVERY: u64 = 1_000_000_000;
/// Tickets of the pump's own items carry this bit (ingest tickets never do).
pub const PUMP_TICKET: u64 = 1 << 63;

/// An admitted event not yet made done.
#[derive(Debug, Clone)]
struct Live {
    cost: u64,
    /// Its backlog slot (its trigger's, or the recovered events'), released when it is done.
    slot: usize,
    /// The trigger slot whose dispatch-window cap it holds while `outstanding`.
    window: Option<usize>,
    received_at_ms: u64,
    outstanding: bool,
}

/// One log the core owns.
#[derive(Debug)]
struct LogPump {
    /// Index in the run's logs (the key prefix).
    index: usize,
    name: String,
    dir: PathBuf,
    /// `dir`, shared with the jobs (a gate may read a held event back from it).
    dir_shared: Arc<std::path::Path>,
    /// Whether new events are appended to it (the core's own log).
    own: bool,
    /// Highest LSN known durable in this log.
    durable: Lsn,
    source: Source,
    recovered: DispatchRecovery,
    live: BTreeMap<Lsn, Live>,
    /// Durable events set aside because their trigger held its dispatch-window cap, in LSN
    /// order, with their trigger slot; ≤ [`WINDOW_EVENTS`] / [`WINDOW_BYTES`] (then the log
    /// is not read further until some are admitted).
    parked: VecDeque<(Lsn, EventRecord, usize)>,
    parked_bytes: u64,
    done_queue: Vec<DoneEntry>,
    retry_queue: VecDeque<RetryRecord>,
    records_in_flight: usize,
    /// A `Done` record of this log is with the commit helper: the entries queued meanwhile
    /// wait for it to be durable and go out together in the next one (one `Done` record per
    /// commit rather than one per loop turn).
    done_in_flight: bool,
    /// Bytes of segments on disk at the last measurement.
    disk_bytes: u64,
}

impl LogPump {
    /// The next event not yet admitted, if one is durable.
    fn next_event(&mut self) -> Result<Option<(Lsn, EventRecord)>, WalError> {
        match &mut self.source {
            Source::Memory { events, bytes } => Ok(events.pop_front().map(|(lsn, ev)| {
                *bytes -= crate::wal::event_cost(&ev);
                (lsn, ev)
            })),
            Source::Log(tail) => loop {
                match tail.next(self.durable)? {
                    Some((lsn, Record::Event(ev))) => return Ok(Some((lsn, ev))),
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
            // Pending in the log until it can be opened (`CorePump::reopen`).
            Source::Reopen(_) => Ok(None),
        }
    }

    /// The lowest LSN whose record may still be needed: the done cursor.
    fn cursor(&self) -> Lsn {
        let unadmitted = self.source.unadmitted(self.durable);
        let parked = self
            .parked
            .front()
            .map_or(unadmitted, |p| p.0.min(unadmitted));
        self.live
            .keys()
            .next()
            .copied()
            .map_or(parked, |l| l.min(parked))
    }

    /// True when no more events may be set aside.
    fn parked_full(&self) -> bool {
        self.parked.len() >= WINDOW_EVENTS || self.parked_bytes >= WINDOW_BYTES
    }
}

/// The pump of one core.
#[derive(Debug)]
pub struct CorePump {
    core: usize,
    workers: usize,
    shared: Arc<Shared>,
    logs: Vec<LogPump>,
    /// Log index → slot in `logs`, for the logs this core owns.
    slot_of: HashMap<usize, usize>,
    outstanding: Arc<Outstanding>,
    /// Every core's waker, by core (cores waiting for an outstanding slot are woken).
    wakers: Vec<Arc<mio::Waker>>,
    /// Trigger id → destination id (None: no handler); a trigger a reload removed keeps its
    /// last one (one entry per trigger id configured during the run).
    handlers: HashMap<String, Option<usize>>,
    /// The configuration generation this core runs: its `destinations` are indexed by
    /// destination id (`ops::reload_ids`), removed ones included.
    config: Arc<crate::config::Config>,
    /// Trigger ids of events found without a destination, already reported (see
    /// `unknown_trigger`).
    unknown: std::collections::HashSet<String>,
    /// Dead letters the DLQ refused (full, or an I/O error): retried every second; pending in
    /// their trigger's backlog share, no longer holding a `max_outstanding` slot.
    dlq_waiting: VecDeque<(DlqEntry, u32, u64)>,
    /// Timers on the injected clock (`Shared::clock`, nanos), never on the wall clock: a wall
    /// clock step must not stall or rush them, nor skew the drain rate.
    dlq_retry_at: u64,
    /// The pump's items with the commit helper: ticket → what it carries.
    tickets: HashMap<u64, Ticket>,
    seq: u64,
    drained_total: u64,
    tick_at: u64,
    drained_at_tick: u64,
    retain_at: u64,
    /// This pump finished its part of `outstanding.handover` ([`CorePump::handed_over`]).
    handed_over: bool,
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
}

/// What admitting one event came to.
#[derive(Debug)]
enum Admit {
    /// A job for its destination's owner core (it holds an outstanding slot).
    Job((usize, Job)),
    /// Nothing to dispatch (no handler, or done before a restart).
    Done,
    /// Its trigger holds its dispatch-window cap: set aside, with its trigger slot.
    Park(Lsn, EventRecord, usize),
}

/// A log handed to a core's pump at start-up.
#[derive(Debug)]
pub struct PumpLog {
    pub index: usize,
    pub name: String,
    pub dir: PathBuf,
    pub own: bool,
    pub durable: Lsn,
    pub recovered: DispatchRecovery,
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
        let handlers = shared
            .config
            .triggers
            .iter()
            .map(|t| (t.id.clone(), t.handler))
            .collect();
        let mut pumps = Vec::new();
        let mut slot_of = HashMap::new();
        for (slot, l) in logs.into_iter().enumerate() {
            slot_of.insert(l.index, slot);
            let tail = WalTail::open(&l.dir, l.recovered.done_cursor)?;
            pumps.push(LogPump {
                index: l.index,
                name: l.name,
                dir_shared: l.dir.as_path().into(),
                dir: l.dir,
                own: l.own,
                durable: l.durable,
                source: Source::Log(tail),
                recovered: l.recovered,
                live: BTreeMap::new(),
                parked: VecDeque::new(),
                parked_bytes: 0,
                done_queue: Vec::new(),
                retry_queue: VecDeque::new(),
                records_in_flight: 0,
                done_in_flight: false,
                disk_bytes: 0,
            });
        }
        // A pump whose logs recovered no pending event has nothing to hand over: it does not
        // take part, so a fresh start holds no gate (the flow gates wait only for pumps that
        // registered, before any loop turns).
        let nothing_pending = pumps.iter().all(|l| l.recovered.pending.is_empty());
        if !nothing_pending {
            outstanding.handover.register();
        }
        Ok(CorePump {
            handed_over: nothing_pending,
            config: Arc::clone(&shared.config),
            unknown: Default::default(),
            core,
            workers: shared.config.server.workers,
            shared,
            logs: pumps,
            slot_of,
            outstanding,
            wakers,
            handlers,
            dlq_waiting: VecDeque::new(),
            dlq_retry_at: 0,
            tickets: HashMap::new(),
            seq: 0,
            drained_total: 0,
            tick_at: now,
            drained_at_tick: 0,
            retain_at: 0,
        })
    }

    /// The shared dispatch window (the dispatcher takes slots for gate-released jobs).
    pub fn slots(&self) -> crate::dispatch::dispatcher::Slots {
        crate::dispatch::dispatcher::Slots {
            window: self.outstanding.clone(),
            backlog: self.shared.backlog.clone(),
        }
    }

    /// An ingest event of the core's own log (slot 0) is durable at `lsn`; the loop hands over
    /// the event it wrote.
    pub fn on_durable(&mut self, lsn: Lsn, event: EventRecord) {
        let log = &mut self.logs[0];
        log.durable = log.durable.max(lsn);
        if let Source::Memory { events, bytes } = &mut log.source {
            let cost = crate::wal::event_cost(&event);
            if events.len() < WINDOW_EVENTS && *bytes + cost <= WINDOW_BYTES {
                events.push_back((lsn, event));
                *bytes += cost;
                return;
            }
            // The window is full: the events not yet admitted are read back from the log.
            self.shared.metrics_dispatch.window_overflowed();
            let from = events.front().map_or(lsn, |e| e.0);
            let now = self.shared.clock.now_nanos();
            let opened = log.source.read_back(&log.dir, from, now);
            self.note_read_back(0, opened);
        }
    }

    /// Retries the read-backs that could not be opened, when their backoff has passed.
    fn reopen(&mut self, now: u64) {
        for slot in 0..self.logs.len() {
            let log = &mut self.logs[slot];
            if let Some(opened) = log.source.retry_open(&log.dir, now) {
                self.note_read_back(slot, opened);
            }
        }
    }

    /// Counts a failed read-back open; logs the first failure of a run and its end.
    fn note_read_back(&self, slot: usize, opened: Opened) {
        let log = &self.logs[slot];
        match opened {
            Opened::No { error, first } => {
                self.shared.metrics_dispatch.readback_open_failed();
                if first {
                    eprintln!(
                        "sluice: pump: reading {} back: {error} (its events stay pending; \
                         retried with backoff up to every second)",
                        log.dir.display()
                    );
                }
            }
            Opened::Yes { failures } if failures > 0 => eprintln!(
                "sluice: pump: reading {} back again after {failures} failed opens",
                log.dir.display()
            ),
            Opened::Yes { .. } => {}
        }
    }

    /// One turn: outcomes of the pump's items, admission, records, timers. `now` is the loop
    /// turn's reading of the injected clock (nanos; the timers run on it). Jobs admitted are
    /// pushed to `jobs` as `(owner core, job)`.
    pub fn turn(
        &mut self,
        now: u64,
        draining: bool,
        committer: &mut Committer,
        jobs: &mut Vec<(usize, Job)>,
    ) {
        self.retry_dead_letters(now, committer);
        self.reopen(now);
        if !draining {
            self.admit(jobs);
        }
        self.flush_records(committer);
        self.tick(now);
        self.retain(now);
    }

    /// Called by the loop once the jobs this pump admitted are in the other cores' rings: when
    /// every event recovered from this pump's logs has been read (admitted, done or parked),
    /// finishes this pump's part of the start-up hand-over, once; the last pump wakes every
    /// core, whose flow gates then release the recovered waiters in acceptance order
    /// (`dispatch::flow` "Restarts").
    pub fn handed_over(&mut self) {
        if self.handed_over {
            return;
        }
        let read = |l: &LogPump| match &l.source {
            Source::Memory { .. } => true,
            Source::Log(tail) => tail.next_lsn() >= l.recovered.next_lsn,
            // Its read-back waits for a retry: recovered events from `from` on are unread.
            Source::Reopen(r) => r.from >= l.recovered.next_lsn,
        };
        if !self.logs.iter().all(read) {
            return;
        }
        self.handed_over = true;
        if self.outstanding.handover.finish() {
            for w in &self.wakers {
                let _ = w.wake();
            }
        }
    }

    /// True when nothing is queued for or with the commit helper.
    pub fn is_flushed(&self) -> bool {
        self.tickets.is_empty()
            && self
                .logs
                .iter()
                .all(|l| l.done_queue.is_empty() && l.retry_queue.is_empty())
    }

    // ----- admission --------------------------------------------------------------------------

    fn admit(&mut self, jobs: &mut Vec<(usize, Job)>) {
        if !self.admit_parked(jobs) {
            return;
        }
        for slot in 0..self.logs.len() {
            while self.logs[slot].done_queue.len() < MAX_DONE_ENTRIES
                && !self.logs[slot].parked_full()
            {
                if !self.outstanding.try_acquire() {
                    if self.outstanding.wait(self.core) && self.outstanding.try_acquire() {
                        // A slot was freed between the two looks.
                    } else {
                        return;
                    }
                }
                let next = self.logs[slot].next_event();
                let (lsn, event) = match next {
                    Ok(Some(e)) => e,
                    Ok(None) => {
                        self.release_slot();
                        break;
                    }
                    Err(e) => {
                        // The log below the durable LSN is unreadable: stop reading it (its
                        // events stay pending and are retried after a restart) and say so.
                        self.release_slot();
                        eprintln!("sluice: pump: reading {}: {e}", self.logs[slot].name);
                        break;
                    }
                };
                match self.admit_one(slot, lsn, event) {
                    Admit::Job(job) => jobs.push(job),
                    Admit::Done => self.release_slot(),
                    Admit::Park(lsn, event, w) => {
                        self.park(slot, lsn, event, w);
                        self.release_slot();
                    }
                }
            }
        }
    }

    /// Sets a durable event aside: its trigger holds its dispatch-window cap.
    fn park(&mut self, slot: usize, lsn: Lsn, event: EventRecord, window: usize) {
        let log = &mut self.logs[slot];
        log.parked_bytes += crate::wal::event_cost(&event);
        log.parked.push_back((lsn, event, window));
        self.shared.backlog.note_parked(1);
    }

    /// Admits the parked events whose trigger has room in the window again, in LSN order per
    /// log. False when the window (`max_outstanding`) is exhausted.
    fn admit_parked(&mut self, jobs: &mut Vec<(usize, Job)>) -> bool {
        for slot in 0..self.logs.len() {
            let mut i = 0;
            while i < self.logs[slot].parked.len()
                && self.logs[slot].done_queue.len() < MAX_DONE_ENTRIES
            {
                let (_, event, w) = &self.logs[slot].parked[i];
                let w = *w;
                // By id: a trigger a reload added has flow cells but the default backlog slot.
                let full = self.shared.metrics_dispatch.flow.full_id(&event.trigger_id);
                if !self.shared.backlog.window_room(w) || full {
                    i += 1;
                    continue;
                }
                let acquired = self.outstanding.try_acquire()
                    || (self.outstanding.wait(self.core) && self.outstanding.try_acquire());
                if !acquired {
                    return false;
                }
                let log = &mut self.logs[slot];
                let Some((lsn, event, _)) = log.parked.remove(i) else {
                    self.release_slot();
                    break;
                };
                log.parked_bytes -= crate::wal::event_cost(&event);
                self.shared.backlog.note_parked(-1);
                match self.admit_one(slot, lsn, event) {
                    Admit::Job(job) => jobs.push(job),
                    Admit::Done => self.release_slot(),
                    Admit::Park(lsn, event, w) => {
                        // Lost the room to another core: back in its place.
                        let log = &mut self.logs[slot];
                        log.parked_bytes += crate::wal::event_cost(&event);
                        log.parked.insert(i, (lsn, event, w));
                        self.shared.backlog.note_parked(1);
                        self.release_slot();
                        i += 1;
                    }
                }
            }
        }
        true
    }

    /// A reload's configuration (`ops::reload`): each trigger's destination id from now on. A
    /// trigger the new configuration no longer names keeps its last destination (whose id and
    /// settings the generation keeps, `ops::reload_ids`), so its events accepted before the
    /// reload (in memory or in the log) are still delivered.
    pub fn learn_handlers(&mut self, config: &Arc<crate::config::Config>) {
        for t in &config.triggers {
            self.handlers.insert(t.id.clone(), t.handler);
        }
        self.config = Arc::clone(config);
    }

    /// An event of a trigger this run's configurations never named: the default route's (no
    /// handler, by design), or one a manifest named before a restart, whose destination is then
    /// unknown. It is recorded `no_handler` like a default-route event (`sluice wal inspect`
    /// lists it; it can be posted again): said on stderr once per trigger id (bounded by the
    /// trigger ids in the logs).
    fn unknown_trigger(&mut self, id: &str) -> Option<usize> {
        if id != crate::ingest::router::DEFAULT_TRIGGER_ID && self.unknown.insert(id.to_string()) {
            eprintln!(
                "sluice: pump: events of trigger {id:?}, which the configuration does not name \
                 (removed before this start?), are recorded as no_handler: their destination is \
                 unknown"
            );
        }
        None
    }

    /// Admits one event: a job if it goes to a destination (and holds its slot), `Park` if
    /// its trigger holds its dispatch-window cap.
    fn admit_one(&mut self, slot: usize, lsn: Lsn, event: EventRecord) -> Admit {
        let log = &mut self.logs[slot];
        let recovered = lsn < log.recovered.next_lsn;
        if recovered && !log.recovered.pending.contains_key(&lsn) {
            return Admit::Done; // done before the restart
        }
        let dest = match self.handlers.get(event.trigger_id.as_str()) {
            Some(d) => *d,
            None => self.unknown_trigger(&event.trigger_id),
        };
        let log = &mut self.logs[slot];
        let backlog = &self.shared.backlog;
        let window = match dest {
            Some(_) => {
                let w = backlog.slot(&event.trigger_id);
                // Its gates hold `[flow] max_held` (dispatch::flow "Bounds"): it waits here.
                let full = self.shared.metrics_dispatch.flow.full_id(&event.trigger_id);
                if full || !backlog.window_take(w) {
                    return Admit::Park(lsn, event, w);
                }
                Some(w)
            }
            None => None,
        };
        let (attempt, due_at_ms) = match log.recovered.pending.remove(&lsn) {
            Some(meta) if recovered => (meta.next_attempt.max(1), meta.due_at_ms),
            _ => (1, 0),
        };
        let cost = crate::wal::event_cost(&event);
        let received_at_ms = event.received_at_ms;
        // Recovered events were counted in the recovered slot (`Backlog::preload`).
        let slot_in_backlog = match recovered {
            true => backlog.recovered_slot(),
            false => backlog.slot(&event.trigger_id),
        };
        let live = Live {
            cost,
            slot: slot_in_backlog,
            window,
            received_at_ms,
            outstanding: dest.is_some(),
        };
        log.live.insert(lsn, live);
        let Some(dest) = dest else {
            // No handler: stored, and done at once.
            log.done_queue.push(DoneEntry {
                event_lsn: lsn,
                status: DoneStatus::NoHandler,
                attempts: 0,
            });
            return Admit::Done;
        };
        let owner = crate::dispatch::placement::owner_core(
            &self.config.destinations[dest].handler.uri,
            self.workers,
        );
        let key = event_key(log.index, lsn);
        let job = Job::new(key, event, dest, attempt, due_at_ms).from_log(log.dir_shared.clone());
        Admit::Job((owner, job))
    }

    // ----- outcomes ---------------------------------------------------------------------------

    /// An outcome of a job whose event is in one of this core's logs.
    pub fn on_outcome(&mut self, outcome: JobOutcome, now_ms: u64, committer: &mut Committer) {
        let key = outcome.lsn();
        let (index, lsn) = split_key(key);
        let Some(&slot) = self.slot_of.get(&index) else {
            eprintln!(
                "sluice: pump: outcome for log {index}, not owned by core {}",
                self.core
            );
            return;
        };
        match outcome {
            JobOutcome::Delivered { attempts, .. } => {
                self.finish(slot, lsn, DoneStatus::Delivered, attempts)
            }
            JobOutcome::Skipped {
                attempts, reason, ..
            } => self.finish(slot, lsn, reason.done_status(), attempts),
            // A gate holds it: its dispatch slot goes back (it stays pending and live).
            JobOutcome::Held { .. } => self.unhold(slot, lsn),
            // Released by its gates, it holds a slot the dispatcher took.
            JobOutcome::Resumed { window, .. } => {
                if let Some(l) = self.logs[slot].live.get_mut(&lsn) {
                    l.outstanding = true;
                    l.window = Some(window);
                }
            }
            JobOutcome::RetryScheduled {
                next_attempt,
                due_at_ms,
                last_error,
                ..
            } => self.logs[slot].retry_queue.push_back(RetryRecord {
                event_lsn: lsn,
                next_attempt,
                due_at_ms,
                last_error,
            }),
            JobOutcome::DeadLetter {
                job,
                reason,
                attempts,
                last_error,
            } => {
                let entry = DlqEntry {
                    id: job.event.event_id.clone(),
                    event_lsn: lsn,
                    destination: self.config.destinations[job.dest].handler.uri.clone(),
                    reason,
                    attempts,
                    last_error,
                    dead_lettered_at_ms: now_ms,
                    event: job.event,
                };
                self.dead_letter(entry, attempts, key, committer);
            }
        }
    }

    /// Sends the dead letter to the commit helper; its `Done` entry follows once it is durable.
    fn dead_letter(&mut self, entry: DlqEntry, attempts: u32, key: u64, committer: &mut Committer) {
        let ticket = self.ticket(Ticket::DeadLetter { key, attempts });
        committer.push(Item::DeadLetter { ticket, entry });
    }

    fn retry_dead_letters(&mut self, now: u64, committer: &mut Committer) {
        if self.dlq_waiting.is_empty() || now < self.dlq_retry_at {
            return;
        }
        for (entry, attempts, key) in std::mem::take(&mut self.dlq_waiting) {
            self.dead_letter(entry, attempts, key, committer);
        }
        self.dlq_retry_at = now + DLQ_RETRY_EVERY;
    }

    /// A terminal outcome: the job no longer counts against `max_outstanding`; its `Done` entry
    /// is queued.
    fn finish(&mut self, slot: usize, lsn: Lsn, status: DoneStatus, attempts: u32) {
        self.unhold(slot, lsn);
        self.logs[slot].done_queue.push(DoneEntry {
            event_lsn: lsn,
            status,
            attempts,
        });
    }

    /// The event at `lsn` of log slot `slot` stops holding its `max_outstanding` slot and its
    /// trigger's window slot (it is done, or waits for room in the DLQ); idempotent.
    fn unhold(&mut self, slot: usize, lsn: Lsn) {
        let Some(l) = self.logs[slot].live.get_mut(&lsn) else {
            return;
        };
        if !std::mem::replace(&mut l.outstanding, false) {
            return;
        }
        if let Some(w) = l.window.take() {
            self.shared.backlog.window_give(w);
        }
        self.release_slot();
    }

    /// Gives an outstanding slot back and wakes the cores that wait for one.
    fn release_slot(&self) {
        let marked = self.outstanding.release();
        for (core, w) in self.wakers.iter().enumerate().take(64) {
            if marked & (1 << core) != 0 {
                let _ = w.wake();
            }
        }
    }

    fn ticket(&mut self, t: Ticket) -> u64 {
        self.seq += 1;
        let ticket = PUMP_TICKET | self.seq;
        self.tickets.insert(ticket, t);
        ticket
    }

    // ----- records ----------------------------------------------------------------------------

    /// Sends queued `Done` and `Retry` records to the commit helper.
    fn flush_records(&mut self, committer: &mut Committer) {
        for slot in 0..self.logs.len() {
            while self.logs[slot].records_in_flight < MAX_RECORDS_IN_FLIGHT {
                let log = &mut self.logs[slot];
                let (record, entries) = if !log.done_queue.is_empty() && !log.done_in_flight {
                    let n = log.done_queue.len().min(MAX_DONE_ENTRIES);
                    let entries: Vec<DoneEntry> = log.done_queue.drain(..n).collect();
                    let record = Record::Done(DoneRecord {
                        entries: entries.clone(),
                    });
                    log.done_in_flight = true;
                    (record, entries)
                } else if let Some(r) = log.retry_queue.pop_front() {
                    (Record::Retry(r), Vec::new())
                } else {
                    break;
                };
                log.records_in_flight += 1;
                let ticket = self.ticket(Ticket::Record { slot, entries });
                committer.push(Item::Append {
                    log: slot,
                    ticket,
                    record,
                });
            }
        }
    }

    /// The commit helper's answer for one of the pump's records.
    pub fn on_record_done(&mut self, ticket: u64, outcome: AppendOutcome) {
        let Some(Ticket::Record { slot, entries }) = self.tickets.remove(&ticket) else {
            return;
        };
        let log = &mut self.logs[slot];
        log.records_in_flight -= 1;
        if !entries.is_empty() {
            log.done_in_flight = false;
        }
        match outcome {
            AppendOutcome::Durable { lsn } => {
                log.durable = log.durable.max(lsn);
                // Released per backlog slot (few distinct per record): (slot, events, bytes).
                let mut by_slot: Vec<(usize, u64, u64)> = Vec::new();
                for e in &entries {
                    if let Some(l) = log.live.remove(&e.event_lsn) {
                        match by_slot.iter_mut().find(|s| s.0 == l.slot) {
                            Some(s) => (s.1, s.2) = (s.1 + 1, s.2 + l.cost),
                            None => by_slot.push((l.slot, 1, l.cost)),
                        }
                    }
                }
                for (slot, n, bytes) in by_slot {
                    self.shared.backlog.release_done(slot, n, bytes);
                    self.drained_total += n;
                }
            }
            // Not durable: written again (the log retries its disk). A retry record is only
            // a schedule: after a restart without it the event is simply due at once.
            AppendOutcome::Unavailable => log.done_queue.extend(entries),
        }
    }

    /// The commit helper's answer for one of the pump's dead letters.
    pub fn on_dead_letter_done(
        &mut self,
        ticket: u64,
        entry: DlqEntry,
        result: Result<(), DlqError>,
        now_ms: u64,
    ) {
        let Some(Ticket::DeadLetter { key, attempts }) = self.tickets.remove(&ticket) else {
            return;
        };
        match result {
            Ok(()) => {
                self.shared.metrics_dispatch.observe_accepted_to_dlq(
                    entry.reason,
                    now_ms.saturating_sub(entry.event.received_at_ms),
                );
                let (index, lsn) = split_key(key);
                if let Some(&slot) = self.slot_of.get(&index) {
                    self.finish(slot, lsn, DoneStatus::DeadLettered, attempts);
                }
            }
            Err(e) => {
                // Full: backpressure, not loss — the event stays pending (in its trigger's
                // backlog share) and is retried, but gives its dispatch slot back so that other
                // triggers' events keep flowing (`finish` then releases nothing).
                let (index, lsn) = split_key(key);
                if let Some(&slot) = self.slot_of.get(&index) {
                    self.unhold(slot, lsn);
                }
                if !matches!(e, DlqError::Full { .. }) {
                    eprintln!(
                        "sluice: pump: writing DLQ entry {} failed: {e}; retrying",
                        entry.id
                    );
                }
                if self.dlq_waiting.is_empty() {
                    self.dlq_retry_at = self.shared.clock.now_nanos() + DLQ_RETRY_EVERY;
                }
                self.dlq_waiting.push_back((entry, attempts, key));
            }
        }
    }

    // ----- timers -----------------------------------------------------------------------------

    /// Live gauges every turn; the drain rate once a second (core 0, for all cores).
    fn tick(&mut self, now: u64) {
        let oldest = self
            .logs
            .iter()
            .filter_map(|l| l.live.first_key_value().map(|(_, v)| v.received_at_ms))
            .min();
        self.shared.metrics_dispatch.set_pump_core(
            self.core,
            self.outstanding.get(),
            oldest,
            self.logs.first().map_or(0, |l| l.cursor()),
        );
        if self.drained_total > self.drained_at_tick {
            let n = self.drained_total - self.drained_at_tick;
            self.shared.backlog.note_drained(n);
            self.drained_at_tick = self.drained_total;
        }
        if now < self.tick_at + TICK_EVERY {
            return;
        }
        if self.core == 0 {
            let elapsed = (now - self.tick_at) as f64 / 1e9;
            self.shared.backlog.update_drain_rate(elapsed);
        }
        self.tick_at = now;
    }
}

#[path = "pump_retain.rs"]
mod retain;
