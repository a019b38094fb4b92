//! Where the core's ingest front (`ingest::front::Front`) meets the rest of the core: its
//! appends are staged in the core's group commit ([`CoreStage`], the front's
//! [`Stage`]), and a single DLQ replay's claim is held by its ticket until the append's answer
//! (`replay.rs`). The worker's few calls into the front are here too: the borrow split
//! ([`Worker::ingest_parts`]), the commit's answers and the turn's offer retries.

use super::serve::Core;
use super::*;
use crate::dispatch::dlq_store::DlqStore;
use crate::dispatch::replay_claims::ReplayClaim;
use crate::ingest::front::Stage;
use crate::ingest::pipeline;
use crate::net::server::Ctx;
use crate::sched::commit::Committer;

/// The core's commit batch as the front's [`Stage`], with the single replays' claims.
pub(super) struct CoreStage<'a> {
    pub(super) committer: &'a mut Committer,
    /// ingest ticket → claim of a single replay (`books::Replays::single`).
    pub(super) single: &'a mut std::collections::HashMap<u64, ReplayClaim>,
    /// A single replay's claim, held by the ticket its append gets ([`Stage::admitted`]).
    pub(super) claim: Option<ReplayClaim>,
    pub(super) dlq: &'a DlqStore,
}

impl Stage for CoreStage<'_> {
    fn has_room(&self, weight: usize) -> bool {
        self.committer.staged().has_room(weight)
    }

    fn stage(&mut self, ticket: u64, record: crate::wal::Record) {
        self.committer.staging().push_ingest(0, ticket, record);
    }

    fn admitted(&mut self, ticket: u64) {
        if let Some(claim) = self.claim.take() {
            self.single.insert(ticket, claim);
        }
    }

    /// A single replay: durable → its entry leaves the DLQ first (a failure to remove it only
    /// means a later replay delivers again: at least once), then its claim drops.
    fn settled(&mut self, ticket: u64, durable: bool) {
        if self.single.is_empty() {
            return; // no replay waiting: no hash per answer
        }
        let Some(claim) = self.single.remove(&ticket) else {
            return;
        };
        if durable {
            if let Err(e) = self.dlq.remove(claim.id()) {
                let id = claim.id();
                eprintln!("sluice: replayed {id} but could not remove its DLQ entry: {e}");
            }
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
        let stage = CoreStage {
            committer,
            single: &mut replays.single,
            claim,
            dlq: &shared.dispatch().dlq,
        };
        let env = Env {
            node: node(shared, view),
            metrics,
            date,
        };
        (front, conns, stage, env)
    }

    /// The commit helper's answer for ingest ticket `ticket` (`Front::ingest_done`). Returns
    /// the connection answered, if it is still open.
    pub(super) fn ingest_done(&mut self, ticket: u64, outcome: AppendOutcome) -> Option<usize> {
        let (front, conns, mut stage, env) = self.ingest_parts(None);
        front.ingest_done(conns, ticket, outcome, &mut stage, &env)
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
        stage::CoreStage<'c>,
        Env<'c>,
    ) {
        let stage = stage::CoreStage {
            committer: &mut *self.committer,
            single: &mut self.replays.single,
            claim,
            dlq: &self.shared.dispatch().dlq,
        };
        let env = Env {
            node: stage::node(self.shared, self.view),
            metrics: cx.metrics,
            date: cx.date,
        };
        (&mut *self.front, &mut *cx.conns, stage, env)
    }

    /// The core's ingest front and its stage, for an append no connection waits for.
    pub(super) fn stage_parts(
        &mut self,
        claim: Option<ReplayClaim>,
    ) -> (&mut Front, stage::CoreStage<'_>) {
        let stage = stage::CoreStage {
            committer: &mut *self.committer,
            single: &mut self.replays.single,
            claim,
            dlq: &self.shared.dispatch().dlq,
        };
        (&mut *self.front, stage)
    }
}
