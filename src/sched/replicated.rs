//! The replicated commit (issue 41, README "Several nodes"): with `[replication]`, a batch
//! back from its local commit settles only once JetStream has acknowledged it.
//!
//! - The commit helper turns each committed batch into a frame ([`frame_of`]: the records the
//!   logs wrote, with their LSNs, and the dead letters stored and released) and hands it to the
//!   mirror thread (`replication::mirror`), numbering it in the batch's `hold`.
//! - The loop keeps the batches back from the helper in [`Awaiting`], in commit order, and
//!   gives one to its owners (ingest's 202s, the pump) only when the core's acknowledged frame
//!   has reached it (`Awaiting`'s `Hold::pop`). So an event is delivered only after its
//!   batch is replicated, and batches settle in log order.
//! - A batch not acknowledged within `ack_timeout` (or any, once the node is fenced) has its
//!   waiting requests answered `503 replication_unavailable` (or `replication_fenced`) at once
//!   ([`Awaiting::overdue`]); the batch itself stays until JetStream has it, then settles
//!   as any other (its events are delivered; their requests are answered already).
//!
//! Bound: at most `replication.max_inflight` batches wait per core (`Awaiting`'s `Hold::is_full`: the
//! committer hands no batch to the helper past it, so the filling batch refuses offers and
//! ingest answers `503 wal_busy` after `offer_timeout`, or the admission's
//! `replication_unavailable` first).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dispatch::dlq::entry::encode_entry;
use crate::dispatch::dlq::{DlqEntry, DlqError};
use crate::dispatch::pump::shell::{Batch, Item, Outcome, Owner};
use crate::replication::message::{FrameBuf, FrameMeta};
use crate::replication::mirror::MirrorLink;
use crate::replication::state::{CoreState, Refuse, ReplicationState};
use crate::wal::commit::{Hold, Mirror};
use crate::wal::format::{payload_len, RECORD_HEADER_BYTES};
use crate::wal::group::Log as HelperLog;
use crate::wal::{AppendOutcome, Lsn};

/// What a core's committer needs to replicate: its link to the mirror thread, the node's
/// state, and the section's bound and timeout.
#[derive(Debug)]
pub struct Replicate {
    pub link: MirrorLink,
    /// The index of each log the core commits, by slot (`wal/core-<index>`).
    pub logs: Vec<u16>,
    pub node: Arc<ReplicationState>,
    pub max_inflight: usize,
    pub ack_timeout: Duration,
}

impl Replicate {
    /// The loop's side: the queue of batches waiting for their acknowledgement.
    pub fn awaiting(&self) -> Awaiting {
        let core = self.link.state().clone();
        Awaiting::new(core, self.node.clone(), self.max_inflight, self.ack_timeout)
    }
}

/// Adds what `batch` made durable to `frame`, in batch order: each durable append with its
/// log and LSN, each stored dead letter in the store's encoding, each released id. `logs` maps
/// the batch's log slots to the logs' indexes (`wal/core-<index>`) ([`Scope`]). Whenever the frame would
/// pass `limit` bytes it is finished into `full` and a new one begun (a message holds whole
/// frames and must fit the server's `max_payload`).
pub fn frame_of(
    batch: &Batch,
    scope: Scope<'_>,
    frame: &mut FrameBuf,
    limit: usize,
    full: &mut Vec<(Vec<u8>, FrameMeta)>,
) {
    for (item, outcome) in batch.items.iter().zip(&batch.outcomes) {
        if !frame.is_empty() && frame.len() + item_bytes(item) > limit {
            full.push(frame.take());
        }
        match (item, outcome) {
            (
                Item::Append { log, record, .. },
                Outcome::Appended(AppendOutcome::Durable { lsn }),
            ) => {
                let Some(index) = scope.index_of(*log) else {
                    continue;
                };
                if let Err(e) = frame.record(index, *lsn, record) {
                    // The log wrote it, so it encodes; say so loudly if it does not.
                    eprintln!("sluice: replication: record {lsn} of log {log} not framed: {e}");
                }
            }
            (Item::DeadLetter { .. } | Item::Release { .. }, _) if !scope.own() => {}
            (Item::DeadLetter { entry, .. }, Outcome::DeadLettered(Ok(()))) => {
                match encode_entry(entry) {
                    Ok(bytes) => frame.dead_letter(&entry.id, bytes),
                    Err(e) => eprintln!("sluice: replication: dead letter not framed: {e}"),
                }
            }
            (Item::Release { id, .. }, Outcome::Released(Ok(()))) => frame.released(id),
            _ => {}
        }
    }
}

/// About what an item adds to a frame (its record's size; a dead letter's or a removal's).
fn item_bytes(item: &Item) -> usize {
    match item {
        Item::Append { record, .. } => RECORD_HEADER_BYTES + payload_len(record).unwrap_or(0),
        Item::DeadLetter { entry, .. } => 1024 + entry.event.body.len(),
        Item::Release { id, .. } => 2 + id.len(),
    }
}

/// What one frame of a batch takes ([`frame_of`]).
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// The node's own subject: the records of the slots in the list (each slot's log index),
    /// the dead letters and the releases. Slots past it are logs adopted from another node.
    Own(&'a [u16]),
    /// An adopted log's subject: the records of slot `slot` only, as log `index`.
    Adopted { slot: usize, index: u16 },
}

impl Scope<'_> {
    fn index_of(self, slot: usize) -> Option<u16> {
        match self {
            Scope::Own(logs) => logs.get(slot).copied(),
            Scope::Adopted { slot: s, index } => (s == slot).then_some(index),
        }
    }

    fn own(self) -> bool {
        matches!(self, Scope::Own(_))
    }
}

/// One batch back from its local commit, waiting for JetStream.
#[derive(Debug)]
struct Waiting {
    batch: Batch,
    since: Instant,
    /// Its requests were answered early ([`Awaiting::overdue`]).
    answered: bool,
}

/// A core's batches waiting for their acknowledgement (module docs).
#[derive(Debug)]
pub struct Awaiting {
    core: Arc<CoreState>,
    node: Arc<ReplicationState>,
    queue: VecDeque<Waiting>,
    max: usize,
    ack_timeout: Duration,
}

impl Awaiting {
    /// At most `max` batches for core state `core` of `node`.
    pub fn new(
        core: Arc<CoreState>,
        node: Arc<ReplicationState>,
        max: usize,
        ack_timeout: Duration,
    ) -> Awaiting {
        Awaiting {
            core,
            node,
            queue: VecDeque::with_capacity(max),
            max,
            ack_timeout,
        }
    }

    /// A batch back from the helper at `now` (its `hold`: its frame, 0 if it made nothing
    /// durable); `Hold::push` is this at the clock's now.
    pub fn push_at(&mut self, batch: Batch, now: Instant) {
        self.queue.push_back(Waiting {
            batch,
            since: now,
            answered: false,
        });
        self.core.set_waiting_batches(self.queue.len() as u64);
    }

    /// The ingest tickets to answer now, with the reason: those of batches waiting past
    /// `ack_timeout`, or of every waiting batch once the node is fenced. Each batch's are
    /// returned once.
    pub fn overdue(&mut self, now: Instant) -> Option<(Vec<u64>, Refuse)> {
        let fenced = self.node.refusal() == Some(Refuse::Fenced);
        let reason = if fenced {
            Refuse::Fenced
        } else {
            Refuse::Unavailable
        };
        let mut tickets = Vec::new();
        for w in self.queue.iter_mut().filter(|w| !w.answered) {
            if !fenced && now.duration_since(w.since) < self.ack_timeout {
                break;
            }
            w.answered = true;
            let ingest = w.batch.appended().filter(|(o, ..)| *o == Owner::Ingest);
            tickets.extend(ingest.map(|(_, ticket, _)| ticket));
        }
        (!tickets.is_empty()).then_some((tickets, reason))
    }

    /// When the oldest unanswered batch with requests waiting becomes overdue.
    pub fn next_deadline(&self) -> Option<Instant> {
        let w = self.queue.iter().find(|w| !w.answered)?;
        Some(w.since + self.ack_timeout)
    }
}

impl Hold<DlqEntry, DlqError> for Awaiting {
    fn push(&mut self, batch: Batch) {
        self.push_at(batch, Instant::now());
    }

    /// The oldest batch, once JetStream acknowledged its frame (frames are acknowledged in
    /// order, so every batch before it was too).
    fn pop(&mut self) -> Option<Batch> {
        let front = self.queue.front()?;
        if front.batch.hold > self.core.acked() {
            return None;
        }
        let batch = self.queue.pop_front().map(|w| w.batch);
        self.core.set_waiting_batches(self.queue.len() as u64);
        batch
    }

    /// No more batches may go to the helper until one settles.
    fn is_full(&self) -> bool {
        self.queue.len() >= self.max
    }

    /// Nothing waits.
    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Items of the waiting batches (the commit gauge).
    fn items(&self) -> usize {
        self.queue.iter().map(|w| w.batch.len()).sum()
    }
}

/// An adopted log's way to its node's subject: its index there (the `K` of its `core-K`) and
/// the link (`replication::mirror::SubjectOpener`).
pub type AdoptedLink = (u16, MirrorLink);

/// The helper's side of the replicated commit ([`Mirror`], on the commit helper thread): each
/// committed batch framed for the own subject (numbered in the batch's `hold`) and, for each
/// adopted log, on that log's node's subject; between batches, a retirement announced.
#[derive(Debug)]
pub struct Mirrored {
    /// With `[replication]`: the way to the mirror thread, the index of each own log by slot,
    /// and the frame being built.
    own: Option<(MirrorLink, Vec<u16>, FrameBuf)>,
    /// The adopted logs' frames, each for its own node's subject.
    adopted: Vec<AdoptedFrames>,
    /// Each replicated log's retired point as the last frame said it.
    announced: Vec<Lsn>,
}

/// An adopted log's frames ([`Scope::Adopted`]).
#[derive(Debug)]
struct AdoptedFrames {
    slot: usize,
    index: u16,
    link: MirrorLink,
    frame: FrameBuf,
}

impl Mirrored {
    /// With `own` (`[replication]`): the link to the mirror thread and the index of each own
    /// log by slot; without, nothing is framed.
    pub fn new(own: Option<(MirrorLink, Vec<u16>)>) -> Mirrored {
        Mirrored {
            own: own.map(|(link, logs)| (link, logs, FrameBuf::default())),
            adopted: Vec::new(),
            announced: Vec::new(),
        }
    }

    /// The batch's records of each adopted log, on its own node's subject. They hold nothing:
    /// the batch settles with its own frame (`Committer::adopt`).
    fn frame_adopted(&mut self, logs: &[HelperLog], first: usize, batch: &Batch) {
        for a in &mut self.adopted {
            let (scope, mut full) = (
                Scope::Adopted {
                    slot: a.slot,
                    index: a.index,
                },
                Vec::new(),
            );
            frame_of(batch, scope, &mut a.frame, a.link.frame_limit(), &mut full);
            if a.frame.is_empty() && full.is_empty() {
                continue;
            }
            for f in full {
                a.link.submit(f);
            }
            let log = &logs[a.slot - first];
            a.frame.through(a.index, log.shared.durable_lsn());
            // Where the log begins (a log rebuilt from a purged stream begins above 1): the
            // subject's last message must say it for a later restore (`replication::restore`).
            let begins = first_live(log);
            if begins > 1 {
                a.frame.first(a.index, begins);
            }
            a.link.submit(a.frame.take());
        }
    }
}

impl Mirror<DlqEntry, DlqError> for Mirrored {
    type Adopted = AdoptedLink;

    fn committed(&mut self, logs: &[HelperLog], first: usize, batch: &mut Batch) {
        if let Some((link, indexes, frame)) = self.own.as_mut() {
            let mut full = Vec::new();
            frame_of(
                batch,
                Scope::Own(indexes),
                frame,
                link.frame_limit(),
                &mut full,
            );
            if !frame.is_empty() || !full.is_empty() {
                for f in full {
                    link.submit(f);
                }
                close_frame(frame, logs, indexes, &mut self.announced);
                // The batch settles once its last frame is acknowledged (in order: all are).
                batch.hold = link.submit(frame.take());
            }
        }
        self.frame_adopted(logs, first, batch);
    }

    /// A log retired segments (`Wal::tick`) since the last frame said so: a frame of its own
    /// says it (each log's `through` and `first`), so the stream may drop what lies below even
    /// when no batch follows (`replication::retention`). It holds no batch.
    fn between(&mut self, logs: &[HelperLog]) {
        let Some((link, indexes, frame)) = self.own.as_mut() else {
            return;
        };
        let moved = (logs.iter().zip(indexes.iter()).enumerate())
            .any(|(i, (log, _))| self.announced.get(i).copied().unwrap_or(1) != first_live(log));
        if moved && frame.is_empty() {
            close_frame(frame, logs, indexes, &mut self.announced);
            link.submit(frame.take());
        }
    }

    fn adopt(&mut self, slot: usize, (index, link): AdoptedLink) {
        self.adopted.push(AdoptedFrames {
            slot,
            index,
            link,
            frame: FrameBuf::default(),
        });
    }
}

/// Log `log`'s retired point for the stream: below it every segment is done (the pump's
/// retention says so) or deleted (1: nothing yet).
fn first_live(log: &HelperLog) -> Lsn {
    let deleted = log.wal.checkpoint().map_or(1, |c| c.first_live_lsn);
    deleted.max(log.shared.done_below()).max(1)
}

/// Ends a frame of the own subject: each replicated log's durable LSN (`through`) and, once it
/// retired segments, its retired point (`first`), which `announced` keeps.
fn close_frame(
    frame: &mut FrameBuf,
    logs: &[HelperLog],
    indexes: &[u16],
    announced: &mut Vec<Lsn>,
) {
    announced.resize(indexes.len(), 1);
    for (i, (log, &index)) in logs.iter().zip(indexes.iter()).enumerate() {
        frame.through(index, log.shared.durable_lsn());
        let first = first_live(log);
        if first > 1 {
            frame.first(index, first);
        }
        announced[i] = first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::pump::shell::Staging;
    use crate::replication::message::{decode, pack};
    use crate::wal::format::tests::sample_event;
    use crate::wal::Record;

    fn batch(hold: u64, tickets: &[u64]) -> Batch {
        let mut s = Staging::new(64);
        for &t in tickets {
            s.port(Owner::Ingest)
                .event(0, t, Record::Event(sample_event(t, 10)));
        }
        s.port(Owner::Pump)
            .record(0, 99, Record::Event(sample_event(99, 10)));
        let mut b = s.take_batch(false).unwrap();
        let lsns = 1..=b.len() as u64;
        b.outcomes = lsns
            .map(|lsn| Outcome::Appended(AppendOutcome::Durable { lsn }))
            .collect();
        b.hold = hold;
        b
    }

    fn awaiting(max: usize) -> (Awaiting, Arc<ReplicationState>) {
        let node = Arc::new(ReplicationState::new(1));
        node.refresh();
        let core = node.core(0).unwrap().clone();
        let a = Awaiting::new(core, node.clone(), max, Duration::from_millis(100));
        (a, node)
    }

    #[test]
    fn a_batch_settles_only_once_its_frame_is_acknowledged_and_in_commit_order() {
        let (mut a, node) = awaiting(2);
        let core = node.core(0).unwrap().clone();
        let t0 = Instant::now();
        let (f1, f2) = (core.next_frame(), core.next_frame());
        a.push_at(batch(f1, &[1]), t0);
        assert!(!a.is_full());
        a.push_at(batch(f2, &[2]), t0);
        assert!(a.is_full(), "max_inflight batches wait");
        assert_eq!(core.waiting_batches(), 2, "published for the gauge");
        assert!(a.pop().is_none(), "nothing acknowledged yet");
        core.set_acked(f1);
        let b = a.pop().unwrap();
        assert_eq!(b.hold, f1);
        assert!(a.pop().is_none(), "the second is not acknowledged");
        core.set_acked(f2);
        assert_eq!(a.pop().unwrap().hold, f2);
        assert!(a.is_empty() && a.pop().is_none());
        assert_eq!(core.waiting_batches(), 0);
    }

    #[test]
    fn requests_past_ack_timeout_are_answered_once_and_all_of_them_when_fenced() {
        let (mut a, node) = awaiting(4);
        let t0 = Instant::now();
        a.push_at(batch(1, &[10, 11]), t0);
        a.push_at(batch(2, &[12]), t0 + Duration::from_millis(60));
        a.push_at(batch(3, &[]), t0 + Duration::from_millis(70));
        assert!(a.overdue(t0 + Duration::from_millis(50)).is_none());
        assert_eq!(a.next_deadline(), Some(t0 + Duration::from_millis(100)));
        let (tickets, why) = a.overdue(t0 + Duration::from_millis(120)).unwrap();
        assert_eq!(
            (tickets, why),
            (vec![10, 11], Refuse::Unavailable),
            "the pump's wait"
        );
        assert!(
            a.overdue(t0 + Duration::from_millis(130)).is_none(),
            "answered once"
        );
        assert_eq!(a.next_deadline(), Some(t0 + Duration::from_millis(160)));
        node.fence();
        let (tickets, why) = a.overdue(t0 + Duration::from_millis(131)).unwrap();
        assert_eq!((tickets, why), (vec![12], Refuse::Fenced));
        assert_eq!(a.items(), 3 + 2 + 1, "the batches themselves stay");
    }

    #[test]
    fn a_batch_larger_than_the_limit_is_cut_into_frames_in_order() {
        let b = batch(0, &[1, 2, 3, 4]);
        let mut f = FrameBuf::default();
        let mut full = Vec::new();
        // Each record is ~100 bytes framed: two fit under 300, not three.
        frame_of(&b, Scope::Own(&[0]), &mut f, 300, &mut full);
        full.push(f.take());
        assert!(full.len() >= 2, "cut: {} frames", full.len());
        assert!(
            full.iter().all(|fr| fr.0.len() <= 300),
            "each frame under the limit"
        );
        let maxes: Vec<_> = full.iter().flat_map(|fr| fr.1.max.clone()).collect();
        assert_eq!(maxes.last(), Some(&(0, 5)), "each frame says what it holds");
        let msg = pack(0, full.iter().map(|fr| &fr.0[..]));
        let d = decode(&msg).unwrap();
        let lsns: Vec<u64> = (d.frames.iter())
            .flat_map(|fr| fr.parts.iter().flat_map(|(_, rs)| rs.iter().map(|r| r.lsn)))
            .collect();
        assert_eq!(lsns, [1, 2, 3, 4, 5], "every record once, in order");
    }

    #[test]
    fn a_frame_holds_what_the_batch_made_durable_and_nothing_it_did_not() {
        let mut b = batch(0, &[1, 2]);
        b.outcomes[1] = Outcome::Appended(AppendOutcome::Unavailable);
        let mut f = FrameBuf::default();
        let mut full = Vec::new();
        frame_of(&b, Scope::Own(&[7]), &mut f, 1 << 20, &mut full);
        assert!(full.is_empty());
        let bytes = f.finish();
        let msg = pack(0, [bytes.as_slice()]);
        let d = decode(&msg).unwrap();
        assert_eq!(d.frames[0].parts[0].0, 7, "slot 0 is log core-7");
        let lsns: Vec<u64> = d.frames[0].parts[0].1.iter().map(|r| r.lsn).collect();
        assert_eq!(lsns, [1, 3], "the failed append is not replicated");
    }
}
