//! What the core lends its ingest front (`ingest::front::Front`) per call: its commit batch
//! (`Committer::staging`), into which the front stages its appends itself
//! (`ingest::stage::CommitStage`, as `Owner::Ingest`), and the single DLQ replays' claims
//! ([`ReplayHolds`], the front's `Holds`: a claim is held by the ticket its append gets until
//! the append is settled, `dispatch::dlq::online`). Only an append that came with a claim is
//! held, so a client's event never calls in here. And the front's two calls that no request
//! makes: the offers retried each turn ([`Core::retry_offers`]) and a commit's answers
//! ([`Core::settle_commit`]).

use super::lent::Core;
use crate::dispatch::dlq::claims::ReplayClaim;
use crate::dispatch::dlq::online::OnlineReplays;
use crate::dispatch::pump::shell::Batch;
use crate::ingest::front::{Env, Front};
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::{self, replication_refusal};
use crate::ingest::stage::{CommitStage, Holds};
use crate::net::conns::Conns;
use crate::net::server::{Answers, Ctx};
use crate::ops::reload::CoreView;
use crate::replication::state::Refuse;
use crate::sched::commit::{Committer, Owner};
use crate::sched::state::Shared;

/// The core's commit batch as its front stages into it, with the single replays' claims.
pub type CoreStage<'a> = CommitStage<
    'a,
    crate::dispatch::dlq::entry::DlqEntry,
    crate::dispatch::dlq::entry::DlqError,
    ReplayHolds<'a>,
>;

/// The single DLQ replays' claims, by ingest ticket (the front's [`Holds`]).
#[derive(Debug)]
pub struct ReplayHolds<'a> {
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
pub(super) fn node<'a>(shared: &'a Shared, view: &'a CoreView) -> pipeline::Node<'a> {
    pipeline::Node {
        ingest: &shared.config.ingest,
        segment_bytes: shared.config.wal.segment_bytes,
        guards: &shared.ingest().guards,
        table: view.guards(),
        admission: &shared.ingest().admission,
        returns: &shared.ingest().returns,
        backlog: &shared.ingest().backlog,
        replication: shared.replication().map(|r| &**r),
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
            node: node(self.shared, self.view),
            metrics: cx.metrics,
            date: cx.date,
        };
        (&mut *self.front, &mut *cx.conns, stage, env)
    }

    /// Offers the waiting connections' events again (`Front::retry_offers`); returns the
    /// connections to drive.
    pub fn retry_offers(&mut self, answers: Answers<'_, PendingIngest>, now: u64) -> Vec<usize> {
        let mut touched = Vec::new();
        let mut stage = core_stage(&mut *self.committer, self.replays, None);
        let env = Env {
            node: node(self.shared, self.view),
            metrics: answers.metrics,
            date: answers.date,
        };
        (self.front).retry_offers(answers.conns, now, &mut stage, &env, &mut touched);
        touched
    }

    /// Answers ingest tickets `tickets` `503` for replication's `reason` now; they settle when
    /// their batch does (`Front::answer_held`, `sched::replicated`).
    pub fn answer_held(
        &mut self,
        tickets: &[u64],
        reason: Refuse,
        answers: Answers<'_, PendingIngest>,
    ) {
        let env = Env {
            node: node(self.shared, self.view),
            metrics: answers.metrics,
            date: answers.date,
        };
        let reason = replication_refusal(reason);
        for &ticket in tickets {
            self.front.answer_held(answers.conns, ticket, reason, &env);
        }
    }

    /// Settles the appends and removals of ingest and the replays in `batch`, each by its
    /// owner (the pump's are the pump's: `CorePump::on_commit`; the replays' are
    /// `dispatch::dlq::online`'s), within `Server::answer`, which writes what was answered.
    pub fn settle_commit(&mut self, batch: &Batch, answers: Answers<'_, PendingIngest>) {
        let Answers {
            conns,
            date,
            metrics,
        } = answers;
        let mut stage = core_stage(&mut *self.committer, self.replays, None);
        let env = Env {
            node: node(self.shared, self.view),
            metrics,
            date,
        };
        for (owner, ticket, o) in batch.appended() {
            if owner == Owner::Ingest {
                self.front.ingest_done(conns, ticket, o, &mut stage, &env);
            }
        }
        drop(stage);
        // Then the replays' (after ingest: a single replay made durable is among those whose
        // removal is staged now).
        let (replays, mut port) = self.replays();
        replays.settle(batch, &mut port);
    }
}
