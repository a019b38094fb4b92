//! The links between cores, as one core holds them ([`CoreLinks`]), wired once at start-up by
//! the runtime ([`CoreLinks::wire`]): dispatch's rings (what goes over them, each turn, is
//! `dispatch::exchange`'s), every core's waker, and the drain's count of quiet cores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mio::{Token, Waker};

use crate::dispatch::exchange::Exchange;
pub use crate::dispatch::placement::LogOwners;

/// The poll token of the core's waker (commit helper, other cores, shutdown).
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

/// A core's links to the other cores: dispatch's rings (`dispatch::exchange`), every core's
/// waker, and the drain's count of quiet cores.
#[derive(Debug)]
pub struct CoreLinks {
    pub core: usize,
    /// Jobs and outcomes to and from the other cores.
    pub exchange: Exchange,
    /// Every core's waker, by core.
    pub wakers: Vec<Arc<Waker>>,
    /// Cores that reported themselves quiet during the drain.
    pub quiet: Arc<AtomicUsize>,
}

impl CoreLinks {
    /// Wires `cores` cores: returns each core's links. `wakers[k]` wakes core `k`'s poll;
    /// `owners` names the core whose pump reads each log.
    pub fn wire(
        cores: usize,
        max_outstanding: usize,
        wakers: Vec<Arc<Waker>>,
        owners: LogOwners,
    ) -> Vec<CoreLinks> {
        let quiet = Arc::new(AtomicUsize::new(0));
        let exchanges = Exchange::wire(cores, max_outstanding, &wakers, owners);
        (exchanges.into_iter().enumerate())
            .map(|(core, exchange)| CoreLinks {
                core,
                exchange,
                wakers: wakers.clone(),
                quiet: quiet.clone(),
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
}
