//! Gate tests on a manual clock: every decision is a function of the engine's state and `now`.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::config::{Config, Overrides};
use crate::dispatch::flow::metrics::{DECISIONS, GATES};
use crate::dispatch::job::SkipReason;
use crate::sync::clock::{Clock, ManualClock};
use crate::wal::EventRecord;

const MS: Duration = Duration::from_millis(1);

pub(in crate::dispatch::flow) struct Rig {
    pub(in crate::dispatch::flow) engine: FlowEngine,
    pub(in crate::dispatch::flow) metrics: Arc<DispatchMetrics>,
    pub(in crate::dispatch::flow) clock: ManualClock,
    pub(in crate::dispatch::flow) lsn: u64,
}

impl Rig {
    /// One trigger `t` with `gates`, plus `[flow]` text.
    pub(in crate::dispatch::flow) fn new(gates: &str, flow: &str) -> Rig {
        let text = format!(
            "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n{gates}\n\
             [[triggers]]\nid = \"plain\"\nprovider = \"p\"\npath = \"/plain\"\nhandler = \"http://h/\"\n\
             {flow}\n"
        );
        let cfg = Arc::new(
            Config::build(
                Config::parse_manifest(&text).unwrap(),
                &|_| None,
                &Overrides::default(),
            )
            .unwrap()
            .dispatch_spec(),
        );
        let metrics =
            Arc::new(DispatchMetrics::new(&[]).with_flow(&cfg.triggers, cfg.flow.max_held));
        Rig {
            engine: FlowEngine::new(cfg, metrics.clone(), None),
            metrics,
            clock: ManualClock::new(1_000_000_000),
            lsn: 0,
        }
    }

    pub(in crate::dispatch::flow) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    pub(in crate::dispatch::flow) fn advance(&mut self, d: Duration) -> FlowOut {
        self.clock.advance(d);
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine.on_tick(now, false, &mut out);
        merged(out)
    }

    /// Offers an event of trigger `t` with `body` and headers; returns (lsn, out).
    pub(in crate::dispatch::flow) fn offer_with(
        &mut self,
        trigger: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> (u64, FlowOut) {
        self.lsn += 1;
        let event = EventRecord {
            event_id: format!("e{:08}", self.lsn),
            trigger_id: trigger.into(),
            source: "p".into(),
            received_at_ms: self.lsn,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.as_bytes().to_vec(),
            replay_of: None,
            body_json: Default::default(),
        };
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine
            .offer(Job::new(self.lsn, event, 0, 1, 0), now, &mut out);
        (self.lsn, merged(out))
    }

    fn offer(&mut self, body: &str) -> (u64, FlowOut) {
        self.offer_with("t", body, &[])
    }

    pub(in crate::dispatch::flow) fn release(&mut self, lsn: u64) -> FlowOut {
        let mut out = FlowOut::default();
        self.engine.release(lsn, &mut out);
        merged(out)
    }

    fn count(&self, gate: &str, decision: &str) -> u64 {
        let g = GATES.iter().position(|x| *x == gate).unwrap();
        let d = DECISIONS.iter().position(|x| *x == decision).unwrap();
        self.metrics.flow.get(0, g, d)
    }
}

/// Jobs through the gates, held first or not (the slot accounting aside), in `ready`.
pub(in crate::dispatch::flow) fn merged(mut out: FlowOut) -> FlowOut {
    out.ready.append(&mut out.resumed);
    out
}

pub(in crate::dispatch::flow) fn ready(out: &FlowOut) -> Vec<u64> {
    out.ready.iter().map(|j| j.lsn).collect()
}

fn skipped(out: &FlowOut) -> Vec<(u64, SkipReason)> {
    out.skipped.iter().map(|(j, r)| (j.lsn, *r)).collect()
}

#[test]
fn triggers_without_gates_pass_untouched() {
    let mut r = Rig::new("rate_limit = { period = \"1s\", max = 1 }", "");
    for _ in 0..3 {
        let (lsn, out) = r.offer_with("plain", "{}", &[]);
        assert_eq!(ready(&out), vec![lsn]);
    }
    assert_eq!(r.engine.next_deadline(), None);
}

#[test]
fn rate_limit_skips_past_max_per_sliding_window() {
    let mut r = Rig::new("rate_limit = { period = \"60s\", max = 1 }", "");
    let (a, out) = r.offer("{}");
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer("{}");
    assert!(out.ready.is_empty());
    assert_eq!(skipped(&out), vec![(b, SkipReason::RateLimited)]);
    assert_eq!(r.engine.waiting(), 0, "a skip holds nothing");
    r.advance(Duration::from_secs(60) - MS);
    let (c, out) = r.offer("{}");
    assert_eq!(skipped(&out), vec![(c, SkipReason::RateLimited)]);
    r.advance(MS);
    let (d, out) = r.offer("{}");
    assert_eq!(
        ready(&out),
        vec![d],
        "the first hit left the window at +60 s"
    );
    assert_eq!(
        (r.count("rate_limit", "pass"), r.count("rate_limit", "skip")),
        (2, 2)
    );
}

#[test]
fn rate_limit_is_per_key() {
    let mut r = Rig::new(
        "rate_limit = { key = \"event.body.user\", period = \"1m\", max = 2 }",
        "",
    );
    for user in ["a", "a", "b", "b"] {
        let (_, out) = r.offer(&format!("{{\"user\":\"{user}\"}}"));
        assert_eq!(out.ready.len(), 1, "{user}");
    }
    let (_, out) = r.offer("{\"user\":\"a\"}");
    assert_eq!(out.skipped.len(), 1);
    let (_, out) = r.offer("{\"other\":1}");
    assert_eq!(out.ready.len(), 1, "a missing value is the key \"null\"");
}

#[test]
fn throttle_delays_excess_until_the_window_has_room() {
    let mut r = Rig::new("throttle = { period = \"1s\", max = 1 }", "");
    let (a, out) = r.offer("{}");
    assert_eq!(ready(&out), vec![a]);
    r.advance(100 * MS);
    let (b, out) = r.offer("{}");
    let (c, out2) = r.offer("{}");
    assert!(out.ready.is_empty() && out2.ready.is_empty());
    assert!(
        out.skipped.is_empty() && out2.skipped.is_empty(),
        "never dropped"
    );
    assert_eq!(r.engine.waiting(), 2);
    assert_eq!(
        r.engine.next_deadline(),
        Some(1_000_000_000 + 1_000_000_000)
    );
    assert!(r.advance(899 * MS).ready.is_empty());
    assert_eq!(ready(&r.advance(MS)), vec![b], "b goes at a + 1 s");
    assert!(r.advance(999 * MS).ready.is_empty());
    assert_eq!(ready(&r.advance(MS)), vec![c], "c goes at b + 1 s, FIFO");
    assert_eq!(r.engine.waiting(), 0);
    assert_eq!(
        (r.count("throttle", "pass"), r.count("throttle", "wait")),
        (1, 2)
    );
}

#[test]
fn throttle_newcomers_queue_behind_waiters() {
    let mut r = Rig::new("throttle = { period = \"1s\", max = 2 }", "");
    r.offer("{}");
    r.offer("{}");
    let (c, _) = r.offer("{}");
    r.advance(Duration::from_secs(1) - MS);
    let (d, out) = r.offer("{}");
    assert!(out.ready.is_empty());
    let out = r.advance(MS);
    assert_eq!(
        ready(&out),
        vec![c, d],
        "both hits left together: two waiters go, in order"
    );
}

#[test]
fn debounce_delivers_only_the_latest_after_quiet() {
    let mut r = Rig::new("debounce = { period = \"500ms\" }", "");
    let mut skipped_all = Vec::new();
    let mut last = 0;
    for _ in 0..5 {
        let (lsn, out) = r.offer("{}");
        assert!(out.ready.is_empty());
        assert_eq!(
            out.held,
            vec![(lsn, Stage::Debounce)],
            "every newcomer gives its dispatch slot back, naming its gate"
        );
        skipped_all.extend(skipped(&out));
        last = lsn;
        r.advance(100 * MS);
    }
    assert_eq!(
        skipped_all,
        (1..5)
            .map(|l| (l, SkipReason::Debounced))
            .collect::<Vec<_>>()
    );
    // The latest arrived at +400 ms; it goes at +900 ms.
    assert!(r.advance(399 * MS).ready.is_empty());
    assert_eq!(ready(&r.advance(MS)), vec![last]);
    assert_eq!(r.engine.waiting(), 0);
    assert_eq!(
        r.engine.next_deadline(),
        None,
        "one timer per key, re-armed, then gone"
    );
    assert_eq!(
        (
            r.count("debounce", "pass"),
            r.count("debounce", "wait"),
            r.count("debounce", "skip")
        ),
        (0, 1, 4),
        "one decision per event: four superseded, the last delivered after waiting"
    );
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 0);
}

/// Held events are reported once (their slot goes back); released ones come out as `resumed`
/// (they need a slot again); events never held stay `ready`. The gauge follows.
#[test]
fn held_events_are_reported_and_come_back_as_resumed() {
    let mut r = Rig::new("throttle = { period = \"1s\", max = 1 }", "");
    let mut out = FlowOut::default();
    let now = r.now();
    let job = r_job;
    r.engine.offer(job(1), now, &mut out);
    r.engine.offer(job(2), now, &mut out);
    r.engine.offer(job(3), now, &mut out);
    assert_eq!(ready(&out), vec![1], "through at once: keeps its slot");
    assert_eq!(
        out.held,
        vec![(2, Stage::Throttle), (3, Stage::Throttle)],
        "held: their slots go back"
    );
    assert!(out.resumed.is_empty());
    assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 2);
    r.clock.advance(Duration::from_secs(1));
    let mut out = FlowOut::default();
    let now = r.now();
    r.engine.on_tick(now, false, &mut out);
    assert!(out.ready.is_empty() && out.held.is_empty());
    assert_eq!(
        out.resumed.iter().map(|j| j.lsn).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 1);
    assert_eq!(
        (r.count("throttle", "pass"), r.count("throttle", "wait")),
        (1, 1)
    );
}

/// Past `[flow] max_held` keys, debounce delivers the key whose quiet ends soonest early
/// (never a superseded event), and counts it as an overflow.
#[test]
fn debounce_past_max_held_delivers_the_soonest_key_early() {
    let mut r = Rig::new(
        "debounce = { key = \"event.body.k\", period = \"1s\" }",
        "[flow]\nmax_held = 2",
    );
    let (a, _) = r.offer("{\"k\":1}");
    r.advance(100 * MS);
    let (_b, _) = r.offer("{\"k\":2}");
    r.advance(100 * MS);
    let (_c, out) = r.offer("{\"k\":3}");
    assert_eq!(ready(&out), vec![a], "k=1 ends soonest: it goes early");
    assert!(out.skipped.is_empty());
    assert_eq!(r.metrics.flow.overflows(0, Stage::Debounce as usize), 1);
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 2);
    // A newer event of a held key supersedes without growing the hold.
    let (d, out) = r.offer("{\"k\":2}");
    assert_eq!(skipped(&out).len(), 1);
    assert!(out.ready.is_empty());
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 2);
    let out = r.advance(Duration::from_secs(2));
    let mut got = ready(&out);
    got.sort_unstable();
    assert_eq!(got, vec![3, d]);
}

#[test]
fn debounce_keys_are_independent() {
    let mut r = Rig::new(
        "debounce = { key = \"event.headers.x-k\", period = \"1s\" }",
        "",
    );
    let (a, _) = r.offer_with("t", "", &[("x-k", "1")]);
    let (b, out) = r.offer_with("t", "", &[("x-k", "2")]);
    assert!(out.skipped.is_empty());
    let mut out = r.advance(Duration::from_secs(1));
    out.ready.sort_by_key(|j| j.lsn);
    assert_eq!(ready(&out), vec![a, b]);
}

#[test]
fn singleton_skips_while_in_progress_and_frees_at_release() {
    let mut r = Rig::new("singleton = { key = \"event.body.repo\" }", "");
    let (a, out) = r.offer("{\"repo\":1}");
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer("{\"repo\":1}");
    assert_eq!(skipped(&out), vec![(b, SkipReason::SingletonActive)]);
    let (c, out) = r.offer("{\"repo\":2}");
    assert_eq!(ready(&out), vec![c], "another key is free");
    assert!(r.release(a).ready.is_empty());
    let (d, out) = r.offer("{\"repo\":1}");
    assert_eq!(ready(&out), vec![d]);
    assert_eq!(r.count("singleton", "skip"), 1);
}

#[test]
fn empty_singleton_is_one_gate_for_the_trigger() {
    let mut r = Rig::new("singleton = {}", "");
    let (a, _) = r.offer("{\"repo\":1}");
    let (_, out) = r.offer("{\"repo\":2}");
    assert_eq!(out.skipped.len(), 1);
    r.release(a);
    assert_eq!(r.offer("{}").1.ready.len(), 1);
}

#[test]
fn concurrency_orders_waiters_by_priority_then_arrival() {
    let mut r = Rig::new(
        "concurrency = { max = 1 }\n\
         priority = { key = \"event.headers.x-tier\", order = [\"gold\", \"silver\", \"bronze\"] }",
        "",
    );
    let (first, out) = r.offer_with("t", "", &[("x-tier", "bronze")]);
    assert_eq!(ready(&out), vec![first]);
    let mut lsn = |tier: &str| {
        let (l, out) = r.offer_with("t", "", &[("x-tier", tier)]);
        assert!(out.ready.is_empty() && out.skipped.is_empty());
        l
    };
    let bronze = lsn("bronze");
    let unlisted = lsn("tin");
    let gold = lsn("gold");
    let silver = lsn("silver");
    let gold2 = lsn("gold");
    let none = {
        let (l, out) = r.offer("");
        assert!(out.ready.is_empty());
        l
    };
    assert_eq!(r.engine.waiting(), 6);
    let mut order = Vec::new();
    let mut current = first;
    for _ in 0..6 {
        let out = r.release(current);
        assert_eq!(out.ready.len(), 1, "max = 1: one admitted per release");
        current = out.ready[0].lsn;
        order.push(current);
    }
    assert_eq!(order, vec![gold, gold2, silver, bronze, unlisted, none]);
    assert!(r.release(current).ready.is_empty());
    assert_eq!(r.engine.waiting(), 0);
    assert_eq!(
        (
            r.count("concurrency", "pass"),
            r.count("concurrency", "wait")
        ),
        (1, 6)
    );
}

#[test]
fn concurrency_max_per_key() {
    let mut r = Rig::new("concurrency = { key = \"event.body.t\", max = 2 }", "");
    let (a, _) = r.offer("{\"t\":\"x\"}");
    let (b, out) = r.offer("{\"t\":\"x\"}");
    assert_eq!(ready(&out), vec![b]);
    let (c, out) = r.offer("{\"t\":\"x\"}");
    assert!(out.ready.is_empty());
    assert_eq!(r.offer("{\"t\":\"y\"}").1.ready.len(), 1);
    assert_eq!(ready(&r.release(a)), vec![c]);
    assert!(r.release(b).ready.is_empty());
    assert!(r.release(c).ready.is_empty());
    assert!(r.engine.progress.line(0, "x").is_none(), "idle key removed");
}

#[test]
fn gates_run_in_order_singleton_holds_through_a_concurrency_wait() {
    let mut r = Rig::new(
        "rate_limit = { period = \"1h\", max = 3 }\n\
         singleton = { key = \"event.body.k\" }\n\
         concurrency = { max = 1 }",
        "",
    );
    let (a, out) = r.offer("{\"k\":1}");
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer("{\"k\":2}");
    assert!(out.ready.is_empty(), "b waits for the concurrency slot");
    let (c, out) = r.offer("{\"k\":2}");
    assert_eq!(
        skipped(&out),
        vec![(c, SkipReason::SingletonActive)],
        "b holds k=2"
    );
    let (d, out) = r.offer("{\"k\":3}");
    assert_eq!(
        skipped(&out),
        vec![(d, SkipReason::RateLimited)],
        "rate_limit comes before singleton: c used the third hit"
    );
    assert_eq!(ready(&r.release(a)), vec![b]);
}

#[test]
fn batch_flushes_at_size_and_at_timeout() {
    let mut r = Rig::new("batch = { size = 3, timeout = \"2s\" }", "");
    let (a, o1) = r.offer("{\"n\":1}");
    let (b, o2) = r.offer("not json");
    assert!(o1.ready.is_empty() && o2.ready.is_empty());
    let (c, out) = r.offer("{\"n\":3}");
    assert_eq!(out.ready.len(), 1);
    let carrier = &out.ready[0];
    assert_eq!(carrier.lsn, a);
    assert_eq!(carrier.lsns(), vec![a, b, c]);
    assert_eq!(carrier.events(), 3);
    let body: serde_json::Value = serde_json::from_slice(&carrier.event.body).unwrap();
    assert_eq!(body.as_array().unwrap().len(), 3);
    assert_eq!(body[1]["body_base64"], "bm90IGpzb24=");
    assert_eq!(r.engine.waiting(), 0);
    // A partial batch leaves at its timeout, counted from its first member.
    let (d, _) = r.offer("{}");
    r.advance(Duration::from_secs(1));
    let (e, _) = r.offer("{}");
    assert!(r.advance(Duration::from_secs(1) - MS).ready.is_empty());
    let out = r.advance(MS);
    assert_eq!(out.ready.len(), 1);
    assert_eq!(out.ready[0].lsns(), vec![d, e]);
    // The stale timer of the size-flushed batch fired harmlessly.
    assert_eq!(r.engine.next_deadline(), None);
    assert_eq!((r.count("batch", "pass"), r.count("batch", "wait")), (1, 4));
}

#[test]
fn batch_keys_collect_separately() {
    let mut r = Rig::new(
        "batch = { key = \"event.body.g\", size = 2, timeout = \"1s\" }",
        "",
    );
    let (a, _) = r.offer("{\"g\":1}");
    let (_, out) = r.offer("{\"g\":2}");
    assert!(out.ready.is_empty());
    let (b, out) = r.offer("{\"g\":1}");
    assert_eq!(out.ready[0].lsns(), vec![a, b]);
}

#[test]
fn window_keys_are_bounded_idle_ones_evicted_then_overflow_shared() {
    let mut r = Rig::new(
        "rate_limit = { key = \"event.body.k\", period = \"1s\", max = 1 }",
        "[flow]\nmax_gate_keys = 2",
    );
    assert_eq!(r.offer("{\"k\":1}").1.ready.len(), 1);
    assert_eq!(r.offer("{\"k\":2}").1.ready.len(), 1);
    assert_eq!(r.engine.window_keys(), 2);
    // Table full, nothing idle: k=3 and k=4 share the overflow key (limit applies to both).
    assert_eq!(r.offer("{\"k\":3}").1.ready.len(), 1);
    assert_eq!(r.offer("{\"k\":4}").1.skipped.len(), 1);
    assert_eq!(r.metrics.flow.overflows(0, 2), 2);
    assert_eq!(r.engine.window_keys(), 2);
    // After the windows empty, idle keys are evicted and new keys get their own entry.
    r.advance(Duration::from_secs(1));
    assert_eq!(r.offer("{\"k\":5}").1.ready.len(), 1);
    assert_eq!(r.offer("{\"k\":6}").1.ready.len(), 1);
    assert_eq!(r.engine.window_keys(), 2);
    assert_eq!(r.metrics.flow.overflows(0, 2), 2);
    assert!(r.engine.windows.has(0, Stage::RateLimit, "5"));
}

#[test]
fn throttle_keys_with_waiters_are_not_evicted() {
    let mut r = Rig::new(
        "throttle = { key = \"event.body.k\", period = \"1s\", max = 1 }",
        "[flow]\nmax_gate_keys = 1",
    );
    r.offer("{\"k\":1}");
    let (b, _) = r.offer("{\"k\":1}");
    r.advance(Duration::from_millis(999));
    r.engine.windows.sweep(r.now());
    assert_eq!(r.engine.window_keys(), 1);
    assert_eq!(ready(&r.advance(MS)), vec![b]);
}

/// A throttle window saved by one engine is restored by the next (a restart): the window is
/// still full, so the next event waits for the rest of the period, not a whole one.
#[test]
fn throttle_window_survives_a_restart_through_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let gates =
        "throttle = { period = \"10s\", max = 1 }\nrate_limit = { period = \"1h\", max = 5 }";
    let mut r = Rig::new(gates, "");
    let cfg = r.engine.config.clone();
    let core = crate::dispatch::placement::owner_core("http://h/", cfg.workers);
    let store = |c: &DispatchSpec| persist::Store::open(dir.path(), core, c);
    r.engine = FlowEngine::new(cfg.clone(), r.metrics.clone(), Some(store(&cfg)));
    assert_eq!(r.offer("{}").1.ready.len(), 1, "the window was empty");
    r.advance(200 * MS); // saves (due at once after the first hit)
    assert!(dir.path().join(format!("core-{core}.json")).exists());
    // Another core's engine does not take a window it does not own.
    let other = persist::Store::open(dir.path(), core + 1, &cfg);
    let mut e2 = FlowEngine::new(cfg.clone(), r.metrics.clone(), Some(other));
    let mut out = FlowOut::default();
    e2.offer(r_job(9), 5, &mut out);
    assert_eq!(out.ready.len(), 1, "core {} owns nothing here", core + 1);
    // The restart: a new engine on a clock that starts again near zero.
    let mut e3 = FlowEngine::new(cfg.clone(), r.metrics.clone(), Some(store(&cfg)));
    let mut out = FlowOut::default();
    e3.offer(r_job(10), 1_000, &mut out);
    assert!(
        out.ready.is_empty(),
        "the restored window is full: it waits"
    );
    assert_eq!(out.held, vec![(10, Stage::Throttle)]);
    e3.on_tick(2_000, false, &mut out); // saves the rate_limit hit, which made a save due
    let due = e3.next_deadline().expect("a throttle timer");
    assert!(
        (9_000_000_000..=9_900_000_000).contains(&due),
        "room in ~9.8 s (10 s after the hit), not at once and not 10 s from now: {due}"
    );
}

fn r_job(lsn: u64) -> Job {
    crate::dispatch::job::test_job(&format!("e{lsn}"), lsn)
}

/// The manifest `Rig::new` builds, as a config (for a reload's new gates).
pub(in crate::dispatch::flow) fn rig_config(gates: &str) -> Arc<DispatchSpec> {
    let text = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n{gates}\n\
         [[triggers]]\nid = \"plain\"\nprovider = \"p\"\npath = \"/plain\"\nhandler = \"http://h/\"\n"
    );
    let raw = Config::parse_manifest(&text).unwrap();
    Arc::new(
        Config::build(raw, &|_| None, &Overrides::default())
            .unwrap()
            .dispatch_spec(),
    )
}

impl Rig {
    pub(in crate::dispatch::flow) fn rekey(&mut self, gates: &str) -> FlowOut {
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine.rekey(rig_config(gates), now, &mut out);
        out
    }
}

#[test]
fn rekey_offers_held_events_to_the_new_gates_and_keeps_in_progress_holds() {
    let mut r = Rig::new("concurrency = { max = 1 }", "");
    let (a, out) = r.offer("{}");
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer("{}");
    assert_eq!(out.held, vec![(b, Stage::Concurrency)]);
    let (c, _) = r.offer("{}");
    assert_eq!(r.engine.waiting(), 2);
    let conc = Stage::Concurrency as usize;
    assert_eq!(r.metrics.flow.held(0, conc), 2, "the trigger's gauge");
    // max 1 → 2: `a` still holds one slot, so `b` goes on and `c` waits.
    let out = r.rekey("concurrency = { max = 2 }");
    assert!(
        out.held.is_empty(),
        "already held: their slots were given back"
    );
    assert!(out.ready.is_empty(), "a held event goes on as resumed");
    assert_eq!(
        out.resumed.iter().map(|j| j.lsn).collect::<Vec<_>>(),
        vec![b]
    );
    assert!(out.skipped.is_empty());
    assert_eq!(r.engine.waiting(), 1);
    assert_eq!(r.metrics.flow.held(0, conc), 1);
    let out = r.release(a);
    assert_eq!(
        ready(&out),
        vec![c],
        "a's hold was carried over and released"
    );
    assert_eq!(r.metrics.flow.held(0, conc), 0);
    // Gates removed: nothing is held any more, a new event passes at once.
    let out = r.rekey("");
    assert!(out.ready.is_empty() && out.resumed.is_empty() && r.engine.waiting() == 0);
    let (d, out) = r.offer("{}");
    assert_eq!(ready(&out), vec![d]);
}

/// Unchanged gates keep their state; a held event re-enters only from its own stage on (the
/// gates before it, which it passed, are not applied again); a removed gate lets it go on.
#[test]
fn rekey_keeps_an_unchanged_window_and_reoffers_from_the_held_stage() {
    let gates = "throttle = { period = \"60s\", max = 1 }";
    let mut r = Rig::new(gates, "");
    let (a, out) = r.offer("{}");
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer("{}");
    assert!(out.ready.is_empty());
    // Same throttle: its window and its waiter stay as they are.
    let out = r.rekey(gates);
    assert!(merged(out).ready.is_empty());
    assert_eq!(r.engine.waiting(), 1);
    assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 1);
    // A debounce added before the throttle does not apply to `b` (it passed that stage); the
    // throttle with a longer period keeps the hit of `a`: `b` still waits.
    let out = r.rekey("debounce = { period = \"1s\" }\nthrottle = { period = \"120s\", max = 1 }");
    assert!(merged(out).ready.is_empty() && r.engine.waiting() == 1);
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 0);
    assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 1);
    // The throttle removed: `b` goes on (the batch before it is not applied), counted `wait`
    // once at the throttle.
    let out = r.rekey("batch = { size = 10, timeout = \"1s\" }");
    assert_eq!(
        out.resumed.iter().map(|j| j.lsn).collect::<Vec<_>>(),
        vec![b]
    );
    assert_eq!(r.metrics.flow.held(0, Stage::Throttle as usize), 0);
    assert_eq!(
        (r.count("throttle", "pass"), r.count("throttle", "wait")),
        (1, 1)
    );
    // Batch members whose batch becomes a debounce: both re-offered from the next stage on,
    // the older one superseded.
    let (c, _) = r.offer("{}");
    let (d, _) = r.offer("{}");
    let out = r.rekey("debounce = { period = \"1s\" }");
    assert_eq!(skipped(&out), vec![(c, SkipReason::Debounced)]);
    assert_eq!(r.metrics.flow.held(0, Stage::Batch as usize), 0);
    assert_eq!(r.metrics.flow.held(0, Stage::Debounce as usize), 1);
    let out = r.advance(Duration::from_secs(1));
    assert_eq!(ready(&out), vec![d]);
    assert_eq!(r.engine.waiting(), 0);
}

#[test]
fn rekey_gives_a_concurrency_waiter_its_own_singleton_back() {
    // singleton and concurrency on different keys: `b` passed its singleton and waits.
    let gates = "singleton = { key = \"event.body.s\" }\nconcurrency = { max = 1 }";
    let mut r = Rig::new(gates, "");
    let (a, out) = r.offer(r#"{"s":"x"}"#);
    assert_eq!(ready(&out), vec![a]);
    let (b, out) = r.offer(r#"{"s":"y"}"#);
    assert!(out.ready.is_empty() && out.skipped.is_empty());
    let out = r.rekey("singleton = { key = \"event.body.s\" }\nconcurrency = { max = 2 }");
    assert!(
        out.skipped.is_empty(),
        "not skipped against its own singleton key"
    );
    assert_eq!(
        merged(out).ready.iter().map(|j| j.lsn).collect::<Vec<_>>(),
        vec![b]
    );
    // `a` is still in progress under its carried singleton key.
    let (c, out) = r.offer(r#"{"s":"x"}"#);
    assert_eq!(skipped(&out), vec![(c, SkipReason::SingletonActive)]);
}

mod reload;

mod refs;

/// The order horizon (`dispatch::horizon`): an event at or past it is held in its key's line
/// (throttle and concurrency, room or not), and leaves in acceptance order when the horizon
/// passes it — counted `pass` when the gate had room for it; the gate polls for the horizon
/// meanwhile.
#[test]
fn events_wait_for_the_order_horizon_then_leave_in_order() {
    for gates in [
        "concurrency = { max = 2 }",
        "throttle = { period = \"1s\", max = 2 }",
    ] {
        let stage = match gates.starts_with("concurrency") {
            true => Stage::Concurrency,
            false => Stage::Throttle,
        };
        let mut r = Rig::new(gates, "");
        // Test ids have no order time (0): a horizon of 0 holds them, 1 passes them.
        r.engine.note_horizon(0);
        let mut held = Vec::new();
        let mut lsns = Vec::new();
        for _ in 0..3 {
            let (lsn, out) = r.offer_with("t", "{}", &[]);
            assert!(out.ready.is_empty(), "{gates}");
            held.extend(out.held);
            lsns.push(lsn);
        }
        let want: Vec<_> = lsns.iter().map(|&l| (l, stage)).collect();
        assert_eq!(held, want, "{gates}: each held, its slot given back");
        assert!(r.engine.horizon_waiting() > 0);
        let poll = r.engine.next_deadline().expect("polls for the horizon");
        assert!(poll <= r.now() + HORIZON_POLL, "{gates}");
        let out = r.advance(MS);
        assert!(
            out.ready.is_empty(),
            "{gates}: the horizon has not passed them"
        );
        r.engine.note_horizon(1);
        let mut out = FlowOut::default();
        let now = r.now();
        r.engine.release_ordered(now, &mut out);
        let resumed: Vec<u64> = out.resumed.iter().map(|j| j.lsn).collect();
        assert_eq!(
            resumed,
            lsns[..2],
            "{gates}: in acceptance order; the third waits for room"
        );
        let name = stage.name();
        assert_eq!(
            r.count(name, "pass"),
            2,
            "{gates}: they waited for the horizon only"
        );
        assert_eq!(
            r.metrics.flow.held(0, stage as usize),
            1,
            "{gates}: the third is held"
        );
    }
}
