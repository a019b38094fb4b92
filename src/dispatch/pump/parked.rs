//! Durable events a log's pump set aside because their trigger was at its cap (its window cap,
//! or its flow-control gates full), in LSN order, each with its trigger's row (`pump_triggers`). The bookkeeping
//! is here once: every event that enters or leaves goes through [`Parked::put`] /
//! [`Parked::take`], which keep the bytes; the caller moves the process-wide gauge by the count
//! they return.
//!
//! Bound: ≤ [`WINDOW_EVENTS`] events / [`WINDOW_BYTES`] bytes ([`Parked::full`]: then the log is
//! not read further until some are admitted), past by at most the one event that filled it.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use super::source::{WINDOW_BYTES, WINDOW_EVENTS};
use crate::wal::{EventRecord, Lsn};

#[derive(Debug, Default)]
pub(super) struct Parked {
    /// Each with its trigger's row (`pump_triggers`).
    events: VecDeque<(Lsn, EventRecord, usize)>,
    bytes: u64,
}

impl Parked {
    /// True when no more events may be set aside.
    pub(super) fn full(&self) -> bool {
        self.events.len() >= WINDOW_EVENTS || self.bytes >= WINDOW_BYTES
    }

    pub(super) fn len(&self) -> usize {
        self.events.len()
    }

    /// The LSN of the first event set aside.
    pub(super) fn first_lsn(&self) -> Option<Lsn> {
        self.events.front().map(|p| p.0)
    }

    /// The trigger id and the trigger's row of the `i`th event.
    pub(super) fn get(&self, i: usize) -> Option<(&str, usize)> {
        self.events
            .get(i)
            .map(|(_, e, w)| (e.trigger_id.as_str(), *w))
    }

    /// Sets an event aside at position `i` (its place in LSN order; `len()` appends).
    pub(super) fn put(&mut self, i: usize, lsn: Lsn, event: EventRecord, row: usize) {
        self.bytes += crate::wal::event_cost(&event);
        self.events.insert(i, (lsn, event, row));
    }

    /// Takes the `i`th event back, with its trigger's row.
    pub(super) fn take(&mut self, i: usize) -> Option<(Lsn, EventRecord, usize)> {
        let (lsn, event, row) = self.events.remove(i)?;
        self.bytes -= crate::wal::event_cost(&event);
        Some((lsn, event, row))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;

    #[test]
    fn put_and_take_keep_order_and_bytes() {
        let mut p = Parked::default();
        p.put(0, 5, sample_event(5, 10), 1);
        p.put(0, 3, sample_event(3, 10), 0);
        p.put(2, 9, sample_event(9, 10), 1);
        assert_eq!(p.first_lsn(), Some(3));
        assert_eq!(p.get(1).map(|g| g.1), Some(1));
        let cost = crate::wal::event_cost(&sample_event(5, 10));
        assert_eq!(p.bytes, 3 * cost);
        assert_eq!(p.take(1).map(|e| e.0), Some(5));
        assert_eq!(p.bytes, 2 * cost);
        assert!(p.take(7).is_none());
        assert_eq!((p.len(), p.first_lsn()), (2, Some(3)));
        assert!(!p.full());
    }
}
