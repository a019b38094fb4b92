//! A hand-off of items to each of a fixed set of consumers (one per core): any thread
//! [`Inbox::put`]s an item for consumer `k`, which [`Inbox::take`]s what it was given at the top
//! of a turn. With nothing given, a take is one `Acquire` load of the consumer's flag; the lock
//! is taken only when the flag says something was put. Nothing put is ever lost: the flag is
//! set after the item is in, and cleared before the items are taken (loom model:
//! `loom-tests/tests/inbox.rs`).
//!
//! Bound: none of its own; its users bound what they put (the logs a node adopts while it runs,
//! `dispatch::placement::ADOPTED_LOGS_MAX`).

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{CachePadded, Mutex};

/// Items waiting for their consumers (module docs).
#[derive(Debug)]
pub struct Inbox<T> {
    /// Each consumer's flag and items, on a cache line of its own: a consumer reads its flag
    /// every turn, and no other consumer's reads may move the line.
    slots: Vec<CachePadded<(AtomicBool, Mutex<Vec<T>>)>>,
}

impl<T> Inbox<T> {
    /// An inbox for `consumers` consumers.
    pub fn new(consumers: usize) -> Inbox<T> {
        Inbox {
            slots: (0..consumers)
                .map(|_| CachePadded::new((AtomicBool::new(false), Mutex::new(Vec::new()))))
                .collect(),
        }
    }

    /// Gives `item` to consumer `k` (the caller wakes it). Out of range: handed back.
    pub fn put(&self, k: usize, item: T) -> Result<(), T> {
        let Some(slot) = self.slots.get(k) else {
            return Err(item);
        };
        let (flag, items) = &**slot;
        items.lock().unwrap_or_else(|e| e.into_inner()).push(item);
        flag.store(true, Ordering::Release);
        Ok(())
    }

    /// What consumer `k` was given since it last took, in order; `None` when nothing.
    pub fn take(&self, k: usize) -> Option<Vec<T>> {
        let (flag, items) = &**self.slots.get(k)?;
        // Nothing given: one load, no write (the common case, every turn).
        if !flag.load(Ordering::Acquire) {
            return None;
        }
        // A compare-and-set rather than `swap(false)`: the same here, and loom 0.7 models this
        // one faithfully (its `swap` of an unchanged `false` was seen to hide a later `true`).
        let cleared = flag.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire);
        if cleared.is_err() {
            return None;
        }
        let taken = std::mem::take(&mut *items.lock().unwrap_or_else(|e| e.into_inner()));
        (!taken.is_empty()).then_some(taken)
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_consumer_takes_what_it_was_given_once_in_order() {
        let inbox = Inbox::new(2);
        assert_eq!(inbox.take(0), None);
        inbox.put(1, "a").unwrap();
        inbox.put(1, "b").unwrap();
        assert_eq!(inbox.take(0), None);
        assert_eq!(inbox.take(1), Some(vec!["a", "b"]));
        assert_eq!(inbox.take(1), None);
        assert_eq!(inbox.put(2, "c"), Err("c"), "no such consumer");
        assert_eq!(inbox.take(2), None);
    }
}
