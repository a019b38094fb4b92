//! What the core lends its ingest front (`ingest::front::Front`) per call: its commit batch
//! (`Committer::staging`), into which the front stages its appends itself
//! (`ingest::stage::CommitStage`), and the single DLQ replays' claims ([`ReplayHolds`], the
//! front's `Holds`: a claim is held by the ticket its append gets until the append is settled,
//! `replay.rs`). Only an append that came with a claim is held, so a client's event never
//! calls in here. The borrow splits are here too ([`Worker::ingest_parts`],
//! [`Core::ingest_parts`]) and the turn's offer retries.

use super::serve::Core;
use super::*;
use crate::dispatch::dlq::claims::ReplayClaim;
use crate::ingest::pipeline;
use crate::ingest::stage::{CommitStage, Holds};
use crate::net::server::Ctx;
use crate::sched::commit::{Committer, Owner};

/// The core's commit batch as its front stages into it, with the single replays' claims.
pub(super) type CoreStage<'a> = CommitStage<
    'a,
    crate::dispatch::dlq::entry::DlqEntry,
    crate::dispatch::dlq::entry::DlqError,
    ReplayHolds<'a>,
>;

/// The single DLQ replays' claims, by ingest ticket (the front's [`Holds`]).
pub(super) struct ReplayHolds<'a> {
    /// ingest ticket → claim of a single replay (`books::Replays::single`).
    pub(super) single: &'a mut std::collections::HashMap<u64, ReplayClaim>,
    /// A single replay's claim, held by the ticket its append gets ([`Holds::admitted`]).
    pub(super) claim: Option<ReplayClaim>,
    /// Single replays made durable: their entries leave the DLQ with the next commit
    /// (`books::Replays::durable`).
    pub(super) durable: &'a mut Vec<ReplayClaim>,
}

/// The core's stage for one call: its commit batch and its replays' claims (`claim`: a single
/// replay's, for the next append), for ingest's appends.
pub(super) fn core_stage<'a>(
    committer: &'a mut Committer,
    replays: &'a mut super::books::Replays,
    claim: Option<ReplayClaim>,
) -> CoreStage<'a> {
    owned_stage(committer, replays, claim, Owner::Ingest)
}

/// [`core_stage`] for `owner`'s appends.
fn owned_stage<'a>(
    committer: &'a mut Committer,
    replays: &'a mut super::books::Replays,
    claim: Option<ReplayClaim>,
    owner: Owner,
) -> CoreStage<'a> {
    let super::books::Replays {
        single, durable, ..
    } = replays;
    CommitStage {
        batch: committer.staging(),
        owner,
        holds: ReplayHolds {
            single,
            claim,
            durable,
        },
    }
}

impl Holds for ReplayHolds<'_> {
    fn admitted(&mut self, ticket: u64) -> bool {
        match self.claim.take() {
            Some(claim) => {
                self.single.insert(ticket, claim);
                true
            }
            None => false,
        }
    }

    /// A single replay: durable → its entry leaves the DLQ with the next commit, and its claim
    /// drops once that removal is back (`Worker::release_replayed`); failed → the claim drops.
    fn settled(&mut self, ticket: u64, durable: bool) {
        if self.single.is_empty() {
            return; // no replay waiting: no hash per answer
        }
        let Some(claim) = self.single.remove(&ticket) else {
            return;
        };
        if durable {
            self.durable.push(claim);
        }
    }
}

/// The node's shared state the pipeline reads, with the checks of the generation `view` runs.
pub(super) fn node<'a>(
    shared: &'a Shared,
    view: &'a crate::ops::reload::CoreView,
) -> pipeline::Node<'a> {
    pipeline::Node {
        ingest: &shared.config.ingest,
        segment_bytes: shared.config.wal.segment_bytes,
        guards: &shared.ingest().guards,
        table: view.guards(),
        admission: &shared.ingest().admission,
        returns: &shared.ingest().returns,
        backlog: &shared.ingest().backlog,
    }
}

impl Worker {
    /// The front, the connections, the stage and the front's view of the node, borrowed
    /// side by side; `claim`: a single replay's, for the next append.
    pub(super) fn ingest_parts(
        &mut self,
        claim: Option<ReplayClaim>,
    ) -> (
        &mut Front,
        &mut Conns<PendingIngest>,
        CoreStage<'_>,
        Env<'_>,
    ) {
        let Worker {
            front,
            server,
            committer,
            replays,
            shared,
            view,
            metrics,
            ..
        } = self;
        let (conns, date) = server.parts();
        let stage = core_stage(committer, replays, claim);
        let env = Env {
            node: node(shared, view),
            metrics,
            date,
        };
        (front, conns, stage, env)
    }

    /// Offers the waiting connections' events again (`Front::retry_offers`), then drives each.
    pub(super) fn retry_offers(&mut self) {
        if !self.front.offers_waiting() {
            return;
        }
        let now = self.now();
        let mut touched = Vec::new();
        let (front, conns, mut stage, env) = self.ingest_parts(None);
        front.retry_offers(conns, now, &mut stage, &env, &mut touched);
        for idx in touched {
            self.drive(idx);
        }
    }
}

impl Core<'_> {
    /// The core's ingest front with the stage and its view of the node, on `cx`'s connection;
    /// `claim`: a single replay's, for the next append.
    pub(super) fn ingest_parts<'c>(
        &'c mut self,
        cx: &'c mut Ctx<'_, PendingIngest>,
        claim: Option<ReplayClaim>,
    ) -> (
        &'c mut Front,
        &'c mut Conns<PendingIngest>,
        CoreStage<'c>,
        Env<'c>,
    ) {
        let stage = core_stage(&mut *self.committer, self.replays, claim);
        let env = Env {
            node: stage::node(self.shared, self.view),
            metrics: cx.metrics,
            date: cx.date,
        };
        (&mut *self.front, &mut *cx.conns, stage, env)
    }

    /// The core's ingest front and a stage for a bulk replay's appends (`Owner::Replay`: no
    /// connection waits for them; the front counts them in its in-flight bound).
    pub(super) fn replay_parts(&mut self) -> (&mut Front, CoreStage<'_>) {
        let stage = owned_stage(&mut *self.committer, self.replays, None, Owner::Replay);
        (&mut *self.front, stage)
    }
}
