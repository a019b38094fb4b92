//! Why a push into a ring was refused: [`PushError`], which hands the value back.

use std::fmt;

/// Why [`Sender::try_push`](super::Sender::try_push) refused a value; the value is handed back in either case.
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
