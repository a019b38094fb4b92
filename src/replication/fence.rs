//! The fence of a subject whose messages are pipelined, and taking a subject over: the
//! markers that shut out its previous writer, and the removal of what a broken pipeline left.
//!
//! **Why the fence is beside the subject.** A clustered JetStream stream refuses a message
//! whose `Nats-Expected-Last-Subject-Sequence` names a subject on which another message with an
//! expectation is still being proposed (`last sequence by subject mismatch`: nats-server's
//! `processClusteredInboundMsg`, `expectedPerSubjectInProcess`). One subject therefore cannot
//! carry both the fence and several messages in flight. So the fence lives on [`SLOTS`] **fence
//! subjects** beside the log's subject, `<subject>.fence.<k>`, which nothing but a writer taking
//! the subject ever writes: message number `n` of the subject goes out with
//! `Nats-Expected-Last-Subject-Sequence: F(k)` and `Nats-Expected-Last-Subject-Sequence-Subject:
//! <subject>.fence.<k>`, `k = n mod SLOTS`, `F(k)` being the last sequence of that fence
//! subject when the writer took the subject ([`Slots`]). Up to `SLOTS` messages are in flight,
//! each checked on a fence subject of its own, so the current writer's messages always pass;
//! once another writer has put a marker on every fence subject, none of the old writer's
//! messages can land, whenever they arrive.
//!
//! **Taking a subject** ([`take`]). The node at start-up, an adopter, and the node itself after
//! a publish failed all do the same: a marker on each fence subject, each expecting that fence
//! subject's last sequence (two takers cannot both win; [`Taker`] says what a mismatch means),
//! then a read of the subject's messages after the last one known good. Each message's
//! `Nats-Msg-Id` is `<subject>#<number>.<epoch>` ([`message_id`]): numbers follow on by one.
//! The read keeps messages while their numbers follow on; the first one that does not, and
//! every one after it, went out behind a message that never landed. None of them was
//! acknowledged to a sender (a core takes acknowledgements in order), so they are deleted. The
//! subject is again one gap-free sequence, which is what restore and catch-up read.
//!
//! Old messages (ids `<subject>@<sequence>`, before numbering) carry no number: a read accepts
//! them and the next numbered message starts the count.
//!
//! Bounds: `SLOTS` markers per take (older markers on each fence subject purged, so each keeps
//! one); every JetStream call of a take waits at most `stall` (the publisher's `ack_timeout`, an
//! adopter's `lease`), and the read reads only messages after `from`; a new taker that loses the
//! race for a fence subject `TAKE_ATTEMPTS` (10) times in a row fails the take (`Failed`: a
//! start-up refuses to start, an adoption is retried at the next scan, a publisher retries).
#![forbid(unsafe_code)]

use std::future::IntoFuture;
use std::time::Duration;

use std::sync::atomic::Ordering;

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::replication::state::ReplicationState;

/// Fence subjects per log subject, and so the most messages a subject has in flight
/// (`replication.max_inflight` is at most this).
pub const SLOTS: usize = 16;

/// The header naming the subject an expected last sequence is checked on (nats-server ≥ 2.11).
pub const EXPECTED_SUBJECT_HEADER: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

/// Whether a NATS server of `version` ("2.15.1") knows
/// `Nats-Expected-Last-Subject-Sequence-Subject` (2.11 and later). An older one would check the
/// expectation on the log's subject itself and refuse every message but one in flight.
pub fn server_supports(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.');
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (next(), next()) {
        (Some(major), Some(minor)) => (major, minor) >= (2, 11),
        _ => false,
    }
}

/// Fence subject `k` of `subject`.
pub fn slot_subject(subject: &str, k: usize) -> String {
    format!("{subject}.fence.{k}")
}

/// The `Nats-Msg-Id` of message `number` of `subject`, published while the subject's fence
/// stands at `epoch` (the sequence of the taker's marker on fence subject 0): unique per
/// message and per take, so a message published again after a take is never mistaken for a
/// duplicate of one the take deleted.
pub fn message_id(subject: &str, number: u64, epoch: u64) -> String {
    format!("{subject}#{number}.{epoch}")
}

/// The number in a [`message_id`]; `None` for an id without one (an older message).
pub fn number_of(id: &str) -> Option<u64> {
    let (_, rest) = id.rsplit_once('#')?;
    let (number, epoch) = rest.split_once('.')?;
    epoch.parse::<u64>().ok()?;
    number.parse().ok()
}

/// The number in the `Nats-Msg-Id` of a message's `headers` ([`number_of`]).
pub fn number_in(headers: &async_nats::HeaderMap) -> Option<u64> {
    (headers.get(NATS_MESSAGE_ID)).and_then(|id| number_of(id.as_str()))
}

/// The fence a writer holds: per fence subject, its last sequence (the writer's own marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slots([u64; SLOTS]);

impl Slots {
    /// The fence subject and expected sequence message `number` is published with.
    pub fn expectation(&self, subject: &str, number: u64) -> (String, u64) {
        let k = (number % SLOTS as u64) as usize;
        (slot_subject(subject, k), self.0[k])
    }

    /// The epoch of the messages published under this fence ([`message_id`]).
    pub fn epoch(&self) -> u64 {
        self.0[0]
    }

    /// Message `number` of `subject` holding `payload`, as published under this fence: its
    /// id and its expectation on its fence subject.
    pub fn message(&self, subject: &str, number: u64, payload: Bytes) -> PublishMessage {
        let (slot, expected) = self.expectation(subject, number);
        PublishMessage::build()
            .payload(payload)
            .message_id(message_id(subject, number, self.epoch()))
            .expected_last_subject_sequence(expected)
            .header(EXPECTED_SUBJECT_HEADER, slot.as_str())
    }
}

/// Keeps the messages of a read while their numbers follow on (module docs).
#[derive(Debug, Default)]
pub struct Numbering {
    next: Option<u64>,
    broken: bool,
}

impl Numbering {
    /// A count that expects `next` first (`None`: whatever comes first starts it).
    pub fn expecting(next: Option<u64>) -> Numbering {
        Numbering {
            next,
            broken: false,
        }
    }

    /// Whether the message numbered `number` is kept; after the first one that is not, none
    /// is.
    pub fn keep(&mut self, number: Option<u64>) -> bool {
        if self.broken {
            return false;
        }
        match (number, self.next) {
            (None, _) => self.next = None,
            (Some(n), None) => self.next = Some(n + 1),
            (Some(n), Some(want)) if n == want => self.next = Some(n + 1),
            (Some(_), Some(_)) => self.broken = true,
        }
        !self.broken
    }

    /// The number the next kept message would have (`None`: not known yet).
    pub fn next(&self) -> Option<u64> {
        self.next
    }
}

/// Who takes a subject, which decides what a marker refused for a wrong sequence means.
#[derive(Debug, Clone, Copy)]
pub enum Taker<'a> {
    /// The subject's writer itself, fenced at `slots`: any other marker means someone took the
    /// subject from it.
    Holder(&'a Slots),
    /// A new writer (start-up, adoption): expects what it reads, and reads again when another
    /// taker got there first (at most `TAKE_ATTEMPTS` times).
    New,
}

/// How often a new taker reads a fence subject again after losing a race for it.
const TAKE_ATTEMPTS: u32 = 10;

/// What [`take`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Taken {
    /// The fence the taker now holds.
    pub slots: Slots,
    /// The messages after `from` kept: (stream sequence, number if it has one), in order.
    pub kept: Vec<(u64, Option<u64>)>,
    /// The number of the next message (1 for a subject that never had a numbered one).
    pub next: u64,
    /// The stream sequences deleted (a broken pipeline's tail).
    pub deleted: Vec<u64>,
    /// The stream sequence of the subject's last kept message (`from` when none is after it).
    pub last: u64,
}

impl Taken {
    /// Logs and counts (`sluice_replication_voided_messages_total`) the messages the take
    /// deleted from `subject`, which `whose` published.
    pub fn report_deleted(&self, subject: &str, whose: &str, state: &ReplicationState) {
        if self.deleted.is_empty() {
            return;
        }
        eprintln!(
            "sluice: replication: deleted {} messages of {subject} that {whose} published \
             behind one that never landed (none had a 202)",
            self.deleted.len()
        );
        (state.voided_messages).fetch_add(self.deleted.len() as u64, Ordering::Relaxed);
    }
}

/// Why a take failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeError {
    /// Another writer holds the subject: `slot` was expected at `expected` and is at `actual`.
    Fenced {
        slot: String,
        expected: u64,
        actual: u64,
    },
    /// JetStream did not answer as needed (unreachable, no quorum, …); the take can be retried.
    Failed(String),
}

impl std::fmt::Display for TakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TakeError::Fenced {
                slot,
                expected,
                actual,
            } => write!(
                f,
                "another node wrote {slot} (expected its last sequence {expected}, found {actual})"
            ),
            TakeError::Failed(e) => f.write_str(e),
        }
    }
}

fn failed(what: impl std::fmt::Display) -> TakeError {
    TakeError::Failed(what.to_string())
}

/// Takes `subject` (module docs): a marker on each fence subject, then the messages after
/// stream sequence `from` read (the first expected to be numbered `next`, `None`: any), kept
/// while their numbers follow on, the rest deleted. `taker` names the node in the markers'
/// ids; each wait is bounded by `stall`.
pub async fn take(
    js: &jetstream::Context,
    stream: &stream::Stream,
    subject: &str,
    (taker, who): (Taker<'_>, &str),
    (from, next): (u64, Option<u64>),
    stall: Duration,
) -> Result<Taken, TakeError> {
    // The 16 markers go out together: each is a subject of its own.
    let subjects: Vec<String> = (0..SLOTS).map(|k| slot_subject(subject, k)).collect();
    let markers = (subjects.iter().enumerate())
        .map(|(k, slot)| fence_slot(js, stream, slot, taker, k, who, stall));
    let mut slots = Slots::default();
    for (k, marked) in futures_util::future::join_all(markers)
        .await
        .into_iter()
        .enumerate()
    {
        slots.0[k] = marked?;
    }
    let mut numbering = Numbering::expecting(next);
    let (mut kept, mut deleted) = (Vec::new(), Vec::new());
    for (seq, number) in read_ids(stream, subject, from, stall).await? {
        if numbering.keep(number) {
            kept.push((seq, number));
        } else {
            deleted.push(seq);
        }
    }
    for &seq in &deleted {
        bounded(stall, stream.delete_message(seq)).await?;
    }
    Ok(Taken {
        slots,
        last: kept.last().map_or(from, |k| k.0),
        kept,
        next: numbering.next().unwrap_or(1),
        deleted,
    })
}

/// The marker on fence subject `slot` (index `k`): its new last sequence.
async fn fence_slot(
    js: &jetstream::Context,
    stream: &stream::Stream,
    slot: &str,
    taker: Taker<'_>,
    k: usize,
    who: &str,
    stall: Duration,
) -> Result<u64, TakeError> {
    for _ in 0..TAKE_ATTEMPTS {
        let expected = match taker {
            Taker::Holder(s) => s.0[k],
            Taker::New => last_of(stream, slot, stall).await?.0,
        };
        let id = format!("{slot}@{expected}!{who}");
        let marker = PublishMessage::build()
            .payload(bytes::Bytes::new())
            .message_id(&id)
            .expected_last_subject_sequence(expected);
        let ack = bounded(stall, async {
            js.send_publish(slot.to_owned(), marker).await?.await
        })
        .await;
        match ack {
            Ok(ack) => {
                // Keep only the newest marker of each fence subject.
                let _ = bounded(stall, stream.purge().filter(slot).keep(1).into_future()).await;
                return Ok(ack.sequence);
            }
            Err(Call::Failed(e)) => return Err(TakeError::Failed(e)),
            Err(Call::WrongLast(_)) => {
                let (actual, last_id) = last_of(stream, slot, stall).await?;
                if last_id.as_deref() == Some(id.as_str()) {
                    return Ok(actual); // ours landed; its acknowledgement was lost
                }
                if let Taker::Holder(_) = taker {
                    return Err(TakeError::Fenced {
                        slot: slot.to_owned(),
                        expected,
                        actual,
                    });
                }
            }
        }
    }
    Err(failed(format!(
        "{slot}: another taker won {TAKE_ATTEMPTS} times in a row"
    )))
}

/// How a bounded call failed: refused for a wrong last sequence, or otherwise.
#[derive(Debug)]
enum Call {
    WrongLast(String),
    Failed(String),
}

impl From<Call> for TakeError {
    fn from(c: Call) -> TakeError {
        match c {
            Call::WrongLast(e) | Call::Failed(e) => TakeError::Failed(e),
        }
    }
}

/// Runs `f` within `limit`.
async fn bounded<T, E: std::fmt::Display + WrongLast>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, Call> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if e.wrong_last() => Err(Call::WrongLast(e.to_string())),
        Ok(Err(e)) => Err(Call::Failed(e.to_string())),
        Err(_) => Err(Call::Failed(format!("no answer within {limit:?}"))),
    }
}

/// Whether an error is JetStream's refusal for a wrong last sequence.
trait WrongLast {
    fn wrong_last(&self) -> bool {
        false
    }
}

impl WrongLast for jetstream::context::PublishError {
    fn wrong_last(&self) -> bool {
        self.kind() == PublishErrorKind::WrongLastSequence
    }
}
impl WrongLast for stream::DeleteMessageError {}
impl WrongLast for stream::PurgeError {}
impl WrongLast for stream::LastRawMessageError {}
impl WrongLast for async_nats::Error {}
impl WrongLast for stream::ConsumerError {}
impl WrongLast for consumer::StreamError {}

/// The last sequence of `subject` and its message's `Nats-Msg-Id` ((0, None): no message).
async fn last_of(
    stream: &stream::Stream,
    subject: &str,
    stall: Duration,
) -> Result<(u64, Option<String>), TakeError> {
    let got = tokio::time::timeout(stall, stream.get_last_raw_message_by_subject(subject)).await;
    match got {
        Ok(Ok(m)) => {
            let id = m
                .headers
                .get(NATS_MESSAGE_ID)
                .map(|v| v.as_str().to_owned());
            Ok((m.sequence, id))
        }
        Ok(Err(e)) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok((0, None)),
        Ok(Err(e)) => Err(failed(format!("last message of {subject}: {e}"))),
        Err(_) => Err(failed(format!(
            "last message of {subject}: no answer within {stall:?}"
        ))),
    }
}

/// The stream sequence and number (`Nats-Msg-Id`) of every message of `subject` after `from`, in
/// order (headers only), as the stream leader has them: the consumer counts what is pending
/// when it is made, and the read stops when nothing is (a direct read of the last message may
/// be served by a replica that lags).
async fn read_ids(
    stream: &stream::Stream,
    subject: &str,
    from: u64,
    stall: Duration,
) -> Result<Vec<(u64, Option<u64>)>, TakeError> {
    let config = consumer::pull::OrderedConfig {
        filter_subject: subject.to_owned(),
        deliver_policy: consumer::DeliverPolicy::ByStartSequence {
            start_sequence: from + 1,
        },
        headers_only: true,
        ..Default::default()
    };
    let consumer = bounded(stall, stream.create_consumer(config)).await?;
    let mut out = Vec::new();
    if consumer.cached_info().num_pending == 0 {
        return Ok(out);
    }
    let mut messages = bounded(stall, async { consumer.messages().await }).await?;
    loop {
        let m = match tokio::time::timeout(stall, messages.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(e))) => return Err(failed(format!("reading {subject}: {e}"))),
            Ok(None) => return Err(failed(format!("reading {subject}: the consumer ended"))),
            Err(_) => return Err(failed(format!("reading {subject}: stalled after {from}"))),
        };
        let info = m.info().map_err(failed)?;
        let (seq, pending) = (info.stream_sequence, info.pending);
        out.push((seq, m.headers.as_ref().and_then(number_in)));
        if pending == 0 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_carries_its_number_and_older_ids_carry_none() {
        let id = message_id("sluice.node-a.core-0", 42, 7);
        assert_eq!(id, "sluice.node-a.core-0#42.7");
        assert_eq!(number_of(&id), Some(42));
        assert_eq!(number_of("sluice.node-a.core-0@17"), None);
        assert_eq!(number_of("sluice.node-a.core-0@17-adopted-by-node-b"), None);
        assert_eq!(number_of("x#12"), None, "no epoch");
        assert_eq!(number_of("x#a.1"), None);
    }

    #[test]
    fn the_fence_needs_a_server_of_2_11_or_later() {
        assert!(server_supports("2.15.1"));
        assert!(server_supports("2.11.0"));
        assert!(server_supports("v3.0.0"));
        assert!(!server_supports("2.10.22"));
        assert!(!server_supports("2.9"));
        assert!(!server_supports(""));
        assert!(!server_supports("x.y"));
    }

    #[test]
    fn each_message_number_has_its_own_fence_subject_in_turn() {
        let mut s = Slots::default();
        for k in 0..SLOTS {
            s.0[k] = 100 + k as u64;
        }
        assert_eq!(
            s.expectation("a.b.core-1", 0),
            ("a.b.core-1.fence.0".into(), 100)
        );
        assert_eq!(
            s.expectation("a.b.core-1", 17),
            ("a.b.core-1.fence.1".into(), 101)
        );
        let in_flight: std::collections::HashSet<String> = (40..40 + SLOTS as u64)
            .map(|n| s.expectation("x", n).0)
            .collect();
        assert_eq!(
            in_flight.len(),
            SLOTS,
            "SLOTS messages in a row never share one"
        );
        assert_eq!(s.epoch(), 100);
    }

    #[test]
    fn a_read_keeps_messages_while_their_numbers_follow_on_and_drops_the_rest() {
        let mut n = Numbering::expecting(Some(5));
        let kept: Vec<bool> = [5, 6, 8, 7, 9].iter().map(|&x| n.keep(Some(x))).collect();
        assert_eq!(
            kept,
            [true, true, false, false, false],
            "behind a gap, nothing is kept"
        );
        assert_eq!(n.next(), Some(7));

        let mut n = Numbering::expecting(None);
        assert!(n.keep(None), "older, unnumbered messages are kept");
        assert!(n.keep(Some(3)), "the first numbered one starts the count");
        assert!(n.keep(Some(4)));
        assert!(!n.keep(Some(4)), "a number again is out of turn");
        assert!(!n.keep(Some(5)));

        let mut n = Numbering::expecting(Some(1));
        assert!(
            !n.keep(Some(2)),
            "the expected first message missing breaks the count"
        );
    }
}
