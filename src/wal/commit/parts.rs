//! What a core's commit takes from the rooms above the WAL ([`Parts`], [`Wiring`]): the
//! dead-letter store, the helper's [`Mirror`], the loop's [`Hold`], and the loop's
//! [`FileRing`]. The runtime wires them (`sched::commit`); `wal::commit`'s docs say what each
//! is for.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::wal::append::group::{Batch, DeadLetters, Log, Staging};

/// What a core's commit takes from the rooms above the WAL (module docs); the runtime wires it
/// (`sched::commit::Wired`).
pub trait Parts: 'static {
    /// A dead letter, and its store's error.
    type Entry: Send + 'static;
    type Error: Send + 'static;
    /// Where a batch's dead letters and releases are made durable (`wal::group::process`).
    type Dead: DeadLetters<Entry = Self::Entry, Error = Self::Error> + Send + Sync + 'static;
    /// What the helper does with each committed batch besides handing it back.
    type Mirror: Mirror<Self::Entry, Self::Error>;
    /// Where the loop keeps batches back from the helper until they may settle.
    type Hold: Hold<Self::Entry, Self::Error>;
    /// Runs first on the helper thread (the runtime's scheduling policy for it).
    fn helper_started();
}

/// A batch of `P`'s entries.
pub type BatchOf<P> = Batch<<P as Parts>::Entry, <P as Parts>::Error>;
/// The filling batch of `P`'s entries.
pub type StagingOf<P> = Staging<<P as Parts>::Entry, <P as Parts>::Error>;
/// An adopted log's way to its mirror (`Committer::adopt`).
pub type AdoptedOf<P> =
    <<P as Parts>::Mirror as Mirror<<P as Parts>::Entry, <P as Parts>::Error>>::Adopted;

/// The helper's replication of what each batch made durable (with `[replication]`: framed for
/// the mirror thread, `sched::replicated`). Called on the helper thread only.
pub trait Mirror<D, E>: Send + 'static {
    /// An adopted log's way to its own subject (`Committer::adopt`).
    type Adopted: Send + 'static;
    /// After `batch`'s commit, before it goes back to the loop; may number it in `batch.hold`
    /// (the loop's [`Hold`] then keeps it until that is acknowledged). `logs[i]` is slot
    /// `first_slot + i`.
    fn committed(&mut self, logs: &[Log], first_slot: usize, batch: &mut Batch<D, E>);
    /// Between batches, after the logs' ticks (a retirement to announce).
    fn between(&mut self, logs: &[Log]);
    /// Slot `slot` (`logs[slot - first_slot]`) is a log adopted with its own way.
    fn adopt(&mut self, slot: usize, link: Self::Adopted);
}

/// The loop's queue of batches back from the helper that wait before they settle (with
/// `[replication]`: for JetStream's acknowledgement, `sched::replicated::Awaiting`).
pub trait Hold<D, E> {
    /// A batch back from the helper.
    fn push(&mut self, batch: Batch<D, E>);
    /// The oldest batch, once it may settle.
    fn pop(&mut self) -> Option<Batch<D, E>>;
    /// No batch may go to the helper until one settles.
    fn is_full(&self) -> bool;
    fn is_empty(&self) -> bool;
    /// Items of the batches held (the commit gauge).
    fn items(&self) -> usize;
}

/// The loop's io_uring ring, for the own log's commit: a write linked to its `fdatasync`
/// (`net::io::uring::Uring` implements it; its completion comes back through
/// `Committer::on_ring_done`).
pub trait FileRing {
    /// A file write is on the ring, or its completion not taken yet.
    fn file_busy(&self) -> bool;
    /// Submits `buf` at `offset` of `fd`, linked to an `fdatasync` when `sync`; on refusal the
    /// buffer comes back with the error.
    fn write_file(
        &mut self,
        fd: RawFd,
        offset: u64,
        buf: Vec<u8>,
        sync: bool,
    ) -> Result<(), (io::Error, Vec<u8>)>;
}

/// What `Committer::start` wires in besides the logs.
pub struct Wiring<P: Parts> {
    pub dead: Arc<P::Dead>,
    /// Wakes the loop's poll (the helper calls it once per batch it hands back).
    pub wake: Arc<dyn Fn() + Send + Sync>,
    pub mirror: P::Mirror,
    /// With a hold the ring commits nothing: the helper must see every batch.
    pub hold: Option<P::Hold>,
}

impl<P: Parts> std::fmt::Debug for Wiring<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring")
            .field("held", &self.hold.is_some())
            .finish_non_exhaustive()
    }
}
