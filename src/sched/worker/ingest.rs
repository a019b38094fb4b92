//! The glue between a worker's connections and the ingest pipeline ([`crate::ingest::pipeline`],
//! which makes every decision): feeds it a routed request (or a DLQ replay) with the loop turn's
//! clock, and applies its output — queues an immediate response, or allocates the append's
//! ticket, keeps its dedupe claim, parks the pending reply in the connection's next slot and
//! offers the record to the core's group commit (waiting at most `offer_timeout` for room).
//! Completions from the commit helper settle the claim and turn the slot into the pipeline's
//! answer. Split from `mod.rs` (the event loop, connections, routing) by responsibility.

use super::*;
use crate::dispatch::replay_claims::ReplayClaim;
use crate::ingest::pipeline::{self, Arrival, Now, Output, Pipeline, Response};

/// The node's shared state the pipeline reads (the ingest context's).
pub(super) fn node(shared: &Shared) -> pipeline::Node<'_> {
    shared.ingest().node()
}

impl Worker {
    /// The core's pipeline over the node's shared state (`shared`, a clone of `self.shared`
    /// so that the core's own parts can be borrowed mutably beside it).
    pub(super) fn pipeline<'a>(&'a mut self, shared: &'a Shared) -> Pipeline<'a> {
        Pipeline {
            // The checks of the generation this core runs.
            node: pipeline::Node {
                table: self.view.guards(),
                ..node(shared)
            },
            sources: &mut self.sources,
            ids: &mut self.ids,
            metrics: &self.metrics,
        }
    }

    pub(super) fn handle_ingest(
        &mut self,
        idx: usize,
        head: &http::RequestHead,
        body: Vec<u8>,
        trigger_id: &str,
        source: &str,
        keep_alive: bool,
    ) {
        // The loop turn's clock reading (one `Instant::now()` per turn, not per request).
        let now = Now::wall(self.turn_now);
        let shared = Arc::clone(&self.shared);
        let arrival = Arrival {
            head,
            body,
            trigger_id,
            source,
        };
        let decision = self.pipeline(&shared).ingest(arrival, now);
        self.apply(idx, decision, keep_alive, now.mono, None);
    }

    /// Queues the pipeline's immediate answer (`Retry-After`, when set, before `Content-Type`).
    pub(super) fn respond(&mut self, idx: usize, route: Route, r: Response, keep_alive: bool) {
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
        self.push_ready(idx, route, r.status, headers, &r.body, keep_alive, false);
    }

    /// Applies the pipeline's output on connection `idx` (module docs). `replay`: a single
    /// replay's claim, held by the staged event's ticket until its append's answer (dropped at
    /// once with a refusal).
    pub(super) fn apply(
        &mut self,
        idx: usize,
        decision: Output,
        keep_alive: bool,
        now: u64,
        replay: Option<ReplayClaim>,
    ) {
        let append = match decision {
            Output::Respond(r) => return self.respond(idx, Route::Webhook, r, keep_alive),
            Output::Append(a) => a,
        };
        self.seq = (self.seq + 1) & ((1 << TICKET_SEQ_BITS) - 1);
        let ticket = ((idx as u64) << TICKET_SEQ_BITS) | self.seq;
        if let Some(token) = append.claim {
            self.claims.insert(ticket, token);
        }
        if let Some(claim) = replay {
            self.replays.single.insert(ticket, claim);
        }
        let pending = PendingIngest {
            ticket,
            offer: Some(AppendRequest {
                log: 0,
                ticket,
                record: wal::Record::Event(append.record),
            }),
            offer_deadline: append.offer_deadline,
            keep_alive,
            reply: append.reply,
        };
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.slots.push_back(Slot::Pending(pending));
        if self.offer_waiters.is_empty() {
            if self.offer_conn(idx, now) {
                self.offer_waiters.push_back(idx);
            }
        } else if self.offer_waiters.back() != Some(&idx) {
            // FIFO behind connections already waiting for ring space.
            self.offer_waiters.push_back(idx);
        }
    }

    /// Confirms (`durable`) or releases the dedupe claim of `ticket`, if it has one.
    pub(super) fn settle_claim(&mut self, ticket: u64, durable: bool) {
        if let Some(token) = self.claims.remove(&ticket) {
            self.shared.ingest().guards.settle(token, durable);
        }
    }

    /// Offers the connection's waiting events to the WAL ring, in order. Returns true if some
    /// are still waiting for room.
    pub(super) fn offer_conn(&mut self, idx: usize, now: u64) -> bool {
        let Some(conn) = self.conns.get_mut(idx) else {
            return false;
        };
        let mut still_waiting = false;
        let mut expired: Vec<usize> = Vec::new();
        for (pos, slot) in conn.slots.iter_mut().enumerate() {
            let Slot::Pending(p) = slot else { continue };
            let Some(req) = p.offer.take() else { continue };
            if self.outstanding < self.max_outstanding
                && self.committer.has_room(req.record.batch_weight())
            {
                self.committer.push_ingest(req.log, req.ticket, req.record);
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
            self.finish_slot(idx, pos, Err(Refusal::WalBusy));
        }
        still_waiting
    }

    /// Replaces the ingest slot at `pos` with its response.
    pub(super) fn finish_slot(&mut self, idx: usize, pos: usize, result: Result<(), Refusal>) {
        let Some(conn) = self.conns.get(idx) else {
            return;
        };
        let Some(Slot::Pending(p)) = conn.slots.get(pos) else {
            return;
        };
        let ticket = p.ticket;
        if let Some(token) = self.claims.remove(&ticket) {
            self.shared.ingest().guards.settle(token, result.is_ok());
        }
        // A replay: durable → the entry leaves the DLQ (a failure to remove it only means a
        // later replay would deliver again: at least once), then its claim drops.
        self.settle_single_replay(ticket, result.is_ok());
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        let Some(Slot::Pending(p)) = conn.slots.get(pos) else {
            return;
        };
        let keep_alive = p.keep_alive;
        let reply = p.reply.as_ref();
        let body = &mut self.reply_body;
        let pipeline::ReplyHead {
            status,
            retry_after,
        } = node(&self.shared).complete(reply, result, body);
        let headers = [
            ("Date", &*self.date),
            ("Content-Type", "application/json"),
            ("Retry-After", retry_after.unwrap_or_default()),
        ];
        let n = if retry_after.is_some() { 3 } else { 2 };
        // `write_response` reserves the exact size: one allocation.
        let mut bytes = Vec::new();
        let body = body.as_bytes();
        http::write_response(&mut bytes, status, &headers[..n], body, keep_alive, false);
        conn.fill_slot(
            pos,
            Slot::Ready {
                bytes,
                close: !keep_alive,
            },
        );
        self.metrics.incr_http(Route::Webhook, status);
    }

    pub(super) fn retry_offers(&mut self) {
        let now = self.now();
        let n = self.offer_waiters.len();
        for _ in 0..n {
            let Some(idx) = self.offer_waiters.pop_front() else {
                break;
            };
            if self.offer_conn(idx, now) {
                self.offer_waiters.push_back(idx);
            }
            self.drive(idx);
        }
    }

    /// The commit helper's answer for ingest ticket `ticket`: settles its dedupe claim and
    /// answers its slot. Returns the connection answered, if it is still open.
    pub(super) fn ingest_done(&mut self, ticket: u64, outcome: AppendOutcome) -> Option<usize> {
        self.outstanding -= 1;
        // Settled before the 202 is queued (and even if the connection is gone).
        let durable = matches!(outcome, AppendOutcome::Durable { .. });
        self.settle_claim(ticket, durable);
        if let Some((slot, cost)) = self.orphans.remove(&ticket) {
            // Its connection is gone: nobody to answer, but the backlog (and a replay's DLQ
            // entry) must be right.
            self.settle_single_replay(ticket, durable);
            if !durable {
                self.shared.ingest().backlog.release_slot(slot, 1, cost);
            }
            return None;
        }
        let idx = (ticket >> TICKET_SEQ_BITS) as usize;
        let conn = self.conns.get_mut(idx)?;
        let pos = conn
            .slots
            .iter()
            .position(|s| matches!(s, Slot::Pending(p) if p.ticket == ticket))?;
        let result = if durable {
            Ok(())
        } else {
            Err(Refusal::WalUnavailable)
        };
        self.finish_slot(idx, pos, result);
        Some(idx)
    }
}
