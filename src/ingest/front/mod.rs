//! A core's ingest front: one ingest request from admission to its reply, on the core's
//! connections (`net::conns::Conns<PendingIngest>`), with what the core keeps for it between
//! requests — its source cache, event-id generator and ticket sequence, its unsettled dedupe
//! claims, the reservations of appends whose connection closed (`orphans`), and the connections
//! waiting for room in its group commit.
//!
//! The decisions are [`crate::ingest::pipeline`]'s; the front applies them:
//!
//! 1. [`Front::ingest`] runs the pipeline on a routed request: an immediate answer is queued on
//!    the connection; an append gets a ticket (connection slot above [`TICKET_SEQ_BITS`], the
//!    core's sequence below), its dedupe claim is kept by ticket, its pending reply is queued in
//!    request order (`net::conn::Slot::Pending`), and its record is offered to the core's next
//!    group commit through [`Stage`] (`ingest::stage::CommitStage`: the front pushes into the
//!    core's `wal::group::Staging` itself; a fake in the tests). No room: the connection waits (FIFO, [`Front::retry_offers`] every loop turn) until
//!    the request's `offer_timeout`, then `503 wal_busy`.
//! 2. [`Front::ingest_done`]: the commit's answer for a ticket. The dedupe claim is settled
//!    first (confirmed if durable, released if not), then the pending reply becomes the `202` (or
//!    `503 wal_unavailable`, which gives the backlog reservation back).
//! 3. [`Front::on_close`]: a connection closed with pending replies. An event never staged
//!    settles now (claim released, reservation given back); one already staged becomes an
//!    orphan, settled when its answer arrives (nobody to answer, but the backlog must be right).
//!
//! Bounds: appends staged or with the commit helper ≤ `max_outstanding` ([`Front::new`], the
//! caller passes `2 × max_batch`); `claims` and `orphans` hold at most one entry per append in
//! flight or waiting in a connection's queue (≤ connections × `max_pipeline_depth`);
//! `offer_waiters` at most one entry per connection in a row (FIFO, duplicates only when a
//! connection leaves and comes back). The gauge is `sluice_commit_queued` (the commit batch),
//! and each pending reply counts against its connection's pipeline depth.

use std::collections::{HashMap, VecDeque};

use crate::ingest::dedupe::ClaimToken;
use crate::ingest::event_id::EventIdGen;
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::{Arrival, Node, Now, Output, Pipeline, ReplyHead, Response};
use crate::ingest::respond::Refusal;
use crate::ingest::sources::SourceCache;
use crate::ingest::stage::Stage;
use crate::metrics::{CoreMetrics, Route};
use crate::net::conn::Slot;
use crate::net::conns::Conns;
use crate::net::http;
use crate::wal::{self, AppendOutcome, AppendRequest};

/// Bits of a ticket that carry the per-core sequence; the bits above hold the connection slot.
pub const TICKET_SEQ_BITS: u32 = 40;

/// What the front reads of the node and the loop turn for one call.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    pub node: Node<'a>,
    pub metrics: &'a CoreMetrics,
    /// The turn's `Date` header value.
    pub date: &'a str,
}

/// A staged append whose connection closed before its answer: what settling it still needs.
#[derive(Debug, Clone, Copy)]
struct Orphan {
    /// Its backlog reservation: the trigger's backlog slot and the cost.
    slot: usize,
    cost: u64,
    /// The core holds something for its ticket ([`Stage::admitted`]).
    held: bool,
}

/// One core's ingest front (module docs).
#[derive(Debug)]
pub struct Front {
    sources: SourceCache,
    ids: EventIdGen,
    seq: u64,
    /// Appends staged or with the commit helper (ingest, single and bulk replays).
    outstanding: usize,
    max_outstanding: usize,
    /// Connections with events waiting for room in the batch, in arrival order.
    offer_waiters: VecDeque<usize>,
    /// Unsettled dedupe claims by ticket.
    claims: HashMap<u64, ClaimToken>,
    /// Appends whose connection closed before their answer, by ticket.
    orphans: HashMap<u64, Orphan>,
    /// The JSON body of the 202 (or 503) being written, reused from answer to answer.
    reply_body: String,
}

impl Front {
    /// The front of core `core`, with at most `max_outstanding` appends in flight.
    pub fn new(core: usize, sources: SourceCache, max_outstanding: usize) -> Front {
        Front {
            sources,
            ids: EventIdGen::new(core),
            seq: 0,
            outstanding: 0,
            max_outstanding,
            offer_waiters: VecDeque::new(),
            claims: HashMap::new(),
            orphans: HashMap::new(),
            reply_body: String::new(),
        }
    }

    /// The core's pipeline over `node` (its source cache and id generator borrowed).
    pub fn pipeline<'a>(&'a mut self, node: Node<'a>, metrics: &'a CoreMetrics) -> Pipeline<'a> {
        Pipeline {
            node,
            sources: &mut self.sources,
            ids: &mut self.ids,
            metrics,
        }
    }

    /// The core's event-id generator (a bulk replay mints ids with it).
    pub fn ids(&mut self) -> &mut EventIdGen {
        &mut self.ids
    }

    /// The next value of the core's ticket sequence (below [`TICKET_SEQ_BITS`]).
    pub fn next_seq(&mut self) -> u64 {
        self.seq = (self.seq + 1) & ((1 << TICKET_SEQ_BITS) - 1);
        self.seq
    }

    /// Appends staged or with the commit helper.
    pub fn in_flight(&self) -> usize {
        self.outstanding
    }

    /// True at `max_outstanding` appends in flight: nothing more is staged until one answers.
    pub fn at_bound(&self) -> bool {
        self.outstanding >= self.max_outstanding
    }

    /// True while connections wait for room in the batch (the loop retries every millisecond).
    pub fn offers_waiting(&self) -> bool {
        !self.offer_waiters.is_empty()
    }

    /// Stages a record that no connection waits for (a bulk replay) if the bound and the
    /// batch have room. Its outcome comes back to the caller, which calls
    /// [`Front::direct_done`].
    pub fn stage_direct(
        &mut self,
        stage: &mut impl Stage,
        ticket: u64,
        record: wal::Record,
    ) -> bool {
        if self.at_bound() || !stage.has_room(record.batch_weight()) {
            return false;
        }
        stage.stage(ticket, record);
        self.outstanding += 1;
        true
    }

    /// The outcome of a record staged with [`Front::stage_direct`] came back.
    pub fn direct_done(&mut self) {
        self.outstanding -= 1;
    }

    /// A routed ingest request on connection `idx`: the pipeline decides, the front applies it
    /// (module docs). Returns the append's ticket, if it made one.
    // Every argument is a distinct input of the request; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn ingest(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        idx: usize,
        arrival: Arrival<'_>,
        keep_alive: bool,
        now: Now,
        stage: &mut impl Stage,
        env: &Env<'_>,
    ) -> Option<u64> {
        let decision = self.pipeline(env.node, env.metrics).ingest(arrival, now);
        self.apply(conns, idx, decision, keep_alive, now.mono, stage, env)
    }

    /// Applies the pipeline's output on connection `idx`: an immediate answer, or an append
    /// (module docs). Returns the append's ticket (the caller may keep its own record by it
    /// until [`Stage::settled`]).
    // Every argument is a distinct input of the request; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        idx: usize,
        decision: Output,
        keep_alive: bool,
        now: u64,
        stage: &mut impl Stage,
        env: &Env<'_>,
    ) -> Option<u64> {
        let append = match decision {
            Output::Respond(r) => {
                respond(conns, idx, Route::Webhook, r, keep_alive, env);
                return None;
            }
            Output::Append(a) => a,
        };
        let Some(conn) = conns.get_mut(idx) else {
            // Not reached (the request came on this connection); nothing may leak if it were.
            if let Some(token) = append.claim {
                env.node.guards.settle(token, false);
            }
            let reply = &append.reply;
            env.node.backlog.release_for(&reply.trigger_id, reply.cost);
            return None;
        };
        let ticket = ((idx as u64) << TICKET_SEQ_BITS) | self.next_seq();
        if let Some(token) = append.claim {
            self.claims.insert(ticket, token);
        }
        let held = stage.admitted(ticket);
        conn.slots.push_back(Slot::Pending(PendingIngest {
            ticket,
            held,
            offer: Some(AppendRequest {
                log: 0,
                ticket,
                record: wal::Record::Event(append.record),
            }),
            offer_deadline: append.offer_deadline,
            keep_alive,
            reply: append.reply,
        }));
        if self.offer_waiters.is_empty() {
            if self.offer_conn(conns, idx, now, stage, env) {
                self.offer_waiters.push_back(idx);
            }
        } else if self.offer_waiters.back() != Some(&idx) {
            // FIFO behind connections already waiting for room.
            self.offer_waiters.push_back(idx);
        }
        Some(ticket)
    }

    /// Confirms (`durable`) or releases the dedupe claim of `ticket`, if it has one.
    fn settle_claim(&mut self, env: &Env<'_>, ticket: u64, durable: bool) {
        // Most triggers do not dedupe: no hash per answer then.
        if self.claims.is_empty() {
            return;
        }
        if let Some(token) = self.claims.remove(&ticket) {
            env.node.guards.settle(token, durable);
        }
    }

    /// Offers connection `idx`'s waiting events to the batch, in order; refuses those past
    /// their deadline (`503 wal_busy`). Returns true if some are still waiting for room.
    fn offer_conn(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        idx: usize,
        now: u64,
        stage: &mut impl Stage,
        env: &Env<'_>,
    ) -> bool {
        let Some(conn) = conns.get_mut(idx) else {
            return false;
        };
        let mut still_waiting = false;
        let mut expired: Vec<usize> = Vec::new();
        for (pos, slot) in conn.slots.iter_mut().enumerate() {
            let Slot::Pending(p) = slot else { continue };
            let Some(req) = p.offer.take() else { continue };
            if !self.at_bound() && stage.has_room(req.record.batch_weight()) {
                stage.stage(req.ticket, req.record);
                self.outstanding += 1;
                continue;
            }
            p.offer = Some(req);
            if now >= p.offer_deadline {
                p.offer = None;
                expired.push(pos);
            } else {
                still_waiting = true;
            }
        }
        for pos in expired {
            self.finish_slot(conns, idx, pos, Err(Refusal::WalBusy), stage, env);
        }
        still_waiting
    }

    /// Retries the waiting connections' offers, once each, in order; every connection looked
    /// at is pushed to `touched` (the loop drives it: answers may be ready, reading may resume).
    pub fn retry_offers(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        now: u64,
        stage: &mut impl Stage,
        env: &Env<'_>,
        touched: &mut Vec<usize>,
    ) {
        for _ in 0..self.offer_waiters.len() {
            let Some(idx) = self.offer_waiters.pop_front() else {
                break;
            };
            if self.offer_conn(conns, idx, now, stage, env) {
                self.offer_waiters.push_back(idx);
            }
            touched.push(idx);
        }
    }

    /// Replaces the pending reply at `pos` of connection `idx` with its answer, after settling
    /// its dedupe claim and the caller's record ([`Stage::settled`]).
    fn finish_slot(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        idx: usize,
        pos: usize,
        result: Result<(), Refusal>,
        stage: &mut impl Stage,
        env: &Env<'_>,
    ) {
        let Some(conn) = conns.get_mut(idx) else {
            return;
        };
        let Some(Slot::Pending(p)) = conn.slots.get(pos) else {
            return;
        };
        let (ticket, keep_alive) = (p.ticket, p.keep_alive);
        self.settle_claim(env, ticket, result.is_ok());
        if p.held {
            // A replay: durable → its entry leaves the DLQ (`Stage::settled`), then its claim
            // drops.
            stage.settled(ticket, result.is_ok());
        }
        let body = &mut self.reply_body;
        let head = env.node.complete(p.reply.as_ref(), result, body);
        queue_reply(conns, (idx, pos), head, body, keep_alive, env);
    }

    /// The commit's answer for ingest ticket `ticket`: settles its claim and answers its
    /// pending reply. Returns the connection answered, if it is still open.
    pub fn ingest_done(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        ticket: u64,
        outcome: AppendOutcome,
        stage: &mut impl Stage,
        env: &Env<'_>,
    ) -> Option<usize> {
        self.outstanding -= 1;
        // Settled before the 202 is queued (and even if the connection is gone).
        let durable = matches!(outcome, AppendOutcome::Durable { .. });
        self.settle_claim(env, ticket, durable);
        let orphan = if self.orphans.is_empty() {
            None
        } else {
            self.orphans.remove(&ticket)
        };
        if let Some(Orphan { slot, cost, held }) = orphan {
            // Its connection is gone: nobody to answer, but the backlog (and a replay's DLQ
            // entry) must be right.
            if held {
                stage.settled(ticket, durable);
            }
            if !durable {
                env.node.backlog.release_slot(slot, 1, cost);
            }
            return None;
        }
        let idx = (ticket >> TICKET_SEQ_BITS) as usize;
        let pos = conns.get(idx).and_then(|conn| {
            conn.slots
                .iter()
                .position(|s| matches!(s, Slot::Pending(p) if p.ticket == ticket))
        });
        let pos = pos?;
        let result = if durable {
            Ok(())
        } else {
            Err(Refusal::WalUnavailable)
        };
        self.finish_slot(conns, idx, pos, result, stage, env);
        Some(idx)
    }

    /// The commit holds ingest ticket `ticket` past its bound (replication has not
    /// acknowledged its batch within `ack_timeout`, or the node is fenced): its request is
    /// answered `503 reason` now, and the ticket is settled when the commit's answer comes, as
    /// for a closed connection (`orphans`: claim, backlog, a replay's entry), since its event
    /// is in the log and is delivered once replicated. Returns the connection answered.
    pub fn answer_held(
        &mut self,
        conns: &mut Conns<PendingIngest>,
        ticket: u64,
        reason: Refusal,
        env: &Env<'_>,
    ) -> Option<usize> {
        let idx = (ticket >> TICKET_SEQ_BITS) as usize;
        let conn = conns.get_mut(idx)?;
        let pos = (conn.slots.iter())
            .position(|s| matches!(s, Slot::Pending(p) if p.ticket == ticket))?;
        let Some(Slot::Pending(p)) = conn.slots.get(pos) else {
            return None;
        };
        let orphan = Orphan {
            slot: env.node.backlog.slot(&p.reply.trigger_id),
            cost: p.reply.cost,
            held: p.held,
        };
        self.orphans.insert(ticket, orphan);
        let keep_alive = p.keep_alive;
        let body = &mut self.reply_body;
        let head = env.node.refused_held(p.reply.as_ref(), reason, body);
        queue_reply(conns, (idx, pos), head, body, keep_alive, env);
        Some(idx)
    }

    /// A connection closed with `pending` still queued: an event never staged is settled now
    /// (claim released, reservation given back); a staged one is settled when its answer comes
    /// (module docs).
    pub fn on_close(&mut self, pending: &PendingIngest, stage: &mut impl Stage, node: &Node<'_>) {
        let backlog = node.backlog;
        if pending.offer.is_some() {
            if let Some(token) = self.claims.remove(&pending.ticket) {
                node.guards.settle(token, false);
            }
            if pending.held {
                stage.settled(pending.ticket, false);
            }
            backlog.release_for(&pending.reply.trigger_id, pending.reply.cost);
        } else {
            let slot = backlog.slot(&pending.reply.trigger_id);
            let orphan = Orphan {
                slot,
                cost: pending.reply.cost,
                held: pending.held,
            };
            self.orphans.insert(pending.ticket, orphan);
        }
    }
}

/// Puts the answer `head` + `body` in slot `pos` of connection `idx` (`Retry-After`, when set,
/// after `Content-Type`), counted under the webhook route. The server writes it at the end of
/// the turn (`Server::answer`, within which the core settles a commit).
fn queue_reply(
    conns: &mut Conns<PendingIngest>,
    (idx, pos): (usize, usize),
    head: ReplyHead,
    body: &str,
    keep_alive: bool,
    env: &Env<'_>,
) {
    let Some(conn) = conns.get_mut(idx) else {
        return;
    };
    let headers = [
        ("Content-Type", "application/json"),
        ("Retry-After", head.retry_after.unwrap_or_default()),
    ];
    let n = if head.retry_after.is_some() { 2 } else { 1 };
    let bytes = conn.response_bytes(
        env.date,
        head.status,
        &headers[..n],
        body.as_bytes(),
        keep_alive,
        false,
    );
    let answer = Slot::Ready {
        bytes,
        close: !keep_alive,
    };
    conns.answer(idx, pos, answer);
    env.metrics.incr_http(Route::Webhook, head.status);
}

/// Queues the pipeline's immediate answer `r` on connection `idx` (`Retry-After`, when set,
/// before `Content-Type`), counted under `route`.
pub fn respond(
    conns: &mut Conns<PendingIngest>,
    idx: usize,
    route: Route,
    r: Response,
    keep_alive: bool,
    env: &Env<'_>,
) {
    env.metrics.incr_http(route, r.status);
    let Some(conn) = conns.get_mut(idx) else {
        return;
    };
    let mut digits = [0; 20];
    let ct = ("Content-Type", r.content_type);
    let with_ra;
    let headers: &[(&str, &str)] = match r.retry_after {
        Some(secs) => {
            with_ra = [("Retry-After", http::decimal(&mut digits, secs)), ct];
            &with_ra
        }
        None => std::slice::from_ref(&ct),
    };
    conn.respond(env.date, r.status, headers, &r.body, keep_alive, false);
}

#[cfg(all(test, not(sluice_loom)))]
mod tests;
