//! The ingest sequence as a sans-IO pipeline: a parsed request in; out either an **append** (the
//! event record for the core's log, plus the pending reply that answers it once the record is
//! durable) or an immediate **response**. No sockets, no loop state, no clock reads: the caller
//! (a core's ingest front, [`crate::ingest::front`]) passes the loop turn's clock readings in and
//! applies the output (queues the response, or stages the record in its group commit and keeps
//! the pending reply in the connection's next slot).
//!
//! The sequence ([`Pipeline::ingest`]), each step's refusal in brackets:
//!
//! 1. stored-header bounds (`431`: the WAL keeps at most [`wal::MAX_HEADERS`] headers of
//!    [`wal::MAX_HEADER_VALUE_BYTES`]; the sender's fault, before any token is spent);
//! 2. signature, if the trigger verifies (`401`), then a provider handshake (`200`, not stored);
//! 3. token buckets, global and per source, all or nothing (`503 ingest_saturated`, its
//!    `Retry-After` from the return schedule);
//! 4. dedupe claim, if the trigger dedupes (`200 duplicate_dropped`, `503 duplicate_in_flight`);
//! 5. the disk bound (`503 wal_full`) and the durable-backlog reservation in the trigger's share
//!    or the pool (`503 queue_full`, `Retry-After` from the trigger's drain rate); a refusal
//!    here releases the dedupe claim of step 4.
//!
//! Before all of it, while the head waits for its body, [`Pipeline::gate_body`] reserves the
//! body in the process-wide in-flight budget (`503 body_budget`, unread, when it cannot).
//!
//! Why this order: `ingest/mod.rs`. A DLQ replay ([`Pipeline::replay`]) takes step 5 only. The
//! pending reply is settled by [`Node::complete`]: `202` (with `replay_of` for a replay) once
//! durable, or a `503` that gives the backlog reservation back.
//!
//! Time: `now.mono` is the loop turn's reading of the injected clock (token buckets, return
//! schedule, offer deadline); `now.unix_ms` is the wall-clock receive time stored in the record
//! (event id, signature tolerance, dedupe window), read once per request by the caller.

use std::sync::Arc;

use crate::ingest::backlog::Backlog;
use crate::ingest::bucket::Admission;
use crate::ingest::dedupe::{self, Claim, ClaimToken, DEDUPE_KEY_HEADER};
use crate::ingest::event_id::{EventId, EventIdGen};
use crate::ingest::respond::{json_str, push_accepted, push_refused_body, refused_body, Refusal};
use crate::ingest::schedule::ReturnSchedule;
use crate::ingest::short_str::ShortStr;
use crate::ingest::sources::{SourceCache, SourceEntry};
use crate::ingest::spec::IngestSpec;
use crate::ingest::{verify, GuardTable, Guards, TriggerGuard};
use crate::metrics::CoreMetrics;
use crate::net::budget::{Reservation, BODY_BUDGET_RETRY_AFTER_SECS};
use crate::net::http::{self, RequestHead};
use crate::replication::state::{Refuse, ReplicationState};
use crate::wal::{self, EventRecord};

const JSON: &str = "application/json";

/// The clock readings one decision uses (module docs, "Time").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// The loop turn's reading of the injected clock, nanoseconds.
    pub mono: u64,
    /// Wall-clock receive time, Unix milliseconds (what the event stores).
    pub unix_ms: u64,
    /// The same reading in Unix microseconds (the event id's order within a millisecond).
    pub unix_us: u64,
}

impl Now {
    /// `mono` and one reading of the wall clock.
    pub fn wall(mono: u64) -> Now {
        let unix_us = crate::sync::clock::unix_micros();
        Now {
            mono,
            unix_ms: unix_us / 1000,
            unix_us,
        }
    }
}

/// What the pipeline reads of the node's shared state (borrowed for one call).
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// `[ingest]`: the stored headers and the offer timeout.
    pub ingest: &'a IngestSpec,
    /// `wal.segment_bytes`: the disk bound refuses once one more segment would pass it.
    pub segment_bytes: u64,
    pub guards: &'a Guards,
    /// The checks of the generation the core runs (`ops::reload`).
    pub table: &'a GuardTable,
    pub admission: &'a Admission,
    pub returns: &'a ReturnSchedule,
    pub backlog: &'a Backlog,
    /// `[replication]`'s state when it is on: new events are refused while it refuses.
    pub replication: Option<&'a ReplicationState>,
}

/// One core's pipeline: the node's shared state plus the core's own source cache, event-id
/// generator and metrics shard (borrowed from the loop for one call).
#[derive(Debug)]
pub struct Pipeline<'a> {
    pub node: Node<'a>,
    pub sources: &'a mut SourceCache,
    pub ids: &'a mut EventIdGen,
    pub metrics: &'a CoreMetrics,
}

/// A routed ingest request: `POST` to trigger `trigger_id` from `source`.
/// Borrowed from the loop (the head goes back to its parser for reuse); the strings are copied
/// into the event only once it is admitted, so a refusal copies nothing.
#[derive(Debug)]
pub struct Arrival<'r> {
    pub head: &'r RequestHead,
    pub body: Vec<u8>,
    pub trigger_id: &'r str,
    pub source: &'r str,
}

/// The pipeline's output.
// An `Append` is moved once, straight into the connection's pending slot: boxing it to shrink
// the enum would put back an allocation per admitted event (issue 28 item 3).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Output {
    /// Answer now; nothing is appended.
    Respond(Response),
    /// Append the record; answer once it is durable (or not).
    Append(Append),
}

/// An immediate answer. Rendered with `Retry-After` (when set) before `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Seconds; `Some` exactly for the retryable refusals.
    pub retry_after: Option<u64>,
    pub body: Vec<u8>,
    /// The refusal reason, for a `503` from the durable queue or the buckets.
    pub refusal: Option<Refusal>,
}

/// An admitted event: the record to append and what its answer needs.
#[derive(Debug)]
pub struct Append {
    pub record: EventRecord,
    pub reply: PendingReply,
    /// The dedupe claim to settle when the append completes (confirmed if durable).
    pub claim: Option<ClaimToken>,
    /// When waiting for room in the core's group commit stops (`503 wal_busy`), clock nanos.
    pub offer_deadline: u64,
}

/// What answers an appended event once its outcome is known ([`Node::complete`]). Its id and
/// trigger are inline copies (no allocation per request; the record has its own).
#[derive(Debug)]
pub struct PendingReply {
    pub event_id: EventId,
    pub trigger_id: ShortStr,
    /// The event's source (per-source accounting).
    pub source: Arc<SourceEntry>,
    /// The backlog reservation held for the event (given back if it fails).
    pub cost: u64,
    /// For a DLQ replay: the entry the new event replays.
    pub replay_of: Option<String>,
}

/// The head of a pending reply's answer: `202`, or `503` with `Retry-After: 1` (its JSON body is
/// written into the caller's buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHead {
    pub status: u16,
    pub retry_after: Option<&'static str>,
}

impl Response {
    fn json(status: u16, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type: JSON,
            retry_after: None,
            body: body.into(),
            refusal: None,
        }
    }

    /// `503 {"status":"refused","reason":…,"retry_after":N}` + `Retry-After: N`.
    pub fn refused(reason: Refusal, retry_after: u64) -> Response {
        Response {
            retry_after: Some(retry_after),
            refusal: Some(reason),
            ..Response::json(503, refused_body(reason, retry_after))
        }
    }
}

impl Pipeline<'_> {
    /// Runs the ingest sequence (module docs) on one request.
    pub fn ingest(&mut self, arrival: Arrival<'_>, now: Now) -> Output {
        let Arrival {
            head,
            body,
            trigger_id,
            source,
        } = arrival;
        let node = self.node;
        let guard = node.table.get(trigger_id);
        let Some(stored) = stored_headers_fit(node.ingest, head, guard) else {
            let text = format!(
                "stored headers exceed {} fields or {} bytes per value\n",
                wal::MAX_HEADERS,
                wal::MAX_HEADER_VALUE_BYTES
            );
            return Output::Respond(Response {
                content_type: http::TEXT_PLAIN,
                ..Response::json(431, text)
            });
        };
        if let Some(g) = guard {
            if let Err(f) = node.guards.verify(g, head, &body, now.unix_ms / 1000) {
                let text = verify::unauthorized_body(f.as_str());
                return Output::Respond(Response::json(401, text));
            }
            // Slack's `url_verification`: answered, not stored (`TriggerGuard::handshake`).
            if let Some(answer) = g.handshake(&body) {
                return Output::Respond(Response::json(200, answer));
            }
        }
        let entry = self.sources.get_for(trigger_id, source);
        if let Err(exhausted) = node.admission.try_admit(entry.bucket(), now.mono) {
            self.metrics.incr_ingest(false);
            entry.count_refusal(Refusal::IngestSaturated);
            let emission = entry.bucket().params().emission_nanos();
            let secs = (node.returns).bucket(now.mono, entry.returns(), &exhausted, emission);
            return Output::Respond(Response::refused(Refusal::IngestSaturated, secs));
        }
        self.metrics.incr_ingest(true);
        let id = self.ids.next_id_us(now.unix_us);
        let claim = match guard {
            Some(g) => match claim_dedupe(node.guards, g, trigger_id, head, &body, &id, now) {
                Ok(claim) => claim,
                Err(answered) => return Output::Respond(answered),
            },
            None => None,
        };
        let body_json = node.body_json(trigger_id, &body);
        // Built in a finished record's storage when this core has one (`wal::shelf`).
        let mut event = wal::shelf::build(wal::shelf::Parts {
            event_id: id.as_str(),
            trigger_id,
            source,
            received_at_ms: now.unix_ms,
            headers: stored_headers(node.ingest, head, stored),
            body,
            body_json,
        });
        let claim = claim.map(|(token, key)| {
            event
                .headers
                .push((DEDUPE_KEY_HEADER.to_string(), key.into_bytes()));
            token
        });
        node.reserve(id, event, entry, claim, now.mono)
    }

    /// The body gate, before a body is read (the loop calls it when a head with a body arrives,
    /// and after each read into a chunked body): the connection's `share` of the process-wide
    /// in-flight body budget grows to `want` bytes, or the request is refused at once, unread:
    /// `503 body_budget` + `Retry-After`, counted for its source when `ingest_source` (asked
    /// only on a refusal) says the head is routed to ingest.
    pub fn gate_body<'s>(
        &mut self,
        share: &mut Reservation,
        want: u64,
        ingest_source: impl FnOnce() -> Option<&'s str>,
    ) -> Result<(), Response> {
        if share.grow_to(want) {
            return Ok(());
        }
        if let Some(source) = ingest_source() {
            self.sources.get(source).count_refusal(Refusal::BodyBudget);
        }
        let retry_after = BODY_BUDGET_RETRY_AFTER_SECS;
        Err(Response::refused(Refusal::BodyBudget, retry_after))
    }

    /// A DLQ replay: a new event (new id, received now, `replay_of` = the entry) with the
    /// dead-lettered event's trigger, source, headers and body (and its JSON decision, decided
    /// now if it has none and the trigger batches); the backlog step only.
    pub fn replay(&mut self, event: EventRecord, entry_id: String, now: Now) -> Output {
        let source = self.sources.get_for(&event.trigger_id, &event.source);
        let id = self.ids.next_id_us(now.unix_us);
        let body_json = match event.body_json {
            wal::BodyJson::Undecided => self.node.body_json(&event.trigger_id, &event.body),
            decided => decided,
        };
        let event = EventRecord {
            event_id: id.as_str().to_owned(),
            received_at_ms: now.unix_ms,
            replay_of: Some(entry_id),
            body_json,
            ..event
        };
        self.node.reserve(id, event, source, None, now.mono)
    }
}

/// `Retry-After` of a refusal while replication is unavailable or fenced: about one
/// `ack_timeout`'s retry (a fenced node stays fenced; the balancer's readiness check moves
/// senders away from it).
pub const REPLICATION_RETRY_AFTER_SECS: u64 = 2;

/// The ingest refusal for replication's reason.
pub fn replication_refusal(r: Refuse) -> Refusal {
    match r {
        Refuse::Unavailable => Refusal::ReplicationUnavailable,
        Refuse::Fenced => Refusal::ReplicationFenced,
    }
}

impl Node<'_> {
    /// Whether `body` is one JSON value, decided only when `trigger_id`'s events can reach a
    /// batch in the generation the core runs (`GuardTable::batches`): a parse per batched
    /// event, none for the others. `Undecided` otherwise; a batch parses such a body itself,
    /// so a reload that adds batching later needs nothing of the events already logged.
    fn body_json(&self, trigger_id: &str, body: &[u8]) -> wal::BodyJson {
        if self.table.batches(trigger_id) {
            wal::BodyJson::decide(body)
        } else {
            wal::BodyJson::Undecided
        }
    }

    /// Step 5: the disk bound and the backlog reservation (released by the pump once the
    /// event is done, or by [`Node::complete`] if the append fails).
    fn reserve(
        &self,
        id: EventId,
        event: EventRecord,
        source: Arc<SourceEntry>,
        claim: Option<ClaimToken>,
        now: u64,
    ) -> Output {
        let cost = wal::event_cost(&event);
        let backlog = self.backlog;
        let refusal = if let Some(r) = self.replication.and_then(ReplicationState::refusal) {
            Some((replication_refusal(r), REPLICATION_RETRY_AFTER_SECS))
        } else if backlog.wal_full(self.segment_bytes) {
            Some((Refusal::WalFull, backlog.retry_after_secs()))
        } else {
            // Past the trigger's share with the pool in use: `Retry-After` from the return
            // schedule, fed by this trigger's own drain rate.
            let absorbs = self.table.absorbs(&event.trigger_id);
            let reserved = backlog.reserve_as(&event.trigger_id, cost, absorbs);
            reserved.err().map(|_| {
                let rate = backlog.drain_rate_of(&event.trigger_id);
                let ra = self.returns.queue_full(now, source.returns(), rate);
                (Refusal::QueueFull, ra)
            })
        };
        if let Some((reason, retry_after)) = refusal {
            backlog.count_refusal(&event.trigger_id, reason);
            if let Some(token) = claim {
                self.guards.settle(token, false);
            }
            source.count_refusal(reason);
            return Output::Respond(Response::refused(reason, retry_after));
        }
        let reply = PendingReply {
            event_id: id,
            trigger_id: ShortStr::new(&event.trigger_id),
            source,
            cost,
            replay_of: event.replay_of.clone(),
        };
        Output::Append(Append {
            record: event,
            reply,
            claim,
            offer_deadline: now + self.ingest.offer_timeout.as_nanos() as u64,
        })
    }

    /// Settles a pending reply: `Ok` (durable) → `202` with the event id (and `replay_of`);
    /// `Err(reason)` → `503` + `Retry-After: 1`, the backlog reservation given back. Counted
    /// per source and, for refusals, per trigger. The dedupe claim is the caller's (it is
    /// settled even when no reply is owed).
    pub fn complete(
        &self,
        reply: ReplyRef<'_>,
        result: Result<(), Refusal>,
        body: &mut String,
    ) -> ReplyHead {
        body.clear();
        match result {
            Ok(()) => {
                reply.source.count_accepted();
                push_accepted(body, reply.event_id, reply.trigger_id);
                if let Some(of) = reply.replay_of {
                    body.pop();
                    body.push_str(",\"replay_of\":");
                    json_str(body, of);
                    body.push('}');
                }
                ReplyHead {
                    status: 202,
                    retry_after: None,
                }
            }
            Err(reason) => {
                self.backlog.release_for(reply.trigger_id, reply.cost);
                self.refused_held(reply, reason, body)
            }
        }
    }

    /// The `503` for a request whose event stays in the log although it is refused now: its
    /// batch waits for replication past `ack_timeout` (`reason`: `replication_unavailable` or
    /// `replication_fenced`). The refusal is counted; the backlog reservation stays, since the
    /// event is delivered once its batch is replicated (README "Several nodes").
    pub fn refused_held(
        &self,
        reply: ReplyRef<'_>,
        reason: Refusal,
        body: &mut String,
    ) -> ReplyHead {
        body.clear();
        reply.source.count_refusal(reason);
        self.backlog.count_refusal(reply.trigger_id, reason);
        let (secs, header) = match reason {
            Refusal::ReplicationUnavailable | Refusal::ReplicationFenced => {
                (REPLICATION_RETRY_AFTER_SECS, "2")
            }
            _ => (1, "1"),
        };
        push_refused_body(body, reason, secs);
        ReplyHead {
            status: 503,
            retry_after: Some(header),
        }
    }
}

/// A borrowed view of a pending reply (the loop keeps its fields in the connection's slot).
#[derive(Debug, Clone, Copy)]
pub struct ReplyRef<'a> {
    pub event_id: &'a EventId,
    pub trigger_id: &'a str,
    pub source: &'a SourceEntry,
    pub cost: u64,
    pub replay_of: Option<&'a str>,
}

impl PendingReply {
    pub fn as_ref(&self) -> ReplyRef<'_> {
        ReplyRef {
            event_id: &self.event_id,
            trigger_id: self.trigger_id.as_str(),
            source: &self.source,
            cost: self.cost,
            replay_of: self.replay_of.as_deref(),
        }
    }
}

/// The configured headers of `head` to store with its event, with their positions in the head.
fn to_store<'h>(
    ingest: &'h IngestSpec,
    head: &'h RequestHead,
) -> impl Iterator<Item = (usize, (&'h str, &'h [u8]))> + 'h {
    let stored = &ingest.stored_headers;
    head.headers()
        .enumerate()
        .filter(move |(_, (n, _))| *n != DEDUPE_KEY_HEADER && stored.iter().any(|s| s == n))
}

/// Which of a head's headers are stored ([`stored_headers_fit`]): their positions (bit `i` =
/// the head's header `i`) when all are among the first 64, so the copy ([`stored_headers`])
/// does not compare names a second time.
#[derive(Debug, Clone, Copy)]
struct Stored {
    positions: Option<u64>,
}

/// Step 1: whether the headers to store fit the WAL's bounds (room for one more kept for the dedupe
/// key when the trigger dedupes), checked before anything is copied: `Some` (where they are),
/// or `None` past the bounds.
fn stored_headers_fit(
    ingest: &IngestSpec,
    head: &RequestHead,
    guard: Option<&TriggerGuard>,
) -> Option<Stored> {
    let key_field = usize::from(guard.is_some_and(|g| g.dedupe.is_some()));
    let (mut n, mut too_long, mut positions) = (key_field, false, Some(0u64));
    for (i, (_, v)) in to_store(ingest, head) {
        n += 1;
        too_long |= v.len() > wal::MAX_HEADER_VALUE_BYTES;
        positions = positions.and_then(|p| Some(p | 1u64.checked_shl(i as u32)?));
    }
    (n <= wal::MAX_HEADERS && !too_long).then_some(Stored { positions })
}

/// The headers to store (after [`stored_headers_fit`] found them), in order: by the positions
/// it found, or by name when it found none.
fn stored_headers<'h>(
    ingest: &'h IngestSpec,
    head: &'h RequestHead,
    s: Stored,
) -> impl Iterator<Item = (&'h str, &'h [u8])> + 'h {
    let by_position = s.positions.map(|bits| {
        (head.headers().enumerate())
            .filter(move |(i, _)| *i < 64 && bits & (1 << i) != 0)
            .map(|(_, h)| h)
    });
    let by_name = (s.positions.is_none()).then(|| to_store(ingest, head).map(|(_, h)| h));
    (by_position.into_iter().flatten()).chain(by_name.into_iter().flatten())
}

/// Step 4: `Ok(None)` no dedupe; `Ok(Some((claim, key)))` the key is claimed (stored with the
/// event); `Err(response)` a duplicate (`200 duplicate_dropped`) or a key in flight
/// (`503 duplicate_in_flight`): nothing is written.
fn claim_dedupe(
    guards: &Guards,
    g: &TriggerGuard,
    trigger_id: &str,
    head: &RequestHead,
    body: &[u8],
    event_id: &str,
    now: Now,
) -> Result<Option<(ClaimToken, String)>, Response> {
    let Some(rule) = g.dedupe else {
        return Ok(None);
    };
    let key = dedupe::dedupe_key(rule.source, head, body);
    match guards.claim(g, rule, trigger_id, &key, event_id, now.unix_ms / 1000) {
        Claim::New(token) => Ok(Some((token, key))),
        Claim::Duplicate(original) => Err(Response::json(
            200,
            dedupe::duplicate_body(trigger_id, &original),
        )),
        Claim::InFlight => Err(Response {
            retry_after: Some(1),
            ..Response::json(503, dedupe::IN_FLIGHT_BODY)
        }),
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests;
