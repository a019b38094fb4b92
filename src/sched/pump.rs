//! Where the pump's shell (`dispatch::pump::shell`, which the core's loop drives) meets the
//! run's shared state: its parts assembled from [`Shared`] at start-up ([`build`]), and ingest's
//! backlog as the durable queue the pump gives room back to ([`DurableQueue`] for [`Backlog`]).
//! Nothing here handles an event.
#![forbid(unsafe_code)]

use std::sync::Arc;

pub use crate::dispatch::outstanding::Outstanding;
pub use crate::dispatch::pump::shell::CorePump;
use crate::dispatch::pump::shell::{DurableQueue, PumpParts};
pub use crate::dispatch::pump::PumpLog;
use crate::dispatch::pump::Routes;
use crate::ingest::backlog::Backlog;
use crate::sched::state::Shared;
use crate::wal::WalError;

/// The pump of core `core` over `logs`, with its parts from `shared`; `now` is a reading of
/// `shared.clock` (nanos).
pub fn build(
    core: usize,
    shared: Arc<Shared>,
    logs: Vec<PumpLog>,
    outstanding: Arc<Outstanding>,
    wakers: Vec<Arc<mio::Waker>>,
    now: u64,
) -> Result<CorePump, WalError> {
    let spec = shared.config.dispatch_spec();
    let dispatch = shared.dispatch();
    let parts = PumpParts {
        clock: shared.clock.clone(),
        queue: dispatch.backlog.clone(),
        metrics: dispatch.metrics.clone(),
        caps: dispatch.caps.clone(),
        wal: shared.wal().to_vec(),
        retention: shared.config.dispatch.retention,
        routes: Routes::from_spec(&spec, crate::ingest::router::DEFAULT_TRIGGER_ID),
    };
    CorePump::new(core, parts, logs, outstanding, wakers, now)
}

impl DurableQueue for Backlog {
    fn trigger_slot(&self, trigger: &str) -> usize {
        self.slot(trigger)
    }
    fn recovered_slot(&self) -> usize {
        Backlog::recovered_slot(self)
    }
    fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        Backlog::release_done(self, slot, events, bytes)
    }
    fn note_drained(&self, events: u64) {
        Backlog::note_drained(self, events)
    }
    fn update_drain_rate(&self, elapsed_secs: f64) {
        Backlog::update_drain_rate(self, elapsed_secs)
    }
    fn adjust_wal_bytes(&self, old: u64, new: u64) {
        Backlog::adjust_wal_bytes(self, old, new)
    }
}
