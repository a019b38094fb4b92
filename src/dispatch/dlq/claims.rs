//! The dead letters on their way back: one set shared by every core, so that no two replays
//! (bulk or single, on one core or on several) hand one DLQ entry to the WAL twice.
//!
//! # Protocol
//!
//! A replay *claims* an entry id ([`ReplayClaims::claim`]) before it reads the entry, and holds
//! the [`ReplayClaim`] until the entry's event is durable and the entry has been removed from the
//! DLQ, or until the append failed (the entry stays, for a later call). The claim is released
//! when the guard drops, so the order "remove the entry, then drop the claim" is the only one a
//! holder can write. A second replay of the id either fails to claim (the first is on its way),
//! or claims after the release and then finds the entry gone ([`crate::dispatch::dlq::DlqError::NotFound`]):
//! the pair that matters is the release (a `Mutex` unlock, after the removal) and the next
//! claim (the lock that follows it), modelled in `loom-tests/tests/replay_claims.rs`.
//!
//! # Bound
//!
//! At most `max` ids are held (the store's `max_dlq_entries`: every claimed id names a live
//! entry, save for the moment between a claim and the read that finds it gone); past it a claim
//! is refused [`ClaimRefused::Full`] and the replay waits for a later call, as when the backlog
//! has no room. The size is published as `sluice_dlq_replays_in_flight`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64 as MetricU64, Ordering as MetricOrdering};

use crate::sync::{Arc, Mutex};

/// The shared set (module docs): a handle; clones share one set.
#[derive(Debug, Clone)]
pub struct ReplayClaims {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ids: Mutex<HashSet<String>>,
    max: usize,
    /// `sluice_dlq_replays_in_flight`: written under the lock, read by scrapes (`Relaxed`: a
    /// gauge, it orders nothing).
    gauge: std::sync::Arc<MetricU64>,
}

/// Why an id could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRefused {
    /// Another replay holds it: the entry is on its way.
    InFlight,
    /// `max` ids are held.
    Full,
}

/// A held claim; dropping it releases the id (module docs: drop it after removing the entry).
#[derive(Debug)]
pub struct ReplayClaim {
    set: ReplayClaims,
    id: String,
}

impl ReplayClaims {
    /// A set of at most `max` ids whose size is published through `gauge`.
    pub fn new(max: usize, gauge: std::sync::Arc<MetricU64>) -> ReplayClaims {
        ReplayClaims {
            inner: Arc::new(Inner {
                ids: Mutex::new(HashSet::new()),
                max,
                gauge,
            }),
        }
    }

    /// Claims `id` for one replay.
    pub fn claim(&self, id: &str) -> Result<ReplayClaim, ClaimRefused> {
        let mut ids = self.lock();
        if ids.contains(id) {
            return Err(ClaimRefused::InFlight);
        }
        if ids.len() >= self.inner.max {
            return Err(ClaimRefused::Full);
        }
        ids.insert(id.to_owned());
        self.inner
            .gauge
            .store(ids.len() as u64, MetricOrdering::Relaxed);
        Ok(ReplayClaim {
            set: self.clone(),
            id: id.to_owned(),
        })
    }

    /// Whether a replay holds `id` (a listing skips those: they are on their way).
    pub fn is_claimed(&self, id: &str) -> bool {
        self.lock().contains(id)
    }

    /// Ids held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The set; a poisoned lock (a panic while held) still holds a consistent set: every
    /// critical section is one insert or one remove.
    fn lock(&self) -> crate::sync::MutexGuard<'_, HashSet<String>> {
        self.inner.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn release(&self, id: &str) {
        let mut ids = self.lock();
        ids.remove(id);
        self.inner
            .gauge
            .store(ids.len() as u64, MetricOrdering::Relaxed);
    }
}

impl ReplayClaim {
    /// The claimed entry id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for ReplayClaim {
    fn drop(&mut self) {
        self.set.release(&self.id);
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    fn set(max: usize) -> (ReplayClaims, std::sync::Arc<MetricU64>) {
        let gauge = std::sync::Arc::new(MetricU64::new(0));
        (ReplayClaims::new(max, gauge.clone()), gauge)
    }

    #[test]
    fn one_claim_per_id_until_dropped() {
        let (s, gauge) = set(10);
        let a = s.claim("A").unwrap();
        assert_eq!(s.claim("A").unwrap_err(), ClaimRefused::InFlight);
        let b = s.claim("B").unwrap();
        assert!(s.is_claimed("A") && s.is_claimed("B") && !s.is_claimed("C"));
        assert_eq!((s.len(), gauge.load(MetricOrdering::Relaxed)), (2, 2));
        drop(a);
        assert!(!s.is_claimed("A"));
        let again = s.claim("A").unwrap();
        assert_eq!(again.id(), "A");
        drop((again, b));
        assert!(s.is_empty());
        assert_eq!(gauge.load(MetricOrdering::Relaxed), 0);
    }

    #[test]
    fn the_bound_refuses_past_max() {
        let (s, _) = set(2);
        let _a = s.claim("A").unwrap();
        let b = s.claim("B").unwrap();
        assert_eq!(s.claim("C").unwrap_err(), ClaimRefused::Full);
        // A held id is in flight, whatever the bound.
        assert_eq!(s.claim("A").unwrap_err(), ClaimRefused::InFlight);
        drop(b);
        assert!(s.claim("C").is_ok());
    }
}
