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
//! # Who feeds and reads it
//!
//! Recovery builds it in its one pass over the retained records (`recover::state`; a gap in
//! the LSNs read is a range accepted as lost); the runtime moves it into the log's published
//! state ([`SharedIndex`] in `WalShared::outcomes`); the log's writer folds in every committed
//! batch from the bytes it wrote (`Wal::settle_commit`: headers walked, outcome payloads
//! decoded, event payloads not) and retention drops what it deleted. The online lookup and list
//! (`wal::read::events::indexed`, on the operator reader thread) take the status from it and
//! read only the event's attempt records. The offline tools have no index and scan.
//! [`OutcomeIndex`] itself is pure: no clock, no I/O, no locking.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use crate::sync::{Mutex, MutexGuard};

use crate::wal::format::entry_lsns;
use crate::wal::format::marker::parse_lost;
use crate::wal::format::{
    decode_payload, event_trigger, DoneStatus, Lsn, Record, RecordKind, RecordRef,
    RECORD_HEADER_BYTES,
};

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    first_attempts: u32,
    last_attempts: u32,
    last_retry: u32,
    calls: u32,
    /// 0: not an event; 1: pending; 2: retrying; 3: lost; 16 + status: done.
    tag: u8,
    /// An event's trigger: its number in the index's names + 1; [`OTHER_TRIGGER`] past
    /// [`MAX_TRIGGER_NAMES`] names (or an event payload that did not parse): a list must read
    /// the event to know.
    trigger: u16,
}

/// Trigger names an index numbers; events of any further trigger are `OTHER_TRIGGER`.
pub const MAX_TRIGGER_NAMES: usize = u16::MAX as usize - 1;
const OTHER_TRIGGER: u16 = u16::MAX;

/// Slots a list's walk looks at per hold of a [`SharedIndex`]'s lock (~100 µs), so a walk over
/// a rare trigger's events never holds the writer's fold for long.
pub const WALK_PER_LOCK: usize = 65_536;

const NOT_EVENT: u8 = 0;
const PENDING: u8 = 1;
const RETRYING: u8 = 2;
const LOST: u8 = 3;
const DONE: u8 = 16;

/// Why a record could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// Records must come in LSN order without gaps (a gap is [`OutcomeIndex::accept_loss`]).
    OutOfOrder { expected: Lsn, got: Lsn },
}

/// The outcome index of one log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutcomeIndex {
    /// LSN of `slots[0]`.
    base: Lsn,
    slots: VecDeque<Slot>,
    /// Trigger names by number - 1, and their numbers (at most [`MAX_TRIGGER_NAMES`]).
    names: Vec<String>,
    numbers: std::collections::HashMap<String, u16>,
    /// The number [`number`](Self::number) gave last (0: none yet): tried before the map.
    last_number: u16,
}

impl OutcomeIndex {
    /// An empty index whose first record will be `first`.
    pub fn new(first: Lsn) -> OutcomeIndex {
        OutcomeIndex {
            base: first,
            slots: VecDeque::new(),
            ..OutcomeIndex::default()
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

    /// Bytes the slots take, growth slack included, and the trigger names.
    pub fn bytes(&self) -> usize {
        let names: usize = self.names.iter().map(|n| 2 * n.len() + 64).sum();
        self.slots.capacity() * std::mem::size_of::<Slot>() + names
    }

    /// Folds the record at `lsn` in; returns how many of its entries were passed over: those
    /// naming no event the index holds (retired, below where it starts, or not an event — a
    /// correct log has none of the last). On an error the index is unchanged.
    pub fn observe(&mut self, lsn: Lsn, rec: &Record) -> Result<usize, IndexError> {
        let expected = self.next_lsn();
        if lsn != expected {
            return Err(IndexError::OutOfOrder { expected, got: lsn });
        }
        let mut passed = 0;
        match rec {
            Record::Event(ev) => {
                self.push_event(Some(&ev.trigger_id));
                return Ok(0);
            }
            Record::Done(d) => {
                for e in &d.entries {
                    match self.distance(lsn, e.event_lsn) {
                        Some(_) => self.slot_mut(e.event_lsn).tag = DONE + e.status as u8,
                        None => passed += 1,
                    }
                }
            }
            Record::Retry(r) => match self.distance(lsn, r.event_lsn) {
                Some(far) => {
                    let s = self.slot_mut(r.event_lsn);
                    s.last_retry = far;
                    if s.tag == PENDING || s.tag == LOST {
                        s.tag = RETRYING;
                    }
                }
                None => passed += 1,
            },
            Record::Attempts(a) => {
                for e in &a.entries {
                    passed += usize::from(!self.attempt(lsn, e.event_lsn, e.outcome.is_call()));
                }
            }
        }
        self.push(NOT_EVENT);
        Ok(passed)
    }

    /// Folds in the kind-8 record at `lsn` (the next) from its payload, walked without
    /// decoding (`attempt::entry_lsns`); returns the entries passed over.
    fn attempts(&mut self, lsn: Lsn, payload: &[u8]) -> usize {
        let mut passed = 0;
        let _ = entry_lsns(payload, |event, call| {
            passed += usize::from(!self.attempt(lsn, event, call));
        });
        self.push(NOT_EVENT);
        passed
    }

    /// One attempt entry of the record at `lsn` for `event`; false when passed over.
    fn attempt(&mut self, lsn: Lsn, event: Lsn, call: bool) -> bool {
        let Some(far) = self.distance(lsn, event) else {
            return false;
        };
        let s = self.slot_mut(event);
        s.calls = s.calls.saturating_add(u32::from(call));
        if s.first_attempts == 0 {
            s.first_attempts = far;
        }
        s.last_attempts = far;
        true
    }

    /// Folds in one record as read from a log (payload not decoded for events, walked without
    /// allocating for attempts). A record that does not decode keeps an empty slot.
    pub fn observe_ref(&mut self, r: &RecordRef<'_>) -> Result<usize, IndexError> {
        let expected = self.next_lsn();
        if r.lsn != expected {
            return Err(IndexError::OutOfOrder {
                expected,
                got: r.lsn,
            });
        }
        match r.kind {
            k if k.is_event() => {
                // Only the trigger is kept: the rest of the payload is not parsed.
                self.push_event(event_trigger(r.kind, r.payload).ok());
                return Ok(0);
            }
            RecordKind::Attempts => return Ok(self.attempts(r.lsn, r.payload)),
            _ => {}
        }
        match decode_payload(r.kind, r.payload) {
            Ok(rec) => self.observe(r.lsn, &rec),
            Err(_) => {
                let expected = self.next_lsn();
                if r.lsn != expected {
                    return Err(IndexError::OutOfOrder {
                        expected,
                        got: r.lsn,
                    });
                }
                self.push(NOT_EVENT);
                Ok(0)
            }
        }
    }

    /// Folds in a committed batch: `bytes` as the writer just wrote them (records and the
    /// batch's commit marker), its first record at LSN `first`. The bytes are the writer's own,
    /// so only headers are walked (no CRC); a record that runs past the end ends the walk.
    pub fn observe_batch(&mut self, first: Lsn, bytes: &[u8]) -> Result<usize, IndexError> {
        let expected = self.next_lsn();
        if first != expected {
            return Err(IndexError::OutOfOrder {
                expected,
                got: first,
            });
        }
        let (mut pos, mut passed) = (0usize, 0usize);
        while let Some(h) = bytes.get(pos..pos + RECORD_HEADER_BYTES) {
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let Some(payload) = bytes.get(pos + RECORD_HEADER_BYTES..pos + len) else {
                break;
            };
            let mut lsn = [0u8; 8];
            lsn.copy_from_slice(&h[8..16]);
            let lsn = u64::from_le_bytes(lsn);
            match RecordKind::from_u8(h[16]) {
                Some(RecordKind::Marker) => {}
                Some(RecordKind::Lost) => {
                    let Some(last) = parse_lost(lsn, payload) else {
                        break;
                    };
                    self.accept_loss(lsn, last + 1)?;
                }
                Some(kind) => {
                    let r = RecordRef {
                        lsn,
                        kind,
                        payload,
                        len,
                    };
                    passed += self.observe_ref(&r)?;
                }
                None => break,
            }
            pos += len;
        }
        Ok(passed)
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

    /// Makes the index continue at `next`, the LSN its log appends next: the LSNs between are
    /// a range given up (a log whose every segment was lost and accepted continues after what
    /// its checkpoint promised), so the events still without an outcome read lost. An empty
    /// index, or one ahead of its log (which recovery never builds), starts afresh at `next`
    /// (its trigger numbers kept).
    pub fn continue_at(&mut self, next: Lsn) {
        let from = self.next_lsn();
        if self.is_empty() || next < from {
            // Nothing to mark (and no empty slots kept for a range of nothing).
            *self = OutcomeIndex {
                base: next,
                ..std::mem::take(self)
            };
            self.slots.clear();
        } else if next > from {
            let _ = self.accept_loss(from, next);
        }
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

    /// The distance from `event` to the outcome `record`, when `event` is a retained event
    /// before it within `u32::MAX` records.
    fn distance(&self, record: Lsn, event: Lsn) -> Option<u32> {
        self.get(event)?;
        u32::try_from(record.checked_sub(event)?).ok()
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

    /// An event of `trigger` (`None`: its payload did not parse).
    fn push_event(&mut self, trigger: Option<&str>) {
        let trigger = match trigger {
            Some(t) => self.number(t),
            None => OTHER_TRIGGER,
        };
        self.slots.push_back(Slot {
            tag: PENDING,
            trigger,
            ..Slot::default()
        });
    }

    /// The number of trigger `name`, given one if it has none and there is room.
    fn number(&mut self, name: &str) -> u16 {
        // Runs of one trigger are the common case: the last number given is tried first.
        let last = self.last_number;
        let named = usize::from(last)
            .checked_sub(1)
            .and_then(|i| self.names.get(i));
        if named.is_some_and(|n| n == name) {
            return last;
        }
        if let Some(&n) = self.numbers.get(name) {
            self.last_number = n;
            return n;
        }
        if self.names.len() >= MAX_TRIGGER_NAMES {
            return OTHER_TRIGGER;
        }
        self.names.push(name.to_owned());
        let n = self.names.len() as u16;
        self.numbers.insert(name.to_owned(), n);
        self.last_number = n;
        n
    }

    /// Walks the events below `below` newest first, at most `max_slots` slots: each event
    /// whose trigger may be `trigger` (`None`: any) goes to `visit` with its entry, until
    /// `visit` says stop (false). Returns where to go on from (the lowest LSN looked at), or
    /// `None` when the walk reached the index's first record or `visit` stopped.
    pub fn newest_events(
        &self,
        below: Lsn,
        trigger: Option<&str>,
        max_slots: usize,
        mut visit: impl FnMut(Lsn, Found) -> bool,
    ) -> Option<Lsn> {
        let wanted = match trigger {
            None => None,
            Some(t) => match self.numbers.get(t) {
                Some(&n) => Some(n),
                // Not numbered: only events whose trigger the index does not know may be it.
                None => Some(OTHER_TRIGGER),
            },
        };
        let mut lsn = below.min(self.next_lsn());
        for _ in 0..max_slots {
            if lsn <= self.base {
                return None;
            }
            lsn -= 1;
            let s = self.slots[(lsn - self.base) as usize];
            if s.tag == NOT_EVENT {
                continue;
            }
            if wanted.is_some_and(|w| s.trigger != w && s.trigger != OTHER_TRIGGER) {
                continue;
            }
            let Some(found) = self.get(lsn) else {
                continue;
            };
            if !visit(lsn, found) {
                return None;
            }
        }
        (lsn > self.base).then_some(lsn)
    }
}

/// A log's index as its writer feeds it and readers look into it: behind a `Mutex` (the shim's,
/// so the loom model `outcomes` runs the real code), held by the writer for one batch's fold
/// (microseconds) and by a reader for one lookup. Empty until recovery seeds it; a batch that
/// does not continue it (it cannot happen with a seeded index: every commit of the log folds
/// in, in order) empties it, and lookups fall back to reading the log.
#[derive(Debug, Default)]
pub struct SharedIndex {
    inner: Mutex<Option<OutcomeIndex>>,
}

impl SharedIndex {
    /// Starts from `index` (recovery's, continuing at the log's next LSN).
    pub fn seed(&self, index: OutcomeIndex) {
        *self.lock() = Some(index);
    }

    /// Folds in a committed batch (its bytes as written, first record at `first`).
    pub fn observe_batch(&self, first: Lsn, bytes: &[u8]) {
        let mut inner = self.lock();
        let Some(ix) = inner.as_mut() else {
            return;
        };
        if let Err(e) = ix.observe_batch(first, bytes) {
            eprintln!("sluice: wal: the outcome index stops ({e:?}); lookups read the log");
            *inner = None;
        }
    }

    /// Drops what retention deleted: the records below `lsn`.
    pub fn retire_below(&self, lsn: Lsn) {
        if let Some(ix) = self.lock().as_mut() {
            ix.retire_below(lsn);
        }
    }

    /// The event at `lsn`, when the index holds it.
    pub fn get(&self, lsn: Lsn) -> Option<Found> {
        self.lock().as_ref()?.get(lsn)
    }

    /// [`OutcomeIndex::newest_events`] for at most [`WALK_PER_LOCK`] slots per hold of the
    /// lock, collecting up to `want` events: `(events, where to go on from)`; `None` as the
    /// second when the walk is over (or there is no index).
    pub fn newest_events(
        &self,
        below: Lsn,
        trigger: Option<&str>,
        want: usize,
    ) -> (Vec<(Lsn, Found)>, Option<Lsn>) {
        let mut out = Vec::new();
        let inner = self.lock();
        let Some(ix) = inner.as_ref() else {
            return (out, None);
        };
        let next = ix.newest_events(below, trigger, WALK_PER_LOCK, |lsn, found| {
            out.push((lsn, found));
            out.len() < want
        });
        // Stopped by `want`: go on below the last one taken.
        let next = match (next, out.last()) {
            (None, Some(&(lsn, _))) if out.len() >= want => Some(lsn),
            (n, _) => n,
        };
        (out, next)
    }

    /// `(records, bytes)` the index holds, when it runs.
    pub fn size(&self) -> Option<(usize, usize)> {
        self.lock().as_ref().map(|ix| (ix.len(), ix.bytes()))
    }

    fn lock(&self) -> MutexGuard<'_, Option<OutcomeIndex>> {
        // A panic while folding leaves no half-applied slot that matters more than losing the
        // index: take it as it is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
