//! The one primitives shim every concurrent module imports through.
//!
//! Under `--cfg loom` the atomics, `Arc` and thread primitives come from `loom`, so the models in
//! `loom-tests/` explore every interleaving of the real code; otherwise they are `std`'s. Code in
//! `src/ring` and `src/ingest` must import atomics from here, never from `std` directly.
//! Metrics counters bypass the shim on purpose (`crate::metrics` uses `std` atomics with
//! `Relaxed` ordering): they carry no synchronisation and would only blow up loom's state space.

#[cfg(loom)]
pub use loom::sync::atomic;
#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(loom)]
pub use loom::thread;

#[cfg(not(loom))]
pub use std::sync::atomic;
#[cfg(not(loom))]
pub use std::sync::Arc;
#[cfg(not(loom))]
pub use std::thread;

pub mod clock;

pub use crossbeam_utils::CachePadded;

/// Spin-then-yield hint for retry loops on contended atomics.
///
/// Under loom a spin is a `yield_now`, which lets the model checker schedule the other thread
/// (a busy loop would otherwise never terminate in the model).
#[inline]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
