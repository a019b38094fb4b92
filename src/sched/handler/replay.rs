//! The core's side of online DLQ replay and discard (`dispatch::dlq::online` decides them and
//! keeps their books): the routes' glue, and [`CoreReplayPort`], what the core lends them — its
//! event ids, its in-flight bound (the front's), its commit batch and the backlog.
//!
//! A bulk replay (`POST /admin/dlq/replay?…`) lists and reads on a reader thread
//! (`sched::readers`, `ReadWork::Replay`; `503 readers_busy` when its `MAX_READS` are taken) and
//! appends when the pick is back ([`Core::stage_pick`]). A single replay (`POST
//! /admin/dlq/{id}/replay`) claims and reads its entry here and goes through the front as an
//! ingest request, its claim held by its ticket (`stage.rs`, `ReplayHolds`).

use super::lent::Core;
use super::reads::Reply;
use crate::dispatch::dlq::bulk::{Pick, ReplayFilter};
use crate::dispatch::dlq::online::{self, OnlineReplays, ReplayPort};
use crate::ingest::backlog::Backlog;
use crate::ingest::front::Front;
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::Now;
use crate::ingest::respond::json_str;
use crate::ingest::stage::{CommitStage, Holds};
use crate::metrics::Route;
use crate::net::http;
use crate::net::server::Ctx;
use crate::sched::commit::{Committer, Owner};
use crate::sched::readers::ReadWork;
use crate::sync::clock::unix_micros;
use crate::wal::Record;

/// What the core lends the online replays for one call (`dispatch::dlq::online::ReplayPort`).
#[derive(Debug)]
pub struct CoreReplayPort<'a> {
    front: &'a mut Front,
    committer: &'a mut Committer,
    backlog: &'a Backlog,
}

/// A bulk replay's appends hold nothing of the core's (their books are the replays').
struct NoHolds;

impl Holds for NoHolds {
    fn admitted(&mut self, _ticket: u64) -> bool {
        false
    }
    fn settled(&mut self, _ticket: u64, _durable: bool) {}
}

impl ReplayPort for CoreReplayPort<'_> {
    fn new_id(&mut self, received_at_us: u64) -> String {
        self.front.ids().next_us(received_at_us)
    }

    fn stage_event(&mut self, ticket: u64, record: Record, trigger: &str, cost: u64) -> bool {
        // The bound and the batch first: a backlog reservation is only taken when it is used.
        if self.front.at_bound() || !self.committer.staged().has_room(record.batch_weight()) {
            return false;
        }
        if self.backlog.reserve_for(trigger, cost).is_err() {
            return false;
        }
        let mut stage = CommitStage {
            batch: self.committer.staging(),
            owner: Owner::Replay,
            holds: NoHolds,
        };
        // Room was checked above, before the reservation.
        let staged = self.front.stage_direct(&mut stage, ticket, record);
        debug_assert!(staged);
        staged
    }

    fn stage_release(&mut self, ticket: u64, id: String) {
        (self.committer.staging().port(Owner::Replay)).release(ticket, id);
    }

    fn event_done(&mut self, give_back: Option<(&str, u64)>) {
        self.front.direct_done();
        if let Some((trigger, cost)) = give_back {
            self.backlog.release_for(trigger, cost);
        }
    }
}

impl Core<'_> {
    /// The online replays with what the core lends them, side by side.
    pub fn replays(&mut self) -> (&mut OnlineReplays, CoreReplayPort<'_>) {
        let port = CoreReplayPort {
            front: &mut *self.front,
            committer: &mut *self.committer,
            backlog: &self.shared.ingest().backlog,
        };
        (&mut *self.replays, port)
    }

    /// `POST /admin/dlq/replay?…` (after the admin token): the filter checked here, the DLQ
    /// listed and the entries read on a reader, the pick appended when it is back
    /// ([`Core::stage_pick`]).
    pub(super) fn bulk_replay(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        head: &http::RequestHead,
        keep_alive: bool,
    ) {
        match ReplayFilter::from_query(head.query()) {
            Ok(filter) => {
                let work = ReadWork::Replay(filter);
                self.defer(cx, work, Route::Admin, keep_alive, false);
            }
            Err(e) => {
                let mut body = String::from(r#"{"status":"error","reason":"bad_query","detail":"#);
                json_str(&mut body, &e);
                body.push('}');
                let reply = online::Reply {
                    status: 400,
                    body,
                    backlog_full: false,
                };
                self.answer_admin(cx, reply, keep_alive);
            }
        }
    }

    /// A bulk replay's pick is back: appended while there is room (`dispatch::dlq::online`).
    pub(super) fn stage_pick(&mut self, pick: Result<Pick, String>) -> Reply {
        let (replays, mut port) = self.replays();
        let r = replays.stage_pick(pick, unix_micros(), &mut port);
        let mut headers = vec![("Content-Type", "application/json".into())];
        if r.backlog_full {
            let ra = port.backlog.retry_after_secs().clamp(1, 60);
            headers.push(("Retry-After", ra.to_string().into()));
        }
        Reply {
            route: Route::Admin,
            status: r.status,
            headers,
            body: r.body.into_bytes(),
        }
    }

    /// `POST /admin/dlq/{id}/replay`: the entry claimed and read (`OnlineReplays::claim_one`),
    /// then a new event (new id, `replay_of = id`) with its trigger, source, headers and body
    /// through ingest's durable path; `202` once durable, its entry removed after.
    pub(super) fn replay_dead_letter(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        id: &str,
        keep_alive: bool,
    ) {
        let (claim, entry) = match OnlineReplays::claim_one(&self.shared.dispatch().dlq, id) {
            Ok(c) => c,
            Err(reply) => return self.answer_admin(cx, reply, keep_alive),
        };
        let now = Now::wall(self.shared.clock.now_nanos());
        let idx = cx.idx;
        let (front, conns, mut stage, env) = self.ingest_parts(cx, Some(claim));
        let decision = front
            .pipeline(env.node, env.metrics)
            .replay(entry.event, entry.id, now);
        front.apply(conns, idx, decision, keep_alive, now.mono, &mut stage, &env);
    }

    /// An admin route's JSON answer (`Retry-After: 1` with a `503`).
    pub(super) fn answer_admin(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        reply: online::Reply,
        keep_alive: bool,
    ) {
        let mut h = vec![("Content-Type", "application/json")];
        if reply.status == 503 {
            h.push(("Retry-After", "1"));
        }
        let body = reply.body.as_bytes();
        cx.respond(Route::Admin, reply.status, &h, body, keep_alive, false);
    }
}
