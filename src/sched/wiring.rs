//! The rings and wakers between cores, as one core holds them ([`CoreLinks`]), wired once at
//! start-up by the runtime ([`CoreLinks::wire`]); what a core's loop does with them each turn
//! is `sched::worker`'s (`links.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mio::{Token, Waker};

use crate::dispatch::job::{Job, JobOutcome};
use crate::dispatch::placement::LogOwners;
use crate::ring;

/// The poll token of the core's waker (commit helper, other cores, shutdown).
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

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
    /// Owner core of each log (dispatch's placement rule for outcomes).
    pub log_owners: LogOwners,
    /// Cores that reported themselves quiet during the drain.
    pub quiet: Arc<AtomicUsize>,
    /// Items that found a ring full, for the next turn.
    pub(crate) job_overflow: VecDeque<(usize, Job)>,
    pub(crate) outcome_overflow: VecDeque<(usize, JobOutcome)>,
    /// Jobs the pump admitted this turn (reused buffer).
    pub(crate) admitted: Vec<(usize, Job)>,
    /// Cores written to this turn.
    pub(crate) touched: Vec<bool>,
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
                log_owners: LogOwners::new(log_owner.clone()),
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
    pub(crate) fn wake_touched(&mut self) {
        for (core, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                let _ = self.wakers[core].wake();
            }
        }
    }
}
