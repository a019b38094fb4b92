//! Bounded lock-free rings.
//!
//! [`channel`] builds a bounded multi-producer / single-consumer ring: the hand-off from the
//! per-core ingest paths to the single WAL writer (DESIGN.md, "Data flow"). The algorithm and
//! its memory orderings are documented in [`mpsc`].
//!
//! CONTRACT (the rest of the crate codes against exactly this API):
//!
//! ```ignore
//! pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>);   // capacity >= 1, rounded up to a power of two is allowed
//! impl<T> Clone for Sender<T>;                                     // many producers
//! impl<T: Send> Sender<T> {
//!     pub fn try_push(&self, value: T) -> Result<(), PushError<T>>; // never blocks; hands the value back
//!     pub fn len(&self) -> usize;  pub fn capacity(&self) -> usize;  pub fn is_closed(&self) -> bool;
//!     pub fn close(&self);
//! }
//! impl<T: Send> Receiver<T> {                                      // exactly one consumer; NOT Clone
//!     pub fn try_pop(&mut self) -> Option<T>;
//!     pub fn len(&self) -> usize;  pub fn capacity(&self) -> usize;  pub fn is_closed(&self) -> bool;
//!     pub fn close(&self);   // after close, try_push returns Closed; items already pushed stay poppable
//! }
//! pub enum PushError<T> { Full(T), Closed(T) }   // + into_inner(self) -> T
//! ```
//!
//! Choices made within the contract:
//! - the capacity is rounded up to a power of two, and 0 becomes 1 (see [`channel`]);
//! - the ring also closes when the [`Receiver`] is dropped (nobody would ever pop) and when the
//!   last [`Sender`] is dropped (nothing more can arrive);
//! - [`Receiver::try_pop`] never waits: `None` means "nothing ready now". A producer that has
//!   claimed a slot but not yet written it makes `try_pop` return `None` while `len() > 0`. The
//!   exact "drained for good" test is `rx.is_closed() && rx.is_empty()`, in that order;
//! - items still in the ring when the last handle drops are dropped then (no leak).
//!
//! Usage:
//!
//! ```
//! use sluice::ring::{channel, PushError};
//!
//! let (tx, mut rx) = channel::<u32>(2);
//! tx.try_push(1).unwrap();
//! tx.try_push(2).unwrap();
//! assert_eq!(tx.try_push(3), Err(PushError::Full(3)));
//! tx.close();
//! assert_eq!(tx.try_push(4).unwrap_err().into_inner(), 4);
//! assert_eq!(rx.try_pop(), Some(1));
//! assert_eq!(rx.try_pop(), Some(2));
//! assert!(rx.is_closed() && rx.is_empty());
//! ```

pub mod mpsc;

pub use mpsc::{channel, Receiver, Sender};

use std::fmt;

/// Why [`Sender::try_push`] refused a value; the value is handed back in either case.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// The ring holds `capacity` items (or the consumer is still reading the oldest one).
    Full(T),
    /// The ring was closed: by `close()` on either side, or by dropping the receiver or the
    /// last sender. No push will ever succeed again.
    Closed(T),
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) | PushError::Closed(v) => v,
        }
    }

    /// `true` for [`PushError::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, PushError::Full(_))
    }

    /// `true` for [`PushError::Closed`].
    pub fn is_closed(&self) -> bool {
        matches!(self, PushError::Closed(_))
    }
}

// Manual impl so `unwrap()` works for any `T` (like `std::sync::mpsc::TrySendError`).
impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("Full(..)"),
            PushError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("pushing into a full ring"),
            PushError::Closed(_) => f.write_str("pushing into a closed ring"),
        }
    }
}

impl<T> std::error::Error for PushError<T> {}
