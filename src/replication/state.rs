//! What the mirror thread publishes for the rest of the node: whether replication is up or
//! fenced (ingest refuses, `/readyz` says so), each core's acknowledged frames (its commit
//! settles batches up to them), and the metrics.
//!
//! Every field is an atomic or a `Histogram` (itself atomics): the mirror thread writes, the
//! cores and the scrape read, nobody waits. Bounds: one entry per core, fixed at start. The
//! atomics come through `crate::sync`, so the loom model (`loom-tests/tests/replication.rs`)
//! explores the real code: a fence is never undone by a concurrent "up", and a core never sees
//! its acknowledged frame go back.
#![forbid(unsafe_code)]

use crate::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::Arc;

use crate::metrics::histogram::Histogram;
use crate::metrics::{MetricType, PromWriter};

/// Bucket bounds of `sluice_replication_ack_seconds`: 250 µs … 10 s.
const ACK_BOUNDS_NANOS: &[u64] = &[
    250_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// Why replication refuses new events, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// JetStream did not acknowledge within `ack_timeout`, or is unreachable: `503
    /// replication_unavailable` with `Retry-After`.
    Unavailable,
    /// Someone else wrote this node's subject: `503 replication_fenced`, until restart.
    Fenced,
}

impl Refuse {
    /// The `reason` of the 503 and of `/readyz`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refuse::Unavailable => "replication_unavailable",
            Refuse::Fenced => "replication_fenced",
        }
    }
}

const UP: u8 = 0;
const DOWN: u8 = 1;
const FENCED: u8 = 2;

/// One core's mirror state.
#[derive(Debug, Default)]
pub struct CoreState {
    /// Frames the core's commit helper handed over (numbered from 1).
    submitted: AtomicU64,
    /// Highest frame number JetStream acknowledged (every lower one is acknowledged too).
    acked: AtomicU64,
    /// The last publish of this core failed or timed out, and none succeeded since.
    down: AtomicBool,
    /// Batches committed locally and waiting for their acknowledgement (the core's loop
    /// publishes it: `sched::replicated::Awaiting`).
    waiting: AtomicU64,
}

impl CoreState {
    /// Numbers the next frame (the commit helper, one thread per core).
    pub fn next_frame(&self) -> u64 {
        self.submitted.fetch_add(1, Relaxed) + 1
    }

    /// Highest frame number acknowledged; frames up to it are replicated.
    pub fn acked(&self) -> u64 {
        self.acked.load(Acquire)
    }

    /// Frames handed over and not yet acknowledged (a batch larger than a message has
    /// several).
    pub fn in_flight(&self) -> u64 {
        self.submitted.load(Relaxed).saturating_sub(self.acked())
    }

    /// Batches waiting for their acknowledgement, as the core's loop last published it.
    pub fn waiting_batches(&self) -> u64 {
        self.waiting.load(Relaxed)
    }

    /// The core's loop: `n` batches wait for their acknowledgement.
    pub fn set_waiting_batches(&self, n: u64) {
        self.waiting.store(n, Relaxed);
    }

    /// The mirror thread: frames up to `frame` are acknowledged (never moves back).
    pub fn set_acked(&self, frame: u64) {
        self.acked.fetch_max(frame, Release);
    }

    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, Relaxed);
    }

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Relaxed)
    }
}

/// The node's replication state (module docs).
#[derive(Debug)]
pub struct ReplicationState {
    state: AtomicU8,
    cores: Vec<Arc<CoreState>>,
    pub ack_seconds: Histogram,
    pub fenced_total: AtomicU64,
    /// Bytes the stream holds (all nodes), polled from JetStream.
    pub stream_bytes: AtomicU64,
    /// Messages of this node's subjects dropped from the stream (`replication::retention`).
    pub purged_messages: AtomicU64,
    /// Messages of this node's subjects the mirror remembers for retention (each one still in
    /// the stream; `replication::retention`).
    pub retained_messages: AtomicU64,
    /// Purges that failed (retried by a later one, `replication::purge`).
    pub purge_failures: AtomicU64,
    /// Claims or take-overs of a lost node's logs that failed (retried at the next scan,
    /// `replication::adopt`).
    pub adoption_failures: AtomicU64,
    /// Lease renewals JetStream did not take (retried at the next, `replication::lease`).
    pub renewal_failures: AtomicU64,
    /// Times a core took its subject again after a publish failed (`replication::fence`).
    pub retakes: AtomicU64,
    /// Messages deleted from the stream as a broken pipeline's tail: published behind one
    /// that never landed, acknowledged to no sender (`replication::fence`).
    pub voided_messages: AtomicU64,
    /// Logs of other nodes this node adopted.
    pub adopted_logs: AtomicUsize,
    /// The nodes adopted, for the dashboard: (node, logs, Unix ms), at most one per node of
    /// the lease bucket.
    adopted: parking_lot::Mutex<Vec<(String, usize, u64)>>,
}

impl ReplicationState {
    /// State for `cores` cores; down until the mirror's first connection.
    pub fn new(cores: usize) -> ReplicationState {
        ReplicationState {
            state: AtomicU8::new(DOWN),
            cores: (0..cores).map(|_| Arc::default()).collect(),
            ack_seconds: Histogram::new(ACK_BOUNDS_NANOS),
            fenced_total: AtomicU64::new(0),
            stream_bytes: AtomicU64::new(0),
            purged_messages: AtomicU64::new(0),
            retained_messages: AtomicU64::new(0),
            purge_failures: AtomicU64::new(0),
            adoption_failures: AtomicU64::new(0),
            renewal_failures: AtomicU64::new(0),
            retakes: AtomicU64::new(0),
            voided_messages: AtomicU64::new(0),
            adopted_logs: AtomicUsize::new(0),
            adopted: Default::default(),
        }
    }

    /// Node `node`'s `logs` logs run here since `at_ms` (Unix ms).
    pub fn note_adopted(&self, node: &str, logs: usize, at_ms: u64) {
        let mut a = self.adopted.lock();
        a.retain(|(n, _, _)| n != node);
        a.push((node.to_owned(), logs, at_ms));
    }

    /// The nodes whose logs run here: (node, logs, since Unix ms).
    pub fn adopted(&self) -> Vec<(String, usize, u64)> {
        self.adopted.lock().clone()
    }

    /// Core `core`'s state (shared with its commit helper and committer).
    pub fn core(&self, core: usize) -> Option<&Arc<CoreState>> {
        self.cores.get(core)
    }

    /// Cores.
    pub fn cores(&self) -> &[Arc<CoreState>] {
        &self.cores
    }

    /// Why new events are refused now, if they are.
    pub fn refusal(&self) -> Option<Refuse> {
        match self.state.load(Relaxed) {
            UP => None,
            FENCED => Some(Refuse::Fenced),
            _ => Some(Refuse::Unavailable),
        }
    }

    /// Marks replication up or down (never un-fences).
    pub(crate) fn set_up(&self, up: bool) {
        let to = if up { UP } else { DOWN };
        let _ = (self.state).fetch_update(Relaxed, Relaxed, |s| (s != FENCED).then_some(to));
    }

    /// Re-derives up/down from the cores (up when none is down).
    pub fn refresh(&self) {
        self.set_up(!self.cores.iter().any(|c| c.is_down()));
    }

    /// Fences the node: it stops accepting until restarted.
    pub fn fence(&self) {
        // A read-modify-write, like `set_up`'s: the two are then ordered on `state` in the loom
        // model too (loom does not order a plain store against another thread's RMW; measured:
        // the model with `store` finds an "up" after the fence).
        self.state.swap(FENCED, Relaxed);
        self.fenced_total.fetch_add(1, Relaxed);
    }

    /// The `sluice_replication_*` families.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        w.gauge(
            "sluice_replication_up",
            "1 while JetStream acknowledges this node's commits; 0 while unavailable or fenced.",
            if self.refusal().is_none() { 1.0 } else { 0.0 },
        );
        w.header(
            "sluice_replication_ack_seconds",
            "Time from a replication message's publish to its JetStream acknowledgement.",
            MetricType::Histogram,
        );
        (self.ack_seconds).render(w, "sluice_replication_ack_seconds", &[]);
        w.header(
            "sluice_replication_inflight_batches",
            "Batches committed locally and not yet acknowledged by JetStream, per core \
             (at most replication.max_inflight).",
            MetricType::Gauge,
        );
        for (i, c) in self.cores.iter().enumerate() {
            let core = i.to_string();
            let n = c.waiting_batches();
            w.sample_u64("sluice_replication_inflight_batches", &[("core", &core)], n);
        }
        w.gauge(
            "sluice_replication_adopted_logs",
            "Logs of lost nodes this node adopted and delivers.",
            self.adopted_logs.load(Relaxed) as f64,
        );
        w.counter(
            "sluice_replication_fenced_total",
            "Publishes refused because another node wrote this node's subject (the node then \
             stops accepting).",
            self.fenced_total.load(Relaxed),
        );
        self.render_stream(w);
        w.gauge(
            "sluice_replication_stream_bytes",
            "Bytes the JetStream stream holds (every node's logs), as JetStream last reported.",
            self.stream_bytes.load(Relaxed) as f64,
        );
    }

    /// The families of what this node's subjects hold and how they are kept.
    fn render_stream(&self, w: &mut PromWriter) {
        w.counter(
            "sluice_replication_purged_messages_total",
            "Messages of this node's subjects dropped from the stream: every record in them \
             retired locally, every dead letter in them released or carried forward.",
            self.purged_messages.load(Relaxed),
        );
        w.gauge(
            "sluice_replication_retained_messages",
            "Messages of this node's subjects still in the stream that the mirror remembers for \
             retention (about one segment per log plus the events not yet done).",
            self.retained_messages.load(Relaxed) as f64,
        );
        w.counter(
            "sluice_replication_purge_failures_total",
            "Purges of this node's subjects that failed or got no answer (a later purge covers \
             what they would have dropped).",
            self.purge_failures.load(Relaxed),
        );
        w.counter(
            "sluice_replication_adoption_failures_total",
            "Claims or take-overs of a lost node's logs that failed (retried at the next scan).",
            self.adoption_failures.load(Relaxed),
        );
        w.counter(
            "sluice_replication_lease_renewal_failures_total",
            "Renewals of this node's lease that JetStream did not take (retried every lease / 3; \
             the lease runs out after lease without one).",
            self.renewal_failures.load(Relaxed),
        );
        w.counter(
            "sluice_replication_retakes_total",
            "Times a core took its subject again (new fence markers, the tail read back) after a \
             publish failed or was not acknowledged within ack_timeout.",
            self.retakes.load(Relaxed),
        );
        w.counter(
            "sluice_replication_voided_messages_total",
            "Messages deleted from the stream because they landed behind one that never did \
             (none of their events had a 202); their records are published again in order.",
            self.voided_messages.load(Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_until_up_and_fenced_for_good() {
        let s = ReplicationState::new(2);
        assert_eq!(
            s.refusal(),
            Some(Refuse::Unavailable),
            "down until connected"
        );
        s.refresh();
        assert_eq!(s.refusal(), None);
        s.core(1).unwrap().set_down(true);
        s.refresh();
        assert_eq!(s.refusal(), Some(Refuse::Unavailable));
        s.core(1).unwrap().set_down(false);
        s.refresh();
        assert_eq!(s.refusal(), None);
        s.fence();
        s.refresh();
        s.set_up(true);
        assert_eq!(
            s.refusal(),
            Some(Refuse::Fenced),
            "a fence holds until restart"
        );
        assert_eq!(s.fenced_total.load(Relaxed), 1);
    }

    #[test]
    fn every_family_renders_with_its_count() {
        let s = ReplicationState::new(1);
        s.purge_failures.fetch_add(2, Relaxed);
        s.adoption_failures.fetch_add(3, Relaxed);
        s.renewal_failures.fetch_add(4, Relaxed);
        s.retained_messages.store(5, Relaxed);
        let mut w = PromWriter::default();
        s.render_prometheus(&mut w);
        let text = w.finish();
        for (name, n) in [
            ("sluice_replication_purge_failures_total", 2),
            ("sluice_replication_adoption_failures_total", 3),
            ("sluice_replication_lease_renewal_failures_total", 4),
            ("sluice_replication_purged_messages_total", 0),
            ("sluice_replication_retained_messages", 5),
        ] {
            assert!(text.contains(&format!("{name} {n}")), "{name} in:\n{text}");
        }
    }

    #[test]
    fn frames_are_numbered_from_one_and_acked_in_order() {
        let c = CoreState::default();
        assert_eq!((c.next_frame(), c.next_frame(), c.next_frame()), (1, 2, 3));
        assert_eq!(c.in_flight(), 3);
        c.set_acked(2);
        c.set_acked(1);
        assert_eq!((c.acked(), c.in_flight()), (2, 1), "acks never go back");
    }
}
