//! The pump's shell, per core (see `CorePump` below): moves data between the pure pump core
//! ([`crate::dispatch::pump`]) and the core's commit batch, wakers and logs.
//!
//! What dispatch puts in a core's group commit: the batch types of `wal::group` over dispatch's
//! dead letters ([`Item`], [`Outcome`], [`Batch`], [`Staging`]), and the DLQ as the batch's
//! dead-letter store ([`DeadLetters`] for [`DlqStore`]): the WAL names no dispatch type.
#![forbid(unsafe_code)]

use crate::dispatch::dlq::{DlqEntry, DlqError, DlqStore};
use crate::wal::group::DeadLetters;

/// One thing for the disk in a core's batch: an append, or a dead letter.
pub type Item = crate::wal::group::Item<DlqEntry>;
/// The result of one [`Item`].
pub type Outcome = crate::wal::group::Outcome<DlqError>;
/// A core's batch for its group commit.
pub type Batch = crate::wal::group::Batch<DlqEntry, DlqError>;
/// A core's filling batch.
pub type Staging = crate::wal::group::Staging<DlqEntry, DlqError>;

impl DeadLetters for DlqStore {
    type Entry = DlqEntry;
    type Error = DlqError;
    /// The batch's dead letters as one DLQ commit (`dispatch::dlq_store`).
    fn put_dead_letters(
        &self,
        entries: Vec<(usize, &DlqEntry)>,
    ) -> Vec<(usize, Result<(), DlqError>)> {
        self.put_batch(entries)
    }
}
