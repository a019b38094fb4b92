//! The hand-off between a shared destination's owner core and the node's Redis client thread.
//!
//! One [`Slot`] per shared destination, bounded by construction: it holds the latest
//! [`Desire`] (owner core → thread; a newer one overwrites an older one) and the latest
//! [`Grant`], rate [`Tokens`] and [`Health`] (thread → owner core; likewise). Nothing queues,
//! so nothing can grow: a fast writer only coalesces. Both sides take the mutex for a few
//! field copies, never across I/O. The thread raises `fresh` after storing a reply and wakes the
//! owner core's loop (`mio::Waker`); the owner takes `fresh` back once per loop turn and reads
//! the slot only when it was set, so a turn with nothing new costs one atomic load.
//!
//! The mutex and `fresh` come from [`crate::sync`] so that the loom model
//! (`loom-tests/tests/slot.rs`) checks this hand-off; the metrics bypass the shim.
//!
//! Ordering: `fresh` is stored `Release` after the mutex is released and taken back (load, then
//! compare-exchange `AcqRel`) by the owner before it locks; the mutex itself orders the data,
//! `fresh` only says "look". A take
//! that misses a store made right after it is caught on the next turn, which the thread's waker
//! call guarantees (the wake follows the store).

use std::sync::atomic::AtomicU64;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Mutex;

/// What the owner core asks for. Written by the owner core, read by the client thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Desire {
    /// Permits this node would like to hold: in flight plus a small batch of queued events.
    pub want: u32,
    /// The most permits the node may use before it reads another grant (≥ its calls in
    /// flight): the least Redis may count for it.
    pub ceiling: u32,
    /// Rate tokens wanted (asked only when the local ones are used up).
    pub rate_need: u32,
    /// Bumped with each new rate request; the thread serves each generation once.
    pub rate_gen: u64,
}

/// The latest permit lease. Written by the client thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grant {
    /// Increases with each successful sync (0 = none yet).
    pub seq: u64,
    /// Permits to move towards (may be below the current ones: drain to it).
    pub target: u32,
    /// The node may start calls under this lease until this instant (clock nanos).
    pub valid_until: u64,
    /// Permits counted in Redis for every node together, this one included.
    pub cluster_in_use: u32,
}

/// A batch of rate tokens reserved in the shared GCRA. Written by the client thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The request generation this answers.
    pub gen: u64,
    /// Token `k` (0-based) may be used from `first_at + k·interval` (clock nanos) …
    pub first_at: u64,
    pub interval: u64,
    /// … for `horizon` nanoseconds, after which it is dropped unused.
    pub horizon: u64,
    /// Tokens granted; 0 = none before `first_at` (ask again then).
    pub count: u32,
}

/// Whether Redis answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Health {
    /// No answer yet since start.
    #[default]
    Unknown,
    Up,
    /// The last attempt failed; the text says how (for `/readyz`'s log line and errors).
    Down(String),
}

#[derive(Debug, Default)]
struct Inner {
    desire: Desire,
    grant: Grant,
    tokens: Option<Tokens>,
    health: Health,
}

/// Counters and gauges of one shared destination. Metrics bypass synchronisation: each is its
/// own value, `Relaxed` everywhere.
#[derive(Debug, Default)]
pub struct SlotMetrics {
    /// Syncs that raised this node's count in Redis.
    pub acquisitions: AtomicU64,
    /// Successful syncs of any kind (renewals included).
    pub renewals: AtomicU64,
    /// Syncs or rate requests that failed (Redis unreachable, an error reply).
    pub failures: AtomicU64,
    /// Time the owner core had events queued that the shared budget held back (nanos).
    pub wait_nanos: AtomicU64,
    /// This node's count in Redis after the last sync.
    pub held: AtomicU64,
    /// Every node's count in Redis after the last sync.
    pub cluster_in_use: AtomicU64,
    /// Rate tokens reserved in the shared GCRA.
    pub rate_tokens: AtomicU64,
    /// 1 while the last attempt reached Redis.
    pub up: AtomicU64,
}

/// One shared destination's hand-off.
#[derive(Debug)]
pub struct Slot {
    /// The destination index (`config.destinations[dest]`).
    pub dest: usize,
    inner: Mutex<Inner>,
    /// Set (`Release`) by the thread after it stored something; taken back by the owner core.
    fresh: AtomicBool,
    pub metrics: SlotMetrics,
}

impl Slot {
    fn lock(&self) -> crate::sync::MutexGuard<'_, Inner> {
        // A poisoned lock means the other side panicked while copying plain fields: the values
        // are still whole, so they are used as they are.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn new(dest: usize) -> Slot {
        Slot {
            dest,
            inner: Mutex::new(Inner::default()),
            fresh: AtomicBool::new(false),
            metrics: SlotMetrics::default(),
        }
    }

    // ----- owner core ------------------------------------------------------------------------

    /// Publishes the owner's latest desire (overwrites the previous one).
    pub fn publish(&self, d: Desire) {
        self.lock().desire = d;
    }

    /// Whether the thread stored something since the last call.
    pub fn take_fresh(&self) -> bool {
        // Both pair with the `Release` store in `mark_fresh`. The load keeps a turn with nothing
        // new from writing the line; a compare-exchange rather than a swap because loom
        // mis-models a swap racing a store (tokio-rs/loom#254), which would blind the model.
        self.fresh.load(Ordering::Acquire)
            && self
                .fresh
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The latest grant, rate tokens (taken: each batch is read once) and health.
    pub fn read(&self) -> (Grant, Option<Tokens>, Health) {
        let mut g = self.lock();
        (g.grant, g.tokens.take(), g.health.clone())
    }

    // ----- client thread ---------------------------------------------------------------------

    pub fn desire(&self) -> Desire {
        self.lock().desire
    }

    pub fn store_grant(&self, grant: Grant) {
        let mut g = self.lock();
        g.grant = grant;
        g.health = Health::Up;
    }

    pub fn store_tokens(&self, t: Tokens) {
        self.lock().tokens = Some(t);
    }

    pub fn store_health(&self, h: Health) {
        let up = h == Health::Up;
        self.lock().health = h;
        self.metrics.up.store(up as u64, Ordering::Relaxed);
    }

    pub fn health(&self) -> Health {
        self.lock().health.clone()
    }

    /// Tells the owner core to look (then wake its loop).
    pub fn mark_fresh(&self) {
        // Pairs with the `Acquire` load and `AcqRel` compare-exchange in `take_fresh`.
        self.fresh.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_value_wins_and_tokens_are_read_once() {
        let s = Slot::new(3);
        s.publish(Desire {
            want: 1,
            ..Desire::default()
        });
        s.publish(Desire {
            want: 4,
            ceiling: 2,
            ..Desire::default()
        });
        assert_eq!(s.desire().want, 4);
        assert!(!s.take_fresh());
        s.store_grant(Grant {
            seq: 1,
            target: 2,
            valid_until: 10,
            cluster_in_use: 5,
        });
        s.store_tokens(Tokens {
            gen: 1,
            count: 3,
            ..Tokens::default()
        });
        s.mark_fresh();
        assert!(s.take_fresh());
        assert!(!s.take_fresh());
        let (g, t, h) = s.read();
        assert_eq!((g.seq, g.target, h), (1, 2, Health::Up));
        assert_eq!(t.map(|t| t.count), Some(3));
        assert_eq!(s.read().1, None, "a token batch is read once");
    }
}
