//! Gate promises through reloads, restarts and the `max_held` bound, on a manual clock: a
//! reload touches only what changed (deadlines kept, `wait` counted once), waiters leave in
//! acceptance order (event id), a full debounce or batch gate still takes the event that
//! supersedes or joins one it holds, and a window records the event, not the call.

use super::*;
use std::collections::VecDeque;

const SEC: Duration = Duration::from_secs(1);

/// Both triggers' gates, and `[flow]` text.
fn config(t: &str, plain: &str, flow: &str) -> Arc<DispatchSpec> {
    let text = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n{t}\n\
         [[triggers]]\nid = \"plain\"\nprovider = \"p\"\npath = \"/plain\"\nhandler = \"http://h/\"\n\
         {plain}\n{flow}\n"
    );
    let raw = Config::parse_manifest(&text).unwrap();
    Arc::new(
        Config::build(raw, &|_| None, &Overrides::default())
            .unwrap()
            .dispatch_spec(),
    )
}

/// An event of trigger `t` with event id `id` and event key `key` (as `log << 48 | lsn`).
fn job(id: &str, key: u64, body: &str) -> Job {
    let ev = EventRecord {
        event_id: id.into(),
        trigger_id: "t".into(),
        source: "p".into(),
        received_at_ms: 0,
        headers: vec![],
        body: body.as_bytes().to_vec(),
        replay_of: None,
        body_json: Default::default(),
    };
    Job::new(key, ev, 0, 1, 0)
}

/// Event key of LSN `lsn` in log `log`.
fn key(log: u64, lsn: u64) -> u64 {
    (log << 48) | lsn
}

impl Rig {
    fn offer_job(&mut self, job: Job) -> FlowOut {
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine.offer(job, now, &mut out);
        merged(out)
    }

    fn rekey_to(&mut self, cfg: Arc<DispatchSpec>) -> FlowOut {
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine.rekey(cfg, now, &mut out);
        merged(out)
    }

    /// Advances in steps of `step` until something is released; returns (elapsed, ids).
    fn until_released(&mut self, step: Duration, limit: Duration) -> (Duration, Vec<String>) {
        let mut waited = Duration::ZERO;
        while waited < limit {
            waited += step;
            let out = self.advance(step);
            if !out.ready.is_empty() {
                return (
                    waited,
                    out.ready.iter().map(|j| j.event.event_id.clone()).collect(),
                );
            }
        }
        (waited, Vec::new())
    }
}

/// The issue's acceptance on the engine: debounce 3 s, one event, a reload every second for
/// 9 s that adds and removes another trigger's gate: delivered at exactly 3 s, `wait` once.
#[test]
fn reloads_of_another_triggers_gates_move_no_debounce_deadline() {
    let t = "debounce = { period = \"3s\" }";
    let mut r = Rig::new(t, "");
    let (a, out) = r.offer("{}");
    assert_eq!(out.held, vec![(a, Stage::Debounce)]);
    let mut delivered_at = None;
    for i in 1..=9u32 {
        let out = r.advance(SEC);
        if !out.ready.is_empty() {
            assert_eq!(ready(&out), vec![a]);
            delivered_at.get_or_insert(i);
        }
        let plain = match i % 2 {
            1 => "throttle = { period = \"1s\", max = 1 }",
            _ => "",
        };
        let out = r.rekey_to(config(t, plain, ""));
        assert!(out.ready.is_empty() && out.skipped.is_empty());
    }
    assert_eq!(
        delivered_at,
        Some(3),
        "delivered at 3 s, not pushed by the reloads"
    );
    assert_eq!(
        (r.count("debounce", "wait"), r.count("debounce", "skip")),
        (1, 0),
        "one decision for the one event"
    );
}

/// A changed debounce keeps the deadline when its period is the same, takes the sooner of the
/// old deadline and reload + new period when it changed.
#[test]
fn a_changed_debounce_keeps_or_shortens_the_deadline() {
    let t = "debounce = { key = \"event.body.k\", period = \"3s\" }";
    let mut r = Rig::new(t, "");
    r.offer("{\"k\":1}");
    r.advance(SEC);
    // Same period, another key selector: re-keyed, deadline kept (3 s).
    r.rekey_to(config("debounce = { period = \"3s\" }", "", ""));
    // Longer period at 1.5 s: min(3 s, 1.5 s + 10 s) = 3 s.
    r.advance(SEC / 2);
    r.rekey_to(config("debounce = { period = \"10s\" }", "", ""));
    let (at, _) = r.until_released(100 * MS, 20 * SEC);
    assert_eq!(at, 1500 * MS, "released at 3 s from the event");
    // Shorter period: an event at 0, the period 3 s → 1 s at 0.5 s: released at 1.5 s.
    r.rekey_to(config(t, "", ""));
    r.offer("{\"k\":2}");
    r.advance(SEC / 2);
    r.rekey_to(config(
        "debounce = { key = \"event.body.k\", period = \"1s\" }",
        "",
        "",
    ));
    let (at, _) = r.until_released(100 * MS, 20 * SEC);
    assert_eq!(at, SEC, "min(3 s, 0.5 s + 1 s) = 1.5 s from the event");
    assert_eq!(r.count("debounce", "wait"), 2, "once per event");
}

/// A batch whose size changes keeps its timeout (counted from its first member).
#[test]
fn a_batch_keeps_its_timeout_through_a_reload() {
    let mut r = Rig::new("batch = { size = 10, timeout = \"2s\" }", "");
    let (a, _) = r.offer("{}");
    r.advance(SEC);
    let (b, _) = r.offer("{}");
    r.rekey_to(config("batch = { size = 5, timeout = \"2s\" }", "", ""));
    assert!(r.advance(SEC - MS).ready.is_empty());
    let out = r.advance(MS);
    assert_eq!(out.ready.len(), 1);
    assert_eq!(out.ready[0].lsns(), vec![a, b], "at 2 s, members in order");
}

/// Throttle waiters leave in acceptance order (event id), whatever order they reach the gate
/// in: here log 0's events first, then log 1's, as recovery reads them after a restart.
#[test]
fn throttle_waiters_leave_in_acceptance_order_not_arrival_order() {
    let mut r = Rig::new("throttle = { period = \"1s\", max = 1 }", "");
    let arrivals = [
        ("A1", key(0, 1)),
        ("A2", key(0, 2)),
        ("A5", key(0, 3)),
        ("A3", key(1, 1)),
        ("A4", key(1, 2)),
    ];
    let mut first = Vec::new();
    for (id, k) in arrivals {
        first.extend(r.offer_job(job(id, k, "{}")).ready);
    }
    assert_eq!(first.len(), 1);
    let mut order = vec![first[0].event.event_id.clone()];
    for _ in 0..4 {
        order.extend(r.until_released(100 * MS, 2 * SEC).1);
    }
    assert_eq!(order, ["A1", "A2", "A3", "A4", "A5"]);
}

/// The issue's acceptance on the engine: throttle 1/s, 8 events accepted alternately on two
/// cores' logs, a reload at 0.5 s that changes the trigger's throttle (its key selector kept)
/// or only another trigger: delivered in acceptance order, one per second.
#[test]
fn a_reload_keeps_throttle_waiters_in_acceptance_order() {
    for changed in ["throttle = { period = \"1001ms\", max = 1 }", ""] {
        let t = "throttle = { period = \"1s\", max = 1 }";
        let mut r = Rig::new(t, "");
        let mut order = Vec::new();
        for i in 0..8u64 {
            let id = format!("B{i}");
            order.extend(r.offer_job(job(&id, key(i % 2, i / 2 + 1), "{}")).ready);
        }
        let mut order: Vec<String> = order.iter().map(|j| j.event.event_id.clone()).collect();
        r.advance(SEC / 2);
        let out = match changed {
            "" => r.rekey_to(config(t, "singleton = {}", "")),
            c => r.rekey_to(config(c, "", "")),
        };
        assert!(
            out.ready.is_empty(),
            "the window kept its hit: nothing passes early"
        );
        for _ in 0..7 {
            order.extend(r.until_released(10 * MS, 3 * SEC).1);
        }
        let want: Vec<String> = (0..8).map(|i| format!("B{i}")).collect();
        assert_eq!(order, want, "reload changing {changed:?}");
        assert_eq!(r.count("throttle", "wait"), 7, "once per waiter");
    }
}

/// Concurrency waiters of one rank leave in acceptance order, across a reload that changes
/// the gate.
#[test]
fn concurrency_waiters_of_a_rank_keep_acceptance_order_across_a_reload() {
    let gates = |max: usize| {
        format!(
            "concurrency = {{ max = {max} }}\n\
             priority = {{ key = \"event.body.tier\", order = [\"gold\", \"silver\"] }}"
        )
    };
    let mut r = Rig::new(&gates(1), "");
    let first = r
        .offer_job(job("C0", key(0, 1), r#"{"tier":"gold"}"#))
        .ready;
    assert_eq!(first.len(), 1);
    for (id, k, tier) in [
        ("C1", key(0, 2), "silver"),
        ("C4", key(0, 3), "gold"),
        ("C2", key(1, 1), "silver"),
        ("C3", key(1, 2), "gold"),
    ] {
        assert!(r
            .offer_job(job(id, k, &format!("{{\"tier\":\"{tier}\"}}")))
            .ready
            .is_empty());
    }
    // max 1 → 2: `C0` still holds one, so the first waiter goes now.
    let out = r.rekey_to(config(&gates(2), "", ""));
    let ids = |out: &FlowOut| -> Vec<String> {
        out.ready.iter().map(|j| j.event.event_id.clone()).collect()
    };
    let mut order = ids(&out);
    // Each release admits the next waiter; release in admission order.
    let mut running: VecDeque<u64> = [first[0].lsn].into_iter().collect();
    running.extend(out.ready.iter().map(|j| j.lsn));
    while let Some(lsn) = running.pop_front() {
        let out = r.release(lsn);
        order.extend(ids(&out));
        running.extend(out.ready.iter().map(|j| j.lsn));
    }
    assert_eq!(
        order,
        ["C3", "C4", "C1", "C2"],
        "gold then silver, each by id"
    );
}

/// An event older than the one a debounce key holds (it reached the gate late) is the
/// superseded one.
#[test]
fn an_older_event_does_not_supersede_a_newer_one() {
    let mut r = Rig::new("debounce = { period = \"1s\" }", "");
    r.offer_job(job("D2", key(0, 1), "{}"));
    let out = r.offer_job(job("D1", key(1, 1), "{}"));
    assert_eq!(skipped(&out), vec![(key(1, 1), SkipReason::Debounced)]);
    let (_, ids) = r.until_released(100 * MS, 2 * SEC);
    assert_eq!(ids, ["D2"]);
}

/// The issue's acceptance on the engine: `max_held = 50`, 50 keys held, then a newer event
/// for a held key: it replaces the older in place (no overflow, nothing early), and only it
/// is delivered, at its period. A new key then releases the soonest key early, counted.
#[test]
fn a_full_debounce_takes_the_superseding_event_in_place() {
    let mut r = Rig::new(
        "debounce = { key = \"event.body.k\", period = \"4s\" }",
        "[flow]\nmax_held = 50",
    );
    for k in 0..50 {
        r.offer(&format!("{{\"k\":{k}}}"));
    }
    let cell = r.engine.books.cell(0);
    assert!(
        !r.metrics.flow.full(cell),
        "the pumps do not park for this gate"
    );
    r.advance(SEC);
    let (v2, out) = r.offer("{\"k\":0}");
    assert_eq!(
        skipped(&out),
        vec![(1, SkipReason::Debounced)],
        "v1 superseded"
    );
    assert!(out.ready.is_empty());
    assert_eq!(r.metrics.flow.overflows(0, Stage::Debounce as usize), 0);
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 50);
    let out = r.advance(3 * SEC);
    assert_eq!(out.ready.len(), 49, "the other keys at 4 s");
    assert!(!ready(&out).contains(&v2));
    assert!(r.advance(SEC - MS).ready.is_empty());
    assert_eq!(
        ready(&r.advance(MS)),
        vec![v2],
        "v2 at its own period, 4 s after it"
    );
    // Full again: a new key releases the soonest key early, counted once.
    for k in 100..150 {
        r.offer(&format!("{{\"k\":{k}}}"));
    }
    let (_, out) = r.offer("{\"k\":\"new\"}");
    assert_eq!(ready(&out).len(), 1);
    assert_eq!(r.metrics.flow.overflows(0, Stage::Debounce as usize), 1);
}

/// A full batch gate takes an event that joins a batch it holds; past the bound the soonest
/// batch goes early (counted), and a new key at the bound does the same.
#[test]
fn a_full_batch_takes_a_joining_event() {
    let mut r = Rig::new(
        "batch = { key = \"event.body.k\", size = 3, timeout = \"10s\" }",
        "[flow]\nmax_held = 3",
    );
    let (a, _) = r.offer("{\"k\":1}");
    r.advance(MS);
    let (b, _) = r.offer("{\"k\":2}");
    let (c, _) = r.offer("{\"k\":2}");
    assert_eq!(r.metrics.flow.held(0, Stage::Batch as usize), 3);
    let (d, out) = r.offer("{\"k\":1}");
    assert_eq!(
        out.ready.len(),
        1,
        "k=1 (soonest) left early with its new member"
    );
    assert_eq!(out.ready[0].lsns(), vec![a, d]);
    assert_eq!(r.metrics.flow.overflows(0, Stage::Batch as usize), 1);
    r.advance(MS);
    let (_e, out) = r.offer("{\"k\":3}");
    assert!(out.ready.is_empty(), "room for a new key");
    let (_f, out) = r.offer("{\"k\":4}");
    assert_eq!(
        out.ready.len(),
        1,
        "a new key at the bound: the soonest batch goes"
    );
    assert_eq!(out.ready[0].lsns(), vec![b, c]);
    assert_eq!(r.metrics.flow.overflows(0, Stage::Batch as usize), 2);
    assert_eq!(r.metrics.flow.held(0, Stage::Batch as usize), 2);
}

/// `wait` is counted once per event however many reloads re-key its gate.
#[test]
fn wait_is_counted_once_per_event_across_reloads() {
    let mut r = Rig::new("throttle = { period = \"10s\", max = 1 }", "");
    r.offer("{}");
    r.offer("{}");
    for p in ["11s", "12s", "13s"] {
        r.rekey_to(config(
            &format!("throttle = {{ period = \"{p}\", max = 1 }}"),
            "",
            "",
        ));
        assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 1);
    }
    let (at, _) = r.until_released(100 * MS, 20 * SEC);
    assert_eq!(at, 13 * SEC, "the first hit leaves the 13 s window at 13 s");
    assert_eq!(
        (r.count("throttle", "pass"), r.count("throttle", "wait")),
        (1, 1)
    );
}

/// A window records the event, not the call: an event whose call was in flight when the
/// process died passes its throttle and rate limit again after the restart without a second
/// unit; another event still finds the window full.
#[test]
fn an_event_retried_after_a_crash_takes_no_second_window_unit() {
    let dir = tempfile::tempdir().unwrap();
    let gates =
        "throttle = { period = \"10s\", max = 1 }\nrate_limit = { period = \"1h\", max = 1 }";
    let mut r = Rig::new(gates, "");
    let cfg = r.engine.config.clone();
    let core = crate::dispatch::placement::owner_core("http://h/", cfg.workers);
    let store = |c: &DispatchSpec| persist::Store::open(dir.path(), core, c);
    r.engine = FlowEngine::new(cfg.clone(), r.metrics.clone(), Some(store(&cfg)));
    assert_eq!(r.offer_job(job("X", key(0, 1), "{}")).ready.len(), 1);
    r.advance(200 * MS); // saved; then the process dies with X's call in flight
    let mut e = FlowEngine::new(cfg.clone(), r.metrics.clone(), Some(store(&cfg)));
    let mut out = FlowOut::default();
    e.offer(job("X", key(0, 1), "{}"), 1_000, &mut out);
    assert_eq!(
        out.ready.len(),
        1,
        "X already holds its units: it goes at once"
    );
    assert!(
        out.skipped.is_empty(),
        "and is not rate limited by its own hit"
    );
    let mut out = FlowOut::default();
    e.offer(job("Y", key(0, 2), "{}"), 2_000, &mut out);
    assert_eq!(
        skipped(&merged(out)),
        vec![(key(0, 2), SkipReason::RateLimited)],
        "the window is full"
    );
}

/// After a restart the recovered events reach the gate log by log: until the pumps' hand-over
/// is done (seen one turn, acted on the next), a throttle with room lets none through, then
/// they leave in acceptance order; without the hand-over, at `SETTLE_MAX`.
#[test]
fn recovered_events_wait_for_the_handover_then_leave_in_acceptance_order() {
    for handover in [true, false] {
        let mut r = Rig::new("throttle = { period = \"1s\", max = 1 }", "");
        let cfg = r.engine.config.clone();
        r.engine = FlowEngine::new(cfg, r.metrics.clone(), None).hold_for_handover(true);
        r.engine.note_handover(false);
        assert!(r.advance(MS).ready.is_empty());
        // Core 1's log first, then core 0's: E2 would pass at once without the hand-over.
        for (id, k) in [("E2", key(1, 1)), ("E3", key(1, 2)), ("E1", key(0, 1))] {
            assert!(r.offer_job(job(id, k, "{}")).ready.is_empty(), "{id} held");
        }
        r.engine.note_handover(handover);
        let mut order = Vec::new();
        let (at, ids) = r.until_released(MS, 3 * SEC);
        order.extend(ids);
        for _ in 0..2 {
            order.extend(r.until_released(10 * MS, 2 * SEC).1);
        }
        assert_eq!(order, ["E1", "E2", "E3"], "handover {handover}");
        match handover {
            true => assert_eq!(at, 2 * MS, "seen at one turn, released at the next"),
            false => assert!(at >= handover::SETTLE_MAX_DURATION - 2 * MS, "{at:?}"),
        }
    }
}

/// A reload during the start-up hand-over keeps waiting for it: the held throttle waiters are
/// released at the hand-over, none is stranded.
#[test]
fn a_reload_during_the_handover_strands_no_waiter() {
    let t = "throttle = { period = \"1s\", max = 1 }";
    let mut r = Rig::new(t, "");
    let cfg = r.engine.config.clone();
    r.engine = FlowEngine::new(cfg, r.metrics.clone(), None).hold_for_handover(true);
    r.engine.note_handover(false);
    r.advance(MS);
    for (id, k) in [("F2", key(1, 1)), ("F1", key(0, 1))] {
        assert!(r.offer_job(job(id, k, "{}")).ready.is_empty());
    }
    r.advance(MS); // the throttle's timer fires while waiting: ignored
    assert!(r.rekey_to(config(t, "singleton = {}", "")).ready.is_empty());
    r.engine.note_handover(true);
    let mut order = r.until_released(MS, SEC).1;
    order.extend(r.until_released(10 * MS, 2 * SEC).1);
    assert_eq!(order, ["F1", "F2"]);
}

/// A key waiting for the order horizon in a gate a reload keeps is still released when the
/// horizon passes it (the reload carries the keys to look at again).
#[test]
fn a_reload_keeps_the_keys_waiting_for_the_order_horizon() {
    let gate = "throttle = { period = \"1s\", max = 2 }";
    let mut r = Rig::new(gate, "");
    r.engine.note_horizon(0);
    let out = r.offer_job(job("01", key(0, 1), "{}"));
    assert!(out.ready.is_empty(), "held for the horizon");
    // Another trigger's gates change; "t"'s are kept.
    r.rekey_to(config(gate, "concurrency = { max = 1 }", ""));
    assert_eq!(r.engine.horizon_waiting(), 1, "still looked at");
    r.engine.note_horizon(1);
    let mut out = FlowOut::default();
    let now = r.now();
    r.engine.release_ordered(now, &mut out);
    let resumed: Vec<u64> = out.resumed.iter().map(|j| j.lsn).collect();
    assert_eq!(resumed, [key(0, 1)], "released once the horizon passed it");
}
