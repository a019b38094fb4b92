//! A core's group commit as data: the batch a loop turn fills ([`Staging`]: its bound, and how
//! it splits between the core's own log and the rest), what a batch holds ([`Batch`]: its
//! [`Item`]s and, once committed, one [`Outcome`] each, in order) and the per-batch work of a
//! commit ([`process`]: one group commit per log the batch touches, then the dead letters).
//!
//! The threads and rings that move a batch are not here: a core's loop fills the [`Staging`]
//! during its turn, and at the end of it `wal::commit` hands the batch to the core's commit
//! helper thread (one ring push, one unpark), which calls [`process`] and hands it back (one
//! wake); with `wal.commit = "ring"` the loop takes its own log's part ([`Staging::take_own`])
//! and submits it on its io_uring ring (`start_batch`/`finish_batch`). The loop then gives the
//! batch back to the domains: ingest settles its appends, the pump its records and dead letters
//! and takes the durable events from memory.
//!
//! Dead letters ride in the same batch (one wake-up per turn for everything the turn must make
//! durable) but are not the WAL's: their type and their store belong to dispatch. A batch is
//! generic over the entry `D` and its error `E`, and [`process`] writes them through the
//! [`DeadLetters`] trait the DLQ implements, so the WAL names no dispatch type.
//!
//! Bounds: the filling batch holds at most `max_batch` ingest records or [`MAX_BATCH_BYTES`] of
//! them ([`Staging::has_room`]; the first record always fits). Other items (the pump's
//! `Done`/`Retry` records, dead letters) are bounded by their producer: the pump's
//! `MAX_RECORDS_IN_FLIGHT` per log and `max_outstanding`.
#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::wal::append::writer::commit_batch;
use crate::wal::append::Wal;
use crate::wal::config::MAX_BATCH_BYTES;
use crate::wal::format::Record;
use crate::wal::{AppendOutcome, WalShared};

/// Who staged an item, and so who settles its outcome when the batch is back: each owner
/// stages through its own [`Port`] and numbers its items itself (`ticket`), so tickets of
/// different owners never need telling apart by their bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A client's event, or a single DLQ replay through the ingest path (`ingest::front`).
    Ingest,
    /// The pump's `Done`/`Retry`/attempt records and dead letters (`dispatch::pump`).
    Pump,
    /// A bulk DLQ replay's events and every replay's or discard's removal (`dispatch::dlq`).
    Replay,
}

/// One thing for the disk, with its [`Owner`] and the owner's `ticket` for it.
#[derive(Debug)]
pub enum Item<D> {
    /// Append `record` to the core's log slot `log` (0 = its own log).
    Append {
        owner: Owner,
        log: usize,
        ticket: u64,
        record: Record,
    },
    /// Store a dead letter durably (the [`DeadLetters`] store).
    DeadLetter { owner: Owner, ticket: u64, entry: D },
    /// A dead letter whose replay is durable leaves the store ([`DeadLetters::release`]). Staged
    /// once the replay's append is back durable, so it is committed in a later batch, before that
    /// batch's appends: the replayed event's `Done` is never durable before the removal.
    Release {
        owner: Owner,
        ticket: u64,
        id: String,
    },
}

impl<D> Item<D> {
    /// True for an item of the core's own log (slot 0).
    fn is_own(&self) -> bool {
        matches!(self, Item::Append { log: 0, .. })
    }
}

/// The result of one [`Item`].
#[derive(Debug)]
pub enum Outcome<E> {
    Appended(AppendOutcome),
    DeadLettered(Result<(), E>),
    Released(Result<(), E>),
}

/// A batch: the items, and (once committed) one outcome per item, in order.
#[derive(Debug)]
pub struct Batch<D, E> {
    pub items: Vec<Item<D>>,
    pub outcomes: Vec<Outcome<E>>,
    /// Bytes of the records appended by ingest (for the batch bound).
    ingest_bytes: usize,
    /// Ingest records (requests waiting for this batch).
    ingest_records: usize,
    /// Set by the commit's mirror for the loop's hold (`wal::commit::Mirror`: with replication,
    /// the number of the batch's frame, which JetStream must acknowledge before the batch
    /// settles); 0 = nothing. The log and the group commit neither read nor write it.
    pub hold: u64,
}

impl<D, E> Default for Batch<D, E> {
    fn default() -> Self {
        Batch {
            items: Vec::new(),
            outcomes: Vec::new(),
            ingest_bytes: 0,
            ingest_records: 0,
            hold: 0,
        }
    }
}

impl<D, E> Batch<D, E> {
    /// Items in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True if the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Ingest records in the batch: requests wait for it.
    pub fn ingest_records(&self) -> usize {
        self.ingest_records
    }

    /// The records it appends, in order (all of one log, when it is [`Staging::take_own`]'s).
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.items.iter().filter_map(|item| match item {
            Item::Append { record, .. } => Some(record),
            Item::DeadLetter { .. } | Item::Release { .. } => None,
        })
    }

    /// Sets the outcomes of a batch of one log's appends from that log's commit, in order.
    pub fn set_appended(&mut self, from: &mut Vec<AppendOutcome>) {
        self.outcomes.clear();
        self.outcomes.extend(from.drain(..).map(Outcome::Appended));
    }

    /// Each append's owner and ticket with its outcome, in order (the batch back from its
    /// commit).
    pub fn appended(&self) -> impl Iterator<Item = (Owner, u64, AppendOutcome)> + '_ {
        self.items
            .iter()
            .zip(&self.outcomes)
            .filter_map(|(item, outcome)| match (item, outcome) {
                (Item::Append { owner, ticket, .. }, Outcome::Appended(o)) => {
                    Some((*owner, *ticket, *o))
                }
                _ => None,
            })
    }

    /// Each release of `owner`'s, its ticket with its result, in order (the batch back from its
    /// commit).
    pub fn released_by(&self, owner: Owner) -> impl Iterator<Item = (u64, &Result<(), E>)> + '_ {
        self.items
            .iter()
            .zip(&self.outcomes)
            .filter_map(move |(item, outcome)| match (item, outcome) {
                (
                    Item::Release {
                        owner: o, ticket, ..
                    },
                    Outcome::Released(r),
                ) if *o == owner => Some((*ticket, r)),
                _ => None,
            })
    }

    /// Moves the items that satisfy `pred` into a new batch, in order (ingest counts stay).
    fn split_off(&mut self, pred: impl FnMut(&Item<D>) -> bool) -> Batch<D, E> {
        let (taken, kept) = std::mem::take(&mut self.items).into_iter().partition(pred);
        self.items = kept;
        Batch {
            items: taken,
            ..Batch::default()
        }
    }
}

/// The batch a core's loop fills during a turn, with its bound (module docs).
#[derive(Debug)]
pub struct Staging<D, E> {
    next: Batch<D, E>,
    max_batch: usize,
}

impl<D, E> Staging<D, E> {
    /// An empty batch of at most `max_batch` ingest records.
    pub fn new(max_batch: usize) -> Self {
        Staging {
            next: Batch::default(),
            max_batch,
        }
    }

    /// True if an ingest record of `weight` bytes fits the filling batch.
    pub fn has_room(&self, weight: usize) -> bool {
        self.next.ingest_records == 0
            || (self.next.ingest_records < self.max_batch
                && self.next.ingest_bytes + weight <= MAX_BATCH_BYTES)
    }

    /// `owner`'s way into the filling batch: everything staged through it carries `owner`.
    pub fn port(&mut self, owner: Owner) -> Port<'_, D, E> {
        Port {
            staging: self,
            owner,
        }
    }

    /// Items filling.
    pub fn len(&self) -> usize {
        self.next.len()
    }

    /// True if nothing is filling.
    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    /// The batch for the commit helper, at the end of a turn: everything, or with `keep_own`
    /// (the loop commits its own log on its ring) everything but the own log's records, which
    /// stay filling with their ingest counts. `None` when there is nothing for the helper.
    pub fn take_batch(&mut self, keep_own: bool) -> Option<Batch<D, E>> {
        if !keep_own {
            return (!self.next.is_empty()).then(|| std::mem::take(&mut self.next));
        }
        if self.next.items.iter().all(Item::is_own) {
            return None;
        }
        Some(self.next.split_off(|item| !item.is_own()))
    }

    /// The own log's records (slot 0), with the ingest counts, for the loop's own commit.
    /// `None` when there are none.
    pub fn take_own(&mut self) -> Option<Batch<D, E>> {
        if !self.next.items.iter().any(Item::is_own) {
            return None;
        }
        let mut batch = self.next.split_off(Item::is_own);
        batch.ingest_records = std::mem::take(&mut self.next.ingest_records);
        batch.ingest_bytes = std::mem::take(&mut self.next.ingest_bytes);
        Some(batch)
    }

    /// Puts a batch that could not be handed on back in front of what filled since.
    pub fn put_back(&mut self, mut batch: Batch<D, E>) {
        batch.items.append(&mut self.next.items);
        batch.ingest_records += self.next.ingest_records;
        batch.ingest_bytes += self.next.ingest_bytes;
        self.next = batch;
    }
}

/// One owner's way into the filling batch ([`Staging::port`]), lent for one call: the only way
/// anything is staged, so every item carries the [`Owner`] that settles it.
#[derive(Debug)]
pub struct Port<'a, D, E> {
    staging: &'a mut Staging<D, E>,
    owner: Owner,
}

impl<D, E> Port<'_, D, E> {
    /// The owner whose items this port stages.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// True if an event of `weight` bytes fits the filling batch ([`Staging::has_room`]).
    pub fn has_room(&self, weight: usize) -> bool {
        self.staging.has_room(weight)
    }

    /// Adds an event record for log slot `log` (ingest: the core's own, 0), counted against
    /// the batch's bound (the caller checked [`Port::has_room`]).
    pub fn event(&mut self, log: usize, ticket: u64, record: Record) {
        let next = &mut self.staging.next;
        next.ingest_bytes += record.batch_weight();
        next.ingest_records += 1;
        next.items.push(Item::Append {
            owner: self.owner,
            log,
            ticket,
            record,
        });
    }

    /// Adds a record for log slot `log` that its producer bounds (the pump's `Done`/`Retry`/
    /// attempt records: `MAX_RECORDS_IN_FLIGHT` per log), outside the batch's ingest bound.
    pub fn record(&mut self, log: usize, ticket: u64, record: Record) {
        let owner = self.owner;
        (self.staging.next.items).push(Item::Append {
            owner,
            log,
            ticket,
            record,
        });
    }

    /// Adds a dead letter (bounded by its producer: `max_outstanding`).
    pub fn dead_letter(&mut self, ticket: u64, entry: D) {
        let owner = self.owner;
        (self.staging.next.items).push(Item::DeadLetter {
            owner,
            ticket,
            entry,
        });
    }

    /// Adds the removal of dead letter `id` (bounded by the DLQ's claims).
    pub fn release(&mut self, ticket: u64, id: String) {
        let owner = self.owner;
        (self.staging.next.items).push(Item::Release { owner, ticket, id });
    }
}

/// A log a group commit appends to, with its published state.
#[derive(Debug)]
pub struct Log {
    pub wal: Wal,
    pub shared: Arc<WalShared>,
}

/// Where the dead letters of a batch are made durable (dispatch's DLQ implements it): one
/// call per batch with every dead letter in it.
pub trait DeadLetters {
    type Entry;
    type Error;
    /// Stores `entries` (each with its position in the batch) durably, as one commit; returns
    /// each position with its result.
    fn put_dead_letters(
        &self,
        entries: Vec<(usize, &Self::Entry)>,
    ) -> Vec<(usize, Result<(), Self::Error>)>;
    /// Removes the dead letters `ids` (each with its position in the batch) durably, as one
    /// commit (their replays are durable); returns each position with its result.
    fn release(&self, ids: Vec<(usize, &str)>) -> Vec<(usize, Result<(), Self::Error>)>;
}

/// One batch's commit: its releases as one removal from `dead` first, then one group commit
/// ([`commit_batch`]) per log of `logs` the batch touches (`logs[i]` is slot
/// `first_slot + i`), then its dead letters as one commit of `dead`. Fills
/// `batch.outcomes`, one per item in order; an append for a slot not in `logs` is
/// `Unavailable`. `scratch` is a reused buffer.
pub fn process<S: DeadLetters>(
    logs: &mut [Log],
    first_slot: usize,
    batch: &mut Batch<S::Entry, S::Error>,
    dead: &S,
    scratch: &mut Vec<AppendOutcome>,
) {
    let Batch {
        items, outcomes, ..
    } = batch;
    outcomes.clear();
    outcomes.extend(
        items
            .iter()
            .map(|_| Outcome::Appended(AppendOutcome::Unavailable)),
    );
    let releases: Vec<_> = (items.iter().enumerate())
        .filter_map(|(pos, item)| match item {
            Item::Release { id, .. } => Some((pos, id.as_str())),
            _ => None,
        })
        .collect();
    if !releases.is_empty() {
        for (pos, r) in dead.release(releases) {
            outcomes[pos] = Outcome::Released(r);
        }
    }
    for (i, log) in logs.iter_mut().enumerate() {
        let slot = first_slot + i;
        let mine = |item: &Item<S::Entry>| matches!(item, Item::Append { log, .. } if *log == slot);
        if !items.iter().any(mine) {
            continue;
        }
        let records = items.iter().filter_map(|item| match item {
            Item::Append { log, record, .. } if *log == slot => Some(record),
            _ => None,
        });
        commit_batch(&mut log.wal, &log.shared, records, scratch);
        let positions = items.iter().enumerate().filter(|(_, i)| mine(i));
        for ((pos, _), o) in positions.zip(scratch.drain(..)) {
            outcomes[pos] = Outcome::Appended(o);
        }
    }
    let dead_letters = items
        .iter()
        .enumerate()
        .filter_map(|(pos, item)| match item {
            Item::DeadLetter { entry, .. } => Some((pos, entry)),
            Item::Append { .. } | Item::Release { .. } => None,
        });
    let dead_letters: Vec<_> = dead_letters.collect();
    if dead_letters.is_empty() {
        return;
    }
    for (pos, r) in dead.put_dead_letters(dead_letters) {
        outcomes[pos] = Outcome::DeadLettered(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::{read_events, test_cfg};
    use crate::wal::WritePath;
    use std::cell::RefCell;

    /// A dead-letter store that keeps what it is given and refuses entries named "full".
    #[derive(Default)]
    struct Kept(RefCell<Vec<String>>);

    impl DeadLetters for Kept {
        type Entry = String;
        type Error = &'static str;
        fn put_dead_letters(
            &self,
            entries: Vec<(usize, &String)>,
        ) -> Vec<(usize, Result<(), &'static str>)> {
            let mut kept = self.0.borrow_mut();
            let mut out = Vec::new();
            for (pos, e) in entries {
                if e == "full" {
                    out.push((pos, Err("full")));
                } else {
                    kept.push(e.clone());
                    out.push((pos, Ok(())));
                }
            }
            out
        }
        /// Keeps `-id` for each release; refuses "gone".
        fn release(&self, ids: Vec<(usize, &str)>) -> Vec<(usize, Result<(), &'static str>)> {
            let mut kept = self.0.borrow_mut();
            let mut out = Vec::new();
            for (pos, id) in ids {
                kept.push(format!("-{id}"));
                out.push((pos, if id == "gone" { Err("gone") } else { Ok(()) }));
            }
            out
        }
    }

    fn event(i: u64, body: usize) -> Record {
        Record::Event(sample_event(i, body))
    }

    #[test]
    fn the_filling_batch_holds_max_batch_records_or_max_batch_bytes_and_always_one() {
        let mut s: Staging<String, ()> = Staging::new(3);
        let big = MAX_BATCH_BYTES + 1;
        assert!(s.has_room(big), "the first record always fits");
        s.port(Owner::Ingest).event(0, 1, event(1, 10));
        assert!(!s.has_room(big), "past MAX_BATCH_BYTES");
        assert!(s.has_room(100));
        s.port(Owner::Ingest).event(0, 2, event(2, 10));
        s.port(Owner::Ingest).event(0, 3, event(3, 10));
        assert!(!s.has_room(1), "max_batch ingest records");
        s.port(Owner::Pump).dead_letter(9, "x".into());
        assert_eq!(
            s.len(),
            4,
            "the pump's items are bounded by the pump, not here"
        );
        let b = s.take_batch(false).unwrap();
        assert_eq!((b.len(), b.ingest_records()), (4, 3));
        assert!(s.is_empty() && s.has_room(big));
        assert!(s.take_batch(false).is_none(), "nothing to hand over");
    }

    #[test]
    fn with_the_own_log_on_the_ring_the_helper_gets_the_rest_and_the_ring_the_own_records() {
        let mut s: Staging<String, ()> = Staging::new(8);
        s.port(Owner::Ingest).event(0, 1, event(1, 10));
        assert!(
            s.take_batch(true).is_none(),
            "only own records: nothing for the helper"
        );
        s.port(Owner::Pump).record(1, 50, event(50, 10));
        s.port(Owner::Pump).dead_letter(51, "d".into());
        s.port(Owner::Ingest).event(0, 2, event(2, 10));
        let helper = s.take_batch(true).unwrap();
        let tickets = |b: &Batch<String, ()>| -> Vec<u64> {
            b.items
                .iter()
                .map(|i| match i {
                    Item::Append { ticket, .. }
                    | Item::DeadLetter { ticket, .. }
                    | Item::Release { ticket, .. } => *ticket,
                })
                .collect()
        };
        assert_eq!(tickets(&helper), [50, 51]);
        assert_eq!(helper.ingest_records(), 0);
        assert!(!s.has_room(MAX_BATCH_BYTES), "the own records still count");
        let own = s.take_own().unwrap();
        assert_eq!(tickets(&own), [1, 2]);
        assert_eq!(own.ingest_records(), 2);
        assert!(s.is_empty() && s.take_own().is_none());
        s.port(Owner::Ingest).event(0, 3, event(3, 10));
        s.put_back(own);
        let again = s.take_batch(false).unwrap();
        assert_eq!(tickets(&again), [1, 2, 3], "put back in front, in order");
        assert_eq!(again.ingest_records(), 3);
    }

    #[test]
    fn a_batch_is_committed_per_log_and_its_dead_letters_in_one_call_each_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let mut logs = Vec::new();
        for name in ["a", "b"] {
            let mut cfg = test_cfg(&tmp.path().join(name), WritePath::Pwrite);
            cfg.durability = crate::wal::Durability::Fsync;
            let (mut wal, _) = crate::wal::open(&cfg).unwrap();
            let shared = Arc::new(WalShared::new());
            wal.attach_shared(shared.clone());
            logs.push(Log { wal, shared });
        }
        let mut s: Staging<String, &'static str> = Staging::new(8);
        // Slots 1 and 2 (slot 0 is on the loop's ring); slot 3 is nobody's.
        for (t, log) in [(1, 1), (2, 2), (3, 1), (4, 3)] {
            s.port(Owner::Pump).record(log, t, event(t, 20));
        }
        for entry in ["dl", "full"] {
            s.port(Owner::Pump).dead_letter(7, entry.into());
        }
        for id in ["r1", "gone"] {
            s.port(Owner::Replay).release(8, id.into());
        }
        let mut batch = s.take_batch(false).unwrap();
        let kept = Kept::default();
        let mut scratch = Vec::new();
        process(&mut logs, 1, &mut batch, &kept, &mut scratch);
        let got: Vec<String> = batch.outcomes.iter().map(|o| format!("{o:?}")).collect();
        assert_eq!(
            got,
            [
                "Appended(Durable { lsn: 1 })",
                "Appended(Durable { lsn: 1 })",
                "Appended(Durable { lsn: 2 })",
                "Appended(Unavailable)",
                "DeadLettered(Ok(()))",
                "DeadLettered(Err(\"full\"))",
                "Released(Ok(()))",
                "Released(Err(\"gone\"))",
            ]
        );
        assert_eq!(
            *kept.0.borrow(),
            ["-r1", "-gone", "dl"],
            "the releases first, in one call; the dead letters after the appends"
        );
        assert_eq!(
            batch
                .released_by(Owner::Replay)
                .map(|(t, r)| (t, r.is_ok()))
                .collect::<Vec<_>>(),
            [(8, true), (8, false)]
        );
        assert_eq!(batch.released_by(Owner::Ingest).count(), 0, "by owner");
        assert_eq!(
            batch.appended().map(|(o, t, _)| (o, t)).collect::<Vec<_>>(),
            [1, 2, 3, 4].map(|t| (Owner::Pump, t))
        );
        assert_eq!(logs[0].shared.durable_lsn(), 2);
        assert_eq!(logs[0].shared.sync_seconds.count(), 1, "one sync per log");
        drop(logs);
        let a = read_events(&tmp.path().join("a").join("wal"));
        assert_eq!(
            a.iter().map(|(l, e)| (*l, e.clone())).collect::<Vec<_>>(),
            [(1, sample_event(1, 20)), (2, sample_event(3, 20)),]
        );
        assert_eq!(read_events(&tmp.path().join("b").join("wal")).len(), 1);
    }
}
