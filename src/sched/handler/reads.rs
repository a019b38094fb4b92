//! Answers that come later: operator reads handed to the reader threads (`sched::readers`; the
//! core queues a `Slot::Deferred` with the read's ticket, [`Core::defer_read`], and fills it
//! when the answer is back, [`Core::answer_reads`], so a log scan never runs on a core's loop),
//! and `/metrics` scrapes, answered before the loop sleeps with one rendering for every scrape
//! read in the turn ([`Core::answer_scrapes`], [`crate::metrics::shared`]), queued on each
//! connection by reference.

use super::lent::Core;
use crate::ingest::pending::PendingIngest;
use crate::ingest::router::OpsEndpoint;
use crate::metrics::Route;
use crate::net::conn::Slot;
use crate::net::http;
use crate::net::server::{Answers, Ctx};
use crate::sched::readers::{ReadOutput, ReadRequest, ReadWork};

/// The refusal when every read slot is taken (`sched::readers::MAX_READS`).
const BUSY: &[u8] = br#"{"status":"refused","reason":"readers_busy","retry_after":1}"#;

impl Core<'_> {
    /// `/api/v1/state`, `/ledger`, `/events…`: sent to the readers, answered in order when back;
    /// `503 readers_busy` at once when `MAX_READS` reads are outstanding.
    pub(super) fn defer_read(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        ep: OpsEndpoint,
        head: &http::RequestHead,
        keep_alive: bool,
        head_only: bool,
    ) {
        let req = ReadRequest {
            ep,
            path: head.path().to_owned(),
            query: head.query().map(str::to_owned),
            authorization: head.header("authorization").map(<[u8]>::to_vec),
        };
        self.defer(cx, ReadWork::Ops(req), Route::Ui, keep_alive, head_only);
    }

    /// Sends `work` to the readers with a deferred slot on the connection (`route`: the
    /// refusal's, counted when `MAX_READS` are outstanding).
    pub(super) fn defer(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        work: ReadWork,
        route: Route,
        keep_alive: bool,
        head_only: bool,
    ) {
        if cx.conn().is_none() {
            return;
        }
        let Some(ticket) = self.reads.submit(self.shared.reads(), cx.idx, work) else {
            let headers = [
                ("Content-Type", "application/json"),
                ("Cache-Control", "no-store"),
                ("Retry-After", "1"),
            ];
            cx.respond(route, 503, &headers, BUSY, keep_alive, head_only);
            return;
        };
        let Some(conn) = cx.conn() else {
            return;
        };
        conn.push(Slot::Deferred {
            keep_alive,
            head_only,
            charge: 0,
            ticket,
        });
        if !keep_alive {
            conn.closing = true;
        }
    }
}

/// A deferred slot's response, before framing.
pub(super) struct Reply {
    pub(super) route: Route,
    pub(super) status: u16,
    /// Static values but a bulk replay's `Retry-After`: no allocation per answer.
    pub(super) headers: Vec<(&'static str, std::borrow::Cow<'static, str>)>,
    pub(super) body: Vec<u8>,
}

impl Core<'_> {
    /// `GET /metrics`: a placeholder answered by [`Core::answer_scrapes`].
    pub(super) fn defer_scrape(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        keep_alive: bool,
        head_only: bool,
    ) {
        let charge = self.shared.scrapes().last_len();
        let idx = cx.idx;
        let Some(conn) = cx.conn() else {
            return;
        };
        conn.push(Slot::Deferred {
            keep_alive,
            head_only,
            charge,
            ticket: 0,
        });
        if !keep_alive {
            conn.closing = true;
        }
        self.scrapes.read_at = self.scrapes.read_at.max(conn.read_at);
        if self.scrapes.waiting.last() != Some(&idx) {
            self.scrapes.waiting.push(idx);
        }
    }
}

impl Core<'_> {
    /// Fills the deferred answers of the reads answered since the last call (a bulk replay's
    /// pick is appended first, `replay.rs`). An answer whose connection closed meanwhile is
    /// dropped (its slot is gone); the pick is appended all the same.
    pub fn answer_reads(&mut self, answers: &mut Answers<'_, PendingIngest>) {
        while let Some(reply) = self.reads.take(self.shared.reads()) {
            let r = match reply.output {
                ReadOutput::Answer(a) => Reply {
                    route: Route::Ui,
                    status: a.status,
                    headers: (a.headers().into_iter())
                        .map(|(k, v)| (k, v.into()))
                        .collect(),
                    body: a.body,
                },
                ReadOutput::Replay(pick) => self.stage_pick(pick),
            };
            let h: Vec<(&str, &str)> = r.headers.iter().map(|(k, v)| (*k, v.as_ref())).collect();
            answers.fill(reply.conn, reply.ticket, r.route, r.status, &h, &r.body);
        }
    }

    /// Answers every deferred scrape with one shared rendering (made at `now`, after every
    /// waiting scrape was read). Scrapes read meanwhile wait for the next call.
    pub fn answer_scrapes(&mut self, answers: &mut Answers<'_, PendingIngest>, now: u64) {
        if self.scrapes.waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.scrapes.waiting);
        let not_before = std::mem::take(&mut self.scrapes.read_at);
        let shared = self.shared;
        let body = shared.scrapes().get(not_before, now, || {
            crate::sched::exposition::render_metrics(shared)
        });
        let text = "text/plain; version=0.0.4";
        for idx in waiting {
            answers.fill_shared(idx, 0, Route::Metrics, text, &body);
        }
    }
}
