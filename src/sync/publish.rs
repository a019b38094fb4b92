//! A value published to every core, picked up at the top of a loop turn: one mutex-guarded
//! `Arc` plus an atomic generation number (`ops::reload` publishes configuration generations
//! with it).
//!
//! **Protocol.** [`Publisher::publish`] swaps the `Arc` under the lock, then stores the new
//! number with `Release`. A core's [`Subscription::pick_up`] loads the number with `Acquire` at
//! the top of every turn — one uncontended load, no lock — and takes the lock only when the
//! number differs from the generation it holds. Publications are serialized by the lock, so the
//! numbers are 1, 2, 3, … in publication order; the value a subscriber finds under the lock is
//! the latest, hence numbered at least as high as the number it loaded. A subscriber never
//! goes back to an older generation, and once the publishing thread's store is visible, the next
//! `pick_up` returns the new value. Readers between two turns keep using the `Arc` they hold, so
//! a core never sees a mix of two generations. Modelled by `loom-tests/tests/publish.rs`.
//!
//! Bound: one value per generation alive at a time per holder (the published one, plus the one
//! a core still holds until its next turn).

use super::atomic::{AtomicU64, Ordering};
use super::Arc;
#[cfg(sluice_loom)]
use loom::sync::Mutex;
#[cfg(not(sluice_loom))]
use std::sync::Mutex;

/// A published value and its generation number (1 for the first).
#[derive(Debug)]
pub struct Versioned<T> {
    pub number: u64,
    pub value: T,
}

/// The publishing side (one per process).
#[derive(Debug)]
pub struct Publisher<T> {
    // Stored (Release) by `publish` after `current` holds the value with this number; loaded
    // (Acquire) by `pick_up`, pairing with that store.
    number: AtomicU64,
    current: Mutex<Arc<Versioned<T>>>,
}

impl<T> Publisher<T> {
    /// Generation 1: `value`.
    pub fn new(value: T) -> Publisher<T> {
        Publisher {
            number: AtomicU64::new(1),
            current: Mutex::new(Arc::new(Versioned { number: 1, value })),
        }
    }

    /// The latest published number.
    pub fn number(&self) -> u64 {
        self.number.load(Ordering::Acquire)
    }

    /// The latest published value.
    pub fn current(&self) -> Arc<Versioned<T>> {
        Arc::clone(&self.current.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Publishes `value` as the next generation; returns its number.
    pub fn publish(&self, value: T) -> u64 {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let number = current.number + 1;
        *current = Arc::new(Versioned { number, value });
        // Under the lock, so numbers are stored in publication order.
        self.number.store(number, Ordering::Release);
        number
    }
}

/// A core's side: the generation it runs.
#[derive(Debug)]
pub struct Subscription<T> {
    held: Arc<Versioned<T>>,
}

impl<T> Subscription<T> {
    pub fn new(publisher: &Publisher<T>) -> Subscription<T> {
        Subscription {
            held: publisher.current(),
        }
    }

    /// The newer generation, if one was published since the last call (this subscription then
    /// holds it).
    #[inline]
    pub fn pick_up(&mut self, publisher: &Publisher<T>) -> Option<Arc<Versioned<T>>> {
        if publisher.number() == self.held.number {
            return None;
        }
        let next = publisher.current();
        self.held = Arc::clone(&next);
        Some(next)
    }

    /// The generation held.
    pub fn held(&self) -> &Versioned<T> {
        &self.held
    }
}
