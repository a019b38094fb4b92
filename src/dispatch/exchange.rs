//! A core's turn of dispatch ([`Exchange::turn`]): jobs and outcomes between the core's pump and
//! its dispatcher, and to and from the other cores, placed by dispatch's own rules
//! (`dispatch::placement`). A job for a destination this core owns, or an outcome for an event
//! in a log this core owns, is handed over directly; the others go through the owner core's
//! inbound rings (one job ring and one outcome ring per core, written by every core), and each
//! core written to is woken once per turn, however many items it got. The core's loop calls the
//! turn once per loop turn (`sched::worker`), after it followed any new configuration.
//!
//! Bounds: a core's inbound job ring holds `max_outstanding` jobs (never more are out in the
//! whole process, so it is never full); its outcome ring `2 × max_outstanding + 64`. An item
//! that finds a ring full (outcomes: a burst of retries) waits in this core's overflow queue,
//! bounded by the outcomes of the jobs this core holds, and is offered again next turn
//! (`sluice_link_waiting`, [`Exchange::waiting`]).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::Arc;

use crate::dispatch::deliver::dispatcher::Dispatcher;
use crate::dispatch::job::{Job, JobOutcome};
use crate::dispatch::placement::LogOwners;
use crate::dispatch::pump::shell::{CorePump, Staging};
use crate::net::io::Waker;
use crate::ring;

/// A core's ends of the rings between cores, with what waits to be offered to them.
#[derive(Debug)]
pub struct Exchange {
    core: usize,
    /// Jobs for destinations this core owns, from every core.
    jobs_in: ring::Receiver<Job>,
    /// Outcomes for events in logs this core owns, from every core.
    outcomes_in: ring::Receiver<JobOutcome>,
    /// Every core's inbound rings and waker, by core.
    jobs_out: Vec<ring::Sender<Job>>,
    outcomes_out: Vec<ring::Sender<JobOutcome>>,
    wakers: Vec<Arc<Waker>>,
    /// Owner core of each log.
    log_owners: LogOwners,
    /// Items that found a ring full, for the next turn.
    job_overflow: VecDeque<(usize, Job)>,
    outcome_overflow: VecDeque<(usize, JobOutcome)>,
    /// Jobs the pump admitted this turn (reused buffer).
    admitted: Vec<(usize, Job)>,
    /// Cores written to this turn.
    touched: Vec<bool>,
}

/// The clock readings and state of one turn.
#[derive(Debug, Clone, Copy)]
pub struct Turn {
    /// The injected clock (nanos).
    pub now: u64,
    /// The wall clock (Unix millis): a record's time.
    pub now_ms: u64,
    /// Past `drain_grace`: the drain holds new work back.
    pub draining: bool,
}

impl Exchange {
    /// Wires `cores` cores: each core's exchange. `wakers[k]` wakes core `k`'s loop;
    /// `owners` names the core whose pump reads each log.
    pub fn wire(
        cores: usize,
        max_outstanding: usize,
        wakers: &[Arc<Waker>],
        owners: LogOwners,
    ) -> Vec<Exchange> {
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
        (job_rxs.into_iter().zip(out_rxs).enumerate())
            .map(|(core, (jobs_in, outcomes_in))| Exchange {
                core,
                jobs_in,
                outcomes_in,
                jobs_out: job_txs.clone(),
                outcomes_out: out_txs.clone(),
                wakers: wakers.to_vec(),
                log_owners: owners.clone(),
                job_overflow: VecDeque::new(),
                outcome_overflow: VecDeque::new(),
                admitted: Vec::new(),
                touched: vec![false; cores],
            })
            .collect()
    }

    /// One turn: the inbound rings, the dispatcher's outcomes, the pump's admissions, each item
    /// to its owner (module docs); the pump's writes go to `staging`.
    pub fn turn(
        &mut self,
        pump: &mut CorePump,
        dispatcher: &mut Dispatcher,
        staging: &mut Staging,
        t: Turn,
    ) {
        // The order horizon first: every job it covers is in the ring drained next.
        dispatcher.note_horizon();
        while let Some(job) = self.jobs_in.try_pop() {
            dispatcher.accept(job, t.now, t.draining);
        }
        while let Some(o) = self.outcomes_in.try_pop() {
            pump.on_outcome(o, t.now_ms, staging);
        }
        dispatcher.on_tick(t.now, t.draining);
        for o in dispatcher.take_outcomes() {
            let owner = self.log_owners.of_outcome(&o);
            if owner == self.core {
                pump.on_outcome(o, t.now_ms, staging);
            } else {
                self.outcome_overflow.push_back((owner, o));
            }
        }
        let mut admitted = std::mem::take(&mut self.admitted);
        pump.turn(t.now, t.draining, staging, &mut admitted);
        for (owner, job) in admitted.drain(..) {
            if owner == self.core {
                dispatcher.accept(job, t.now, t.draining);
            } else {
                self.job_overflow.push_back((owner, job));
            }
        }
        self.admitted = admitted;
        self.send_out();
        if self.job_overflow.is_empty() {
            // The recovered events this pump admitted are all in their owners' rings.
            pump.handed_over();
        }
        self.wake_touched();
    }

    /// Offers the queued cross-core items to their rings, in order per kind.
    fn send_out(&mut self) {
        offer(&mut self.job_overflow, &self.jobs_out, &mut self.touched);
        offer(
            &mut self.outcome_overflow,
            &self.outcomes_out,
            &mut self.touched,
        );
    }

    /// Wakes each core written to this turn, once.
    fn wake_touched(&mut self) {
        for (core, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                let _ = self.wakers[core].wake();
            }
        }
    }

    /// Items waiting for room in another core's ring.
    pub fn waiting(&self) -> usize {
        self.job_overflow.len() + self.outcome_overflow.len()
    }

    /// The oldest order time among the jobs waiting for another core's ring (the order
    /// horizon must not pass them, `dispatch::horizon`).
    pub fn oldest_waiting(&self) -> Option<u64> {
        (self.job_overflow.iter())
            .filter_map(|(_, j)| crate::dispatch::horizon::order_time(&j.event.event_id))
            .min()
    }

    /// Nothing left to hand to another core, and no outcome waiting to be taken.
    pub fn is_settled(&self) -> bool {
        self.job_overflow.is_empty()
            && self.outcome_overflow.is_empty()
            && self.outcomes_in.is_empty()
    }
}

/// Offers `queue`'s items, in order, to the rings of their cores (`rings[core]`), marking each
/// core written to; stops at the first full ring (the rest wait for the next turn, in order).
fn offer<T: Send>(
    queue: &mut VecDeque<(usize, T)>,
    rings: &[ring::Sender<T>],
    touched: &mut [bool],
) {
    while let Some((core, item)) = queue.pop_front() {
        match rings[core].try_push(item) {
            Ok(()) => touched[core] = true,
            Err(e) => {
                queue.push_front((core, e.into_inner()));
                break;
            }
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn wiring_gives_each_core_its_own_inbound_rings_and_everyones_outbound() {
        // One waker per poll (mio), as each core has its own.
        let polls: Vec<_> = (0..3).map(|_| mio::Poll::new().unwrap()).collect();
        let wakers: Vec<_> = (polls.iter().enumerate())
            .map(|(k, p)| Arc::new(Waker::new(p.registry(), mio::Token(k)).unwrap()))
            .collect();
        let ex = Exchange::wire(3, 8, &wakers, LogOwners::new(&[0, 1, 2]));
        assert_eq!(ex.len(), 3);
        for (k, e) in ex.iter().enumerate() {
            assert_eq!(e.core, k);
            assert_eq!((e.jobs_out.len(), e.outcomes_out.len()), (3, 3));
            assert!(e.is_settled() && e.waiting() == 0 && e.oldest_waiting().is_none());
        }
    }
}
