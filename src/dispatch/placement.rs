//! Which core owns what dispatch keeps per core, so that it needs no synchronisation:
//!
//! - a destination ([`owner_core`]): a stable hash of `kind:uri` modulo the worker count, so a
//!   destination's permits, circuit, rate budget and retry timers live on exactly one core; the
//!   pump sends each job to its destination's core;
//! - a log ([`LogOwners`]): the core whose pump reads it, to which every outcome of an event in
//!   it goes back (the log is the top bits of the event's key).

use crate::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::dispatch::job::JobOutcome;
use crate::wal::key::split_key;

/// The core that owns each log, by log index: a core's own log and the logs it adopted at
/// start-up, then room for [`ADOPTED_LOGS_MAX`] logs adopted while the node runs
/// (`replication`: another node's logs, rebuilt from the stream), each set once before any
/// event of it is admitted.
#[derive(Clone, Debug)]
pub struct LogOwners(Arc<[AtomicUsize]>);

/// The most logs a node adopts while it runs (a bound on the owners' table; a further log is
/// refused with a log line and stays in the stream for a restart or another node).
pub const ADOPTED_LOGS_MAX: usize = 256;

impl LogOwners {
    /// `owners[log]`: the core whose pump reads log `log`, with room for [`ADOPTED_LOGS_MAX`]
    /// more.
    pub fn new(owners: &[usize]) -> Self {
        let table = (owners.iter().copied())
            .chain(std::iter::repeat(0).take(ADOPTED_LOGS_MAX))
            .map(AtomicUsize::new)
            .collect();
        LogOwners(table)
    }

    /// How many logs the table has room for.
    pub fn capacity(&self) -> usize {
        self.0.len()
    }

    /// Log `log` (adopted while the node runs) is core `core`'s. Release: it is set before the
    /// log is handed to its core, so before any job of it exists (the rings order the rest).
    pub fn set(&self, log: usize, core: usize) {
        self.0[log].store(core, Ordering::Release);
    }

    /// The core whose pump settles `outcome`: the owner of its event's log.
    pub fn of_outcome(&self, outcome: &JobOutcome) -> usize {
        self.of_log(split_key(outcome.lsn()).0)
    }

    /// The core whose pump reads log `log`.
    pub fn of_log(&self, log: usize) -> usize {
        self.0[log].load(Ordering::Acquire)
    }
}

/// FNV-1a over `http:` + `uri`, modulo `cores` (≥ 1).
pub fn owner_core(uri: &str, cores: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"http:".iter().chain(uri.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % cores.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        let a = owner_core("http://127.0.0.1:9000/hook", 2);
        assert_eq!(a, owner_core("http://127.0.0.1:9000/hook", 2));
        assert!(a < 2);
        assert_eq!(owner_core("x", 1), 0);
        assert_eq!(owner_core("x", 0), 0);
        let spread: std::collections::HashSet<usize> = (0..64)
            .map(|i| owner_core(&format!("http://h{i}/"), 4))
            .collect();
        assert_eq!(spread.len(), 4);
    }
}
