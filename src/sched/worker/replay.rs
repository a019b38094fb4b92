//! Online replay of dead letters through the durable path: one entry (`POST
//! /admin/dlq/{id}/replay`, at the end of this file) or in bulk, below.
//!
//! `POST /admin/dlq/replay?reason=R&trigger=ID&since=T`: bulk replay, paced by the backlog bound
//! (filters: [`crate::dispatch::dlq::bulk`]).
//!
//! One call lists and reads on a reader thread and appends on the core's loop:
//!
//! 1. on a reader (`sched::readers`, [`ReadWork::Replay`]; `503 readers_busy` when its
//!    `MAX_READS` are taken): list the DLQ (one read of every entry: the cost grows with the
//!    DLQ, which `max_dlq_entries` bounds) and select the matching entries, oldest first,
//!    skipping those a previous call — on any core — already handed to the WAL and whose
//!    append has not completed (the store's [`ReplayClaims`](crate::dispatch::dlq::claims),
//!    shared by every core: an entry is claimed before it is read and released only after it
//!    left the DLQ or its append failed, so no entry reaches the WAL twice); claim and read at
//!    most `ONLINE_CHUNK` of them (`ONLINE_PICK_BYTES` of bodies): `dispatch::dlq::bulk::pick`;
//! 2. back on the core's loop ([`Core::stage_pick`], when the core takes its read replies), while
//!    the backlog bound (`max_pending_events`/`bytes`, never the absorb budget), this core's
//!    appends in flight and its commit helper's room allow: a new event (new id, `replay_of` =
//!    the entry id) goes to the commit helper, as an ingested event would; the entries left
//!    over give their claims back;
//! 3. answer `202 {"status":"accepted","replayed":N,"remaining":M}`: `N` handed to the WAL,
//!    `M` matching entries left for a later call. Nothing matching: `200` with `N = M = 0`.
//!    Matching entries but no room for any: `503 queue_full` with `Retry-After` and
//!    `"remaining":M`.
//!
//! Each entry leaves the DLQ once its event is durable (the completion of its append, tracked
//! here by ticket): the removal goes with the core's next commit, as one group per commit
//! (`wal::group::Item::Release`: tombstones and one directory `fsync` on the commit helper,
//! before that commit's appends, so the replayed event's `Done` is never durable before its
//! entry's removal — except on the own log's ring, `wal.commit = "ring"`, which commits apart
//! from the helper). An append that fails leaves the entry in the DLQ for a later call and
//! gives its backlog share back. Bound: tracked replays ≤ this core's appends in flight
//! (`max_outstanding`). A crash between a replay's commit and its removal's (one commit of the
//! helper's) leaves entries whose replays are pending in the log: the next start removes them
//! before serving (`sched::runtime::release_replayed`), so none is replayed twice; on the ring
//! path up to one commit batch's (≤ `wal.max_batch`) may be.

use super::reads::Reply;
use super::serve::Core;
use crate::dispatch::dlq::bulk::{Pick, ReplayFilter};
use crate::dispatch::dlq::claims::{ClaimRefused, ReplayClaim};
use crate::dispatch::dlq::entry::DlqEntry;
use crate::dispatch::dlq::DlqError;
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::Now;
use crate::ingest::respond::json_str;
use crate::metrics::Route;
use crate::net::http;
use crate::net::server::Ctx;
use crate::sched::readers::ReadWork;
use crate::sync::clock::unix_micros;
use crate::wal::{self, AppendOutcome, EventRecord};

impl Core<'_> {
    /// The route (after the admin token): the filter checked here, the DLQ listed and the
    /// entries read on a reader (`sched::readers`), the pick appended when it is back
    /// ([`Core::stage_pick`]).
    pub(super) fn bulk_replay(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        head: &http::RequestHead,
        keep_alive: bool,
    ) {
        let filter = match ReplayFilter::from_query(head.query()) {
            Ok(f) => f,
            Err(e) => {
                let mut body = String::from(r#"{"status":"error","reason":"bad_query","detail":"#);
                json_str(&mut body, &e);
                body.push('}');
                return self.answer_replay(cx, 400, None, &body, keep_alive);
            }
        };
        self.defer(
            cx,
            ReadWork::Replay(filter),
            Route::Admin,
            keep_alive,
            false,
        );
    }

    /// Hands what a reader picked to the WAL, oldest first, while there is room; the entries
    /// left over give their claims back. Returns the answer (module docs, step 3).
    pub(super) fn stage_pick(&mut self, pick: Result<Pick, String>) -> Reply {
        let json = |status, retry_after: Option<String>, body: String| {
            let mut headers = vec![("Content-Type", "application/json".into())];
            headers.extend(retry_after.map(|ra| ("Retry-After", ra.into())));
            Reply {
                route: Route::Admin,
                status,
                headers,
                body: body.into_bytes(),
            }
        };
        let pick = match pick {
            Ok(p) => p,
            Err(e) => {
                eprintln!("sluice: bulk replay cannot list the DLQ: {e}");
                let body = r#"{"status":"error","reason":"dlq_unreadable"}"#.to_owned();
                return json(500, None, body);
            }
        };
        let mut room = !pick.claims_full;
        let (mut replayed, skipped) = (0usize, pick.skipped);
        for (claim, entry) in pick.entries {
            if !self.replay_one(claim, entry) {
                room = false;
                break; // the rest of the pick drops its claims
            }
            replayed += 1;
        }
        let remaining = pick.matching - replayed - skipped;
        let body =
            format!(r#"{{"status":"accepted","replayed":{replayed},"remaining":{remaining}}}"#);
        if replayed > 0 {
            json(202, None, body)
        } else if room {
            json(200, None, body)
        } else {
            let backlog = &self.shared.ingest().backlog;
            let ra = backlog.retry_after_secs().clamp(1, 60).to_string();
            let body = format!(
                r#"{{"status":"refused","reason":"queue_full","replayed":0,"remaining":{remaining}}}"#
            );
            json(503, Some(ra), body)
        }
    }

    /// Hands the claimed `entry` to the WAL as a new event if there is room (`false`: none;
    /// the claim drops).
    fn replay_one(&mut self, claim: ReplayClaim, entry: DlqEntry) -> bool {
        let received_at_us = unix_micros();
        let received_at_ms = received_at_us / 1000;
        let event = EventRecord {
            event_id: self.front.ids().next_us(received_at_us),
            received_at_ms,
            replay_of: Some(entry.id.clone()),
            ..entry.event
        };
        let cost = wal::event_cost(&event);
        let trigger = event.trigger_id.clone();
        let record = wal::Record::Event(event);
        let weight = record.batch_weight();
        if self.front.at_bound()
            || !self.committer.staging().has_room(weight)
            || self
                .shared
                .ingest()
                .backlog
                .reserve_for(&trigger, cost)
                .is_err()
        {
            return false;
        }
        let ticket = self.replays.next_ticket();
        let (front, mut stage) = self.replay_parts();
        // Room was checked above, before the reservation.
        let staged = front.stage_direct(&mut stage, ticket, record);
        debug_assert!(staged);
        self.replays
            .by_ticket
            .insert(ticket, (claim, trigger, cost));
        true
    }

    fn answer_replay(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        status: u16,
        retry_after: Option<&str>,
        body: &str,
        keep_alive: bool,
    ) {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(ra) = retry_after {
            headers.push(("Retry-After", ra));
        }
        cx.respond(
            Route::Admin,
            status,
            &headers,
            body.as_bytes(),
            keep_alive,
            false,
        );
    }
}

impl Core<'_> {
    /// The append of a bulk replay completed: durable → the entry leaves the DLQ with the next
    /// commit (`links.rs`), its claim held until then; failed → the backlog share goes back,
    /// the entry stays and the claim drops.
    pub(super) fn replay_done(&mut self, ticket: u64, outcome: AppendOutcome) {
        self.front.direct_done();
        let Some((claim, trigger, cost)) = self.replays.by_ticket.remove(&ticket) else {
            return;
        };
        let id = claim.id();
        if !matches!(outcome, AppendOutcome::Durable { .. }) {
            self.shared.ingest().backlog.release_for(&trigger, cost);
            eprintln!(
                "sluice: bulk replay of {id} failed to append ({outcome:?}); it stays in the DLQ"
            );
            return;
        }
        self.replays.durable.push(claim);
    }
}

/// One entry: `POST /admin/dlq/{id}/replay`.
impl Core<'_> {
    /// `POST /admin/dlq/{id}/replay`: a new event (new id, `replay_of = id`) with the
    /// dead-lettered event's trigger, source, headers and body goes through the normal durable
    /// path; once it is durable the DLQ entry is removed and the answer is `202`. The entry is
    /// claimed first in the store's set shared by every core (`dispatch::dlq::claims`): while
    /// a replay (bulk or single, any core) has it on its way, another is `409 in_progress`.
    pub(super) fn replay_dead_letter(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        id: &str,
        keep_alive: bool,
    ) {
        let claim = match self.shared.dispatch().dlq.replays().claim(id) {
            Ok(c) => c,
            // Its removal may be durable already and the claim not yet dropped (it drops when
            // the removal's commit is back on this loop): an entry gone is `404`.
            Err(ClaimRefused::InFlight)
                if matches!(
                    self.shared.dispatch().dlq.get(id),
                    Err(DlqError::NotFound { .. })
                ) =>
            {
                return self.replay_refused(cx, 404, "not_found", keep_alive)
            }
            Err(ClaimRefused::InFlight) => {
                return self.replay_refused(cx, 409, "in_progress", keep_alive)
            }
            Err(ClaimRefused::Full) => {
                return self.replay_refused(cx, 503, "queue_full", keep_alive)
            }
        };
        let entry = match self.shared.dispatch().dlq.get(id) {
            Ok(e) => e,
            Err(e) => {
                let (status, reason) = match e {
                    DlqError::NotFound { .. } => (404, "not_found"),
                    DlqError::InvalidId { .. } => (400, "invalid_id"),
                    _ => (500, "dlq_unreadable"),
                };
                return self.replay_refused(cx, status, reason, keep_alive);
            }
        };
        let now = Now::wall(self.shared.clock.now_nanos());
        let idx = cx.idx;
        let (front, conns, mut stage, env) = self.ingest_parts(cx, Some(claim));
        let decision = front
            .pipeline(env.node, env.metrics)
            .replay(entry.event, entry.id, now);
        front.apply(conns, idx, decision, keep_alive, now.mono, &mut stage, &env);
    }

    /// A single replay's error answer (`503` with `Retry-After: 1`).
    fn replay_refused(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        status: u16,
        reason: &str,
        keep_alive: bool,
    ) {
        let body = format!("{{\"status\":\"error\",\"reason\":\"{reason}\"}}");
        let mut h = vec![("Content-Type", "application/json")];
        if status == 503 {
            h.push(("Retry-After", "1"));
        }
        cx.respond(Route::Admin, status, &h, body.as_bytes(), keep_alive, false);
    }
}
