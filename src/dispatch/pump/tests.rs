//! The pump core on a manual clock, without sockets, threads or files: an in-memory log stands
//! for the WAL (with opens that can be made to fail), a fake environment for the backlog, the
//! window caps and the flow gates.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::*;
use crate::dispatch::dlq::{DlqError, DlqReason};
use crate::dispatch::job::{event_key, JobOutcome, SkipReason};
use crate::dispatch::trigger_caps::TriggerCaps;
use crate::sync::clock::{Clock, ManualClock};
use crate::wal::format::tests::sample_event;
use crate::wal::{AppendOutcome, AttemptOutcome, PendingMeta};

fn facts(outcome: AttemptOutcome) -> crate::dispatch::job::AttemptFacts {
    crate::dispatch::job::AttemptFacts {
        at_ms: 1_700_000_000_000,
        destination: 0,
        outcome,
        latency_us: 1500,
        retry_after_ms: None,
        response_prefix: Vec::new(),
    }
}

/// Backlog slots of the fake: "a" 0, "b" 1, anything else the default route's 2, recovered 3.
const RECOVERED: usize = 3;

/// The world around the core.
#[derive(Debug, Default)]
struct Fake {
    /// Each log's records, by directory (what a read-back finds).
    logs: RefCell<HashMap<PathBuf, Vec<(Lsn, Record)>>>,
    fail_open: Cell<bool>,
    opens: Cell<u32>,
    full: RefCell<HashSet<String>>,
    released: RefCell<Vec<(usize, u64, u64)>>,
    /// Backlog slots asked for by trigger name (the pump resolves a trigger once per
    /// generation, `pump_triggers`).
    lookups: Cell<u32>,
}

/// A read-back of one of the fake's logs (it sees records appended after it opened).
#[derive(Debug)]
struct MemTail {
    fake: Rc<Fake>,
    dir: PathBuf,
    next: Lsn,
}

impl LogTail for MemTail {
    fn next(&mut self, durable: Lsn) -> Result<Option<(Lsn, Record)>, WalError> {
        let logs = self.fake.logs.borrow();
        let records = logs.get(&self.dir).map_or(&[][..], |r| &r[..]);
        let found = records
            .iter()
            .find(|(l, _)| *l >= self.next && *l <= durable);
        Ok(found.map(|(l, r)| {
            self.next = l + 1;
            (*l, r.clone())
        }))
    }
    fn next_lsn(&self) -> Lsn {
        self.next
    }
}

impl PumpEnv for Rc<Fake> {
    type Tail = MemTail;
    fn open(&self, dir: &Path, from: Lsn) -> Result<MemTail, WalError> {
        self.opens.set(self.opens.get() + 1);
        if self.fail_open.get() {
            return Err(WalError::Io {
                path: dir.to_owned(),
                source: std::io::Error::from_raw_os_error(24), // EMFILE
            });
        }
        Ok(MemTail {
            fake: self.clone(),
            dir: dir.to_owned(),
            next: from,
        })
    }
    fn trigger_slot(&self, trigger: &str) -> usize {
        self.lookups.set(self.lookups.get() + 1);
        match trigger {
            "a" => 0,
            "b" => 1,
            _ => 2,
        }
    }
    fn recovered_slot(&self) -> usize {
        RECOVERED
    }
    fn gates_full(&self, trigger: &str) -> bool {
        self.full.borrow().contains(trigger)
    }
    /// "a" has gate cells (0), asked by index; every other trigger is asked by name.
    fn gate_cells(&self, trigger: &str) -> Option<usize> {
        (trigger == "a").then_some(0)
    }
    fn cells_full(&self, t: usize) -> bool {
        assert_eq!(t, 0, "only \"a\" has cells");
        self.full.borrow().contains("a")
    }
    /// "a" has gates.
    fn gated(&self, t: usize) -> bool {
        t == 0
    }
    fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        self.released.borrow_mut().push((slot, events, bytes));
    }
}

/// A core, its world, its clock and its dispatch slots.
struct Rig {
    pump: PumpCore<Rc<Fake>>,
    fake: Rc<Fake>,
    clock: ManualClock,
    slots: Arc<Outstanding>,
    caps: Arc<TriggerCaps>,
    metrics: Arc<DispatchMetrics>,
    /// The LSN the next ingest event of the own log gets.
    next_lsn: Lsn,
}

const DIR: &str = "/fake/core-0";

fn event(i: u64, trigger: &str) -> EventRecord {
    let mut e = sample_event(i, 8);
    e.trigger_id = trigger.to_owned();
    e
}

fn fresh_log() -> PumpLog {
    PumpLog {
        index: 0,
        name: "core-0".into(),
        dir: DIR.into(),
        own: true,
        durable: 0,
        recovered: DispatchRecovery {
            pending: BTreeMap::new(),
            done_cursor: 1,
            next_lsn: 1,
            ledger: BTreeMap::new(),
            outcomes: Default::default(),
        },
    }
}

/// Triggers "a" and "b" go to destination 0 (owner core 1); "none" has no handler.
fn routes() -> Routes {
    Routes {
        handlers: vec![
            ("a".into(), Some(0)),
            ("b".into(), Some(0)),
            ("none".into(), None),
        ],
        destinations: vec![Route {
            owner: 1,
            uri: "http://127.0.0.1:9/".into(),
        }],
        default_trigger: "default",
    }
}

impl Rig {
    /// A fresh start, after its first turn (caught up with its empty log: memory from now);
    /// no trigger cap (one trigger with a handler, as far as the caps know).
    fn new(max_outstanding: usize) -> Rig {
        Rig::fresh(max_outstanding, 1)
    }

    /// As [`Rig::new`], with "a" and "b" both capped at `max − max / 4`.
    fn capped(max_outstanding: usize) -> Rig {
        Rig::fresh(max_outstanding, 2)
    }

    fn fresh(max_outstanding: usize, with_handler: usize) -> Rig {
        let mut r = Rig::with_log(max_outstanding, with_handler, fresh_log(), Fake::default());
        assert!(r.turn().is_empty());
        r
    }

    fn with_log(max_outstanding: usize, with_handler: usize, log: PumpLog, fake: Fake) -> Rig {
        let fake = Rc::new(fake);
        let slots = Arc::new(Outstanding::new(max_outstanding));
        let caps = TriggerCaps::new(&["a", "b"], "default", max_outstanding, with_handler);
        let caps = Arc::new(caps);
        let metrics = Arc::new(DispatchMetrics::new(&[]));
        let next_lsn = log.recovered.next_lsn;
        let both = Slots {
            window: slots.clone(),
            caps: caps.clone(),
        };
        let pump = PumpCore::new(0, fake.clone(), metrics.clone(), both, vec![log], routes());
        Rig {
            pump: pump.unwrap(),
            fake,
            clock: ManualClock::new(1_000),
            slots,
            caps,
            metrics,
            next_lsn,
        }
    }

    /// Ingest events of `triggers` become durable in the own log (and in the fake log on disk).
    fn durable(&mut self, triggers: &[&str]) -> Vec<Lsn> {
        let mut lsns = Vec::new();
        for t in triggers {
            let lsn = self.next_lsn;
            self.next_lsn += 1;
            let e = event(lsn, t);
            let mut logs = self.fake.logs.borrow_mut();
            logs.entry(DIR.into())
                .or_default()
                .push((lsn, Record::Event(e.clone())));
            drop(logs);
            self.pump.on_durable(lsn, e, self.clock.now_nanos());
            lsns.push(lsn);
        }
        lsns
    }

    /// One turn; the jobs admitted, as (owner, LSN).
    fn turn(&mut self) -> Vec<(usize, Lsn)> {
        let mut jobs = Vec::new();
        self.pump.turn(self.clock.now_nanos(), false, &mut jobs);
        jobs.into_iter()
            .map(|(o, j)| (o, crate::dispatch::job::split_key(j.lsn).1))
            .collect()
    }

    fn delivered(&mut self, lsn: Lsn) {
        let key = event_key(0, lsn);
        let o = JobOutcome::Delivered {
            lsn: key,
            attempts: 1,
            received_at_ms: 0,
            attempt: facts(AttemptOutcome::Status(200)),
        };
        self.pump.on_outcome(o, 0);
    }

    /// The writes since the last call, as (ticket, what): "done[lsns]", "retry lsn", "dlq lsn";
    /// `Attempts` records are answered durable at once and left out (see [`Rig::all_writes`]).
    fn writes(&mut self) -> Vec<(u64, String)> {
        let all = self.all_writes();
        let (attempts, rest): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|w| w.1.starts_with("attempts"));
        for (ticket, _) in attempts {
            self.pump
                .on_record_done(ticket, AppendOutcome::Durable { lsn: 0 });
        }
        rest
    }

    /// Every write since the last call, `Attempts` records as "attempts[lsn#attempt:class/code]".
    fn all_writes(&mut self) -> Vec<(u64, String)> {
        self.pump
            .take_writes()
            .map(|w| match w {
                Write::Record {
                    ticket,
                    record: Record::Done(d),
                    ..
                } => {
                    let lsns: Vec<Lsn> = d.entries.iter().map(|e| e.event_lsn).collect();
                    (ticket, format!("done{lsns:?}"))
                }
                Write::Record {
                    ticket,
                    record: Record::Retry(r),
                    ..
                } => (ticket, format!("retry {}", r.event_lsn)),
                Write::Record {
                    ticket,
                    record: Record::Attempts(a),
                    ..
                } => {
                    let e: Vec<String> = a
                        .entries
                        .iter()
                        .map(|e| {
                            let (class, code) = e.outcome.to_wire();
                            format!("{}#{}:{class}/{code}", e.event_lsn, e.attempt)
                        })
                        .collect();
                    (ticket, format!("attempts{e:?}"))
                }
                Write::Record { ticket, .. } => (ticket, "other".into()),
                Write::DeadLetter { ticket, entry } => (ticket, format!("dlq {}", entry.event_lsn)),
            })
            .collect()
    }

    /// The commit helper appends every record written so far to the own log, durable.
    fn commit(&mut self) {
        let records: Vec<(u64, Record)> = self
            .pump
            .take_writes()
            .filter_map(|w| match w {
                Write::Record { ticket, record, .. } => Some((ticket, record)),
                Write::DeadLetter { .. } => None,
            })
            .collect();
        for (ticket, record) in records {
            let lsn = self.next_lsn;
            self.next_lsn += 1;
            let mut logs = self.fake.logs.borrow_mut();
            logs.entry(DIR.into()).or_default().push((lsn, record));
            drop(logs);
            self.pump
                .on_record_done(ticket, AppendOutcome::Durable { lsn });
        }
    }

    fn cursor(&self) -> Lsn {
        self.pump.cursors().next().unwrap().2
    }
}

#[test]
fn durable_events_become_jobs_for_their_owner_each_holding_a_slot() {
    let mut r = Rig::new(8);
    r.durable(&["a", "b", "a"]);
    assert_eq!(r.turn(), [(1, 1), (1, 2), (1, 3)]);
    assert_eq!(r.slots.get(), 3);
    assert_eq!(r.cursor(), 1, "nothing is done yet");
    assert_eq!(r.caps.held_by("a"), 2, "trigger a holds two of its cap");
    assert!(r.turn().is_empty(), "each event once");
}

#[test]
fn the_slots_bound_the_jobs_out_and_a_release_wakes_the_waiting_core() {
    let mut r = Rig::new(2);
    r.durable(&["a", "a", "a"]);
    assert_eq!(r.turn().len(), 2);
    assert_eq!(r.slots.get(), 2);
    assert_eq!(r.pump.take_wakes(), 0);
    r.delivered(1);
    assert_eq!(r.slots.get(), 1, "the terminal outcome gave the slot back");
    assert_eq!(r.pump.take_wakes(), 1, "core 0 waited for it and is woken");
    assert_eq!(r.turn(), [(1, 3)]);
    // A duplicate outcome releases nothing twice.
    r.delivered(1);
    assert_eq!(r.slots.get(), 2);
}

#[test]
fn the_done_cursor_moves_only_once_the_done_record_is_durable() {
    let mut r = Rig::new(8);
    r.durable(&["a", "a"]);
    r.turn();
    r.delivered(1);
    assert_eq!(r.cursor(), 1);
    r.turn();
    let w = r.writes();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].1, "done[1]");
    // While it is with the commit helper, a second outcome waits for the next record.
    r.delivered(2);
    r.turn();
    assert!(r.writes().is_empty(), "one Done record in flight per log");
    assert!(!r.pump.is_flushed());
    assert_eq!(r.cursor(), 1);
    r.pump
        .on_record_done(w[0].0, AppendOutcome::Durable { lsn: 3 });
    assert_eq!(r.cursor(), 2, "event 1 is done");
    let cost = crate::wal::event_cost(&event(1, "a"));
    assert_eq!(*r.fake.released.borrow(), [(0, 1, cost)]);
    assert_eq!(r.pump.take_drained(), 1);
    r.turn();
    let w = r.writes();
    assert_eq!(w[0].1, "done[2]");
    // Not durable: the entries are written again, and the cursor waits.
    r.pump.on_record_done(w[0].0, AppendOutcome::Unavailable);
    assert_eq!(r.cursor(), 2);
    r.turn();
    let w = r.writes();
    assert_eq!(w[0].1, "done[2]");
    r.pump
        .on_record_done(w[0].0, AppendOutcome::Durable { lsn: 4 });
    assert_eq!(r.cursor(), 5, "nothing left: past the last durable record");
    assert!(r.pump.is_flushed());
}

#[test]
fn events_without_a_handler_are_done_at_once_without_a_slot() {
    let mut r = Rig::new(8);
    r.durable(&["none", "a"]);
    assert_eq!(r.turn(), [(1, 2)]);
    assert_eq!(r.slots.get(), 1);
    let w = r.writes();
    assert_eq!(w[0].1, "done[1]");
    r.pump
        .on_record_done(w[0].0, AppendOutcome::Durable { lsn: 3 });
    assert_eq!(r.cursor(), 2);
}

#[test]
fn a_window_overflow_reads_the_log_back_in_order_without_a_gap() {
    let mut r = Rig::new(4);
    let n = WINDOW_EVENTS + 10;
    r.durable(&vec!["a"; n]);
    assert_eq!(r.metrics.window_overflows(), 1);
    assert_eq!(r.fake.opens.get(), 2, "the start-up open and the read-back");
    let mut admitted = Vec::new();
    for _ in 0..n {
        for (_, lsn) in r.turn() {
            admitted.push(lsn);
            r.delivered(lsn);
        }
        r.commit();
    }
    assert!(
        admitted == (1..=n as u64).collect::<Vec<_>>(),
        "in order, once each"
    );
    assert_eq!(r.cursor(), r.next_lsn, "every event done");
    // Caught up with the durable LSN: new events come from memory again.
    let lsn = r.durable(&["a"])[0];
    let opens = r.fake.opens.get();
    assert_eq!(r.turn(), [(1, lsn)]);
    assert_eq!(r.fake.opens.get(), opens);
}

#[test]
fn a_read_back_that_cannot_open_keeps_the_events_pending_and_retries() {
    let mut r = Rig::new(4);
    r.fake.fail_open.set(true);
    let n = WINDOW_EVENTS + 1;
    r.durable(&vec!["a"; n]);
    assert_eq!(r.fake.opens.get(), 2, "failed once");
    assert!(r.turn().is_empty(), "nothing from a log that is not open");
    assert_eq!(r.cursor(), 1, "the events stay pending: the cursor holds");
    // Retried after the first backoff, not before.
    r.clock.set(1_000 + REOPEN_FIRST_DELAY - 1);
    r.turn();
    assert_eq!(r.fake.opens.get(), 2);
    r.clock.set(1_000 + REOPEN_FIRST_DELAY);
    r.turn();
    assert_eq!(r.fake.opens.get(), 3, "retried, failed again");
    // Then twice as long.
    r.clock.set(1_000 + 3 * REOPEN_FIRST_DELAY - 1);
    r.turn();
    assert_eq!(r.fake.opens.get(), 3);
    r.fake.fail_open.set(false);
    r.clock.set(1_000 + 3 * REOPEN_FIRST_DELAY);
    assert_eq!(r.turn(), [(1, 1), (1, 2), (1, 3), (1, 4)], "from the first");
    let mut seen: usize = 4;
    for lsn in 1..=4 {
        r.delivered(lsn);
    }
    for _ in 0..n {
        for (_, lsn) in r.turn() {
            seen += 1;
            assert_eq!(lsn, seen as u64);
            r.delivered(lsn);
        }
        r.commit();
    }
    assert_eq!(seen, n, "every event admitted, none dropped");
}

#[test]
fn a_trigger_at_its_window_cap_is_parked_and_admitted_in_order_when_room_comes_back() {
    // 8 slots, two triggers with a handler: each may hold 6. "b" has no gates.
    let mut r = Rig::capped(8);
    r.durable(&["b"; 8]);
    r.durable(&["a"]);
    let jobs: Vec<Lsn> = r.turn().into_iter().map(|j| j.1).collect();
    assert_eq!(jobs, [1, 2, 3, 4, 5, 6, 9], "a passes b's parked events");
    assert_eq!(r.caps.parked(), 2);
    assert_eq!(r.caps.parked_by("b"), 2);
    assert_eq!(r.slots.get(), 7, "parked events hold no slot");
    assert_eq!(r.cursor(), 1);
    assert!(r.turn().is_empty());
    r.delivered(1);
    assert_eq!(r.caps.held_by("b"), 5, "its cap given back");
    assert_eq!(r.turn(), [(1, 7)], "the first parked first");
    assert_eq!(r.caps.parked(), 1);
    r.delivered(2);
    assert_eq!(r.turn(), [(1, 8)]);
    assert_eq!(r.caps.parked(), 0);
}

/// A trigger with flow gates is never parked at its cap (issue 38): its events reach the
/// gates in order, the ones past the cap without it (`Job::capless`, taken at the dispatcher).
#[test]
fn a_trigger_with_gates_at_its_cap_is_admitted_without_it() {
    let mut r = Rig::capped(8);
    r.durable(&["a"; 7]);
    let mut jobs = Vec::new();
    r.pump.turn(r.clock.now_nanos(), false, &mut jobs);
    let capless: Vec<bool> = jobs.iter().map(|(_, j)| j.capless).collect();
    assert_eq!(capless, [false, false, false, false, false, false, true]);
    assert_eq!((r.caps.parked(), r.caps.held_by("a")), (0, 6));
    assert_eq!(r.slots.get(), 7, "each holds a dispatch slot");
}

/// Past the in-memory bound, a trigger at its cap is parked by reference and the log is read
/// on for the others, a bounded number per turn; once it has room, the events by reference
/// are read back from the log, in order.
#[test]
fn parking_never_stops_the_log_and_events_parked_by_reference_are_read_back_in_order() {
    let mut r = Rig::capped(8);
    let n = WINDOW_EVENTS + 2 * PARK_PER_TURN + 6;
    let names: Vec<&str> = (0..n).map(|_| "b").collect();
    r.durable(&names);
    r.durable(&["a"]);
    let mut got: Vec<Lsn> = Vec::new();
    let mut turns = 0;
    loop {
        got.extend(r.turn().into_iter().map(|j| j.1));
        turns += 1;
        if !r.pump.more_to_read() {
            break;
        }
    }
    assert_eq!(got, [1, 2, 3, 4, 5, 6, n as Lsn + 1], "a is not held back");
    assert!(
        turns > (n - 6) / PARK_PER_TURN,
        "at most {PARK_PER_TURN} parked a turn"
    );
    assert_eq!(r.caps.parked_by("b"), (n - 6) as u64);
    let metrics = r.caps.clone();
    let mut w = crate::metrics::prom::PromWriter::new();
    metrics.render_prometheus(&mut w);
    let refs = n - 6 - WINDOW_EVENTS;
    let line = format!("sluice_pump_parked_by_reference {refs}\n");
    assert!(w.finish().contains(&line), "{line}");
    // b's events go one by one as its calls finish: in LSN order, the last ones read back.
    let mut next = 7;
    for done in 1..=(n as Lsn - 6) {
        r.delivered(done);
        r.commit();
        for (_, lsn) in r.turn() {
            assert_eq!(lsn, next, "in order");
            next += 1;
        }
    }
    for done in (n as Lsn - 5)..=(n as Lsn) {
        r.delivered(done);
    }
    assert_eq!(next, n as Lsn + 1, "every event of b admitted once");
    assert_eq!(r.caps.parked(), 0);
}

#[test]
fn held_events_give_their_slot_back_and_resumed_ones_hold_the_dispatchers() {
    let mut r = Rig::new(2);
    r.durable(&["a", "a"]);
    r.turn();
    r.pump.on_outcome(
        JobOutcome::Held {
            lsn: event_key(0, 1),
            gate: "debounce",
        },
        0,
    );
    assert_eq!(r.slots.get(), 1, "held: its slot goes back");
    assert_eq!(r.caps.held_by("a"), 1, "and its cap");
    assert_eq!(r.cursor(), 1, "still pending");
    r.turn();
    assert!(r.writes().is_empty(), "no record for a hold");
    // The gates release it: the dispatcher takes a slot and a cap, the pump learns of them.
    assert!(r.slots.acquire(1));
    assert!(r.caps.take(0));
    let resumed = JobOutcome::Resumed {
        lsn: event_key(0, 1),
        window: 0,
    };
    r.pump.on_outcome(resumed, 0);
    r.delivered(1);
    assert_eq!(
        r.slots.get(),
        1,
        "the resumed slot given back at its outcome"
    );
    assert_eq!(r.caps.held_by("a"), 1);
}

#[test]
fn a_trigger_whose_gates_are_full_is_parked_until_they_have_room() {
    let mut r = Rig::new(8);
    r.fake.full.borrow_mut().insert("a".into());
    r.durable(&["a", "b"]);
    assert_eq!(r.turn(), [(1, 2)]);
    assert_eq!(r.caps.parked(), 1);
    r.fake.full.borrow_mut().clear();
    assert_eq!(r.turn(), [(1, 1)]);
    assert_eq!(r.caps.parked(), 0);
}

#[test]
fn a_trigger_asked_by_name_is_parked_while_its_gates_are_full_too() {
    let mut r = Rig::new(8);
    r.fake.full.borrow_mut().insert("b".into());
    r.durable(&["b", "a"]);
    assert_eq!(r.turn(), [(1, 2)]);
    assert_eq!(r.caps.parked(), 1);
    r.fake.full.borrow_mut().clear();
    assert_eq!(r.turn(), [(1, 1)]);
}

#[test]
fn a_trigger_is_resolved_once_per_generation_and_a_reload_reaches_events_already_in() {
    let mut r = Rig::new(64);
    r.durable(&["a", "a", "b", "a"]);
    assert_eq!(r.turn().len(), 4);
    assert_eq!(r.fake.lookups.get(), 2, "once for \"a\", once for \"b\"");
    // An event in the window (its row carried) and one parked, then a reload takes "a"'s
    // handler away: both follow the new routes.
    r.fake.full.borrow_mut().insert("a".into());
    r.durable(&["a"]);
    assert!(r.turn().is_empty(), "parked: its gates are full");
    r.durable(&["a"]);
    let mut reloaded = routes();
    reloaded.handlers[0] = ("a".into(), None);
    r.pump.learn_routes(reloaded);
    r.fake.full.borrow_mut().clear();
    assert!(r.turn().is_empty(), "no handler since the reload");
    assert_eq!(
        r.fake.lookups.get(),
        3,
        "\"a\" again, once, after the reload"
    );
    let w = r.writes();
    assert_eq!(w.last().map(|w| w.1.as_str()), Some("done[5, 6]"), "{w:?}");
    // A reload giving it back: the next event is a job again.
    r.pump.learn_routes(routes());
    r.durable(&["a"]);
    assert_eq!(r.turn(), [(1, 7)]);
}

#[test]
fn a_retry_schedule_is_recorded_and_keeps_the_slot() {
    let mut r = Rig::new(2);
    r.durable(&["a"]);
    r.turn();
    let o = JobOutcome::RetryScheduled {
        lsn: event_key(0, 1),
        next_attempt: 2,
        due_at_ms: 5_000,
        last_error: "503".into(),
        attempt: facts(AttemptOutcome::Status(503)),
    };
    r.pump.on_outcome(o, 0);
    assert_eq!(r.slots.get(), 1, "not terminal");
    r.turn();
    assert_eq!(r.writes()[0].1, "retry 1");
}

#[test]
fn recovered_events_resume_their_retry_schedule_and_skip_the_done_ones() {
    let mut fake = Fake::default();
    let meta = |attempt, due| PendingMeta {
        bytes: 100,
        received_at_ms: 7,
        trigger_id: "a".into(),
        next_attempt: attempt,
        due_at_ms: due,
        replay_of: None,
    };
    let mut pending = BTreeMap::new();
    pending.insert(2, meta(3, 9_000));
    pending.insert(3, meta(1, 0));
    let records = (1..=3).map(|l| (l, Record::Event(event(l, "a")))).collect();
    fake.logs.get_mut().insert(DIR.into(), records);
    let log = PumpLog {
        durable: 3,
        recovered: DispatchRecovery {
            pending,
            done_cursor: 1,
            next_lsn: 4,
            ledger: BTreeMap::new(),
            outcomes: Default::default(),
        },
        ..fresh_log()
    };
    let mut r = Rig::with_log(8, 1, log, fake);
    let mut jobs = Vec::new();
    r.pump.turn(r.clock.now_nanos(), false, &mut jobs);
    let got: Vec<(Lsn, u32, u64)> = jobs
        .iter()
        .map(|(_, j)| (j.lsn & 0xffff, j.attempt, j.due_at_ms))
        .collect();
    assert_eq!(got, [(2, 3, 9_000), (3, 1, 0)], "event 1 was done before");
    assert!(r.pump.handed_over(), "the only pump: its hand-over ends it");
    assert!(!r.pump.handed_over(), "once");
    r.delivered(2);
    r.turn();
    let w = r.writes();
    r.pump
        .on_record_done(w[0].0, AppendOutcome::Durable { lsn: 4 });
    let released = r.fake.released.borrow();
    assert_eq!(released[0].0, RECOVERED, "counted in the recovered slot");
}

#[test]
fn a_dead_letter_the_dlq_refuses_waits_without_its_slot_and_is_retried_each_second() {
    let mut r = Rig::new(2);
    r.durable(&["a"]);
    let mut jobs = Vec::new();
    r.pump.turn(r.clock.now_nanos(), false, &mut jobs);
    let job = jobs.pop().unwrap().1;
    let o = JobOutcome::DeadLetter {
        job: Box::new(job),
        reason: DlqReason::RetryExhausted,
        attempts: 5,
        last_error: "500".into(),
        attempt: Some(facts(AttemptOutcome::Status(500))),
    };
    r.pump.on_outcome(o, 0);
    let w = r.writes();
    assert_eq!(w[0].1, "dlq 1");
    let entry = crate::dispatch::dlq::DlqEntry {
        id: "x".into(),
        event_lsn: 1,
        destination: String::new(),
        reason: DlqReason::RetryExhausted,
        attempts: 5,
        last_error: String::new(),
        dead_lettered_at_ms: 0,
        event: event(1, "a"),
    };
    let now = r.clock.now_nanos();
    let full = Err(DlqError::Full { max_entries: 1 });
    r.pump
        .on_dead_letter_done(w[0].0, entry.clone(), full, 0, now);
    assert_eq!(r.slots.get(), 0, "waiting for room, it holds no slot");
    assert_eq!(r.cursor(), 1, "still pending");
    r.clock.set(now + DLQ_RETRY_EVERY - 1);
    r.turn();
    assert!(r.writes().is_empty(), "too soon");
    r.clock.set(now + DLQ_RETRY_EVERY);
    r.turn();
    let w = r.writes();
    assert_eq!(w[0].1, "dlq 1", "retried");
    r.pump.on_dead_letter_done(w[0].0, entry, Ok(()), 0, now);
    r.turn();
    assert_eq!(r.writes()[0].1, "done[1]");
    assert_eq!(r.slots.get(), 0, "released once only");
}

#[test]
fn a_skip_is_terminal() {
    let mut r = Rig::new(2);
    r.durable(&["a", "a", "a"]);
    assert_eq!(r.turn().len(), 2);
    let o = JobOutcome::Skipped {
        lsn: event_key(0, 1),
        reason: SkipReason::Debounced,
        attempts: 0,
    };
    r.pump.on_outcome(o, 0);
    assert_eq!(r.slots.get(), 1);
    assert_eq!(r.turn(), [(1, 3)]);
    let w = r.writes();
    assert_eq!(w[0].1, "done[1]");
}

/// Slots come back at the outcome, not at its commit; the outcomes awaiting their commit have
/// a bound of their own (`max(max_outstanding, MIN_AWAITING)` per pump), so jobs out plus
/// outcomes not yet durable — what a crash can redeliver — stay bounded while commits lag.
#[test]
fn outcomes_awaiting_their_commit_pause_admission_at_their_bound() {
    let a = MIN_AWAITING;
    let mut r = Rig::new(a);
    r.durable(&vec!["a"; 2 * a + 1]);
    assert_eq!(r.pump.max_awaiting(), a);
    assert_eq!(r.turn().len(), a);
    r.delivered(1);
    assert_eq!(
        r.turn().len(),
        1,
        "one outcome awaits its commit: dispatch goes on"
    );
    let done1 = r.writes();
    assert_eq!(done1[0].1, "done[1]");
    for lsn in 2..=(a as u64 + 1) {
        r.delivered(lsn);
    }
    assert_eq!(r.slots.get(), 0, "every slot is back");
    assert!(
        r.turn().is_empty(),
        "but A + 1 outcomes await their commit: none admitted"
    );
    assert!(
        r.writes().is_empty(),
        "the next Done waits for the one in flight"
    );
    let lsn = r.next_lsn + 2 * a as u64;
    r.pump
        .on_record_done(done1[0].0, AppendOutcome::Durable { lsn });
    assert!(r.turn().is_empty(), "A still await (queued): at the bound");
    let rest = r.writes();
    r.pump
        .on_record_done(rest[0].0, AppendOutcome::Durable { lsn: lsn + 1 });
    assert_eq!(r.turn().len(), a, "durable: admission resumes");
    // A window of one still has room for A outcomes awaiting their commit.
    let mut r = Rig::new(1);
    r.durable(&["a", "a", "none", "a"]);
    assert_eq!(r.turn(), [(1, 1)]);
    r.delivered(1);
    assert_eq!(r.turn(), [(1, 2)], "not waiting for the commit of 1");
    assert_eq!(r.pump.max_awaiting(), MIN_AWAITING);
}

#[test]
fn attempts_and_decisions_ride_the_same_flush_before_the_done_record() {
    let mut r = Rig::new(4);
    r.durable(&["a", "a", "a"]);
    let mut jobs = Vec::new();
    r.pump.turn(r.clock.now_nanos(), false, &mut jobs);
    let o = JobOutcome::RetryScheduled {
        lsn: event_key(0, 1),
        next_attempt: 2,
        due_at_ms: 5_000,
        last_error: "500".into(),
        attempt: facts(AttemptOutcome::Status(500)),
    };
    r.pump.on_outcome(o, 0);
    r.delivered(1);
    let job = jobs.pop().unwrap().1;
    let o = JobOutcome::DeadLetter {
        job: Box::new(job),
        reason: DlqReason::PermanentFailure,
        attempts: 1,
        last_error: "410".into(),
        attempt: Some(facts(AttemptOutcome::Status(410))),
    };
    r.pump.on_outcome(o, 7);
    let o = JobOutcome::Skipped {
        lsn: event_key(0, 2),
        reason: SkipReason::Debounced,
        attempts: 0,
    };
    r.pump.on_outcome(o, 7);
    r.turn();
    let w = r.all_writes();
    let what: Vec<&str> = w.iter().map(|w| w.1.as_str()).collect();
    // The dead letter goes at once; at the turn, attempts first (one record for all), then
    // the Done and Retry records, in one flush.
    assert_eq!(what[0], "dlq 3");
    assert_eq!(
        what[1],
        r#"attempts["1#1:1/500", "1#1:1/200", "3#1:1/410", "3#1:7/3", "2#0:6/6"]"#
    );
    assert_eq!(&what[2..], ["done[1, 2]", "retry 1"]);
    // A record the log could not make durable is counted, not written again.
    r.pump.on_record_done(w[1].0, AppendOutcome::Unavailable);
    assert_eq!(r.metrics.attempts_unrecorded(), 5);
    r.turn();
    assert!(!r.all_writes().iter().any(|w| w.1.starts_with("attempts")));
}

#[test]
fn the_attempt_queue_is_bounded_and_counts_what_it_refuses() {
    let mut r = Rig::new(1);
    r.durable(&["a"]);
    r.turn();
    let n = MAX_ATTEMPTS_QUEUED + 3;
    for i in 0..n {
        let o = JobOutcome::RetryScheduled {
            lsn: event_key(0, 1),
            next_attempt: 2 + i as u32,
            due_at_ms: 5_000,
            last_error: String::new(),
            attempt: facts(AttemptOutcome::Io),
        };
        r.pump.on_outcome(o, 0);
    }
    assert_eq!(r.metrics.attempts_unrecorded(), 3);
}

#[test]
fn live_states_say_dispatched_or_held_and_leave_the_rest_out() {
    use crate::dispatch::ledger::LiveState;
    let mut r = Rig::new(2);
    r.durable(&["a", "a"]);
    assert_eq!(r.turn().len(), 2);
    r.pump.on_outcome(
        JobOutcome::Held {
            lsn: event_key(0, 2),
            gate: "singleton",
        },
        0,
    );
    let snap = r.pump.live_snapshot();
    assert_eq!(
        snap,
        [(
            "core-0".to_owned(),
            vec![(1, LiveState::InFlight), (2, LiveState::Held("singleton"))]
        )]
    );
    r.pump.on_outcome(
        JobOutcome::Resumed {
            lsn: event_key(0, 2),
            window: 0,
        },
        0,
    );
    r.delivered(1);
    let snap = r.pump.live_snapshot();
    assert_eq!(
        snap[0].1,
        [(2, LiveState::InFlight)],
        "a finished event is left out"
    );
}
