//! A core's traffic with its commit helper and with the other cores, once per loop turn.
//!
//! - [`Worker::take_commits`]: each batch back from its commit goes to the domains — ingest
//!   settles its appends (`202`s, or `503 wal_unavailable`) and the replays theirs, each item by
//!   its owner (`wal::group::Owner`), within `Server::answer`, which writes the connections they
//!   answered; then the pump (`dispatch::pump::shell`) settles its records and dead
//!   letters and takes each durable event from memory. Replays made durable have their DLQ
//!   entries' removal staged for the next commit (`Item::Release`), and each replay's claim
//!   drops when its removal is back. A loop step: it handles no event itself.
//! - [`Worker::exchange`]: jobs and outcomes between the pump and the dispatchers. A job for a
//!   destination this core owns, or an outcome for an event in a log this core owns, is handed
//!   over directly; the others go through the destination core's inbound rings (one job ring
//!   and one outcome ring per core, written by every core), and each core written to is woken
//!   once per turn, however many items it got.
//!
//! Bounds: a core's inbound job ring holds `max_outstanding` jobs (never more are out in the
//! whole process, so it is never full); its outcome ring `2 × max_outstanding + 64`. An item
//! that finds a ring full (outcomes: a burst of retries) waits in this core's `overflow` queue,
//! bounded by the outcomes of the jobs this core holds, and is offered again next turn. The
//! rings and wakers themselves are `sched::wiring`'s.

use super::Worker;
use crate::dispatch::pump::shell::Batch;

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

    /// The reads the readers answered since the last turn, filled and written
    /// (`sched::handler::Core::answer_reads`).
    pub(super) fn take_reads(&mut self) {
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
    /// Moves jobs and outcomes: inbound rings, the dispatcher's outcomes, the pump's admissions.
    pub(super) fn exchange(&mut self, now: u64) {
        // Jobs from other cores may come from a newer generation (a new trigger's gates): this
        // core follows it before it judges them, as it does before routing a request.
        self.follow_reload();
        let now_ms = crate::sync::clock::unix_millis();
        // Past `drain_grace` (not at the signal): the drain proper holds new work back.
        let draining = self.shared.accepting_stopped(now);
        // The order horizon first: every job it covers is in the ring drained next.
        self.dispatcher.note_horizon();
        while let Some(job) = self.links.jobs_in.try_pop() {
            self.dispatcher.accept(job, now, draining);
        }
        while let Some(o) = self.links.outcomes_in.try_pop() {
            self.pump.on_outcome(o, now_ms, self.committer.staging());
        }
        self.dispatcher.on_tick(now, draining);
        for o in self.dispatcher.take_outcomes() {
            let owner = self.links.log_owners.of_outcome(&o);
            if owner == self.links.core {
                self.pump.on_outcome(o, now_ms, self.committer.staging());
            } else {
                self.links.outcome_overflow.push_back((owner, o));
            }
        }
        let mut admitted = std::mem::take(&mut self.links.admitted);
        self.pump
            .turn(now, draining, self.committer.staging(), &mut admitted);
        for (owner, job) in admitted.drain(..) {
            if owner == self.links.core {
                self.dispatcher.accept(job, now, draining);
            } else {
                self.links.job_overflow.push_back((owner, job));
            }
        }
        self.links.admitted = admitted;
        self.send_out();
        if self.links.job_overflow.is_empty() {
            // The recovered events this pump admitted are all in their owners' rings.
            self.pump.handed_over();
        }
        self.links.wake_touched();
        self.committer.kick(self.reactor.file_ring());
        self.metrics
            .set_commit_queued(self.committer.queued() as u64);
        let waiting = self.links.job_overflow.len() + self.links.outcome_overflow.len();
        self.metrics.set_link_waiting(waiting as u64);
    }

    /// The end of a turn: this core's order horizon published (`dispatch::horizon`), then the
    /// gates' waiters every core's horizon has passed released.
    pub(super) fn publish_horizon(&mut self, now: u64) {
        let ingest = match (self.front.in_flight(), self.front.offers_waiting()) {
            (_, true) => Some(0),
            (0, false) => None,
            (_, false) => Some(self.pump.last_durable_at()),
        };
        let links = (self.links.job_overflow.iter())
            .filter_map(|(_, j)| crate::dispatch::horizon::order_time(&j.event.event_id))
            .min();
        self.pump.publish_horizon(ingest, links);
        let draining = self.shared.accepting_stopped(now);
        self.dispatcher.on_horizon(now, draining);
    }

    /// Offers the queued cross-core items to their rings, in order per kind.
    fn send_out(&mut self) {
        let l = &mut self.links;
        while let Some((core, job)) = l.job_overflow.pop_front() {
            match l.jobs_out[core].try_push(job) {
                Ok(()) => l.touched[core] = true,
                Err(e) => {
                    l.job_overflow.push_front((core, e.into_inner()));
                    break;
                }
            }
        }
        while let Some((core, o)) = l.outcome_overflow.pop_front() {
            match l.outcomes_out[core].try_push(o) {
                Ok(()) => l.touched[core] = true,
                Err(e) => {
                    l.outcome_overflow.push_front((core, e.into_inner()));
                    break;
                }
            }
        }
    }

    /// Nothing left to hand to another core or to make durable (end of the drain).
    pub(super) fn settled(&self) -> bool {
        self.links.job_overflow.is_empty()
            && self.links.outcome_overflow.is_empty()
            && self.links.outcomes_in.is_empty()
            && self.pump.is_flushed()
            && self.committer.is_idle()
    }
}
