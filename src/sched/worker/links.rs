//! A core's traffic with its commit helper and with the other cores, once per loop turn.
//!
//! - [`Worker::take_commits`]: the batch the commit helper finished — `202`s (or `503
//!   wal_unavailable`) for the ingest events in it, each durable event handed to the core's
//!   pump from memory, and the pump's own records and dead letters settled.
//! - [`Worker::exchange`]: jobs and outcomes between the pump and the dispatchers. A job for a
//!   destination this core owns, or an outcome for an event in a log this core owns, is handed
//!   over directly; the others go through the destination core's inbound rings (one job ring
//!   and one outcome ring per core, written by every core), and each core written to is woken
//!   once per turn, however many items it got.
//!
//! Bounds: a core's inbound job ring holds `max_outstanding` jobs (never more are out in the
//! whole process, so it is never full); its outcome ring `2 × max_outstanding + 64`. An item
//! that finds a ring full (outcomes: a burst of retries) waits in this core's `overflow` queue,
//! bounded by the outcomes of the jobs this core holds, and is offered again next turn.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mio::{Token, Waker};

use super::Worker;
use crate::dispatch::job::{Job, JobOutcome};
use crate::ring;
use crate::sched::commit::{Item, Outcome};
use crate::sched::logs::split_key;
use crate::sched::pump::PUMP_TICKET;
use crate::wal::{AppendOutcome, Record};

/// The poll token of the core's waker (commit helper, other cores, shutdown).
pub(super) const WAKER: Token = Token(usize::MAX - 2);

/// A core's ends of the rings between cores.
#[derive(Debug)]
pub struct CoreLinks {
    pub core: usize,
    /// Jobs for destinations this core owns, from every core.
    pub jobs_in: ring::Receiver<Job>,
    /// Outcomes for events in logs this core owns, from every core.
    pub outcomes_in: ring::Receiver<JobOutcome>,
    /// Every core's inbound rings and waker, by core.
    pub jobs_out: Vec<ring::Sender<Job>>,
    pub outcomes_out: Vec<ring::Sender<JobOutcome>>,
    pub wakers: Vec<Arc<Waker>>,
    /// Owner core of each log, by log index (the top bits of an event key).
    pub log_owner: Arc<[usize]>,
    /// Cores that reported themselves quiet during the drain.
    pub quiet: Arc<AtomicUsize>,
    /// Items that found a ring full, for the next turn.
    pub(super) job_overflow: VecDeque<(usize, Job)>,
    pub(super) outcome_overflow: VecDeque<(usize, JobOutcome)>,
    /// Jobs the pump admitted this turn (reused buffer).
    pub(super) admitted: Vec<(usize, Job)>,
    /// Cores written to this turn.
    pub(super) touched: Vec<bool>,
}

impl CoreLinks {
    /// Wires `cores` cores: returns each core's links. `wakers[k]` wakes core `k`'s poll.
    pub fn wire(
        cores: usize,
        max_outstanding: usize,
        wakers: Vec<Arc<Waker>>,
        log_owner: Arc<[usize]>,
    ) -> Vec<CoreLinks> {
        let quiet = Arc::new(AtomicUsize::new(0));
        let (mut job_txs, mut job_rxs) = (Vec::new(), Vec::new());
        let (mut out_txs, mut out_rxs) = (Vec::new(), Vec::new());
        for _ in 0..cores {
            let (tx, rx) = ring::channel(max_outstanding);
            job_txs.push(tx);
            job_rxs.push(rx);
            let (tx, rx) = ring::channel(2 * max_outstanding + 64);
            out_txs.push(tx);
            out_rxs.push(rx);
        }
        job_rxs
            .into_iter()
            .zip(out_rxs)
            .enumerate()
            .map(|(core, (jobs_in, outcomes_in))| CoreLinks {
                core,
                jobs_in,
                outcomes_in,
                jobs_out: job_txs.clone(),
                outcomes_out: out_txs.clone(),
                wakers: wakers.clone(),
                log_owner: log_owner.clone(),
                quiet: quiet.clone(),
                job_overflow: VecDeque::new(),
                outcome_overflow: VecDeque::new(),
                admitted: Vec::new(),
                touched: vec![false; cores],
            })
            .collect()
    }

    /// This core has nothing in flight any more (drain).
    pub fn report_quiet(&self) {
        self.quiet.fetch_add(1, Ordering::AcqRel);
    }

    /// Every core reported itself quiet: no outcome can arrive any more.
    pub fn all_quiet(&self) -> bool {
        self.quiet.load(Ordering::Acquire) >= self.wakers.len()
    }

    /// Wakes each core written to this turn, once.
    fn wake_touched(&mut self) {
        for (core, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                let _ = self.wakers[core].wake();
            }
        }
    }
}

impl Worker {
    /// Handles the batches that came back (from the ring, from the commit helper), if any.
    pub(super) fn take_commits(&mut self) {
        while let Some(batch) = self.committer.take_done() {
            self.take_commit(batch);
        }
    }

    fn take_commit(&mut self, mut batch: crate::sched::commit::Batch) {
        let now_ms = crate::sync::clock::unix_millis();
        let mut touched: Vec<usize> = Vec::new();
        let outcomes = std::mem::take(&mut batch.outcomes);
        for (item, outcome) in batch.items.drain(..).zip(outcomes) {
            match (item, outcome) {
                (Item::Append { ticket, .. }, Outcome::Appended(o))
                    if ticket & PUMP_TICKET != 0 =>
                {
                    self.pump.on_record_done(ticket, o)
                }
                (Item::Append { ticket, record, .. }, Outcome::Appended(o)) => {
                    if ticket & super::replay::REPLAY_TICKET != 0 {
                        self.replay_done(ticket, o);
                    } else if let Some(idx) = self.ingest_done(ticket, o) {
                        if touched.last() != Some(&idx) {
                            touched.push(idx);
                        }
                    }
                    if let (AppendOutcome::Durable { lsn }, Record::Event(event)) = (o, record) {
                        // In memory already: the pump gets it without reading the log back.
                        self.pump.on_durable(lsn, event);
                    }
                }
                (Item::DeadLetter { ticket, entry }, Outcome::DeadLettered(r)) => {
                    self.pump.on_dead_letter_done(ticket, entry, r, now_ms)
                }
                (item, outcome) => {
                    eprintln!("sluice: commit helper answered {item:?} with {outcome:?}")
                }
            }
        }
        for idx in touched {
            // A connection that stopped reading at its pipeline depth may read again now.
            self.drive(idx);
        }
    }

    /// Moves jobs and outcomes: inbound rings, the dispatcher's outcomes, the pump's admissions.
    pub(super) fn exchange(&mut self, now: u64) {
        // Jobs from other cores may come from a newer generation (a new trigger's gates): this
        // core follows it before it judges them, as it does before routing a request.
        self.follow_reload();
        let now_ms = crate::sync::clock::unix_millis();
        // Past `drain_grace` (not at the signal): the drain proper holds new work back.
        let draining = self.shared.accepting_stopped(now);
        let registry = self.reactor.registry();
        while let Some(job) = self.links.jobs_in.try_pop() {
            self.dispatcher.accept(job, now, registry, draining);
        }
        while let Some(o) = self.links.outcomes_in.try_pop() {
            self.pump.on_outcome(o, now_ms, &mut self.committer);
        }
        self.dispatcher.on_tick(now, registry, draining);
        for o in self.dispatcher.take_outcomes() {
            let owner = self.links.log_owner[split_key(o.lsn()).0];
            if owner == self.links.core {
                self.pump.on_outcome(o, now_ms, &mut self.committer);
            } else {
                self.links.outcome_overflow.push_back((owner, o));
            }
        }
        let mut admitted = std::mem::take(&mut self.links.admitted);
        self.pump
            .turn(now, draining, &mut self.committer, &mut admitted);
        for (owner, job) in admitted.drain(..) {
            if owner == self.links.core {
                self.dispatcher
                    .accept(job, now, self.reactor.registry(), draining);
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
