//! Bounded lock-free rings. (Being written; see the contract below.)
//!
//! TEMPORARY: the implementation in this file is a `Mutex<VecDeque>` stand-in written by the WAL
//! branch only so that `src/wal` compiles and its tests run. It implements exactly the contract
//! below and is to be replaced wholesale by the real lock-free ring when the branches merge.
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

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

// TEMPORARY stand-in (see module docs).
struct Inner<T> {
    queue: Mutex<(VecDeque<T>, bool)>,
    capacity: usize,
}

/// TEMPORARY stand-in: producer handle.
pub struct Sender<T> {
    inner: Arc<Inner<T>>,
}

/// TEMPORARY stand-in: the single consumer handle.
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
}

/// Why a push failed; the value is handed back.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError<T> {
    Full(T),
    Closed(T),
}

impl<T> PushError<T> {
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) | PushError::Closed(v) => v,
        }
    }
}

/// TEMPORARY stand-in for the lock-free ring.
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let capacity = capacity.max(1);
    let inner = Arc::new(Inner {
        queue: Mutex::new((VecDeque::with_capacity(capacity), false)),
        capacity,
    });
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            inner: self.inner.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.inner.capacity)
            .finish()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.inner.capacity)
            .finish()
    }
}

impl<T: Send> Sender<T> {
    pub fn try_push(&self, value: T) -> Result<(), PushError<T>> {
        let mut q = self.inner.queue.lock();
        if q.1 {
            return Err(PushError::Closed(value));
        }
        if q.0.len() >= self.inner.capacity {
            return Err(PushError::Full(value));
        }
        q.0.push_back(value);
        Ok(())
    }
    pub fn len(&self) -> usize {
        self.inner.queue.lock().0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }
    pub fn is_closed(&self) -> bool {
        self.inner.queue.lock().1
    }
    pub fn close(&self) {
        self.inner.queue.lock().1 = true;
    }
}

impl<T: Send> Receiver<T> {
    pub fn try_pop(&mut self) -> Option<T> {
        self.inner.queue.lock().0.pop_front()
    }
    pub fn len(&self) -> usize {
        self.inner.queue.lock().0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }
    pub fn is_closed(&self) -> bool {
        self.inner.queue.lock().1
    }
    pub fn close(&self) {
        self.inner.queue.lock().1 = true;
    }
}
