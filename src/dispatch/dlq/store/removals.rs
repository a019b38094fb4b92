//! The ids that left the DLQ, numbered, for whoever waits for one to leave: the keys of an
//! `ordering` gate with `on_exhausted = "hold"` stay stopped while their dead letter is in the
//! DLQ (`dispatch::flow::ordering`), and move on when it leaves (a replay, an operator's discard
//! through this server or beside it, seen at `DlqStore::refresh_removals`).
//!
//! Bound: the last [`REMOVALS_KEPT`] removals (ids of 26 bytes). A reader that fell further
//! behind is told so ([`Removed::complete`] false) and checks the ids it waits for by presence
//! instead (`DlqStore::contains`). `DlqStore` records and reads them (`store/read.rs`).
#![forbid(unsafe_code)]

use std::collections::VecDeque;

/// Removals kept for readers (the last ones).
pub const REMOVALS_KEPT: usize = 4096;

/// The removal log (`DlqStore::removed_since`).
#[derive(Debug, Default)]
pub struct Removals {
    /// The number the next removal gets.
    next: u64,
    /// `(number, id)`, oldest first, at most [`REMOVALS_KEPT`].
    ids: VecDeque<(u64, String)>,
}

/// What `DlqStore::removed_since` found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Pass this to the next call.
    pub next: u64,
    /// The ids removed since the number asked for.
    pub ids: Vec<String>,
    /// False when some removals since then are no longer kept.
    pub complete: bool,
}

impl Removals {
    /// Records that `id` left the DLQ.
    pub fn push(&mut self, id: &str) {
        if self.ids.len() == REMOVALS_KEPT {
            self.ids.pop_front();
        }
        self.ids.push_back((self.next, id.to_owned()));
        self.next += 1;
    }

    /// The ids removed since removal number `from` (0: since the start).
    pub fn since(&self, from: u64) -> Removed {
        let oldest = self.ids.front().map_or(self.next, |(n, _)| *n);
        Removed {
            next: self.next,
            ids: (self.ids.iter())
                .filter(|(n, _)| *n >= from)
                .map(|(_, id)| id.clone())
                .collect(),
            complete: from >= oldest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_each_removal_once_and_is_told_when_it_fell_behind() {
        let mut r = Removals::default();
        let none = Removed {
            next: 0,
            ids: vec![],
            complete: true,
        };
        assert_eq!(r.since(0), none);
        r.push("A");
        r.push("B");
        let got = r.since(0);
        assert_eq!(
            (got.next, got.ids.clone(), got.complete),
            (2, vec!["A".into(), "B".into()], true)
        );
        r.push("C");
        assert_eq!(r.since(got.next).ids, vec!["C".to_string()]);
        for i in 0..REMOVALS_KEPT + 1 {
            r.push(&format!("{i}"));
        }
        let late = r.since(3);
        assert!(!late.complete, "a reader past the kept removals is told");
        assert_eq!(late.ids.len(), REMOVALS_KEPT);
        assert!(r.since(late.next).complete);
    }
}
