//! Durable events a log's pump set aside because their trigger was at its cap (its window cap,
//! or its flow-control gates' `gate="dispatch"` count at `[flow] max_held`): one line per
//! trigger (by its row, `pump_triggers`), each in LSN order. The bookkeeping is here once: every
//! event that enters or leaves goes through [`Parked::put`] / [`Parked::put_back`] /
//! [`Parked::take`], which keep the counts; the caller moves the process-wide gauge.
//!
//! **A full trigger never stops the log** (issue 38): the first [`WINDOW_EVENTS`] events /
//! [`WINDOW_BYTES`] bytes parked in a log are kept in memory; past that bound an event is parked
//! *by reference* only — its LSN and order time, [`REF_BYTES`] bytes — and its record stays in the log (it is
//! pending: the log's done cursor stays at or below the lowest parked LSN, so retention keeps
//! its segment). When its trigger has room again it is read back from the log
//! (`PumpCore::read_parked`: one reader per log, forward, skipping other records by their
//! headers). So the pump goes on reading the log for every other trigger whatever one trigger's
//! backlog; what bounds the references is the durable backlog itself (each is a pending event
//! of its trigger's share, whose senders are refused with `queue_full` past it).
//!
//! Bounds: events in memory ≤ [`WINDOW_EVENTS`] / [`WINDOW_BYTES`] per log (past by at most
//! one event); references ≤ the log's pending events, [`REF_BYTES`] each (plus the line's
//! `VecDeque` slack: at most double).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};

use super::source::{WINDOW_BYTES, WINDOW_EVENTS};
use crate::wal::{EventRecord, Lsn};

/// Memory per event parked by reference: its LSN, its order time and an empty body slot.
pub const REF_BYTES: usize = std::mem::size_of::<Entry>();

/// One parked event: its LSN, its order time (`dispatch::horizon`), and the event unless it is
/// parked by reference (module docs).
type Entry = (Lsn, u64, Option<Box<EventRecord>>);

/// One trigger's parked events, in LSN order.
#[derive(Debug, Default)]
struct Line {
    entries: VecDeque<Entry>,
    /// Its trigger has flow gates: its first event holds the core's order horizon back.
    ordered: bool,
}

#[derive(Debug, Default)]
pub(super) struct Parked {
    /// Trigger row → its parked events. No empty line is kept.
    lines: BTreeMap<usize, Line>,
    /// Events kept in memory, and their cost.
    in_memory: usize,
    bytes: u64,
    /// Events parked by reference.
    refs: usize,
}

impl Parked {
    /// Whether the next event parked is kept in memory.
    fn room(&self) -> bool {
        self.in_memory < WINDOW_EVENTS && self.bytes < WINDOW_BYTES
    }

    /// Every event parked, in memory or by reference.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.in_memory + self.refs
    }

    /// Events parked by reference.
    pub(super) fn refs(&self) -> usize {
        self.refs
    }

    /// Bytes (record cost) of the events parked in memory.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The lowest LSN parked.
    pub(super) fn first_lsn(&self) -> Option<Lsn> {
        self.lines
            .values()
            .filter_map(|l| l.entries.front())
            .map(|e| e.0)
            .min()
    }

    /// The least order time of the first events of the lines of gated triggers (`ordered`).
    pub(super) fn first_ordered(&self) -> Option<u64> {
        (self.lines.values().filter(|l| l.ordered))
            .filter_map(|l| l.entries.front())
            .map(|e| e.1)
            .min()
    }

    /// The rows of the triggers with parked events, in row order.
    pub(super) fn rows(&self) -> Vec<usize> {
        self.lines.keys().copied().collect()
    }

    /// The trigger id of row `row`'s first parked event, if it is in memory (one by reference
    /// is named by its row only).
    pub(super) fn first_of(&self, row: usize) -> Option<(Lsn, Option<&str>)> {
        let (lsn, _, ev) = self.lines.get(&row)?.entries.front()?;
        Some((*lsn, ev.as_deref().map(|e| e.trigger_id.as_str())))
    }

    /// Sets an event of trigger row `row` aside, after the others of its row (events reach it
    /// in LSN order): in memory while there is room, else by reference. `ordered`: its trigger
    /// has flow gates (`first_ordered`).
    pub(super) fn put(&mut self, lsn: Lsn, event: EventRecord, row: usize, ordered: bool) {
        let entry = self.keep(lsn, event);
        let line = self.lines.entry(row).or_default();
        line.ordered = ordered;
        line.entries.push_back(entry);
    }

    /// Puts an event just taken from the front of row `row` back there (it found no room
    /// after all), with its order time. `event` is `None` for one still by reference.
    pub(super) fn put_back(&mut self, lsn: Lsn, at: u64, event: Option<EventRecord>, row: usize) {
        let entry = match event {
            Some(e) => self.keep(lsn, e),
            None => {
                self.refs += 1;
                (lsn, at, None)
            }
        };
        self.lines.entry(row).or_default().entries.push_front(entry);
    }

    fn keep(&mut self, lsn: Lsn, event: EventRecord) -> Entry {
        let at = crate::dispatch::horizon::order_time(&event.event_id).unwrap_or(0);
        if self.room() {
            self.in_memory += 1;
            self.bytes += crate::wal::event_cost(&event);
            (lsn, at, Some(Box::new(event)))
        } else {
            self.refs += 1;
            (lsn, at, None)
        }
    }

    /// Takes row `row`'s first event back: its LSN, its order time, and the event unless it
    /// was parked by reference (the caller reads it back from the log).
    pub(super) fn take(&mut self, row: usize) -> Option<(Lsn, u64, Option<EventRecord>)> {
        let line = self.lines.get_mut(&row)?;
        let (lsn, at, event) = line.entries.pop_front()?;
        if line.entries.is_empty() {
            self.lines.remove(&row);
        }
        match &event {
            Some(e) => {
                self.in_memory -= 1;
                self.bytes -= crate::wal::event_cost(e);
            }
            None => self.refs -= 1,
        }
        Some((lsn, at, event.map(|e| *e)))
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;

    #[test]
    fn lines_per_trigger_keep_lsn_order_and_counts() {
        let mut p = Parked::default();
        p.put(3, sample_event(3, 10), 0, false);
        p.put(5, sample_event(5, 10), 1, true);
        p.put(9, sample_event(9, 10), 1, true);
        assert_eq!(p.first_lsn(), Some(3));
        assert_eq!(p.rows(), [0, 1]);
        let cost = crate::wal::event_cost(&sample_event(5, 10));
        assert_eq!((p.len(), p.bytes), (3, 3 * cost));
        let at5 = crate::dispatch::horizon::order_time(&sample_event(5, 10).event_id);
        let at5 = at5.unwrap_or(0);
        assert_eq!(p.first_ordered(), Some(at5), "the first of the gated line");
        let (lsn, at, ev) = p.take(1).unwrap();
        assert_eq!((lsn, at, ev.is_some()), (5, at5, true));
        assert_eq!(p.bytes, 2 * cost);
        p.put_back(lsn, at, ev, 1);
        assert_eq!(p.first_of(1).map(|f| f.0), Some(5), "back in its place");
        assert_eq!(p.take(0).map(|e| e.0), Some(3));
        assert_eq!(p.rows(), [1], "an empty line is dropped");
        assert!(p.take(0).is_none() && p.take(7).is_none());
        assert_eq!((p.len(), p.first_lsn()), (2, Some(5)));
    }

    /// Past the in-memory bound events are parked by reference, and never refused: parking
    /// never stops the log.
    #[test]
    fn past_the_memory_bound_events_are_parked_by_reference() {
        let mut p = Parked::default();
        let n = WINDOW_EVENTS as u64 + 10;
        for lsn in 1..=n {
            p.put(lsn, sample_event(lsn, 1), (lsn % 2) as usize, false);
        }
        assert_eq!((p.len(), p.refs()), (n as usize, 10));
        assert!(p.first_of(1).unwrap().1.is_some(), "the first in memory");
        // Row 0 holds the even LSNs; its last five are references.
        let mut last = None;
        while let Some((lsn, _, ev)) = p.take(0) {
            last = Some((lsn, ev.is_some()));
        }
        assert_eq!(last, Some((n - n % 2, false)));
        assert_eq!(p.refs(), 5);
        // A reference put back stays one, whatever the room.
        p.put_back(4, 0, None, 0);
        assert_eq!((p.refs(), p.first_of(0)), (6, Some((4, None))));
        assert_eq!(p.first_ordered(), None, "no gated line");
        const { assert!(REF_BYTES == 24) };
    }
}
