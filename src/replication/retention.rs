//! The stream's retention (issue 41, item 4): what a node's subject may drop.
//!
//! Each acknowledged message of a subject is remembered with what it holds ([`FrameMeta`]: per
//! log its highest LSN, the dead letters it stores and releases, and the retired points its
//! frames announce). A log's *retired point* is the LSN below which its local segments are
//! retired (every event done); the commit helper announces it in every frame's `first` list and
//! in a frame of its own when it moves. The oldest messages are dropped (a JetStream purge of
//! the subject below a sequence) while
//!
//! 1. every record they hold is below its log's retired point, as announced by an acknowledged
//!    message (so a restore, which begins each log at the retired point its subjects' last
//!    messages name, never needs them), and
//! 2. no dead letter they store is still live with them as its latest copy.
//!
//! The last message of the subject is never dropped: its `through` and `first` lists are what
//! the start-up catch-up and a restore read first. A live dead letter in an old message is
//! **carried forward**: the mirror publishes it again in a frame of its own (read from the
//! node's DLQ at that moment, so it is the newest version, and ahead of any later release of
//! it on the same subject), after which the old message no longer holds it.
//!
//! Bounds: one entry per acknowledged message not yet dropped (about one segment per log,
//! plus the events not yet done; an event stuck at the front of a log holds every later
//! message, as it holds the local segments, so the WAL's `max_wal_bytes` bounds both) and one
//! per live dead letter (`dispatch.max_dlq_entries`). Gauge:
//! `sluice_replication_retained_messages`.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};

use crate::replication::message::FrameMeta;
use crate::wal::Lsn;

/// One acknowledged message still in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    sequence: u64,
    /// Per log, the highest LSN it holds.
    max: Vec<(u16, Lsn)>,
    /// The dead letters it stores.
    puts: Vec<String>,
}

/// What the subject may drop (module docs).
#[derive(Debug, Default)]
pub struct Retention {
    kept: VecDeque<Kept>,
    /// Per log, the highest retired point an acknowledged message announced.
    retired: HashMap<u16, Lsn>,
    /// Each live dead letter, with the sequence of the message holding its latest copy.
    latest: HashMap<String, u64>,
}

/// What [`Retention::step`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Drop every message of the subject below this sequence.
    pub purge_below: Option<u64>,
    /// Dead letters that hold the oldest message back: publish them again.
    pub carry: Vec<String>,
}

impl Retention {
    /// Message `sequence` was acknowledged holding `meta`.
    pub fn acked(&mut self, sequence: u64, meta: FrameMeta) {
        for (log, lsn) in meta.first {
            let r = self.retired.entry(log).or_default();
            *r = (*r).max(lsn);
        }
        for id in &meta.puts {
            self.latest.insert(id.clone(), sequence);
        }
        for id in &meta.releases {
            self.latest.remove(id);
        }
        self.kept.push_back(Kept {
            sequence,
            max: meta.max,
            puts: meta.puts,
        });
    }

    /// Messages remembered (not yet dropped).
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// Forgets the messages it can drop and says below which sequence to purge, or which dead
    /// letters hold the oldest back.
    pub fn step(&mut self) -> Step {
        let mut step = Step::default();
        while self.kept.len() > 1 {
            let oldest = &self.kept[0];
            let retired = (oldest.max.iter())
                .all(|(log, lsn)| self.retired.get(log).is_some_and(|r| lsn < r));
            if !retired {
                break;
            }
            let live: Vec<String> = (oldest.puts.iter())
                .filter(|id| self.latest.get(*id) == Some(&oldest.sequence))
                .cloned()
                .collect();
            if !live.is_empty() {
                step.carry = live;
                break;
            }
            self.kept.pop_front();
            step.purge_below = Some(self.kept[0].sequence);
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(
        max: &[(u16, Lsn)],
        puts: &[&str],
        releases: &[&str],
        first: &[(u16, Lsn)],
    ) -> FrameMeta {
        FrameMeta {
            max: max.to_vec(),
            puts: puts.iter().map(|s| s.to_string()).collect(),
            releases: releases.iter().map(|s| s.to_string()).collect(),
            first: first.to_vec(),
            through: Vec::new(),
        }
    }

    #[test]
    fn messages_below_every_logs_retired_point_are_dropped_never_the_last() {
        let mut r = Retention::default();
        r.acked(1, meta(&[(0, 10), (3, 4)], &[], &[], &[]));
        r.acked(2, meta(&[(0, 20)], &[], &[], &[]));
        r.acked(3, meta(&[(0, 30)], &[], &[], &[]));
        assert_eq!(r.step(), Step::default(), "nothing retired yet");
        // Log 0 retired below 21, log 3 not yet: message 1 holds log 3's LSN 4.
        r.acked(4, meta(&[], &[], &[], &[(0, 21)]));
        assert_eq!(r.step().purge_below, None);
        r.acked(5, meta(&[], &[], &[], &[(3, 5)]));
        assert_eq!(r.step().purge_below, Some(3), "messages 1 and 2 go");
        assert_eq!(r.kept(), 3);
        r.acked(6, meta(&[], &[], &[], &[(0, 1_000)]));
        assert_eq!(r.step().purge_below, Some(6), "all but the last");
        assert_eq!(r.kept(), 1);
    }

    #[test]
    fn a_live_dead_letter_holds_its_message_until_carried_forward_or_released() {
        let mut r = Retention::default();
        r.acked(1, meta(&[(0, 5)], &["a", "b"], &[], &[]));
        r.acked(2, meta(&[(0, 9)], &[], &["b"], &[(0, 10)]));
        assert_eq!(
            r.step(),
            Step {
                purge_below: None,
                carry: vec!["a".into()]
            }
        );
        // Carried forward: its latest copy is message 3 now.
        r.acked(3, meta(&[], &["a"], &[], &[]));
        assert_eq!(r.step().purge_below, Some(3));
        // Message 3 holds it live; a release lets it go.
        r.acked(4, meta(&[], &[], &["a"], &[]));
        assert_eq!(r.step().purge_below, Some(4));
    }
}
