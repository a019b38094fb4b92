//! The jobs a core's gates let go that wait for a dispatch slot: released ones (they gave
//! their slot back while held) and ones admitted without their trigger's cap
//! (`Job::capless`), FIFO per trigger. A job through the gates whose trigger has some waiting
//! goes behind them whatever it holds, so a key's events keep their order from the gates to
//! the destination's queue.
//!
//! Bound: the jobs of each trigger here are counted in `sluice_flow_held{gate="dispatch"}`
//! (the dispatcher moves the gauge), at whose `[flow] max_held` the pumps park the trigger's
//! events; plus, per trigger, one map entry.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};

use crate::dispatch::job::Job;
use crate::dispatch::trigger_caps::Short;

/// Jobs waiting for a slot, FIFO per trigger (module docs).
#[derive(Debug, Default)]
pub(super) struct SlotWait {
    jobs: VecDeque<Job>,
    /// Jobs in `jobs` by trigger id.
    by_trigger: HashMap<String, usize>,
}

impl SlotWait {
    pub(super) fn push(&mut self, job: Job) {
        *self
            .by_trigger
            .entry(job.event.trigger_id.clone())
            .or_default() += 1;
        self.jobs.push_back(job);
    }

    /// Whether jobs of trigger `id` wait.
    pub(super) fn has(&self, id: &str) -> bool {
        self.by_trigger.contains_key(id)
    }

    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Takes the jobs that get a slot, in order per trigger: `take` asks for one with the
    /// job's trigger slot (`slot_of`); a trigger at its cap keeps its later jobs here, and no
    /// job goes once the slots are exhausted. Returns each job taken with its trigger slot,
    /// and whether some were left at a cap.
    pub(super) fn take(
        &mut self,
        slot_of: impl Fn(&str) -> usize,
        mut take: impl FnMut(usize) -> Result<(), Short>,
    ) -> (Vec<(Job, usize)>, bool) {
        let mut taken = Vec::new();
        let mut capped: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < self.jobs.len() {
            let w = slot_of(&self.jobs[i].event.trigger_id);
            let took = match capped.contains(&w) {
                true => Err(Short::Capped),
                false => take(w),
            };
            match took {
                Ok(()) => {}
                Err(Short::Capped) => {
                    // At its trigger's cap: its later jobs wait too (order per trigger).
                    capped.push(w);
                    i += 1;
                    continue;
                }
                Err(Short::Exhausted) => break,
            }
            let Some(job) = self.jobs.remove(i) else {
                break;
            };
            let t = &job.event.trigger_id;
            if let Some(n) = self.by_trigger.get_mut(t) {
                *n -= 1;
                if *n == 0 {
                    self.by_trigger.remove(t);
                }
            }
            taken.push((job, w));
        }
        (taken, !capped.is_empty())
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;

    fn job(lsn: u64, trigger: &str) -> Job {
        let mut e = sample_event(lsn, 1);
        e.trigger_id = trigger.into();
        Job::new(lsn, e, 0, 1, 0)
    }

    #[test]
    fn fifo_per_trigger_a_capped_trigger_keeps_its_later_jobs() {
        let mut w = SlotWait::default();
        for (lsn, t) in [(1, "a"), (2, "b"), (3, "a"), (4, "b")] {
            w.push(job(lsn, t));
        }
        assert!(w.has("a") && w.has("b") && !w.has("c"));
        // "a" (slot 0) is at its cap; "b" (slot 1) gets one slot, then they are exhausted.
        let mut free = 1;
        let (taken, capped) = w.take(
            |t| usize::from(t == "b"),
            |s| match (s, free) {
                (0, _) => Err(Short::Capped),
                (_, 0) => Err(Short::Exhausted),
                _ => {
                    free -= 1;
                    Ok(())
                }
            },
        );
        let lsns: Vec<u64> = taken.iter().map(|(j, _)| j.lsn).collect();
        assert_eq!((lsns, capped), (vec![2], true));
        assert_eq!(w.len(), 3);
        let (taken, capped) = w.take(|_| 0, |_| Ok(()));
        let lsns: Vec<u64> = taken.iter().map(|(j, _)| j.lsn).collect();
        assert_eq!((lsns, capped), (vec![1, 3, 4], false), "in order");
        assert!(!w.has("a") && !w.has("b") && w.len() == 0);
    }
}
