//! Operator reads handed to the reader threads (`sched::readers`): the core queues a
//! `Slot::Deferred` with the read's ticket ([`Core::defer_read`]) and fills it when the answer
//! comes back ([`Worker::take_reads`], every turn), so a log scan never runs on this loop.

use super::serve::Core;
use super::*;
use crate::net::conn::Slot;
use crate::net::server::Ctx;
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

impl Worker {
    /// Fills the deferred answers of the reads answered since the last turn; the server writes
    /// those connections after (`Server::answer`). An answer whose connection closed meanwhile
    /// is dropped (its slot is gone); a bulk replay's pick is appended all the same.
    pub(super) fn take_reads(&mut self) {
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |serve, mut answers| {
            let core = &mut serve.0;
            while let Some(reply) = core.reads.take(core.shared.reads()) {
                let r = match reply.output {
                    ReadOutput::Answer(a) => Reply {
                        route: Route::Ui,
                        status: a.status,
                        headers: (a.headers().into_iter())
                            .map(|(k, v)| (k, v.into()))
                            .collect(),
                        body: a.body,
                    },
                    ReadOutput::Replay(pick) => core.stage_pick(pick),
                };
                let h: Vec<(&str, &str)> =
                    r.headers.iter().map(|(k, v)| (*k, v.as_ref())).collect();
                answers.fill(reply.conn, reply.ticket, r.route, r.status, &h, &r.body);
            }
        });
    }
}
