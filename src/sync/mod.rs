//! The one primitives shim every concurrent module imports through.
//!
//! Under `--cfg sluice_loom` the atomics, `Arc` and thread primitives come from `loom`, so the models in
//! `loom-tests/` explore every interleaving of the real code; otherwise they are `std`'s. Code in
//! `src/ring`, `src/ingest` and [`gcra`] must import atomics from here, never from `std` directly.
//! Metrics counters bypass the shim on purpose (`crate::metrics` uses `std` atomics with
//! `Relaxed` ordering): they carry no synchronisation and would only blow up loom's state space.

#[cfg(sluice_loom)]
pub use loom::sync::atomic;
#[cfg(sluice_loom)]
pub use loom::sync::Arc;
#[cfg(sluice_loom)]
pub use loom::sync::{Mutex, MutexGuard};
#[cfg(sluice_loom)]
pub use loom::thread;

#[cfg(not(sluice_loom))]
pub use std::sync::atomic;
#[cfg(not(sluice_loom))]
pub use std::sync::Arc;
#[cfg(not(sluice_loom))]
pub use std::sync::{Mutex, MutexGuard};
#[cfg(not(sluice_loom))]
pub use std::thread;

pub mod clock;
pub mod countdown;
pub mod gcra;
pub mod handback;
pub mod inbox;
pub mod publish;
pub mod slots;

pub use crossbeam_utils::CachePadded;

/// Spin-then-yield hint for retry loops on contended atomics.
///
/// Under loom a spin is a `yield_now`, which lets the model checker schedule the other thread
/// (a busy loop would otherwise never terminate in the model).
#[inline]
pub fn spin_hint() {
    #[cfg(sluice_loom)]
    loom::thread::yield_now();
    #[cfg(not(sluice_loom))]
    std::hint::spin_loop();
}

/// `UnsafeCell` with loom's closure-based API, so loom can check every access for races.
///
/// Under `--cfg sluice_loom` this is `loom::cell::UnsafeCell`; otherwise a zero-cost wrapper around
/// `std::cell::UnsafeCell` exposing the same `with` / `with_mut` methods.
pub mod cell {
    #[cfg(sluice_loom)]
    pub use loom::cell::UnsafeCell;

    /// `std::cell::UnsafeCell` with loom's API (`with`, `with_mut`); see the module docs.
    #[cfg(not(sluice_loom))]
    #[repr(transparent)]
    pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(sluice_loom))]
    impl<T> UnsafeCell<T> {
        #[inline]
        pub const fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a shared raw pointer to the contents. The caller upholds aliasing.
        #[inline]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a mutable raw pointer to the contents. The caller upholds aliasing.
        #[inline]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    #[cfg(not(sluice_loom))]
    impl<T> std::fmt::Debug for UnsafeCell<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("UnsafeCell { .. }")
        }
    }
}
