//! Operator reads handed to the reader threads (`sched::readers`): the core queues a
//! `Slot::Deferred` with the read's ticket ([`Core::defer_read`]) and fills it when the answer
//! comes back ([`Worker::take_reads`], every turn), so a log scan never runs on this loop.

use super::serve::Core;
use super::*;
use crate::net::conn::Slot;
use crate::net::server::Ctx;
use crate::sched::readers::ReadRequest;

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
        if cx.conn().is_none() {
            return;
        }
        let req = ReadRequest {
            ep,
            path: head.path().to_owned(),
            query: head.query().map(str::to_owned),
            authorization: head.header("authorization").map(<[u8]>::to_vec),
        };
        let Some(ticket) = self.reads.submit(self.shared.reads(), cx.idx, req) else {
            let headers = [
                ("Content-Type", "application/json"),
                ("Cache-Control", "no-store"),
                ("Retry-After", "1"),
            ];
            cx.respond(Route::Ui, 503, &headers, BUSY, keep_alive, head_only);
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

impl Worker {
    /// Fills the slots of the reads answered since the last turn, then writes those
    /// connections. An answer whose connection closed meanwhile is dropped (its slot is gone).
    pub(super) fn take_reads(&mut self) {
        let mut touched = Vec::new();
        while let Some(reply) = self.reads.take(self.shared.reads()) {
            let (conns, date) = self.server.parts();
            let Some(conn) = conns.get_mut(reply.conn) else {
                continue;
            };
            let found = conn.slots.iter().position(
                |s| matches!(s, Slot::Deferred { ticket, .. } if *ticket == reply.ticket),
            );
            let Some(pos) = found else {
                continue;
            };
            let Slot::Deferred {
                keep_alive,
                head_only,
                ..
            } = conn.slots[pos]
            else {
                continue;
            };
            let a = reply.answer;
            let h = a.headers();
            let bytes = conn.response_bytes(date, a.status, &h, &a.body, keep_alive, head_only);
            let close = !keep_alive;
            conn.fill_slot(pos, Slot::Ready { bytes, close });
            self.metrics.incr_http(Route::Ui, a.status);
            if touched.last() != Some(&reply.conn) {
                touched.push(reply.conn);
            }
        }
        for idx in touched {
            self.drive(idx);
        }
    }
}
