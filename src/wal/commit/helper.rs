//! The commit helper thread: between batches it ticks its logs (checkpoint, retention, the probe
//! of a failed disk) and lets its [`Mirror`] announce what retired; given a batch, it commits it
//! (`wal::group::process`), lets the [`Mirror`] frame it, and hands it back to the loop with
//! one wake (or one unpark of a loop parked on it, `sync::handback`).
#![forbid(unsafe_code)]

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};

use super::parts::{AdoptedOf, BatchOf, Mirror, Parts};
use crate::ring;
use crate::sync::handback::Handback;
use crate::wal::append::group::{process, Log};
use crate::wal::AppendOutcome;

/// How long the helper sleeps with nothing to do if nobody unparks it (it then ticks its logs —
/// checkpoint, retention, probe — and checks whether the loop has closed the ring).
const IDLE_PARK: Duration = Duration::from_millis(100);

/// The helper thread's state.
pub(super) struct Helper<P: Parts> {
    /// The slot of `logs[0]` (1 when the loop commits slot 0 on its ring).
    pub first_slot: usize,
    pub logs: Vec<Log>,
    pub dead: Arc<P::Dead>,
    pub rx: ring::Receiver<BatchOf<P>>,
    pub tx: ring::Sender<BatchOf<P>>,
    pub parker: Parker,
    pub wake: Arc<dyn Fn() + Send + Sync>,
    /// The loop's parker, for a hand-back while it waits in `Committer::wait_done`.
    pub loop_unparker: Unparker,
    pub handback: Arc<Handback>,
    pub outcomes: Vec<AppendOutcome>,
    pub mirror: P::Mirror,
    /// Logs adopted from another node (`Committer::adopt`): at most `ADOPTED_LOGS_MAX`
    /// (`dispatch::placement`) over the run.
    pub adopted: mpsc::Receiver<(Log, Option<AdoptedOf<P>>)>,
}

impl<P: Parts> Helper<P> {
    /// The logs the loop adopted, each at the next slot (`Committer::adopt`).
    fn take_adopted(&mut self) {
        while let Ok((log, link)) = self.adopted.try_recv() {
            self.logs.push(log);
            if let Some(link) = link {
                let slot = self.first_slot + self.logs.len() - 1;
                self.mirror.adopt(slot, link);
            }
        }
    }

    pub(super) fn run(mut self) {
        P::helper_started();
        loop {
            self.take_adopted();
            for log in &mut self.logs {
                // Checkpoint (at least once a second while written), retention requests, and a
                // probe of a failed disk so health returns without a request (`Wal::tick`).
                let now = log.wal.now_nanos();
                log.wal.tick(now);
            }
            self.mirror.between(&self.logs);
            if let Some(batch) = self.rx.try_pop() {
                self.serve(batch);
                continue;
            }
            // Closed is checked before the last pop: a batch pushed before the close is seen.
            if self.rx.is_closed() {
                if let Some(batch) = self.rx.try_pop() {
                    self.serve(batch);
                }
                break;
            }
            self.parker.park_timeout(IDLE_PARK);
        }
        for log in &mut self.logs {
            // `Os` durability: the last writes reach the disk at a clean stop.
            if let Err(e) = log.wal.sync() {
                eprintln!("sluice: final sync of {}: {e}", log.wal.dir().display());
            }
        }
    }

    /// One batch: its commit (`wal::group::process`: one group commit per log it touches, then
    /// its dead letters), its mirror, then back to the loop with one wake (or one unpark of a
    /// parked loop).
    pub(super) fn serve(&mut self, mut batch: BatchOf<P>) {
        self.take_adopted();
        let (logs, first) = (&mut self.logs[..], self.first_slot);
        process(logs, first, &mut batch, &*self.dead, &mut self.outcomes);
        self.mirror.committed(&self.logs, first, &mut batch);
        if self.tx.try_push(batch).is_err() {
            eprintln!("sluice: commit helper: the loop's ring is closed; batch dropped");
        }
        if self.handback.loop_parked() {
            self.loop_unparker.unpark();
        } else {
            (self.wake)();
        }
    }
}
