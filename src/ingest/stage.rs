//! Where an admitted event's record goes: the core's next group commit. Ingest stages into the
//! core's filling batch (`wal::group::Staging`) itself, through [`CommitStage`], so an append
//! goes from the front straight to `wal` ([`Stage::stage`] → the batch's ingest port,
//! `Staging::port(Owner::Ingest)`, as the pump and the DLQ replays stage through theirs); the core
//! around the front lends the batch for one call and adds only what it keeps of its own per
//! ticket ([`Holds`]: a DLQ replay's claim), which the front asks about once per append.
//!
//! [`Stage`] is the front's view of that pair, so the tests can fake the batch.

use crate::wal::{
    self,
    append::group::{Owner, Staging},
};

/// The log an ingest record is appended to: the core's own (slot 0 of its commit batch).
const OWN_LOG: usize = 0;

/// Where an admitted event's record goes (the core's commit batch with its [`Holds`]; a fake
/// in the tests).
pub trait Stage {
    /// True if a record of `weight` bytes fits the batch being filled.
    fn has_room(&self, weight: usize) -> bool;
    /// Stages `record` under `ticket` (the caller checked [`Stage::has_room`]); its outcome
    /// comes back through `Front::ingest_done`.
    fn stage(&mut self, ticket: u64, record: wal::Record);
    /// [`Holds::admitted`].
    fn admitted(&mut self, ticket: u64) -> bool;
    /// [`Holds::settled`].
    fn settled(&mut self, ticket: u64, durable: bool);
}

/// What the core keeps of its own for an append, by ticket (a single DLQ replay's claim).
pub trait Holds {
    /// An append got `ticket`, before it is offered. True if the core keeps something for it:
    /// then, and only then, [`Holds::settled`] is called for the ticket.
    fn admitted(&mut self, ticket: u64) -> bool;
    /// The append of a held `ticket` is settled — `durable`, or failed or dropped before it was
    /// staged — after its dedupe claim and before its answer.
    fn settled(&mut self, ticket: u64, durable: bool);
}

/// The core's commit batch, lent for one call, with the core's [`Holds`]; `owner`: whose
/// appends these are (`Owner::Ingest`; a bulk DLQ replay's, staged through the front for its
/// in-flight bound, `Owner::Replay`).
#[derive(Debug)]
pub struct CommitStage<'a, D, E, H> {
    pub batch: &'a mut Staging<D, E>,
    pub owner: Owner,
    pub holds: H,
}

impl<D, E, H: Holds> Stage for CommitStage<'_, D, E, H> {
    fn has_room(&self, weight: usize) -> bool {
        self.batch.has_room(weight)
    }

    fn stage(&mut self, ticket: u64, record: wal::Record) {
        self.batch.port(self.owner).event(OWN_LOG, ticket, record);
    }

    fn admitted(&mut self, ticket: u64) -> bool {
        self.holds.admitted(ticket)
    }

    fn settled(&mut self, ticket: u64, durable: bool) {
        self.holds.settled(ticket, durable);
    }
}

/// A borrowed stage is a stage (a core lends its commit batch for one call).
impl<S: Stage + ?Sized> Stage for &mut S {
    fn has_room(&self, weight: usize) -> bool {
        (**self).has_room(weight)
    }
    fn stage(&mut self, ticket: u64, record: wal::Record) {
        (**self).stage(ticket, record)
    }
    fn admitted(&mut self, ticket: u64) -> bool {
        (**self).admitted(ticket)
    }
    fn settled(&mut self, ticket: u64, durable: bool) {
        (**self).settled(ticket, durable)
    }
}
