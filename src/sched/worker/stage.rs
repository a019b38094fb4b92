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
use crate::dispatch::dlq::online::OnlineReplays;
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
    replays: &'a mut OnlineReplays,
    /// A single replay's claim, held by the ticket its append gets ([`Holds::admitted`]).
    claim: Option<ReplayClaim>,
}

/// The core's stage for one call: its commit batch and its replays' claims (`claim`: a single
/// replay's, for the next append).
pub(super) fn core_stage<'a>(
    committer: &'a mut Committer,
    replays: &'a mut OnlineReplays,
    claim: Option<ReplayClaim>,
) -> CoreStage<'a> {
    CommitStage {
        batch: committer.staging(),
        owner: Owner::Ingest,
        holds: ReplayHolds { replays, claim },
    }
}

impl Holds for ReplayHolds<'_> {
    fn admitted(&mut self, ticket: u64) -> bool {
        match self.claim.take() {
            Some(claim) => {
                self.replays.hold(ticket, claim);
                true
            }
            None => false,
        }
    }

    /// A single replay: durable → its entry leaves the DLQ with the next commit, and its claim
    /// drops once that removal is back; failed → the claim drops (`dispatch::dlq::online`).
    fn settled(&mut self, ticket: u64, durable: bool) {
        self.replays.settled_single(ticket, durable);
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
}
