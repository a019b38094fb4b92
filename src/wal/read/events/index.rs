//! The outcome index (issue 39, item 2): per log, from an event's LSN to its latest outcome and
//! where its attempt records are, so a lookup needs no forward scan for its `Done` entry.
//!
//! # Shape and bound
//!
//! LSNs of one log are dense (one per record), so the index is a ring of `Slot`s, one per
//! retained record (`VecDeque`, slot `lsn - base`): a lookup is one subtraction and one index,
//! `O(1)` in the log's size. A slot is [`SLOT_BYTES`] (20) bytes; a record that is not an event
//! keeps an empty slot, so the memory is `SLOT_BYTES × retained records`, that is `SLOT_BYTES ×
//! (1 + outcome records per event)` per retained event (outcome records are batched: a `Done`
//! record carries up to `MAX_DONE_ENTRIES` events), plus the `VecDeque`'s growth slack (at most
//! its length again). [`OutcomeIndex::retire_below`] drops the slots of retired segments.
//!
//! # What a slot says
//!
//! The latest of: pending (the event record), retrying (a kind-3 record: its LSN, so the due
//! time is one record read), done (the kind-2 status, however late it landed: the index is
//! fed every record in order), or *outcome lost* ([`OutcomeIndex::accept_loss`]: the range
//! accepted as lost with `--accept-wal-loss` may have held its `Done` entry). Its calls are
//! counted, and the first and last kind-8 records holding its entries are kept as distances
//! from the event, so its attempts are read from that range only.
//!
//! Not yet wired: recovery and the append path do not feed it, and the online and offline
//! lookups still scan (`show_bounded`, `show`). Pure: no clock, no I/O, no locking.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use crate::wal::format::{AttemptsRecord, DoneStatus, Lsn, Record, MAX_ATTEMPT_ENTRIES};

/// Bytes of one `Slot` (checked by a test).
pub const SLOT_BYTES: usize = 20;

/// What the log says of the event at an LSN so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    /// The latest retry schedule is the kind-3 record at this LSN.
    Retrying {
        retry_lsn: Lsn,
    },
    Done(DoneStatus),
    /// Still without a `Done` entry after a range accepted as lost that may have held it.
    Lost,
}

/// An event's entry: its outcome and where its attempt records are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub outcome: Outcome,
    /// Kind-8 entries that were calls.
    pub calls: u32,
    /// LSNs of the first and last kind-8 records holding its entries, if any.
    pub attempts: Option<(Lsn, Lsn)>,
}

/// One record's slot; distances are from the event's LSN (0: none).
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    first_attempts: u32,
    last_attempts: u32,
    last_retry: u32,
    calls: u32,
    /// 0: not an event; 1: pending; 2: retrying; 3: lost; 16 + status: done.
    tag: u8,
}

const NOT_EVENT: u8 = 0;
const PENDING: u8 = 1;
const RETRYING: u8 = 2;
const LOST: u8 = 3;
const DONE: u8 = 16;

/// Why a record could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// Records must come in LSN order without gaps.
    OutOfOrder { expected: Lsn, got: Lsn },
    /// An outcome names an LSN that is not an event the index holds.
    NotAnEvent { record: Lsn, event: Lsn },
    /// An outcome record further than `u32::MAX` records from its event.
    TooFar { record: Lsn, event: Lsn },
    /// More than `u32::MAX` calls for one event.
    TooManyCalls { event: Lsn },
}

/// The outcome index of one log.
#[derive(Debug, Default)]
pub struct OutcomeIndex {
    /// LSN of `slots[0]`.
    base: Lsn,
    slots: VecDeque<Slot>,
}

impl OutcomeIndex {
    /// An empty index whose first record will be `first`.
    pub fn new(first: Lsn) -> OutcomeIndex {
        OutcomeIndex {
            base: first,
            slots: VecDeque::new(),
        }
    }

    /// The LSN the next [`observe`](Self::observe) must carry.
    pub fn next_lsn(&self) -> Lsn {
        self.base + self.slots.len() as u64
    }

    /// Retained records (slots).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes the slots take, growth slack included.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Folds the record at `lsn` in. On an error the index is unchanged.
    pub fn observe(&mut self, lsn: Lsn, rec: &Record) -> Result<(), IndexError> {
        let expected = self.next_lsn();
        if lsn != expected {
            return Err(IndexError::OutOfOrder { expected, got: lsn });
        }
        match rec {
            Record::Event(_) => self.push(PENDING),
            Record::Done(d) => {
                for e in &d.entries {
                    self.event(lsn, e.event_lsn)?;
                }
                for e in &d.entries {
                    self.slot_mut(e.event_lsn).tag = DONE + e.status as u8;
                }
                self.push(NOT_EVENT);
            }
            Record::Retry(r) => {
                let far = self.event(lsn, r.event_lsn)?;
                let s = self.slot_mut(r.event_lsn);
                s.last_retry = far;
                if s.tag == PENDING || s.tag == LOST {
                    s.tag = RETRYING;
                }
                self.push(NOT_EVENT);
            }
            Record::Attempts(a) => {
                self.attempts(lsn, a)?;
                self.push(NOT_EVENT);
            }
        }
        Ok(())
    }

    /// Folds a kind-8 record's entries in, all or none.
    fn attempts(&mut self, lsn: Lsn, a: &AttemptsRecord) -> Result<(), IndexError> {
        // A record holds at most MAX_ATTEMPT_ENTRIES entries, so only a count that near the
        // limit needs the exact per-record tally.
        let near = u32::MAX - MAX_ATTEMPT_ENTRIES as u32;
        for e in &a.entries {
            self.event(lsn, e.event_lsn)?;
            if self.slot(e.event_lsn).calls > near {
                let here = a.entries.iter();
                let here = here.filter(|x| x.event_lsn == e.event_lsn && x.outcome.is_call());
                if u64::from(self.slot(e.event_lsn).calls) + here.count() as u64
                    > u64::from(u32::MAX)
                {
                    return Err(IndexError::TooManyCalls { event: e.event_lsn });
                }
            }
        }
        for e in &a.entries {
            // Checked by `event` above: fits in u32.
            let far = (lsn - e.event_lsn) as u32;
            let s = self.slot_mut(e.event_lsn);
            s.calls += u32::from(e.outcome.is_call());
            if s.first_attempts == 0 {
                s.first_attempts = far;
            }
            s.last_attempts = far;
        }
        Ok(())
    }

    /// The event at `lsn`: `None` when it is not a retained event.
    pub fn get(&self, lsn: Lsn) -> Option<Found> {
        let s = self
            .slots
            .get(usize::try_from(lsn.checked_sub(self.base)?).ok()?)?;
        let outcome = match s.tag {
            NOT_EVENT => return None,
            PENDING => Outcome::Pending,
            RETRYING => Outcome::Retrying {
                retry_lsn: lsn + u64::from(s.last_retry),
            },
            LOST => Outcome::Lost,
            t => Outcome::Done(DoneStatus::from_u8(t - DONE)?),
        };
        let attempts = (s.first_attempts != 0).then(|| {
            (
                lsn + u64::from(s.first_attempts),
                lsn + u64::from(s.last_attempts),
            )
        });
        Some(Found {
            outcome,
            calls: s.calls,
            attempts,
        })
    }

    /// Records `from..to` were accepted as lost (`--accept-wal-loss`): every event before `to`
    /// still without a `Done` entry reads [`Outcome::Lost`] until one lands. The index then
    /// continues at `to` (the lost records keep empty slots). Returns the events marked.
    pub fn accept_loss(&mut self, from: Lsn, to: Lsn) -> Result<usize, IndexError> {
        let expected = self.next_lsn();
        if from != expected || to < from {
            return Err(IndexError::OutOfOrder {
                expected,
                got: from,
            });
        }
        let mut marked = 0;
        for s in self.slots.iter_mut() {
            if s.tag == PENDING || s.tag == RETRYING {
                s.tag = LOST;
                marked += 1;
            }
        }
        for _ in from..to {
            self.push(NOT_EVENT);
        }
        Ok(marked)
    }

    /// Drops the slots below `lsn` (segments retention deleted).
    pub fn retire_below(&mut self, lsn: Lsn) {
        while self.base < lsn && self.slots.pop_front().is_some() {
            self.base += 1;
        }
        if self.slots.is_empty() && self.base < lsn {
            self.base = lsn;
        }
    }

    /// The distance from `event` to the outcome `record`, when `event` is a retained event.
    fn event(&self, record: Lsn, event: Lsn) -> Result<u32, IndexError> {
        if self.get(event).is_none() {
            return Err(IndexError::NotAnEvent { record, event });
        }
        u32::try_from(record - event).map_err(|_| IndexError::TooFar { record, event })
    }

    fn slot(&self, lsn: Lsn) -> Slot {
        self.slots[(lsn - self.base) as usize]
    }

    fn slot_mut(&mut self, lsn: Lsn) -> &mut Slot {
        &mut self.slots[(lsn - self.base) as usize]
    }

    fn push(&mut self, tag: u8) {
        self.slots.push_back(Slot {
            tag,
            ..Slot::default()
        });
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
