//! Bounded lock-free MPSC ring: Dmitry Vyukov's bounded MPMC queue with per-slot sequence
//! stamps (as in crossbeam's `ArrayQueue`), simplified for a single consumer, with the
//! "closed" flag kept as a mark bit in the tail word (as tokio's semaphore keeps
//! `permits << 1 | CLOSED`).
//!
//! # Positions, stamps and the tail word
//!
//! Every push claims a *position*: the number of pushes claimed before it. Positions are stored
//! shifted left by one (`pos << 1`, so one step is `ONE` `= 2`) in the tail word, the head word
//! and every slot stamp, so all three share one encoding and compare with wrapping arithmetic.
//! Position `p` lives in slot `(p >> 1) & mask`. Bit 0 of a stamp is `READY` ("holds a
//! value"). For the slot of position `p` (`p` is even: its bit 0 is clear):
//!
//! | stamp         | meaning                                                     | next writer |
//! |---------------|-------------------------------------------------------------|-------------|
//! | `p`           | free: the push at position `p` may claim it                 | producer    |
//! | `p + READY`   | holds the value pushed at `p`; ready to pop                 | consumer    |
//! | `p + lap`     | popped; free for the push one lap later (`lap = cap * ONE`) | producer    |
//!
//! Using bit 0 for "ready" (rather than Vyukov's `p + 1` in unshifted units) keeps the three
//! states distinct even for capacity 1, where `lap == ONE`. A producer at position `t` that reads
//! a stamp *below* `t` finds the value of the previous lap (`t - lap + READY`) still there: the
//! ring is full. Stamps only grow, so a stale read can only make a producer retry or
//! report `Full` at a moment when the ring really was full.
//!
//! # Progress
//!
//! `try_push` is lock-free (a failed CAS means another producer claimed a position) and never
//! waits. `try_pop` is wait-free and never waits either: a producer preempted between claiming a
//! position and writing its value makes `try_pop` return `None` until it resumes (`len()` counts
//! that slot already). This is inherent to the algorithm, and is why the exact "drained" test is
//! `is_closed() && is_empty()` rather than `try_pop() == None`.

use std::fmt;
use std::mem::MaybeUninit;

use super::error::PushError;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::cell::UnsafeCell;
use crate::sync::{Arc, CachePadded};

/// Bit 0 of the tail word: set once by `close`, never cleared.
const CLOSED: usize = 1;
/// One position step in the shifted encoding (bit 0 is the mark bit; always 0 in `head`).
const ONE: usize = 2;
/// Bit 0 of a slot stamp: the slot holds the value pushed at position `stamp & !READY`.
const READY: usize = 1;
/// Largest capacity accepted: keeps `lap` far below `isize::MAX` so that wrapping differences
/// between a stamp and a position are always read with the right sign.
const MAX_CAPACITY: usize = 1 << (usize::BITS - 4);

/// Creates a bounded MPSC ring holding at least `capacity` items.
///
/// The capacity is rounded up to the next power of two, and 0 is treated as 1, so
/// [`Sender::capacity`] may report more than was asked for (never less).
///
/// # Panics
///
/// If `capacity` exceeds `2^(usize::BITS - 4)` (the allocation could not succeed anyway).
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        capacity <= MAX_CAPACITY,
        "ring capacity {capacity} exceeds the maximum {MAX_CAPACITY}"
    );
    let cap = capacity.max(1).next_power_of_two();
    let shared = Arc::new(Shared::new(cap));
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// One cell of the ring: a stamp that says whose turn it is, and the value.
struct Slot<T> {
    /// Written by the producer that claimed this slot (`pos + READY`, Release, after writing the
    /// value) and by the consumer (`pos + lap`, Release, after reading the value out).
    /// Read with Acquire by both: a producer's load pairs with the consumer's store (the old value
    /// has been moved out before it is overwritten); the consumer's load pairs with the
    /// producer's store (the value is fully written before it is read).
    stamp: AtomicUsize,
    /// Written only by the producer whose claim matches the stamp, read only by the consumer;
    /// the stamp protocol above orders the two.
    value: UnsafeCell<MaybeUninit<T>>,
}

/// The state shared by all handles.
///
/// `repr(C)` keeps the declared order: the consumer's line (`head`), the producers' line
/// (`tail`), then the read-mostly fields, each group on its own cache line(s) so that a write by
/// one side does not invalidate the lines the other side reads (checked by the
/// `layout_groups_writers_on_separate_cache_lines` test). `senders` sits with the read-mostly
/// group: it is written only when a `Sender` is cloned or dropped, never per item.
#[repr(C)]
struct Shared<T> {
    /// Written by the consumer only (`try_pop`); shifted position of the next pop.
    /// The consumer reads its own writes (Relaxed). Producers read it only for `len()` (Relaxed:
    /// a snapshot that orders no data). No correctness decision depends on it: slot ownership is
    /// decided by the stamps, so the store in `try_pop` is Relaxed.
    head: CachePadded<AtomicUsize>,
    /// Written by producers (CAS in `try_push`) and by `close` (fetch_or).
    ///
    /// Bit layout: bit 0 = [`CLOSED`]; bits 1.. = the next position to claim, shifted by one
    /// (`pos << 1`), wrapping at `2^(usize::BITS - 1)` positions. Once `CLOSED` is set, the CAS in
    /// `try_push` (which expects the bit clear) always fails, so the position is frozen: it is the
    /// exact number of pushes that ever succeeded.
    ///
    /// All accesses are Relaxed: the tail publishes no data (values are published by the slot
    /// stamps). What it provides (a unique claimant per position; one total order between every
    /// claim and the close) comes from read-modify-write atomicity on a single location, which
    /// holds at any ordering.
    tail: CachePadded<AtomicUsize>,
    /// Live `Sender` handles. Written on clone/drop of a `Sender` (Relaxed, like `Arc`'s
    /// increment: only the RMW's atomicity matters, to find the last one; the resulting `close`
    /// orders no data).
    senders: AtomicUsize,
    /// `capacity * ONE`: how far a stamp moves for one lap. Read-only after construction.
    lap: usize,
    /// `capacity - 1`. Read-only after construction.
    mask: usize,
    /// The slots; slot `i` starts with stamp `i * ONE`. Pointer is read-only after construction.
    buffer: Box<[Slot<T>]>,
}

// SAFETY: the values are only moved in and out through the stamp protocol: a value is written by
// exactly one producer (the one whose CAS claimed its position) and read by the single consumer
// after it, each hand-off ordered by a Release store / Acquire load of the slot stamp. So sharing
// `Shared<T>` between threads only ever moves `T`s between threads, which `T: Send` allows; no
// `&T` is ever shared, so `T: Sync` is not needed. (`Send` is derived automatically.)
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        let buffer = (0..cap)
            .map(|i| Slot {
                stamp: AtomicUsize::new(i * ONE),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Shared {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            senders: AtomicUsize::new(1),
            lap: cap * ONE,
            mask: cap - 1,
            buffer,
        }
    }

    #[inline]
    fn slot(&self, pos: usize) -> &Slot<T> {
        &self.buffer[(pos >> 1) & self.mask]
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Items claimed and not yet popped (including claimed slots still being written), as a
    /// snapshot. Relaxed loads: nothing is read through them.
    ///
    /// For the consumer the result is exact: its own `head` is current, and its tail load sees at
    /// least every position it has popped (it acquired their stamps, released after the claiming
    /// CAS). For a producer the two loads are unsynchronised with the consumer: a head newer than
    /// the tail read would give a negative difference (clamped to 0) and an older head one above
    /// the capacity (clamped to the capacity).
    fn len(&self) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed) & !CLOSED;
        let diff = tail.wrapping_sub(head) as isize;
        if diff <= 0 {
            0
        } else {
            (diff as usize / ONE).min(self.capacity())
        }
    }

    fn is_closed(&self) -> bool {
        self.tail.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Sets the mark bit. Relaxed: see the `tail` field. Any `try_push` whose tail load comes
    /// after this in happens-before order sees the bit (read-read/write-read coherence); a
    /// concurrent one either claimed its position before the bit (and its value will be popped)
    /// or fails its CAS and re-reads the bit.
    fn close(&self) {
        self.tail.fetch_or(CLOSED, Ordering::Relaxed);
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Relaxed loads: we are the last owner; the `Arc` drop that got us here (Release
        // decrement by every other handle, Acquire by the last) orders every earlier access of
        // every thread before this point, and every claimed slot was written before its claimant
        // dropped its handle.
        let tail = self.tail.load(Ordering::Relaxed) & !CLOSED;
        let mut pos = self.head.load(Ordering::Relaxed);
        while pos != tail {
            let slot = self.slot(pos);
            debug_assert_eq!(slot.stamp.load(Ordering::Relaxed), pos | READY);
            // SAFETY: positions head..tail were claimed and (see above) written, and not popped,
            // so each slot holds an initialised `T` that nobody else can reach any more.
            slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            pos = pos.wrapping_add(ONE);
        }
    }
}

/// The producing side of a ring. Cheap to clone; each clone may push from its own thread.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The consuming side of a ring. There is exactly one: it is not `Clone`, and popping takes
/// `&mut self`. `Sync` is harmless since `&Receiver` only reads counters or closes.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // Relaxed: see the `senders` field.
        if self.shared.senders.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.shared.close();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl<T: Send> Sender<T> {
    /// Pushes `value` unless the ring is full or closed; never waits.
    ///
    /// On refusal the value comes back in the error: [`PushError::Closed`] takes precedence when
    /// the ring was closed before the push started (in happens-before order).
    pub fn try_push(&self, value: T) -> Result<(), PushError<T>> {
        let shared = &*self.shared;
        // Relaxed: the tail word only orders claims among producers (see the field docs).
        let mut tail = shared.tail.load(Ordering::Relaxed);
        loop {
            if tail & CLOSED != 0 {
                return Err(PushError::Closed(value));
            }
            let slot = shared.slot(tail);
            // Acquire: pairs with the consumer's Release store of `pos + lap` in `try_pop`, so
            // the previous lap's value has been moved out before we overwrite it.
            let stamp = slot.stamp.load(Ordering::Acquire);
            let diff = stamp.wrapping_sub(tail) as isize;
            if diff == 0 {
                // The slot is free for position `tail`; claim it. Relaxed on both outcomes: the
                // RMW alone makes the claim unique, and the Acquire above already orders the
                // write below after the previous lap's read.
                match shared.tail.compare_exchange_weak(
                    tail,
                    tail.wrapping_add(ONE),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // Our CAS alone moved the tail from `tail`: we own this slot until we bump
                        // its stamp; the consumer waits for `tail + READY`; stamp == tail means the
                        // last lap's value was moved out (Acquire above), so nothing live is here.
                        // SAFETY: exclusive access to an empty slot, as argued just above.
                        slot.value.with_mut(|p| unsafe { (*p).write(value) });
                        // Release: pairs with the consumer's Acquire load in `try_pop`, which
                        // then sees the value fully written.
                        slot.stamp.store(tail | READY, Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => tail = current,
                }
            } else if diff < 0 {
                // The slot still holds the value from one lap ago: the ring is full.
                return Err(PushError::Full(value));
            } else {
                // Another producer already claimed (and stamped) this position: our tail is
                // stale. The Acquire above synchronised with that producer's Release, which came
                // after its CAS, so this reload sees a newer tail.
                tail = shared.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Items in the ring (snapshot; includes pushes claimed but still being written).
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// `len() == 0` (snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity: the requested one rounded up to a power of two (at least 1).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Whether the ring is closed (by `close()` on either side or by dropping the receiver or
    /// the last sender).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Closes the ring: every later `try_push` returns [`PushError::Closed`]; items already in
    /// the ring stay poppable. Idempotent.
    pub fn close(&self) {
        self.shared.close();
    }
}

impl<T: Send> Receiver<T> {
    /// Pops the oldest item if it is ready; never waits.
    ///
    /// `None` means nothing is ready *now*: the ring may be empty, or the oldest position may be
    /// claimed by a producer that has not finished writing it (then `len() > 0`). Once
    /// `is_closed() && is_empty()` (checked in that order), no item will ever arrive again.
    pub fn try_pop(&mut self) -> Option<T> {
        let shared = &*self.shared;
        // Relaxed: only this thread writes `head`.
        let head = shared.head.load(Ordering::Relaxed);
        let slot = shared.slot(head);
        // Acquire: pairs with the producer's Release store of `head + READY` after it wrote the
        // value.
        if slot.stamp.load(Ordering::Acquire) != head | READY {
            return None;
        }
        // stamp == head + READY: the producer of `head` wrote the value (Acquire above) and is
        // done with the slot; no producer writes it before we bump the stamp to `head + lap`;
        // we are the only consumer (`&mut self`), so the value is moved out exactly once.
        // SAFETY: the slot holds an initialised value that only we may read, as argued above.
        let value = slot.value.with(|p| unsafe { (*p).assume_init_read() });
        // Release: pairs with the Acquire stamp load of the producer that claims this slot one
        // lap later, so our read happens before its write.
        slot.stamp
            .store(head.wrapping_add(shared.lap), Ordering::Release);
        // Relaxed: see the `head` field (only `len()` and the final drop read it).
        shared.head.store(head.wrapping_add(ONE), Ordering::Relaxed);
        Some(value)
    }

    /// Items in the ring (snapshot; includes pushes claimed but still being written).
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// `len() == 0` (snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity: the requested one rounded up to a power of two (at least 1).
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Whether the ring is closed (by `close()` on either side or by dropping the receiver or
    /// the last sender).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Closes the ring: every later `try_push` returns [`PushError::Closed`]; items already in
    /// the ring stay poppable. Idempotent.
    pub fn close(&self) {
        self.shared.close();
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("len", &self.shared.len())
            .field("capacity", &self.shared.capacity())
            .field("closed", &self.shared.is_closed())
            .finish()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("len", &self.shared.len())
            .field("capacity", &self.shared.capacity())
            .field("closed", &self.shared.is_closed())
            .finish()
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    use std::sync::Arc as StdArc;

    /// Counts its drops in a shared counter.
    struct Counted(StdArc<StdAtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn layout_groups_writers_on_separate_cache_lines() {
        use std::mem::{align_of, offset_of, size_of};
        let line = align_of::<CachePadded<AtomicUsize>>();
        assert!(
            line >= 64,
            "CachePadded alignment {line} is below a cache line"
        );
        let head = offset_of!(Shared<u64>, head);
        let tail = offset_of!(Shared<u64>, tail);
        let rest = offset_of!(Shared<u64>, senders);
        assert_eq!(head, 0);
        assert!(tail >= head + line, "head and tail share a cache line");
        assert!(
            rest >= tail + line,
            "tail shares a line with the read-mostly fields"
        );
        assert!(size_of::<CachePadded<AtomicUsize>>() >= line);
        // The read-mostly fields stay together after the producers' line.
        for off in [
            offset_of!(Shared<u64>, lap),
            offset_of!(Shared<u64>, mask),
            offset_of!(Shared<u64>, buffer),
        ] {
            assert!(off >= rest);
        }
    }

    #[test]
    fn capacity_rounds_up_to_a_power_of_two() {
        for (asked, got) in [(0, 1), (1, 1), (2, 2), (3, 4), (5, 8), (64, 64), (100, 128)] {
            let (tx, rx) = channel::<u8>(asked);
            assert_eq!(tx.capacity(), got, "asked {asked}");
            assert_eq!(rx.capacity(), got);
        }
    }

    #[test]
    #[should_panic(expected = "exceeds the maximum")]
    fn absurd_capacity_panics_clearly() {
        let _ = channel::<u8>(usize::MAX);
    }

    #[test]
    fn fifo_order() {
        let (tx, mut rx) = channel(8);
        for i in 0..8 {
            tx.try_push(i).unwrap();
        }
        assert_eq!(tx.len(), 8);
        for i in 0..8 {
            assert_eq!(rx.try_pop(), Some(i));
        }
        assert_eq!(rx.try_pop(), None);
        assert!(rx.is_empty());
    }

    #[test]
    fn full_hands_the_value_back() {
        let (tx, mut rx) = channel(2);
        tx.try_push(String::from("a")).unwrap();
        tx.try_push(String::from("b")).unwrap();
        let err = tx.try_push(String::from("c")).unwrap_err();
        assert!(err.is_full());
        assert_eq!(err.into_inner(), "c");
        assert_eq!(rx.try_pop().as_deref(), Some("a"));
        tx.try_push(String::from("d")).unwrap();
        assert_eq!(rx.try_pop().as_deref(), Some("b"));
        assert_eq!(rx.try_pop().as_deref(), Some("d"));
        assert_eq!(rx.try_pop(), None);
    }

    #[test]
    fn capacity_one_alternates() {
        let (tx, mut rx) = channel(1);
        for i in 0..10 {
            tx.try_push(i).unwrap();
            assert_eq!(tx.try_push(99), Err(PushError::Full(99)));
            assert_eq!(rx.try_pop(), Some(i));
        }
    }

    #[test]
    fn close_refuses_pushes_and_keeps_items_poppable() {
        let (tx, mut rx) = channel(4);
        tx.try_push(1).unwrap();
        tx.try_push(2).unwrap();
        assert!(!tx.is_closed());
        rx.close();
        assert!(tx.is_closed() && rx.is_closed());
        assert_eq!(tx.try_push(3), Err(PushError::Closed(3)));
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.try_pop(), Some(1));
        assert_eq!(rx.try_pop(), Some(2));
        assert_eq!(rx.try_pop(), None);
        assert!(rx.is_closed() && rx.is_empty());
        tx.close(); // idempotent
        assert_eq!(tx.try_push(4).unwrap_err().into_inner(), 4);
    }

    #[test]
    fn closed_wins_over_full() {
        let (tx, _rx) = channel(1);
        tx.try_push(1).unwrap();
        tx.close();
        assert_eq!(tx.try_push(2), Err(PushError::Closed(2)));
    }

    #[test]
    fn dropping_handles_closes() {
        let (tx, rx) = channel::<u8>(2);
        drop(rx);
        assert_eq!(tx.try_push(1), Err(PushError::Closed(1)));

        let (tx, mut rx) = channel::<u8>(2);
        let tx2 = tx.clone();
        tx.try_push(7).unwrap();
        drop(tx);
        assert!(!rx.is_closed(), "one sender is still alive");
        drop(tx2);
        assert!(rx.is_closed());
        assert_eq!(rx.try_pop(), Some(7));
        assert!(rx.is_closed() && rx.is_empty());
    }

    #[test]
    fn remaining_items_are_dropped_with_the_last_handle() {
        let drops = StdArc::new(StdAtomicUsize::new(0));
        let (tx, mut rx) = channel(4);
        for _ in 0..4 {
            tx.try_push(Counted(drops.clone())).unwrap();
        }
        // A refused value comes back to its owner, who drops it.
        drop(
            tx.try_push(Counted(drops.clone()))
                .unwrap_err()
                .into_inner(),
        );
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        drop(rx.try_pop());
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        drop(rx);
        assert_eq!(
            drops.load(Ordering::Relaxed),
            2,
            "the sender still owns the ring"
        );
        drop(tx);
        assert_eq!(drops.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn remaining_items_are_dropped_after_wraparound() {
        let drops = StdArc::new(StdAtomicUsize::new(0));
        let (tx, mut rx) = channel(4);
        for _ in 0..10 {
            tx.try_push(Counted(drops.clone())).unwrap();
            drop(rx.try_pop());
        }
        for _ in 0..3 {
            tx.try_push(Counted(drops.clone())).unwrap();
        }
        drop((tx, rx));
        assert_eq!(drops.load(Ordering::Relaxed), 13);
    }

    #[test]
    fn wraparound_many_times() {
        let (tx, mut rx) = channel(4);
        let laps = if cfg!(miri) { 50 } else { 10_000 };
        let mut next_pop = 0u64;
        for i in 0..laps * 4u64 {
            // Keep between 1 and 3 items in flight, so head and tail sit in different slots.
            tx.try_push(i).unwrap();
            if rx.len() == 3 {
                for _ in 0..2 {
                    assert_eq!(rx.try_pop(), Some(next_pop));
                    next_pop += 1;
                }
            }
        }
        while let Some(v) = rx.try_pop() {
            assert_eq!(v, next_pop);
            next_pop += 1;
        }
        assert_eq!(next_pop, laps * 4);
    }

    #[test]
    fn zero_sized_values() {
        let (tx, mut rx) = channel(2);
        tx.try_push(()).unwrap();
        tx.try_push(()).unwrap();
        assert_eq!(tx.try_push(()), Err(PushError::Full(())));
        assert_eq!(rx.try_pop(), Some(()));
        assert_eq!(rx.len(), 1);
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<X: Send + Sync>() {}
        assert_send_sync::<Sender<String>>();
        assert_send_sync::<Receiver<String>>();
    }

    /// 4 producers push disjoint tagged sequences through a small ring; the consumer checks
    /// per-producer FIFO and that every value arrives exactly once. Correctness only: no timing.
    #[test]
    fn multi_thread_stress() {
        const PRODUCERS: u64 = 4;
        let per_producer: u64 = if cfg!(miri) { 200 } else { 100_000 };
        let (tx, mut rx) = channel::<u64>(64);
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut full = 0u64;
                    for i in 0..per_producer {
                        let mut v = (p << 32) | i;
                        loop {
                            match tx.try_push(v) {
                                Ok(()) => break,
                                Err(PushError::Full(back)) => {
                                    full += 1;
                                    v = back;
                                    std::thread::yield_now();
                                }
                                Err(PushError::Closed(_)) => panic!("closed early"),
                            }
                        }
                    }
                    full
                })
            })
            .collect();
        drop(tx); // the ring closes when the last producer finishes

        let mut next = [0u64; PRODUCERS as usize];
        let mut total = 0u64;
        loop {
            match rx.try_pop() {
                Some(v) => {
                    let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                    assert_eq!(i, next[p], "producer {p} out of order");
                    next[p] += 1;
                    total += 1;
                }
                None if rx.is_closed() && rx.is_empty() => break,
                None => std::thread::yield_now(),
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(total, PRODUCERS * per_producer);
        assert!(next.iter().all(|&n| n == per_producer));
    }
}
