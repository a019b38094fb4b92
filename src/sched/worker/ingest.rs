//! The ingest path of a worker: admission (signatures, buckets, dedupe, the durable backlog),
//! offering events to the WAL ring (waiting at most `offer_timeout` for room), completions from
//! the writer, and the `202`/`503` answers — plus the online DLQ replay, which takes the same
//! path. Split from `mod.rs` (the event loop, connections, routing) by responsibility.

use super::*;

impl Worker {
    pub(super) fn refuse(
        &mut self,
        idx: usize,
        reason: Refusal,
        retry_after: u64,
        keep_alive: bool,
    ) {
        let body = refused_body(reason, retry_after);
        let ra = retry_after.to_string();
        self.push_ready(
            idx,
            Route::Webhook,
            503,
            &[("Retry-After", &ra), ("Content-Type", "application/json")],
            body.as_bytes(),
            keep_alive,
            false,
        );
    }

    pub(super) fn handle_ingest(
        &mut self,
        idx: usize,
        req: Request,
        trigger_id: String,
        source: String,
        keep_alive: bool,
    ) {
        let Request { head, body } = req;
        let shared = Arc::clone(&self.shared);
        let guard = shared.guards.get(&trigger_id);
        let stored = &shared.config.ingest.stored_headers;
        let mut headers: Vec<(String, Vec<u8>)> = head
            .headers()
            .filter(|(n, _)| *n != DEDUPE_KEY_HEADER && stored.iter().any(|s| s == n))
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect();
        // The dedupe key is stored too (config keeps a slot free for it).
        let key_slot = usize::from(guard.is_some_and(|g| g.dedupe.is_some()));
        if headers.len() + key_slot > wal::MAX_HEADERS
            || headers
                .iter()
                .any(|(_, v)| v.len() > wal::MAX_HEADER_VALUE_BYTES)
        {
            // The WAL keeps at most 32 stored headers of at most 8 KiB each: the sender's
            // fault, refused before any token is spent, never a (retryable) 503.
            let text = format!(
                "stored headers exceed {} fields or {} bytes per value\n",
                wal::MAX_HEADERS,
                wal::MAX_HEADER_VALUE_BYTES
            );
            let headers = [("Content-Type", http::TEXT_PLAIN)];
            return self.push_ready(
                idx,
                Route::Webhook,
                431,
                &headers,
                text.as_bytes(),
                keep_alive,
                false,
            );
        }
        let received_at_ms = unix_millis();
        if let Some(g) = guard {
            if let Err(f) = shared.guards.verify(g, &head, &body, received_at_ms / 1000) {
                let body = verify::unauthorized_body(f.as_str());
                let h = [("Content-Type", "application/json")];
                return self.push_ready(
                    idx,
                    Route::Webhook,
                    401,
                    &h,
                    body.as_bytes(),
                    keep_alive,
                    false,
                );
            }
            // Slack's `url_verification`: answered, not stored (`TriggerGuard::handshake`).
            if let Some(answer) = g.handshake(&body) {
                let h = [("Content-Type", "application/json")];
                let answer = answer.as_bytes();
                return self.push_ready(idx, Route::Webhook, 200, &h, answer, keep_alive, false);
            }
        }
        // The loop turn's clock reading (one `Instant::now()` per turn, not per request).
        let now = self.turn_now;
        let entry = self.sources.get_for(&trigger_id, &source);
        if let Err(refusal) = self.shared.admission.try_admit(entry.bucket(), now) {
            self.metrics.incr_ingest(false);
            entry.count_refusal(Refusal::IngestSaturated);
            let emission = entry.bucket().params().emission_nanos();
            let secs = (self.shared.returns).bucket(now, entry.returns(), &refusal, emission);
            self.refuse(idx, Refusal::IngestSaturated, secs, keep_alive);
            return;
        }
        self.metrics.incr_ingest(true);
        let event_id = self.ids.next(received_at_ms);
        let claim = match guard {
            Some(g) => {
                let at = received_at_ms / 1000;
                match self.claim_dedupe(
                    idx,
                    g,
                    &trigger_id,
                    &head,
                    &body,
                    &event_id,
                    at,
                    keep_alive,
                ) {
                    Some(claim) => claim,
                    None => return, // answered: duplicate or in flight
                }
            }
            None => None,
        };
        self.seq = (self.seq + 1) & ((1 << TICKET_SEQ_BITS) - 1);
        let ticket = ((idx as u64) << TICKET_SEQ_BITS) | self.seq;
        if let Some((token, key)) = claim {
            self.claims.insert(ticket, token);
            headers.push((DEDUPE_KEY_HEADER.to_string(), key.into_bytes()));
        }
        let event = EventRecord {
            event_id,
            trigger_id,
            source,
            received_at_ms,
            headers,
            body,
            replay_of: None,
        };
        self.enqueue(idx, ticket, event, entry, keep_alive, now);
    }

    /// Reserves the event's share of the durable backlog and offers it to the WAL; its answer
    /// (`202` once durable, or a refusal) takes the connection's next slot.
    pub(super) fn enqueue(
        &mut self,
        idx: usize,
        ticket: u64,
        event: EventRecord,
        entry: std::sync::Arc<crate::ingest::sources::SourceEntry>,
        keep_alive: bool,
        now: u64,
    ) {
        // The durable backlog bound: reserved now, released by the pump once the event is
        // done, or when the append fails.
        let cost = wal::event_cost(&event);
        let backlog = &self.shared.backlog;
        let refusal = if backlog.wal_full(self.shared.config.wal.segment_bytes) {
            Some((Refusal::WalFull, backlog.retry_after_secs()))
        } else {
            // Past the trigger's share with the pool in use: `Retry-After` from the return
            // schedule, fed by this trigger's own drain rate.
            backlog.reserve_for(&event.trigger_id, cost).err().map(|_| {
                let rate = backlog.drain_rate_of(&event.trigger_id);
                let ra = self.shared.returns.queue_full(now, entry.returns(), rate);
                (Refusal::QueueFull, ra)
            })
        };
        if let Some((reason, retry_after)) = refusal {
            backlog.count_refusal(&event.trigger_id, reason);
            self.settle_claim(ticket, false);
            entry.count_refusal(reason);
            self.refuse(idx, reason, retry_after, keep_alive);
            return;
        }
        let (event_id, trigger_id) = (event.event_id.clone(), event.trigger_id.clone());
        let replay_of = event.replay_of.clone();
        let request = AppendRequest {
            log: 0,
            ticket,
            record: wal::Record::Event(event),
        };
        let pending = PendingIngest {
            ticket,
            offer: Some(request),
            offer_deadline: now + self.shared.config.ingest.offer_timeout.as_nanos() as u64,
            event_id,
            trigger_id,
            source: entry,
            keep_alive,
            cost,
            replay_of,
        };
        let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        conn.slots.push_back(Slot::Ingest(pending));
        if self.offer_waiters.is_empty() {
            if self.offer_conn(idx, now) {
                self.offer_waiters.push_back(idx);
            }
        } else if self.offer_waiters.back() != Some(&idx) {
            // FIFO behind connections already waiting for ring space.
            self.offer_waiters.push_back(idx);
        }
    }

    /// `POST /admin/dlq/{id}/replay`: a new event (new id, `replay_of = id`) with the
    /// dead-lettered event's trigger, source, headers and body goes through the normal durable
    /// path; once it is durable the DLQ entry is removed and the answer is `202`. Two concurrent
    /// replays of one entry both deliver (at least once, as everywhere).
    pub(super) fn replay_dead_letter(&mut self, idx: usize, id: &str, keep_alive: bool) {
        let found = self.shared.dlq.get(id);
        let entry = match found {
            Ok(e) => e,
            Err(e) => {
                use crate::dispatch::dlq::DlqError;
                let (status, reason) = match e {
                    DlqError::NotFound { .. } => (404, "not_found"),
                    DlqError::InvalidId { .. } => (400, "invalid_id"),
                    _ => (500, "dlq_unreadable"),
                };
                let body = format!("{{\"status\":\"error\",\"reason\":\"{reason}\"}}");
                let h = [("Content-Type", "application/json")];
                return self.push_ready(
                    idx,
                    Route::Admin,
                    status,
                    &h,
                    body.as_bytes(),
                    keep_alive,
                    false,
                );
            }
        };
        let now = self.now();
        let received_at_ms = unix_millis();
        let source = (self.sources).get_for(&entry.event.trigger_id, &entry.event.source);
        let event = EventRecord {
            event_id: self.ids.next(received_at_ms),
            received_at_ms,
            replay_of: Some(entry.id.clone()),
            ..entry.event
        };
        self.seq = (self.seq + 1) & ((1 << TICKET_SEQ_BITS) - 1);
        let ticket = ((idx as u64) << TICKET_SEQ_BITS) | self.seq;
        self.enqueue(idx, ticket, event, source, keep_alive, now);
    }

    /// The dedupe step of `handle_ingest`. `Some(None)`: no dedupe; `Some(Some(claim))`: the key
    /// is claimed (stored with the event); `None`: answered here (`200 duplicate_dropped` or
    /// `503 duplicate_in_flight`), nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim_dedupe(
        &mut self,
        idx: usize,
        g: &TriggerGuard,
        trigger_id: &str,
        head: &http::RequestHead,
        body: &[u8],
        event_id: &str,
        now_secs: u64,
        keep_alive: bool,
    ) -> Option<Option<(ClaimToken, String)>> {
        let Some(rule) = g.dedupe else {
            return Some(None);
        };
        let key = dedupe::dedupe_key(rule.source, head, body);
        let guards = &self.shared.guards;
        let json = ("Content-Type", "application/json");
        match guards.claim(g, rule, trigger_id, &key, event_id, now_secs) {
            Claim::New(token) => return Some(Some((token, key))),
            Claim::Duplicate(original) => {
                let text = dedupe::duplicate_body(trigger_id, &original);
                self.push_ready(
                    idx,
                    Route::Webhook,
                    200,
                    &[json],
                    text.as_bytes(),
                    keep_alive,
                    false,
                );
            }
            Claim::InFlight => {
                let h = [("Retry-After", "1"), json];
                let text = dedupe::IN_FLIGHT_BODY.as_bytes();
                self.push_ready(idx, Route::Webhook, 503, &h, text, keep_alive, false);
            }
        }
        None
    }

    /// Confirms (`durable`) or releases the dedupe claim of `ticket`, if it has one.
    pub(super) fn settle_claim(&mut self, ticket: u64, durable: bool) {
        if let Some(token) = self.claims.remove(&ticket) {
            self.shared.guards.settle(token, durable);
        }
    }

    /// Offers the connection's waiting events to the WAL ring, in order. Returns true if some
    /// are still waiting for room.
    pub(super) fn offer_conn(&mut self, idx: usize, now: u64) -> bool {
        let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return false;
        };
        let mut still_waiting = false;
        let mut expired: Vec<usize> = Vec::new();
        for (pos, slot) in conn.slots.iter_mut().enumerate() {
            let Slot::Ingest(p) = slot else { continue };
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
        let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        let Some(Slot::Ingest(p)) = conn.slots.get(pos) else {
            return;
        };
        if let Some(token) = self.claims.remove(&p.ticket) {
            self.shared.guards.settle(token, result.is_ok());
        }
        let keep_alive = p.keep_alive;
        let (status, body, retry_after) = match result {
            Ok(()) => {
                p.source.count_accepted();
                let mut body = accepted_body(&p.event_id, &p.trigger_id);
                if let Some(of) = &p.replay_of {
                    // The replay is durable: the entry leaves the DLQ (a failure to unlink only
                    // means a second replay would deliver again: at least once).
                    if let Err(e) = self.shared.dlq.remove(of) {
                        eprintln!("sluice: replayed {of} but could not remove its DLQ entry: {e}");
                    }
                    body.pop();
                    body.push_str(",\"replay_of\":");
                    crate::ingest::respond::json_str(&mut body, of);
                    body.push('}');
                }
                (202, body, None)
            }
            Err(reason) => {
                p.source.count_refusal(reason);
                self.shared.backlog.count_refusal(&p.trigger_id, reason);
                self.shared.backlog.release_for(&p.trigger_id, p.cost);
                (503, refused_body(reason, 1), Some("1"))
            }
        };
        let mut headers: Vec<(&str, &str)> =
            vec![("Date", &self.date), ("Content-Type", "application/json")];
        if let Some(ra) = retry_after {
            headers.push(("Retry-After", ra));
        }
        let mut bytes = Vec::with_capacity(160 + body.len());
        http::write_response(
            &mut bytes,
            status,
            &headers,
            body.as_bytes(),
            keep_alive,
            false,
        );
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
            // Its connection is gone: nobody to answer, but the backlog must be right.
            if !durable {
                self.shared.backlog.release_slot(slot, 1, cost);
            }
            return None;
        }
        let idx = (ticket >> TICKET_SEQ_BITS) as usize;
        let conn = self.conns.get_mut(idx).and_then(Option::as_mut)?;
        let pos = conn
            .slots
            .iter()
            .position(|s| matches!(s, Slot::Ingest(p) if p.ticket == ticket))?;
        let result = if durable {
            Ok(())
        } else {
            Err(Refusal::WalUnavailable)
        };
        self.finish_slot(idx, pos, result);
        Some(idx)
    }
}
