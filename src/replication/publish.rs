//! One subject's publisher on the mirror thread: the frames a core's commit helper hands over,
//! packed into messages and **pipelined**, acknowledgements taken in order.
//!
//! **The pipeline.** Up to `window` messages (`replication.max_inflight`, at most
//! [`fence::SLOTS`]) are in flight at once: a frame that arrives while the window has room goes
//! out at once as a message of its own; frames that arrive while it is full go together in the
//! next message, split only at the server's `max_payload`. Each message is number `n` of the
//! subject and carries `Nats-Msg-Id` `<subject>#<n>.<epoch>` and the fence of `replication::
//! fence` (its expectation on fence subject `n mod SLOTS`). Acknowledgements are taken in order:
//! the first message in the window is the one waited for, within `ack_timeout`, so a core's
//! frames are acknowledged in log order.
//!
//! **A publish that fails** (an error, or no acknowledgement within `ack_timeout`) may leave the
//! messages after it landed and it not. So the publisher takes its subject again
//! (`fence::take` as the holder): new markers on the fence subjects (no message of the old
//! window can land after them), then the messages after the last acknowledged one read back;
//! those that landed in order count as acknowledged, those behind a gap are deleted, and the
//! rest of the window goes out again under the new fence, in order, with new ids. Meanwhile the
//! core is marked down ([`ReplicationState::refusal`]: `replication_unavailable`) and takes are
//! retried with a back-off from 50 ms to 1 s.
//!
//! **Fenced.** A take whose marker is refused because another node wrote a fence subject means
//! that node took the subject (it adopted this node's logs). The node is fenced: a log line
//! names the fence subject and both sequences, the publisher stops (the log never forks), and
//! the node refuses new events (`replication_fenced`) until it is restarted.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_nats::jetstream::context::{PublishError, PublishErrorKind::WrongLastSequence};
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::replication::fence::{self, Slots, TakeError, Taker};
use crate::replication::message::{merge_max, pack, FrameBuf, FrameMeta, Lists, MESSAGE_OVERHEAD};
use crate::replication::purge::Purger;
use crate::replication::retention::Retention;
use crate::replication::state::{CoreState, ReplicationState};

/// Retry back-off of a take after a failed publish: from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

type AckFuture =
    Pin<Box<dyn Future<Output = Result<jetstream::publish::PublishAck, PublishError>>>>;

/// One message of the window.
struct InFlight {
    number: u64,
    message: Bytes,
    /// The highest core frame number it carries (0: only frames the mirror added).
    last_frame: u64,
    meta: FrameMeta,
    /// It carries a frame the mirror added (dead letters carried forward, or catch-up).
    added: bool,
    sent: Instant,
    /// Its acknowledgement, once sent (none: to be sent).
    ack: Option<AckFuture>,
}

/// One subject's publisher (module docs).
pub(crate) struct CoreTask {
    pub js: jetstream::Context,
    pub stream: stream::Stream,
    pub subject: String,
    pub core: usize,
    pub link: MirrorLink,
    pub node: Arc<ReplicationState>,
    pub rx: mpsc::UnboundedReceiver<Pending>,
    pub max_payload: usize,
    pub ack_timeout: Duration,
    /// Messages in flight at most.
    pub window: usize,
    /// The fence this node holds on the subject, and the number of its next message.
    pub slots: Slots,
    pub next: u64,
    /// The stream sequence of the last acknowledged message on the subject (0: none).
    pub expected: u64,
    /// The node's own subject: what it may drop (`replication::retention`), and the way to
    /// its DLQ for the dead letters carried forward.
    pub retention: Option<(Retention, Carry)>,
    /// A frame of dead letters carried forward is on its way.
    pub carrying: bool,
    /// The messages its retention remembers, as last added to `retained_messages`.
    pub counted: usize,
    /// The `through` and `first` lists the subject's acknowledged frames named last, per log:
    /// a frame the mirror adds carries them, so the subject's last message always says how
    /// far each log is replicated and where it begins.
    pub lists: Lists,
    /// The subject's purges, off the publishing path.
    pub purger: Arc<Purger>,
    /// The node's name, in its fence markers' ids.
    pub who: String,
}

/// Room left in a message for its headers (subject, `Nats-Msg-Id`, the expectations).
pub(crate) const HEADER_ROOM: usize = 512;

/// A frame on its way: its number (0: one the mirror added, a dead letter carried forward),
/// its bytes and what it holds.
pub(crate) type Pending = (u64, Vec<u8>, FrameMeta);

/// Reads the live dead letters of the given ids from the node's DLQ, each in its store's
/// encoding (`replication::retention`: carried forward); those gone are left out.
pub type Carry = Arc<dyn Fn(&[String]) -> Vec<(String, Vec<u8>)> + Send + Sync>;

/// What wakes a core's loop when its frames are acknowledged (or the node is fenced).
pub type Wake = Box<dyn Fn() + Send + Sync>;

/// One core's way to the mirror, owned by its commit helper.
#[derive(Clone)]
pub struct MirrorLink {
    state: Arc<CoreState>,
    /// The largest frame a message can carry (the server's `max_payload` less the overhead).
    frame_limit: usize,
    tx: mpsc::UnboundedSender<Pending>,
    wake: Arc<OnceLock<Wake>>,
}

impl fmt::Debug for MirrorLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MirrorLink")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl MirrorLink {
    /// A link over `state`, for messages of at most `max_payload` bytes, and the receiving end
    /// of its frames (its publishing task's).
    pub(crate) fn new(
        state: Arc<CoreState>,
        max_payload: usize,
    ) -> (MirrorLink, mpsc::UnboundedReceiver<Pending>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let link = MirrorLink {
            state,
            frame_limit: max_payload.saturating_sub(MESSAGE_OVERHEAD + HEADER_ROOM),
            tx,
            wake: Arc::new(OnceLock::new()),
        };
        (link, rx)
    }

    /// Hands a committed batch's frame over; returns its number (the core's
    /// [`CoreState::acked`] reaches it once JetStream has it). The channel is unbounded here
    /// because its producer bounds it: the committer holds at most `max_inflight` batches
    /// unacknowledged.
    pub fn submit(&self, (frame, meta): (Vec<u8>, FrameMeta)) -> u64 {
        let n = self.state.next_frame();
        // A closed channel is a stopping node: the frame stays unacknowledged, so its batch is
        // never settled as replicated.
        let _ = self.tx.send((n, frame, meta));
        n
    }

    /// The largest frame a message can carry: a commit helper cuts a batch's frame there.
    pub fn frame_limit(&self) -> usize {
        self.frame_limit
    }

    /// The core's mirror state (the committer reads `acked`).
    pub fn state(&self) -> &Arc<CoreState> {
        &self.state
    }

    /// Sets how the core's loop is woken on an acknowledgement (once, at the core's start).
    pub fn set_wake(&self, wake: Wake) {
        let _ = self.wake.set(wake);
    }

    /// Wakes the core's loop (an acknowledgement, or a change of the node's state).
    pub(crate) fn wake_core(&self) {
        if let Some(w) = self.wake.get() {
            w();
        }
    }
}

/// What every publisher of a node shares.
#[derive(Clone)]
pub(crate) struct Parts {
    pub js: jetstream::Context,
    pub stream: stream::Stream,
    pub node: Arc<ReplicationState>,
    pub max_payload: usize,
    pub ack_timeout: Duration,
    /// Messages in flight at most (`replication.max_inflight`).
    pub window: usize,
    /// The node's name.
    pub who: String,
}

/// How waiting on the window ended.
enum Step {
    Frame(Option<Pending>),
    Acked(u64),
    /// Why, and whether JetStream refused it for a wrong last sequence (likely a fence: the
    /// take decides before the core is marked down, so a fenced node answers
    /// `replication_fenced`, not `replication_unavailable`).
    Failed(String, bool),
}

impl CoreTask {
    /// The publisher of `subject` (frames of core or log `core`, from `rx`), which this node
    /// has just taken (`taken`).
    pub fn new(
        p: &Parts,
        (subject, core): (String, usize),
        (link, rx): (MirrorLink, mpsc::UnboundedReceiver<Pending>),
        taken: &fence::Taken,
    ) -> CoreTask {
        CoreTask {
            js: p.js.clone(),
            stream: p.stream.clone(),
            subject,
            core,
            link,
            node: p.node.clone(),
            rx,
            max_payload: p.max_payload,
            ack_timeout: p.ack_timeout,
            window: p.window.clamp(1, fence::SLOTS),
            slots: taken.slots,
            next: taken.next,
            expected: taken.last,
            retention: None,
            carrying: false,
            counted: 0,
            lists: Default::default(),
            purger: Arc::default(),
            who: p.who.clone(),
        }
    }

    /// Publishes what the link hands over until it closes or the node is fenced.
    pub async fn run(mut self) {
        let mut pending = VecDeque::new();
        self.pipeline(&mut pending, false).await;
    }

    /// Publishes `frames` (a catch-up) and waits for all of them; false if fenced.
    pub async fn publish_all(&mut self, frames: Vec<Vec<u8>>) -> bool {
        let mut pending: VecDeque<Pending> = (frames.into_iter())
            .map(|f| (0, f, FrameMeta::default()))
            .collect();
        self.pipeline(&mut pending, true).await
    }

    /// The pipeline (module docs): with `drain`, until `pending` is published and acknowledged
    /// (the link is not read); otherwise until the link closes. False if fenced.
    async fn pipeline(&mut self, pending: &mut VecDeque<Pending>, drain: bool) -> bool {
        let mut window: VecDeque<InFlight> = VecDeque::new();
        loop {
            while window.len() < self.window && !pending.is_empty() {
                window.push_back(self.message(pending));
            }
            if let Err(why) = self.send_unsent(&mut window).await {
                if !self.retake(&mut window, pending, (why, false)).await {
                    return false;
                }
                continue;
            }
            if drain && window.is_empty() && pending.is_empty() {
                return true;
            }
            match self.wait(&mut window, !drain).await {
                Step::Frame(Some(f)) => {
                    pending.push_back(f);
                    while let Ok(f) = self.rx.try_recv() {
                        pending.push_back(f);
                    }
                }
                Step::Frame(None) => return true,
                Step::Acked(seq) => {
                    let done = window.pop_front().expect("the acknowledged message");
                    self.acked(done, seq, pending).await;
                }
                Step::Failed(why, fence_suspected) => {
                    if !self
                        .retake(&mut window, pending, (why, fence_suspected))
                        .await
                    {
                        return false;
                    }
                }
            }
        }
    }

    /// The next message: the frames at the front of `pending` that fit under `max_payload`.
    fn message(&mut self, pending: &mut VecDeque<Pending>) -> InFlight {
        let n = frames_that_fit(pending, self.max_payload);
        let message = Bytes::from(pack(self.core, pending.iter().take(n).map(|f| &f.1[..])));
        let (mut last_frame, mut added, mut meta) = (0, false, FrameMeta::default());
        for (frame, _, m) in pending.drain(..n) {
            last_frame = last_frame.max(frame);
            added |= frame == 0;
            meta.merge(m);
        }
        let number = self.next;
        self.next += 1;
        InFlight {
            number,
            message,
            last_frame,
            meta,
            added,
            sent: Instant::now(),
            ack: None,
        }
    }

    /// Sends every message of the window not sent yet, in order.
    async fn send_unsent(&self, window: &mut VecDeque<InFlight>) -> Result<(), String> {
        for m in window.iter_mut().filter(|m| m.ack.is_none()) {
            let publish = (self.slots).message(&self.subject, m.number, m.message.clone());
            let sent = self.js.send_publish(self.subject.clone(), publish);
            match tokio::time::timeout(self.ack_timeout, sent).await {
                Ok(Ok(ack)) => {
                    m.sent = Instant::now();
                    m.ack = Some(Box::pin(ack.into_future()));
                }
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("not sent within {:?}", self.ack_timeout)),
            }
        }
        Ok(())
    }

    /// Waits for the first message's acknowledgement (within `ack_timeout` of its sending) or,
    /// with `read`, a frame from the link.
    async fn wait(&mut self, window: &mut VecDeque<InFlight>, read: bool) -> Step {
        let limit = self.ack_timeout;
        let front = async {
            let Some(m) = window.front_mut() else {
                return std::future::pending().await;
            };
            let deadline = tokio::time::Instant::from_std(m.sent + limit);
            let ack = m.ack.as_mut().expect("every message of the window is sent");
            match tokio::time::timeout_at(deadline, ack).await {
                Ok(Ok(ack)) => Step::Acked(ack.sequence),
                Ok(Err(e)) => Step::Failed(e.to_string(), e.kind() == WrongLastSequence),
                Err(_) => Step::Failed(format!("no acknowledgement within {limit:?}"), false),
            }
        };
        let rx = &mut self.rx;
        tokio::select! {
            biased;
            step = front => step,
            f = rx.recv(), if read => Step::Frame(f),
        }
    }

    /// Message `m` was acknowledged at stream sequence `seq`.
    async fn acked(&mut self, m: InFlight, seq: u64, pending: &mut VecDeque<Pending>) {
        (self.node.ack_seconds).observe_nanos(m.sent.elapsed().as_nanos() as u64);
        self.expected = seq;
        if m.added {
            self.carrying = false;
        }
        if self.link.state().is_down() {
            eprintln!("sluice: replication: {} acknowledged again", self.subject);
            self.link.state().set_down(false);
            self.node.refresh();
        }
        if m.last_frame > 0 {
            self.link.state().set_acked(m.last_frame);
            self.wake();
        }
        self.retain(m.meta, pending).await;
    }

    /// After a failed publish (`why`; `fence_suspected`: refused for a wrong last sequence):
    /// takes the subject again (module docs) until it is taken (true) or the node is fenced
    /// (false). The core is marked down at once, or, when a fence is suspected, only if the
    /// take does not decide at its first try.
    async fn retake(
        &mut self,
        window: &mut VecDeque<InFlight>,
        pending: &mut VecDeque<Pending>,
        (why, fence_suspected): (String, bool),
    ) -> bool {
        eprintln!(
            "sluice: replication: {} not acknowledged ({why}); taking the subject again and \
             publishing the rest in order, refusing new events meanwhile",
            self.subject
        );
        if !fence_suspected {
            self.mark_down();
        }
        let mut backoff = BACKOFF.0;
        loop {
            self.node
                .retakes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let first = window.front().map_or(self.next, |m| m.number);
            let taken = fence::take(
                &self.js,
                &self.stream,
                &self.subject,
                (Taker::Holder(&self.slots), &self.who),
                (self.expected, Some(first)),
                self.ack_timeout,
            )
            .await;
            match taken {
                Ok(t) => return self.resume(window, pending, t).await,
                Err(TakeError::Fenced {
                    slot,
                    expected,
                    actual,
                }) => {
                    self.fenced(&slot, expected, actual);
                    return false;
                }
                Err(TakeError::Failed(e)) => {
                    eprintln!("sluice: replication: taking {} again: {e}", self.subject);
                    if !self.link.state().is_down() {
                        self.mark_down();
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF.1);
                }
            }
        }
    }

    /// The subject taken again: the window's messages that landed in order are acknowledged,
    /// the others go out again under the new fence.
    async fn resume(
        &mut self,
        window: &mut VecDeque<InFlight>,
        pending: &mut VecDeque<Pending>,
        t: fence::Taken,
    ) -> bool {
        t.report_deleted(&self.subject, "this node", &self.node);
        self.slots = t.slots;
        for (seq, number) in t.kept {
            let ours = window.front().is_some_and(|m| Some(m.number) == number);
            if !ours {
                // Only this node writes the subject while it holds the fence: a message it
                // did not send means the log would fork. Stop.
                eprintln!(
                    "sluice: replication: FENCED: {} holds message {seq} ({number:?}) this node \
                     did not publish; it stops publishing",
                    self.subject
                );
                self.node.fence();
                self.wake();
                return false;
            }
            let m = window.pop_front().expect("checked above");
            self.acked(m, seq, pending).await;
        }
        for m in window.iter_mut() {
            m.ack = None;
        }
        true
    }

    /// Marks the core down: its batches are answered `replication_unavailable`.
    fn mark_down(&self) {
        self.link.state().set_down(true);
        self.node.refresh();
        self.wake();
    }

    fn fenced(&self, slot: &str, expected: u64, actual: u64) {
        eprintln!(
            "sluice: replication: FENCED: another node wrote {slot} (this node expected its last \
             sequence {expected}, the stream has {actual}): it took {} over; this node stops \
             accepting until restarted, and never writes the subject again",
            self.subject
        );
        self.node.fence();
        self.wake();
    }

    /// Moves `retained_messages` by what its retention remembers since the last count.
    pub fn count_kept(&mut self) {
        let Some((retention, _)) = self.retention.as_ref() else {
            return;
        };
        let (now, was) = (retention.kept(), self.counted);
        let gauge = &self.node.retained_messages;
        let at = std::sync::atomic::Ordering::Relaxed;
        if now >= was {
            gauge.fetch_add((now - was) as u64, at);
        } else {
            gauge.fetch_sub((was - now) as u64, at);
        }
        self.counted = now;
    }

    /// After message `self.expected` (holding `meta`) was acknowledged: drops what the subject
    /// no longer needs, or carries forward the dead letters that hold it back
    /// (`replication::retention`). A failed purge is logged and done by a later one.
    async fn retain(&mut self, meta: FrameMeta, pending: &mut VecDeque<Pending>) {
        let Some((retention, carry)) = self.retention.as_mut() else {
            return;
        };
        merge_max(&mut self.lists.0, meta.through.clone());
        merge_max(&mut self.lists.1, meta.first.clone());
        retention.acked(self.expected, meta);
        let step = retention.step();
        if !step.carry.is_empty() && !self.carrying {
            let mut frame = FrameBuf::default();
            for (id, entry) in carry(&step.carry) {
                frame.dead_letter(&id, entry);
            }
            if !frame.is_empty() {
                for &(log, lsn) in &self.lists.0 {
                    frame.through(log, lsn);
                }
                for &(log, lsn) in &self.lists.1 {
                    frame.first(log, lsn);
                }
                let (bytes, meta) = frame.take();
                pending.push_back((0, bytes, meta));
                self.carrying = true;
            }
        }
        self.count_kept();
        if let Some(below) = step.purge_below {
            self.purger.want(below, &self.js, &self.subject, &self.node);
        }
    }

    fn wake(&self) {
        self.link.wake_core();
    }
}

/// How many frames from the front of `pending` go in the next message under `max_payload`
/// (at least one: a commit's frame is bounded by `MAX_BATCH_BYTES` plus the pump's records; a
/// larger one than the server takes is refused and retried, visibly, and README says to raise
/// the server's `max_payload` to 8 MiB).
fn frames_that_fit(pending: &VecDeque<Pending>, max_payload: usize) -> usize {
    let room = max_payload.saturating_sub(MESSAGE_OVERHEAD + HEADER_ROOM);
    let mut size = 0;
    let mut n = 0;
    for (_, f, _) in pending {
        if n > 0 && size + f.len() > room {
            break;
        }
        size += f.len();
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_takes_the_frames_that_fit_under_max_payload_and_always_one() {
        let overhead = MESSAGE_OVERHEAD + HEADER_ROOM;
        let frames: VecDeque<Pending> = (1..=4)
            .map(|n| (n, vec![0; 100], FrameMeta::default()))
            .collect();
        assert_eq!(frames_that_fit(&frames, overhead + 400), 4);
        assert_eq!(frames_that_fit(&frames, overhead + 399), 3);
        assert_eq!(frames_that_fit(&frames, overhead + 100), 1);
        assert_eq!(
            frames_that_fit(&frames, 10),
            1,
            "one frame goes whatever its size"
        );
    }
}
