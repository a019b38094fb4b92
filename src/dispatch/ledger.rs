//! The event ledger (issue 27): per trigger, over the logs' lives, `accepted = delivered +
//! dead_lettered + skipped + no_handler + pending`, always; `retired` of the `accepted` events
//! were deleted by retention (their fates stay counted), so no count goes down across
//! retention or a restart.
//!
//! **Kept by each pump, published per core.** A pump starts from what recovery counted in its
//! logs ([`crate::wal::TriggerTally`]: events, their `Done` entries by status, and how many
//! retired — the logs' `RETIRED` files plus their retained records), counts each
//! event made durable in its own log (`PumpCore::on_durable`) and each `Done` entry once it is
//! durable (`PumpCore::on_record_done`): an event is `pending` from its durable 202 until its
//! outcome is durable, so the balance holds at every instant and across crashes (what recovery
//! rebuilds is what was durable). The pump owns its [`PumpLedger`] alone; every
//! [`PUBLISH_EVERY`] at most, when it changed, it copies it into its core's cell of the
//! [`LedgerBoard`] (one `Mutex` per core, held for the copy; readers — `/metrics`,
//! `/api/v1/ledger` — lock each cell in turn and add them up). A reader thus sees each core's
//! ledger as of its last publication, each balanced on its own, so the sum balances too.
//! Loom model: `loom-tests/tests/ledger.rs`. What retention deletes moves nothing but
//! `retired`: each log's commit helper publishes its cumulative retired counts per trigger
//! (`wal::RetiredCounts`, loom model `retired`), and the pump folds what grew into its rows
//! ([`PumpLedger::fold_retired`], every retention round). With the ledger the pump publishes its live events'
//! states ([`LiveState`]: dispatched, or held by a gate), which `GET /api/v1/events/{id}` reads
//! for an event its log still says is pending.
//!
//! **Bound:** one row per trigger id the logs hold or the pumps saw (the configured triggers,
//! the default route's and those of earlier configurations still in the retained log), per
//! core, and one retired count per (log, row).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};

use crate::metrics::prom::{MetricType, PromWriter};
use crate::sync::Mutex;
use crate::wal::{DoneStatus, TriggerTally};

/// How often at most a pump publishes its ledger (nanoseconds of its clock).
pub const PUBLISH_EVERY: u64 = 100_000_000;

/// One trigger's counts: `done` by [`DoneStatus`] code (1..=7); `retired` of the `accepted`
/// events were deleted by retention (their fates stay in `done`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Row {
    pub accepted: u64,
    pub done: [u64; 8],
    pub retired: u64,
}

impl Row {
    fn add(&mut self, o: &Row) {
        self.accepted += o.accepted;
        self.retired += o.retired;
        for (d, x) in self.done.iter_mut().zip(o.done) {
            *d += x;
        }
    }

    pub fn delivered(&self) -> u64 {
        self.done[DoneStatus::Delivered as usize]
    }

    pub fn dead_lettered(&self) -> u64 {
        self.done[DoneStatus::DeadLettered as usize]
    }

    pub fn no_handler(&self) -> u64 {
        self.done[DoneStatus::NoHandler as usize]
    }

    /// Skips by reason: `(reason, count)`, `unrecorded` for status 3 (written before reasons).
    pub fn skipped_by(&self) -> [(&'static str, u64); 4] {
        [
            ("unrecorded", self.done[DoneStatus::Skipped as usize]),
            (
                "rate_limited",
                self.done[DoneStatus::SkippedRateLimited as usize],
            ),
            (
                "debounced",
                self.done[DoneStatus::SkippedDebounced as usize],
            ),
            (
                "singleton_active",
                self.done[DoneStatus::SkippedSingletonActive as usize],
            ),
        ]
    }

    pub fn skipped(&self) -> u64 {
        self.skipped_by().iter().map(|s| s.1).sum()
    }

    pub fn pending(&self) -> u64 {
        self.accepted.saturating_sub(self.done.iter().sum())
    }

    /// The ledger's JSON row (a stable format: README, "HTTP interface").
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "accepted": self.accepted,
            "delivered": self.delivered(),
            "dead_lettered": self.dead_lettered(),
            "skipped": self.skipped(),
            "no_handler": self.no_handler(),
            "pending": self.pending(),
            "retired": self.retired,
        })
    }
}

/// One pump's ledger (single-threaded).
#[derive(Debug, Default)]
pub struct PumpLedger {
    names: Vec<String>,
    index: HashMap<String, u32>,
    rows: Vec<Row>,
    changed: bool,
    next_publish: u64,
    /// The retired count last folded in, per (log index, row).
    retired_seen: HashMap<(usize, usize), u64>,
    /// The row [`slot`](Self::slot) found last: tried before the map.
    last: usize,
}

impl PumpLedger {
    /// Starting from what recovery counted in the pump's logs: `(log index, its tallies)`.
    pub fn recovered<'a>(
        logs: impl IntoIterator<Item = (usize, &'a BTreeMap<String, TriggerTally>)>,
    ) -> Self {
        let mut l = PumpLedger::default();
        for (log, tallies) in logs {
            l.add_log(log, tallies);
        }
        l.changed = true;
        l
    }

    /// Adds the tallies recovered from log `log` (a log adopted at start-up or later).
    pub fn add_log(&mut self, log: usize, tallies: &BTreeMap<String, TriggerTally>) {
        for (trigger, t) in tallies {
            let i = self.slot(trigger);
            self.rows[i].add(&Row {
                accepted: t.accepted,
                done: t.done,
                retired: t.retired,
            });
            *self.retired_seen.entry((log, i)).or_default() += t.retired;
        }
        self.changed = true;
    }

    /// Log `log`'s retired counts as its commit helper published them (cumulative per
    /// trigger, `wal::RetiredCounts`): what grew since the last ones is added to `retired`.
    /// Nothing else moves: the retired events' fates were counted when their `Done` entries
    /// became durable (or by recovery).
    pub fn fold_retired(&mut self, log: usize, counts: &[(String, u64)]) {
        for (trigger, n) in counts {
            let i = self.slot(trigger);
            let seen = self.retired_seen.entry((log, i)).or_default();
            if *n > *seen {
                self.rows[i].retired += *n - *seen;
                *seen = *n;
                self.changed = true;
            }
        }
    }

    /// The row index of `trigger` (a new row the first time).
    pub fn slot(&mut self, trigger: &str) -> usize {
        // Runs of one trigger are the common case: the row found last is tried first.
        if self.names.get(self.last).is_some_and(|n| n == trigger) {
            return self.last;
        }
        if let Some(&i) = self.index.get(trigger) {
            self.last = i as usize;
            return i as usize;
        }
        let i = self.rows.len();
        self.names.push(trigger.to_owned());
        self.index.insert(trigger.to_owned(), i as u32);
        self.rows.push(Row::default());
        self.last = i;
        i
    }

    /// The trigger id of row `slot` (`""` for a row never given).
    pub fn name(&self, slot: usize) -> &str {
        self.names.get(slot).map_or("", String::as_str)
    }

    /// An event of row `slot` was made durable.
    pub fn accepted(&mut self, slot: usize) {
        self.rows[slot].accepted += 1;
        self.changed = true;
    }

    /// The `Done` entry of an event of row `slot` is durable.
    pub fn done(&mut self, slot: usize, status: DoneStatus) {
        self.rows[slot].done[status as usize] += 1;
        self.changed = true;
    }

    /// Copies the ledger into `board`'s cell `core` when `now` (clock nanos) is past the next
    /// publication time and it changed; true when that time has come (changed or not: the
    /// caller publishes its live states with it).
    pub fn publish_if_due(&mut self, board: &LedgerBoard, core: usize, now: u64) -> bool {
        if now < self.next_publish {
            return false;
        }
        if !self.changed {
            self.next_publish = now + PUBLISH_EVERY;
            return true;
        }
        self.changed = false;
        self.next_publish = now + PUBLISH_EVERY;
        let snapshot: Snapshot = self
            .names
            .iter()
            .cloned()
            .zip(self.rows.iter().copied())
            .collect();
        board.publish(core, snapshot);
        true
    }
}

/// What a live event is doing, as its pump last published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveState {
    /// Dispatched: queued at its destination's owner core, on the wire, or waiting for a retry.
    InFlight,
    /// The flow gate of this name holds it.
    Held(&'static str),
}

/// One core's live events: per log name, `(LSN, state)` in LSN order. Bound: the pump's live
/// events (its dispatch window and the events its gates hold).
pub type LiveSnapshot = Vec<(String, Vec<(crate::wal::Lsn, LiveState)>)>;

/// One core's published ledger: a row per trigger id.
pub type Snapshot = Vec<(String, Row)>;

/// A Prometheus family of the ledger: name, help, the row's count.
type Family = (&'static str, &'static str, fn(&Row) -> u64);

/// Every core's last published ledger and live states.
#[derive(Debug, Default)]
pub struct LedgerBoard {
    cores: Box<[Mutex<Snapshot>]>,
    live: Box<[Mutex<LiveSnapshot>]>,
}

impl LedgerBoard {
    pub fn new(cores: usize) -> LedgerBoard {
        LedgerBoard {
            cores: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
            live: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Core `core`'s live states replace its last ones.
    pub fn publish_live(&self, core: usize, live: LiveSnapshot) {
        if let Some(cell) = self.live.get(core) {
            *cell.lock().unwrap_or_else(|p| p.into_inner()) = live;
        }
    }

    /// The published state of the event at `lsn` of the log named `log`, if a pump has it live.
    pub fn live_state(&self, log: &str, lsn: crate::wal::Lsn) -> Option<LiveState> {
        self.live.iter().find_map(|cell| {
            let logs = cell.lock().unwrap_or_else(|p| p.into_inner());
            let (_, events) = logs.iter().find(|(name, _)| name == log)?;
            let i = events.binary_search_by_key(&lsn, |e| e.0).ok()?;
            Some(events[i].1)
        })
    }

    /// Core `core`'s ledger replaces its last one (a core index out of range is ignored).
    pub fn publish(&self, core: usize, rows: Snapshot) {
        if let Some(cell) = self.cores.get(core) {
            *cell.lock().unwrap_or_else(|p| p.into_inner()) = rows;
        }
    }

    /// The sum over the cores, per trigger.
    pub fn merged(&self) -> BTreeMap<String, Row> {
        let mut out: BTreeMap<String, Row> = BTreeMap::new();
        for cell in self.cores.iter() {
            let rows = cell.lock().unwrap_or_else(|p| p.into_inner());
            for (t, r) in rows.iter() {
                out.entry(t.clone()).or_default().add(r);
            }
        }
        out
    }

    /// `GET /api/v1/ledger`: `{"triggers": {T: {accepted, …, retired}}}`.
    pub fn json(&self) -> serde_json::Value {
        let triggers: serde_json::Map<String, serde_json::Value> = self
            .merged()
            .into_iter()
            .map(|(t, r)| (t, r.json()))
            .collect();
        serde_json::json!({ "triggers": triggers })
    }

    /// `sluice_events_{accepted,retired,delivered,dead_lettered}_total{trigger}` and
    /// `sluice_events_skipped_total{trigger,reason}`: events, not calls.
    pub fn render(&self, w: &mut PromWriter) {
        let merged = self.merged();
        let families: [Family; 4] = [
            (
                "sluice_events_accepted_total",
                "Events made durable (202), per trigger, over the log's life.",
                |r| r.accepted,
            ),
            (
                "sluice_events_retired_total",
                "Accepted events whose records retention deleted, per trigger.",
                |r| r.retired,
            ),
            (
                "sluice_events_delivered_total",
                "Events delivered (a 2xx), per trigger: events, not calls.",
                Row::delivered,
            ),
            (
                "sluice_events_dead_lettered_total",
                "Events moved to the dead-letter queue, per trigger.",
                Row::dead_lettered,
            ),
        ];
        for (name, help, get) in families {
            w.header(name, help, MetricType::Counter);
            for (t, r) in &merged {
                w.sample_u64(name, &[("trigger", t)], get(r));
            }
        }
        let name = "sluice_events_skipped_total";
        w.header(
            name,
            "Events a flow gate skipped, per trigger and reason.",
            MetricType::Counter,
        );
        for (t, r) in &merged {
            for (reason, n) in r.skipped_by() {
                w.sample_u64(name, &[("trigger", t), ("reason", reason)], n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_keeps_its_row_whichever_was_asked_for_last() {
        let mut l = PumpLedger::default();
        let (a, b) = (l.slot("a"), l.slot("b"));
        assert_ne!(a, b);
        for name in ["a", "a", "b", "a", "b", "b", "c", "a"] {
            let row = l.slot(name);
            assert_eq!(l.name(row), name);
        }
        assert_eq!((l.slot("a"), l.slot("b"), l.slot("c")), (a, b, 2));
    }

    #[test]
    fn a_pump_ledger_balances_from_recovery_on_and_publishes_when_due() {
        let mut tally = TriggerTally {
            accepted: 5,
            retired: 2,
            ..TriggerTally::default()
        };
        tally.done[DoneStatus::Delivered as usize] = 3;
        let recovered = BTreeMap::from([("a".to_owned(), tally)]);
        let mut l = PumpLedger::recovered([(0, &recovered)]);
        let board = LedgerBoard::new(2);
        let (a, b) = (l.slot("a"), l.slot("b"));
        l.accepted(b);
        l.done(a, DoneStatus::DeadLettered);
        l.done(b, DoneStatus::SkippedDebounced);
        l.publish_if_due(&board, 1, 0);
        let m = board.merged();
        let (ra, rb) = (m["a"], m["b"]);
        assert_eq!(
            (
                ra.accepted,
                ra.delivered(),
                ra.dead_lettered(),
                ra.pending()
            ),
            (5, 3, 1, 1)
        );
        assert_eq!((rb.accepted, rb.skipped(), rb.pending()), (1, 1, 0));
        l.accepted(b);
        assert!(!l.publish_if_due(&board, 1, PUBLISH_EVERY - 1));
        assert_eq!(board.merged()["b"].accepted, 1, "not due yet");
        assert!(l.publish_if_due(&board, 1, PUBLISH_EVERY));
        assert_eq!(board.merged()["b"].accepted, 2);
        // Another core's rows add up.
        board.publish(
            0,
            vec![(
                "b".to_owned(),
                Row {
                    accepted: 3,
                    done: [0; 8],
                    retired: 0,
                },
            )],
        );
        assert_eq!(board.merged()["b"].pending(), 4);
        let live = vec![(
            "core-1".to_owned(),
            vec![(3, LiveState::Held("debounce")), (9, LiveState::InFlight)],
        )];
        board.publish_live(1, live);
        assert_eq!(board.live_state("core-1", 9), Some(LiveState::InFlight));
        assert_eq!(
            board.live_state("core-1", 3),
            Some(LiveState::Held("debounce"))
        );
        assert_eq!(board.live_state("core-1", 4), None);
        assert_eq!(board.live_state("core-0", 9), None);
        // Retired counts, cumulative per log: what recovery counted is not added again, and
        // only what grew since is (another log's counts apart).
        l.fold_retired(0, &[("a".to_owned(), 2)]);
        l.fold_retired(0, &[("a".to_owned(), 4), ("b".to_owned(), 1)]);
        l.fold_retired(3, &[("a".to_owned(), 1)]);
        l.fold_retired(0, &[("a".to_owned(), 3)]);
        assert!(l.publish_if_due(&board, 1, 2 * PUBLISH_EVERY));
        let j = board.json();
        assert_eq!(j["triggers"]["a"]["dead_lettered"], 1);
        assert_eq!(j["triggers"]["a"]["retired"], 5);
        assert_eq!(j["triggers"]["b"]["retired"], 1);
        assert_eq!(
            j["triggers"]["a"]["accepted"], 5,
            "retiring moves nothing else"
        );
        assert_eq!(j["triggers"]["a"]["pending"], 1);
        let mut w = PromWriter::new();
        board.render(&mut w);
        let text = w.finish();
        assert!(
            text.contains("sluice_events_accepted_total{trigger=\"b\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("sluice_events_skipped_total{reason=\"debounced\",trigger=\"b\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sluice_events_retired_total{trigger=\"a\"} 5"),
            "{text}"
        );
    }
}
