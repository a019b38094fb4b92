//! What the loop moves each turn, between the core's parts and the other cores. A loop step
//! hands things on; it decides nothing about them.
//!
//! - [`Worker::take_commits`]: each batch back from its commit goes to its owners — ingest's
//!   appends and the replays' settled by the handler side (`sched::handler`, each item by its
//!   `wal::group::Owner`) within `Server::answer`, which writes the connections they answered;
//!   then the pump (`dispatch::pump::shell`) settles its records and dead letters and takes each
//!   durable event from memory.
//! - [`Worker::take_reads`], [`Worker::finish_scrapes`], [`Worker::retry_offers`]: the answers
//!   that came later (reads, the turn's scrapes) and the offers waiting for room, the same way.
//! - [`Worker::exchange`]: dispatch's turn (`dispatch::exchange`: jobs and outcomes between the
//!   pump, the dispatcher and the other cores' rings, with its bounds), then the turn's batch to
//!   the commit helper.
//! - [`Worker::publish_horizon`]: the core's order horizon, at the end of the turn.

use super::Worker;
use crate::dispatch::exchange::Turn;
use crate::dispatch::pump::shell::Batch;
use crate::sched::commit;
use crate::wal::commit::FileRing;

impl Worker {
    /// Handles the batches that came back (from the ring, from the commit helper), if any.
    pub(super) fn take_commits(&mut self) {
        while let Some(batch) = self.committer.take_done() {
            self.take_commit(batch);
        }
    }

    /// The loop's step for one batch back from its commit: to ingest and the replays, which
    /// settle their appends (claims, the 202s or `503`s queued, removals staged) inside the
    /// server's `Server::answer`, which then writes the answered connections; then to the pump
    /// (`CorePump::on_commit`: its records and dead letters, the durable events from memory).
    fn take_commit(&mut self, batch: Batch) {
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |serve, answers| {
            serve.0.settle_commit(&batch, answers)
        });
        // Then the pump (nothing of it waits for the answers, nor they for it).
        self.pump
            .on_commit(batch, crate::sync::clock::unix_millis());
    }

    /// With `[replication]`: the requests whose batch waits for JetStream past `ack_timeout`
    /// (or whose node is fenced) answered `503` now (`sched::replicated`); their events settle
    /// with their batch.
    pub(super) fn answer_unreplicated(&mut self) {
        let Some((tickets, reason)) = commit::take_overdue(&mut self.committer) else {
            return;
        };
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |serve, answers| {
            serve.0.answer_held(&tickets, reason, answers)
        });
    }

    /// The reads the readers answered since the last turn, filled and written
    /// (`sched::handler::Core::answer_reads`).
    pub(super) fn take_reads(&mut self) {
        // Most turns: nothing back, and no lending, no flush.
        if self.reads.nothing_back() {
            return;
        }
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |serve, mut answers| {
            serve.0.answer_reads(&mut answers)
        });
    }

    /// Before the loop sleeps: every scrape of the turn answered with one rendering.
    pub(super) fn finish_scrapes(&mut self) {
        if !self.scrapes.pending() {
            return;
        }
        let now = self.now();
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |serve, mut answers| {
            serve.0.answer_scrapes(&mut answers, now)
        });
    }

    /// Offers the waiting connections' events again (`Front::retry_offers`), then drives each.
    pub(super) fn retry_offers(&mut self) {
        if !self.front.offers_waiting() {
            return;
        }
        let now = self.now();
        let (server, mut net, mut serve) = self.split();
        let mut touched = Vec::new();
        server.answer(&mut net, &mut serve, |serve, answers| {
            touched = serve.0.retry_offers(answers, now)
        });
        for idx in touched {
            self.drive(idx);
        }
    }
}

impl Worker {
    /// Dispatch's turn (`dispatch::exchange`: jobs and outcomes between the pump, the
    /// dispatcher and the other cores), after following any new configuration (jobs from other
    /// cores may come from a newer generation: a new trigger's gates); then the turn's batch to
    /// the commit helper.
    pub(super) fn exchange(&mut self, now: u64) {
        self.follow_reload();
        let t = Turn {
            now,
            now_ms: crate::sync::clock::unix_millis(),
            // Past `drain_grace` (not at the signal): the drain proper holds new work back.
            draining: self.shared.accepting_stopped(now),
        };
        let (pump, dispatcher) = (&mut self.pump, &mut self.dispatcher);
        (self.links.exchange).turn(pump, dispatcher, self.committer.staging(), t);
        let ring = self.reactor.file_ring().map(|r| r as &mut dyn FileRing);
        self.committer.kick(ring);
        self.metrics
            .set_commit_queued(self.committer.queued() as u64);
        (self.metrics).set_link_waiting(self.links.exchange.waiting() as u64);
        (self.metrics).set_event_shelf(crate::wal::shelf::shelved() as u64);
        (self.metrics).set_outbound_timers(self.dispatcher.timer_entries() as u64);
    }

    /// The end of a turn: this core's order horizon published (`dispatch::horizon`), then the
    /// gates' waiters every core's horizon has passed released.
    pub(super) fn publish_horizon(&mut self, now: u64) {
        let ingest = match (self.front.in_flight(), self.front.offers_waiting()) {
            (_, true) => Some(0),
            (0, false) => None,
            (_, false) => Some(self.pump.last_durable_at()),
        };
        let links = self.links.exchange.oldest_waiting();
        self.pump.publish_horizon(ingest, links);
        let draining = self.shared.accepting_stopped(now);
        self.dispatcher.on_horizon(now, draining);
    }

    /// Nothing left to hand to another core or to make durable (end of the drain).
    pub(super) fn settled(&self) -> bool {
        self.links.exchange.is_settled() && self.pump.is_flushed() && self.committer.is_idle()
    }
}
