//! Online replay and discard of dead letters, on one core: the admin routes `POST
//! /admin/dlq/{id}/replay`, `POST /admin/dlq/replay?…` (bulk) and `POST /admin/dlq/{id}/discard`
//! decided here, and the books of what each has on its way ([`OnlineReplays`]). The core lends
//! what it owns through [`ReplayPort`]: its event ids, its in-flight bound, its commit batch and
//! the backlog.
//!
//! - **Single replay**: the entry is claimed ([`OnlineReplays::claim_one`]) and read; its event
//!   goes through ingest's durable path as a new event (new id, `replay_of` = the entry id), the
//!   claim held by the append's ingest ticket ([`OnlineReplays::hold`]) until it is settled
//!   ([`OnlineReplays::settled_single`]); the answer is ingest's (`202` once durable).
//! - **Bulk replay**: the listing and the entries' reads run on a reader thread
//!   ([`crate::dispatch::dlq::bulk::pick`]); back on the core, [`OnlineReplays::stage_pick`]
//!   hands the picked entries to the WAL oldest first while the core's bound, its batch and the
//!   backlog have room, and gives the rest of the claims back. Answer: `202
//!   {"status":"accepted","replayed":N,"remaining":M}`; nothing matching `200` with `N = M = 0`;
//!   matching entries but no room for any `503 queue_full` (the core adds the backlog's
//!   `Retry-After`).
//! - **Discard** ([`OnlineReplays::discard`]): claimed like a replay, its removal staged at once;
//!   the answer is `202` before the removal is durable (a crash before that commit leaves the
//!   entry in the DLQ).
//!
//! Each replayed entry leaves the DLQ once its event is durable: the removal goes with the core's
//! next commit, one group per commit (`wal::group::Item::Release`: tombstones and one directory
//! `fsync` on the commit helper, before that commit's appends, so the replayed event's `Done` is
//! never durable before its entry's removal — except on the own log's ring, `wal.commit =
//! "ring"`, which commits apart from the helper). Each claim drops once its removal is back. An
//! append that fails leaves the entry in the DLQ for a later call and gives its backlog share
//! back. A crash between a replay's commit and its removal's leaves entries whose replays are
//! pending in the log: the next start removes them before serving
//! (`sched::runtime::release_replayed`), so none is replayed twice; on the ring path up to one
//! commit batch's (≤ `wal.max_batch`) may be.
//!
//! Bounds: every book entry holds a claim, and the claims are bounded by the store's set
//! (`dispatch::dlq::claims`, `503 queue_full` past it); the appends in flight by the core's
//! bound (`max_outstanding`, [`ReplayPort::stage_event`]).
#![forbid(unsafe_code)]

use std::collections::HashMap;

use crate::dispatch::dlq::bulk::Pick;
use crate::dispatch::dlq::claims::{ClaimRefused, ReplayClaim};
use crate::dispatch::dlq::{valid_id, DlqEntry, DlqError, DlqStore};
use crate::wal::group::{Batch, Owner};
use crate::wal::{self, AppendOutcome, EventRecord, Record};

/// An admin route's answer: its status and JSON body. `backlog_full`: the `503` of a bulk replay
/// that found no room, to which the core adds the backlog's `Retry-After`; any other `503`
/// carries `Retry-After: 1`.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub backlog_full: bool,
}

impl Reply {
    fn new(status: u16, body: String) -> Reply {
        Reply {
            status,
            body,
            backlog_full: false,
        }
    }

    fn error(status: u16, reason: &str) -> Reply {
        Reply::new(
            status,
            format!("{{\"status\":\"error\",\"reason\":\"{reason}\"}}"),
        )
    }
}

/// What a core lends the online replays for one call: its ids, its bound, its commit batch and
/// the backlog. Everything it stages is `Owner::Replay`'s.
pub trait ReplayPort {
    /// A new event id, for an event received at `received_at_us` (Unix micros).
    fn new_id(&mut self, received_at_us: u64) -> String;
    /// Stages `record` (a replayed event of `trigger`, backlog cost `cost`) under `ticket` if
    /// the core's appends in flight, its batch and the backlog have room; false (nothing held)
    /// otherwise.
    fn stage_event(&mut self, ticket: u64, record: Record, trigger: &str, cost: u64) -> bool;
    /// Stages the removal of dead letter `id` under `ticket`.
    fn stage_release(&mut self, ticket: u64, id: String);
    /// An event staged by [`ReplayPort::stage_event`] is back from its commit: its place in the
    /// core's bound is free; `give_back`: it failed, and its backlog share goes back.
    fn event_done(&mut self, give_back: Option<(&str, u64)>);
}

/// One core's replays and discards on their way, by ticket (module docs).
#[derive(Debug, Default)]
pub struct OnlineReplays {
    /// The last ticket of this core's `Owner::Replay` items (appends and removals).
    seq: u64,
    /// A bulk replay's append → (claim, trigger id, backlog cost).
    bulk: HashMap<u64, (ReplayClaim, String, u64)>,
    /// A single replay's ingest ticket → its claim.
    single: HashMap<u64, ReplayClaim>,
    /// Replays made durable in the batch being settled: their entries leave the DLQ next.
    durable: Vec<ReplayClaim>,
    /// A removal with the commit → the claim that drops when it is back.
    releasing: HashMap<u64, ReplayClaim>,
}

impl OnlineReplays {
    fn next_ticket(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// True while nothing is on its way (the drain may end).
    pub fn is_idle(&self) -> bool {
        self.bulk.is_empty()
            && self.single.is_empty()
            && self.durable.is_empty()
            && self.releasing.is_empty()
    }

    /// `POST /admin/dlq/{id}/replay`, before ingest: the entry claimed in the store's set shared
    /// by every core (another replay or discard of it on its way: `409 in_progress`) and read.
    /// `Err`: the answer (`404` gone, `400` a malformed id, `503` the claim set full, `500`
    /// unreadable).
    pub fn claim_one(dlq: &DlqStore, id: &str) -> Result<(ReplayClaim, DlqEntry), Reply> {
        let claim = match dlq.replays().claim(id) {
            Ok(c) => c,
            // Its removal may be durable already and the claim not yet dropped (it drops when
            // the removal's commit is back on its core): an entry gone is `404`.
            Err(ClaimRefused::InFlight)
                if matches!(dlq.get(id), Err(DlqError::NotFound { .. })) =>
            {
                return Err(Reply::error(404, "not_found"))
            }
            Err(ClaimRefused::InFlight) => return Err(Reply::error(409, "in_progress")),
            Err(ClaimRefused::Full) => return Err(Reply::error(503, "queue_full")),
        };
        match dlq.get(id) {
            Ok(entry) => Ok((claim, entry)),
            Err(e) => Err(match e {
                DlqError::NotFound { .. } => Reply::error(404, "not_found"),
                DlqError::InvalidId { .. } => Reply::error(400, "invalid_id"),
                _ => Reply::error(500, "dlq_unreadable"),
            }),
        }
    }

    /// A single replay's append got ingest ticket `ticket`: its claim is held by it.
    pub fn hold(&mut self, ticket: u64, claim: ReplayClaim) {
        self.single.insert(ticket, claim);
    }

    /// The append of ingest ticket `ticket` is settled: a single replay's, `durable` → its
    /// entry leaves the DLQ with the next commit; failed → its claim drops. Any other ticket:
    /// nothing (no hash while no single replay waits).
    pub fn settled_single(&mut self, ticket: u64, durable: bool) {
        if self.single.is_empty() {
            return;
        }
        if let Some(claim) = self.single.remove(&ticket) {
            if durable {
                self.durable.push(claim);
            }
        }
    }

    /// `POST /admin/dlq/{id}/discard`: the entry leaves the DLQ undelivered (an operator's
    /// skip; an `ordering` key stopped on it moves on, `dispatch::flow::ordering`). Claimed like
    /// a replay, present in the index (no file read), its removal staged; `202` at once. `404`
    /// absent, `400` a malformed id, `409` on its way, `503` the claim set full.
    pub fn discard(&mut self, dlq: &DlqStore, id: &str, port: &mut impl ReplayPort) -> Reply {
        if !valid_id(id) {
            return Reply::error(400, "invalid_id");
        }
        let claim = match dlq.replays().claim(id) {
            Ok(c) => c,
            Err(ClaimRefused::InFlight) => return Reply::error(409, "in_progress"),
            Err(ClaimRefused::Full) => return Reply::error(503, "queue_full"),
        };
        // Claimed first, then looked up: present and claimed, it stays until its removal.
        if !dlq.is_live(id) {
            return Reply::error(404, "not_found");
        }
        let ticket = self.next_ticket();
        port.stage_release(ticket, id.to_owned());
        self.releasing.insert(ticket, claim);
        // A valid id is 26 characters [0-9A-Z]: nothing to escape.
        Reply::new(
            202,
            format!("{{\"status\":\"accepted\",\"discarding\":\"{id}\"}}"),
        )
    }

    /// A bulk replay's pick is back from the reader: its entries handed to the WAL oldest first
    /// while there is room (the first refusal stops it; the rest of the pick drops its claims),
    /// as new events received now (`now_us`). Returns the answer (module docs).
    pub fn stage_pick(
        &mut self,
        pick: Result<Pick, String>,
        now_us: u64,
        port: &mut impl ReplayPort,
    ) -> Reply {
        let pick = match pick {
            Ok(p) => p,
            Err(e) => {
                eprintln!("sluice: bulk replay cannot list the DLQ: {e}");
                return Reply::error(500, "dlq_unreadable");
            }
        };
        let mut room = !pick.claims_full;
        let (mut replayed, skipped) = (0usize, pick.skipped);
        for (claim, entry) in pick.entries {
            if !self.replay_one(claim, entry, now_us, port) {
                room = false;
                break;
            }
            replayed += 1;
        }
        let remaining = pick.matching - replayed - skipped;
        let body =
            format!(r#"{{"status":"accepted","replayed":{replayed},"remaining":{remaining}}}"#);
        if replayed > 0 {
            Reply::new(202, body)
        } else if room {
            Reply::new(200, body)
        } else {
            let body = format!(
                r#"{{"status":"refused","reason":"queue_full","replayed":0,"remaining":{remaining}}}"#
            );
            Reply {
                status: 503,
                body,
                backlog_full: true,
            }
        }
    }

    /// Hands the claimed `entry` to the WAL as a new event if there is room (`false`: none; the
    /// claim drops).
    fn replay_one(
        &mut self,
        claim: ReplayClaim,
        entry: DlqEntry,
        now_us: u64,
        port: &mut impl ReplayPort,
    ) -> bool {
        let event = EventRecord {
            event_id: port.new_id(now_us),
            received_at_ms: now_us / 1000,
            replay_of: Some(entry.id.clone()),
            ..entry.event
        };
        let cost = wal::event_cost(&event);
        let trigger = event.trigger_id.clone();
        let ticket = self.next_ticket();
        if !port.stage_event(ticket, Record::Event(event), &trigger, cost) {
            return false;
        }
        self.bulk.insert(ticket, (claim, trigger, cost));
        true
    }

    /// The replays' part of a batch back from its commit (after ingest settled its own, single
    /// replays included): each bulk append settled (durable → its entry leaves the DLQ next;
    /// failed → its backlog share back, the entry stays, the claim drops), each removal's claim
    /// dropped, then every replay made durable has its removal staged (one group in the next
    /// commit).
    pub fn settle(&mut self, batch: &Batch<DlqEntry, DlqError>, port: &mut impl ReplayPort) {
        // Nothing on its way: the batch holds no item of `Owner::Replay` (each is booked from
        // its staging to its settling), so a commit without replays costs no scan here.
        if self.is_idle() {
            return;
        }
        for (owner, ticket, outcome) in batch.appended() {
            if owner == Owner::Replay {
                self.bulk_done(ticket, outcome, port);
            }
        }
        for (ticket, result) in batch.released_by(Owner::Replay) {
            self.released(ticket, result);
        }
        for claim in std::mem::take(&mut self.durable) {
            let ticket = self.next_ticket();
            port.stage_release(ticket, claim.id().to_owned());
            self.releasing.insert(ticket, claim);
        }
    }

    fn bulk_done(&mut self, ticket: u64, outcome: AppendOutcome, port: &mut impl ReplayPort) {
        let Some((claim, trigger, cost)) = self.bulk.remove(&ticket) else {
            port.event_done(None);
            return;
        };
        if matches!(outcome, AppendOutcome::Durable { .. }) {
            port.event_done(None);
            self.durable.push(claim);
        } else {
            port.event_done(Some((&trigger, cost)));
            eprintln!(
                "sluice: bulk replay of {} failed to append ({outcome:?}); it stays in the DLQ",
                claim.id()
            );
        }
    }

    /// A removal is back: its claim drops. A failed removal leaves the entry in the DLQ: a later
    /// replay delivers it again.
    fn released(&mut self, ticket: u64, result: &Result<(), DlqError>) {
        let Some(claim) = self.releasing.remove(&ticket) else {
            return;
        };
        match result {
            Ok(()) | Err(DlqError::NotFound { .. }) => {}
            Err(e) => eprintln!(
                "sluice: replayed {} but could not remove its DLQ entry ({e}); a later replay \
                 delivers it again",
                claim.id()
            ),
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests;
