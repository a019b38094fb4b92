//! Bounded lock-free rings.
//!
//! [`channel`] builds a bounded multi-producer / single-consumer ring. sluice uses it for every
//! hand-off between threads: each core's inbound job ring and outcome ring (written by every
//! core), and the two batch rings between a core and its commit helper (DESIGN.md, "Data
//! flow"). The algorithm and its memory orderings are documented in [`mpsc`]; the error a refused
//! push hands back is [`PushError`] (`error.rs`).
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

mod error;

pub use error::PushError;
pub use mpsc::{channel, Receiver, Sender};
