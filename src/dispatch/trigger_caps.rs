//! Each trigger's cap of the dispatch window, shared by every core: with two or more triggers
//! with a handler, one trigger may hold at most `max_outstanding − max_outstanding / 4` (at
//! least 1) of the `max_outstanding` dispatch slots, so a quarter of the window is always left
//! to the others (DESIGN.md "Backlog shares"); with fewer, no cap. An event whose trigger is at
//! its cap is parked by its log's pump (`dispatch::pump`) and the pump reads on; a trigger with
//! flow gates is not parked at its cap but takes it once through its gates (`Job::capless`).
//!
//! [`Slots`] is how a dispatch slot is taken, for the pumps and for a dispatcher's
//! gate-released jobs alike: the trigger's cap, then one of the shared `max_outstanding`
//! ([`Outstanding::acquire`]), the cap given back when none is left.
//!
//! Slots: one per trigger configured at start (in configuration order), then the default
//! route's, where any other trigger id is counted (the default route, a trigger a reload added).
//!
//! Layout and orderings: one cache-padded counter per slot, written by every core that takes or
//! gives that trigger's jobs. `Relaxed` throughout: each counter is its own bound (enforced by
//! the CAS on it, never past the cap) and publishes no other memory — the job itself travels
//! through a ring whose orderings publish it. Modelled with loom (`loom-tests/tests/caps.rs`).
//!
//! Bounds: each counter ≤ the cap; the parked gauges count events the pumps hold aside (in
//! memory ≤ 4096 per log, by reference past it: `dispatch::pump` "parked"), in all and by
//! trigger.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::Arc;

use crate::dispatch::outstanding::Outstanding;
use crate::metrics::prom::{MetricType, PromWriter};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::CachePadded;

/// The triggers' caps of the dispatch window (module docs).
#[derive(Debug)]
pub struct TriggerCaps {
    /// Jobs one trigger may hold (`u64::MAX`: no cap).
    cap: u64,
    /// Trigger id → slot, for the triggers configured at start.
    slot_of: HashMap<String, usize>,
    /// Slot labels: the triggers, then the default route's id.
    names: Vec<String>,
    /// Jobs each slot holds.
    held: Box<[CachePadded<AtomicU64>]>,
    /// Durable events the pumps set aside at a cap or at full flow gates (a gauge: `std`
    /// atomic, bypassing the loom shim as `crate::metrics` does; `Relaxed`).
    parked: CachePadded<StdAtomicU64>,
    /// The same, by slot (`sluice_pump_parked_by_trigger`).
    parked_by: Box<[StdAtomicU64]>,
    /// Of the parked events, those kept by reference only, and the bytes of those in memory
    /// (`dispatch::pump` "parked").
    parked_refs: StdAtomicU64,
    parked_bytes: StdAtomicU64,
}

impl TriggerCaps {
    /// The caps of `triggers` (ids configured at start, in order) and the default route
    /// `default_id`, for a window of `max_outstanding` of which `with_handler` triggers take
    /// part.
    pub fn new(
        triggers: &[&str],
        default_id: &str,
        max_outstanding: usize,
        with_handler: usize,
    ) -> TriggerCaps {
        let cap = match with_handler {
            0 | 1 => u64::MAX,
            _ => (max_outstanding - max_outstanding / 4).max(1) as u64,
        };
        let mut names: Vec<String> = triggers.iter().map(|t| t.to_string()).collect();
        let slot_of = names.iter().cloned().zip(0..).collect();
        names.push(default_id.to_owned());
        TriggerCaps {
            cap,
            slot_of,
            held: names
                .iter()
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            parked_by: names.iter().map(|_| StdAtomicU64::new(0)).collect(),
            names,
            parked: CachePadded::default(),
            parked_refs: StdAtomicU64::new(0),
            parked_bytes: StdAtomicU64::new(0),
        }
    }

    /// The slot of trigger `id`: its own, or the default route's.
    pub fn slot(&self, id: &str) -> usize {
        self.slot_of
            .get(id)
            .copied()
            .unwrap_or(self.names.len() - 1)
    }

    /// Takes one job of slot `w`'s cap; false at the cap.
    pub fn take(&self, w: usize) -> bool {
        let Some(c) = self.held.get(w) else {
            return false;
        };
        c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < self.cap).then_some(n + 1)
        })
        .is_ok()
    }

    /// Gives one job of slot `w`'s cap back (never below 0).
    pub fn give(&self, w: usize) {
        if let Some(c) = self.held.get(w) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// True while slot `w` is below its cap.
    pub fn room(&self, w: usize) -> bool {
        self.held
            .get(w)
            .is_some_and(|c| c.load(Ordering::Relaxed) < self.cap)
    }

    /// Jobs the slot labelled `name` holds (0 for a name without a slot).
    pub fn held_by(&self, name: &str) -> u64 {
        let slot = self.names.iter().position(|n| n == name);
        slot.map_or(0, |s| self.held[s].load(Ordering::Relaxed))
    }

    /// The jobs one trigger may hold, `None` without a cap.
    pub fn cap(&self) -> Option<u64> {
        (self.cap != u64::MAX).then_some(self.cap)
    }

    /// The pumps set `delta` more events of slot `w` aside (negative: took them back).
    pub fn note_parked(&self, w: usize, delta: i64) {
        add(&self.parked, delta);
        if let Some(c) = self.parked_by.get(w) {
            add(c, delta);
        }
    }

    /// A pump's parked events kept by reference moved by `refs`, the bytes of those in memory
    /// by `bytes`.
    pub fn note_parked_memory(&self, refs: i64, bytes: i64) {
        add(&self.parked_refs, refs);
        add(&self.parked_bytes, bytes);
    }

    /// Parked events of the slot labelled `name` (0 for a name without a slot).
    pub fn parked_by(&self, name: &str) -> u64 {
        let slot = self.names.iter().position(|n| n == name);
        slot.map_or(0, |s| {
            self.parked_by[s].load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Durable events the pumps hold aside until their trigger has room.
    pub fn parked(&self) -> u64 {
        self.parked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `sluice_pump_parked_events` and `sluice_pump_window_jobs{trigger}`.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        const PARKED: &str = "sluice_pump_parked_events";
        w.header(
            PARKED,
            "Durable events set aside by the pumps because their trigger holds its cap of the \
             dispatch window (max_outstanding) or their released events wait for slots; in \
             memory up to 4096 per log, by reference past it.",
            MetricType::Gauge,
        );
        w.sample_u64(PARKED, &[], self.parked());
        const BY: &str = "sluice_pump_parked_by_trigger";
        w.header(
            BY,
            "Durable events set aside by the pumps, by trigger (a trigger at its cap of the \
             dispatch window, or with released events waiting for slots at [flow] max_held).",
            MetricType::Gauge,
        );
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        for (s, id) in self.names.iter().enumerate() {
            w.sample_u64(BY, &[("trigger", id)], self.parked_by[s].load(relaxed));
        }
        const REFS: &str = "sluice_pump_parked_by_reference";
        w.header(
            REFS,
            "Parked events kept by reference only (their LSN; the record is read back from the \
             log), past 4096 events or 64 MiB parked in memory per log.",
            MetricType::Gauge,
        );
        w.sample_u64(REFS, &[], self.parked_refs.load(relaxed));
        const BYTES: &str = "sluice_pump_parked_bytes";
        w.header(
            BYTES,
            "Bytes (record cost) of the parked events kept in memory; at most 64 MiB per log.",
            MetricType::Gauge,
        );
        w.sample_u64(BYTES, &[], self.parked_bytes.load(relaxed));
        const WINDOW: &str = "sluice_pump_window_jobs";
        w.header(
            WINDOW,
            "Jobs of the dispatch window (max_outstanding) held, by trigger.",
            MetricType::Gauge,
        );
        for (s, id) in self.names.iter().enumerate() {
            let n = self.held[s].load(Ordering::Relaxed);
            w.sample_u64(WINDOW, &[("trigger", id)], n);
        }
    }
}

/// Moves gauge `c` by `delta` (`Relaxed`, never below zero in use: every decrement follows
/// its increment on the same pump).
fn add(c: &StdAtomicU64, delta: i64) {
    use std::sync::atomic::Ordering::Relaxed;
    match delta >= 0 {
        true => c.fetch_add(delta as u64, Relaxed),
        false => c.fetch_sub(delta.unsigned_abs(), Relaxed),
    };
}

/// The dispatch window a job's slot is taken from: the shared `max_outstanding` counter and
/// each trigger's cap in it.
#[derive(Debug, Clone)]
pub struct Slots {
    pub window: Arc<Outstanding>,
    pub caps: Arc<TriggerCaps>,
}

/// Why [`Slots::take`] took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The trigger holds its cap.
    Capped,
    /// No `max_outstanding` slot is free (core `core` is marked for a wake-up).
    Exhausted,
}

impl Slots {
    /// Takes a dispatch slot for trigger slot `w` on core `core`: its cap first, then one of
    /// the `max_outstanding` (the cap given back if none is free).
    pub fn take(&self, core: usize, w: usize) -> Result<(), Short> {
        if !self.caps.take(w) {
            return Err(Short::Capped);
        }
        if !self.window.acquire(core) {
            self.caps.give(w);
            return Err(Short::Exhausted);
        }
        Ok(())
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn two_triggers_leave_a_quarter_to_the_others() {
        let c = TriggerCaps::new(&["a", "b"], "default", 8, 2);
        assert_eq!(c.cap(), Some(6));
        assert_eq!((c.slot("a"), c.slot("b"), c.slot("new")), (0, 1, 2));
        for _ in 0..6 {
            assert!(c.take(0));
        }
        assert!(!c.take(0) && !c.room(0), "at its cap");
        assert!(c.take(1), "the other has room");
        c.give(0);
        assert!(c.room(0));
        assert_eq!((c.held_by("a"), c.held_by("b"), c.held_by("x")), (5, 1, 0));
        assert!(!c.take(9), "no such slot");
        c.give(2);
        assert_eq!(c.held_by("default"), 0, "never below zero");
    }

    #[test]
    fn one_trigger_has_no_cap_and_the_parked_gauge_moves_both_ways() {
        let c = TriggerCaps::new(&["a"], "default", 1, 1);
        assert_eq!(c.cap(), None);
        c.note_parked(0, 3);
        c.note_parked(1, -1);
        c.note_parked(1, 2);
        c.note_parked_memory(2, 100);
        assert_eq!(
            (c.parked(), c.parked_by("a"), c.parked_by("default")),
            (4, 3, 1)
        );
        let mut w = PromWriter::new();
        c.render_prometheus(&mut w);
        let text = w.finish();
        assert!(text.contains("sluice_pump_parked_events 4"), "{text}");
        assert!(text.contains("sluice_pump_parked_by_trigger{trigger=\"a\"} 3"));
        assert!(text.contains("sluice_pump_parked_by_reference 2"));
        assert!(text.contains("sluice_pump_parked_bytes 100"));
        assert!(text.contains("sluice_pump_window_jobs{trigger=\"default\"} 0"));
    }

    #[test]
    fn a_slot_is_the_cap_then_the_window_and_the_cap_goes_back_when_none_is_free() {
        let s = Slots {
            window: Arc::new(Outstanding::new(1)),
            caps: Arc::new(TriggerCaps::new(&["a", "b"], "default", 4, 2)),
        };
        assert_eq!(s.take(0, 0), Ok(()));
        assert_eq!(s.take(0, 1), Err(Short::Exhausted));
        assert_eq!(s.caps.held_by("b"), 0, "given back");
        let _ = s.window.release();
        for _ in 0..2 {
            assert!(s.caps.take(0));
        }
        assert_eq!(s.take(0, 0), Err(Short::Capped));
        assert_eq!(s.window.get(), 0, "nothing taken at the cap");
    }
}
