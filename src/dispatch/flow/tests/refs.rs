//! Waiters held by reference (issue 38, `super::waiters`), on a manual clock with real logs:
//! a stalled key holds only itself, its later events wait by reference and leave in
//! acceptance order across logs, read back whole.

use super::*;
use crate::dispatch::flow::waiters::Bound;
use crate::wal::recover::tests::test_cfg;
use crate::wal::{open, Wal, WritePath};
use std::path::Path;

/// A real log its events are read back from.
struct Log {
    _tmp: tempfile::TempDir,
    wal: Wal,
    dir: Arc<Path>,
    index: usize,
}

impl Log {
    fn new(index: usize) -> Log {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let wal = open(&cfg).unwrap().0;
        let dir: Arc<Path> = cfg.dir.as_path().into();
        Log {
            _tmp: tmp,
            wal,
            dir,
            index,
        }
    }

    /// Appends an event of trigger `t` with id `id`, header `x-key: key` and body `id`: its job.
    fn job(&mut self, id: &str, key: &str) -> Job {
        let event = EventRecord {
            event_id: id.into(),
            trigger_id: "t".into(),
            source: "p".into(),
            received_at_ms: 0,
            headers: vec![("x-key".into(), key.as_bytes().to_vec())],
            body: id.as_bytes().to_vec(),
            replay_of: None,
            body_json: Default::default(),
        };
        let lsn = self
            .wal
            .append_events(std::slice::from_ref(&event))
            .unwrap();
        let key = crate::wal::key::event_key(self.index, lsn);
        Job::new(key, event, 0, 1, 0).from_log(Arc::clone(&self.dir))
    }
}

/// An engine with trigger `t` gated by `gates`, plus `[flow]` text; its metrics.
fn engine(gates: &str, flow: &str) -> (FlowEngine, Arc<DispatchMetrics>) {
    let text = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n{gates}\n{flow}\n"
    );
    let raw = Config::parse_manifest(&text).unwrap();
    let cfg = Config::build(raw, &|_| None, &Overrides::default()).unwrap();
    let cfg = Arc::new(cfg.dispatch_spec());
    let metrics = Arc::new(DispatchMetrics::new(&[]).with_flow(&cfg.triggers, cfg.flow.max_held));
    (FlowEngine::new(cfg, metrics.clone(), None), metrics)
}

/// The ids of the jobs through every gate, and their bodies (each event's body is its id).
fn through(out: &FlowOut) -> Vec<String> {
    let jobs = out.ready.iter().chain(&out.resumed);
    for j in jobs.clone() {
        assert_eq!(j.event.body, j.event.event_id.as_bytes(), "read back whole");
        assert_eq!(j.event.headers.len(), 1, "headers read back");
    }
    jobs.map(|j| j.event.event_id.clone()).collect()
}

const CONC: usize = Stage::Concurrency as usize;
const THROTTLE: usize = Stage::Throttle as usize;

/// Key `s` stalls (its one call never finishes) with 20 events behind it: it holds
/// `max_held_per_key` of them in full, the rest by reference; key `a` still goes at once.
/// When `s` gets room its events leave one by one in order, read back whole.
#[test]
fn a_stalled_key_holds_its_bound_in_full_and_the_rest_by_reference() {
    let (mut e, m) = engine(
        "concurrency = { key = \"event.headers.x-key\", max = 1 }",
        "[flow]\nmax_held = 5\nmax_held_per_key = 2",
    );
    let mut log = Log::new(0);
    let mut out = FlowOut::default();
    let mut keys = Vec::new();
    for i in 0..21 {
        let job = log.job(&format!("s{i:02}"), "s");
        keys.push(job.lsn);
        e.offer(job, 1, &mut out);
    }
    assert_eq!(
        through(&out),
        ["s00"],
        "the first takes the key's one place"
    );
    assert_eq!(out.held.len(), 20, "every waiter gave its slot back");
    assert_eq!(m.flow.held(0, CONC), 20);
    assert_eq!(m.flow.in_log(0, CONC), 18, "2 in full, 18 by reference");
    assert_eq!(m.flow.left(0, CONC, Bound::Key as usize), 18);
    assert!(!m.flow.full(0), "the pumps never stop at the gate's bound");
    let mut out = FlowOut::default();
    e.offer(log.job("a00", "a"), 1, &mut out);
    assert_eq!(through(&out), ["a00"], "another key is not held back");
    // `s` gets room, event by event: acceptance order, each read back.
    let mut seen = Vec::new();
    for key in &keys[..20] {
        let mut out = FlowOut::default();
        e.release(*key, &mut out);
        seen.extend(through(&out));
    }
    let want: Vec<String> = (1..21).map(|i| format!("s{i:02}")).collect();
    assert_eq!(seen, want);
    assert_eq!((m.flow.held(0, CONC), m.flow.in_log(0, CONC)), (0, 0));
    assert_eq!(e.waiting(), 0);
    assert_eq!(
        e.books.payloads.bytes(),
        0,
        "no body held: s20 and a00 are in progress"
    );
}

/// Past the gate's `max_held`, keys below their own bound are held by reference too
/// (`bound="gate"`), so the gate holds at most `max_held` in full.
#[test]
fn past_the_gates_bound_every_key_waits_by_reference() {
    let (mut e, m) = engine(
        "concurrency = { key = \"event.headers.x-key\", max = 1 }",
        "[flow]\nmax_held = 3\nmax_held_per_key = 2",
    );
    let mut log = Log::new(0);
    let mut out = FlowOut::default();
    for (id, key) in [
        ("a0", "a"),
        ("b0", "b"),
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
    ] {
        e.offer(log.job(id, key), 1, &mut out);
    }
    assert_eq!(through(&out), ["a0", "b0"]);
    assert_eq!((m.flow.held(0, CONC), m.flow.in_log(0, CONC)), (3, 0));
    let mut out = FlowOut::default();
    e.offer(log.job("a3", "a"), 1, &mut out);
    e.offer(log.job("b2", "b"), 1, &mut out);
    assert_eq!(
        m.flow.left(0, CONC, Bound::Key as usize),
        1,
        "a holds 2 in full"
    );
    assert_eq!(
        m.flow.left(0, CONC, Bound::Gate as usize),
        1,
        "the gate holds 3"
    );
    assert_eq!((m.flow.held(0, CONC), m.flow.in_log(0, CONC)), (5, 2));
}

/// Events of one key accepted on two cores reach the gate log by log (all of log 1 first):
/// they leave in acceptance order (event id) whatever their form.
#[test]
fn waiters_by_reference_leave_in_acceptance_order_across_logs() {
    let (mut e, _) = engine(
        "concurrency = { key = \"event.headers.x-key\", max = 1 }",
        "[flow]\nmax_held = 100\nmax_held_per_key = 3",
    );
    let (mut log0, mut log1) = (Log::new(0), Log::new(1));
    let mut jobs0 = Vec::new();
    let mut jobs1 = Vec::new();
    for i in 0..20 {
        let job = |l: &mut Log| l.job(&format!("k{i:02}"), "k");
        match i % 3 {
            0 => jobs0.push(job(&mut log0)),
            _ => jobs1.push(job(&mut log1)),
        }
    }
    let mut out = FlowOut::default();
    for job in jobs1.into_iter().chain(jobs0) {
        e.offer(job, 1, &mut out);
    }
    let mut seen = through(&out);
    assert_eq!(seen, ["k01"], "the first to arrive takes the place");
    let mut running = out.ready.pop().unwrap().lsn;
    while e.waiting() > 0 {
        let mut out = FlowOut::default();
        e.release(running, &mut out);
        seen.extend(through(&out));
        running = out.resumed.pop().expect("one leaves per release").lsn;
    }
    let mut want: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
    want.retain(|k| k != "k01");
    assert_eq!(seen[1..], want[..], "acceptance order after the first");
}

/// Throttle waiters past the key's bound wait by reference and leave in order as the window
/// has room, read back whole.
#[test]
fn throttle_waiters_by_reference_leave_in_order() {
    let (mut e, m) = engine(
        "throttle = { key = \"event.headers.x-key\", period = \"1s\", max = 2 }",
        "[flow]\nmax_held_per_key = 1",
    );
    let mut log = Log::new(0);
    let mut out = FlowOut::default();
    for i in 0..8 {
        e.offer(log.job(&format!("t{i}"), "k"), 1_000, &mut out);
    }
    assert_eq!(through(&out), ["t0", "t1"]);
    assert_eq!(
        (m.flow.held(0, THROTTLE), m.flow.in_log(0, THROTTLE)),
        (6, 5)
    );
    let mut seen = Vec::new();
    for s in 1..=3u64 {
        let mut out = FlowOut::default();
        e.on_tick(s * 1_000_000_000 + 1_000, false, &mut out);
        seen.extend(through(&out));
    }
    assert_eq!(seen, ["t2", "t3", "t4", "t5", "t6", "t7"]);
    assert_eq!(
        (m.flow.held(0, THROTTLE), m.flow.in_log(0, THROTTLE)),
        (0, 0)
    );
}

/// A waiter held by reference whose record is not in its log any more (damage) leaves the gate
/// as `lost` (pending in its log, no outcome), and the key goes on with the next one.
#[test]
fn a_reference_that_cannot_be_read_back_is_lost_and_the_key_goes_on() {
    let (mut e, m) = engine(
        "concurrency = { key = \"event.headers.x-key\", max = 1 }",
        "[flow]\nmax_held_per_key = 1",
    );
    let mut log = Log::new(0);
    let first = log.job("k0", "k");
    let running = first.lsn;
    let mut out = FlowOut::default();
    e.offer(first, 1, &mut out);
    e.offer(log.job("k1", "k"), 1, &mut out);
    // Not the event its reference names: the id differs at that LSN (same place in line).
    let mut wrong = log.job("k2", "k");
    wrong.event.event_id = "k2x".into();
    let wrong_key = wrong.lsn;
    e.offer(wrong, 1, &mut out);
    e.offer(log.job("k3", "k"), 1, &mut out);
    assert_eq!(m.flow.in_log(0, CONC), 2);
    let mut out = FlowOut::default();
    e.release(running, &mut out);
    assert_eq!(through(&out), ["k1"]);
    let k1 = out.resumed[0].lsn;
    let mut out = FlowOut::default();
    e.release(k1, &mut out);
    assert_eq!(out.lost, [wrong_key], "stays pending, reported");
    assert_eq!(through(&out), ["k3"], "the key goes on");
    assert_eq!(m.flow.read_back_failures(), 1);
    assert_eq!((m.flow.held(0, CONC), m.flow.in_log(0, CONC)), (0, 0));
}

/// A reload that changes the gate re-offers the waiters held by reference too, read back, in
/// acceptance order.
#[test]
fn a_reload_reoffers_waiters_held_by_reference() {
    let gates = "concurrency = { key = \"event.headers.x-key\", max = 1 }";
    let (mut e, m) = engine(gates, "[flow]\nmax_held_per_key = 1");
    let mut log = Log::new(0);
    let mut out = FlowOut::default();
    for i in 0..5 {
        e.offer(log.job(&format!("r{i}"), "k"), 1, &mut out);
    }
    assert_eq!(m.flow.in_log(0, CONC), 3);
    let raw = Config::parse_manifest(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n\
         concurrency = { key = \"event.headers.x-key\", max = 3 }\n[flow]\nmax_held_per_key = 1\n",
    )
    .unwrap();
    let cfg = Config::build(raw, &|_| None, &Overrides::default()).unwrap();
    let mut out = FlowOut::default();
    e.rekey(Arc::new(cfg.dispatch_spec()), 2, &mut out);
    assert_eq!(through(&out), ["r1", "r2"], "room for two more, in order");
    assert_eq!((m.flow.held(0, CONC), m.flow.in_log(0, CONC)), (2, 2));
}
