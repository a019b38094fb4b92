//! Bounded lock-free rings. (Being written; see the contract below.)
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
