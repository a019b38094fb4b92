//! `ordering` (`super`): FIFO per key, replays in their original's place, and
//! keys stopped by a dead letter with `on_exhausted = "hold"`, on the manual clock and a real DLQ
//! store in a temporary directory.

use std::sync::Arc;
use std::time::Duration;

use crate::dispatch::dlq::{DlqEntry, DlqReason, DlqStore};
use crate::dispatch::flow::tests::{merged, ready, rig_config, Rig};
use crate::dispatch::flow::{FlowEngine, FlowOut};
use crate::dispatch::job::Job;
use crate::wal::EventRecord;

/// DLQ entry ids (26 characters `[0-9A-Z]`), sorting before the rig's event ids (`e…`).
const X: &str = "01JAAAAAAAAAAAAAAAAAAAAAAX";
const Y: &str = "01JAAAAAAAAAAAAAAAAAAAAAAY";

impl Rig {
    fn keyed(&mut self, key: &str) -> (u64, FlowOut) {
        self.offer_with("t", "{}", &[("x-key", key)])
    }

    /// A replay of DLQ entry `of`, of key `key`.
    fn replay(&mut self, key: &str, of: &str) -> (u64, FlowOut) {
        self.lsn += 1;
        let event = EventRecord {
            event_id: format!("r{:08}", self.lsn),
            trigger_id: "t".into(),
            source: "p".into(),
            received_at_ms: self.lsn,
            headers: vec![("x-key".into(), key.as_bytes().to_vec())],
            body: b"{}".to_vec(),
            replay_of: Some(of.into()),
            body_json: Default::default(),
        };
        let mut out = FlowOut::default();
        let now = self.now();
        self.engine
            .offer(Job::new(self.lsn, event, 0, 1, 0), now, &mut out);
        (self.lsn, merged(out))
    }

    fn dead_lettered(&mut self, lsn: u64, entry: &str) -> FlowOut {
        let mut out = FlowOut::default();
        self.engine.dead_lettered(lsn, entry, &mut out);
        merged(out)
    }
}

/// A rig whose trigger `t` has `HOLD`, its engine watching a DLQ in a temporary directory.
fn hold_rig() -> (tempfile::TempDir, Arc<DlqStore>, Rig) {
    hold_rig_with(100)
}

/// [`hold_rig`] with a DLQ of `max` entries.
fn hold_rig_with(max: usize) -> (tempfile::TempDir, Arc<DlqStore>, Rig) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(DlqStore::open(dir.path(), max).unwrap());
    let mut r = Rig::new(HOLD, "");
    let unwatched = FlowEngine::new(rig_config(""), r.metrics.clone(), None);
    r.engine = std::mem::replace(&mut r.engine, unwatched).with_dlq(Arc::clone(&store));
    (dir, store, r)
}

fn entry(id: &str, key: &str) -> DlqEntry {
    DlqEntry {
        id: id.into(),
        event: EventRecord {
            event_id: id.into(),
            trigger_id: "t".into(),
            source: "p".into(),
            received_at_ms: 1,
            headers: vec![("x-key".into(), key.as_bytes().to_vec())],
            body: b"{}".to_vec(),
            replay_of: None,
            body_json: Default::default(),
        },
        event_lsn: 1,
        destination: "http:http://h/".into(),
        reason: DlqReason::RetryExhausted,
        attempts: 5,
        last_error: "answered 500".into(),
        dead_lettered_at_ms: 1,
    }
}

const ORDERED: &str = "ordering = { key = \"event.headers.x-key\" }";
const HOLD: &str = "ordering = { key = \"event.headers.x-key\", on_exhausted = \"hold\" }";

#[test]
fn one_call_per_key_in_order_and_a_replay_goes_before_the_keys_later_events() {
    let mut r = Rig::new(ORDERED, "");
    let (a1, out) = r.keyed("A");
    assert_eq!(ready(&out), vec![a1]);
    let (a2, out) = r.keyed("A");
    assert!(out.ready.is_empty(), "one call in flight per key");
    let (a3, _) = r.keyed("A");
    let (b1, out) = r.keyed("B");
    assert_eq!(ready(&out), vec![b1], "another key is not held");
    // `dlq` (the default): a dead letter lets the key move on.
    let out = r.dead_lettered(a1, "e00000001");
    assert_eq!(ready(&out), vec![a2]);
    assert_eq!(r.engine.stopped_keys(), 0);
    // The replay of a1 waits at a1's place: before a3.
    let (ra1, out) = r.replay("A", "e00000001");
    assert!(out.ready.is_empty());
    assert_eq!(ready(&r.release(a2)), vec![ra1]);
    assert_eq!(ready(&r.release(ra1)), vec![a3]);
}

#[test]
fn a_dead_letter_stops_only_its_key_until_a_replay_goes_first_or_a_discard_lets_it_go_on() {
    let (_dir, store, mut r) = hold_rig();
    let (a1, _) = r.keyed("A");
    let (a2, _) = r.keyed("A");
    let (a3, _) = r.keyed("A");
    let (b1, out) = r.keyed("B");
    assert_eq!(ready(&out), vec![b1]);

    // a1 exhausted its retries: key A stops; B goes on.
    store.put(&entry(X, "A")).unwrap();
    let out = r.dead_lettered(a1, X);
    assert!(
        out.ready.is_empty(),
        "the key is stopped, a2 waits: {:?}",
        ready(&out)
    );
    assert_eq!(r.engine.stopped_keys(), 1);
    assert!(ready(&r.release(b1)).is_empty());
    let (b2, out) = r.keyed("B");
    assert_eq!(ready(&out), vec![b2], "a stopped key holds only itself");
    assert!(
        ready(&r.advance(Duration::from_secs(5))).is_empty(),
        "stopped, whatever the time"
    );

    // Release: the replay of X goes first, then a2.
    let (rx, out) = r.replay("A", X);
    assert_eq!(
        ready(&out),
        vec![rx],
        "the replay of the stopped entry goes at once"
    );
    assert_eq!(r.engine.stopped_keys(), 0);
    store.remove(X).unwrap(); // the replay's removal, after its append
    assert!(
        ready(&r.advance(Duration::from_millis(200))).is_empty(),
        "rx still in flight"
    );
    assert_eq!(ready(&r.release(rx)), vec![a2]);

    // a2 dead-lettered too: stopped on Y; an operator discards Y: a3 goes.
    store.put(&entry(Y, "A")).unwrap();
    assert!(r.dead_lettered(a2, Y).ready.is_empty());
    assert!(ready(&r.advance(Duration::from_millis(200))).is_empty());
    store.remove(Y).unwrap();
    let out = r.advance(Duration::from_millis(200));
    assert_eq!(ready(&out), vec![a3], "a discard lets the key move on");
    assert_eq!(r.engine.stopped_keys(), 0);

    // A restart: keys whose dead letters are in the DLQ are stopped again.
    store.put(&entry(X, "C")).unwrap();
    let mut e =
        FlowEngine::new(rig_config(HOLD), r.metrics.clone(), None).with_dlq(Arc::clone(&store));
    assert_eq!(e.stopped_keys(), 1, "rebuilt from the DLQ");
    r.engine = std::mem::replace(
        &mut e,
        FlowEngine::new(rig_config(""), r.metrics.clone(), None),
    );
    let (_, out) = r.keyed("C");
    assert!(out.ready.is_empty(), "key C is stopped after the restart");
    let (d1, out) = r.keyed("D");
    assert_eq!(ready(&out), vec![d1]);
}

#[test]
fn a_reload_that_keeps_holding_on_the_same_key_keeps_the_stopped_keys() {
    let (_dir, store, mut r) = hold_rig();
    let (a1, _) = r.keyed("A");
    let (a2, _) = r.keyed("A");
    store.put(&entry(X, "A")).unwrap();
    assert!(r.dead_lettered(a1, X).ready.is_empty());
    // Another trigger's gate changes: untouched.
    let out = r.rekey(&format!("{HOLD}\n"));
    assert!(out.ready.is_empty() && out.resumed.is_empty());
    assert_eq!(r.engine.stopped_keys(), 1);
    // A gate before it changes (a throttle added): the ordering gate keeps its state.
    let out = r.rekey(&format!(
        "{HOLD}\nthrottle = {{ period = \"1s\", max = 100 }}"
    ));
    assert!(
        merged(out).ready.is_empty(),
        "a2 stays behind the stopped key"
    );
    assert_eq!(r.engine.stopped_keys(), 1);
    // `on_exhausted = "dlq"` now: the key moves on.
    let out = r.rekey(ORDERED);
    assert_eq!(ready(&merged(out)), vec![a2]);
    assert_eq!(r.engine.stopped_keys(), 0);
    // `hold` again: the key whose dead letter is in the DLQ stops again (as at a restart).
    r.rekey(HOLD);
    assert_eq!(r.engine.stopped_keys(), 1);
}

#[test]
fn the_ordering_metrics_name_the_oldest_waiting_and_the_stopped_keys() {
    let (_dir, store, mut r) = hold_rig();
    let (a1, _) = r.keyed("A");
    r.keyed("A");
    r.keyed("B");
    r.keyed("B");
    store.put(&entry(X, "A")).unwrap();
    r.dead_lettered(a1, X);
    r.advance(Duration::from_secs(2));
    let v = r.metrics.flow.ordering("t").expect("published");
    assert!(v.hold);
    assert_eq!((v.keys_waiting, v.keys_stopped), (2, 1));
    assert_eq!(v.stopped, vec![("A".to_string(), X.to_string())]);
    assert!(v.oldest_key.is_some());
    let mut text = crate::metrics::prom::PromWriter::new();
    r.metrics.flow.render_prometheus(&mut text);
    let text = text.finish();
    assert!(
        text.contains("sluice_ordering_keys_stopped{trigger=\"t\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sluice_ordering_keys_waiting{trigger=\"t\"} 2"),
        "{text}"
    );
    // A reload that removes the gate removes its figures.
    r.rekey("concurrency = { key = \"event.headers.x-key\", max = 1 }");
    assert_eq!(r.metrics.flow.ordering("t"), None);
}

/// A poll that fell behind the DLQ's removal log (more than `REMOVALS_KEPT` removals since the
/// last one) looks the stopped entry up instead, and counts it.
#[test]
fn a_poll_behind_the_removal_log_looks_the_entry_up() {
    use crate::dispatch::dlq::store::removals::REMOVALS_KEPT;
    let n = REMOVALS_KEPT + 4;
    let (_dir, store, mut r) = hold_rig_with(n + 1);
    let (a1, _) = r.keyed("A");
    let (a2, _) = r.keyed("A");
    store.put(&entry(X, "A")).unwrap();
    assert!(r.dead_lettered(a1, X).ready.is_empty());
    r.advance(Duration::from_millis(200)); // the watch reads the log up to here
                                           // X leaves first, then more removals than the log keeps.
    let others: Vec<DlqEntry> = (0..n)
        .map(|i| entry(&format!("01JB{i:022}"), "Z"))
        .collect();
    let put = store.put_batch(others.iter().map(|e| ((), e)).collect());
    assert!(put.iter().all(|(_, r)| r.is_ok()));
    store.remove(X).unwrap();
    let removed = store.remove_batch(others.iter().map(|e| ((), e.id.as_str())).collect());
    assert!(removed.iter().all(|(_, r)| r.is_ok()));
    let out = r.advance(Duration::from_millis(200));
    assert_eq!(ready(&out), vec![a2], "found gone by lookup");
    let mut text = crate::metrics::prom::PromWriter::new();
    r.metrics.flow.render_prometheus(&mut text);
    let text = text.finish();
    assert!(
        text.contains("sluice_ordering_removal_log_overruns_total 1"),
        "{text}"
    );
}
